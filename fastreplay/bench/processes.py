"""Actors and learner in other processes than the replay server (issue 12):
fastreplay's ``Server(tables, port=...)`` and ``Client('127.0.0.1:PORT')``
against dm-reverb with its server in another process (gRPC).

A :class:`Session` runs one library's server process, actor processes and
one learner process (:mod:`fastreplay.bench.process_worker`, started with a
given interpreter: dm-reverb's may be another venv's), drives them with one
JSON line per command and per answer, times nothing itself and kills what it
started.  Every wait is bounded (``Plan.timeout`` per answer beyond the
round's length, ``Plan.fill_timeout`` for a server's start and fill); each
worker also exits by itself after ``Plan.max_seconds`` or when its stdin
closes.  Servers and clients use 127.0.0.1 (dm-reverb 0.14's server binds
every interface: it has no host parameter).

Workloads (a round runs ``Plan.seconds`` of calls; ``Plan.rounds`` rounds):

* actors: steps ``{"observation": float32[8]}`` appended by
  ``client.trajectory_writer(num_keep_alive_refs=1)``, one length-1 item per
  step (``create_item(table, 1.0, history[-1:])``), ``flush()`` at the end of
  the round, into a ``Prioritized(0.6)`` table of 1M items; ``Plan.actors``
  processes at once (after one untimed round of all of them): steps/s of one
  actor and aggregate steps/s (all steps over the span from the first start
  to the last end, in CLOCK_MONOTONIC, which every process shares).
* learner, small items: a ``Prioritized(0.6)`` table of ``Plan.small`` such
  length-1 items, filled in the server process before anything is timed
  (fastreplay: a TrajectoryWriter in process; dm-reverb: a trajectory writer
  over localhost gRPC, about 12k items/s).  Batches of 256: fastreplay
  ``sample_batch``; dm-reverb ``client.sample(table, 256,
  emit_timesteps=False, unpack_as_table_signature=True)`` iterated to the
  end, and ``TrajectoryDataset.from_table_signature(...).batch(256)`` (its
  workers keep samples in flight between calls).  fastreplay's in-process
  rate is measured in the server process (same table, no remote call
  active).
* learner, Atari (``Plan.atari`` > 0): a ``Uniform`` table of length-5 items
  over steps ``{"observation": uint8[84, 84, 4]}`` (a frames file, cycled;
  one item per step), 256 items (36 MB) a batch, the same calls.
  fastreplay's ``client.dataset(table, 256)`` with ``Plan.fr_dataset``.
* priorities: 256 keys of the small table (from one sample) get new
  priorities each call: fastreplay ``update_priorities`` (and, with
  ``Plan.fr_mutate``, ``mutate_priorities``), dm-reverb
  ``mutate_priorities``; calls/s, the span closed by one ``server_info()``
  (fastreplay answers updates later).

``benchmarks/net_processes.py`` is the command-line front end (both
libraries, dm-reverb from another venv); :func:`measure` is the
``processes`` workload of ``fastreplay bench``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastreplay.bench.process_worker import ATARI, SMALL

if TYPE_CHECKING:
    from fastreplay.bench.results import Config
    from fastreplay.bench.runner import _Recorder

__all__ = ["Plan", "Proc", "Session", "measure", "reverb_ok"]

WORKER_FILE = str(Path(__file__).with_name("process_worker.py"))


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one library's session measures, and the bounds on its waits."""

    small: int = 1_000_000  # items of the small Prioritized table
    atari: int = 0  # items of the Atari table (0: no Atari rows)
    actors: tuple[int, ...] = (1, 2)  # actor processes at once, per row
    rounds: int = 3
    seconds: float = 1.0  # one round
    fr_dataset: bool = False  # fastreplay's client.dataset rows too
    fr_mutate: bool = False  # fastreplay's mutate_priorities row too
    timeout: float = 60.0  # per answer, beyond ``seconds``
    fill_timeout: float = 900.0  # a server's start and fill
    max_seconds: float = 1800.0  # every worker exits by itself after this


