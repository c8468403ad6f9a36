"""StructuredWriter (reverb-spec section 5.5; fastreplay's version of
Reverb's ``structured_writer_test.py``).

Items are read back through real tables: Fifo tables with
``max_times_sampled=1`` return every item once, in insertion order, so the
step that produced an item is identified by its data (step value = step
index).  Expected behaviour was checked against dm-reverb 0.14.0, including
steps_since_applied carrying over episodes, configs applying only when the
newest step holds one of their fields, and C's truncated ``%``.
"""

from __future__ import annotations

import dataclasses
import operator
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fastreplay
from fastreplay import Client, Server, Table, _nest
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay import structured_writer as sw
from fastreplay.errors import DeadlineExceededError
from fastreplay.structured_writer import (
    Condition,
    ConditionProto,
    Config,
    ModEq,
    PatternNode,
    StructuredWriter,
)

STEP = {"x": np.int64(0)}
REF = sw.create_reference_step(STEP)
STEP_XY = {"x": np.int64(0), "y": np.int64(0)}
REF_XY = sw.create_reference_step(STEP_XY)


# ----- helpers -----


def fifo(name: str = "t", max_size: int = 10_000) -> Table:
    """A table returning every item once, oldest first."""
    return Table(name, sel.Fifo(), sel.Fifo(), max_size, rl.MinSize(1),
                 max_times_sampled=1)


def writer(configs: list[Config], *names: str, **kwargs: Any
           ) -> tuple[StructuredWriter, dict[str, Table]]:
    tables = {n: fifo(n) for n in (names or ("t",))}
    return StructuredWriter(list(tables.values()), configs, **kwargs), tables


def read(table: Table) -> list[list[Any]]:
    """The flat data of every item in ``table``, in insertion order."""
    n = len(table)
    return [s.data for s in table.sample_items(n, timeout=5.0)] if n else []


def scalars(table: Table) -> list[int]:
    """Items of a single squeezed column, as ints."""
    return [int(d[0]) for d in read(table)]


def lists(table: Table) -> list[list[int]]:
    """Items of a single slice column, as lists."""
    return [d[0].tolist() for d in read(table)]


def run_x(configs: list[Config], xs: list[Any], *names: str) -> dict[str, Table]:
    """Append ``{'x': v}`` for each of ``xs`` (None allowed), then flush."""
    w, tables = writer(configs, *names)
    for v in xs:
        w.append({"x": None if v is None else np.int64(v)})
    w.flush()
    return tables


@dataclasses.dataclass(frozen=True)
class Spec:  # not a NamedTuple: that would be a nest
    shape: tuple[int | None, ...]
    dtype: Any


# ----- the condition matrix (Reverb's structured_writer_test) -----


C = Condition
MATRIX = [
    ("step_index<=2", C.step_index() <= 2, [0, 1, 2]),
    ("steps_since>=4", C.steps_since_applied() >= 4, [3, 7]),
    ("steps_since>=1", C.steps_since_applied() >= 1, list(range(10))),
    ("steps_since==2", C.steps_since_applied() == 2, [1, 3, 5, 7, 9]),
    ("step_index%3==0", C.step_index() % 3 == 0, [0, 3, 6, 9]),
    ("step_index%3!=0", C.step_index() % 3 != 0, [1, 2, 4, 5, 7, 8]),
    ("step_index%4==1", C.step_index() % 4 == 1, [1, 5, 9]),
    ("step_index==4", C.step_index() == 4, [4]),
    ("step_index!=4", C.step_index() != 4, [0, 1, 2, 3, 5, 6, 7, 8, 9]),
    ("step_index>6", C.step_index() > 6, [7, 8, 9]),
    ("step_index>=7", C.step_index() >= 7, [7, 8, 9]),
    ("step_index<2", C.step_index() < 2, [0, 1]),
]


@pytest.mark.parametrize("condition, want", [m[1:] for m in MATRIX],
                         ids=[m[0] for m in MATRIX])
def test_condition_matrix(condition: ConditionProto, want: list[int]) -> None:
    server = Server([Table.queue("q", 100)])
    client = Client(f"localhost:{server.port}")
    try:
        w = client.structured_writer([sw.create_config(REF["x"][-1], "q", [condition])])
        # A second episode repeats the items of step_index conditions.
        for _ in range(2 if condition.step_index else 1):
            for i in range(10):
                w.append({"x": np.int64(i)})
            w.flush()
            n = client.server_info()["q"].current_size
            assert [int(s.data[0]) for s in client.sample(
                "q", n, emit_timesteps=False)] == want
            w.end_episode()
    finally:
        server.stop()


def test_is_end_episode_creates_the_last_step_only_in_end_episode() -> None:
    tables = run_x([sw.create_config(REF["x"][-1], "t", [C.is_end_episode()])],
                   list(range(10)))
    assert len(tables["t"]) == 0
    w, tables = writer([sw.create_config(REF["x"][-2:], "t", [C.is_end_episode()])])
    for i in range(10):
        w.append({"x": np.int64(i)})
    w.flush()
    assert len(tables["t"]) == 0
    w.end_episode()
    assert lists(tables["t"]) == [[8, 9]]
    w.append({"x": np.int64(0)})  # too short for [-2:]: no item at the end
    w.end_episode()
    for i in range(3):
        w.append({"x": np.int64(10 + i)})
    w.end_episode(clear_buffers=False)
    w.end_episode(clear_buffers=False)  # at most once per step
    w.flush()
    assert lists(tables["t"]) == [[11, 12]]


