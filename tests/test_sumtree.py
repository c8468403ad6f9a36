"""Unit tests of the compiled sum tree (``fastreplay._core.SumTree``).

The tree is checked against a tiny pure-Python oracle: leaf ``i`` owns the
half-open interval ``[sum(w[:i]), sum(w[:i + 1]))`` of the cumulative weight,
and ``find(u)`` must return the leaf whose interval holds ``u * total``.
Zero-weight leaves own an empty interval and are never found.

With dyadic weights (small integers) every sum is exact in floating point, so
the tree must agree with the oracle leaf for leaf.  With arbitrary weights
the two can differ only through rounding, so the returned leaf must own a
positive weight and an interval that holds ``u * total`` up to a relative
tolerance of ``REL_TOL`` of the total (rounding is ~1e-16 per addition).
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from fastreplay._core import SumTree

U_MAX = math.nextafter(1.0, 0.0)  # the largest u find() accepts
REL_TOL = 1e-9


# ----- the oracle -----


def oracle_find(weights: list[float], u: float) -> int:
    """Exact cumulative-sum search (rational arithmetic): the positive-weight
    leaf whose interval [lo, hi) holds u * total."""
    total = sum(Fraction(w) for w in weights)
    assert total > 0
    target = Fraction(u) * total
    lo = Fraction(0)
    for i, w in enumerate(weights):
        hi = lo + Fraction(w)
        if w > 0 and lo <= target < hi:
            return i
        lo = hi
    raise AssertionError("u * total lies beyond the last leaf")  # u < 1


def interval_miss(weights: list[float], u: float, leaf: int) -> float:
    """How far (as a fraction of the total) u * total lies outside the
    oracle interval of ``leaf``; 0.0 when inside."""
    total = math.fsum(weights)
    lo = math.fsum(weights[:leaf])
    hi = lo + weights[leaf]
    target = u * total
    return max(lo - target, target - hi, 0.0) / total


def build(weights: list[float], capacity: int | None = None) -> SumTree:
    tree = SumTree(capacity if capacity is not None else max(1, len(weights)))
    for i, w in enumerate(weights):
        tree.set(i, w)
    return tree


def assert_found_correctly(weights: list[float], u: float, leaf: int) -> None:
    assert 0 <= leaf < len(weights), (u, leaf)
    assert weights[leaf] > 0, f"find({u!r}) returned zero-weight leaf {leaf}"
    miss = interval_miss(weights, u, leaf)
    assert miss <= REL_TOL, (
        f"find({u!r}) returned leaf {leaf}, whose interval misses u * total "
        f"by {miss:.3g} of the total (oracle: leaf {oracle_find(weights, u)})"
    )


# ----- construction, set, get, total -----


def test_new_tree_is_all_zero() -> None:
    tree = SumTree(20)
    assert tree.capacity == 20
    assert tree.total == 0.0
    assert [tree.get(i) for i in range(20)] == [0.0] * 20


@pytest.mark.parametrize("capacity", [0, -1])
def test_capacity_must_be_positive(capacity: int) -> None:
    with pytest.raises(ValueError):
        SumTree(capacity)


@pytest.mark.parametrize("capacity", [1, 7, 8, 9, 64, 65, 100, 513, 4097])
def test_set_get_total(capacity: int) -> None:
    rng = random.Random(capacity)
    weights = [float(rng.randint(0, 9)) for _ in range(capacity)]
    tree = build(weights)
    assert [tree.get(i) for i in range(capacity)] == weights
    assert tree.total == sum(weights)  # small integers: exact


def test_set_overwrites_and_total_follows() -> None:
    tree = SumTree(10)
    tree.set(3, 2.5)
    tree.set(7, 4.0)
    assert tree.total == 6.5
    tree.set(3, 0.5)
    assert tree.get(3) == 0.5
    assert tree.total == 4.5
    tree.set(7, 0.0)
    assert tree.total == 0.5
    tree.set(3, 0.0)
    assert tree.total == 0.0


@pytest.mark.parametrize("weight", [-1.0, -1e-300, math.nan, math.inf])
def test_set_rejects_invalid_weight_and_keeps_state(weight: float) -> None:
    tree = build([1.0, 2.0, 3.0])
    with pytest.raises(ValueError):
        tree.set(1, weight)
    assert [tree.get(i) for i in range(3)] == [1.0, 2.0, 3.0]
    assert tree.total == 6.0


@pytest.mark.parametrize("index", [-1, 5, 1000])
def test_set_and_get_reject_out_of_range_leaf(index: int) -> None:
    tree = SumTree(5)
    with pytest.raises(IndexError):
        tree.set(index, 1.0)
    with pytest.raises(IndexError):
        tree.get(index)
    assert tree.total == 0.0


def test_total_is_exact_after_many_updates() -> None:
    # Sums are recomputed from the children, never adjusted by deltas, so
    # setting every weight back to zero gives exactly zero.
    rng = random.Random(5)
    tree = SumTree(1000)
    for _ in range(20_000):
        tree.set(rng.randrange(1000), rng.random())
    for i in range(1000):
        tree.set(i, 0.0)
    assert tree.total == 0.0


# ----- find -----


@pytest.mark.parametrize("u", [-0.1, 1.0, 1.5, math.nan])
def test_find_rejects_u_outside_unit_interval(u: float) -> None:
    tree = build([1.0, 2.0])
    with pytest.raises(ValueError):
        tree.find(u)
    with pytest.raises(ValueError):
        tree.find_many(np.array([0.5, u]))


def test_find_on_zero_total_raises() -> None:
    tree = SumTree(8)
    with pytest.raises(ValueError):
        tree.find(0.5)
    with pytest.raises(ValueError):
        tree.find_many(np.array([0.5]))
    tree.set(2, 1.0)
    tree.set(2, 0.0)
    with pytest.raises(ValueError):
        tree.find(0.0)


def test_find_intervals_are_half_open() -> None:
    tree = build([1.0, 0.0, 1.0, 2.0])  # intervals [0,1) [] [1,2) [2,4)
    assert tree.find(0.0) == 0
    assert tree.find(math.nextafter(0.25, 0.0)) == 0
    assert tree.find(0.25) == 2  # the boundary belongs to the right leaf
    assert tree.find(math.nextafter(0.5, 0.0)) == 2
    assert tree.find(0.5) == 3
    assert tree.find(U_MAX) == 3


@pytest.mark.parametrize("capacity", [1, 2, 7, 8, 9, 63, 64, 65, 200, 513])
def test_find_matches_oracle_exactly_for_integer_weights(capacity: int) -> None:
    # Integer weights and u = k / 1024 keep every sum and u * total exact,
    # so the tree and the oracle must agree leaf for leaf, boundaries too.
    rng = random.Random(1000 + capacity)
    weights = [float(rng.choice([0, 0, 1, 2, 3, 8])) for _ in range(capacity)]
    weights[rng.randrange(capacity)] = 1.0  # total > 0
    tree = build(weights)
    us = [k / 1024 for k in range(1024)] + [U_MAX]
    for u in us:
        assert tree.find(u) == oracle_find(weights, u), u


def test_zero_weight_leaves_are_never_found() -> None:
    # Every other leaf is zero; probe random u and every exact boundary
    # between leaves (where an off-by-one would land on a zero leaf).
    n = 300
    weights = [float(i % 5 + 1) if i % 2 else 0.0 for i in range(n)]
    tree = build(weights)
    total = sum(weights)
    boundaries = np.cumsum(weights) / total
    rng = np.random.default_rng(11)
    us = np.concatenate([
        rng.random(20_000),
        boundaries[boundaries < 1.0],
        np.nextafter(boundaries[boundaries > 0.0], 0.0),
        [0.0, U_MAX],
    ])
    found = tree.find_many(us)
    assert all(weights[i] > 0 for i in found)
    assert all(weights[tree.find(float(u))] > 0 for u in us[:2000])


def test_single_positive_leaf_is_always_found() -> None:
    tree = SumTree(1000)
    tree.set(637, 5e-324)  # even the smallest subnormal weight
    for u in (0.0, 0.25, 0.5, U_MAX):
        assert tree.find(u) == 637


def test_u_zero_finds_first_positive_leaf() -> None:
    weights = [0.0] * 70 + [0.3, 0.1] + [0.0] * 5 + [2.0]
    tree = build(weights)
    assert tree.find(0.0) == 70


@pytest.mark.parametrize(
    ("weights", "capacity", "expected"),
    [
        ([3.0, 0.0, 5.0, 0.0, 0.0], None, 2),
        ([1.0] * 64, None, 63),
        ([0.0] * 10 + [1.0] + [0.0] * 9 + [1.0], 100, 20),  # zeros after it
        ([0.1 * (i + 1) for i in range(512)], None, 511),
    ],
)
def test_u_just_below_one_finds_last_positive_leaf(
    weights: list[float], capacity: int | None, expected: int
) -> None:
    tree = build(weights, capacity)
    assert tree.find(U_MAX) == expected
    assert tree.find_many(np.array([U_MAX])).tolist() == [expected]


def test_u_just_below_one_finds_last_leaf_in_deep_trees() -> None:
    # All weights lie in [0.5, 1.5), so u * total = total * (1 - 2**-53) is
    # far inside the last leaf's interval: the exact answer is always the
    # last leaf.  When rounding pushes the running offset past a node's
    # total, the descent must keep to that node's right edge.
    wrong = []
    for seed in range(100):
        rng = random.Random(seed)
        weights = [0.5 + rng.random() for _ in range(512)]
        tree = build(weights)
        leaf = tree.find(U_MAX)
        if leaf != 511:
            wrong.append((seed, leaf, interval_miss(weights, U_MAX, leaf)))
    assert not wrong, (
        "find(1 - 2**-53) did not return the last leaf (seed, leaf, miss as "
        f"a fraction of the total): {wrong}"
    )


def test_find_lands_in_oracle_interval_for_arbitrary_weights() -> None:
    rng = random.Random(3)
    for _ in range(60):
        n = rng.choice([5, 64, 200, 512, 1000])
        weights = [
            rng.choice([0.0, rng.random(), rng.random() * 1e6, 1e-6 * rng.random()])
            for _ in range(n)
        ]
        weights[rng.randrange(n)] = 1.0
        tree = build(weights)
        for u in [0.0, 0.5, U_MAX, *(rng.random() for _ in range(20))]:
            assert_found_correctly(weights, u, tree.find(u))


def test_stratified_u_grid_hits_each_leaf_in_proportion() -> None:
    # u = (k + 0.5) / M for k < M: a leaf owning a fraction p of the total
    # contains M * p grid points, give or take one at each end.
    weights = [float(w) for w in (0, 1, 2, 3, 4, 0, 10, 1, 0, 7)] * 13
    tree = build(weights)
    m = 100_000
    us = (np.arange(m) + 0.5) / m
    counts = np.bincount(tree.find_many(us), minlength=len(weights))
    expected = np.array(weights) / sum(weights) * m
    assert np.all(np.abs(counts - expected) <= 2)
    assert counts[np.array(weights) == 0].sum() == 0


def test_find_many_equals_find() -> None:
    rng = random.Random(9)
    weights = [rng.choice([0.0, rng.random(), 3.0]) for _ in range(777)]
    tree = build(weights)
    us = np.concatenate([
        np.random.default_rng(9).random(5000),
        [0.0, 0.5, U_MAX],
    ])
    many = tree.find_many(us)
    assert many.dtype == np.int64
    assert many.tolist() == [tree.find(float(u)) for u in us]
    # Any group size: the batched descent processes u in groups.
    for n in (1, 15, 16, 17, 33):
        assert tree.find_many(us[:n]).tolist() == many[:n].tolist()


def test_find_many_of_nothing_is_empty() -> None:
    tree = build([1.0])
    out = tree.find_many(np.empty(0))
    assert out.shape == (0,) and out.dtype == np.int64


# ----- reserve and clear -----


def test_reserve_keeps_weights() -> None:
    rng = random.Random(2)
    weights = [float(rng.randint(0, 5)) for _ in range(100)]
    tree = build(weights)
    us = [k / 64 for k in range(64)]
    before = [tree.find(u) for u in us]
    tree.reserve(5000)
    assert tree.capacity >= 5000
    assert [tree.get(i) for i in range(100)] == weights
    assert all(tree.get(i) == 0.0 for i in range(100, 5000))
    assert tree.total == sum(weights)
    assert [tree.find(u) for u in us] == before
    tree.set(4999, 1.0)
    assert tree.total == sum(weights) + 1.0
    assert tree.find(U_MAX) == 4999


def test_reserve_smaller_is_a_no_op() -> None:
    tree = build([1.0, 2.0, 3.0], capacity=50)
    tree.reserve(10)
    assert tree.capacity == 50
    assert tree.total == 6.0


def test_clear_zeroes_every_weight() -> None:
    tree = build([1.0, 2.0, 3.0] * 30)
    tree.clear()
    assert tree.total == 0.0
    assert all(tree.get(i) == 0.0 for i in range(90))
    tree.set(42, 2.0)
    assert tree.total == 2.0
    assert tree.find(0.7) == 42


# ----- Reverb's rounding test -----


def test_rounding_errors_do_not_accumulate() -> None:
    # prioritized_selector_test.cc: insert 1e-15, insert and remove 10,000
    # items of 0.3; the total must stay >= 0.  Here it is exactly 1e-15 and
    # the lone tiny leaf is still the one found.
    tree = SumTree(10_001)
    tree.set(0, 1e-15)
    for i in range(1, 10_001):
        tree.set(i, 0.3)
    assert math.isclose(tree.total, 1e-15 + 3000.0, rel_tol=1e-12)
    for i in range(1, 10_001):
        tree.set(i, 0.0)
    assert tree.total >= 0.0
    assert tree.total == 1e-15
    for u in (0.0, 0.3, 0.999, U_MAX):
        assert tree.find(u) == 0


# ----- state machine against a list oracle -----

WEIGHTS = st.one_of(
    st.just(0.0),
    st.floats(min_value=0.0, max_value=1e6, allow_nan=False),
    st.integers(min_value=0, max_value=8).map(float),
    st.floats(min_value=1e-12, max_value=1e-6),
)


class SumTreeMachine(RuleBasedStateMachine):
    """Random set / clear / reserve / find sequences against a plain list."""

    tree: SumTree
    weights: list[float]

    @initialize(capacity=st.integers(min_value=1, max_value=300))
    def create(self, capacity: int) -> None:
        self.tree = SumTree(capacity)
        self.weights = [0.0] * capacity

    @rule(data=st.data(), weight=WEIGHTS)
    def set_leaf(self, data: st.DataObject, weight: float) -> None:
        i = data.draw(st.integers(0, len(self.weights) - 1), label="leaf")
        self.tree.set(i, weight)
        self.weights[i] = weight

    @rule(data=st.data())
    def zero_leaf(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.weights) - 1), label="leaf")
        self.tree.set(i, 0.0)
        self.weights[i] = 0.0

    @rule()
    def clear(self) -> None:
        self.tree.clear()
        self.weights = [0.0] * len(self.weights)

    @rule(extra=st.integers(min_value=0, max_value=300))
    def reserve(self, extra: int) -> None:
        wanted = len(self.weights) + extra
        self.tree.reserve(wanted)
        assert self.tree.capacity >= wanted
        self.weights += [0.0] * (self.tree.capacity - len(self.weights))

    @precondition(lambda self: any(w > 0 for w in self.weights))
    @rule(u=st.one_of(
        st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
        st.sampled_from([0.0, 0.5, U_MAX]),
    ))
    def find(self, u: float) -> None:
        leaf = self.tree.find(u)
        assert_found_correctly(self.weights, u, leaf)
        assert self.tree.find_many(np.array([u, u])).tolist() == [leaf, leaf]

    @precondition(lambda self: not any(w > 0 for w in self.weights))
    @rule()
    def find_on_empty_raises(self) -> None:
        try:
            self.tree.find(0.5)
        except ValueError:
            return
        raise AssertionError("find on an all-zero tree did not raise")

    @rule()
    def every_leaf_matches(self) -> None:
        assert [self.tree.get(i) for i in range(len(self.weights))] == self.weights

    @invariant()
    def total_matches_oracle(self) -> None:
        assert self.tree.capacity == len(self.weights)
        assert math.isclose(
            self.tree.total, math.fsum(self.weights), rel_tol=1e-9, abs_tol=0.0
        )
        if not any(self.weights):
            assert self.tree.total == 0.0


TestSumTreeMachine = SumTreeMachine.TestCase
