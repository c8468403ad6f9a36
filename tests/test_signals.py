"""Ctrl-C during blocking waits (issue 11, part 3).

Every wait of the core (rate limiter in insert and sample, empty table,
writer flush and end_episode) wakes every 50 ms to run Python's signal
handlers, so SIGINT raises KeyboardInterrupt promptly and leaves the table
and the writer consistent.  Two variants:

- a real SIGINT sent to a child process blocked in the call (default
  handler, so KeyboardInterrupt as a user sees it);
- in process, SIGALRM from ``signal.setitimer`` with a handler that raises.

Every wait here is bounded: a call that ignored signals would end with its
own (long) timeout, or the child would be killed, and the test fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from fastreplay import ReplayBuffer, Server, Table, TrajectoryWriter
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay.errors import DeadlineExceededError

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "setitimer"), reason="needs POSIX signals"
)

#: Long enough that reaching it means the signal was ignored.
LONG = 20.0


class Interrupted(Exception):
    """Raised by the test's SIGALRM handler."""


@contextlib.contextmanager
def alarm(after: float, raising: bool = True) -> Iterator[list[int]]:
    """SIGALRM every `after` seconds while the block runs; its handler
    raises Interrupted (or only counts, with raising=False)."""
    calls: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        calls.append(signum)
        if raising:
            raise Interrupted()

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, after, after)
    try:
        yield calls
    finally:
        while True:  # the handler may fire (and raise) in here too
            try:
                signal.setitimer(signal.ITIMER_REAL, 0, 0)
                signal.signal(signal.SIGALRM, old)
                break
            except Interrupted:
                continue


@contextlib.contextmanager
def interrupted() -> Iterator[None]:
    """Expect the handler's Interrupted to end the call: raised while it
    waited, not after the wait ran out (DeadlineExceededError as context)."""
    with pytest.raises(Interrupted) as info:
        yield
    assert not isinstance(info.value.__context__, DeadlineExceededError)


def min_size_table(name: str = "t") -> Table:
    return Table(name, sel.Uniform(), sel.Fifo(), 100, rl.MinSize(1), seed=1)


def full_queue(name: str = "q") -> Table:
    table = Table.queue(name, 1)
    table.insert(1, 1.0)
    return table


# ----- in process: a handler that raises ends the wait -----


def test_sample_on_empty_table_is_interrupted() -> None:
    table = min_size_table()
    with interrupted(), alarm(0.1):
        table.sample(1, timeout=LONG)
    assert table.info.rate_limiter_info.sample_stats.completed == 0
    table.insert(1, 1.0)
    assert table.sample(1, timeout=LONG).key.tolist() == [1]


def test_sample_items_on_empty_table_is_interrupted() -> None:
    table = min_size_table()
    with interrupted(), alarm(0.1):
        table.sample_items(3, timeout=LONG)


def test_partly_filled_sample_is_interrupted_and_releases_its_items() -> None:
    # Two samples are taken, the third waits: the interrupt drops the
    # partial batch (its data references are released).
    table = Table("t", sel.Fifo(), sel.Fifo(), 10, rl.MinSize(1),
                  max_times_sampled=1)
    writer = TrajectoryWriter(table, 1)
    for i in range(2):
        writer.append({"x": np.full(3, i)})
        writer.create_item("t", 1.0, {"x": writer.history["x"][-1:]})
    writer.flush()
    with interrupted(), alarm(0.1):
        table.sample_items(3, timeout=LONG)
    assert len(table) == 0
    writer.append({"x": np.full(3, 7)})
    writer.create_item("t", 1.0, {"x": writer.history["x"][-1:]})
    writer.flush()
    (sample,) = table.sample_items(1, timeout=LONG)
    assert sample.data[0].tolist() == [[7, 7, 7]]


def test_sample_batch_on_empty_table_is_interrupted() -> None:
    server = Server([min_size_table()])
    client = server.localhost_client()
    try:
        with interrupted(), alarm(0.1):
            client.sample_batch("t", 8, timeout=LONG)
    finally:
        server.stop()


def test_client_sample_on_empty_table_is_interrupted() -> None:
    server = Server([min_size_table()])
    client = server.localhost_client()
    try:
        with interrupted(), alarm(0.1):
            next(client.sample("t", 1))
    finally:
        server.stop()


def test_replay_buffer_sample_on_empty_buffer_is_interrupted() -> None:
    buffer = ReplayBuffer(10, seed=1)
    with interrupted(), alarm(0.1):
        buffer.sample(4, timeout=LONG)
    buffer.add(obs=np.zeros(2, np.float32))
    assert buffer.sample(2, timeout=LONG)["obs"].shape == (2, 2)


