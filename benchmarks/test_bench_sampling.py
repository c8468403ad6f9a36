"""Sampling workload (issue 4): batches of 256 length-5 items of small steps
from a 100k-item Uniform table, through ``client.sample_batch`` and, when
dm-reverb is importable in the same environment, through its
``client.sample`` and ``TrajectoryDataset`` (``reverb_peer``).

Run: pytest benchmarks/test_bench_sampling.py --benchmark-only
"""

from __future__ import annotations

import pytest

from fastreplay.bench import workloads

BATCHES = 20
TABLE = 100_000


@pytest.fixture(scope="module")
def fastreplay_sampler() -> workloads.SampleBatchWorkload:
    return workloads.SampleBatchWorkload(TABLE)


@pytest.mark.benchmark(group="sample 20 x 256 length-5 items")
def test_sample_batch_fastreplay(benchmark, fastreplay_sampler) -> None:
    benchmark.pedantic(fastreplay_sampler.run, args=(BATCHES,), rounds=5,
                       warmup_rounds=1)
    benchmark.extra_info["samples_per_round"] = BATCHES * 256


@pytest.mark.parametrize("via", ["client", "dataset"])
@pytest.mark.benchmark(group="sample 20 x 256 length-5 items")
def test_sample_reverb(benchmark, via) -> None:
    from fastreplay.bench import reverb_peer
    work = reverb_peer.reverb_sample(table_size=TABLE, via=via)
    if work is None:
        pytest.skip(f"dm-reverb: {reverb_peer.UNAVAILABLE.get('reverb_sample_' + via)}")
    try:
        benchmark.pedantic(work.run, args=(BATCHES,), rounds=5, warmup_rounds=1)
    finally:
        work.close()
