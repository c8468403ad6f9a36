"""The "ray" transport (fastreplay/ray/_link.py): a fastreplay.Client whose
frames travel as Ray actor calls to a threaded actor hosting a Server and
a LinkHost; every client feature works as over a socket."""

from __future__ import annotations

import pickle
import threading
import time
from typing import Any

import numpy as np
import pytest

import fastreplay
from fastreplay import errors
from fastreplay.net import wire
from fastreplay.net.service import Session

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _tables() -> list[fastreplay.Table]:
    return [
        fastreplay.Table("uniform", fastreplay.selectors.Uniform(),
                         fastreplay.selectors.Fifo(), 10_000,
                         fastreplay.rate_limiters.MinSize(1)),
        fastreplay.Table("prio", fastreplay.selectors.Prioritized(1.0),
                         fastreplay.selectors.Fifo(), 10_000,
                         fastreplay.rate_limiters.MinSize(1)),
    ]


def _shard_class(ray: Any) -> Any:
    # Defined in a function: Ray ships it by value to the workers.
    @ray.remote(max_concurrency=8, num_cpus=0)
    class Shard:
        def __init__(self) -> None:
            from fastreplay.ray._link import LinkHost

            sel, lim = fastreplay.selectors, fastreplay.rate_limiters
            tables = [  # as _tables(), which would drag this module along
                fastreplay.Table("uniform", sel.Uniform(), sel.Fifo(), 10_000,
                                 lim.MinSize(1)),
                fastreplay.Table("prio", sel.Prioritized(1.0), sel.Fifo(), 10_000,
                                 lim.MinSize(1))]
            self.server = fastreplay.Server(tables, port=0)
            self.host = LinkHost(self.server)

        def address(self) -> str:
            return f"127.0.0.1:{self.server.port}"

        def link_open(self) -> int:
            return self.host.link_open()

        def link_exchange(self, session_id: int, seq: int, *data: bytes,
                          parts: int = 1) -> Any:
            return self.host.link_exchange(session_id, seq, *data, parts=parts)

        def link_close(self, session_id: int, seq: int | None = None) -> None:
            self.host.link_close(session_id, seq)

        def sessions(self) -> int:
            return self.host.num_sessions

        def size(self, table: str) -> int:
            return self.server.tables[table].size

        def keys(self, table: str) -> list[int]:
            return [int(k) for k in self.server.tables[table].items()["key"]]

        def priority(self, table: str, key: int) -> float | None:
            got = self.server.tables[table].get(key)
            return None if got is None else got[1]

    return Shard


@pytest.fixture(scope="module")
def shard(ray_session):  # type: ignore[no-untyped-def]
    actor = _shard_class(ray_session).remote()
    ray_session.get(actor.address.remote(), timeout=60)
    yield actor
    ray_session.kill(actor)


def _client(shard: Any, ray: Any, **kw: Any) -> fastreplay.Client:
    from fastreplay.ray._link import RayConnector

    address = ray.get(shard.address.remote(), timeout=30)
    return fastreplay.Client(address, connector=RayConnector(shard), **kw)


def test_writer_items_land_once_and_samples_match(shard, ray_session):  # type: ignore[no-untyped-def]
    client = _client(shard, ray_session)
    try:
        client.reset("uniform")
        rows = np.arange(300 * 8, dtype=np.float32).reshape(300, 8)
        with client.trajectory_writer(1) as writer:
            for row in rows:
                writer.append({"x": row})
                writer.create_item("uniform", 1.0, {"x": writer.history["x"][-1:]})
            writer.flush()
        assert ray_session.get(shard.size.remote("uniform"), timeout=30) == 300
        info, data = client.sample_batch("uniform", 256)
        got = np.asarray(data["x"]).reshape(256, 8)
        assert got.dtype == np.float32
        # every sampled row is a row written, whole
        idx = (got[:, 0] / 8).astype(np.int64)
        np.testing.assert_array_equal(got, rows[idx])
        assert len(set(info.key.tolist())) <= 300
        assert client.server_info()["uniform"].current_size == 300
    finally:
        client.close()


