"""``ReplayBuffer``'s ring form (fastreplay/_rb_ring.py, csrc/ring.c).

Buffers of small raw fields keep their transitions in a ring; the other
ReplayBuffer tests run in that form too.  Here: which buffers take it, a
hypothesis state machine against a pure-Python model (keys, rows,
priorities, probabilities, counters, eviction), the sampling frequencies,
moving into the table (also under a waiting sampler), save / load, threads
and bad input.
"""

from __future__ import annotations

import io
import threading
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from threadutil import Worker, join_workers

from fastreplay import ReplayBuffer, _rb_persist
from fastreplay.errors import InvalidPriorityError, TableClosedError

JOIN_TIMEOUT = 10.0


def rows(ids: Any) -> dict[str, np.ndarray]:
    """Small transitions whose fields derive from the row id."""
    rid = np.asarray(ids, dtype=np.int64)
    return {"rid": rid, "obs": (rid[:, None] * 10 + np.arange(8)).astype(np.float32),
            "act": (rid % 5).astype(np.int32), "done": rid % 3 == 0}


def in_ring(rb: ReplayBuffer) -> bool:
    return rb._ring is not None  # noqa: SLF001 - the form under test


def check(batch: dict[str, np.ndarray]) -> None:
    want = rows(batch["rid"])
    for k, v in want.items():
        np.testing.assert_array_equal(batch[k], v)


# ----- which buffers take the ring form -----

def test_small_raw_fields_take_the_ring() -> None:
    rb = ReplayBuffer(10)
    rb.add_batch(**rows([1, 2]))
    assert in_ring(rb) and len(rb) == 2 and len(rb.chunk_store.stats()) > 0


@pytest.mark.parametrize("kwargs, value", [
    ({}, np.zeros((2, 16, 16), np.uint8)),                 # 256 B: 'auto' compresses
    ({"compression": "lz4"}, np.zeros((2, 4), np.float32)),
])
def test_compressed_fields_take_the_ring(kwargs: dict[str, Any], value: Any) -> None:
    rb = ReplayBuffer(10, **kwargs)
    rows_of = value.copy()
    rows_of[1] = 1  # row i holds i everywhere
    rb.add_batch(x=rows_of)
    assert in_ring(rb) and len(rb) == 2
    store = rb._store.stats()  # noqa: SLF001 - the ring's one-row chunks
    assert store["live_chunks"] == 2 and store["stored_bytes"] < store["raw_bytes"]
    out = rb.sample(6)
    np.testing.assert_array_equal(out["x"], rows_of[out["indexes"].astype(int)])
    rb.add_batch(x=value[:1].repeat(12, 0))  # evicts both, frees their chunks
    assert rb._store.stats()["live_chunks"] == 10  # noqa: SLF001


def test_frame_streams_keep_the_table() -> None:
    rb = ReplayBuffer(10, next_of="x")
    value = np.zeros((2, 4), np.float32)
    rb.add_batch(x=value, next_x=value + 1)
    assert not in_ring(rb) and len(rb) == 2


def test_raw_large_rows_take_the_ring() -> None:
    rb = ReplayBuffer(10, compression=None)
    rb.add_batch(x=np.arange(2 * 84 * 84).reshape(2, 84, 84).astype(np.uint8))
    assert in_ring(rb)
    out = rb.sample(8)
    assert out["x"].shape == (8, 84, 84)
    assert {int(r[0, 0]) for r in out["x"]} <= {0, (84 * 84) % 256}


def test_declared_spec_starts_in_the_ring() -> None:
    rb = ReplayBuffer(5, spec={"obs": (np.float32, (3,)), "act": (np.int64, ())})
    rb.add(obs=[1, 2, 3], act=4)
    assert in_ring(rb)
    np.testing.assert_array_equal(rb.sample(2)["obs"], [[1, 2, 3]] * 2)


# ----- against a pure-Python model -----

