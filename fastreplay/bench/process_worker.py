"""The child side of :mod:`fastreplay.bench.processes`: a server, actor or
learner process answering one JSON line per command on stdin/stdout.

Run as a file (``python process_worker.py KIND MAX_SECONDS PARAMS_JSON``),
not as a module, so the same file serves dm-reverb's interpreter (another
venv: numpy 1.x, TensorFlow) as well as fastreplay's: at the top it imports
only the standard library and numpy; each worker imports fastreplay or
reverb when it starts.  The workloads are described in
:mod:`fastreplay.bench.processes`.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

ACTOR, SMALL, ATARI = "actor", "small", "atari"
ATARI_LENGTH = 5
SMALL_OBS = 8
ACTOR_CAPACITY = 1_000_000


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


def _fill(client: Any, tables: dict[str, int], frames_path: str | None,
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
    if tables.get(ATARI) and frames_path:
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
    """fastreplay server process (loopback): ACTOR (empty), SMALL and ATARI
    tables, filled in process before anything is timed."""

    def __init__(self, small: int, atari: int, frames: str | None,
                 **_: Any) -> None:
        import fastreplay
        from fastreplay import rate_limiters as rl
        from fastreplay import selectors as sel

        def table(name: str, sampler: Any, size: int) -> Any:
            return fastreplay.Table(name, sampler, sel.Fifo(), size, rl.MinSize(1),
                                    seed=0)

        self.server = fastreplay.Server([
            table(ACTOR, sel.Prioritized(0.6), ACTOR_CAPACITY),
            table(SMALL, sel.Prioritized(0.6), max(small, 1)),
            table(ATARI, sel.Uniform(), max(atari, 1))], port=None, host="127.0.0.1")
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
    TrajectoryDataset), filled through a writer over localhost gRPC.
    dm-reverb 0.14 binds every interface; its clients here use 127.0.0.1."""

    def __init__(self, small: int, atari: int, frames: str | None, tmp: str,
                 **_: Any) -> None:
        import reverb
        import tensorflow as tf

        def table(name: str, sampler: Any, size: int, signature: Any) -> Any:
            return reverb.Table(name, sampler, reverb.selectors.Fifo(), size,
                                reverb.rate_limiters.MinSize(1), signature=signature)

        shape = (tuple(np.load(frames, mmap_mode="r").shape[1:]) if frames
                 else (84, 84, 4))
        small_sig = {"observation": tf.TensorSpec((1, SMALL_OBS), tf.float32)}
        atari_sig = {"observation": tf.TensorSpec((ATARI_LENGTH, *shape), tf.uint8)}
        self.server = reverb.Server([
            table(ACTOR, reverb.selectors.Prioritized(0.6), ACTOR_CAPACITY, small_sig),
            table(SMALL, reverb.selectors.Prioritized(0.6), max(small, 1), small_sig),
            table(ATARI, reverb.selectors.Uniform(), max(atari, 1), atari_sig)],
            checkpointer=reverb.checkpointers.DefaultCheckpointer(path=tmp))
        client = reverb.Client(f"127.0.0.1:{self.server.port}")
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
    stderr); exit on ``{"op": "quit"}``, end of input (the parent is gone)
    or, whatever the process is doing, after ``max_seconds``."""
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


if __name__ == "__main__":
    # Run as a file: this folder is sys.path[0]; drop it, so that its modules
    # (env, report, runner, ...) cannot shadow anything the workers import.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    worker_main(sys.argv[1], json.loads(sys.argv[3]), float(sys.argv[2]))
