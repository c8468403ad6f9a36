"""sample_batch's gather on the worker pool (csrc/pool.c, csrc/gather.c).

Every stored row here describes itself: column ``t`` holds the step id and
column ``g`` a generation, and ``obs`` (LZ4) and ``raw`` (stored raw) are
pure functions of both, so any sampled item can be checked without knowing
which item was drawn.  The pool is forced (``_core._gather_threads(n,
always=True)``) so that small test batches take the pooled path.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import subprocess
import sys
import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from fastreplay import (
    ChunkStore,
    ConstantChunkerOptions,
    ReplayBuffer,
    Table,
    TrajectoryWriter,
    _core,
)
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel

#: (threads, always use the pool) configurations; (0, False) is the default.
CONFIGS = [(1, False), (2, True), (3, True), (0, False)]


@pytest.fixture(autouse=True)
def _restore_pool() -> Any:
    yield
    _core._gather_threads(0, always=False)


def frame(t: int, g: int = 0) -> np.ndarray:
    """512 bytes that compress well and differ for every (step, generation)."""
    return ((np.arange(512) // 4 + 7 * t + 131 * g) % 256).astype(np.uint8)


def raw_row(t: int, g: int = 0) -> np.ndarray:
    return np.array([t, g, t ^ g, t * 3 + g], np.int64)


def writer_for(table: Table, chunk: int | None, store: ChunkStore | None = None,
               keep: int = 8) -> TrajectoryWriter:
    options = {} if chunk is None else {
        "chunker_options": ConstantChunkerOptions(chunk, max(chunk, keep))}
    w = TrajectoryWriter(table, keep, chunk_store=store, **options)
    w.configure(("obs",), num_keep_alive_refs=keep, max_chunk_length=chunk,
                compression="lz4")
    w.configure(("raw",), num_keep_alive_refs=keep, max_chunk_length=chunk,
                compression=None)
    return w


def write_steps(w: TrajectoryWriter, table: str, steps: range, g: int,
                length: int) -> None:
    for t in steps:
        w.append({"obs": frame(t, g), "raw": raw_row(t, g), "t": np.int32(t),
                  "g": np.int32(g)})
        if w.episode_steps >= length:
            h = w.history
            w.create_item(table, 1.0, {k: h[k][-length:]
                                       for k in ("obs", "raw", "t", "g")})
    w.flush()


def check_columns(columns: list[np.ndarray], length: int) -> None:
    """Columns in sorted path order (g, obs, raw, t): every row matches its
    step and generation, and each item's steps are consecutive."""
    g, obs, raw, ts = columns
    assert obs.shape[:2] == (len(ts), length)
    for b in range(len(ts)):
        assert ts[b].tolist() == list(range(int(ts[b, 0]), int(ts[b, 0]) + length))
        for i in range(length):
            t, gen = int(ts[b, i]), int(g[b, i])
            np.testing.assert_array_equal(obs[b, i], frame(t, gen))
            np.testing.assert_array_equal(raw[b, i], raw_row(t, gen))


def filled_table(chunk: int | None, length: int) -> Table:
    table = Table("t", sel.Uniform(), sel.Fifo(), 10_000, rl.MinSize(1), seed=7)
    with writer_for(table, chunk) as w:
        write_steps(w, "t", range(60), 0, length)
    return table


@pytest.mark.parametrize("chunk", [1, 4, None])
@pytest.mark.parametrize("length", [1, 3])
def test_pool_sizes_give_identical_bytes(chunk: int | None, length: int) -> None:
    """Byte-identical batches with the pool at 1, 2, 3 and the default
    number of threads (the same table content and seed draw the same items;
    item keys differ, writers draw them at random),
    equal to the single-item read path (sample_items) and to the rows'
    definition."""
    results = []
    for threads, always in CONFIGS:
        _core._gather_threads(threads, always=always)
        table = filled_table(chunk, length)
        batches = [table.sample_batch(50, timeout=5.0) for _ in range(3)]
        for _info, columns, _ in batches:
            check_columns(columns, length)
        results.append([(info.key.copy(), [c.copy() for c in columns])
                        for info, columns, _ in batches])
        if threads == 1:  # the oracle: each item read on its own
            items = {int(s.info.key): s.data
                     for s in table.sample_items(100, timeout=5.0)}
            for info, columns, _ in batches:
                for b, key in enumerate(info.key):
                    if int(key) in items:
                        for c, col in enumerate(columns):
                            np.testing.assert_array_equal(col[b], items[int(key)][c])
    first = results[0]
    for other in results[1:]:
        for (_k0, c0), (_k1, c1) in zip(first, other, strict=True):
            for a, b in zip(c0, c1, strict=True):
                assert a.dtype == b.dtype and a.shape == b.shape
                assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("chunk", [1, 2])
