"""fastreplay's side of the standard workloads of ``fastreplay bench``.

The table factories (``fastreplay_prioritized``, ``fastreplay_uniform``,
``fastreplay_replay_buffer``, ``fastreplay_replay_buffer_uniform``) fill a
buffer of ``capacity`` items through the same public API a user calls and
return the workload objects that :mod:`fastreplay.bench.peers` defines, so
every library is driven by the same code.  Sampling computes importance
weights, as the peers do.  The writer, sampling, memory and concurrency
workloads follow.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

import fastreplay
from fastreplay import errors, rate_limiters, selectors
from fastreplay.bench.peers import PrioritizedWorkload, UniformWorkload, transitions


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


# ----- writer workloads -----

SMALL_OBS = ((8,), np.float32)
ATARI_OBS = ((84, 84, 4), np.uint8)


def atari_frames(n: int, seed: int = 0,
                 shape: tuple[int, ...] = (84, 84, 4)) -> list[np.ndarray]:
    """``n`` Atari-like uint8 observations of ``shape`` ((H, W, C), (H, W) or
    (D,); default DQN's [84, 84, 4]): a dark background with a ground line,
    a few moving bright rectangles and a noisy score bar, stacked C frames
    deep as DQN does (consecutive observations share C - 1 frames)."""
    if len(shape) == 3:
        height, width, depth = shape
    elif len(shape) == 2:
        (height, width), depth = shape, 1
    elif len(shape) == 1:
        height, width, depth = 1, shape[0], 1
    else:
        raise ValueError(f"shape must have 1 to 3 dimensions, got {shape}")
    if min(height, width, depth) < 1:
        raise ValueError(f"shape must be positive, got {shape}")
    rng = np.random.default_rng(seed)
    size = max(1, min(height, width) // 14)  # 6 pixels on an 84-pixel frame
    ground = height * 5 // 6, max(1, height // 21)  # rows 70:74 of 84
    bar = slice(2, 4) if height >= 8 else slice(0, 1)  # score bar rows
    bar_rows = bar.stop - bar.start
    frames = []
    for t in range(n + depth - 1):
        f = np.zeros((height, width), np.uint8)
        f[ground[0]:ground[0] + ground[1], :] = 90
        for k in range(4):
            x = (7 * t + 19 * k) % max(1, width - size - 2)
            y = (3 * t + 23 * k) % max(1, height * 5 // 7)
            f[y:y + size, x:x + size] = 200 + 10 * k
        f[bar, :] = rng.integers(0, 255, (bar_rows, width), dtype=np.uint8)
        frames.append(f)
    return [np.stack(frames[t:t + depth], axis=-1).reshape(shape) for t in range(n)]


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
        # Steps made up front, as dm-reverb's side of the benchmark does
        # (reverb_peer._Steps): the timed loop only appends and creates items.
        self.data = step_data(obs, num_obs)
        # ``is None``, not ``or``: an empty Table is falsy (it has __len__).
        self.table = table if table is not None else fastreplay.Table(
            "bench", selectors.Prioritized(0.6), selectors.Fifo(), 1_000_000,
            rate_limiters.MinSize(1),
        )
        self.writer = fastreplay.TrajectoryWriter(
            self.table, 5,
            chunk_store=fastreplay.ChunkStore() if chunk_store is None else chunk_store,
        )
        self.steps = 0
        self.max_in_flight = max_in_flight

    def run(self, n_steps: int) -> None:
        w, data = self.writer, self.data
        for _ in range(n_steps):
            w.append(data[self.steps % len(data)])
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


# ----- StructuredWriter workload (issue 5) -----

PATTERN_LENGTH = 10
FLUSH_EVERY = 100
EPISODE_STEPS = 1000


def step_data(obs: tuple[tuple[int, ...], Any], num_steps: int = 64, seed: int = 0
              ) -> list[dict[str, Any]]:
    """``num_steps`` steps ``{observation, action: int32, reward: float32}``
    made up front (numpy scalars for action and reward, as an environment
    loop gives them), so data generation is not timed; Atari observations
    are ``atari_frames``, others standard normal."""
    shape, dtype = obs
    rng = np.random.default_rng(seed)
    if dtype == np.uint8 and shape == ATARI_OBS[0]:
        observations = atari_frames(num_steps, seed)
    else:
        observations = [rng.standard_normal(shape).astype(dtype)
                        for _ in range(num_steps)]
    actions = rng.integers(0, 18, num_steps, dtype=np.int32)
    rewards = rng.standard_normal(num_steps).astype(np.float32)
    return [{"observation": o, "action": a, "reward": r}
            for o, a, r in zip(observations, actions, rewards, strict=True)]


class StructuredWorkload:
    """Steps ``{observation, action, reward}`` into a Prioritized(0.6) table
    (Fifo remover, max size 1e6, MinSize(1)) with one length-10 item over
    every field per step once 10 steps of the episode exist, ``flush()``
    every 100 steps and ``end_episode()`` every 1,000 steps (both counted
    across runs); ``run`` ends with ``flush()``.

    ``via="structured"``: a StructuredWriter with one config
    ``{k: ref[k][-10:]}`` creates the items.  ``via="trajectory"``: a
    TrajectoryWriter(num_keep_alive_refs=10) creates the same items with
    ``create_item`` over ``history[k][-10:]``.  Steps are ``step_data``,
    reused cyclically.  ``reverb_peer.reverb_structured`` is the same loop
    on dm-reverb.
    """

    def __init__(self, obs: tuple[tuple[int, ...], Any], via: str = "structured",
                 num_steps: int = 64, length: int = PATTERN_LENGTH,
                 chunk_store: fastreplay.ChunkStore | None = None) -> None:
        if via not in ("structured", "trajectory"):
            raise ValueError(f"via must be 'structured' or 'trajectory', not {via!r}")
        self.data = step_data(obs, num_steps)
        self.keys = tuple(self.data[0])
        self.length = length
        self.via = via
        self.table = fastreplay.Table(
            "bench", selectors.Prioritized(0.6), selectors.Fifo(), 1_000_000,
            rate_limiters.MinSize(1),
        )
        store = fastreplay.ChunkStore() if chunk_store is None else chunk_store
        self.writer: Any
        if via == "structured":
            from fastreplay import structured_writer as sw

            ref = sw.create_reference_step(self.data[0])
            config = sw.create_config({k: ref[k][-length:] for k in self.keys},
                                      "bench")
            self.writer = sw.StructuredWriter(self.table, [config], chunk_store=store)
        else:
            self.writer = fastreplay.TrajectoryWriter(self.table, length,
                                                      chunk_store=store)
        self.steps = 0  # appended so far, across runs

    def run(self, n_steps: int) -> None:
        w, data, keys, length = self.writer, self.data, self.keys, self.length
        items = self.via == "trajectory"
        for _ in range(n_steps):
            w.append(data[self.steps % len(data)])
            if items and w.episode_steps >= length:
                h = w.history
                w.create_item("bench", 1.0, {k: h[k][-length:] for k in keys})
            self.steps += 1
            if self.steps % EPISODE_STEPS == 0:
                w.end_episode()
            elif self.steps % FLUSH_EVERY == 0:
                w.flush()
        w.flush()

    def close(self) -> None:
        self.writer.close()


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

    def close(self) -> None:
        """Stop the server (its table refuses further calls)."""
        self.server.stop()


def fastreplay_replay_buffer_uniform(capacity: int = 1_000_000, seed: int = 0
                                     ) -> UniformWorkload:
    """A uniform ``ReplayBuffer`` of ``capacity`` transitions with the peers'
    five small float32 fields (``peers.transitions``); sampling gathers all
    five, as cpprb, TorchRL and SB3 do."""
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    rb = fastreplay.ReplayBuffer(capacity, seed=seed)
    for lo in range(0, capacity, 100_000):
        fields: dict[str, Any] = transitions(rng, min(100_000, capacity - lo))
        rb.add_batch(**fields)
    fill = time.perf_counter() - t0
    return UniformWorkload("fastreplay_replay_buffer_uniform", capacity, fill,
                           rb.sample)


def stored_bytes_per_step(steps: int = 2000) -> dict[str, float]:
    """Write ``steps`` Atari steps with one length-5 item per step into a
    fresh ChunkStore; return stored and raw bytes per step and their ratio
    (the store counts live chunks: every step here is still referenced)."""
    store = fastreplay.ChunkStore()
    work = WriterWorkload(ATARI_OBS, num_obs=2000, chunk_store=store)
    work.run(steps)
    stats = store.stats()
    raw_step = int(np.prod(ATARI_OBS[0])) + 4 + 4  # observation, action, reward
    stored = stats["stored_bytes"] / work.steps
    return {"stored_bytes_per_step": stored, "raw_bytes_per_step": float(raw_step),
            "item_payload_bytes": float(5 * raw_step),
            "stored_over_raw": stored / raw_step}


def run_threads(threads: list[threading.Thread]) -> float:
    """Start every thread, join them all; the wall time in seconds."""
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def concurrent_throughput(writers: int, steps: int, batch: int = 256,
                          sampler: bool = True) -> tuple[float, float]:
    """``writers`` threads each write ``steps`` Atari steps (one length-5 item
    per step) into one Prioritized table while (with ``sampler``) one thread
    samples batches of ``batch`` items with ``sample_batch`` until the
    writers finish.  Returns aggregate (steps/s, sampled items/s) over the
    writers' wall time."""
    table = fastreplay.Table("bench", selectors.Prioritized(0.6), selectors.Fifo(),
                             1_000_000, rate_limiters.MinSize(1))
    server = fastreplay.Server([table])
    client = server.localhost_client()
    works = [WriterWorkload(ATARI_OBS, table=table) for _ in range(writers)]
    done = threading.Event()
    sampled = [0]

    def sample() -> None:
        while not done.is_set():
            try:
                info, _ = client.sample_batch("bench", batch, timeout=0.05)
            except errors.DeadlineExceededError:
                continue
            sampled[0] += len(info.key)

    threads = [threading.Thread(target=w.run, args=(steps,)) for w in works]
    sampling = threading.Thread(target=sample if sampler else done.wait)
    sampling.start()
    wall = run_threads(threads)
    done.set()
    sampling.join()
    for w in works:
        w.writer.close()
    server.stop()
    return writers * steps / wall, sampled[0] / wall
