"""The writer step's shortcuts (session 12) give the same results as the
general paths they skip: the flatten plan's walk of a step dict in its own
key order, create_item's flat-dict item in flatten order, the h[-k:] slice,
and the table insert that bypasses the async queue."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import fastreplay
from fastreplay import errors, rate_limiters, selectors


@pytest.fixture()
def server():  # type: ignore[no-untyped-def]
    tables = [fastreplay.Table("t", selectors.Fifo(), selectors.Fifo(), 1000,
                               rate_limiters.MinSize(1), max_times_sampled=1),
              fastreplay.Table("u", selectors.Uniform(), selectors.Fifo(), 1000,
                               rate_limiters.MinSize(1))]
    server = fastreplay.Server(tables)
    yield server
    server.stop()


def _items(client, table, n):  # type: ignore[no-untyped-def]
    """The data of the n items of ``table``, oldest first (Fifo sampler)."""
    out = []
    for _ in range(n):  # max_times_sampled=1: each sample removes the oldest
        _, data = client.sample_batch(table, 1, timeout=5.0)
        out.append({k: v[0] for k, v in data.items()})
    return out


def test_step_dicts_in_changing_key_orders(server) -> None:  # type: ignore[no-untyped-def]
    client = server.localhost_client()
    with client.trajectory_writer(8) as w:
        w.append({"a": np.int32(1), "b": np.float32(2), "c": {"x": 3.0, "y": 4}})
        w.append({"b": np.float32(5), "a": np.int32(6), "c": {"y": 7, "x": 8.0}})
        w.append({"c": {"x": 9.0, "y": 10}, "a": np.int32(11), "b": np.float32(12)})
        w.append({"a": np.int32(13), "b": np.float32(14), "c": {"x": 15.0, "y": 16}})
        w.append({"a": np.int32(17), "c": {"x": 18.0}, "b": np.float32(19)})  # no y
        h = w.history
        np.testing.assert_array_equal(h["a"][:].numpy(), [1, 6, 11, 13, 17])
        np.testing.assert_array_equal(h["b"][:].numpy(), [2, 5, 12, 14, 19])
        np.testing.assert_array_equal(h["c"]["x"][:].numpy(), [3, 8, 9, 15, 18])
        np.testing.assert_array_equal(h["c"]["y"][:-1].numpy(), [4, 7, 10, 16])
        with pytest.raises(ValueError, match="None"):
            h["c"]["y"][-1:]
        # A step with a key the structure lacks adds a column (general path).
        w.append({"a": np.int32(20), "b": np.float32(21), "d": np.int8(1)})
        assert len(w.history["d"]) == 6


def test_flat_dict_items_in_any_key_order(server) -> None:  # type: ignore[no-untyped-def]
    client = server.localhost_client()
    with client.trajectory_writer(5) as w:
        for i in range(4):
            w.append({"obs": np.full(2, i, np.float32), "act": np.int32(i)})
            if i == 0:
                continue
            h = w.history
            if i % 2:
                traj = {"obs": h["obs"][-2:], "act": h["act"][-2:]}
            else:
                traj = {"act": h["act"][-2:], "obs": h["obs"][-2:]}
            w.create_item("t", 1.0, traj)
        w.flush()
    items = _items(client, "t", 3)
    for k, data in enumerate(items):
        np.testing.assert_array_equal(data["act"], [k, k + 1])
        np.testing.assert_array_equal(data["obs"], [[k, k], [k + 1, k + 1]])


def test_flat_dict_item_errors_leave_the_writer_usable(server) -> None:  # type: ignore[no-untyped-def]
    client = server.localhost_client()
    with client.trajectory_writer(5) as w:
        w.append({"obs": np.zeros(2, np.float32), "act": np.int32(0)})
        h = w.history
        w.create_item("t", 1.0, {"obs": h["obs"][-1:], "act": h["act"][-1:]})
        with pytest.raises(TypeError, match="TrajectoryColumn"):
            w.create_item("t", 1.0, {"obs": h["obs"][-1:], "act": 5})
        with pytest.raises(ValueError, match="could not be found"):
            w.create_item("nope", 1.0, {"obs": h["obs"][-1:], "act": h["act"][-1:]})
        with pytest.raises(ValueError, match="nan"):
            w.create_item("t", float("nan"), {"obs": h["obs"][-1:],
                                              "act": h["act"][-1:]})
        w.create_item("u", 2.0, {"obs": h["obs"][-1:], "act": h["act"][-1:]})
        w.flush()
    assert client.server_info()["t"].current_size == 1
    assert client.server_info()["u"].current_size == 1


def test_wide_flat_items_take_the_general_path(server) -> None:  # type: ignore[no-untyped-def]
    client = server.localhost_client()
    keys = [f"k{i:02d}" for i in range(40)]  # more than the 32 of the shortcut
    with client.trajectory_writer(2) as w:
        w.append({k: np.int32(i) for i, k in enumerate(keys)})
        w.create_item("t", 1.0, {k: w.history[k][-1:] for k in keys})
        w.flush()
    (data,) = _items(client, "t", 1)
    assert [int(data[k][0]) for k in keys] == list(range(40))


@pytest.mark.parametrize("start", [-5, -3, -1, 0, 2, 4, 5, -6, -100, 7, 10**30,
                                   -(10**30)])
def test_tail_slices_match_list_slices(server, start) -> None:  # type: ignore[no-untyped-def]
    client = server.localhost_client()
    with client.trajectory_writer(10) as w:
        for i in range(5):
            w.append({"v": np.int64(i)})
        col = w.history["v"][start:]
        want = list(range(5))[start:]
        assert len(col) == len(want)
        if want:
            np.testing.assert_array_equal(col.numpy(), want)
        # The general path for the same positions.
        assert list(col._ids) == list(w.history["v"][start:None:1]._ids)


def test_direct_inserts_keep_order_behind_held_back_ones() -> None:
    # A limiter that holds inserts back queues them; later items must not
    # overtake them once it admits again.
    table = fastreplay.Table("q", selectors.Fifo(), selectors.Fifo(), 100,
                             rate_limiters.SampleToInsertRatio(1.0, 1, 2.0),
                             max_times_sampled=1)
    server = fastreplay.Server([table])
    try:
        client = server.localhost_client()
        with client.trajectory_writer(1) as w:
            for i in range(4):
                w.append({"v": np.int32(i)})
                w.create_item("q", 1.0, {"v": w.history["v"][-1:]})
            # Two fit the limiter's error buffer (min 1, diff 2); the rest wait.
            got = []
            for _ in range(4):
                (data,) = _items(client, "q", 1)
                got.append(int(data["v"][0]))
                if len(got) < 4:
                    w.append({"v": np.int32(100 + len(got))})
            w.flush(timeout_ms=5000)
        assert got[:2] == [0, 1]
        assert sorted(got) == got[:]
    finally:
        server.stop()


@pytest.mark.parametrize("index", [-5, -1, 0, 4, np.int64(-2), np.int32(3)])
def test_int_indices_match_the_general_path(server, index) -> None:  # type: ignore[no-untyped-def]
    client = server.localhost_client()
    with client.trajectory_writer(10) as w:
        for i in range(5):
            w.append({"v": np.int64(i)})
        col = w.history["v"][index]
        assert col.is_squeezed and len(col) == 1
        assert int(col.numpy()) == list(range(5))[int(index)]


@pytest.mark.parametrize("index", [5, -6, 10**30, -(10**30)])
def test_int_indices_out_of_range(server, index) -> None:  # type: ignore[no-untyped-def]
    client = server.localhost_client()
    with client.trajectory_writer(10) as w:
        for i in range(5):
            w.append({"v": np.int64(i)})
        with pytest.raises(IndexError, match="out of range for 5 steps"):
            w.history["v"][index]
        assert len(w.history["v"][-1:]) == 1  # the writer goes on


def _ids_both_ways(h, n: int, k: int) -> tuple[list[int], list[int]]:
    """Ids of the last k of n steps through the slice (cells_range) and
    through a list of positions (cells_at, a separate path)."""
    return list(h[-k:]._ids), list(h[list(range(n - k, n))]._ids)


@contextlib.contextmanager
def _pinning_writer():  # type: ignore[no-untyped-def]
    """A client and writer whose column "v" keeps 2 cells alive while "u"
    keeps 8 in chunks of 8: items referencing u's newest cell wait for its
    chunk and pin older "v" cells past v's window."""
    table = fastreplay.Table("p", selectors.Fifo(), selectors.Fifo(), 100,
                             rate_limiters.MinSize(1))
    server = fastreplay.Server([table])
    try:
        client = server.localhost_client()
        with client.trajectory_writer(8) as w:
            w.configure(("v",), num_keep_alive_refs=2, max_chunk_length=1)
            w.configure(("u",), num_keep_alive_refs=8, max_chunk_length=8)
            yield client, w
    finally:
        server.stop()


