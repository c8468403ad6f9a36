"""TrajectoryWriter behaviour (reverb-spec section 1, Reverb's
trajectory_writer_test.py / trajectory_writer_test.cc, and regression tests
for the Reverb bugs of section 8 that fastreplay fixes).

Data is always read back through real tables: a Fifo sampler with
``max_times_sampled=1`` returns items exactly once, in insertion order.
"""

from __future__ import annotations

import collections
import gc
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import fastreplay
from fastreplay import (
    AutoTunedChunkerOptions,
    ChunkStore,
    ConstantChunkerOptions,
    Table,
    TrajectoryColumn,
    TrajectoryWriter,
    VectorTrajectoryWriter,
    WeakCellRef,
)
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay.errors import DeadlineExceededError, ReverbError, TableClosedError

CLOSED = "TrajectoryWriter::Close has been called."


# ----- helpers -----


def fifo_table(name: str = "t", max_size: int = 10_000, **kwargs: Any) -> Table:
    """A table that returns every item once, oldest first."""
    return Table(name, sel.Fifo(), sel.Fifo(), max_size, rl.MinSize(1),
                 max_times_sampled=1, **kwargs)


def read_all(table: Table) -> list[list[Any]]:
    """The data of every item in the table, in insertion order (consumes
    them)."""
    n = len(table)
    if n == 0:
        return []
    samples = table.sample_items(n, timeout=5.0)
    assert len(samples) == n
    return [s.data for s in samples]


def values(column_history: Any) -> list[Any]:
    """The values of a column history, None where the step has none."""
    return [None if ref is None else ref.numpy().item() for ref in column_history]


def layout(writer: TrajectoryWriter) -> dict[Any, list[Any]]:
    """Flat {path: values} view of writer.history."""
    return {path: values(_get(writer.history, path))
            for path in writer._columns.paths}


def _get(nest: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        nest = getattr(nest, key) if isinstance(key, str) and hasattr(
            nest, "_fields") else nest[key]
    return nest


def assert_data_equal(got: list[Any], want: list[Any]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=False):
        w = np.asarray(w)
        g = np.asarray(g)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape, (g.shape, w.shape)
        np.testing.assert_array_equal(g, w)


def run_bounded(fn: Callable[[], Any], seconds: float) -> BaseException | None:
    """Run fn in a daemon thread; fail if it has not returned after
    ``seconds``.  Returns the exception it raised, if any."""
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"call still blocked after {seconds} s"
    return outcome[0]


def blocked_queue_writer(num_items: int = 4) -> tuple[Table, TrajectoryWriter]:
    """A queue of size 1 and a writer with num_items items for it: one is
    inserted, the others wait for the rate limiter."""
    table = Table.queue("q", 1)
    writer = TrajectoryWriter(table, 2)
    writer.append({"x": 1})
    for _ in range(num_items):
        writer.create_item("q", 1.0, {"x": writer.history["x"][-1:]})
    return table, writer


Point = collections.namedtuple("Point", ["a", "b"])


# ----- construction -----


@pytest.mark.parametrize("keep", [0, -1])
def test_constructor_rejects_non_positive_keep_alive(keep: int) -> None:
    with pytest.raises(ValueError, match=re.escape(
            f"num_keep_alive_refs ({keep}) must be a positive integer")):
        TrajectoryWriter(fifo_table(), keep)


def test_constructor_accepts_table_list_and_dict() -> None:
    a, b = fifo_table("a"), fifo_table("b")
    for tables in ([a, b], {"a": a, "b": b}):
        w = TrajectoryWriter(tables, 2)
        w.append({"x": 1})
        w.create_item("a", 1.0, {"x": w.history["x"][-1]})
        w.create_item("b", 1.0, {"x": w.history["x"][-1]})
        w.flush()
        assert (len(a), len(b)) == (1, 1)
        assert read_all(a) == read_all(b) == [[1]]


# ----- structure and history -----


def test_history_before_append_raises() -> None:
    w = TrajectoryWriter(fifo_table(), 2)
    with pytest.raises(RuntimeError, match=re.escape(
            "history cannot be accessed before `append` is called at least once.")):
        _ = w.history


def test_history_of_flat_leaf_data() -> None:
    """A single (non-nest) leaf: history *is* the column history."""
    w = TrajectoryWriter(fifo_table(), 5)
    for i in range(3):
        w.append(i)
    history = w.history
    assert len(history) == 3
    assert values(history) == [0, 1, 2]
    assert history[-1].numpy() == 2


def test_history_of_flat_numpy_leaf_data() -> None:
    w = TrajectoryWriter(fifo_table(), 5)
    w.append(np.arange(3, dtype=np.float32))
    w.append(np.arange(3, 6, dtype=np.float32))
    np.testing.assert_array_equal(w.history[:].numpy(),
                                  np.arange(6, dtype=np.float32).reshape(2, 3))


def test_history_structured_refs_with_none_padding() -> None:
    w = TrajectoryWriter(fifo_table(), 10)
    w.append({"observation": 1, "first_step": True})
    w.append({"action": 2, "reward": 101})
    w.append({"action": 3, "reward": 103})
    assert layout(w) == {
        ("observation",): [1, None, None],
        ("first_step",): [True, None, None],
        ("action",): [None, 2, 3],
        ("reward",): [None, 101, 103],
    }
    history = w.history
    assert sorted(history) == ["action", "first_step", "observation", "reward"]
    for key, column in history.items():
        assert len(column) == 3
        assert column._path == (key,)


def test_history_structure_evolves_with_exact_none_layout() -> None:
    w = TrajectoryWriter(fifo_table(), 10)
    w.append({"x": 1, "z": 2})
    assert layout(w) == {("x",): [1], ("z",): [2]}

    w.append({"z": 3, "y": 4})
    assert layout(w) == {("x",): [1, None], ("z",): [2, 3], ("y",): [None, 4]}

    w.append({"w": 5})
    assert layout(w) == {
        ("x",): [1, None, None],
        ("z",): [2, 3, None],
        ("y",): [None, 4, None],
        ("w",): [None, None, 5],
    }

    w.append({"x": 6, "w": 7})
    assert layout(w) == {
        ("x",): [1, None, None, 6],
        ("z",): [2, 3, None, None],
        ("y",): [None, 4, None, None],
        ("w",): [None, None, 5, 7],
    }
    # New paths get new column indices at the end; existing ones never move.
    assert w._columns.paths == [("x",), ("z",), ("y",), ("w",)]
    assert [w._columns.index[p] for p in w._columns.paths] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "first, second, want",
    [
        ((0,), (1, 2), {(0,): [0, 1], (1,): [None, 2]}),
        ({"x": 0}, {"x": 1, "y": 2}, {("x",): [0, 1], ("y",): [None, 2]}),
        ([0], [1, 2], {(0,): [0, 1], (1,): [None, 2]}),
        ((Point(0, None),), (Point(1, 2),),
         {(0, "a"): [0, 1], (0, "b"): [None, 2]}),
        ((Point(0, 1),), (Point(2, 3), 4),
         {(0, "a"): [0, 2], (0, "b"): [1, 3], (1,): [None, 4]}),
        ({"n": [0]}, {"n": [1, 2], "m": (3,)},
         {("n", 0): [0, 1], ("n", 1): [None, 2], ("m", 0): [None, 3]}),
    ],
    ids=["tuple", "dict", "list", "namedtuple-field", "namedtuple-in-tuple",
         "nested"],
)
def test_append_with_more_fields(first: Any, second: Any,
                                 want: dict[Any, list[Any]]) -> None:
    w = TrajectoryWriter(fifo_table(), 10)
    w.append(first)
    w.append(second)
    assert layout(w) == want


def test_history_keeps_container_types() -> None:
    w = TrajectoryWriter(fifo_table(), 10)
    w.append({"p": Point(1, 2.0), "l": [3], "t": (4,)})
    h = w.history
    assert isinstance(h["p"], Point)
    assert isinstance(h["l"], list)
    assert isinstance(h["t"], tuple) and not isinstance(h["t"], Point)
    assert h["p"].b[-1].numpy() == 2.0


def test_append_returns_structured_references() -> None:
    w = TrajectoryWriter(fifo_table(), 10)
    w.append({"a": 0, "b": 0.5})
    refs = w.append({"a": 1, "nest": {"c": np.float32(2)}})
    assert isinstance(refs["a"], WeakCellRef)
    assert refs["a"].numpy() == 1
    assert refs["nest"]["c"].numpy() == np.float32(2)
    assert refs["nest"]["c"].dtype == np.float32
    assert sorted(refs.materialize()) == ["a", "nest"]  # only the given paths
    refs = w.append({"a": 2, "b": None})
    assert refs["b"] is None


def test_step_references_stay_bound_to_their_cells() -> None:
    """References returned by append name the appended cells: once those
    expire the references report it, even after later steps reuse the same
    history positions."""
    table = fifo_table()
    w = TrajectoryWriter(table, 2)
    refs = w.append({"x": 1})
    w.end_episode()  # clears buffers: every earlier cell expires
    w.append({"x": 2})  # the new episode's step 0
    ref = refs["x"]
    assert isinstance(ref, WeakCellRef)
    assert ref.expired
    with pytest.raises(RuntimeError, match="expired"):
        ref.numpy()
    with pytest.raises(ValueError, match="expired CellRef"):
        w.create_item("t", 1.0, {"x": TrajectoryColumn([ref])})

    refs = w.append({"x": 3})
    for i in range(3):
        w.append({"x": i})
    assert isinstance(refs["x"], WeakCellRef)
    assert refs["x"].expired
    w.flush()
    assert len(table) == 0


