"""Sampling ahead (fastreplay/net/ahead.py, ``RemoteBackend._ask_ahead`` /
``_take_ahead``): a learner's next ``sample_batch`` is asked for while it
works on the current one, only on tables where an unused batch changes
nothing (``max_times_sampled == 0``, a MinSize limiter), never against the
thread's own priority updates, deletes or resets, and with
``FASTREPLAY_SAMPLE_AHEAD=0`` not at all.

One process: a ``RemoteBackend`` talks to a ``Server`` of this process
through the real transport; the server's tables show how many batches
were sampled.  ``close()`` reads every reply owed, so the server's counts
are final after it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from fastreplay import Client, Server, Table, _core
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay.net import ahead
from fastreplay.net.remote import RemoteBackend

WAIT = 10.0
N_ITEMS = 40


def make_server() -> Server:
    return Server([
        Table("prio", sel.Prioritized(1.0), sel.Fifo(), 1000, rl.MinSize(1), seed=5),
        Table("unif", sel.Uniform(), sel.Fifo(), 1000, rl.MinSize(1), seed=6),
        Table.queue("queue", 1000),
        Table("ratio", sel.Uniform(), sel.Fifo(), 1000,
              rl.SampleToInsertRatio(1000.0, 1, 1e9), seed=7),
        Table("once", sel.Uniform(), sel.Fifo(), 1000, rl.MinSize(1),
              max_times_sampled=1, seed=8),
    ])


def insert(server: Server, table: str, values: range) -> None:
    client = Client(f"localhost:{server.port}")
    for i in values:
        client.insert({"x": np.int64(i)}, {table: 1.0})


def xs(cols: list[np.ndarray]) -> list[int]:
    return [int(v) for v in cols[0].reshape(-1)]


@pytest.fixture
def server() -> Iterator[Server]:
    srv = make_server()
    try:
        for name in ("prio", "unif", "ratio", "once"):
            insert(srv, name, range(N_ITEMS))
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def backend(server: Server) -> Iterator[RemoteBackend]:
    be = RemoteBackend("127.0.0.1", server.port)
    try:
        yield be
    finally:
        be.close()


def samples(server: Server, table: str) -> int:
    return int(server.tables[table].info.num_samples)


def test_eligible_tables(server: Server) -> None:
    infos = {n: t.info for n, t in server.tables.items()}
    assert ahead.eligible(infos["prio"]) and ahead.eligible(infos["unif"])
    assert not ahead.eligible(infos["queue"])
    assert not ahead.eligible(infos["ratio"])
    assert not ahead.eligible(infos["once"])


@pytest.mark.parametrize("table", ["prio", "unif"])
def test_sampling_ahead_is_on_for_eligible_tables(server: Server, table: str) -> None:
    be = RemoteBackend("127.0.0.1", server.port)
    try:
        for _ in range(5):
            info, cols, _ = be.sample_batch(table, 4, WAIT)
            assert len(info.key) == 4 and len(xs(cols)) == 4
    finally:
        be.close()
    assert samples(server, table) > 5 * 4  # batches were asked for ahead


@pytest.mark.parametrize("table", ["prio", "unif"])
def test_sample_ahead_off(server: Server, table: str,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTREPLAY_SAMPLE_AHEAD", "0")
    be = RemoteBackend("127.0.0.1", server.port)
    try:
        for _ in range(5):
            be.sample_batch(table, 4, WAIT)
    finally:
        be.close()
    assert samples(server, table) == 5 * 4


@pytest.mark.parametrize("table", ["ratio", "once"])
def test_never_ahead_on_tables_where_a_batch_counts(server: Server, table: str) -> None:
    be = RemoteBackend("127.0.0.1", server.port)
    try:
        for _ in range(6):
            be.sample_batch(table, 3, WAIT)
        assert samples(server, table) == 6 * 3
    finally:
        be.close()
    assert samples(server, table) == 6 * 3


def test_queue_delivers_every_item_exactly_once(server: Server,
                                                backend: RemoteBackend) -> None:
    insert(server, "queue", range(60))
    got: list[int] = []
    for i in range(12):
        info, cols, _ = backend.sample_batch("queue", 5, WAIT)
        got += xs(cols)
        assert len(server.tables["queue"]) == 60 - 5 * (i + 1)  # nothing taken ahead
    assert got == list(range(60))
    insert(server, "queue", range(60, 63))
    info, cols, _ = backend.sample_batch("queue", 3, WAIT)
    assert xs(cols) == [60, 61, 62]
    assert samples(server, "queue") == 63


def test_once_table_loses_nothing(server: Server, backend: RemoteBackend) -> None:
    """max_times_sampled=1: every item returned exactly once (a batch taken
    ahead and thrown away would lose its items)."""
    got: list[int] = []
    while len(got) < N_ITEMS:
        _, cols, _ = backend.sample_batch("once", 4, WAIT)
        got += xs(cols)
    assert sorted(got) == list(range(N_ITEMS))
    assert len(server.tables["once"]) == 0


@pytest.mark.parametrize("how", ["zero", "delete", "mutate-zero"])
def test_no_batch_holds_keys_the_thread_zeroed_or_deleted(
        server: Server, backend: RemoteBackend, how: str) -> None:
    gone: set[int] = set()
    keys = server.tables["prio"].items()["key"]
    for round_ in range(24):
        info, cols, _ = backend.sample_batch("prio", 6, WAIT)
        batch = set(info.key.tolist())
        assert not batch & gone, (round_, batch & gone)
        assert (info.priority > 0).all()
        if len(gone) < N_ITEMS - 12:
            drop = sorted(batch)[:2]
            if how == "zero":
                backend.update_priorities("prio", drop, [0.0] * len(drop))
            elif how == "delete":
                backend.mutate_priorities("prio", None, drop)
            else:
                backend.mutate_priorities("prio", {k: 0.0 for k in drop}, None)
            gone |= set(drop)
    assert len(gone) >= 10
    table = server.tables["prio"]
    for k in gone:
        item = table.get(k)
        assert item is None or item[1] == 0.0
    assert len(set(keys.tolist()) - gone) >= 12


def test_a_batch_the_threads_update_touched_gives_way_to_the_next(
        server: Server, backend: RemoteBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The oldest batch asked ahead holds a key the thread then updated: the
    call takes the next batch asked ahead (no fresh round trip), which is
    still older than anything the thread has seen."""
    monkeypatch.setattr(ahead, "SOCKET_AHEAD_DEPTH", 2)  # two batches to look at
    for _ in range(3):
        backend.sample_batch("prio", 4, WAIT)
    conn = backend._local.conn
    assert len(conn.ahead) == 2
    with conn.lock:
        conn.settle(conn.ahead[-1])  # both replies read
    first, second = (ahead._keys_of(a.reply[1]["result"], a.reply[2], a.segment).copy()
                     for a in conn.ahead)
    key = next(k for k in first.tolist() if k not in second.tolist())
    backend.update_priorities("prio", [key], [3.0])
    info, _, _ = backend.sample_batch("prio", 4, WAIT)
    assert info.key.tolist() == second.tolist()
    # Both touched: the call samples again, after the update.
    for _ in range(2):
        backend.sample_batch("prio", 4, WAIT)
    with conn.lock:
        conn.settle(conn.ahead[-1])
    keys = [ahead._keys_of(a.reply[1]["result"], a.reply[2], a.segment).tolist()
            for a in conn.ahead]
    backend.update_priorities("prio", keys[0] + keys[1], [2.0] * 8)
    now = {key: 3.0, **dict.fromkeys(keys[0] + keys[1], 2.0)}
    info, _, _ = backend.sample_batch("prio", 4, WAIT)
    assert info.priority.tolist() == [now.get(k, 1.0) for k in info.key.tolist()]


