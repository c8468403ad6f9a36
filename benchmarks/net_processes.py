"""Actors and learner in other processes than the replay server (issue 12):
fastreplay's ``Server(tables, port=...)`` and ``Client('127.0.0.1:PORT')``
against dm-reverb 0.14 with its server in another process (gRPC), same run.

Every library runs one server process, up to ``--actors`` actor processes
and one learner process; this script only starts them (``subprocess``, one
JSON line per command and per answer on their stdin/stdout), times nothing
itself and kills what it started.  Every wait is bounded (``--timeout`` per
answer, ``--fill-timeout`` for a server's start; each worker also exits by
itself after ``--max-seconds`` or when this script goes away).  The
fastreplay processes run with this interpreter; dm-reverb's (which needs
TensorFlow 2.15 and numpy 1.x) with ``--reverb-python``, another venv's
interpreter running this same file, which then imports only numpy and reverb.

Workloads (a round runs ``--seconds`` of calls; medians of ``--rounds``):

* actors: steps ``{"observation": float32[8]}`` appended by
  ``client.trajectory_writer(num_keep_alive_refs=1)``, one length-1 item per
  step (``create_item(table, 1.0, history[-1:])``), ``flush()`` at the end of
  the round, into an empty ``Prioritized(0.6)`` table of 1M items; 1, 2 and 4
  actor processes at once: steps/s of one actor and aggregate steps/s (all
  steps over the span from the first start to the last end).
* learner, small items: a ``Prioritized(0.6)`` table of ``--small-size``
  (1M) such length-1 items, filled in the server process before anything
  is timed (fastreplay: its own TrajectoryWriter in process; dm-reverb: a
  trajectory writer over localhost gRPC, about 12k items/s, so the fill of
  1M takes ~1.5 min).  Batches of 256: fastreplay ``sample_batch``;
  dm-reverb ``client.sample(table, 256, emit_timesteps=False,
  unpack_as_table_signature=True)`` iterated to the end, and
  ``TrajectoryDataset.from_table_signature(...).batch(256)`` (its workers
  keep samples in flight between calls).  The in-process fastreplay rate is
  measured in the server process (same table, no remote client active).
* learner, Atari: a ``Uniform`` table of length-5 items over ``--atari-steps``
  steps ``{"observation": uint8[84, 84, 4]}`` (``fastreplay.bench.workloads.
  atari_frames(64)``, cycled; one item per step), 256 items (36 MB) a batch,
  the same calls as above, remote and in process.  fastreplay's
  ``client.dataset(table, 256)`` (prefetching threads) is timed too.
* priorities: 256 keys of the small table (from one sample) get new
  priorities each call: fastreplay ``update_priorities`` and
  ``mutate_priorities``, dm-reverb ``mutate_priorities``; calls/s, the span
  closed by one ``server_info()`` (fastreplay answers updates later).

Run (the issue 12 measurement: about 8 minutes with ``--rounds 5`` on the
2-core machine, 2.5 of them dm-reverb's fill of 1M items)::

    python benchmarks/net_processes.py --reverb-python /path/rvenv/bin/python --rounds 5
    python benchmarks/net_processes.py --only fastreplay --small-size 100000
    python benchmarks/net_processes.py --quick    # seconds: tiny tables

The dm-reverb venv: ``python3 -m venv V; V/bin/pip install dm-reverb==0.14.0
tensorflow-cpu==2.15.1 "numpy<2"``.  Without ``--reverb-python`` (or when it
cannot import reverb) the dm-reverb side is skipped with a message.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

ACTOR, SMALL, ATARI = "actor", "small", "atari"
ATARI_LENGTH = 5
SMALL_OBS = 8


# ===================== worker side (runs in the child processes) =====================


def _small_steps(seed: int) -> list[dict[str, np.ndarray]]:
    obs = np.random.default_rng(seed).standard_normal((1024, SMALL_OBS))
    return [{"observation": o} for o in obs.astype(np.float32)]


def _timed(call: Callable[[], Any], seconds: float, per_check: int = 1,
           finish: Callable[[], Any] | None = None) -> dict[str, Any]:
    """Call ``call`` for about ``seconds`` (at least ``per_check`` times,
    checking the clock every ``per_check`` calls), then ``finish`` (inside
    the span: a flush, or a synchronous call that waits for deferred
    replies); return calls and the span in ``time.monotonic``
    (CLOCK_MONOTONIC: one clock for every process)."""
    n, t0 = 0, time.monotonic()
    end = t0 + seconds
    while True:
        for _ in range(per_check):
            call()
        n += per_check
        if time.monotonic() >= end:
            if finish is not None:
                finish()
            return {"n": n, "t0": t0, "t1": time.monotonic()}


def _write_round(writer: Any, steps: list[dict[str, np.ndarray]], table: str,
                 seconds: float, start: int) -> dict[str, Any]:
    """The actor loop: one length-1 item per step, flush at the end (timed)."""
    k = [start]

    def step() -> None:
        writer.append(steps[k[0] % len(steps)])
        k[0] += 1
        writer.create_item(table, 1.0,
                           {"observation": writer.history["observation"][-1:]})

    return _timed(step, seconds, per_check=64, finish=writer.flush)


def _fill(client: Any, tables: dict[str, int], frames_path: str,
          flush_every: int) -> dict[str, float]:
    """Fill SMALL with length-1 items and ATARI with length-5 items (one per
    step) through ``client``'s trajectory writer; return seconds per table."""
    seconds: dict[str, float] = {}
    if tables.get(SMALL):
        t0 = time.perf_counter()
        steps = _small_steps(1)
        with client.trajectory_writer(num_keep_alive_refs=1) as w:
            for i in range(tables[SMALL]):
                w.append(steps[i % len(steps)])
                w.create_item(SMALL, 1.0,
                              {"observation": w.history["observation"][-1:]})
                if i % flush_every == flush_every - 1:
                    w.flush()
            w.flush()
        seconds[SMALL] = time.perf_counter() - t0
    if tables.get(ATARI):
        t0 = time.perf_counter()
        frames = np.load(frames_path)
        with client.trajectory_writer(num_keep_alive_refs=ATARI_LENGTH) as w:
            for i in range(tables[ATARI] + ATARI_LENGTH - 1):
                w.append({"observation": frames[i % len(frames)]})
                if w.episode_steps >= ATARI_LENGTH:
                    w.create_item(ATARI, 1.0, {
                        "observation": w.history["observation"][-ATARI_LENGTH:]})
                if i % 100 == 99:
                    w.flush()
            w.flush()
        seconds[ATARI] = time.perf_counter() - t0
    return seconds


