"""Writers that ship their full frames themselves (``outbox.INLINE_FRAMES``):
through the outbox's one connection, so the server gets every item once and
in order whichever thread shipped it; only what cannot wait for the server
(the frame fits the ring, few replies owed); errors raised by the next
flush; and the pieces that makes them possible (``SendRing.room``,
``Conn.settle_arrived``, ``RemoteBackend.through``)."""

from __future__ import annotations

import gc
import os
import socket
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastreplay as reverb
from fastreplay import errors
from fastreplay import structured_writer as sw
from fastreplay.net import outbox as outbox_mod
from fastreplay.net import wire
from fastreplay.net.conn import Conn
from fastreplay.net.remote import RemoteBackend
from fastreplay.net.ring import SendRing

needs_shm = pytest.mark.skipif(not os.path.isdir("/dev/shm"),
                               reason="needs POSIX shared memory")


@pytest.fixture()
def remote(monkeypatch):  # type: ignore[no-untyped-def]
    """A queue table of a server in this process, and a client of it over
    the transport (shared memory on)."""
    monkeypatch.setenv("FASTREPLAY_SHM", "1")
    table = reverb.Table.queue("t", 100_000)
    server = reverb.Server([table])
    backend = RemoteBackend("127.0.0.1", server.port)
    client = reverb.Client(f"127.0.0.1:{server.port}")
    client._backend_found = backend  # this process's server, but over the transport
    try:
        yield client, backend, table
    finally:
        backend.close()
        server.stop()


def _spy_ships(monkeypatch):  # type: ignore[no-untyped-def]
    """(thread name, items) of each frame shipped."""
    ships = []
    real = outbox_mod.Outbox._ship

    def ship(self, table, records, *rest):  # type: ignore[no-untyped-def]
        ships.append((threading.current_thread().name, len(records[0])))
        return real(self, table, records, *rest)

    monkeypatch.setattr(outbox_mod.Outbox, "_ship", ship)
    return ships


def _write(client, n: int, flush_first: bool = True) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    """n steps, one item each, by extends of 300 (not a divisor of a frame;
    a flush after the first, so that the outbox thread has sent a frame
    through the ring)."""
    step = {"obs": np.zeros(4, np.float32), "i": np.int64(0)}
    ref = sw.create_reference_step(step)
    config = sw.create_config({"obs": ref["obs"][-1], "i": ref["i"][-1]}, "t")
    i = np.arange(n)
    data = {"obs": (i[:, None] * 10 + np.arange(4)).astype(np.float32), "i": i}
    with client.structured_writer([config]) as w:
        for lo in range(0, n, 300):
            assert w.extend({k: v[lo:lo + 300] for k, v in data.items()}) == \
                min(300, n - lo)
            if lo == 0 and flush_first:
                w.flush()
    return data


def _check_all_in_order(table, data) -> None:  # type: ignore[no-untyped-def]
    n = len(data["i"])
    assert len(table) == n
    _, got, _ = table.sample_batch(n)
    idx, obs = (got if got[0].ndim == 1 else got[::-1])
    np.testing.assert_array_equal(idx, data["i"])  # each once, in order
    np.testing.assert_array_equal(obs, data["obs"])


@needs_shm
def test_a_writer_ships_full_frames_itself_and_the_server_gets_them_in_order(
        remote, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    client, backend, table = remote
    ships = _spy_ships(monkeypatch)
    data = _write(client, 30_000)
    _check_all_in_order(table, data)
    mine = [n for name, n in ships if name == threading.current_thread().name]
    assert mine, "the writer's thread shipped no frame"
    assert all(n == outbox_mod.INLINE_FRAME_ITEMS for n in mine)  # full frames only
    assert sum(n for _, n in ships) == 30_000
    # one connection carried them all, and every region came back
    rings = [c.ring for c in list(backend._conns) if isinstance(c.ring, SendRing)]
    assert len(rings) == 1 and len(rings[0]) == 0


@needs_shm
@pytest.mark.parametrize("how", ["off", "owed", "no_room"])
def test_the_outbox_thread_ships_what_a_writer_may_not(
        remote, monkeypatch, how) -> None:  # type: ignore[no-untyped-def]
    """Inline shipping off, or refused (replies owed, no room in the ring
    for twice the largest frame): the outbox thread ships it all."""
    client, _, table = remote
    if how == "off":
        monkeypatch.setattr(outbox_mod, "INLINE_FRAMES", False)
    elif how == "owed":
        monkeypatch.setattr(outbox_mod, "INLINE_OWED", 0)
    else:
        monkeypatch.setattr(SendRing, "room", lambda self: 0)
    ships = _spy_ships(monkeypatch)
    data = _write(client, 12_000)
    _check_all_in_order(table, data)
    assert ships and all(name == "fastreplay-outbox" for name, _ in ships)


@needs_shm
def test_an_error_shipping_from_a_writer_is_raised_by_the_next_flush(
        remote, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The error waits for the writer's next flush (as the outbox
    thread's do), and what was staged is still shipped after it."""
    client, _, table = remote
    real = outbox_mod.Outbox._drain
    failed = []

    def drain(self, inline=False):  # type: ignore[no-untyped-def]
        if inline and not failed:
            failed.append(True)
            raise errors.UnavailableError("link down (test)")
        return real(self, inline)

    monkeypatch.setattr(outbox_mod.Outbox, "_drain", drain)
    step = {"x": np.float32(0)}
    ref = sw.create_reference_step(step)
    config = sw.create_config({"x": ref["x"][-1]}, "t")
    xs = np.arange(6000, dtype=np.float32)
    with client.structured_writer([config]) as w:
        w.extend({"x": xs[:256]})
        w.flush()
        for lo in range(256, 6000, 256):
            w.extend({"x": xs[lo:lo + 256]})
        assert failed
        with pytest.raises(errors.UnavailableError, match="link down"):
            w.flush()
        w.flush()  # raised once
    assert len(table) == 6000
    _, (got,), _ = table.sample_batch(6000)
    np.testing.assert_array_equal(got, xs)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.integers(1, 60), st.just(0)), min_size=1, max_size=60))
