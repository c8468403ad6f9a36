"""Server and Client: fastreplay's versions of Reverb's ``server_test.py``
and ``client_test.py`` (reverb-spec sections 3.5-3.8, 5.2-5.4, 6), plus
``sample_batch`` / ``dataset`` (fastreplay additions), a concurrency soak of
writers, a sampler and a priority updater, and a Reverb drop-in smoke test.

Every helper thread is joined with a timeout; a thread still alive then is a
deadlock and fails the test (the server is stopped first so it can exit).
"""

from __future__ import annotations

import dataclasses
import pickle
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest
from threadutil import Worker, join_workers

from fastreplay import Client, ReplaySample, SampleInfo, Server, Table, errors
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay.errors import DeadlineExceededError, TableClosedError

JOIN_TIMEOUT = 10.0
DBL_MAX = float(np.finfo(np.float64).max)


# ----- helpers -----


@dataclasses.dataclass(frozen=True)
class Spec:
    """A TensorSpec stand-in: a small dataclass with .shape and .dtype."""

    shape: tuple[int | None, ...]
    dtype: np.dtype[Any]


class ArraySpec:
    """A dm_env ``specs.Array``-like spec whose dtype is a numpy type."""

    def __init__(self, shape: tuple[int | None, ...], dtype: type) -> None:
        self.shape = shape
        self.dtype = dtype


def finish(server: Server, workers: list[Worker], timeout: float = JOIN_TIMEOUT
           ) -> None:
    """Join every worker; on a hang stop the server, then fail."""
    join_workers(workers, server.stop, timeout)


def uniform_table(name: str, max_size: int = 1000, **kwargs: Any) -> Table:
    return Table(name, sel.Uniform(), sel.Fifo(), max_size, rl.MinSize(1), **kwargs)


SIGNATURE = {
    "a": Spec((None,), np.dtype(np.int64)),
    "b": {"c": Spec((3, 2, 2), np.dtype(np.float32))},
}


@pytest.fixture
def server() -> Iterator[Server]:
    """Tables shaped like Reverb's client_test: a prioritized one, a uniform
    one, a queue and one with a signature."""
    srv = Server([
        Table("dist", sel.Prioritized(1.0), sel.Fifo(), 1000, rl.MinSize(1), seed=7),
        uniform_table("uniform", seed=11),
        Table.queue("queue", 100),
        uniform_table("signed", signature=SIGNATURE),
    ])
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def client(server: Server) -> Client:
    return Client(f"localhost:{server.port}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def write_steps(client: Client, table: str, n: int, length: int,
                keep: int | None = None) -> list[dict[str, np.ndarray]]:
    """Append n steps ``{'a': int64 i, 'b': float32 [2] filled with i}`` and
    create an item of the last ``length`` steps after each step from
    ``length - 1`` on; returns the steps."""
    steps = []
    with client.trajectory_writer(keep or length) as w:
        for i in range(n):
            step = {"a": np.int64(i), "b": np.full(2, i + 0.5, np.float32)}
            steps.append(step)
            w.append(step)
            if i >= length - 1:
                w.create_item(table, 1.0, {"a": w.history["a"][-length:],
                                           "b": w.history["b"][-length:]})
    return steps


# ----- server -----


class TestServer:
    def test_no_tables(self) -> None:
        with pytest.raises(ValueError, match="At least one table must be provided"):
            Server([])

    def test_duplicate_names(self) -> None:
        with pytest.raises(ValueError,
                           match="Multiple items in tables have the same name"):
            Server([uniform_table("x"), uniform_table("y"), uniform_table("x")])

    def test_tables_and_repr(self, server: Server) -> None:
        assert sorted(server.tables) == ["dist", "queue", "signed", "uniform"]
        assert str(server.port) in repr(server)

    def test_port_is_reserved_and_released(self) -> None:
        srv = Server([uniform_table("t")])
        port = srv.port
        try:
            assert 0 < port < 65536
            assert not port_is_free(port)
            with pytest.raises(OSError):
                Server([uniform_table("t")], port=port)
            # The failed second server did not unregister the first.
            Client(f"localhost:{port}").insert(1, {"t": 1.0})
            assert len(srv.tables["t"]) == 1
        finally:
            srv.stop()
        assert port_is_free(port)
        again = Server([uniform_table("t2")], port=port)
        try:
            assert again.port == port
            assert Client(f"localhost:{port}").server_info().keys() == {"t2"}
        finally:
            again.stop()

    def test_explicit_port(self) -> None:
        port = free_port()
        with Server([uniform_table("t")], port=port) as srv:
            assert srv.port == port
            assert Client(f"localhost:{port}").server_info()["t"].current_size == 0

    def test_client_of_stopped_server(self) -> None:
        srv = Server([uniform_table("t")])
        address = f"localhost:{srv.port}"
        Client(address)
        srv.stop()
        srv.stop()  # idempotent
        late = Client(address)  # connects lazily: the first call fails
        with pytest.raises(errors.UnavailableError, match="No fastreplay server"):
            late.server_info()

    def test_context_manager_stops(self) -> None:
        with Server([uniform_table("t")]) as srv:
            address = f"localhost:{srv.port}"
            assert srv.localhost_client().server_address == address
        with pytest.raises(RuntimeError, match="No fastreplay server"):
            Client(address).insert(1, {"t": 1.0})

    @pytest.mark.parametrize("address", ["nonsense", "localhost:", "localhost:abc"])
    def test_malformed_address(self, address: str) -> None:
        with pytest.raises(ValueError):
            Client(address)

    def test_unknown_port(self) -> None:
        client = Client(f"localhost:{free_port()}")  # lazy, as Reverb's
        with pytest.raises(errors.UnavailableError):
            client.sample_batch("t", 1)

    def test_stop_wakes_blocked_sampler(self) -> None:
        srv = Server([uniform_table("t")])
        client = srv.localhost_client()
        started = threading.Event()

        def blocked() -> None:
            started.set()
            client.sample_batch("t", 1)

        w = Worker(blocked, "blocked-sampler")
        w.start()
        started.wait(5)
        time.sleep(0.05)
        srv.stop()
        w.join(JOIN_TIMEOUT)
        assert not w.is_alive(), "stop() did not wake a blocked sample"
        assert isinstance(w.error, TableClosedError)

    def test_wait_returns_after_stop(self) -> None:
        srv = Server([uniform_table("t")])
        w = Worker(srv.wait, "waiter")
        w.start()
        time.sleep(0.05)
        assert w.is_alive()
        srv.stop()
        w.join(JOIN_TIMEOUT)
        assert not w.is_alive()
        assert w.error is None