class FrServer:
    """fastreplay server process: ACTOR (empty), SMALL and ATARI tables."""

    def __init__(self, small: int, atari: int, frames: str, **_: Any) -> None:
        import fastreplay
        from fastreplay import rate_limiters as rl
        from fastreplay import selectors as sel

        def table(name: str, sampler: Any, size: int) -> Any:
            return fastreplay.Table(name, sampler, sel.Fifo(), size, rl.MinSize(1),
                                    seed=0)

        self.server = fastreplay.Server([
            table(ACTOR, sel.Prioritized(0.6), 1_000_000),
            table(SMALL, sel.Prioritized(0.6), max(small, 1)),
            table(ATARI, sel.Uniform(), max(atari, 1))], port=None)
        self.local = self.server.localhost_client()
        self.info = {"port": self.server.port, "fill_s": _fill(
            self.local, {SMALL: small, ATARI: atari}, frames, 1 << 62)}

    def local_sample(self, table: str, batch: int, seconds: float) -> dict[str, Any]:
        sample = self.local.sample_batch
        sample(table, batch, timeout=10.0)
        return _timed(lambda: sample(table, batch, timeout=10.0), seconds)

    def close(self) -> None:
        self.server.stop()


class RvServer:
    """dm-reverb server process with the same tables (and signatures, for
    TrajectoryDataset), filled through a writer over localhost gRPC."""

    def __init__(self, small: int, atari: int, frames: str, tmp: str,
                 **_: Any) -> None:
        import reverb
        import tensorflow as tf

        def table(name: str, sampler: Any, size: int, signature: Any) -> Any:
            return reverb.Table(name, sampler, reverb.selectors.Fifo(), size,
                                reverb.rate_limiters.MinSize(1), signature=signature)

        shape = tuple(np.load(frames, mmap_mode="r").shape[1:])
        small_sig = {"observation": tf.TensorSpec((1, SMALL_OBS), tf.float32)}
        atari_sig = {"observation": tf.TensorSpec((ATARI_LENGTH, *shape), tf.uint8)}
        self.server = reverb.Server([
            table(ACTOR, reverb.selectors.Prioritized(0.6), 1_000_000, small_sig),
            table(SMALL, reverb.selectors.Prioritized(0.6), max(small, 1), small_sig),
            table(ATARI, reverb.selectors.Uniform(), max(atari, 1), atari_sig)],
            checkpointer=reverb.checkpointers.DefaultCheckpointer(path=tmp))
        client = reverb.Client(f"localhost:{self.server.port}")
        self.info = {"port": self.server.port, "fill_s": _fill(
            client, {SMALL: small, ATARI: atari}, frames, 1_000)}

    def close(self) -> None:
        self.server.stop()