def test_cache_never_serves_evicted_chunks(threads: int, chunk: int) -> None:
    """A table of 3 items evicted and replaced 150 times: the decode caches
    persist across calls, yet every batch shows the current generation's
    bytes (freed chunk addresses are reused by new chunks at once, so a
    cache keyed by address without holding its chunk would serve stale
    rows)."""
    _core._gather_threads(threads, always=True)
    gc.collect()  # earlier tests' tables
    _core._gather_cache(clear=True)
    store = ChunkStore()
    table = Table("t", sel.Uniform(), sel.Fifo(), 3, rl.MinSize(1), seed=1)
    with writer_for(table, chunk, store, keep=2) as w:
        for g in range(150):
            write_steps(w, "t", range(3 * g, 3 * g + 3), g, 1)
            w.end_episode()
            _, columns, _ = table.sample_batch(8, timeout=5.0)
            check_columns(columns, 1)
            assert (columns[0] == g).all()  # only this generation is stored
    assert _core._gather_cache() <= 3 * 2 * 64  # bounded by slots
    table.reset()
    del w
    gc.collect()  # the writer (its keep-alive cells) may sit in a cycle
    assert _core._gather_cache() == 0  # nothing else references them
    assert store.stats()["live_chunks"] == 0


@pytest.mark.parametrize("threads", [1, 2])
def test_cache_reuses_decoded_rows_across_batches(threads: int) -> None:
    """Consecutive batches of one small table hit the persistent cache: it
    holds chunks between calls while the table references them, and lets
    them go once the table does not, also when several threads' caches hold
    the same chunk (each holds a reference: a chunk is only cached when its
    count equals its number of cache entries)."""
    _core._gather_threads(threads, always=threads > 1)
    gc.collect()  # earlier tests' tables
    _core._gather_cache(clear=True)
    table = filled_table(4, 3)
    table.sample_batch(64, timeout=5.0)
    assert _core._gather_cache() > 0
    for _ in range(10):  # with 2 threads, both caches end up with most chunks
        _, columns, _ = table.sample_batch(64, timeout=5.0)
        check_columns(columns, 3)
    table.reset()
    gc.collect()
    assert _core._gather_cache() == 0


def test_replay_buffer_images_with_pool() -> None:
    """ReplayBuffer's one-row LZ4 chunks decode straight into the output
    (the pool's share path): equal bytes at 1 and 2 threads."""
    out = []
    for threads, always in [(1, False), (2, True)]:
        _core._gather_threads(threads, always=always)
        rb = ReplayBuffer(200, alpha=0.6, seed=3, compression="lz4")
        obs = np.stack([frame(t) for t in range(200)])
        rb.add_batch(obs=obs, next_obs=np.roll(obs, -1, axis=0),
                     action=np.arange(200), priorities=np.linspace(0.1, 1, 200))
        batch = rb.sample(128)
        keys = batch["indexes"]
        np.testing.assert_array_equal(batch["obs"], obs[keys])
        np.testing.assert_array_equal(batch["next_obs"], np.roll(obs, -1, axis=0)[keys])
        np.testing.assert_array_equal(batch["action"], keys)
        out.append(batch)
    for k in ("obs", "next_obs", "action", "indexes"):
        assert out[0][k].tobytes() == out[1][k].tobytes()


def test_concurrent_writers_and_samplers() -> None:
    """Two writers evicting each other's items while two samplers gather on
    the pool (one of them finds it busy and uses a private cache): every
    sampled row is consistent; every wait is bounded."""
    _core._gather_threads(2, always=True)
    table = Table("t", sel.Uniform(), sel.Fifo(), 40, rl.MinSize(1), seed=2)
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(base: int) -> None:
        try:
            with writer_for(table, 2, keep=4) as w:
                for g in range(base, base + 60):
                    write_steps(w, "t", range(4 * g, 4 * g + 4), g, 2)
                    w.end_episode()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def sampler() -> None:
        try:
            while not stop.is_set():
                _, columns, _ = table.sample_batch(32, timeout=5.0)
                check_columns(columns, 2)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    writers = [threading.Thread(target=writer, args=(b,)) for b in (0, 1000)]
    writers[0].start()
    writers[0].join(0.0)
    table.sample_batch(1, timeout=30.0)  # something to sample first
    samplers = [threading.Thread(target=sampler) for _ in range(2)]
    for t in writers[1:] + samplers:
        t.start()
    for t in writers:
        t.join(120)
    stop.set()
    for t in samplers:
        t.join(120)
    assert not any(t.is_alive() for t in writers + samplers)
    assert not errors, errors


def _child_sample(q: Any) -> None:
    try:
        table = filled_table(2, 3)
        _, columns, _ = table.sample_batch(64, timeout=5.0)
        check_columns(columns, 3)
        q.put(("ok", _core._gather_threads()))
    except BaseException as e:  # pragma: no cover - reported to the parent
        q.put(("error", repr(e)))


def test_forked_child_samples_on_its_own_pool() -> None:
    """The parent's workers do not exist in a forked child: the child
    starts its own pool and samples correctly (bounded waits)."""
    _core._gather_threads(2, always=True)
    table = filled_table(2, 3)
    for _ in range(3):  # the parent's workers are running
        check_columns(table.sample_batch(64, timeout=5.0)[1], 3)
    for _ in range(2):
        assert _forked_sample() == ("ok", 2)
    check_columns(table.sample_batch(64, timeout=5.0)[1], 3)


