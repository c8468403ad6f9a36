"""fastreplay's side of the table benchmarks, shaped like benchmarks/peers.py.

``fastreplay_prioritized`` and ``fastreplay_uniform`` build a table of
``capacity`` items through the same public API a user calls and return the
workload objects that ``peers.py`` defines, so every library is driven by the
same code.  Sampling computes importance weights, as the peers do.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from peers import PrioritizedWorkload, UniformWorkload

import fastreplay
from fastreplay import rate_limiters, selectors


def _filled_table(sampler: selectors.ItemSelector, capacity: int, seed: int
                  ) -> tuple[fastreplay.Table, float, np.random.Generator]:
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    table = fastreplay.Table(
        "bench", sampler, selectors.Fifo(), capacity, rate_limiters.MinSize(1),
        seed=seed,
    )
    table.insert_batch(
        np.arange(capacity, dtype=np.uint64), rng.uniform(1e-3, 1.0, capacity)
    )
    return table, time.perf_counter() - t0, rng


def fastreplay_prioritized(
    capacity: int = 1_000_000, alpha: float = 0.6, seed: int = 0
) -> PrioritizedWorkload:
    table, fill, rng = _filled_table(selectors.Prioritized(alpha), capacity, seed)

    def sample(batch_size: int, beta: float) -> tuple[Any, Any]:
        info = table.sample(batch_size)
        return (info, info.weights(beta)), info.key

    return PrioritizedWorkload(
        "fastreplay_prioritized", capacity, fill, sample, table.update_priorities, rng
    )


def fastreplay_uniform(capacity: int = 1_000_000, seed: int = 0) -> UniformWorkload:
    table, fill, _ = _filled_table(selectors.Uniform(), capacity, seed)
    return UniformWorkload("fastreplay_uniform", capacity, fill, table.sample)


# ----- writer workloads (DESIGN.md section 6, workloads 1, 4 and 5) -----

SMALL_OBS = ((8,), np.float32)
ATARI_OBS = ((84, 84, 4), np.uint8)


def atari_frames(n: int, seed: int = 0) -> list[np.ndarray]:
    """Atari-like uint8[84,84,4] observations: a dark background with a few
    moving bright rectangles and some noise rows, stacked 4 frames deep as
    DQN does (consecutive observations share 3 of their 4 frames)."""
    rng = np.random.default_rng(seed)
    frames = []
    for t in range(n + 3):
        f = np.zeros((84, 84), np.uint8)
        f[70:74, :] = 90  # ground
        for k in range(4):
            x, y = (7 * t + 19 * k) % 76, (3 * t + 23 * k) % 60
            f[y:y + 6, x:x + 6] = 200 + 10 * k
        f[2:4, :] = rng.integers(0, 255, (2, 84), dtype=np.uint8)  # score bar
        frames.append(f)
    return [np.stack(frames[t:t + 4], axis=-1) for t in range(n)]


class WriterWorkload:
    """Append steps ``{observation, action, reward}`` and, once 5 steps are
    available, create one item per step over the last 5 steps (SARS-style
    overlapping items) into a Prioritized table of capacity 1e6;
    ``end_episode`` every 1,000 steps; with ``max_in_flight``, also
    ``flush(max_in_flight)`` after each item as Acme's adders do."""

    def __init__(self, obs: tuple[tuple[int, ...], Any], num_obs: int = 64,
                 chunk_store: fastreplay.ChunkStore | None = None,
                 table: fastreplay.Table | None = None,
                 max_in_flight: int | None = None) -> None:
        shape, dtype = obs
        if dtype == np.uint8 and shape == ATARI_OBS[0]:
            self.obs = atari_frames(num_obs)
        else:
            rng = np.random.default_rng(0)
            self.obs = [rng.standard_normal(shape).astype(dtype) for _ in range(num_obs)]
        self.table = table or fastreplay.Table(
            "bench", selectors.Prioritized(0.6), selectors.Fifo(), 1_000_000,
            rate_limiters.MinSize(1),
        )
        self.writer = fastreplay.TrajectoryWriter(
            self.table, 5, chunk_store=chunk_store or fastreplay.ChunkStore()
        )
        self.steps = 0
        self.max_in_flight = max_in_flight

    def run(self, n_steps: int) -> None:
        w, obs = self.writer, self.obs
        for _ in range(n_steps):
            i = self.steps
            w.append({"observation": obs[i % len(obs)], "action": np.int32(i % 7),
                      "reward": np.float32(1.0)})
            if w.episode_steps >= 5:
                h = w.history
                w.create_item("bench", 1.0, {
                    "observation": h["observation"][-5:],
                    "action": h["action"][-5:],
                    "reward": h["reward"][-5:],
                })
                if self.max_in_flight is not None:  # as Acme's adders do
                    w.flush(self.max_in_flight)
            self.steps += 1
            if self.steps % 1000 == 0:
                w.end_episode()
        w.flush()


# ----- client workloads (issue 4): ReplayBuffer and sample_batch -----


def fastreplay_replay_buffer(
    capacity: int = 1_000_000, alpha: float = 0.6, seed: int = 0
) -> PrioritizedWorkload:
    """``ReplayBuffer(alpha)`` holding ``capacity`` transitions with one
    float32 field ``obs`` of shape 1, like ``peers.cpprb_prioritized``;
    sampling gathers that field and computes importance weights."""
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    rb = fastreplay.ReplayBuffer(capacity, alpha=alpha, seed=seed)
    for lo in range(0, capacity, 100_000):
        n = min(100_000, capacity - lo)
        rb.add_batch(obs=rng.standard_normal((n, 1), np.float32),
                     priorities=rng.uniform(1e-3, 1.0, n))
    fill = time.perf_counter() - t0

    def sample(batch_size: int, beta: float) -> tuple[Any, Any]:
        batch = rb.sample(batch_size, beta)
        return batch, batch["indexes"]

    return PrioritizedWorkload("fastreplay_replay_buffer", capacity, fill, sample,
                               rb.update_priorities, rng)


class SampleBatchWorkload:
    """A Uniform table of ``size`` length-5 items of small steps
    ``{observation: float32[8], action: int32, reward: float32}`` written by
    a TrajectoryWriter; ``run(n)`` draws n batches with ``sample_batch``."""

    def __init__(self, size: int = 100_000, batch: int = 256) -> None:
        table = fastreplay.Table("bench", selectors.Uniform(), selectors.Fifo(), size,
                                 rate_limiters.MinSize(1))
        self.server = fastreplay.Server([table])
        self.client = self.server.localhost_client()
        self.batch = batch
        work = WriterWorkload(SMALL_OBS, table=table)
        work.writer = self.client.trajectory_writer(5)
        work.run(size + 4)

    def run(self, n: int) -> int:
        for _ in range(n):
            self.client.sample_batch("bench", self.batch)
        return n * self.batch
