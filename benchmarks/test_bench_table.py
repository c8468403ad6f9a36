"""Table workloads (DESIGN.md section 6, workloads 2 and 3) on fastreplay and,
when installed, its peers, grouped so pytest-benchmark shows them side by side:

- prioritized: 1e6 items, sample 256 with alpha=0.6 and IS weights beta=0.4,
  then update the 256 sampled priorities (``fastreplay_prioritized`` is the
  bare table, metadata only; ``fastreplay_replay_buffer`` also gathers the
  transitions' ``obs`` field, as cpprb's workload does);
- uniform: sample 256 from 1e6 items.

Run: pytest benchmarks --benchmark-only --benchmark-group-by=group
(``fastreplay bench`` prints the same workloads as medians and ratios.)
"""

from __future__ import annotations

import pytest
from conftest import CAPACITY

from fastreplay.bench import peers, workloads

PRIORITIZED = {"fastreplay_prioritized": workloads.fastreplay_prioritized,
               "fastreplay_replay_buffer": workloads.fastreplay_replay_buffer,
               **peers.PRIORITIZED}
UNIFORM = {"fastreplay_uniform": workloads.fastreplay_uniform, **peers.UNIFORM}


def _build(factories: dict, name: str):  # type: ignore[no-untyped-def]
    workload = factories[name](CAPACITY)
    if workload is None:
        pytest.skip(f"{name}: {peers.UNAVAILABLE.get(name, 'not installed')}")
    return workload


@pytest.fixture(scope="module", params=sorted(PRIORITIZED))
def prioritized(request):  # type: ignore[no-untyped-def]
    return _build(PRIORITIZED, request.param)


@pytest.fixture(scope="module", params=sorted(UNIFORM))
def uniform(request):  # type: ignore[no-untyped-def]
    return _build(UNIFORM, request.param)


@pytest.mark.benchmark(group="prioritized: sample 256 + update 256")
def test_prioritized_sample_update(benchmark, prioritized) -> None:
    benchmark(prioritized.sample_update, 256, 0.4)


@pytest.mark.benchmark(group="uniform: sample 256")
def test_uniform_sample(benchmark, uniform) -> None:
    benchmark(uniform.sample, 256)
