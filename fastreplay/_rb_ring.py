"""``ReplayBuffer``'s ring form: transitions in a ``_core.Ring``
(csrc/ring.h) instead of its table.

A buffer starts in this form when its fields are fixed-size numbers and it
has no frame streams (``next_of`` / ``stack_compress``): raw fields live in
each transition's record, compressed ones (``'lz4'``, ``'auto'`` rows of
256 bytes or more) as one-row chunks the record points to.  A table's
per-item bookkeeping (key map, item record, one chunk reference per field,
evicted on every insert) costs more than small data, and its sampling is a
serial step in front of a parallel decode.  Adding, sampling, priorities,
``len`` and ``info`` stay in the ring; everything that hands out the table
(``table``, ``chunk_store``) moves the transitions into it once
(``to_table``) and the buffer goes on in table form, with the same keys,
priorities and counters (not each transition's sample count: a table item
starts at 0).  ``save`` writes a table filled the same way without leaving
the ring (``saved_table``); ``load`` reads into the table and moves into a
ring when the buffer fits (``from_table``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from fastreplay import _core, errors, rate_limiters, selectors

if TYPE_CHECKING:
    from collections.abc import Iterator

    from fastreplay.replay_buffer import ReplayBuffer
    from fastreplay.table import Table

#: Rows moved into a table per insert_rows call.
_MOVE_ROWS = 1 << 16


def fits(specs: list[tuple[Any, ...]]) -> bool:
    """Whether fields of ``specs`` ((dtype, shape) each) are ring rows:
    fixed-size numbers (raw ones stored in the record, compressed ones as
    one-row chunks it points to)."""
    if not specs:
        return False
    for dtype, shape in specs:
        dt = np.dtype(dtype)
        if dt.kind not in "biufc" or dt.hasobject:
            return False
        if dt.itemsize * int(np.prod(shape, dtype=np.int64)) <= 0:
            return False
    return True


def table_stats(ring: _core.Ring) -> dict[str, int]:
    """The ring's counters in the form of ``TableCore.stats()`` for a
    buffer's table (one-step items of one episode, FIFO eviction)."""
    s = ring.stats()
    evicted = s["inserts"] - s["size"]
    return {
        "size": s["size"], "max_size": s["capacity"], "max_times_sampled": 0,
        "num_inserts": s["inserts"], "num_updates": s["updates"],
        "num_samples": s["samples"], "num_unique_samples": s["unique_samples"],
        "num_deletes": 0, "num_evictions": evicted, "num_expired": 0,
        "rl_inserts": s["inserts"], "rl_samples": s["samples"], "rl_deletes": evicted,
        "insert_stall_ns": 0, "sample_stall_ns": s["sample_stall_ns"],
        "num_insert_stalls": 0, "num_sample_stalls": s["sample_stalls"],
        "num_episodes": 1 if s["size"] else 0, "num_deleted_episodes": 0,
    }


def fill_table(ring: _core.Ring, table_core: Any, store: _core.ChunkStore,
               keys: _core.RowKeys, paths: list[str], modes: list[int],
               keep_alive: int) -> None:
    """Insert the ring's transitions, oldest first, into an empty table as
    one-step items with their keys and priorities, then set its counters to
    the ring's (chunk keys come from ``keys``)."""
    size = len(ring)
    for first in range(0, size, _MOVE_ROWS):
        n = min(_MOVE_ROWS, size - first)
        item_keys, prios, _times, columns = ring.read(first, n)
        _key, chunk_key = keys.reserve(0, len(paths) * n)
        _core.insert_rows(table_core, store, paths, columns, item_keys, prios,
                          chunk_key, None, keep_alive, None, modes)
    s = table_stats(ring)
    _core.restore_counters(table_core, s["rl_inserts"], s["rl_samples"],
                           s["rl_deletes"], s)


def start(rb: ReplayBuffer) -> None:
    """Put ``rb`` in the ring form if its fields fit and nothing is stored
    (the first insert, or a declared spec)."""
    if rb._table_only or len(rb._table) or rb._ring is not None:
        return
    ring = _new_ring(rb, rb._keys.reserve(0, 0)[0])
    if ring is not None:
        rb._ring = ring


def _new_ring(rb: ReplayBuffer, first_key: int) -> _core.Ring | None:
    """A ring for ``rb``'s fields with keys from ``first_key``, or None when
    they do not fit the ring form or capacity x record bytes cannot be
    mapped (the table then: it grows as it fills)."""
    specs, names = rb._specs, rb._fields
    if (rb._frames is not None or specs is None or names is None or rb._plan is None
            or not fits(specs)):
        return None
    try:
        return _core.Ring(
            "replay_buffer", rb.capacity, rb._plan, [dt for dt, _ in specs],
            [shape for _, shape in specs], rb._prioritized, rb._alpha, first_key,
            rb._seed, rb._store)
    except MemoryError:
        return None


