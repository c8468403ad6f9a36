"""Reads decode a compressed chunk only as far as the rows they use
(LZ4_decompress_safe_partial), and the gather cache remembers how many rows
of a chunk it holds.  Items at every offset of their chunks, of several
lengths, read back exactly through both read paths."""

from __future__ import annotations

import numpy as np
import pytest

from fastreplay import (
    ChunkStore,
    ConstantChunkerOptions,
    Server,
    Table,
    TrajectoryWriter,
)
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel


def frame(t: int) -> np.ndarray:
    """1 KiB that compresses well and differs for every step."""
    return ((np.arange(1024) // 4 + 7 * t) % 256).astype(np.uint8)


@pytest.mark.parametrize("length", [1, 2, 3, 5, 8, 11])
def test_items_at_every_chunk_offset_read_back_exactly(length: int) -> None:
    store = ChunkStore()
    table = Table("t", sel.Uniform(), sel.Fifo(), 10_000, rl.MinSize(1))
    server = Server([table])
    client = server.localhost_client()
    with TrajectoryWriter(table, 16, chunk_store=store,
                          chunker_options=ConstantChunkerOptions(8, 16)) as w:
        for t in range(48):
            w.append({"obs": frame(t), "t": np.int32(t)})
            if w.episode_steps >= length:
                h = w.history
                w.create_item("t", 1.0, {"obs": h["obs"][-length:],
                                         "t": h["t"][-length:]})
        w.flush()
    stats = store.stats()
    assert stats["stored_bytes"] < stats["raw_bytes"] / 4  # chunks are compressed
    assert len(table) == 48 - length + 1

    # sample_batch: the gather path with its cache of partly decoded chunks.
    # Draws mix items of all offsets, so a cached chunk is often asked for
    # more rows than an earlier item decoded.
    for _ in range(4):
        _, data = client.sample_batch("t", 128, timeout=5.0)
        for obs, ts in zip(data["obs"], data["t"], strict=True):
            assert ts.tolist() == list(range(int(ts[0]), int(ts[0]) + length))
            np.testing.assert_array_equal(obs, np.stack([frame(int(t)) for t in ts]))

    # sample_items: one item at a time (fr_chunk_read).
    for s in table.sample_items(len(table), timeout=5.0):
        obs, ts = s.data  # flattened in sorted key order
        np.testing.assert_array_equal(obs, np.stack([frame(int(t)) for t in ts]))
    server.stop()