def test_all_conditions_must_hold() -> None:
    conds = [C.step_index() % 2 == 0, C.step_index() >= 5]
    assert scalars(run_x([sw.create_config(REF["x"][-1], "t", conds)],
                         list(range(12)))["t"]) == [6, 8, 10]
    conds = [C.is_end_episode(), C.step_index() >= 5]
    w, tables = writer([sw.create_config(REF["x"][-1], "t", conds)])
    for n in (3, 6):
        for i in range(n):
            w.append({"x": np.int64(i)})
        w.end_episode()
    assert scalars(tables["t"]) == [5]


def test_steps_since_applied_continues_across_episodes() -> None:
    w, tables = writer([sw.create_config(REF["x"][-1], "t",
                                         [C.steps_since_applied() >= 4])])
    for _ in range(2):
        for i in range(10):
            w.append({"x": np.int64(i)})
        w.end_episode()
    assert scalars(tables["t"]) == [3, 7, 1, 5, 9]


# ----- patterns -----


OBS = np.stack([np.arange(20, dtype=np.float32), -np.arange(20, dtype=np.float32)], 1)
Select = Callable[[np.ndarray, int], Any]
PATTERNS: list[tuple[str, Callable[[Any], Any], Select, int]] = [
    # (id, pattern, numpy selection from OBS and newest step i, first step i)
    ("[-1]", lambda r: r[-1], lambda a, i: a[i], 0),
    ("[-2]", lambda r: r[-2], lambda a, i: a[i - 1], 1),
    ("[-3:]", lambda r: r[-3:], lambda a, i: a[i - 2:i + 1], 2),
    ("[-3:-1]", lambda r: r[-3:-1], lambda a, i: a[i - 2:i], 2),
    ("[-1:]", lambda r: r[-1:], lambda a, i: a[i:i + 1], 0),
    ("[-3::2]", lambda r: r[-3::2], lambda a, i: a[i - 2:i + 1:2], 2),
    ("[-4::3]", lambda r: r[-4::3], lambda a, i: a[i - 3:i + 1:3], 3),
    ("[-5:-1:2]", lambda r: r[-5:-1:2], lambda a, i: a[i - 4:i:2], 4),
    ("[-6:-2:3]", lambda r: r[-6:-2:3], lambda a, i: a[i - 5:i - 1:3], 5),
]


@pytest.mark.parametrize("pattern, select, first", [p[1:] for p in PATTERNS],
                         ids=[p[0] for p in PATTERNS])
def test_sampled_items_equal_numpy_slices(pattern: Callable[[Any], Any],
                                          select: Select,
                                          first: int) -> None:
    step = {"obs": OBS[0]}
    ref = sw.create_reference_step(step)
    w, tables = writer([sw.create_config(pattern(ref["obs"]), "t")])
    for i in range(10):
        w.append({"obs": OBS[i]})
        w.flush()
        assert len(tables["t"]) == (1 if i >= first else 0)  # buffer length
        if i >= first:
            (got,) = read(tables["t"])[0]
            np.testing.assert_array_equal(got, select(OBS, i))
            assert got.dtype == np.float32


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_step_pattern_x_minus_n_plus_1_every_n(n: int) -> None:
    tables = run_x([sw.create_config(REF["x"][-(n + 1)::n], "t")], list(range(8)))
    assert lists(tables["t"]) == [[i - n, i] for i in range(n, 8)]


def test_nested_pattern_dict_of_tuples() -> None:
    step = {"obs": OBS[0], "act": np.int32(0), "r": np.float64(0)}
    ref = sw.create_reference_step(step)
    pattern = {"transition": (ref["obs"][-2], ref["act"][-2], ref["r"][-2],
                              ref["obs"][-1]),
               "seq": {"obs": ref["obs"][-3:], "r": ref["r"][-3:]}}
    server = Server([Table.queue("q", 100)])
    try:
        client = Client(f"localhost:{server.port}")
        w = client.structured_writer([sw.create_config(pattern, "q")])
        for i in range(6):
            w.append({"obs": OBS[i], "act": np.int32(10 * i), "r": np.float64(i / 2)})
        w.flush()
        assert len(server._tables["q"]) == 4
        info, data = client.sample_batch("q", 4, timeout=5.0)
        steps = np.arange(2, 6)
        assert set(data) == {"transition", "seq"}
        obs0, act, r, obs1 = data["transition"]
        np.testing.assert_array_equal(obs0, OBS[steps - 1])
        np.testing.assert_array_equal(act, 10 * (steps - 1))
        assert act.dtype == np.int32
        np.testing.assert_array_equal(r, (steps - 1) / 2)
        np.testing.assert_array_equal(obs1, OBS[steps])
        np.testing.assert_array_equal(
            data["seq"]["obs"], np.stack([OBS[i - 2:i + 1] for i in steps]))
        np.testing.assert_array_equal(
            data["seq"]["r"], np.stack([np.arange(i - 2, i + 1) / 2 for i in steps]))
    finally:
        server.stop()