class Actor:
    """An actor process: one trajectory writer, rounds of ``_write_round``."""

    def __init__(self, lib: str, address: str, seed: int, connect: int,
                 **_: Any) -> None:
        self.client = _connect(lib, address, connect)
        self.writer = self.client.trajectory_writer(num_keep_alive_refs=1)
        self.steps, self.start = _small_steps(seed), 0
        self.info = {"pid": os.getpid()}

    def write(self, seconds: float) -> dict[str, Any]:
        out = _write_round(self.writer, self.steps, ACTOR, seconds, self.start)
        self.start += out["n"]
        return out

    def close(self) -> None:
        self.writer.close()


class Learner:
    """A learner process: sampling and priority updates over the network."""

    def __init__(self, lib: str, address: str, connect: int, **_: Any) -> None:
        self.lib, self.address = lib, address
        self.client = _connect(lib, address, connect)
        self.datasets: dict[tuple[str, int], Iterator[Any]] = {}
        self.info = {"pid": os.getpid()}

    def sample(self, table: str, batch: int, seconds: float) -> dict[str, Any]:
        client = self.client
        if self.lib == "fastreplay":
            def call() -> None:
                client.sample_batch(table, batch, timeout=10.0)
        else:
            def call() -> None:
                for _ in client.sample(table, num_samples=batch, emit_timesteps=False,
                                       unpack_as_table_signature=True):
                    pass
        call()  # warm-up
        return _timed(call, seconds)

    def dataset(self, table: str, batch: int, seconds: float) -> dict[str, Any]:
        it = self.datasets.get((table, batch))
        if it is None:
            self.datasets.clear()  # one dataset at a time: no stray prefetching
            if self.lib == "fastreplay":
                it = iter(self.client.dataset(table, batch, timeout=10.0))
            else:
                import reverb

                ds = reverb.TrajectoryDataset.from_table_signature(
                    self.address, table, max_in_flight_samples_per_worker=2 * batch)
                it = iter(ds.batch(batch))
            self.datasets[(table, batch)] = it
            next(it)  # warm-up: the first batch starts the workers
        return _timed(lambda: next(it), seconds)

    def priorities(self, table: str, batch: int, how: str,
                   seconds: float) -> dict[str, Any]:
        self.datasets.clear()
        client, rng = self.client, np.random.default_rng(0)
        if self.lib == "fastreplay":
            keys = client.sample_batch(table, batch, timeout=10.0)[0].key
        else:
            keys = np.array([s.info.key for s in client.sample(
                table, num_samples=batch, emit_timesteps=False)], np.uint64)
        prios = [rng.uniform(0.1, 2.0, len(keys)) for _ in range(8)]
        updates = [dict(zip(keys.tolist(), p.tolist(), strict=True)) for p in prios]
        k = [0]

        def call() -> None:
            k[0] += 1
            if how == "update":
                client.update_priorities(table, keys, prios[k[0] % 8])
            else:
                client.mutate_priorities(table, updates=updates[k[0] % 8])

        call()
        client.server_info()
        # server_info: fastreplay defers the replies of priority updates; the
        # span ends once every update has been applied.
        return _timed(call, seconds, per_check=8, finish=client.server_info)

    def close(self) -> None:
        self.datasets.clear()


