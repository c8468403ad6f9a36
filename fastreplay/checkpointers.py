"""Checkpoints: tables, items and chunks on disk (Reverb's
``reverb.checkpointers``).

A checkpoint is a directory ``<root>/<UTC timestamp>/`` holding
``manifest.json`` (format version, table configurations, rate-limiter
counters, sizes and CRC-32 of every file), ``chunks.bin`` (each chunk once)
and ``items-<i>.bin`` per table (items in insertion order, so Fifo/Lifo
order is rebuilt).  It is written under a temporary name, fsynced and renamed
into place, streaming one chunk at a time; only the newest checkpoint is
kept.  Loading verifies every file and the configuration of every table
before inserting anything: a truncated, corrupted or mismatched checkpoint
raises and loads nothing.
"""

from __future__ import annotations

import abc
import datetime
import json
import os
import shutil
import struct
import tempfile
import zlib
from collections.abc import Mapping
from typing import IO, Any

from fastreplay import _core, errors
from fastreplay.table import Table

__all__ = [
    "CheckpointerBase",
    "DefaultCheckpointer",
    "TempDirCheckpointer",
    "default_checkpointer",
]

FORMAT = "fastreplay-checkpoint"
VERSION = 1
# id key episode first last row_bytes n_rows compressed stored
_CHUNK = struct.Struct("<QQQqqqiiq")
# key priority times_sampled n_columns (0xFFFFFFFF: no data)
_ITEM = struct.Struct("<QdqI")
_COLUMN = struct.Struct("<IBI")  # spec index, squeeze, n_slices
_SLICE = struct.Struct("<Qii")  # chunk id, offset, length
_NO_DATA = 0xFFFFFFFF


def table_config(table: Table) -> dict[str, Any]:
    """What must match between a checkpointed table and the one restoring it."""
    limiter = table._rate_limiter
    return {
        "sampler": [table._sampler.kind, table._sampler.priority_exponent],
        "remover": [table._remover.kind, table._remover.priority_exponent],
        "max_size": table._max_size,
        "max_times_sampled": table._max_times_sampled,
        "rate_limiter": [limiter.samples_per_insert, limiter.min_size_to_sample,
                         limiter.min_diff, limiter.max_diff],
    }


class _Checked:
    """A binary file written with its size and CRC-32 tracked."""

    def __init__(self, path: str) -> None:
        self.f: IO[bytes] = open(path, "wb")
        self.crc = 0
        self.size = 0

    def write(self, data: bytes) -> None:
        self.f.write(data)
        self.crc = zlib.crc32(data, self.crc)
        self.size += len(data)

    def close(self) -> dict[str, int]:
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        return {"bytes": self.size, "crc32": self.crc}


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointerBase(abc.ABC):
    """Saves and restores the tables of a Server."""

    @abc.abstractmethod
    def save(self, tables: Mapping[str, Table], store: _core.ChunkStore) -> str:
        """Write every table; returns the checkpoint's path."""

    @abc.abstractmethod
    def restore(self, tables: Mapping[str, Table], store: _core.ChunkStore) -> bool:
        """Load the latest checkpoint into empty tables; False if none."""


