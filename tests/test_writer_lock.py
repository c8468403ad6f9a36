"""One writer used from several threads is serialized (Reverb's writer holds
a mutex): appends, items, history reads, flushes and episode ends of
different threads never interleave inside the writer's C state.  Before the
lock, two threads appending to one TrajectoryWriter crashed the process, so
each scenario runs in a child process and a crash fails the test."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from fastreplay import _core

CHILD_TIMEOUT = 120.0

PRELUDE = """
import threading
import numpy as np
import fastreplay
from fastreplay import rate_limiters as rl, selectors as sel

def run(n_threads, fn):
    errors = []
    def body(t):
        try:
            fn(t)
        except BaseException as e:  # reported by the parent
            errors.append(repr(e))
    threads = [threading.Thread(target=body, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
        assert not th.is_alive(), "thread still running"
    assert not errors, errors

def table(name="t"):
    return fastreplay.Table(name, sel.Uniform(), sel.Fifo(), 100_000,
                            rl.MinSize(1), seed=1)
"""


def run_child(body: str) -> None:
    code = PRELUDE + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=CHILD_TIMEOUT)
    assert proc.returncode == 0, (
        f"child exited with {proc.returncode}\n{proc.stdout}\n{proc.stderr}")


def test_threads_appending_to_one_trajectory_writer() -> None:
    run_child("""
        t = table()
        w = fastreplay.TrajectoryWriter(t, num_keep_alive_refs=2000)  # no expiry
        STEPS = 400
        def fn(k):
            big = np.full((64, 64), k, np.float32)  # 16 KiB: drops the GIL
            for i in range(STEPS):
                w.append({"x": big, "i": np.int64(k * STEPS + i),
                          "k%d" % (i % 3): np.float64(i)})
                col = w.history["i"][-1:]
                w.create_item("t", 1.0, {"i": col})
                if i % 50 == 0:
                    w.history["x"][-1].numpy()
                    w.flush()
        run(4, fn)
        w.flush()
        assert len(w.history["i"]) == 4 * 400
        cols = t._core.sample_batch(500)[5]
        assert set(cols[0].reshape(-1).tolist()) <= set(range(1600))
        w.end_episode()
        assert len(t) == 1600
    """)


def test_threads_sharing_a_writer_with_end_episode_and_history() -> None:
    run_child("""
        t = table()
        w = fastreplay.TrajectoryWriter(t, num_keep_alive_refs=2)
        def fn(k):
            for i in range(300):
                if k == 0:
                    w.append({"a": np.zeros(5000, np.float32)})
                elif k == 1 and i % 10 == 0:
                    w.end_episode(clear_buffers=True)
                else:
                    try:
                        h = w.history["a"]
                        if len(h):
                            h[-1].numpy()
                    except (RuntimeError, ValueError):
                        pass  # expired by the other thread: fine
        run(3, fn)
    """)


def test_threads_appending_to_one_structured_writer() -> None:
    run_child("""
        from fastreplay import structured_writer as sw
        t = table()
        step = {"x": np.zeros(5000, np.float32), "y": np.int64(0)}
        cfg = sw.create_config(pattern=sw.pattern_from_transform(
            step, lambda s: {"x": s["x"][-2:]}), table="t")
        w = fastreplay.StructuredWriter(t, [cfg])
        def fn(k):
            for i in range(300):
                w.append({"x": np.full(5000, k, np.float32), "y": np.int64(i)})
        run(4, fn)
        w.flush()
        assert len(t) >= 1
    """)


def test_threads_appending_to_one_vector_writer() -> None:
    run_child("""
        t = table()
        w = fastreplay.VectorTrajectoryWriter(t, num_envs=3, num_keep_alive_refs=2)
        def fn(k):
            for i in range(300):
                w.append({"x": np.full((3, 5000), k, np.float32),
                          "k%d" % (i % 4): np.zeros(3)})
                if k == 0 and i % 30 == 0:
                    w[1].append({"x": np.zeros(5000, np.float32)})  # one env directly
        run(3, fn)
        w.flush()
        assert len(w[0].history["x"]) == 900
    """)


def test_writer_lock_is_reentrant_and_checks_its_owner() -> None:
    core = _core.WriterCore(_core.ChunkStore(), 1, 2)
    with core.lock:
        with core.lock:  # the owner thread may nest
            col = core.add_column("x")  # and calls that lock inside
    assert col == 0
    with pytest.raises(RuntimeError, match="not holding"):
        core.lock.__exit__(None, None, None)


def test_column_indices_from_python_are_range_checked() -> None:
    core = _core.WriterCore(_core.ChunkStore(), 1, 2)
    for call in (lambda: core.column_info(5), lambda: core.read_cell(-1, 0),
                 lambda: core.cells_at(3, [0]), lambda: core.configure(9, 2, None),
                 lambda: core.cells_range(1, 0, 1, 1),
                 lambda: _core.ColumnHistory(core, 2, ("x",))):
        with pytest.raises(IndexError, match="out of range"):
            call()
    assert core.cell_alive(7, 0) is False