class Proc:
    """A worker process and bounded calls into it."""

    def __init__(self, python: str, kind: str, params: dict[str, Any], log_dir: str,
                 max_seconds: float, name: str) -> None:
        self.name = name
        self.log = os.path.join(log_dir, f"{name}.log")
        self.info: dict[str, Any] = {}
        with open(self.log, "wb") as err:
            self.popen = subprocess.Popen(
                [python, WORKER_FILE, kind, str(max_seconds), json.dumps(params)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                bufsize=1, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def tail(self, n: int = 15) -> str:
        with open(self.log, errors="replace") as f:
            return "".join(f.readlines()[-n:])

    def recv(self, timeout: float) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"{self.name}: no answer within {timeout} s") from None
        if line is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(5)
            raise RuntimeError(f"{self.name} exited ({self.popen.returncode}):\n"
                               f"{self.tail()}")
        out: dict[str, Any] = json.loads(line)
        if "error" in out:  # a traceback: its last line first
            lines = out["error"].strip().splitlines() or ["?"]
            raise RuntimeError(f"{self.name}: {lines[-1]}\n{out['error']}")
        return out

    def send(self, op: str, **args: Any) -> None:
        assert self.popen.stdin is not None
        try:
            self.popen.stdin.write(json.dumps({"op": op, "args": args}) + "\n")
            self.popen.stdin.flush()
        except (OSError, ValueError):
            raise RuntimeError(f"{self.name} is gone:\n{self.tail()}") from None

    def call(self, timeout: float, op: str, **args: Any) -> dict[str, Any]:
        self.send(op, **args)
        return self.recv(timeout)

    def close(self, grace: float = 10.0) -> None:
        """Ask it to quit; kill it (this PID only) if it has not within
        ``grace`` seconds."""
        running = self.popen.poll() is None
        if running:
            with contextlib.suppress(RuntimeError):
                self.send("quit")
        with contextlib.suppress(OSError, ValueError):  # a broken pipe
            assert self.popen.stdin is not None
            self.popen.stdin.close()
        if running:
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        self.reader.join(5)  # end of its output: the process is gone
        if not self.reader.is_alive() and self.popen.stdout is not None:
            self.popen.stdout.close()


def rate(out: dict[str, Any]) -> float:
    return float(out["n"]) / float(out["t1"] - out["t0"])


class Session:
    """One library's server, actors and learner; ``values[label]`` holds the
    rounds of each measurement (labels such as "actors x2 aggregate steps/s",
    "small sample(256) batches/s" or "update_priorities(256) calls/s").
    ``run`` records a phase that fails in ``errors`` and goes on with the
    next; ``close`` (or leaving the ``with`` block) ends every process."""

    def __init__(self, lib: str, python: str, plan: Plan, tmp: str,
                 frames: str | None = None,
                 log: Callable[[str], None] = lambda s: print(s, flush=True)) -> None:
        self.lib, self.python, self.plan, self.tmp, self.frames = (
            lib, python, plan, tmp, frames)
        self.log = log
        self.procs: list[Proc] = []
        self.values: dict[str, list[float]] = {}
        self.errors: list[str] = []
        self.address = ""

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self, specs: list[tuple[str, str, dict[str, Any]]],
               timeout: float) -> list[Proc]:
        """Start every worker of ``specs`` (kind, name, params) at once, then
        wait for each to be ready."""
        procs = []
        for kind, name, params in specs:
            procs.append(Proc(self.python, kind, params, self.tmp,
                              self.plan.max_seconds, f"{self.lib}-{name}"))
            self.procs.append(procs[-1])
        for p in procs:
            p.info = p.recv(timeout)
        return procs

    def rounds(self, label: str, run: Callable[[], float]) -> None:
        values = self.values[label] = [run() for _ in range(self.plan.rounds)]
        self.log(f"  {self.lib:10} {label:34} median {statistics.median(values):12,.1f}"
                 f"  (rounds: {', '.join(f'{v:,.1f}' for v in values)})")

    def _call_rounds(self, label: str, proc: Proc, op: str, **args: Any) -> None:
        """Rounds of ``proc``'s ``op`` (batches of 256); their rates."""
        sec = self.plan.seconds
        self.rounds(label, lambda: rate(proc.call(self.plan.timeout + sec, op,
                                                  batch=256, seconds=sec, **args)))

    def medians(self) -> dict[str, float]:
        return {k: statistics.median(v) for k, v in self.values.items()}

    def run(self) -> None:
        """Server, then actors, learner and (fastreplay) in-process rates."""
        p, t0 = self.plan, time.perf_counter()
        kind = "fr_server" if self.lib == "fastreplay" else "rv_server"
        server, = self._start([(kind, "server", {
            "small": p.small, "atari": p.atari, "frames": self.frames,
            "tmp": os.path.join(self.tmp, f"{self.lib}-ckpt")})], p.fill_timeout)
        self.address = f"127.0.0.1:{server.info['port']}"
        fills = ", ".join(f"{k} {v:.1f} s" for k, v in server.info["fill_s"].items())
        up = time.perf_counter() - t0
        self.log(f"  {self.lib:10} server pid {server.popen.pid} at {self.address}, "
                 f"filled {fills or 'nothing'} (up in {up:.1f} s)")
        client = {"lib": self.lib, "address": self.address,
                  "connect": max(1, int(p.timeout / 2))}
        *actors, learner = self._start(
            [("actor", f"actor{i}", {**client, "seed": i})
             for i in range(max(p.actors, default=0))]
            + [("learner", "learner", client)], p.timeout)
        self.log(f"  {self.lib:10} actor pids "
                 f"{' '.join(str(a.popen.pid) for a in actors) or '-'}, "
                 f"learner pid {learner.popen.pid}")
        phases: list[tuple[str, Callable[[], None]]] = [
            ("actors", lambda: self._actors(actors)),
            ("learner", lambda: self._learner(learner))]
        if self.lib == "fastreplay":
            phases.append(("in process", lambda: self._in_process(server)))
        for name, phase in phases:
            try:
                phase()
            except RuntimeError as e:
                self.errors.append(f"{name}: {e}")
                self.log(f"  {self.lib:10} {name} stopped: {e}")

    def _actors(self, actors: list[Proc]) -> None:
        sec, t = self.plan.seconds, self.plan.timeout
        try:
            for a in actors:  # warm-up round
                a.send("write", seconds=sec)
            for a in actors:
                a.recv(t + sec)
            for n in self.plan.actors:
                outs: list[list[dict[str, Any]]] = []

                def go(n: int = n, outs: list[list[dict[str, Any]]] = outs) -> float:
                    for a in actors[:n]:
                        a.send("write", seconds=sec)
                    got = [a.recv(t + sec) for a in actors[:n]]
                    outs.append(got)
                    span = max(o["t1"] for o in got) - min(o["t0"] for o in got)
                    return float(sum(o["n"] for o in got)) / float(span)

                self.rounds(f"actors x{n} aggregate steps/s", go)
                self.values[f"actors x{n} per-actor steps/s"] = [
                    rate(o) for got in outs for o in got]
        finally:
            for a in actors:
                a.close()

    def _learner(self, learner: Proc) -> None:
        p, fr = self.plan, self.lib == "fastreplay"
        try:
            for op, table in (("sample", SMALL), ("dataset", SMALL),
                              ("sample", ATARI), ("dataset", ATARI)):
                if (table == ATARI and not p.atari) or (
                        fr and op == "dataset" and not p.fr_dataset):
                    continue
                self._call_rounds(f"{table} {op}(256) batches/s", learner, op,
                                  table=table)
            hows = ("update", "mutate")[:2 if p.fr_mutate else 1] if fr else ("mutate",)
            for how in hows:
                self._call_rounds(f"{how}_priorities(256) calls/s", learner,
                                  "priorities", table=SMALL, how=how)
        finally:
            learner.close()

    def _in_process(self, server: Proc) -> None:
        for table in (SMALL, ATARI) if self.plan.atari else (SMALL,):
            self._call_rounds(f"{table} in-process sample_batch/s", server,
                              "local_sample", table=table)

    def close(self) -> None:
        for p in reversed(self.procs):
            p.close()