def test_tail_slice_ids_match_positions_with_pinned_cells() -> None:
    # A slice past v's window starts with cells alive only by pins.
    with _pinning_writer() as (_, w):
        for i in range(6):
            w.append({"v": np.int64(i), "u": np.int64(i)})
            if i >= 1:
                w.create_item("p", 1.0, {"v": w.history["v"][-2:],
                                         "u": w.history["u"][-1:]})
        for k in (1, 2, 3, 4, 5):
            got, want = _ids_both_ways(w.history["v"], 6, k)
            assert got == want
        np.testing.assert_array_equal(w.history["v"][-5:].numpy(), [1, 2, 3, 4, 5])
        w.flush()


@pytest.mark.parametrize("missing_step", [0, 2, 3, 4])
def test_tail_slices_over_a_gap_raise_like_positions(server, missing_step) -> None:  # type: ignore[no-untyped-def]
    client = server.localhost_client()
    with client.trajectory_writer(10) as w:
        for i in range(5):
            step = {"a": np.int32(i)}
            if i != missing_step:
                step["b"] = np.float32(i)
            w.append(step)
        for k in range(1, 6):
            gap = missing_step >= 5 - k
            if gap:
                with pytest.raises(ValueError):
                    w.history["b"][-k:]
                with pytest.raises(ValueError):
                    w.history["b"][list(range(5 - k, 5))]
            else:
                got, want = _ids_both_ways(w.history["b"], 5, k)
                assert got == want
                np.testing.assert_array_equal(
                    w.history["b"][-k:].numpy(), np.arange(5 - k, 5, dtype=np.float32))


