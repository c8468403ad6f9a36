"""Merged chunks on the wire (``_core.pack_merged``): the small raw chunks
of an export that nothing else can name any more (sealed) travel as one
chunk per item column and run of steps, the slices are renamed to match,
and the items read back exactly what was written."""

from __future__ import annotations

import socket
from typing import Any

import numpy as np
import pytest

import fastreplay
from fastreplay import _core
from fastreplay.net import wire


def _writer_items(staging: fastreplay.Table, steps: int, keep_alive: int = 1,
                  span: int = 1, close: bool = True, **step_extra: Any) -> Any:
    """A writer's items into the staging queue: step i has x = [i]*3 and
    y = i; an item a step names the last ``span`` steps.  The writer is
    returned open unless ``close``."""
    server = fastreplay.Server([staging])
    client = fastreplay.Client(f"localhost:{server.port}")
    w = client.trajectory_writer(keep_alive)
    for i in range(steps):
        w.append({"x": np.full(3, i, np.float32), "y": np.int64(i),
                  **{k: f(i) for k, f in step_extra.items()}})
        if i + 1 >= span:
            h = w.history
            cols = {k: h[k][-span:] if span > 1 else h[k][-1] for k in h}
            w.create_item("q", 1.0 + i, cols)
    w.flush()
    if close:
        w.close()
    return server, w


def _target() -> tuple[fastreplay.Server, fastreplay.Table]:
    table = fastreplay.Table.queue("t", 10_000)  # read back oldest first, once
    return fastreplay.Server([table]), table


def _insert_merged(export: tuple[Any, ...]) -> tuple[Any, ...]:
    """What the server does with a frame of pack_merged: restore, insert,
    forget the transient chunks; returns (server, table, records, merged,
    chunk map)."""
    items, columns, slices, specs, handles, keys = export
    sent = slices.copy()
    records, data, merged = _core.pack_merged(handles, None, sent)
    server, table = _target()
    cm = _core.ChunkMap()
    _core.restore_chunks(server.chunk_store, cm, records, np.asarray(data))
    assert table.insert_records(cm, items, columns, sent, specs) == len(items)
    cm.forget(merged)
    return server, table, records, merged, cm


def _socket_client(port: int) -> fastreplay.Client:
    """A client of the server at ``port`` over a socket even in this process
    (the path a remote writer's frames take)."""
    return fastreplay.Client(
        f"127.0.0.1:{port}",
        connector=lambda t: socket.create_connection(("127.0.0.1", port), t))


def _read_all(server: fastreplay.Server, n: int) -> tuple[np.ndarray, ...]:
    client = fastreplay.Client(f"localhost:{server.port}")
    info, data = client.sample_batch("t", n)
    return info, np.asarray(data["x"]), np.asarray(data["y"])


def test_sealed_one_row_chunks_merge_per_column_and_read_back() -> None:
    staging = fastreplay.Table.queue("q", 1000)
    src, w = _writer_items(staging, 200, close=False)
    try:
        export = staging.export_records(200)
        handles = export[4]
        # The writer's history still holds the last step's two chunks.
        sealed = handles.sealed
        assert sealed.sum() == len(handles) - 2 == 398
        last = {h.meta["first_step"]
                for h, s in zip(handles, sealed, strict=True) if not s}
        assert last == {199}
        server, table, records, merged, cm = _insert_merged(export)
    finally:
        w.close()
        src.stop()
    # Two columns, 199 sealed steps each: 4 runs of <= 64 rows a column.
    assert len(merged) == 8 and len(records) == 10
    assert sorted(records["n_rows"].tolist()) == [1, 1] + [7, 7] + [64] * 6
    assert len(cm) == 2  # only the unsealed chunks stay kept
    assert server.chunk_store.stats()["live_chunks"] == 10
    info, x, y = _read_all(server, 200)
    np.testing.assert_array_equal(y, np.arange(200))
    np.testing.assert_array_equal(x, np.repeat(y[:, None].astype(np.float32), 3, 1))
    np.testing.assert_array_equal(info.priority, 1.0 + y)
    server.stop()


