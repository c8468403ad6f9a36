"""Writer threads and the GIL hand-off (csrc/handoff.h): appends of 16 KiB
or more release the GIL, and a thread taking it back may spin behind
another writer that runs Python.  These tests check that data stays right
under that interleaving and that the spin is bounded whatever the other
threads do (a holder that ran off, one stuck in a long Python loop)."""

from __future__ import annotations

import os
import signal
import threading
import time
import warnings

import numpy as np
import pytest
from threadutil import Worker, join_workers

from fastreplay import Server, Table, TrajectoryWriter
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel

FRAME = (64, 64, 8)  # 32 KiB: above the GIL-release threshold
JOIN_TIMEOUT = 30.0


def frame(writer_id: int, step: int) -> np.ndarray:
    """A frame whose every byte names its writer and step."""
    return np.full(FRAME, (writer_id * 37 + step) % 251, np.uint8)


def write(table: Table, writer_id: int, steps: int) -> None:
    with TrajectoryWriter(table, 3) as w:
        for t in range(steps):
            w.append({"obs": frame(writer_id, t), "id": np.int32(writer_id),
                      "t": np.int32(t)})
            if w.episode_steps >= 3:
                h = w.history
                w.create_item("t", 1.0, {"obs": h["obs"][-3:], "id": h["id"][-1],
                                         "t": h["t"][-3:]})
        w.flush()


def test_items_of_concurrent_writers_read_back_exactly() -> None:
    table = Table("t", sel.Fifo(), sel.Fifo(), 100_000, rl.MinSize(1))
    steps, n = 200, 4
    workers = [Worker(lambda i=i: write(table, i, steps), name=f"w{i}")
               for i in range(n)]
    server = Server([table])
    client = server.localhost_client()
    stop = threading.Event()

    def learn() -> int:  # a learner's gather releases the GIL too
        got = 0
        while not stop.is_set():
            if len(table) >= 32:
                info, _ = client.sample_batch("t", 32, timeout=1.0)
                got += len(info.key)
        return got

    learner = Worker(learn, name="learner")
    learner.start()
    for w in workers:
        w.start()
    join_workers(workers, table.close, JOIN_TIMEOUT)
    stop.set()
    join_workers([learner], table.close, JOIN_TIMEOUT)
    assert learner.result > 0
    assert len(table) == n * (steps - 2)
    for s in table.sample_items(len(table), timeout=5.0):
        wid, obs, ts = s.data  # flattened in sorted key order
        assert ts.tolist() == list(range(ts[0], ts[0] + 3))
        for k, t in enumerate(ts):
            np.testing.assert_array_equal(obs[k], frame(int(wid), int(t)))
    server.stop()


def test_append_is_not_held_up_by_a_holder_that_left() -> None:
    # A writer thread appends (and so is noted as holding the GIL), then ends
    # without another append.  Later appends elsewhere must not wait for it.
    table = Table("t", sel.Fifo(), sel.Fifo(), 100_000, rl.MinSize(1))
    gone = Worker(lambda: write(table, 1, 5), name="gone")
    gone.start()
    join_workers([gone], table.close, JOIN_TIMEOUT)
    start = time.monotonic()
    later = Worker(lambda: write(table, 2, 300), name="later")
    later.start()
    join_workers([later], table.close, 10.0)
    assert time.monotonic() - start < 10.0
    assert len(table) == 3 + 298


def test_append_proceeds_while_another_thread_runs_long_python() -> None:
    table = Table("t", sel.Fifo(), sel.Fifo(), 100_000, rl.MinSize(1))
    stop = threading.Event()

    def python_loop() -> int:  # holds the GIL except at switch intervals
        n = 0
        while not stop.is_set():
            n += 1
        return n

    def write_and_stop() -> None:
        try:
            write(table, 3, 300)
        finally:
            stop.set()

    busy = Worker(python_loop, name="python-loop")
    writer = Worker(write_and_stop, name="writer")
    busy.start()
    writer.start()
    join_workers([writer, busy], table.close, JOIN_TIMEOUT)
    assert busy.result > 0
    assert len(table) == 298


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_child_forked_while_writer_threads_run_can_write() -> None:
    # Writer threads are mid-append (GIL-free, noted in the hand-off state)
    # when the main thread forks; the child has only the forking thread and
    # must write and read back without waiting for the parent's threads.
    table = Table("t", sel.Fifo(), sel.Fifo(), 100_000, rl.MinSize(1))
    workers = [Worker(lambda i=i: write(table, i, 400), name=f"w{i}") for i in range(2)]
    for w in workers:
        w.start()
    time.sleep(0.02)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads
        pid = os.fork()
    if pid == 0:  # child: exit status says whether it managed
        ok = False
        try:
            signal.alarm(20)
            child = Table("t", sel.Fifo(), sel.Fifo(), 1000, rl.MinSize(1))
            write(child, 7, 50)
            (s,) = child.sample_items(1, timeout=5.0)
            ok = len(child) == 48 and int(s.data[0]) == 7
        finally:
            os._exit(0 if ok else 1)
    join_workers(workers, table.close, JOIN_TIMEOUT)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(table) == 2 * 398


def expected_cores() -> int:
    """The hand-off's rule in Python: affinity, capped by a cgroup quota."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
    quota, period = -1, 0
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            q, p = f.read().split()[:2]
            quota, period = (-1 if q == "max" else int(q)), int(p)
    except OSError:
        try:
            with open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") as f:
                quota = int(f.read())
            with open("/sys/fs/cgroup/cpu/cpu.cfs_period_us") as f:
                period = int(f.read())
        except OSError:
            pass
    if quota > 0 and period > 0:
        n = min(n, max(1, quota // period))
    return max(1, n)


def test_hand_off_counts_the_cores_a_container_may_use() -> None:
    from fastreplay import _core

    assert _core._handoff_cores() == expected_cores()
