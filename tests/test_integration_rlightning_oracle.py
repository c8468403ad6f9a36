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

Hypothesis drives pushes (single, lists, ``num_envs``), episodes collected
step by step (``add_transition``) for a single env and vectorised envs of 2
and 3 sub-envs and stored by ``truncate_episodes`` (without auto-truncate:
one push of env-major sub-episodes), reads with every index kind,
``get_data``, ``clear`` (which keeps the episodes being collected) and
pickling round trips; after every step ``len`` and every counter are
compared, and every row read (all columns).
"""

from __future__ import annotations

import pickle

import pytest

torch = pytest.importorskip("torch")
tensordict = pytest.importorskip("tensordict")

import numpy as np  # noqa: E402
from _rlightning_impls import fastreplay_impl  # noqa: E402
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

    def push(self, rows: list[int], length: int | None = None) -> None:
        """One push; ``length``: it holds len(rows) // length env-major
        episodes of that length (episode unit)."""
        n, cap, p = len(rows), self.capacity, self.pointer
        ln = n if length is None else length

        def register(begin: int) -> None:
            if self.unit == "episode":
                self.episodes += [(b, b + ln) for b in range(begin, begin + n, ln)]

        if self.mode == "fixed":
            if p + n > cap:
                raise RuntimeError("full")
            register(p)
            self._write(p, rows)
            self.pointer = p + n  # R1: never wraps
        elif n > cap:
            rows = rows[-cap:]
            if self.unit == "episode" and length is None:
                self.episodes = [(0, cap)]
            elif self.unit == "episode":  # the whole episodes that are kept
                self.episodes = [(e - ln, e) for e in range(cap, ln - 1, -ln)][::-1]
            self._write(0, rows)
            self.pointer = 0
        elif p + n <= cap:
            if self.unit == "episode":
                self._evict(p, p + n)
            register(p)
            self._write(p, rows)
            self.pointer = (p + n) % cap
        elif self.unit == "episode":
            self._evict(p, cap)
            self._evict(0, n)
            register(0)
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


def obs(i: int) -> torch.Tensor:
    return torch.tensor([i, i + 0.25, -i], dtype=torch.float32)


ENVS = {"s": 1, "v": 2, "w": 3}  # env id -> num_envs


class StorageMachine(RuleBasedStateMachine):
    """Row ``i`` (its action is ``i``) has the observation ``obs(i)`` and
    the next observation and reward of row ``nxt[i]``, as the default
    postprocessing makes them from consecutive steps."""

    mode = "circular"
    unit = "transition"

    def __init__(self) -> None:
        super().__init__()
        self.impl = fastreplay_impl()
        self.next_id = 0
        self.nxt: dict[int, int] = {}
        self.pending: dict[str, list[list[int]]] = {}  # env -> steps' ids

    @initialize(capacity=st.integers(1, 12))
    def setup(self, capacity: int) -> None:
        metas = [self.impl.EnvMeta(env_id=k, num_envs=n) for k, n in ENVS.items()]
        self.s = self.impl.make(capacity, mode=self.mode, unit=self.unit,
                                env_meta_list=metas, auto_truncate_episode=False)
        self.o = Oracle(capacity, self.mode, self.unit)

    # ----- rows -----

    def _ids(self, n: int) -> list[int]:
        out = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return out

    def _rows(self, n: int) -> list[int]:
        rows = self._ids(n + 1)  # the last one is only a next observation
        for a, b in zip(rows, rows[1:], strict=False):
            self.nxt[a] = b
        return rows[:-1]

    def _columns(self, rows: list[int]) -> dict[str, torch.Tensor]:
        nxt = [self.nxt[i] for i in rows]
        return {
            "observation": torch.stack([obs(i) for i in rows]),
            "next_observation": torch.stack([obs(i) for i in nxt]),
            "reward": torch.tensor(nxt, dtype=torch.float32),
            "terminated": torch.zeros(len(rows), dtype=torch.bool),
            "truncated": torch.zeros(len(rows), dtype=torch.bool),
            "action": torch.tensor(rows, dtype=torch.int64),
        }

    def _check(self, out: object) -> list[int]:
        """The rows of a read result are whole (every column); their ids."""
        got = {k: torch.as_tensor(v) for k, v in out.items()}  # type: ignore[attr-defined]
        lead = got["action"].dim()
        rows = [int(a) for a in got["action"].reshape(-1)]
        want = self._columns(rows)
        assert set(got) == set(want)
        for k, v in want.items():
            assert got[k].dtype == v.dtype, k
            assert torch.equal(got[k].reshape(v.shape), v), k
            assert got[k].dim() == lead + v.dim() - 1, k
        return rows

    def _episodes(self, out: object) -> list[list[int]]:
        """A multi-episode read result as lists of row ids."""
        if isinstance(out, list):
            assert all(isinstance(e, TensorDict) for e in out)
            assert len(out) < 2 or len({len(e) for e in out}) > 1, \
                "equal lengths must give a dict"
            return [self._check(e) for e in out]
        a = out["action"]  # type: ignore[index]
        assert a.dim() == 2
        self._check(out)
        return [[int(x) for x in row] for row in a]

    # ----- pushes -----

    def _push_both(self, pushes: list[list[int]], call, length=None) -> None:
        try:
            for rows in pushes:
                self.o.push(rows, length)
        except RuntimeError:
            with pytest.raises(RuntimeError):
                call()
        else:
            call()

    @rule(n=st.integers(1, 26))
    def push(self, n: int) -> None:
        rows = self._rows(n)
        self._push_both([rows], lambda: self.s.add_episode(self._columns(rows)))

    @rule(lengths=st.lists(st.integers(1, 6), min_size=1, max_size=3))
    def push_list(self, lengths: list[int]) -> None:
        pushes = [self._rows(n) for n in lengths]
        if self.mode == "fixed" and self.o.pointer + sum(lengths) > self.o.capacity:
            return  # a list overflowing part-way: not specified
        self._push_both(pushes, lambda: self.s.add_episode(
            [self._columns(r) for r in pushes]))

    @rule(num_envs=st.integers(2, 3), length=st.integers(1, 4))
    def push_envs(self, num_envs: int, length: int) -> None:
        pushes = [self._rows(length) for _ in range(num_envs)]
        total = num_envs * length
        if self.mode == "fixed" and self.o.pointer + total > self.o.capacity:
            return
        cols = [self._columns(r) for r in pushes]
        episode = {k: torch.stack([c[k] for c in cols], dim=1) for k in cols[0]}
        self._push_both(pushes, lambda: self.s.add_episode(episode, num_envs=num_envs))

    @rule(env=st.sampled_from(sorted(ENVS)), steps=st.integers(1, 4))
    def collect(self, env: str, steps: int) -> None:
        n = ENVS[env]
        for _ in range(steps):
            ids_ = self._ids(n)
            prev = self.pending.setdefault(env, [])
            if prev:
                for a, b in zip(prev[-1], ids_, strict=True):
                    self.nxt[a] = b
            prev.append(ids_)
            if n == 1:
                er = self.impl.EnvRet(env_id=env, observation=obs(ids_[0]),
                                      last_reward=float(ids_[0]))
                pr = self.impl.PolicyResponse(env_id=env, action=torch.tensor(ids_[0]))
            else:
                er = self.impl.EnvRet(
                    env_id=env, observation=torch.stack([obs(i) for i in ids_]),
                    last_reward=torch.tensor(ids_, dtype=torch.float32),
                    last_terminated=torch.zeros(n, dtype=torch.bool),
                    last_truncated=torch.zeros(n, dtype=torch.bool))
                pr = self.impl.PolicyResponse(env_id=env, action=torch.tensor(ids_))
            self.s.add_transition(er, pr)

    @rule(env=st.sampled_from(sorted(ENVS)))
    def truncate(self, env: str) -> None:
        steps = self.pending.get(env)
        if not steps:
            with pytest.raises(KeyError):
                self.s.truncate_episodes([env])
            return
        if len(steps) < 2:
            return  # an episode of no rows: not specified
        del self.pending[env]
        n = ENVS[env]
        subs = [[ids_[j] for ids_ in steps[:-1]] for j in range(n)]
        rows = [i for sub in subs for i in sub]
        self._push_both([rows], lambda: self.s.truncate_episodes([env]),
                        length=len(steps) - 1 if n > 1 else None)

    # ----- reads -----

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
            assert self._check(out) == want
            if scalar and self.unit == "transition":
                assert out["action"].dim() == 0
        else:
            assert self._episodes(out) == want

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
            assert self._check(out) == want
        else:
            if isinstance(out, TensorDict):
                out = out.to_dict()
            assert self._episodes(out) == want

    @rule()
    def clear(self) -> None:
        self.s.clear()  # keeps the pending episodes
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
        settings=settings(stateful_step_count=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow]),
    )
