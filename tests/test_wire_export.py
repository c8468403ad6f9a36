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