def test_round_robin_into_several_tables() -> None:
    configs = [sw.create_config(REF["x"][-1], "even", [C.step_index() % 2 == 0]),
               sw.create_config(REF["x"][-1], "odd", [C.step_index() % 2 == 1])]
    tables = run_x(configs, list(range(10)), "even", "odd")
    assert scalars(tables["even"]) == [0, 2, 4, 6, 8]
    assert scalars(tables["odd"]) == [1, 3, 5, 7, 9]


def test_several_configs_into_one_table_keep_config_order() -> None:
    configs = [sw.create_config(REF["x"][-2:], "t"),
               sw.create_config(REF["x"][-1], "t", [C.step_index() % 2 == 0])]
    got = [d[0].tolist() for d in read(run_x(configs, list(range(5)))["t"])]
    assert got == [0, [0, 1], [1, 2], 2, [2, 3], [3, 4], 4]


@pytest.mark.parametrize("clear_buffers, want", [
    (True, [[0, 1, 2], [1, 2, 3], [2, 3, 4], [10, 11, 12], [11, 12, 13],
            [12, 13, 14]]),
    # History is kept: items span the episode boundary.
    (False, [[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 10], [4, 10, 11],
             [10, 11, 12], [11, 12, 13], [12, 13, 14]]),
])
def test_items_across_episodes(clear_buffers: bool, want: list[list[int]]) -> None:
    w, tables = writer([sw.create_config(REF["x"][-3:], "t")])
    for ep in range(2):
        for i in range(5):
            w.append({"x": np.int64(10 * ep + i)})
        w.end_episode(clear_buffers=clear_buffers)
    assert lists(tables["t"]) == want


def test_missing_values_skip_only_the_slices_containing_them() -> None:
    xs = [0, 1, None, 3, 4, 5, 6]
    assert lists(run_x([sw.create_config(REF["x"][-3:], "t")], xs)["t"]) == [
        [3, 4, 5], [4, 5, 6]]
    # A stride that jumps over the missing step still makes the item.
    assert lists(run_x([sw.create_config(REF["x"][-3::2], "t")], xs)["t"]) == [
        [1, 3], [3, 5], [4, 6]]


def test_config_waits_for_a_referenced_field_in_the_newest_step() -> None:
    xs = [0, 1, None, 3, 4, 5]
    assert lists(run_x([sw.create_config(REF["x"][-3:-1], "t")], xs)["t"]) == [[3, 4]]
    w, tables = writer([sw.create_config(REF_XY["x"][-2], "t")])
    w.append({"x": np.int64(0), "y": np.int64(0)})
    w.append({"x": None, "y": np.int64(1)}, partial_step=True)
    w.flush()
    assert len(tables["t"]) == 0
    w.append({"x": np.int64(1), "y": None})
    w.flush()
    assert scalars(tables["t"]) == [0]


# ----- data conditions -----


def data_run(cond: ConditionProto, flags: list[Any]) -> list[int]:
    w, tables = writer([sw.create_config(REF_XY["x"][-1], "t", [cond])])
    for i, f in enumerate(flags):
        w.append({"x": np.int64(i), "y": f})
    w.flush()
    return scalars(tables["t"])


def test_data_condition_fires_only_where_the_flag_holds() -> None:
    flag = C.data(STEP_XY)["y"]
    flags = [np.int64(f) for f in (0, 1, 1, 0, 3, 1)]
    assert data_run(flag == 1, flags) == [1, 2, 5]
    assert data_run(flag != 1, flags) == [0, 3, 4]
    assert data_run(flag >= 1, flags) == [1, 2, 4, 5]
    assert data_run(flag < 1, flags) == [0, 3]
    assert data_run(flag % 3 == 0, flags) == [0, 3, 4]
    # Python ints and bools are read as ints too.
    assert data_run(flag == 1, [0, True, 1, False]) == [1, 2]


def test_data_condition_on_an_absent_value_is_false() -> None:
    flag = C.data(STEP_XY)["y"]
    flags = [np.int64(0), np.int64(1), None, np.int64(2)]
    assert data_run(flag == 1, flags) == [1]
    assert data_run(flag != 1, flags) == [0, 3]
    assert data_run(flag >= 0, [None] * 3) == []


@pytest.mark.parametrize("bad", [np.float32(1.0), 1.0, np.array([1, 1]),
                                 np.zeros((1,), np.int64)])
def test_data_condition_rejects_non_scalar_and_float_values(bad: Any) -> None:
    w, tables = writer([sw.create_config(REF_XY["x"][-2:], "t",
                                         [C.data(STEP_XY)["y"] == 1])])
    w.append({"x": np.int64(0), "y": np.int64(1)})
    with pytest.raises(ValueError):
        w.append({"x": np.int64(1), "y": bad})
    w.append({"x": np.int64(2), "y": np.int64(1)})  # the bad step was not added
    w.flush()
    assert lists(tables["t"]) == [[0, 2]]


def test_data_condition_modulo_of_negative_values_follows_reverb() -> None:
    flags = [np.int64(f) for f in (-3, -2, -1, 0, 1, 3)]
    assert data_run(C.data(STEP_XY)["y"] % 2 == 1, flags) == [4, 5]


# ----- partial steps -----