# ----- client: basics -----


class TestClientBasics:
    def test_server_address_and_repr(self, server: Server, client: Client) -> None:
        assert client.server_address == f"localhost:{server.port}"
        assert client.server_address in repr(client)

    def test_pickle(self, server: Server, client: Client) -> None:
        copy = pickle.loads(pickle.dumps(client))
        assert isinstance(copy, Client)
        assert copy.server_address == client.server_address
        copy.insert([np.int32(5)], {"uniform": 1.0})
        (sample,) = next(client.sample("uniform"))
        np.testing.assert_array_equal(sample.data[0], 5)

    def test_unpickle_after_stop_fails_on_use(self) -> None:
        srv = Server([uniform_table("t")])
        blob = pickle.dumps(srv.localhost_client())
        srv.stop()
        copy = pickle.loads(blob)  # lazy: fails at the first call
        with pytest.raises(errors.UnavailableError):
            copy.insert(1, {"t": 1.0})

    def test_sample_sets_table_size_and_probability(self, client: Client) -> None:
        for i in range(1, 11):
            client.insert(i, {"uniform": 1.0})
            if i >= 3:
                (sample,) = next(client.sample("uniform", 1))
                assert sample.info.table_size == i
                assert sample.info.probability == pytest.approx(1.0 / i, rel=1e-9)

    def test_sample_sets_priority_and_mutation_is_reported(self, client: Client
                                                            ) -> None:
        for i in range(10):
            client.insert(i, {"dist": 1000.0})
        for _ in range(100):
            key = next(client.sample("dist", 1))[0].info.key
            client.mutate_priorities("dist", updates={key: 0.5})
        # Once every item has been mutated they all sit at 0.5; with
        # priorities 1000 vs 0.5 a mutated item is sampled only if all are.
        info = client.server_info()["dist"]
        assert info.current_size == 10
        assert next(client.sample("dist", 1))[0].info.priority == 0.5

    def test_probability_of_prioritized_table(self, client: Client) -> None:
        client.insert(0, {"dist": 1.0})
        client.insert(1, {"dist": 3.0})
        for _ in range(20):
            (s,) = next(client.sample("dist"))
            assert s.info.table_size == 2
            assert s.info.probability == pytest.approx(s.info.priority / 4.0)

    def test_insert_empty_priorities(self, client: Client) -> None:
        with pytest.raises(ValueError):
            client.insert([1], {})

    def test_insert_unknown_table_inserts_nothing(self, server: Server,
                                                  client: Client) -> None:
        with pytest.raises(ValueError, match="Could not find table"):
            client.insert([1], {"nope": 1.0})
        with pytest.raises(ValueError, match="Could not find table"):
            client.insert([1], {"uniform": 1.0, "nope": 1.0})
        assert len(server.tables["uniform"]) == 0

    def test_insert_into_several_tables(self, client: Client) -> None:
        client.insert({"x": np.arange(3)}, {"uniform": 1.0, "dist": 2.0})
        info = client.server_info()
        assert info["uniform"].current_size == 1
        assert info["dist"].current_size == 1
        (s,) = next(client.sample("dist"))
        assert s.info.priority == 2.0
        np.testing.assert_array_equal(s.data[0], np.arange(3))

    def test_insert_and_sample_python_types(self, client: Client) -> None:
        client.insert({"b": True, "f": 1.5, "i": 7}, {"uniform": 1.0})
        sample = next(client.sample("uniform", emit_timesteps=False))
        b, f, i = sample.data  # flat, in sorted key order
        assert b.dtype == np.bool_ and f.dtype == np.float64 and i.dtype == np.int64
        assert b.shape == f.shape == i.shape == (1,)
        assert bool(b[0]) is True and f[0] == 1.5 and i[0] == 7
        info, data = client.sample_batch("uniform", 2)
        assert data["b"].dtype == np.bool_
        assert data["f"].dtype == np.float64
        assert data["i"].dtype == np.int64
        np.testing.assert_array_equal(data["i"], [[7], [7]])

    def test_insert_is_a_trajectory_of_length_one(self, client: Client) -> None:
        client.insert(np.ones([3, 3], np.int32), {"uniform": 1.0})
        for sample in client.sample("uniform", 1):
            assert len(sample) == 1
            np.testing.assert_array_equal(sample[0].data[0], np.ones((3, 3), np.int32))
        sample = next(client.sample("uniform", emit_timesteps=False))
        assert sample.data[0].shape == (1, 3, 3)
        assert sample.data[0].dtype == np.int32

    def test_mutate_priorities_update(self, server: Server, client: Client) -> None:
        for _ in range(3):
            client.insert([0], {"dist": 1.0})
        key = next(client.sample("dist", 1))[0].info.key
        client.mutate_priorities("dist", updates={key: 0.5})
        table = server.tables["dist"]
        assert table.get(key)[1] == 0.5
        others = [int(k) for k in table.items()["key"] if int(k) != key]
        assert [table.get(k)[1] for k in others] == [1.0, 1.0]
        assert client.server_info()["dist"].current_size == 3

    def test_mutate_priorities_delete(self, client: Client) -> None:
        client.insert([0], {"dist": 1.0})
        client.insert([0], {"dist": 1.0})
        before = client.server_info()["dist"]
        key = next(client.sample("dist", 1))[0].info.key
        client.mutate_priorities("dist", deletes=[key])
        after = client.server_info()["dist"]
        assert after.current_size == before.current_size - 1
        for _ in range(10):
            assert next(client.sample("dist"))[0].info.key != key

    def test_mutate_deletes_first_and_ignores_unknown_keys(
        self, server: Server, client: Client
    ) -> None:
        for _ in range(3):
            client.insert([0], {"dist": 1.0})
        table = server.tables["dist"]
        k0, k1, k2 = (int(k) for k in table.items()["key"])
        unknown = max(k0, k1, k2) + 12345
        client.mutate_priorities(
            "dist", updates={k0: 3.0, k1: 4.0, unknown: 9.0}, deletes=[k1, unknown]
        )
        assert table.get(k0)[1] == 3.0
        assert table.get(k1) is None  # deleted although also updated
        assert table.get(k2)[1] == 1.0
        assert table.get(unknown) is None
        assert len(table) == 2
        client.mutate_priorities("dist")  # no-op
        assert len(table) == 2

    def test_update_priorities(self, server: Server, client: Client) -> None:
        for _ in range(4):
            client.insert([0], {"dist": 1.0})
        table = server.tables["dist"]
        keys = table.items()["key"]
        client.update_priorities("dist", keys[:2], [5.0, 6.0])
        assert [table.get(int(k))[1] for k in keys] == [5.0, 6.0, 1.0, 1.0]
        client.update_priorities("dist", [int(keys.max()) + 1], [2.0])  # unknown
        assert len(table) == 4

    def test_invalid_priority_is_rejected(self, server: Server, client: Client
                                          ) -> None:
        client.insert([0], {"dist": 1.0})
        key = int(server.tables["dist"].items()["key"][0])
        with pytest.raises(ValueError):
            client.mutate_priorities("dist", updates={key: float("nan")})
        with pytest.raises(ValueError):
            client.insert([0], {"dist": -1.0})
        assert server.tables["dist"].get(key)[1] == 1.0
        assert len(server.tables["dist"]) == 1
        assert next(client.sample("dist"))[0].info.key == key  # table alive

    def test_reset(self, client: Client) -> None:
        client.insert([1], {"uniform": 1.0})
        client.insert([1], {"uniform": 1.0})
        list(client.sample("uniform", 2))
        assert client.server_info()["uniform"].current_size == 2
        client.reset("uniform")
        info = client.server_info()["uniform"]
        assert info.current_size == 0
        assert info.rate_limiter_info.insert_stats.completed == 0
        assert info.rate_limiter_info.sample_stats.completed == 0
        with pytest.raises(DeadlineExceededError):
            client.sample_batch("uniform", 1, timeout=0.01)
        client.insert([2], {"uniform": 1.0})
        (s,) = next(client.sample("uniform"))
        np.testing.assert_array_equal(s.data[0], 2)

    def test_server_info(self, client: Client) -> None:
        client.insert([0], {"dist": 1.0})
        client.insert([0], {"dist": 1.0})
        for _ in range(3):
            client.insert([0], {"uniform": 1.0})
        list(client.sample("uniform", 1))

        info = client.server_info()
        assert set(info) == {"dist", "uniform", "queue", "signed"}
        dist = info["dist"]
        assert dist.name == "dist"
        assert dist.current_size == 2
        assert dist.num_unique_samples == 0
        assert dist.max_size == 1000
        assert dist.max_times_sampled == 0
        assert dist.sampler_options.HasField("prioritized")
        assert dist.sampler_options.prioritized.priority_exponent == 1.0
        assert dist.remover_options.fifo
        assert dist.signature is None
        rli = dist.rate_limiter_info
        assert rli.samples_per_insert == 1.0
        assert rli.min_diff == -DBL_MAX
        assert rli.max_diff == DBL_MAX
        assert rli.min_size_to_sample == 1
        assert rli.insert_stats.completed == 2
        assert rli.sample_stats.completed == 0

        uni = info["uniform"]
        assert uni.current_size == 3
        assert uni.num_unique_samples == 1
        assert uni.rate_limiter_info.insert_stats.completed == 3
        assert uni.rate_limiter_info.sample_stats.completed == 1

        queue = info["queue"]
        assert queue.max_size == 100
        assert queue.max_times_sampled == 1
        assert queue.sampler_options.fifo
        assert queue.rate_limiter_info.max_diff == 100
        assert info["signed"].signature == SIGNATURE
        assert client.server_info(timeout=1.0).keys() == info.keys()

    @pytest.mark.parametrize("n", [0, -1])
    def test_trajectory_writer_needs_positive_keep_alive(self, client: Client,
                                                         n: int) -> None:
        with pytest.raises(ValueError):
            client.trajectory_writer(n)

    def test_unknown_table(self, client: Client) -> None:
        for call in (
            lambda: next(client.sample("nope")),
            lambda: client.sample_batch("nope", 1),
            lambda: client.dataset("nope", 1),
            lambda: client.mutate_priorities("nope", updates={1: 1.0}),
            lambda: client.update_priorities("nope", [1], [1.0]),
            lambda: client.reset("nope"),
        ):
            with pytest.raises(ValueError, match='Could not find table "nope"'):
                call()

    def test_num_samples_must_be_positive(self, client: Client) -> None:
        client.insert([0], {"uniform": 1.0})
        with pytest.raises(ValueError):
            next(client.sample("uniform", 0))
        with pytest.raises(ValueError):
            client.sample_batch("uniform", 0)


