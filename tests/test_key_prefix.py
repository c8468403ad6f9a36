"""``Server(key_prefix=...)``, ``Table.priority_mass`` and the mass a
``sample_batch`` reply carries: the pieces ``fastreplay.ray`` routes and
weighs shards by (ray-api.md, "Keys carry their shard").

Every writer path (TrajectoryWriter, StructuredWriter, the legacy Writer,
``client.insert``), in process and through a remote client of a server of
this process, draws keys whose top 8 bits are the server's prefix.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastreplay import Client, Server, Table
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay import structured_writer as sw
from fastreplay.checkpointers import DefaultCheckpointer
from fastreplay.net.remote import RemoteBackend

PREFIX = 0xA7
WAIT = 10.0
ALPHA = 0.6
STEP = {"x": np.int64(0)}


def tables() -> list[Table]:
    return [Table("prio", sel.Prioritized(ALPHA), sel.Fifo(), 1000, rl.MinSize(1)),
            Table("unif", sel.Uniform(), sel.Fifo(), 1000, rl.MinSize(1))]


def write_every_way(client: Client) -> None:
    """Two items per table from each writer path."""
    with client.trajectory_writer(1) as w:
        for i in range(2):
            w.append({"x": np.int64(i)})
            w.create_item("prio", 1.0, {"x": w.history["x"][-1]})
            w.create_item("unif", 1.0, {"x": w.history["x"][-1]})
    ref = sw.create_reference_step(STEP)
    configs = [sw.create_config(ref["x"][-1], name) for name in ("prio", "unif")]
    s = client.structured_writer(configs)
    for i in range(2):
        s.append({"x": np.int64(i)})
    s.flush()
    s.close()
    with client.writer(1) as legacy:
        for i in range(2):
            legacy.append([np.int64(i)])
            legacy.create_item("prio", 1, 1.0)
            legacy.create_item("unif", 1, 1.0)
    for i in range(2):
        client.insert([np.int64(i)], {"prio": 1.0, "unif": 2.0})


def write_steps(client: Client, n: int) -> None:
    """``n`` items of one structure per table (sample_batch stacks them)."""
    with client.trajectory_writer(1) as w:
        for i in range(n):
            w.append({"x": np.int64(i)})
            w.create_item("prio", 1.0, {"x": w.history["x"][-1]})
            w.create_item("unif", 1.0, {"x": w.history["x"][-1]})


def keys(server: Server) -> dict[str, list[int]]:
    return {n: [int(k) for k in t.items()["key"]] for n, t in server.tables.items()}


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server(tables(), port=0, key_prefix=PREFIX)
    try:
        yield srv
    finally:
        srv.stop()


def remote_client(server: Server) -> Client:
    client = Client(f"localhost:{server.port}")
    client._backend_found = RemoteBackend("127.0.0.1", server.port)
    return client


# ----- key prefix -----


@pytest.mark.parametrize("remote", [False, True], ids=["local", "remote"])
def test_every_writer_path_draws_keys_with_the_prefix(server: Server,
                                                      remote: bool) -> None:
    client = remote_client(server) if remote else server.localhost_client()
    try:
        write_every_way(client)
        client.server_info()  # remote items are in by now
    finally:
        client.close()
    got = keys(server)
    assert all(len(ks) == 8 for ks in got.values()), got
    assert {k >> 56 for ks in got.values() for k in ks} == {PREFIX}
    # The low 56 bits stay random: distinct keys, not a counter.
    low = [k & ((1 << 56) - 1) for ks in got.values() for k in ks]
    assert len(set(low)) == len(low) and max(low) >= 1 << 40


@pytest.mark.parametrize("prefix", [0, 1, 255])
def test_extreme_prefixes(prefix: int) -> None:
    srv = Server(tables(), port=0, key_prefix=prefix)
    try:
        client = srv.localhost_client()
        write_every_way(client)
        assert {k >> 56 for ks in keys(srv).values() for k in ks} == {prefix}
        assert srv.key_prefix == prefix
        assert all(t.key_prefix == prefix for t in srv.tables.values())
    finally:
        srv.stop()


def test_without_a_prefix_keys_use_all_64_bits() -> None:
    srv = Server(tables(), port=0)
    try:
        assert srv.key_prefix is None
        assert all(t.key_prefix is None for t in srv.tables.values())
        client = srv.localhost_client()
        for _ in range(8):
            write_every_way(client)
        tops = {k >> 56 for ks in keys(srv).values() for k in ks}
        assert len(tops) > 8  # 64 keys over 256 top bytes: never one value
    finally:
        srv.stop()


def test_a_remote_client_of_a_server_without_prefix_draws_64_bits() -> None:
    srv = Server(tables(), port=0)
    try:
        client = remote_client(srv)
        for _ in range(4):
            write_every_way(client)
        client.server_info()
        client.close()
        assert len({k >> 56 for ks in keys(srv).values() for k in ks}) > 8
    finally:
        srv.stop()


@pytest.mark.parametrize("bad", [-1, 256, 1 << 60, 1.0, "3", True, [1]])
def test_bad_prefixes_are_refused(bad: Any) -> None:
    t = tables()
    with pytest.raises(ValueError, match="key_prefix"):
        Server(t, port=0, key_prefix=bad)
    assert all(table.key_prefix is None for table in t)


def test_numpy_integer_prefix_is_taken() -> None:
    srv = Server(tables(), port=0, key_prefix=np.uint8(9))
    try:
        assert srv.key_prefix == 9 and type(srv.key_prefix) is int
    finally:
        srv.stop()


def test_keys_given_by_the_caller_are_kept(server: Server) -> None:
    server.tables["prio"].insert(5, 1.0)
    assert [int(k) for k in server.tables["prio"].items()["key"]] == [5]


def test_checkpoint_restore_keeps_keys_and_new_keys_get_the_new_prefix(
        tmp_path: Any) -> None:
    first = Server(tables(), port=0, key_prefix=3,
                   checkpointer=DefaultCheckpointer(str(tmp_path)))
    client = first.localhost_client()
    write_every_way(client)
    before = keys(first)
    client.checkpoint()
    first.stop()
    second = Server(tables(), port=0, key_prefix=4,
                    checkpointer=DefaultCheckpointer(str(tmp_path)))
    try:
        assert keys(second) == before  # stored keys as they were saved
        for remote in (False, True):
            c = remote_client(second) if remote else second.localhost_client()
            write_every_way(c)
            c.server_info()
            c.close()
        after = keys(second)
        new = {k for ks in after.values() for k in ks} - {
            k for ks in before.values() for k in ks}
        assert len(new) == 32 and {k >> 56 for k in new} == {4}
        assert {k >> 56 for ks in before.values() for k in ks} == {3}
    finally:
        second.stop()


# ----- priority mass -----


def _mass(priorities: dict[int, float], alpha: float) -> float:
    return sum(0.0 if p == 0 else p ** alpha for p in priorities.values())


ops = st.lists(st.one_of(
    st.tuples(st.just("insert"), st.integers(0, 40),
              st.floats(0, 1e3, allow_nan=False)),
    st.tuples(st.just("update"), st.integers(0, 40),
              st.floats(0, 1e3, allow_nan=False)),
    st.tuples(st.just("delete"), st.integers(0, 40), st.just(0.0)),
    st.tuples(st.just("sample"), st.integers(1, 5), st.just(0.0))),
    max_size=60)


@settings(max_examples=60, deadline=None)
@given(ops=ops, alpha=st.sampled_from([0.0, 0.5, 0.6, 1.0, 2.0]),
       max_size=st.integers(1, 12), max_times_sampled=st.integers(0, 2))
def test_priority_mass_is_the_sum_of_weights(
        ops: list[tuple[str, int, float]], alpha: float, max_size: int,
        max_times_sampled: int) -> None:
    """Inserts, updates, deletes, Fifo evictions and deletions after
    max_times_sampled, against a pure-Python model of the items."""
    table = Table("t", sel.Prioritized(alpha), sel.Fifo(), max_size, rl.MinSize(1),
                  max_times_sampled=max_times_sampled, seed=1)
    uniform = Table("u", sel.Uniform(), sel.Fifo(), max_size, rl.MinSize(1),
                    max_times_sampled=max_times_sampled, seed=1)
    for op, key, p in ops:
        for t in (table, uniform):
            if op == "insert":
                t.insert(key, p)
            elif op == "update":
                t.update_priorities([key], [p])
            elif op == "delete":
                t.delete([key])
            elif len(t):
                t.sample(key, timeout=0)
        model = {int(k): float(pr) for k, pr in
                 zip(table.items()["key"], table.items()["priority"], strict=True)}
        assert table.priority_mass == pytest.approx(_mass(model, alpha),
                                                    rel=1e-12, abs=1e-300)
        assert table.mass_and_size() == (table.priority_mass, len(table))
        assert uniform.priority_mass == float(len(uniform))


@pytest.mark.parametrize("sampler", [sel.Fifo(), sel.Lifo(), sel.MinHeap(),
                                     sel.MaxHeap(), sel.Uniform()],
                         ids=lambda s: type(s).__name__)
def test_priority_mass_of_other_samplers_is_the_size(sampler: Any) -> None:
    t = Table("t", sampler, sel.Fifo(), 10, rl.MinSize(1))
    assert t.priority_mass == 0.0
    for k in range(14):
        t.insert(k, 0.5 + k)
    assert t.priority_mass == 10.0 == len(t)
    t.reset()
    assert t.priority_mass == 0.0


def test_priority_mass_of_an_empty_and_reset_prioritized_table() -> None:
    t = Table("t", sel.Prioritized(1.0), sel.Fifo(), 10, rl.MinSize(1))
    assert t.priority_mass == 0.0
    t.insert(1, 2.5)
    t.insert(2, 0.0)
    assert t.priority_mass == 2.5
    t.reset()
    assert t.priority_mass == 0.0


# ----- mass on the wire -----


@pytest.mark.parametrize("remote", [False, True], ids=["local", "remote"])
def test_sample_batch_meta_carries_mass_and_size(server: Server, remote: bool
                                                 ) -> None:
    client = remote_client(server) if remote else server.localhost_client()
    try:
        write_steps(client, 8)
        client.server_info()
        backend = client._backend
        for table in ("prio", "unif"):
            want = server.tables[table].mass_and_size()
            # Several calls in a row: later ones are answered by batches asked
            # for ahead, which carry the mass too.
            for _ in range(5):
                meta: dict[str, Any] = {}
                info, _, _ = backend.sample_batch(table, 3, WAIT, meta)
                assert len(info.key) == 3
                assert meta == {"mass": want[0], "size": want[1]}
            backend.sample_batch(table, 3, WAIT)  # meta is optional
        assert want == (8.0, 8)
        assert server.tables["prio"].priority_mass == pytest.approx(8.0)
    finally:
        client.close()


def test_remote_meta_follows_priority_updates(server: Server) -> None:
    client = remote_client(server)
    try:
        write_steps(client, 8)
        client.server_info()
        backend = client._backend
        ks = server.tables["prio"].items()["key"]
        client.update_priorities("prio", ks, np.full(len(ks), 4.0))
        meta: dict[str, Any] = {}
        backend.sample_batch("prio", 2, WAIT, meta)
        assert meta["mass"] == pytest.approx(len(ks) * 4.0 ** ALPHA)
        assert meta["size"] == len(ks)
    finally:
        client.close()
