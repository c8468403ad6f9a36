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
from fastreplay.net import ring as ring_mod
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


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs POSIX shared memory")
@pytest.mark.parametrize("shm", ["1", "0"])
def test_items_arrive_intact_through_the_ring_and_without_it(served, shm, monkeypatch):
    server, table = served
    monkeypatch.setenv("FASTREPLAY_SHM", shm)
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
    if shm == "1":
        assert sent and all(at is not None for at in sent)  # every frame in the ring
    else:
        assert sent == []  # FASTREPLAY_SHM=0: the socket only
