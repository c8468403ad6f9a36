"""Large sample_batch outputs live in pooled memory (fastreplay/_outpool.pxi):
an array handed out keeps its memory for as long as it or any view of it
lives, and only then does the next batch reuse the memory."""

from __future__ import annotations

import gc
import sys
from typing import Any

import numpy as np

from fastreplay import Server, Table, TrajectoryWriter, _core
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel

ROW = 64 * 1024  # 64 KiB per step: a batch of 32 length-2 items is 4 MiB
BATCH_BYTES = 32 * 2 * ROW


STEPS = [np.random.default_rng(t).integers(0, 255, ROW, dtype=np.uint8)
         for t in range(40)]


def filled_client() -> tuple[Server, Any]:
    table = Table("t", sel.Uniform(), sel.Fifo(), 10_000, rl.MinSize(1))
    server = Server([table])
    with TrajectoryWriter(table, 2) as w:
        for t, x in enumerate(STEPS):
            w.append({"x": x, "t": np.int32(t)})
            if w.episode_steps >= 2:
                w.create_item("t", 1.0, {"x": w.history["x"][-2:],
                                         "t": w.history["t"][-2:]})
    return server, server.localhost_client()


def address(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


def test_batches_kept_by_the_caller_are_not_overwritten() -> None:
    server, client = filled_client()
    gc.collect()
    _core._pool_clear()  # blocks other tests' batches left behind
    kept = []
    for _ in range(6):  # more batches alive than the pool has slots
        _, data = client.sample_batch("t", 32, timeout=5.0)
        kept.append((data["x"], data["x"].copy(), data["t"].copy()))
    for x, snapshot, _ in kept:
        np.testing.assert_array_equal(x, snapshot)
    assert len({address(x) for x, _, _ in kept}) == len(kept)
    del kept, x, data
    gc.collect()
    blocks, held = _core._pool_stats()
    assert blocks == 4 and held == 4 * BATCH_BYTES  # the pool keeps 4 at most
    server.stop()


def test_memory_is_reused_once_every_view_is_gone() -> None:
    server, client = filled_client()
    gc.collect()
    _core._pool_clear()
    _, data = client.sample_batch("t", 32, timeout=5.0)
    first = address(data["x"])
    view = data["x"][3]  # a view keeps the whole batch's memory
    del data
    gc.collect()
    _, data2 = client.sample_batch("t", 32, timeout=5.0)
    assert address(data2["x"]) != first
    assert view.flags.writeable and view.base is not None
    second = address(data2["x"])
    assert _core._pool_stats() == (0, 0)
    del data2, view
    gc.collect()
    assert _core._pool_stats() == (2, 2 * BATCH_BYTES)
    _, data3 = client.sample_batch("t", 32, timeout=5.0)
    assert _core._pool_stats() == (1, BATCH_BYTES)
    assert address(data3["x"]) in {first, second}  # reused, not fresh
    x = data3["x"]
    assert x.flags.writeable and x.flags.c_contiguous and x.shape == (32, 2, ROW)
    for item, ts in zip(x, data3["t"], strict=True):  # every byte rewritten
        np.testing.assert_array_equal(item, np.stack([STEPS[t] for t in ts]))
    server.stop()


def test_exporting_pooled_memory_leaks_no_reference() -> None:
    # Regression: the buffer export once leaked a reference to None per
    # sample_batch column (Cython presets view.obj to None).
    before = sys.getrefcount(None)
    for _ in range(1000):
        a = np.frombuffer(_core._PooledBuffer(2 << 20), dtype=np.uint8)
        view = memoryview(a)
        del view, a
    assert sys.getrefcount(None) - before < 100