def test_insert_blocked_by_rate_limiter_is_interrupted() -> None:
    table = full_queue()
    with interrupted(), alarm(0.1):
        table.insert(2, 1.0, timeout=LONG)
    # Nothing half-inserted: the queue still holds item 1 only.
    assert len(table) == 1
    assert table.get(2) is None
    assert table.sample(1, timeout=LONG).key.tolist() == [1]
    table.insert(2, 1.0, timeout=LONG)
    assert table.sample(1, timeout=LONG).key.tolist() == [2]


def test_insert_batch_blocked_by_rate_limiter_is_interrupted() -> None:
    table = Table.queue("q", 2)
    with interrupted(), alarm(0.1):
        table.insert_batch([1, 2, 3, 4], [1.0] * 4, timeout=LONG)
    # Whole items only: the prefix the limiter admitted.
    assert len(table) == 2
    assert table.sample(2, timeout=LONG).key.tolist() == [1, 2]


def blocked_writer() -> tuple[Table, TrajectoryWriter]:
    """A full queue of size 1 and a writer with one item waiting for it."""
    table = full_queue()
    writer = TrajectoryWriter(table, 2)
    writer.append({"x": 5})
    writer.create_item("q", 1.0, {"x": writer.history["x"][-1:]})
    return table, writer


@pytest.mark.parametrize("call", ["flush", "end_episode"])
def test_writer_wait_is_interrupted_and_writer_stays_usable(call: str) -> None:
    table, writer = blocked_writer()
    with interrupted(), alarm(0.1):
        getattr(writer, call)(timeout_ms=int(LONG * 1000))
    assert writer.num_pending_items == 1
    assert writer.episode_steps == 1  # end_episode did not happen
    # Make room: the pending item goes in, and the writer goes on.
    assert table.sample(1, timeout=LONG).key.tolist() == [1]
    getattr(writer, call)(timeout_ms=int(LONG * 1000))
    assert writer.num_pending_items == 0
    assert len(table) == 1


def test_dataset_iteration_is_interrupted() -> None:
    server = Server([min_size_table()])
    client = server.localhost_client()
    dataset = client.dataset("t", 4)
    try:
        with interrupted(), alarm(0.1):
            next(iter(dataset))
    finally:
        dataset.close()
        server.stop()


def test_handler_that_does_not_raise_keeps_the_exact_timeout() -> None:
    table = min_size_table()
    start = time.monotonic()
    with alarm(0.02, raising=False) as calls, pytest.raises(DeadlineExceededError):
        table.sample(1, timeout=0.3)
    assert time.monotonic() - start >= 0.3
    assert calls  # the handlers ran during the wait


def test_waits_in_other_threads_ignore_the_main_threads_signals() -> None:
    import threading

    table = min_size_table()
    box: list[Any] = []

    def worker() -> None:
        box.append(table.sample(1, timeout=LONG).key.tolist())

    thread = threading.Thread(target=worker)
    thread.start()
    with alarm(0.02, raising=False):
        time.sleep(0.2)
    table.insert(3, 1.0)
    thread.join(LONG)
    assert box == [[3]]


# ----- a real SIGINT to a child process -----

CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import fastreplay
    from fastreplay import ReplayBuffer, Server, Table, TrajectoryWriter
    from fastreplay import rate_limiters as rl, selectors as sel

    op = sys.argv[1]
    table = Table("t", sel.Uniform(), sel.Fifo(), 100, rl.MinSize(1))
    queue = Table.queue("q", 1)
    queue.insert(1, 1.0)
    server = Server([table, queue])
    client = server.localhost_client()
    writer = TrajectoryWriter(queue, 2)
    writer.append({"x": 5})
    writer.create_item("q", 1.0, {"x": writer.history["x"][-1:]})
    buffer = ReplayBuffer(10)
    calls = {
        "sample": lambda: table.sample(1),
        "sample_batch": lambda: client.sample_batch("t", 32),
        "client_sample": lambda: next(client.sample("t")),
        "insert": lambda: queue.insert(2, 1.0),
        "flush": lambda: writer.flush(),
        "end_episode": lambda: writer.end_episode(),
        "replay_buffer": lambda: buffer.sample(8, timeout=None),  # waits: asked to
        "dataset": lambda: next(iter(client.dataset("t", 4))),
    }
    print("blocking", flush=True)
    try:
        calls[op]()
    except KeyboardInterrupt:
        assert len(table) == 0 and len(queue) == 1
        assert queue.get(2) is None
        print("interrupted", flush=True)
        sys.exit(0)
    print("returned", flush=True)
    sys.exit(3)
""")


@pytest.mark.parametrize("op", ["sample", "sample_batch", "client_sample", "insert",
                                "flush", "end_episode", "replay_buffer", "dataset"])
def test_sigint_interrupts_a_blocked_call(op: str) -> None:
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    proc = subprocess.Popen([sys.executable, "-c", CHILD, op],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "blocking\n"
        time.sleep(0.3)  # let it reach the wait
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=LONG)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert out == "interrupted\n"
