"""Reading a checkpoint (fastreplay.checkpointers writes it) without trusting
it.

Order: the manifest envelope (``manifest.crc``: format, version, size,
CRC-32), the manifest (size-limited JSON, every field's type and range
checked), every file it names (a plain name of this format, opened inside the
checkpoint folder with O_NOFOLLOW | O_NONBLOCK, a regular file by fstat, size
and CRC-32 checked), the configuration of every table, then chunks and items,
each declared size checked against what the file still holds and against
sane limits before anything is allocated.  Any malformed input raises
``DataLossError``, a configuration that differs from the server's tables
``ValueError``; either way nothing is loaded.
"""

from __future__ import annotations

import json
import os
import re
import stat
import struct
import zlib
from collections.abc import Mapping
from typing import Any

from fastreplay import _core, _structures, errors
from fastreplay.table import Table

FORMAT = "fastreplay-checkpoint"
VERSION = 2
MANIFEST = "manifest.json"
MANIFEST_CRC = "manifest.crc"
MARKER = "FASTREPLAY_CHECKPOINT"
MARKER_TEXT = "fastreplay checkpoint\n"
# id key episode first last row_bytes n_rows compressed stored
CHUNK = struct.Struct("<QQQqqqiiq")
# key priority times_sampled n_columns (0xFFFFFFFF: no data) structure index
ITEM = struct.Struct("<QdqII")
COLUMN = struct.Struct("<IBI")  # spec index, squeeze (2: a frame stack), n_slices
SLICE = struct.Struct("<Qii")  # chunk id, offset, length
NO_DATA = 0xFFFFFFFF

MAX_MANIFEST_BYTES = 1 << 26
MAX_TABLES = 1 << 12
MAX_SPECS = 1 << 16
_I64 = 1 << 63
_FILE_NAME = re.compile(r"chunks\.bin|items-[0-9]{1,6}\.bin")
_OPEN_FLAGS = (os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))


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


def _int(value: Any, what: str, lo: int = 0, hi: int = _I64 - 1) -> int:
    if type(value) is not int or not lo <= value <= hi:
        raise errors.DataLossError(f"checkpoint manifest: {what} is {value!r}, "
                                   f"not an integer in [{lo}, {hi}]")
    return value


def _typed(value: Any, kind: type, what: str) -> Any:
    if type(value) is not kind:
        raise errors.DataLossError(f"checkpoint manifest: {what} is not a "
                                   f"{kind.__name__}")
    return value


# ----- files inside the checkpoint folder -----

