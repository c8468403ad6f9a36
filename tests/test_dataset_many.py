"""A dataset whose worker draws several batches a call
(``sample_batches``, as ``fastreplay.ray``'s does), and the joining of a
throttled batch's parts, with fake samplers (no server)."""

from __future__ import annotations

import itertools
import time
from typing import Any

import numpy as np

from fastreplay.dataset import SampleDataset, join
from fastreplay.ray._sampling import ShardedSampleInfo
from fastreplay.replay_sample import SampleInfoBatch


def _info(keys: np.ndarray, unavailable: tuple[int, ...] = ()) -> ShardedSampleInfo:
    n = len(keys)
    return ShardedSampleInfo(keys.astype(np.uint64), np.full(n, 0.5), np.full(n, 9),
                             np.ones(n), np.ones(n, np.int64),
                             (keys % 2).astype(np.int32), unavailable)


class ManyFake:
    """``sample_batches`` gives the batches of ``plan`` in turn (sizes; a
    size below the batch is a short one); ``sample_batch`` gives what is
    asked.  Keys count up, so the order items were drawn in shows."""

    def __init__(self, plan: list[list[int]]) -> None:
        self.plan = itertools.cycle(plan)
        self.next_key = 0
        self.calls: list[tuple[str, int]] = []

    def _batch(self, n: int) -> tuple[Any, Any]:
        keys = np.arange(self.next_key, self.next_key + n)
        self.next_key += n
        return _info(keys), {"k": keys.astype(np.float32)}

    def sample_batch(self, table: str, batch_size: int, *,
                     timeout: float | None = None) -> tuple[Any, Any]:
        self.calls.append(("one", batch_size))
        return self._batch(batch_size)

    def sample_batches(self, table: str, batch_size: int, num_batches: int, *,
                       timeout: float | None = None) -> list[tuple[Any, Any]]:
        self.calls.append(("many", num_batches))
        return [self._batch(n) for n in next(self.plan)]


def test_join_keeps_a_sharded_info_and_unites_the_skipped_shards() -> None:
    a = (_info(np.arange(3), (2,)), {"k": np.zeros(3)})
    b = (_info(np.arange(3, 5), (1, 2)), {"k": np.ones(2)})
    info, data = join([a, b])
    assert type(info) is ShardedSampleInfo
    np.testing.assert_array_equal(info.key, np.arange(5))
    np.testing.assert_array_equal(info.shard, [0, 1, 0, 1, 0])
    assert info.unavailable_shards == (1, 2)
    np.testing.assert_array_equal(data["k"], [0, 0, 0, 1, 1])
    plain = SampleInfoBatch(*(np.arange(2),) * 5)
    joined, _ = join([(plain, [np.zeros(2)]), (plain, [np.ones(2)])])
    assert type(joined) is SampleInfoBatch and len(joined.key) == 4


def test_a_worker_hands_out_every_batch_of_a_call_whole_and_in_order() -> None:
    fake = ManyFake([[8, 8, 8, 3], [8, 8]])
    with SampleDataset(fake, "t", 8, 2, 1, None, per_call=4) as ds:
        got = [next(ds) for _ in range(9)]
    assert all(len(info.key) == 8 for info, _ in got)
    keys = np.concatenate([info.key for info, _ in got])
    # Every item drawn is handed out once, in the order drawn: the short
    # batch (3) starts the next batch, topped up by sample_batch(5).
    np.testing.assert_array_equal(keys, np.arange(len(keys)))
    assert ("one", 5) in fake.calls
    assert fake.calls[0] == ("many", 4)
    for info, data in got:
        np.testing.assert_array_equal(data["k"], info.key.astype(np.float32))


def test_a_call_with_only_a_short_batch_is_topped_up() -> None:
    fake = ManyFake([[5]])
    with SampleDataset(fake, "t", 8, 1, 1, None, per_call=4) as ds:
        info, _ = next(ds)
    assert len(info.key) == 8
    assert type(info) is ShardedSampleInfo
    assert fake.calls[:2] == [("many", 4), ("one", 3)]


def test_one_batch_a_call_never_asks_for_several() -> None:
    fake = ManyFake([[8, 8]])
    with SampleDataset(fake, "t", 8, 1, 1, None) as ds:
        next(ds)
        next(ds)
    assert {c[0] for c in fake.calls} == {"one"}


def test_a_carried_short_batch_that_cannot_be_topped_up_ends_the_iteration() -> None:
    """After a call of one whole batch and a short one, nothing more can be
    sampled: the finite timeout ends the iteration, with the whole batch
    handed out and the short one never passed off as whole."""
    from fastreplay import errors

    class Drained(ManyFake):
        def sample_batch(self, table: str, batch_size: int, *,
                         timeout: float | None = None) -> tuple[Any, Any]:
            self.calls.append(("one", batch_size))
            raise errors.DeadlineExceededError("nothing to sample")

        def sample_batches(self, table: str, batch_size: int, num_batches: int, *,
                           timeout: float | None = None) -> list[tuple[Any, Any]]:
            if self.calls:
                raise errors.DeadlineExceededError("nothing to sample")
            return super().sample_batches(table, batch_size, num_batches)

    fake = Drained([[8, 3]])
    t0 = time.monotonic()
    with SampleDataset(fake, "t", 8, 2, 1, 0.3, per_call=4) as ds:
        got = list(ds)
    assert [len(info.key) for info, _ in got] == [8]
    assert ("one", 5) in fake.calls
    assert time.monotonic() - t0 < 5
