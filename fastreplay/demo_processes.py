"""``fastreplay demo --processes``: the demo's main job across processes.

The same actors and learner as ``fastreplay demo`` (``fastreplay.demo``),
each in its own process (multiprocessing's ``spawn`` context), all
connecting with ``Client('127.0.0.1:PORT')`` to a ``Server`` that this
process hosts: the demo's process is the server process.  Actors write
through ``TrajectoryWriter`` (items staged in the actor's process and
shipped over the port), the learner samples with ``sample_batch`` and sends
priorities back over the port.

Each child talks to this process over one pipe: it says when it is ready
(connected, frames made), reports its counts for the progress line, and
sends its final counts and peak memory when told to stop.  A child whose
pipe closes (this process died) exits at once.  Every wait is bounded: a
child that does not start, fails or does not stop in time makes the demo
stop every child (terminate, then kill) and raise ``DemoError``; Ctrl-C
does the same and raises KeyboardInterrupt.  No child outlives the demo.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, TextIO

import fastreplay
from fastreplay.bench.workloads import atari_frames
from fastreplay.demo import (
    TABLE,
    DemoConfig,
    _Actor,
    _Learner,
    _peak_rss_bytes,
    _progress,
    make_table,
    summarize,
)

__all__ = ["DemoError", "run_demo_processes"]

#: Seconds every child gets to start (spawn, import, connect, make frames).
START_TIMEOUT = 60.0
#: Seconds a child's worker thread gets to stop (its calls wait at most
#: 0.1 s at a time), and every child to stop and report after being told to.
STOP_TIMEOUT = 10.0
REPORT_TIMEOUT = 15.0
#: Seconds the children get after Ctrl-C or an error before being terminated.
GRACE = 2.0
#: Seconds after terminate (SIGTERM), then after kill (SIGKILL).
KILL_AFTER = 3.0
#: Seconds between a child's progress reports.
REPORT_EVERY = 0.1


class DemoError(RuntimeError):
    """A child process of the demo failed, died, or did not start or stop in
    time; every child has been stopped when this is raised."""


# ----- child side -----

def _child_main(role: str, index: int, address: str, cfg: DemoConfig,
                conn: Connection) -> None:
    """Entry point of an actor or learner process (spawned)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us on Ctrl-C
    report: dict[str, Any] = {}
    code = 1
    try:
        report = _run_child(role, index, address, cfg, conn)
        code = 0 if report.get("error") is None else 1
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        report = {"error": _describe(exc)}
    finally:
        report.update(kind="report", pid=os.getpid(),
                      peak_rss_bytes=_peak_rss_bytes())
        with contextlib.suppress(OSError, ValueError):
            conn.send(report)
            conn.close()
        sys.stdout.flush()
        sys.stderr.flush()
        # Skip interpreter teardown: nothing is left to clean up, and an
        # actor's outbox thread may still wait on the server's rate limiter
        # for items the demo no longer needs (dropped, as a writer in
        # process drops unsent items on close).
        os._exit(code)


def _run_child(role: str, index: int, address: str, cfg: DemoConfig,
               conn: Connection) -> dict[str, Any]:
    client = fastreplay.Client(address)
    stop = threading.Event()
    worker: _Actor | _Learner
    if role == "actor":
        frames = atari_frames(256, seed=cfg.seed, shape=cfg.obs_shape)
        worker = _Actor(index, client, cfg, frames, stop)  # connects (staging)
    else:
        worker = _ProcessLearner(client, cfg, stop)
        client.server_info()  # an unreachable server fails before the start
    conn.send({"kind": "ready"})
    if _recv(conn) != "go":
        return {"error": None, **_counts(worker)}
    worker.start()
    sent = -1
    told_to_stop = False
    while worker.is_alive() and worker.error is None:
        if conn.poll(REPORT_EVERY):
            told_to_stop = _recv(conn) == "stop"
            break
        count = worker.steps if isinstance(worker, _Actor) else worker.samples
        if count != sent:
            conn.send({"kind": "progress", "count": count})
            sent = count
    stop.set()
    worker.join(STOP_TIMEOUT)
    if worker.is_alive():
        return {"error": f"{worker.name} did not stop within {STOP_TIMEOUT:g} s; "
                         f"it is at:\n{_where(worker)}", **_counts(worker)}
    if worker.error is not None:
        return {"error": _describe(worker.error), **_counts(worker)}
    if not told_to_stop:
        return {"error": f"{worker.name} stopped before it was told to",
                **_counts(worker)}
    return {"error": None, **_counts(worker)}


class _ProcessLearner(_Learner):
    def _learn(self) -> None:
        super()._learn()
        # Priority updates are deferred calls: one more call on this
        # thread's connection reads their replies, so every update has been
        # applied when the server's counts are read.
        self.client.server_info()


