"""``ReplayBuffer``: the cpprb / SB3 / Tianshou-style transition buffer.

Rows are identified by a field ``rid`` (the row id) from which every other
field of the row is derived, so a sampled row can be checked column by column
against what was inserted.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest
from threadutil import Worker, join_workers

from fastreplay import ReplayBuffer
from fastreplay.errors import DeadlineExceededError, InvalidPriorityError

JOIN_TIMEOUT = 10.0


def rows(ids: np.ndarray | list[int]) -> dict[str, Any]:
    """Transitions whose fields are all functions of the row id."""
    rid = np.asarray(ids, dtype=np.int64)
    return {
        "rid": rid,
        "obs": (rid[:, None] * 10 + np.arange(4)).astype(np.float32),
        "action": (rid % 7).astype(np.int32),
        "reward": rid * 0.5,
        "done": rid % 2 == 0,
        "image": (rid[:, None, None] + np.zeros((2, 3), np.int64)).astype(np.uint8),
    }


def check_rows(batch: dict[str, np.ndarray]) -> np.ndarray:
    """Assert every sampled row equals what was inserted; returns the ids."""
    rid = batch["rid"]
    want = rows(rid)
    for name, value in want.items():
        np.testing.assert_array_equal(batch[name], value, err_msg=name)
        assert batch[name].dtype == value.dtype, name
    return rid


def key_of(buf: ReplayBuffer, rid: int, draws: int = 2000) -> int:
    """The item key holding row ``rid`` (found by sampling)."""
    out = buf.sample(draws)
    hits = out["indexes"][out["rid"] == rid]
    assert len(hits), f"row {rid} never sampled"
    return int(hits[0])


def join_all(buf: ReplayBuffer, workers: list[Worker]) -> None:
    join_workers(workers, buf.table.close, JOIN_TIMEOUT)


# ----- shapes, dtypes, data -----


class TestAddAndSample:
    def test_add_one_transition_shapes_and_dtypes(self) -> None:
        buf = ReplayBuffer(10, seed=0)
        buf.add(obs=np.zeros(3, np.float32), action=1, reward=0.5, done=False,
                frame=np.ones((2, 2), np.uint8))
        assert len(buf) == 1
        out = buf.sample(8)
        assert set(out) == {"obs", "action", "reward", "done", "frame",
                            "indexes", "probabilities", "weights"}
        assert out["obs"].shape == (8, 3) and out["obs"].dtype == np.float32
        assert out["action"].shape == (8,) and out["action"].dtype == np.int64
        assert out["reward"].shape == (8,) and out["reward"].dtype == np.float64
        assert out["done"].shape == (8,) and out["done"].dtype == np.bool_
        assert out["frame"].shape == (8, 2, 2) and out["frame"].dtype == np.uint8
        assert out["indexes"].shape == (8,) and out["indexes"].dtype == np.uint64
        assert out["probabilities"].dtype == np.float64
        assert out["weights"].dtype == np.float32  # as cpprb gives them
        np.testing.assert_array_equal(out["probabilities"], 1.0)
        np.testing.assert_array_equal(out["action"], 1)
        np.testing.assert_array_equal(out["done"], False)

    def test_add_batch_shapes_and_dtypes(self) -> None:
        buf = ReplayBuffer(100, seed=1)
        buf.add_batch(**rows(np.arange(20)))
        assert len(buf) == 20
        out = buf.sample(16)
        want = rows([0])
        for name, value in want.items():
            assert out[name].shape == (16,) + value.shape[1:], name
            assert out[name].dtype == value.dtype, name
        for name in ("indexes", "probabilities", "weights"):
            assert out[name].shape == (16,)

    def test_sampled_rows_equal_inserted_rows(self) -> None:
        buf = ReplayBuffer(1000, seed=2)
        buf.add_batch(**rows(np.arange(0, 300)))
        for i in range(300, 320):  # one at a time too
            buf.add(**{k: v[0] for k, v in rows([i]).items()})
        seen: set[int] = set()
        for _ in range(20):
            seen.update(int(r) for r in check_rows(buf.sample(128)))
        assert seen <= set(range(320))
        assert len(seen) > 250

    def test_indexes_are_stable_per_row(self) -> None:
        buf = ReplayBuffer(50, seed=3)
        buf.add_batch(**rows(np.arange(50)))
        key_to_rid: dict[int, int] = {}
        for _ in range(10):
            out = buf.sample(64)
            for key, rid in zip(out["indexes"], out["rid"], strict=False):
                assert key_to_rid.setdefault(int(key), int(rid)) == int(rid)
        assert len(set(key_to_rid.values())) == len(key_to_rid)

    def test_python_scalars(self) -> None:
        buf = ReplayBuffer(4)
        buf.add(i=3, f=2.5, b=True)
        out = buf.sample(2)
        assert out["i"].dtype == np.int64 and out["f"].dtype == np.float64
        assert out["b"].dtype == np.bool_
        np.testing.assert_array_equal(out["i"], [3, 3])

    def test_lists_as_batches(self) -> None:
        buf = ReplayBuffer(4)
        buf.add_batch(x=[1, 2, 3], y=[[0.5, 1.0], [1.5, 2.0], [2.5, 3.0]])
        out = buf.sample(50)
        np.testing.assert_array_equal(out["y"][:, 0], out["x"] - 0.5)
        assert out["y"].shape == (50, 2)

    def test_info_len_capacity(self) -> None:
        buf = ReplayBuffer(7)
        assert len(buf) == 0 and buf.capacity == 7
        buf.add_batch(**rows(np.arange(5)))
        info = buf.info
        assert info.current_size == 5 == len(buf)
        assert info.max_size == 7
        assert info.num_inserts == 5

    def test_same_seed_same_samples(self) -> None:
        a, b = ReplayBuffer(100, seed=42), ReplayBuffer(100, seed=42)
        for buf in (a, b):
            buf.add_batch(**rows(np.arange(100)))
        np.testing.assert_array_equal(a.sample(64)["rid"], b.sample(64)["rid"])

    def test_mismatched_leading_axes_rejected(self) -> None:
        buf = ReplayBuffer(10)
        buf.add_batch(a=np.arange(2), b=np.arange(2))
        with pytest.raises(ValueError):
            buf.add_batch(a=np.arange(3), b=np.arange(2))
        with pytest.raises(ValueError):
            buf.add_batch(a=np.arange(3), b=np.arange(3), priorities=[1.0, 2.0])
        assert len(buf) == 2

    def test_changed_shape_or_dtype(self) -> None:
        # Every row of a field must stack with the others.  A row of another
        # shape, if accepted, makes every later sample() that draws it fail
        # until it is evicted, so it must be rejected; a row of another dtype
        # must be rejected or cast to the field's dtype.
        buf = ReplayBuffer(10, seed=4)
        buf.add_batch(a=np.zeros((2, 3), np.float32))
        with pytest.raises((ValueError, TypeError)):
            buf.add_batch(a=np.zeros((2, 4), np.float32))
        assert len(buf) == 2
        try:
            buf.add_batch(a=np.ones((2, 3), np.float64))
        except (ValueError, TypeError):
            assert len(buf) == 2
        else:
            assert len(buf) == 4
        out = buf.sample(16)
        assert out["a"].shape == (16, 3) and out["a"].dtype == np.float32


# ----- field names -----


class TestFields:
    @pytest.mark.parametrize("fields", [
        {"obs": 1},                          # missing field
        {"obs": 1, "reward": 1.0, "x": 2},   # extra field
        {"obs": 1, "rewards": 1.0},          # renamed field
    ])
    def test_field_name_mismatch(self, fields: dict[str, Any]) -> None:
        buf = ReplayBuffer(10)
        buf.add(obs=0, reward=0.0)
        with pytest.raises(ValueError):
            buf.add(**fields)
        with pytest.raises(ValueError):
            buf.add_batch(**{k: np.asarray([v]) for k, v in fields.items()})
        assert len(buf) == 1

    def test_no_fields(self) -> None:
        with pytest.raises(ValueError):
            ReplayBuffer(10).add()

    def test_keyword_order_does_not_matter(self) -> None:
        buf = ReplayBuffer(10)
        buf.add(a=1, b=2.0)
        buf.add(b=4.0, a=3)
        out = buf.sample(40)
        np.testing.assert_array_equal(out["b"], out["a"] + 1.0)
        assert set(out["a"].tolist()) == {1, 3}

    def test_rejected_first_call_does_not_fix_the_fields(self) -> None:
        # Nothing was inserted, so the buffer has no schema yet.
        buf = ReplayBuffer(10)
        with pytest.raises(ValueError):
            buf.add_batch(a=np.arange(3), b=np.arange(2))
        assert len(buf) == 0
        buf.add(x=1)
        assert len(buf) == 1
        assert set(buf.sample(1)) >= {"x"}


# ----- eviction -----


class TestEviction:
    def test_fifo_eviction_beyond_capacity(self) -> None:
        buf = ReplayBuffer(10, seed=5)
        buf.add_batch(**rows(np.arange(25)))
        assert len(buf) == 10
        seen = set(int(r) for r in check_rows(buf.sample(500)))
        assert seen == set(range(15, 25))
        assert buf.info.num_evictions == 15

    def test_fifo_eviction_one_at_a_time(self) -> None:
        buf = ReplayBuffer(5, seed=6)
        for i in range(12):
            buf.add(**{k: v[0] for k, v in rows([i]).items()})
            assert len(buf) == min(i + 1, 5)
        seen = set(int(r) for r in check_rows(buf.sample(300)))
        assert seen == set(range(7, 12))

    def test_batch_larger_than_capacity(self) -> None:
        buf = ReplayBuffer(4, seed=7)
        buf.add_batch(**rows(np.arange(3)))
        buf.add_batch(**rows(np.arange(3, 13)))
        assert len(buf) == 4
        seen = set(int(r) for r in check_rows(buf.sample(200)))
        assert seen == set(range(9, 13))


# ----- uniform and prioritized sampling -----


class TestWeights:
    def test_uniform_weights_are_ones(self) -> None:
        buf = ReplayBuffer(100, seed=8)
        buf.add_batch(priorities=np.arange(1.0, 51.0), **rows(np.arange(50)))
        out = buf.sample(64, beta=0.7)
        np.testing.assert_array_equal(out["weights"], np.ones(64))
        np.testing.assert_allclose(out["probabilities"], 1 / 50)

    @pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
    @pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
    def test_prioritized_probabilities_and_weights(self, alpha: float,
                                                   beta: float) -> None:
        n = 20
        prios = np.arange(1.0, n + 1.0)
        buf = ReplayBuffer(100, alpha=alpha, seed=9)
        buf.add_batch(priorities=prios, **rows(np.arange(n)))
        out = buf.sample(256, beta=beta)
        rid = check_rows(out)
        want_p = prios[rid] ** alpha / np.sum(prios ** alpha)
        np.testing.assert_allclose(out["probabilities"], want_p, rtol=1e-9)
        w = (n * want_p) ** -beta
        np.testing.assert_allclose(out["weights"], w / w.max(), rtol=1e-6)  # float32
        assert out["weights"].max() == pytest.approx(1.0)

    def test_sampling_frequencies_follow_priorities(self) -> None:
        prios = np.array([1.0, 2.0, 3.0, 4.0])
        buf = ReplayBuffer(10, alpha=0.5, seed=10)
        buf.add_batch(priorities=prios, **rows(np.arange(4)))
        draws = 20000
        counts = np.bincount(buf.sample(draws)["rid"], minlength=4) / draws
        want = prios ** 0.5 / np.sum(prios ** 0.5)
        # Binomial std <= 0.0036 at this N: 0.02 is over 5 sigma.
        np.testing.assert_allclose(counts, want, atol=0.02)

    def test_update_priorities_changes_frequencies(self) -> None:
        buf = ReplayBuffer(10, alpha=1.0, seed=11)
        buf.add_batch(**rows(np.arange(4)))  # all at the max priority 1.0
        draws = 20000
        before = np.bincount(buf.sample(draws)["rid"], minlength=4) / draws
        np.testing.assert_allclose(before, 0.25, atol=0.02)
        keys = [key_of(buf, r) for r in range(4)]
        buf.update_priorities(keys, [1.0, 1.0, 1.0, 7.0])
        out = buf.sample(draws)
        after = np.bincount(out["rid"], minlength=4) / draws
        np.testing.assert_allclose(after, [0.1, 0.1, 0.1, 0.7], atol=0.02)
        np.testing.assert_allclose(
            out["probabilities"], np.where(out["rid"] == 3, 0.7, 0.1), rtol=1e-9)

    def test_update_priorities_with_sampled_indexes(self) -> None:
        buf = ReplayBuffer(10, alpha=1.0, seed=12)
        buf.add_batch(**rows(np.arange(5)))
        out = buf.sample(500)
        # TD-error style update: priority = rid + 1 for every sampled row.
        buf.update_priorities(out["indexes"], out["rid"] + 1.0)
        after = buf.sample(200)
        rid = check_rows(after)
        np.testing.assert_allclose(after["probabilities"], (rid + 1.0) / 15.0)

    def test_stale_keys_are_ignored(self) -> None:
        buf = ReplayBuffer(4, alpha=1.0, seed=13)
        buf.add_batch(**rows(np.arange(4)))
        old = buf.sample(400)["indexes"]
        buf.add_batch(**rows(np.arange(4, 8)))  # evicts every old row
        buf.update_priorities(old, np.full(len(old), 50.0))
        assert len(buf) == 4
        out = buf.sample(100)
        assert set(int(r) for r in check_rows(out)) <= set(range(4, 8))
        np.testing.assert_allclose(out["probabilities"], 0.25)
        assert not set(int(k) for k in old) & set(int(k) for k in out["indexes"])

    def test_new_transitions_get_the_max_priority_seen(self) -> None:
        buf = ReplayBuffer(100, alpha=1.0, seed=14)
        buf.add_batch(priorities=[1.0, 5.0], **rows([0, 1]))
        buf.add(**{k: v[0] for k, v in rows([2]).items()})
        probs = _probabilities_by_rid(buf)
        assert probs[2] == pytest.approx(5.0 / 11.0)
        # An update to a higher priority raises the default too.
        buf.update_priorities([key_of(buf, 0)], [9.0])
        buf.add_batch(**rows([3, 4]))
        probs = _probabilities_by_rid(buf)
        total = 9.0 + 5.0 + 5.0 + 9.0 + 9.0
        assert probs[3] == pytest.approx(9.0 / total)
        assert probs[4] == pytest.approx(9.0 / total)

    def test_rejected_priorities_do_not_raise_the_default(self) -> None:
        # A rejected call changes nothing, including the default priority
        # of later transitions.
        buf = ReplayBuffer(100, alpha=1.0, seed=15)
        buf.add_batch(priorities=[2.0], **rows([0]))
        with pytest.raises(InvalidPriorityError):
            buf.add_batch(priorities=[-1.0, 50.0], **rows([1, 2]))
        buf.add(**{k: v[0] for k, v in rows([3]).items()})
        probs = _probabilities_by_rid(buf)
        assert set(probs) == {0, 3}
        assert probs[3] == pytest.approx(0.5)

    def test_beta_zero_gives_unit_weights(self) -> None:
        buf = ReplayBuffer(10, alpha=0.7, seed=16)
        buf.add_batch(priorities=[1.0, 10.0, 100.0], **rows([0, 1, 2]))
        np.testing.assert_allclose(buf.sample(50, beta=0.0)["weights"], 1.0)


def _probabilities_by_rid(buf: ReplayBuffer, draws: int = 4000) -> dict[int, float]:
    out = buf.sample(draws)
    check_rows(out)
    probs: dict[int, float] = {}
    for rid, p in zip(out["rid"], out["probabilities"], strict=False):
        assert probs.setdefault(int(rid), float(p)) == float(p)
    return probs


# ----- invalid priorities -----


class TestInvalidPriorities:
    @pytest.mark.parametrize("bad", [float("nan"), -1.0, -1e-9])
    def test_add_batch_rejects_and_inserts_nothing(self, bad: float) -> None:
        buf = ReplayBuffer(10, alpha=0.6, seed=17)
        buf.add_batch(**rows([0]))
        with pytest.raises(InvalidPriorityError):
            buf.add_batch(priorities=[1.0, bad, 2.0], **rows([1, 2, 3]))
        assert len(buf) == 1
        assert buf.info.num_inserts == 1
        assert set(int(r) for r in check_rows(buf.sample(20))) == {0}

    @pytest.mark.parametrize("bad", [float("nan"), -2.0])
    def test_add_rejects(self, bad: float) -> None:
        buf = ReplayBuffer(10, alpha=0.6)
        with pytest.raises(InvalidPriorityError):
            buf.add(priority=bad, x=1)
        assert len(buf) == 0
        with pytest.raises(ValueError):  # InvalidPriorityError is a ValueError
            buf.add(priority=bad, x=1)

    @pytest.mark.parametrize("bad", [float("nan"), -3.0])
    def test_update_rejects_and_changes_nothing(self, bad: float) -> None:
        buf = ReplayBuffer(10, alpha=1.0, seed=18)
        buf.add_batch(priorities=[1.0, 3.0], **rows([0, 1]))
        keys = [key_of(buf, 0), key_of(buf, 1)]
        with pytest.raises(InvalidPriorityError):
            buf.update_priorities(keys, [5.0, bad])
        probs = _probabilities_by_rid(buf)
        assert probs[0] == pytest.approx(0.25) and probs[1] == pytest.approx(0.75)
        buf.add(**{k: v[0] for k, v in rows([2]).items()})  # default still 3.0
        probs = _probabilities_by_rid(buf)
        assert probs[2] == pytest.approx(3.0 / 7.0)


# ----- min_size and timeouts -----


class TestMinSize:
    def test_sample_times_out_below_min_size(self) -> None:
        buf = ReplayBuffer(10, min_size=5)
        buf.add_batch(**rows(np.arange(4)))
        start = time.monotonic()
        with pytest.raises(DeadlineExceededError):
            buf.sample(2, timeout=0.1)
        assert 0.08 <= time.monotonic() - start < 3.0
        buf.add(**{k: v[0] for k, v in rows([4]).items()})
        assert len(check_rows(buf.sample(2, timeout=0.1))) == 2

    def test_empty_buffer_times_out(self) -> None:
        with pytest.raises(DeadlineExceededError):
            ReplayBuffer(10).sample(1, timeout=0.01)

    def test_sample_blocks_until_min_size(self) -> None:
        buf = ReplayBuffer(10, min_size=3)
        buf.add_batch(**rows([0, 1]))

        def later() -> None:
            time.sleep(0.1)
            buf.add(**{k: v[0] for k, v in rows([2]).items()})

        w = Worker(later, "late-add")
        w.start()
        start = time.monotonic()
        out = buf.sample(4, timeout=5.0)
        assert time.monotonic() - start >= 0.05
        join_all(buf, [w])
        assert len(check_rows(out)) == 4

    def test_min_size_must_be_positive(self) -> None:
        with pytest.raises(ValueError):
            ReplayBuffer(10, min_size=0)


# ----- threads -----


class TestThreads:
    def test_concurrent_add_batch_and_sample(self) -> None:
        capacity, writers, batches, per_batch = 500, 3, 60, 20
        buf = ReplayBuffer(capacity, alpha=0.6, seed=19)
        stop = threading.Event()
        sampled = [0]

        def writer(w: int) -> None:
            rng = np.random.default_rng(w)
            for b in range(batches):
                start = (w * batches + b) * per_batch
                buf.add_batch(priorities=rng.uniform(0.1, 2.0, per_batch),
                              **rows(np.arange(start, start + per_batch)))

        def sampler() -> None:
            while not stop.is_set():
                try:
                    out = buf.sample(32, timeout=0.05)
                except DeadlineExceededError:
                    continue
                check_rows(out)
                sampled[0] += len(out["rid"])
                buf.update_priorities(out["indexes"],
                                      out["reward"] + 0.1)  # stale keys too

        samplers = [Worker(sampler, f"sampler-{i}") for i in range(2)]
        adders = [Worker(lambda w=w: writer(w), f"writer-{w}") for w in range(writers)]
        for t in samplers + adders:
            t.start()
        try:
            join_all(buf, adders)
        finally:
            stop.set()
            join_all(buf, samplers)
        total = writers * batches * per_batch
        assert len(buf) == capacity
        assert buf.info.num_inserts == total
        assert buf.info.num_evictions == total - capacity
        assert sampled[0] > 0
        out = buf.sample(1000)
        check_rows(out)
        # Every key is unique across threads: indexes map to one row each.
        pairs = set(zip(out["indexes"].tolist(), out["rid"].tolist(), strict=False))
        assert len({k for k, _ in pairs}) == len(pairs)