def test_append_copies_the_data() -> None:
    w = TrajectoryWriter(fifo_table(), 10)
    x = np.arange(4)
    w.append({"x": x})
    x[:] = -1
    np.testing.assert_array_equal(w.history["x"][0].numpy(), np.arange(4))


def test_append_accepts_non_native_and_non_contiguous_arrays() -> None:
    table = fifo_table()
    w = TrajectoryWriter(table, 10)
    w.append({"x": np.array([1, 2], dtype=">i4")})
    w.append({"x": np.array([3, 4], dtype="<i4")})
    w.append({"x": np.arange(10, dtype=np.int32)[1:5:2]})  # strided view
    col = w.history["x"][:]
    assert col.dtype == np.int32
    np.testing.assert_array_equal(col.numpy(), [[1, 2], [3, 4], [1, 3]])
    w.create_item("t", 1.0, {"x": col})
    w.flush()
    assert_data_equal(read_all(table)[0],
                      [np.array([[1, 2], [3, 4], [1, 3]], np.int32)])


def test_python_scalars_map_to_reverb_dtypes() -> None:
    w = TrajectoryWriter(fifo_table(), 10)
    w.append({"i": 1, "f": 1.5, "b": True})
    assert w.history["i"][0].dtype == np.int64
    assert w.history["f"][0].dtype == np.float64
    assert w.history["b"][0].dtype == np.bool_


# ----- partial steps -----


def test_partial_append_fills_the_same_step() -> None:
    w = TrajectoryWriter(fifo_table(), 10)
    w.append({"x": 1, "z": 2}, partial_step=True)
    assert layout(w) == {("x",): [1], ("z",): [2]}
    assert w.episode_steps == 0

    w.append({"y": 4}, partial_step=True)
    assert layout(w) == {("x",): [1], ("z",): [2], ("y",): [4]}
    assert w.episode_steps == 0

    w.append({"w": 5})
    assert layout(w) == {("x",): [1], ("z",): [2], ("y",): [4], ("w",): [5]}
    assert w.episode_steps == 1

    w.append({"w": 6})
    assert layout(w) == {("x",): [1, None], ("z",): [2, None],
                         ("y",): [4, None], ("w",): [5, 6]}
    assert w.episode_steps == 2


def test_column_repeated_in_a_step_raises_and_leaves_the_step_open() -> None:
    table = fifo_table()
    w = TrajectoryWriter(table, 10)
    w.append({"x": 1, "z": 2}, partial_step=True)
    # None for an already set column plus a new column is fine.
    w.append({"x": None, "y": 3}, partial_step=True)
    with pytest.raises(ValueError, match=re.escape(
            "Field ('x',) has already been set in the active step by previous "
            "(partial) append call and thus must be omitted or set to None but "
            "got: 4")):
        w.append({"x": 4})
    # Nothing of the rejected call was written and the step is still open.
    assert w.episode_steps == 0
    assert layout(w) == {("x",): [1], ("z",): [2], ("y",): [3]}
    w.append({"z": None})
    assert w.episode_steps == 1
    w.append({"x": 5, "z": 6, "y": 7})
    assert layout(w) == {("x",): [1, 5], ("z",): [2, 6], ("y",): [3, 7]}
    w.create_item("t", 1.0, {"x": w.history["x"][:], "y": w.history["y"][:]})
    w.flush()
    assert_data_equal(read_all(table)[0], [np.array([1, 5]), np.array([3, 7])])


def test_repeated_nested_field_message_names_the_path() -> None:
    w = TrajectoryWriter(fifo_table(), 10)
    w.append({"n": {"a": 1}}, partial_step=True)
    with pytest.raises(ValueError, match=re.escape(
            "Field ('n', 'a') has already been set in the active step")):
        w.append({"n": {"a": 2}})


def test_items_can_reference_an_open_partial_step() -> None:
    table = fifo_table()
    w = TrajectoryWriter(table, 10)
    w.append({"obs": 1.0, "act": 0})
    w.append({"obs": 2.0}, partial_step=True)
    w.create_item("t", 1.0, {"obs": w.history["obs"][-2:]})
    w.flush()
    w.append({"act": 1})
    w.create_item("t", 1.0, {"act": w.history["act"][-2:]})
    w.flush()
    got = read_all(table)
    assert_data_equal(got[0], [np.array([1.0, 2.0])])
    assert_data_equal(got[1], [np.array([0, 1])])


# ----- history indexing -----


@pytest.fixture
def five_steps() -> tuple[Table, TrajectoryWriter]:
    table = fifo_table()
    w = TrajectoryWriter(table, 10)
    for i in range(5):
        w.append({"x": i * 10})
    return table, w


def test_history_int_index_is_squeezed(five_steps: Any) -> None:
    _, w = five_steps
    h = w.history["x"]
    for i, want in [(0, 0), (2, 20), (4, 40), (-1, 40), (-5, 0)]:
        col = h[i]
        assert isinstance(col, TrajectoryColumn)
        assert col.is_squeezed
        assert len(col) == 1
        assert col.shape == ()
        assert col.numpy() == want
    assert h[np.int64(3)].numpy() == 30


def test_history_slice_and_list_are_not_squeezed(five_steps: Any) -> None:
    _, w = five_steps
    h = w.history["x"]
    cases: list[tuple[Any, list[int]]] = [
        (slice(None), [0, 10, 20, 30, 40]),
        (slice(1, 3), [10, 20]),
        (slice(-2, None), [30, 40]),
        (slice(None, None, 2), [0, 20, 40]),
        (slice(None, None, -1), [40, 30, 20, 10, 0]),
        (slice(10, 20), []),
        ([0, -1], [0, 40]),
        ([1, 0, 2], [10, 0, 20]),
        ([4, 1, 3], [40, 10, 30]),
        ([2, 2], [20, 20]),
    ]
    for index, want in cases:
        col = h[index]
        assert not col.is_squeezed
        assert len(col) == len(want)
        if want:
            assert col.shape == (len(want),)
            np.testing.assert_array_equal(col.numpy(), want)


@pytest.mark.parametrize("index", [5, 6, -6, 100, -100])
def test_history_int_index_out_of_range_raises_index_error(
        five_steps: Any, index: int) -> None:
    """Reverb returned the oldest element for h[len(h)] (spec section 8.5)."""
    _, w = five_steps
    with pytest.raises(IndexError):
        _ = w.history["x"][index]


@pytest.mark.parametrize("index", [[0, 5], [-6], [7, 1]])
def test_history_list_index_out_of_range_raises_index_error(
        five_steps: Any, index: list[int]) -> None:
    _, w = five_steps
    with pytest.raises(IndexError):
        _ = w.history["x"][index]


@pytest.mark.parametrize("index", [1.0, "0", (0, 1), None])
def test_history_rejects_other_index_types(five_steps: Any, index: Any) -> None:
    _, w = five_steps
    with pytest.raises(TypeError):
        _ = w.history["x"][index]


def test_history_position_without_value_is_rejected() -> None:
    w = TrajectoryWriter(fifo_table(), 10)
    w.append({"x": 1})
    w.append({"y": 2})
    with pytest.raises(ValueError, match=re.escape(
            "TrajectoryColumns cannot contain any None data references")):
        _ = w.history["x"][1]
    with pytest.raises(ValueError, match="None data references"):
        _ = w.history["x"][:]
    assert values(w.history["x"]) == [1, None]


def test_history_iterates_refs_and_none() -> None:
    w = TrajectoryWriter(fifo_table(), 10)
    w.append({"x": 1})
    w.append({"y": 2})
    refs = list(w.history["x"])
    assert isinstance(refs[0], WeakCellRef) and refs[1] is None


# ----- expiry -----


def test_refs_expire_after_num_keep_alive_refs() -> None:
    w = TrajectoryWriter(fifo_table(), 3)
    refs = [w.append({"x": np.float32(i)})["x"] for i in range(3)]
    assert [r.expired for r in refs] == [False] * 3
    assert refs[0].numpy() == 0.0
    assert refs[0].shape == []
    assert refs[0].dtype == np.float32
    refs.append(w.append({"x": np.float32(3)})["x"])
    assert [r.expired for r in refs] == [True, False, False, False]
    for attr in ("numpy", "shape", "dtype"):
        with pytest.raises(RuntimeError, match=re.escape(
                "Cannot access data from expired WeakCellRef")):
            value = getattr(refs[0], attr)
            if attr == "numpy":
                value()
    # History no longer resolves the expired position.
    with pytest.raises(ValueError, match="None data references"):
        _ = w.history["x"][0]
    np.testing.assert_array_equal(w.history["x"][1:].numpy(), [1, 2, 3])


