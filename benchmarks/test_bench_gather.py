"""sample_batch's gather (issue 13, parts 2 and 5), side by side with peers
when they are installed:

- PER over Atari-like uint8[84, 84] obs + next_obs (plus action, reward,
  done), ``ReplayBuffer(alpha=0.6)``, sample 256: with ``compression='lz4'``
  at one gather thread and at the default (the CPU quota; the decode runs on
  the worker pool), with ``compression=None``, and Tianshou's
  PrioritizedReplayBuffer on the same frames;
- uniform sample 256 from small transitions (five float32 fields,
  ``fastreplay.bench.peers.transitions``) against cpprb's ReplayBuffer.

Sizes: FASTREPLAY_BENCH_IMAGES images (default 100,000, the issue's
workload; 2,000 under --benchmark-disable, which only checks that the
benchmarks run) and FASTREPLAY_BENCH_CAPACITY small rows (default
1,000,000).
The numbers in the issue 13 report come from paired runs of a script that
alternates the variants in one process (pytest-benchmark runs them one
after the other, which a busy machine skews).

Run: pytest benchmarks/test_bench_gather.py --benchmark-only
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import fastreplay
from fastreplay import _core
from fastreplay.bench import peers, workloads

IMAGES = int(os.environ.get("FASTREPLAY_BENCH_IMAGES", "100000"))
CAPACITY = int(os.environ.get("FASTREPLAY_BENCH_CAPACITY", "1000000"))
BATCH = 256
ROUNDS = 5
CALLS = 20


def _frames(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct frames, the index of each step's obs and the priorities."""
    base = np.stack(workloads.atari_frames(1024, shape=(84, 84)))
    idx = np.arange(n + 1) % len(base)
    return base, idx, np.random.default_rng(0).uniform(1e-3, 1.0, n)


@pytest.fixture(scope="module")
def frames(request: pytest.FixtureRequest) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    disabled = request.config.getoption("benchmark_disable", False)
    return _frames(2000 if disabled else IMAGES)


def _image_buffer(compression: str | None, frames: Any) -> fastreplay.ReplayBuffer:
    base, idx, prios = frames
    n = len(prios)
    rb = fastreplay.ReplayBuffer(n, alpha=0.6, seed=0, compression=compression)
    for lo in range(0, n, 10_000):
        hi = min(n, lo + 10_000)
        rb.add_batch(obs=base[idx[lo:hi]], next_obs=base[idx[lo + 1:hi + 1]],
                     action=np.zeros(hi - lo, np.int64),
                     reward=np.zeros(hi - lo, np.float32),
                     done=np.zeros(hi - lo, np.bool_), priorities=prios[lo:hi])
    return rb


@pytest.fixture(scope="module", params=["lz4", None], ids=["lz4", "none"])
def image_buffer(request: pytest.FixtureRequest,
                 frames: Any) -> Iterator[fastreplay.ReplayBuffer]:
    yield _image_buffer(request.param, frames)


def _calls(fn: Callable[[], Any]) -> Callable[[], None]:
    def run() -> None:
        for _ in range(CALLS):
            fn()
    return run


@pytest.mark.parametrize("threads", [1, 0], ids=["threads1", "default"])
@pytest.mark.benchmark(group="PER uint8[84,84] obs+next_obs, sample 256")
def test_per_images_fastreplay(benchmark: Any, image_buffer: fastreplay.ReplayBuffer,
                               threads: int) -> None:
    _core._gather_threads(threads)
    try:
        benchmark.pedantic(_calls(lambda: image_buffer.sample(BATCH)), rounds=ROUNDS,
                           warmup_rounds=1)
    finally:
        _core._gather_threads(0)
    benchmark.extra_info.update(batches_per_round=CALLS,
                                gather_threads=threads or _core._gather_threads())


@pytest.mark.benchmark(group="PER uint8[84,84] obs+next_obs, sample 256")
def test_per_images_tianshou(benchmark: Any, frames: Any) -> None:
    tianshou = pytest.importorskip("tianshou.data")
    base, idx, prios = frames
    n = len(prios)
    np.random.seed(0)
    rb = tianshou.PrioritizedReplayBuffer(n, alpha=0.6, beta=0.4)
    no = np.zeros(n, bool)
    rb.set_batch(tianshou.Batch(obs=base[idx[:n]], obs_next=base[idx[1:n + 1]],
                                act=np.zeros(n, np.int64),
                                rew=np.zeros(n, np.float32), terminated=no,
                                truncated=no.copy(), done=no.copy()))
    rb._size = n  # as tianshou's ReplayBuffer.from_data does
    rb.last_index[0] = n - 1
    rb.update_weight(np.arange(n), prios)
    benchmark.pedantic(_calls(lambda: rb.sample(BATCH)), rounds=ROUNDS, warmup_rounds=1)
    benchmark.extra_info["batches_per_round"] = CALLS


@pytest.fixture(scope="module")
def uniform_small() -> peers.UniformWorkload:
    return workloads.fastreplay_replay_buffer_uniform(CAPACITY)



@pytest.mark.benchmark(group="uniform small rows, sample 256")
def test_uniform_small_fastreplay(benchmark: Any,
                                  uniform_small: peers.UniformWorkload) -> None:
    benchmark.pedantic(_calls(lambda: uniform_small.sample(BATCH)), rounds=ROUNDS,
                       warmup_rounds=1)
    benchmark.extra_info["batches_per_round"] = CALLS


@pytest.mark.benchmark(group="uniform small rows, sample 256")
def test_uniform_small_cpprb(benchmark: Any) -> None:
    work = peers.cpprb_uniform(CAPACITY)
    if work is None:
        pytest.skip("cpprb is not installed")
    benchmark.pedantic(_calls(lambda: work.sample(BATCH)), rounds=ROUNDS,
                       warmup_rounds=1)
    benchmark.extra_info["batches_per_round"] = CALLS
