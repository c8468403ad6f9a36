"""A naive pure-Python model of :class:`fastreplay.Table` -- a TEST ORACLE ONLY.

Nothing in the package imports this module; the tests drive it in lockstep
with the compiled table.  Everything is written as plainly as possible (dict
scans, ``min`` over all items) from reverb-spec sections 3.3-3.8 and 4:

- items: ``key -> (priority, times_sampled, insertion seq, touch stamp)``;
  every insert or priority update refreshes the touch stamp, which breaks
  heap ties in favour of the least recently touched item;
- Fifo = smallest seq, Lifo = largest, MinHeap/MaxHeap = lowest/highest
  priority then oldest touch.  Uniform and Prioritized are random, so
  :meth:`probabilities` gives the distribution instead of a draw
  (Prioritized weight ``p ** alpha``, 0 for ``p == 0``, ``1/N`` if all 0);
- rate limiter counters and predicates exactly as spec 3.7: evictions,
  explicit deletes and ``max_times_sampled`` expiries each count as a delete;
  a re-insert of a present key only updates the priority;
- calls never wait (``timeout=0``): what the limiter refuses does not happen.

The compiled table draws samples itself, so :meth:`apply_sample` takes the
key it observed and returns the record the table should report.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Iterable, Sequence
from typing import Protocol

__all__ = ["RefItem", "RefSample", "ReferenceTable"]

DETERMINISTIC = ("fifo", "lifo", "min_heap", "max_heap")
#: Largest Prioritized weight accepted (2**31 of them sum to a finite total).
MAX_WEIGHT = sys.float_info.max / 2**32


class _Selector(Protocol):
    kind: str

    @property
    def priority_exponent(self) -> float: ...


class _Limiter(Protocol):
    samples_per_insert: float
    min_size_to_sample: int
    min_diff: float
    max_diff: float


@dataclasses.dataclass
class RefItem:
    priority: float
    times_sampled: int
    seq: int  # insertion order (Fifo, Lifo, items())
    touched: int  # last insert or priority update (heap ties)


@dataclasses.dataclass(frozen=True)
class RefSample:
    key: int
    probability: float
    table_size: int
    priority: float
    times_sampled: int


class ReferenceTable:
    """Oracle with the semantics of the compiled table (see module doc)."""

    def __init__(
        self,
        sampler: _Selector,
        remover: _Selector,
        max_size: int,
        rate_limiter: _Limiter,
        max_times_sampled: int = 0,
    ) -> None:
        self.sampler_kind = sampler.kind
        self.sampler_exponent = float(sampler.priority_exponent)
        self.remover_kind = remover.kind
        self.remover_exponent = float(remover.priority_exponent)
        self.max_size = int(max_size)
        self.max_times_sampled = max(int(max_times_sampled), 0)
        self.spi = float(rate_limiter.samples_per_insert)
        self.min_size = int(rate_limiter.min_size_to_sample)
        self.min_diff = float(rate_limiter.min_diff)
        self.max_diff = float(rate_limiter.max_diff)
        self.items: dict[int, RefItem] = {}
        self._clock = 0
        self.reset()

    # ----- rate limiter (spec 3.7) -----

    def can_sample(self, n: int) -> bool:
        if self.inserts - self.deletes < self.min_size:
            return False
        return self.inserts * self.spi - self.samples - n >= self.min_diff

    def can_insert(self, n: int) -> bool:
        if self.inserts + n - self.deletes <= self.min_size:
            return True
        return (self.inserts + n) * self.spi - self.samples <= self.max_diff

    # ----- priorities -----

    @staticmethod
    def weight(priority: float, exponent: float) -> float:
        """Prioritized weight: ``priority ** exponent``, 0 for priority 0."""
        if priority == 0.0:
            return 0.0
        try:
            return math.pow(priority, exponent)
        except OverflowError:
            return math.inf

    def _accepts(self, kind: str, exponent: float, priority: float) -> bool:
        if kind == "prioritized":
            return (
                not math.isnan(priority)
                and priority >= 0.0
                and self.weight(priority, exponent) <= MAX_WEIGHT
            )
        if kind in ("min_heap", "max_heap"):
            return not math.isnan(priority)
        return True

    def valid_priority(self, priority: float) -> bool:
        """Whether both the sampler and the remover accept ``priority``."""
        return self._accepts(
            self.sampler_kind, self.sampler_exponent, priority
        ) and self._accepts(self.remover_kind, self.remover_exponent, priority)

    def _validate(self, priorities: Iterable[float]) -> None:
        for p in priorities:
            if not self.valid_priority(p):
                raise ValueError(f"invalid priority {p!r}")

    # ----- selection -----

    def pick(self, kind: str) -> int:
        """The key a deterministic selector of ``kind`` would choose now."""
        assert self.items, "pick from an empty table"
        its = self.items
        if kind == "fifo":
            return min(its, key=lambda k: its[k].seq)
        if kind == "lifo":
            return max(its, key=lambda k: its[k].seq)
        if kind == "min_heap":
            return min(its, key=lambda k: (its[k].priority, its[k].touched))
        if kind == "max_heap":
            return min(its, key=lambda k: (-its[k].priority, its[k].touched))
        raise ValueError(f"{kind} is not a deterministic selector")

    def probabilities(self) -> dict[int, float]:
        """Probability of each key under the sampler (random or not)."""
        n = len(self.items)
        if self.sampler_kind in DETERMINISTIC:
            return {k: float(k == self.pick(self.sampler_kind)) for k in self.items}
        if self.sampler_kind == "uniform":
            return {k: 1.0 / n for k in self.items}
        w = {k: self.weight(it.priority, self.sampler_exponent)
             for k, it in self.items.items()}
        total = math.fsum(w.values())
        if total == 0.0:
            return {k: 1.0 / n for k in self.items}
        return {k: wk / total for k, wk in w.items()}

    def reported_probability(self, key: int) -> float:
        """What the table reports: 1.0 for deterministic selectors."""
        if self.sampler_kind in DETERMINISTIC:
            return 1.0
        return self.probabilities()[key]

    # ----- mutation -----

    def _touch(self) -> int:
        self._clock += 1
        return self._clock

    def _remove(self, key: int) -> None:
        del self.items[key]
        self.deletes += 1

    def _insert_one(self, key: int, priority: float) -> None:
        if key in self.items:
            self.items[key].priority = priority
            self.items[key].touched = self._touch()
            self.num_updates += 1
            return
        self.items[key] = RefItem(priority, 0, self._seq, self._touch())
        self._seq += 1
        self.inserts += 1
        self.num_inserts += 1
        if len(self.items) > self.max_size:
            self._remove(self.pick(self.remover_kind))
            self.num_evictions += 1

    def insert(self, key: int, priority: float) -> bool:
        """Insert or assign without waiting; False if the limiter refuses.
        ValueError for a priority a selector rejects (nothing changes)."""
        return self.insert_batch([key], [priority]) == 1

    def insert_batch(self, keys: Sequence[int], priorities: Sequence[float]) -> int:
        """Insert in order until the limiter refuses; returns the count."""
        self._validate(priorities)
        done = 0
        for key, priority in zip(keys, priorities, strict=False):
            if not self.can_insert(1):
                break
            self._insert_one(key, priority)
            done += 1
        return done

    def mutate(
        self,
        updates: Sequence[tuple[int, float]] = (),
        deletes: Iterable[int] = (),
    ) -> None:
        """Validate every update, then delete, then update (unknown keys
        ignored).  ValueError and no change for an invalid priority."""
        self._validate(p for _, p in updates)
        for key in deletes:
            if key in self.items:
                self._remove(key)
                self.num_deletes += 1
        for key, priority in updates:
            if key in self.items:
                self.items[key].priority = priority
                self.items[key].touched = self._touch()
                self.num_updates += 1

    def apply_sample(self, key: int) -> RefSample:
        """Record one sample of ``key`` (chosen by the compiled table) and
        return what the table should report for it."""
        assert self.can_sample(1), "the rate limiter forbids this sample"
        assert key in self.items, f"sampled key {key} is not stored"
        if self.sampler_kind in DETERMINISTIC:
            expected = self.pick(self.sampler_kind)
            assert key == expected, f"sampled {key}, expected {expected}"
        probability = self.reported_probability(key)
        assert probability > 0.0, f"key {key} has probability 0"
        item = self.items[key]
        table_size = len(self.items)
        if item.times_sampled == 0:
            self.num_unique_samples += 1
        item.times_sampled += 1
        self.samples += 1
        self.num_samples += 1
        record = RefSample(key, probability, table_size, item.priority,
                           item.times_sampled)
        if self.max_times_sampled and item.times_sampled >= self.max_times_sampled:
            self._remove(key)
            self.num_expired += 1
        return record

    def reset(self) -> None:
        """Drop every item and zero the limiter and statistics counters."""
        self.items.clear()
        self._seq = 0
        self.inserts = self.samples = self.deletes = 0
        self.num_inserts = self.num_updates = self.num_samples = 0
        self.num_unique_samples = self.num_deletes = 0
        self.num_evictions = self.num_expired = 0

    # ----- views -----

    def __len__(self) -> int:
        return len(self.items)

    def snapshot(self) -> list[tuple[int, float, int]]:
        """``(key, priority, times_sampled)`` in insertion order."""
        order = sorted(self.items, key=lambda k: self.items[k].seq)
        return [(k, self.items[k].priority, self.items[k].times_sampled)
                for k in order]


def per_distance(seen: dict[int, int], priorities: dict[int, float],
                 alpha: float) -> tuple[float, dict[int, float]]:
    """How far sampled counts ``seen`` (id -> times drawn) are from
    prioritized replay's ``p**alpha / sum(p**alpha)`` over ``priorities``
    (id -> priority): the total variation distance, and each id's
    expected share."""
    mass = sum(v**alpha for v in priorities.values())
    want = {i: v**alpha / mass for i, v in priorities.items()}
    draws = sum(seen.values())
    tv = sum(abs(seen.get(i, 0) / draws - w) for i, w in want.items()) / 2
    return tv, want