def _forked_sample() -> Any:
    """What _child_sample reports from a forked child (waits bounded; a
    child still running after 60 s is killed and the test fails)."""
    q = mp.get_context("fork").Queue()
    p = mp.get_context("fork").Process(target=_child_sample, args=(q,))
    p.start()
    p.join(60)
    if p.is_alive():
        p.kill()
        pytest.fail("forked child hung sampling")
    assert p.exitcode == 0
    return q.get(timeout=10)


def test_fork_while_another_thread_samples() -> None:
    """Forks while a thread keeps the pool busy: the fork waits for the
    batch in flight (bounded) and the child's pool and caches are usable."""
    _core._gather_threads(2, always=True)
    table = filled_table(2, 3)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            table.sample_batch(64, timeout=5.0)

    th = threading.Thread(target=loop)
    th.start()
    try:
        for _ in range(3):
            assert _forked_sample()[0] == "ok"
    finally:
        stop.set()
        th.join(60)
    assert not th.is_alive()


@pytest.mark.parametrize("value, want", [("1", 1), ("3", 3), ("0", None),
                                         ("junk", None)])
def test_environment_variable_sets_pool_size(value: str, want: int | None) -> None:
    code = ("from fastreplay import _core\n"
            "print(_core._gather_threads(), _core._handoff_cores())")
    env = dict(os.environ, FASTREPLAY_GATHER_THREADS=value)
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                         capture_output=True, text=True, timeout=60).stdout.split()
    threads, cores = int(out[0]), int(out[1])
    assert threads == (cores if want is None else want)


def test_gather_threads_rejects_out_of_range() -> None:
    with pytest.raises(ValueError, match="gather threads"):
        _core._gather_threads(65)
    with pytest.raises(ValueError, match="gather threads"):
        _core._gather_threads(-1)


class GatherMachine(RuleBasedStateMachine):
    """Writes, evictions, deletes and resets against sample_batch at random
    pool sizes; the model is the rows' definition plus the set of live
    (step, generation) pairs, so a sampled row from a deleted or replaced
    item is caught."""

    def __init__(self) -> None:
        super().__init__()
        self.gen = 0
        self.step = 0
        self.live: dict[int, tuple[int, int]] = {}  # first step -> (gen, length)

    @initialize(chunk=st.sampled_from([1, 2, 3, None]), length=st.integers(1, 3),
                max_size=st.integers(2, 12))
    def setup(self, chunk: int | None, length: int, max_size: int) -> None:
        self.length = length
        self.store = ChunkStore()
        self.table = Table("t", sel.Uniform(), sel.Fifo(), max_size, rl.MinSize(1),
                           seed=5)
        self.max_size = max_size
        self.writer = writer_for(self.table, chunk, self.store, keep=max(3, length))

    @rule(n=st.integers(1, 6))
    def write(self, n: int) -> None:
        self.gen += 1
        steps = range(self.step, self.step + n + self.length - 1)
        self.step = steps.stop
        write_steps(self.writer, "t", steps, self.gen, self.length)
        self.writer.end_episode()
        for t in steps[: len(steps) - self.length + 1]:
            self.live[t] = (self.gen, self.length)
        while len(self.live) > self.max_size:  # Fifo eviction
            del self.live[min(self.live)]

    @rule(threads=st.sampled_from(CONFIGS), n=st.integers(1, 40))
    def sample(self, threads: tuple[int, bool], n: int) -> None:
        if not self.live:
            return
        _core._gather_threads(*threads)
        _, columns, _ = self.table.sample_batch(n, timeout=5.0)
        check_columns(columns, self.length)
        for b in range(len(columns[3])):
            first = int(columns[3][b, 0])
            assert self.live[first] == (int(columns[0][b, 0]), self.length)

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        if not self.live:
            return
        victims = data.draw(st.lists(st.sampled_from(sorted(self.live)), max_size=3))
        ordered = [int(k) for k in self.table.items()["key"]]  # insertion order
        live = sorted(self.live)  # steps grow with insertion too
        assert len(ordered) == len(live)
        doomed = [ordered[live.index(v)] for v in set(victims)]
        self.table.mutate_priorities(deletes=doomed)
        for v in set(victims):
            del self.live[v]

    @rule()
    def reset(self) -> None:
        self.table.reset()
        self.live.clear()

    @invariant()
    def cache_is_bounded(self) -> None:
        assert _core._gather_cache() <= 4 * 256

    def teardown(self) -> None:
        if hasattr(self, "writer"):
            self.writer.close()
            self.table.reset()
            assert _core._gather_cache() == 0 or self.store.stats()["live_chunks"] >= 0
        _core._gather_threads(0, always=False)


GatherMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestGatherStateMachine = GatherMachine.TestCase
