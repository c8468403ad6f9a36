"""The anchors of ``ray_bench.py``: a naive Ray actor around one
``fastreplay.ReplayBuffer`` (PER), K such actors (Ape-X style, for the Atari
figure), and TorchRL's ``RayReplayBuffer``: prioritized (``PrioritizedSampler``,
sample + ``update_priority``, the workload of the other rows) where its C++
segment trees load against the installed torch (torchrl 0.14.1's wheel: torch
2.14.1, not 2.13.0), uniform sampling with nothing to update otherwise.

Placement (every figure, every system): the buffer actor on node 1, the
learner on node 0 (the driver's), one writer actor per node; K=4 buffers
alternate over the nodes.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import ray_bench_common as rc
from ray_bench_common import BETA, Row, Sizes


def _remote(cls: type, node: str, *args: Any) -> Any:
    return rc.remote_class(cls).options(**rc.on_node(node)).remote(*args)


class NaiveBuffer:
    """One ``fastreplay.ReplayBuffer`` in a Ray actor, every call a round
    trip (what a user writes first)."""

    def __init__(self, capacity: int, seed: int) -> None:
        import fastreplay

        self.rb = fastreplay.ReplayBuffer(capacity, alpha=rc.ALPHA, seed=seed)

    def add_batch(self, batch: dict[str, np.ndarray]) -> int:
        self.rb.add_batch(**batch)
        return len(self.rb)

    def sample(self, n: int) -> dict[str, Any]:
        return self.rb.sample(n, BETA)

    def update_priorities(self, keys: np.ndarray, priorities: np.ndarray) -> None:
        self.rb.update_priorities(keys, priorities)

    def size(self) -> int:
        return len(self.rb)


def _tensordict(batch: dict[str, np.ndarray]) -> Any:
    import torch
    from tensordict import TensorDict

    n = len(batch["rew"])
    return TensorDict({k: torch.from_numpy(np.ascontiguousarray(v))
                       for k, v in batch.items()}, batch_size=[n])


class BatchWriter:
    """A writer actor sending ``batch`` rows per call, round robin over its
    targets (naive actors, or one TorchRL client)."""

    def __init__(self, kind: str, targets: list[Any], batch: dict[str, np.ndarray]
                 ) -> None:
        self.kind, self.targets = kind, targets
        self.n = len(batch["rew"])
        self.data = _tensordict(batch) if kind == "torchrl" else batch

    def ready(self) -> bool:
        return True

    def run(self, duration: float, max_rows: float = float("inf")) -> tuple[int, float]:
        import ray

        rows, i, t0 = 0, 0, time.perf_counter()
        while rows < max_rows:
            target = self.targets[i % len(self.targets)]
            i += 1
            if self.kind == "torchrl":
                target.extend(self.data)
            else:
                ray.get(target.add_batch.remote(self.data))
            rows += self.n
            if time.perf_counter() - t0 >= duration:
                break
        return rows, time.perf_counter() - t0


class Learner:
    """The learner actor: ``batch`` rows per step (split over K naive actors
    and fetched in parallel) plus ``update_priorities`` (naive), or
    TorchRL's ``sample`` plus ``update_priority`` (prioritized) or alone
    (uniform, nothing to update)."""

    def __init__(self, kind: str, targets: list[Any], batch: int, seed: int,
                 prioritized: bool = True) -> None:
        self.kind, self.targets, self.batch = kind, targets, batch
        self.prioritized = prioritized
        self.prios = rc.new_priorities(batch, seed)
        if kind == "torchrl":
            import torch

            self.torch_prios = torch.from_numpy(self.prios.astype(np.float32))

    def ready(self) -> bool:
        return True

    def run(self, duration: float) -> tuple[int, float]:
        import ray

        k = len(self.targets)
        counts = [self.batch // k + (i < self.batch % k) for i in range(k)]
        rows, t0 = 0, time.perf_counter()
        while True:
            if self.kind == "torchrl":
                td = self.targets[0].sample(self.batch)
                if self.prioritized:
                    self.targets[0].update_priority(td["index"], self.torch_prios)
                rows += int(td.batch_size[0])
            else:
                outs = ray.get([t.sample.remote(c) for t, c in zip(self.targets, counts,
                                                                   strict=True)])
                ray.get([t.update_priorities.remote(o["indexes"],
                                                    self.prios[:len(o["indexes"])])
                         for t, o in zip(self.targets, outs, strict=True)])
                rows += sum(len(o["indexes"]) for o in outs)
            if time.perf_counter() - t0 >= duration:
                return rows, time.perf_counter() - t0



def _throughput(kind: str, targets: list[Any], cluster: rc.Cluster, sizes: Sizes,
                size_of: Any, label: str, prioritized: bool = True
                ) -> dict[str, list[Row]]:
    """writes, learner and together figures of one anchor system."""
    import ray

    nodes, t = cluster.nodes, sizes.timeout
    writers = [_remote(BatchWriter, nodes[i % len(nodes)], kind, targets,
                       rc.small_batch(sizes.batch, 10 + i)) for i in range(2)]
    learner = _remote(Learner, nodes[0], kind, targets, sizes.batch, 7, prioritized)
    try:
        ray.get([a.ready.remote() for a in (learner, *writers)], timeout=t)
        size_of()  # the buffer actor is up

        def writes(duration: float) -> float:
            refs = [w.run.remote(duration) for w in writers]
            return rc.rate(ray.get(refs, timeout=t))

        w = rc.rounds(writes, sizes.rounds, sizes.duration)
        missing = sizes.prefill - size_of()
        if missing > 0:
            ray.get([wr.run.remote(float("inf"), missing / 2) for wr in writers],
                    timeout=t)

        def learn(duration: float) -> float:
            return rc.rate([ray.get(learner.run.remote(duration), timeout=t)])

        s = rc.rounds(learn, sizes.rounds, sizes.duration)
        tw, ts = rc.together(writers, learner, sizes.rounds, sizes.duration, t)
    finally:
        rc.kill(learner, *writers)
    what = ("sample + update_priorities" if prioritized
            else "uniform sample (prioritized sampler unavailable)")
    return {"writes": [Row(label, w, note=f"{sizes.batch} rows/call")],
            "learner": [Row(label, s, note=f"{what} of {sizes.batch}")],
            "together": [Row(f"{label}: writes", tw), Row(f"{label}: sampled", ts)]}


def naive_throughput(cluster: rc.Cluster, sizes: Sizes) -> dict[str, list[Row]]:
    import ray

    buf = _remote(NaiveBuffer, cluster.nodes[-1], sizes.capacity, 1)
    try:
        ray.get(buf.size.remote(), timeout=sizes.timeout)
        return _throughput("naive", [buf], cluster, sizes,
                           lambda: ray.get(buf.size.remote(), timeout=sizes.timeout),
                           "naive actor")
    finally:
        rc.kill(buf)


def torchrl_prioritized() -> bool:
    """Whether TorchRL's prioritized sampler works here (its C++ segment
    trees load only against the torch its wheel was built for)."""
    try:
        from torchrl.data.replay_buffers.samplers import PrioritizedSampler

        PrioritizedSampler(8, rc.ALPHA, BETA)
    except Exception:  # noqa: BLE001 - a failed extension load, any type
        return False
    return True


def _torchrl_buffer(node: str, sizes: Sizes) -> Any:
    """TorchRL's Ray buffer with the other rows' PER (alpha, beta) where its
    prioritized sampler works, uniform otherwise."""
    from functools import partial

    from torchrl.data import LazyTensorStorage, RayReplayBuffer, TensorDictReplayBuffer
    from torchrl.data.replay_buffers.samplers import PrioritizedSampler

    per = ({"sampler": partial(PrioritizedSampler, sizes.capacity, rc.ALPHA, BETA)}
           if torchrl_prioritized() else {})
    return RayReplayBuffer(storage=partial(LazyTensorStorage, sizes.capacity),
                           replay_buffer_cls=TensorDictReplayBuffer,
                           batch_size=sizes.batch, remote_config=rc.on_node(node),
                           **per)


def torchrl_throughput(cluster: rc.Cluster, sizes: Sizes) -> dict[str, list[Row]]:
    rb = _torchrl_buffer(cluster.nodes[-1], sizes)
    try:
        client = rb.client()
        return _throughput("torchrl", [client], cluster, sizes, lambda: len(client),
                           "TorchRL RayReplayBuffer", torchrl_prioritized())
    finally:
        rb.close()


def naive_atari(cluster: rc.Cluster, sizes: Sizes, compressible: bool) -> Row:
    """K=4 naive actors (alternating nodes) of uint8[84,84] frames, the
    learner on node 0 sampling ``atari_batch`` over all four."""
    import ray

    nodes, t, k = cluster.nodes, sizes.timeout, 4
    bufs = [_remote(NaiveBuffer, nodes[(i + 1) % len(nodes)],
                    max(sizes.atari_capacity // k, 1), 20 + i) for i in range(k)]
    learner = _remote(Learner, nodes[0], "naive", bufs, sizes.atari_batch, 8)
    try:
        chunk = rc.frame_batch(min(256, sizes.atari_prefill // k), 3, compressible)
        per = sizes.atari_prefill // k
        for b in bufs:
            size = 0
            while size < per:
                size = ray.get(b.add_batch.remote(chunk), timeout=t)

        def learn(duration: float) -> float:
            return rc.rate([ray.get(learner.run.remote(duration), timeout=t)])

        values = rc.rounds(learn, sizes.rounds, sizes.duration)
    finally:
        rc.kill(learner, *bufs)
    kind = "compressible" if compressible else "noise"
    return Row(f"naive K=4 ({kind})", values,
               note=f"sample {sizes.atari_batch} over 4 actors + update_priorities")


def naive_startup(cluster: rc.Cluster, sizes: Sizes) -> Row:
    """Seconds from creating the actor to its first answered call."""
    import ray

    batch = rc.small_batch(sizes.batch, 0)

    def once() -> float:
        t0 = time.perf_counter()
        buf = _remote(NaiveBuffer, cluster.nodes[-1], sizes.capacity, 1)
        ray.get(buf.add_batch.remote(batch), timeout=sizes.timeout)
        elapsed = time.perf_counter() - t0
        rc.kill(buf)
        return elapsed

    return Row("naive actor", [once() for _ in range(sizes.startup_rounds)], unit="s",
               higher=False, note="actor + first add_batch")


def torchrl_startup(cluster: rc.Cluster, sizes: Sizes) -> Row:
    td = _tensordict(rc.small_batch(sizes.batch, 0))

    def once() -> float:
        t0 = time.perf_counter()
        rb = _torchrl_buffer(cluster.nodes[-1], sizes)
        rb.extend(td)
        elapsed = time.perf_counter() - t0
        rb.close()
        return elapsed

    return Row("TorchRL RayReplayBuffer", [once() for _ in range(sizes.startup_rounds)],
               unit="s", higher=False, note="buffer + first extend")