def reverb_ok(python: str | None) -> str | None:
    """None when ``python`` imports reverb, else why not."""
    if not python:
        return "no interpreter with dm-reverb given"
    try:
        r = subprocess.run([python, "-c", "import reverb"], capture_output=True,
                           text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{python}: {e}"
    return None if r.returncode == 0 else (
        f"{python} cannot import reverb: {r.stderr.strip().splitlines()[-1:]}")


# ----- the ``processes`` workload of ``fastreplay bench`` -----

#: label of a Session measurement -> (variant, unit), per library
ROWS: dict[str, dict[str, tuple[str, str]]] = {
    "fastreplay": {
        "small sample(256) batches/s": ("learner process: sample_batch(256)",
                                        "batches/s"),
        "small in-process sample_batch/s": (
            "in the server process: sample_batch(256)", "batches/s"),
        "update_priorities(256) calls/s": (
            "learner process: priorities of 256 keys", "calls/s")},
    "dm-reverb": {
        "small sample(256) batches/s": ("learner process: client.sample(256)",
                                        "batches/s"),
        "small dataset(256) batches/s": (
            "learner process: TrajectoryDataset batch(256)", "batches/s"),
        "mutate_priorities(256) calls/s": (
            "learner process: priorities of 256 keys", "calls/s")},
}


def _actor_row(label: str) -> tuple[str, str] | None:
    n = label.removeprefix("actors x").removesuffix(" aggregate steps/s")
    if not n.isdigit():
        return None
    return (("1 actor process: steps" if n == "1" else
             f"{n} actor processes: aggregate steps"), "steps/s")


def measure(cfg: Config, rec: _Recorder) -> None:
    """fastreplay, then dm-reverb when it imports here, both with this
    interpreter.  The remote ``sample_batch`` row is the baseline (dm-reverb's
    sampling rows divide by it), the in-process one a variant of it (its
    ratio: remote over in-process rate); other dm-reverb rows divide by the
    fastreplay row of the same variant."""
    from fastreplay.bench import peers
    from fastreplay.bench.results import from_values

    name = "processes"
    plan = Plan(small=cfg.process_items, rounds=cfg.process_rounds,
                seconds=cfg.process_seconds, actors=(1, 2))

    def log(line: str) -> None:
        rec.log.write(line + "\n")
        rec.log.flush()

    def session(lib: str, tmp: str) -> Session:
        s = Session(lib, sys.executable, plan, tmp, log=log)
        try:
            s.run()
        finally:
            s.close()
        for label, values in s.values.items():
            row = ROWS[lib].get(label) or _actor_row(label)
            if row is not None:
                base = lib == "fastreplay" and label.startswith("small sample")
                kind = ("variant" if "in-process" in label else
                        "fastreplay" if lib == "fastreplay" else "peer")
                rec.add(from_values(name, lib, row[0], values, row[1], "", kind,
                                    base))
        return s

    with tempfile.TemporaryDirectory(prefix="fastreplay_bench_processes_") as tmp:
        fr = session("fastreplay", tmp)
        if fr.errors:
            raise RuntimeError("fastreplay processes: " + "; ".join(fr.errors))

        def reverb() -> Session | None:
            try:
                s = session("dm-reverb", tmp)
            except RuntimeError as e:
                peers.UNAVAILABLE["reverb_processes"] = str(e).strip()
                return None
            for error in s.errors:
                rec.skip(name, "dm-reverb", error)
            return s

        rec.peer(name, "dm-reverb", reverb, "reverb_processes")
