"""Batched inserts (``ReplayBuffer.add_batch``, ``_core.insert_rows``) cut
compressed columns into chunks by the writer's chunker rule, so a read
decodes at most one bounded chunk whatever the batch size; raw columns
(rows read in place) stay one chunk per batch."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import numpy as np
import pytest

from fastreplay import ChunkStore, ReplayBuffer, Table, _core
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel

pytestmark = pytest.mark.skipif(not _core.LZ4_AVAILABLE, reason="needs lz4")


@pytest.fixture(autouse=True)
def _empty_output_pool() -> Iterator[None]:
    """Large batches come from the output pool; leave it empty for the
    tests that count its blocks (test_output_pool.py)."""
    yield
    gc.collect()
    _core._pool_clear()


def frames(ids: np.ndarray) -> np.ndarray:
    """84x84 uint8 frames that compress well and differ per id."""
    base = (np.arange(84 * 84, dtype=np.int64) // 16).reshape(84, 84)
    return ((base[None] + 3 * ids[:, None, None]) % 256).astype(np.uint8)


def test_add_batch_makes_one_chunk_per_compressed_row_like_add() -> None:
    n = 300
    ids = np.arange(n)
    batched = ReplayBuffer(1000, seed=1)
    single = ReplayBuffer(1000, seed=1)
    assert len(batched.table) == len(single.table) == 0  # the table form
    batched.add_batch(obs=frames(ids), rid=ids)
    for i in ids:
        single.add(obs=frames(np.array([i]))[0], rid=np.int64(i))
    # obs: one chunk per row (the chunker's length for one-step items);
    # rid (8-byte rows, stored raw): one chunk for the whole batch.
    assert batched._store.stats()["live_chunks"] == n + 1
    assert single._store.stats()["live_chunks"] == 2 * n
    # Both compress the frames the same way.
    assert (batched._store.stats()["stored_bytes"] - 8 * n
            == single._store.stats()["stored_bytes"] - 8 * n)


def test_add_batch_rows_read_back_exactly() -> None:
    n = 257
    ids = np.arange(n)
    buf = ReplayBuffer(1000, seed=2)
    buf.add_batch(obs=frames(ids), rid=ids, reward=ids * 0.5)
    for _ in range(5):
        batch = buf.sample(64)
        np.testing.assert_array_equal(batch["obs"], frames(batch["rid"]))
        np.testing.assert_array_equal(batch["reward"], batch["rid"] * 0.5)


@pytest.mark.parametrize("length", [1, 3, 7, 100])
def test_insert_rows_splits_by_max_chunk_length(length: int) -> None:
    n = 50
    ids = np.arange(n)
    store = ChunkStore()
    table = Table("t", sel.Uniform(), sel.Fifo(), 1000, rl.MinSize(1), seed=3)
    done = _core.insert_rows(table._core, store, ["obs", "rid"],
                             [frames(ids), ids], ids.astype(np.uint64),
                             np.ones(n), 7, None, max(length, 1), length)
    assert done == n
    want_obs_chunks = -(-n // min(length, n))
    assert store.stats()["live_chunks"] == want_obs_chunks + 1
    # Rows at every offset of every chunk read back (item key = row id).
    keys, _, _, _, _, columns, _, _ = table._core.sample_batch(4 * n)
    assert len(set(keys.tolist())) > n // 2
    np.testing.assert_array_equal(columns[1], keys.astype(np.int64))
    np.testing.assert_array_equal(columns[0], frames(keys.astype(np.int64)))
    keys, _, _, _, _, data = table._core.sample(n, with_data=True)
    assert data is not None
    for key, item in zip(keys, data, strict=True):  # the per-item read path
        obs, rid = item.columns()
        assert int(rid) == int(key)
        np.testing.assert_array_equal(obs, frames(np.array([int(key)]))[0])


def test_insert_rows_rejects_invalid_chunker_options() -> None:
    table = Table("t", sel.Fifo(), sel.Fifo(), 10, rl.MinSize(1))
    with pytest.raises(ValueError, match="chunker options"):
        _core.insert_rows(table._core, ChunkStore(), ["x"], [np.zeros((2, 300))],
                          [1, 2], [1.0, 1.0], 0, None, 1, 5)
    with pytest.raises(ValueError, match="names and values"):
        _core.insert_rows(table._core, ChunkStore(), [], [np.zeros((2, 300))],
                          [1, 2], [1.0, 1.0], 0, None)
    assert len(table) == 0