def test_partial_steps_fill_one_step_and_step_is_open() -> None:
    pattern = {"x": REF_XY["x"][-1], "y": REF_XY["y"][-2:]}
    w, tables = writer([sw.create_config(pattern, "t")])
    assert not w.step_is_open
    w.append({"x": np.int64(0), "y": np.int64(10)})
    assert not w.step_is_open
    w.append({"x": np.int64(1), "y": None}, partial_step=True)
    assert w.step_is_open
    w.flush()
    assert len(tables["t"]) == 0  # y of step 1 is still missing
    w.append({"x": None, "y": np.int64(11)})
    assert not w.step_is_open
    w.flush()
    assert [[int(a), b.tolist()] for a, b in read(tables["t"])] == [[1, [10, 11]]]


def test_field_given_twice_in_one_step_raises_and_keeps_the_step() -> None:
    w, tables = writer([sw.create_config({"x": REF_XY["x"][-1], "y": REF_XY["y"][-1]},
                                         "t")])
    w.append({"x": np.int64(1), "y": None}, partial_step=True)
    with pytest.raises(ValueError, match=r"\('x',\)"):
        w.append({"x": np.int64(2), "y": None}, partial_step=True)
    assert w.step_is_open
    w.append({"x": None, "y": np.int64(5)})
    w.flush()
    assert [[int(v) for v in d] for d in read(tables["t"])] == [[1, 5]]


def test_config_fires_once_its_field_arrives_and_at_most_once_per_step() -> None:
    step = {"x": np.int64(0), "y": np.int64(0), "z": np.int64(0)}
    ref = sw.create_reference_step(step)
    configs = [sw.create_config(ref["x"][-1], "x"),
               sw.create_config(ref["y"][-1], "y"),
               sw.create_config(ref["x"][-1], "z", [C.data(step)["z"] == 1])]
    w, tables = writer(configs, "x", "y", "z")
    for i in range(3):
        w.append({"x": np.int64(i), "y": None, "z": None}, partial_step=True)
        w.append({"x": None, "y": np.int64(10 + i), "z": None}, partial_step=True)
        w.flush()
        assert [len(tables[n]) for n in "xyz"] == [1, 1, 0]
        w.append({"x": None, "y": None, "z": np.int64(1)})
        w.flush()
        assert [len(tables[n]) for n in "xyz"] == [1, 1, 1]
        assert [scalars(tables[n]) for n in "xyz"] == [[i], [10 + i], [i]]


def test_end_episode_closes_an_open_step() -> None:
    configs = [sw.create_config(REF_XY["x"][-2:], "end", [C.is_end_episode()]),
               sw.create_config(REF_XY["x"][-1], "t")]
    w, tables = writer(configs, "end", "t")
    w.append({"x": np.int64(0), "y": np.int64(0)})
    w.append({"x": np.int64(1), "y": None}, partial_step=True)
    w.end_episode()
    assert not w.step_is_open
    w.append({"x": np.int64(2), "y": np.int64(0)})
    w.flush()
    assert lists(tables["end"]) == [[0, 1]] and scalars(tables["t"]) == [0, 1, 2]


def test_step_index_counts_partial_steps_once() -> None:
    w, tables = writer([sw.create_config(REF_XY["x"][-1], "t",
                                         [C.step_index() == 1])])
    for i in range(3):
        w.append({"x": np.int64(i), "y": None}, partial_step=True)
        w.append({"x": None, "y": np.int64(i)})
    w.flush()
    assert scalars(tables["t"]) == [1]


# ----- storage, dtypes and shapes -----


def test_unreferenced_columns_are_never_stored() -> None:
    stats = []
    for extra in ({}, {"big": np.ones(50_000)}, {"s": "text"}):
        ref = sw.create_reference_step({"x": 0, **extra})  # "big" and "s" sort first
        store = fastreplay.ChunkStore()
        w, tables = writer([sw.create_config(ref["x"][-2:], "t")], chunk_store=store)
        for i in range(20):
            w.append({"x": np.int64(i), **extra})
        w.end_episode()
        stats.append(store.stats())
        assert len(tables["t"]) == 19
    assert stats[0]["raw_bytes"] > 0
    assert stats[1] == stats[0]
    assert stats[2] == stats[0]


NESTED = {"a": {"b": (np.float32(0), np.int32(0))}, "c": np.zeros(2)}
NESTED_REF = sw.create_reference_step(NESTED)


@pytest.mark.parametrize("bad, match", [
    ({"a": {"b": (np.float32(0), np.int64(0))}}, r"dtype.*\('a', 'b', 1\)"),
    ({"a": {"b": (np.float32(0), np.zeros(3, np.int32))}}, r"shape.*\('a', 'b', 1\)"),
    ({"a": {"b": (np.float64(0), np.int32(0))}}, r"dtype.*\('a', 'b', 0\)"),
    ({"c": np.zeros(3)}, r"shape.*\('c',\)"),
    ({"c": np.zeros(2, np.float32)}, r"dtype.*\('c',\)"),
])
def test_dtype_and_shape_errors_name_the_path_and_keep_the_writer(
        bad: dict[str, Any], match: str) -> None:
    pattern = [NESTED_REF["a"]["b"][0][-2:], NESTED_REF["a"]["b"][1][-1],
               NESTED_REF["c"][-1]]
    w, tables = writer([sw.create_config(pattern, "t")])

    def step(i: int) -> dict[str, Any]:
        return {"a": {"b": (np.float32(i), np.int32(i))}, "c": np.full(2, float(i))}

    w.append(step(0))
    with pytest.raises(ValueError, match=match):
        w.append({**step(1), **bad})
    w.append(step(2))
    w.flush()
    (got,) = read(tables["t"])
    assert got[0].tolist() == [0.0, 2.0] and int(got[1]) == 2
    np.testing.assert_array_equal(got[2], [2.0, 2.0])


