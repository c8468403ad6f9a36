"""The legacy ``Writer`` (Reverb's ``client.writer(...)``) on the
TrajectoryWriter.

Each ``append`` is one timestep of a flat list of tensors; ``create_item``
makes an item of the last ``num_timesteps`` timesteps of every column (no
squeezed columns), so a sample's data is the flat list of ``[T, ...]``
arrays, as in Reverb (``sample_batch`` unpacks items with the nest of the
first appended step).  One writer is one episode.  The rules and messages
follow Reverb's C++ ``Writer`` (reverb-spec section 5.3):

- every timestep has the same number of tensors (and, in fastreplay, each
  column keeps its dtype and shape);
- ``create_item`` checks ``1 <= num_timesteps <= max_sequence_length``, that
  that many timesteps were appended, that the priority is not NaN, and that
  every timestep (or the whole trajectory) matches the table signature;
- at most ``max_in_flight_items`` items wait to be inserted; ``create_item``
  waits for the oldest ones beyond that.

``delta_encoded`` is accepted and ignored: chunks are LZ4-compressed by the
column's measured rule instead.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any

import numpy as np

from fastreplay import _core, _nest, errors
from fastreplay.chunkers import ConstantChunkerOptions
from fastreplay.table import Table
from fastreplay.writer import TrajectoryWriter

__all__ = ["Writer"]

_log = logging.getLogger(__name__)


class Writer:
    """Streams timesteps and creates items over the most recent ones
    (Reverb's legacy ``reverb.Writer``; made by ``Client.writer``).

    Parameters
    ----------
    tables : mapping name -> Table
        The tables ``create_item`` may name.
    max_sequence_length : int
        Most timesteps one item may span (the history kept).
    chunk_length : int
        Timesteps per chunk (``1 <= chunk_length <= max_sequence_length``).
    max_in_flight_items : int
        Items allowed to wait for insertion before ``create_item`` blocks.
    chunk_store : ChunkStore, optional
        Accounting for the chunks.
    """

    def __init__(self, tables: dict[str, Table], max_sequence_length: int,
                 chunk_length: int, max_in_flight_items: int, *,
                 chunk_store: _core.ChunkStore | None = None,
                 sink: Any = None) -> None:
        self._max_sequence_length = int(max_sequence_length)
        self._chunk_length = int(chunk_length)
        self._max_in_flight_items = int(max_in_flight_items)
        self._writer = TrajectoryWriter(
            tables, self._max_sequence_length, validate_items=False,
            chunk_store=chunk_store, sink=sink,
            chunker_options=ConstantChunkerOptions(self._chunk_length,
                                                   self._max_sequence_length))
        self._tables = tables
        self._num_tensors: int | None = None
        self._structure: Any = None
        self._num_steps = 0
        self._closed = False

    def __repr__(self) -> str:
        return (f"Writer(chunk_length={self._chunk_length}, "
                f"max_timesteps={self._max_sequence_length}, "
                f"max_in_flight_items={self._max_in_flight_items}), "
                f"closed: {self._closed}")

    def __enter__(self) -> Writer:
        if self._closed:
            raise ValueError("Cannot reuse already closed Writer")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.flush()
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_closed", True):
            return
        _log.warning("Writer-object deleted without calling .close explicitly.")
        try:
            self.close()
        except Exception:  # noqa: BLE001 - a finalizer must not raise
            _log.exception("closing a Writer in its finalizer failed")

    def _check_open(self, method: str) -> None:
        if self._closed:
            raise RuntimeError(f"Calling method {method} after Close has been called")

    # ----- appending -----

    def append(self, data: Any) -> None:
        """Append one timestep: the leaves of ``data`` (a nest) in flatten
        order.  Nothing is inserted until ``create_item`` references it.

        Raises
        ------
        ValueError
            A different number of tensors than the first timestep, or a
            dtype or shape that differs from the column's first.
        RuntimeError
            The writer is closed.
        """
        self._check_open("Append")
        self._append_flat(_nest.flatten(data), data)

    def _append_flat(self, flat: list[Any], nest: Any) -> None:
        if self._num_tensors is not None and len(flat) != self._num_tensors:
            raise ValueError(
                "Number of tensors per timestep was inconsistent. Previously it "
                f"was {self._num_tensors}, but is now {len(flat)}."
                + _field_difference(self._structure, nest))
        if any(value is None for value in flat):
            i = next(i for i, v in enumerate(flat) if v is None)
            raise ValueError(
                f"Append called with a None value at flattened index {i} "
                f"(field {_paths(nest)[i]!r}). The legacy Writer needs a value "
                "for every field of every step; use client.trajectory_writer "
                "for steps with missing fields.")
        try:
            self._writer.append(flat)
        except errors.InvalidArgumentError as exc:
            raise _with_field(exc, nest) from None
        if self._num_tensors is None:  # items are packed like the first step
            self._structure = _nest.map_structure(lambda _: None, nest)
        self._num_tensors = len(flat)
        self._num_steps += 1

    def append_sequence(self, sequence: Any) -> None:
        """Append ``T`` timesteps: every leaf of ``sequence`` has the same
        leading dimension ``T``; equivalent to ``append`` of each slice.

        Raises
        ------
        ValueError
            No leaves, a scalar leaf, or leaves of different lengths.
        """
        self._check_open("Append")
        flat = [np.asarray(x) for x in _nest.flatten(sequence)]
        if not flat:
            raise ValueError("AppendSequence called with empty data.")
        for i, column in enumerate(flat):
            if column.ndim == 0:
                raise ValueError(f"AppendSequence called with scalar tensor at "
                                 f"index {i}.")
        if len({len(column) for column in flat}) != 1:
            shapes = ", ".join(f"{_core.dtype_name(c.dtype)}{list(c.shape)}"
                               for c in flat)
            raise ValueError("AppendSequence called with tensors of non equal "
                             f"batch dimension: [{shapes}].")
        for t in range(len(flat[0])):
            self._append_flat([column[t] for column in flat], sequence)

    # ----- items -----

    def create_item(self, table: str, num_timesteps: int, priority: float) -> None:
        """Create an item in ``table`` over the last ``num_timesteps``
        timesteps with ``priority``.

        Raises
        ------
        ValueError
            ``num_timesteps < 1``, more than were appended or than
            ``max_sequence_length``, a NaN priority, an unknown table, or
            data inconsistent with the table signature.
        RuntimeError
            The writer is closed.
        """
        self._create_items([(table, num_timesteps, priority)])

    def _create_items(self, items: list[tuple[str, int, float]]) -> None:
        """Check every (table, num_timesteps, priority), then create them all
        (so a bad one creates none)."""
        trajectories = [self._trajectory(*item) for item in items]
        for (table, _, priority), trajectory in zip(items, trajectories,
                                                    strict=True):
            self._writer.create_item(table, priority, trajectory)
        if self._writer.num_pending_items > self._max_in_flight_items:
            self._writer.flush(block_until_num_items=self._max_in_flight_items)

    def _trajectory(self, table: str, num_timesteps: int, priority: float
                    ) -> Any:
        if num_timesteps < 1:
            raise ValueError(
                f"num_timesteps ({num_timesteps}) must be a positive integer")
        self._check_open("CreateItem")
        if num_timesteps > self._num_steps:
            raise ValueError("Argument `num_timesteps` is larger than number of "
                             f"buffered timesteps (num_timesteps={num_timesteps}, "
                             f"{self._num_steps} appended, table '{table}'): "
                             "append more steps first or create the item over "
                             "fewer steps.")
        if num_timesteps > self._max_sequence_length:
            raise ValueError("`num_timesteps` must be <= `max_timesteps` "
                             f"(num_timesteps={num_timesteps}, max_sequence_length="
                             f"{self._max_sequence_length}, table '{table}'): "
                             "create the writer with client.writer("
                             f"max_sequence_length={num_timesteps}).")
        if math.isnan(float(priority)):
            raise ValueError(f"`priority` must not be nan. (table '{table}')")
        history = self._writer.history
        trajectory = [history[i][-num_timesteps:] for i in range(len(history))]
        target = self._tables.get(table)
        if target is None:
            raise ValueError(f"Unable to create item in table '{table}' since the "
                             "table could not be found. This writer's tables "
                             f"are: {', '.join(sorted(self._tables))}.")
        if target.signature is not None:
            check_step_signature(table, target.signature, trajectory, num_timesteps)
        return _nest.unflatten_as(self._structure, trajectory)

    def flush(self) -> None:
        """Wait until every created item is in its table."""
        self._check_open("Flush")
        self._writer.flush()

    def close(self, retry_on_unavailable: bool = True) -> None:
        """Insert the created items, then close the writer (also done by
        leaving a ``with`` block).

        Raises
        ------
        ValueError
            ``close`` was already called.
        """
        del retry_on_unavailable  # no network: nothing to retry
        if self._closed:
            raise ValueError("close() has already been called on Writer.")
        self._closed = True
        try:
            self._writer.flush()
        finally:
            self._writer.close()

    def _discard(self) -> None:
        """Close without inserting what is still pending."""
        self._closed = True
        self._writer.close()


def _paths(nest: Any) -> list[tuple[Any, ...]]:
    return [p for p, _ in _nest.flatten_with_path(nest)]


def _field_difference(structure: Any, nest: Any) -> str:
    """' Missing field(s): ... Unexpected field(s): ...' between the first
    step's structure and ``nest`` (for messages)."""
    want, got = _paths(structure), _paths(nest)
    missing = [p for p in want if p not in got]
    extra = [p for p in got if p not in want]
    text = ""
    if missing:
        text += f" Missing field(s): {', '.join(map(repr, missing))}."
    if extra:
        text += f" Unexpected field(s): {', '.join(map(repr, extra))}."
    return text + " Every step must have the fields of the first one."


def _with_field(exc: Exception, nest: Any) -> Exception:
    """``exc`` (naming the flat column ``(i,)``) with the step field it is."""
    match = re.search(r"column \((\d+),\)", str(exc))
    paths = _paths(nest)
    if match is None or int(match.group(1)) >= len(paths):
        return exc
    path = paths[int(match.group(1))]
    return type(exc)(f"{exc} (column ({match.group(1)},) is step field {path!r}; "
                     "every step's field must keep the dtype and shape of the "
                     "first step's)")


def _spec_dtype(spec: Any) -> np.dtype[Any]:
    dtype: np.dtype[Any] = np.dtype(getattr(spec.dtype, "as_numpy_dtype",
                                            spec.dtype))
    return dtype


def _compatible(want: tuple[int | None, ...] | None, got: tuple[int, ...]) -> bool:
    if want is None:  # unknown rank
        return True
    return len(want) == len(got) and all(
        w is None or w == g for w, g in zip(want, got, strict=True))


def _spec_shape(spec: Any) -> tuple[int | None, ...] | None:
    try:
        return tuple(None if d is None else int(d) for d in spec.shape)
    except (TypeError, ValueError):  # a shape of unknown rank
        return None


def _same_dtype(want: np.dtype[Any], got: np.dtype[Any]) -> bool:
    if want.kind in "USO":  # tf.string (or str_/bytes_): any string column
        return got.kind in "OSU"
    return want == got


def check_step_signature(table: str, signature: Any, columns: list[Any],
                         num_timesteps: int) -> None:
    """Reverb's legacy rule: each timestep (or the whole trajectory) must
    match the flattened table signature."""
    specs = _nest.flatten(signature)
    step = [(c.dtype, tuple(c.shape[1:])) for c in columns]
    data = ", ".join(f"{_core.dtype_name(d)}{list(s)}" for d, s in step)
    table_sig = ", ".join(f"{_core.dtype_name(_spec_dtype(s))}"
                          f"{list(_spec_shape(s) or ['?'])}" for s in specs)
    if len(specs) != len(columns):
        raise ValueError(
            f"Unable to CreateItem in table '{table}' because Append was called "
            "with a tensor signature inconsistent with table signature.  Append "
            f"for timestep offset 0 was called with {len(columns)} tensors, but "
            f"table requires {len(specs)} tensors per entry.  Table signature: "
            f"[{table_sig}], data signature: [{data}].")
    for i, (spec, (dtype, shape)) in enumerate(zip(specs, step, strict=True)):
        want = _spec_shape(spec)
        want_dtype = _spec_dtype(spec)
        if not _same_dtype(want_dtype, dtype) or not (
                _compatible(want, shape)
                or _compatible(want, (num_timesteps, *shape))):
            raise ValueError(
                f"Unable to CreateItem in table '{table}' because Append was "
                "called with a tensor signature inconsistent with the table "
                f"signature. At timestep offset 0, flattened index {i}, saw a "
                f"tensor of dtype {_core.dtype_name(dtype)}, shape {list(shape)}, "
                f"but expected tensor '{getattr(spec, 'name', None) or ''}' of "
                f"dtype {_core.dtype_name(want_dtype)} and shape compatible with "
                f"{list(want) if want is not None else '<unknown>'}.  (Flattened) "
                f"table signature: [{table_sig}], data signature: [{data}].")
