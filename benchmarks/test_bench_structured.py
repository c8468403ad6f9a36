"""StructuredWriter workload (issue 5): steps ``{observation, action,
reward}``, one length-10 item per step over every field once 10 steps of the
episode exist, ``flush()`` every 100 steps, ``end_episode()`` every 1,000,
into a Prioritized table of max size 1e6 (``workloads.StructuredWorkload``):

- fastreplay's StructuredWriter (one config ``{k: ref[k][-10:]}``),
- fastreplay's TrajectoryWriter creating the same items (history slices +
  ``create_item``),
- dm-reverb's StructuredWriter and TrajectoryWriter doing the same, when
  reverb is importable (``reverb_peer.reverb_structured``; skipped otherwise).

Each round appends STEPS steps; steps/s = STEPS / round time (also in
``extra_info``).  Run:
pytest benchmarks/test_bench_structured.py --benchmark-only --benchmark-group-by=group
"""

from __future__ import annotations

import pytest

from fastreplay.bench import workloads

STEPS = 2000
ROUNDS = 7
OBS = {"small": workloads.SMALL_OBS, "atari": workloads.ATARI_OBS}
GROUP = "structured: length-10 item per step, flush() every 100 ({} steps, {})"


def _record(benchmark) -> None:  # type: ignore[no-untyped-def]
    benchmark.extra_info["steps_per_round"] = STEPS
    stats = getattr(benchmark, "stats", None)  # None with --benchmark-disable
    if stats is not None and stats.stats.median > 0:
        benchmark.extra_info["steps_per_second"] = STEPS / stats.stats.median


@pytest.mark.parametrize("via", ["structured", "trajectory"])
@pytest.mark.parametrize("kind", list(OBS))
def test_structured_fastreplay(benchmark, kind, via) -> None:
    benchmark.group = GROUP.format(STEPS, kind)
    work = workloads.StructuredWorkload(OBS[kind], via)
    try:
        benchmark.pedantic(work.run, args=(STEPS,), rounds=ROUNDS, warmup_rounds=1)
    finally:
        work.close()
    _record(benchmark)
    assert len(work.table) > 0


@pytest.mark.parametrize("via", ["structured", "trajectory"])
@pytest.mark.parametrize("kind", list(OBS))
def test_structured_reverb(benchmark, kind, via) -> None:
    from fastreplay.bench import reverb_peer

    benchmark.group = GROUP.format(STEPS, kind)
    shape, dtype = OBS[kind]
    frames = [d["observation"] for d in workloads.step_data(OBS[kind])]
    work = reverb_peer.reverb_structured(shape, dtype, via, frames=frames)
    if work is None:
        pytest.skip("dm-reverb: "
                    f"{reverb_peer.UNAVAILABLE.get(f'reverb_structured_{via}')}")
    try:
        benchmark.pedantic(work.run, args=(STEPS,), rounds=ROUNDS, warmup_rounds=1)
        assert work.table_size() > 0
    finally:
        work.close()
    _record(benchmark)
