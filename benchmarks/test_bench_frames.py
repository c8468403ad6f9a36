"""Each frame once (issue 13, part 3): Atari-like steps of 4-stacked
noise-like frames ``uint8[84, 84, 4]`` with ``next_obs``, in
``ReplayBuffer(next_of='obs', stack_compress='obs')`` against the same
buffer storing whole stacks, and cpprb's ``stack_compress``/``next_of`` as
the peer when it is installed.

Bytes per step are recorded in ``extra_info`` (``stored_over_payload``: the
goal is <= 0.3 of obs + next_obs as stacks); the timed part samples batches
of 256.

Run: pytest benchmarks/test_bench_frames.py --benchmark-only
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from fastreplay import ReplayBuffer

STEPS = int(os.environ.get("FASTREPLAY_BENCH_FRAME_STEPS", "2000"))
EPISODE = 500
BATCHES = 20
SHAPE = (84, 84)
PAYLOAD = 2 * 84 * 84 * 4  # obs + next_obs as stacks


def episodes(steps: int, seed: int = 0) -> Any:
    """(obs, next_obs, done) of noise-like frames, 4 stacked on the last axis;
    an episode starts with its first frame repeated."""
    rng = np.random.default_rng(seed)
    stack: list[np.ndarray] = []
    for t in range(steps):
        if t % EPISODE == 0:
            stack = [rng.integers(0, 256, SHAPE, dtype=np.uint8)] * 4
        obs = np.stack(stack, -1)
        stack = stack[1:] + [rng.integers(0, 256, SHAPE, dtype=np.uint8)]
        yield obs, np.stack(stack, -1), (t + 1) % EPISODE == 0


def fastreplay_buffer(frames: bool) -> tuple[ReplayBuffer, float]:
    """A filled buffer and its stored bytes per step."""
    kw: dict[str, Any] = {"next_of": "obs", "stack_compress": "obs"} if frames else {}
    buf = ReplayBuffer(STEPS, seed=0, compression=None, **kw)
    for obs, nxt, done in episodes(STEPS):
        buf.add(obs=obs, next_obs=nxt, act=0, rew=0.0, done=done)
    return buf, buf._store.stats()["stored_bytes"] / STEPS


def cpprb_buffer() -> tuple[Any, float] | None:
    try:
        import cpprb
    except ImportError:
        return None
    env = {"obs": {"shape": (84, 84, 4), "dtype": np.uint8}, "act": {},
           "rew": {}, "done": {}}
    before = resident_bytes()
    buf = cpprb.ReplayBuffer(STEPS, env, next_of="obs", stack_compress="obs")
    for obs, nxt, done in episodes(STEPS):
        buf.add(obs=obs, next_obs=nxt, act=0, rew=0.0, done=done)
        if done:
            buf.on_episode_end()
    # cpprb keeps its arrays private: the growth of resident memory (its
    # arrays are touched as they fill) stands for its stored bytes
    return buf, (resident_bytes() - before) / STEPS


def resident_bytes() -> int:
    """Resident memory of this process (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def sample(buf: Any) -> None:
    for _ in range(BATCHES):
        buf.sample(256)


@pytest.mark.parametrize("form", ["stack_compress", "stored_stacks"])
@pytest.mark.benchmark(group="frames: sample 20 x 256 Atari steps")
def test_sample_frames_fastreplay(benchmark, form: str) -> None:
    buf, per_step = fastreplay_buffer(form == "stack_compress")
    benchmark.extra_info.update(stored_bytes_per_step=per_step,
                                stored_over_payload=per_step / PAYLOAD)
    benchmark.pedantic(sample, args=(buf,), rounds=5, warmup_rounds=1)
    if form == "stack_compress":
        assert per_step <= 0.3 * PAYLOAD


@pytest.mark.benchmark(group="frames: sample 20 x 256 Atari steps")
def test_sample_frames_cpprb(benchmark) -> None:
    made = cpprb_buffer()
    if made is None:
        pytest.skip("cpprb is not installed")
    buf, per_step = made
    benchmark.extra_info.update(stored_bytes_per_step=per_step,
                                stored_over_payload=per_step / PAYLOAD)
    benchmark.pedantic(sample, args=(buf,), rounds=5, warmup_rounds=1)
