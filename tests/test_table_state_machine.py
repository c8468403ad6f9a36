"""Stateful test: the compiled Table against the pure-Python oracle
``tests/_reference.py``'s ``ReferenceTable``.

Hypothesis drives random inserts, batch inserts, priority updates, deletes,
combined mutations, samples and resets (all with ``timeout=0``, so every call
the rate limiter refuses fails at once and the oracle must predict it) on a
small table.  The configuration (remover, max_size, max_times_sampled, rate
limiter, priority exponent, seed) is drawn by the ``@initialize`` rule; each
of the six samplers gets its own pytest case.  After every step the full
state is compared: items and their order, priorities, times_sampled, size,
``can_sample``/``can_insert`` and every counter of ``table.info``.

A fixed table seed per example keeps the compiled table's random draws
reproducible, so Hypothesis can replay and shrink failures.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import pytest
from _reference import ReferenceTable
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import fastreplay
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay.errors import DeadlineExceededError, InvalidPriorityError

# ----- configuration space -----

SELECTORS: dict[str, Callable[[float], sel.ItemSelector]] = {
    "uniform": lambda a: sel.Uniform(),
    "prioritized": lambda a: sel.Prioritized(a),
    "fifo": lambda a: sel.Fifo(),
    "lifo": lambda a: sel.Lifo(),
    "min_heap": lambda a: sel.MinHeap(),
    "max_heap": lambda a: sel.MaxHeap(),
}
REMOVERS = ["fifo", "lifo", "min_heap", "max_heap"]

LIMITERS: dict[str, Callable[[], rl.RateLimiter]] = {
    "MinSize(1)": lambda: rl.MinSize(1),
    "MinSize(3)": lambda: rl.MinSize(3),
    # (min_diff, max_diff) = (-1, 3)
    "SampleToInsertRatio(1, 1, 2)": lambda: rl.SampleToInsertRatio(1.0, 1, 2.0),
    # (-0.5, 2.5): fractional samples per insert
    "SampleToInsertRatio(0.5, 2, 1.5)": lambda: rl.SampleToInsertRatio(0.5, 2, 1.5),
    # (1, 7): two samples per insert, sampling needs a surplus
    "SampleToInsertRatio(2, 2, 3)": lambda: rl.SampleToInsertRatio(2.0, 2, 3.0),
    "SampleToInsertRatio(1.5, 1, (-1, 3))": lambda: rl.SampleToInsertRatio(
        1.5, 1, (-1.0, 3.0)
    ),
    # Queue-like: inserts block 3 ahead of samples, samples block at 0.
    "RateLimiter(1, 1, 0, 3)": lambda: rl.RateLimiter(1.0, 1, 0.0, 3.0),
}

KEYS = st.integers(min_value=0, max_value=9)
# Few distinct values, so heap ties (broken by recency) are common.
VALID_PRIORITIES = st.sampled_from([1.0, 0.0, 2.0, 1.0, 0.5, 3.0])
# NaN, negative, infinite and huge values: rejected by some selectors only.
ODD_PRIORITIES = st.sampled_from([math.nan, -1.0, math.inf, 1e300])
PRIORITIES = st.one_of(VALID_PRIORITIES, VALID_PRIORITIES, ODD_PRIORITIES)
KEY_LISTS = st.lists(KEYS, max_size=5)

_DONE_RE = re.compile(r"(\d+) of (\d+) inserted")


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


class TableMachine(RuleBasedStateMachine):
    """Compiled table and oracle in lockstep."""

    def __init__(self, sampler_kind: str | None = None) -> None:
        super().__init__()
        self.forced_sampler = sampler_kind
        self.table: fastreplay.Table
        self.ref: ReferenceTable

    @initialize(
        sampler=st.sampled_from(sorted(SELECTORS)),
        remover=st.sampled_from(REMOVERS),
        exponent=st.sampled_from([0.0, 0.5, 1.0, 2.0]),
        max_size=st.integers(min_value=1, max_value=8),
        max_times_sampled=st.sampled_from([0, 1, 2]),
        limiter=st.sampled_from(sorted(LIMITERS)),
        seed=st.integers(min_value=0, max_value=2**64 - 1),
    )
    def setup(
        self,
        sampler: str,
        remover: str,
        exponent: float,
        max_size: int,
        max_times_sampled: int,
        limiter: str,
        seed: int,
    ) -> None:
        sampler = self.forced_sampler or sampler
        sampler_sel = SELECTORS[sampler](exponent)
        remover_sel = SELECTORS[remover](exponent)
        limiter_obj = LIMITERS[limiter]()
        self.table = fastreplay.Table(
            "sm", sampler_sel, remover_sel, max_size, limiter_obj,
            max_times_sampled=max_times_sampled, seed=seed,
        )
        self.ref = ReferenceTable(
            sampler_sel, remover_sel, max_size, limiter_obj, max_times_sampled
        )

    # ----- rules -----

    @rule(key=KEYS, priority=PRIORITIES)
    def insert(self, key: int, priority: float) -> None:
        if not self.ref.valid_priority(priority):
            with pytest.raises(InvalidPriorityError):
                self.table.insert(key, priority, timeout=0)
            return
        if self.ref.insert(key, priority):
            self.table.insert(key, priority, timeout=0)
        else:
            with pytest.raises(DeadlineExceededError, match="Rate Limiter"):
                self.table.insert(key, priority, timeout=0)

    @precondition(lambda self: len(self.ref) > 0)
    @rule(data=st.data(), via_update=st.booleans())
    def touch_existing(self, data: st.DataObject, via_update: bool) -> None:
        """Re-insert or update a stored key, often with its own priority:
        only the heap tie-break order (recency) changes."""
        key = data.draw(st.sampled_from(sorted(self.ref.items)))
        priority = data.draw(
            st.one_of(st.just(self.ref.items[key].priority), VALID_PRIORITIES)
        )
        if via_update:
            self._mutate(
                lambda: self.table.update_priorities([key], [priority]),
                [(key, priority)], [],
            )
        else:
            self.insert(key, priority)

    @rule(keys=KEY_LISTS, data=st.data())
    def insert_batch(self, keys: list[int], data: st.DataObject) -> None:
        priorities = data.draw(
            st.lists(PRIORITIES, min_size=len(keys), max_size=len(keys))
        )
        if not all(map(self.ref.valid_priority, priorities)):
            with pytest.raises(InvalidPriorityError):
                self.table.insert_batch(keys, priorities, timeout=0)
            return
        done = self.ref.insert_batch(keys, priorities)
        if done == len(keys):
            assert self.table.insert_batch(keys, priorities, timeout=0) == done
        else:
            with pytest.raises(DeadlineExceededError) as exc_info:
                self.table.insert_batch(keys, priorities, timeout=0)
            m = _DONE_RE.search(str(exc_info.value))
            assert m is not None, str(exc_info.value)
            assert (int(m.group(1)), int(m.group(2))) == (done, len(keys))

    def _mutate(
        self,
        call: Callable[[], None],
        updates: list[tuple[int, float]],
        deletes: list[int],
    ) -> None:
        if not all(self.ref.valid_priority(p) for _, p in updates):
            with pytest.raises(InvalidPriorityError):
                call()
            return
        call()
        self.ref.mutate(updates, deletes)

    @rule(updates=st.dictionaries(KEYS, PRIORITIES, max_size=4))
    def mutate_updates(self, updates: dict[int, float]) -> None:
        self._mutate(
            lambda: self.table.mutate_priorities(updates=updates),
            list(updates.items()), [],
        )

    @rule(pairs=st.lists(st.tuples(KEYS, PRIORITIES), max_size=4))
    def update_priorities(self, pairs: list[tuple[int, float]]) -> None:
        keys = [k for k, _ in pairs]
        prios = [p for _, p in pairs]
        self._mutate(lambda: self.table.update_priorities(keys, prios), pairs, [])

    @rule(keys=KEY_LISTS)
    def delete(self, keys: list[int]) -> None:
        self.table.delete(keys)
        self.ref.mutate((), keys)

    @rule(
        updates=st.dictionaries(KEYS, VALID_PRIORITIES, max_size=4),
        deletes=KEY_LISTS,
    )
    def mutate_both(self, updates: dict[int, float], deletes: list[int]) -> None:
        self._mutate(
            lambda: self.table.mutate_priorities(updates=updates, deletes=deletes),
            list(updates.items()), deletes,
        )

    @rule(n=st.integers(min_value=1, max_value=3))
    def sample(self, n: int) -> None:
        try:
            batch = self.table.sample(n, timeout=0)
        except DeadlineExceededError:
            assert not self.ref.can_sample(1), "table refused an allowed sample"
            return
        assert 1 <= len(batch) <= n
        for i in range(len(batch)):
            key = int(batch.key[i])
            expected = self.ref.apply_sample(key)
            assert batch.table_size[i] == expected.table_size
            assert _same(float(batch.priority[i]), expected.priority)
            assert batch.times_sampled[i] == expected.times_sampled
            assert batch.probability[i] == pytest.approx(
                expected.probability, rel=1e-9
            )
        if len(batch) < n:
            assert not self.ref.can_sample(1), "partial batch although allowed"

    @precondition(lambda self: len(self.ref) > 0)
    @rule(data=st.data())
    def sample_until_blocked(self, data: st.DataObject) -> None:
        """A bigger batch that usually runs into the limiter part-way."""
        self.sample(data.draw(st.integers(min_value=4, max_value=12)))

    @rule(key=KEYS)
    def get(self, key: int) -> None:
        got = self.table.get(key)
        item = self.ref.items.get(key)
        if item is None:
            assert got is None
        else:
            assert got is not None
            assert got[0] == key and got[2] == item.times_sampled
            assert _same(got[1], item.priority)

    @rule()
    def reset(self) -> None:
        self.table.reset()
        self.ref.reset()

    # ----- invariants -----

    @invariant()
    def same_items(self) -> None:
        items = self.table.items()
        got = [
            (int(r["key"]), float(r["priority"]), int(r["times_sampled"]))
            for r in items
        ]
        want = self.ref.snapshot()
        assert [g[0] for g in got] == [w[0] for w in want], (got, want)
        for g, w in zip(got, want, strict=False):
            assert _same(g[1], w[1]) and g[2] == w[2], (got, want)
        assert len(self.table) == len(self.ref) <= self.ref.max_size
        if len(items) > 1:
            assert (items["inserted_seq"][1:] > items["inserted_seq"][:-1]).all()

    @invariant()
    def same_limiter_decisions(self) -> None:
        for n in (1, 2, 3):
            assert self.table.can_sample(n) == self.ref.can_sample(n), n
            assert self.table.can_insert(n) == self.ref.can_insert(n), n

    @invariant()
    def same_counters(self) -> None:
        info = self.table.info
        ref = self.ref
        rli = info.rate_limiter_info
        assert info.current_size == len(ref)
        assert rli.insert_stats.completed == ref.inserts
        assert rli.sample_stats.completed == ref.samples
        assert rli.deletes == ref.deletes
        assert ref.inserts - ref.deletes == len(ref)
        assert (
            info.num_inserts, info.num_samples, info.num_updates,
            info.num_deletes, info.num_evictions, info.num_expired,
            info.num_unique_samples,
        ) == (
            ref.num_inserts, ref.num_samples, ref.num_updates,
            ref.num_deletes, ref.num_evictions, ref.num_expired,
            ref.num_unique_samples,
        )


def _settings() -> settings:
    """30 steps per run; examples from the profile conftest loads (``dev``
    50, ``ci`` 200), or 50 when no profile was loaded."""
    bounded = settings.get_current_profile_name() == "default"
    return settings(
        max_examples=50 if bounded else settings().max_examples,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


@pytest.mark.parametrize("sampler", sorted(SELECTORS))
def test_table_matches_reference(sampler: str) -> None:
    run_state_machine_as_test(lambda: TableMachine(sampler), settings=_settings())


# Every configuration drawn at random, for `pytest -k TestTableMachine`.
TestTableMachine = TableMachine.TestCase
TestTableMachine.settings = _settings()
