"""Sampling after ``ReplayBuffer.add_batch`` against after ``add`` (issue 11,
part 4): batched inserts cut compressed fields into chunks as a writer of
one-step items would, so ``sample(256)`` reads the same bounded chunks
either way.  Small rows (float32[4] obs/next_obs, act, rew, done) and image
rows (Atari-like uint8[84, 84] obs/next_obs, act, rew, done).

The full-size comparison with cpprb and Tianshou (100k Atari transitions,
add_batch of 65,536 rows) is benchmarks/add_batch_atari.py.

Run: pytest benchmarks/test_bench_add_batch.py --benchmark-only
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import fastreplay
from fastreplay.bench import workloads

SIZE = 8192
BATCH_ROWS = 4096
SAMPLES = 20


def transitions(kind: str, lo: int, hi: int, frames: np.ndarray) -> dict[str, Any]:
    idx = np.arange(lo, hi)
    if kind == "image":
        obs, nxt = frames[idx % len(frames)], frames[(idx + 1) % len(frames)]
    else:
        obs = np.stack([idx, idx + 1, idx + 2, idx + 3], 1).astype(np.float32)
        nxt = obs + 1
    return {"obs": obs, "next_obs": nxt, "act": idx % 6,
            "rew": (idx % 3).astype(np.float32),
            "done": (idx % 500 == 499).astype(np.float32)}


def filled(kind: str, how: str) -> fastreplay.ReplayBuffer:
    frames = np.stack(workloads.atari_frames(256, shape=(84, 84)))
    buf = fastreplay.ReplayBuffer(SIZE, seed=0)
    for lo in range(0, SIZE, BATCH_ROWS):
        batch = transitions(kind, lo, min(SIZE, lo + BATCH_ROWS), frames)
        if how == "add_batch":
            buf.add_batch(**batch)
        else:
            for r in range(len(batch["act"])):
                buf.add(**{k: v[r] for k, v in batch.items()})
    return buf


@pytest.mark.parametrize("how", ["add_batch", "add"])
@pytest.mark.parametrize("kind", ["small", "image"])
def test_sample_after(benchmark, kind: str, how: str) -> None:
    buf = filled(kind, how)
    benchmark.group = f"ReplayBuffer sample(256) x {SAMPLES}, {kind} rows"

    def run() -> None:
        for _ in range(SAMPLES):
            buf.sample(256)

    benchmark.pedantic(run, rounds=5, warmup_rounds=1)
    benchmark.extra_info.update(filled_by=how, rows=SIZE,
                                live_chunks=buf._store.stats()["live_chunks"])