def test_flattened_length_change_raises() -> None:
    w, tables = writer([sw.create_config(REF_XY["x"][-1], "t")])
    w.append({"x": np.int64(0), "y": np.int64(0)})
    for bad, n in (({"x": np.int64(1)}, 1),
                   ({"x": np.int64(1), "y": np.int64(1), "z": np.int64(1)}, 3)):
        with pytest.raises(ValueError, match=re.escape(
                f"Flattened data has an unexpected length, got {n} but wanted 2.")):
            w.append(bad)
    w.append({"x": np.int64(2), "y": np.int64(0)})
    w.flush()
    assert scalars(tables["t"]) == [0, 2]


# ----- priorities -----


def test_default_and_constant_priorities() -> None:
    configs = [sw.create_config(REF["x"][-1], "a"),
               sw.create_config(REF["x"][-1], "b",
                                priority=sw.constant_priority_fn(2.5))]
    tables = run_x(configs, [0, 1], "a", "b")
    assert [s.info.priority for s in tables["a"].sample_items(2)] == [1.0, 1.0]
    assert [s.info.priority for s in tables["b"].sample_items(2)] == [2.5, 2.5]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("weight", [0.0, 0.25, 1.0])
@pytest.mark.parametrize("length", [1, 3])
def test_td_error_priority(dtype: type, weight: float, length: int) -> None:
    step = {"x": np.int64(0), "td": dtype(0)}
    ref = sw.create_reference_step(step)
    td_node = ref["td"][-1] if length == 1 else ref["td"][-length:]
    config = sw.create_config({"x": ref["x"][-1], "td": td_node}, "t",
                              priority=sw.td_error(weight, step, lambda s: s["td"]))
    w, tables = writer([config])
    tds = [3, -1, 2, -5, 4, 0]
    for i, d in enumerate(tds):
        w.append({"x": np.int64(i), "td": dtype(d)})
    w.flush()
    want = []
    for i in range(length - 1, len(tds)):
        cells = np.abs(np.array(tds[i - length + 1:i + 1], dtype=np.float64))
        want.append(weight * cells.max() + (1 - weight) * cells.mean())
    got = [s.info.priority for s in tables["t"].sample_items(len(want))]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_td_error_uses_only_the_cells_of_a_strided_slice() -> None:
    step = {"td": np.float32(0)}
    ref = sw.create_reference_step(step)
    config = sw.create_config(ref["td"][-4::2], "t",
                              priority=sw.td_error(0.5, step, lambda s: s["td"]))
    w, tables = writer([config])
    for v in [9, 100, 2, 100]:
        w.append({"td": np.float32(v)})
    w.flush()
    (s,) = tables["t"].sample_items(1)
    assert s.data[0].tolist() == [9.0, 2.0]
    assert s.info.priority == pytest.approx(0.5 * 9 + 0.5 * 5.5)


@pytest.mark.parametrize("value", [np.int16(1), np.uint8(1), np.bool_(True),
                                   np.float16(1), np.zeros(2, np.float32)])
def test_td_error_rejects_unsupported_columns(value: Any) -> None:
    step = {"td": value}
    ref = sw.create_reference_step(step)
    config = sw.create_config(ref["td"][-1], "t",
                              priority=sw.td_error(0.5, step, lambda s: s["td"]))
    w, tables = writer([config])
    with pytest.raises(ValueError, match="TD Error expects a scalar"):
        w.append(step)
    assert len(tables["t"]) == 0


def test_td_error_field_must_be_in_the_pattern() -> None:
    config = sw.create_config(REF_XY["x"][-1], "t",
                              priority=sw.td_error(0.5, STEP_XY, lambda s: s["y"]))
    with pytest.raises(ValueError, match="Invalid configuration at position 0: "):
        writer([config])


# ----- config validation -----


def node(start: int | None = None, stop: int | None = None, step: int | None = None,
         index: int = 0) -> PatternNode:
    return PatternNode(index, start, stop, step)


def config(flat: list[PatternNode] | None = None, table: str = "t",
           conditions: tuple[ConditionProto, ...] = ()) -> Config:
    flat = [node(stop=-1)] if flat is None else flat
    return Config(flat, [None] * len(flat), table, sw.constant_priority_fn(1.0),
                  list(conditions))


def cond(**kwargs: Any) -> Config:
    """A config with one condition ``ConditionProto(**kwargs)``."""
    return config(conditions=(ConditionProto(**kwargs),))