def test_one_writers_chunk_keys_come_consecutive_in_an_export() -> None:
    """A writer numbers its chunks from a random start, in the order it opens
    them: an export of its items names them in increasing order (the outbox
    then skips sorting them), one key per column and step."""
    staging = fastreplay.Table.queue("q", 1000)
    src, _ = _writer_items(staging, 50)
    keys = staging.export_records(50)[5]
    src.stop()
    assert len(keys) == 100
    np.testing.assert_array_equal(np.diff(keys.astype(np.int64)), 1)
    staging2 = fastreplay.Table.queue("q", 1000)
    src2, _ = _writer_items(staging2, 5)
    other = staging2.export_records(5)[5]
    src2.stop()
    assert abs(int(other[0]) - int(keys[0])) > 1_000_000  # another random start


def test_chunks_named_by_items_left_in_the_queue_stay_unsealed() -> None:
    """Items of 3 steps: exporting the first 5 leaves chunks that later
    (still staged) items name unsealed; the rest merge and read back."""
    staging = fastreplay.Table.queue("q", 1000)
    src, _ = _writer_items(staging, 20, keep_alive=3, span=3)
    export = staging.export_records(5)  # items of steps 0-2 ... 4-6
    handles = export[4]
    for h, s in zip(handles, handles.sealed, strict=True):
        assert s == (h.meta["last_step"] <= 4), h.meta
    assert handles.sealed.any()
    server, table, records, merged, cm = _insert_merged(export)
    src.stop()
    assert len(records) < len(handles)
    info, x, y = _read_all(server, 5)
    np.testing.assert_array_equal(y, np.arange(5)[:, None] + np.arange(3))
    np.testing.assert_array_equal(x[:, :, 0], y.astype(np.float32))
    server.stop()


def test_large_compressed_and_string_chunks_travel_unmerged() -> None:
    staging = fastreplay.Table.queue("q", 1000)
    src, _ = _writer_items(staging, 30, big=lambda i: np.full(2048, i, np.float32),
                           s=lambda i: f"step {i}")
    export = staging.export_records(30)
    handles = export[4]
    kinds: dict[int, list[bool]] = {}
    for h, s in zip(handles, handles.sealed, strict=True):
        kinds.setdefault(h.meta["row_bytes"], []).append(bool(s))
    assert not any(kinds[8 * 1024])  # too big to gain from merging
    assert not any(kinds[-1])  # variable-size rows (strings)
    # x and y: every step's but the last one's, which the history holds
    assert sum(kinds[12]) == sum(kinds[8]) == 29
    server, table, records, merged, cm = _insert_merged(export)
    src.stop()
    assert len(merged) == 2 and len(records) == 2 + 2 + 60
    client = fastreplay.Client(f"localhost:{server.port}")
    _, data = client.sample_batch("t", 30)
    y = np.asarray(data["y"])
    np.testing.assert_array_equal(y, np.arange(30))
    np.testing.assert_array_equal(np.asarray(data["big"])[:, 7], y.astype(np.float32))
    strings = [bytes(v) for v in np.asarray(data["s"])]
    assert strings == [b"step %d" % i for i in range(30)]
    server.stop()


def test_pack_merged_refuses_slices_of_another_export() -> None:
    staging = fastreplay.Table.queue("q", 1000)
    src, _ = _writer_items(staging, 4)
    items, columns, slices, specs, handles, keys = staging.export_records(4)
    src.stop()
    try:
        _core.pack_merged(handles, None, slices[:-1].copy())
    except ValueError as exc:
        assert "not the export's" in str(exc)
    else:
        raise AssertionError("pack_merged took slices of another export")
    plain = _core.ChunkList()
    try:
        _core.pack_merged(plain, None, slices.copy())
    except ValueError as exc:
        assert "export" in str(exc)
    else:
        raise AssertionError("pack_merged took a ChunkList export_wire did not make")


