"""``_core.export_wire`` and the chunk packing the outbox sends: specs and
chunks deduplicated in C must give the records the item data implies, and a
``ChunkList`` must pack exactly as the equivalent list of ChunkHandles."""

from __future__ import annotations

import numpy as np
import pytest

import fastreplay
from fastreplay import _core, rate_limiters, selectors


@pytest.fixture()
def table():  # type: ignore[no-untyped-def]
    t = fastreplay.Table("t", selectors.Fifo(), selectors.Fifo(), 1000,
                         rate_limiters.MinSize(1))
    server = fastreplay.Server([t])
    client = server.localhost_client()
    with client.trajectory_writer(3) as w:
        for i in range(12):
            w.append({"obs": np.full(3, i, np.float32), "a": np.int32(i)})
            if i >= 2:
                h = w.history
                w.create_item("t", 1.0 + i, {"obs": h["obs"][-3:], "a": h["a"][-1]})
        w.flush()
    yield t
    server.stop()


def test_records_name_each_distinct_spec_and_chunk_once(table) -> None:  # type: ignore[no-untyped-def]
    items, columns, slices, specs, chunks, keys = _core.export_wire(table._core, 100)
    assert len(items) == 10
    np.testing.assert_array_equal(items["priority"], np.arange(3, 13, dtype=float))
    assert sorted(specs) == sorted({tuple(s) for s in specs})  # each once
    assert len(specs) == 2
    assert len(chunks) == len(keys) == len(set(keys.tolist()))
    assert set(slices["chunk"].tolist()) == set(keys.tolist())
    assert [chunks[k].key for k in range(len(chunks))] == keys.tolist()
    with pytest.raises(IndexError):
        chunks[len(chunks)]


def test_a_chunk_list_packs_like_its_handles(table) -> None:  # type: ignore[no-untyped-def]
    *_, chunks, keys = _core.export_wire(table._core, 100)
    handles = [chunks[k] for k in range(len(chunks))]
    index = np.array([len(chunks) - 1, 0, 1], dtype=np.intp)
    assert _core.chunk_bytes(chunks, index) == _core.chunk_bytes(handles, index)
    assert _core.chunk_bytes(chunks) == sum(h.meta["stored_bytes"] for h in handles)
    rec_a, data_a = _core.pack_chunks(chunks, index)
    rec_b, data_b = _core.pack_chunks(handles, index)
    assert rec_a.tobytes() == rec_b.tobytes() and bytes(data_a) == bytes(data_b)
    assert rec_a["key"].tolist() == keys[index].tolist()
    out = bytearray(len(data_a) + 8)
    rec_c, _ = _core.pack_chunks(chunks, index, out=out)
    assert rec_c.tobytes() == rec_a.tobytes() and out[:len(data_a)] == data_a
    with pytest.raises(IndexError, match="out of range"):
        _core.chunk_bytes(chunks, [len(chunks)])
    with pytest.raises(IndexError, match="out of range"):
        _core.pack_chunks(handles, [-1])
    with pytest.raises(ValueError, match="do not fit"):
        _core.pack_chunks(chunks, index, out=bytearray(1))
    del chunks  # the handles hold their own references
    assert bytes(_core.pack_chunks(handles, index)[1]) == bytes(data_a)


def test_more_distinct_specs_than_the_loop_looks_up() -> None:
    """Past the first 64 distinct specs of a frame (looked up without the
    GIL), the rest are resolved after the loop: every column still names
    its own spec, each listed once, in first-seen order."""
    n = 80
    t = fastreplay.Table("t", selectors.Fifo(), selectors.Fifo(), 1000,
                         rate_limiters.MinSize(1))
    server = fastreplay.Server([t])
    try:
        step = {f"c{i:02d}": np.zeros(i + 1, np.float32) for i in range(n)}
        with server.localhost_client().trajectory_writer(1) as w:
            for _ in range(3):
                w.append(step)
                h = w.history
                w.create_item("t", 1.0, {k: h[k][-1] for k in step})
            w.flush()
        items, columns, _, specs, _, _ = _core.export_wire(t._core, 100)
        assert len(items) == 3 and len(columns) == 3 * n
        assert len(specs) == n == len({tuple(s) for s in specs})
        shapes = [tuple(specs[s][2]) for s in columns["spec"]]
        assert shapes == [(i + 1,) for i in range(n)] * 3
        np.testing.assert_array_equal(columns["spec"][:n], np.arange(n))
    finally:
        server.stop()


def _queue_with_items(n: int, max_size: int = 1000):  # type: ignore[no-untyped-def]
    q = fastreplay.Table.queue("q", max_size)
    server = fastreplay.Server([q])
    client = server.localhost_client()
    with client.trajectory_writer(1) as w:
        for i in range(n):
            w.append({"x": np.full(2, i, np.float32)})
            w.create_item("q", 1.0, {"x": w.history["x"][-1]})
        w.flush()
    return server, q


def test_take_exports_the_oldest_items_and_removes_them_as_sampling_would() -> None:
    server, q = _queue_with_items(10)
    try:
        before = q.info
        look = _core.export_wire(q._core, 4)
        items, _, slices, _, chunks, keys = _core.export_wire(q._core, 4, take=True)
        np.testing.assert_array_equal(items["key"], look[0]["key"])  # the oldest 4
        assert q.size == 6
        after = q.info
        assert after.num_deleted_episodes == before.num_deleted_episodes  # no episodes
        assert after.rate_limiter_info.sample_stats.completed == \
            before.rate_limiter_info.sample_stats.completed + 4
        # what is left comes next, and the taken items' data is intact
        rest = _core.export_wire(q._core, 100, take=True)[0]
        assert len(rest) == 6 and q.size == 0
        assert not set(rest["key"].tolist()) & set(items["key"].tolist())
        data = {chunks[k].key: np.frombuffer(chunks[k].data(), np.float32)
                .reshape(-1, 2) for k in range(len(chunks))}
        got = [data[int(s["chunk"])][s["offset"]:s["offset"] + s["length"]]
               for s in slices]
        np.testing.assert_array_equal(np.concatenate(got)[:, 0], np.arange(4))
        assert _core.export_wire(q._core, 5, take=True)[0].size == 0  # empty: nothing
    finally:
        server.stop()


def test_take_lets_a_writer_blocked_on_a_full_queue_go_on() -> None:
    import threading

    server, q = _queue_with_items(3, max_size=3)
    try:
        client = server.localhost_client()
        done = threading.Event()

        def write() -> None:
            with client.trajectory_writer(1) as w:
                w.append({"x": np.zeros(2, np.float32)})
                w.create_item("q", 1.0, {"x": w.history["x"][-1]})
                w.flush()
            done.set()

        t = threading.Thread(target=write, daemon=True)
        t.start()
        assert not done.wait(0.3)  # the queue is full
        assert len(_core.export_wire(q._core, 2, take=True)[0]) == 2
        assert done.wait(10)
        t.join(10)
        assert q.size == 2
    finally:
        server.stop()


def test_take_refuses_a_table_that_is_not_a_queue(table) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="table 't' is not a queue"):
        _core.export_wire(table._core, 3, take=True)
    assert table.size == 10  # nothing taken
