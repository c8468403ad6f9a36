"""Workloads of issue 13 ("replay at the hardware limit"), side by side with
the peers in one run:

* ``per-images``: a prioritized buffer of 100k transitions with uint8[84,84]
  ``obs`` and ``next_obs`` (Atari-like frames), sample 256 with importance
  weights: ``ReplayBuffer(alpha=0.6)`` with ``compression=None`` (raw
  chunks: the gather limit) and ``'lz4'``, against Tianshou's and cpprb's
  prioritized buffers holding the same arrays.
* ``add-batch``: ``add_batch`` of 256 small transitions (float32[8] obs and
  next_obs, action, reward, done) into a full 1M buffer (each call evicts
  256), prioritized and uniform, against cpprb's ``add`` of 256 rows.
* ``add-one``: ``ReplayBuffer.add`` of one such transition (prioritized)
  against cpprb's ``add`` of one.
* ``frames``: each frame once: 4-stacked noise-like frames with
  ``next_obs`` in ``ReplayBuffer(next_of='obs', stack_compress='obs')``
  against the same buffer storing whole stacks and cpprb's ``stack_compress``
  (stored bytes per step, sample 256).
* ``writer-step``: the loop of a Reverb user (append {observation:
  float32[8], action, reward}, then an item of three ``history[...][-5:]``
  slices) with fastreplay's TrajectoryWriter and with a do-nothing writer,
  the floor every writer pays; their difference is fastreplay's share.

Every function takes ``(cfg, rec)`` as the runner's workloads do.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

import fastreplay
from fastreplay import _core, rate_limiters, selectors
from fastreplay.bench import peers, workloads

if TYPE_CHECKING:
    from fastreplay.bench.results import Config
    from fastreplay.bench.runner import _Recorder

IMAGES = 100_000  # transitions of the per-images workload (FULL)
_SMALL = {"obs": ((8,), np.float32), "next_obs": ((8,), np.float32),
          "action": ((), np.int64), "reward": ((), np.float32),
          "done": ((), np.bool_)}


def small_transitions(rng: np.random.Generator, n: int) -> dict[str, Any]:
    """n transitions of the add workloads' five fields."""
    return {"obs": rng.standard_normal((n, 8), np.float32),
            "next_obs": rng.standard_normal((n, 8), np.float32),
            "action": rng.integers(0, 18, n),
            "reward": rng.standard_normal(n, np.float32),
            "done": rng.random(n) < 0.01}