def test_remote_writer_of_one_item_a_step_leaves_few_chunks_on_the_server() -> None:
    """End to end over a socket: the server stores a chunk per 64 steps a
    column, not one per step, and every item reads back its step."""
    server, table = _target()
    port = server.port
    try:
        client = _socket_client(port)
        with client.trajectory_writer(1) as w:
            for i in range(3000):
                w.append({"x": np.full(3, i, np.float32), "y": np.int64(i)})
                h = w.history
                w.create_item("t", 1.0, {"x": h["x"][-1], "y": h["y"][-1]})
        client.close()
        assert table.size == 3000
        # 3000 steps x 2 columns as one-row chunks would be 6000.
        assert server.chunk_store.stats()["live_chunks"] <= 2 * (3000 // 64 + 40)
        info, x, y = _read_all(server, 3000)
        np.testing.assert_array_equal(y, np.arange(3000))
        np.testing.assert_array_equal(x[:, 0], y.astype(np.float32))
    finally:
        server.stop()


def test_merged_chunks_survive_a_checkpoint(tmp_path: Any) -> None:
    """Items a remote writer sent over merged chunks (and over the 3-step
    items' shared ones) read back the same after a checkpoint and restore."""
    from fastreplay.checkpointers import DefaultCheckpointer

    def tables() -> list[fastreplay.Table]:
        return [fastreplay.Table.queue("t", 10_000)]

    server = fastreplay.Server(tables(), port=0,
                               checkpointer=DefaultCheckpointer(str(tmp_path)))
    port = server.port
    client = _socket_client(port)
    with client.trajectory_writer(3) as w:
        for i in range(500):
            w.append({"x": np.full(3, i, np.float32), "y": np.int64(i)})
            if i >= 2:
                h = w.history
                w.create_item("t", 1.0, {"x": h["x"][-3:], "y": h["y"][-1]})
    client.close()
    live = server.chunk_store.stats()["live_chunks"]
    assert live < 2 * 500 // 4  # merged, not a chunk a column a step
    server.localhost_client().checkpoint()
    server.stop()
    restored = fastreplay.Server(tables(),
                                 checkpointer=DefaultCheckpointer(str(tmp_path)))
    try:
        info, data = fastreplay.Client(f"localhost:{restored.port}").sample_batch(
            "t", 498)
        y = np.asarray(data["y"])
        np.testing.assert_array_equal(y, np.arange(2, 500))
        want = (y[:, None] + np.arange(-2, 1)).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(data["x"])[:, :, 0], want)
    finally:
        restored.stop()


def test_two_writers_interleaved_read_back_over_a_socket() -> None:
    """Two writers of one client staging items in another order than their
    chunks were made (the outbox sorts such an export's chunk keys; a
    single writer's come sorted and skip it): every item reads back its
    own step, with merged and unmerged chunks alike."""
    server, table = _target()
    try:
        client = _socket_client(server.port)
        a, b = client.trajectory_writer(1), client.trajectory_writer(2)
        for i in range(1000):
            a.append({"x": np.full(3, i, np.float32), "y": np.int64(i)})
            b.append({"x": np.full(3, -i, np.float32), "y": np.int64(-i)})
            hb = b.history  # b's item first: its chunks are younger than a's
            b.create_item("t", 1.0, {"x": hb["x"][-1], "y": hb["y"][-1]})
            ha = a.history
            a.create_item("t", 1.0, {"x": ha["x"][-1], "y": ha["y"][-1]})
        a.close()
        b.close()
        client.close()
        assert table.size == 2000
        _, x, y = _read_all(server, 2000)
        np.testing.assert_array_equal(x[:, 0], y.astype(np.float32))
        assert sorted(y.tolist()) == sorted([*range(1000), *range(0, -1000, -1)])
    finally:
        server.stop()