END_EQ_1 = "Condition must use `eq=1` when using `is_end_episode`."
BAD_CONFIGS = [
    (config(flat=[]), "`flat` must not be empty."),
    (config(table=""), "`table` must not be empty."),
    (config([node(stop=-1, index=-1)]), "`flat_source_index` must be >= 0 but got -1."),
    (config([node()]), "At least one of `start` and `stop` must be specified."),
    (config([node(start=0)]), "`start` must be < 0 but got 0."),
    (config([node(start=1, stop=2)]), "`start` must be < 0 but got 1."),
    (config([node(start=-2, stop=1)]), "`stop` must be <= 0 but got 1."),
    (config([node(start=-2, stop=-2)]),
     "`stop` (-2) must be > `start` (-2) when both are specified."),
    (config([node(start=-2, stop=-3)]),
     "`stop` (-3) must be > `start` (-2) when both are specified."),
    (config([node(stop=0)]), "`stop` must be < 0 when `start` isn't set but got 0."),
    (config([node(stop=-1, step=1)]), "`step` must only be set when `start` is set."),
    (config([node(start=-2, step=0)]), "`step` must be > 0 but got 0."),
    (config([node(start=-2, step=-1)]), "`step` must be > 0 but got -1."),
    (cond(eq=1), "Conditions must specify a value for `left`."),
    (cond(step_index=True), "Conditions must specify a value for `cmp`."),
    (cond(step_index=True, mod_eq=ModEq(0, 0)), "`mod_eq.mod` must be > 0 but got 0."),
    (cond(step_index=True, mod_eq=ModEq(-2, 0)),
     "`mod_eq.mod` must be > 0 but got -2."),
    (cond(step_index=True, mod_eq=ModEq(2, -1)),
     "`mod_eq.eq` must be >= 0 but got -1."),
    (cond(is_end_episode=True, eq=2), END_EQ_1),
    (cond(is_end_episode=True, ge=1), END_EQ_1),
    (cond(is_end_episode=True, eq=1, inverse=True), END_EQ_1),
    (cond(flat_source_index=-1, eq=1), "flat_source_index must be >= 0 but got -1."),
]


@pytest.mark.parametrize("bad, message", BAD_CONFIGS,
                         ids=[m for _, m in BAD_CONFIGS])
@pytest.mark.parametrize("position", [0, 1])
def test_invalid_configs_are_rejected_with_reverb_messages(
        bad: Config, message: str, position: int) -> None:
    configs = [config()] * position + [bad]
    want = re.escape(f"Invalid configuration at position {position}: {message}")
    server = Server([Table.queue("t", 10)])
    try:
        with pytest.raises(ValueError, match=f"^{want}$"):
            Client(f"localhost:{server.port}").structured_writer(configs)
    finally:
        server.stop()
    with pytest.raises(ValueError, match=f"^{want}$"):
        StructuredWriter([fifo()], configs)
    with pytest.raises(ValueError, match=f"^{want}$"):
        sw.validate_config(sw.with_buffer_length_condition(bad), position)


def test_validate_config_requires_the_buffer_length_condition() -> None:
    good = sw.create_config(REF["x"][-3:], "t")
    with pytest.raises(ValueError, match=re.escape(
            "Invalid configuration at position 2: Config does not contain required "
            "buffer length condition; buffer_length >= 3.")):
        sw.validate_config(good, 2)
    sw.validate_config(sw.with_buffer_length_condition(good))


def test_unknown_table_and_no_configs() -> None:
    with pytest.raises(ValueError, match="^Invalid configuration at position 1: "
                                         "table 'nope' not found"):
        writer([config(), config(table="nope")])
    server = Server([Table.queue("t", 10)])
    try:
        for make in (lambda c: StructuredWriter([fifo()], c),
                     Client(f"localhost:{server.port}").structured_writer):
            with pytest.raises(ValueError, match=re.escape(
                    "At least one config must be provided.")):
                make([])
    finally:
        server.stop()


# ----- patterns as data -----


def test_unpack_pattern_round_trips_and_pattern_from_transform() -> None:
    step = {"a": np.zeros(2), "b": (np.int32(0), {"c": np.float32(0)})}

    def transform(ref: Any) -> Any:
        return {"z": (ref["a"][-2], ref["b"][1]["c"][-3::2]),
                "y": [ref["b"][0][-2:-1], ref["a"][-1]]}

    pattern = transform(sw.create_reference_step(step))
    assert sw.pattern_from_transform(step, transform) == pattern
    cfg = sw.create_config(pattern, "t")
    assert sw.unpack_pattern(cfg) == pattern
    assert cfg.flat == _nest.flatten(pattern)
    assert cfg.flat == [PatternNode(1, -2, -1, None), PatternNode(0, None, -1, None),
                        PatternNode(0, None, -2, None), PatternNode(2, -3, None, 2)]
    with pytest.raises(ValueError, match="Key must be int or slice"):
        REF["x"]["a"]


# ----- infer_signature -----


SPEC = {"a": Spec((3, 2), np.dtype(np.float32)), "b": Spec((), np.dtype(np.int64)),
        "c": Spec((4,), np.dtype(np.int64)), "d": Spec((2, 2), np.dtype(np.float32))}
SREF = sw.create_reference_step(SPEC)


def shape_of(spec: Any) -> tuple[int | None, ...]:
    return tuple(None if d is None else int(d) for d in spec.shape)


def dtype_of(spec: Any) -> np.dtype[Any]:
    """numpy dtype of a spec (a tf.TensorSpec when TensorFlow is installed)."""
    dtype: np.dtype[Any] = np.dtype(getattr(spec.dtype, "as_numpy_dtype", spec.dtype))
    return dtype


