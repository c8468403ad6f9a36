"""Globally exact sampling over shards (pure numpy; no Ray here).

Item *i* of shard *s* is drawn with probability ``(m_s / sum(m)) * p_local(i)``
where ``m_s`` is the shard's priority mass (the sum-tree root; its size for a
uniform table) and ``p_local`` the probability the shard itself reports.  The
client draws per-shard counts ``n ~ Multinomial(B, m / sum(m))`` and takes
``n_s`` of each shard's i.i.d. draws: the reported probability is that of
the draw actually made, so importance weights stay exact even when the
masses it used are stale (``max_mass_age_s > 0``).

In the one-round mode the client asks each shard for a few more items than
it expects to keep (``overfetch``), reads the masses the shards sampled
with from their replies (``mass_of``), draws the counts from those and trims.
A count larger than what a shard returned is topped up by a second round.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from fastreplay.replay_sample import SampleInfoBatch, importance_weights

__all__ = ["ShardedSampleInfo", "draw_counts", "mass_of", "merge_info", "overfetch"]


class ShardedSampleInfo(NamedTuple):
    """``SampleInfoBatch`` of a batch drawn across shards: ``probability``
    and ``table_size`` are global (so ``weights`` is exact), ``shard`` says
    where each item lives and ``unavailable_shards`` which shards the draw
    skipped because they did not answer."""

    key: npt.NDArray[np.uint64]
    probability: npt.NDArray[np.float64]
    table_size: npt.NDArray[np.int64]
    priority: npt.NDArray[np.float64]
    times_sampled: npt.NDArray[np.int64]
    shard: npt.NDArray[np.int32]
    unavailable_shards: tuple[int, ...] = ()

    def __len__(self) -> int:  # type: ignore[override, unused-ignore]
        return int(self.key.shape[0])

    def weights(self, beta: float) -> npt.NDArray[np.float64]:
        """Importance-sampling weights ``(N * P(i)) ** -beta / max_j w_j``."""
        return importance_weights(self.table_size, self.probability, beta)


def mass_of(info: SampleInfoBatch, exponent: float | None) -> float:
    """The mass a shard sampled with, from its reply: ``priority**alpha /
    probability`` of any item for a prioritized table (``exponent``), ``1 /
    probability`` (its size) for a uniform one (``exponent`` None)."""
    if len(info) == 0:
        return 0.0
    p = float(info.probability[0])
    if not p > 0:
        return 0.0
    if exponent is None:
        return 1.0 / p
    return float(float(info.priority[0]) ** exponent / p)


def overfetch(batch: int, fractions: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """How many items to ask each shard for so that a multinomial count
    drawn from about these ``fractions`` rarely exceeds it (mean plus four
    standard deviations plus two, rounded up to a step of about a
    sixteenth of the batch, at most ``batch``; at least one, so that the
    reply of every shard carries its current mass)."""
    f = np.asarray(fractions, dtype=np.float64)
    mean = batch * f
    sd = np.sqrt(np.maximum(batch * f * (1 - f), 0.0))
    want = np.ceil(mean + 4 * sd + 2)
    # Rounded up to a step of about batch/16, so that consecutive calls ask
    # a shard for the same count and its batches can be made ahead.
    step = 1 << max(0, int(batch // 16).bit_length() - 1)
    counts = (np.ceil(want / step) * step).astype(np.int64)
    return np.asarray(np.minimum(np.maximum(counts, 1), batch), dtype=np.int64)


def draw_counts(
    rng: np.random.Generator, batch: int, masses: npt.ArrayLike
) -> npt.NDArray[np.int64]:
    """``Multinomial(batch, masses / sum(masses))`` (zeros when all are 0)."""
    m = np.asarray(masses, dtype=np.float64)
    total = float(m.sum())
    if not total > 0 or not math.isfinite(total):
        return np.zeros(len(m), dtype=np.int64)
    return rng.multinomial(batch, m / total).astype(np.int64)


def merge_info(
    parts: Sequence[tuple[int, SampleInfoBatch]],
    masses: npt.ArrayLike,
    global_size: int,
    unavailable: Sequence[int],
) -> ShardedSampleInfo:
    """One info for the items of ``parts`` (``(shard, info)``, already
    trimmed to the drawn counts), with global probabilities from the
    ``masses`` the counts were drawn with (indexed by shard)."""
    m = np.asarray(masses, dtype=np.float64)
    total = float(m.sum())
    cols: list[list[Any]] = [[] for _ in range(5)]
    shard_ids = []
    for s, info in parts:
        share = m[s] / total if total > 0 else 0.0
        cols[0].append(info.key)
        cols[1].append(np.asarray(info.probability, np.float64) * share)
        cols[2].append(np.full(len(info), global_size, np.int64))
        cols[3].append(info.priority)
        cols[4].append(np.asarray(info.times_sampled, np.int64))
        shard_ids.append(np.full(len(info), s, np.int32))
    dtypes = (np.uint64, np.float64, np.int64, np.float64, np.int64)
    arrays: list[Any] = [
        np.concatenate(c).astype(d, copy=False) if c else np.empty(0, d)
        for c, d in zip(cols, dtypes, strict=True)
    ]
    shards = np.concatenate(shard_ids) if shard_ids else np.empty(0, np.int32)
    return ShardedSampleInfo(
        arrays[0],
        arrays[1],
        arrays[2],
        arrays[3],
        arrays[4],
        shards,
        tuple(sorted(unavailable)),
    )


def trim_info(info: SampleInfoBatch, n: int) -> SampleInfoBatch:
    """The first ``n`` items of ``info``."""
    return SampleInfoBatch(
        info.key[:n],
        info.probability[:n],
        info.table_size[:n],
        info.priority[:n],
        info.times_sampled[:n],
    )
