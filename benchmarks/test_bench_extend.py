"""One item per step, written per step or a batch at a time (``extend``):
5 small fields (float32[8] obs and next_obs, int64 act, float32 rew and
done), 2,560 steps a round into a Prioritized(0.6) table of 1e6 (in
process), each item the newest step of every field.

- ``trajectory``: append + history + create_item a step (an Acme adder),
- ``structured``: a StructuredWriter whose config makes that item, append
  a step,
- ``structured_extend``: the same writer, ``extend`` of 256 steps a call,
- ``trajectory_extend``: ``TrajectoryWriter.extend`` of 256 steps, then
  create_item a step from the history,
- ``ReplayBuffer.add_batch`` of the same 256-row batches (fastreplay's
  flat buffer, no writer: what cpprb's ``add`` does),
- cpprb's ``PrioritizedReplayBuffer.add`` of those batches when cpprb is
  importable (skipped otherwise).

Run: pytest benchmarks/test_bench_extend.py --benchmark-only --benchmark-group-by=group
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import fastreplay
from fastreplay import structured_writer as sw

STEPS, BATCH = 2560, 256
GROUP = f"one item per step, small steps ({STEPS} steps a round)"


def _batch(n: int = BATCH, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"obs": rng.standard_normal((n, 8), dtype=np.float32),
            "act": rng.integers(0, 4, n).astype(np.int64),
            "rew": rng.standard_normal(n, dtype=np.float32),
            "next_obs": rng.standard_normal((n, 8), dtype=np.float32),
            "done": (rng.random(n) < 0.01).astype(np.float32)}


def _table() -> fastreplay.Table:
    return fastreplay.Table("t", fastreplay.selectors.Prioritized(0.6),
                            fastreplay.selectors.Fifo(), 1_000_000,
                            fastreplay.rate_limiters.MinSize(1))


class _Work:
    def __init__(self, via: str) -> None:
        self.via, self.table, self.batch = via, _table(), _batch()
        self.steps = [{k: v[i] for k, v in self.batch.items()} for i in range(BATCH)]
        self.keys = tuple(self.batch)
        if via.startswith("structured"):
            config = sw.create_config(sw.pattern_from_transform(
                self.steps[0], lambda r: {k: r[k][-1] for k in self.keys}), "t")
            self.writer: Any = sw.StructuredWriter(self.table, [config])
        else:
            self.writer = fastreplay.TrajectoryWriter(self.table, BATCH)

    def run(self) -> None:
        w, keys = self.writer, self.keys
        for _ in range(STEPS // BATCH):
            if self.via == "structured_extend":
                w.extend(self.batch)
            elif self.via == "structured":
                for step in self.steps:
                    w.append(step)
            elif self.via == "trajectory_extend":
                w.extend(self.batch)
                h = w.history
                for i in range(-BATCH, 0):
                    w.create_item("t", 1.0, {k: h[k][i] for k in keys})
            else:
                for step in self.steps:
                    w.append(step)
                    h = w.history
                    w.create_item("t", 1.0, {k: h[k][-1] for k in keys})
        w.flush()


def _record(benchmark: Any) -> None:
    stats = getattr(benchmark, "stats", None)  # None with --benchmark-disable
    if stats is not None and stats.stats.median > 0:
        benchmark.extra_info["steps_per_second"] = STEPS / stats.stats.median


@pytest.mark.parametrize("via", ["trajectory", "structured", "structured_extend",
                                 "trajectory_extend"])
def test_one_item_per_step_fastreplay(benchmark: Any, via: str) -> None:
    benchmark.group = GROUP
    work = _Work(via)
    benchmark.pedantic(work.run, rounds=7, warmup_rounds=1)
    _record(benchmark)
    assert len(work.table) > 0
    work.writer.close()


def test_one_item_per_step_replay_buffer(benchmark: Any) -> None:
    benchmark.group = GROUP
    batch = _batch()
    rb = fastreplay.ReplayBuffer(1_000_000, alpha=0.6)

    def run() -> None:
        for _ in range(STEPS // BATCH):
            rb.add_batch(**batch)

    benchmark.pedantic(run, rounds=7, warmup_rounds=1)
    _record(benchmark)
    assert len(rb) > 0


def test_one_item_per_step_cpprb(benchmark: Any) -> None:
    cpprb = pytest.importorskip("cpprb")
    benchmark.group = GROUP
    batch = _batch()
    env = {k: {"shape": v.shape[1:] or 1, "dtype": v.dtype} for k, v in batch.items()}
    rb = cpprb.PrioritizedReplayBuffer(1_000_000, env, alpha=0.6)

    def run() -> None:
        for _ in range(STEPS // BATCH):
            rb.add(**batch)

    benchmark.pedantic(run, rounds=7, warmup_rounds=1)
    _record(benchmark)
    assert rb.get_stored_size() > 0