def test_tail_slices_after_end_episode(server) -> None:  # type: ignore[no-untyped-def]
    client = server.localhost_client()
    with client.trajectory_writer(4) as w:
        for i in range(6):
            w.append({"v": np.int64(i)})
        w.end_episode(clear_buffers=False)
        for i in range(3):
            w.append({"v": np.int64(10 + i)})
        n = 9
        for k in (1, 2, 3, 4):
            got, want = _ids_both_ways(w.history["v"], n, k)
            assert got == want
        np.testing.assert_array_equal(w.history["v"][-4:].numpy(), [5, 10, 11, 12])
        with pytest.raises(ValueError):  # outside the keep-alive window
            w.history["v"][-5:]
        w.end_episode(clear_buffers=True)
        w.append({"v": np.int64(20)})
        np.testing.assert_array_equal(w.history["v"][-1:].numpy(), [20])


def test_items_of_more_than_64_refs_keep_every_row(server) -> None:  # type: ignore[no-untyped-def]
    # Past 64 refs create_item keeps its cells and runs on the heap.
    client = server.localhost_client()
    with client.trajectory_writer(200) as w:
        w.configure(("a",), num_keep_alive_refs=200, max_chunk_length=7)
        for i in range(150):
            w.append({"a": np.int64(i), "b": np.float32(i)})
        w.create_item("t", 1.0, {"a": w.history["a"][-130:],
                                 "b": w.history["b"][list(range(149, 69, -2))]})
        w.flush()
    (data,) = _items(client, "t", 1)
    np.testing.assert_array_equal(data["a"], np.arange(20, 150))
    np.testing.assert_array_equal(data["b"], np.arange(149, 69, -2, dtype=np.float32))