def test_keep_alive_counts_appends_of_the_column() -> None:
    """A column holds its last num_keep_alive_refs cells, however many steps
    they span (steps where it is None do not count)."""
    w = TrajectoryWriter(fifo_table(), 2)
    refs = []
    for i in range(6):
        step = {"every": i}
        if i % 3 == 0:
            step["rare"] = i
        r = w.append(step)
        if i % 3 == 0:
            refs.append(r["rare"])
    assert [r.expired for r in refs] == [False, False]  # steps 0 and 3
    np.testing.assert_array_equal(w.history["rare"][[0, 3]].numpy(), [0, 3])
    w.append({"rare": 6})
    assert [r.expired for r in refs] == [True, False]


def test_create_item_with_expired_ref_raises() -> None:
    table = fifo_table()
    w = TrajectoryWriter(table, 2)
    w.append({"x": 1})
    w.append({"x": 2})
    column = w.history["x"][0:2]
    w.append({"x": 3})
    with pytest.raises(ValueError, match=re.escape(
            "Error in column 0: Column contains expired CellRef.")):
        w.create_item("t", 1.0, {"x": column})
    with pytest.raises(ValueError, match=re.escape(
            "Error in column 1: Column contains expired CellRef.")):
        w.create_item("t", 1.0, {"a": w.history["x"][-1], "b": column})
    assert w.num_pending_items == 0
    w.flush()
    assert len(table) == 0


def test_pending_item_keeps_its_cells_alive_until_inserted() -> None:
    table = fifo_table()
    w = TrajectoryWriter(table, 1, chunker_options=ConstantChunkerOptions(1, 1))
    w.configure(("y",), num_keep_alive_refs=5, max_chunk_length=5)
    step = w.append({"x": 0, "y": 0})
    refs = {"x": step["x"], "y": step["y"]}
    # The item waits for y's chunk (5 steps) and pins x[0] meanwhile.
    w.create_item("t", 1.0, {"x": w.history["x"][0], "y": w.history["y"][0]})
    unpinned = w.append({"x": 1, "y": 1})["x"]
    for i in range(2, 4):
        w.append({"x": i, "y": i})
    assert w.num_pending_items == 1 and len(table) == 0
    assert unpinned.expired  # beyond the window of 1 and not pinned
    assert not refs["x"].expired
    assert refs["x"].numpy() == 0
    w.append({"x": 4, "y": 4})  # y's chunk is complete: the item goes out
    assert w.num_pending_items == 0 and len(table) == 1
    assert refs["x"].expired
    assert not refs["y"].expired  # y keeps 5 cells alive
    assert_data_equal(read_all(table)[0], [np.array(0), np.array(0)])


def test_items_leave_in_order_and_flush_releases_pinned_cells() -> None:
    table = fifo_table()
    w = TrajectoryWriter(table, 1, chunker_options=ConstantChunkerOptions(1, 1))
    w.configure(("y",), num_keep_alive_refs=5, max_chunk_length=5)
    x0 = w.append({"x": 0, "y": 10})["x"]
    w.create_item("t", 1.0, {"y": w.history["y"][0]})  # waits for y's chunk
    w.create_item("t", 1.0, {"x": w.history["x"][0]})  # ready, but queued behind
    w.append({"x": 1})
    w.append({"x": 2})
    assert w.num_pending_items == 2 and len(table) == 0
    assert not x0.expired  # pinned by the second item
    w.flush()
    assert w.num_pending_items == 0
    assert x0.expired
    assert [d[0].item() for d in read_all(table)] == [10, 0]


# ----- configure -----


@pytest.mark.parametrize(
    "keep, max_len, valid",
    [(1, None, True), (0, None, False), (-1, None, False), (1, 1, True),
     (1, 0, False), (1, -1, False), (5, 5, True), (4, 5, False)],
)
def test_configure_validates_params(keep: int, max_len: int | None,
                                    valid: bool) -> None:
    w = TrajectoryWriter(fifo_table(), 2)
    if valid:
        w.configure(("a",), num_keep_alive_refs=keep, max_chunk_length=max_len)
        w.append({"a": 1})
        info = w._core.column_info(w._columns.index[("a",)])
        assert info["num_keep_alive_refs"] == keep
        assert info["autotune"] is (max_len is None)
        if max_len is not None:
            assert info["max_chunk_length"] == max_len
    elif keep < 1:
        with pytest.raises(ValueError, match=re.escape(
                f"num_keep_alive_refs ({keep}) must be a positive integer")):
            w.configure(("a",), num_keep_alive_refs=keep, max_chunk_length=max_len)
    else:
        with pytest.raises(ValueError, match=re.escape(
                f"max_chunk_length ({max_len}) must be None or a positive integer "
                f"<= num_keep_alive_refs ({keep})")):
            w.configure(("a",), num_keep_alive_refs=keep, max_chunk_length=max_len)


def test_configure_seen_column_applies_now() -> None:
    w = TrajectoryWriter(fifo_table(), 4)
    w.append({"x": 3, "y": 2})
    # Auto-tuned columns start with chunks of 1 cell: the buffers are empty.
    w.configure(("x",), num_keep_alive_refs=2, max_chunk_length=1)
    x = w._core.column_info(w._columns.index[("x",)])
    assert (x["num_keep_alive_refs"], x["max_chunk_length"], x["autotune"]) == (
        2, 1, False)
    y = w._core.column_info(w._columns.index[("y",)])
    assert (y["num_keep_alive_refs"], y["autotune"]) == (4, True)

    w.configure(("y",), num_keep_alive_refs=3, max_chunk_length=None)
    y = w._core.column_info(w._columns.index[("y",)])
    assert (y["num_keep_alive_refs"], y["autotune"]) == (3, True)


def test_configure_unseen_column_applies_on_first_appearance() -> None:
    w = TrajectoryWriter(fifo_table(), 4)
    w.append({"x": 3, "y": 2})
    w.configure(("z",), num_keep_alive_refs=2, max_chunk_length=1)
    assert ("z",) not in w._columns.index
    w.append({"a": 4})
    w.append({"z": 5})
    assert w._columns.index[("z",)] == 3
    info = w._core.column_info(3)
    assert (info["num_keep_alive_refs"], info["max_chunk_length"],
            info["autotune"]) == (2, 1, False)
    assert w.max_num_keep_alive_refs == 4
    refs = [w.append({"z": i})["z"] for i in range(3)]
    assert [r.expired for r in refs] == [True, False, False]


def test_configure_lowering_keep_alive_expires_older_refs() -> None:
    w = TrajectoryWriter(fifo_table(), 5,
                         chunker_options=ConstantChunkerOptions(1, 5))
    refs = [w.append({"x": i})["x"] for i in range(5)]
    w.configure(("x",), num_keep_alive_refs=2, max_chunk_length=1)
    assert [r.expired for r in refs] == [True, True, True, False, False]


# ----- episodes -----


def test_episode_steps_count_appends_and_reset_on_end_episode() -> None:
    w = TrajectoryWriter(Table.queue("q", 1), 1)
    for _ in range(3):
        assert w.episode_steps == 0
        for i in range(1, 21):
            w.append({"x": 3, "y": 2})
            assert w.episode_steps == i
        w.end_episode()


def test_episode_steps_with_partial_steps() -> None:
    w = TrajectoryWriter(Table.queue("q", 1), 1)
    for _ in range(3):
        assert w.episode_steps == 0
        for i in range(1, 4):
            w.append({"x": 3}, partial_step=True)
            assert w.episode_steps == i - 1
            w.append({"y": 2})
            assert w.episode_steps == i
        w.end_episode()


@pytest.mark.parametrize("clear_buffers", [True, False])
def test_end_episode_resets_episode_steps(clear_buffers: bool) -> None:
    w = TrajectoryWriter(Table.queue("q", 1), 3)
    assert w.episode_steps == 0
    w.append([1])
    w.append([2])
    assert w.episode_steps == 2
    w.end_episode(clear_buffers=clear_buffers)
    assert w.episode_steps == 0
    assert len(w.history[0]) == (0 if clear_buffers else 2)
    w.append([3])
    assert w.episode_steps == 1
    assert len(w.history[0]) == (1 if clear_buffers else 3)


def test_end_episode_clear_buffers_expires_every_ref() -> None:
    table = fifo_table()
    w = TrajectoryWriter(table, 5)
    refs = [w.append({"x": i})["x"] for i in range(3)]
    w.create_item("t", 1.0, {"x": w.history["x"][:]})
    w.end_episode(clear_buffers=True)
    assert all(r.expired for r in refs)
    assert w.num_pending_items == 0
    assert_data_equal(read_all(table)[0], [np.array([0, 1, 2])])
    # Structure and column indices are kept.
    w.append({"y": 1.0})
    assert w._columns.paths == [("x",), ("y",)]
    assert layout(w) == {("x",): [None], ("y",): [1.0]}


def test_end_episode_without_clearing_allows_items_spanning_episodes() -> None:
    table = fifo_table()
    w = TrajectoryWriter(table, 6)
    refs = [w.append({"x": i})["x"] for i in range(3)]
    w.end_episode(clear_buffers=False)
    assert not any(r.expired for r in refs)
    for i in range(3, 5):
        w.append({"x": i})
    assert w.episode_steps == 2
    w.create_item("t", 1.0, {"x": w.history["x"][1:5]})
    w.flush()
    assert_data_equal(read_all(table)[0], [np.array([1, 2, 3, 4])])


