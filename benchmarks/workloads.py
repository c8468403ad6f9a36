"""fastreplay's side of the table benchmarks, shaped like benchmarks/peers.py.

``fastreplay_prioritized`` and ``fastreplay_uniform`` build a table of
``capacity`` items through the same public API a user calls and return the
workload objects that ``peers.py`` defines, so every library is driven by the
same code.  Sampling computes importance weights, as the peers do.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from peers import PrioritizedWorkload, UniformWorkload

import fastreplay
from fastreplay import rate_limiters, selectors


def _filled_table(sampler: selectors.ItemSelector, capacity: int, seed: int
                  ) -> tuple[fastreplay.Table, float, np.random.Generator]:
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    table = fastreplay.Table(
        "bench", sampler, selectors.Fifo(), capacity, rate_limiters.MinSize(1),
        seed=seed,
    )
    table.insert_batch(
        np.arange(capacity, dtype=np.uint64), rng.uniform(1e-3, 1.0, capacity)
    )
    return table, time.perf_counter() - t0, rng


def fastreplay_prioritized(
    capacity: int = 1_000_000, alpha: float = 0.6, seed: int = 0
) -> PrioritizedWorkload:
    table, fill, rng = _filled_table(selectors.Prioritized(alpha), capacity, seed)

    def sample(batch_size: int, beta: float) -> tuple[Any, Any]:
        info = table.sample(batch_size)
        return (info, info.weights(beta)), info.key

    return PrioritizedWorkload(
        "fastreplay_prioritized", capacity, fill, sample, table.update_priorities, rng
    )


def fastreplay_uniform(capacity: int = 1_000_000, seed: int = 0) -> UniformWorkload:
    table, fill, _ = _filled_table(selectors.Uniform(), capacity, seed)
    return UniformWorkload("fastreplay_uniform", capacity, fill, table.sample)