def _where(thread: threading.Thread) -> str:
    frame = sys._current_frames().get(thread.ident or 0)
    return "".join(traceback.format_stack(frame)).rstrip() if frame else "?"


def _recv(conn: Connection) -> str:
    """The parent's next word; exits at once when the parent is gone (its
    server went with it, and there is no one to report to)."""
    try:
        return str(conn.recv())
    except (EOFError, OSError):
        os._exit(1)


def _counts(worker: _Actor | _Learner) -> dict[str, Any]:
    if isinstance(worker, _Actor):
        return {"steps": worker.steps, "items": worker.items,
                "wait_seconds": worker.wait_seconds}
    return {"batches": worker.batches, "samples": worker.samples,
            "updates": worker.updates}


def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)).rstrip()


# ----- parent side -----

@dataclasses.dataclass
class _Child:
    name: str  # "actor-0", ..., "learner"
    process: BaseProcess
    conn: Connection
    pid: int
    ready: bool = False
    count: int = 0  # steps (actor) or samples (learner) so far
    report: dict[str, Any] | None = None
    closed: bool = False  # the pipe reached EOF

    def drain(self) -> None:
        """Read every message the child has sent so far."""
        while not self.closed:
            try:
                if not self.conn.poll(0):
                    return
                msg = self.conn.recv()
            except (EOFError, OSError):
                self.closed = True
                return
            if msg["kind"] == "ready":
                self.ready = True
            elif msg["kind"] == "progress":
                self.count = int(msg["count"])
            elif msg["kind"] == "report":
                self.report = msg

    def send(self, what: str) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(what)

    def failure(self) -> str | None:
        """Why this child failed, if it did."""
        if self.report is not None and self.report.get("error") is not None:
            return f"{self.name} (pid {self.pid}) failed:\n{self.report['error']}"
        if self.report is None and (self.closed or not self.process.is_alive()):
            self.drain()  # a report sent just before the exit
            if self.report is not None:
                return self.failure()
            # The pipe closes a moment before the process can be reaped.
            self.process.join(timeout=5)
            code = self.process.exitcode
            if code is None or code >= 0:
                how = f"exited with code {code}"
            else:
                how = f"was killed by {signal.Signals(-code).name}"
            return f"{self.name} (pid {self.pid}) {how} before reporting"
        return None


def _start(cfg: DemoConfig, address: str) -> list[_Child]:
    ctx = multiprocessing.get_context("spawn")
    roles = [("actor", i) for i in range(cfg.actors)] + [("learner", 0)]
    children: list[_Child] = []
    try:
        for role, index in roles:
            name = f"actor-{index}" if role == "actor" else "learner"
            mine, theirs = ctx.Pipe()
            process = ctx.Process(target=_child_main, name=f"fastreplay-demo-{name}",
                                  args=(role, index, address, cfg, theirs),
                                  daemon=True)
            with _sigint_ignored():  # inherited: a Ctrl-C reaches only us
                process.start()
            theirs.close()  # the child's end lives on in the child only
            children.append(_Child(name, process, mine, process.pid or 0))
    except BaseException:
        _reap(children, grace=0.0)
        raise
    return children


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _wait_any(children: list[_Child], timeout: float) -> None:
    """Wait up to ``timeout`` s for a message or a child's exit."""
    handles: list[Any] = [c.conn for c in children if not c.closed]
    handles += [c.process.sentinel for c in children if c.report is None]
    wait(handles, timeout=max(timeout, 0.0))
    for c in children:
        c.drain()


def _check(children: list[_Child]) -> None:
    problems = [f for c in children if (f := c.failure()) is not None]
    if problems:
        raise DemoError("\n".join(problems))