def add(rb: ReplayBuffer, values: list[Any], prios: Any, default: float,
        batched: bool) -> bool:
    """Add through ``rb``'s ring: True when added; False when it has none,
    when the values are not its rows, or when it has moved to the table
    (after waiting for the move to complete)."""
    ring = rb._ring
    if ring is None:
        return False
    key = ring.add(rb._paths, values, prios, default, batched)
    if key == -_core.RING_MOVED:
        wait_for_move(rb)
        return False
    return bool(key >= 0)


def wait_for_move(rb: ReplayBuffer) -> None:
    """Return once a move into the table (``to_table``, which holds the
    buffer's lock throughout) is complete: for calls the sealed ring
    refused, which then go to the table."""
    with rb._lock:
        pass


def to_table(rb: ReplayBuffer) -> None:
    """Leave the ring form for good: move the transitions into the table
    (samplers waiting on the ring go on waiting on the table)."""
    with rb._lock:
        rb._table_only = True
        ring = rb._ring
        if ring is None:
            return
        ring.seal()
        _fill(rb, ring, rb._table)
        behind = ring.stats()["next_key"] - rb._keys.reserve(0, 0)[0]
        rb._keys.reserve(max(0, behind), 0)  # keys go on after the ring's
        rb._ring = None


def saved_table(rb: ReplayBuffer) -> tuple[Table, int]:
    """The table ``save`` writes and the next item key: in the ring form a
    new table filled with the ring's transitions (the buffer stays)."""
    ring = rb._ring
    if ring is None:
        return rb._table, int(rb._keys.reserve(0, 0)[0])
    table = rb._table.replace(rate_limiter=rate_limiters.MinSize(
        rb._config["min_size"]))
    _fill(rb, ring, table)
    return table, int(ring.stats()["next_key"])


def _fill(rb: ReplayBuffer, ring: _core.Ring, table: Table) -> None:
    from fastreplay.replay_buffer import _KEEP_ALIVE

    fill_table(ring, table._core, rb._store, rb._keys, rb._paths,
               [rb._mode(k) for k in rb._fields or ()], _KEEP_ALIVE)


def transition_blocks(table: Table, block: int | None = _MOVE_ROWS
                      ) -> Iterator[tuple[Any, Any, Any, list[Any]]]:
    """``(keys, priorities, times_sampled, columns)`` of the table's items
    with data, oldest first, ``block`` at a time (None: all at once): each
    block is put into a scratch FIFO table sampled once per item, which
    gathers it as ``sample`` does (also frame streams)."""
    from fastreplay.table import Table

    items, chunks = _core.export_items(table._core)
    items = [it for it in items if it[3] is not None]
    step = block or max(1, len(items))
    for lo in range(0, len(items), step):
        part = items[lo:lo + step]
        scratch = Table("transitions", selectors.Fifo(), selectors.Lifo(), len(part),
                        rate_limiters.MinSize(1), max_times_sampled=1)
        for key, priority, _, columns, sid in part:
            _core.restore_item(scratch._core, key, priority, 0, columns, chunks, sid)
        _core.restore_counters(scratch._core, len(part), 0, 0, {})
        keys, _, prios, _, _, columns, *_ = scratch._core.sample_batch(len(part), 0)
        want = np.array([it[0] for it in part], dtype=np.uint64)
        if not np.array_equal(keys, want):  # never: FIFO gives insertion order
            raise errors.InternalError("transitions came back out of order")
        yield keys, prios, np.array([it[2] for it in part], np.int64), columns


def from_table(rb: ReplayBuffer) -> None:
    """After ``load``: move the table's transitions into a ring when the
    buffer fits the ring form and its keys run on without a gap to the
    next key (else it stays in the table form)."""
    if rb._ring is not None:
        return
    items = rb._table.items()
    next_key = int(rb._keys.reserve(0, 0)[0])
    keys = items["key"].astype(np.uint64)
    first = next_key - len(keys)
    if first < 0 or not np.array_equal(keys, np.arange(first, next_key,
                                                       dtype=np.uint64)):
        return
    ring = _new_ring(rb, first)
    if ring is None:
        return
    for block_keys, prios, _, columns in transition_blocks(rb._table):
        if ring.add(rb._paths, columns, prios, 1.0, True) != int(block_keys[0]):
            raise errors.InternalError("ReplayBuffer.load: ring keys differ")
    s = rb._table._core.stats()
    ring.restore({"inserts": s["num_inserts"], "samples": s["num_samples"],
                  "updates": s["num_updates"],
                  "unique_samples": s["num_unique_samples"]}, items["times_sampled"])
    rb._table.reset()
    rb._ring, rb._table_only = ring, False
