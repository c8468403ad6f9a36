"""The legacy ``Client.writer()`` and ``Client.insert`` (Reverb's C++
``Writer`` semantics, spec section 5.3), mirroring what Reverb's
client_test.py checks, plus the errors its C++ writer raises."""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from threadutil import Worker, join_workers

import fastreplay as reverb
from fastreplay import client as client_lib
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel


@dataclasses.dataclass(frozen=True)
class Spec:
    shape: tuple[int | None, ...]
    dtype: np.dtype[Any]


@pytest.fixture
def server() -> Iterator[reverb.Server]:
    srv = reverb.Server([
        reverb.Table("dist", sel.Prioritized(1.0), sel.Fifo(), 1000,
                     rl.MinSize(1), seed=3),
        reverb.Table.queue("queue", 10),
        reverb.Table("scalar", sel.Fifo(), sel.Fifo(), 100, rl.MinSize(1),
                     signature=Spec((), np.dtype(np.int64))),
        reverb.Table("traj", sel.Fifo(), sel.Fifo(), 100, rl.MinSize(1),
                     signature=Spec((3, 2), np.dtype(np.float32))),
    ])
    yield srv
    srv.stop()


@pytest.fixture
def client(server: reverb.Server) -> reverb.Client:
    return server.localhost_client()


def sizes(server: reverb.Server) -> dict[str, int]:
    return {name: len(t) for name, t in server.tables.items()}


def test_names() -> None:
    assert reverb.Writer is client_lib.Writer


class TestArguments:
    def test_max_sequence_length(self, client: reverb.Client) -> None:
        with pytest.raises(ValueError, match="max_sequence_length"):
            client.writer(0)

    @pytest.mark.parametrize("chunk_length", [0, -1, 3])
    def test_chunk_length(self, client: reverb.Client, chunk_length: int) -> None:
        client.writer(2, chunk_length=1).close()
        client.writer(2, chunk_length=2).close()
        with pytest.raises(ValueError, match="chunk_length"):
            client.writer(2, chunk_length=chunk_length)

    def test_max_in_flight_items(self, client: reverb.Client) -> None:
        client.writer(1, max_in_flight_items=1).close()
        client.writer(1, max_in_flight_items=None).close()
        for bad in (0, -1):
            with pytest.raises(ValueError, match="max_in_flight_items"):
                client.writer(1, max_in_flight_items=bad)

    def test_delta_encoded_is_accepted(self, client: reverb.Client) -> None:
        with client.writer(2, delta_encoded=True) as writer:
            writer.append([np.arange(3)])
            writer.create_item("queue", 1, 1.0)
        (sample,) = next(client.sample("queue"))
        np.testing.assert_array_equal(sample.data[0], np.arange(3))


def test_items_over_appended_steps(client: reverb.Client) -> None:
    # Reverb's test_writer: four items, equally likely.
    with client.writer(2) as writer:
        writer.append([0])
        writer.create_item("dist", 1, 1.0)
        writer.append([1])
        writer.create_item("dist", 2, 1.0)
        writer.append([2])
        writer.create_item("dist", 1, 1.0)
        writer.append_sequence([np.array([3, 4])])
        writer.create_item("dist", 2, 1.0)
    data = sorted(tuple(s.data[0].tolist()) for s in
                  (next(client.sample("dist", emit_timesteps=False))
                   for _ in range(300)))
    assert set(data) == {(0,), (0, 1), (2,), (3, 4)}


def test_sampled_data_has_a_time_axis(client: reverb.Client) -> None:
    with client.writer(3) as writer:
        for i in range(3):
            writer.append([i, np.ones([2, 2], np.float64)])
        writer.create_item("queue", 3, 1.0)
    sample = next(client.sample("queue", emit_timesteps=False))
    np.testing.assert_array_equal(sample.data[0], np.array([0, 1, 2]))
    np.testing.assert_array_equal(sample.data[1], np.ones([3, 2, 2]))


def test_sample_batch_keeps_the_step_nest(client: reverb.Client) -> None:
    with client.writer(2) as writer:
        for i in range(2):
            writer.append({"obs": np.float32(i), "act": i})
        writer.create_item("queue", 2, 1.0)
    _, data = client.sample_batch("queue", 1)
    np.testing.assert_array_equal(data["obs"], [[0.0, 1.0]])
    np.testing.assert_array_equal(data["act"], [[0, 1]])


