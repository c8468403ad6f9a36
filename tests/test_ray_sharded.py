"""fastreplay.ray on a two-node local Ray cluster (tests/conftest.py
``ray_session``): placement, exactly-once writes from writer actors, the
global PER distribution, update routing, a shard killed and restored,
pickled clients in tasks."""

from __future__ import annotations

import pickle
import time
from typing import Any

import numpy as np
import pytest
from _reference import per_distance

import fastreplay as reverb

pytest.importorskip("ray")
frray = pytest.importorskip("fastreplay.ray")

ALPHA = 0.6


def _per(name: str = "replay", max_size: int = 10_000) -> reverb.Table:
    return _table(name, reverb.selectors.Prioritized(ALPHA), max_size)


def _write(
    client: Any, shard: int, ids: Any, priority: Any = 1.0, table: str = "replay"
) -> None:
    with client.trajectory_writer(1, shard=shard) as w:
        for i in ids:
            w.append({"id": np.int64(i), "obs": np.full(3, i, np.float32)})
            p = priority(i) if callable(priority) else priority
            w.create_item(
                table, p, {"id": w.history["id"][-1], "obs": w.history["obs"][-1]}
            )


def _table(name: str, sampler: Any, max_size: int, min_size: int = 1) -> reverb.Table:
    return reverb.Table(name, sampler, reverb.selectors.Fifo(), max_size,
                        reverb.rate_limiters.MinSize(min_size))


@pytest.fixture(scope="module")
def two(ray_session: Any) -> Any:
    """Two shards of a PER table and a FIFO table, one per node."""
    fifo = _table("fifo", reverb.selectors.Fifo(), 1000)
    server = frray.ShardedServer([_per(), fifo], num_shards=2, placement="spread")
    server.wait_ready(timeout=120)
    yield server
    server.close()


def test_spread_places_one_shard_per_node(two: Any, ray_session: Any) -> None:
    nodes = two.shard_nodes
    assert len(set(nodes)) == 2
    alive = {n["NodeID"] for n in ray_session.nodes() if n["Alive"]}
    assert set(nodes) == alive
    info = two.client().shard_info()
    assert [i.shard for i in info] == [0, 1]
    assert all(i.alive and i.restarts == 0 for i in info)
    assert info[0].tables["replay"].max_size == 5000  # split evenly


def test_spread_with_more_shards_than_nodes_goes_round_robin(ray_session: Any) -> None:
    """Four shards on two nodes: two on each, in sorted node-id order (Ray's
    best-effort SPREAD put all four on one node in some runs)."""
    server = frray.ShardedServer([_per()], num_shards=4, placement="spread")
    try:
        server.wait_ready(timeout=120)
        alive = sorted(n["NodeID"] for n in ray_session.nodes() if n["Alive"])
        assert server.shard_nodes == [alive[i % 2] for i in range(4)]
    finally:
        server.close()


def test_keys_carry_their_shard_and_global_probabilities_are_exact(two: Any) -> None:
    client = two.client(seed=3)
    # Very different masses: shard 0 holds 40 items of priority 1, shard 1
    # holds 10 items of priority 50.
    _write(client, 0, range(0, 40), 1.0)
    _write(client, 1, range(100, 110), 50.0)
    p = {i: 1.0 for i in range(40)} | {i: 50.0 for i in range(100, 110)}
    mass = sum(v**ALPHA for v in p.values())
    seen: dict[int, int] = {}
    draws = 0
    for _ in range(120):
        info, data = client.sample_batch("replay", 256, timeout=10)
        ids = data["id"].reshape(-1)
        assert len(ids) == 256
        np.testing.assert_array_equal(frray.shard_of(info.key), info.shard)
        np.testing.assert_array_equal(info.shard, (ids >= 100).astype(np.int32))
        expect = np.array([p[int(i)] ** ALPHA / mass for i in ids])
        np.testing.assert_allclose(info.probability, expect, rtol=1e-9)
        assert set(info.table_size.tolist()) == {50}
        for i in ids:
            seen[int(i)] = seen.get(int(i), 0) + 1
        draws += len(ids)
    # Frequencies against p^a / sum p^a (fixed seed, 30,720 draws).
    tv, want = per_distance(seen, p, ALPHA)
    assert tv < 0.03
    shard1 = sum(seen.get(i, 0) for i in range(100, 110)) / draws
    assert shard1 == pytest.approx(sum(want[i] for i in range(100, 110)), abs=0.01)


