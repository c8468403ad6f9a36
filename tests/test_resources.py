"""Threads a user creates end: datasets (closed, in a ``with`` block or just
dropped), remote clients and their writers, servers."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from fastreplay import Client, Server, Table, errors
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay.net.remote import RemoteBackend

WAIT = 10.0  # bound of every wait below (s); they normally end in < 0.3 s


def fastreplay_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("fastreplay-")}


def wait_until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {WAIT} s; threads: "
                                 f"{sorted(t.name for t in fastreplay_threads())}")
        gc.collect()
        time.sleep(0.02)


def back_to(baseline: set[threading.Thread]) -> Callable[[], bool]:
    return lambda: fastreplay_threads() <= baseline


def make_server(**kwargs: object) -> Server:
    return Server([
        Table("u", sel.Uniform(), sel.Fifo(), 100, rl.MinSize(1), seed=1),
        Table("empty", sel.Uniform(), sel.Fifo(), 100, rl.MinSize(1), seed=2),
    ], **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def server() -> Iterator[Server]:
    srv = make_server()
    client = srv.localhost_client()
    for i in range(10):
        client.insert({"x": np.int64(i)}, {"u": 1.0})
    try:
        yield srv
    finally:
        srv.stop()


def remote_client(server: Server) -> Client:
    """A client that talks to ``server`` over its port, as one of another
    process does."""
    client = Client(f"localhost:{server.port}")
    client._backend_found = RemoteBackend("127.0.0.1", server.port)
    return client


# ----- datasets -----


@pytest.mark.parametrize("table", ["u", "empty"])  # blocked in put / in sample
def test_unclosed_datasets_end_their_threads_when_collected(
        server: Server, table: str) -> None:
    baseline = fastreplay_threads()
    client = server.localhost_client()
    datasets = [client.dataset(table, 4, num_workers=2) for _ in range(5)]
    if table == "u":
        next(datasets[0])
    assert len(fastreplay_threads() - baseline) == 10
    del datasets
    wait_until(back_to(baseline), "the workers of 5 dropped datasets ended")


def test_dropped_dataset_while_iterating_in_a_for_loop(server: Server) -> None:
    baseline = fastreplay_threads()
    client = server.localhost_client()
    for n, (info, _) in enumerate(client.dataset("u", 2)):
        assert len(info) == 2
        if n == 3:
            break
    wait_until(back_to(baseline), "the workers of a loop's dataset ended")


def test_with_block_stops_the_threads_at_its_end(server: Server) -> None:
    baseline = fastreplay_threads()
    client = server.localhost_client()
    with client.dataset("empty", 4, num_workers=3) as ds:
        assert len(fastreplay_threads() - baseline) == 3
    assert ds.closed
    assert fastreplay_threads() <= baseline  # joined, no waiting


def test_next_after_close_names_the_table_and_the_fix(server: Server) -> None:
    client = server.localhost_client()
    with client.dataset("u", 2) as ds:
        next(ds)
    with pytest.raises(errors.FailedPreconditionError,
                       match=r"table 'u' is closed.*client\.dataset"):
        next(ds)
    with pytest.raises(RuntimeError):  # the builtin a Reverb user catches
        next(ds)


def test_close_while_a_consumer_waits_ends_its_iteration(server: Server) -> None:
    ds = server.localhost_client().dataset("empty", 4)
    result: list[object] = []

    def consume() -> None:
        result.extend(ds)  # ends with StopIteration, not an error

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(0.2)
    ds.close()
    t.join(WAIT)
    assert not t.is_alive() and result == []


def test_close_from_several_threads_and_twice(server: Server) -> None:
    baseline = fastreplay_threads()
    ds = server.localhost_client().dataset("empty", 4, num_workers=4)
    closers = [threading.Thread(target=ds.close) for _ in range(4)]
    for t in closers:
        t.start()
    for t in closers:
        t.join(WAIT)
    ds.close()
    assert fastreplay_threads() <= baseline


def test_several_consumers_share_one_dataset(server: Server) -> None:
    counts = [0, 0, 0]
    with server.localhost_client().dataset("u", 2, num_workers=2) as ds:
        def consume(i: int) -> None:
            for _ in range(20):
                info, data = next(ds)
                assert len(info) == 2 and data["x"].shape == (2, 1)
                counts[i] += 1

        threads = [threading.Thread(target=consume, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
    assert counts == [20, 20, 20]


def test_repr_says_what_and_whether_open(server: Server) -> None:
    ds = server.localhost_client().dataset("u", 2)
    assert "table='u'" in repr(ds) and "open" in repr(ds)
    ds.close()
    assert "closed" in repr(ds)


# ----- over the network -----


def test_remote_dataset_threads_end_when_collected(server: Server) -> None:
    baseline = fastreplay_threads()
    client = remote_client(server)
    ds = client.dataset("u", 2, num_workers=2)
    info, data = next(ds)
    assert len(info) == 2 and data["x"].shape == (2, 1)
    del ds
    client.close()
    wait_until(back_to(baseline), "the workers of a remote dataset ended")


def test_dropped_remote_client_and_writer_end_their_threads(server: Server) -> None:
    baseline = fastreplay_threads()
    client = remote_client(server)
    with client.trajectory_writer(1) as writer:
        writer.append({"x": np.int64(99)})
        writer.create_item("u", 1.0, {"x": writer.history["x"][-1]})
        writer.flush()
    client.update_priorities("u", np.array([1], np.uint64), np.array([2.0]))
    assert any(t.name == "fastreplay-outbox" for t in fastreplay_threads())
    del client, writer
    wait_until(back_to(baseline), "a dropped remote client's threads ended")
    assert server.tables["u"].info.num_inserts == 11


def test_a_writer_keeps_its_dropped_client_working(server: Server) -> None:
    writer = remote_client(server).trajectory_writer(1)
    gc.collect()
    writer.append({"x": np.int64(7)})
    writer.create_item("u", 1.0, {"x": writer.history["x"][-1]})
    writer.flush(timeout_ms=int(WAIT * 1000))
    assert server.tables["u"].info.num_inserts == 11
    writer.close()


# ----- servers -----


def test_a_dropped_server_stops_and_frees_its_port() -> None:
    baseline = fastreplay_threads()
    srv = make_server()
    port = srv.port
    remote_client(srv).server_info()  # a connection thread too
    assert fastreplay_threads() - baseline
    del srv
    wait_until(back_to(baseline), "a dropped server's threads ended")
    with pytest.raises(errors.UnavailableError):
        Client(f"localhost:{port}", reconnect_window=0.2).server_info()


def test_a_local_client_keeps_its_server_alive() -> None:
    client = make_server().localhost_client()
    gc.collect()
    client.insert({"x": np.int64(1)}, {"u": 1.0})
    assert client.server_info()["u"].current_size == 1


def test_server_with_block_stops_it() -> None:
    baseline = fastreplay_threads()
    with make_server() as srv:
        remote_client(srv).server_info()
    wait_until(back_to(baseline), "a stopped server's threads ended")


# ----- writers -----


def test_vector_writer_is_a_context_manager() -> None:
    from fastreplay import VectorTrajectoryWriter

    table = Table("v", sel.Fifo(), sel.Fifo(), 10, rl.MinSize(1))
    with VectorTrajectoryWriter(table, num_envs=2, num_keep_alive_refs=1) as w:
        w.append({"x": np.arange(2, dtype=np.int64)})
        for e in range(2):
            w[e].create_item("v", 1.0, {"x": w[e].history["x"][-1]})
    assert len(table) == 2  # flushed on leaving the block