def test_end_episode_without_clearing_after_partial_step() -> None:
    """Data appended after end_episode(clear_buffers=False) that interrupted
    a partial step must be what history and items see."""
    table = fifo_table()
    w = TrajectoryWriter(table, 10)
    w.append({"a": 1, "b": 2})
    w.append({"a": 3}, partial_step=True)
    w.end_episode(clear_buffers=False)
    assert w.episode_steps == 0
    w.append({"a": 5, "b": 6})
    assert w.episode_steps == 1
    assert w.history["b"][-1].numpy() == 6
    assert w.history["a"][-1].numpy() == 5
    w.create_item("t", 1.0, {"a": w.history["a"][-1], "b": w.history["b"][-1]})
    w.flush()
    assert_data_equal(read_all(table)[0], [np.array(5), np.array(6)])


# ----- append validation -----


def _nested_writer() -> tuple[Table, TrajectoryWriter]:
    table = fifo_table()
    w = TrajectoryWriter(table, 10)
    w.append({"scalar": 1, "nest": {"sub": 1.0, "sub_list": [1, 2, 3]}})
    return table, w


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"scalar": 1.0}, "Tensor of wrong dtype provided for column ('scalar',). "
                          "Got double but expected int64."),
        ({"nest": {"sub": 1}}, "Tensor of wrong dtype provided for column "
                               "('nest', 'sub'). Got int64 but expected double."),
        ({"nest": {"sub_list": [1, 2, np.float32(3)]}},
         "Tensor of wrong dtype provided for column ('nest', 'sub_list', 2). "
         "Got float but expected int64."),
        ({"scalar": np.array([1, 2])},
         "Tensor of incompatible shape provided for column ('scalar',). "
         "Got [2] which is incompatible with []."),
        ({"nest": {"sub": np.zeros((2, 3))}},
         "Tensor of incompatible shape provided for column ('nest', 'sub'). "
         "Got [2,3] which is incompatible with []."),
    ],
)
def test_dtype_and_shape_errors_name_the_path_and_leave_writer_intact(
        bad: dict[str, Any], message: str) -> None:
    table, w = _nested_writer()
    # The valid columns of the bad step must not be written either.
    step = {"scalar": 7, "nest": {"sub": 7.0, "sub_list": [7, 7, 7]}}
    for key, value in bad.items():
        if isinstance(value, dict):
            step[key] = {**step[key], **value}
        else:
            step[key] = value
    with pytest.raises(ValueError, match=re.escape(message)):
        w.append(step)
    assert w.episode_steps == 1
    assert len(w.history["scalar"]) == 1
    w.append({"scalar": 2, "nest": {"sub": 2.0, "sub_list": [4, 5, 6]}})
    assert w.episode_steps == 2
    w.create_item("t", 1.0, {
        "scalar": w.history["scalar"][:],
        "sub": w.history["nest"]["sub"][:],
        "last": w.history["nest"]["sub_list"][2][:],
    })
    w.flush()
    assert_data_equal(read_all(table)[0], [
        np.array([3, 6]),  # "last"
        np.array([1, 2]),  # "scalar"
        np.array([1.0, 2.0]),  # "sub"
    ])


def test_bad_partial_append_keeps_step_state() -> None:
    _, w = _nested_writer()
    w.append({"scalar": 2}, partial_step=True)
    with pytest.raises(ValueError, match="wrong dtype"):
        w.append({"nest": {"sub": 1}}, partial_step=True)
    w.append({"nest": {"sub": 3.0}})
    assert w.episode_steps == 2
    assert values(w.history["nest"]["sub"]) == [1.0, 3.0]
    assert values(w.history["scalar"]) == [1, 2]


# (str and bytes are supported: tests/test_strings.py.)
@pytest.mark.parametrize("value", [np.datetime64("2020-01-01"),
                                   np.array([1, None], dtype=object),
                                   np.array([object()], dtype=object)])
def test_unsupported_dtype_raises_type_error(value: Any) -> None:
    w = TrajectoryWriter(fifo_table(), 10)
    w.append({"x": 1})
    with pytest.raises(TypeError):
        w.append({"x": 2, "s": value})
    assert w.episode_steps == 1
    w.append({"x": 2})
    assert values(w.history["x"])[-1] == 2


# ----- create_item validation -----


def test_create_item_rejects_non_trajectory_column_leaves() -> None:
    w = TrajectoryWriter(fifo_table(), 10)
    w.append({"x": 3, "y": 2})
    w.append({"x": 3, "y": 2})
    w.create_item("t", 1.0, {"x": w.history["x"][0], "y": w.history["y"][:]})
    for bad in (w.history["y"][:].numpy(), [w.append({"x": 1})["x"]], 1.0):
        with pytest.raises(TypeError):
            w.create_item("t", 1.0, {"x": w.history["x"][0], "y": bad})


@pytest.mark.parametrize("trajectory", [
    {}, [], {"x": "empty"}, {"x": "empty", "y": "empty"}])
def test_create_item_rejects_empty_trajectories(trajectory: Any) -> None:
    w = TrajectoryWriter(fifo_table(), 10)
    w.append({"x": 1})
    if isinstance(trajectory, dict):
        trajectory = {k: w.history["x"][[]] for k in trajectory}
    with pytest.raises(ValueError, match=re.escape("trajectory must not be empty.")):
        w.create_item("t", 1.0, trajectory)


def test_create_item_with_one_empty_column() -> None:
    """An empty column next to a non-empty one must either be rejected when
    the item is created or read back as an empty array of its dtype, never
    break sampling."""
    table = fifo_table()
    w = TrajectoryWriter(table, 10)
    w.append({"a": 1, "b": np.float32(2)})
    try:
        w.create_item("t", 1.0, {"a": w.history["a"][:], "b": w.history["b"][[]]})
    except ValueError:
        assert w.num_pending_items == 0
        return
    w.flush()
    (sample,) = table.sample_items(1, timeout=5.0)
    assert_data_equal(sample.data, [np.array([1]), np.zeros((0,), np.float32)])


def test_create_item_rejects_nan_priority() -> None:
    table = fifo_table()
    w = TrajectoryWriter(table, 10)
    w.append({"x": 1})
    with pytest.raises(ValueError, match=re.escape("`priority` must not be nan.")):
        w.create_item("t", float("nan"), {"x": w.history["x"][0]})
    assert w.num_pending_items == 0


def test_negative_priority_on_prioritized_table_is_rejected() -> None:
    table = Table("p", sel.Prioritized(1.0), sel.Fifo(), 100, rl.MinSize(1))
    w = TrajectoryWriter(table, 10)
    w.append({"x": 1})
    with pytest.raises(ValueError):
        w.create_item("p", -1.0, {"x": w.history["x"][0]})
    assert w.num_pending_items == 0
    # The table (and the writer) stay usable.
    w.append({"x": 2})
    w.create_item("p", 2.0, {"x": w.history["x"][-1]})
    w.flush(timeout_ms=5000)
    assert len(table) == 1
    (sample,) = table.sample_items(1, timeout=5.0)
    assert sample.info.priority == 2.0
    assert_data_equal(sample.data, [np.array(2)])


def test_create_item_unknown_table() -> None:
    w = TrajectoryWriter(fifo_table(), 10)
    w.append({"x": 1})
    with pytest.raises(ValueError, match=re.escape(
            "Unable to create item in table 'nope' since the table could not be "
            "found.")):
        w.create_item("nope", 1.0, {"x": w.history["x"][0]})


def test_create_item_rejects_mixed_dtypes_and_shapes() -> None:
    w = TrajectoryWriter(fifo_table(), 10)
    a = w.append({"i": 1, "f": 1.0, "v2": np.zeros(2), "v3": np.zeros(3)})
    with pytest.raises(ValueError, match=re.escape(
            "Error in column 0: Column references tensors with different dtypes: "
            "int64 (index 0) != double (index 1).")):
        w.create_item("t", 1.0, [TrajectoryColumn([a["i"], a["f"]])])
    with pytest.raises(ValueError, match=re.escape(
            "Error in column 1: Column references tensors with incompatible "
            "shapes: [2] (index 0) not compatible with [3] (index 2).")):
        w.create_item("t", 1.0, [w.history["i"][:],
                                 TrajectoryColumn([a["v2"], a["v2"], a["v3"]])])
    assert w.num_pending_items == 0


def test_create_item_mixing_two_columns_of_one_spec() -> None:
    table = fifo_table()
    w = TrajectoryWriter(table, 10)
    a = w.append({"x": 1, "y": 2})
    b = w.append({"x": 3, "y": 4})
    w.create_item("t", 1.0, [TrajectoryColumn([a["y"], b["x"], a["x"]])])
    w.flush()
    assert_data_equal(read_all(table)[0], [np.array([2, 3, 1])])


def test_create_item_rejects_refs_of_another_writer() -> None:
    table = fifo_table()
    w1 = TrajectoryWriter(table, 10)
    w2 = TrajectoryWriter(table, 10)
    w1.append({"x": 1})
    w2.append({"x": 2})
    with pytest.raises(ValueError):
        w1.create_item("t", 1.0, {"x": w2.history["x"][0]})
    with pytest.raises(ValueError):
        TrajectoryColumn([next(iter(w1.history["x"])), next(iter(w2.history["x"]))])