# ----- client.sample -----


class TestSample:
    def test_emit_timesteps(self, client: Client) -> None:
        steps = write_steps(client, "uniform", 3, 3)
        (timesteps,) = list(client.sample("uniform", 1))
        assert len(timesteps) == 3
        for t, ts in enumerate(timesteps):
            assert isinstance(ts, ReplaySample)
            assert isinstance(ts.info, SampleInfo)
            assert ts.info == timesteps[0].info
            a, b = ts.data  # flat, sorted keys
            assert a == steps[t]["a"] and a.dtype == np.int64
            np.testing.assert_array_equal(b, steps[t]["b"])
            assert b.dtype == np.float32

    def test_without_timesteps_data_is_flat(self, client: Client) -> None:
        steps = write_steps(client, "uniform", 3, 3)
        sample = next(client.sample("uniform", emit_timesteps=False))
        assert isinstance(sample, ReplaySample)
        a, b = sample.data
        np.testing.assert_array_equal(a, [s["a"] for s in steps])
        np.testing.assert_array_equal(b, np.stack([s["b"] for s in steps]))
        assert a.dtype == np.int64 and b.dtype == np.float32
        info = sample.info
        assert isinstance(info.key, int)
        assert isinstance(info.probability, float)
        assert isinstance(info.table_size, int)
        assert isinstance(info.priority, float)
        assert isinstance(info.times_sampled, int)
        assert info.times_sampled == 1

    def test_num_samples(self, client: Client) -> None:
        write_steps(client, "uniform", 4, 2)
        samples = list(client.sample("uniform", 5, emit_timesteps=False))
        assert len(samples) == 5
        assert all(s.info.table_size == 3 for s in samples)

    def test_unpack_as_table_signature(self, client: Client) -> None:
        with client.trajectory_writer(3) as writer:
            for i in range(3):
                writer.append({"a": np.int64(i),
                               "b": {"c": np.full([2, 2], i, np.float32)}})
            writer.create_item("signed", 1.0, {
                "a": writer.history["a"][:],
                "b": {"c": writer.history["b"]["c"][:]},
            })
        sample = next(client.sample("signed", emit_timesteps=False,
                                    unpack_as_table_signature=True))
        assert set(sample.data) == {"a", "b"}
        np.testing.assert_array_equal(sample.data["a"], [0, 1, 2])
        assert sample.data["a"].dtype == np.int64
        want_c = np.stack([np.full([2, 2], i, np.float32) for i in range(3)])
        np.testing.assert_array_equal(sample.data["b"]["c"], want_c)
        assert sample.data["b"]["c"].dtype == np.float32
        # Without unpacking the same item is flat.
        flat = next(client.sample("signed", emit_timesteps=False))
        assert isinstance(flat.data, list) and len(flat.data) == 2

    def test_unpack_with_numpy_type_specs(self) -> None:
        signature = [ArraySpec((None, 3), np.float64), ArraySpec((None,), np.bool_)]
        with Server([uniform_table("t", signature=signature)]) as srv:
            client = srv.localhost_client()
            with client.trajectory_writer(2) as w:
                w.append([np.arange(3.0), True])
                w.append([np.arange(3.0) + 1, False])
                w.create_item("t", 1.0, [w.history[0][:], w.history[1][:]])
                with pytest.raises(ValueError, match="inconsistent with the table"):
                    w.create_item("t", 1.0, [w.history[1][:], w.history[0][:]])
            sample = next(client.sample("t", emit_timesteps=False,
                                        unpack_as_table_signature=True))
            assert isinstance(sample.data, list)
            np.testing.assert_array_equal(sample.data[0], [[0, 1, 2], [1, 2, 3]])
            np.testing.assert_array_equal(sample.data[1], [True, False])

    def test_unpack_without_signature_returns_flat_data(self, client: Client
                                                        ) -> None:
        # Reverb: "If the table does not have a signature then flat data is
        # returned."  Reverb code passing unpack_as_table_signature=True to a
        # table without a signature must keep working.
        steps = write_steps(client, "uniform", 2, 2)
        sample = next(client.sample("uniform", emit_timesteps=False,
                                    unpack_as_table_signature=True))
        a, b = sample.data
        np.testing.assert_array_equal(a, [0, 1])
        np.testing.assert_array_equal(b, np.stack([s["b"] for s in steps]))

    def test_timesteps_are_unpacked_as_signature(self, client: Client) -> None:
        # Reverb unflattens every timestep with the signature too.
        with client.trajectory_writer(3) as writer:
            for i in range(3):
                writer.append({"a": np.int64(i),
                               "b": {"c": np.full([2, 2], i, np.float32)}})
            writer.create_item("signed", 1.0, {
                "a": writer.history["a"][:],
                "b": {"c": writer.history["b"]["c"][:]},
            })
        (timesteps,) = list(client.sample("signed", 1, emit_timesteps=True,
                                          unpack_as_table_signature=True))
        assert len(timesteps) == 3
        for i, ts in enumerate(timesteps):
            assert isinstance(ts.data, dict), ts.data
            assert ts.data["a"] == i
            np.testing.assert_array_equal(ts.data["b"]["c"], np.full([2, 2], i))

    def test_mixed_lengths_cannot_be_split(self, client: Client) -> None:
        with client.trajectory_writer(3) as writer:
            for i in range(3):
                writer.append([np.int64(i), np.float32(i)])
            writer.create_item("uniform", 1.0,
                               [writer.history[0][:], writer.history[1][-2:]])
        with pytest.raises(ValueError,
                           match=r"Can't split non timestep trajectory into "
                                 r"timesteps\."):
            next(client.sample("uniform", emit_timesteps=True))
        # The same item is fine without splitting.
        sample = next(client.sample("uniform", emit_timesteps=False))
        assert [len(c) for c in sample.data] == [3, 2]

    def test_squeezed_column_with_timesteps(self, client: Client) -> None:
        # A squeezed (scalar) column next to a length-1 column: either one
        # timestep holding both values or Reverb's ValueError -- never a raw
        # IndexError from indexing a 0-d array.
        with client.trajectory_writer(1) as writer:
            writer.append({"a": np.int64(7), "b": np.float32(1.5)})
            writer.create_item("uniform", 1.0, {"a": writer.history["a"][-1],
                                                "b": writer.history["b"][-1:]})
        try:
            (timesteps,) = list(client.sample("uniform", 1))
        except ValueError as exc:
            assert "Can't split non timestep trajectory" in str(exc)
        else:
            assert len(timesteps) == 1
            a, b = timesteps[0].data
            assert a == 7 and b == 1.5

    def test_sample_blocks_until_an_item_arrives(self, client: Client) -> None:
        def later() -> None:
            time.sleep(0.1)
            client.insert([np.int64(3)], {"queue": 1.0})

        w = Worker(later, "late-insert")
        w.start()
        (s,) = next(client.sample("queue"))
        np.testing.assert_array_equal(s.data[0], 3)
        w.join(JOIN_TIMEOUT)
        assert w.error is None


