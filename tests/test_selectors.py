"""Item selectors (reverb-spec section 4 and Reverb's selector tests),
exercised through a Table.

A contract base class states what every sampler must do; it is subclassed
once per selector.  Selector-specific tests follow: orderings, reported
probabilities, zero and all-zero priorities, empirical frequencies, priority
validation, eviction, max_times_sampled and seeding.

Statistical tests use fixed seeds, 200,000 draws, and two checks: every
category within 5 standard errors of its probability, and a chi-square
statistic below ``dof + 6 * sqrt(2 * dof)`` (far in the upper tail, about
p < 1e-5 for the sizes used; with fixed seeds the outcome is deterministic,
the bound only states how close "close" is).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest

from fastreplay import Table
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay.errors import DeadlineExceededError, InvalidPriorityError

N_DRAWS = 200_000


def make_table(
    sampler: sel.ItemSelector,
    remover: sel.ItemSelector | None = None,
    *,
    max_size: int = 10_000,
    max_times_sampled: int = 0,
    seed: int | None = 1234,
    name: str = "t",
) -> Table:
    return Table(
        name,
        sampler,
        remover if remover is not None else sel.Fifo(),
        max_size,
        rl.MinSize(1),
        max_times_sampled,
        seed=seed,
    )


def fill(table: Table, priorities: dict[int, float]) -> None:
    for key, priority in priorities.items():
        table.insert(key, priority, timeout=0)


def pop_order(table: Table) -> list[int]:
    """Sample one at a time until the table is empty (max_times_sampled=1)."""
    order = []
    while len(table):
        order.append(int(table.sample(1, timeout=0).key[0]))
    return order


def assert_frequencies_match(
    keys: np.ndarray, expected: dict[int, float], n: int
) -> None:
    """Empirical frequencies of ``keys`` against ``expected`` probabilities
    (tolerances in the module docstring)."""
    counts = Counter(keys.tolist())
    assert set(counts) <= {k for k, p in expected.items() if p > 0}
    chi2 = 0.0
    for key, p in expected.items():
        if p == 0:
            continue
        observed = counts.get(key, 0)
        sigma = math.sqrt(n * p * (1 - p)) if p < 1 else 1.0
        assert abs(observed - n * p) <= 5 * sigma, (key, observed, n * p)
        chi2 += (observed - n * p) ** 2 / (n * p)
    dof = sum(1 for p in expected.values() if p > 0) - 1
    if dof > 0:
        assert chi2 <= dof + 6 * math.sqrt(2 * dof), chi2


def prioritized_probabilities(
    priorities: dict[int, float], exponent: float
) -> dict[int, float]:
    weights = {k: (0.0 if p == 0 else p**exponent) for k, p in priorities.items()}
    total = sum(weights.values())
    if total == 0:
        return {k: 1 / len(weights) for k in weights}
    return {k: w / total for k, w in weights.items()}


# ----- the contract every sampler satisfies -----

# Ten items with distinct priorities 1..10 in scrambled order.
PRIORITIES = {100 + i: float((i * 7) % 10 + 1) for i in range(10)}


class SelectorContract:
    """Shared behaviour; subclasses say how to build the selector and what
    it picks or reports."""

    deterministic: bool = False

    def make_selector(self) -> sel.ItemSelector:
        raise NotImplementedError

    def probabilities(self, priorities: dict[int, float]) -> dict[int, float]:
        """Reported probability of each present key."""
        raise NotImplementedError

    def next_key(self, inserted: list[int], priorities: dict[int, float]) -> int:
        """The key a deterministic selector picks (``inserted`` is in
        insertion order)."""
        raise NotImplementedError

    def survivors(self, inserted: list[int], priorities: dict[int, float],
                  max_size: int) -> set[int]:
        """Keys left when this selector, as remover, evicts one item each
        time an insert exceeds ``max_size`` (deterministic selectors)."""
        alive: list[int] = []
        for key in inserted:
            alive.append(key)
            if len(alive) > max_size:
                alive.remove(self.next_key(alive, priorities))
        return set(alive)

    # --- tests ---

    def test_is_deterministic_flag(self) -> None:
        assert self.make_selector().is_deterministic is self.deterministic

    def test_samples_report_present_items_truthfully(self) -> None:
        table = make_table(self.make_selector())
        fill(table, PRIORITIES)
        batch = table.sample(500, timeout=0)
        expected = self.probabilities(PRIORITIES)
        assert len(batch) == 500
        for key, prob, size, prio in zip(
            batch.key.tolist(), batch.probability.tolist(),
            batch.table_size.tolist(), batch.priority.tolist(), strict=True,
        ):
            assert key in PRIORITIES
            assert prio == PRIORITIES[key]
            assert size == len(PRIORITIES)
            assert prob == pytest.approx(expected[key], rel=1e-12)
        if self.deterministic:
            want = self.next_key(list(PRIORITIES), PRIORITIES)
            assert set(batch.key.tolist()) == {want}

    def test_times_sampled_counts_each_sample(self) -> None:
        table = make_table(self.make_selector())
        fill(table, PRIORITIES)
        counts: Counter[int] = Counter()
        for _ in range(100):
            batch = table.sample(1, timeout=0)
            key = int(batch.key[0])
            counts[key] += 1
            assert int(batch.times_sampled[0]) == counts[key]
        for key, n in counts.items():
            assert table.get(key) == (key, PRIORITIES[key], n)
        assert table.info.num_unique_samples == len(counts)

    def test_deleted_items_are_never_sampled(self) -> None:
        table = make_table(self.make_selector())
        fill(table, PRIORITIES)
        gone = list(PRIORITIES)[::2]
        table.delete(gone)
        remaining = {k: p for k, p in PRIORITIES.items() if k not in gone}
        batch = table.sample(5000, timeout=0)
        assert set(batch.key.tolist()) <= set(remaining)
        assert set(batch.table_size.tolist()) == {len(remaining)}
        expected = self.probabilities(remaining)
        for key, prob in zip(batch.key.tolist(), batch.probability.tolist(),
                             strict=True):
            assert prob == pytest.approx(expected[key], rel=1e-12)
        if self.deterministic:
            want = self.next_key(list(remaining), remaining)
            assert set(batch.key.tolist()) == {want}

    def test_update_changes_reported_priority_and_probability(self) -> None:
        table = make_table(self.make_selector())
        fill(table, PRIORITIES)
        updated = dict(PRIORITIES)
        for key in list(PRIORITIES)[:5]:
            updated[key] = PRIORITIES[key] * 3 + 0.5
        table.update_priorities(list(updated), list(updated.values()))
        batch = table.sample(5000, timeout=0)
        expected = self.probabilities(updated)
        for key, prob, prio in zip(batch.key.tolist(), batch.probability.tolist(),
                                   batch.priority.tolist(), strict=True):
            assert prio == updated[key]
            assert prob == pytest.approx(expected[key], rel=1e-12)
        if self.deterministic:
            want = self.next_key(list(updated), updated)
            assert set(batch.key.tolist()) == {want}

    def test_single_item_is_sampled_with_probability_one(self) -> None:
        table = make_table(self.make_selector())
        table.insert(5, 2.0, timeout=0)
        batch = table.sample(10, timeout=0)
        assert batch.key.tolist() == [5] * 10
        assert batch.probability.tolist() == [1.0] * 10

    def test_reset_empties_and_table_is_usable_again(self) -> None:
        table = make_table(self.make_selector())
        fill(table, PRIORITIES)
        table.sample(10, timeout=0)
        table.reset()
        assert len(table) == 0
        with pytest.raises(DeadlineExceededError):
            table.sample(1, timeout=0)
        table.insert(1, 3.0, timeout=0)
        assert table.sample(3, timeout=0).key.tolist() == [1, 1, 1]

    def test_max_times_sampled_deletes_items(self) -> None:
        table = make_table(self.make_selector(), max_times_sampled=3)
        fill(table, PRIORITIES)
        counts: Counter[int] = Counter()
        while len(table):
            batch = table.sample(1, timeout=0)
            counts[int(batch.key[0])] += 1
        assert counts == {k: 3 for k in PRIORITIES}
        assert table.info.num_expired == len(PRIORITIES)
        with pytest.raises(DeadlineExceededError):
            table.sample(1, timeout=0)

    def test_as_remover_keeps_size_at_max_size(self) -> None:
        table = make_table(sel.Uniform(), self.make_selector(), max_size=4)
        fill(table, PRIORITIES)
        assert len(table) == 4
        assert table.info.num_evictions == len(PRIORITIES) - 4
        kept = set(table.items()["key"].tolist())
        assert kept <= set(PRIORITIES)
        if self.deterministic:
            assert kept == self.survivors(list(PRIORITIES), PRIORITIES, 4)

    def test_same_object_as_sampler_and_remover_is_rejected(self) -> None:
        selector = self.make_selector()
        with pytest.raises(ValueError):
            Table("t", selector, selector, 10, rl.MinSize(1))

    def test_one_selector_object_may_configure_two_tables(self) -> None:
        selector = self.make_selector()
        a, b = make_table(selector, name="a"), make_table(selector, name="b")
        a.insert(1, 1.0, timeout=0)
        assert len(a) == 1 and len(b) == 0


class TestUniformContract(SelectorContract):
    def make_selector(self) -> sel.ItemSelector:
        return sel.Uniform()

    def probabilities(self, priorities: dict[int, float]) -> dict[int, float]:
        return {k: 1 / len(priorities) for k in priorities}


class TestPrioritizedContract(SelectorContract):
    exponent = 1.0

    def make_selector(self) -> sel.ItemSelector:
        return sel.Prioritized(self.exponent)

    def probabilities(self, priorities: dict[int, float]) -> dict[int, float]:
        return prioritized_probabilities(priorities, self.exponent)


class TestPrioritizedExponent07Contract(TestPrioritizedContract):
    exponent = 0.7


class TestFifoContract(SelectorContract):
    deterministic = True

    def make_selector(self) -> sel.ItemSelector:
        return sel.Fifo()

    def probabilities(self, priorities: dict[int, float]) -> dict[int, float]:
        return {k: 1.0 for k in priorities}

    def next_key(self, inserted: list[int], priorities: dict[int, float]) -> int:
        return inserted[0]


class TestLifoContract(TestFifoContract):
    def make_selector(self) -> sel.ItemSelector:
        return sel.Lifo()

    def next_key(self, inserted: list[int], priorities: dict[int, float]) -> int:
        return inserted[-1]


class TestMinHeapContract(TestFifoContract):
    def make_selector(self) -> sel.ItemSelector:
        return sel.MinHeap()

    def next_key(self, inserted: list[int], priorities: dict[int, float]) -> int:
        return min(inserted, key=lambda k: priorities[k])  # first of ties


class TestMaxHeapContract(TestFifoContract):
    def make_selector(self) -> sel.ItemSelector:
        return sel.MaxHeap()

    def next_key(self, inserted: list[int], priorities: dict[int, float]) -> int:
        return max(inserted, key=lambda k: priorities[k])  # first of ties


# ----- orderings -----


def test_fifo_samples_oldest_first() -> None:
    table = make_table(sel.Fifo(), max_times_sampled=1)
    fill(table, {k: float(10 - k) for k in range(10)})
    assert pop_order(table) == list(range(10))


def test_lifo_samples_newest_first() -> None:
    table = make_table(sel.Lifo(), max_times_sampled=1)
    fill(table, {k: float(k) for k in range(10)})
    assert pop_order(table) == list(range(9, -1, -1))


def test_fifo_and_lifo_ignore_priority_updates() -> None:
    for selector, expected in ((sel.Fifo(), [1, 2, 3]), (sel.Lifo(), [3, 2, 1])):
        table = make_table(selector, max_times_sampled=1)
        fill(table, {1: 1.0, 2: 1.0, 3: 1.0})
        table.update_priorities([1, 3], [100.0, 0.0])
        table.insert(2, 50.0, timeout=0)  # re-insert: an update only
        assert pop_order(table) == expected


def test_fifo_and_lifo_after_deletes_in_the_middle() -> None:
    for selector, expected in ((sel.Fifo(), [1, 3, 5]), (sel.Lifo(), [5, 3, 1])):
        table = make_table(selector, max_times_sampled=1)
        fill(table, {k: 1.0 for k in range(1, 6)})
        table.delete([2, 4])
        assert pop_order(table) == expected


def test_min_heap_samples_lowest_priority_first() -> None:
    table = make_table(sel.MinHeap(), max_times_sampled=1)
    fill(table, PRIORITIES)
    assert pop_order(table) == sorted(PRIORITIES, key=PRIORITIES.__getitem__)


def test_max_heap_samples_highest_priority_first() -> None:
    table = make_table(sel.MaxHeap(), max_times_sampled=1)
    fill(table, PRIORITIES)
    assert pop_order(table) == sorted(
        PRIORITIES, key=PRIORITIES.__getitem__, reverse=True
    )


@pytest.mark.parametrize("selector", [sel.MinHeap, sel.MaxHeap])
def test_heap_ties_go_to_least_recently_inserted(
    selector: Callable[[], sel.ItemSelector],
) -> None:
    table = make_table(selector(), max_times_sampled=1)
    fill(table, {3: 1.0, 1: 1.0, 2: 1.0, 5: 1.0, 4: 1.0})
    assert pop_order(table) == [3, 1, 2, 5, 4]


@pytest.mark.parametrize("selector", [sel.MinHeap, sel.MaxHeap])
def test_heap_ties_go_to_least_recently_updated(
    selector: Callable[[], sel.ItemSelector],
) -> None:
    table = make_table(selector(), max_times_sampled=1)
    fill(table, {1: 2.0, 2: 2.0, 3: 2.0, 4: 2.0})
    table.update_priorities([1], [2.0])  # same priority: now the most recent
    table.insert(3, 2.0, timeout=0)  # re-insert counts as an update
    assert pop_order(table) == [2, 4, 1, 3]


def test_heap_update_changes_order() -> None:
    prios = {1: 5.0, 2: 3.0, 3: 4.0, 4: 1.0}
    table = make_table(sel.MinHeap(), max_times_sampled=1)
    fill(table, prios)
    table.update_priorities([1, 4], [0.5, 10.0])
    assert pop_order(table) == [1, 2, 3, 4]

    table = make_table(sel.MaxHeap(), max_times_sampled=1)
    fill(table, prios)
    table.mutate_priorities({2: 7.0, 1: -1.0})  # negative is fine for heaps
    assert pop_order(table) == [2, 3, 4, 1]


def test_heap_without_max_times_sampled_keeps_returning_the_top() -> None:
    table = make_table(sel.MaxHeap())
    fill(table, {1: 1.0, 2: 9.0, 3: 5.0})
    assert table.sample(5, timeout=0).key.tolist() == [2] * 5
    table.delete([2])
    assert table.sample(2, timeout=0).key.tolist() == [3, 3]
    table.update_priorities([1], [6.0])
    assert table.sample(1, timeout=0).key.tolist() == [1]


def test_heaps_with_many_items_match_a_sort() -> None:
    rng = np.random.default_rng(4)
    # 3,000 items: the heap and the slot arrays grow past their initial 1,024.
    prios = {int(k): float(p) for k, p in enumerate(rng.integers(0, 50, 3000))}
    for selector, sign in ((sel.MinHeap(), 1), (sel.MaxHeap(), -1)):
        table = make_table(selector, max_times_sampled=1)
        fill(table, prios)
        # Ties in priority go to the earlier insertion (the smaller key here).
        assert pop_order(table) == sorted(prios, key=lambda k: (sign * prios[k], k))


# ----- reported probabilities -----


def test_prioritized_reports_p_over_sum() -> None:
    table = make_table(sel.Prioritized(1.0))
    fill(table, {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0})
    batch = table.sample(2000, timeout=0)
    reported = dict(zip(batch.key.tolist(), batch.probability.tolist(), strict=True))
    assert reported[4] == pytest.approx(0.4, rel=1e-12)
    assert reported[1] == pytest.approx(0.1, rel=1e-12)
    assert reported == pytest.approx({1: 0.1, 2: 0.2, 3: 0.3, 4: 0.4}, rel=1e-12)


def test_prioritized_applies_the_exponent() -> None:
    table = make_table(sel.Prioritized(2.0))
    fill(table, {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0})
    batch = table.sample(2000, timeout=0)
    reported = dict(zip(batch.key.tolist(), batch.probability.tolist(), strict=True))
    assert reported == pytest.approx({k: k * k / 30 for k in (1, 2, 3, 4)}, rel=1e-12)


def test_uniform_reports_one_over_n() -> None:
    table = make_table(sel.Uniform())
    fill(table, {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0})
    assert table.sample(100, timeout=0).probability.tolist() == [0.25] * 100
    table.delete([1])
    assert table.sample(100, timeout=0).probability.tolist() == [1 / 3] * 100


@pytest.mark.parametrize("selector", [sel.Fifo, sel.Lifo, sel.MinHeap, sel.MaxHeap])
def test_deterministic_selectors_report_probability_one(
    selector: Callable[[], sel.ItemSelector],
) -> None:
    table = make_table(selector())
    fill(table, PRIORITIES)
    assert table.sample(50, timeout=0).probability.tolist() == [1.0] * 50


def test_probability_follows_table_changes() -> None:
    table = make_table(sel.Prioritized(1.0))
    fill(table, {1: 1.0, 2: 3.0})
    table.update_priorities([1], [5.0])
    table.insert(3, 2.0, timeout=0)
    batch = table.sample(3000, timeout=0)
    reported = dict(zip(batch.key.tolist(), batch.probability.tolist(), strict=True))
    assert reported == pytest.approx({1: 0.5, 2: 0.3, 3: 0.2}, rel=1e-12)


# ----- zero and all-zero priorities -----


def test_all_zero_priorities_sample_uniformly_with_probability_one_over_n() -> None:
    table = make_table(sel.Prioritized(1.0), seed=21)
    fill(table, {k: 0.0 for k in range(100)})
    batch = table.sample(N_DRAWS, timeout=0)
    assert np.all(batch.probability == 1 / 100)  # exactly
    assert_frequencies_match(batch.key, {k: 0.01 for k in range(100)}, N_DRAWS)


def test_zero_priority_is_never_drawn() -> None:
    prios = {0: 0.0, 1: 1.0, 2: 0.0, 3: 1e-9, 4: 0.0, 5: 2.5, 6: 0.0}
    table = make_table(sel.Prioritized(1.0), seed=22)
    fill(table, prios)
    batch = table.sample(N_DRAWS, timeout=0)
    assert not set(batch.key.tolist()) & {0, 2, 4, 6}
    # One at a time (the unbatched path) as well.
    for _ in range(2000):
        assert int(table.sample(1, timeout=0).key[0]) in (1, 3, 5)


def test_priority_updated_to_zero_is_no_longer_drawn() -> None:
    table = make_table(sel.Prioritized(1.0), seed=23)
    fill(table, {1: 1.0, 2: 1.0, 3: 1.0})
    table.update_priorities([2], [0.0])
    batch = table.sample(50_000, timeout=0)
    assert 2 not in set(batch.key.tolist())
    assert set(batch.probability.tolist()) == {0.5}
    # ...and when every priority becomes zero, sampling falls back to uniform.
    table.update_priorities([1, 3], [0.0, 0.0])
    batch = table.sample(30_000, timeout=0)
    assert set(batch.probability.tolist()) == {1 / 3}
    assert set(batch.key.tolist()) == {1, 2, 3}


def test_exponent_zero_is_uniform_among_nonzero_priorities() -> None:
    prios = {1: 0.0, 2: 0.1, 3: 5.0, 4: 100.0, 5: 0.0}
    table = make_table(sel.Prioritized(0.0), seed=24)
    fill(table, prios)
    batch = table.sample(N_DRAWS, timeout=0)
    assert np.all(batch.probability == 1 / 3)
    assert_frequencies_match(
        batch.key, {1: 0.0, 2: 1 / 3, 3: 1 / 3, 4: 1 / 3, 5: 0.0}, N_DRAWS
    )


# ----- empirical frequencies -----


@pytest.mark.parametrize("exponent", [1.0, 0.6, 2.0])
def test_prioritized_frequencies_match_reported_probabilities(
    exponent: float,
) -> None:
    prios = {k: float(p) for k, p in enumerate(
        [0.5, 1.0, 2.0, 3.0, 0.0, 4.0, 8.0, 0.25, 1.5, 6.0, 0.0, 10.0]
    )}
    table = make_table(sel.Prioritized(exponent), seed=int(exponent * 100))
    fill(table, prios)
    expected = prioritized_probabilities(prios, exponent)
    batch = table.sample(N_DRAWS, timeout=0)
    reported = dict(zip(batch.key.tolist(), batch.probability.tolist(), strict=True))
    for key, prob in reported.items():
        assert prob == pytest.approx(expected[key], rel=1e-12)
    assert_frequencies_match(batch.key, expected, N_DRAWS)


def test_prioritized_frequencies_over_many_items() -> None:
    # 5,000 items: several sum-tree levels and several growths of the
    # table's slot arrays (which start at 1,024); the tree is exercised after
    # updates and deletes too.
    n_items = 5000
    rng = np.random.default_rng(31)
    prios = {int(k): float(p) for k, p in enumerate(rng.gamma(2.0, 1.0, n_items))}
    table = make_table(sel.Prioritized(1.0), seed=31)
    table.insert_batch(list(prios), list(prios.values()), timeout=0)
    for key in range(0, n_items, 3):
        prios[key] = float(rng.gamma(2.0, 1.0))
    table.update_priorities(list(prios), list(prios.values()))
    gone = list(range(1, n_items, 7))
    table.delete(gone)
    for key in gone:
        del prios[key]
    # Group keys into 20 buckets so each expected count is large.
    expected = prioritized_probabilities(prios, 1.0)
    bucket_of = {k: i % 20 for i, k in enumerate(sorted(prios))}
    bucket_p: dict[int, float] = Counter()
    for key, p in expected.items():
        bucket_p[bucket_of[key]] += p
    batch = table.sample(N_DRAWS, timeout=0)
    for key, prob in zip(batch.key.tolist()[:5000],
                         batch.probability.tolist()[:5000], strict=True):
        assert prob == pytest.approx(expected[key], rel=1e-9)
    buckets = np.array([bucket_of[k] for k in batch.key.tolist()])
    assert_frequencies_match(buckets, dict(bucket_p), N_DRAWS)


def test_uniform_frequencies_are_flat() -> None:
    table = make_table(sel.Uniform(), seed=41)
    fill(table, {k: float(k) for k in range(50)})
    batch = table.sample(N_DRAWS, timeout=0)
    assert_frequencies_match(batch.key, {k: 1 / 50 for k in range(50)}, N_DRAWS)


def test_eviction_keeps_working_past_the_initial_capacity() -> None:
    for remover, kept in ((sel.Fifo(), range(2000, 5000)),
                          (sel.Lifo(), range(0, 3000))):
        table = make_table(sel.Uniform(), remover, max_size=3000)
        table.insert_batch(np.arange(5000), np.ones(5000), timeout=0)
        assert len(table) == 3000
        assert sorted(table.items()["key"].tolist()) == list(kept)
        batch = table.sample(20_000, timeout=0)
        assert set(batch.key.tolist()) <= set(kept)
        assert set(batch.probability.tolist()) == {1 / 3000}


def test_uniform_frequencies_after_deletes() -> None:
    table = make_table(sel.Uniform(), seed=42)
    fill(table, {k: 1.0 for k in range(40)})
    table.delete(list(range(0, 40, 2)))
    batch = table.sample(N_DRAWS, timeout=0)
    assert_frequencies_match(
        batch.key, {k: 1 / 20 for k in range(1, 40, 2)}, N_DRAWS
    )


def test_single_draws_have_the_same_distribution_as_batches() -> None:
    # max_times_sampled > 0 forces the one-at-a-time path.
    prios = {1: 1.0, 2: 2.0, 3: 7.0}
    table = make_table(sel.Prioritized(1.0), max_times_sampled=10**9, seed=43)
    fill(table, prios)
    n = 20_000
    keys = np.array([int(table.sample(1, timeout=0).key[0]) for _ in range(n)])
    assert_frequencies_match(keys, prioritized_probabilities(prios, 1.0), n)


# ----- priority validation -----

BAD_PRIORITIES = [
    pytest.param(math.nan, "NaN", id="nan"),
    pytest.param(-1.0, "negative", id="negative"),
    pytest.param(-1e-300, "negative", id="tiny-negative"),
]


def intact_table(name: str = "prio_table") -> Table:
    table = make_table(sel.Prioritized(1.0), name=name, seed=5)
    fill(table, {1: 1.0, 2: 2.0, 3: 3.0})
    return table


def assert_intact(table: Table) -> None:
    assert len(table) == 3
    assert [table.get(k) for k in (1, 2, 3)] == [(1, 1.0, 0), (2, 2.0, 0), (3, 3.0, 0)]
    batch = table.sample(3000, timeout=0)
    assert set(batch.key.tolist()) == {1, 2, 3}
    for key, prob in zip(batch.key.tolist(), batch.probability.tolist(), strict=True):
        assert prob == pytest.approx(key / 6, rel=1e-12)


def test_invalid_priority_error_is_a_value_error() -> None:
    assert issubclass(InvalidPriorityError, ValueError)


@pytest.mark.parametrize(("bad", "word"), BAD_PRIORITIES)
def test_invalid_priority_rejected_on_insert(bad: float, word: str) -> None:
    table = intact_table()
    with pytest.raises(InvalidPriorityError, match=word) as excinfo:
        table.insert(77, bad, timeout=0)
    assert "prio_table" in str(excinfo.value)
    assert "77" in str(excinfo.value)
    assert table.get(77) is None
    assert table.info.rate_limiter_info.insert_stats.completed == 3
    assert_intact(table)


@pytest.mark.parametrize(("bad", "word"), BAD_PRIORITIES)
def test_invalid_priority_rejected_on_insert_of_present_key(
    bad: float, word: str
) -> None:
    table = intact_table()
    with pytest.raises(ValueError, match=word) as excinfo:
        table.insert(2, bad, timeout=0)
    assert "prio_table" in str(excinfo.value) and "2" in str(excinfo.value)
    assert_intact(table)


@pytest.mark.parametrize(("bad", "word"), BAD_PRIORITIES)
def test_invalid_priority_rejected_on_insert_batch(bad: float, word: str) -> None:
    table = intact_table()
    with pytest.raises(InvalidPriorityError, match=word) as excinfo:
        table.insert_batch([10, 11, 12, 13], [1.0, 2.0, bad, 4.0], timeout=0)
    assert "prio_table" in str(excinfo.value)
    assert "12" in str(excinfo.value)  # the offending key
    assert all(table.get(k) is None for k in (10, 11, 12, 13))  # none inserted
    assert_intact(table)


@pytest.mark.parametrize(("bad", "word"), BAD_PRIORITIES)
def test_invalid_priority_rejected_on_update(bad: float, word: str) -> None:
    table = intact_table()
    with pytest.raises(InvalidPriorityError, match=word) as excinfo:
        table.update_priorities([1, 3], [9.0, bad])
    assert "prio_table" in str(excinfo.value) and "3" in str(excinfo.value)
    assert_intact(table)  # the valid update of key 1 was not applied either


@pytest.mark.parametrize(("bad", "word"), BAD_PRIORITIES)
def test_invalid_priority_rejected_on_mutate(bad: float, word: str) -> None:
    table = intact_table()
    with pytest.raises(InvalidPriorityError, match=word) as excinfo:
        table.mutate_priorities({2: 4.0, 1: bad}, deletes=[3])
    assert "prio_table" in str(excinfo.value) and "1" in str(excinfo.value)
    assert_intact(table)  # neither the delete nor the valid update happened


def test_invalid_priority_message_names_table_and_key_exactly() -> None:
    table = intact_table("my_replay")
    with pytest.raises(InvalidPriorityError) as excinfo:
        table.insert(123456789, -2.0, timeout=0)
    message = str(excinfo.value)
    assert "Priority must not be negative." in message
    assert "'my_replay'" in message
    assert "key 123456789" in message


def test_infinite_weight_is_rejected() -> None:
    table = intact_table()
    with pytest.raises(InvalidPriorityError):
        table.insert(9, math.inf, timeout=0)
    table = make_table(sel.Prioritized(2.0), seed=1)
    with pytest.raises(InvalidPriorityError):
        table.insert(9, 1e200, timeout=0)  # 1e200 ** 2 overflows
    assert len(table) == 0


def test_prioritized_remover_validates_too() -> None:
    table = make_table(sel.Uniform(), sel.Prioritized(1.0))
    with pytest.raises(InvalidPriorityError):
        table.insert(1, math.nan, timeout=0)
    assert len(table) == 0


def test_uniform_fifo_lifo_accept_any_priority() -> None:
    for selector in (sel.Uniform(), sel.Fifo(), sel.Lifo()):
        table = make_table(selector)
        table.insert(1, -5.0, timeout=0)
        table.insert(2, math.nan, timeout=0)
        assert len(table) == 2


@pytest.mark.parametrize("selector", [sel.MinHeap, sel.MaxHeap])
def test_heaps_reject_nan_only(selector: Callable[[], sel.ItemSelector]) -> None:
    table = make_table(selector())
    table.insert(1, -5.0, timeout=0)
    with pytest.raises(InvalidPriorityError, match="NaN"):
        table.insert(2, math.nan, timeout=0)
    with pytest.raises(InvalidPriorityError, match="NaN"):
        table.update_priorities([1], [math.nan])
    assert table.get(1) == (1, -5.0, 0) and len(table) == 1


@pytest.mark.parametrize("exponent", [-1.0, math.nan, math.inf])
def test_prioritized_rejects_invalid_exponent(exponent: float) -> None:
    with pytest.raises(ValueError):
        sel.Prioritized(exponent)


# ----- eviction and max_times_sampled -----


def test_overflow_evicts_via_fifo_remover() -> None:
    # table_test.cc: insert 15 items into a table of size 10 with a Fifo
    # remover; keys 5..14 remain.
    table = make_table(sel.Uniform(), sel.Fifo(), max_size=10)
    for key in range(15):
        table.insert(key, 1.0, timeout=0)
    assert len(table) == 10
    assert table.items()["key"].tolist() == list(range(5, 15))
    assert table.info.num_evictions == 5
    assert table.info.rate_limiter_info.deletes == 5


def test_overflow_evicts_via_heap_remover() -> None:
    table = make_table(sel.Uniform(), sel.MinHeap(), max_size=3)
    fill(table, {1: 5.0, 2: 1.0, 3: 9.0, 4: 7.0, 5: 3.0})
    # After 4: evict 2 (1.0); after 5: evict 5 itself (3.0 is the minimum).
    assert sorted(table.items()["key"].tolist()) == [1, 3, 4]


def test_max_times_sampled_deletes_after_the_last_sample() -> None:
    table = make_table(sel.Fifo(), max_times_sampled=2)
    fill(table, {1: 1.0, 2: 1.0, 3: 1.0})
    batch = table.sample(6, timeout=0)
    assert batch.key.tolist() == [1, 1, 2, 2, 3, 3]
    assert batch.times_sampled.tolist() == [1, 2, 1, 2, 1, 2]
    # table_size is taken before the deletion the sample causes.
    assert batch.table_size.tolist() == [3, 3, 2, 2, 1, 1]
    assert len(table) == 0
    assert table.info.num_expired == 3


def test_max_times_sampled_with_prioritized_sampler() -> None:
    table = make_table(sel.Prioritized(1.0), max_times_sampled=5, seed=8)
    prios = {k: float(k + 1) for k in range(20)}
    fill(table, prios)
    counts: Counter[int] = Counter()
    while len(table):
        batch = table.sample(7, timeout=0)
        counts.update(batch.key.tolist())
        assert np.all(batch.times_sampled <= 5)
    assert counts == {k: 5 for k in prios}


# ----- seeds -----


@pytest.mark.parametrize(
    "selector", [lambda: sel.Uniform(), lambda: sel.Prioritized(0.8)],
    ids=["uniform", "prioritized"],
)
def test_same_seed_same_sample_sequence(
    selector: Callable[[], sel.ItemSelector],
) -> None:
    def run(seed: int) -> list[int]:
        table = make_table(selector(), seed=seed)
        fill(table, PRIORITIES)
        out = table.sample(1000, timeout=0).key.tolist()
        out += [int(table.sample(1, timeout=0).key[0]) for _ in range(100)]
        table.update_priorities([100, 101], [50.0, 0.0])
        out += table.sample(1000, timeout=0).key.tolist()
        return out

    assert run(99) == run(99)
    assert run(99) != run(100)


def test_unseeded_tables_differ() -> None:
    def run() -> list[int]:
        table = make_table(sel.Uniform(), seed=None)
        fill(table, PRIORITIES)
        return table.sample(1000, timeout=0).key.tolist()

    assert run() != run()


@pytest.mark.parametrize(
    "selector", [lambda: sel.Uniform(), lambda: sel.Prioritized(1.0)],
    ids=["uniform", "prioritized"],
)
def test_batch_and_single_samples_draw_the_same_sequence(
    selector: Callable[[], sel.ItemSelector],
) -> None:
    # A batch of n draws and n single draws consume the generator alike.
    batched = make_table(selector(), seed=5)
    single = make_table(selector(), seed=5)
    fill(batched, PRIORITIES)
    fill(single, PRIORITIES)
    a = batched.sample(300, timeout=0)
    b = [single.sample(1, timeout=0) for _ in range(300)]
    assert a.key.tolist() == [int(x.key[0]) for x in b]
    assert a.probability.tolist() == [float(x.probability[0]) for x in b]
