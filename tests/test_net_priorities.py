"""Priority updates and mutations of a remote client, sent in batches
(fastreplay/net/priorities.py, ``RemoteBackend._queue``): they reach the
server's tables in the order each thread made them, within a bounded time
even when the thread makes no other call, before that thread's next call
is answered, and on ``close()``; bad priorities or keys fail at the call
and nothing of that call is applied; a malformed ``priorities`` frame
closes only its own connection.

One process: a ``RemoteBackend`` talks to a ``Server`` of this process
through the real transport, and the server's tables are checked directly.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastreplay import Server, Table, errors
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay.net import priorities, wire
from fastreplay.net.remote import RemoteBackend

WAIT = 10.0
HEADER = struct.Struct("<4sBBHIQ")
N_KEYS = 16
TABLES = ("a", "b", "c")


def make_tables() -> list[Table]:
    return [Table("a", sel.Prioritized(1.0), sel.Fifo(), 1 << 16, rl.MinSize(1),
                  seed=1),
            Table("b", sel.Uniform(), sel.Fifo(), 1 << 16, rl.MinSize(1), seed=2),
            Table("c", sel.Prioritized(0.5), sel.Lifo(), 1 << 16, rl.MinSize(1),
                  seed=3)]


def fill(tables: dict[str, Table], n: int = N_KEYS) -> None:
    for t in tables.values():
        t.reset()
        t.insert_batch(np.arange(n, dtype=np.uint64), np.ones(n))


def state(table: Table) -> list[tuple[int, float]]:
    return [(int(k), float(p)) for k, p in zip(table.items()["key"],
                                               table.items()["priority"], strict=True)]


def wait_until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not cond():
        assert time.monotonic() < deadline, f"not within {WAIT} s: {what}"
        time.sleep(0.001)


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    srv = Server(make_tables())
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def backend(server: Server) -> Iterator[RemoteBackend]:
    be = RemoteBackend("127.0.0.1", server.port)
    try:
        fill(server.tables)
        yield be
    finally:
        be.close()


@pytest.fixture
def no_flusher(monkeypatch: pytest.MonkeyPatch) -> None:
    """Updates wait for the thread's next call or MAX_KEYS (the Flusher
    would send them after an hour)."""
    monkeypatch.setattr(priorities, "MAX_DELAY", 3600.0)


# ----- order: against an in-process oracle -----

_keys = st.lists(st.integers(0, N_KEYS + 3), max_size=6)  # some keys unknown
_prio = st.sampled_from([0.0, 0.5, 1.0, 2.0, 7.25, 1e-3, 1e6])
_op = st.one_of(
    st.tuples(st.just("update"), st.sampled_from(TABLES), _keys.flatmap(
        lambda ks: st.tuples(st.just(ks), st.lists(_prio, min_size=len(ks),
                                                   max_size=len(ks))))),
    st.tuples(st.just("mutate"), st.sampled_from(TABLES),
              st.tuples(st.dictionaries(st.integers(0, N_KEYS + 3), _prio,
                                        max_size=4), _keys)),
    st.tuples(st.just("call"), st.sampled_from(TABLES), st.none()),
)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_op, max_size=25))
def test_updates_apply_in_order_like_in_process(server: Server, ops: list[Any]) -> None:
    oracle = {t.name: t for t in make_tables()}
    fill(server.tables)
    fill(oracle)
    be = RemoteBackend("127.0.0.1", server.port)
    try:
        for kind, table, arg in ops:
            if kind == "update":
                keys, prios = arg
                be.update_priorities(table, np.array(keys, np.int64), prios)
                oracle[table].update_priorities(np.array(keys, np.int64), prios)
            elif kind == "mutate":
                updates, deletes = arg
                be.mutate_priorities(table, updates, deletes)
                oracle[table].mutate_priorities(updates, deletes)
            else:
                be.info()  # a call in between: the updates before it are sent
        be.settle()
        for name in TABLES:
            assert state(server.tables[name]) == state(oracle[name]), name
    finally:
        be.close()


def test_later_update_of_a_key_wins_within_one_frame(server: Server,
                                                      backend: RemoteBackend,
                                                      no_flusher: None) -> None:
    for p in (3.0, 5.0, 0.0, 4.0):
        backend.update_priorities("a", [2, 3], [p, p + 1])
    backend.mutate_priorities("a", {3: 9.0}, [2])  # delete 2, then 3 -> 9
    backend.update_priorities("a", [2, 3], [1.5, 8.0])  # 2 is gone
    backend.update_priorities("b", [3], [6.0])
    backend.info()
    assert server.tables["a"].get(2) is None
    assert server.tables["a"].get(3)[1] == 8.0
    assert server.tables["b"].get(3)[1] == 6.0


# ----- when they are sent -----


def test_update_without_a_later_call_arrives(server: Server,
                                             backend: RemoteBackend) -> None:
    backend.update_priorities("a", [5], [4.5])
    backend.mutate_priorities("b", None, [6])
    # No other call of this thread: the Flusher sends them after MAX_DELAY.
    wait_until(lambda: server.tables["a"].get(5)[1] == 4.5, "update of a:5")
    wait_until(lambda: server.tables["b"].get(6) is None, "delete of b:6")


def test_flusher_thread_sends_updates_of_another_thread(server: Server,
                                                        backend: RemoteBackend) -> None:
    """A thread that updates and then only computes (or ends)."""
    def work() -> None:
        backend.update_priorities("c", [7, 8], [2.0, 3.0])

    t = threading.Thread(target=work)
    t.start()
    t.join(WAIT)
    assert not t.is_alive()
    wait_until(lambda: server.tables["c"].get(8)[1] == 3.0, "update of c:8")
    assert server.tables["c"].get(7)[1] == 2.0


def test_many_keys_are_sent_without_waiting(server: Server, backend: RemoteBackend,
                                            no_flusher: None) -> None:
    n = priorities.MAX_KEYS
    fill(server.tables, n)
    keys = np.arange(n, dtype=np.uint64)
    backend.update_priorities("a", keys[: n // 2], np.full(n // 2, 2.0))
    backend.update_priorities("a", keys[n // 2:], np.full(n - n // 2, 3.0))
    # MAX_KEYS keys wait: sent now, though no call follows and the Flusher sleeps.
    table = server.tables["a"]
    wait_until(lambda: table.get(n - 1)[1] == 3.0, "MAX_KEYS keys")
    assert table.get(0)[1] == 2.0
    # One call over MAX_KEYS keys likewise.
    backend.update_priorities("b", keys, np.full(n, 5.0))
    wait_until(lambda: server.tables["b"].get(n - 1)[1] == 5.0, "one large call")


def test_small_update_waits_for_the_next_call(server: Server, backend: RemoteBackend,
                                              no_flusher: None) -> None:
    """(Shows the batching is on: with the Flusher asleep an update is sent
    with the thread's next call; that call sees it applied.)"""
    table = server.tables["a"]
    backend.update_priorities("a", [1], [6.0])
    time.sleep(0.05)  # not an assertion's wait: gives a wrong early send a chance
    assert table.get(1)[1] == 1.0
    infos = backend.info()
    assert table.get(1)[1] == 6.0
    assert infos["a"].num_updates >= 1


def test_later_sample_sees_earlier_updates(server: Server) -> None:
    """Priority 0 for every key but one of a prioritized table: the very
    next sample_batch of the thread returns only that key."""
    from fastreplay import Client

    table = Table("p", sel.Prioritized(1.0), sel.Fifo(), 100, rl.MinSize(1), seed=4)
    srv = Server([table])
    be = RemoteBackend("127.0.0.1", srv.port)
    try:
        local = Client(f"localhost:{srv.port}")
        for i in range(20):
            local.insert({"x": np.int64(i)}, {"p": 1.0})
        keys = table.items()["key"]
        for round_ in range(5):
            keep = int(keys[round_ * 3])
            be.update_priorities("p", keys, (keys == keep).astype(np.float64))
            info, cols, _ = be.sample_batch("p", 16, WAIT)
            assert set(info.key.tolist()) == {keep}
            assert (info.priority == 1.0).all() and (info.probability == 1.0).all()
            be.update_priorities("p", keys, np.ones(len(keys)))
    finally:
        be.close()
        srv.stop()


def test_close_delivers_waiting_updates(server: Server, no_flusher: None) -> None:
    fill(server.tables)
    be = RemoteBackend("127.0.0.1", server.port)
    try:
        be.update_priorities("a", [4], [7.0])
        be.mutate_priorities("c", {5: 2.5}, [6])
    finally:
        be.close()
    assert server.tables["a"].get(4)[1] == 7.0  # at once: close() waited
    assert server.tables["c"].get(5)[1] == 2.5
    assert server.tables["c"].get(6) is None


def test_settle_delivers_waiting_updates(server: Server, backend: RemoteBackend,
                                         no_flusher: None) -> None:
    backend.update_priorities("b", [9], [0.25])
    backend.settle()
    assert server.tables["b"].get(9)[1] == 0.25


def test_caller_reusing_its_arrays_changes_nothing_sent(server: Server,
                                                       backend: RemoteBackend,
                                                       no_flusher: None) -> None:
    for kdt in (np.uint64, np.int64):
        keys = np.array([1, 2, 3], kdt)
        prios = np.array([4.0, 5.0, 6.0])
        backend.update_priorities("a", keys, prios)
        keys[:] = [7, 8, 9]
        prios[:] = 0.0
        backend.update_priorities("b", keys[:1], prios[:1] + 2.0)  # b:7 -> 2
        keys[:] = 10
        prios[:] = 99.0
        backend.info()
        table = server.tables["a"]
        assert [table.get(k)[1] for k in (1, 2, 3)] == [4.0, 5.0, 6.0]
        assert [table.get(k)[1] for k in (7, 8, 9, 10)] == [1.0] * 4
        assert server.tables["b"].get(7)[1] == 2.0
        fill(server.tables)
    # float32 priorities and a list of keys
    prios32 = np.array([1.5, 2.5], np.float32)
    backend.update_priorities("c", [11, 12], prios32)
    prios32[:] = 0
    backend.info()
    assert server.tables["c"].get(12)[1] == 2.5


# ----- bad input: an error at the call, nothing applied -----


@pytest.mark.parametrize("bad", [float("nan"), -1.0, float("inf"), -float("inf")])
def test_invalid_priority_raises_at_the_call(server: Server, backend: RemoteBackend,
                                             bad: float) -> None:
    with pytest.raises(errors.InvalidPriorityError, match="'a'"):
        backend.update_priorities("a", [1, 2, 3], [2.0, bad, 3.0])
    with pytest.raises(errors.InvalidPriorityError):
        backend.mutate_priorities("a", {1: 2.0, 2: bad}, [3])
    # A Uniform table takes what the same table in process takes.
    oracle = make_tables()[1]
    fill({"b": oracle})
    try:
        oracle.update_priorities([4], [bad])
    except errors.InvalidPriorityError:
        with pytest.raises(ValueError):  # a Reverb user catches ValueError
            backend.update_priorities("b", [4], [bad])
    else:
        backend.update_priorities("b", [4], [bad])
    backend.update_priorities("c", [1], [8.0])  # a good one after them
    backend.info()
    backend.settle()
    assert state(server.tables["a"]) == [(k, 1.0) for k in range(N_KEYS)]
    got, want = np.array(state(server.tables["b"])), np.array(state(oracle))
    assert np.array_equal(got, want, equal_nan=True)
    assert server.tables["c"].get(1)[1] == 8.0


@pytest.mark.parametrize("keys, error", [
    ([1, -2], ValueError),
    (np.array([1, -2]), ValueError),
    ([1.0, 2.0], TypeError),
    (np.array([1.5, 2.0]), TypeError),
    (np.array([[1, 2]]), ValueError),
])
def test_bad_keys_raise_naming_the_table(server: Server, backend: RemoteBackend,
                                         keys: Any, error: type) -> None:
    with pytest.raises(error, match="'b'"):
        backend.update_priorities("b", keys, [2.0] * np.asarray(keys).size)
    backend.settle()
    assert state(server.tables["b"]) == [(k, 1.0) for k in range(N_KEYS)]


def test_bad_mutations_raise_and_apply_nothing(server: Server,
                                               backend: RemoteBackend) -> None:
    with pytest.raises(ValueError, match="'c'"):
        backend.mutate_priorities("c", {1: 2.0}, [-1])
    with pytest.raises(TypeError, match="'c'"):
        backend.mutate_priorities("c", {1.5: 2.0}, [])  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="differ in length"):
        backend.update_priorities("c", [1, 2], [1.0])
    with pytest.raises(ValueError, match="Could not find table"):
        backend.update_priorities("nope", [1], [1.0])
    backend.settle()
    assert state(server.tables["c"]) == [(k, 1.0) for k in range(N_KEYS)]