def test_many_small_and_large_frames(shard, ray_session):  # type: ignore[no-untyped-def]
    """Frames split over exchanges (>= 64 KiB shipped mid-frame) and many
    frames in one exchange arrive whole and in order."""
    client = _client(shard, ray_session)
    try:
        client.reset("uniform")
        big = np.random.default_rng(0).random((40, 4096)).astype(np.float32)  # 640 KiB
        with client.trajectory_writer(1) as writer:
            for row in big:
                writer.append({"y": row})
                writer.create_item("uniform", 1.0, {"y": writer.history["y"][-1:]})
        assert ray_session.get(shard.size.remote("uniform"), timeout=30) == 40
        _, data = client.sample_batch("uniform", 64)
        got = np.asarray(data["y"]).reshape(64, 4096)
        assert all(any(np.array_equal(g, b) for b in big) for g in got)
    finally:
        client.close()


def test_update_priorities_applied(shard, ray_session):  # type: ignore[no-untyped-def]
    client = _client(shard, ray_session)
    try:
        client.reset("prio")
        client.insert([np.zeros(2, np.float32)], {"prio": 1.0})
        client.insert([np.ones(2, np.float32)], {"prio": 1.0})
        key, other = ray_session.get(shard.keys.remote("prio"), timeout=30)
        client.update_priorities("prio", [key], [7.5])
        client.mutate_priorities("prio", {other: 2.5})
        client.sample_batch("prio", 1)  # deferred updates go before the next call
        assert ray_session.get(shard.priority.remote("prio", key), timeout=30) == 7.5
        assert ray_session.get(shard.priority.remote("prio", other), timeout=30) == 2.5
    finally:
        client.close()


def test_errors_keep_their_types(shard, ray_session):  # type: ignore[no-untyped-def]
    client = _client(shard, ray_session)
    try:
        with pytest.raises(ValueError, match="Could not find table"):
            client.sample_batch("nope", 4)
        with pytest.raises(ValueError, match="Could not find table"):
            client.reset("nope")
        with pytest.raises(errors.DeadlineExceededError):
            client.reset("uniform")
            client.sample_batch("uniform", 4, timeout=0.05)
        # the connection still serves after errors
        assert set(client.server_info()) == {"uniform", "prio"}
    finally:
        client.close()


def test_blocked_sampler_does_not_block_writers(shard, ray_session):  # type: ignore[no-untyped-def]
    """Sessions run concurrently in the threaded actor: a sample waiting for
    data (rate limiter) is answered by an insert from another thread."""
    client = _client(shard, ray_session)
    try:
        client.reset("uniform")
        got: list[Any] = []
        t = threading.Thread(target=lambda: got.append(
            client.sample_batch("uniform", 1, timeout=30)))
        t.start()
        time.sleep(0.2)
        client.insert([np.full(2, 3.0, np.float32)], {"uniform": 1.0})
        t.join(60)
        assert not t.is_alive()
        np.testing.assert_array_equal(np.asarray(got[0][1][0]).reshape(-1), [3.0, 3.0])
    finally:
        client.close()


def test_deferred_error_before_a_pipelined_call(shard, ray_session):  # type: ignore[no-untyped-def]
    """Over the link a call goes out before the replies owed are read: a
    deferred call's error is still raised by the next call, and the
    connection stays in step (the call's own reply is read and dropped)."""
    client = _client(shard, ray_session)
    try:
        client.reset("uniform")
        client.insert([np.zeros(2, np.float32)], {"uniform": 1.0})
        backend = client._backend
        # a priority update the client-side checks would have refused
        backend._queue("nope", np.zeros(1, np.uint64), np.ones(1), None)
        with pytest.raises(ValueError, match="Could not find table"):
            client.sample_batch("uniform", 1)
        info, _ = client.sample_batch("uniform", 1)
        assert len(info.key) == 1
        assert set(client.server_info()) == {"uniform", "prio"}
    finally:
        client.close()


def test_client_pickles_with_connector(shard, ray_session):  # type: ignore[no-untyped-def]
    client = _client(shard, ray_session)
    copy = pickle.loads(pickle.dumps(client))
    try:
        assert set(copy.server_info()) == {"uniform", "prio"}
    finally:
        copy.close()
        client.close()


def test_sessions_closed_with_the_client(shard, ray_session):  # type: ignore[no-untyped-def]
    _wait_sessions(ray_session, shard, 0)  # earlier tests' clients closed theirs
    client = _client(shard, ray_session)
    client.server_info()
    assert ray_session.get(shard.sessions.remote(), timeout=30) == 1
    client.close()
    _wait_sessions(ray_session, shard, 0)


