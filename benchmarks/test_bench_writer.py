"""Writer workloads (DESIGN.md section 6, workloads 1, 4 and 5):

- steps/s for append + one length-5 item per step, small and Atari steps,
  beside dm-reverb's TrajectoryWriter when it is importable (``reverb_peer``);
- stored bytes per step for overlapping length-5 items of Atari-like frames
  (recorded in ``extra_info``: stored / raw payload);
- aggregate steps/s with 1, 2 and 4 writer threads.

Run: pytest benchmarks/test_bench_writer.py --benchmark-only --benchmark-group-by=group
"""

from __future__ import annotations

import threading

import pytest

import fastreplay
from fastreplay.bench import workloads

STEPS = 1000


KINDS = ["small", "atari", "small+flush5", "atari+flush5"]


def _obs(kind: str):  # type: ignore[no-untyped-def]
    return workloads.ATARI_OBS if kind.startswith("atari") else workloads.SMALL_OBS


def _in_flight(kind: str) -> int | None:
    return 5 if kind.endswith("+flush5") else None


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.benchmark(group="writer: append + length-5 item per step (1000 steps)")
def test_writer_fastreplay(benchmark, kind) -> None:
    work = workloads.WriterWorkload(_obs(kind), max_in_flight=_in_flight(kind))
    benchmark.pedantic(work.run, args=(STEPS,), rounds=5, warmup_rounds=1)
    benchmark.extra_info["steps_per_round"] = STEPS


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.benchmark(group="writer: append + length-5 item per step (1000 steps)")
def test_writer_reverb(benchmark, kind) -> None:
    from fastreplay.bench import reverb_peer
    shape, dtype = _obs(kind)
    frames = workloads.atari_frames(64) if kind.startswith("atari") else None
    work = reverb_peer.reverb_writer(obs_shape=shape, obs_dtype=dtype, frames=frames,
                                     max_in_flight=_in_flight(kind))
    if work is None:
        pytest.skip(f"dm-reverb: {reverb_peer.UNAVAILABLE.get('reverb_writer')}")
    benchmark.pedantic(work.run, args=(STEPS,), rounds=5, warmup_rounds=1)


@pytest.mark.benchmark(group="writer: stored bytes per Atari step")
def test_stored_bytes_per_step(benchmark) -> None:
    stats = benchmark.pedantic(workloads.stored_bytes_per_step, args=(STEPS,),
                               rounds=1, iterations=1)
    benchmark.extra_info.update(stats)
    assert 0 < stats["stored_bytes_per_step"] < stats["raw_bytes_per_step"]


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.benchmark(group="writer: threads x 500 Atari steps each")
def test_writer_threads(benchmark, threads) -> None:
    table = fastreplay.Table(
        "bench", fastreplay.selectors.Prioritized(0.6),
        fastreplay.selectors.Fifo(), 1_000_000, fastreplay.rate_limiters.MinSize(1),
    )
    works = [workloads.WriterWorkload(workloads.ATARI_OBS, table=table)
             for _ in range(threads)]

    def run_all() -> None:
        ts = [threading.Thread(target=w.run, args=(500,)) for w in works]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    benchmark.pedantic(run_all, rounds=3, warmup_rounds=1)
    benchmark.extra_info["steps_per_round"] = 500 * threads