def _connect(lib: str, address: str, timeout: int) -> Any:
    """A client of ``lib`` connected to ``address`` (fails within ``timeout`` s)."""
    if lib == "fastreplay":
        import fastreplay

        client = fastreplay.Client(address)
    else:
        import reverb

        client = reverb.Client(address)
    client.server_info(timeout=timeout)
    return client


WORKERS: dict[str, Any] = {"fr_server": FrServer, "rv_server": RvServer,
                           "actor": Actor, "learner": Learner}


def worker_main(kind: str, params: dict[str, Any], max_seconds: float) -> None:
    """Serve JSON commands ``{"op": name, "args": {...}}`` from stdin, one
    answer line each on the original stdout (anything else printed goes to
    stderr); exit on ``{"op": "quit"}``, end of input or ``max_seconds``."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    watchdog = threading.Timer(max_seconds, lambda: os._exit(3))
    watchdog.daemon = True
    watchdog.start()

    def answer(obj: dict[str, Any]) -> None:
        proto.write(json.dumps(obj) + "\n")

    try:
        worker = WORKERS[kind](**params)
    except BaseException:
        answer({"error": traceback.format_exc()})
        raise SystemExit(1) from None
    answer({"ready": True, **worker.info})
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd["op"] == "quit":
                break
            try:
                answer(getattr(worker, cmd["op"])(**cmd.get("args", {})))
            except Exception:
                answer({"error": traceback.format_exc()})
    finally:
        worker.close()
    answer({"bye": True})


# ===================== parent side =====================


class Proc:
    """A worker process and bounded calls into it."""

    def __init__(self, python: str, kind: str, params: dict[str, Any], log_dir: str,
                 max_seconds: float, timeout: float, name: str) -> None:
        self.name = name
        self.log = os.path.join(log_dir, f"{name}.log")
        with open(self.log, "wb") as err:
            self.popen = subprocess.Popen(
                [python, os.path.abspath(__file__), "--worker", kind,
                 "--max-seconds", str(max_seconds), json.dumps(params)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                bufsize=1, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        try:
            self.info = self.recv(timeout)
        except BaseException:
            self.close()
            raise

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
            self.popen.wait(5)
            raise RuntimeError(f"{self.name} exited ({self.popen.returncode}):\n"
                               f"{self.tail()}")
        out: dict[str, Any] = json.loads(line)
        if "error" in out:
            raise RuntimeError(f"{self.name}: {out['error']}")
        return out

    def send(self, op: str, **args: Any) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write(json.dumps({"op": op, "args": args}) + "\n")
        self.popen.stdin.flush()

    def call(self, timeout: float, op: str, **args: Any) -> dict[str, Any]:
        self.send(op, **args)
        return self.recv(timeout)

    def close(self) -> None:
        """Ask it to quit; kill it (this PID only) if it has not within 10 s."""
        if self.popen.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                self.send("quit")
                assert self.popen.stdin is not None
                self.popen.stdin.close()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)


def rate(out: dict[str, Any]) -> float:
    return float(out["n"]) / (out["t1"] - out["t0"])


class Bench:
    """Run one library's workloads; results go to ``self.results``."""

    def __init__(self, lib: str, python: str, args: argparse.Namespace, tmp: str,
                 frames: str) -> None:
        self.lib, self.python, self.args, self.tmp, self.frames = (
            lib, python, args, tmp, frames)
        self.procs: list[Proc] = []
        self.results: dict[str, float] = {}

    def start(self, kind: str, name: str, timeout: float, **params: Any) -> Proc:
        p = Proc(self.python, kind, params, self.tmp, self.args.max_seconds, timeout,
                 f"{self.lib}-{name}")
        self.procs.append(p)
        return p

    def rounds(self, label: str, run: Callable[[], float]) -> None:
        values = [run() for _ in range(self.args.rounds)]
        self.results[label] = statistics.median(values)
        print(f"  {self.lib:10} {label:34} median {self.results[label]:12,.1f}  "
              f"(rounds: {', '.join(f'{v:,.1f}' for v in values)})", flush=True)

    def run(self) -> None:
        """Server, then actors, learner and (fastreplay) in-process rates; a
        phase that fails is reported and the next one still runs."""
        a = self.args
        kind = "fr_server" if self.lib == "fastreplay" else "rv_server"
        t0 = time.perf_counter()
        server = self.start(kind, "server", a.fill_timeout, small=a.small_size,
                            atari=a.atari_steps, frames=self.frames,
                            tmp=os.path.join(self.tmp, f"{self.lib}-ckpt"))
        address = f"127.0.0.1:{server.info['port']}"
        fills = ", ".join(f"{k} {v:.1f} s" for k, v in server.info["fill_s"].items())
        print(f"  {self.lib:10} server pid {server.popen.pid} at {address}, filled "
              f"{fills} (up in {time.perf_counter() - t0:.1f} s)", flush=True)
        phases = [self.actors, self.learner]
        if self.lib == "fastreplay":
            phases.append(self.in_process)
        for phase in phases:
            try:
                phase(server, address)
            except RuntimeError as e:
                print(f"  {self.lib:10} {phase.__name__} stopped: {e}", flush=True)

    def actors(self, server: Proc, address: str) -> None:
        a, sec, t = self.args, self.args.seconds, self.args.timeout
        actors: list[Proc] = []
        try:
            for i in range(max(a.actors)):
                actors.append(self.start("actor", f"actor{i}", t, lib=self.lib,
                                         address=address, seed=i,
                                         connect=int(t / 2)))
            for n in a.actors:
                outs: list[list[dict[str, Any]]] = []

                def go(n: int = n, outs: list[list[dict[str, Any]]] = outs) -> float:
                    for p in actors[:n]:
                        p.send("write", seconds=sec)
                    got = [p.recv(t + sec) for p in actors[:n]]
                    outs.append(got)
                    span = max(o["t1"] for o in got) - min(o["t0"] for o in got)
                    return sum(o["n"] for o in got) / span

                self.rounds(f"actors x{n} aggregate steps/s", go)
                self.results[f"actors x{n} per-actor steps/s"] = statistics.median(
                    rate(o) for got in outs for o in got)
        finally:
            for p in actors:
                p.close()

    def learner(self, server: Proc, address: str) -> None:
        a, sec, t = self.args, self.args.seconds, self.args.timeout
        learner = self.start("learner", "learner", t, lib=self.lib, address=address,
                             connect=int(t / 2))
        try:
            for op, table in (("sample", SMALL), ("dataset", SMALL),
                              ("sample", ATARI), ("dataset", ATARI)):
                if self.lib == "fastreplay" and op == "dataset" and not a.fr_dataset:
                    continue
                self.rounds(f"{table} {op}(256) batches/s", lambda op=op, table=table:
                            rate(learner.call(t + sec, op, table=table, batch=256,
                                              seconds=sec)))
            for how in ["update", "mutate"] if self.lib == "fastreplay" else ["mutate"]:
                self.rounds(f"{how}_priorities(256) calls/s", lambda how=how: rate(
                    learner.call(t + sec, "priorities", table=SMALL, batch=256,
                                 how=how, seconds=sec)))
        finally:
            learner.close()

    def in_process(self, server: Proc, address: str) -> None:
        sec, t = self.args.seconds, self.args.timeout
        for table in (SMALL, ATARI):
            self.rounds(f"{table} in-process sample_batch/s", lambda table=table: rate(
                server.call(t + sec, "local_sample", table=table, batch=256,
                            seconds=sec)))

    def close(self) -> None:
        for p in reversed(self.procs):
            p.close()