def test_create_item_validates_the_table_signature() -> None:
    class Spec:
        def __init__(self, shape: tuple[int | None, ...], dtype: Any) -> None:
            self.shape, self.dtype = shape, np.dtype(dtype)

    table = fifo_table(signature={"obs": Spec((None, 3), np.float32),
                                  "r": Spec((), np.float64)})
    w = TrajectoryWriter(table, 10)
    for i in range(2):
        w.append({"obs": np.full(3, i, np.float32), "r": float(i), "i": i})
    h = w.history
    w.create_item("t", 1.0, {"obs": h["obs"][:], "r": h["r"][-1]})
    with pytest.raises(ValueError, match=re.escape(
            "The trajectory has 1 columns but the table signature has 2 columns.")):
        w.create_item("t", 1.0, {"obs": h["obs"][:]})
    with pytest.raises(ValueError, match=re.escape(
            "The table expects column 1 to be a double [] tensor but got a int64 "
            "[] tensor.")):
        w.create_item("t", 1.0, {"obs": h["obs"][:], "r": h["i"][-1]})
    with pytest.raises(ValueError, match="expects column 1"):
        w.create_item("t", 1.0, {"obs": h["obs"][:], "r": h["r"][-1:]})
    # validate_items=False skips the signature check.
    lax = TrajectoryWriter(table, 10, validate_items=False)
    lax.append({"i": 5})
    lax.create_item("t", 1.0, {"i": lax.history["i"][:]})
    w.flush()
    lax.flush()
    got = read_all(table)
    assert_data_equal(got[0], [np.stack([np.zeros(3), np.ones(3)]).astype(
        np.float32), np.array(1.0)])
    assert_data_equal(got[1], [np.array([5])])


# ----- TrajectoryColumn -----


def test_trajectory_column_squeeze_needs_exactly_one_ref() -> None:
    w = TrajectoryWriter(fifo_table(), 10)
    refs = [w.append({"x": i})["x"] for i in range(2)]
    for n in (0, 2):
        with pytest.raises(ValueError, match=re.escape(
                "Columns must contain exactly one data reference when squeeze "
                f"set, got {n}")):
            TrajectoryColumn(refs[:n], squeeze=True)
    col = TrajectoryColumn(refs[:1], squeeze=True)
    assert col.is_squeezed and col.numpy() == 0


def test_trajectory_column_len_iter_getitem() -> None:
    w = TrajectoryWriter(fifo_table(), 10)
    refs = [w.append({"x": i})["x"] for i in range(4)]
    col = TrajectoryColumn(refs)
    assert len(col) == 4
    assert len(TrajectoryColumn([])) == 0
    assert [r.numpy().item() for r in col] == [0, 1, 2, 3]
    assert col[1].is_squeezed and col[1].numpy() == 1
    assert col[-1].numpy() == 3
    np.testing.assert_array_equal(col[1:3].numpy(), [1, 2])
    np.testing.assert_array_equal(col[[3, 0]].numpy(), [3, 0])
    with pytest.raises(IndexError):
        _ = col[4]
    with pytest.raises(TypeError):
        _ = col["a"]


def test_trajectory_column_rejects_none() -> None:
    w = TrajectoryWriter(fifo_table(), 10)
    ref = w.append({"x": 1})["x"]
    with pytest.raises(ValueError, match=re.escape(
            "TrajectoryColumns cannot contain any None data references: "
            "TrajectoryColumn at path ('x',) got")):
        TrajectoryColumn([ref, None], path=("x",))


DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
          np.uint32, np.uint64, np.float16, np.float32, np.float64,
          np.complex64, np.complex128]
SHAPES = [(), (1,), (3,), (2, 3), (1, 2, 1)]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_trajectory_column_shape_dtype_and_round_trip(dtype: Any) -> None:
    table = fifo_table()
    w = TrajectoryWriter(table, 3)
    rng = np.random.default_rng(0)
    step = {f"s{i}": (rng.integers(0, 2, shape) if dtype is np.bool_
                      else rng.integers(0, 100, shape)).astype(dtype)
            for i, shape in enumerate(SHAPES)}
    step2 = {k: np.ones_like(v) for k, v in step.items()}
    w.append(step)
    w.append(step2)
    for i, shape in enumerate(SHAPES):
        h = w.history[f"s{i}"]
        assert h[0].dtype == np.dtype(dtype)
        assert h[0].shape == shape
        assert h[:].shape == (2, *shape)
        assert h[:].dtype == np.dtype(dtype)
        v = h[0].numpy()
        assert isinstance(v, np.ndarray) and v.dtype == dtype and v.shape == shape
        np.testing.assert_array_equal(v, step[f"s{i}"])
        np.testing.assert_array_equal(h[:].numpy(),
                                      np.stack([step[f"s{i}"], step2[f"s{i}"]]))
        ref = next(iter(h))
        assert ref.dtype == np.dtype(dtype)
        assert ref.shape == list(shape)
    w.create_item("t", 1.0, {k: w.history[k][:] for k in step})
    w.create_item("t", 1.0, {k: w.history[k][-1] for k in step})
    w.flush()
    got = read_all(table)
    keys = sorted(step)
    assert_data_equal(got[0], [np.stack([step[k], step2[k]]) for k in keys])
    assert_data_equal(got[1], [step2[k] for k in keys])


def test_trajectory_column_numpy_stacks_and_squeezes() -> None:
    w = TrajectoryWriter(fifo_table(), 10)
    for i in range(3):
        w.append({"x": np.full((2,), i, np.float32)})
    h = w.history["x"]
    stacked = h[:].numpy()
    assert stacked.shape == (3, 2) and stacked.dtype == np.float32
    np.testing.assert_array_equal(stacked[:, 0], [0, 1, 2])
    single = h[1].numpy()
    assert single.shape == (2,)
    np.testing.assert_array_equal(single, [1, 1])
    assert h[1:2].numpy().shape == (1, 2)


def test_trajectory_column_numpy_of_expired_refs_raises() -> None:
    w = TrajectoryWriter(fifo_table(), 2)
    w.append({"x": 1})
    col = w.history["x"][:]
    w.append({"x": 2})
    w.append({"x": 3})
    with pytest.raises(RuntimeError, match=re.escape(
            "Cannot convert TrajectoryColumn with expired data references to "
            "numpy array.")):
        col.numpy()


# ----- flush, end_episode and timeouts -----


def test_flush_rejects_negative_block_until_num_items() -> None:
    w = TrajectoryWriter(fifo_table(), 2)
    w.flush(0)
    w.flush(1)
    with pytest.raises(ValueError, match=re.escape(
            "block_until_num_items must be >= 0, got -1")):
        w.flush(-1)


def test_flush_sends_all_but_the_last_n_items() -> None:
    table = fifo_table()
    w = TrajectoryWriter(table, 10, chunker_options=ConstantChunkerOptions(10, 10))
    w.append({f"c{i}": i for i in range(4)})
    for i in range(4):  # one item per column, each waiting for its own chunk
        w.create_item("t", 1.0, {"x": w.history[f"c{i}"][-1]})
    assert len(table) == 0 and w.num_pending_items == 4
    w.flush(3)
    assert len(table) == 1 and w.num_pending_items == 3
    w.flush(1)
    assert len(table) == 3 and w.num_pending_items == 1
    w.flush(5)  # fewer pending than allowed: returns at once
    assert len(table) == 3 and w.num_pending_items == 1
    w.flush()
    assert len(table) == 4 and w.num_pending_items == 0
    assert [d[0].item() for d in read_all(table)] == [0, 1, 2, 3]


def test_no_items_no_data_in_tables() -> None:
    table = fifo_table()
    w = TrajectoryWriter(table, 3)
    for i in range(10):
        w.append({"x": i})
    w.flush()
    w.end_episode()
    assert len(table) == 0


def test_flush_timeout_raises_deadline_exceeded() -> None:
    table, w = blocked_queue_writer()
    start = time.monotonic()
    with pytest.raises(DeadlineExceededError, match=re.escape(
            "Flush call did not complete within provided timeout of "
            "0:00:00.050000")):
        w.flush(timeout_ms=50)
    assert 0.04 <= time.monotonic() - start < 2.0
    assert len(table) == 1
    assert w.num_pending_items == 3


def test_flush_timeout_zero_does_not_wait() -> None:
    """Reverb waited forever on flush(timeout_ms=0) (spec section 8.4)."""
    table, w = blocked_queue_writer()
    start = time.monotonic()
    exc = run_bounded(lambda: w.flush(timeout_ms=0), 2.0)
    assert isinstance(exc, DeadlineExceededError)
    assert time.monotonic() - start < 1.0
    # With nothing to wait for, flush(timeout_ms=0) succeeds.
    ok_table = fifo_table()
    ok = TrajectoryWriter(ok_table, 2)
    ok.append({"x": 1})
    ok.create_item("t", 1.0, {"x": ok.history["x"][0]})
    assert run_bounded(lambda: ok.flush(timeout_ms=0), 2.0) is None
    assert len(ok_table) == 1


def test_flush_timeout_reverb_queue_example() -> None:
    table = Table.queue("queue", 1)
    w = TrajectoryWriter(table, 1)
    w.append([1])
    with pytest.raises(DeadlineExceededError):
        for _ in range(4):
            w.create_item("queue", 1.0, w.history[0][:])
            w.flush(timeout_ms=1)


