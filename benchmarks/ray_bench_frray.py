"""The ``fastreplay.ray`` rows of ``ray_bench.py``, written against the
contract (``ray-api.md``): ``ShardedServer``, its picklable ``Client``,
``trajectory_writer`` (one item per step), ``sample_batch`` +
``update_priorities``, ``dataset(prefetch=2)``, ``transport``,
``shard_info``, ``wait_for_shards``, ``checkpoint``.

Placement (as the anchors): the learner on node 0 (the driver's), one writer
actor per node; shards ``placement="spread"``.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

import numpy as np
import ray_bench_common as rc
from ray_bench_common import TABLE, Row, Sizes


class Unavailable(Exception):
    """A row that cannot run (its reason is printed under the table)."""


def module() -> Any:
    """``fastreplay.ray``, or ``Unavailable`` saying why not."""
    try:
        import fastreplay.ray as frray
    except ImportError as exc:
        raise Unavailable(f"fastreplay.ray not importable ({exc})") from None
    return frray


def _table(max_size: int) -> Any:
    import fastreplay as reverb

    return reverb.Table(name=TABLE, sampler=reverb.selectors.Prioritized(rc.ALPHA),
                        remover=reverb.selectors.Fifo(), max_size=max_size,
                        rate_limiter=reverb.rate_limiters.MinSize(1))


def server(num_shards: int, max_size: int, placement: Any = "spread",
           timeout: float = 120.0, **kwargs: Any) -> Any:
    """A ready ``ShardedServer`` of one prioritized table."""
    frray = module()
    srv = frray.ShardedServer(tables=[_table(max_size)], num_shards=num_shards,
                              placement=placement, actor_options={"num_cpus": 0},
                              **kwargs)
    srv.wait_ready(timeout)
    return srv


def client(srv: Any, transport: str | None = None) -> Any:
    """The server's client; ``transport="ray"`` forces Ray calls even to a
    shard on the same node."""
    if transport is None:
        return srv.client()
    try:
        return srv.client(transport=transport)
    except TypeError as exc:
        raise Unavailable(f"cannot force transport={transport!r}: {exc}") from None


def _steps(batch: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    return [{k: v[i] for k, v in batch.items()} for i in range(len(batch["rew"]))]


class StepWriter:
    """A writer actor, one item per step, flushed at the end of each run:
    ``mode="steps"``, ``trajectory_writer`` and one ``append`` +
    ``create_item`` a step (what an Acme adder does); ``mode="extend"``, a
    ``structured_writer`` whose config makes the same item every step, fed
    the batch's steps by one ``extend`` a call (as the anchors' writers send
    their batches)."""

    def __init__(self, client: Any, batch: dict[str, np.ndarray]) -> None:
        self.client = client
        self.batch = batch
        self.steps = _steps(batch)
        self.keys = tuple(batch)

    def ready(self) -> bool:
        return True

    def run(self, duration: float, max_rows: float = float("inf"),
            shard: int | None = None, mode: str = "steps") -> tuple[int, float]:
        kwargs = {} if shard is None else {"shard": shard}
        keys, steps = self.keys, self.steps
        if mode == "extend":
            from fastreplay import structured_writer as sw

            config = sw.create_config(sw.pattern_from_transform(
                steps[0], lambda ref: {k: ref[k][-1] for k in keys}), TABLE)
            w = self.client.structured_writer([config], **kwargs)

            def call() -> None:
                w.extend(self.batch)
        else:
            w = self.client.trajectory_writer(1, **kwargs)

            def call() -> None:
                for step in steps:
                    w.append(step)
                    h = w.history
                    w.create_item(TABLE, 1.0, {k: h[k][-1] for k in keys})

        rows, t0 = 0, time.perf_counter()
        try:
            while rows < max_rows:
                call()
                rows += len(steps)
                if time.perf_counter() - t0 >= duration:
                    break
            w.flush()
        finally:
            w.close()
        return rows, time.perf_counter() - t0


class SampleLearner:
    """The learner actor: ``sample_batch(batch)`` + ``update_priorities``,
    synchronously or through ``dataset(prefetch=2)``."""

    def __init__(self, client: Any, batch: int, seed: int) -> None:
        self.client, self.batch = client, batch
        self.prios = rc.new_priorities(batch, seed)

    def ready(self) -> bool:
        return True

    def run(self, duration: float, mode: str = "sync") -> tuple[int, float]:
        c, rows = self.client, 0
        t0 = time.perf_counter()
        if mode == "sync":
            while time.perf_counter() - t0 < duration:
                info, _ = c.sample_batch(TABLE, self.batch)
                c.update_priorities(TABLE, info.key, self.prios[:len(info.key)])
                rows += len(info.key)
        else:
            with c.dataset(TABLE, self.batch, prefetch=2) as ds:
                for info, _ in ds:
                    c.update_priorities(TABLE, info.key, self.prios[:len(info.key)])
                    rows += len(info.key)
                    if time.perf_counter() - t0 >= duration:
                        break
        c.sync()
        return rows, time.perf_counter() - t0


def _remote(cls: type, node: str, *args: Any) -> Any:
    return rc.remote_class(cls).options(**rc.on_node(node)).remote(*args)



def _size(cl: Any) -> int:
    return int(sum(t.current_size for t in cl.server_info().values()))


def throughput(cluster: rc.Cluster, sizes: Sizes) -> dict[str, list[Row]]:
    """writes, learner (sync and dataset) and together with 2 shards (one
    per node): each writer binds to the shard on its node."""
    import ray

    nodes, t = cluster.nodes, sizes.timeout
    srv = server(2, sizes.capacity, timeout=t)
    actors: list[Any] = []
    try:
        cl = srv.client()
        writers = [_remote(StepWriter, nodes[i % len(nodes)], cl,
                           rc.small_batch(sizes.batch, 10 + i)) for i in range(2)]
        learner = _remote(SampleLearner, nodes[0], cl, sizes.batch, 7)
        actors = [*writers, learner]
        ray.get([a.ready.remote() for a in actors], timeout=t)

        def writes(duration: float) -> float:
            refs = [w.run.remote(duration) for w in writers]
            return rc.rate(ray.get(refs, timeout=t))

        w = rc.rounds(writes, sizes.rounds, sizes.duration)

        def extends(duration: float) -> float:
            refs = [w.run.remote(duration, mode="extend") for w in writers]
            return rc.rate(ray.get(refs, timeout=t))

        e = rc.rounds(extends, sizes.rounds, sizes.duration)
        missing = sizes.prefill - _size(cl)
        if missing > 0:
            ray.get([wr.run.remote(float("inf"), missing / 2) for wr in writers],
                    timeout=t)

        def learn(duration: float, mode: str = "sync") -> float:
            return rc.rate([ray.get(learner.run.remote(duration, mode), timeout=t)])

        s = rc.rounds(learn, sizes.rounds, sizes.duration)
        d = rc.rounds(lambda dt: learn(dt, "dataset"), sizes.rounds, sizes.duration)
        tw, ts = rc.together(writers, learner, sizes.rounds, sizes.duration, t)
        ew, es = rc.together(writers, learner, sizes.rounds, sizes.duration, t,
                             mode="extend")
    finally:
        rc.kill(*actors)
        srv.close()
    label = "fastreplay.ray (2 shards)"
    ref = {"naive": "naive actor", "torchrl": "TorchRL RayReplayBuffer"}
    return {
        "writes": [Row(label, w, note="trajectory_writer, 1 item/step", **ref),
                   Row(f"{label} extend", e, note="structured_writer.extend of "
                       f"{sizes.batch} steps, 1 item/step", **ref)],
        "learner": [Row(label, s, note=f"sample_batch({sizes.batch}) + "
                        "update_priorities", **ref)],
        "dataset": [Row(f"{label} dataset(prefetch=2)", d, **ref)],
        "together": [
            Row(f"{label}: writes", tw, naive="naive actor: writes",
                torchrl="TorchRL RayReplayBuffer: writes"),
            Row(f"{label}: sampled", ts, naive="naive actor: sampled",
                torchrl="TorchRL RayReplayBuffer: sampled"),
            Row(f"{label} extend: writes", ew, naive="naive actor: writes",
                torchrl="TorchRL RayReplayBuffer: writes"),
            Row(f"{label} extend: sampled", es, naive="naive actor: sampled",
                torchrl="TorchRL RayReplayBuffer: sampled")],
    }


def _fill(cl: Any, num_shards: int, per_shard: int, batch: dict[str, np.ndarray]
          ) -> None:
    """``per_shard`` items on every shard, written by the driver."""
    steps = _steps(batch)
    keys = tuple(batch)
    for shard in range(num_shards):
        w = cl.trajectory_writer(1, shard=shard)
        for i in range(per_shard):
            w.append(steps[i % len(steps)])
            w.create_item(TABLE, 1.0, {k: w.history[k][-1] for k in keys})
        w.flush()
        w.close()


def atari(cluster: rc.Cluster, sizes: Sizes, compressible: bool) -> Row:
    """K=4 shards (spread) of uint8[84,84] frames; the learner on node 0."""
    import ray

    t, k = sizes.timeout, 4
    srv = server(k, sizes.atari_capacity, timeout=t)
    learner = None
    try:
        cl = srv.client()
        _fill(cl, k, sizes.atari_prefill // k,
              rc.frame_batch(min(256, sizes.atari_prefill // k), 3, compressible))
        learner = _remote(SampleLearner, cluster.nodes[0], cl, sizes.atari_batch, 8)
        ray.get(learner.ready.remote(), timeout=t)

        def learn(duration: float) -> float:
            return rc.rate([ray.get(learner.run.remote(duration), timeout=t)])

        values = rc.rounds(learn, sizes.rounds, sizes.duration)
    finally:
        if learner is not None:
            rc.kill(learner)
        srv.close()
    kind = "compressible" if compressible else "noise"
    return Row(f"fastreplay.ray K=4 ({kind})", values,
               naive=f"naive K=4 ({kind})",
               note=f"sample_batch({sizes.atari_batch}) + update_priorities")


def startup(cluster: rc.Cluster, sizes: Sizes) -> Row:
    """Seconds from ``ShardedServer(num_shards=3)`` to the first answered
    client call (``server_info``)."""

    def once() -> float:
        t0 = time.perf_counter()
        srv = server(3, sizes.capacity, timeout=sizes.timeout)
        srv.client().server_info()
        elapsed = time.perf_counter() - t0
        srv.close()
        return elapsed

    return Row("fastreplay.ray ShardedServer, 3 shards",
               [once() for _ in range(sizes.startup_rounds)], unit="s", higher=False,
               naive="naive actor", torchrl="TorchRL RayReplayBuffer",
               note="wait_ready + server_info")


def same_node(cluster: rc.Cluster, sizes: Sizes) -> list[Row]:
    """Writes of one writer actor to the shard on its own node, over shared
    memory and with Ray calls forced, each mode's rounds alternating between
    the two (a shared machine's speed drifts by a third between rounds: the
    ratio compares rounds measured side by side)."""
    import ray

    node, t = cluster.nodes[0], sizes.timeout
    srv = server(1, sizes.capacity, placement=[node], timeout=t)
    out = []
    try:
        for mode, tail in (("steps", ""), ("extend", " extend")):
            writers, got = {}, {}
            try:
                for transport in ("shm", "ray"):
                    cl = client(srv, transport)
                    got[transport] = cl.transport(0)
                    writers[transport] = _remote(StepWriter, node, cl,
                                                 rc.small_batch(sizes.batch, 10))
                values: dict[str, list[float]] = {"shm": [], "ray": []}
                # a first, shorter round of each is a warm-up, not kept
                durations = [min(sizes.duration, 0.2)] + [sizes.duration] * sizes.rounds
                for r, dt in enumerate(durations):
                    for transport, w in writers.items():
                        v = rc.rate([ray.get(w.run.remote(dt, mode=mode), timeout=t)])
                        if r:
                            values[transport].append(v)
            finally:
                rc.kill(*writers.values())
            for transport in ("shm", "ray"):
                out.append(Row(f"fastreplay.ray transport={transport}{tail}",
                               values[transport],
                               naive=f"fastreplay.ray transport=ray{tail}",
                               note=f"client.transport(0) == {got[transport]!r}"))
    finally:
        srv.close()
    return out


def restart(cluster: rc.Cluster, sizes: Sizes) -> Row:
    """Seconds from killing a shard (Ray restarts it) until it answers
    again, having restored its checkpoint of ``prefill`` items."""
    import ray

    t = sizes.timeout
    restored: list[int] = []
    with tempfile.TemporaryDirectory(prefix="ray_bench_ckpt_") as tmp:
        srv = server(2, sizes.capacity, checkpoint_dir=tmp, max_restarts=10,
                     timeout=t)
        try:
            cl = srv.client()
            _fill(cl, 1, sizes.prefill, rc.small_batch(sizes.batch, 5))
            cl.checkpoint()

            def once() -> float:
                before = cl.shard_info()[0].restarts
                t0 = time.perf_counter()
                ray.kill(srv.shard_actors[0], no_restart=False)
                deadline = time.monotonic() + min(t, 60.0)
                while time.monotonic() < deadline:
                    try:
                        info = cl.shard_info()[0]
                        if info.alive and info.restarts > before:
                            cl.wait_for_shards(t)
                            break
                    except Exception:  # noqa: BLE001 - down while restarting
                        pass
                    time.sleep(0.01)
                else:
                    raise TimeoutError("shard 0 not reported alive with restarts > "
                                       f"{before} by shard_info() within 60 s")
                elapsed = time.perf_counter() - t0
                restored.append(int(info.tables[TABLE].current_size))
                return elapsed

            values = [once() for _ in range(sizes.restart_rounds)]
        finally:
            srv.close()
    return Row("fastreplay.ray shard restart", values, unit="s", higher=False,
               note=f"kill -> answering; items restored {restored} "
                    f"of {sizes.prefill}")