def test_room_is_the_largest_region_take_gives(steps) -> None:  # type: ignore[no-untyped-def]
    class _Segment:
        name, size = "/fastreplay-test", 100

    ring = SendRing(_Segment())
    live = []
    for n in steps:
        if n == 0:
            if live:
                ring.give_back(live.pop(0))
            continue
        room = ring.room()
        head, taken = ring._head, list(ring._live)
        assert ring.take(room + 1) is None
        if room:
            at = ring.take(room)
            assert at is not None
            ring._live.pop()  # undo: the same state again
            ring._head = head
            assert list(ring._live) == taken
        at = ring.take(n)
        assert (at is not None) == (n <= room)
        if at is not None:
            live.append(at)


def test_settle_arrived_reads_the_replies_that_came_and_waits_for_none() -> None:
    a, b = socket.socketpair()
    a.settimeout(5)  # a read that waits fails the test instead of hanging it
    try:
        conn = Conn(a)
        for _ in range(3):
            conn.pending.append(("insert", {}, (), None, None))
        conn.settle_arrived()  # nothing came: returns at once
        assert len(conn.pending) == 3
        wire.send_frame(b, wire.KIND_REPLY, {"result": None})
        t0 = time.monotonic()
        conn.settle_arrived()
        assert len(conn.pending) == 2 and time.monotonic() - t0 < 5
        wire.send_frame(b, wire.KIND_ERROR, {"error": "DeadlineExceededError",
                                             "message": "full (test)"})
        wire.send_frame(b, wire.KIND_REPLY, {"result": None})
        time.sleep(0.05)
        with pytest.raises(errors.DeadlineExceededError, match="full"):
            conn.settle_arrived()  # both read, then the first error raised
        assert len(conn.pending) == 0
    finally:
        a.close()
        b.close()


def test_a_connection_made_through_a_channel_outlives_the_thread_that_made_it(
        remote) -> None:  # type: ignore[no-untyped-def]
    """A thread's own connection closes when the thread ends; the outbox's
    (made by whichever thread shipped first) must not."""
    client, backend, _ = remote

    class Chan:
        conn = None

    chan = Chan()
    own = []

    def work() -> None:
        with backend.through(chan):
            backend.info()
        backend.info()
        own.append(backend._local.conn)

    t = threading.Thread(target=work)
    t.start()
    t.join(10)
    assert chan.conn is not None and own and own[0] is not chan.conn
    del t
    gc.collect()
    backend.info()  # a new connection of this thread reaps the ended thread's
    assert own[0].sock.fileno() == -1  # closed with its thread
    assert chan.conn.sock.fileno() != -1  # still open
    with backend.through(chan):
        assert "t" in backend.info()


def test_settle_arrived_works_on_a_descriptor_past_select_s_limit() -> None:
    """select() refuses descriptors past 1023; a Ray worker's sockets get
    there.  (Regression: ready() used select.)"""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2100:
        pytest.skip(f"the hard limit on open files is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2100), hard))
    a, b = socket.socketpair()
    high = None
    try:
        fd = os.dup2(a.fileno(), 2000)
        high = socket.socket(fileno=fd)
        high.settimeout(5)
        conn = Conn(high)
        conn.pending.append(("insert", {}, (), None, None))
        conn.settle_arrived()
        assert len(conn.pending) == 1
        wire.send_frame(b, wire.KIND_REPLY, {"result": None})
        time.sleep(0.05)
        conn.settle_arrived()
        assert len(conn.pending) == 0
    finally:
        if high is not None:
            high.close()
        a.close()
        b.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