# ----- a malformed frame closes only its connection -----


def _raw_connection(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    wire.send_frame(sock, wire.KIND_CALL, {"op": "hello", "token": None, "args": {}})
    kind, _, _ = wire.recv_frame(sock)
    assert kind == wire.KIND_REPLY
    return sock


def _priorities_call(ops: Any, arrays: list[np.ndarray]) -> tuple[Any, list[Any]]:
    descs, bufs = wire.pack_arrays(arrays)
    return {"op": "priorities", "args": {"ops": ops, "arrays": descs}}, bufs


_U = np.array([1, 2], np.uint64)
_P = np.array([3.0, 4.0])
_D = np.array([5], np.uint64)
_NONE = np.empty(0, np.uint64)
MALFORMED = {
    "ops-not-a-list": _priorities_call({"a": 1}, [_U, _P, _NONE]),
    "two-arrays": _priorities_call([["a", 2, 0]], [_U, _P]),
    "too-many-keys": _priorities_call([["a", 3, 0]], [_U, _P, _NONE]),
    "too-few-keys": _priorities_call([["a", 1, 0]], [_U, _P, _NONE]),
    "deletes-missing": _priorities_call([["a", 2, 1]], [_U, _P, _NONE]),
    "negative-count": _priorities_call([["a", -1, 0], ["a", 3, 0]], [_U, _P, _NONE]),
    "bool-count": _priorities_call([["a", True, 0], ["a", 1, 0]], [_U, _P, _NONE]),
    "float-count": _priorities_call([["a", 2.0, 0]], [_U, _P, _NONE]),
    "table-not-str": _priorities_call([[1, 2, 0]], [_U, _P, _NONE]),
    "op-too-short": _priorities_call([["a", 2]], [_U, _P, _NONE]),
    "float32-priorities": _priorities_call([["a", 2, 0]],
                                           [_U, _P.astype(np.float32), _NONE]),
    "int64-keys": _priorities_call([["a", 2, 0]], [_U.astype(np.int64), _P, _NONE]),
    "float-deletes": _priorities_call([["a", 2, 1]], [_U, _P, _D.astype(np.float64)]),
    "no-arrays": ({"op": "priorities", "args": {"ops": []}}, []),
    "array-past-blob": ({"op": "priorities", "args": {
        "ops": [["a", 2, 0]], "arrays": [["<u8", [2], 0, 16], ["<f8", [2], 16, 16],
                                         ["<u8", [0], 32, 0]]}}, [_U]),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_priorities_frame_closes_only_its_connection(
        server: Server, backend: RemoteBackend, name: str) -> None:
    backend.update_priorities("a", [1], [2.0])
    backend.info()  # the good connection is open
    message, bufs = MALFORMED[name]
    sock = _raw_connection(server.port)
    try:
        wire.send_frame(sock, wire.KIND_CALL, message, bufs)
        kind, msg, _ = wire.recv_frame(sock)
        assert kind == wire.KIND_ERROR and msg["error"] == "DataLossError", msg
        with pytest.raises(wire.FrameError, match="connection closed"):
            wire.recv_frame(sock)  # then the server closed it
    finally:
        sock.close()
    # Nothing of the malformed frame was applied (keys 1, 2 -> 3.0, 4.0).
    table = server.tables["a"]
    assert table.get(1)[1] == 2.0 and table.get(2)[1] == 1.0
    # The other connection keeps working, updates included.
    backend.update_priorities("a", [2], [6.5])
    assert backend.info()["a"].current_size == N_KEYS
    assert table.get(2)[1] == 6.5


def test_well_formed_frame_for_an_unknown_table_keeps_the_connection(
        server: Server) -> None:
    fill(server.tables)
    message, bufs = _priorities_call([["a", 1, 0], ["nope", 1, 0]], [_U, _P, _NONE])
    sock = _raw_connection(server.port)
    try:
        wire.send_frame(sock, wire.KIND_CALL, message, bufs)
        kind, msg, _ = wire.recv_frame(sock)
        assert kind == wire.KIND_ERROR and "nope" in msg["message"]
        wire.send_frame(sock, wire.KIND_CALL, {"op": "info", "args": {}})
        kind, msg, _ = wire.recv_frame(sock)  # still served
        assert kind == wire.KIND_REPLY and set(msg["result"]) == set(TABLES)
        good, bufs = _priorities_call([["b", 2, 1]], [_U, _P, _D])
        wire.send_frame(sock, wire.KIND_CALL, good, bufs)
        assert wire.recv_frame(sock)[0] == wire.KIND_REPLY
    finally:
        sock.close()
    b = server.tables["b"]
    assert b.get(1)[1] == 3.0 and b.get(2)[1] == 4.0 and b.get(5) is None


def test_hand_made_frame_applies_ops_in_order(server: Server) -> None:
    """update a:1 -> 3, then (delete a:1, update a:2 -> 4), then a:1 -> 5
    (gone: ignored), then b:1 -> 7."""
    fill(server.tables)
    keys = np.array([1, 2, 1, 1], np.uint64)
    prios = np.array([3.0, 4.0, 5.0, 7.0])
    dels = np.array([1], np.uint64)
    message, bufs = _priorities_call([["a", 1, 0], ["a", 1, 1], ["a", 1, 0],
                                      ["b", 1, 0]], [keys, prios, dels])
    sock = _raw_connection(server.port)
    try:
        wire.send_frame(sock, wire.KIND_CALL, message, bufs)
        assert wire.recv_frame(sock)[0] == wire.KIND_REPLY
    finally:
        sock.close()
    a, b = server.tables["a"], server.tables["b"]
    assert a.get(1) is None and a.get(2)[1] == 4.0 and b.get(1)[1] == 7.0


def test_read_frame_merges_only_consecutive_plain_updates() -> None:
    keys = np.array([1, 2, 3, 4, 5], np.uint64)
    prios = np.arange(5, dtype=np.float64)
    dels = np.array([9], np.uint64)
    descs, bufs = wire.pack_arrays([keys, prios, dels])
    blob = np.concatenate([np.frombuffer(b.tobytes(), np.uint8) for b in bufs])
    runs = priorities.read_frame(
        {"ops": [["a", 1, 0], ["a", 1, 0], ["a", 1, 1], ["b", 1, 0], ["a", 1, 0]],
         "arrays": descs}, blob)
    assert [(t, k.tolist(), p.tolist(), d.tolist(), e) for t, k, p, d, e in runs] == [
        ("a", [1, 2], [0.0, 1.0], [], [1, 2]), ("a", [3], [2.0], [9], [1]),
        ("b", [4], [3.0], [], [1]), ("a", [5], [4.0], [], [1])]


# ----- priorities only the server's table refuses -----

TOO_LARGE = 1e308  # finite, >= 0, but over a Prioritized(1.0) table's limit


def test_priority_too_large_for_the_table_surfaces(server: Server,
                                                   backend: RemoteBackend) -> None:
    """Not lost: an error at the call or at the thread's next call, and the
    bad update is not applied."""
    with pytest.raises(errors.InvalidPriorityError):
        backend.update_priorities("a", [0], [TOO_LARGE])
        backend.info()
    assert server.tables["a"].get(0)[1] == 1.0
    backend.update_priorities("a", [0], [2.0])  # the connection still works
    backend.info()
    assert server.tables["a"].get(0)[1] == 2.0


def test_priority_too_large_for_the_table_raises_at_the_call(
        server: Server, backend: RemoteBackend) -> None:
    with pytest.raises(errors.InvalidPriorityError):
        backend.update_priorities("a", [0], [TOO_LARGE])


def test_refused_update_loses_no_other_calls_updates(
        server: Server, backend: RemoteBackend, no_flusher: None) -> None:
    backend.update_priorities("a", [2], [5.0])  # valid
    try:
        backend.update_priorities("a", [0], [TOO_LARGE])  # refused
    except errors.InvalidPriorityError:
        pass
    backend.update_priorities("b", [3], [6.0])  # valid
    try:
        backend.settle()
    except errors.InvalidPriorityError:
        pass
    assert server.tables["a"].get(0)[1] == 1.0
    assert server.tables["a"].get(2)[1] == 5.0
    assert server.tables["b"].get(3)[1] == 6.0


def test_many_frames_owed_are_read_in_time(server: Server, backend: RemoteBackend,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call its own frame (MAX_KEYS of 2): more frames than MAX_OWED
    are sent before any other call; all apply, in order."""
    from fastreplay.net import remote

    monkeypatch.setattr(remote, "MAX_KEYS", 2)
    rng = np.random.default_rng(31)
    want = {k: 1.0 for k in range(N_KEYS)}
    for i in range(remote.MAX_OWED * 2 + 10):
        keys = rng.integers(0, N_KEYS, 2)
        prios = [float(i), float(i) + 0.5]
        backend.update_priorities("c", keys, prios)
        for k, p in zip(keys.tolist(), prios, strict=True):
            want[k] = p
    backend.settle()
    assert state(server.tables["c"]) == sorted(want.items())


def test_flusher_leaves_operations_queued_after_its_look() -> None:
    """A look the Flusher scheduled for operations the thread's call already
    sent does not send the ones queued since (they have a look of their
    own, a delay after they were queued): one message, not two."""
    import threading as th
    import types as ty

    delay = 0.2  # the socket's own flush_delay, long enough to time reliably
    shipped: list[float] = []
    conn = ty.SimpleNamespace(sock=ty.SimpleNamespace(flush_delay=delay),
                              lock=th.RLock(), ops=priorities.Ops())
    flusher = priorities.Flusher(lambda c: (shipped.append(time.monotonic()),
                                            c.ops.take()))
    try:
        keys, prios = np.arange(3, dtype=np.uint64), np.ones(3)
        assert conn.ops.add("t", keys, prios, None)
        flusher.watch(conn)
        with conn.lock:  # the thread's call sends them ...
            conn.ops.take()
        # ... and queues more just before the first look.
        time.sleep(delay * 0.75)
        assert conn.ops.add("t", keys, prios, None)
        flusher.watch(conn)
        first = conn.ops.since
        deadline = time.monotonic() + 5
        while not shipped and time.monotonic() < deadline:
            time.sleep(0.0005)
        assert shipped, "the Flusher never sent the operations"
        assert shipped[0] - first >= delay / 2
        assert not conn.ops.items
    finally:
        flusher.close()


def test_flusher_looks_once_per_delay_not_once_per_update() -> None:
    """A learner queues updates every batch and its next call sends them:
    the Flusher looks at the connection once per delay (a tick), not once
    for every first update (it woke for each, twice, taking the GIL from
    the learner: session 19), and goes idle once nothing waits."""
    import threading as th
    import types as ty

    class CountingLock:
        def __init__(self) -> None:
            self.lock, self.flusher_looks = th.RLock(), 0

        def acquire(self, blocking: bool = True) -> bool:
            got = self.lock.acquire(blocking)
            if got and th.current_thread().name == "fastreplay-priorities":
                self.flusher_looks += 1
            return got

        def release(self) -> None:
            self.lock.release()

        def __enter__(self) -> CountingLock:
            self.acquire()
            return self

        def __exit__(self, *exc: object) -> None:
            self.release()

    delay = 0.05
    lock = CountingLock()
    conn = ty.SimpleNamespace(sock=ty.SimpleNamespace(flush_delay=delay), lock=lock,
                              ops=priorities.Ops())
    flusher = priorities.Flusher(lambda c: c.ops.take())
    try:
        keys, prios = np.arange(3, dtype=np.uint64), np.ones(3)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 10 * delay:  # 100 batches in 10 delays
            with lock:
                assert conn.ops.add("t", keys, prios, None)
            flusher.watch(conn)
            time.sleep(delay / 20)
            with lock:  # the thread's next call sends them
                conn.ops.take()
            time.sleep(delay / 20)
        assert lock.flusher_looks <= 2 * 10 + 2, lock.flusher_looks
        looks = lock.flusher_looks
        time.sleep(5 * delay)
        assert lock.flusher_looks <= looks + 1  # idle: nothing waits
    finally:
        flusher.close()
