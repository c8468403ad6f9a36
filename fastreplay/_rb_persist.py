"""Saving and loading a ``ReplayBuffer``: ``save`` / ``load``, pickling, and
cpprb-style ``save_transitions`` / ``load_transitions``.

``save(path)`` writes a checkpoint directory in the format of
``fastreplay.checkpointers`` (its table ``"replay_buffer"``: every stored
transition, in insertion order, with its key, priority and sample count)
whose manifest also holds the buffer's own state under ``"replay_buffer"``
(constructor arguments, field layout and specs, maximum priority, next
keys).  ``load`` checks that state field by field and the checkpoint with
the hardened loader (``fastreplay._checkpoint_load``): a truncated,
corrupted or forged directory raises ``DataLossError`` and builds nothing.
Pickling carries the files of such a directory.

``save_transitions`` writes a ``.npz`` of plain arrays (no pickle): one
array per column, oldest transition first, and the priorities of a
prioritized buffer.  ``load_transitions`` appends a file's transitions
through ``add_batch``; it also reads the files of cpprb's
``save_transitions`` (pickled, so only with ``allow_pickle=True``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from fastreplay import (
    _checkpoint_load,
    _core,
    _rb_ring,
    errors,
)
from fastreplay._frames import field_names
from fastreplay._rb_fields import SEP, convert
from fastreplay.checkpointers import _fsync_dir, _is_ours, write_checkpoint

if TYPE_CHECKING:
    from fastreplay.replay_buffer import ReplayBuffer

FORMAT = "fastreplay-replay-buffer"
VERSION = 1
TABLE = "replay_buffer"
#: the ``.npz`` entry marking a file of ``save_transitions``
NPZ_MARK = "__fastreplay_transitions__"
NPZ_PRIORITIES = "__priorities__"
_PICKLE = "fastreplay-replay-buffer-files"
_FILE_NAMES = {_checkpoint_load.MARKER, _checkpoint_load.MANIFEST,
               _checkpoint_load.MANIFEST_CRC}


def config_of(*, capacity: int, alpha: float | None, min_size: int,
              compression: str | None | Mapping[str, str | None],
              next_of: str | Sequence[str] | None,
              stack_compress: str | Sequence[str] | None,
              n_step: int | None = None, gamma: float = 0.99,
              Nstep: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The constructor arguments ``save`` records (JSON values)."""
    return {
        "n_step": n_step, "gamma": gamma,
        "Nstep": None if Nstep is None else dict(Nstep),
        "capacity": capacity, "alpha": alpha, "min_size": min_size,
        "compression": (dict(compression) if isinstance(compression, Mapping)
                        else compression),
        "next_of": list(field_names(next_of, "next_of")),
        "stack_compress": list(field_names(stack_compress, "stack_compress")),
    }


def _state(rb: ReplayBuffer, next_key: int) -> dict[str, Any]:
    """The buffer's own state, read after its items were exported (keys
    taken since are beyond every saved item's)."""
    key, chunk_key = rb._keys.reserve(0, 0)
    key = max(key, next_key)
    config = dict(rb._config)
    config.update(capacity=int(config["capacity"]), min_size=int(config["min_size"]),
                  alpha=None if config["alpha"] is None else float(config["alpha"]))
    return {TABLE: {
        "format": FORMAT, "version": VERSION, "config": config,
        "layout": rb._layout.to_json(), "fields": rb._fields,
        "specs": None if rb._fields is None else [
            [dt.str, list(shape)] for dt, shape in _specs(rb)],
        "max_priority": rb._max_priority, "next_key": key,
        "next_chunk_key": chunk_key,
    }}


def _specs(rb: ReplayBuffer) -> list[tuple[Any, ...]]:
    """(dtype, row shape) of each of the buffer's columns."""
    assert rb._fields is not None
    if rb._frames is not None:
        return [rb._frames._specs[k] for k in rb._fields]
    assert rb._specs is not None
    return rb._specs