def test_batches_report_the_threads_latest_priorities(server: Server,
                                                      backend: RemoteBackend) -> None:
    """Each batch's priorities and probabilities are those of the table
    after the thread's updates before the call."""
    table = server.tables["prio"]
    keys = table.items()["key"]
    rng = np.random.default_rng(21)
    for round_ in range(15):
        prios = rng.integers(1, 5, len(keys)).astype(np.float64)
        backend.update_priorities("prio", keys, prios)
        info, _, _ = backend.sample_batch("prio", 8, WAIT)
        want = dict(zip(keys.tolist(), prios.tolist(), strict=True))
        total = prios.sum()
        for k, p, q, size in zip(info.key.tolist(), info.priority.tolist(),
                                 info.probability.tolist(), info.table_size.tolist(),
                                 strict=True):
            assert p == want[k], round_
            assert q == pytest.approx(p / total)
            assert size == N_ITEMS


def test_batches_without_updates_are_consistent(server: Server,
                                                backend: RemoteBackend) -> None:
    table = server.tables["prio"]
    keys = table.items()["key"]
    prios = np.arange(1, len(keys) + 1, dtype=np.float64)
    table.update_priorities(keys, prios)  # in the server's process
    want = dict(zip(keys.tolist(), prios.tolist(), strict=True))
    for _ in range(8):
        info, cols, _ = backend.sample_batch("prio", 8, WAIT)
        for k, p, q in zip(info.key.tolist(), info.priority.tolist(),
                           info.probability.tolist(), strict=True):
            assert p == want[k]
            assert q == pytest.approx(p / prios.sum())
        # the data belongs to the keys: item i holds x == i (inserted in order)
        order = {int(k): i for i, k in enumerate(keys)}
        assert xs(cols) == [order[k] for k in info.key.tolist()]


