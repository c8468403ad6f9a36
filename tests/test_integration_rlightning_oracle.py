"""Stateful test: fastreplay's rlightning ``Storage`` against a tiny
pure-Python oracle, in both modes and both units.

The oracle below is a ring of slot numbers (each holding the number of the
transition written there), a per-slot use counter, and the stored episodes
as intervals in age order, with the semantics of ``adapters-spec.md``
section 2 including the fixes: fixed mode never wraps (R1), repeated
indexes count every use (R2), indexes resolve against ``len`` (R3), numpy
scalars are range-checked (R4), episode ``i`` is the i-th oldest (R5),
``get_data`` on an empty storage is empty (R6); and a split push counts
both of its parts.

Hypothesis drives pushes (single, lists, ``num_envs``), reads with every
index kind, ``get_data``, ``clear`` and pickling round trips; after every
step ``len`` and every counter are compared, and every read's rows.
"""

from __future__ import annotations

import pickle

import pytest

torch = pytest.importorskip("torch")
tensordict = pytest.importorskip("tensordict")

import numpy as np  # noqa: E402
from _rlightning_impls import check_rows, columns, fastreplay_impl, ids  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import (  # noqa: E402
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

TensorDict = tensordict.TensorDict

#: upstream's get_data() is a read of every stored item (self._data[:size])
GET_DATA_COUNTS = True


class Oracle:
    """rlightning's Storage reduced to slot numbers, counters and intervals."""

    def __init__(self, capacity: int, mode: str, unit: str) -> None:
        self.capacity, self.mode, self.unit = capacity, mode, unit
        self.clear()

    def clear(self) -> None:
        self.slots: list[int | None] = [None] * self.capacity
        self.counter = [-1] * self.capacity
        self.pointer = 0
        self.size = 0
        self.episodes: list[tuple[int, int]] = []  # oldest first

    def __len__(self) -> int:
        return len(self.episodes) if self.unit == "episode" else self.size

    # ----- pushes -----

    def _evict(self, begin: int, end: int) -> None:
        for b, e in [iv for iv in self.episodes if iv[0] < end and begin < iv[1]]:
            self.episodes.remove((b, e))
            self.counter[b:e] = [-1] * (e - b)

    def _write(self, at: int, rows: list[int]) -> None:
        for i, r in enumerate(rows):
            self.slots[at + i] = r
            self.counter[at + i] = 0

    def push(self, rows: list[int]) -> None:
        n, cap, p = len(rows), self.capacity, self.pointer
        if self.mode == "fixed":
            if p + n > cap:
                raise RuntimeError("full")
            if self.unit == "episode":
                self.episodes.append((p, p + n))
            self._write(p, rows)
            self.pointer = p + n  # R1: never wraps
        elif n > cap:
            rows = rows[-cap:]
            self.episodes = [(0, cap)] if self.unit == "episode" else []
            self._write(0, rows)
            self.pointer = 0
        elif p + n <= cap:
            if self.unit == "episode":
                self._evict(p, p + n)
                self.episodes.append((p, p + n))
            self._write(p, rows)
            self.pointer = (p + n) % cap
        elif self.unit == "episode":
            self._evict(p, cap)
            self._evict(0, n)
            self.episodes.append((0, n))
            self._write(0, rows)
            self.pointer = n % cap
        else:
            first = cap - p
            self._write(p, rows[:first])
            self._write(0, rows[first:])
            self.pointer = n - first
        self.size = min(self.size + n, cap)

    # ----- reads -----

    def _resolve(self, idx: object, n: int) -> list[int]:
        if isinstance(idx, slice):
            return list(range(*idx.indices(n)))
        out = []
        for i in np.asarray(idx).reshape(-1).tolist():
            j = i + n if i < 0 else i
            if not 0 <= j < n:
                raise IndexError(idx)
            out.append(j)
        return out

    def read(self, idx: object) -> list[int] | list[list[int]]:
        """Transition unit: the row numbers; episode unit: one list per
        episode.  Bumps the counters like the storage does."""
        scalar = isinstance(idx, (int, np.integer))
        n = len(self)
        picked = self._resolve(idx, n)
        if self.unit == "transition":
            for j in picked:
                self.counter[j] += 1
            return [self.slots[j] for j in picked]  # type: ignore[misc]
        eps = [self.episodes[j] for j in picked]
        for b, e in eps:
            for s in range(b, e):
                self.counter[s] += 1
        rows = [[self.slots[s] for s in range(b, e)] for b, e in eps]
        return rows[0] if scalar else rows  # type: ignore[return-value]

    def get_data(self) -> list[int] | list[list[int]]:
        before = list(self.counter)
        out = self.read(slice(None)) if len(self) else []
        if not GET_DATA_COUNTS:
            self.counter = before
        return out


def episode_rows(out: object) -> list[list[int]]:
    """A multi-episode read result as lists of transition numbers."""
    if isinstance(out, list):
        assert all(isinstance(e, TensorDict) for e in out)
        lengths = {len(ids(e)) for e in out}
        assert len(out) < 2 or len(lengths) > 1, "equal lengths must give a dict"
        for e in out:
            check_rows(e, ids(e))
        return [ids(e) for e in out]
    a = out["action"]  # type: ignore[index]
    assert a.dim() == 2
    check_rows(out, ids(out))
    return [[int(x) for x in row] for row in a]


class StorageMachine(RuleBasedStateMachine):
    mode = "circular"
    unit = "transition"

    def __init__(self) -> None:
        super().__init__()
        self.impl = fastreplay_impl()
        self.next_id = 0

    @initialize(capacity=st.integers(1, 12))
    def setup(self, capacity: int) -> None:
        self.s = self.impl.make(capacity, mode=self.mode, unit=self.unit)
        self.o = Oracle(capacity, self.mode, self.unit)

    def _rows(self, n: int) -> list[int]:
        rows = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return rows

    def _push_both(self, pushes: list[list[int]], call) -> None:
        try:
            for rows in pushes:
                self.o.push(rows)
        except RuntimeError:
            with pytest.raises(RuntimeError):
                call()
        else:
            call()

    @rule(n=st.integers(1, 26))
    def push(self, n: int) -> None:
        rows = self._rows(n)
        self._push_both([rows], lambda: self.s.add_episode(columns(rows[0], n)))

    @rule(lengths=st.lists(st.integers(1, 6), min_size=1, max_size=3))
    def push_list(self, lengths: list[int]) -> None:
        pushes = [self._rows(n) for n in lengths]
        if self.mode == "fixed" and self.o.pointer + sum(lengths) > self.o.capacity:
            return  # a list overflowing part-way: not specified
        self._push_both(pushes, lambda: self.s.add_episode(
            [columns(r[0], len(r)) for r in pushes]))

    @rule(num_envs=st.integers(2, 3), length=st.integers(1, 4))
    def push_envs(self, num_envs: int, length: int) -> None:
        pushes = [self._rows(length) for _ in range(num_envs)]
        total = num_envs * length
        if self.mode == "fixed" and self.o.pointer + total > self.o.capacity:
            return
        cols = [columns(r[0], length) for r in pushes]
        episode = {k: torch.stack([c[k] for c in cols], dim=1) for k in cols[0]}
        self._push_both(pushes, lambda: self.s.add_episode(episode, num_envs=num_envs))

    def _read(self, idx: object) -> None:
        try:
            want = self.o.read(idx)
        except IndexError:
            with pytest.raises(IndexError):
                self.s[idx]
            return
        out = self.s[idx]
        assert type(out) in (dict, list)
        scalar = isinstance(idx, (int, np.integer))
        if self.unit == "transition" or scalar:
            assert type(out) is dict
            check_rows(out, ids(out))
            assert ids(out) == want
            if scalar:
                assert out["observation"].shape == (8,) if self.unit == "transition" \
                    else out["observation"].shape == (len(want), 8)
        else:
            assert episode_rows(out) == want

    @rule(i=st.integers(-14, 14), numpy=st.booleans())
    def read_int(self, i: int, numpy: bool) -> None:
        self._read(np.int64(i) if numpy else i)

    @rule(start=st.none() | st.integers(-14, 14), stop=st.none() | st.integers(-14, 14),
          step=st.none() | st.integers(1, 3))
    def read_slice(self, start, stop, step) -> None:
        idx = slice(start, stop, step)
        if not range(*idx.indices(len(self.o))):
            return  # empty reads: not specified
        self._read(idx)

    @rule(idx=st.lists(st.integers(-14, 14), min_size=1, max_size=8),
          tensor=st.booleans())
    def read_array(self, idx: list[int], tensor: bool) -> None:
        self._read(torch.tensor(idx) if tensor else np.array(idx))

    @rule()
    def get_data(self) -> None:
        want = self.o.get_data()
        out = self.s.get_data()
        if not want:
            assert len(out) == 0
        elif self.unit == "transition":
            assert isinstance(out, TensorDict)
            check_rows(out, ids(out))
            assert ids(out) == want
        else:
            if isinstance(out, TensorDict):
                out = out.to_dict()
            assert episode_rows(out) == want

    @rule()
    def clear(self) -> None:
        self.s.clear()
        self.o.clear()

    @precondition(lambda self: self.next_id % 3 == 0)
    @rule()
    def pickle_round_trip(self) -> None:
        self.s = pickle.loads(pickle.dumps(self.s))

    @invariant()
    def same_state(self) -> None:
        if not hasattr(self, "s"):
            return
        assert len(self.s) == len(self.o)
        assert self.impl.counter(self.s).tolist() == self.o.counter


@pytest.mark.parametrize("unit", ["transition", "episode"])
@pytest.mark.parametrize("mode", ["circular", "fixed"])
def test_storage_matches_oracle(mode: str, unit: str) -> None:
    machine = type(f"Storage_{mode}_{unit}", (StorageMachine,),
                   {"mode": mode, "unit": unit})
    run_state_machine_as_test(
        machine,
        settings=settings(stateful_step_count=30, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow]),
    )