def test_chunk_length_keeps_history(client: reverb.Client) -> None:
    # Items may span chunk boundaries, and the oldest of max_sequence_length
    # steps stays readable.
    with client.writer(5, chunk_length=2) as writer:
        for i in range(11):
            writer.append([np.int32(i)])
            if i >= 4:
                writer.create_item("dist", 5, 1.0)
    assert client.server_info()["dist"].current_size == 7
    seen = {tuple(next(client.sample("dist", emit_timesteps=False)).data[0])
            for _ in range(200)}
    assert seen <= {tuple(range(i - 4, i + 1)) for i in range(4, 11)}


class TestErrors:
    def test_create_item_arguments(self, client: reverb.Client,
                                   server: reverb.Server) -> None:
        writer = client.writer(2)
        with pytest.raises(ValueError, match="larger than number of buffered"):
            writer.create_item("queue", 1, 1.0)
        writer.append([1])
        with pytest.raises(ValueError, match="must be a positive integer"):
            writer.create_item("queue", 0, 1.0)
        with pytest.raises(ValueError, match="larger than number of buffered"):
            writer.create_item("queue", 2, 1.0)
        writer.append([2])
        writer.append([3])
        with pytest.raises(ValueError, match=r"must be <= `max_timesteps`"):
            writer.create_item("queue", 3, 1.0)
        with pytest.raises(ValueError, match="must not be nan"):
            writer.create_item("queue", 1, float("nan"))
        with pytest.raises(ValueError, match="could not be found"):
            writer.create_item("nope", 1, 1.0)
        with pytest.raises(reverb.errors.InvalidPriorityError):
            writer.create_item("dist", 1, -1.0)
        writer.close()
        assert sizes(server) == {"dist": 0, "queue": 0, "scalar": 0, "traj": 0}

    def test_inconsistent_number_of_tensors(self, client: reverb.Client) -> None:
        with client.writer(2) as writer:
            writer.append([1, 2.0])
            with pytest.raises(ValueError, match="Previously it was 2, but is now 1"):
                writer.append([1])
            with pytest.raises(ValueError, match="wrong dtype"):
                writer.append([1.5, 2.0])
            writer.append([3, 4.0])  # the writer is unchanged by the errors
            writer.create_item("queue", 2, 1.0)
        sample = next(client.sample("queue", emit_timesteps=False))
        np.testing.assert_array_equal(sample.data[0], [1, 3])

    def test_append_sequence_errors(self, client: reverb.Client) -> None:
        with client.writer(2) as writer:
            with pytest.raises(ValueError, match="empty data"):
                writer.append_sequence([])
            with pytest.raises(ValueError, match="scalar tensor at index 1"):
                writer.append_sequence([np.arange(2), np.int64(1)])
            with pytest.raises(ValueError, match="non equal batch dimension"):
                writer.append_sequence([np.arange(2), np.arange(3)])

    def test_closed_writer(self, client: reverb.Client) -> None:
        writer = client.writer(1)
        writer.append([1])
        writer.close()
        with pytest.raises(ValueError, match="already been called"):
            writer.close()
        with pytest.raises(RuntimeError, match="after Close"):
            writer.append([1])
        with pytest.raises(RuntimeError, match="after Close"):
            writer.create_item("queue", 1, 1.0)
        with pytest.raises(RuntimeError, match="after Close"):
            writer.flush()
        with pytest.raises(ValueError, match="closed Writer"), writer:
            pass

    def test_close_without_retries(self, client: reverb.Client,
                                   server: reverb.Server) -> None:
        writer = client.writer(2)
        writer.append([0])
        writer.create_item("dist", 1, 1.0)
        writer.close(retry_on_unavailable=False)
        assert len(server.tables["dist"]) == 1

    def test_finalizer_closes_and_inserts(self, client: reverb.Client,
                                          server: reverb.Server,
                                          caplog: pytest.LogCaptureFixture) -> None:
        writer = client.writer(1)
        writer.append([0])
        writer.create_item("dist", 1, 1.0)
        with caplog.at_level(logging.WARNING):
            del writer
        assert "without calling .close" in caplog.text
        assert len(server.tables["dist"]) == 1