def test_infer_signature_shapes_and_dtypes() -> None:
    pattern = {"a": SREF["a"][-3::2], "b": SREF["b"][-1], "c": SREF["c"][-4:-1],
               "s": (SREF["b"][-6:-1:2], SREF["d"][-1:])}
    sig = sw.infer_signature([sw.create_config(pattern, "t")] * 2, SPEC)
    assert {k: shape_of(v) for k, v in sig.items() if k != "s"} == {
        "a": (2, 3, 2), "b": (), "c": (3, 4)}
    assert [shape_of(s) for s in sig["s"]] == [(3,), (1, 2, 2)]
    assert dtype_of(sig["a"]) == np.float32 and dtype_of(sig["b"]) == np.int64
    assert dtype_of(sig["c"]) == np.int64 and dtype_of(sig["s"][1]) == np.float32


def test_infer_signature_matches_sampled_data() -> None:
    step = {"a": np.zeros((3, 2), np.float32), "b": np.int64(0)}
    ref = sw.create_reference_step(step)
    pattern = {"a": ref["a"][-3::2], "b": ref["b"][-5:-1:3]}
    sig = sw.infer_signature([sw.create_config(pattern, "t")], step)
    w, tables = writer([sw.create_config(pattern, "t")])
    for i in range(5):
        w.append({"a": np.full((3, 2), i, np.float32), "b": np.int64(i)})
    w.flush()
    (data,) = read(tables["t"])
    assert [d.shape for d in data] == [shape_of(sig["a"]), shape_of(sig["b"])]
    assert data[1].tolist() == [0, 3]


def test_infer_signature_varying_leading_dim_becomes_none() -> None:
    configs = [sw.create_config({"a": SREF["a"][-3:], "b": SREF["b"][-1]}, "t"),
               sw.create_config({"a": SREF["a"][-2:], "b": SREF["b"][-1]}, "t")]
    sig = sw.infer_signature(configs, SPEC)
    assert shape_of(sig["a"]) == (None, 3, 2) and shape_of(sig["b"]) == ()
    sig = sw.infer_signature([sw.create_config(SREF["a"][-1], "t"),
                              sw.create_config(SREF["d"][-1], "t")], SPEC)
    assert shape_of(sig) == (None, 2)


@pytest.mark.parametrize("patterns, tables, match", [
    ((SREF["a"][-3:], SREF["a"][-3:]), ("t", "u"),
     "All configs must target the same table but provided configs included t, u."),
    (([SREF["a"][-3:]], (SREF["a"][-3:],)), ("t", "t"),
     "All configs must have exactly the same pattern_structure."),
    (({"a": SREF["a"][-3:]}, {"b": SREF["a"][-3:]}), ("t", "t"),
     "All configs must have exactly the same pattern_structure."),
    ((SREF["a"][-3:], SREF["c"][-3:]), ("t", "t"),
     "Configs produce trajectories with multiple dtypes at ()."),
    ((SREF["b"][-3:], SREF["c"][-3:]), ("t", "t"),
     "Configs produce trajectories with incompatible shapes at ()."),
    ((SREF["c"][-1], SREF["c"][-3:]), ("t", "t"),
     "Configs produce trajectories with incompatible shapes at ()."),
    ((SREF["a"][-3:], SREF["d"][-3:]), ("t", "t"),
     "Configs produce trajectories with incompatible shapes at ()."),
])
def test_infer_signature_rejects_inconsistent_configs(
        patterns: tuple[Any, Any], tables: tuple[str, str], match: str) -> None:
    configs = [sw.create_config(p, t) for p, t in zip(patterns, tables, strict=True)]
    with pytest.raises(ValueError, match="^" + re.escape(match)):
        sw.infer_signature(configs, SPEC)
    with pytest.raises(ValueError, match="At least one config must be provided."):
        sw.infer_signature([], SPEC)


# ----- flush, end_episode, close -----


def blocked_writer() -> tuple[StructuredWriter, Table, Table]:
    """A full queue of size 1 with two more items waiting, and a table of
    the steps with step_index 0."""
    queue, first = Table.queue("q", 1), fifo("first")
    w = StructuredWriter([queue, first], [
        sw.create_config(REF["x"][-1], "q"),
        sw.create_config(REF["x"][-1], "first", [C.step_index() == 0])])
    for i in range(3):
        w.append({"x": np.int64(i)})
    return w, queue, first


def test_flush_rejects_negative_block_until_num_items() -> None:
    w, _ = writer([sw.create_config(REF["x"][-1], "t")])
    w.flush(0)
    w.append({"x": np.int64(0)})
    w.flush(1)
    with pytest.raises(ValueError, match="block_until_num_items must be >= 0"):
        w.flush(-1)


@pytest.mark.parametrize("timeout_ms", [0, 30])
def test_flush_and_end_episode_time_out_on_a_full_queue(timeout_ms: int) -> None:
    w, queue, first = blocked_writer()
    with pytest.raises(DeadlineExceededError, match="Flush call did not complete"):
        w.flush(timeout_ms=timeout_ms)
    with pytest.raises(DeadlineExceededError, match="End episode call did not"):
        w.end_episode(timeout_ms=timeout_ms)
    w.append({"x": np.int64(3)})  # the episode ended nevertheless: step_index 0
    got = [int(queue.sample_items(1, timeout=5.0)[0].data[0]) for _ in range(4)]
    assert got == [0, 1, 2, 3]
    w.flush(timeout_ms=5000)
    assert scalars(first) == [0, 3]


