"""Checkpoints: tables, items and chunks on disk (Reverb's
``reverb.checkpointers``).

A checkpoint is a directory ``<root>/<UTC timestamp>/`` holding
``manifest.json`` (table configurations, rate-limiter counters, column specs,
item structures, sizes and CRC-32 of every data file), ``manifest.crc`` (the
format name, version, size and CRC-32 of the manifest), ``chunks.bin`` (each
chunk once), ``items-<i>.bin`` per table (items in insertion order, so
Fifo/Lifo order is rebuilt) and the marker file ``FASTREPLAY_CHECKPOINT``.
It is written under ``.incomplete-<timestamp>-<random>``, fsynced and renamed
into place, streaming one chunk at a time.

Only directories this checkpointer wrote are ever deleted: a save keeps the
newest checkpoint and removes older ones whose name is a timestamp and that
hold the marker, plus the marked ``.incomplete-*`` leftovers of a killed save
(also removed before a restore).  Foreign files and directories, and
symlinks (to anything) under the root, are left alone.  Saves and restores
on one root serialize (a lock per root in this process).

Loading (``fastreplay._checkpoint_load``) verifies the manifest and every file
before inserting anything: a truncated, corrupted, forged or mismatched
checkpoint raises ``DataLossError`` (``ValueError`` for a configuration that
differs from the server's tables) and loads nothing.
"""

from __future__ import annotations

import abc
import datetime
import json
import os
import re
import shutil
import stat
import tempfile
import threading
import zlib
from collections.abc import Callable, Mapping
from typing import IO, Any

from fastreplay import _core, _structures
from fastreplay._checkpoint_load import (
    CHUNK,
    COLUMN,
    FORMAT,
    ITEM,
    MANIFEST,
    MANIFEST_CRC,
    MARKER,
    MARKER_TEXT,
    NO_DATA,
    SLICE,
    VERSION,
    load,
    table_config,
)
from fastreplay.table import Table

__all__ = [
    "CheckpointerBase",
    "DefaultCheckpointer",
    "TempDirCheckpointer",
    "default_checkpointer",
    "load",
    "table_config",
    "write_checkpoint",
]

_STAMP = re.compile(r"[0-9]{8}T[0-9]{12}Z")
_INCOMPLETE = re.compile(r"\.incomplete-[0-9]{8}T[0-9]{12}Z-[A-Za-z0-9_]{1,32}")

_locks_guard = threading.Lock()
_root_locks: dict[str, threading.RLock] = {}


def _root_lock(root: str) -> threading.RLock:
    """One lock per checkpoint root in this process."""
    key = os.path.realpath(root)
    with _locks_guard:
        return _root_locks.setdefault(key, threading.RLock())


class _Checked:
    """A binary file written with its size and CRC-32 tracked."""

    def __init__(self, path: str) -> None:
        self.f: IO[bytes] = open(path, "xb")
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


