"""Every rate limiter, table and sampling parameter is checked (issue 11,
part 6).

Values that Reverb lets through and that then block every insert or sample
forever (NaN, inf, zero sizes), batch sizes no table could need, and keys
that are not integers are refused at construction or call with a message
naming the parameter (and the table), leaving the table unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fastreplay import ReplayBuffer, Server, Table, TrajectoryWriter
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel

NAN, INF = float("nan"), float("inf")


def table(name: str = "t", max_size: int = 12) -> Table:
    return Table(name, sel.Uniform(), sel.Fifo(), max_size, rl.MinSize(1), seed=5)


def filled(name: str = "t") -> Table:
    t = table(name)
    t.insert_batch(np.arange(12, dtype=np.uint64), np.ones(12))
    return t


# ----- rate limiters -----


@pytest.mark.parametrize("make", [
    lambda: rl.RateLimiter(1, 1, NAN, NAN),
    lambda: rl.RateLimiter(1, 1, NAN, 1.0),
    lambda: rl.RateLimiter(1, 1, 0.0, NAN),
    lambda: rl.RateLimiter(INF, 1, 0.0, 1.0),
    lambda: rl.RateLimiter(NAN, 1, 0.0, 1.0),
    lambda: rl.RateLimiter(0, 1, 0.0, 1.0),
    lambda: rl.RateLimiter(-1, 1, 0.0, 1.0),
    lambda: rl.RateLimiter(1, 0, 0.0, 1.0),
    lambda: rl.RateLimiter(1, 1, 2.0, 1.0),
    lambda: rl.RateLimiter(1, 1, INF, INF),
    lambda: rl.RateLimiter(1, 1, -INF, -INF),
    lambda: rl.SampleToInsertRatio(1, 1, NAN),
    lambda: rl.SampleToInsertRatio(1, 1, (NAN, NAN)),
    lambda: rl.SampleToInsertRatio(1, 1, (0.0, NAN)),
    lambda: rl.SampleToInsertRatio(INF, 1, 10.0),
    lambda: rl.SampleToInsertRatio(NAN, 1, 10.0),
    lambda: rl.SampleToInsertRatio(0, 1, 10.0),
    lambda: rl.SampleToInsertRatio(1, 0, 10.0),
    lambda: rl.SampleToInsertRatio(1, 1, 0.5),
    lambda: rl.MinSize(0),
    lambda: rl.MinSize(-3),
    lambda: rl.Queue(0),
    lambda: rl.Queue(-1),
    lambda: rl.Stack(0),
    lambda: rl.Stack(-1),
], ids=lambda f: "")
def test_rate_limiters_refuse_values_that_block_forever(make: Any) -> None:
    with pytest.raises(ValueError):
        make()


@pytest.mark.parametrize("make", [
    lambda: rl.Queue(1.5),
    lambda: rl.Stack("3"),
    lambda: rl.MinSize(2.0),
    lambda: rl.RateLimiter(1, 1.5, 0.0, 1.0),
    lambda: rl.RateLimiter("1", 1, 0.0, 1.0),
    lambda: rl.SampleToInsertRatio(1, 1, "big"),
], ids=lambda f: "")
def test_rate_limiters_refuse_non_numbers(make: Any) -> None:
    with pytest.raises(TypeError):
        make()


def test_valid_rate_limiters_are_accepted() -> None:
    rl.RateLimiter(1, 1, -INF, INF)
    rl.SampleToInsertRatio(2.0, 10, 4.0)
    rl.SampleToInsertRatio(1, 1, INF)
    rl.SampleToInsertRatio(1, 1, (-10.0, 10.0))
    rl.MinSize(np.int64(3))
    assert rl.Queue(np.int32(4)).max_diff == 4.0
    assert rl.Stack(2).max_diff == 2.0


def test_queue_and_stack_tables_refuse_size_zero() -> None:
    with pytest.raises(ValueError):
        Table.queue("q", 0)
    with pytest.raises(ValueError):
        Table.stack("s", 0)


# ----- tables -----


@pytest.mark.parametrize("max_size", [0, -1])
def test_table_refuses_a_non_positive_max_size(max_size: int) -> None:
    with pytest.raises(ValueError, match="max_size.*'t'"):
        table(max_size=max_size)


@pytest.mark.parametrize("max_size", [1.5, 10.0, "10", None, True])
def test_table_refuses_a_max_size_that_is_not_an_integer(max_size: Any) -> None:
    with pytest.raises(TypeError, match="Table 't': max_size"):
        table(max_size=max_size)


def test_table_refuses_a_non_integer_max_times_sampled() -> None:
    with pytest.raises(TypeError, match="max_times_sampled"):
        Table("t", sel.Uniform(), sel.Fifo(), 10, rl.MinSize(1), max_times_sampled=1.5)


def test_numpy_integer_sizes_are_accepted() -> None:
    assert table(max_size=np.int64(7)).info.max_size == 7


# ----- keys -----


@pytest.mark.parametrize("key", [1.5, 1.0, "1", None, np.float64(2.0)])
def test_insert_refuses_a_key_that_is_not_an_integer(key: Any) -> None:
    t = table()
    with pytest.raises(TypeError, match="Table 't': key"):
        t.insert(key, 1.0)
    assert len(t) == 0


@pytest.mark.parametrize("key", [-1, 2**64])
def test_insert_refuses_a_key_out_of_range(key: int) -> None:
    t = table()
    with pytest.raises(ValueError, match="Table 't': key"):
        t.insert(key, 1.0)
    assert len(t) == 0


def test_integer_keys_of_every_kind_are_accepted() -> None:
    t = table()
    t.insert(np.uint64(2**64 - 1), 1.0)
    t.insert(np.int32(3), 1.0)
    t.insert(2**63, 1.0)
    assert sorted(t.items()["key"].tolist()) == [3, 2**63, 2**64 - 1]


@pytest.mark.parametrize("call", [
    lambda t: t.update_priorities([1.5], [2.0]),
    lambda t: t.update_priorities(np.array([1.0]), [2.0]),
    lambda t: t.mutate_priorities({1.5: 2.0}),
    lambda t: t.mutate_priorities(deletes=[1.5]),
    lambda t: t.delete([1.5]),
    lambda t: t.delete(np.array([1.0])),
    lambda t: t.insert_batch([1.5, 2.5], [1.0, 1.0]),
    lambda t: t.get(1.5),
], ids=["update", "update_array", "mutate", "mutate_delete", "delete",
        "delete_array", "insert_batch", "get"])
def test_float_keys_are_refused_everywhere(call: Any) -> None:
    t = filled()
    before = t.items().tolist()
    with pytest.raises(TypeError, match="Table 't'"):
        call(t)
    assert t.items().tolist() == before


def test_negative_keys_in_arrays_are_refused() -> None:
    t = filled()
    with pytest.raises(ValueError, match="keys must be >= 0"):
        t.delete([-1])
    assert len(t) == 12


def test_empty_key_lists_still_work() -> None:
    t = filled()
    t.delete([])
    t.update_priorities([], [])
    t.mutate_priorities({}, [])
    assert len(t) == 12


# ----- batch sizes -----


@pytest.mark.parametrize("n", [0, -1])
def test_sample_refuses_non_positive_sizes(n: int) -> None:
    with pytest.raises(ValueError, match="num_samples.*'t'"):
        filled().sample(n)


@pytest.mark.parametrize("n", [1.5, 2.0, "4", None])
def test_sample_refuses_non_integer_sizes(n: Any) -> None:
    with pytest.raises(TypeError, match="Table 't': num_samples"):
        filled().sample(n)


@pytest.mark.parametrize("n", [2**31, 2**40, 2**70])
def test_sample_of_a_huge_batch_is_refused_before_allocating(n: int) -> None:
    # 2**31 samples would need ~80 GB of output arrays.
    t = filled()
    with pytest.raises(ValueError, match="'t'"):
        t.sample(n, timeout=0)
    with pytest.raises(ValueError, match="'t'"):
        t.sample_items(n, timeout=0)
    assert t.info.num_samples == 0


def test_large_batches_with_replacement_are_still_allowed() -> None:
    assert len(filled().sample(100_000, timeout=5)) == 100_000


def test_sample_batch_and_replay_buffer_refuse_huge_and_bad_sizes() -> None:
    server = Server([filled("t")])
    client = server.localhost_client()
    buffer = ReplayBuffer(12)
    buffer.add(obs=np.zeros(3))
    try:
        for bad, exc in [(2**31, ValueError), (0, ValueError), (1.5, TypeError)]:
            with pytest.raises(exc, match="'t'"):
                client.sample_batch("t", bad, timeout=0)
            with pytest.raises(exc, match="'replay_buffer'|ReplayBuffer batch_size"):
                buffer.sample(bad, timeout=0)
    finally:
        server.stop()


@pytest.mark.parametrize("beta", [NAN, -0.5, INF])
def test_replay_buffer_refuses_a_bad_beta(beta: float) -> None:
    buffer = ReplayBuffer(4, alpha=0.6)
    buffer.add(obs=np.zeros(2))
    with pytest.raises(ValueError, match="beta"):
        buffer.sample(1, beta=beta, timeout=0)


# ----- timeouts -----


@pytest.mark.parametrize("timeout", [NAN, -1.0])
def test_table_calls_refuse_bad_timeouts(timeout: float) -> None:
    t = filled()
    with pytest.raises(ValueError, match="timeout"):
        t.sample(1, timeout=timeout)
    with pytest.raises(ValueError, match="timeout"):
        t.insert(99, 1.0, timeout=timeout)
    assert len(t) == 12 and t.info.num_samples == 0


def test_writer_refuses_negative_timeouts() -> None:
    t = table()
    writer = TrajectoryWriter(t, 2)
    writer.append({"x": 1})
    with pytest.raises(ValueError, match="timeout_ms"):
        writer.flush(timeout_ms=-1)
    with pytest.raises(ValueError, match="timeout_ms"):
        writer.end_episode(timeout_ms=-5)