def test_other_n_and_other_table_return_what_was_asked(server: Server,
                                                       backend: RemoteBackend) -> None:
    for n in (8, 8, 8, 3, 8, 8, 1, 1, 8, 5):
        info, cols, _ = backend.sample_batch("prio", n, WAIT)
        assert len(info.key) == n and len(xs(cols)) == n
        assert len(info.probability) == n
    for table, n in (("prio", 4), ("prio", 4), ("unif", 4), ("prio", 4), ("unif", 2)):
        info, cols, _ = backend.sample_batch(table, n, WAIT)
        assert len(info.key) == n
        stored = server.tables[table].items()["key"].tolist()
        assert set(info.key.tolist()) <= set(stored)


def test_reset_then_inserts_give_only_new_items(server: Server,
                                                backend: RemoteBackend) -> None:
    for _ in range(4):
        backend.sample_batch("unif", 6, WAIT)
    backend.reset("unif")
    insert(server, "unif", range(100, 110))
    new_keys = set(server.tables["unif"].items()["key"].tolist())
    for _ in range(4):
        info, cols, _ = backend.sample_batch("unif", 6, WAIT)
        assert set(xs(cols)) <= set(range(100, 110))
        assert set(info.key.tolist()) <= new_keys
        assert (info.table_size == 10).all()


def test_other_call_in_between_throws_the_batch_away(server: Server,
                                                     backend: RemoteBackend) -> None:
    """A delete by another client between two calls of this thread, made
    visible to it by a call of its own (server info): the next batch is
    sampled after both."""
    for _ in range(3):
        backend.sample_batch("unif", 8, WAIT)
    table = server.tables["unif"]
    keys = table.items()["key"]
    table.delete(keys[:-2])  # two items left
    backend.info()
    for _ in range(3):
        info, _, _ = backend.sample_batch("unif", 8, WAIT)
        assert set(info.key.tolist()) <= set(keys[-2:].tolist())


def test_streak_pauses_after_misses() -> None:
    streak = ahead.Streak()
    assert not streak.called("t", 4)
    assert streak.called("t", 4)
    for _ in range(ahead.MAX_MISSES):
        streak.outcome(False)
    paused = [streak.called("t", 4) for _ in range(ahead.PAUSE_CALLS)]
    assert not any(paused)
    assert streak.called("t", 4)
    assert not streak.called("t", 5)  # a new (table, n) starts over


