"""n-step returns for ``ReplayBuffer(n_step=..., gamma=...)`` (cpprb's ``Nstep``).

``NStepAccumulator`` takes one stream of consecutive steps (one at a time or
a batch at once) and returns the n-step transitions that are finished, as
batch arrays ready for ``ReplayBuffer.add_batch``.  Transition ``t`` covers
the steps ``t .. e`` where ``e`` is the first of ``t + n - 1``, the first
step whose ``done`` is set, and the last step before ``flush`` (the episode
end); then

- each reward field is ``r[t] + g r[t+1] + ... + g^(e-t) r[e]``,
- each ``next`` field (``next_obs``) and ``done`` are those of step ``e``,
- every other field (``obs``, ``act``, ...) is that of step ``t``,
- an optional ``discount`` field (named by ``Nstep["discount"]``) is
  ``g^(e-t+1)``, or 0 when step ``e`` is done: the factor of the bootstrap
  value, right also for windows cut short by the episode's end.

A transition is finished when it spans ``n`` steps or reaches a ``done``;
``flush`` (``on_episode_end``) finishes the rest with shorter windows.  At
most ``n - 1`` steps wait between calls.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["NStepAccumulator", "nstep_from_args"]

#: The result of add / flush: (fields -> [k, ...] arrays, priorities [k] with
#: NaN where the caller's default applies, or None when none were given).
Ready = tuple[dict[str, np.ndarray], "npt.NDArray[np.float64] | None"]


def _names(value: Any, what: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise TypeError(f"{what} must be a field name or a sequence of names, "
                    f"got {value!r}")


def nstep_from_args(n_step: int | None, gamma: float,
                    Nstep: Mapping[str, Any] | None) -> NStepAccumulator | None:
    """The accumulator for ``ReplayBuffer``'s ``n_step``/``gamma`` or cpprb's
    ``Nstep`` dict, or None for one-step transitions (nothing to do)."""
    if Nstep is not None:
        if n_step is not None:
            raise ValueError("give either n_step= (with gamma=) or cpprb's Nstep=, "
                             "not both")
        if not isinstance(Nstep, Mapping) or "size" not in Nstep:
            raise ValueError("Nstep must be a dict with at least 'size', e.g. "
                             "Nstep={'size': 3, 'gamma': 0.99, 'rew': 'rew', "
                             "'next': 'next_obs'}")
        keys = {"size", "gamma", "rew", "next", "done", "discount"}
        unknown = sorted(set(Nstep) - keys)
        if unknown:
            raise ValueError(f"Nstep has unknown keys {unknown}; known: "
                             f"{', '.join(sorted(keys))}")
        # cpprb's dict: fields it does not name are neither summed nor shifted.
        acc = NStepAccumulator(Nstep["size"], Nstep.get("gamma", 0.99),
                               rew=_names(Nstep.get("rew"), "Nstep['rew']") or (),
                               next=_names(Nstep.get("next"), "Nstep['next']") or (),
                               done=Nstep.get("done", "done"),
                               discount=Nstep.get("discount"))
    elif n_step is not None:
        acc = NStepAccumulator(n_step, gamma)
    else:
        return None
    return acc if acc.size > 1 else None


class NStepAccumulator:
    """Turns consecutive steps into n-step transitions (see the module doc).

    Parameters
    ----------
    size : int
        ``n``, the most steps one transition spans (>= 1).
    gamma : float
        Discount applied per step to the summed rewards (finite, >= 0).
    rew : sequence of str, optional
        Fields to sum; default: ``rew`` or ``reward`` (whichever the steps
        have).
    next : sequence of str, optional
        Fields taken from the window's last step; default: every field whose
        name starts with ``next_``.
    done : str
        The field that ends an episode (steps without it never end one; call
        ``flush`` at the episode end then).
    discount : str, optional
        Add a float32 field of this name: ``gamma ** k`` for a window of
        ``k`` steps, 0 when it ends at a done step.
    """

    def __init__(self, size: int, gamma: float, *, rew: Sequence[str] | None = None,
                 next: Sequence[str] | None = None, done: str = "done",
                 discount: str | None = None) -> None:
        if (isinstance(size, bool) or not isinstance(size, (int, np.integer))
                or size < 1):
            raise ValueError(f"n_step ({size!r}) must be an integer >= 1")
        gamma = float(gamma)
        if not (math.isfinite(gamma) and gamma >= 0):
            raise ValueError(f"gamma ({gamma}) must be finite and >= 0")
        self.size = int(size)
        self.gamma = gamma
        self._rew_arg = None if rew is None else tuple(rew)
        self._next_arg = None if next is None else tuple(next)
        self.done = str(done)
        self.discount = None if discount is None else str(discount)
        self._fields: list[str] | None = None  # fixed by the first add
        self._rew: tuple[str, ...] = ()
        self._next: tuple[str, ...] = ()
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._rew_dtypes: dict[str, np.dtype[Any]] = {}
        # the waiting steps (never one whose done is set), each field a
        # copied row, and their priorities (NaN: the buffer's default)
        self._rows: list[dict[str, np.ndarray]] = []
        self._prios: list[float] = []

    def __len__(self) -> int:
        """Steps waiting for their window to fill."""
        return len(self._rows)

    def _resolve(self, names: list[str]) -> None:
        rew: tuple[str, ...]
        if self._rew_arg is None:
            rew = tuple(n for n in ("rew", "reward") if n in names)
            if not rew:
                raise ValueError(
                    f"n_step needs a reward field to sum: the transitions have "
                    f"{names}; name it 'rew' or 'reward', or say which with "
                    "Nstep={'size': n, 'rew': '<field>', 'next': '<next field>'}")
        else:
            rew = self._rew_arg
        nxt = (tuple(n for n in names if n.startswith("next_"))
               if self._next_arg is None else self._next_arg)
        for what, group in (("rew", rew), ("next", nxt)):
            missing = [n for n in group if n not in names]
            if missing:
                raise ValueError(f"n-step {what} fields {missing} are not among the "
                                 f"transitions' fields {names}")
        overlap = sorted(set(rew) & (set(nxt) | {self.done}))
        if overlap:
            raise ValueError(f"fields {overlap} cannot be both summed and shifted")
        if self.discount is not None and self.discount in names:
            raise ValueError(f"Nstep['discount'] names {self.discount!r}, which the "
                             "transitions have already: choose another name")
        self._rew, self._next = rew, nxt

    def _check(self, steps: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], int]:
        names = sorted(steps)
        if not names:
            raise ValueError("add needs at least one field")
        if self._fields is None:
            self._resolve(names)
        elif names != self._fields:
            missing = sorted(set(self._fields) - set(names))
            extra = sorted(set(names) - set(self._fields))
            raise ValueError(f"n-step transitions need the same fields every call: "
                             f"missing {missing}, unexpected {extra} (fields: "
                             f"{self._fields})")
        arrays = {k: np.asarray(steps[k]) for k in names}
        for k, v in arrays.items():
            if v.ndim == 0:
                raise ValueError(f"field {k!r}: add_batch needs a leading batch axis "
                                 "(got a scalar)")
        rows = {k: len(v) for k, v in arrays.items()}
        if len(set(rows.values())) > 1:
            raise ValueError(f"fields have different numbers of rows {rows}: every "
                             "field needs one row per step")
        return arrays, rows[names[0]]

    def add(self, steps: Mapping[str, Any],
            priorities: npt.ArrayLike | None = None) -> Ready | None:
        """Take ``N`` consecutive steps (each field ``[N, ...]``); return the
        transitions this finishes, or None when none is finished."""
        arrays, n = self._check(steps)
        prios = (np.full(n, np.nan) if priorities is None else
                 np.asarray(priorities, dtype=np.float64).reshape(-1))
        if len(prios) != n:
            raise ValueError(f"{len(prios)} priorities for {n} steps")
        if self._fields is None:
            self._fields = sorted(arrays)
            self._shapes = {k: v.shape[1:] for k, v in arrays.items()}
        else:
            self._check_shapes({k: v.shape[1:] for k, v in arrays.items()})
        if self._rows:
            data = {k: np.concatenate([np.stack([r[k] for r in self._rows]), v])
                    for k, v in arrays.items()}
            prios = np.concatenate([np.asarray(self._prios), prios])
        else:
            data = arrays
        return self._emit(data, prios, final=False)

    def add_one(self, step: Mapping[str, Any], priority: float | None = None
                ) -> Ready | None:
        """``add`` for one step (fields without the batch axis), faster."""
        if self._fields is None or len(step) != len(self._fields):
            return self.add({k: np.asarray(v)[None] for k, v in step.items()},
                            None if priority is None else [priority])
        try:
            row = {k: np.array(step[k]) for k in self._fields}  # copies
        except KeyError:
            return self.add({k: np.asarray(v)[None] for k, v in step.items()},
                            None if priority is None else [priority])
        shapes = self._shapes
        for k, v in row.items():
            if v.shape != shapes[k]:
                self._check_shapes({k: v.shape for k, v in row.items()})
        done = self.done in row and bool(row[self.done].any())
        rows, prios = self._rows, self._prios
        rows.append(row)
        prios.append(np.nan if priority is None else float(priority))
        if done:  # every waiting window ends here
            starts = len(rows)
        elif len(rows) == self.size:  # the oldest window is full
            starts = 1
        else:
            return None
        gamma, out_rows = self.gamma, []
        for i in range(starts):
            tr = dict(rows[i])
            for k in self._rew:
                acc = rows[i][k].astype(np.float64)
                for m in range(1, len(rows) - i):
                    acc = acc + gamma ** m * rows[i + m][k]
                tr[k] = acc
            for k in self._next:
                tr[k] = row[k]
            if self.done in row:
                tr[self.done] = row[self.done]
            if self.discount is not None:
                tr[self.discount] = np.asarray(
                    0.0 if done else gamma ** (len(rows) - i), dtype=np.float32)
            out_rows.append(tr)
        p = np.asarray(prios[:starts])
        del rows[:starts], prios[:starts]
        out = {}
        for k, v in out_rows[0].items():
            col = v[None] if starts == 1 else np.stack([r[k] for r in out_rows])
            if k in self._rew:
                col = col.astype(self._rew_dtype(k, row[k].dtype))
            out[k] = col
        return out, (None if np.isnan(p).all() else p)

    def _check_shapes(self, shapes: Mapping[str, tuple[int, ...]]) -> None:
        for k, shape in shapes.items():
            if shape != self._shapes[k]:
                raise ValueError(f"field {k!r}: rows of shape {shape} differ from "
                                 f"the earlier steps' {self._shapes[k]}")

    def _rew_dtype(self, name: str, dtype: np.dtype[Any]) -> np.dtype[Any]:
        """The dtype of a summed field: the first rows' if float, else
        float32; later rows keep it (an int reward after float ones, or the
        reverse, still fits the buffer's column)."""
        out = self._rew_dtypes.get(name)
        if out is None:
            out = dtype if dtype.kind == "f" else np.dtype(np.float32)
            self._rew_dtypes[name] = out
        return out

    def flush(self) -> Ready | None:
        """End the episode: return every waiting step's transition (windows
        cut at the last step); None when nothing waits."""
        if not self._rows:
            return None
        data = {k: np.stack([r[k] for r in self._rows]) for k in self._rows[0]}
        return self._emit(data, np.asarray(self._prios), final=True)

    def clear(self) -> None:
        """Drop the waiting steps."""
        self._rows, self._prios = [], []

    def _emit(self, data: dict[str, np.ndarray], prios: npt.NDArray[np.float64],
              final: bool) -> Ready | None:
        total = len(prios)
        done: npt.NDArray[np.bool_] = np.zeros(total, dtype=bool)
        if self.done in data:
            done = np.asarray(data[self.done]).reshape(total, -1).astype(bool)
            done = np.asarray(done.any(axis=1), dtype=bool)
        # last[t]: the window's last step; it grows while the previous step
        # was not done and the stream (and n) allow.
        t = np.arange(total)
        last = t.copy()
        going = np.ones(total, dtype=bool)
        sums = {k: data[k].astype(np.float64) for k in self._rew}
        for m in range(1, self.size):
            going &= (t + m < total)
            going[going] &= ~done[(t + m - 1)[going]]
            if not going.any():
                break
            idx = (t + m)[going]
            last[going] = idx
            scale = self.gamma ** m
            for k, acc in sums.items():
                acc[going] += scale * data[k][idx]
        ready = total if final else int(np.argmin(
            np.append((last - t == self.size - 1) | done[last], False)))
        if not final:  # the rest waits for more steps (copied rows)
            self._rows = [{k: v[i].copy() for k, v in data.items()}
                          for i in range(ready, total)]
            self._prios = prios[ready:].tolist()
        else:
            self.clear()
        if ready == 0:
            return None
        out: dict[str, np.ndarray] = {}
        lastr = last[:ready]
        for k, v in data.items():
            if k in sums:
                out[k] = sums[k][:ready].astype(self._rew_dtype(k, v.dtype))
            elif k in self._next or k == self.done:
                out[k] = v[lastr]
            else:
                out[k] = v[:ready]
        if self.discount is not None:
            steps = (lastr - t[:ready] + 1).astype(np.float64)
            out[self.discount] = np.where(done[lastr], 0.0, self.gamma ** steps
                                          ).astype(np.float32)
        p = prios[:ready]
        return out, (None if np.isnan(p).all() else p)