class TestSignature:
    def test_step_or_trajectory_shape(self, client: reverb.Client,
                                      server: reverb.Server) -> None:
        with client.writer(3) as writer:
            for i in range(3):
                writer.append([np.int64(i)])
                writer.create_item("scalar", 1, 1.0)  # each step matches
            writer.create_item("scalar", 3, 1.0)  # a [3] trajectory too
        assert len(server.tables["scalar"]) == 4
        with client.writer(3) as writer:
            for _ in range(3):
                writer.append([np.zeros(2, np.float32)])
            writer.create_item("traj", 3, 1.0)  # [3, 2] matches [3] + [2]
            with pytest.raises(ValueError, match="inconsistent with the table "
                               "signature. At timestep offset 0, flattened index "
                               r"0, saw a tensor of dtype float, shape \[2\]"):
                writer.create_item("traj", 2, 1.0)
        assert len(server.tables["traj"]) == 1

    def test_wrong_dtype_or_count(self, client: reverb.Client) -> None:
        with client.writer(1) as writer:
            writer.append([np.int32(1)])
            with pytest.raises(ValueError, match="dtype int32.*expected tensor '' "
                               "of dtype int64"):
                writer.create_item("scalar", 1, 1.0)
        with client.writer(1) as writer:
            writer.append([1, 2])
            with pytest.raises(ValueError, match="called with 2 tensors, but table "
                               "requires 1 tensors"):
                writer.create_item("scalar", 1, 1.0)


class TestInsert:
    def test_insert_checks_each_step(self, client: reverb.Client,
                                     server: reverb.Server) -> None:
        # The signature describes a step; the item is a length-1 trajectory.
        client.insert(7, {"scalar": 1.0})
        client.insert([8], {"scalar": 1.0})
        sample = next(client.sample("scalar", emit_timesteps=False))
        np.testing.assert_array_equal(sample.data[0], [7])
        with pytest.raises(ValueError, match="table 'scalar'"):
            client.insert(1.5, {"scalar": 1.0})
        assert len(server.tables["scalar"]) == 2

    def test_insert_is_all_or_nothing(self, client: reverb.Client,
                                      server: reverb.Server) -> None:
        with pytest.raises(ValueError, match="table 'scalar'"):
            client.insert(np.float32(1), {"dist": 1.0, "scalar": 1.0})
        with pytest.raises(ValueError, match="Could not find table"):
            client.insert(1, {"dist": 1.0, "nope": 1.0})
        assert sizes(server)["dist"] == 0
        client.insert(1, {"dist": 1.0, "scalar": 2.0})
        assert sizes(server)["dist"] == sizes(server)["scalar"] == 1

    def test_insert_empty_priorities(self, client: reverb.Client) -> None:
        with pytest.raises(ValueError):
            client.insert([1], {})


def test_max_in_flight_items_blocks_create_item(client: reverb.Client,
                                                server: reverb.Server) -> None:
    queue = server.tables["queue"]
    writer = client.writer(1, max_in_flight_items=1)
    writer.append([0])
    for _ in range(11):  # 10 fit in the queue, one waits in flight
        writer.create_item("queue", 1, 1.0)
    assert len(queue) == 10
    done = threading.Event()

    def blocked() -> None:
        writer.create_item("queue", 1, 1.0)  # a second one in flight: waits
        done.set()

    worker = Worker(blocked, "legacy-create-item")
    worker.start()
    assert not done.wait(0.2)
    queue.sample(2, timeout=5)
    join_workers([worker], server.stop, 10)
    assert done.is_set()
    writer.close()
    assert len(queue) == 10


def test_many_threads_with_their_own_writers(client: reverb.Client,
                                             server: reverb.Server) -> None:
    def write(i: int) -> None:
        for j in range(20):
            with client.writer(1) as writer:
                writer.append([i * 100 + j])
                writer.flush()
                writer.create_item("dist", 1, 1.0)
                writer.flush()

    workers = [Worker(lambda i=i: write(i), f"legacy-{i}") for i in range(16)]
    for w in workers:
        w.start()
    join_workers(workers, server.stop, 60)
    assert len(server.tables["dist"]) == 320
    info = client.server_info()["dist"]
    assert info.num_episodes == 320
    values = collections.Counter(
        int(next(client.sample("dist", emit_timesteps=False)).data[0][0])
        for _ in range(50))
    assert all(0 <= v < 1600 for v in values)
