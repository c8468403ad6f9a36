"""Bulk inserts (issue 13, part 4), side by side with cpprb when installed:

- ``add_batch`` of 256 small transitions (float32[8] obs and next_obs, int
  action, float reward, bool done) into a full buffer of CAPACITY (so every
  call also evicts 256), prioritized (alpha=0.6; cpprb's
  PrioritizedReplayBuffer) and uniform (cpprb's ReplayBuffer);
- ``add`` of one such transition (Python scalars and float32[8] rows).

Goals (issue 13): add_batch >= 1.5x cpprb's add of 256 rows, add one
>= 300k/s.  Rows per second are ``256 / mean`` and ``1 / mean``.

Run: pytest benchmarks/test_bench_bulk.py --benchmark-only
     --benchmark-group-by=group
With --benchmark-disable (CI) the buffers are small and each body runs once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conftest import CAPACITY

import fastreplay

ROWS = 256


def transitions(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    return {"obs": rng.random((n, 8), dtype=np.float32),
            "next_obs": rng.random((n, 8), dtype=np.float32),
            "act": rng.integers(0, 6, n), "rew": rng.random(n),
            "done": rng.random(n) < 0.01}


def _fastreplay(kind: str, capacity: int
                ) -> tuple[Callable[..., Any], Callable[..., Any]]:
    rb = fastreplay.ReplayBuffer(capacity, alpha=0.6 if kind == "prioritized" else None,
                                 seed=0)
    return rb.add_batch, rb.add


def _cpprb(kind: str, capacity: int) -> tuple[Callable[..., Any], Callable[..., Any]]:
    cpprb = pytest.importorskip("cpprb")
    env = {"obs": {"shape": 8}, "next_obs": {"shape": 8}, "act": {"dtype": np.int64},
           "rew": {}, "done": {}}
    rb = (cpprb.PrioritizedReplayBuffer(capacity, env, alpha=0.6)
          if kind == "prioritized" else cpprb.ReplayBuffer(capacity, env))
    return rb.add, rb.add


LIBRARIES = {"fastreplay": _fastreplay, "cpprb": _cpprb}


def _capacity(request: pytest.FixtureRequest) -> int:
    disabled = request.config.getoption("benchmark_disable", False)
    return min(CAPACITY, 4096) if disabled else CAPACITY


@pytest.fixture(scope="module", params=[(lib, kind)
                                        for kind in ("prioritized", "uniform")
                                        for lib in sorted(LIBRARIES)],
                ids=lambda p: f"{p[0]}-{p[1]}")
def full(request: pytest.FixtureRequest) -> tuple[Callable[..., Any], list[Any]]:
    lib, kind = request.param
    capacity = _capacity(request)
    add_batch, _ = LIBRARIES[lib](kind, capacity)
    rng = np.random.default_rng(0)
    batches = [transitions(rng, ROWS) for _ in range(16)]
    for i in range(capacity // ROWS + 1):  # full: every later call evicts
        add_batch(**batches[i % 16])
    return add_batch, batches


def test_add_batch_256(benchmark, full, request) -> None:  # type: ignore[no-untyped-def]
    add_batch, batches = full
    lib, kind = request.node.callspec.params["full"]
    benchmark.group = f"add 256 rows, {kind}, full buffer"
    benchmark.extra_info.update(library=lib, rows_per_call=ROWS)
    state = {"i": 0}

    def run() -> None:
        add_batch(**batches[state["i"] & 15])
        state["i"] += 1

    benchmark(run)


@pytest.mark.parametrize("lib", sorted(LIBRARIES))
def test_add_one(benchmark, lib: str, request) -> None:  # type: ignore[no-untyped-def]
    capacity = _capacity(request)
    add_batch, add = LIBRARIES[lib]("prioritized", capacity)
    rng = np.random.default_rng(1)
    batch = transitions(rng, ROWS)
    add_batch(**batch)
    rows = [{"obs": batch["obs"][i], "next_obs": batch["next_obs"][i],
             "act": int(batch["act"][i]), "rew": float(batch["rew"][i]),
             "done": bool(batch["done"][i])} for i in range(ROWS)]
    benchmark.group = "add one transition, prioritized"
    benchmark.extra_info.update(library=lib)
    state = {"i": 0}

    def run() -> None:
        add(**rows[state["i"] & 255])
        state["i"] += 1

    benchmark(run)
