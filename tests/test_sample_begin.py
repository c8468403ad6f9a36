"""``Client.sample_batch_begin``: the request goes out at once and the
returned function waits for the batch, so that requests to several servers
overlap (a ``fastreplay.ray`` draw begins one on every shard)."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest

import fastreplay
from fastreplay import errors


def _server() -> fastreplay.Server:
    table = fastreplay.Table("t", fastreplay.selectors.Uniform(),
                             fastreplay.selectors.Fifo(), 100,
                             fastreplay.rate_limiters.MinSize(1))
    return fastreplay.Server([table], port=0)


def _remote(server: fastreplay.Server) -> fastreplay.Client:
    """A client over a socket even in this process."""
    port = server.port
    return fastreplay.Client(
        f"127.0.0.1:{port}",
        connector=lambda t: socket.create_connection(("127.0.0.1", port), t))


def _write(client: fastreplay.Client, values: list[int]) -> None:
    with client.trajectory_writer(1) as w:
        for v in values:
            w.append({"x": np.int64(v)})
            w.create_item("t", 1.0, {"x": w.history["x"][-1]})


def test_begun_requests_wait_on_their_servers_at_once() -> None:
    """Begun on two empty tables, neither call blocks; each batch comes once
    its table gets an item."""
    a, b = _server(), _server()
    try:
        ca, cb = _remote(a), _remote(b)
        t0 = time.monotonic()
        fa = ca.sample_batch_begin("t", 4, timeout=10)
        fb = cb.sample_batch_begin("t", 4, timeout=10)
        assert time.monotonic() - t0 < 1.0  # nothing waited for its table
        _write(fastreplay.Client(f"localhost:{b.port}"), [7])
        _write(fastreplay.Client(f"localhost:{a.port}"), [3])
        info_a, data_a = fa()
        info_b, data_b = fb()
        assert time.monotonic() - t0 < 5.0
        np.testing.assert_array_equal(np.asarray(data_a["x"]), [3, 3, 3, 3])
        np.testing.assert_array_equal(np.asarray(data_b["x"]), [7, 7, 7, 7])
        assert len(set(info_a.key.tolist())) == 1
        # the connection goes on as usual afterwards
        info, data = ca.sample_batch("t", 2)
        np.testing.assert_array_equal(np.asarray(data["x"]), [3, 3])
    finally:
        a.stop()
        b.stop()


def test_a_begun_request_that_times_out_raises_once_without_waiting_twice() -> None:
    server = _server()
    try:
        client = _remote(server)
        t0 = time.monotonic()
        finish = client.sample_batch_begin("t", 1, timeout=0.4)
        with pytest.raises(errors.DeadlineExceededError):
            finish()
        elapsed = time.monotonic() - t0
        assert 0.35 <= elapsed < 0.75  # the server's wait, not two of them
        _write(client, [5])
        _, data = client.sample_batch("t", 1, timeout=5)
        assert int(np.asarray(data["x"])[0]) == 5
    finally:
        server.stop()


def test_an_unknown_table_raises_as_sample_batch_does() -> None:
    server = _server()
    try:
        for client in (_remote(server), fastreplay.Client(f"localhost:{server.port}")):
            with pytest.raises(ValueError, match="nope"):
                client.sample_batch_begin("nope", 1)()
    finally:
        server.stop()


def test_in_process_begin_samples_at_once() -> None:
    server = _server()
    try:
        client = fastreplay.Client(f"localhost:{server.port}")
        _write(client, [1, 2])
        finish = client.sample_batch_begin("t", 8)
        _write(client, [9])  # after begin: not in this batch
        info, data = finish()
        assert set(np.asarray(data["x"]).tolist()) <= {1, 2}
        assert len(info.key) == 8
    finally:
        server.stop()


def test_begun_on_a_queue_loses_no_item_when_begins_interleave() -> None:
    """A queue's item is gone once sampled: begun there, the sample is taken
    at once, so a second begin in between cannot throw a batch away."""
    server = fastreplay.Server([fastreplay.Table.queue("q", 100)], port=0)
    try:
        client = _remote(server)
        with client.trajectory_writer(1) as w:
            for v in range(4):
                w.append({"x": np.int64(v)})
                w.create_item("q", 1.0, {"x": w.history["x"][-1]})
        first = client.sample_batch_begin("q", 1, timeout=5)
        second = client.sample_batch_begin("q", 2, timeout=5)
        got = [int(v) for f in (second, first) for v in np.asarray(f()[1]["x"])]
        _, rest = client.sample_batch("q", 1, timeout=5)
        assert sorted(got + [int(np.asarray(rest["x"])[0])]) == [0, 1, 2, 3]
        assert server.tables["q"].size == 0
    finally:
        server.stop()


@pytest.mark.parametrize("remote", [False, True])
def test_flat_gives_the_columns_and_their_nest(remote: bool) -> None:
    """``flat=True`` gives ``(info, columns, structure)``: the flat columns
    and the items' nest, which ``_nest.columns_as`` turns into what the
    nested form gives."""
    from fastreplay import _nest

    server = _server()
    try:
        client = _remote(server) if remote else fastreplay.Client(
            f"localhost:{server.port}")
        with client.trajectory_writer(1) as w:
            for v in range(4):
                w.append({"x": np.int64(v), "y": np.float32(v / 2)})
                h = w.history
                w.create_item("t", 1.0, {"b": {"y": h["y"][-1]}, "a": h["x"][-1]})
        info, columns, structure = client.sample_batch_begin("t", 8, flat=True)()
        assert isinstance(columns, list) and len(columns) == 2
        data = _nest.columns_as(structure, columns)
        assert set(data) == {"a", "b"} and set(data["b"]) == {"y"}
        np.testing.assert_array_equal(data["a"].astype(np.float32) / 2, data["b"]["y"])
        info2, nested = client.sample_batch_begin("t", 8)()
        assert set(nested) == {"a", "b"} and len(info2) == len(info) == 8
    finally:
        server.stop()