def test_flush_timeout_with_sample_to_insert_ratio() -> None:
    table = Table("r", sel.Fifo(), sel.Fifo(), 100,
                  rl.SampleToInsertRatio(1.0, 1, (0.0, 2.0)))
    w = TrajectoryWriter(table, 2)
    w.append({"x": 0})
    for _ in range(3):
        w.create_item("r", 1.0, {"x": w.history["x"][-1]})
    with pytest.raises(DeadlineExceededError):
        w.flush(timeout_ms=20)
    assert len(table) == 2
    # Insertion continues in the background once samples make room.
    table.sample(1, timeout=5.0)
    w.flush(timeout_ms=5000)
    assert len(table) == 3


def test_insertion_continues_after_a_flush_timeout() -> None:
    table, w = blocked_queue_writer()
    with pytest.raises(DeadlineExceededError):
        w.flush(timeout_ms=10)
    got = []
    for _ in range(4):
        got.extend(s.data for s in table.sample_items(1, timeout=5.0))
    w.flush(timeout_ms=5000)
    assert got == [[np.array([1])]] * 4
    assert w.num_pending_items == 0


@pytest.mark.parametrize("clear_buffers", [True, False])
@pytest.mark.parametrize("timeout_ms", [0, 20])
def test_end_episode_timeout_raises_and_still_ends_the_episode(
        clear_buffers: bool, timeout_ms: int) -> None:
    """Reverb left episode_steps and the buffers unchanged (spec 8.3)."""
    table, w = blocked_queue_writer()
    w.append({"x": 2})
    assert w.episode_steps == 2
    exc = run_bounded(lambda: w.end_episode(clear_buffers=clear_buffers,
                                            timeout_ms=timeout_ms), 2.0)
    assert isinstance(exc, DeadlineExceededError)
    assert str(exc).startswith(
        "End episode call did not complete within provided timeout of")
    assert w.episode_steps == 0
    assert len(w.history["x"]) == (0 if clear_buffers else 2)
    # The writer keeps working; queued items are inserted as room appears.
    w.append({"x": 3})
    assert w.episode_steps == 1
    for _ in range(4):
        table.sample(1, timeout=5.0)
    w.flush(timeout_ms=5000)
    assert w.num_pending_items == 0


def test_end_episode_timeout_reverb_queue_example() -> None:
    table = Table.queue("queue", 1)
    w = TrajectoryWriter(table, 1)
    w.append([1])
    with pytest.raises(DeadlineExceededError):
        for _ in range(4):
            w.create_item("queue", 1.0, w.history[0][:])
            w.end_episode(clear_buffers=False, timeout_ms=1)


def test_closed_table_fails_the_next_flush_then_the_writer_goes_on() -> None:
    table = fifo_table()
    w = TrajectoryWriter(table, 2)
    w.append({"x": 1})
    table.close()
    w.create_item("t", 1.0, {"x": w.history["x"][-1]})
    with pytest.raises(TableClosedError, match="Table 't' was closed before item"):
        w.flush()
    # Reported once: the item was dropped and the writer stays usable.
    w.append({"x": 2})
    w.flush()


def test_flush_reports_items_dropped_by_a_closed_table() -> None:
    """Items waiting in a table's insert queue are discarded when the table
    closes; flush must not report them as written."""
    table, w = blocked_queue_writer(3)
    assert len(table) == 1 and w.num_pending_items == 2
    table.close()
    with pytest.raises(TableClosedError):
        w.flush(timeout_ms=5000)


def test_negative_timeouts_are_rejected() -> None:
    w = TrajectoryWriter(fifo_table(), 2)
    with pytest.raises(ValueError):
        w.flush(timeout_ms=-5)


def test_concurrent_sampling_reads_every_item_in_order() -> None:
    table = Table.queue("q", 5)
    n = 1500
    got: list[list[Any]] = []

    def consume() -> None:
        while len(got) < n:
            got.extend(s.data for s in table.sample_items(1, timeout=5.0))

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    w = TrajectoryWriter(table, 4)
    for i in range(n):
        w.append({"x": np.full(70, i, np.int64), "y": i})
        w.create_item("q", 1.0, {"x": w.history["x"][-2:] if i else w.history["x"][-1:],
                                 "y": w.history["y"][-1]})
        if i % 7 == 0:
            w.flush(3, timeout_ms=5000)
    w.flush(timeout_ms=5000)
    consumer.join(10.0)
    assert not consumer.is_alive()
    assert len(got) == n
    for i, (x, y) in enumerate(got):
        assert y == i
        assert x[-1, 0] == i and x[0, 0] == max(i - 1, 0)


# ----- close and context manager -----


def test_close_makes_later_calls_fail() -> None:
    table = fifo_table()
    w = TrajectoryWriter(table, 2)
    w.append({"x": 1})
    column = w.history["x"][:]
    w.close()
    calls: list[Callable[[], Any]] = [
        lambda: w.append({"x": 2}),
        lambda: w.create_item("t", 1.0, {"x": column}),
        lambda: w.flush(),
        lambda: w.end_episode(),
    ]
    for call in calls:
        with pytest.raises(RuntimeError, match=re.escape(CLOSED)):
            call()
    w.close()  # a second close is a no-op
    with w:  # exit does not flush a closed writer
        pass


def test_close_wakes_a_flush_blocked_in_another_thread() -> None:
    """close() is the one thread-safe call: it must release a flush waiting
    (without timeout) on a full table (spec section 1.7)."""
    table, w = blocked_queue_writer(3)
    outcome: list[BaseException | None] = []

    def flush() -> None:
        try:
            w.flush()
        except BaseException as exc:  # noqa: BLE001 - inspected below
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=flush, daemon=True)
    thread.start()
    time.sleep(0.05)
    w.close()
    thread.join(2.0)
    try:
        assert not thread.is_alive(), "flush still blocked after close()"
        assert isinstance(outcome[0], RuntimeError)
    finally:
        while thread.is_alive():  # release the thread whatever happened
            table.sample(1, timeout=1.0)
            thread.join(0.5)


def test_context_manager_flushes_on_exit() -> None:
    table = fifo_table()
    w = TrajectoryWriter(table, 5, chunker_options=ConstantChunkerOptions(5, 5))
    with w as entered:
        assert entered is w
        w.append({"x": 1})
        w.create_item("t", 1.0, {"x": w.history["x"][0]})
        assert len(table) == 0
    assert len(table) == 1
    # The writer was not closed.
    w.append({"x": 2})
    w.create_item("t", 1.0, {"x": w.history["x"][-1]})
    w.flush()
    assert [d[0].item() for d in read_all(table)] == [1, 2]


def test_context_manager_flushes_on_other_errors() -> None:
    table = fifo_table()
    w = TrajectoryWriter(table, 5, chunker_options=ConstantChunkerOptions(5, 5))
    with pytest.raises(KeyError):
        with w:
            w.append({"x": 1})
            w.create_item("t", 1.0, {"x": w.history["x"][0]})
            raise KeyError("boom")
    assert len(table) == 1


def test_context_manager_does_not_flush_on_reverb_errors() -> None:
    table = fifo_table()
    w = TrajectoryWriter(table, 5, chunker_options=ConstantChunkerOptions(5, 5))
    with pytest.raises(ReverbError):
        with w:
            w.append({"x": 1})
            w.create_item("t", 1.0, {"x": w.history["x"][0]})
            raise DeadlineExceededError("test")
    assert len(table) == 0
    assert w.num_pending_items == 1


# ----- data round trips -----


def _agent_steps(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [{
        "obs": rng.standard_normal(3).astype(np.float32),
        "action": np.int32(rng.integers(0, 10)),
        "reward": float(rng.standard_normal()),
    } for _ in range(n)]


@pytest.mark.parametrize("chunker", [None, ConstantChunkerOptions(1, 10),
                                     ConstantChunkerOptions(3, 10),
                                     ConstantChunkerOptions(10, 10)],
                         ids=["auto", "const1", "const3", "const10"])
def test_items_of_length_1_5_and_squeezed_read_back_exactly(
        chunker: ConstantChunkerOptions | None) -> None:
    table = fifo_table()
    w = TrajectoryWriter(table, 10, chunker_options=chunker)
    steps = _agent_steps(12)
    expected = []
    for t, step in enumerate(steps):
        w.append(step)
        h = w.history
        w.create_item("t", 1.0, {k: h[k][-1:] for k in step})
        expected.append([np.stack([steps[t][k]]) for k in sorted(step)])
        w.create_item("t", 1.0, {k: h[k][-1] for k in step})
        expected.append([np.asarray(steps[t][k]) for k in sorted(step)])
        if t >= 4:
            w.create_item("t", 2.0, {k: h[k][-5:] for k in step})
            expected.append([np.stack([s[k] for s in steps[t - 4:t + 1]])
                             for k in sorted(step)])
        if t % 4 == 3:
            w.flush()
    w.end_episode()
    got = read_all(table)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=False):
        assert_data_equal(g, e)