def test_update_priorities_route_by_key(two: Any) -> None:
    client = two.client(seed=4)
    before = {i.shard: i.priority_mass["replay"] for i in client.shard_info()}
    info, _ = client.sample_batch("replay", 64, timeout=10)
    keys = np.unique(info.key)
    client.update_priorities("replay", keys, np.full(len(keys), 3.0))
    client.sync()
    after = {i.shard: i.priority_mass["replay"] for i in client.shard_info()}
    for s in (0, 1):
        mine = keys[frray.shard_of(keys) == s]
        old = {int(k): float(p) for k, p in zip(info.key, info.priority, strict=True)}
        delta = sum(3.0**ALPHA - old[int(k)] ** ALPHA for k in mine)
        assert after[s] == pytest.approx(before[s] + delta, rel=1e-9)
    # Every updated key now samples with priority 3.
    info2, _ = client.sample_batch("replay", 256, timeout=10)
    hit = np.isin(info2.key, keys)
    assert np.all(info2.priority[hit] == 3.0)


def test_ordered_tables_need_a_shard(two: Any) -> None:
    client = two.client()
    _write(client, 1, [7, 8], table="fifo")
    with pytest.raises(ValueError, match="shard="):
        client.sample_batch("fifo", 1)
    info, data = client.sample_batch("fifo", 1, shard=1, timeout=10)
    assert int(data["id"].reshape(-1)[0]) == 7 and info.shard.tolist() == [1]
    with pytest.raises(ValueError, match="Could not find table"):
        client.sample_batch("nope", 1)


def test_server_info_sums_the_shards(two: Any) -> None:
    client = two.client()
    info = client.server_info()
    per = client.shard_info()
    assert info["replay"].max_size == sum(p.tables["replay"].max_size for p in per)
    sizes = [p.tables["replay"].current_size for p in per]
    assert info["replay"].current_size == sum(sizes)


def test_writer_actors_write_exactly_once(ray_session: Any) -> None:
    ray = ray_session
    table = _table("u", reverb.selectors.Uniform(), 10_000)
    with frray.ShardedServer([table], num_shards=2) as server:
        client = server.client()

        @ray.remote(num_cpus=0)
        def actor(c: Any, base: int, n: int) -> int:
            with c.trajectory_writer(1) as w:
                for i in range(base, base + n):
                    w.append({"id": np.int64(i)})
                    w.create_item("u", 1.0, {"id": w.history["id"][-1]})
            return w.shard

        shards = ray.get(
            [actor.remote(client, k * 1000, 150) for k in range(3)], timeout=120
        )
        assert set(shards) <= {0, 1}
        info = client.server_info()["u"]
        assert info.current_size == 450 and info.num_inserts == 450
        seen: set[int] = set()
        for _ in range(40):
            _, data = client.sample_batch("u", 256, timeout=10)
            seen |= set(data["id"].reshape(-1).tolist())
        assert seen == {k * 1000 + i for k in range(3) for i in range(150)}


def test_pickled_client_samples_in_a_task(two: Any, ray_session: Any) -> None:
    client = two.client()
    again = pickle.loads(pickle.dumps(client))
    assert again.num_shards == 2
    _write(client, 0, range(900_000, 900_040))  # not only what earlier tests wrote

    @ray_session.remote(num_cpus=0)
    def learner(c: Any) -> int:
        info, _ = c.sample_batch("replay", 32, timeout=10)
        c.update_priorities("replay", info.key, np.ones(len(info.key)))
        c.sync()
        return len(info.key)

    assert ray_session.get(learner.remote(client), timeout=60) == 32