class Model:
    """Keys count from 0; the newest ``capacity`` rows stay."""

    def __init__(self, capacity: int, alpha: float | None) -> None:
        self.capacity, self.alpha = capacity, alpha
        self.rows: dict[int, tuple[int, float]] = {}  # key -> (rid, priority)
        self.next_key = self.inserts = self.updates = 0
        self.max_priority = 1.0

    def add(self, rids: list[int], prios: list[float] | None) -> None:
        for i, rid in enumerate(rids):
            p = prios[i] if prios is not None else (
                self.max_priority if self.alpha is not None else 1.0)
            self.rows[self.next_key] = (rid, p)
            self.next_key += 1
            self.inserts += 1
            self.rows.pop(self.next_key - 1 - self.capacity, None)
        if prios:
            self.max_priority = max(self.max_priority, max(prios))

    def update(self, keys: list[int], prios: list[float]) -> None:
        for k, p in zip(keys, prios, strict=True):
            if k in self.rows:
                self.rows[k] = (self.rows[k][0], p)
                self.updates += 1
        if prios:
            self.max_priority = max(self.max_priority, max(prios))

    def probability(self, key: int) -> float:
        if self.alpha is None:
            return 1 / len(self.rows)
        w = {k: p ** self.alpha if p else 0.0 for k, (_, p) in self.rows.items()}
        total = sum(w.values())
        return w[key] / total if total else 1 / len(self.rows)


priorities = st.floats(0.0, 100.0, allow_nan=False)


class RingMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.rb: ReplayBuffer | None = None
        self.rid = 0

    @precondition(lambda self: self.rb is None)
    @rule(capacity=st.integers(1, 12), alpha=st.sampled_from([None, 0.6, 1.0]),
          compression=st.sampled_from(["auto", "lz4"]))
    def make(self, capacity: int, alpha: float | None, compression: str) -> None:
        # 'lz4': every field a one-row chunk the records point to
        self.rb = ReplayBuffer(capacity, alpha=alpha, seed=capacity,
                               compression=compression)
        self.model = Model(capacity, alpha)

    def _ids(self, n: int) -> list[int]:
        ids = list(range(self.rid, self.rid + n))
        self.rid += n
        return ids

    @precondition(lambda self: self.rb is not None)
    @rule(prio=st.none() | priorities)
    def add(self, prio: float | None) -> None:
        assert self.rb is not None
        (rid,) = self._ids(1)
        self.rb.add(**{k: v[0] for k, v in rows([rid]).items()}, priority=prio)
        self.model.add([rid], None if prio is None else [prio])

    @precondition(lambda self: self.rb is not None)
    @rule(n=st.integers(1, 30), data=st.data())
    def add_batch(self, n: int, data: st.DataObject) -> None:
        assert self.rb is not None
        prios = data.draw(st.none() | st.lists(priorities, min_size=n, max_size=n))
        ids = self._ids(n)
        self.rb.add_batch(**rows(ids), priorities=prios)
        self.model.add(ids, prios)

    @precondition(lambda self: self.rb is not None and self.model.alpha is not None
                  and self.model.next_key > 0)
    @rule(bad=st.sampled_from([float("nan"), -1.0]), n=st.integers(1, 4))
    def bad_priority_changes_nothing(self, bad: float, n: int) -> None:
        assert self.rb is not None
        before = len(self.rb)
        with pytest.raises(InvalidPriorityError, match="ReplayBuffer index"):
            self.rb.add_batch(**rows(range(-n, 0)), priorities=[1.0] * (n - 1) + [bad])
        with pytest.raises(InvalidPriorityError):
            self.rb.update_priorities([self.model.next_key - 1], [bad])
        assert len(self.rb) == before

    @precondition(lambda self: self.rb is not None and self.model.next_key > 0)
    @rule(data=st.data())
    def update(self, data: st.DataObject) -> None:
        assert self.rb is not None
        keys = data.draw(st.lists(st.integers(0, self.model.next_key - 1), max_size=6,
                                  unique=True))
        prios = data.draw(st.lists(priorities, min_size=len(keys), max_size=len(keys)))
        self.rb.update_priorities(keys, prios)
        self.model.update(keys, prios)

    @precondition(lambda self: self.rb is not None and self.model.rows)
    @rule(n=st.integers(1, 40))
    def sample(self, n: int) -> None:
        assert self.rb is not None
        out = self.rb.sample(n, beta=0.5)
        check(out)
        for key, rid, prob in zip(out["indexes"].tolist(), out["rid"].tolist(),
                                  out["probabilities"].tolist(), strict=True):
            assert self.model.rows[key][0] == rid
            assert prob == pytest.approx(self.model.probability(key), rel=1e-9)
            assert self.model.probability(key) > 0
        if self.model.alpha is not None:
            w = (len(self.model.rows) * out["probabilities"]) ** -0.5
            np.testing.assert_allclose(out["weights"], w / w.max(), rtol=1e-6)

    @invariant()
    def counters(self) -> None:
        if self.rb is None:
            return
        assert in_ring(self.rb) == (self.model.inserts > 0)
        assert len(self.rb) == len(self.model.rows)
        info = self.rb.info
        assert info.current_size == len(self.model.rows)
        assert info.num_inserts == self.model.inserts
        assert info.num_evictions == self.model.inserts - len(self.model.rows)
        assert info.num_updates == self.model.updates

    @precondition(lambda self: self.rb is not None and self.model.rows)
    @rule()
    def stored_in_order(self) -> None:
        assert self.rb is not None
        f = io.BytesIO()
        self.rb.save_transitions(f)
        f.seek(0)
        saved = np.load(f)
        ordered = sorted(self.model.rows.items())
        assert saved["rid"].tolist() == [rid for _, (rid, _) in ordered]
        if self.model.alpha is not None:
            want = [p for _, (_, p) in ordered]
            assert saved[_rb_persist.NPZ_PRIORITIES].tolist() == want