def save(rb: ReplayBuffer, path: str | os.PathLike[str]) -> str:
    """Write ``rb`` to the directory ``path`` (see ReplayBuffer.save)."""
    final = os.path.abspath(os.fspath(path))
    parent, base = os.path.split(final)
    if os.path.lexists(final) and not _is_ours(final):
        raise FileExistsError(f"{final} exists and is not a saved ReplayBuffer or "
                              "checkpoint; pass a new path (save never deletes "
                              "other files)")
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{base}.incomplete-", dir=parent)
    try:
        table, next_key = _rb_ring.saved_table(rb)
        write_checkpoint(tmp, {TABLE: table}, lambda: _state(rb, next_key))
        if os.path.lexists(final):  # an earlier save: replaced as a whole
            old = f"{tmp}.old"
            os.rename(final, old)
            os.rename(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)
        _fsync_dir(parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


# ----- load -----

def _bad(path: str, what: str) -> errors.DataLossError:
    return errors.DataLossError(f"{path}: saved ReplayBuffer state is malformed "
                                f"({what})")


def _read_state(path: str) -> dict[str, Any]:
    folder = _checkpoint_load._Folder(path)
    try:
        manifest = _checkpoint_load.read_manifest(folder)
    finally:
        folder.close()
    state = manifest.get(TABLE)
    if state is None:
        raise ValueError(f"{path} is a fastreplay checkpoint but not a saved "
                         "ReplayBuffer; restore it with a Server's checkpointer")
    if type(state) is not dict or state.get("format") != FORMAT:
        raise _bad(path, "not a replay-buffer entry")
    if state.get("version") != VERSION:
        raise errors.DataLossError(
            f"{path}: saved ReplayBuffer version {state.get('version')!r:.20} is "
            f"not supported (this fastreplay reads version {VERSION})")
    for name, kind in (("config", dict), ("layout", dict), ("max_priority", float),
                       ("next_key", int), ("next_chunk_key", int)):
        if type(state.get(name)) is not kind:
            raise _bad(path, f"{name} is not a {kind.__name__}")
    if not (0.0 <= state["max_priority"] < float("inf")):
        raise _bad(path, "max_priority")
    for name in ("next_key", "next_chunk_key"):
        if not 0 <= state[name] < 2**64:
            raise _bad(path, name)
    return state


def _leaf(spec: Any, path: str) -> tuple[np.dtype[Any], tuple[int, ...]]:
    try:
        dt_str, shape = spec
        if type(dt_str) is not str or type(shape) is not list or len(shape) > 16 or any(
                type(d) is not int or not 0 <= d < 2**40 for d in shape):
            raise ValueError
        dt = np.dtype(dt_str)
    except (TypeError, ValueError):
        raise _bad(path, f"spec {spec!r:.80}") from None
    if not _core._spec_kind_ok(dt.kind, dt.itemsize):
        raise _bad(path, f"dtype {dt_str!r:.20}")
    return dt, tuple(shape)


def _spec_arg(layout: dict[str, Any], path: str) -> dict[str, Any] | None:
    """The ``spec=`` argument that declares ``layout``'s fields again."""
    declared, paths = layout.get("declared"), layout.get("paths")
    if declared is None:
        return None
    if type(declared) is not dict or type(paths) is not dict:
        raise _bad(path, "layout")
    spec: dict[str, Any] = {}
    for name, leaf in declared.items():
        keys = paths.get(name, [name])
        if type(keys) is not list or not keys or any(
                type(k) is not str or not k for k in keys):
            raise _bad(path, f"path of field {name!r:.40}")
        node = spec
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if type(node) is not dict:
                raise _bad(path, f"path of field {name!r:.40}")
        node[keys[-1]] = _leaf(leaf, path)
    return spec


def load(cls: type[ReplayBuffer], path: str | os.PathLike[str],
         seed: int | None) -> ReplayBuffer:
    """A new buffer from the directory ``save`` wrote (see
    ReplayBuffer.load)."""
    where = os.fspath(path)
    state = _read_state(where)
    config = state["config"]
    try:
        rb = cls(**config, seed=seed, spec=_spec_arg(state["layout"], where))
        _rb_ring.to_table(rb)  # loaded into the table, then maybe a ring
    except (TypeError, ValueError) as exc:
        raise _bad(where, f"config: {exc}") from exc
    fields, specs = state.get("fields"), state.get("specs")
    if fields is not None:
        if (type(fields) is not list or type(specs) is not list
                or len(fields) != len(specs) or not fields
                or any(type(f) is not str for f in fields)):
            raise _bad(where, "fields")
        leaves = [_leaf(s, where) for s in specs]
        paths = state["layout"].get("paths")
        if type(paths) is not dict:
            raise _bad(where, "layout paths")
        rb._layout.learn({k: tuple(paths.get(k, [k])) for k in fields})
        if rb._frames is not None:
            rb._frames._plan({k: np.zeros((1, *shape), dt)
                              for k, (dt, shape) in zip(fields, leaves, strict=True)})
            if rb._frames.columns != fields:
                raise _bad(where, "frame fields")
            rb._fields = fields
        elif rb._fields is None:
            rb._fields, rb._specs = fields, leaves
            rb._set_plan(fields, [np.zeros(shape, dt) for dt, shape in leaves])
        elif rb._fields != fields or rb._specs != leaves:
            raise _bad(where, "fields differ from the declared spec")
    _checkpoint_load.load(where, {TABLE: rb._table}, rb._store)
    keys = rb._table.items()["key"]
    if len(keys) and int(np.max(keys)) >= state["next_key"]:
        raise _bad(where, "next_key is not beyond the stored keys")
    rb._keys = _core.RowKeys(state["next_key"], state["next_chunk_key"])
    rb._max_priority = state["max_priority"]
    _rb_ring.from_table(rb)
    return rb


# ----- pickling -----

def to_files(rb: ReplayBuffer) -> dict[str, bytes]:
    """The files of a ``save`` of ``rb``, by name."""
    with tempfile.TemporaryDirectory(prefix="fastreplay-pickle-") as tmp:
        where = save(rb, os.path.join(tmp, "buffer"))
        files = {}
        for name in sorted(os.listdir(where)):
            with open(os.path.join(where, name), "rb") as f:
                files[name] = f.read()
    return files


def unpickle(kind: str, version: int, files: dict[str, bytes]) -> ReplayBuffer:
    """``pickle.loads`` of a ReplayBuffer: its files written to a temporary
    directory and loaded from there."""
    from fastreplay.replay_buffer import ReplayBuffer

    if kind != _PICKLE or version != VERSION or type(files) is not dict:
        raise errors.DataLossError("not a pickled fastreplay ReplayBuffer")
    with tempfile.TemporaryDirectory(prefix="fastreplay-unpickle-") as tmp:
        for name, data in files.items():
            if type(name) is not str or type(data) is not bytes or not (
                    name in _FILE_NAMES or name == "chunks.bin"
                    or (name.startswith("items-") and name.endswith(".bin")
                        and name[6:-4].isdigit())):
                raise errors.DataLossError(
                    f"pickled ReplayBuffer: bad file {name!r:.40}")
            with open(os.path.join(tmp, name), "xb") as f:
                f.write(data)
        return load(ReplayBuffer, tmp, None)


def reduce(rb: ReplayBuffer) -> tuple[Any, tuple[Any, ...]]:
    return unpickle, (_PICKLE, VERSION, to_files(rb))


# ----- transitions -----

def transitions(rb: ReplayBuffer) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Every stored transition's columns (oldest first) and priorities."""
    if rb._fields is None:
        return {}, np.zeros(0)
    ring = rb._ring
    if ring is not None:
        _, prios, _, columns = ring.read(0, len(ring))
    else:
        blocks = list(_rb_ring.transition_blocks(rb._table, None))
        if not blocks:
            return {}, np.zeros(0)
        _, prios, _, columns = blocks[0]
    return dict(zip(rb._fields, columns, strict=True)), np.asarray(prios, np.float64)


def save_transitions(rb: ReplayBuffer, file: str | os.PathLike[str] | IO[bytes],
                     safe: bool) -> None:
    """See ReplayBuffer.save_transitions."""
    del safe  # the file is always the portable format
    columns, prios = transitions(rb)
    arrays: dict[str, Any] = {NPZ_MARK: np.array(VERSION)}
    arrays.update(columns)
    if rb._prioritized and len(prios):
        arrays[NPZ_PRIORITIES] = prios
    np.savez_compressed(file, **arrays)


def _cpprb(data: Any, z: Any, where: str) -> dict[str, np.ndarray]:
    """The transitions of a file cpprb's save_transitions wrote."""
    def item(name: str) -> Any:
        v = z[name]
        return v.item() if v.shape == () else v
    if item("Nstep") or (item("next_of") is not None and not bool(item("safe"))):
        raise ValueError(f"{where}: cpprb saved it with Nstep or with safe=False and "
                         "next_of; save it again in cpprb with safe=True")
    if not isinstance(data, dict) or not all(isinstance(v, np.ndarray)
                                             for v in data.values()):
        raise ValueError(f"{where}: cpprb transitions are not a dict of arrays")
    return {str(k): v for k, v in data.items()}


def load_transitions(rb: ReplayBuffer, file: str | os.PathLike[str] | IO[bytes],
                     allow_pickle: bool) -> None:
    """See ReplayBuffer.load_transitions."""
    where = file if isinstance(file, (str, os.PathLike)) else getattr(
        file, "name", "file")
    try:
        with contextlib.ExitStack() as stack:
            if isinstance(file, (str, os.PathLike)):
                file = stack.enter_context(open(file, "rb"))  # closed on errors too
            z = stack.enter_context(np.load(file, allow_pickle=allow_pickle))
            names = set(z.files)
            prios = None
            if NPZ_MARK in names:
                if int(z[NPZ_MARK]) != VERSION:
                    raise ValueError(f"{where}: transitions file version "
                                     f"{z[NPZ_MARK]!r:.20} is not supported")
                fields = {k: z[k] for k in sorted(names - {NPZ_MARK, NPZ_PRIORITIES})}
                if NPZ_PRIORITIES in names:
                    prios = z[NPZ_PRIORITIES]
            elif {"data", "version", "safe"} <= names:
                try:
                    data = z["data"].item()
                except ValueError as exc:
                    if allow_pickle:
                        raise
                    raise ValueError(
                        f"{where} was written by cpprb's save_transitions, which "
                        "pickles the transitions; pass allow_pickle=True to "
                        "load_transitions if you trust the file") from exc
                fields = _cpprb(data, z, str(where))
            else:
                raise ValueError(f"{where} is not a file of save_transitions "
                                 f"(entries {sorted(names)[:8]})")
    except (zipfile.BadZipFile, EOFError, OSError, KeyError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise errors.DataLossError(f"{where}: unreadable transitions file "
                                   f"({exc})") from exc
    if not fields:
        return
    n = {len(v) if v.ndim else -1 for v in fields.values()}
    if len(n) != 1 or -1 in n or (prios is not None and {len(prios)} != n):
        raise errors.DataLossError(f"{where}: transitions of different lengths "
                                   f"{sorted(n)}")
    if n == {0}:
        return
    if rb._fields is not None and rb._specs is not None and rb._layout.declared is None:
        # fit to the buffer's columns as a declared spec would (cpprb's
        # (N, 1) scalars, its float32 defaults)
        specs = dict(zip(rb._fields, rb._specs, strict=True))
        fields = {k: convert(k, v, specs[k][0], specs[k][1], 1) if k in specs else v
                  for k, v in fields.items()}
    if not rb._prioritized:
        prios = None
    if rb._fields is None or rb._layout.nested:
        fields = _nest(fields)  # "obs/image" -> obs={"image": ...}
    rb.add_batch(priorities=prios, **fields)


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    """Columns named by ``/``-joined paths nested again."""
    out: dict[str, Any] = {}
    for name, value in flat.items():
        *parents, leaf = name.split(SEP)
        node = out
        for key in parents:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ValueError(f"column {name!r} collides with column {key!r}")
        if leaf in node:
            raise ValueError(f"column {name!r} is given twice")
        node[leaf] = value
    return out