class _Folder:
    """The checkpoint folder, opened once; members are opened relative to
    it, never following a symlink and never blocking on a FIFO or device."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY
                              | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise errors.DataLossError(
                f"{path} is not a readable checkpoint: {exc}") from exc

    def close(self) -> None:
        os.close(self.fd)

    def open(self, name: str, expect_bytes: int | None = None) -> tuple[int, int]:
        """(fd, size) of regular file ``name``; DataLossError otherwise."""
        where = os.path.join(self.path, name)
        try:
            fd = os.open(name, _OPEN_FLAGS, dir_fd=self.fd)
        except OSError as exc:
            raise errors.DataLossError(f"checkpoint file {where}: {exc}") from exc
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise errors.DataLossError(f"checkpoint file {where} is not a "
                                       "regular file")
        if expect_bytes is not None and st.st_size != expect_bytes:
            os.close(fd)
            raise errors.DataLossError(
                f"checkpoint file {where} is corrupt or truncated ({st.st_size} "
                f"bytes; expected {expect_bytes} bytes)")
        return fd, st.st_size

    def read(self, name: str, limit: int) -> bytes:
        fd, size = self.open(name)
        try:
            if size > limit:
                raise errors.DataLossError(f"checkpoint file {name} is too large "
                                           f"({size} bytes, limit {limit})")
            return _read_exact(fd, size, os.path.join(self.path, name))
        finally:
            os.close(fd)

    def verify(self, name: str, expect: Mapping[str, int]) -> None:
        fd, size = self.open(name, expect["bytes"])  # size before reading
        crc, got = 0, 0
        try:
            while block := os.read(fd, 1 << 20):
                crc = zlib.crc32(block, crc)
                got += len(block)
        finally:
            os.close(fd)
        if got != expect["bytes"] or crc != expect["crc32"]:
            raise errors.DataLossError(
                f"checkpoint file {os.path.join(self.path, name)} is corrupt or "
                f"truncated ({got} bytes, crc32 {crc:#x}; expected "
                f"{expect['bytes']} bytes, crc32 {expect['crc32']:#x})")


def _read_exact(fd: int, size: int, where: str) -> bytes:
    parts, got = [], 0
    while got < size:
        block = os.read(fd, min(size - got, 1 << 24))
        if not block:
            break
        parts.append(block)
        got += len(block)
    if got != size:
        raise errors.DataLossError(f"checkpoint file {where} is corrupt or truncated")
    return b"".join(parts)


# ----- the manifest -----

def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def read_manifest(folder: _Folder) -> dict[str, Any]:
    """The verified manifest of the checkpoint in ``folder``."""
    path = folder.path
    if not _has(folder, MANIFEST_CRC) and _has(folder, MANIFEST):
        # written by fastreplay before version 2
        raise errors.DataLossError(
            f"{path}: checkpoint format version 1 is not supported (this "
            f"fastreplay reads version {VERSION}; it has no manifest checksum)")
    envelope = folder.read(MANIFEST_CRC, 256)
    fields = envelope.decode("ascii", "replace").split()
    if len(fields) != 4 or fields[0] != FORMAT:
        raise errors.DataLossError(f"{path} is not a fastreplay checkpoint")
    if fields[1] != str(VERSION):
        raise errors.DataLossError(
            f"{path}: checkpoint format version {fields[1][:20]} is not "
            f"supported (this fastreplay reads version {VERSION})")
    if not (fields[2].isdigit() and fields[3].isdigit() and len(fields[2]) < 12
            and len(fields[3]) < 12):
        raise errors.DataLossError(f"{path}: malformed {MANIFEST_CRC}")
    size, crc = int(fields[2]), int(fields[3])
    if size > MAX_MANIFEST_BYTES:
        raise errors.DataLossError(f"{path}: manifest too large ({size} bytes)")
    data = folder.read(MANIFEST, size)
    if len(data) != size or zlib.crc32(data) != crc:
        raise errors.DataLossError(
            f"checkpoint manifest {os.path.join(path, MANIFEST)} is corrupt or "
            "truncated (size or crc32 differs from manifest.crc)")
    try:
        manifest = json.loads(data, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise errors.DataLossError(f"{path}: unreadable manifest: {exc}") from exc
    if type(manifest) is not dict or manifest.get("format") != FORMAT:
        raise errors.DataLossError(f"{path} is not a fastreplay checkpoint")
    if manifest.get("version") != VERSION:
        raise errors.DataLossError(
            f"{path}: checkpoint format version {manifest.get('version')!r:.20} is "
            f"not supported (this fastreplay reads version {VERSION})")
    return manifest


def _has(folder: _Folder, name: str) -> bool:
    try:
        os.stat(name, dir_fd=folder.fd, follow_symlinks=False)
        return True
    except OSError:
        return False


def _check_manifest(m: dict[str, Any]) -> tuple[list[dict[str, Any]], list[int]]:
    """Check every field's type and range; returns the table entries and the
    structure ids (interned) by manifest index."""
    files = _typed(m.get("files"), dict, "files")
    for name, expect in files.items():
        if not _FILE_NAME.fullmatch(name):
            raise errors.DataLossError(f"checkpoint manifest: bad file name {name!r}")
        _typed(expect, dict, f"files[{name!r}]")
        if set(expect) != {"bytes", "crc32"}:
            raise errors.DataLossError(f"checkpoint manifest: files[{name!r}]")
        _int(expect["bytes"], f"files[{name!r}].bytes")
        _int(expect["crc32"], f"files[{name!r}].crc32", 0, 0xFFFFFFFF)
    entries = _typed(m.get("tables"), list, "tables")
    if len(entries) > MAX_TABLES:
        raise errors.DataLossError("checkpoint manifest: too many tables")
    names: set[str] = set()
    used = {"chunks.bin"}
    for i, e in enumerate(entries):
        _typed(e, dict, f"tables[{i}]")
        name = _typed(e.get("name"), str, f"tables[{i}].name")
        fname = _typed(e.get("items_file"), str, f"tables[{i}].items_file")
        if name in names or fname in used or fname not in files:
            raise errors.DataLossError(f"checkpoint manifest: table {name!r} or its "
                                       f"items file {fname!r} is repeated or unknown")
        names.add(name)
        used.add(fname)
        _int(e.get("num_items"), f"table {name!r} num_items")
        _typed(e.get("config"), dict, f"table {name!r} config")
        counters = _typed(e.get("counters"), list, f"table {name!r} counters")
        if len(counters) != 3:
            raise errors.DataLossError(f"checkpoint manifest: table {name!r} counters")
        for c in counters:
            _int(c, f"table {name!r} counter", 0, 1 << 62)
        if counters[0] - counters[2] != e["num_items"]:
            raise errors.DataLossError(
                f"checkpoint manifest: table {name!r} rate-limiter counters "
                f"{counters} (inserts, samples, deletes) do not match its "
                f"{e['num_items']} items")
        stats = _typed(e.get("stats"), dict, f"table {name!r} stats")
        for k, v in stats.items():
            _int(v, f"table {name!r} stats[{k!r}]", 0, 1 << 62)
        specs = _typed(e.get("specs"), list, f"table {name!r} specs")
        if len(specs) > MAX_SPECS:
            raise errors.DataLossError(f"checkpoint manifest: table {name!r} specs")
        e["specs"] = [_check_spec(s, name) for s in specs]
    if set(files) != used:
        raise errors.DataLossError(
            f"checkpoint manifest: files {sorted(files)} do not match the files "
            f"the tables use {sorted(used)}")
    raw = _typed(m.get("structures"), list, "structures")
    if not raw or raw[0] is not None or len(raw) > MAX_SPECS:
        raise errors.DataLossError("checkpoint manifest: bad structures list")
    try:
        structure_ids = [_structures.from_json(s) for s in raw]
    except (RecursionError, TypeError, ValueError, OverflowError) as exc:
        raise errors.DataLossError(f"checkpoint manifest: structures: {exc}") from exc
    return entries, structure_ids


def _check_spec(spec: Any, table: str) -> tuple[str, int, tuple[int, ...]]:
    if type(spec) is not list or len(spec) != 3:
        raise errors.DataLossError(f"checkpoint manifest: table {table!r} spec "
                                   f"{spec!r:.80}")
    kind, itemsize, shape = spec
    if not _core._spec_kind_ok(kind, itemsize):
        raise errors.DataLossError(
            f"checkpoint manifest: table {table!r} has a column of unsupported "
            f"kind {kind!r:.20} with item size {itemsize!r:.20}")
    if type(shape) is not list or len(shape) > 16:
        raise errors.DataLossError(f"checkpoint manifest: table {table!r} shape "
                                   f"{shape!r:.80}")
    size = itemsize
    for d in shape:
        size *= _int(d, f"table {table!r} shape dimension", 0, 1 << 40)
        if size > 1 << 40:
            raise errors.DataLossError(f"checkpoint manifest: table {table!r} "
                                       f"rows of shape {shape} are too large")
    return kind, itemsize, tuple(shape)


# ----- loading -----

def load(path: str, tables: Mapping[str, Table], store: _core.ChunkStore) -> None:
    """Verify and load the checkpoint at ``path`` (see the module docstring)."""
    folder = _Folder(path)
    try:
        manifest = read_manifest(folder)
        try:
            entries, structure_ids = _check_manifest(manifest)
        except (KeyError, TypeError, AttributeError, OverflowError,
                RecursionError) as exc:  # a shape the checks above missed
            raise errors.DataLossError(f"{path}: malformed manifest ({exc!r})") from exc
        for fname, expect in manifest["files"].items():
            folder.verify(fname, expect)
        _check_tables(entries, tables)
        chunks = _read_chunks(folder, manifest["files"]["chunks.bin"]["bytes"], store)
        plans = [(tables[e["name"]], e, _read_items(folder, e, chunks, structure_ids))
                 for e in entries]
    finally:
        folder.close()
    try:
        for table, entry, items in plans:
            for key, priority, times_sampled, columns, sid in items:
                _core.restore_item(table._core, key, priority, times_sampled,
                                   columns, chunks, sid)
            inserts, samples, deletes = entry["counters"]
            _core.restore_counters(table._core, inserts, samples, deletes,
                                   entry["stats"])
    except BaseException as exc:
        for table, _, _ in plans:
            table.reset()
        if isinstance(exc, (KeyError, TypeError, OverflowError)):
            raise errors.DataLossError(f"{path}: inconsistent items ({exc!r})") from exc
        raise


def _check_tables(entries: list[dict[str, Any]], tables: Mapping[str, Table]) -> None:
    for entry in entries:
        table = tables.get(entry["name"])
        if table is None:
            raise ValueError(f"Checkpoint table '{entry['name']}' has no matching "
                             f"server table (server tables: {sorted(tables)}): "
                             f"give the Server a table named '{entry['name']}' "
                             "configured as when it was checkpointed")
        want = entry["config"]
        have = json.loads(json.dumps(table_config(table)))
        if set(want) != set(have):
            raise errors.DataLossError(
                f"checkpoint manifest: table {entry['name']!r} config has fields "
                f"{sorted(want)!r:.200}, expected {sorted(have)}")
        if want != have:
            diffs = {k: (want[k], have[k]) for k in want if want[k] != have[k]}
            raise ValueError(
                f"Table '{entry['name']}' differs from its checkpoint "
                f"(checkpoint, server): {diffs}; configure the table as it was "
                "checkpointed")
        if len(table):
            raise ValueError(f"Table '{entry['name']}' must be empty to restore "
                             f"(it holds {len(table)} items): restore into a new "
                             "Server whose tables are empty")


def _read_chunks(folder: _Folder, size: int, store: _core.ChunkStore
                 ) -> dict[int, Any]:
    chunks: dict[int, Any] = {}
    where = os.path.join(folder.path, "chunks.bin")
    fd, _ = folder.open("chunks.bin", size)
    with open(fd, "rb") as f:
        at = 0
        while at < size:
            if size - at < CHUNK.size:
                raise errors.DataLossError(f"{where}: truncated chunk header")
            cid, key, episode, first, last, row_bytes, n_rows, comp, stored = (
                CHUNK.unpack(f.read(CHUNK.size)))
            at += CHUNK.size
            var = row_bytes == _core.VAR_ROWS  # string rows: offsets + payload
            if (not 0 <= stored <= size - at or comp not in (0, 1) or n_rows < 0
                    or (row_bytes < 0 and not var) or cid in chunks
                    or (var and stored < 8 * (n_rows + 1))
                    or (not var and not comp and stored != n_rows * row_bytes)
                    or (not var and comp and n_rows * row_bytes > 255 * stored)):
                raise errors.DataLossError(
                    f"{where}: chunk {key} declares inconsistent sizes ({n_rows} "
                    f"rows of {row_bytes} bytes, {stored} stored, {size - at} "
                    "left in the file)")
            data = f.read(stored)
            at += stored
            meta = {"key": key, "episode_id": episode, "first_step": first,
                    "last_step": last, "row_bytes": row_bytes, "n_rows": n_rows,
                    "compressed": bool(comp), "stored_bytes": stored}
            chunks[cid] = _core.restore_chunk(store, meta, data)
    return chunks


def _read_items(folder: _Folder, entry: Mapping[str, Any], chunks: Mapping[int, Any],
                structure_ids: list[int]) -> list[tuple[Any, ...]]:
    fname = entry["items_file"]
    where = os.path.join(folder.path, fname)
    specs = entry["specs"]
    num_items = entry["num_items"]
    data = folder.read(fname, 1 << 62)
    if num_items * ITEM.size > len(data):
        raise errors.DataLossError(f"{where}: {num_items} items cannot fit in "
                                   f"{len(data)} bytes")
    items: list[tuple[Any, ...]] = []
    leaves = {sid: _structures.n_leaves(sid) for sid in structure_ids}
    at = 0
    try:
        for _ in range(num_items):
            key, priority, times, n_cols, sindex = ITEM.unpack_from(data, at)
            at += ITEM.size
            if not (0.0 <= priority < float("inf")) or times < 0:
                raise errors.DataLossError(f"{where}: item {key} has priority "
                                           f"{priority} and times_sampled {times}")
            if n_cols == NO_DATA:
                items.append((key, priority, times, None, 0))
                continue
            if not 0 < n_cols <= (len(data) - at) // COLUMN.size:
                raise errors.DataLossError(f"{where}: item {key} declares {n_cols} "
                                           "columns")
            sid = structure_ids[sindex]
            if sid and leaves[sid] != n_cols:
                raise errors.DataLossError(
                    f"{where}: item {key} has {n_cols} columns but its structure "
                    f"{_structures.describe(sid)} has {leaves[sid]}")
            columns = []
            for _ in range(n_cols):
                index, squeeze, n_slices = COLUMN.unpack_from(data, at)
                at += COLUMN.size
                if (squeeze not in (0, 1, 2)
                        or n_slices > (len(data) - at) // SLICE.size):
                    raise errors.DataLossError(f"{where}: item {key} declares "
                                               f"{n_slices} slices")
                slices = []
                for _ in range(n_slices):
                    cid, offset, length = SLICE.unpack_from(data, at)
                    at += SLICE.size
                    if cid not in chunks:
                        raise errors.DataLossError(f"{where}: unknown chunk {cid}")
                    slices.append((cid, offset, length))
                layout = squeeze if squeeze == 2 else bool(squeeze)  # 2: stacked
                columns.append((specs[index], layout, slices))
            items.append((key, priority, times, columns, sid))
    except (struct.error, IndexError) as exc:
        raise errors.DataLossError(f"{where}: corrupt item records ({exc})") from exc
    if at != len(data):
        raise errors.DataLossError(
            f"{where}: {len(data) - at} unexpected trailing bytes")
    # A table never holds two items of one key; writers' keys are
    # consecutive, so one flipped bit often lands on a neighbour's.
    seen: set[int] = set()
    for item in items:
        if item[0] in seen:
            raise errors.DataLossError(f"{where}: item key {item[0]} appears twice")
        seen.add(item[0])
    return items
