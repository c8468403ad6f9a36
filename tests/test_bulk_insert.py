"""Bulk inserts (issue 13, part 4): ``ReplayBuffer.add_batch`` and
``_core.insert_rows`` insert a batch with one sum-tree pass
(``SumTree.set_many``, ``fr_sumtree_fix_up``), evict with one release pass,
and ``add``/``add_batch`` take compiled paths once the first insert fixed the
fields.  Checked here against the pure-Python oracles (``_reference.py``'s
``ReferenceTable``, ``test_sumtree``'s exact ``oracle_find``) and against the
general paths they shortcut.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from _reference import ReferenceTable
from hypothesis import given, settings
from hypothesis import strategies as st
from test_sumtree import U_MAX, assert_found_correctly

import fastreplay
from fastreplay import ChunkStore, ReplayBuffer, Table, _core
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay.errors import DeadlineExceededError, InvalidPriorityError

# ----- the bulk sum-tree update -----

WEIGHTS = st.one_of(st.sampled_from([0.0, 1.0, 2.0, 0.5, 3.0]),
                    st.floats(0.0, 1e6, allow_nan=False, allow_infinity=False))


@settings(max_examples=150, deadline=None)
@given(capacity=st.integers(1, 700),
       rounds=st.lists(st.lists(st.tuples(st.integers(0, 10**6), WEIGHTS),
                                max_size=80), min_size=1, max_size=5))
def test_set_many_equals_single_sets(capacity: int,
                                     rounds: list[list[tuple[int, float]]]) -> None:
    bulk, single = _core.SumTree(capacity), _core.SumTree(capacity)
    weights = [0.0] * capacity
    for changes in rounds:
        idx = [i % capacity for i, _ in changes]
        w = [x for _, x in changes]
        bulk.set_many(idx, w)
        for i, x in zip(idx, w, strict=True):
            single.set(i, x)
            weights[i] = x
        # Every node is recomputed from its children in the same order, so
        # the two trees agree bit for bit, not just up to rounding.
        assert bulk.total == single.total
        assert [bulk.get(i) for i in range(capacity)] == weights
        if single.total > 0:
            us = np.linspace(0.0, U_MAX, 41)
            found = bulk.find_many(us)
            np.testing.assert_array_equal(found, single.find_many(us))
            for u, leaf in zip(us, found, strict=True):
                assert_found_correctly(weights, float(u), int(leaf))


def test_set_many_rejects_bad_input_and_changes_nothing() -> None:
    tree = _core.SumTree(10)
    tree.set_many([1, 2], [1.0, 2.0])
    for idx, w in (([1, 10], [1.0, 1.0]), ([1], [-1.0]), ([1], [math.inf]),
                   ([1, 2], [1.0])):
        with pytest.raises((ValueError, IndexError)):
            tree.set_many(idx, w)
        assert tree.total == 3.0 and tree.get(1) == 1.0


def test_set_many_of_runs_and_scattered_leaves() -> None:
    rng = np.random.default_rng(0)
    n = 100_000
    bulk, single = _core.SumTree(n), _core.SumTree(n)
    for idx in (np.arange(5000, 5256), rng.integers(0, n, 512),
                np.concatenate([np.arange(99_900, n), np.arange(0, 300)])):
        w = rng.random(len(idx)) ** 3
        bulk.set_many(idx, w)
        for i, x in zip(idx.tolist(), w.tolist(), strict=True):
            single.set(i, x)
        assert bulk.total == single.total
        us = rng.random(1000)
        np.testing.assert_array_equal(bulk.find_many(us), single.find_many(us))


# ----- a table fed by add_batch, against the oracle -----


def table_state(rb: ReplayBuffer) -> list[tuple[int, float]]:
    """``(key, priority)`` of every item, in insertion order."""
    items = rb.table.items()
    return list(zip(items["key"].tolist(), items["priority"].tolist(), strict=True))


@settings(max_examples=60, deadline=None)
@given(capacity=st.integers(1, 40), alpha=st.sampled_from([None, 0.6, 1.0]),
       batches=st.lists(st.tuples(st.integers(1, 50), st.booleans()), min_size=1,
                        max_size=8),
       seed=st.integers(0, 2**16))
def test_add_batch_with_evictions_matches_the_oracle(
        capacity: int, alpha: float | None, batches: list[tuple[int, bool]],
        seed: int) -> None:
    rng = np.random.default_rng(seed)
    rb = ReplayBuffer(capacity, alpha=alpha, seed=seed)
    sampler = sel.Uniform() if alpha is None else sel.Prioritized(alpha)
    ref = ReferenceTable(sampler, sel.Fifo(), capacity, rl.MinSize(1))
    key, max_p = 0, 1.0
    for n, given_priorities in batches:
        prios = rng.choice([0.0, 0.5, 1.0, 2.0, 7.0], n) if given_priorities else None
        rb.add_batch(x=np.arange(key, key + n), y=rng.random((n, 3)),
                     priorities=prios)
        if prios is None:
            want = [max_p if alpha is not None else 1.0] * n
        else:
            want = prios.tolist()
            max_p = max(max_p, *want)
        assert ref.insert_batch(range(key, key + n), want) == n
        key += n
        assert table_state(rb) == [(k, p) for k, p, _ in ref.snapshot()]
        info = rb.info
        assert (info.num_inserts, info.num_evictions) == (ref.num_inserts,
                                                         ref.num_evictions)
        # The sum tree: every sampled item's probability is its weight over
        # the total of the stored items' weights.
        batch = rb.sample(64)
        for k, p, x in zip(batch["indexes"].tolist(), batch["probabilities"].tolist(),
                           batch["x"].tolist(), strict=True):
            assert x == k  # the row stored under the item's key
            assert p == pytest.approx(ref.reported_probability(k), rel=1e-12)


def test_evicted_rows_release_their_chunks() -> None:
    rb = ReplayBuffer(1000, alpha=0.6, seed=0)
    assert len(rb.table) == 0  # the table form (small raw rows start in a ring)
    for lo in range(0, 10_000, 256):  # raw rows: one chunk per field per batch
        n = min(256, 10_000 - lo)
        rb.add_batch(obs=np.zeros((n, 8), np.float32), act=np.arange(lo, lo + n))
    assert len(rb) == 1000
    # The batches overlapping the last 1000 rows (9000..9999) stay, no more.
    first = 9000 // 256 * 256
    want = 2 * len(range(first, 10_000, 256))
    assert rb.chunk_store.stats()["live_chunks"] == want
    batch = rb.sample(500)
    assert batch["act"].min() >= 9000
    np.testing.assert_array_equal(batch["act"], batch["indexes"].astype(np.int64))


def test_keys_stay_found_after_churn() -> None:
    # Consecutive keys share index buckets; after many evictions every
    # stored key must still be found (priority updates reach it).
    rb = ReplayBuffer(3000, alpha=1.0, seed=5)
    for lo in range(0, 50_000, 1000):
        rb.add_batch(x=np.arange(lo, lo + 1000))
    keys = np.arange(47_000, 50_000, dtype=np.uint64)
    rb.update_priorities(keys, (keys % 7).astype(np.float64) + 1)
    rb.update_priorities(np.arange(0, 47_000, dtype=np.uint64), np.ones(47_000))
    state = dict(table_state(rb))
    assert sorted(state) == keys.tolist()
    assert all(state[k] == k % 7 + 1 for k in state)


# ----- errors mid-batch leave the table intact -----


@pytest.mark.parametrize("bad", [math.nan, -1.0])
@pytest.mark.parametrize("compiled", [True, False])
def test_invalid_priority_mid_batch_inserts_nothing(bad: float, compiled: bool) -> None:
    rb = ReplayBuffer(50, alpha=0.6, seed=1)
    rb.add_batch(x=np.arange(40))  # the first insert fixes the compiled plan
    if not compiled:
        rb._plan = None
    before, chunks = table_state(rb), rb.chunk_store.stats()["live_chunks"]
    prios = np.ones(30)
    prios[17] = bad
    with pytest.raises(InvalidPriorityError):
        rb.add_batch(x=np.arange(40, 70), priorities=prios)
    assert table_state(rb) == before
    assert rb.chunk_store.stats()["live_chunks"] == chunks
    rb.add_batch(x=np.arange(40, 70))  # still works, evicting as before
    keys = [k for k, _ in table_state(rb)]
    assert keys[:20] == list(range(20, 40)) and len(keys) == 50
    assert keys[20:] == list(range(keys[20], keys[20] + 30)) and keys[20] >= 40


@pytest.mark.parametrize("bad", [
    {"x": np.arange(5.0)},                     # dtype
    {"x": np.arange(10).reshape(5, 2)},        # shape
    {"x": np.arange(5), "y": np.arange(5)},    # a field more
    {"x": 3},                                  # no leading axis
    {"x": np.array(["a", "b"])},               # strings
])
def test_add_batch_unlike_the_plan_raises_and_inserts_nothing(bad: dict) -> None:
    rb = ReplayBuffer(50, seed=1)
    rb.add_batch(x=np.arange(10))
    with pytest.raises((ValueError, TypeError)):
        rb.add_batch(**bad)
    assert len(rb) == 10
    rb.add_batch(x=np.arange(10, 15))
    assert [k for k, _ in table_state(rb)] == list(range(15))  # no key skipped


def test_add_batch_dtype_error_names_the_field() -> None:
    rb = ReplayBuffer(50, seed=1)
    rb.add_batch(obs=np.zeros((4, 3), np.float32), act=np.arange(4))
    with pytest.raises(ValueError, match="field 'obs'"):
        rb.add_batch(obs=np.zeros((4, 3), np.float64), act=np.arange(4))
    with pytest.raises(ValueError, match="field 'act'"):
        rb.add_batch(obs=np.zeros((4, 3), np.float32), act=np.zeros((4, 2)))


def test_rate_limiter_timeout_part_way_keeps_what_was_inserted() -> None:
    # Inserts block 5 ahead of samples: the batch is not admitted as a
    # whole, so the table inserts item by item until the limiter refuses.
    table = Table("t", sel.Prioritized(0.6), sel.Fifo(), 100,
                  rl.SampleToInsertRatio(1.0, 1, 4.0))
    store = ChunkStore()
    n = 12
    with pytest.raises(DeadlineExceededError, match=r"\d+ of 12 inserted"):
        _core.insert_rows(table._core, store, ["x"], [np.arange(n)],
                          np.arange(n, dtype=np.uint64), np.ones(n), 0, 0.01)
    done = len(table)
    assert 0 < done < n
    assert sorted(table.items()["key"].tolist()) == list(range(done))


# ----- compiled paths store what the general paths store -----


def transitions(n: int, lo: int = 0) -> dict[str, np.ndarray]:
    idx = np.arange(lo, lo + n)
    return {"obs": np.stack([idx, -idx, idx * 2], 1).astype(np.float32),
            "act": idx % 6, "rew": idx * 0.25, "done": idx % 5 == 0}


def same_buffers(a: ReplayBuffer, b: ReplayBuffer) -> None:
    assert table_state(a) == table_state(b)
    for key in ("stored_bytes", "raw_bytes", "live_chunks"):
        assert a.chunk_store.stats()[key] == b.chunk_store.stats()[key], key
    sa, sb = a.sample(100), b.sample(100)
    for k in sa:
        np.testing.assert_array_equal(sa[k], sb[k])


@pytest.mark.parametrize("alpha", [None, 0.6])
def test_add_compiled_equals_general(alpha: float | None) -> None:
    data = transitions(120)
    compiled = ReplayBuffer(100, alpha=alpha, seed=3)
    general = ReplayBuffer(100, alpha=alpha, seed=3)
    for i in range(120):
        row = {k: v[i] for k, v in data.items()}
        prio = None if i % 3 else float(i % 11)
        compiled.add(priority=prio, **row)
        general._plan = None  # every add takes the general path
        general.add(priority=prio, **row)
    assert compiled._plan is not None
    same_buffers(compiled, general)


@pytest.mark.parametrize("alpha", [None, 0.6])
def test_add_batch_compiled_equals_general(alpha: float | None) -> None:
    compiled = ReplayBuffer(500, alpha=alpha, seed=4)
    general = ReplayBuffer(500, alpha=alpha, seed=4)
    lo = 0
    for n in (7, 256, 1, 300, 64):
        prios = None if n % 2 else np.arange(n) % 4 + 0.5
        for rb in (compiled, general):
            if rb is general:
                rb._plan = None
            rb.add_batch(priorities=prios, **transitions(n, lo))
        lo += n
    same_buffers(compiled, general)


def test_add_batch_compiled_path_accepts_lists_like_the_general_path() -> None:
    rb = ReplayBuffer(10, seed=0)
    rb.add_batch(a=np.array([1.0, 2.0]), b=np.array([[1, 2], [3, 4]]))
    rb.add_batch(a=[3.0, 4.0], b=[[5, 6], [7, 8]])  # float64, int64 as numpy
    batch = rb.sample(50)
    np.testing.assert_array_equal(batch["b"][:, 0], 2 * batch["a"] - 1)


# ----- bounded chunks -----


def test_raw_image_rows_are_cut_into_bounded_chunks() -> None:
    n = 1000
    frames = (np.arange(n)[:, None, None] + np.zeros((1, 84, 84))).astype(np.uint8)
    rb = ReplayBuffer(2000, compression=None, seed=0)
    rb.add_batch(obs=frames, rid=np.arange(n))
    rows_per_chunk = (1 << 20) // (84 * 84)
    want = -(-n // rows_per_chunk) + 1  # obs chunks, and one for rid
    assert rb.chunk_store.stats()["live_chunks"] == want
    batch = rb.sample(300)
    np.testing.assert_array_equal(batch["obs"][:, 0, 0], batch["rid"].astype(np.uint8))


def test_compiled_paths_in_the_public_module() -> None:
    assert fastreplay.ReplayBuffer is ReplayBuffer