def test_refs_in_many_runs_are_stored_pinned_and_released(server) -> None:  # type: ignore[no-untyped-def]
    # Repeated, strided and mixed refs make 8 runs (more than fit inline).
    client = server.localhost_client()
    with client.trajectory_writer(6) as w:
        for i in range(6):
            w.append({"v": np.int64(i), "w": np.float32(i)})
        h = w.history
        w.create_item("t", 1.0, {"a": h["v"][[5, 5, 3, 1]], "b": h["w"][[0, 2, 4]],
                                 "c": h["v"][-2:]})
        w.flush()
    (data,) = _items(client, "t", 1)
    np.testing.assert_array_equal(data["a"], [5, 5, 3, 1])
    np.testing.assert_array_equal(data["b"], [0, 2, 4])
    np.testing.assert_array_equal(data["c"], [4, 5])


def test_pins_hold_cells_while_queued_and_release_them_after() -> None:
    with _pinning_writer() as (client, w):
        w.append({"v": np.int64(0), "u": np.int64(0)})
        w.append({"v": np.int64(1), "u": np.int64(1)})
        old = w.history["v"][[0]]
        # Queued behind u's open chunk: pins v0 (twice) and v1.
        w.create_item("p", 1.0, {"v": w.history["v"][[1, 0, 0]],
                                 "u": w.history["u"][-1:]})
        for i in range(2, 6):
            w.append({"v": np.int64(i), "u": np.int64(i)})
        # v0 left v's window (2) but is pinned: still usable.
        w.create_item("p", 1.0, {"v": old, "u": w.history["u"][-1:]})
        w.flush()
        assert client.server_info()["p"].current_size == 2
        # Both items left: v0 is unpinned and expired now.
        with pytest.raises(errors.InvalidArgumentError, match="expired"):
            w.create_item("p", 1.0, {"v": old})


def _flat_writer(server):  # type: ignore[no-untyped-def]
    w = server.localhost_client().trajectory_writer(16)
    w.append({"a": np.int32(0), "b": np.float32(0), "c": np.int32(0)})
    return w


def test_flat_step_dicts_in_any_order_and_with_other_key_objects(server) -> None:  # type: ignore[no-untyped-def]
    """append's one-pass walk of a flat dict (keys and order learnt from a
    call) gives what the general walk gives: for changing orders, keys that
    are equal but other objects (learnt a few times, then the general path),
    None values and partial steps."""
    w = _flat_writer(server)
    orders = [("a", "b", "c"), ("c", "a", "b"), ("b", "c", "a")] * 3
    for i, order in enumerate(orders, start=1):
        values = {"a": np.int32(i), "b": np.float32(10 * i), "c": np.int32(100 * i)}
        # New key objects on odd steps: equal strings, other identities.
        keys = [k if i % 2 == 0 else "".join(list(k)) for k in order]
        w.append({k: values[k[0]] for k in keys})
    n = len(orders)
    w.append({"a": np.int32(-1), "b": None, "c": np.int32(-3)})  # b has no value
    w.append({"a": np.int32(-4)}, partial_step=True)
    w.append({"b": np.float32(-5), "c": np.int32(-6)})
    h = w.history
    np.testing.assert_array_equal(h["a"][:].numpy(), [0, *range(1, n + 1), -1, -4])
    np.testing.assert_array_equal(h["b"][:n + 1].numpy(),
                                  [0, *(10 * i for i in range(1, n + 1))])
    np.testing.assert_array_equal(h["b"][-1:].numpy(), [-5])
    with pytest.raises(ValueError, match="None"):
        h["b"][-2:-1]
    np.testing.assert_array_equal(h["c"][:].numpy(),
                                  [0, *(100 * i for i in range(1, n + 1)), -3, -6])
    w.close()


def test_flat_step_dict_refusals_match_the_general_walk(server) -> None:  # type: ignore[no-untyped-def]
    """Refused flat steps: the first bad column in column order is named
    (as the general walk reports it), a nest where a leaf was is the general
    path's mismatch, and nothing is written."""
    w = _flat_writer(server)
    for _ in range(2):  # the second time through the learnt order
        with pytest.raises(errors.InvalidArgumentError,
                           match=r"column \('b',\)\. Got int64 but expected float"):
            w.append({"c": np.float64(1), "b": np.int64(2), "a": np.int32(3)})
        with pytest.raises(ValueError, match=r"Structure mismatch at \('a',\)"):
            w.append({"a": {"x": 1}, "b": np.float32(2), "c": np.int32(3)})
        assert len(w.history["a"]) == 1
    w.append({"c": np.int32(7), "b": np.float32(8), "a": np.int32(9)})
    np.testing.assert_array_equal(w.history["c"][:].numpy(), [0, 7])
    w.close()