def test_squeezed_scalar_column_reads_back_as_array() -> None:
    """Sampled squeezed columns are arrays, like TrajectoryColumn.numpy()."""
    table = fifo_table()
    w = TrajectoryWriter(table, 2)
    w.append({"r": 1.5})
    assert isinstance(w.history["r"][-1].numpy(), np.ndarray)
    w.create_item("t", 1.0, {"r": w.history["r"][-1]})
    w.flush()
    (data,) = read_all(table)
    assert isinstance(data[0], np.ndarray)
    assert data[0].shape == () and data[0] == 1.5


@pytest.mark.parametrize("finalized_first", [True, False])
def test_non_contiguous_and_reordered_history_lists_read_back_correctly(
        finalized_first: bool) -> None:
    """Reverb merged refs of one chunk into one slice regardless of their
    offsets: [0, 2] sampled as [0, 1], [1, 0] as [1, 2] and [4, 1, 3]
    failed (spec section 1.3)."""
    table = fifo_table()
    w = TrajectoryWriter(table, 5, chunker_options=ConstantChunkerOptions(5, 5))
    for i in range(5 if finalized_first else 4):
        w.append({"x": i * 10})
    if not finalized_first:
        # Items are created while the chunk is still open.
        assert w._core.column_info(0)["buffered"] == 4
    indices: list[Any] = [[0, 2], [1, 0], [3, 1], [1, 1], [0, 0, 2],
                          slice(None, None, -1), slice(None, None, 2)]
    if finalized_first:
        indices.append([4, 1, 3])
    h = w.history["x"]
    for index in indices:
        w.create_item("t", 1.0, {"x": h[index]})
    if not finalized_first:
        w.append({"x": 40})
    w.flush()
    got = [d[0].tolist() for d in read_all(table)]
    n = 5 if finalized_first else 4
    want = [[v * 10 for v in np.arange(n)[index].tolist()]
            if isinstance(index, slice) else [v * 10 for v in index]
            for index in indices]
    assert got == want


def test_items_spanning_several_chunks() -> None:
    table = fifo_table()
    w = TrajectoryWriter(table, 9, chunker_options=ConstantChunkerOptions(2, 9))
    for i in range(9):
        w.append({"x": np.array([i, -i])})
    h = w.history["x"]
    for index in ([8, 0, 7, 1], slice(1, 8), [2, 3, 4, 5], slice(7, 0, -3)):
        w.create_item("t", 1.0, {"x": h[index]})
    w.flush()
    got = [d[0][:, 0].tolist() for d in read_all(table)]
    assert got == [[8, 0, 7, 1], [1, 2, 3, 4, 5, 6, 7], [2, 3, 4, 5], [7, 4, 1]]


# ----- chunk storage -----


def test_overlapping_items_store_each_step_once() -> None:
    store = ChunkStore()
    table = fifo_table()
    w = TrajectoryWriter(table, 10, chunk_store=store,
                         chunker_options=ConstantChunkerOptions(5, 10))
    rng = np.random.default_rng(0)
    row = 100 * 4
    for i in range(20):
        w.append({"x": rng.random(100, dtype=np.float32)})
        if i >= 4:
            w.create_item("t", 1.0, {"x": w.history["x"][-5:]})
    w.flush()
    assert len(table) == 16
    stats = store.stats()
    # 16 items of 5 steps would be 80 rows if each item copied its data.
    assert stats["raw_bytes"] == 20 * row
    assert stats["stored_bytes"] <= 20 * row
    assert stats["live_chunks"] == 4


def test_overlapping_items_store_each_step_once_autotuned() -> None:
    store = ChunkStore()
    table = fifo_table()
    w = TrajectoryWriter(table, 10, chunk_store=store)
    rng = np.random.default_rng(1)
    for i in range(60):
        w.append({"x": rng.random(100, dtype=np.float32)})
        if i >= 9:
            w.create_item("t", 1.0, {"x": w.history["x"][-10:]})
        if i % 7 == 6:
            w.flush()
    w.end_episode()
    assert len(table) == 51
    assert store.stats()["raw_bytes"] == 60 * 400


def test_chunks_are_freed_when_items_leave_and_episode_ends() -> None:
    store = ChunkStore()
    table = fifo_table(max_size=2)
    w = TrajectoryWriter(table, 4, chunk_store=store,
                         chunker_options=ConstantChunkerOptions(1, 4))
    for i in range(20):
        w.append({"x": np.full(64, i, np.float32)})
        w.create_item("t", 1.0, {"x": w.history["x"][-1]})
    w.flush()
    assert len(table) == 2  # the others were evicted
    # The writer's keep-alive window still holds its last 4 cells.
    assert store.stats()["live_chunks"] == 4
    w.end_episode()
    assert store.stats()["live_chunks"] == 2
    got = read_all(table)  # max_times_sampled=1 deletes them
    assert [d[0][0] for d in got] == [18.0, 19.0]
    del got
    gc.collect()
    assert store.stats() == {"live_chunks": 0, "stored_bytes": 0, "raw_bytes": 0}


def test_chunks_are_freed_by_table_reset() -> None:
    store = ChunkStore()
    table = fifo_table()
    w = TrajectoryWriter(table, 10, chunk_store=store)
    for i in range(30):
        w.append({"x": np.full(100, i, np.float32)})
        w.create_item("t", 1.0, {"x": w.history["x"][-3:] if i >= 2
                                 else w.history["x"][-1:]})
    w.end_episode()
    stats = store.stats()
    assert stats["live_chunks"] > 0 and stats["raw_bytes"] == 30 * 400
    table.reset()
    assert store.stats() == {"live_chunks": 0, "stored_bytes": 0, "raw_bytes": 0}


def test_deleting_the_writer_frees_its_chunks() -> None:
    store = ChunkStore()
    w = TrajectoryWriter(fifo_table(), 10, chunk_store=store,
                         chunker_options=ConstantChunkerOptions(2, 10))
    for i in range(10):
        w.append({"x": np.full(10, i)})
    assert store.stats()["live_chunks"] == 5
    del w
    gc.collect()
    assert store.stats() == {"live_chunks": 0, "stored_bytes": 0, "raw_bytes": 0}


def test_atari_frames_are_compressed() -> None:
    store = ChunkStore()
    table = fifo_table()
    w = TrajectoryWriter(table, 10, chunk_store=store)
    frames = []
    for i in range(40):
        frame = np.zeros((84, 84, 4), np.uint8)
        frame[(i * 2) % 84: (i * 2) % 84 + 10, :, i % 4] = 255
        frames.append(frame)
        w.append({"obs": frame, "reward": float(i)})
        if i >= 3:
            w.create_item("t", 1.0, {"obs": w.history["obs"][-4:],
                                     "reward": w.history["reward"][-1]})
    # The writer reads its cells back from compressed chunks, too.
    w.flush()
    np.testing.assert_array_equal(w.history["obs"][-10:].numpy(),
                                  np.stack(frames[-10:]))
    w.end_episode()
    stats = store.stats()
    assert w._core.column_info(w._columns.index[("obs",)])["compress"]
    assert stats["raw_bytes"] >= 40 * 84 * 84 * 4
    assert stats["stored_bytes"] < stats["raw_bytes"] / 10
    got = read_all(table)
    assert len(got) == 37
    for t, data in enumerate(got, start=3):
        np.testing.assert_array_equal(data[0], np.stack(frames[t - 3:t + 1]))
        assert data[1] == float(t)


# ----- VectorTrajectoryWriter -----


def _vector_and_singles(num_envs: int, keep: int = 4,
                        chunker: Any = None) -> tuple[
        Table, VectorTrajectoryWriter, list[Table], list[TrajectoryWriter]]:
    vtable = fifo_table()
    vec = VectorTrajectoryWriter(vtable, num_envs, keep, chunker_options=chunker)
    tables = [fifo_table() for _ in range(num_envs)]
    singles = [TrajectoryWriter(t, keep, chunker_options=chunker) for t in tables]
    return vtable, vec, tables, singles


@pytest.mark.parametrize("chunker", [None, ConstantChunkerOptions(2, 4)],
                         ids=["auto", "const2"])
def test_vector_writer_agrees_with_single_writers(chunker: Any) -> None:
    n = 3
    vtable, vec, tables, singles = _vector_and_singles(n, chunker=chunker)
    rng = np.random.default_rng(0)
    order = []  # env of each item in the vector writer's table
    for t in range(12):
        data = {"obs": rng.standard_normal((n, 2)).astype(np.float32),
                "act": rng.integers(0, 5, n)}
        if t % 5 == 4:
            data["extra"] = np.arange(n, dtype=np.int16) + t
        vec.append(data)
        for e in range(n):
            singles[e].append({k: v[e] for k, v in data.items()})
        for e in range(n):
            if len(vec[e].history["obs"]) >= 3 and (t + e) % 2 == 0:
                for writer in (vec[e], singles[e]):
                    h = writer.history
                    writer.create_item("t", 1.0, {"obs": h["obs"][-3:],
                                                  "act": h["act"][[-1, -3]]})
                order.append(e)
        if t == 6:
            vec.end_episode(1)
            singles[1].end_episode()
        if t == 9:
            vec.flush()
    vec.flush()
    for s in singles:
        s.flush()
    assert vec.num_pending_items == 0
    for e in range(n):
        assert vec[e].episode_steps == singles[e].episode_steps
        assert sorted(vec[e].history) == sorted(singles[e].history)
        for key in vec[e].history:
            hv, hs = vec[e].history[key], singles[e].history[key]
            assert values_or_arrays(hv) == values_or_arrays(hs)
    single_items = [read_all(t) for t in tables]
    vec_items = read_all(vtable)
    assert len(vec_items) == len(order) == sum(len(s) for s in single_items)
    cursor = [0] * n
    for e, item in zip(order, vec_items, strict=False):
        assert_data_equal(item, single_items[e][cursor[e]])
        cursor[e] += 1


