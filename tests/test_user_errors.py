"""Every error a user can trigger names what it should (issue 16, part 4).

One table of cases: each triggers a user-facing error through the public
Reverb-style API and lists the substrings its message must contain (the
field or column path, the table, and the fix), then checks that the call
left the writer usable and the table's items unchanged.  Reverb's own texts
(reverb-spec) stay at the start of the messages; the guidance follows them.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import fastreplay as reverb
from fastreplay import Server, Table, TrajectoryWriter, errors
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay import structured_writer as sw
from fastreplay.checkpointers import DefaultCheckpointer

Trigger = Callable[[], Any]
After = Callable[[], None]


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    setup: Callable[[], tuple[Trigger, After | None]]
    exc: type[BaseException]
    names: tuple[str, ...]  # substrings the message must contain


CASES: list[Case] = []


def case(exc: type[BaseException], *names: str
         ) -> Callable[[Callable[[], tuple[Trigger, After | None]]], None]:
    def register(setup: Callable[[], tuple[Trigger, After | None]]) -> None:
        CASES.append(Case(setup.__name__, setup, exc, names))
    return register


def uniform(name: str = "t", **kwargs: Any) -> Table:
    return Table(name, sel.Uniform(), sel.Fifo(), 100, rl.MinSize(1), seed=1,
                 **kwargs)


def prioritized(name: str = "p") -> Table:
    return Table(name, sel.Prioritized(1.0), sel.Fifo(), 100, rl.MinSize(1), seed=2)


def step(i: int) -> dict[str, Any]:
    return {"obs": np.full(2, i, np.float32), "act": np.int32(i)}


def filled_writer(table: Table, keep: int = 2, steps: int = 5) -> TrajectoryWriter:
    """A writer that appended ``steps`` steps and inserted one item."""
    w = TrajectoryWriter([table], keep, seed=3)
    for i in range(steps):
        w.append(step(i))
    w.create_item(table.name, 1.0, {"obs": w.history["obs"][-1:]})
    w.flush()
    return w


def still_works(w: TrajectoryWriter, table: Table, size: int) -> After:
    """After the error: the table still holds ``size`` items with their
    data, and the writer appends and inserts as before."""
    def after() -> None:
        assert len(table) == size
        w.append(step(99))
        w.create_item(table.name, 1.0, {"obs": w.history["obs"][-1:],
                                        "act": w.history["act"][-1]})
        w.flush()
        assert len(table) == size + 1
    return after


def table_unchanged(table: Table) -> After:
    keys = sorted(table.items()["key"].tolist()) if len(table) else []

    def after() -> None:
        now = sorted(table.items()["key"].tolist()) if len(table) else []
        assert now == keys
    return after


# ----- history and the keep-alive window -----


@case(ValueError, "TrajectoryColumns cannot contain any None data references",
      "('obs',)", "num_keep_alive_refs=2", "increase num_keep_alive_refs to at least 5")
def history_slice_past_keep_alive() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t)
    return lambda: w.history["obs"][-5:], still_works(w, t, 1)


@case(ValueError, "('obs',)", "increase num_keep_alive_refs to at least 4")
def history_index_past_keep_alive() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t)
    return lambda: w.history["obs"][-4], still_works(w, t, 1)


@case(ValueError, "('act',)", "increase num_keep_alive_refs to at least 5")
def history_list_past_keep_alive() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t)
    return lambda: w.history["act"][[0, 4]], still_works(w, t, 1)


@case(ValueError, "None data references", "('extra',)", "no value at history index",
      "[-2]", "slice only steps that have a value")
def history_slice_over_steps_without_the_field() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t, keep=5)
    w.append({**step(5), "extra": np.int8(1)})
    return lambda: w.history["extra"][-2:], still_works(w, t, 1)


@case(errors.HistoryIndexError, "history index 7 out of range", "('obs',)",
      "valid indices are -5 to 4")
def history_index_out_of_range() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t, keep=5)
    return lambda: w.history["obs"][7], still_works(w, t, 1)


@case(errors.HistoryIndexError, "history indices [0, 9] out of range", "('obs',)",
      "valid indices")
def history_list_out_of_range() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t, keep=5)
    return lambda: w.history["obs"][[0, 9]], still_works(w, t, 1)


@case(RuntimeError, "Cannot access data from expired WeakCellRef", "('obs',)",
      "num_keep_alive_refs")
def weak_ref_read_after_expiry() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t, steps=1)
    ref = w.append(step(1))["obs"]
    ref.numpy()  # materialized while alive
    for i in range(3):
        w.append(step(i))
    return ref.numpy, still_works(w, t, 1)


@case(RuntimeError, "Cannot access data from expired WeakCellRef", "('obs',)",
      "end_episode(clear_buffers=True)")
def weak_ref_read_after_end_episode() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t, keep=5, steps=2)
    ref = w.history["obs"][-1:]
    (cell,) = list(ref)
    w.end_episode()
    return cell.numpy, still_works(w, t, 1)


@case(RuntimeError, "Cannot convert TrajectoryColumn with expired data references",
      "('obs',)", "increase num_keep_alive_refs to at least 4")
def column_numpy_after_expiry() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t)
    column = w.history["obs"][-2:]
    w.append(step(5))
    w.append(step(6))
    return column.numpy, still_works(w, t, 1)


@case(ValueError, "None data references", "path ('obs',)",
      "build columns from WeakCellRef objects only")
def trajectory_column_of_none() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t)
    ref = w.append(step(5))["obs"]
    return (lambda: reverb.TrajectoryColumn([ref, None], path=("obs",)),
            still_works(w, t, 1))


@case(RuntimeError, "history cannot be accessed before `append`")
def history_before_append() -> tuple[Trigger, After | None]:
    w = TrajectoryWriter([uniform()], 2)
    return lambda: w.history, None


# ----- append -----


@case(ValueError, "Tensor of wrong dtype provided for column ('obs',)",
      "Got double but expected float")
def append_wrong_dtype() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t)
    bad = {"obs": np.zeros(2, np.float64), "act": np.int32(0)}
    return lambda: w.append(bad), still_works(w, t, 1)


@case(ValueError, "Tensor of incompatible shape provided for column ('obs',)",
      "Got [3] which is incompatible with [2]")
def append_wrong_shape() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t)
    bad = {"obs": np.zeros(3, np.float32), "act": np.int32(0)}
    return lambda: w.append(bad), still_works(w, t, 1)


@case(ValueError, "Field ('act',) has already been set in the active step",
      "must be omitted or set to None")
def append_field_twice_in_one_step() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t)

    def trigger() -> None:
        w.append({"act": np.int32(1)}, partial_step=True)
        w.append({"act": np.int32(2)})

    def after() -> None:
        w.append({"obs": np.zeros(2, np.float32)})  # closes the open step
        still_works(w, t, 1)()
    return trigger, after


@case(TypeError, "column ('obs',)", "an object array must hold only str or bytes",
      "give a numeric or bool array")
def append_object_value() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t)
    return (lambda: w.append({"obs": object(), "act": np.int32(0)}),
            still_works(w, t, 1))


@case(TypeError, "Unsupported dtype", "column ('obs',)", "convert the value")
def append_unsupported_dtype() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t)
    bad = {"obs": np.array(["2020-01-01"] * 2, dtype="datetime64[D]"),
           "act": np.int32(0)}
    return lambda: w.append(bad), still_works(w, t, 1)


@case(RuntimeError, "TrajectoryWriter::Close has been called.")
def append_after_close() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t)
    w.close()
    return lambda: w.append(step(0)), table_unchanged(t)


# ----- create_item -----


@case(ValueError, "Error in column 0: Column contains expired CellRef.",
      "table 't'", "writer column ('obs',)",
      "increase num_keep_alive_refs to at least 4")
def create_item_with_expired_column() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t)
    column = w.history["obs"][-2:]
    w.append(step(5))
    w.append(step(6))
    return (lambda: w.create_item("t", 1.0, {"obs": column}),
            still_works(w, t, 1))


@case(ValueError, "Unable to create item in table 'nope' since the table could "
      "not be found.", "This writer's tables are: t.")
def create_item_unknown_table() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t)
    return (lambda: w.create_item("nope", 1.0, {"obs": w.history["obs"][-1:]}),
            still_works(w, t, 1))


@case(ValueError, "trajectory must not be empty.", "table 't'",
      "at least one non-empty TrajectoryColumn")
def create_item_empty() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t)
    return lambda: w.create_item("t", 1.0, {}), still_works(w, t, 1)


@case(ValueError, "Error in column 1: TrajectoryColumn must not be empty",
      "table 't'", "slice at least one step")
def create_item_empty_column() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t)
    return (lambda: w.create_item("t", 1.0, {"act": w.history["act"][-1:],
                                             "obs": w.history["obs"][3:3]}),
            still_works(w, t, 1))


@case(errors.InvalidPriorityError, "`priority` must not be nan.", "table 't'")
def create_item_nan_priority() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t)
    return (lambda: w.create_item("t", float("nan"), {"obs": w.history["obs"][-1:]}),
            still_works(w, t, 1))


@case(errors.InvalidPriorityError, "Priority must not be negative.", "table 'p'")
def create_item_negative_priority() -> tuple[Trigger, After | None]:
    t = prioritized()
    w = filled_writer(t)
    return (lambda: w.create_item("p", -1.0, {"obs": w.history["obs"][-1:]}),
            still_works(w, t, 1))


@case(ValueError, "Column references tensors with different dtypes",
      "table 't'", "item column 0", "writer column ('act',)",
      "Build each TrajectoryColumn from one history column")
def create_item_mixed_dtypes() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t)
    h = w.history
    column = reverb.TrajectoryColumn([*h["obs"][-1:], *h["act"][-1:]])
    return lambda: w.create_item("t", 1.0, {"x": column}), still_works(w, t, 1)


@case(TypeError, "All leaves of the trajectory must be TrajectoryColumn",
      "ColumnHistory")
def create_item_history_not_sliced() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t)
    return (lambda: w.create_item("t", 1.0, {"obs": w.history["obs"]}),
            still_works(w, t, 1))


@case(ValueError, "Columns must contain exactly one data reference when squeeze "
      "set, got 2")
def squeezed_column_of_two() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t)
    return (lambda: reverb.TrajectoryColumn(list(w.history["obs"][-2:]),
                                            squeeze=True),
            still_works(w, t, 1))


SIG = {"act": sw.TensorSpec((), np.dtype("int32")),
       "obs": sw.TensorSpec((1, 2), np.dtype("float64"))}


@case(ValueError, "The table expects column 1 to be a double [1, 2] tensor but got a "
      "float [1, 2] tensor.", "signature path ('obs',)", "writer column ('obs',)",
      "append values of the signature's dtype")
def create_item_signature_dtype() -> tuple[Trigger, After | None]:
    t = uniform(signature=SIG)
    w = TrajectoryWriter([t], 2)
    w.append(step(0))
    return (lambda: w.create_item("t", 1.0, {"act": w.history["act"][-1],
                                             "obs": w.history["obs"][-1:]}),
            table_unchanged(t))


@case(ValueError, "The trajectory has 1 columns but the table signature has 2 "
      "columns.", "('act',), ('obs',)", "one TrajectoryColumn for each")
def create_item_signature_count() -> tuple[Trigger, After | None]:
    t = uniform(signature=SIG)
    w = TrajectoryWriter([t], 2)
    w.append(step(0))
    return (lambda: w.create_item("t", 1.0, {"obs": w.history["obs"][-1:]}),
            table_unchanged(t))


@case(ValueError, "block_until_num_items must be >= 0, got -1")
def flush_negative() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t)
    return lambda: w.flush(-1), still_works(w, t, 1)


@case(ValueError, "num_keep_alive_refs (0) must be a positive integer")
def writer_keep_alive_zero() -> tuple[Trigger, After | None]:
    return lambda: TrajectoryWriter([uniform()], 0), None


@case(ValueError, "max_chunk_length (5) must be None or a positive integer <= "
      "num_keep_alive_refs (2)")
def configure_chunk_longer_than_keep_alive() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t)
    return (lambda: w.configure(("obs",), num_keep_alive_refs=2, max_chunk_length=5),
            still_works(w, t, 1))


@case(ValueError, "column ('obs',)", "compression must be 'auto', 'lz4' or None")
def configure_unknown_compression() -> tuple[Trigger, After | None]:
    t = uniform()
    w = filled_writer(t)
    return (lambda: w.configure(("obs",), num_keep_alive_refs=2, max_chunk_length=1,
                                compression="zstd"),
            still_works(w, t, 1))


# ----- StructuredWriter and its configs -----

STEP = {"obs": np.zeros(2, np.float32), "act": np.int32(0)}
REF = sw.create_reference_step(STEP)


def structured(table: Table, *configs: sw.Config) -> sw.StructuredWriter:
    w = sw.StructuredWriter([table], list(configs), seed=4)
    w.append(STEP)
    w.flush()
    return w


def structured_still_works(w: sw.StructuredWriter, table: Table) -> After:
    size = len(table)

    def after() -> None:
        w.append(STEP)
        w.flush()
        assert len(table) == size + 1
    return after


@case(ValueError, "Flattened data has an unexpected length, got 1 but wanted 2.",
      "Missing field(s): ('act',)", "give None for a field")
def structured_step_missing_a_field() -> tuple[Trigger, After | None]:
    t = uniform()
    w = structured(t, sw.create_config({"obs": REF["obs"][-1]}, "t"))
    return lambda: w.append({"obs": STEP["obs"]}), structured_still_works(w, t)


@case(ValueError, "Flattened data has an unexpected length, got 3 but wanted 2.",
      "Unexpected field(s): ('reward',)")
def structured_step_extra_field() -> tuple[Trigger, After | None]:
    t = uniform()
    w = structured(t, sw.create_config({"obs": REF["obs"][-1]}, "t"))
    return (lambda: w.append({**STEP, "reward": np.float32(1)}),
            structured_still_works(w, t))


@case(ValueError, "The step's fields differ from the first step's.",
      "Missing field(s): ('act',)", "Unexpected field(s): ('zz',)")
def structured_step_renamed_field() -> tuple[Trigger, After | None]:
    t = uniform()
    w = structured(t, sw.create_config({"obs": REF["obs"][-1]}, "t"))
    return (lambda: w.append({"obs": STEP["obs"], "zz": np.int32(0)}),
            structured_still_works(w, t))


@case(ValueError, "Tensor of wrong dtype provided for column", "('obs',)",
      "Got double but expected float")
def structured_wrong_dtype() -> tuple[Trigger, After | None]:
    t = uniform()
    w = structured(t, sw.create_config({"obs": REF["obs"][-1]}, "t"))
    return (lambda: w.append({**STEP, "obs": np.zeros(2)}),
            structured_still_works(w, t))


@case(ValueError, "create_config (table 't')", "('obs',)", "ref['obs']",
      "use ref['obs'][-1] for one step or ref['obs'][-3:] for three")
def create_config_bare_reference() -> tuple[Trigger, After | None]:
    return lambda: sw.create_config({"obs": REF["obs"]}, table="t"), None


@case(ValueError, "create_config (table 't')", "('x',)", "`start` must be < 0 but "
      "got 1.", "use ref['obs'][-1] for the newest step")
def create_config_positive_slice() -> tuple[Trigger, After | None]:
    return lambda: sw.create_config({"x": REF["obs"][1:3]}, table="t"), None


@case(ValueError, "create_config (table 't')", "`stop` must be < 0 when `start` "
      "isn't set but got 0.", "ref['act'][-1]")
def create_config_positive_index() -> tuple[Trigger, After | None]:
    return lambda: sw.create_config(REF["act"][0], table="t"), None


@case(ValueError, "create_config (table 't')", "('obs',)", "is a ndarray",
      "create_reference_step(step)")
def create_config_array_leaf() -> tuple[Trigger, After | None]:
    return lambda: sw.create_config({"obs": np.zeros(2)}, table="t"), None


@case(ValueError, "create_config (table 't')", "the pattern has no slices")
def create_config_empty_pattern() -> tuple[Trigger, After | None]:
    return lambda: sw.create_config({}, table="t"), None


@case(ValueError, "create_config (table '')", "`table` must be a non-empty")
def create_config_empty_table() -> tuple[Trigger, After | None]:
    return lambda: sw.create_config(REF["obs"][-1], table=""), None


@case(ValueError, "create_config (table 't')", "condition 0",
      "Condition.step_index() % 2 == 0")
def create_config_incomplete_condition() -> tuple[Trigger, After | None]:
    return (lambda: sw.create_config(REF["obs"][-1], "t",
                                     [sw.Condition.step_index()]),  # type: ignore[list-item]
            None)


@case(ValueError, "create_config (table 't')", "condition 0 is invalid",
      "`mod_eq.mod` must be > 0 but got 0.")
def create_config_invalid_condition() -> tuple[Trigger, After | None]:
    return (lambda: sw.create_config(REF["obs"][-1], "t",
                                     [sw.Condition.step_index() % 0 == 0]),
            None)


@case(ValueError, "Key must be int or slice", "ref['obs']", "ref['obs'][-1]")
def reference_indexed_by_name() -> tuple[Trigger, After | None]:
    return lambda: REF["obs"]["x"], None


@case(ValueError, "Invalid configuration at position 0: table 'nope' not found",
      "the tables are t")
def structured_unknown_table() -> tuple[Trigger, After | None]:
    return (lambda: sw.StructuredWriter([uniform()],
                                        [sw.create_config(REF["obs"][-1], "nope")]),
            None)


@case(ValueError, "Config 0 (table 't')", "TD Error expects a scalar",
      "step field ('obs',)", "point td_error's get_field_fn at a scalar field")
def structured_td_error_on_vector_field() -> tuple[Trigger, After | None]:
    t = uniform()
    cfg = sw.create_config(REF["obs"][-1], "t",
                           priority=sw.td_error(0.5, STEP, lambda s: s["obs"]))
    w = sw.StructuredWriter([t], [cfg])

    def after() -> None:
        assert len(t) == 0
    return lambda: w.append(STEP), after


@case(ValueError, "Config 0 (table 't')", "data conditions read scalar int or bool",
      "step field ('obs',)")
def structured_data_condition_on_vector_field() -> tuple[Trigger, After | None]:
    t = uniform()
    cfg = sw.create_config(REF["obs"][-1], "t", [sw.Condition.data(STEP)["obs"] == 1])
    w = sw.StructuredWriter([t], [cfg])

    def after() -> None:
        assert len(t) == 0
    return lambda: w.append(STEP), after


# ----- tables, selectors, rate limiters, server -----


@case(ValueError, "max_size (0) must be a positive integer", "table 't'")
def table_max_size_zero() -> tuple[Trigger, After | None]:
    return lambda: Table("t", sel.Uniform(), sel.Fifo(), 0, rl.MinSize(1)), None


@case(ValueError, "max_size (0) must be a positive integer", "table 'q'")
def queue_size_zero() -> tuple[Trigger, After | None]:
    return lambda: Table.queue("q", 0), None


@case(TypeError, "sampler must be a fastreplay.selectors selector", "table 't'",
      "pass an instance: Uniform()")
def table_selector_class_not_instance() -> tuple[Trigger, After | None]:
    return (lambda: Table("t", sel.Uniform, sel.Fifo(), 10,  # type: ignore[arg-type]
                          rl.MinSize(1)), None)


@case(TypeError, "rate_limiter must be a fastreplay.rate_limiters.RateLimiter",
      "table 't'", "pass an instance, e.g. MinSize(...)")
def table_rate_limiter_class_not_instance() -> tuple[Trigger, After | None]:
    return (lambda: Table("t", sel.Uniform(), sel.Fifo(), 10,
                          rl.MinSize),  # type: ignore[arg-type]
            None)


@case(ValueError, "Table 't': sampler and remover must be distinct selector objects")
def table_same_selector_object() -> tuple[Trigger, After | None]:
    s = sel.Uniform()
    return lambda: Table("t", s, s, 10, rl.MinSize(1)), None


@case(ValueError, "is already used by table 't'",
      "create a separate rate limiter for table 'u'")
def rate_limiter_shared_by_two_tables() -> tuple[Trigger, After | None]:
    limiter = rl.MinSize(1)
    Table("t", sel.Uniform(), sel.Fifo(), 10, limiter)
    return lambda: Table("u", sel.Uniform(), sel.Fifo(), 10, limiter), None


@case(ValueError, "Unsupported signature spec: 3", "table 't'", "TensorSpec")
def table_bad_signature() -> tuple[Trigger, After | None]:
    return lambda: uniform(signature={"a": 3}), None


@case(ValueError, "table extensions are not supported", "table 't'",
      "extensions=()")
def table_extensions() -> tuple[Trigger, After | None]:
    return (lambda: Table("t", sel.Uniform(), sel.Fifo(), 10, rl.MinSize(1),
                          extensions=[object()]), None)


@case(ValueError, "table 't'", "compression must be 'auto', 'lz4' or None")
def table_unknown_compression() -> tuple[Trigger, After | None]:
    return lambda: uniform(compression="zstd"), None


@case(ValueError, "The size of error_buffer must be >= 2 * max(1.0, "
      "samples_per_insert)", "min_diff=19.5, max_diff=20.5", "use error_buffer >= 2")
def sample_to_insert_ratio_small_error_buffer() -> tuple[Trigger, After | None]:
    return lambda: rl.SampleToInsertRatio(2.0, 10, 0.5), None


@case(TypeError, "Server tables must be fastreplay.Table objects", "entry 0",
      "Table.queue('name', 1000)")
def server_with_a_table_name() -> tuple[Trigger, After | None]:
    return lambda: Server(["t"]), None  # type: ignore[list-item]


@case(ValueError, "Multiple items in tables have the same name: t")
def server_duplicate_tables() -> tuple[Trigger, After | None]:
    return lambda: Server([uniform("t"), uniform("t")]), None


# ----- Client -----


def served(*tables: Table) -> tuple[Server, reverb.Client]:
    server = Server(list(tables))
    return server, server.localhost_client()


def stopping(server: Server, after: After | None = None) -> After:
    def run() -> None:
        try:
            if after is not None:
                after()
        finally:
            server.stop()
    return run


@case(ValueError, 'Could not find table "nope".', "The following tables exists: t")
def client_insert_unknown_table() -> tuple[Trigger, After | None]:
    t = uniform()
    server, client = served(t)
    return (lambda: client.insert(np.zeros(2), {"nope": 1.0}),
            stopping(server, table_unchanged(t)))


@case(ValueError, "priorities must contain at least one item",
      "priorities={'my_table': 1.0}")
def client_insert_without_priorities() -> tuple[Trigger, After | None]:
    t = uniform()
    server, client = served(t)
    return lambda: client.insert(np.zeros(2), {}), stopping(server, table_unchanged(t))


@case(errors.InvalidPriorityError, "Priority must not be negative.", "table 'p'")
def client_insert_negative_priority() -> tuple[Trigger, After | None]:
    t = prioritized()
    server, client = served(t)
    client.insert(np.zeros(2), {"p": 1.0})
    return (lambda: client.insert(np.zeros(2), {"p": -1.0}),
            stopping(server, table_unchanged(t)))


@case(ValueError, "update keys and priorities differ in length (2 != 1)",
      "table 'p'", "one priority per key")
def client_update_priorities_length() -> tuple[Trigger, After | None]:
    t = prioritized()
    server, client = served(t)
    client.insert(np.zeros(2), {"p": 1.0})
    return (lambda: client.update_priorities("p", [1, 2], [1.0]),
            stopping(server, table_unchanged(t)))


@case(errors.InvalidPriorityError, "Priority must not be NaN.", "table 'p'", "key ")
def client_mutate_priorities_nan() -> tuple[Trigger, After | None]:
    t = prioritized()
    server, client = served(t)
    client.insert(np.zeros(2), {"p": 1.0})
    key = int(t.items()["key"][0])

    def after() -> None:
        assert t.items()["priority"].tolist() == [1.0]
    return (lambda: client.mutate_priorities("p", {key: float("nan")}),
            stopping(server, after))


@case(TypeError, "Table 't': key must be an integer, got float 1.5")
def client_update_priorities_float_key() -> tuple[Trigger, After | None]:
    t = uniform()
    server, client = served(t)
    return (lambda: client.update_priorities("t", [1.5], [1.0]),
            stopping(server, table_unchanged(t)))


@case(ValueError, "num_samples (0) must be a positive integer", "table 't'")
def client_sample_batch_zero() -> tuple[Trigger, After | None]:
    t = uniform()
    server, client = served(t)
    return lambda: client.sample_batch("t", 0), stopping(server)


@case(errors.DeadlineExceededError, "Rate Limiter: Timeout exceeded before the "
      "right to sample was acquired.", "table 't'")
def client_sample_batch_timeout() -> tuple[Trigger, After | None]:
    t = uniform()
    server, client = served(t)
    return lambda: client.sample_batch("t", 1, timeout=0.01), stopping(server)


@case(ValueError, 'Could not find table "nope".')
def client_sample_unknown_table() -> tuple[Trigger, After | None]:
    server, client = served(uniform())
    return lambda: next(client.sample("nope")), stopping(server)


@case(ValueError, "server address must be 'host:port', got 'localhost'")
def client_bad_address() -> tuple[Trigger, After | None]:
    return lambda: reverb.Client("localhost"), None


# ----- legacy Writer -----


def legacy(t: Table, length: int = 2) -> tuple[Server, Any]:
    server, client = served(t)
    w = client.writer(length)
    w.append({"a": np.zeros(2), "b": np.int32(0)})
    return server, w


def legacy_still_works(server: Server, w: Any, t: Table) -> After:
    def after() -> None:
        w.append({"a": np.zeros(2), "b": np.int32(0)})
        w.create_item("t", 1, 1.0)
        w.flush()
        assert len(t) == 1
        w.close()
    return stopping(server, after)


@case(ValueError, "Argument `num_timesteps` is larger than number of buffered "
      "timesteps", "num_timesteps=2, 1 appended, table 't'", "append more steps")
def legacy_item_longer_than_history() -> tuple[Trigger, After | None]:
    t = uniform()
    server, w = legacy(t, 3)
    return lambda: w.create_item("t", 2, 1.0), legacy_still_works(server, w, t)


@case(ValueError, "`num_timesteps` must be <= `max_timesteps`",
      "max_sequence_length=2", "client.writer(max_sequence_length=3)")
def legacy_item_longer_than_max_sequence_length() -> tuple[Trigger, After | None]:
    t = uniform()
    server, w = legacy(t)
    w.append({"a": np.zeros(2), "b": np.int32(0)})
    w.append({"a": np.zeros(2), "b": np.int32(0)})
    return lambda: w.create_item("t", 3, 1.0), legacy_still_works(server, w, t)


@case(ValueError, "Unable to create item in table 'nope'", "tables are: t")
def legacy_unknown_table() -> tuple[Trigger, After | None]:
    t = uniform()
    server, w = legacy(t)
    return lambda: w.create_item("nope", 1, 1.0), legacy_still_works(server, w, t)


@case(ValueError, "`priority` must not be nan.", "table 't'")
def legacy_nan_priority() -> tuple[Trigger, After | None]:
    t = uniform()
    server, w = legacy(t)
    return (lambda: w.create_item("t", 1, float("nan")),
            legacy_still_works(server, w, t))


@case(ValueError, "Append called with a None value at flattened index 1",
      "field ('b',)", "client.trajectory_writer")
def legacy_none_value() -> tuple[Trigger, After | None]:
    t = uniform()
    server, w = legacy(t)
    return (lambda: w.append({"a": np.zeros(2), "b": None}),
            legacy_still_works(server, w, t))


@case(ValueError, "Number of tensors per timestep was inconsistent",
      "Missing field(s): ('b',)")
def legacy_missing_field() -> tuple[Trigger, After | None]:
    t = uniform()
    server, w = legacy(t)
    return lambda: w.append({"a": np.zeros(2)}), legacy_still_works(server, w, t)


@case(ValueError, "Tensor of wrong dtype provided for column (0,)",
      "step field ('a',)")
def legacy_wrong_dtype() -> tuple[Trigger, After | None]:
    t = uniform()
    server, w = legacy(t)
    return (lambda: w.append({"a": np.zeros(2, np.int32), "b": np.int32(0)}),
            legacy_still_works(server, w, t))


@case(ValueError, "close() has already been called on Writer.")
def legacy_close_twice() -> tuple[Trigger, After | None]:
    t = uniform()
    server, w = legacy(t)
    w.close()
    return w.close, stopping(server)


# ----- checkpoints -----


@case(ValueError, "Checkpoint table 't' has no matching server table",
      "['other']", "give the Server a table named 't'")
def checkpoint_table_missing() -> tuple[Trigger, After | None]:
    root = tempfile.mkdtemp(prefix="fr-user-errors-")
    server = Server([uniform("t")], checkpointer=DefaultCheckpointer(root))
    server.checkpoint()
    server.stop()
    other = uniform("other")

    def after() -> None:
        assert len(other) == 0
        shutil.rmtree(root, ignore_errors=True)
    return (lambda: Server([other], checkpointer=DefaultCheckpointer(root)), after)


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_message_names_what_it_should(c: Case) -> None:
    trigger, after = c.setup()
    with pytest.raises(c.exc) as info:
        trigger()
    message = str(info.value)
    missing = [s for s in c.names if s not in message]
    assert not missing, f"{message!r} lacks {missing}"
    if after is not None:
        after()  # the writer and the table are intact


def test_the_table_covers_the_issue_examples() -> None:
    names = {c.name for c in CASES}
    assert {"history_slice_past_keep_alive", "structured_step_missing_a_field",
            "create_config_bare_reference"} <= names
    assert len(CASES) >= 40


def test_keep_alive_advice_is_enough() -> None:
    """Following the advice of the keep-alive message makes the slice work."""
    t = uniform()
    w = TrajectoryWriter([t], 2)
    for i in range(5):
        w.append(step(i))
    with pytest.raises(ValueError) as info:
        _ = w.history["obs"][-5:]
    need = int(re.search(r"at least (\d+)", str(info.value)).group(1))  # type: ignore[union-attr]
    w = TrajectoryWriter([t], need)
    for i in range(5):
        w.append(step(i))
    np.testing.assert_array_equal(w.history["obs"][-5:].numpy()[:, 0], range(5))


def _expire_and_create(t: Table, keep: int) -> None:
    """Take a one-step column, append three more steps, create the item."""
    w = TrajectoryWriter([t], keep)
    w.append(step(0))
    column = w.history["obs"][-1:]
    for i in range(1, 4):
        w.append(step(i))
    w.create_item("t", 1.0, {"obs": column})
    w.flush()


def test_expired_item_advice_is_enough() -> None:
    """Following the advice of the expired-reference message makes the
    item valid."""
    t = uniform()
    with pytest.raises(ValueError) as info:
        _expire_and_create(t, 2)
    need = int(re.search(r"at least (\d+)", str(info.value)).group(1))  # type: ignore[union-attr]
    assert need == 4
    _expire_and_create(t, need)
    assert len(t) == 1
