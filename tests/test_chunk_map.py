"""``_core.ChunkMap``: the chunks a server keeps for one connection, and
the records of a remote writer's items inserted against it (``insert_wire``),
as the network service does; hostile records refused, nothing inserted."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import fastreplay
from fastreplay import _core, errors


def _exported(n: int) -> tuple[Any, ...]:
    """Records, specs and packed chunks of ``n`` one-step items with two
    columns, made by a writer into a local staging queue (the outbox's way)."""
    staging = fastreplay.Table.queue("q", 1000)
    server = fastreplay.Server([staging])
    client = fastreplay.Client(f"localhost:{server.port}")
    with client.trajectory_writer(1) as w:
        for i in range(n):
            w.append({"x": np.full(3, i, np.float32), "y": np.int64(i)})
            h = w.history
            w.create_item("q", 1.0 + i, {"x": h["x"][-1], "y": h["y"][-1]})
        w.flush()
    items, columns, slices, specs, handles, keys = staging.export_records(n)
    chunk_records, data = _core.pack_chunks(handles)
    server.stop()
    return items, columns, slices, specs, chunk_records, np.asarray(data), keys


def _target() -> tuple[fastreplay.Server, fastreplay.Table]:
    table = fastreplay.Table("t", fastreplay.selectors.Uniform(),
                             fastreplay.selectors.Fifo(), 1000,
                             fastreplay.rate_limiters.MinSize(1))
    return fastreplay.Server([table]), table


def test_items_insert_against_the_kept_chunks_and_forget_releases_them() -> None:
    items, columns, slices, specs, records, data, keys = _exported(6)
    server, table = _target()
    cm = _core.ChunkMap()
    _core.restore_chunks(server.chunk_store, cm, records, data)
    assert len(cm) == len(keys) == 12  # one chunk a column a step
    assert all(int(k) in cm for k in keys)
    assert table.insert_records(cm, items, columns, slices, specs) == 6
    assert sorted(table.sample(64).priority.tolist())[::-1][0] == 6.0
    cm.forget(keys[:5])
    cm.forget(keys[:5])  # absent keys are skipped
    assert len(cm) == 7 and int(keys[0]) not in cm and int(keys[5]) in cm
    # the table's items keep their chunks after the map lets them go
    cm.clear()
    assert len(cm) == 0
    info, data = fastreplay.Client(f"localhost:{server.port}").sample_batch("t", 64)
    x, y = np.asarray(data["x"]), np.asarray(data["y"])
    np.testing.assert_array_equal(x, np.repeat(y[:, None], 3, axis=1))
    np.testing.assert_array_equal(info.priority, 1.0 + y)
    assert set(y.tolist()) <= set(range(6))
    server.stop()


def test_a_slot_freed_by_forget_is_reused_and_a_key_sent_again_replaces() -> None:
    items, columns, slices, specs, records, data, keys = _exported(40)
    server, table = _target()
    cm = _core.ChunkMap()
    for _ in range(3):  # the same chunks again: replaced, not duplicated
        _core.restore_chunks(server.chunk_store, cm, records, data)
    assert len(cm) == 80
    cm.forget(keys)
    assert len(cm) == 0
    _core.restore_chunks(server.chunk_store, cm, records, data)
    assert table.insert_records(cm, items, columns, slices, specs) == 40
    server.stop()


def test_an_item_naming_a_forgotten_chunk_is_refused_and_nothing_inserted() -> None:
    items, columns, slices, specs, records, data, keys = _exported(4)
    server, table = _target()
    cm = _core.ChunkMap()
    _core.restore_chunks(server.chunk_store, cm, records, data)
    cm.forget(keys[-1:])
    with pytest.raises(errors.DataLossError, match="unknown chunk"):
        table.insert_records(cm, items, columns, slices, specs)
    assert table.size == 0
    bad = slices.copy()
    bad["offset"][0] = 5  # past the one-row chunk
    _core.restore_chunks(server.chunk_store, cm, records, data)
    with pytest.raises(errors.DataLossError, match="does not fit"):
        table.insert_records(cm, items, columns, bad, specs)
    assert table.size == 0
    server.stop()


@pytest.mark.parametrize("fifo", [True, False])
def test_export_gives_the_oldest_items_in_insertion_order(fifo: bool) -> None:
    """export_records(m): the m oldest items, oldest first, whether the
    table walks its Fifo list (a staging queue) or scans and sorts (any
    other table); items sampled away or deleted are skipped."""
    sel, lim = fastreplay.selectors, fastreplay.rate_limiters
    table = (fastreplay.Table.queue("q", 100) if fifo else
             fastreplay.Table("q", sel.Prioritized(1.0), sel.Uniform(), 100,
                              lim.MinSize(1)))
    server = fastreplay.Server([table])
    client = fastreplay.Client(f"localhost:{server.port}")
    for i in range(10):
        client.insert([np.full(2, i, np.float32)], {"q": 1.0 + i})
    keys = [int(k) for k in table.items()["key"]]
    if fifo:
        first = table.sample(2, timeout=0).key  # a queue's consumer takes two
        assert len(first) == 2
    else:
        client.mutate_priorities("q", deletes=[keys[0], keys[1]])
    items, *_ = table.export_records(3)
    assert items["priority"].tolist() == [3.0, 4.0, 5.0]
    items, *_ = table.export_records(50)
    assert items["priority"].tolist() == [3.0 + i for i in range(8)]
    server.stop()