TestRingMachine = RingMachine.TestCase
TestRingMachine.settings = settings(max_examples=60, stateful_step_count=25,
                                    deadline=None,
                                    suppress_health_check=[HealthCheck.too_slow])


def test_prioritized_frequencies_follow_p_alpha() -> None:
    rb = ReplayBuffer(16, alpha=0.6, seed=11)
    prios = np.array([0.0, 0.5, 1, 2, 4, 8, 16, 32], np.float64)
    rb.add_batch(**rows(range(8)), priorities=prios)
    n = 200_000
    counts = np.zeros(8)
    for _ in range(n // 1000):
        np.add.at(counts, rb.sample(1000)["rid"], 1)
    want = prios ** 0.6 / np.sum(prios ** 0.6)
    assert counts[0] == 0
    assert 0.5 * np.abs(counts / n - want).sum() < 0.01


def test_uniform_frequencies_over_a_wrapped_ring() -> None:
    rb = ReplayBuffer(10, seed=5)
    rb.add_batch(**rows(range(25)))  # only the last 10 stay
    n = 100_000
    got = np.bincount(rb.sample(n)["rid"], minlength=25)
    assert got[:15].sum() == 0
    assert np.abs(got[15:] / n - 0.1).max() < 0.01


# ----- moving into the table -----

def test_the_table_receives_every_transition_and_counter() -> None:
    rb = ReplayBuffer(6, alpha=0.6, seed=1)
    rb.add_batch(**rows(range(9)), priorities=np.arange(1.0, 10.0))
    rb.update_priorities([4, 8, 0], [7.0, 3.0, 1.0])  # key 0 was evicted
    rb.sample(5)
    before = rb.info
    items = rb.table.items()
    assert not in_ring(rb)
    assert items["key"].tolist() == [3, 4, 5, 6, 7, 8]
    assert items["priority"].tolist() == [4.0, 7.0, 6.0, 7.0, 8.0, 3.0]
    after = rb.info
    for field in ("current_size", "num_inserts", "num_evictions", "num_samples",
                  "num_updates", "num_unique_samples"):
        assert getattr(after, field) == getattr(before, field), field
    rb.add_batch(**rows([100]))  # keys go on after the ring's
    assert rb.table.items()["key"].tolist()[-1] == 9
    check(rb.sample(20))


def test_a_waiting_sampler_follows_the_move() -> None:
    rb = ReplayBuffer(10, min_size=4, seed=2)
    rb.add_batch(**rows([0, 1]))
    got: list[Any] = []
    w = Worker(lambda: got.append(rb.sample(3, timeout=JOIN_TIMEOUT)))
    w.start()
    table = rb.table  # moves; the sampler goes on waiting on the table
    rb.add_batch(**rows([2, 3]))
    join_workers([w], table.close, JOIN_TIMEOUT)
    check(got[0])
    assert len(table) == 4


def test_closing_the_table_wakes_a_sampler_that_waited_on_the_ring() -> None:
    rb = ReplayBuffer(10, min_size=4)
    rb.add_batch(**rows([0]))
    errors: list[BaseException] = []

    def sample() -> None:
        try:
            rb.sample(2, timeout=JOIN_TIMEOUT)
        except TableClosedError as exc:
            errors.append(exc)

    w = Worker(sample)
    w.start()
    time.sleep(0.05)
    rb.table.close()
    join_workers([w], lambda: None, JOIN_TIMEOUT)
    assert len(errors) == 1


def test_save_and_load_from_the_ring(tmp_path: Any) -> None:
    rb = ReplayBuffer(5, alpha=1.0, seed=3)
    rb.add_batch(**rows(range(7)), priorities=np.arange(1.0, 8.0))
    rb.update_priorities([3], [9.0])
    rb.sample(4)
    back = ReplayBuffer.load(rb.save(tmp_path / "rb"))
    assert in_ring(rb) and in_ring(back)  # saving leaves the ring form
    for field in ("current_size", "num_inserts", "num_evictions", "num_samples",
                  "num_updates", "num_unique_samples"):
        assert getattr(back.info, field) == getattr(rb.info, field), field
    check(back.sample(10))
    back.update_priorities([6], [50.0])
    back.add_batch(**rows([9]))
    items = back.table.items()  # moves to the table: keys go on after 6
    assert items["key"].tolist() == [3, 4, 5, 6, 7]
    assert items["priority"].tolist() == [9.0, 5.0, 6.0, 50.0, 50.0]
    rb.add_batch(**rows([9]))
    check(rb.sample(10))


def test_load_keeps_the_table_form_when_keys_have_a_gap(tmp_path: Any) -> None:
    rb = ReplayBuffer(5, alpha=1.0, seed=3)
    rb.add_batch(**rows(range(3)))
    assert len(rb.table) == 3  # the table form from here
    with pytest.raises(InvalidPriorityError):
        rb.add_batch(**rows([3, 4]), priorities=[1.0, float("nan")])
    rb.add_batch(**rows([5]))
    assert rb.table.items()["key"].tolist() == [0, 1, 2, 5]  # 3, 4 were refused
    back = ReplayBuffer.load(rb.save(tmp_path / "rb"))
    assert not in_ring(back)
    assert back.table.items()["key"].tolist() == [0, 1, 2, 5]
    check(back.sample(8))


# ----- threads -----

def test_writers_and_samplers_see_whole_rows() -> None:
    rb = ReplayBuffer(500, alpha=0.6, seed=4)
    rb.add_batch(**rows([0]))
    stop = threading.Event()

    def write(base: int) -> None:
        for i in range(200):
            ids = np.arange(base + 10 * i, base + 10 * i + 10)
            rb.add_batch(**rows(ids), priorities=ids % 7 + 1.0)

    def sample() -> None:
        while not stop.is_set():
            out = rb.sample(64)
            check(out)
            rb.update_priorities(out["indexes"], np.ones(64))

    samplers = [Worker(sample) for _ in range(2)]
    writers = [Worker(lambda k=k: write(10_000 * (k + 1))) for k in range(2)]
    for w in samplers + writers:
        w.start()
    join_workers(writers, lambda: None, JOIN_TIMEOUT * 3)
    stop.set()
    join_workers(samplers, lambda: None, JOIN_TIMEOUT)
    assert len(rb) == 500 and rb.info.num_inserts == 4001


# ----- bad input -----

def test_wrong_dtype_or_shape_names_the_field_and_adds_nothing() -> None:
    rb = ReplayBuffer(10)
    rb.add_batch(**rows([0, 1]))
    bad = rows([2])
    bad["obs"] = bad["obs"][:, :4]
    with pytest.raises(ValueError, match="obs"):
        rb.add_batch(**bad)
    with pytest.raises(ValueError, match="rid"):
        rb.add_batch(**{**rows([3]), "rid": np.array([3.5])})
    with pytest.raises(ValueError, match="different numbers of rows"):
        rb.add_batch(**{**rows([3, 4]), "act": np.zeros(1, np.int32)})
    assert len(rb) == 2 and in_ring(rb)
    check(rb.sample(4))


def test_first_insert_refused_leaves_the_buffer_empty() -> None:
    rb = ReplayBuffer(10, alpha=0.6)
    with pytest.raises(InvalidPriorityError, match="ReplayBuffer index 1"):
        rb.add_batch(**rows([0, 1]), priorities=[1.0, float("nan")])
    assert len(rb) == 0
    rb.add_batch(x=np.zeros((2, 3), np.float64))  # other fields are welcome now
    assert len(rb) == 2


@pytest.mark.parametrize("compression", ["lz4", None])
def test_large_samples_decode_on_the_pool(compression: str | None) -> None:
    from fastreplay import _core

    rb = ReplayBuffer(300, alpha=0.6, seed=9, compression=compression)
    ids = np.arange(300)
    frames = np.broadcast_to(ids[:, None, None] % 251, (300, 84, 84)).astype(np.uint8)
    frames[:, 0, :8] = (ids[:, None] >> np.arange(0, 64, 8)) & 255  # the id, bytewise
    rb.add_batch(obs=frames, rid=ids, priorities=ids + 1.0)
    assert in_ring(rb)
    try:
        for threads in (2, 1):  # 256 x 7 KB: past the pool's thresholds for lz4
            _core._gather_threads(threads)
            for _ in range(3):
                out = rb.sample(256 if compression else 1400)
                np.testing.assert_array_equal(out["obs"], frames[out["rid"]])
    finally:
        _core._gather_threads(0)  # back to the default


def test_compressed_rows_decoded_while_writers_evict_them() -> None:
    # Samples decode after the ring's lock is released, holding the chunks:
    # a writer evicting those rows meanwhile must not change what is read.
    rb = ReplayBuffer(64, alpha=0.6, seed=6)

    def frames(ids: np.ndarray) -> np.ndarray:
        out = np.broadcast_to((ids % 251)[:, None, None], (len(ids), 16, 16))
        return out.astype(np.uint8)  # 256 B rows: 'auto' compresses them

    rb.add_batch(obs=frames(np.arange(64)), rid=np.arange(64))
    stop = threading.Event()

    def write() -> None:
        for lo in range(64, 6400, 16):
            ids = np.arange(lo, lo + 16)
            rb.add_batch(obs=frames(ids), rid=ids)

    def sample() -> None:
        while not stop.is_set():
            out = rb.sample(32)
            np.testing.assert_array_equal(out["obs"], frames(out["rid"]))

    sampler, writer = Worker(sample), Worker(write)
    sampler.start()
    writer.start()
    join_workers([writer], lambda: None, JOIN_TIMEOUT * 3)
    stop.set()
    join_workers([sampler], lambda: None, JOIN_TIMEOUT)
    assert in_ring(rb) and rb._store.stats()["live_chunks"] == 64  # noqa: SLF001