# ----- client.sample_batch -----


class TestSampleBatch:
    def test_agrees_with_sample_on_twin_queues(self) -> None:
        tables = [Table.queue("q1", 100), Table.queue("q2", 100)]
        with Server(tables) as srv:
            client = srv.localhost_client()
            with client.trajectory_writer(3) as w:
                for i in range(12):
                    w.append({"obs": np.full((2, 3), i, np.float32),
                              "act": np.int32(i)})
                    if i >= 2:
                        traj = {"obs": w.history["obs"][-3:],
                                "act": w.history["act"][-1]}
                        w.create_item("q1", float(i), traj)
                        w.create_item("q2", float(i), traj)
            singles = list(client.sample("q1", 10, emit_timesteps=False))
            info, data = client.sample_batch("q2", 10)
            assert len(info) == 10
            assert set(data) == {"act", "obs"}
            assert data["obs"].shape == (10, 3, 2, 3)
            assert data["act"].shape == (10,)
            for b, s in enumerate(singles):
                act, obs = s.data
                np.testing.assert_array_equal(data["act"][b], act)
                np.testing.assert_array_equal(data["obs"][b], obs)
                assert info.probability[b] == s.info.probability == 1.0
                assert info.table_size[b] == s.info.table_size
                assert info.priority[b] == s.info.priority == float(b + 2)
                assert info.times_sampled[b] == s.info.times_sampled == 1
            # FIFO order: item i holds steps i..i+2.
            np.testing.assert_array_equal(data["act"], np.arange(4, 14) - 2)
            np.testing.assert_array_equal(info.table_size, np.arange(10, 0, -1))

    def test_data_equals_written_data_by_key(self, server: Server,
                                             client: Client) -> None:
        steps = write_steps(client, "uniform", 20, 3)
        info, data = client.sample_batch("uniform", 200)
        assert set(data) == {"a", "b"}
        assert data["a"].shape == (200, 3) and data["a"].dtype == np.int64
        assert data["b"].shape == (200, 3, 2) and data["b"].dtype == np.float32
        by_key: dict[int, Any] = {}
        for b in range(200):
            first = int(data["a"][b, 0])
            np.testing.assert_array_equal(data["a"][b], np.arange(first, first + 3))
            want_b = np.stack([steps[first + t]["b"] for t in range(3)])
            np.testing.assert_array_equal(data["b"][b], want_b)
            key = int(info.key[b])
            assert by_key.setdefault(key, first) == first
        assert len(by_key) > 10
        assert set(by_key) <= {int(k) for k in server.tables["uniform"].items()["key"]}
        # client.sample reports the same data for a key.
        for s in client.sample("uniform", 30, emit_timesteps=False):
            if s.info.key in by_key:
                assert int(s.data[0][0]) == by_key[s.info.key]

    def test_info_arrays(self, client: Client) -> None:
        for i in range(5):
            client.insert([np.int64(i)], {"uniform": 1.0})
        info, _ = client.sample_batch("uniform", 8)
        assert info.key.dtype == np.uint64
        assert info.probability.dtype == np.float64
        assert info.table_size.dtype == np.int64
        assert info.priority.dtype == np.float64
        assert info.times_sampled.dtype == np.int64
        for field in info:
            assert field.shape == (8,)
        np.testing.assert_allclose(info.probability, 0.2)
        np.testing.assert_array_equal(info.table_size, 5)

    def test_dict_trajectory_and_squeezed_columns(self, client: Client) -> None:
        with client.trajectory_writer(2) as w:
            for i in range(4):
                w.append({"x": np.full(5, i, np.int16), "y": np.float64(i) / 2})
                if i >= 1:
                    w.create_item("uniform", 1.0, {"x": w.history["x"][-2:],
                                                   "last_y": w.history["y"][-1]})
        _, data = client.sample_batch("uniform", 6)
        assert set(data) == {"x", "last_y"}
        assert data["x"].shape == (6, 2, 5) and data["x"].dtype == np.int16
        assert data["last_y"].shape == (6,) and data["last_y"].dtype == np.float64
        for b in range(6):
            last = int(data["x"][b, 1, 0])
            assert data["last_y"][b] == last / 2
            np.testing.assert_array_equal(data["x"][b, 0], last - 1)

    def test_nested_trajectory_structure(self, client: Client) -> None:
        with client.trajectory_writer(1) as w:
            w.append({"o": (np.int32(1), np.zeros(2, np.float32)), "r": np.float32(3)})
            w.create_item("uniform", 1.0, [
                {"obs": (w.history["o"][0][-1:], w.history["o"][1][-1:])},
                w.history["r"][-1],
            ])
        _, data = client.sample_batch("uniform", 3)
        assert isinstance(data, list) and len(data) == 2
        assert isinstance(data[0]["obs"], tuple)
        assert data[0]["obs"][0].shape == (3, 1)
        assert data[0]["obs"][1].shape == (3, 1, 2)
        assert data[1].shape == (3,)
        np.testing.assert_array_equal(data[1], 3)

    def test_first_item_sampled_at_once_is_unpacked(self, server: Server,
                                                    client: Client) -> None:
        # A sampler waiting on an empty table gets the first item as soon as
        # create_item inserts it; the batch must already come back in the
        # trajectory's structure.  The Mapping below makes the writer slow
        # right after the insert (it sleeps, releasing the GIL, whenever it
        # is iterated again), which widens a window the 8-writer soak test
        # below hits by chance.
        class SlowMapping(Mapping[str, Any]):
            def __init__(self, data: dict[str, Any]) -> None:
                self._data = dict(data)
                self._iterations = 0

            def __getitem__(self, key: str) -> Any:
                return self._data[key]

            def __len__(self) -> int:
                return len(self._data)

            def __iter__(self) -> Iterator[str]:
                self._iterations += 1
                if self._iterations > 1:
                    time.sleep(0.2)
                return iter(self._data)

        waiting = threading.Event()

        def sample() -> Any:
            waiting.set()
            return client.sample_batch("uniform", 1, timeout=5.0)

        sampler = Worker(sample, "sampler")
        sampler.start()
        waiting.wait(5)
        time.sleep(0.05)
        with client.trajectory_writer(1) as w:
            w.append({"x": np.int64(5), "y": np.float32(1.5)})
            w.end_episode(clear_buffers=False)  # the item is ready at once
            w.create_item("uniform", 1.0, SlowMapping({"x": w.history["x"][-1:],
                                                       "y": w.history["y"][-1:]}))
        finish(server, [sampler])
        _, data = sampler.result
        assert isinstance(data, Mapping), (
            f"first item came back as {type(data).__name__}, not as the "
            "trajectory's mapping")
        assert set(data) == {"x", "y"}
        np.testing.assert_array_equal(data["x"], [[5]])

    def test_signature_nest(self, client: Client) -> None:
        with client.trajectory_writer(3) as writer:
            for i in range(3):
                writer.append({"a": np.int64(i),
                               "b": {"c": np.full([2, 2], i, np.float32)}})
            writer.create_item("signed", 1.0, {
                "a": writer.history["a"][:],
                "b": {"c": writer.history["b"]["c"][:]},
            })
        _, data = client.sample_batch("signed", 4)
        assert set(data) == {"a", "b"} and set(data["b"]) == {"c"}
        assert data["a"].shape == (4, 3)
        assert data["b"]["c"].shape == (4, 3, 2, 2)
        np.testing.assert_array_equal(data["a"], np.tile([0, 1, 2], (4, 1)))

    def test_insert_data_is_unpacked_as_inserted(self, client: Client) -> None:
        client.insert([np.int32(1), np.ones(3)], {"uniform": 1.0})
        _, data = client.sample_batch("uniform", 2)
        assert isinstance(data, list) and len(data) == 2
        assert data[0].shape == (2, 1) and data[0].dtype == np.int32
        assert data[1].shape == (2, 1, 3)

    def test_different_shapes_raise_naming_the_table(self, client: Client) -> None:
        client.insert([np.zeros(2)], {"uniform": 1.0})
        client.insert([np.zeros(3)], {"uniform": 1.0})
        with pytest.raises(ValueError, match="uniform"):
            for _ in range(50):  # some batch holds both items
                client.sample_batch("uniform", 8)

    def test_different_lengths_raise(self, client: Client) -> None:
        write_steps(client, "queue", 2, 1, keep=2)
        write_steps(client, "queue", 2, 2)
        with pytest.raises(ValueError, match="queue"):
            client.sample_batch("queue", 3)

    def test_timeout_on_empty_table(self, client: Client) -> None:
        start = time.monotonic()
        with pytest.raises(DeadlineExceededError):
            client.sample_batch("uniform", 4, timeout=0.1)
        elapsed = time.monotonic() - start
        assert 0.08 <= elapsed < 3.0

    def test_partial_batch_when_fewer_items_arrive(self, client: Client) -> None:
        def later() -> None:
            time.sleep(0.1)
            client.insert([np.int64(1)], {"queue": 1.0})
            client.insert([np.int64(2)], {"queue": 1.0})

        w = Worker(later, "late-inserts")
        w.start()
        info, data = client.sample_batch("queue", 5, timeout=0.5)
        w.join(JOIN_TIMEOUT)
        assert w.error is None
        # Both items eventually; the first call may return after the first.
        got = [int(v) for v in data[0][:, 0]]
        if len(got) == 1:
            info2, data2 = client.sample_batch("queue", 5, timeout=1.0)
            got += [int(v) for v in data2[0][:, 0]]
        assert got == [1, 2]
        assert len(info) == len(data[0]) <= 2

    def test_partial_batch_from_a_queue(self, client: Client) -> None:
        for i in range(3):
            client.insert([np.int64(i)], {"queue": 1.0})
        info, data = client.sample_batch("queue", 5, timeout=0.1)
        assert len(info) == 3
        for field in info:
            assert len(field) == 3
        np.testing.assert_array_equal(data[0], [[0], [1], [2]])
        with pytest.raises(DeadlineExceededError):
            client.sample_batch("queue", 1, timeout=0.01)


