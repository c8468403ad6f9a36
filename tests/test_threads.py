"""Concurrency: many threads on one table, and blocking calls (rate-limiter
waits, timeouts, wake-ups, close, GIL release).

Every thread is joined with a timeout; a thread still alive afterwards means
a deadlock and fails the test (the table is closed first so it can exit).
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from threadutil import Worker, join_workers

from fastreplay import Table
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay.errors import DeadlineExceededError, TableClosedError

JOIN_TIMEOUT = 10.0
_DONE_RE = re.compile(r"(\d+) of (\d+) inserted")


def finish(table: Table, workers: list[Worker], timeout: float = JOIN_TIMEOUT) -> None:
    """Join every worker; on a hang close the table, then fail."""
    join_workers(workers, table.close, timeout)


def wait_blocked(worker: Worker, seconds: float = 0.15) -> None:
    """Give `worker` time to enter its blocking call; it must still be in it."""
    time.sleep(seconds)
    assert worker.is_alive(), f"{worker.name} returned instead of blocking"


# ----- (a) stress: inserters, updaters, deleters and samplers together -----

NUM_INSERTERS = 4
KEYS_PER_INSERTER = 1000
MAX_SIZE = 64


def _stress(table: Table, seconds: float) -> None:
    stop = threading.Event()
    owner_of: dict[int, int] = {}
    # Per inserter: key -> last priority written (None after a delete).
    last: list[dict[int, float | None]] = [{} for _ in range(NUM_INSERTERS)]
    sampled = [0, 0]

    def inserter(tid: int) -> None:
        rng = random.Random(tid)
        base = (tid + 1) * 1_000_000
        mine = last[tid]
        while not stop.is_set():
            op = rng.random()
            if op < 0.35:
                k = base + rng.randrange(KEYS_PER_INSERTER)
                p = rng.uniform(0.1, 10.0)
                try:
                    table.insert(k, p, timeout=0.05)
                except DeadlineExceededError:
                    continue
                mine[k] = p
            elif op < 0.7:
                n = rng.randint(1, 8)
                ks = [base + rng.randrange(KEYS_PER_INSERTER) for _ in range(n)]
                ps = [rng.uniform(0.1, 10.0) for _ in range(n)]
                try:
                    done = table.insert_batch(ks, ps, timeout=0.05)
                except DeadlineExceededError as exc:
                    m = _DONE_RE.search(str(exc))
                    assert m is not None, str(exc)
                    done = int(m.group(1))
                for k, p in zip(ks[:done], ps[:done], strict=False):
                    mine[k] = p
            elif op < 0.9:
                # Update keys this thread wrote; absent ones are ignored.
                ks = rng.sample(sorted(mine), min(4, len(mine)))
                ps = [rng.uniform(0.1, 10.0) for _ in ks]
                if rng.random() < 0.5:
                    table.update_priorities(ks, ps)
                else:
                    table.mutate_priorities(updates=dict(zip(ks, ps, strict=False)))
                for k, p in zip(ks, ps, strict=False):
                    # An update only lands on a present key; a key absent now
                    # stays absent until this thread re-inserts it, which
                    # overwrites this entry.
                    mine[k] = p
            else:
                ks = rng.sample(sorted(mine), min(3, len(mine)))
                table.delete(ks)
                for k in ks:
                    mine[k] = None

    def sampler(sid: int) -> None:
        rng = random.Random(100 + sid)
        while not stop.is_set():
            n = rng.randint(1, 32)
            try:
                batch = table.sample(n, timeout=0.05)
            except DeadlineExceededError:
                continue
            assert 1 <= len(batch) <= n
            keys = batch.key.tolist()
            for k in keys:
                assert 1 <= k // 1_000_000 <= NUM_INSERTERS, k
            assert ((batch.probability > 0) & (batch.probability <= 1)).all()
            assert ((batch.table_size >= 1) & (batch.table_size <= MAX_SIZE)).all()
            assert (batch.times_sampled >= 1).all()
            assert (batch.priority > 0).all()
            sampled[sid] += len(batch)

    for tid in range(NUM_INSERTERS):
        for i in range(KEYS_PER_INSERTER):
            owner_of[(tid + 1) * 1_000_000 + i] = tid
    workers = [Worker(lambda t=t: inserter(t), f"inserter-{t}")
               for t in range(NUM_INSERTERS)]
    workers += [Worker(lambda s=s: sampler(s), f"sampler-{s}") for s in range(2)]
    for w in workers:
        w.start()
    time.sleep(seconds)
    stop.set()
    finish(table, workers)

    # --- invariants after the run ---
    items = table.items()
    keys = items["key"].tolist()
    assert len(keys) == len(set(keys)), "duplicate keys in items()"
    assert len(table) == len(keys) <= MAX_SIZE
    for row in items:
        k = int(row["key"])
        assert k in owner_of, f"key {k} was never inserted"
        written = last[owner_of[k]].get(k)
        assert written is not None, f"key {k} is stored but was deleted"
        assert float(row["priority"]) == written, k

    info = table.info
    rli = info.rate_limiter_info
    assert info.current_size == len(keys)
    assert (
        info.num_inserts - info.num_evictions - info.num_deletes - info.num_expired
        == info.current_size
    )
    assert rli.insert_stats.completed == info.num_inserts
    assert rli.deletes == info.num_evictions + info.num_deletes + info.num_expired
    assert rli.sample_stats.completed == info.num_samples == sum(sampled)
    assert info.num_unique_samples <= info.num_inserts
    assert info.num_inserts > MAX_SIZE, "the run should overflow the table"
    assert sum(sampled) > 0

    # Probabilities of a big sample agree with the stored priorities.
    if len(keys) > 0 and table.can_sample(1):
        alpha = info.sampler_options.prioritized.priority_exponent
        weights = {int(r["key"]): float(r["priority"]) ** alpha for r in items}
        total = sum(weights.values())
        batch = table.sample(2000, timeout=0)
        assert len(batch) >= 1
        for k, p in zip(batch.key.tolist(), batch.probability.tolist(), strict=False):
            assert 0 < p <= 1
            assert p == pytest.approx(weights[k] / total, rel=1e-9)


@pytest.mark.parametrize(
    "limiter",
    [
        pytest.param(lambda: rl.MinSize(1), id="MinSize(1)"),
        # Both sides block in turn: inserts at most ~20 ahead of samples.
        pytest.param(lambda: rl.SampleToInsertRatio(1.0, 8, 12.0),
                     id="SampleToInsertRatio(1,8,12)"),
    ],
)
def test_concurrent_inserts_updates_deletes_and_samples(
    limiter: Callable[[], rl.RateLimiter],
) -> None:
    table = Table("stress", sel.Prioritized(0.8), sel.Fifo(), MAX_SIZE, limiter(),
                  seed=7)
    _stress(table, seconds=1.2)


@pytest.mark.slow
def test_concurrent_soak() -> None:
    table = Table("soak", sel.Prioritized(0.6), sel.MinHeap(), MAX_SIZE,
                  rl.SampleToInsertRatio(2.0, 4, 16.0), seed=8)
    _stress(table, seconds=6.0)


def test_concurrent_insert_of_the_same_key() -> None:
    table = Table("same", sel.Uniform(), sel.Fifo(), 10, rl.MinSize(1))

    def hammer() -> None:
        for i in range(2000):
            table.insert(42, float(i), timeout=JOIN_TIMEOUT)

    workers = [Worker(hammer, f"w{i}") for i in range(4)]
    for w in workers:
        w.start()
    finish(table, workers)
    assert table.items()["key"].tolist() == [42]
    info = table.info
    assert info.num_inserts == 1 and info.num_updates == 4 * 2000 - 1
    assert info.rate_limiter_info.insert_stats.completed == 1
    assert table.get(42) == (42, 1999.0, 0)


def test_queue_preserves_order_across_threads() -> None:
    q = Table.queue("q", 8)
    n = 3000

    def producer() -> None:
        for start in range(0, n, 7):
            ks = list(range(start, min(start + 7, n)))
            q.insert_batch(ks, [1.0] * len(ks), timeout=JOIN_TIMEOUT)

    def consumer() -> list[int]:
        got: list[int] = []
        while len(got) < n:
            got += q.sample(min(5, n - len(got)), timeout=JOIN_TIMEOUT).key.tolist()
        return got

    p, c = Worker(producer, "producer"), Worker(consumer, "consumer")
    c.start()
    p.start()
    finish(q, [p, c])
    assert c.result == list(range(n))
    assert len(q) == 0
    info = q.info
    assert info.num_evictions == 0 and info.num_expired == n


def test_reset_under_concurrency() -> None:
    table = Table("reset", sel.Uniform(), sel.Fifo(), 32, rl.MinSize(2), seed=1)
    stop = threading.Event()

    def insert_loop() -> None:
        rng = random.Random(0)
        while not stop.is_set():
            table.insert(rng.randrange(100), 1.0, timeout=0.05)

    def sample_loop() -> None:
        while not stop.is_set():
            try:
                batch = table.sample(8, timeout=0.05)
            except DeadlineExceededError:
                continue
            assert ((batch.table_size >= 1) & (batch.table_size <= 32)).all()

    workers = [Worker(insert_loop, "ins"), Worker(sample_loop, "smp")]
    for w in workers:
        w.start()
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        table.reset()
        time.sleep(0.005)
    stop.set()
    finish(table, workers)
    info = table.info
    rli = info.rate_limiter_info
    assert rli.insert_stats.completed - rli.deletes == info.current_size == len(table)
    assert info.current_size <= 32


# ----- (b) blocking -----


def test_sample_timeout_on_empty_table() -> None:
    table = Table("t", sel.Uniform(), sel.Fifo(), 10, rl.MinSize(1))
    start = time.monotonic()
    with pytest.raises(DeadlineExceededError):
        table.sample(1, timeout=0.2)
    elapsed = time.monotonic() - start
    assert 0.15 <= elapsed < 5.0
    info = table.info.rate_limiter_info.sample_stats
    assert info.blocked == 1 and info.stall_seconds >= 0.15


def test_timeout_is_a_deadline_not_reset_by_wakeups() -> None:
    # Inserts wake the waiting sampler without satisfying MinSize(10); the
    # call must still give up at its original deadline.
    table = Table("t", sel.Uniform(), sel.Fifo(), 100, rl.MinSize(10))
    stop = threading.Event()

    def trickle() -> None:
        k = 0
        while not stop.wait(0.03) and k < 8:
            table.insert(k, 1.0, timeout=0)
            k += 1

    w = Worker(trickle, "trickle")
    w.start()
    start = time.monotonic()
    with pytest.raises(DeadlineExceededError):
        table.sample(1, timeout=0.2)
    elapsed = time.monotonic() - start
    stop.set()
    finish(table, [w])
    assert 0.15 <= elapsed < 3.0


def test_timeout_after_some_samples_returns_partial_batch() -> None:
    table = Table("t", sel.Fifo(), sel.Fifo(), 10, rl.MinSize(1),
                  max_times_sampled=1)
    table.insert_batch([1, 2], [1.0, 1.0], timeout=0)
    start = time.monotonic()
    batch = table.sample(5, timeout=0.2)
    assert 0.15 <= time.monotonic() - start < 5.0
    assert batch.key.tolist() == [1, 2]


def test_insert_timeout_when_limiter_blocks() -> None:
    table = Table("t", sel.Uniform(), sel.Fifo(), 10,
                  rl.SampleToInsertRatio(1.0, 1, 2.0))  # at most 3 inserts ahead
    table.insert_batch([1, 2, 3], [1.0, 1.0, 1.0], timeout=0)
    start = time.monotonic()
    with pytest.raises(DeadlineExceededError):
        table.insert(4, 1.0, timeout=0.2)
    assert 0.15 <= time.monotonic() - start < 5.0
    assert table.get(4) is None
    assert table.info.rate_limiter_info.insert_stats.blocked == 1


def test_blocked_sampler_is_woken_by_insert() -> None:
    table = Table("t", sel.Fifo(), sel.Fifo(), 10, rl.MinSize(1))
    w = Worker(lambda: table.sample(1, timeout=None), "sampler")
    w.start()
    wait_blocked(w)
    table.insert(5, 2.0, timeout=0)
    finish(table, [w])
    assert w.result.key.tolist() == [5]
    stats = table.info.rate_limiter_info.sample_stats
    assert stats.blocked == 1 and stats.stall_seconds > 0


def test_blocked_sampler_waits_for_min_size() -> None:
    table = Table("t", sel.Fifo(), sel.Fifo(), 10, rl.MinSize(3))
    w = Worker(lambda: table.sample(2, timeout=None), "sampler")
    w.start()
    table.insert(1, 1.0, timeout=0)
    table.insert(2, 1.0, timeout=0)
    wait_blocked(w)
    table.insert(3, 1.0, timeout=0)
    finish(table, [w])
    assert w.result.key.tolist() == [1, 1]


def test_blocked_inserter_is_woken_by_sample() -> None:
    table = Table("t", sel.Fifo(), sel.Fifo(), 10,
                  rl.SampleToInsertRatio(1.0, 1, 2.0))
    table.insert_batch([1, 2, 3], [1.0, 1.0, 1.0], timeout=0)
    assert not table.can_insert(1)
    w = Worker(lambda: table.insert(4, 1.0, timeout=None), "inserter")
    w.start()
    wait_blocked(w)
    assert table.get(4) is None
    table.sample(1, timeout=0)
    finish(table, [w])
    assert table.get(4) == (4, 1.0, 0)


def test_blocked_inserter_is_woken_by_delete_and_reset() -> None:
    table = Table("t", sel.Fifo(), sel.Fifo(), 10, rl.RateLimiter(1.0, 1, 0.0, 2.0))
    table.insert_batch([1, 2], [1.0, 1.0], timeout=0)
    w = Worker(lambda: table.insert(3, 1.0, timeout=None), "inserter")
    w.start()
    wait_blocked(w)
    table.delete([1, 2])
    finish(table, [w])
    assert table.items()["key"].tolist() == [3]

    table.reset()
    table.insert_batch([4, 5], [1.0, 1.0], timeout=0)
    w = Worker(lambda: table.insert(6, 1.0, timeout=None), "inserter-2")
    w.start()
    wait_blocked(w)
    table.reset()  # zeroes the limiter counters: stage 1 is free again
    finish(table, [w])
    assert table.items()["key"].tolist() == [6]


def test_blocked_batch_insert_completes_in_pieces() -> None:
    table = Table.queue("t", 2)  # inserts block 2 ahead of samples
    w = Worker(lambda: table.insert_batch(list(range(6)), [1.0] * 6, timeout=None),
               "inserter")
    w.start()
    got: list[int] = []
    deadline = time.monotonic() + JOIN_TIMEOUT
    while len(got) < 6 and time.monotonic() < deadline:
        try:
            got += table.sample(1, timeout=0.5).key.tolist()
        except DeadlineExceededError:
            pass
    finish(table, [w])
    assert w.result == 6
    assert got == list(range(6))


@pytest.mark.parametrize("blocked", ["sample", "insert"])
def test_close_wakes_blocked_calls(blocked: str) -> None:
    table = Table("t", sel.Uniform(), sel.Fifo(), 10,
                  rl.SampleToInsertRatio(1.0, 1, 2.0))
    if blocked == "sample":
        call: Callable[[], Any] = lambda: table.sample(1, timeout=None)  # noqa: E731
    else:
        table.insert_batch([1, 2, 3], [1.0, 1.0, 1.0], timeout=0)
        call = lambda: table.insert(4, 1.0, timeout=None)  # noqa: E731
    workers = [Worker(call, f"{blocked}-{i}") for i in range(3)]
    for w in workers:
        w.start()
    time.sleep(0.15)
    assert all(w.is_alive() for w in workers)
    table.close()
    for w in workers:
        w.join(JOIN_TIMEOUT)
        assert not w.is_alive(), "close() did not wake a blocked call"
        assert isinstance(w.error, TableClosedError), w.error


def test_close_returns_partial_batch_to_blocked_sampler() -> None:
    # max_times_sampled=1: the first sample empties the table, the call then
    # waits for more items until close() hands back what it has.
    table = Table("t", sel.Fifo(), sel.Fifo(), 10, rl.MinSize(1),
                  max_times_sampled=1)
    table.insert(1, 1.0, timeout=0)
    w = Worker(lambda: table.sample(3, timeout=None), "sampler")
    w.start()
    wait_blocked(w)
    table.close()
    finish(table, [w])
    assert w.result.key.tolist() == [1]


def test_gil_is_released_while_blocked() -> None:
    table = Table("t", sel.Uniform(), sel.Fifo(), 10, rl.MinSize(1))
    w = Worker(lambda: table.sample(1, timeout=3.0), "sampler")
    w.start()
    time.sleep(0.05)
    # Pure-Python work and table calls progress while the sampler waits.
    counter = 0
    end = time.monotonic() + 0.2
    while time.monotonic() < end:
        counter += 1
    assert counter > 1000
    assert len(table) == 0 and not table.can_sample(1) and table.can_insert(1)
    assert table.info.current_size == 0
    assert w.is_alive(), "the sampler should still be waiting"
    table.insert(9, 1.0, timeout=0)
    finish(table, [w])
    assert w.result.key.tolist() == [9]


def test_many_blocked_samplers_all_served() -> None:
    table = Table("t", sel.Uniform(), sel.Fifo(), 100, rl.MinSize(1))
    workers = [Worker(lambda: table.sample(2, timeout=None), f"s{i}")
               for i in range(6)]
    for w in workers:
        w.start()
    time.sleep(0.1)
    table.insert_batch(np.arange(10), np.ones(10), timeout=0)
    finish(table, workers)
    for w in workers:
        assert len(w.result) == 2
    assert table.info.num_samples == 12