def _write_synced(path: str, data: bytes) -> None:
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _is_ours(path: str) -> bool:
    """Whether directory ``path`` (not a symlink) holds this checkpointer's
    marker file (a regular file, not a symlink, with the marker text)."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return False
        fd = os.open(os.path.join(path, MARKER),
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        return (stat.S_ISREG(os.fstat(fd).st_mode)
                and os.read(fd, 64) == MARKER_TEXT.encode())
    finally:
        os.close(fd)


def write_checkpoint(tmp: str, tables: Mapping[str, Table],
                     extra: Callable[[], Mapping[str, Any]] | None = None) -> None:
    """Write a checkpoint of ``tables`` into the empty directory ``tmp``:
    marker, data files, manifest and its envelope, all fsynced.  The
    entries ``extra()`` returns (called once the data files are written)
    are added to the manifest (``ReplayBuffer.save`` records its own state
    there; the loader ignores entries it does not know)."""
    _write_synced(os.path.join(tmp, MARKER), MARKER_TEXT.encode())
    entries = DefaultCheckpointer._write(tmp, tables)
    if extra is not None:
        entries.update(extra())
    manifest = json.dumps(entries, indent=1).encode()
    _write_synced(os.path.join(tmp, MANIFEST), manifest)
    _write_synced(os.path.join(tmp, MANIFEST_CRC), (
        f"{FORMAT} {VERSION} {len(manifest)} {zlib.crc32(manifest)}\n").encode())
    _fsync_dir(tmp)


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
        Root directory; created when missing.  Other content under it is
        never touched.
    group : str
        Optional subdirectory, so several servers can share a root.
    fallback_checkpoint_path : str, optional
        A checkpoint directory restored when the root holds none.
    """

    def __init__(self, path: str, group: str = "",
                 fallback_checkpoint_path: str | None = None) -> None:
        self._root = os.path.join(path, group) if group else path
        self._fallback = fallback_checkpoint_path
        self._lock = _root_lock(self._root)

    @property
    def root(self) -> str:
        return self._root

    def latest(self) -> str | None:
        """The newest checkpoint under the root (a timestamp-named directory,
        not a symlink, holding a manifest), or None."""
        found = self.checkpoints()
        return found[0] if found else None

    def checkpoints(self) -> list[str]:
        """The checkpoints under the root, newest first."""
        try:
            entries = list(os.scandir(self._root))
        except OSError:
            return []
        done = sorted(
            (e.name for e in entries
             if _STAMP.fullmatch(e.name) and e.is_dir(follow_symlinks=False)
             and any(os.path.lexists(os.path.join(e.path, f))
                     for f in (MANIFEST_CRC, MANIFEST))), reverse=True)
        return [os.path.join(self._root, d) for d in done]

    # ----- save -----

    def save(self, tables: Mapping[str, Table], store: _core.ChunkStore) -> str:
        with self._lock:
            os.makedirs(self._root, exist_ok=True)
            self._remove_incomplete()
            stamp = self._new_stamp()
            tmp = tempfile.mkdtemp(prefix=f".incomplete-{stamp}-", dir=self._root)
            try:
                write_checkpoint(tmp, tables)
                final = os.path.join(self._root, stamp)
                os.rename(tmp, final)
                _fsync_dir(self._root)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            self._prune(keep=stamp)
            return os.path.abspath(final)

    def _new_stamp(self) -> str:
        """A timestamp name later than every checkpoint under the root."""
        newest = self.latest()
        fmt = "%Y%m%dT%H%M%S%fZ"  # sortable, and valid on every filesystem
        when = datetime.datetime.now(datetime.timezone.utc)
        if newest:  # never older than the newest (a clock set back, or ties)
            last = datetime.datetime.strptime(os.path.basename(newest), fmt)
            when = max(when, last.replace(tzinfo=datetime.timezone.utc)
                       + datetime.timedelta(microseconds=1))
        while os.path.lexists(os.path.join(self._root, when.strftime(fmt))):
            when += datetime.timedelta(microseconds=1)
        return when.strftime(fmt)

    def _prune(self, keep: str) -> None:
        """Delete this checkpointer's checkpoints older than ``keep``."""
        for entry in os.scandir(self._root):
            if (_STAMP.fullmatch(entry.name) and entry.name < keep
                    and _is_ours(entry.path)):
                shutil.rmtree(entry.path, ignore_errors=True)

    def _remove_incomplete(self) -> None:
        """Delete the marked leftovers of saves that were killed (no save of
        this root runs in this process while the lock is held)."""
        try:
            entries = list(os.scandir(self._root))
        except OSError:
            return
        for entry in entries:
            if _INCOMPLETE.fullmatch(entry.name) and _is_ours(entry.path):
                shutil.rmtree(entry.path, ignore_errors=True)

    @staticmethod
    def _write(tmp: str, tables: Mapping[str, Table]) -> dict[str, Any]:
        chunks_out = _Checked(os.path.join(tmp, "chunks.bin"))
        written: set[int] = set()
        files: dict[str, dict[str, int]] = {}
        structures: dict[int, int] = {0: 0}  # registry id -> index in manifest
        table_entries = []
        for i, (name, table) in enumerate(tables.items()):
            items, chunks = _core.export_items(table._core)
            for cid, handle in chunks.items():
                if cid in written:
                    continue
                m = handle.meta
                chunks_out.write(CHUNK.pack(
                    cid, m["key"], m["episode_id"], m["first_step"], m["last_step"],
                    m["row_bytes"], m["n_rows"], int(m["compressed"]),
                    m["stored_bytes"]))
                chunks_out.write(handle.data())
                written.add(cid)
            del chunks
            fname = f"items-{i}.bin"
            specs: dict[tuple[Any, ...], int] = {}
            out = _Checked(os.path.join(tmp, fname))
            for key, priority, times_sampled, columns, sid in items:
                if columns is None:
                    out.write(ITEM.pack(key, priority, times_sampled, NO_DATA, 0))
                    continue
                index = structures.setdefault(sid, len(structures))
                out.write(ITEM.pack(key, priority, times_sampled, len(columns), index))
                for spec, squeeze, slices in columns:
                    out.write(COLUMN.pack(specs.setdefault(spec, len(specs)),
                                          squeeze, len(slices)))
                    for cid, offset, length in slices:
                        out.write(SLICE.pack(cid, offset, length))
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
                "structures": [_structures.to_json(sid) for sid in structures],
                "files": files}

    # ----- restore -----

    def restore(self, tables: Mapping[str, Table], store: _core.ChunkStore) -> bool:
        """Load the newest checkpoint (or the fallback) into empty ``tables``.
        Returns False when there is none."""
        with self._lock:
            self._remove_incomplete()
            path = self.latest() or self._fallback
            if path is None:
                return False
            load(path, tables, store)
            return True


class TempDirCheckpointer(DefaultCheckpointer):
    """Checkpoints in a fresh temporary directory."""

    def __init__(self) -> None:
        super().__init__(tempfile.mkdtemp(prefix="fastreplay-checkpoints-"))


def default_checkpointer() -> CheckpointerBase:
    return TempDirCheckpointer()
