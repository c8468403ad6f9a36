"""Stateful test of TrajectoryWriter against a small pure-Python reference.

The reference keeps, per column, every appended cell (value, history
position, chunk) and the keep-alive window, the FIFO of items not yet handed
to the table, and the items the table should hold.  With constant chunkers
it predicts chunk finalization exactly, so expiry (window or pinned by a
queued item), ``num_pending_items`` and the column buffers are checked
exactly; with auto-tuned chunkers (chunk lengths unknown) it checks what
must hold regardless of chunking.  After every flush the items read back
from a Fifo/Fifo table with ``max_times_sampled=1`` must equal the values
the reference expects.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from fastreplay import ConstantChunkerOptions, Table, TrajectoryWriter
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel

COLUMNS = ("a", "b", "c")


@dataclasses.dataclass
class Cell:
    value: int
    hpos: int
    chunk: int


@dataclasses.dataclass
class Column:
    cells: dict[int, Cell] = dataclasses.field(default_factory=dict)
    n_appended: int = 0
    alive_from: int = 0
    open_chunk: int | None = None
    buffered: int = 0
    by_pos: dict[int, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Item:
    refs: list[tuple[str, int]]
    expected: list[np.ndarray]


class ReferenceWriter:
    """What a TrajectoryWriter with ``keep`` keep-alive refs and constant
    chunks of ``chunk`` cells (None: unknown chunking) must do."""

    def __init__(self, keep: int, chunk: int | None) -> None:
        self.keep, self.chunk = keep, chunk
        self.columns: dict[str, Column] = {}
        self.hlen = 0  # closed steps since the last clear
        self.step_open = False
        self.open_set: set[str] = set()
        self.episode_steps = 0
        self.queue: list[Item] = []
        self.table: list[list[np.ndarray]] = []
        self.next_chunk = 0
        self.appended = False

    @property
    def exact(self) -> bool:
        return self.chunk is not None

    @property
    def history_len(self) -> int:
        return self.hlen + int(self.step_open)

    def touch(self, names: list[str]) -> None:
        for name in names:
            self.columns.setdefault(name, Column())
        self.appended = True

    # -- cells --

    def in_window(self, name: str, cell_id: int) -> bool:
        col = self.columns[name]
        return cell_id >= col.alive_from and cell_id >= col.n_appended - self.keep

    def pinned(self, name: str, cell_id: int) -> bool:
        return any((name, cell_id) in item.refs for item in self.queue)

    def alive(self, name: str, cell_id: int) -> bool | None:
        """True/False, or None when it depends on unknown chunking."""
        if self.in_window(name, cell_id):
            return True
        if self.pinned(name, cell_id):
            return True if self.exact else None
        return False

    def cell_at(self, name: str, pos: int) -> int | None:
        return self.columns[name].by_pos.get(pos)

    # -- chunks and the item queue --

    def finalize(self, name: str) -> None:
        col = self.columns[name]
        col.open_chunk, col.buffered = None, 0

    def ready(self, item: Item) -> bool:
        return all(self.columns[n].cells[i].chunk != self.columns[n].open_chunk
                   for n, i in item.refs)

    def pump(self) -> None:
        if not self.exact:
            return
        while self.queue and self.ready(self.queue[0]):
            self.table.append(self.queue.pop(0).expected)

    # -- operations --

    def repeated(self, step: dict[str, int | None]) -> bool:
        return self.step_open and any(
            v is not None and k in self.open_set for k, v in step.items())

    def append(self, step: dict[str, int | None], partial: bool) -> dict[str, int]:
        ids = {}
        pos = self.hlen
        for name, value in step.items():
            if value is None:
                continue
            col = self.columns[name]
            cell_id = col.n_appended
            if col.open_chunk is None:
                col.open_chunk = self.next_chunk
                self.next_chunk += 1
            col.cells[cell_id] = Cell(value, pos, col.open_chunk)
            col.by_pos[pos] = cell_id
            col.n_appended += 1
            col.buffered += 1
            if self.exact and col.buffered >= self.chunk:
                self.finalize(name)
            ids[name] = cell_id
            if partial:
                self.open_set.add(name)
        if partial:
            self.step_open = True
        else:
            self.step_open = False
            self.open_set.clear()
            self.hlen += 1
            self.episode_steps += 1
        self.pump()
        return ids

    def create_item(self, item: Item) -> None:
        self.queue.append(item)
        self.pump()

    def flush(self, ignore_last: int = 0) -> None:
        if not self.exact:
            assert ignore_last == 0
            self.table.extend(item.expected for item in self.queue)
            self.queue.clear()
            return
        for item in self.queue[:max(len(self.queue) - ignore_last, 0)]:
            for name, cell_id in item.refs:
                col = self.columns[name]
                if col.cells[cell_id].chunk == col.open_chunk:
                    self.finalize(name)
        self.pump()

    def end_episode(self, clear_buffers: bool) -> None:
        self.flush(0)
        assert not self.queue
        for name, col in self.columns.items():
            self.finalize(name)
            if clear_buffers:
                col.alive_from = col.n_appended
                col.by_pos.clear()
        if clear_buffers:
            self.hlen = 0
            self.step_open = False
            self.open_set.clear()
        self.episode_steps = 0


values_st = st.one_of(st.none(), st.integers(-(2**40), 2**40))


class WriterMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.table = Table("t", sel.Fifo(), sel.Fifo(), 1_000_000, rl.MinSize(1),
                           max_times_sampled=1)
        self.held: list[tuple[str, int, Any]] = []

    @initialize(keep=st.integers(1, 4), chunk=st.one_of(st.none(), st.integers(1, 4)))
    def setup(self, keep: int, chunk: int | None) -> None:
        if chunk is not None:
            chunk = min(chunk, keep)
            options = ConstantChunkerOptions(chunk, keep)
        else:
            options = None
        self.writer = TrajectoryWriter(self.table, keep, chunker_options=options)
        self.model = ReferenceWriter(keep, chunk)

    # ----- rules -----

    @rule(data=st.data(), partial=st.sampled_from([False, False, False, True]))
    def append(self, data: st.DataObject, partial: bool) -> None:
        step: dict[str, int | None] = {}
        for name in COLUMNS:
            if data.draw(st.booleans(), label=f"has {name}"):
                step[name] = data.draw(values_st, label=name)
        self.model.touch(list(step))
        if self.model.repeated(step):
            steps_before = self.writer.episode_steps
            try:
                self.writer.append(step, partial_step=partial)
            except ValueError as exc:
                assert "has already been set in the active step" in str(exc)
            else:
                raise AssertionError(f"repeated column accepted: {step}")
            assert self.writer.episode_steps == steps_before
            return
        refs = self.writer.append(step, partial_step=partial)
        ids = self.model.append(step, partial)
        for name, cell_id in ids.items():
            assert refs[name].numpy() == step[name]
            self.held.append((name, cell_id, refs[name]))
        for name, value in step.items():
            if value is None:
                assert refs[name] is None
        del self.held[:-40]

    @precondition(lambda self: any(c.n_appended for c in self.model.columns.values()))
    @rule(data=st.data())
    def bad_append(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(
            sorted(n for n, c in self.model.columns.items() if c.n_appended)))
        bad = data.draw(st.sampled_from([1.5, np.array([1, 2]), np.int32(1)]))
        step: dict[str, Any] = {n: 0 for n in COLUMNS if n != name
                                and n not in self.model.open_set}
        step[name] = bad
        self.model.touch(list(step))
        try:
            self.writer.append(step, partial_step=data.draw(st.booleans()))
        except ValueError as exc:
            assert f"provided for column ('{name}',)" in str(exc)
        else:
            raise AssertionError(f"{bad!r} accepted for int64 column {name}")

    @precondition(lambda self: bool(self.model.columns))
    @rule(data=st.data())
    def create_item(self, data: st.DataObject) -> None:
        m, n = self.model, self.model.history_len
        names = sorted(m.columns)
        picks = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=3),
                          label="columns")
        trajectory: dict[str, Any] = {}
        expected: dict[str, np.ndarray] = {}
        refs: list[tuple[str, int]] = []
        history = self.writer.history
        for k, name in enumerate(picks):
            kind = data.draw(st.sampled_from(["int", "slice", "list", "bad"]),
                             label="kind")
            if kind == "bad" or n == 0:
                index: Any = data.draw(st.one_of(
                    st.integers(n, n + 3), st.integers(-n - 3, -n - 1),
                    st.lists(st.integers(n, n + 3), min_size=1, max_size=2)),
                    label="out of range")
                try:
                    _ = history[name][index]
                except IndexError:
                    continue
                raise AssertionError(f"index {index} of {n} steps accepted")
            if kind == "int":
                index = data.draw(st.integers(-n, n - 1), label="int")
                positions = [index % n]
            elif kind == "slice":
                bounds = st.one_of(st.none(), st.integers(-n - 1, n + 1))
                index = slice(data.draw(bounds, label="start"),
                              data.draw(bounds, label="stop"),
                              data.draw(st.sampled_from([None, 1, 2, -1, -2]),
                                        label="step"))
                positions = list(range(n))[index]
            else:
                index = data.draw(st.lists(st.integers(-n, n - 1), min_size=1,
                                           max_size=4), label="list")
                positions = [p % n for p in index]
            ids = [m.cell_at(name, p) for p in positions]
            states = [None if i is None else m.alive(name, i) for i in ids]
            if any(i is None or s is False for i, s in zip(ids, states, strict=False)):
                try:
                    _ = history[name][index]
                except ValueError as exc:
                    assert "cannot contain any None data references" in str(exc)
                    return
                raise AssertionError(
                    f"{name}[{index}] resolved although a position has no alive "
                    f"cell: ids={ids} alive={states}")
            try:
                column = history[name][index]
            except ValueError:
                assert None in states  # allowed only when it was uncertain
                return
            cell_ids = [i for i in ids if i is not None]
            values = [m.columns[name].cells[i].value for i in cell_ids]
            want = (np.array(values[0], dtype=np.int64) if kind == "int"
                    else np.array(values, dtype=np.int64).reshape(len(values)))
            if len(column):
                got = column.numpy()
                assert got.shape == want.shape and (got == want).all()
            key = f"{k}{name}"
            trajectory[key] = column
            expected[key] = want
            refs.extend((name, i) for i in cell_ids)
        if not trajectory:
            return
        lengths = [len(c) for c in trajectory.values()]
        if not any(lengths):
            try:
                self.writer.create_item("t", 1.0, trajectory)
            except ValueError as exc:
                assert "trajectory must not be empty." in str(exc)
                return
            raise AssertionError("empty trajectory accepted")
        if not all(lengths):
            # Mixed empty and non-empty columns are covered (and currently
            # broken at sample time) by test_writer.py's
            # test_create_item_with_one_empty_column.
            return
        self.writer.create_item("t", 1.0, trajectory)
        m.create_item(Item(refs, [expected[k] for k in sorted(expected)]))

    @rule(ignore_last=st.sampled_from([0, 0, 0, 1, 2]))
    def flush(self, ignore_last: int) -> None:
        if not self.model.exact:
            ignore_last = 0
        self.writer.flush(ignore_last)
        self.model.flush(ignore_last)
        if ignore_last == 0:
            assert self.writer.num_pending_items == 0
        self.check_table()

    @precondition(lambda self: self.model.appended)
    @rule(clear_buffers=st.booleans())
    def end_episode(self, clear_buffers: bool) -> None:
        if self.model.step_open and not clear_buffers:
            # Known bug: an open partial step interrupted by
            # end_episode(clear_buffers=False) hides the next step's values
            # (test_writer.py::test_end_episode_without_clearing_after_partial_step).
            return
        self.writer.end_episode(clear_buffers=clear_buffers)
        self.model.end_episode(clear_buffers)
        assert self.writer.num_pending_items == 0
        self.check_table()

    def check_table(self) -> None:
        want = self.model.table
        assert len(self.table) == len(want)
        if want:
            got = [s.data for s in self.table.sample_items(len(want), timeout=5.0)]
            assert len(got) == len(want)
            for g_item, w_item in zip(got, want, strict=False):
                assert len(g_item) == len(w_item)
                for g, w in zip(g_item, w_item, strict=False):
                    g = np.asarray(g)
                    assert g.dtype == w.dtype and g.shape == w.shape, (g, w)
                    assert (g == w).all(), (g, w)
        want.clear()
        assert len(self.table) == 0

    # ----- invariants -----

    @invariant()
    def episode_steps_match(self) -> None:
        if hasattr(self, "model"):
            assert self.writer.episode_steps == self.model.episode_steps

    @invariant()
    def history_matches(self) -> None:
        if not hasattr(self, "model") or not self.model.appended:
            return
        m = self.model
        history = self.writer.history
        assert sorted(history) == sorted(m.columns)
        for name in m.columns:
            got = list(history[name])
            assert len(got) == m.history_len
            for pos, ref in enumerate(got):
                cell_id = m.cell_at(name, pos)
                state = None if cell_id is None else m.alive(name, cell_id)
                if cell_id is None or state is False:
                    assert ref is None, (name, pos)
                elif state is True:
                    assert ref is not None, (name, pos)
                    assert ref.numpy() == m.columns[name].cells[cell_id].value

    @invariant()
    def expiry_matches(self) -> None:
        if not hasattr(self, "model"):
            return
        for name, cell_id, ref in self.held:
            state = self.model.alive(name, cell_id)
            if state is not None:
                assert ref.expired is (not state), (name, cell_id, state)
            if not ref.expired:
                assert ref.numpy() == self.model.columns[name].cells[cell_id].value

    @invariant()
    def queue_and_buffers_match(self) -> None:
        if not hasattr(self, "model") or not self.model.exact:
            return
        assert self.writer.num_pending_items == len(self.model.queue)
        for name, col in self.model.columns.items():
            index = self.writer._columns.index[(name,)]
            assert self.writer._core.column_info(index)["buffered"] == col.buffered


WriterMachine.TestCase.settings = settings(
    max_examples=max(150, settings.default.max_examples),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestWriterStateMachine = WriterMachine.TestCase
