"""``ReplayBuffer``'s ring form: transitions of small raw fields in a
``_core.Ring`` (csrc/ring.h) instead of its table.

A buffer starts in this form when its fields are fixed-size arrays that are
stored raw (``compression=None``, or ``'auto'`` with rows under 256 bytes)
and it has no frame streams (``next_of`` / ``stack_compress``): the
cpprb-style workload, where a table's per-item bookkeeping (key map, item
record, one chunk reference per field, evicted on every insert) costs more
than the data.  Adding, sampling, priorities, ``len`` and ``info`` stay in
the ring; everything that hands out the table (``table``, ``chunk_store``)
moves the transitions into it once (``to_table``) and the buffer goes on in
table form, with the same keys, priorities and counters (not each
transition's sample count: a table item starts at 0).  ``save`` writes a
table filled the same way without leaving the ring (``snapshot``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fastreplay import _core

#: Rows of at least this many bytes are LZ4-compressed under 'auto'
#: (csrc/column.h, fr_should_compress), so they are not ring rows.
AUTO_COMPRESS_BYTES = 256
#: Rows moved into a table per insert_rows call.
_MOVE_ROWS = 1 << 16


def fits(specs: list[tuple[Any, ...]], modes: list[int]) -> bool:
    """Whether fields of ``specs`` ((dtype, shape) each) stored with
    ``modes`` (COMPRESSION_*) are ring rows: fixed-size numbers kept raw."""
    if not specs:
        return False
    for (dtype, shape), mode in zip(specs, modes, strict=True):
        dt = np.dtype(dtype)
        if dt.kind not in "biufc" or dt.hasobject:
            return False
        row_bytes = dt.itemsize * int(np.prod(shape, dtype=np.int64))
        if row_bytes <= 0:
            return False
        if mode == _core.COMPRESSION_LZ4:
            return False
        if mode == _core.COMPRESSION_AUTO and row_bytes >= AUTO_COMPRESS_BYTES:
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