# ----- client.dataset -----


class TestDataset:
    def test_yields_full_batches(self, client: Client) -> None:
        write_steps(client, "uniform", 10, 2)
        with client.dataset("uniform", 16, prefetch=2) as ds:
            for _, (info, data) in zip(range(5), ds, strict=False):
                assert len(info) == 16
                assert data["a"].shape == (16, 2)
                assert data["b"].shape == (16, 2, 2)
                np.testing.assert_array_equal(data["a"][:, 1] - data["a"][:, 0], 1)

    def test_batches_assembled_from_a_throttled_queue(self, client: Client) -> None:
        ds = client.dataset("queue", 4, num_workers=1, timeout=5.0)

        def feed() -> None:
            for i in range(8):
                client.insert([np.int64(i)], {"queue": 1.0})
                time.sleep(0.01)

        w = Worker(feed, "feeder")
        w.start()
        try:
            batches = [next(ds), next(ds)]
        finally:
            ds.close()
        w.join(JOIN_TIMEOUT)
        assert w.error is None
        values = [int(v) for _, data in batches for v in data[0][:, 0]]
        assert values == list(range(8))
        for info, data in batches:
            assert len(info) == 4 and data[0].shape == (4, 1)

    def test_two_workers(self, client: Client) -> None:
        for i in range(20):
            client.insert({"v": np.int64(i)}, {"uniform": 1.0})
        with client.dataset("uniform", 8, num_workers=2, prefetch=1) as ds:
            for _, (info, data) in zip(range(6), ds, strict=False):
                assert len(info) == 8 and data["v"].shape == (8, 1)

    def test_close_stops_promptly(self, client: Client) -> None:
        ds = client.dataset("uniform", 4)  # empty table: workers keep waiting
        w = Worker(lambda: next(ds), "consumer")
        w.start()
        time.sleep(0.2)
        assert w.is_alive()
        start = time.monotonic()
        ds.close()
        w.join(JOIN_TIMEOUT)
        assert time.monotonic() - start < 2.0
        assert not w.is_alive()
        assert isinstance(w.error, StopIteration)
        with pytest.raises(errors.FailedPreconditionError, match="closed"):
            next(ds)  # a call after close() is a mistake: said clearly

    def test_context_manager_closes(self, client: Client) -> None:
        client.insert([0], {"uniform": 1.0})
        with client.dataset("uniform", 2) as ds:
            info, _ = next(ds)
            assert len(info) == 2
        assert ds.closed
        with pytest.raises(errors.FailedPreconditionError, match="closed"):
            next(ds)

    def test_finite_timeout_ends_iteration(self, client: Client) -> None:
        for i in range(10):
            client.insert([np.int64(i)], {"queue": 1.0})
        start = time.monotonic()
        with client.dataset("queue", 4, timeout=0.3) as ds:
            batches = list(ds)
        assert time.monotonic() - start < 5.0
        assert len(batches) == 2
        values = [int(v) for _, data in batches for v in data[0][:, 0]]
        assert values == list(range(8))

    @pytest.mark.parametrize("kwargs", [{"batch_size": 0}, {"prefetch": 0},
                                        {"num_workers": 0}])
    def test_invalid_arguments(self, client: Client, kwargs: dict[str, int]) -> None:
        args = {"batch_size": 2, **kwargs}
        with pytest.raises(ValueError):
            client.dataset("uniform", **args)

    def test_errors_reach_the_consumer(self, client: Client) -> None:
        client.insert([np.zeros(2)], {"queue": 1.0})
        client.insert([np.zeros(3)], {"queue": 1.0})
        with client.dataset("queue", 2, timeout=2.0) as ds:
            with pytest.raises(ValueError, match="queue"):
                next(ds)