def image_pairs(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``obs`` and ``next_obs`` of n Atari-like transitions: uint8[84,84]
    frames, next_obs[t] = obs[t + 1] (64 distinct frames, reused)."""
    frames = np.stack(workloads.atari_frames(65, seed, (84, 84)))
    idx = np.arange(n) % 64
    return frames[idx], frames[idx + 1]


# ----- per-images -----

def _fastreplay_images(n: int, compression: str | None) -> Callable[[], Any]:
    obs, nxt = image_pairs(n)
    rb = fastreplay.ReplayBuffer(n, alpha=0.6, seed=0, compression=compression)
    rng = np.random.default_rng(0)
    for lo in range(0, n, 10_000):
        hi = min(n, lo + 10_000)
        rb.add_batch(obs=obs[lo:hi], next_obs=nxt[lo:hi],
                     priorities=rng.uniform(1e-3, 1.0, hi - lo))
    return lambda: rb.sample(256, 0.4)


def _tianshou_images(n: int) -> Callable[[], Any]:
    from tianshou.data import Batch, PrioritizedReplayBuffer

    obs, nxt = image_pairs(n)
    np.random.seed(0)
    rb = PrioritizedReplayBuffer(n, alpha=0.6, beta=0.4)
    no = np.zeros(n, bool)
    rb.set_batch(Batch(obs=obs, act=np.zeros(n, np.int64), rew=np.zeros(n, np.float32),
                       terminated=no, truncated=no.copy(), done=no.copy(),
                       obs_next=nxt))
    rb._size = n  # as tianshou's ReplayBuffer.from_data does
    rb.last_index[0] = n - 1
    rb.update_weight(np.arange(n), np.random.default_rng(0).uniform(1e-3, 1.0, n))
    return lambda: rb.sample(256)


def _cpprb_images(n: int) -> Callable[[], Any]:
    import cpprb

    obs, nxt = image_pairs(n)
    rb = cpprb.PrioritizedReplayBuffer(
        n, {"obs": {"shape": (84, 84), "dtype": np.uint8},
            "next_obs": {"shape": (84, 84), "dtype": np.uint8}}, alpha=0.6)
    rng = np.random.default_rng(0)
    for lo in range(0, n, 10_000):
        hi = min(n, lo + 10_000)
        rb.add(obs=obs[lo:hi], next_obs=nxt[lo:hi],
               priorities=rng.uniform(1e-3, 1.0, hi - lo))
    return lambda: rb.sample(256, beta=0.4)


def per_images(cfg: Config, rec: _Recorder) -> None:
    name, n = "per-images", min(IMAGES, cfg.capacity)
    rounds, inner = cfg.rounds, max(1, cfg.inner // 5)
    fn = _fastreplay_images(n, None)
    rec.time(name, "fastreplay", "ReplayBuffer(compression=None)", fn, rounds,
             inner=inner, per="batch of 256", baseline=True)
    fn = _fastreplay_images(n, "lz4")
    default = _core._gather_threads()
    try:  # one core's decode rate, then every core's
        _core._gather_threads(1)
        rec.time(name, "fastreplay", "ReplayBuffer(compression='lz4'), 1 gather "
                 "thread", fn, rounds, inner=inner, per="batch of 256", kind="variant")
    finally:
        _core._gather_threads(0)
    rec.time(name, "fastreplay", f"ReplayBuffer(compression='lz4'), {default} gather "
             "threads", fn, rounds, inner=inner, per="batch of 256", kind="variant")
    del fn
    for library, build in (("tianshou", _tianshou_images), ("cpprb", _cpprb_images)):
        variant = "PrioritizedReplayBuffer"
        key = f"{name}-{library}"
        fn = rec.peer(name, library, partial(_guarded, key, build, n), key)
        if fn is not None:
            rec.time(name, library, variant, fn, rounds, inner=inner,
                     per="batch of 256", kind="peer")
        del fn


def _guarded(key: str, build: Callable[[int], Callable[..., Any]], n: int
             ) -> Callable[..., Any] | None:
    """``build(n)``, or None with the reason in ``peers.UNAVAILABLE[key]``."""
    return peers.guard(key, lambda: build(n))


# ----- frames -----

FRAME_EPISODE = 500
FRAME_STEPS = 10_000  # steps of the frames workload (FULL; at most the capacity)


def noise_episodes(steps: int, seed: int = 0) -> Any:
    """(obs, next_obs, done) of 4-stacked noise-like uint8[84,84] frames (no
    compression helps); an episode starts with its first frame repeated."""
    rng = np.random.default_rng(seed)
    stack: list[np.ndarray] = []
    for t in range(steps):
        if t % FRAME_EPISODE == 0:
            stack = [rng.integers(0, 256, (84, 84), dtype=np.uint8)] * 4
        obs = np.stack(stack, -1)
        stack = stack[1:] + [rng.integers(0, 256, (84, 84), dtype=np.uint8)]
        yield obs, np.stack(stack, -1), (t + 1) % FRAME_EPISODE == 0


def _frames_buffer(steps: int, frames: bool) -> fastreplay.ReplayBuffer:
    kw: dict[str, Any] = {"next_of": "obs", "stack_compress": "obs"} if frames else {}
    rb = fastreplay.ReplayBuffer(steps, seed=0, compression=None, **kw)
    for obs, nxt, done in noise_episodes(steps):
        rb.add(obs=obs, next_obs=nxt, act=0, rew=0.0, done=done)
    return rb


def _cpprb_frames(steps: int) -> Callable[[], Any]:
    import cpprb

    env = {"obs": {"shape": (84, 84, 4), "dtype": np.uint8}, "act": {}, "rew": {},
           "done": {}}
    rb = cpprb.ReplayBuffer(steps, env, next_of="obs", stack_compress="obs")
    for obs, nxt, done in noise_episodes(steps):
        rb.add(obs=obs, next_obs=nxt, act=0, rew=0.0, done=done)
        if done:
            rb.on_episode_end()
    return lambda: rb.sample(256)


def frames(cfg: Config, rec: _Recorder) -> None:
    from fastreplay.bench.results import Result

    name, steps = "frames", min(cfg.capacity, FRAME_STEPS)
    rounds, inner = cfg.rounds, max(1, cfg.inner // 5)
    payload = 2 * 84 * 84 * 4  # obs + next_obs as stacks
    for variant, stacked, base in (("next_of + stack_compress", True, True),
                                   ("stacks stored whole", False, False)):
        rb = _frames_buffer(steps, stacked)
        stored = rb.chunk_store.stats()["stored_bytes"] / steps
        rec.add(Result(name, "fastreplay", f"{variant}: stored", stored, "B",
                       "step", 1, "fastreplay" if base else "variant", base))
        rec.time(name, "fastreplay", f"{variant}: sample 256",
                 partial(rb.sample, 256), rounds, inner=inner, per="batch of 256")
        del rb
    rec.add(Result(name, "uncompressed", "obs + next_obs as stacks",
                   payload, "B", "step", 1, kind="reference"))
    key = f"{name}-cpprb"
    peer = rec.peer(name, "cpprb", partial(_guarded, key, _cpprb_frames, steps), key)
    if peer is not None:
        rec.time(name, "cpprb", "next_of + stack_compress: sample 256", peer, rounds,
                 inner=inner, per="batch of 256", kind="peer")


# ----- add-batch and add-one -----

def _filled_fastreplay(capacity: int, alpha: float | None) -> fastreplay.ReplayBuffer:
    rb = fastreplay.ReplayBuffer(capacity, alpha=alpha, seed=0)
    rng = np.random.default_rng(0)
    for lo in range(0, capacity, 100_000):
        rb.add_batch(**small_transitions(rng, min(100_000, capacity - lo)))
    return rb


def _filled_cpprb(capacity: int, alpha: float | None) -> Any:
    import cpprb

    env = {k: {"shape": s, "dtype": d} if s else {"dtype": d}
           for k, (s, d) in _SMALL.items()}
    rb = (cpprb.ReplayBuffer(capacity, env) if alpha is None
          else cpprb.PrioritizedReplayBuffer(capacity, env, alpha=alpha))
    rng = np.random.default_rng(0)
    for lo in range(0, capacity, 100_000):
        rb.add(**small_transitions(rng, min(100_000, capacity - lo)))
    return rb


def _cpprb_add(capacity: int, alpha: float | None) -> Callable[..., Any]:
    return _filled_cpprb(capacity, alpha).add  # type: ignore[no-any-return]


def add_batch(cfg: Config, rec: _Recorder) -> None:
    name, rounds, inner = "add-batch", cfg.rounds, cfg.inner
    batch = small_transitions(np.random.default_rng(1), 256)
    for label, alpha in (("prioritized", 0.6), ("uniform", None)):
        rb = _filled_fastreplay(cfg.capacity, alpha)
        rec.time(name, "fastreplay", f"{label}: ReplayBuffer.add_batch",
                 partial(rb.add_batch, **batch), rounds, inner=inner,
                 per="256 rows", baseline=alpha is not None)
        del rb
        key = f"{name}-{label}-cpprb"
        peer = rec.peer(name, "cpprb", partial(_guarded, key, partial(
            _cpprb_add, alpha=alpha), cfg.capacity), key)
        if peer is not None:
            rec.time(name, "cpprb", f"{label}: ReplayBuffer.add_batch",
                     partial(peer, **batch), rounds, inner=inner, per="256 rows",
                     kind="peer")
        del peer


def add_one(cfg: Config, rec: _Recorder) -> None:
    name, rounds, inner = "add-one", cfg.rounds, cfg.inner * 20
    rng = np.random.default_rng(2)
    # numpy scalars of the buffer's dtypes (a Python float would be float64)
    rows = [{k: v[0] for k, v in small_transitions(rng, 1).items()} for _ in range(64)]
    state = [0]

    def one(add: Callable[..., Any]) -> Callable[[], None]:
        def call() -> None:
            i = state[0] = (state[0] + 1) & 63
            add(**rows[i])
        return call

    rb = _filled_fastreplay(cfg.capacity, 0.6)
    rec.time(name, "fastreplay", "ReplayBuffer.add (prioritized)", one(rb.add), rounds,
             inner=inner, per="transition", baseline=True)
    del rb
    key = f"{name}-cpprb"
    peer = rec.peer(name, "cpprb", partial(_guarded, key, partial(
        _cpprb_add, alpha=0.6), cfg.capacity), key)
    if peer is not None:
        rec.time(name, "cpprb", "ReplayBuffer.add (prioritized)", one(peer), rounds,
                 inner=inner, per="transition", kind="peer")


# ----- writer-step -----

class NullWriter:
    """A writer that does nothing: the floor of the user's loop (dict
    building, calls and slicing cost the same with any writer)."""

    class _History:
        def __getitem__(self, key: Any) -> Any:
            return self

    def __init__(self) -> None:
        h = self._History()
        self.history = {"observation": h, "action": h, "reward": h}

    def append(self, step: Any) -> None:
        pass

    def create_item(self, table: str, priority: float, trajectory: Any) -> None:
        pass


def step_loop(writer: Any, steps: int, obs: list[np.ndarray]) -> float:
    """Seconds per step of the user's loop with ``writer``."""
    t0 = time.perf_counter()
    for i in range(steps):
        writer.append({"observation": obs[i & 63], "action": np.int32(i),
                       "reward": np.float32(1.0)})
        if i >= 4:
            h = writer.history
            writer.create_item("t", 1.0, {"observation": h["observation"][-5:],
                                          "action": h["action"][-5:],
                                          "reward": h["reward"][-5:]})
    return (time.perf_counter() - t0) / steps


