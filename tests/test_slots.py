"""SlotTable (csrc/slots.h) and SlotStore: rows addressed by slot number,
checked against a dict of rows (a hypothesis state machine) and for the
chunks' reference counts (every chunk is freed when its last slot goes)."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fastreplay import _core
from fastreplay.integrations._slots import SlotStore

NAMES = ["obs", "act", "img"]


def rows(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.random((n, 3), dtype=np.float32),  # packed into the record
            rng.integers(0, 9, n),                  # packed
            rng.integers(0, 3, (n, 300), dtype=np.uint8)]  # compressed, one per chunk


def test_write_read_roundtrip_with_repeats_and_overwrites() -> None:
    store = _core.ChunkStore()
    t = _core.SlotTable(8, store)
    a = rows(5, 1)
    t.write([3, 4, 5, 6, 7], NAMES, a)
    got = t.read([7, 3, 3])
    for g, v in zip(got, a, strict=True):
        np.testing.assert_array_equal(g, v[[4, 0, 0]])
    b = rows(2, 2)
    t.write([3, 0], NAMES, b)
    got = t.read([0, 3, 4])
    np.testing.assert_array_equal(got[1], [b[1][1], b[1][0], a[1][1]])
    np.testing.assert_array_equal(got[2][2], a[2][1])
    assert t.size() == 6
    np.testing.assert_array_equal(t.occupied(), [0, 3, 4, 5, 6, 7])
    assert [s[0] for s in t.specs()] == [(3,), (), (300,)]


def test_a_slot_given_twice_keeps_its_last_row() -> None:
    t = _core.SlotTable(4, _core.ChunkStore())
    t.write([1, 1, 2], ["x"], [np.array([10, 11, 12])])
    np.testing.assert_array_equal(t.read([1, 2])[0], [11, 12])
    assert t.size() == 2


def test_counter_counts_every_read_row_including_repeats() -> None:
    t = _core.SlotTable(5, _core.ChunkStore())
    t.write(np.arange(5), ["x"], [np.arange(5)])
    counter = np.zeros(5, dtype=np.int32)
    t.read([1, 1, 1, 4], counter)
    np.testing.assert_array_equal(counter, [0, 3, 0, 0, 1])
    t.erase([2])
    with pytest.raises(KeyError, match="slot 2 is empty"):
        t.read([1, 2], counter)
    np.testing.assert_array_equal(counter, [0, 3, 0, 0, 1])  # nothing counted
    with pytest.raises(ValueError, match="counter has 4 entries"):
        t.read([1], np.zeros(4, dtype=np.int32))


def test_bad_input_names_the_column_and_changes_nothing() -> None:
    t = _core.SlotTable(4, _core.ChunkStore())
    t.write([0, 1], ["a", "b"], [np.arange(2), np.ones((2, 2), np.float32)])
    with pytest.raises(ValueError, match="column b: rows of float64"):
        t.write([2], ["a", "b"], [np.arange(1), np.ones((1, 2))])
    with pytest.raises(ValueError, match="column a: rows of int64 \\(3,\\)"):
        t.write([2], ["a", "b"],
                [np.ones((1, 3), np.int64), np.ones((1, 2), np.float32)])
    with pytest.raises(ValueError, match="gives 1 columns, the slots hold 2"):
        t.write([2], ["a"], [np.arange(1)])
    with pytest.raises(IndexError, match="slot 4 out of range"):
        t.write([3, 4], ["a", "b"], [np.arange(2), np.ones((2, 2), np.float32)])
    with pytest.raises(ValueError, match="leading axis"):
        t.write([2, 3], ["a", "b"], [np.arange(3), np.ones((2, 2), np.float32)])
    with pytest.raises(ValueError, match="compression choices differ"):
        t.write([2], ["a", "b"], [np.arange(1), np.ones((1, 2), np.float32)],
                [_core.COMPRESSION_LZ4] * 2)
    with pytest.raises(ValueError, match="string columns"):
        t.write([2], ["a", "b"], [np.array(["x"]), np.ones((1, 2), np.float32)])
    assert t.size() == 2
    np.testing.assert_array_equal(t.read([1, 0])[0], [1, 0])
    with pytest.raises(KeyError, match="slot 3 is empty"):
        t.read([0, 3])
    with pytest.raises(IndexError, match="slot -1 out of range"):
        t.read([-1])
    with pytest.raises(IndexError, match="slot 9 out of range"):
        t.erase([9])


def test_chunks_are_freed_with_their_last_slot() -> None:
    store = _core.ChunkStore()
    base = store.stats()["live_chunks"]
    t = _core.SlotTable(6, store)
    t.write(np.arange(6), NAMES, rows(6, 3))  # 1 record chunk + 6 image chunks
    assert store.stats()["live_chunks"] == base + 7
    t.write([0, 1], NAMES, rows(2, 4))  # the old record chunk keeps 4 slots
    assert store.stats()["live_chunks"] == base + 7 - 2 + 3
    t.erase([2, 3, 4, 5])  # the old record chunk goes with its last slot
    assert store.stats()["live_chunks"] == base + 3
    t.clear()
    assert store.stats()["live_chunks"] == base and t.size() == 0
    t.write([5], ["other"], [np.zeros((1, 2), np.int8)])  # new columns after clear
    assert t.specs()[0][0] == (2,)
    del t
    assert store.stats()["live_chunks"] == base


def test_compressed_rows_decode() -> None:
    t = _core.SlotTable(3, _core.ChunkStore())
    img = np.zeros((3, 64, 64), np.uint8)
    img[:, ::3] = np.arange(3)[:, None, None]
    t.write([0, 1, 2], ["img"], [img], [_core.COMPRESSION_LZ4])
    assert t.store.stats()["stored_bytes"] < img.nbytes / 4
    np.testing.assert_array_equal(t.read([2, 0, 2])[0], img[[2, 0, 2]])


def test_concurrent_writers_and_readers_see_whole_rows() -> None:
    t = _core.SlotTable(64, _core.ChunkStore())
    t.write(np.arange(64), ["a", "b"], [np.zeros(64), np.zeros((64, 4))])
    stop = threading.Event()
    bad: list[str] = []

    def writer(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for i in range(300):
            s = rng.choice(64, 16, replace=False)
            v = float(seed * 1000 + i)
            t.write(s, ["a", "b"], [np.full(16, v), np.full((16, 4), v)])

    def reader() -> None:
        rng = np.random.default_rng(9)
        while not stop.is_set():
            a, b = t.read(rng.integers(0, 64, 32))
            if not (b == a[:, None]).all():
                bad.append("torn row")

    threads = [threading.Thread(target=writer, args=(k,)) for k in (1, 2)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for th in threads + readers:
        th.start()
    for th in threads:
        th.join(timeout=60)
    stop.set()
    for th in readers:
        th.join(timeout=60)
    assert not bad and t.size() == 64


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_large_reads_on_the_worker_pool_match(threads: int) -> None:
    """Reads of 128 KiB or more are split over the gather pool's threads;
    the rows, the counter and the errors do not depend on how many."""
    try:
        _core._gather_threads(threads)
        t = _core.SlotTable(5000, _core.ChunkStore())
        vals = rows(5000, 11)
        t.write(np.arange(5000), NAMES, vals)
        pick = np.random.default_rng(threads).integers(0, 5000, 3000)
        pick[100:140] = np.arange(700, 740)  # a run of consecutive rows
        counter = np.zeros(5000, dtype=np.int32)
        got = t.read(pick, counter)
        for g, v in zip(got, vals, strict=True):
            np.testing.assert_array_equal(g, v[pick])
        np.testing.assert_array_equal(counter, np.bincount(pick, minlength=5000))
        t.erase([pick[2500]])
        with pytest.raises(KeyError, match=f"slot {pick[2500]} is empty"):
            t.read(pick, counter)
        np.testing.assert_array_equal(counter, np.bincount(pick, minlength=5000))
    finally:
        _core._gather_threads(0)  # back to the default


def test_slotstore_schema_errors_and_pickle() -> None:
    s = SlotStore(10, "mystore")
    s.write([0, 1, 2], {"a": np.arange(3), "b": np.ones((3, 2), np.float32)})
    with pytest.raises(ValueError, match="mystore: the columns differ"):
        s.write([3], {"a": np.arange(1)})
    with pytest.raises(ValueError, match="column 'a' has 2 rows, expected 1"):
        s.write([3], {"a": np.arange(2), "b": np.ones((1, 2), np.float32)})
    with pytest.raises(KeyError, match="mystore: slot 5 is empty"):
        s.read([5])
    t = pickle.loads(pickle.dumps(s))
    assert len(t) == 3 and t.names == ["a", "b"]
    np.testing.assert_array_equal(t.read([2, 0])["a"], [2, 0])
    s.clear()
    assert len(s) == 0 and s.names is None
    assert SlotStore(3).read([]) == {}


class SlotMachine(RuleBasedStateMachine):
    """Writes, erases, reads and clears against a dict of slot -> row."""

    CAP = 12

    def __init__(self) -> None:
        super().__init__()
        self.store = _core.ChunkStore()
        self.t = _core.SlotTable(self.CAP, self.store)
        self.model: dict[int, tuple[float, int, np.ndarray]] = {}
        self.counter = np.zeros(self.CAP, dtype=np.int32)
        self.want_counter = np.zeros(self.CAP, dtype=np.int32)
        self.seed = 0

    @rule(slots=st.lists(st.integers(0, CAP - 1), min_size=1, max_size=20))
    def write(self, slots: list[int]) -> None:
        self.seed += 1
        vals = rows(len(slots), self.seed)
        self.t.write(slots, NAMES, vals)
        for i, s in enumerate(slots):
            self.model[s] = (vals[0][i], vals[1][i], vals[2][i])

    @rule(slots=st.lists(st.integers(0, CAP - 1), max_size=5))
    def erase(self, slots: list[int]) -> None:
        self.t.erase(slots)
        for s in slots:
            self.model.pop(s, None)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        slots = data.draw(st.lists(st.sampled_from(sorted(self.model)), max_size=30))
        got = self.t.read(slots, self.counter)
        for s in slots:
            self.want_counter[s] += 1
        for i, s in enumerate(slots):
            np.testing.assert_array_equal(got[0][i], self.model[s][0])
            assert got[1][i] == self.model[s][1]
            np.testing.assert_array_equal(got[2][i], self.model[s][2])

    @rule()
    def clear(self) -> None:
        self.t.clear()
        self.model.clear()

    @invariant()
    def consistent(self) -> None:
        assert self.t.size() == len(self.model)
        np.testing.assert_array_equal(self.t.occupied(), sorted(self.model))
        np.testing.assert_array_equal(self.counter, self.want_counter)
        # one record chunk per write at most, one image chunk per live slot
        assert self.store.stats()["live_chunks"] <= 2 * len(self.model)


TestSlotMachine = SlotMachine.TestCase
TestSlotMachine.settings = settings(max_examples=60, stateful_step_count=30,
                                    deadline=None)