def test_usable_checks_table_n_and_touched_keys() -> None:
    keys = np.array([3, 4, 5], np.uint64)
    from fastreplay.net import wire

    descs, bufs = wire.pack_arrays([keys])
    blob = np.frombuffer(bufs[0].tobytes(), np.uint8)
    reply: Any = (wire.KIND_REPLY, {"result": {"arrays": descs}}, blob)
    a = ahead.Ahead("t", 3, None)
    a.reply = reply
    assert a.usable("t", 3, wire.KIND_REPLY)
    assert not a.usable("t", 4, wire.KIND_REPLY)
    assert not a.usable("u", 3, wire.KIND_REPLY)
    assert not a.usable("t", 3, wire.KIND_ERROR)
    a.touched.append(np.array([9], np.uint64))
    assert a.usable("t", 3, wire.KIND_REPLY)
    a.touched.append(np.array([4], np.uint64))
    assert not a.usable("t", 3, wire.KIND_REPLY)
    a.valid = False
    a.touched.clear()
    assert not a.usable("t", 3, wire.KIND_REPLY)


# ----- large batches: asked for ahead into shared memory -----


@pytest.fixture
def big_server() -> Iterator[Server]:
    """Items of 64 KiB (obs filled with x % 251): a batch of 24 is 1.5 MiB,
    over SHM_MIN_BYTES, so batches come through shared memory."""
    table = Table("big", sel.Prioritized(1.0), sel.Fifo(), 100, rl.MinSize(1), seed=9)
    srv = Server([table])
    try:
        client = Client(f"localhost:{srv.port}")
        with client.trajectory_writer(1) as w:
            for i in range(N_ITEMS):
                w.append({"obs": np.full((256, 256), i % 251, np.uint8),
                          "x": np.int64(i)})
                w.create_item("big", 1.0, {"obs": w.history["obs"][-1],
                                           "x": w.history["x"][-1]})
        yield srv
    finally:
        srv.stop()
        gc.collect()
        _core._pool_clear()  # its large batches' pooled memory: other tests count it


def test_large_batches_ahead_keep_data_and_respect_updates(big_server: Server
                                                           ) -> None:
    table = big_server.tables["big"]
    x_of = {int(k): i for i, k in enumerate(table.items()["key"])}
    be = RemoteBackend("127.0.0.1", big_server.port)
    kept: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    gone: set[int] = set()
    try:
        for round_ in range(12):
            info, cols, _ = be.sample_batch("big", 24, WAIT)
            obs, x = cols if cols[0].ndim == 3 else cols[::-1]
            keys = info.key.tolist()
            assert not set(keys) & gone, round_
            assert x.tolist() == [x_of[k] for k in keys]
            assert (obs == (x % 251).astype(np.uint8)[:, None, None]).all()
            if round_ < 5:
                kept.append((info.key.copy(), x.copy(), obs))  # a view, kept
            drop = sorted(set(keys))[:2]
            if len(gone) < N_ITEMS - 20:
                be.update_priorities("big", drop, [0.0] * len(drop))
                gone |= set(drop)
        # Batches kept were never overwritten by later ones (or ahead ones).
        for _, x, obs in kept:
            assert (obs == (x % 251).astype(np.uint8)[:, None, None]).all()
        assert any(not o.flags.writeable for _, _, o in kept)  # shared memory used
    finally:
        kept.clear()
        be.close()
    assert table.info.num_samples > 12 * 24  # and batches were asked for ahead


def test_a_learner_of_large_batches_keeps_one_asked_ahead(big_server: Server
                                                          ) -> None:
    """A thread that updates priorities keeps one large batch (>=
    LARGE_BATCH_BYTES) asked ahead, not AHEAD_DEPTH: its updates spoil most
    of them and each spoiled one moved its bytes for nothing."""
    be = RemoteBackend("127.0.0.1", big_server.port)
    try:
        for _ in range(6):
            info, _, _ = be.sample_batch("big", 24, WAIT)
            be.update_priorities("big", info.key[:1], [1.0])
            assert len(be._local.conn.ahead) <= 1
        assert be._local.conn.ahead  # still asked ahead
    finally:
        be.close()
    assert big_server.tables["big"].info.num_samples > 6 * 24