def test_a_killed_shard_restores_its_checkpoint(
    ray_session: Any, tmp_path: Any
) -> None:
    ray = ray_session
    with frray.ShardedServer(
        [_per("r")], num_shards=2, checkpoint_dir=str(tmp_path), max_restarts=2
    ) as server:
        client = server.client(seed=5)
        _write(client, 0, range(20), table="r")
        _write(client, 1, range(100, 130), table="r")
        paths = client.checkpoint()
        assert len(paths) == 2 and all(str(tmp_path) in p for p in paths)
        _write(client, 1, range(200, 205), table="r")  # after the checkpoint: lost
        writer = client.trajectory_writer(1, shard=1)
        writer.append({"id": np.int64(-1), "obs": np.zeros(3, np.float32)})
        ray.kill(server.shard_actors[1], no_restart=False)
        # Sampling goes on over the live shard, with exact probabilities.
        deadline = time.monotonic() + 60
        while True:
            info, data = client.sample_batch("r", 16, timeout=10)
            if info.unavailable_shards or time.monotonic() > deadline:
                break
        # The writer of the dead shard says so, with what was not acknowledged.
        with pytest.raises(frray.ShardUnavailableError) as err:
            for _ in range(3):
                writer.create_item(
                    "r",
                    1.0,
                    {"id": writer.history["id"][-1], "obs": writer.history["obs"][-1]},
                )
                writer.flush()
        assert err.value.shard == 1
        client.wait_for_shards(timeout=60)
        info1 = client.shard_info()[1]
        assert info1.alive and info1.restarts == 1
        assert info1.restored_from == paths[1]
        assert info1.tables["r"].current_size == 30  # the 5 after it are lost
        assert client.shard_info()[0].restarts == 0
        # New writers route to live shards; sampling covers both again.
        _write(client, 1, range(300, 310), table="r")
        shards: set[int] = set()
        for _ in range(20):
            info, _ = client.sample_batch("r", 64, timeout=10)
            shards |= set(info.shard.tolist())
        assert shards == {0, 1}


def test_require_all_shards_and_bad_arguments(two: Any) -> None:
    client = two.client()
    info, _ = client.sample_batch("replay", 8, timeout=10, require_all_shards=True)
    assert info.unavailable_shards == ()
    with pytest.raises(ValueError, match="batch_size"):
        client.sample_batch("replay", 0)
    with pytest.raises(ValueError, match="shard"):
        client.trajectory_writer(1, shard=5)
    with pytest.raises(ValueError, match="num_shards"):
        frray.ShardedServer([_per()], num_shards=0)
    with pytest.raises(reverb.errors.InvalidPriorityError):
        client.update_priorities("replay", info.key, np.full(len(info.key), np.nan))


def test_named_server_connect_insert_structured_and_dataset(ray_session: Any) -> None:
    table = _table("n", reverb.selectors.Uniform(), 1000, min_size=2)
    with frray.ShardedServer([table], num_shards=2, name="fr-test-named") as server:
        server.wait_ready(timeout=120)
        client = frray.connect("fr-test-named", timeout=30)
        assert client.num_shards == 2
        for s in (0, 1):
            client.insert({"x": np.float32(s)}, {"n": 1.0}, shard=s)
        paths = reverb.structured_writer.pattern_from_transform(
            {"x": None}, lambda ref: {"x": ref["x"][-1:]})
        config = reverb.structured_writer.create_config(paths, table="n")
        with client.structured_writer([config], shard=1) as w:
            assert w.shard == 1
            for i in range(4):
                w.append({"x": np.float32(10 + i)})
        info = client.server_info()["n"]
        assert info.current_size == 6
        assert [i.tables["n"].current_size for i in client.shard_info()] == [1, 5]
        with client.dataset("n", batch_size=8, prefetch=2) as ds:
            for _, (sinfo, data) in zip(range(3), ds, strict=False):
                assert len(sinfo) == 8 and data["x"].shape[0] == 8
                np.testing.assert_allclose(sinfo.probability, 1 / 6)
    with pytest.raises(reverb.errors.UnavailableError):
        frray.connect("fr-test-no-such-server", timeout=0.5)


def test_shards_checkpoint_periodically(ray_session: Any, tmp_path: Any) -> None:
    with frray.ShardedServer([_per("p")], num_shards=2, checkpoint_dir=str(tmp_path),
                             checkpoint_every_s=0.5) as server:
        server.wait_ready(timeout=120)
        client = server.client()
        _write(client, 0, range(3), table="p")
        deadline = time.monotonic() + 60
        found: list[Any] = []
        while time.monotonic() < deadline:
            found = sorted(tmp_path.glob("shard-*/2*"))
            if {p.parent.name for p in found} == {"shard-0", "shard-1"}:
                break
            time.sleep(0.2)
        assert {p.parent.name for p in found} == {"shard-0", "shard-1"}
