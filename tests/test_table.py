"""Table behaviour (reverb-spec sections 3.1-3.8, Reverb's table_test.cc and
the table-level parts of client_test.py / server_test.py)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest

import fastreplay
from fastreplay import Table
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay.errors import (
    DeadlineExceededError,
    InvalidPriorityError,
    ReverbError,
    TableClosedError,
)

TIMEOUT_MESSAGE = (
    "Rate Limiter: Timeout exceeded before the right to insert was acquired."
)


_DEFAULT: Any = object()


def make(
    sampler: Any = _DEFAULT,
    remover: Any = _DEFAULT,
    max_size: int = 100,
    limiter: Any = _DEFAULT,
    **kwargs: Any,
) -> Table:
    """A table with Uniform/Fifo/MinSize(1) unless told otherwise."""
    return Table(
        kwargs.pop("name", "t"),
        sel.Uniform() if sampler is _DEFAULT else sampler,
        sel.Fifo() if remover is _DEFAULT else remover,
        max_size,
        rl.MinSize(1) if limiter is _DEFAULT else limiter,
        **kwargs,
    )


def keys_of(table: Table) -> list[int]:
    return [int(k) for k in table.items()["key"]]


class Spec:
    """A minimal TensorSpec stand-in: anything with .shape and .dtype."""

    def __init__(self, shape: tuple[int, ...], dtype: Any) -> None:
        self.shape = shape
        self.dtype = np.dtype(dtype)


# ----- construction -----


class TestConstruction:
    def test_empty_name(self) -> None:
        with pytest.raises(ValueError, match="name must be nonempty"):
            make(name="")

    @pytest.mark.parametrize("max_size", [0, -1, -100])
    def test_max_size_must_be_positive(self, max_size: int) -> None:
        with pytest.raises(
            ValueError,
            match=rf"max_size \({max_size}\) must be a positive integer",
        ):
            make(max_size=max_size)

    @pytest.mark.parametrize(
        "bad", ["fifo", sel.Fifo, None, 3, rl.MinSize(1)], ids=repr
    )
    def test_sampler_and_remover_must_be_selectors(self, bad: Any) -> None:
        with pytest.raises(TypeError):
            make(sampler=bad)
        with pytest.raises(TypeError):
            make(remover=bad)

    def test_same_selector_for_sampler_and_remover(self) -> None:
        # Reverb bug (spec 8.13): the same object kills the table worker.
        s = sel.Fifo()
        with pytest.raises(ValueError, match="distinct"):
            make(sampler=s, remover=s)

    def test_one_selector_object_may_configure_several_tables(self) -> None:
        s = sel.Prioritized(0.5)
        a = make(sampler=s, name="a")
        b = make(sampler=s, name="b")
        a.insert(1, 1.0)
        assert len(a) == 1 and len(b) == 0

    def test_rate_limiter_must_be_a_rate_limiter(self) -> None:
        with pytest.raises(TypeError):
            Table("t", sel.Fifo(), sel.Fifo(), 10, object())  # type: ignore[arg-type]

    def test_rate_limiter_belongs_to_one_table(self) -> None:
        limiter = rl.MinSize(1)
        make(limiter=limiter, name="first")
        with pytest.raises(ValueError, match="first"):
            make(limiter=limiter, name="second")

    def test_failed_construction_does_not_claim_the_rate_limiter(self) -> None:
        # max_size passes the Python check but does not fit the core's int64:
        # the constructor fails after the limiter was bound to the table.
        limiter = rl.MinSize(1)
        with pytest.raises((ValueError, OverflowError)):
            make(limiter=limiter, max_size=2**64, name="broken")
        table = make(limiter=limiter, name="fixed")
        table.insert(1, 1.0)
        assert len(table) == 1

    @pytest.mark.parametrize("extensions", [(object(),), [object(), object()]])
    def test_extensions_are_rejected(self, extensions: Any) -> None:
        with pytest.raises(ValueError):
            make(extensions=extensions)

    def test_empty_extensions_are_accepted(self) -> None:
        assert len(make(extensions=())) == 0
        assert len(make(extensions=[], name="u")) == 0

    @pytest.mark.parametrize(
        "signature",
        [
            "not a spec",
            {"obs": Spec((3,), np.float32), "bad": 1.5},
            (Spec((), np.int32), [object()]),
            {"nested": {"deeper": [None]}},
        ],
        ids=["str", "dict-leaf", "tuple-list-leaf", "none-leaf"],
    )
    def test_signature_leaves_need_shape_and_dtype(self, signature: Any) -> None:
        with pytest.raises(ValueError, match="Unsupported signature spec"):
            make(signature=signature)

    def test_signature_nest_is_kept(self) -> None:
        signature = {
            "obs": Spec((84, 84, 3), np.uint8),
            "extras": (Spec((), np.float32), [np.zeros((2,), np.int64)]),
        }
        table = make(signature=signature)
        assert table.signature is signature
        assert table.info.signature is signature
        assert make(name="u").signature is None

    def test_max_times_sampled_below_one_is_unlimited(self) -> None:
        table = make(max_times_sampled=-1)
        table.insert(1, 1.0)
        for _ in range(5):
            table.sample(1)
        assert table.get(1) == (1, 1.0, 5)


# ----- insert / assign -----


class TestInsert:
    def test_insert_or_assign_overwrites_priority_only(self) -> None:
        table = make(sampler=sel.Prioritized(1.0), limiter=rl.MinSize(1))
        table.insert(7, 1.0)
        table.insert(8, 1.0)
        table.sample(3)
        before = {int(r["key"]): r for r in table.items()}
        info = table.info
        table.insert(7, 5.0)  # re-insert: priority only
        after = {int(r["key"]): r for r in table.items()}
        assert len(table) == 2
        assert after[7]["priority"] == 5.0
        assert after[7]["times_sampled"] == before[7]["times_sampled"]
        assert after[7]["inserted_seq"] == before[7]["inserted_seq"]
        assert keys_of(table) == [7, 8]
        new = table.info
        # Not a rate-limiter insert (spec 3.3, 8.7), counted as an update.
        assert (
            new.rate_limiter_info.insert_stats.completed
            == info.rate_limiter_info.insert_stats.completed
        )
        assert new.num_inserts == info.num_inserts
        assert new.num_updates == info.num_updates + 1

    def test_reinsert_into_full_table_evicts_nothing(self) -> None:
        table = make(max_size=3)
        for k in range(3):
            table.insert(k, 1.0)
        table.insert(0, 9.0)
        assert keys_of(table) == [0, 1, 2]
        assert table.info.num_evictions == 0

    def test_insert_batch_returns_count_and_keeps_order(self) -> None:
        table = make()
        assert table.insert_batch([5, 3, 9], [1.0, 2.0, 3.0]) == 3
        assert table.insert_batch([], []) == 0
        assert keys_of(table) == [5, 3, 9]
        assert [table.get(k) for k in (5, 3, 9)] == [
            (5, 1.0, 0), (3, 2.0, 0), (9, 3.0, 0),
        ]

    def test_insert_batch_with_repeated_key_assigns(self) -> None:
        table = make()
        assert table.insert_batch([1, 2, 1], [1.0, 2.0, 3.0]) == 3
        assert keys_of(table) == [1, 2]
        assert table.get(1) == (1, 3.0, 0)
        info = table.info
        assert (info.num_inserts, info.num_updates) == (2, 1)
        assert info.rate_limiter_info.insert_stats.completed == 2

    def test_insert_batch_length_mismatch(self) -> None:
        with pytest.raises(ValueError):
            make().insert_batch([1, 2], [1.0])

    def test_full_uint64_key_range(self) -> None:
        table = make()
        big = 2**64 - 1
        table.insert(big, 1.0)
        table.insert(0, 1.0)
        assert table.get(big) == (big, 1.0, 0)
        assert int(table.sample(1).key[0]) in (0, big)
        assert keys_of(table) == [big, 0]

    @pytest.mark.parametrize(
        "priority, message",
        [(math.nan, "Priority must not be NaN."),
         (-1.0, "Priority must not be negative.")],
    )
    def test_prioritized_rejects_invalid_priority_and_survives(
        self, priority: float, message: str
    ) -> None:
        # Reverb bug (spec 8.2): a negative priority kills the table worker.
        table = make(sampler=sel.Prioritized(1.0))
        table.insert(1, 1.0)
        with pytest.raises(InvalidPriorityError, match=message) as exc_info:
            table.insert(2, priority)
        assert isinstance(exc_info.value, ValueError)
        assert isinstance(exc_info.value, ReverbError)
        assert keys_of(table) == [1] and table.info.num_inserts == 1
        table.insert(3, 2.0)
        assert len(table.sample(4)) == 4

    def test_heap_rejects_nan_only(self) -> None:
        table = make(sampler=sel.MinHeap())
        with pytest.raises(InvalidPriorityError, match="NaN"):
            table.insert(1, math.nan)
        table.insert(2, -3.0)  # negative priorities are fine for heaps
        table.insert(3, math.inf)
        assert int(table.sample(1).key[0]) == 2

    def test_remover_priorities_are_validated_too(self) -> None:
        table = make(sampler=sel.Uniform(), remover=sel.Prioritized(1.0))
        with pytest.raises(InvalidPriorityError):
            table.insert(1, -1.0)
        assert len(table) == 0

    def test_priority_overflowing_the_exponent_is_rejected(self) -> None:
        table = make(sampler=sel.Prioritized(2.0))
        with pytest.raises(InvalidPriorityError):
            table.insert(1, 1e200)
        table.insert(1, 1e100)
        assert table.get(1) == (1, 1e100, 0)

    def test_invalid_priority_in_batch_inserts_nothing(self) -> None:
        table = make(sampler=sel.Prioritized(1.0))
        table.insert(1, 1.0)
        before = (table.items().tolist(), table.info)
        with pytest.raises(InvalidPriorityError, match="key 4"):
            table.insert_batch([2, 3, 4, 5], [1.0, 2.0, -1.0, 3.0])
        assert (table.items().tolist(), table.info) == before

    def test_negative_timeout_is_rejected(self) -> None:
        table = make()
        with pytest.raises(ValueError, match="timeout"):
            table.insert(1, 1.0, timeout=-1)
        with pytest.raises(ValueError, match="timeout"):
            table.sample(1, timeout=-0.5)


# ----- eviction -----


class TestEviction:
    def test_overflow_deletes_via_fifo_remover(self) -> None:
        # table_test.cc: insert 15 into size 10 under Fifo -> keys 5..14.
        table = make(max_size=10, remover=sel.Fifo())
        for k in range(15):
            table.insert(k, 1.0)
        assert keys_of(table) == list(range(5, 15))
        info = table.info
        assert info.num_evictions == 5
        assert info.rate_limiter_info.deletes == 5
        assert info.rate_limiter_info.insert_stats.completed == 15

    def test_lifo_remover_evicts_the_new_item(self) -> None:
        table = make(max_size=10, remover=sel.Lifo())
        for k in range(15):
            table.insert(k, 1.0)
        assert keys_of(table) == list(range(10))

    def test_min_heap_remover_evicts_lowest_priority(self) -> None:
        table = make(max_size=3, remover=sel.MinHeap())
        table.insert_batch([1, 2, 3], [5.0, 1.0, 3.0])
        table.insert(4, 4.0)
        assert keys_of(table) == [1, 3, 4]
        table.insert(5, 0.5)  # the new item is the lowest: evicted at once
        assert keys_of(table) == [1, 3, 4]

    def test_max_heap_remover_evicts_highest_priority(self) -> None:
        table = make(max_size=3, remover=sel.MaxHeap())
        table.insert_batch([1, 2, 3], [5.0, 1.0, 3.0])
        table.insert(4, 4.0)
        assert keys_of(table) == [2, 3, 4]

    def test_heap_ties_go_to_least_recently_inserted_or_updated(self) -> None:
        table = make(max_size=3, remover=sel.MinHeap())
        table.insert_batch([1, 2, 3], [1.0, 1.0, 1.0])
        table.insert(1, 1.0)  # re-insert touches key 1: 2 is now oldest
        table.update_priorities([2, 3], [1.0, 1.0])  # touch 2, then 3
        table.insert(4, 2.0)  # evicts the least recently touched of 1,2,3
        assert keys_of(table) == [2, 3, 4]
        table.mutate_priorities(updates={3: 1.0})
        table.insert(5, 2.0)  # 2 is now the least recently touched
        assert keys_of(table) == [3, 4, 5]

    def test_uniform_remover_keeps_size_bounded(self) -> None:
        table = make(max_size=8, remover=sel.Uniform(), seed=3)
        table.insert_batch(np.arange(100), np.ones(100))
        assert len(table) == 8
        assert table.info.num_evictions == 92


# ----- sample -----


class TestSample:
    def test_sample_matches_insert_and_increments_times_sampled(self) -> None:
        table = make(seed=11)
        table.insert_batch([10, 20, 30], [1.0, 1.0, 1.0])
        batch = table.sample(300)
        assert len(batch) == 300
        assert set(batch.key.tolist()) == {10, 20, 30}
        stored = {int(r["key"]): int(r["times_sampled"]) for r in table.items()}
        assert sum(stored.values()) == 300
        for key, count in stored.items():
            hits = batch.times_sampled[batch.key == key]
            # times_sampled counts the current sample: 1, 2, ... count.
            assert hits.tolist() == list(range(1, count + 1))
        assert table.info.num_samples == 300
        assert table.info.num_unique_samples == 3

    def test_sample_reports_table_size_and_probability(self) -> None:
        # client_test.py: table_size == i, probability ~ 1/i (uniform).
        table = make()
        for i in range(1, 6):
            table.insert(i, 1.0)
            batch = table.sample(2)
            assert batch.table_size.tolist() == [i, i]
            assert batch.probability.tolist() == pytest.approx([1 / i, 1 / i])

    def test_sample_record_dtypes(self) -> None:
        table = make()
        table.insert(1, 2.5)
        batch = table.sample(1)
        assert isinstance(batch, fastreplay.SampleInfoBatch)
        assert batch.key.dtype == np.uint64
        assert batch.probability.dtype == np.float64
        assert batch.priority.tolist() == [2.5]

    def test_prioritized_probabilities(self) -> None:
        # Spec 4 [verified]: priorities 1..4, alpha=1 -> 0.4 for priority 4.
        table = make(sampler=sel.Prioritized(1.0), seed=5)
        table.insert_batch([1, 2, 3, 4], [1.0, 2.0, 3.0, 4.0])
        batch = table.sample(2000)
        pairs = zip(batch.key.tolist(), batch.probability.tolist(), strict=True)
        for key, prob in pairs:
            assert prob == pytest.approx(key / 10, rel=1e-12)
        counts = np.bincount(batch.key.astype(np.int64), minlength=5)[1:]
        assert counts / 2000 == pytest.approx([0.1, 0.2, 0.3, 0.4], abs=0.05)

    def test_uniform_probability_is_one_over_n(self) -> None:
        table = make(sampler=sel.Uniform())
        table.insert_batch([1, 2, 3, 4], [1.0, 2.0, 3.0, 4.0])
        assert table.sample(10).probability.tolist() == [0.25] * 10

    def test_zero_priority_never_sampled_unless_all_zero(self) -> None:
        table = make(sampler=sel.Prioritized(0.0), seed=2)
        table.insert_batch([1, 2, 3], [0.0, 5.0, 7.0])
        batch = table.sample(500)
        assert 1 not in batch.key.tolist()
        assert batch.probability.tolist() == [0.5] * 500  # p**0 = 1 for p > 0
        table.update_priorities([2, 3], [0.0, 0.0])
        batch = table.sample(300)
        assert batch.probability.tolist() == pytest.approx([1 / 3] * 300)
        assert set(batch.key.tolist()) == {1, 2, 3}

    @pytest.mark.parametrize("via", ["insert", "update"])
    def test_weights_whose_sum_overflows(self, via: str) -> None:
        # Each weight is finite (accepted), but their sum is not.  Either the
        # table refuses the priority that would overflow the total, or it
        # keeps sampling by weight: never a key of relative weight 1e-308,
        # never with a reported probability of 0.
        table = make(sampler=sel.Prioritized(1.0), seed=4)
        table.insert_batch([1, 2, 3], [4e298, 1.0, 1.0])  # largest accepted
        try:
            if via == "insert":
                table.insert(2, 1e308)
            else:
                table.update_priorities([2], [1e308])
        except InvalidPriorityError:
            assert table.get(2) == (2, 1.0, 0)
        batch = table.sample(200)
        shown = (batch.key[:5], batch.probability[:5])
        assert (batch.probability > 0).all(), shown
        assert set(batch.key.tolist()) <= {1, 2}, shown

    def test_weight_above_bound_is_rejected_and_changes_nothing(self) -> None:
        # Weights are bounded by DBL_MAX / 2**32 so 2**31 of them cannot sum
        # to infinity; a larger one fails that call alone.
        table = make(sampler=sel.Prioritized(2.0), seed=4)
        table.insert_batch([1, 2], [1.0, 2.0])
        with pytest.raises(InvalidPriorityError, match=r"too large.*key 3"):
            table.insert(3, 1e200)  # 1e200 ** 2 overflows
        with pytest.raises(InvalidPriorityError, match="key 2"):
            table.update_priorities([1, 2], [3.0, 1e150])  # weight 1e300
        assert sorted(map(tuple, table.items()[["key", "priority"]].tolist())) == [
            (1, 1.0), (2, 2.0)]

    @pytest.mark.parametrize(
        "selector, order",
        [
            (sel.Fifo(), [1, 1]),
            (sel.Lifo(), [3, 3]),
            (sel.MinHeap(), [2, 2]),
            (sel.MaxHeap(), [1, 1]),
        ],
        ids=repr,
    )
    def test_deterministic_samplers(
        self, selector: sel.ItemSelector, order: list[int]
    ) -> None:
        table = make(sampler=selector)
        table.insert_batch([1, 2, 3], [3.0, 1.0, 2.0])
        batch = table.sample(2)
        assert batch.key.tolist() == order
        assert batch.probability.tolist() == [1.0, 1.0]

    def test_max_times_sampled_deletes_after_last_sample(self) -> None:
        table = make(sampler=sel.Fifo(), max_times_sampled=2)
        table.insert_batch([1, 2], [1.0, 1.0])
        batch = table.sample(3)
        assert batch.key.tolist() == [1, 1, 2]
        assert batch.times_sampled.tolist() == [1, 2, 1]
        # table_size is taken before the deletion the sample causes.
        assert batch.table_size.tolist() == [2, 2, 1]
        assert keys_of(table) == [2]
        info = table.info
        assert info.num_expired == 1
        assert info.rate_limiter_info.deletes == 1

    def test_samples_blocked_once_size_drops_below_min_size(self) -> None:
        # table_test.cc: via auto-delete and via explicit delete.
        table = make(sampler=sel.Fifo(), limiter=rl.MinSize(2), max_times_sampled=1)
        table.insert_batch([1, 2, 3], [1.0, 1.0, 1.0])
        assert table.sample(5, timeout=0).key.tolist() == [1, 2]
        assert len(table) == 1 and not table.can_sample(1)
        with pytest.raises(DeadlineExceededError):
            table.sample(1, timeout=0)
        table.insert(4, 1.0)
        assert table.can_sample(1)
        table.delete([4])
        assert not table.can_sample(1)

    def test_sample_timeout_message_says_sample(self) -> None:
        # Reverb says "insert" on the sample path too (spec 8.10); fastreplay
        # keeps the "Rate Limiter: Timeout exceeded" prefix clients match on
        # and says what timed out (issue 11).
        table = make(limiter=rl.MinSize(1))
        with pytest.raises(DeadlineExceededError) as exc_info:
            table.sample(1, timeout=0)
        assert str(exc_info.value).startswith(
            "Rate Limiter: Timeout exceeded before the right to sample was acquired.")
        assert "table 't'" in str(exc_info.value)
        assert TIMEOUT_MESSAGE not in str(exc_info.value)
        assert isinstance(exc_info.value, ReverbError)

    def test_partial_batch_when_limiter_runs_out(self) -> None:
        table = make(limiter=rl.SampleToInsertRatio(1.0, 1, 2.0))  # (-1, 3)
        table.insert_batch([1, 2], [1.0, 1.0])
        # inserts*spi - samples - 1 >= -1  ->  at most 3 samples.
        assert len(table.sample(10, timeout=0)) == 3
        with pytest.raises(DeadlineExceededError):
            table.sample(1, timeout=0)

    def test_num_samples_must_be_positive(self) -> None:
        table = make()
        table.insert(1, 1.0)
        with pytest.raises(ValueError):
            table.sample(0)

    def test_same_seed_same_samples(self) -> None:
        def run(seed: int) -> list[int]:
            table = make(sampler=sel.Prioritized(0.7), seed=seed)
            table.insert_batch(np.arange(50), np.linspace(0.1, 5.0, 50))
            return table.sample(200).key.tolist()

        assert run(42) == run(42)
        assert run(42) != run(43)


# ----- mutate -----


class TestMutate:
    def test_updates_and_deletes_of_unknown_keys_are_ignored(self) -> None:
        table = make()
        table.insert_batch([1, 2, 3], [1.0, 1.0, 1.0])
        table.mutate_priorities(updates={1: 5.0, 99: 7.0}, deletes=[2, 98])
        assert keys_of(table) == [1, 3]
        assert table.get(1) == (1, 5.0, 0)
        assert table.get(99) is None
        info = table.info
        assert (info.num_updates, info.num_deletes) == (1, 1)
        assert info.rate_limiter_info.deletes == 1

    def test_deletes_apply_before_updates(self) -> None:
        # Spec 3.6 / 8.6 [verified]: deleted and updated -> deleted.
        table = make()
        table.insert_batch([1, 2], [1.0, 1.0])
        table.mutate_priorities(updates={1: 9.0, 2: 3.0}, deletes=[1])
        assert keys_of(table) == [2]
        assert table.get(2) == (2, 3.0, 0)

    def test_none_arguments_are_a_no_op(self) -> None:
        table = make()
        table.insert(1, 1.0)
        before = table.info
        table.mutate_priorities()
        table.mutate_priorities(None, None)
        assert table.info == before

    def test_update_priorities_and_delete(self) -> None:
        table = make(sampler=sel.Prioritized(1.0))
        table.insert_batch([1, 2, 3], [1.0, 1.0, 1.0])
        table.update_priorities(np.array([1, 3], np.uint64), np.array([2.0, 4.0]))
        table.update_priorities([5], [1.0])  # unknown: ignored
        assert [table.get(k) for k in (1, 2, 3)] == [
            (1, 2.0, 0), (2, 1.0, 0), (3, 4.0, 0),
        ]
        table.delete([3, 77])
        table.delete(np.array([], np.uint64))
        assert keys_of(table) == [1, 2]
        table.insert(4, 1.0)
        table.delete(4)  # a scalar key
        assert keys_of(table) == [1, 2]
        batch = table.sample(100)
        assert set(batch.key.tolist()) <= {1, 2}
        pairs = zip(batch.key.tolist(), batch.probability.tolist(), strict=True)
        for key, prob in pairs:
            assert prob == pytest.approx({1: 2 / 3, 2: 1 / 3}[key])

    @pytest.mark.parametrize("bad", [math.nan, -0.5, math.inf])
    def test_invalid_priority_changes_nothing(self, bad: float) -> None:
        table = make(sampler=sel.Prioritized(1.0), remover=sel.MinHeap())
        table.insert_batch([1, 2, 3], [1.0, 2.0, 3.0])
        table.sample(2)
        before = (table.items().tolist(), table.info)
        with pytest.raises(InvalidPriorityError):
            table.mutate_priorities(updates={1: 7.0, 2: bad}, deletes=[3])
        with pytest.raises(InvalidPriorityError):
            table.update_priorities([1, 2], [7.0, bad])
        with pytest.raises(InvalidPriorityError):
            table.mutate_priorities(updates={99: bad})  # even for unknown keys
        assert (table.items().tolist(), table.info) == before

    def test_deletes_unblock_inserts(self) -> None:
        table = make(limiter=rl.RateLimiter(1.0, 1, 0.0, 2.0))  # queue-like
        table.insert_batch([1, 2], [1.0, 1.0])
        assert not table.can_insert(1)
        with pytest.raises(DeadlineExceededError):
            table.insert(3, 1.0, timeout=0)
        table.delete([1])  # 2 + 1 - 1 > min size and 3 > max_diff: still no
        assert not table.can_insert(1)
        table.delete([2])  # 2 + 1 - 2 <= min size: stage 1 is free
        assert table.can_insert(1)
        table.insert(3, 1.0, timeout=0)


# ----- reset, replace, info, items -----


class TestReset:
    def test_reset_clears_data_and_limiter(self) -> None:
        table = make(sampler=sel.Prioritized(1.0), limiter=rl.MinSize(2),
                     max_size=3, max_times_sampled=2)
        table.insert_batch(np.arange(6), np.ones(6))
        table.sample(3)
        table.delete([5])
        table.reset()
        assert len(table) == 0
        assert table.items().shape == (0,)
        assert not table.can_sample(1)
        info = table.info
        rli = info.rate_limiter_info
        assert (rli.insert_stats.completed, rli.sample_stats.completed,
                rli.deletes) == (0, 0, 0)
        assert (info.current_size, info.num_inserts, info.num_samples,
                info.num_updates, info.num_deletes, info.num_evictions,
                info.num_expired, info.num_unique_samples) == (0,) * 8
        table.insert(1, 1.0)
        assert not table.can_sample(1)  # min size 2 applies again
        table.insert(2, 1.0)
        assert table.can_sample(1)
        # Sampling stops once the first item expires (max_times_sampled=2)
        # and the size drops below the minimum of 2.
        batch = table.sample(50, timeout=0)
        assert 2 <= len(batch) <= 3 and len(table) == 1
        assert set(keys_of(table)) < {1, 2}

    def test_reset_unblocks_inserts(self) -> None:
        table = make(limiter=rl.SampleToInsertRatio(1.0, 1, 2.0))
        table.insert_batch([1, 2, 3], [1.0, 1.0, 1.0])
        assert not table.can_insert(1)
        table.reset()
        assert table.can_insert(1)


class TestReplace:
    def test_replace_gives_empty_table_with_same_config(self) -> None:
        signature = {"x": Spec((2,), np.float32)}
        table = make(sampler=sel.Prioritized(0.6), remover=sel.MaxHeap(),
                     max_size=17, limiter=rl.SampleToInsertRatio(2.0, 3, 5.0),
                     max_times_sampled=4, signature=signature, name="orig")
        table.insert_batch([1, 2, 3], [1.0, 2.0, 3.0])
        new = table.replace()
        assert new is not table and len(new) == 0 and len(table) == 3
        a, b = table.info, new.info
        assert b.name == "orig"
        assert b.max_size == 17 and b.max_times_sampled == 4
        assert b.sampler_options.HasField("prioritized")
        assert b.sampler_options.prioritized.priority_exponent == 0.6
        assert b.remover_options.HasField("heap")
        assert not b.remover_options.heap.min_heap
        assert b.signature is signature
        ra, rb = a.rate_limiter_info, b.rate_limiter_info
        assert (rb.samples_per_insert, rb.min_size_to_sample, rb.min_diff,
                rb.max_diff) == (ra.samples_per_insert, ra.min_size_to_sample,
                                 ra.min_diff, ra.max_diff)
        assert rb.insert_stats.completed == 0
        new.insert(9, 1.0)  # independent state
        assert keys_of(table) == [1, 2, 3] and keys_of(new) == [9]

    def test_replace_with_overrides(self) -> None:
        table = make(max_size=10, name="a")
        new = table.replace(name="b", max_size=2, sampler=sel.Lifo())
        assert (new.name, new.info.max_size) == ("b", 2)
        new.insert_batch([1, 2, 3], [1.0, 1.0, 1.0])
        assert keys_of(new) == [2, 3]
        assert new.sample(1).key.tolist() == [3]
        with pytest.raises(ValueError, match="max_size"):
            table.replace(max_size=0)

    def test_queue_and_stack_replace(self) -> None:
        q = Table.queue("q", 3).replace()
        q.insert_batch([1, 2, 3], [0.0, 0.0, 0.0])
        assert q.sample(3).key.tolist() == [1, 2, 3]


class TestInfo:
    def test_info_fields(self) -> None:
        sampler, remover = sel.Prioritized(0.8), sel.Fifo()
        limiter = rl.SampleToInsertRatio(1.5, 2, (-1.0, 20.0))
        table = Table("info", sampler, remover, 5, limiter, max_times_sampled=3)
        table.insert_batch(np.arange(7), np.arange(1.0, 8.0), timeout=1)
        table.sample(2)  # too few to reach max_times_sampled
        table.insert(6, 0.5)  # update
        table.delete([6])
        info = table.info
        assert isinstance(info, fastreplay.TableInfo)
        assert dataclasses.is_dataclass(info)
        assert info.name == "info" == table.name
        assert info.sampler_options.WhichOneof("distribution") == "prioritized"
        assert info.sampler_options.prioritized.priority_exponent == 0.8
        assert not info.sampler_options.is_deterministic
        assert info.remover_options.fifo and info.remover_options.is_deterministic
        assert (info.max_size, info.max_times_sampled) == (5, 3)
        rli = info.rate_limiter_info
        assert (rli.samples_per_insert, rli.min_size_to_sample, rli.min_diff,
                rli.max_diff) == (1.5, 2, -1.0, 20.0)
        assert rli.insert_stats.completed == 7
        assert rli.sample_stats.completed == 2
        assert info.num_inserts == 7 and info.num_samples == 2
        assert info.num_evictions == 2 and info.num_deletes == 1
        assert info.num_updates == 1 and info.num_expired == 0
        assert info.current_size == len(table) == 4
        assert rli.deletes == 3
        assert 1 <= info.num_unique_samples <= 2
        assert info.signature is None
        assert rli.insert_stats.blocked == 0


class TestItems:
    def test_items_in_insertion_order(self) -> None:
        table = make(sampler=sel.Uniform())
        table.insert_batch([30, 10, 20], [3.0, 1.0, 2.0])
        table.insert(10, 5.0)  # re-insert keeps its place
        assert keys_of(table) == [30, 10, 20]
        table.delete([30])
        table.insert(30, 1.0)  # a new insert goes to the end
        items = table.items()
        assert items.dtype.names == (
            "key", "priority", "times_sampled", "inserted_seq", "has_data",
        )
        assert items["key"].tolist() == [10, 20, 30]
        assert items["priority"].tolist() == [5.0, 2.0, 1.0]
        assert (np.diff(items["inserted_seq"].astype(np.int64)) > 0).all()

    def test_get_missing_and_existing(self) -> None:
        table = make()
        assert table.get(1) is None
        table.insert(1, 0.25)
        assert table.get(1) == (1, 0.25, 0)
        table.sample(1)
        assert table.get(1) == (1, 0.25, 1)


# ----- can_sample / can_insert -----


class TestCanSampleCanInsert:
    def test_can_insert_ignores_max_size(self) -> None:
        table = make(max_size=2, limiter=rl.MinSize(1))
        table.insert_batch([1, 2], [1.0, 1.0])
        assert table.can_insert(1) and table.can_insert(100)
        table.insert(3, 1.0, timeout=0)  # evicts rather than blocking
        assert len(table) == 2

    def test_can_sample_ignores_max_times_sampled(self) -> None:
        table = make(sampler=sel.Fifo(), max_times_sampled=1, limiter=rl.MinSize(1))
        table.insert(1, 1.0)
        assert table.can_sample(10)
        assert table.sample(10, timeout=0).key.tolist() == [1]
        assert not table.can_sample(1)

    def test_rate_limiter_numbers_through_a_table(self) -> None:
        # rate_limiter_test.cc: spi=1.5, m=2, (0, 5).
        table = make(limiter=rl.RateLimiter(1.5, 2, 0.0, 5.0))
        assert [table.can_insert(n) for n in (1, 2, 3, 4)] == [
            True, True, True, False,
        ]
        table.insert_batch([1, 2, 3], [1.0, 1.0, 1.0])
        table.sample(2)
        assert table.can_insert(1) and not table.can_insert(2)

    def test_n_must_be_positive(self) -> None:
        table = make()
        with pytest.raises(ValueError):
            table.can_sample(0)
        with pytest.raises(ValueError):
            table.can_insert(0)


# ----- queue / stack / close -----


class TestQueueStackClose:
    def test_queue(self) -> None:
        q = Table.queue("q", 3)
        info = q.info
        assert info.sampler_options.fifo and info.remover_options.fifo
        assert info.max_times_sampled == 1
        with pytest.raises(DeadlineExceededError):
            q.sample(1, timeout=0)
        q.insert_batch([1, 2, 3], [1.0, 1.0, 1.0], timeout=0)
        with pytest.raises(DeadlineExceededError):
            q.insert(4, 1.0, timeout=0)  # full: blocks instead of evicting
        assert q.sample(2).key.tolist() == [1, 2]
        q.insert_batch([4, 5], [1.0, 1.0], timeout=0)
        assert q.sample(3).key.tolist() == [3, 4, 5]
        assert len(q) == 0

    def test_stack(self) -> None:
        s = Table.stack("s", 3)
        assert s.info.sampler_options.lifo and s.info.remover_options.lifo
        s.insert_batch([1, 2, 3], [1.0, 1.0, 1.0], timeout=0)
        with pytest.raises(DeadlineExceededError):
            s.insert(4, 1.0, timeout=0)
        assert s.sample(2).key.tolist() == [3, 2]
        s.insert(4, 1.0, timeout=0)
        assert s.sample(2).key.tolist() == [4, 1]

    def test_closed_table_refuses_samples_and_inserts(self) -> None:
        table = make()
        table.insert(1, 1.0)
        table.close()
        with pytest.raises(TableClosedError):
            table.sample(1)
        with pytest.raises(TableClosedError):
            table.insert(2, 1.0, timeout=0)
        assert len(table) == 1 and table.get(1) == (1, 1.0, 0)
        table.close()  # idempotent