def test_a_learner_keeps_more_asked_ahead_of_a_larger_table() -> None:
    """The depth of a thread that updates priorities follows the table's
    size as the server last reported it: 8 batches of 2 from a table of 40
    (8 * 2 * 2 <= 40), the default 2 for batches of 8 (4 * 8 * 8 > 40)."""
    srv = make_server()
    try:
        insert(srv, "prio", range(N_ITEMS))
        for n, deepest in ((2, 8), (8, 2)):
            be = RemoteBackend("127.0.0.1", srv.port)
            try:
                most = 0
                for _ in range(12):
                    info, _, _ = be.sample_batch("prio", n, WAIT)
                    be.update_priorities("prio", info.key[:1], [1.0])
                    most = max(most, len(be._local.conn.ahead))
                assert most == deepest, (n, most)
                assert be._table_sizes["prio"] == N_ITEMS
            finally:
                be.close()
    finally:
        srv.stop()


def test_a_thread_that_never_updates_keeps_a_sockets_depth_asked_ahead(
        server: Server, backend: RemoteBackend) -> None:
    """A dataset worker's thread (no updates) over a Unix or TCP socket keeps
    SOCKET_AHEAD_DEPTH batches asked ahead, refilled when half are used."""
    most = 0
    for _ in range(12):
        backend.sample_batch("unif", 2, WAIT)
        most = max(most, len(backend._local.conn.ahead))
    assert most == ahead.SOCKET_AHEAD_DEPTH == 8