def values_or_arrays(history: Any) -> list[Any]:
    return [None if r is None or r.expired else r.numpy().tolist() for r in history]


def test_vector_writer_episode_steps_per_env() -> None:
    vec = VectorTrajectoryWriter(fifo_table(), 3, 2)
    for _ in range(4):
        vec.append({"x": np.zeros(3)})
    vec.end_episode([0, 2])
    assert [w.episode_steps for w in vec] == [0, 4, 0]
    vec.append({"x": np.zeros(3)}, partial_step=True)
    assert [w.episode_steps for w in vec] == [0, 4, 0]
    vec.append({"y": np.ones(3)})
    assert [w.episode_steps for w in vec] == [1, 5, 1]
    vec.end_episode()
    assert [w.episode_steps for w in vec] == [0, 0, 0]
    assert len(vec) == 3


def _snapshot(vec: VectorTrajectoryWriter, keys: Any = None) -> list[Any]:
    """episode_steps and column values of every env (of ``keys`` only, as a
    rejected step may still register new paths, as in Reverb)."""
    return [(w.episode_steps, {k: values_or_arrays(w.history[k])
                               for k in sorted(keys or w.history)}) for w in vec]


@pytest.mark.parametrize("bad, exc", [
    ({"obs": np.zeros((2, 2), np.float32), "act": np.zeros(2, np.int64)},
     ValueError),
    ({"obs": np.zeros((3, 2), np.float32), "act": np.zeros(4, np.int64)},
     ValueError),
    ({"obs": np.zeros((3, 2), np.float64), "act": np.zeros(3, np.int64)},
     ValueError),
    ({"obs": np.zeros((3, 3), np.float32), "act": np.zeros(3, np.int64)},
     ValueError),
    ({"obs": np.zeros((3, 2), np.float32), "act": np.array(["a", "b", "c"])},
     ValueError),  # a string into an int column
    ({"obs": np.zeros((3, 2), np.float32), "act": 1}, ValueError),
], ids=["short-axis", "long-axis-second-leaf", "dtype", "shape", "str",
        "no-env-axis"])
def test_vector_writer_bad_step_leaves_every_env_unchanged(
        bad: dict[str, Any], exc: type[Exception]) -> None:
    table = fifo_table()
    vec = VectorTrajectoryWriter(table, 3, 4)
    good = {"obs": np.arange(6, dtype=np.float32).reshape(3, 2),
            "act": np.arange(3)}
    vec.append(good)
    before = _snapshot(vec)
    with pytest.raises(exc):
        vec.append(bad)
    assert _snapshot(vec) == before
    vec.append(good)
    assert [w.episode_steps for w in vec] == [2, 2, 2]
    for w in vec:
        w.create_item("t", 1.0, {"act": w.history["act"][:]})
    vec.flush()
    assert [d[0].tolist() for d in read_all(table)] == [[0, 0], [1, 1], [2, 2]]


def test_vector_writer_env_specific_spec_mismatch_leaves_all_unchanged() -> None:
    vec = VectorTrajectoryWriter(fifo_table(), 3, 4)
    vec.append({"a": np.zeros(3, np.int64)})
    # Env 2 alone fixes column "x" as float32.
    vec[2].append({"x": np.float32(1)})
    before = _snapshot(vec)
    with pytest.raises(ValueError, match="wrong dtype"):
        vec.append({"a": np.zeros(3, np.int64), "x": np.zeros(3, np.int64)})
    assert _snapshot(vec) == before


def test_vector_writer_repeated_partial_field_leaves_all_unchanged() -> None:
    vec = VectorTrajectoryWriter(fifo_table(), 2, 4)
    vec.append({"a": np.zeros(2)}, partial_step=True)
    before = _snapshot(vec, ["a"])
    with pytest.raises(ValueError, match="has already been set"):
        vec.append({"a": np.ones(2), "b": np.ones(2)})
    assert _snapshot(vec, ["a"]) == before
    assert [values_or_arrays(w.history["b"]) for w in vec] == [[None], [None]]
    vec.append({"b": np.ones(2)})
    assert [w.episode_steps for w in vec] == [1, 1]


def test_vector_writer_accepts_strided_fortran_and_byte_swapped_input() -> None:
    vec = VectorTrajectoryWriter(fifo_table(), 3, 2)
    big = np.arange(24, dtype=np.float32).reshape(3, 8)
    fortran = np.asfortranarray(np.arange(6).reshape(3, 2))
    swapped = np.array([1, 2, 3], dtype=">i2")
    vec.append({"o": big[:, ::2], "f": fortran, "b": swapped})
    for e, w in enumerate(vec):
        np.testing.assert_array_equal(w.history["o"][-1].numpy(), big[e, ::2])
        np.testing.assert_array_equal(w.history["f"][-1].numpy(), fortran[e])
        assert w.history["b"][-1].numpy() == e + 1
        assert w.history["b"][-1].dtype == np.int16


def test_vector_writer_rejects_zero_envs() -> None:
    with pytest.raises(ValueError):
        VectorTrajectoryWriter(fifo_table(), 0, 2)


def test_auto_tuned_default_options() -> None:
    w = TrajectoryWriter(fifo_table(), 7)
    w.append({"x": 1})
    info = w._core.column_info(0)
    assert info["autotune"] and info["num_keep_alive_refs"] == 7
    assert info["max_chunk_length"] == 1
    w2 = TrajectoryWriter(fifo_table(), 7,
                          chunker_options=AutoTunedChunkerOptions(3))
    w2.append({"x": 1})
    assert w2._core.column_info(0)["num_keep_alive_refs"] == 3


def test_public_exports() -> None:
    for name in ("TrajectoryWriter", "TrajectoryColumn", "WeakCellRef",
                 "ChunkStore", "ConstantChunkerOptions", "AutoTunedChunkerOptions",
                 "VectorTrajectoryWriter"):
        assert hasattr(fastreplay, name)


def test_cached_flat_trajectory_keys_can_later_hold_a_nest() -> None:
    # create_item remembers flat dict trajectories by their keys; the same
    # keys holding a nested value later must still be flattened fully.
    table = fifo_table()
    w = TrajectoryWriter(table, 3)
    w.append({"a": 1, "b": 2.0})
    h = w.history
    w.create_item("t", 1.0, {"x": h["a"][-1], "y": h["b"][-1]})
    w.create_item("t", 1.0, {"x": {"p": h["a"][-1], "q": h["a"][-1]}, "y": h["b"][-1]})
    with pytest.raises(TypeError, match="TrajectoryColumn"):
        w.create_item("t", 1.0, {"x": 5, "y": h["b"][-1]})
    w.flush()
    assert [len(d) for d in read_all(table)] == [2, 3]


def test_writer_inserts_held_by_the_rate_limiter_count_as_insert_stalls() -> None:
    """Regression: items queued by writers while the limiter refuses them were
    never counted in the table's insert stall statistics."""
    start = time.monotonic()
    table, writer = blocked_queue_writer(3)
    with pytest.raises(DeadlineExceededError):
        writer.flush(timeout_ms=50)
    assert table.info.rate_limiter_info.insert_stats.blocked == 2
    time.sleep(0.02)
    table.sample(1)  # lets the held items in, one per sample
    table.sample(1)
    writer.flush(timeout_ms=5000)
    stats = table.info.rate_limiter_info.insert_stats
    assert stats.completed == 3
    assert stats.blocked == 2
    # Wall time while inserts were held back, not a sum over the held items.
    assert 0.04 <= stats.stall_seconds <= time.monotonic() - start


@pytest.mark.parametrize("index", [
    slice(None), slice(None, None, -1), slice(None, None, 2), slice(-3, None),
    slice(1, -1, 3), slice(-2, 0, -1), slice(5, 2), [0, -1, 3, 3], [-12, 11],
    list(range(12)), 0, -1, 7,
])
def test_history_views_index_like_a_list(index: Any) -> None:
    """History views (C arrays inline up to 8 cells, heap beyond) and
    TrajectoryColumn re-indexing select the same steps as list indexing."""
    table = Table.queue("q", 100)
    w = TrajectoryWriter(table, 12)
    for i in range(12):
        w.append({"x": np.int64(i)})
    steps = list(range(12))
    want = steps[index] if not isinstance(index, list) else [steps[i] for i in index]
    column = w.history["x"][index]
    got = column.numpy()
    np.testing.assert_array_equal(got, np.asarray(want))
    assert got.dtype == np.int64
    if not isinstance(index, int):
        assert len(column) == len(want)
        np.testing.assert_array_equal(column._ids, w.history["x"][:]._ids[index])
        again = column[::-1]  # re-indexing a view keeps its column
        np.testing.assert_array_equal(again.numpy(), np.asarray(want[::-1]))
        assert again._cols == column._cols