def writer_step(cfg: Config, rec: _Recorder) -> None:
    from fastreplay.bench.results import from_values

    name, steps = "writer-step", cfg.writer_steps * 20
    obs = [np.random.default_rng(i).random(8, np.float32) for i in range(64)]
    table = fastreplay.Table("t", selectors.Prioritized(0.6), selectors.Fifo(),
                             1_000_000, rate_limiters.MinSize(1))
    server = fastreplay.Server([table])
    try:
        client = server.localhost_client()
        own, floor = [], []
        for _ in range(cfg.step_rounds):  # paired rounds: the same noise
            with client.trajectory_writer(5) as w:
                own.append(step_loop(w, steps, obs))
            floor.append(step_loop(NullWriter(), steps, obs))
    finally:
        server.stop()
    pairs = [a - b for a, b in zip(own, floor, strict=True)]
    # The floor and share rows are "per step" too, but get no ratio: "per"
    # differs from the loop's.
    rows = (("TrajectoryWriter loop", own, "step", True),
            ("do-nothing writer loop", floor, "step (floor)", False),
            ("fastreplay's share (paired loop - floor)", pairs, "step (share)", False))
    for variant, values, per, base in rows:
        rec.add(from_values(name, "fastreplay", variant, values, "s", per,
                            "fastreplay" if base else "reference", base))
