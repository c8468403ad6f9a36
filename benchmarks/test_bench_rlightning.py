"""rlightning ``Storage`` adapter (issue 14): the issue's workloads.

Transition unit, circular, capacity 200,000 (FASTREPLAY_BENCH_RL_CAPACITY;
20,000 under --benchmark-disable, which only checks that the benchmarks
run), float32[8] observation and next_observation, int64 action, float32
reward:

- push 256 transitions per call (``add_episode`` of a dict of [256, ...]
  tensors);
- random reads ``storage[np.random.choice(len(storage), 256)]``, the pattern
  of rlightning's buffers;
- episode unit, episodes of 100 steps: reads of 16 random episodes.

The numbers against upstream's own Storage come from a paired script that
alternates the two in one process (upstream is not a dependency).

Run: pytest benchmarks/test_bench_rlightning.py --benchmark-only
"""

from __future__ import annotations

import os
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensordict")

import numpy as np  # noqa: E402

CAPACITY = int(os.environ.get("FASTREPLAY_BENCH_RL_CAPACITY", "200000"))
BATCH = 256
EPISODE = 100


def transitions(start: int, n: int) -> dict[str, Any]:
    v = torch.arange(start, start + n)
    obs = torch.rand(n, 8, generator=torch.Generator().manual_seed(start))
    return {
        "observation": obs,
        "next_observation": obs + 1.0,
        "action": v % 6,
        "reward": v.to(torch.float32) / 100,
    }


def make(capacity: int, unit: str) -> Any:
    """A circular Storage with the default pre/post-processing functions."""
    from fastreplay.integrations.rlightning import Storage

    return Storage(capacity, "circular", unit, None, "cpu")


@pytest.fixture(scope="module")
def capacity(request: pytest.FixtureRequest) -> int:
    return 20_000 if request.config.getoption("benchmark_disable", False) else CAPACITY


@pytest.fixture(scope="module")
def full_transitions(capacity: int) -> Any:
    s = make(capacity, "transition")
    for lo in range(0, capacity, 10_000):
        s.add_episode(transitions(lo, min(10_000, capacity - lo)))
    return s


@pytest.fixture(scope="module")
def full_episodes(capacity: int) -> Any:
    s = make(capacity, "episode")
    for lo in range(0, capacity - EPISODE + 1, EPISODE):
        s.add_episode(transitions(lo, EPISODE))
    return s


@pytest.mark.benchmark(group="rlightning-push-256")
def test_push_256(benchmark: Any, capacity: int) -> None:
    s = make(capacity, "transition")
    batch = transitions(0, BATCH)
    benchmark(s.add_episode, batch)
    assert len(s) >= BATCH


@pytest.mark.benchmark(group="rlightning-read-256")
def test_random_read_256(benchmark: Any, full_transitions: Any) -> None:
    s = full_transitions
    np.random.seed(0)

    def read() -> Any:
        return s[np.random.choice(len(s), BATCH)]

    out = benchmark(read)
    assert out["observation"].shape == (BATCH, 8)


@pytest.mark.benchmark(group="rlightning-read-16-episodes")
def test_episode_read_16(benchmark: Any, full_episodes: Any) -> None:
    s = full_episodes
    np.random.seed(0)

    def read() -> Any:
        return s[np.random.choice(len(s), 16)]

    out = benchmark(read)
    assert out["observation"].shape == (16, EPISODE, 8)