def _write_dict_or_tuple_items(client: fastreplay.Client, as_dict: Any) -> None:
    """Six items of x = i to table "t": ``{"a": x}`` where ``as_dict(i)``,
    else ``(x,)``."""
    w = client.trajectory_writer(1)
    for i in range(6):
        w.append({"x": np.float32(i)})
        ref = w.history["x"][-1]
        w.create_item("t", 1.0, {"a": ref} if as_dict(i) else (ref,))
    w.flush()
    w.close()


def test_items_of_two_structures_in_one_frame_keep_theirs() -> None:
    """The server maps each item's structure id of a frame to its own; a
    frame mixing two structures (the path apart from a frame of one) reads
    back each item with its own."""
    server, table = _target()
    client = _socket_client(server.port)
    _write_dict_or_tuple_items(client, lambda i: i % 2 == 1)
    for i in range(6):  # a queue: oldest first
        _, data = client.sample_batch("t", 1)
        if i % 2:
            assert isinstance(data, dict) and float(data["a"][0]) == i
        else:
            assert isinstance(data, tuple) and float(data[0][0]) == i
    server.stop()


def _insert_frames(steps: int, mixed: bool) -> list[tuple[Any, list[bytes]]]:
    """The insert frames a socket client sends for ``steps`` items (one
    structure, or two alternating), copied as sent."""
    server, _ = _target()
    frames: list[tuple[Any, list[bytes]]] = []
    real = wire.send_frame

    def spy(sock: Any, kind: int, message: Any, blobs: Any = ()) -> None:
        if message.get("op") == "insert":
            frames.append((message, [bytes(b) for b in blobs]))
        real(sock, kind, message, blobs)

    wire.send_frame = spy  # type: ignore[assignment]
    try:
        client = _socket_client(server.port)
        w = client.trajectory_writer(1)
        for i in range(steps):
            w.append({"x": np.float32(i)})
            ref = w.history["x"][-1]
            w.create_item("t", 1.0, {"a": ref} if mixed and i % 2 else (ref,))
        w.flush()
        w.close()
    finally:
        wire.send_frame = real  # type: ignore[assignment]
        server.stop()
    return frames


@pytest.mark.parametrize("mixed", [False, True])
def test_an_item_naming_a_structure_its_frame_lacks_is_refused(mixed: bool) -> None:
    """Both paths of the server's structure mapping (a frame of one
    structure, a frame of several) refuse an item whose structure the frame
    does not carry: the connection's error, nothing inserted."""
    (message, blobs), = _insert_frames(4, mixed)
    assert "shm" not in message["args"]["data"]
    message["args"]["structures"] = message["args"]["structures"][:1 if mixed else 0]
    server, table = _target()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        hello = {"op": "hello", "token": None, "args": {}}
        wire.send_frame(sock, wire.KIND_CALL, hello)
        assert wire.recv_frame(sock)[0] == wire.KIND_REPLY
        wire.send_frame(sock, wire.KIND_CALL, message, blobs)
        kind, msg, _ = wire.recv_frame(sock)
        assert kind == wire.KIND_ERROR and msg["error"] == "DataLossError", msg
        assert "structure the frame lacks" in msg["message"]
    finally:
        sock.close()
        server.stop()
    assert table.size == 0


def test_a_backend_reparses_a_structure_only_when_it_changes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Sample replies name their items' structure: a backend keeps the last
    one of each table and parses a reply's form again only when it differs,
    so batches of a new structure still come back in it."""
    from fastreplay.net import sampling

    parsed: list[Any] = []
    real = sampling.structure_from_json

    def counting(form: Any) -> Any:
        parsed.append(form)
        return real(form)

    monkeypatch.setattr(sampling, "structure_from_json", counting)
    server, _ = _target()
    client = _socket_client(server.port)
    _write_dict_or_tuple_items(client, lambda i: i >= 3)
    kinds = []
    for _ in range(6):  # a queue: oldest first
        _, data = client.sample_batch("t", 1)
        kinds.append(type(data))
    assert kinds == [tuple] * 3 + [dict] * 3
    assert len(parsed) == 2  # the tuple's form, then the dict's
    server.stop()