class DefaultCheckpointer(CheckpointerBase):
    """Checkpoints under ``path`` (``path/group`` with a group).

    Parameters
    ----------
    path : str
        Root directory; created when missing.
    group : str
        Optional subdirectory, so several servers can share a root.
    fallback_checkpoint_path : str, optional
        A checkpoint directory restored when the root holds none.
    """

    def __init__(self, path: str, group: str = "",
                 fallback_checkpoint_path: str | None = None) -> None:
        self._root = os.path.join(path, group) if group else path
        self._fallback = fallback_checkpoint_path

    @property
    def root(self) -> str:
        return self._root

    def latest(self) -> str | None:
        """The newest complete checkpoint under the root, or None."""
        if not os.path.isdir(self._root):
            return None
        done = sorted(d for d in os.listdir(self._root)
                      if not d.startswith(".")
                      and os.path.isfile(os.path.join(self._root, d, "manifest.json")))
        return os.path.join(self._root, done[-1]) if done else None

    # ----- save -----

    def save(self, tables: Mapping[str, Table], store: _core.ChunkStore) -> str:
        os.makedirs(self._root, exist_ok=True)
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime(
            "%Y%m%dT%H%M%S%fZ")  # sortable, and valid on every filesystem
        tmp = tempfile.mkdtemp(prefix=f".incomplete-{stamp}-", dir=self._root)
        try:
            manifest = self._write(tmp, tables)
            with open(os.path.join(tmp, "manifest.json"), "w") as f:
                json.dump(manifest, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            _fsync_dir(tmp)
            final = os.path.join(self._root, stamp)
            os.rename(tmp, final)
            _fsync_dir(self._root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        for old in os.listdir(self._root):
            path = os.path.join(self._root, old)
            if old != stamp and os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
        return os.path.abspath(final)

    def _write(self, tmp: str, tables: Mapping[str, Table]) -> dict[str, Any]:
        chunks_out = _Checked(os.path.join(tmp, "chunks.bin"))
        written: set[int] = set()
        files: dict[str, dict[str, int]] = {}
        table_entries = []
        for i, (name, table) in enumerate(tables.items()):
            items, chunks = _core.export_items(table._core)
            for cid, handle in chunks.items():
                if cid in written:
                    continue
                m = handle.meta
                chunks_out.write(_CHUNK.pack(
                    cid, m["key"], m["episode_id"], m["first_step"], m["last_step"],
                    m["row_bytes"], m["n_rows"], int(m["compressed"]),
                    m["stored_bytes"]))
                chunks_out.write(handle.data())
                written.add(cid)
            del chunks
            fname = f"items-{i}.bin"
            specs: dict[tuple[Any, ...], int] = {}
            out = _Checked(os.path.join(tmp, fname))
            for key, priority, times_sampled, columns in items:
                if columns is None:
                    out.write(_ITEM.pack(key, priority, times_sampled, _NO_DATA))
                    continue
                out.write(_ITEM.pack(key, priority, times_sampled, len(columns)))
                for spec, squeeze, slices in columns:
                    index = specs.setdefault(spec, len(specs))
                    out.write(_COLUMN.pack(index, squeeze, len(slices)))
                    for cid, offset, length in slices:
                        out.write(_SLICE.pack(cid, offset, length))
            files[fname] = out.close()
            stats = table._core.stats()
            table_entries.append({
                "name": name, "items_file": fname, "num_items": len(items),
                "config": table_config(table),
                "counters": [stats["rl_inserts"], stats["rl_samples"],
                             stats["rl_deletes"]],
                "stats": stats,
                "specs": [[k, size, list(shape)] for (k, size, shape) in specs],
            })
        files["chunks.bin"] = chunks_out.close()
        return {"format": FORMAT, "version": VERSION, "tables": table_entries,
                "files": files}

    # ----- restore -----

    def restore(self, tables: Mapping[str, Table], store: _core.ChunkStore) -> bool:
        """Load the newest checkpoint (or the fallback) into empty ``tables``.
        Returns False when there is none."""
        path = self.latest() or self._fallback
        if path is None:
            return False
        load(path, tables, store)
        return True


def load(path: str, tables: Mapping[str, Table], store: _core.ChunkStore) -> None:
    """Verify and load the checkpoint at ``path`` (see the module docstring)."""
    manifest = _read_manifest(path)
    for fname, expect in manifest["files"].items():
        _verify(os.path.join(path, fname), expect)
    entries = manifest["tables"]
    for entry in entries:
        table = tables.get(entry["name"])
        if table is None:
            raise ValueError(f"Checkpoint table '{entry['name']}' has no matching "
                             f"server table (server tables: {sorted(tables)})")
        want = entry["config"]
        have = json.loads(json.dumps(table_config(table)))
        if want != have:
            diffs = {k: (want[k], have.get(k)) for k in want if want[k] != have.get(k)}
            raise ValueError(
                f"Table '{entry['name']}' differs from its checkpoint "
                f"(checkpoint, server): {diffs}; configure the table as it was "
                "checkpointed")
        if len(table):
            raise ValueError(f"Table '{entry['name']}' must be empty to restore")
    chunks = _read_chunks(os.path.join(path, "chunks.bin"), store)
    plans = [(tables[e["name"]], e, _read_items(os.path.join(path, e["items_file"]),
                                                e, chunks)) for e in entries]
    try:
        for table, entry, items in plans:
            for key, priority, times_sampled, columns in items:
                _core.restore_item(table._core, key, priority, times_sampled,
                                   columns, chunks)
            inserts, samples, deletes = entry["counters"]
            _core.restore_counters(table._core, inserts, samples, deletes,
                                   entry["stats"])
    except BaseException:
        for table, _, _ in plans:
            table.reset()
        raise


def _read_manifest(path: str) -> dict[str, Any]:
    try:
        with open(os.path.join(path, "manifest.json")) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as exc:
        raise errors.DataLossError(
            f"{path} is not a readable checkpoint: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise errors.DataLossError(f"{path} is not a fastreplay checkpoint")
    if manifest.get("version") != VERSION:
        raise errors.DataLossError(
            f"{path}: checkpoint format version {manifest.get('version')} is not "
            f"supported (this fastreplay reads version {VERSION})")
    return manifest


def _verify(path: str, expect: Mapping[str, int]) -> None:
    crc, size = 0, 0
    try:
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                crc = zlib.crc32(block, crc)
                size += len(block)
    except OSError as exc:
        raise errors.DataLossError(f"checkpoint file {path}: {exc}") from exc
    if size != expect["bytes"] or crc != expect["crc32"]:
        raise errors.DataLossError(
            f"checkpoint file {path} is corrupt or truncated ({size} bytes, "
            f"crc32 {crc:#x}; expected {expect['bytes']} bytes, crc32 "
            f"{expect['crc32']:#x})")


def _read_chunks(path: str, store: _core.ChunkStore) -> dict[int, Any]:
    chunks: dict[int, Any] = {}
    with open(path, "rb") as f:
        while header := f.read(_CHUNK.size):
            if len(header) != _CHUNK.size:
                raise errors.DataLossError(f"{path}: truncated chunk header")
            cid, key, episode, first, last, row_bytes, n_rows, comp, stored = (
                _CHUNK.unpack(header))
            data = f.read(stored)
            meta = {"key": key, "episode_id": episode, "first_step": first,
                    "last_step": last, "row_bytes": row_bytes, "n_rows": n_rows,
                    "compressed": bool(comp), "stored_bytes": stored}
            chunks[cid] = _core.restore_chunk(store, meta, data)
    return chunks


def _read_items(path: str, entry: Mapping[str, Any], chunks: Mapping[int, Any]
                ) -> list[tuple[Any, ...]]:
    specs = [(k, size, tuple(shape)) for k, size, shape in entry["specs"]]
    items: list[tuple[Any, ...]] = []
    with open(path, "rb") as f:
        data = f.read()
    at = 0
    try:
        for _ in range(entry["num_items"]):
            key, priority, times, n_cols = _ITEM.unpack_from(data, at)
            at += _ITEM.size
            if n_cols == _NO_DATA:
                items.append((key, priority, times, None))
                continue
            columns = []
            for _ in range(n_cols):
                index, squeeze, n_slices = _COLUMN.unpack_from(data, at)
                at += _COLUMN.size
                slices = []
                for _ in range(n_slices):
                    cid, offset, length = _SLICE.unpack_from(data, at)
                    at += _SLICE.size
                    if cid not in chunks:
                        raise errors.DataLossError(f"{path}: unknown chunk {cid}")
                    slices.append((cid, offset, length))
                columns.append((specs[index], bool(squeeze), slices))
            items.append((key, priority, times, columns))
    except (struct.error, IndexError) as exc:
        raise errors.DataLossError(f"{path}: corrupt item records ({exc})") from exc
    if at != len(data):
        raise errors.DataLossError(
            f"{path}: {len(data) - at} unexpected trailing bytes")
    return items


class TempDirCheckpointer(DefaultCheckpointer):
    """Checkpoints in a fresh temporary directory."""

    def __init__(self) -> None:
        super().__init__(tempfile.mkdtemp(prefix="fastreplay-checkpoints-"))


def default_checkpointer() -> CheckpointerBase:
    return TempDirCheckpointer()