def test_history_slice_items_match_items_of_their_refs(server) -> None:  # type: ignore[no-untyped-def]
    """An item of history slices (one run of consecutive cells per column,
    create_item's runs path) stores what the same cells given as WeakCellRef
    lists store (the general path), and refuses expired cells the same way."""
    client = server.localhost_client()
    with client.trajectory_writer(4) as w:
        steps = [w.append({"a": np.int32(i), "b": np.float32(-i)}) for i in range(7)]
        h = w.history
        for k in (1, 3, 4):
            w.create_item("t", 1.0, {"a": h["a"][-k:], "b": h["b"][-1]})
            w.create_item("t", 1.0, {
                "a": fastreplay.TrajectoryColumn([s["a"] for s in steps[-k:]]),
                "b": fastreplay.TrajectoryColumn([steps[-1]["b"]], squeeze=True)})
        old = {"a": h["a"][-4:]}
        refs = {"a": fastreplay.TrajectoryColumn([s["a"] for s in steps[-4:]])}
        w.append({"a": np.int32(7), "b": np.float32(-7)})  # steps[-4] expires
        messages = []
        for item in (old, refs):
            with pytest.raises(errors.InvalidArgumentError) as info:
                w.create_item("t", 1.0, item)
            messages.append(str(info.value))
        assert messages[0] == messages[1] and "expired" in messages[0]
        w.flush()
    got = _items(client, "t", 6)
    for a, b in zip(got[::2], got[1::2], strict=True):
        np.testing.assert_array_equal(a["a"], b["a"])
        np.testing.assert_array_equal(a["b"], b["b"])
    assert [list(g["a"]) for g in got[::2]] == [[6], [4, 5, 6], [3, 4, 5, 6]]


def test_a_writers_item_keys_are_consecutive_from_a_random_start(server) -> None:  # type: ignore[no-untyped-def]
    """Consecutive keys share key-map cache lines (keymap.h); two writers
    start far apart, so their keys stay unique."""
    client = server.localhost_client()
    starts = []
    for _ in range(2):
        with client.trajectory_writer(2) as w:
            for i in range(6):
                w.append({"x": np.float32(i)})
                w.create_item("t", 1.0, {"x": w.history["x"][-1:]})
        keys = [int(client.sample_batch("t", 1, timeout=5.0)[0].key[0])
                for _ in range(6)]  # Fifo, max_times_sampled=1: oldest first
        assert keys == [keys[0] + i for i in range(6)]
        starts.append(keys[0])
    assert abs(starts[0] - starts[1]) > 1_000_000


def test_history_slices_reuse_only_columns_nothing_else_holds(server) -> None:  # type: ignore[no-untyped-def]
    """A slice refills the column object of the previous slice only when no
    one else holds it: held columns keep their cells through later slices."""
    client = server.localhost_client()
    with client.trajectory_writer(4) as w:
        for i in range(3):
            w.append({"x": np.float32(i)})
        h = w.history["x"]
        held = h[-2:]
        ids = held._ids.tolist()
        w.append({"x": np.float32(3)})
        other = h[-3:]  # held is still referenced: a new object
        assert other is not held and held._ids.tolist() == ids and len(held) == 2
        np.testing.assert_array_equal(held.numpy(), [1, 2])
        np.testing.assert_array_equal(other.numpy(), [1, 2, 3])
        first = id(h[-1])  # dropped at once: the next slice may reuse it
        last = h[-1:]
        assert len(last) == 1 and not last.is_squeezed
        np.testing.assert_array_equal(last.numpy(), [3])
        del first
        item = {"x": h[-2:]}  # held by the dict through more slices
        h[-4:], h[-1]
        w.create_item("t", 1.0, item)
        w.flush()
    assert client.sample_batch("t", 1, timeout=5.0)[1]["x"].tolist() == [[2.0, 3.0]]
