"""Rate limiters (reverb-spec 3.7), exercised through a Table.

- Reverb's rate_limiter_test.cc worked examples, number for number;
- the SampleToInsertRatio / MinSize validation table of rate_limiters_test.py;
- deletes below min size, Queue and Stack semantics, one table per limiter,
  distinct sampler/remover objects, and reset of the limiter counters.

"Blocked" is observed with ``timeout=0`` (do not wait): a blocked insert or
sample raises DeadlineExceededError with Reverb's rate-limiter message.
"""

from __future__ import annotations

import logging
import sys
import threading
import time

import pytest

from fastreplay import Table
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay.errors import DeadlineExceededError, ReverbError, TableClosedError

TIMEOUT_TEXT = "Rate Limiter: Timeout exceeded"


def make_table(limiter: rl.RateLimiter, name: str = "rl") -> Table:
    """Uniform sampler, Fifo remover and a max_size that never evicts, so
    only the rate limiter decides what may happen."""
    return Table(name, sel.Uniform(), sel.Fifo(), 1_000_000, limiter, seed=7)


class Driver:
    """Inserts fresh keys and takes single samples without waiting."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.next_key = 0

    def insert(self) -> bool:
        """True if the insert was admitted, False if the limiter blocked it."""
        try:
            self.table.insert(self.next_key, 1.0, timeout=0)
        except DeadlineExceededError as e:
            assert TIMEOUT_TEXT in str(e)
            return False
        self.next_key += 1
        return True

    def sample(self) -> bool:
        try:
            got = self.table.sample(1, timeout=0)
        except DeadlineExceededError as e:
            assert TIMEOUT_TEXT in str(e)
            return False
        assert len(got) == 1
        return True

    def inserts(self, n: int) -> None:
        for i in range(n):
            assert self.insert(), f"insert {i + 1} of {n} was blocked"

    def samples(self, n: int) -> None:
        for i in range(n):
            assert self.sample(), f"sample {i + 1} of {n} was blocked"


def limiter_counts(table: Table) -> tuple[int, int, int]:
    info = table.info.rate_limiter_info
    return (info.insert_stats.completed, info.sample_stats.completed, info.deletes)


# ----- rate_limiter_test.cc worked examples -----


def test_samples_blocked_until_min_size_inserts() -> None:
    # spi=1, m=2, (min_diff, max_diff) = (-1, 1).
    table = make_table(rl.RateLimiter(1.0, 2, -1.0, 1.0))
    d = Driver(table)
    assert not table.can_sample(1)
    assert not d.sample()
    d.inserts(1)
    assert not table.can_sample(1)  # 1 item < min size 2
    assert not d.sample()
    d.inserts(1)
    assert table.can_sample(1)  # 2*1 - 0 - 1 = 1 >= -1
    assert d.sample()
    assert limiter_counts(table) == (2, 1, 0)


def test_min_size_inserts_are_free_then_max_diff_applies() -> None:
    # spi=1, m=2, (-1, 1): inserts 1 and 2 are free (size <= m); the third
    # needs 3*1 - samples <= 1, i.e. two samples.
    table = make_table(rl.RateLimiter(1.0, 2, -1.0, 1.0))
    d = Driver(table)
    d.inserts(2)
    assert not table.can_insert(1) and not d.insert()
    d.samples(1)
    assert not table.can_insert(1) and not d.insert()  # 3 - 1 = 2 > 1
    d.samples(1)
    assert table.can_insert(1) and d.insert()  # 3 - 2 = 1 <= 1


def test_two_inserts_allow_six_samples_at_spi_1_5() -> None:
    # spi=1.5, m=1, (-3, 3.1): after two inserts inserts*spi = 3, so samples
    # are allowed while 3 - samples - 1 >= -3, i.e. six of them.
    table = make_table(rl.RateLimiter(1.5, 1, -3.0, 3.1))
    d = Driver(table)
    d.inserts(1)  # free: size 1 <= m
    assert table.can_insert(1)  # 2*1.5 - 0 = 3 <= 3.1
    d.inserts(1)
    assert not table.can_insert(1)  # 3*1.5 - 0 = 4.5 > 3.1
    assert not d.insert()
    assert table.can_sample(6) and not table.can_sample(7)
    d.samples(6)
    assert not table.can_sample(1)  # 3 - 6 - 1 = -4 < -3
    assert not d.sample()
    assert limiter_counts(table) == (2, 6, 0)
    assert table.can_insert(1) and d.insert()  # 4.5 - 6 = -1.5 <= 3.1


def test_batch_sample_returns_the_six_admitted_samples() -> None:
    # Same limiter: a batch larger than the limiter admits comes back partial.
    table = make_table(rl.RateLimiter(1.5, 1, -3.0, 3.1))
    table.insert_batch([1, 2], [1.0, 1.0], timeout=0)
    batch = table.sample(10, timeout=0)
    assert len(batch) == 6
    assert set(batch.key.tolist()) <= {1, 2}
    with pytest.raises(DeadlineExceededError, match=TIMEOUT_TEXT):
        table.sample(1, timeout=0)


def test_insert_blocked_at_diff_3_5_until_one_more_sample() -> None:
    # spi=1.5, m=2, (-1, 3): after 2 inserts and 1 sample the next insert
    # would make the diff 3*1.5 - 1 = 3.5 > 3; one more sample gives 2.5.
    table = make_table(rl.RateLimiter(1.5, 2, -1.0, 3.0))
    d = Driver(table)
    d.inserts(2)
    d.samples(1)
    assert not table.can_insert(1)
    assert not d.insert()
    d.samples(1)
    assert table.can_insert(1)
    assert d.insert()
    assert limiter_counts(table) == (3, 2, 0)


def test_can_sample_n_after_one_insert() -> None:
    # spi=1, m=1, (-1, 1): one insert admits 1 - 0 - n >= -1, i.e. n <= 2.
    table = make_table(rl.RateLimiter(1.0, 1, -1.0, 1.0))
    table.insert(1, 1.0, timeout=0)
    assert table.can_sample(1)
    assert table.can_sample(2)
    assert not table.can_sample(3)
    assert len(table.sample(2, timeout=0)) == 2
    assert not table.can_sample(1)


def test_can_insert_n_and_after_inserts_and_samples() -> None:
    # spi=1.5, m=2, (0, 5): up to 2 inserts are free, 3 give 4.5 <= 5, 4
    # give 6 > 5.  After 3 inserts and 2 samples: 4*1.5 - 2 = 4 <= 5 but
    # 5*1.5 - 2 = 5.5 > 5.
    table = make_table(rl.RateLimiter(1.5, 2, 0.0, 5.0))
    assert [table.can_insert(n) for n in (1, 2, 3, 4)] == [True, True, True, False]
    d = Driver(table)
    d.inserts(3)
    d.samples(2)
    assert table.can_insert(1)
    assert not table.can_insert(2)
    assert d.insert()
    assert not d.insert()  # 5*1.5 - 2 = 5.5 > 5


def test_deletes_below_min_size_unblock_inserts_and_block_samples() -> None:
    # spi=1, m=2, (-10, 2): two free inserts, the third needs 3 - s <= 2.
    table = make_table(rl.RateLimiter(1.0, 2, -10.0, 2.0))
    d = Driver(table)
    d.inserts(2)
    assert table.can_sample(1)
    assert not table.can_insert(1) and not d.insert()
    table.delete([0])  # inserts - deletes = 1 < m
    assert limiter_counts(table) == (2, 0, 1)
    assert not table.can_sample(1)
    assert not d.sample()
    assert table.can_insert(1)  # 2 + 1 - 1 = 2 <= m: free again
    assert d.insert()
    assert table.can_sample(1) and d.sample()


def test_explicit_deletes_of_unknown_keys_do_not_count() -> None:
    table = make_table(rl.RateLimiter(1.0, 2, -10.0, 2.0))
    table.insert_batch([1, 2], [1.0, 1.0], timeout=0)
    table.delete([99, 100])
    assert limiter_counts(table) == (2, 0, 0)
    assert table.can_sample(1)


def test_reinserting_a_present_key_is_not_an_insert() -> None:
    table = make_table(rl.RateLimiter(1.0, 2, -10.0, 2.0))
    table.insert_batch([1, 2], [1.0, 1.0], timeout=0)
    assert not table.can_insert(1)
    # A present key is only an update, but as in Reverb it is processed only
    # once the limiter admits an insert, so it waits like any insert.
    with pytest.raises(DeadlineExceededError):
        table.insert(1, 5.0, timeout=0)
    assert limiter_counts(table) == (2, 0, 0)
    table.sample(1, timeout=0)
    table.sample(1, timeout=0)
    table.insert(1, 5.0, timeout=0)  # now admitted: an update, not an insert
    assert limiter_counts(table) == (2, 2, 0)
    assert len(table) == 2
    assert table.get(1)[1] == 5.0


@pytest.mark.parametrize("spi", [0.0, -1.0])
def test_rate_limiter_rejects_non_positive_samples_per_insert(spi: float) -> None:
    with pytest.raises(ValueError):
        rl.RateLimiter(spi, 1, -1.0, 1.0)


@pytest.mark.parametrize("m", [0, -1])
def test_rate_limiter_rejects_non_positive_min_size(m: int) -> None:
    with pytest.raises(ValueError):
        rl.RateLimiter(1.0, m, -1.0, 1.0)


def test_rate_limiter_rejects_min_diff_above_max_diff() -> None:
    with pytest.raises(ValueError):
        rl.RateLimiter(1.0, 1, 2.0, 1.0)


# ----- rate_limiters_test.py validation table -----


@pytest.mark.parametrize(
    ("spi", "error_buffer", "ok"),
    [
        (5.0, 4.0, False),  # buffer 2*4 = 8 < 2*max(1, 5)
        (0.5, 0.9, False),  # 1.8 < 2*max(1, 0.5)
        (0.5, 1.1, True),
    ],
)
def test_sample_to_insert_ratio_scalar_error_buffer(
    spi: float, error_buffer: float, ok: bool
) -> None:
    if not ok:
        with pytest.raises(ValueError, match="error_buffer"):
            rl.SampleToInsertRatio(spi, 10, error_buffer)
        return
    limiter = rl.SampleToInsertRatio(spi, 10, error_buffer)
    # A scalar e gives (m*spi - e, m*spi + e).
    assert limiter.samples_per_insert == spi
    assert limiter.min_size_to_sample == 10
    assert limiter.min_diff == pytest.approx(10 * spi - error_buffer)
    assert limiter.max_diff == pytest.approx(10 * spi + error_buffer)


@pytest.mark.parametrize(
    ("m", "spi", "error_buffer", "ok", "warns"),
    [
        (10, 5.0, (8.0, 12.0), False, False),  # range 4 < 2*5
        (10, 0.1, (9.5, 10.5), False, False),  # range 1 < 2*1
        (10, 1.0, (5.0, 9.0), True, True),  # max_diff < m*spi: warning only
        (10, 1.0, (11.0, 15.0), False, False),  # min_diff > m*spi: deadlock
        (0, 1.0, (-1.0, 1.0), False, False),  # m < 1
        (10, 1.0, (7.0, 12.0), True, False),
    ],
    ids=[
        "range_too_small_for_spi",
        "range_smaller_than_2",
        "range_below_min_size_warns",
        "range_above_min_size",
        "min_size_below_1",
        "valid",
    ],
)
def test_sample_to_insert_ratio_explicit_error_buffer(
    m: int,
    spi: float,
    error_buffer: tuple[float, float],
    ok: bool,
    warns: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="fastreplay.rate_limiters")
    if not ok:
        with pytest.raises(ValueError):
            rl.SampleToInsertRatio(spi, m, error_buffer)
        return
    limiter = rl.SampleToInsertRatio(spi, m, error_buffer)
    assert (limiter.min_diff, limiter.max_diff) == error_buffer
    warnings = [
        r for r in caplog.records
        if r.levelno == logging.WARNING and r.name == "fastreplay.rate_limiters"
    ]
    if warns:
        assert len(warnings) == 1
        assert "deadlock" in warnings[0].getMessage()
    else:
        assert warnings == []


@pytest.mark.parametrize("spi", [0.0, -1.0])
def test_sample_to_insert_ratio_rejects_non_positive_spi(spi: float) -> None:
    with pytest.raises(ValueError):
        rl.SampleToInsertRatio(spi, 10, 100.0)


@pytest.mark.parametrize("m", [-1, 0])
def test_min_size_rejects_non_positive(m: int) -> None:
    with pytest.raises(ValueError):
        rl.MinSize(m)


def test_min_size_parameters() -> None:
    limiter = rl.MinSize(3)
    assert limiter.samples_per_insert == 1.0
    assert limiter.min_size_to_sample == 3
    assert limiter.min_diff == -sys.float_info.max
    assert limiter.max_diff == sys.float_info.max


def test_min_size_only_gates_sampling() -> None:
    table = make_table(rl.MinSize(3))
    d = Driver(table)
    d.inserts(2)
    assert not table.can_sample(1) and not d.sample()
    d.inserts(1)
    assert table.can_sample(1)
    d.inserts(997)  # never blocks inserts, however few samples
    assert table.can_sample(1_000_000)
    assert len(table.sample(5000, timeout=0)) == 5000
    assert table.can_insert(1_000_000)


def test_sample_to_insert_ratio_through_a_table() -> None:
    # spi=2, m=3, e=3: (min_diff, max_diff) = (3, 9).
    table = make_table(rl.SampleToInsertRatio(2.0, 3, 3.0))
    d = Driver(table)
    d.inserts(3)  # free up to min size
    assert table.can_sample(3) and not table.can_sample(4)  # 6 - n >= 3
    d.inserts(1)  # 4*2 - 0 = 8 <= 9
    assert not d.insert()  # 5*2 - 0 = 10 > 9
    d.samples(5)  # 8 - s - 1 >= 3 for s <= 4
    assert not d.sample()
    assert d.insert()  # 10 - 5 = 5 <= 9
    # Over a long run the sample/insert ratio converges to spi.
    for _ in range(2000):
        progressed = d.insert()
        while d.sample():
            progressed = True
        assert progressed
    ins, smp, _ = limiter_counts(table)
    assert 3 <= ins * 2.0 - smp <= 9
    assert smp / ins == pytest.approx(2.0, rel=0.01)


# ----- Queue and Stack -----


def test_queue_is_first_in_first_out_and_blocks_when_full_or_empty() -> None:
    q = Table.queue("queue", 3)
    with pytest.raises(DeadlineExceededError, match=TIMEOUT_TEXT):
        q.sample(1, timeout=0)
    for key in (10, 11, 12):
        q.insert(key, 1.0, timeout=0)
    assert not q.can_insert(1)
    with pytest.raises(DeadlineExceededError, match=TIMEOUT_TEXT):
        q.insert(13, 1.0, timeout=0)
    assert len(q) == 3  # blocked, not evicted
    assert [int(q.sample(1, timeout=0).key[0]) for _ in range(3)] == [10, 11, 12]
    assert len(q) == 0  # each sample consumed its item
    with pytest.raises(DeadlineExceededError, match=TIMEOUT_TEXT):
        q.sample(1, timeout=0)
    q.insert(13, 1.0, timeout=0)
    assert q.sample(1, timeout=0).key.tolist() == [13]


def test_queue_interleaved_inserts_and_samples_keep_order() -> None:
    q = Table.queue("queue", 2)
    q.insert(1, 1.0, timeout=0)
    q.insert(2, 1.0, timeout=0)
    assert q.sample(1, timeout=0).key.tolist() == [1]
    q.insert(3, 1.0, timeout=0)
    with pytest.raises(DeadlineExceededError):
        q.insert(4, 1.0, timeout=0)
    batch = q.sample(5, timeout=0)  # partial batch: only two queued
    assert batch.key.tolist() == [2, 3]
    assert batch.times_sampled.tolist() == [1, 1]
    assert batch.probability.tolist() == [1.0, 1.0]


def test_stack_is_last_in_first_out_and_blocks_when_full_or_empty() -> None:
    s = Table.stack("stack", 3)
    with pytest.raises(DeadlineExceededError, match=TIMEOUT_TEXT):
        s.sample(1, timeout=0)
    for key in (10, 11, 12):
        s.insert(key, 1.0, timeout=0)
    with pytest.raises(DeadlineExceededError, match=TIMEOUT_TEXT):
        s.insert(13, 1.0, timeout=0)
    assert s.sample(1, timeout=0).key.tolist() == [12]
    s.insert(13, 1.0, timeout=0)
    assert [int(s.sample(1, timeout=0).key[0]) for _ in range(3)] == [13, 11, 10]
    with pytest.raises(DeadlineExceededError, match=TIMEOUT_TEXT):
        s.sample(1, timeout=0)


@pytest.mark.parametrize("factory", [Table.queue, Table.stack], ids=["queue", "stack"])
def test_queue_and_stack_configuration(factory: object) -> None:
    table = factory("t", 5)  # type: ignore[operator]
    info = table.info
    expected = "fifo" if factory == Table.queue else "lifo"
    assert info.sampler_options.WhichOneof("distribution") == expected
    assert info.remover_options.WhichOneof("distribution") == expected
    assert info.max_size == 5
    assert info.max_times_sampled == 1
    rli = info.rate_limiter_info
    assert (rli.samples_per_insert, rli.min_size_to_sample) == (1.0, 1)
    assert (rli.min_diff, rli.max_diff) == (0.0, 5.0)


def test_timeout_waits_for_the_given_time() -> None:
    q = Table.queue("queue", 1)
    q.insert(1, 1.0, timeout=0)
    start = time.monotonic()
    with pytest.raises(DeadlineExceededError) as excinfo:
        q.insert(2, 1.0, timeout=0.05)
    assert time.monotonic() - start >= 0.045
    assert TIMEOUT_TEXT in str(excinfo.value)
    assert isinstance(excinfo.value, TimeoutError)
    assert isinstance(excinfo.value, ReverbError)


def test_blocked_insert_proceeds_when_another_thread_samples() -> None:
    q = Table.queue("queue", 1)
    q.insert(1, 1.0, timeout=0)
    errors: list[BaseException] = []

    def producer() -> None:
        try:
            q.insert(2, 1.0, timeout=10)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    thread = threading.Thread(target=producer)
    thread.start()
    time.sleep(0.05)
    assert thread.is_alive()  # waiting for room
    assert q.sample(1, timeout=0).key.tolist() == [1]
    thread.join(timeout=10)
    assert not thread.is_alive() and errors == []
    assert q.sample(1, timeout=0).key.tolist() == [2]


def test_blocked_sample_proceeds_when_another_thread_inserts() -> None:
    q = Table.queue("queue", 1)
    result: list[list[int]] = []

    def consumer() -> None:
        result.append(q.sample(1, timeout=10).key.tolist())

    thread = threading.Thread(target=consumer)
    thread.start()
    time.sleep(0.05)
    assert thread.is_alive()
    q.insert(7, 1.0, timeout=0)
    thread.join(timeout=10)
    assert result == [[7]]


def test_insert_batch_stops_where_the_limiter_blocks() -> None:
    q = Table.queue("queue", 3)
    with pytest.raises(DeadlineExceededError, match=TIMEOUT_TEXT) as excinfo:
        q.insert_batch([1, 2, 3, 4, 5], [1.0] * 5, timeout=0)
    assert "3 of 5 inserted" in str(excinfo.value)
    assert q.items()["key"].tolist() == [1, 2, 3]  # the admitted prefix stays
    assert limiter_counts(q) == (3, 0, 0)


def test_close_wakes_a_blocked_insert() -> None:
    q = Table.queue("queue", 1)
    q.insert(1, 1.0, timeout=0)
    raised: list[BaseException] = []

    def producer() -> None:
        try:
            q.insert(2, 1.0, timeout=10)
        except BaseException as e:
            raised.append(e)

    thread = threading.Thread(target=producer)
    thread.start()
    time.sleep(0.05)
    q.close()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], TableClosedError)
    assert q.items()["key"].tolist() == [1]


# ----- ownership and construction checks -----


def test_rate_limiter_reused_for_second_table_raises() -> None:
    limiter = rl.MinSize(1)
    make_table(limiter, name="first")
    with pytest.raises(ValueError, match="first"):
        make_table(limiter, name="second")


def test_same_selector_as_sampler_and_remover_raises() -> None:
    selector = sel.Fifo()
    limiter = rl.MinSize(1)
    with pytest.raises(ValueError, match="distinct"):
        Table("t", selector, selector, 10, limiter)
    # The failed construction claimed neither object.
    table = Table("t", selector, sel.Fifo(), 10, limiter)
    table.insert(1, 1.0, timeout=0)
    assert table.sample(1, timeout=0).key.tolist() == [1]


# ----- reset -----


def test_reset_zeroes_rate_limiter_counters() -> None:
    # spi=1, m=2, (-10, 3): inserts 1-2 free, the 3rd gives 3 <= 3, the 4th
    # would give 4 > 3.
    table = make_table(rl.RateLimiter(1.0, 2, -10.0, 3.0))
    d = Driver(table)
    d.inserts(3)
    assert not d.insert()
    d.samples(2)
    table.delete([0])
    assert limiter_counts(table) == (3, 2, 1)
    table.reset()
    info = table.info
    assert info.rate_limiter_info.insert_stats.completed == 0
    assert info.rate_limiter_info.sample_stats.completed == 0
    assert info.rate_limiter_info.deletes == 0
    assert info.current_size == 0 and len(table) == 0
    # The limiter starts over: sampling gated by min size, inserts free.
    assert not table.can_sample(1) and not d.sample()
    assert [table.can_insert(n) for n in (1, 2, 3, 4)] == [True, True, True, False]
    d.inserts(3)
    assert not d.insert()
    assert limiter_counts(table) == (3, 0, 0)


def test_reset_unblocks_a_full_queue() -> None:
    q = Table.queue("queue", 2)
    q.insert_batch([1, 2], [1.0, 1.0], timeout=0)
    with pytest.raises(DeadlineExceededError):
        q.insert(3, 1.0, timeout=0)
    q.reset()
    assert limiter_counts(q) == (0, 0, 0)
    with pytest.raises(DeadlineExceededError):
        q.sample(1, timeout=0)
    q.insert(3, 1.0, timeout=0)
    assert q.sample(1, timeout=0).key.tolist() == [3]
