"""``fastreplay.ray.Client.sample_batches`` and the dataset that uses it,
on the session's two-node Ray cluster: several batches from one request per
shard, each globally exact; one batch where an extra sample would count."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
from _reference import per_distance

import fastreplay as reverb

pytest.importorskip("ray")
frray = pytest.importorskip("fastreplay.ray")

ALPHA = 0.6
P = {i: 1.0 for i in range(40)} | {i: 50.0 for i in range(100, 110)}
MASS = sum(v**ALPHA for v in P.values())


def _table(name: str, **kwargs: Any) -> reverb.Table:
    return reverb.Table(name, reverb.selectors.Prioritized(ALPHA),
                        reverb.selectors.Fifo(), 10_000,
                        reverb.rate_limiters.MinSize(1), **kwargs)


@pytest.fixture(scope="module")
def server(ray_session: Any) -> Any:
    """Two shards of very different masses: 40 items of priority 1 on shard
    0, 10 of priority 50 on shard 1 (in both tables)."""
    server = frray.ShardedServer([_table("replay"),
                                  _table("limited", max_times_sampled=1_000_000),
                                  _table("empty")],
                                 num_shards=2, placement="spread")
    server.wait_ready(timeout=120)
    cl = server.client(seed=11)
    for shard, ids in ((0, range(40)), (1, range(100, 110))):
        with cl.trajectory_writer(1, shard=shard) as w:
            for i in ids:
                w.append({"id": np.int64(i)})
                for table in ("replay", "limited"):
                    w.create_item(table, P[i], w.history["id"][-1:])
    yield server
    server.close()


@pytest.fixture(scope="module")
def client(server: Any) -> Any:
    return server.client(seed=11)


def _check(info: Any, data: Any, n: int) -> np.ndarray:
    ids = np.asarray(data).reshape(-1)
    assert len(info) == n and len(ids) == n
    np.testing.assert_array_equal(frray.shard_of(info.key), info.shard)
    np.testing.assert_array_equal(info.shard, (ids >= 100).astype(np.int32))
    np.testing.assert_allclose(info.probability,
                               [P[int(i)] ** ALPHA / MASS for i in ids], rtol=1e-9)
    assert set(info.table_size.tolist()) == {50}
    return ids


def test_sample_batches_are_each_globally_exact(client: Any) -> None:
    seen: dict[int, int] = {}
    before = client.stats()["samples"]
    for _ in range(30):
        batches = client.sample_batches("replay", 128, 8, timeout=10)
        assert 1 <= len(batches) <= 8
        for info, data in batches:
            for i in _check(info, data, 128):
                seen[int(i)] = seen.get(int(i), 0) + 1
    draws = sum(seen.values())
    assert draws >= 30 * 128 * 6  # whole calls, bar the odd short shard
    assert client.stats()["samples"] - before == draws
    tv, want = per_distance(seen, P, ALPHA)
    assert tv < 0.03
    shard1 = sum(seen.get(i, 0) for i in range(100, 110)) / draws
    assert shard1 == pytest.approx(sum(want[i] for i in range(100, 110)), abs=0.01)


def test_one_batch_where_an_extra_sample_counts(client: Any) -> None:
    batches = client.sample_batches("limited", 64, 8, timeout=10)
    assert len(batches) == 1
    _check(*batches[0], 64)


def test_one_batch_for_a_client_drawing_from_cached_masses(server: Any) -> None:
    cached = server.client(seed=2, max_mass_age_s=60.0)
    for _ in range(3):  # the first call reads the masses, the next use them
        batches = cached.sample_batches("replay", 64, 8, timeout=10)
        assert len(batches) == 1
        _check(*batches[0], 64)


def test_bad_arguments_name_the_argument(client: Any) -> None:
    with pytest.raises(ValueError, match="num_batches"):
        client.sample_batches("replay", 8, 0)
    with pytest.raises(ValueError, match="batch_size"):
        client.sample_batches("replay", 0, 2)
    with pytest.raises(ValueError, match="Could not find table"):
        client.sample_batches("nope", 8, 2)


def test_the_dataset_draws_several_batches_a_request(client: Any) -> None:
    calls: list[int] = []
    many = client.sample_batches

    def counted(*args: Any, **kwargs: Any) -> Any:
        got = many(*args, **kwargs)
        calls.append(len(got))
        return got

    client.sample_batches = counted  # the instance's, seen by the dataset
    try:
        with client.dataset("replay", 128, prefetch=2) as ds:
            for _, (info, data) in zip(range(24), ds, strict=False):
                _check(info, data, 128)
    finally:
        del client.sample_batches
    k = frray._client.DATASET_BATCHES_PER_CALL
    assert k > 1 and calls and max(calls) == k
    # 24 batches taken, and what the worker made ahead (queue and its own).
    assert len(calls) <= 24 // k + 3


@pytest.mark.parametrize(("table", "workers"), [("replay", 2), ("limited", 1)])
def test_dataset_batches_are_whole_and_exact(client: Any, table: str,
                                             workers: int) -> None:
    """Two workers drawing several batches a request each, and a table
    where an extra sample counts (one batch a request)."""
    with client.dataset(table, 96, prefetch=2, num_workers=workers) as ds:
        for _, (info, data) in zip(range(12), ds, strict=False):
            _check(info, data, 96)


def test_a_dataset_of_an_empty_table_ends_after_its_timeout(client: Any) -> None:
    t0 = time.monotonic()
    with client.dataset("empty", 8, timeout=0.5) as ds:
        assert list(ds) == []
    assert time.monotonic() - t0 < 10


def test_batches_skip_a_dead_shard_with_exact_probabilities(ray_session: Any) -> None:
    """A shard killed for good (no restarts): the dataset's requests go to
    the live shard, each batch says which shard it skipped, and its
    probabilities are those of the live shard alone; require_all raises."""
    ray = ray_session
    with frray.ShardedServer([_table("replay")], num_shards=2,
                             max_restarts=0) as server:
        cl = server.client(seed=3)
        for shard, ids in ((0, range(40)), (1, range(100, 110))):
            with cl.trajectory_writer(1, shard=shard) as w:
                for i in ids:
                    w.append({"id": np.int64(i)})
                    w.create_item("replay", P[i], w.history["id"][-1:])
        ray.kill(server.shard_actors[1], no_restart=True)
        deadline = time.monotonic() + 60
        batches: list[Any] = []
        while not batches and time.monotonic() < deadline:
            got = cl.sample_batches("replay", 32, 4, timeout=10)
            batches = [b for b in got if b[0].unavailable_shards]
        assert batches
        for info, data in batches:
            assert info.unavailable_shards == (1,)
            assert set(info.shard.tolist()) == {0}
            np.testing.assert_allclose(info.probability, 1 / 40)  # all priority 1
            assert len(np.asarray(data).reshape(-1)) == len(info) == 32
        with pytest.raises(frray.ShardUnavailableError):
            cl.sample_batches("replay", 32, 4, timeout=5, require_all_shards=True)
        with cl.dataset("replay", 32) as ds:
            info, _ = next(ds)
        assert info.unavailable_shards == (1,) and len(info) == 32