def test_flush_times_out_under_sample_to_insert_ratio() -> None:
    table = Table("r", sel.Fifo(), sel.Fifo(), 100,
                  rl.SampleToInsertRatio(1.0, 1, (0.0, 2.0)))
    w = StructuredWriter([table], [sw.create_config(REF["x"][-1], "r")])
    for i in range(3):
        w.append({"x": np.int64(i)})
    with pytest.raises(DeadlineExceededError):
        w.flush(timeout_ms=20)
    assert len(table) == 2
    table.sample(1, timeout=5.0)
    w.flush(timeout_ms=5000)
    assert len(table) == 3


def test_close_then_use_raises_and_context_manager_flushes() -> None:
    w, _ = writer([sw.create_config(REF["x"][-1], "t")])
    w.append({"x": np.int64(0)})
    w.close()
    calls: list[Callable[[], None]] = [
        lambda: w.append({"x": np.int64(1)}), w.flush, w.end_episode]
    for call in calls:
        with pytest.raises(RuntimeError, match="Close has been called"):
            call()
    table = fifo()
    with StructuredWriter([table], [sw.create_config(REF["x"][-1], "t")]) as w:
        w.append({"x": np.int64(7)})
    assert scalars(table) == [7]  # __exit__ flushes


# ----- property: items match a pure-Python model -----


def model_items(specs: list[dict[str, Any]], episodes: list[tuple[int, bool]]
                ) -> dict[str, list[Any]]:
    """The items of ``specs`` over x = 0, 1, 2, ... with dm-reverb's semantics
    (history kept by clear_buffers=False, step_index restarting)."""
    out: dict[str, list[Any]] = {s["table"]: [] for s in specs}
    since = [0] * len(specs)
    history: list[int] = []
    value = 0

    def apply(k: int, step: int, end: bool) -> None:
        s = specs[k]
        left = {"step_index": step, "steps_since_applied": since[k]}
        if s["end"] != end or not all(op(left[name] % (mod or 2**62), v)
                                      for name, mod, op, v in s["conds"]):
            return
        item = []
        for start, stop, stride in s["nodes"]:
            if -(start if start is not None else stop) > len(history):
                return  # not enough history
            item.append(history[stop] if start is None
                        else history[start:stop or None:stride])
        out[s["table"]].append(item)
        since[k] = 0

    for length, clear in episodes:
        for i in range(length):
            history.append(value)
            value += 1
            since = [n + 1 for n in since]
            for k in range(len(specs)):
                apply(k, i, False)
        for k in range(len(specs)):
            apply(k, length - 1, True)
        if clear:
            history = []
    return out


OPS = [operator.eq, operator.ne, operator.ge, operator.gt, operator.le, operator.lt]


@st.composite
def node_specs(draw: Any) -> tuple[int | None, int | None, int | None]:
    """(start, stop, step) of a squeezed element or a slice."""
    if draw(st.booleans()):
        return None, -draw(st.integers(1, 4)), None
    start = -draw(st.integers(1, 5))
    stop = draw(st.sampled_from([None, *range(start + 1, 0)]))
    return start, stop, draw(st.sampled_from([None, 1, 2, 3]))


@st.composite
def config_specs(draw: Any, lefts: list[str]) -> dict[str, Any]:
    conds = []  # (left, mod or None, comparison, value)
    for _ in range(draw(st.integers(0, 2))):
        if draw(st.booleans()):
            mod = draw(st.integers(1, 4))
            op = draw(st.sampled_from([operator.eq, operator.ne]))
            conds.append(("step_index", mod, op, draw(st.integers(0, mod - 1))))
        else:
            conds.append((draw(st.sampled_from(lefts)), None,
                          draw(st.sampled_from(OPS)), draw(st.integers(0, 6))))
    return {"nodes": draw(st.lists(node_specs(), min_size=1, max_size=3)),
            "conds": conds, "end": draw(st.integers(0, 4)) == 0,
            "table": draw(st.sampled_from(["t0", "t1"]))}


def to_config(spec: dict[str, Any]) -> Config:
    pattern = [REF["x"][stop] if start is None else REF["x"][start:stop:step]
               for start, stop, step in spec["nodes"]]
    conds = []
    for name, mod, op, v in spec["conds"]:
        left = getattr(C, name)()  # the builders overload the comparisons
        conds.append(op(left if mod is None else left % mod, v))
    if spec["end"]:
        conds.append(C.is_end_episode())
    return sw.create_config(pattern, spec["table"], conds)


@st.composite
def scenarios(draw: Any) -> tuple[list[dict[str, Any]], list[tuple[int, bool]]]:
    since = draw(st.booleans())
    lefts = ["step_index", "steps_since_applied"] if since else ["step_index"]
    specs = draw(st.lists(config_specs(lefts), min_size=1, max_size=3))
    episodes = draw(st.lists(st.tuples(st.integers(1, 9), st.booleans()),
                             min_size=1, max_size=4))
    return specs, episodes


@given(scenarios())
def test_items_match_reference_model(
        scenario: tuple[list[dict[str, Any]], list[tuple[int, bool]]]) -> None:
    specs, episodes = scenario
    w, tables = writer([to_config(s) for s in specs], "t0", "t1")
    value = 0
    for length, clear in episodes:
        for _ in range(length):
            w.append({"x": np.int64(value)})
            value += 1
        w.end_episode(clear_buffers=clear)
    want = model_items(specs, episodes)
    for name, table in tables.items():
        got = [[d.tolist() for d in data] for data in read(table)]
        assert got == want.get(name, [])
