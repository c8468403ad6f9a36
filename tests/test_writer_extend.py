"""``TrajectoryWriter.extend`` and ``StructuredWriter.extend``: several whole
steps in one call (reverb#78).  The oracle is the same steps appended one at
a time: history, episode steps, items and their data must be identical; the
steps share chunks (csrc/column.h FR_BATCH_CHUNK_BYTES); bad input raises
naming the column and writes nothing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastreplay import (
    ChunkStore,
    ConstantChunkerOptions,
    Table,
    TrajectoryWriter,
)
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay import structured_writer as sw
from fastreplay.structured_writer import Condition, StructuredWriter


def fifo(name: str = "t") -> Table:
    """A table returning every item once, oldest first."""
    return Table(name, sel.Fifo(), sel.Fifo(), 10_000, rl.MinSize(1),
                 max_times_sampled=1)


def read(table: Table) -> list[tuple[float, list[Any]]]:
    """(priority, flat data) of every item, in insertion order."""
    n = len(table)
    return [(s.info.priority, s.data) for s in table.sample_items(n, timeout=5.0)]


def same(a: list[tuple[float, list[Any]]], b: list[tuple[float, list[Any]]]) -> None:
    assert len(a) == len(b)
    for (pa, da), (pb, db) in zip(a, b, strict=True):
        assert pa == pb or (np.isnan(pa) and np.isnan(pb))
        assert len(da) == len(db)
        for x, y in zip(da, db, strict=True):
            np.testing.assert_array_equal(x, y)


def batch(n: int, start: int = 0) -> dict[str, Any]:
    i = np.arange(start, start + n)
    return {"obs": np.stack([i, -i, 2 * i], axis=1).astype(np.float32),
            "act": i.astype(np.int64),
            "word": np.array([f"w{k % 7}" * (k % 3 + 1) for k in i])}


def rows(b: dict[str, Any], lo: int, hi: int) -> dict[str, Any]:
    return {k: v[lo:hi] for k, v in b.items()}


def step(b: dict[str, Any], i: int) -> dict[str, Any]:
    return {k: v[i] for k, v in b.items()}


# ----- TrajectoryWriter.extend -----


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), keep=st.integers(1, 8), length=st.integers(1, 8),
       chunk=st.sampled_from([None, 1, 3]), cut=st.integers(0, 40),
       appended=st.integers(0, 3))
def test_extend_gives_what_appending_each_step_gives(
        n: int, keep: int, length: int, chunk: int | None, cut: int,
        appended: int) -> None:
    """Two extends (split at ``cut``), then a few plain appends, against
    appending every step: the same history and the same items (a slice of
    the last ``length`` steps, made after the extends and after each
    append)."""
    length = min(length, keep, n)
    cut = min(cut, n)
    opts = None if chunk is None else ConstantChunkerOptions(min(chunk, keep), keep)
    data = batch(n + appended)
    tables = [fifo(), fifo()]
    one = TrajectoryWriter(tables[0], keep, chunker_options=opts)
    many = TrajectoryWriter(tables[1], keep, chunker_options=opts)
    for i in range(n):
        one.append(step(data, i))
    many.extend(rows(data, 0, cut))
    many.extend(rows(data, cut, n))
    for w in (one, many):
        h = w.history
        w.create_item("t", 1.0, {k: h[k][-length:] for k in data})
        for i in range(n, n + appended):
            w.append(step(data, i))
            w.create_item("t", 2.0, {k: w.history[k][-1] for k in data})
        w.flush()
    assert one.episode_steps == many.episode_steps == n + appended
    assert len(one.history["act"]) == len(many.history["act"])
    same(read(tables[0]), read(tables[1]))
    one.close()
    many.close()


def test_extend_items_read_the_right_rows_of_shared_chunks() -> None:
    """Items of every step of one extend (num_keep_alive_refs covers them)
    read their own rows although the steps share a chunk per column."""
    table, n = fifo(), 50
    w = TrajectoryWriter(table, n)
    data = batch(n)
    w.extend(data)
    h = w.history
    for i in range(n):
        w.create_item("t", float(i + 1), {k: h[k][i] for k in data})
    w.flush()
    got = read(table)
    assert [p for p, _ in got] == [float(i + 1) for i in range(n)]
    for i, (_, d) in enumerate(got):
        want = step(data, i)
        np.testing.assert_array_equal(d[0], want["act"])
        np.testing.assert_array_equal(d[1], want["obs"])
        assert d[2] == want["word"].encode()


def test_steps_of_one_extend_share_chunks_up_to_16_kib_of_rows() -> None:
    """Per step (max_chunk_length=1) 100 steps of two columns make 200
    chunks; one extend makes one chunk of the small column (1.2 KiB) and
    ceil(100 / 8) of the 2,000-byte rows (8 rows in 16 KiB)."""
    def chunks(extend: bool) -> int:
        store = ChunkStore()
        w = TrajectoryWriter(fifo(), 100, chunk_store=store,
                             chunker_options=ConstantChunkerOptions(1, 100))
        data = {"a": np.zeros((100, 3), np.float32),
                "b": np.zeros((100, 2000), np.uint8)}
        if extend:
            w.extend(data)
        else:
            for i in range(100):
                w.append(step(data, i))
        live = store.stats()["live_chunks"]
        w.close()
        return live

    assert chunks(False) == 200
    assert chunks(True) == 1 + 13


def test_after_an_extend_chunks_follow_the_chunker_again() -> None:
    """4,000-byte rows: an extend of 6 makes a 4-row chunk (16 KiB) and
    finalizes the last 2 rows (the chunker's length) when it ends; appends
    make 2-row chunks again."""
    store = ChunkStore()
    w = TrajectoryWriter(fifo(), 10, chunk_store=store,
                         chunker_options=ConstantChunkerOptions(2, 10))
    w.extend({"a": np.zeros((6, 1000), np.float32)})
    col = w._core.column_info(0)
    assert col["buffered"] == 0 and col["max_chunk_length"] == 2
    assert store.stats()["live_chunks"] == 2
    for _ in range(3):
        w.append({"a": np.zeros(1000, np.float32)})
    assert w._core.column_info(0)["buffered"] == 1  # 2-row chunks again
    assert store.stats()["live_chunks"] == 3  # (open chunks are not counted)
    w.close()


def test_an_extend_shorter_than_the_chunk_length_leaves_its_chunk_open() -> None:
    """An extend never finalizes a chunk the chunker would keep open: items
    wait for it as after appends, and flush finalizes it."""
    table = fifo()
    w = TrajectoryWriter(table, 10, chunker_options=ConstantChunkerOptions(10, 10))
    w.extend({"a": np.arange(4, dtype=np.int64)})
    assert w._core.column_info(0)["buffered"] == 4
    w.create_item("t", 1.0, {"a": w.history["a"][-2:]})
    assert len(table) == 0
    w.flush()
    assert [d[0].tolist() for _, d in read(table)] == [[2, 3]]


def test_extend_adds_new_columns() -> None:
    """A path first seen in an extend becomes a column (earlier steps read
    None there, as after appends)."""
    table = fifo()
    w = TrajectoryWriter(table, 5)
    w.append({"a": np.float32(0)})
    w.extend({"a": np.array([1, 2], np.float32), "b": np.array([[1, 2], [3, 4]])})
    h = w.history
    assert len(h["b"]) == 3  # step 0 has no b
    w.create_item("t", 1.0, {"a": h["a"][-3:], "b": h["b"][-2:]})
    w.flush()
    (_, (a, b)), = read(table)
    assert a.tolist() == [0, 1, 2] and b.tolist() == [[1, 2], [3, 4]]


def test_extend_of_zero_steps_does_nothing() -> None:
    w = TrajectoryWriter(fifo(), 2)
    w.extend({"a": np.zeros((0, 3), np.float32)})
    assert w.episode_steps == 0
    w.append({"a": np.zeros(3, np.float32)})
    assert w.episode_steps == 1


def _written(w: TrajectoryWriter) -> tuple[int, int]:
    return w.episode_steps, len(w.history["a"])


@pytest.mark.parametrize(("data", "message"), [
    ({"a": np.zeros((3, 2), np.float32), "b": np.zeros(4)},
     r"column \('b',\) has 4 but column \('a',\) has 3"),
    ({"a": np.zeros((3, 2), np.float32), "b": np.float64(1.0)},
     r"column \('b',\) is a scalar"),
    ({"a": np.zeros((3, 2), np.float64)},
     r"wrong dtype provided for column \('a',\)"),
    ({"a": np.zeros((3, 5), np.float32)},
     r"incompatible shape provided for column \('a',\)"),
])
def test_bad_extends_name_the_column_and_write_nothing(data: dict[str, Any],
                                                       message: str) -> None:
    table = fifo()
    w = TrajectoryWriter(table, 2)
    w.append({"a": np.ones(2, np.float32), "b": np.float64(0.0)})
    before = _written(w)
    with pytest.raises(ValueError, match=message):
        w.extend(data)
    assert _written(w) == before
    w.extend({"a": np.full((2, 2), 7, np.float32), "b": np.zeros(2)})  # still usable
    w.create_item("t", 1.0, {"a": w.history["a"][-1]})
    w.flush()
    np.testing.assert_array_equal(read(table)[0][1][0], [7, 7])


def test_extend_needs_whole_steps_and_an_open_writer() -> None:
    w = TrajectoryWriter(fifo(), 2)
    w.append({"a": np.zeros(2, np.float32)}, partial_step=True)
    with pytest.raises(ValueError, match="partial step is open"):
        w.extend({"b": np.zeros((2, 1))})
    with pytest.raises(ValueError, match="at least one value"):
        w.extend({"a": None})
    w.close()
    with pytest.raises(RuntimeError, match="Close has been called"):
        w.extend({"a": np.zeros((1, 2), np.float32)})


# ----- StructuredWriter.extend -----

STEP = {"x": np.int64(0), "flag": np.int64(0), "td": np.float32(0)}
REF = sw.create_reference_step(STEP)


def configs() -> list[sw.Config]:
    """Every kind of rule: each step, every other step over 3 steps, a data
    condition, and a td_error priority."""
    return [
        sw.create_config({"x": REF["x"][-1]}, "t"),
        sw.create_config({"x": REF["x"][-3:]}, "t",
                         conditions=[Condition.step_index() % 2 == 0]),
        sw.create_config({"x": REF["x"][-1], "flag": REF["flag"][-1]}, "t",
                         conditions=[Condition.data(STEP)["flag"] == 1]),
        sw.create_config({"x": REF["x"][-2:], "td": REF["td"][-2:]}, "t",
                         priority=sw.td_error(0.5, STEP, lambda s: s["td"])),
    ]


def steps(n: int, start: int = 0) -> dict[str, Any]:
    i = np.arange(start, start + n)
    return {"x": i.astype(np.int64), "flag": (i % 3 == 1).astype(np.int64),
            "td": np.sin(i).astype(np.float32)}


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 30), cuts=st.lists(st.integers(0, 30), max_size=3),
       end=st.booleans())
def test_structured_extend_gives_what_appending_each_step_gives(
        n: int, cuts: list[int], end: bool) -> None:
    tables = [fifo(), fifo()]
    one = StructuredWriter(tables[0], configs())
    many = StructuredWriter(tables[1], configs())
    data = steps(n)
    for i in range(n):
        one.append(step(data, i))
    bounds = sorted({0, n, *(min(c, n) for c in cuts)})
    created = sum(many.extend(rows(data, lo, hi))
                  for lo, hi in zip(bounds, bounds[1:], strict=False))
    one.flush()
    many.flush()
    assert created == len(tables[1]) == len(tables[0]) > 0
    for w in (one, many):
        if end:
            w.end_episode()
        w.append(step(steps(1, start=n), 0))
        w.flush()
    same(read(tables[1]), read(tables[0]))


def test_structured_extend_returns_the_items_it_created() -> None:
    table = fifo()
    w = StructuredWriter(table, configs())
    created = w.extend(steps(12))
    w.flush()
    assert created == len(table)
    # 12 of config 0, steps 2, 4, .., 10 of config 1 (index 0 lacks 3 steps),
    # 4 flags (1, 4, 7, 10), 11 of config 3.
    assert created == 12 + 5 + 4 + 11


def test_structured_extend_first_call_compiles_the_plan() -> None:
    table = fifo()
    w = StructuredWriter(table, [sw.create_config({"x": REF["x"][-1]}, "t")])
    assert w.extend(steps(3)) == 3
    w.append(step(steps(1, start=3), 0))
    w.flush()
    assert [int(d[0]) for _, d in read(table)] == [0, 1, 2, 3]


def test_structured_extend_checks_before_writing() -> None:
    table = fifo()
    w = StructuredWriter(table, configs())
    w.extend(steps(2))
    bad = steps(3)
    bad["flag"] = np.zeros(3, np.float32)  # stored: config 2 reads it
    with pytest.raises(ValueError, match=r"wrong dtype .*'flag'"):
        w.extend(bad)
    bad = steps(3)
    bad["td"] = np.zeros(2, np.float32)
    with pytest.raises(ValueError, match=r"has 2 but column .* has 3"):
        w.extend(bad)
    w.flush()
    n = len(table)
    w.extend(steps(1, start=2))  # still counting from step 2
    w.flush()
    assert len(table) == n + 3  # x, x[-3:] at step index 2, td slice


def test_structured_extend_checks_data_conditions_it_does_not_store() -> None:
    table = fifo()
    only = sw.create_config({"x": REF["x"][-1]}, "t",
                            conditions=[Condition.data(STEP)["flag"] == 1])
    w = StructuredWriter(table, [only])
    bad = steps(3)
    bad["flag"] = np.zeros(3, np.float32)
    w.extend(steps(3))
    with pytest.raises(ValueError, match="scalar int or bool values"):
        w.extend(bad)
    w.extend(steps(3, start=3))
    w.flush()
    assert [int(d[0]) for _, d in read(table)] == [1, 4]


def test_structured_extend_stops_at_a_failing_step() -> None:
    """A NaN td_error priority fails the step it is in: the steps before
    it stay appended with their items."""
    table = fifo()
    config = sw.create_config({"x": REF["x"][-1], "td": REF["td"][-1]}, "t",
                              priority=sw.td_error(1.0, STEP, lambda s: s["td"]))
    w = StructuredWriter(table, [config])
    data = steps(5)
    data["td"][3] = np.nan
    with pytest.raises(ValueError, match="config 0"):
        w.extend(data)
    w.flush()
    assert [int(d[1]) for _, d in read(table)] == [0, 1, 2]  # (td, x)