def _wait_sessions(ray: Any, shard: Any, n: int) -> None:
    deadline = time.monotonic() + 30
    while ray.get(shard.sessions.remote(), timeout=30) != n:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def _wait_dead(ray: Any, actor: Any) -> None:
    """Until the killed actor's calls fail (ray.kill is asynchronous)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            ray.get(actor.address.remote(), timeout=30)
        except ray.exceptions.RayActorError:
            return
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_dead_actor_is_unavailable_within_window(ray_session):  # type: ignore[no-untyped-def]
    actor = _shard_class(ray_session).remote()
    client = _client(actor, ray_session, reconnect_window=1.0)
    try:
        client.insert([np.zeros(2, np.float32)], {"uniform": 1.0})
        ray_session.kill(actor, no_restart=True)
        _wait_dead(ray_session, actor)
        t0 = time.monotonic()
        with pytest.raises(errors.UnavailableError):
            client.sample_batch("uniform", 1)
        assert time.monotonic() - t0 < 30  # bounded (window 1 s plus Ray's notice)
    finally:
        client.close()


# ----- the host's ordering, without Ray's scheduler -----

def test_link_host_orders_exchanges_by_seq() -> None:
    from fastreplay.ray._link import LinkHost

    server = fastreplay.Server(_tables(), port=0)
    try:
        host = LinkHost(server, order_wait=10)
        sid = host.link_open()
        hello = _frame({"op": "hello", "token": None, "args": {}})
        info = _frame({"op": "info", "args": {}})
        results: dict[int, bytes | None] = {}
        # seq 1 arrives first: it waits for seq 0
        t = threading.Thread(target=lambda: results.__setitem__(
            1, host.link_exchange(sid, 1, info)))
        t.start()
        time.sleep(0.05)
        assert 1 not in results
        results[0] = host.link_exchange(sid, 0, hello)
        t.join(10)
        assert not t.is_alive()
        assert _kinds(results[0]) == [wire.KIND_REPLY]
        assert _kinds(results[1]) == [wire.KIND_REPLY]
        host.link_close(sid, 2)
        assert host.link_exchange(sid, 2, info) is None
    finally:
        server.stop()


def test_session_splits_and_joins_frames() -> None:
    server = fastreplay.Server(_tables(), port=0)
    try:
        session: Session = server.session()
        data = (_frame({"op": "hello", "token": None, "args": {}})
                + _frame({"op": "info", "args": {}})
                + _frame({"op": "reset", "args": {"table": "nope"}}))
        out = b""
        for i in range(0, len(data), 7):  # byte dribbles
            out += session.feed(data[i:i + 7])
        assert _kinds(out) == [wire.KIND_REPLY, wire.KIND_REPLY, wire.KIND_ERROR]
        # a protocol error answers DataLossError and closes the session
        out = session.feed(_frame({"op": "bogus", "args": {}}))
        assert _kinds(out) == [wire.KIND_ERROR]
        assert session.closed
        assert session.feed(_frame({"op": "info", "args": {}})) == b""
        # garbage closes without a reply
        other = server.session()
        assert other.feed(b"x" * 64) == b""
        assert other.closed
    finally:
        server.stop()


def test_session_copies_what_it_keeps() -> None:
    """The bytes of an incomplete frame are copied (Ray's zero-copy argument
    buffers are never kept, ray#8227): overwriting them after feed changes
    nothing."""
    server = fastreplay.Server(_tables(), port=0)
    try:
        session = server.session()
        data = bytearray(_frame({"op": "hello", "token": None, "args": {}})
                         + _frame({"op": "info", "args": {}}))
        cut = len(data) - 5
        out = session.feed(memoryview(data)[:cut])
        data[:] = b"\0" * len(data)  # the caller's buffer reused
        out += session.feed(_frame({"op": "info", "args": {}})[-5:])
        assert _kinds(out) == [wire.KIND_REPLY, wire.KIND_REPLY]
    finally:
        server.stop()


def test_session_ids_are_not_reused_after_a_restart() -> None:
    """A host's next life (a restarted actor) never hands a client of the
    previous one a session that is another's: unknown ids answer None."""
    from fastreplay.ray._link import LinkHost

    server = fastreplay.Server(_tables(), port=0)
    try:
        first, second = LinkHost(server), LinkHost(server)
        old = first.link_open()
        new = second.link_open()
        assert old != new
        assert second.link_exchange(old, 0, _frame(
            {"op": "hello", "token": None, "args": {}})) is None
    finally:
        server.stop()


def test_ray_socket_timeout_and_dead_actor(ray_session):  # type: ignore[no-untyped-def]
    """A RaySocket behaves as a socket: its timeout raises TimeoutError (the
    reply still read later), a dead actor ConnectionResetError."""
    from fastreplay.ray._link import RaySocket

    @ray_session.remote(num_cpus=0)
    class Slow:
        def link_exchange(self, session_id: int, seq: int, data: bytes) -> bytes:
            time.sleep(1.0)
            return bytes(data)

        def link_close(self, session_id: int, seq: int | None = None) -> None:
            pass

    actor = Slow.remote()
    sock = RaySocket(actor, 1)
    buf = bytearray(4)
    sock.sendall(b"ping")
    sock.settimeout(0.05)
    with pytest.raises(TimeoutError):
        sock.recv_into(buf)
    sock.settimeout(30)
    assert sock.recv_into(buf) == 4 and bytes(buf) == b"ping"
    ray_session.kill(actor, no_restart=True)
    sock.sendall(b"pong")
    with pytest.raises(ConnectionResetError):
        sock.recv_into(buf)
    sock.close()


def test_session_refuses_a_wrong_token() -> None:
    server = fastreplay.Server(_tables(), port=0, token="secret")
    try:
        session = server.session()
        out = session.feed(_frame({"op": "hello", "token": "wrong", "args": {}}))
        assert _kinds(out) == [wire.KIND_ERROR]
        assert session.closed
        good = server.session()
        out = good.feed(_frame({"op": "hello", "token": "secret", "args": {}}))
        assert _kinds(out) == [wire.KIND_REPLY]
    finally:
        server.stop()


class _Collect:
    def __init__(self) -> None:
        self.data = bytearray()

    def sendall(self, b: Any) -> None:
        self.data += b


def _frame(msg: dict[str, Any]) -> bytes:
    out = _Collect()
    wire.send_frame(out, wire.KIND_CALL, msg)  # type: ignore[arg-type]
    return bytes(out.data)


def _kinds(data: bytes | None) -> list[int]:
    assert data is not None
    kinds, at = [], 0
    while at < len(data):
        got = wire.split_frame(data, at)
        assert got is not None
        at, kind, _, _ = got
        kinds.append(kind)
    return kinds


def test_a_thread_that_never_updates_keeps_more_batches_ahead(shard, ray_session):  # type: ignore[no-untyped-def]
    """On a Ray link a thread that never updated priorities (a dataset
    worker) keeps ``RaySocket.ahead_depth`` batches asked for ahead and asks
    for half of them in one actor call; once it updates, it keeps the
    fewer a learner keeps (``RaySocket.update_ahead_depth``)."""
    from fastreplay.net.sampling import AHEAD_DEPTH
    from fastreplay.ray._link import RaySocket

    client = _client(shard, ray_session)
    try:
        client.reset("uniform")
        with client.trajectory_writer(1) as writer:
            for i in range(500):
                writer.append({"x": np.full(2, i, np.float32)})
                writer.create_item("uniform", 1.0, {"x": writer.history["x"][-1:]})
        for _ in range(3):
            client.sample_batch("uniform", 16)
        conn = client._backend._local.conn  # this thread's connection
        sock = conn.sock
        assert isinstance(sock, RaySocket)
        assert len(conn.ahead) == RaySocket.ahead_depth - 1
        seq = sock._seq
        for _ in range(16):
            info, _ = client.sample_batch("uniform", 16)
            assert len(info) == 16
        # 16 batches taken from ahead, refilled half the depth at a time.
        assert sock._seq - seq == 16 // (RaySocket.ahead_depth // 2)
        client.update_priorities("uniform", info.key[:1], [2.0])
        for _ in range(RaySocket.ahead_depth + 2):  # what was asked drains
            client.sample_batch("uniform", 16)
            assert len(conn.ahead) <= RaySocket.ahead_depth
        assert len(conn.ahead) <= max(AHEAD_DEPTH, RaySocket.update_ahead_depth)
        assert RaySocket.update_ahead_depth < RaySocket.ahead_depth
    finally:
        client.close()


def test_queued_updates_wait_longer_on_a_ray_link() -> None:
    """The Flusher sends a Ray link's queued updates after the socket's own
    ``flush_delay`` (they ride with the thread's next call), a socket's
    after ``MAX_DELAY``."""
    from types import SimpleNamespace

    from fastreplay.net import priorities
    from fastreplay.ray._link import RaySocket

    ray_conn = SimpleNamespace(sock=RaySocket(None, 1))
    tcp_conn = SimpleNamespace(sock=object())
    assert priorities._delay(ray_conn) == RaySocket.flush_delay > priorities.MAX_DELAY
    assert priorities._delay(tcp_conn) == priorities.MAX_DELAY


def test_a_call_whose_batches_ahead_were_touched_is_one_actor_call(shard, ray_session):  # type: ignore[no-untyped-def]
    """A learner updating the keys of every batch (a table of 8 items,
    batches of 8): each batch asked ahead is thrown away, and the call asks
    for its own batch together with the next ones in one actor call, not a
    call and then the asks (two); the batch reflects the updates."""
    from fastreplay.ray._link import RaySocket

    client = _client(shard, ray_session)
    try:
        client.reset("prio")
        for i in range(8):
            client.insert([np.full(2, i, np.float32)], {"prio": 1.0})
        keys = ray_session.get(shard.keys.remote("prio"), timeout=30)
        for _ in range(3):
            client.sample_batch("prio", 8)
        conn = client._backend._local.conn
        sock = conn.sock
        assert isinstance(sock, RaySocket)
        for i in range(10):
            client.update_priorities("prio", keys, np.full(len(keys), 2.0 + i))
            seq = sock._seq
            info, _ = client.sample_batch("prio", 8)
            assert sock._seq - seq == 1
            np.testing.assert_array_equal(info.priority, 2.0 + i)
    finally:
        client.close()


def test_reply_parts_and_split() -> None:
    from fastreplay.ray._link import MAX_PARTS, PART_BYTES, reply_parts, split

    assert reply_parts(0) == 1
    assert reply_parts(PART_BYTES // 2) == 1
    assert reply_parts(620_000) == -(-(620_000 * 5 // 4) // PART_BYTES)
    assert reply_parts(1 << 40) == MAX_PARTS
    data = bytes(range(256)) * 1000  # 256,000 bytes
    for parts in (0, 1, 2, 3, 5, MAX_PARTS + 3):
        got = split(bytearray(data), parts)
        assert len(got) == max(1, min(parts, MAX_PARTS)) and b"".join(got) == data
        assert all(type(p) is bytes and len(p) <= PART_BYTES for p in got[:-1])
    assert len(split(data, 2)[1]) == len(data) - PART_BYTES


def test_large_replies_come_in_parts_and_read_back_whole(shard, ray_session):  # type: ignore[no-untyped-def]
    """Frames of ~1 MB go as several arguments and batches of ~1 MB come
    back as several return values of at most PART_BYTES each (inline in
    Ray's call and reply, not through the object store) once the socket has
    seen one, and read back byte for byte."""
    from fastreplay.ray._link import RayConnector

    sockets: list[Any] = []

    class Recording(RayConnector):
        def __call__(self, timeout: float) -> Any:
            sockets.append(super().__call__(timeout))
            return sockets[-1]

    address = ray_session.get(shard.address.remote(), timeout=30)
    client = fastreplay.Client(address, connector=Recording(shard))
    try:
        client.reset("uniform")
        rows = np.random.default_rng(1).integers(0, 255, (64, 16384), dtype=np.uint8)
        with client.trajectory_writer(1) as writer:
            for i, row in enumerate(rows):
                writer.append({"y": row, "i": np.int64(i)})
                h = writer.history
                writer.create_item("uniform", 1.0, {"y": h["y"][-1], "i": h["i"][-1]})
        for _ in range(4):
            _, data = client.sample_batch("uniform", 64)
            np.testing.assert_array_equal(np.asarray(data["y"]),
                                          rows[np.asarray(data["i"])])
        assert sum(s.split_replies for s in sockets) >= 1
    finally:
        client.close()