def test_depth_by_thread_and_batch_size() -> None:
    class Link:
        ahead_depth = 8
        update_ahead_depth = 4

    big = ahead.LARGE_BATCH_BYTES
    assert ahead.depth(Link(), False, 2, big) == 8  # a dataset worker
    assert ahead.depth(object(), False, 2, big) == ahead.SOCKET_AHEAD_DEPTH == 8
    assert ahead.depth(Link(), True, 2, big - 1) == 4  # a learner, small batches
    assert ahead.depth(object(), True, 2, big - 1) == 2
    assert ahead.depth(Link(), True, 2, big) == 1
    assert ahead.depth(object(), True, 2, big) == 1
    # A dataset worker's depth gives way for batches that would fill AHEAD_BYTES.
    budget = ahead.AHEAD_BYTES
    assert ahead.depth(Link(), False, 2, budget // 8) == 8
    assert ahead.depth(Link(), False, 2, budget // 4) == 4
    assert ahead.depth(Link(), False, 2, budget) == 2
    assert ahead.depth(Link(), False, 2, 0) == 8  # size not known yet
    # A learner's small batches go deeper on a table large enough that few
    # of them hold a key it updated since (d * n * n <= size).
    n = 160
    assert ahead.depth(object(), True, 2, 100, n, 16 * n * n) == 16
    assert ahead.depth(object(), True, 2, 100, n, 16 * n * n - 1) == 8
    assert ahead.depth(object(), True, 2, 100, n, 8 * n * n) == 8
    assert ahead.depth(object(), True, 2, 100, n, 8 * n * n - 1) == 4
    assert ahead.depth(object(), True, 2, 100, n, 4 * n * n) == 4
    assert ahead.depth(object(), True, 2, 100, n, 4 * n * n - 1) == 2
    assert ahead.depth(object(), True, 2, 100, n, 0) == 2  # size not known yet
    assert ahead.depth(Link(), True, 2, 100, n, 4 * n * n) == 4  # the link's own
    assert ahead.depth(Link(), True, 2, 100, n, 10 ** 9) == 16
    assert ahead.depth(object(), True, 2, big, n, 10 ** 9) == 1  # large: one
    assert ahead.depth(object(), False, 2, 100, n, 10 ** 9) == 8  # no updates
    assert ahead.depth(object(), False, 2, budget // 4) == 4  # within AHEAD_BYTES


def test_a_dataset_workers_items_asked_ahead_are_bounded() -> None:
    """Requests of several batches (fastreplay.ray's dataset) keep no more
    items asked ahead than single batches did: AHEAD_ITEMS, at least the
    default depth."""
    class Link:
        ahead_depth = 16

    most = ahead.AHEAD_ITEMS
    assert ahead.depth(Link(), False, 2, 100, 160) == 16  # one batch of 256 a request
    assert ahead.depth(Link(), False, 2, 100, most // 4) == 4
    assert ahead.depth(object(), False, 2, 100, most // 4) == 4
    assert ahead.depth(Link(), False, 2, 100, most // 3 + 1) == 2
    assert ahead.depth(Link(), False, 2, 100, most * 4) == 2  # the default
    assert ahead.depth(Link(), True, 2, 100, most * 4, 10 ** 12) == 16  # learners: no


def test_each_thread_samples_ahead_for_itself(server: Server) -> None:
    """Two threads of one backend, each zeroing keys of its own batches:
    neither thread sees a key it zeroed (the other thread's updates are
    not promised to be seen by batches already asked for)."""
    import threading

    be = RemoteBackend("127.0.0.1", server.port)
    keys = server.tables["prio"].items()["key"].tolist()
    halves = [set(keys[::2]), set(keys[1::2])]
    failures: list[str] = []

    def work(me: int) -> None:
        gone: set[int] = set()
        try:
            for round_ in range(20):
                info, _, _ = be.sample_batch("prio", 5, WAIT)
                batch = set(info.key.tolist())
                if batch & gone:
                    failures.append(f"thread {me} round {round_}: {batch & gone}")
                mine = sorted(batch & halves[me])[:1]
                if mine and len(gone) < 10:
                    be.update_priorities("prio", mine, [0.0])
                    gone |= set(mine)
        except Exception as exc:  # noqa: BLE001 - reported below
            failures.append(repr(exc))

    try:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT * 3)
        assert not any(t.is_alive() for t in threads)
    finally:
        be.close()
    assert failures == []


def test_any_in_matches_isin() -> None:
    """The sorted search ``usable`` uses agrees with ``np.isin`` (keys at
    both ends of the uint64 range, several touched arrays, empty ones)."""
    from fastreplay.net.ahead import _any_in

    rng = np.random.default_rng(3)
    top = np.iinfo(np.uint64).max
    for _ in range(300):
        keys = rng.integers(0, 64, rng.integers(0, 20), dtype=np.uint64)
        touched = [rng.integers(0, 64, rng.integers(0, 10), dtype=np.uint64)
                   for _ in range(rng.integers(1, 4))]
        if rng.random() < 0.3:
            keys = np.append(keys, np.uint64(top))
        if rng.random() < 0.3:
            touched[0] = np.append(touched[0], np.uint64(top))
        want = bool(np.isin(keys, np.concatenate(touched)).any())
        assert _any_in(keys, touched) == want


def test_a_thread_that_ended_has_its_connection_closed(server: Server,
                                                       backend: RemoteBackend) -> None:
    """Threads that sample and end (a dataset's worker each time a dataset
    is made) do not each leave a connection open: the next thread to
    connect closes theirs, after sending the updates they queued."""
    import threading

    key = int(server.tables["prio"].items()["key"][0])

    def work(update: bool) -> None:
        for _ in range(3):
            backend.sample_batch("prio", 4, None)  # batches asked ahead too
        if update:
            backend.update_priorities("prio", [key], [9.0])

    for i in range(8):
        t = threading.Thread(target=work, args=(i == 7,))
        t.start()
        t.join(timeout=WAIT)
        assert not t.is_alive()
        del t
        gc.collect()
    assert len(backend._gone) == 1  # the last one's, closed at the next connect
    work(False)  # this thread connects: the ended ones' connections close
    assert len(backend._gone) == 0
    assert len(backend._conns) <= 2  # this thread's (and the outbox's, if any)
    assert server.tables["prio"].get(key)[1] == 9.0  # sent before closing
