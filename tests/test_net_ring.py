"""The ring of shared memory a writer's chunk bytes travel in to a server on
the same host (``fastreplay/net/ring.py``): regions never overlap a region
still in use, come back in the order they were taken, and the bytes the
server inserts are the writer's."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastreplay as reverb
from fastreplay.net import outbox as outbox_mod
from fastreplay.net import ring as ring_mod
from fastreplay.net import wire
from fastreplay.net.remote import RemoteBackend
from fastreplay.net.ring import SendRing


class _Segment:
    name = "/fastreplay-test"

    def __init__(self, size: int) -> None:
        self.size = size


# sizes around a third of the ring wrap it often; 0 gives the oldest back
ops = st.lists(st.one_of(st.integers(1, 70), st.integers(25, 45), st.just(0)),
               min_size=4, max_size=80)


@settings(max_examples=1500, deadline=None)
@given(ops)
def test_regions_never_overlap_live_ones_and_come_back_in_order(steps):
    ring = SendRing(_Segment(100))
    live: list[tuple[int, int]] = []  # (start, n), oldest first
    for n in steps:
        if n == 0:  # a reply arrives: the oldest region is free again
            if live:
                ring.give_back(live.pop(0)[0])
            continue
        at = ring.take(n)
        if n > 50:
            assert at is None  # more than half: through the socket
            continue
        if at is None:
            # Refused only when no free stretch of n bytes follows the
            # newest region (a ring never reorders).
            assert live, "an empty ring takes any region up to half its size"
            continue
        assert 0 <= at and at + n <= 100
        for start, size in live:
            assert at + n <= start or start + size <= at, (at, n, live)
        live.append((at, n))
        assert len(ring) == len(live)
    while live:
        ring.give_back(live.pop(0)[0])
    assert len(ring) == 0 and ring.take(50) == 0


def test_a_full_ring_refuses_until_the_oldest_comes_back():
    ring = SendRing(_Segment(100))
    assert [ring.take(30), ring.take(30), ring.take(30)] == [0, 30, 60]
    assert ring.take(30) is None  # 90..120 does not fit, 0..30 is in use
    ring.give_back(0)
    assert ring.take(30) is None  # would end where the oldest live region starts
    assert ring.take(29) == 0
    ring.give_back(30)
    ring.give_back(60)
    ring.give_back(0)
    assert len(ring) == 0


@pytest.fixture()
def served():
    table = reverb.Table.queue("t", 10_000)
    server = reverb.Server([table])
    try:
        yield server, table
    finally:
        server.stop()


def _spy_inserts(monkeypatch):
    """The insert frames sent: (args, number of blobs)."""
    frames = []
    real = wire.send_frame

    def spy(sock, kind, message, blobs=()):
        if message.get("op") == "insert":
            frames.append((message["args"], len(blobs)))
        real(sock, kind, message, blobs)

    monkeypatch.setattr(wire, "send_frame", spy)
    return frames


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs POSIX shared memory")
@pytest.mark.parametrize(("shm", "records"), [("1", True), ("1", False), ("0", True)])
def test_items_arrive_intact_through_the_ring_and_without_it(served, shm, records,
                                                            monkeypatch):
    """Chunk bytes and (RECORDS_IN_RING) item records through the ring, or
    everything on the socket: the same items."""
    server, table = served
    monkeypatch.setenv("FASTREPLAY_SHM", shm)
    monkeypatch.setattr(outbox_mod, "RECORDS_IN_RING", records)
    inserts = _spy_inserts(monkeypatch)
    sent = []
    real = ring_mod.SendRing.take

    def take(self, n):
        at = real(self, n)
        sent.append(at)
        return at

    monkeypatch.setattr(ring_mod.SendRing, "take", take)
    backend = RemoteBackend("127.0.0.1", server.port)
    client = reverb.Client(f"127.0.0.1:{server.port}")
    client._backend_found = backend  # this process's server, but over the transport
    try:
        rng = np.random.default_rng(0)
        frames = rng.integers(0, 255, size=(3000, 16, 16), dtype=np.uint8)
        with client.trajectory_writer(2) as w:
            for i in range(len(frames)):
                w.append({"obs": frames[i], "i": np.int64(i)})
                if i:
                    w.create_item("t", 1.0, {"obs": w.history["obs"][-2:],
                                             "i": w.history["i"][-2:]})
        assert len(table) == len(frames) - 1
        _, data, _ = table.sample_batch(len(frames) - 1)
    finally:
        backend.close()
    # a queue: the items in the order written, each over steps (i - 1, i)
    first = np.arange(len(frames) - 1)
    assert len(data) == 2
    obs, idx = (data if data[0].ndim == 4 else data[::-1])
    assert np.array_equal(idx[:, 0], first) and np.array_equal(idx[:, 1], first + 1)
    assert np.array_equal(obs[:, 0], frames[:-1])
    assert np.array_equal(obs[:, 1], frames[1:])
    assert inserts
    if shm == "1":
        assert sent and all(at is not None for at in sent)  # every frame in the ring
        assert len(sent) == len(inserts) * (2 if records else 1)
        assert all(isinstance(args["data"], dict) for args, _ in inserts)
        for args, blobs in inserts:
            assert ("records_in" in args) == records
            assert blobs == (0 if records else 6)  # the records' arrays
    else:
        assert sent == []  # FASTREPLAY_SHM=0: the socket only
        assert all("records_in" not in args for args, _ in inserts)


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs POSIX shared memory")
def test_extended_steps_arrive_with_their_records_in_the_ring(served, monkeypatch):
    """A StructuredWriter's extend (one item a step, chunks of many steps)
    to a server over the transport: every item's step intact, and the
    regions all given back once the writer flushed."""
    from fastreplay import structured_writer as sw

    server, table = served
    monkeypatch.setenv("FASTREPLAY_SHM", "1")
    frames = _spy_inserts(monkeypatch)
    backend = RemoteBackend("127.0.0.1", server.port)
    client = reverb.Client(f"127.0.0.1:{server.port}")
    client._backend_found = backend
    step = {"obs": np.zeros(8, np.float32), "i": np.int64(0)}
    ref = sw.create_reference_step(step)
    config = sw.create_config({"obs": ref["obs"][-1], "i": ref["i"][-1]}, "t")
    n = 5000
    i = np.arange(n)
    data = {"obs": (i[:, None] + np.arange(8)).astype(np.float32), "i": i}
    try:
        with client.structured_writer([config]) as w:
            for lo in range(0, n, 256):
                w.extend({k: v[lo:lo + 256] for k, v in data.items()})
        assert len(table) == n
        _, got, _ = table.sample_batch(n)
        rings = [c.ring for c in list(backend._conns) if isinstance(c.ring, SendRing)]
    finally:
        backend.close()
    idx, obs = (got if got[0].ndim == 1 else got[::-1])
    assert np.array_equal(idx, i) and np.array_equal(obs, data["obs"])
    assert frames and all("records_in" in args for args, _ in frames)
    assert rings and all(len(r) == 0 for r in rings)  # every region given back


def test_records_naming_a_segment_the_connection_lacks_are_refused(served,
                                                                   monkeypatch):
    """An insert frame whose records_in names no segment of the connection
    (or is not a region) is the connection's error; nothing is inserted."""
    import socket

    server, table = served
    monkeypatch.setenv("FASTREPLAY_SHM", "0")
    frames = []
    real = wire.send_frame

    def spy(sock, kind, message, blobs=()):
        if message.get("op") == "insert":
            frames.append((message, [bytes(b) for b in blobs]))
        real(sock, kind, message, blobs)

    monkeypatch.setattr(wire, "send_frame", spy)
    backend = RemoteBackend("127.0.0.1", server.port)
    client = reverb.Client(f"127.0.0.1:{server.port}")
    client._backend_found = backend
    try:
        with client.trajectory_writer(1) as w:
            w.append({"x": np.float32(1)})
            w.create_item("t", 1.0, {"x": w.history["x"][-1]})
    finally:
        backend.close()
    monkeypatch.setattr(wire, "send_frame", real)
    (message, blobs), = frames
    assert len(table) == 1
    table.sample_batch(1)  # empty the queue
    for bad, why in (({"shm": "/fastreplay-none", "at": 0, "n": 8},
                      "item records name a segment this connection lacks"),
                     ([0, 8], "records_in is not a region")):
        message["args"]["records_in"] = bad
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        try:
            wire.send_frame(sock, wire.KIND_CALL, {"op": "hello", "token": None,
                                                   "args": {}})
            assert wire.recv_frame(sock)[0] == wire.KIND_REPLY
            wire.send_frame(sock, wire.KIND_CALL, message, blobs)
            kind, msg, _ = wire.recv_frame(sock)
            assert kind == wire.KIND_ERROR and why in msg["message"], msg
        finally:
            sock.close()
    assert len(table) == 0