# ----- concurrency soak -----

STRESS_SECONDS = 2.0
NUM_WRITERS = 8
MAX_STEPS = 40_000  # per writer: bounds memory; far more than 2 s of writing
BASE = 1_000_000


class TestConcurrency:
    def test_writers_sampler_and_updater(self) -> None:
        table = Table("stress", sel.Prioritized(1.0), sel.Fifo(),
                      NUM_WRITERS * MAX_STEPS, rl.MinSize(1), seed=3)
        server = Server([table])
        address = f"localhost:{server.port}"
        stop = threading.Event()
        recent: list[int] = []
        recent_lock = threading.Lock()
        checked = [0, 0]  # batch rows, single samples

        def writer(wid: int) -> int:
            client = Client(address)
            rng = np.random.default_rng(wid)
            created = 0
            with client.trajectory_writer(4) as w:
                for step in range(MAX_STEPS):
                    if stop.is_set():
                        break
                    w.append({"wid": np.int32(wid), "step": np.int64(step),
                              "obs": np.full(3, wid * BASE + step, np.float64)})
                    if w.episode_steps >= 3:
                        w.create_item("stress", float(rng.uniform(0.1, 2.0)), {
                            "wid": w.history["wid"][-1],
                            "step": w.history["step"][-3:],
                            "obs": w.history["obs"][-3:],
                        })
                        created += 1
                    if step % 25 == 24:
                        w.end_episode()
            return created

        def check_rows(wid: np.ndarray, steps: np.ndarray, obs: np.ndarray) -> None:
            """Vectorised over a batch: [B] wid, [B, 3] steps, [B, 3, 3] obs."""
            assert ((0 <= wid) & (wid < NUM_WRITERS)).all(), wid
            assert (steps == steps[:, :1] + np.arange(3)).all(), steps
            # Items never span an episode (25 steps each).
            assert (steps[:, 0] // 25 == steps[:, 2] // 25).all(), steps
            want = (wid[:, None] * BASE + steps).astype(np.float64)
            assert (obs == want[:, :, None]).all(), (wid, steps, obs)

        def sampler() -> None:
            client = Client(address)
            n = 0
            while not stop.is_set():
                n += 1
                if n % 10 == 0:
                    s = next(client.sample("stress", emit_timesteps=False))
                    obs, step, wid = s.data  # sorted keys
                    check_rows(wid[None], step[None], obs[None])
                    checked[1] += 1
                    continue
                try:
                    info, data = client.sample_batch("stress", 64, timeout=0.05)
                except DeadlineExceededError:
                    continue
                assert isinstance(data, dict), (
                    f"sample_batch gave a {type(data).__name__}, not the dict "
                    "the writers created (see test_first_item_sampled_at_once_"
                    "is_unpacked)")
                assert data["wid"].shape == (len(info),)
                check_rows(data["wid"], data["step"], data["obs"])
                checked[0] += len(info)
                with recent_lock:
                    recent[:] = [int(k) for k in info.key]

        def updater() -> int:
            client = Client(address)
            rng = np.random.default_rng(99)
            n = 0
            while not stop.is_set():
                with recent_lock:
                    keys = list(recent)
                if not keys:
                    time.sleep(0.001)
                    continue
                prios = rng.uniform(0.1, 3.0, len(keys))
                if n % 2:
                    client.update_priorities("stress", keys, prios)
                else:
                    client.mutate_priorities("stress",
                                             updates=dict(zip(keys, prios.tolist(),
                                                             strict=True)))
                n += 1
            return n

        writers = [Worker(lambda i=i: writer(i), f"writer-{i}")
                   for i in range(NUM_WRITERS)]
        others = [Worker(sampler, "sampler"), Worker(updater, "updater")]
        # A short GIL switch interval interleaves the threads finely (more
        # chances to hit a race) and keeps the sampler from being starved by
        # the eight writers.
        switch = sys.getswitchinterval()
        sys.setswitchinterval(1e-4)
        try:
            for w in writers + others:
                w.start()
            time.sleep(STRESS_SECONDS)
            stop.set()
            finish(server, writers + others, timeout=JOIN_TIMEOUT + STRESS_SECONDS)
            per_writer = [w.result for w in writers]
            created = sum(per_writer)
            info = Client(address).server_info()["stress"]
            stats = (f"created per writer {per_writer}, size {info.current_size}, "
                     f"inserts {info.num_inserts}, evictions {info.num_evictions}, "
                     f"checked rows/singles {checked}, updates {others[1].result}")
            assert all(n > 0 for n in per_writer), stats
            assert info.current_size == created, stats
            assert info.num_inserts == created, stats
            assert info.num_evictions == 0, stats
            assert checked[0] > 0 and checked[1] > 0, stats
            assert others[1].result > 0, stats
            # Every writer's items are all there: a final full check.
            _, data = Client(address).sample_batch("stress", 4096)
            check_rows(data["wid"], data["step"], data["obs"])
            assert set(data["wid"].tolist()) == set(range(NUM_WRITERS))
        finally:
            sys.setswitchinterval(switch)
            stop.set()
            server.stop()


# ----- Reverb drop-in -----


def test_reverb_program_runs_unchanged() -> None:
    import fastreplay as reverb

    server = reverb.Server(tables=[
        reverb.Table(
            name="my_table",
            sampler=reverb.selectors.Uniform(),
            remover=reverb.selectors.Fifo(),
            max_size=100,
            rate_limiter=reverb.rate_limiters.MinSize(1),
        ),
        reverb.Table(
            name="prioritized",
            sampler=reverb.item_selectors.Prioritized(priority_exponent=0.8),
            remover=reverb.item_selectors.Fifo(),
            max_size=100,
            rate_limiter=reverb.rate_limiters.SampleToInsertRatio(
                samples_per_insert=2.0, min_size_to_sample=1, error_buffer=100.0),
        ),
        reverb.Table.queue(name="my_queue", max_size=10),
    ])
    try:
        client = reverb.Client(f"localhost:{server.port}")
        with client.trajectory_writer(num_keep_alive_refs=3) as writer:
            for i in range(3):
                writer.append({"a": i, "b": np.full([2], i, np.float32)})
            writer.create_item(
                table="my_table",
                priority=1.5,
                trajectory={"a": writer.history["a"][:],
                            "b": writer.history["b"][:]},
            )
            writer.create_item(table="prioritized", priority=0.5,
                               trajectory={"a": writer.history["a"][-1:]})
            writer.end_episode()
        client.insert([0, 1], priorities={"my_queue": 1.0})

        samples = list(client.sample("my_table", num_samples=2))
        assert len(samples) == 2 and len(samples[0]) == 3
        assert isinstance(samples[0][0], reverb.ReplaySample)
        assert isinstance(samples[0][0].info, reverb.SampleInfo)
        sample = next(client.sample("prioritized", emit_timesteps=False))
        np.testing.assert_array_equal(sample.data[0], [2])
        assert sample.info.priority == 0.5
        (queued,) = next(client.sample("my_queue"))
        assert [int(v) for v in queued.data] == [0, 1]

        client.mutate_priorities("my_table",
                                 updates={samples[0][0].info.key: 2.0})
        info = client.server_info()
        assert info["my_table"].current_size == 1
        assert info["my_queue"].current_size == 0
        try:
            client.sample_batch("my_queue", 1, timeout=0.01)
        except reverb.errors.DeadlineExceededError:
            pass
        else:  # pragma: no cover
            pytest.fail("expected DeadlineExceededError")
        assert issubclass(reverb.DeadlineExceededError, reverb.ReverbError)
        assert reverb.replay_sample.ReplaySample is reverb.ReplaySample
        assert reverb.trajectory_writer.TrajectoryWriter is reverb.TrajectoryWriter
        assert reverb.client.Client is reverb.Client
        assert reverb.server.Server is reverb.Server
        assert server.localhost_client().server_address == client.server_address
    finally:
        server.stop()