def _wait_until(children: list[_Child], done: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not all(done(c) for c in children):
        _check(children)
        left = deadline - time.monotonic()
        if left <= 0:
            late = ", ".join(f"{c.name} (pid {c.pid})" for c in children
                             if not done(c))
            raise DemoError(f"{late} did not {what} within {timeout:g} s")
        _wait_any(children, min(left, 0.2))
    _check(children)


def _reap(children: list[_Child], grace: float,
          then: Callable[[], None] | None = None) -> None:
    """Stop every child: ask, wait ``grace`` s, call ``then`` (stop the
    server, which wakes calls blocked in its tables), terminate, then kill;
    each wait bounded.  A Ctrl-C cannot interrupt this."""
    failed: BaseException | None = None
    with _sigint_ignored():
        for c in children:
            c.send("stop")
        for step, wait_s in (("ask", grace), ("terminate", KILL_AFTER),
                             ("kill", KILL_AFTER)):
            if step == "terminate" and then is not None:
                try:
                    then()
                except BaseException as exc:  # noqa: BLE001 - after reaping
                    failed = exc
            alive = [c for c in children if c.process.is_alive()]
            if not alive:
                continue
            for c in alive:
                if step == "terminate":
                    c.process.terminate()
                elif step == "kill":
                    c.process.kill()
            deadline = time.monotonic() + wait_s
            for c in alive:
                c.process.join(max(0.0, deadline - time.monotonic()))
        for c in children:
            c.drain()
            c.conn.close()
            if not c.process.is_alive():
                c.process.close()
    if failed is not None:
        raise failed


def _raise_on_sigterm() -> Any:
    """Make SIGTERM raise SystemExit in the main thread (so the children are
    stopped); returns the previous handler, or None off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, handler)


def run_demo_processes(cfg: DemoConfig, progress: TextIO | None = sys.stderr
                       ) -> dict[str, Any]:
    """Run the demo with each actor and the learner in its own process
    against a server in this process; return the summary of ``run_demo``
    plus the processes' ids and peak memories (``peak_rss_bytes`` is their
    sum).

    The clock starts when every child is ready (spawned, connected, frames
    made), so the rates measure the job and not the start-up.

    Raises
    ------
    DemoError
        A child failed (its traceback is in the message), died, or did not
        start or stop in time.  Every child is stopped first.
    KeyboardInterrupt
        Ctrl-C; every child is stopped first.
    """
    table = make_table(cfg)
    server = fastreplay.Server([table])
    address = f"127.0.0.1:{server.port}"
    previous_sigterm = _raise_on_sigterm()
    children: list[_Child] = []
    grace = GRACE
    try:
        children = _start(cfg, address)
        actors, learner = children[:-1], children[-1]
        if progress is not None:
            progress.write(
                f"server {address} (pid {os.getpid()}), actor pids "
                f"{', '.join(str(c.pid) for c in actors)}, learner pid "
                f"{learner.pid}\n")
            progress.flush()
        _wait_until(children, lambda c: c.ready, START_TIMEOUT, "start")
        tty = progress is not None and progress.isatty()
        t0 = time.perf_counter()
        last_line = t0
        for c in children:
            c.send("go")
        while (elapsed := time.perf_counter() - t0) < cfg.duration:
            _check(children)
            _wait_any(children, min(0.2, cfg.duration - elapsed))
            now = time.perf_counter()
            if progress is not None and (tty or now - last_line >= 5):
                last_line = now
                _progress(progress, now - t0, cfg, sum(c.count for c in actors),
                          learner.count, len(table), "" if tty else "\n")
        # The rates count from "go" to "stop" (the children stop within
        # 0.1 s; the learner then reads its last replies).
        elapsed = time.perf_counter() - t0
        for c in children:
            c.send("stop")
        _wait_until(children, lambda c: c.report is not None, REPORT_TIMEOUT,
                    "stop and report")
        metrics = server.metrics()
        grace = REPORT_TIMEOUT  # they are exiting: let them
    except BaseException as exc:
        if progress is not None and isinstance(exc, (KeyboardInterrupt, SystemExit)):
            progress.write(f"\ninterrupted: stopping {len(children)} child "
                           "processes and the server\n")
            progress.flush()
        raise
    finally:
        # The children stop while the server still answers them (their
        # waits are short); then the server stops, then stragglers are
        # terminated.  A second Ctrl-C cannot interrupt this.
        _reap(children, grace, then=server.stop)
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
    reports = {c.name: c.report or {} for c in children}
    actor_reports = [reports[c.name] for c in actors]
    lr = reports["learner"]
    if progress is not None:
        _progress(progress, elapsed, cfg, sum(r["steps"] for r in actor_reports),
                  lr["samples"], int(metrics[f"table/{TABLE}/size"]), "\n")
    peaks = {"server": _peak_rss_bytes(),
             **{name: int(r["peak_rss_bytes"]) for name, r in reports.items()}}
    summary = summarize(cfg, elapsed, metrics,
                        steps=sum(r["steps"] for r in actor_reports),
                        items_created=sum(r["items"] for r in actor_reports),
                        actor_wait_s=sum(r["wait_seconds"] for r in actor_reports),
                        batches=lr["batches"], samples=lr["samples"],
                        priority_updates=lr["updates"],
                        peak_rss_bytes=sum(peaks.values()))
    summary.update(
        processes=True, server_address=address,
        server_counts={k: int(metrics[f"table/{TABLE}/{k}"])
                       for k in ("inserts", "samples", "updates")},
        pids={"server": os.getpid(), **{c.name: c.pid for c in children}},
        peak_rss_by_process=peaks)
    return summary