def reverb_ok(python: str | None) -> str | None:
    """None when ``python`` imports reverb, else why not."""
    if not python:
        return "no --reverb-python given"
    try:
        r = subprocess.run([python, "-c", "import reverb"], capture_output=True,
                           text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{python}: {e}"
    return None if r.returncode == 0 else (
        f"{python} cannot import reverb: {r.stderr.strip().splitlines()[-1:]}")


def report(results: dict[str, dict[str, float]], args: argparse.Namespace) -> None:
    rv, fr = results.get("dm-reverb", {}), results.get("fastreplay", {})
    print(f"\nMedians of {args.rounds} rounds of {args.seconds} s; small table "
          f"{args.small_size:,} items, Atari table {args.atari_steps:,} items")
    print(f"{'workload':38} {'dm-reverb':>12} {'fastreplay':>12} {'fr/reverb':>10}")
    labels = list(dict.fromkeys([*rv, *fr]))
    for label in labels:
        if "in-process" in label:
            continue
        r, f = rv.get(label), fr.get(label)
        ratio = f"{f / r:9.1f}x" if r and f else ""
        print(f"{label:38} {_fmt(r):>12} {_fmt(f):>12} {ratio:>10}")
    for table, remote in ((SMALL, "sample"), (ATARI, "sample")):
        local = fr.get(f"{table} in-process sample_batch/s")
        got = fr.get(f"{table} {remote}(256) batches/s")
        if local and got:
            print(f"fastreplay {table}: remote sample_batch {got:,.1f}/s, in process "
                  f"{local:,.1f}/s: {100 * got / local:.0f}% of in-process")
    for n in args.actors[1:]:
        for name, res in (("dm-reverb", rv), ("fastreplay", fr)):
            one, many = res.get("actors x1 aggregate steps/s"), res.get(
                f"actors x{n} aggregate steps/s")
            if one and many:
                print(f"{name}: {n} actors aggregate / 1 actor = {many / one:.2f}")


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reverb-python", help="interpreter of a venv with dm-reverb 0.14")
    ap.add_argument("--only", choices=["fastreplay", "dm-reverb"])
    ap.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--small-size", type=int, default=1_000_000)
    ap.add_argument("--atari-steps", type=int, default=2_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.0, help="length of one round")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="bound on every answer of a worker (beyond --seconds)")
    ap.add_argument("--fill-timeout", type=float, default=400.0,
                    help="bound on a server's start and fill")
    ap.add_argument("--max-seconds", type=float, default=1200.0,
                    help="every worker exits by itself after this long")
    ap.add_argument("--no-fr-dataset", dest="fr_dataset", action="store_false",
                    help="skip fastreplay's client.dataset")
    ap.add_argument("--quick", action="store_true",
                    help="tiny tables, 1 round of 0.3 s, actors 1 and 2")
    ap.add_argument("--json", help="write the medians to this file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("params", nargs="?", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker_main(args.worker, json.loads(args.params), args.max_seconds)
        return
    if args.quick:
        args.small_size, args.atari_steps, args.rounds, args.seconds = 2000, 300, 1, 0.3
        args.actors = [1, 2]
    results = run_all(args)
    report(results, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": {k: v for k, v in vars(args).items()
                                if k not in ("worker", "params")},
                       "results": results}, f, indent=1)


def run_all(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """dm-reverb first (when available), then fastreplay; medians per library."""
    from fastreplay.bench import workloads

    results: dict[str, dict[str, float]] = {}
    libs: list[tuple[str, str]] = []
    if args.only != "fastreplay":
        why = reverb_ok(args.reverb_python)
        if why is None:
            libs.append(("dm-reverb", args.reverb_python))
        else:
            print(f"dm-reverb skipped: {why}")
    if args.only != "dm-reverb":
        libs.append(("fastreplay", sys.executable))
    with tempfile.TemporaryDirectory(prefix="net_processes_") as tmp:
        frames = os.path.join(tmp, "frames.npy")
        np.save(frames, np.stack(workloads.atari_frames(64)))
        for lib, python in libs:
            bench = Bench(lib, python, args, tmp, frames)
            try:
                bench.run()
            except RuntimeError as e:
                print(f"  {lib}: stopped: {e}", flush=True)
            finally:
                bench.close()
            results[lib] = bench.results
    return results


if __name__ == "__main__":
    main()
