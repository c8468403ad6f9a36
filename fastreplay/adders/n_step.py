"""``NStepTransitionAdder``: n-step transitions with Acme's item layout."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

from fastreplay import _nest
from fastreplay.adders.base import (
    PriorityFn,
    ReverbAdder,
    Transition,
    spec_nest,
    zeros_like,
)

__all__ = ["NStepTransitionAdder", "n_step_return"]


def _pair(reward: Any, discount: Any) -> tuple[list[Any], list[Any], Any]:
    """Leaves of reward and discount with one structure: a leaf facing a nest
    is repeated over it.  Returns (reward leaves, discount leaves, nest)."""
    if _nest.is_nest(reward):
        rew = _nest.flatten(reward)
        disc = (_nest.flatten(discount) if _nest.is_nest(discount)
                else [discount] * len(rew))
        return rew, disc, reward
    if _nest.is_nest(discount):
        disc = _nest.flatten(discount)
        return [reward] * len(disc), disc, discount
    return [reward], [discount], None


def n_step_return(rewards: list[Any], discounts: list[Any], gamma: Any
                  ) -> tuple[Any, Any]:
    """``(R, D)`` of a window of steps (rewards ``r_i``, env discounts
    ``d_i``, agent discount ``g``)::

        R = r_0 + g d_0 r_1 + g^2 d_0 d_1 r_2 + ...
        D = g^(k-1) d_0 d_1 ... d_(k-1)

    Rewards and discounts may be nests (a leaf facing a nest applies to each
    of its leaves) and arrays (broadcast together).
    """
    structure = None
    per_step = []
    for r, d in zip(rewards, discounts, strict=True):
        rl, dl, s = _pair(r, d)
        structure = structure if s is None else s
        per_step.append((rl, dl))
    returns, totals = [], []
    for leaf in range(len(per_step[0][0])):
        r0 = np.asarray(per_step[0][0][leaf])
        total = np.array(per_step[0][1][leaf], copy=True)
        ret = np.array(np.broadcast_to(r0, np.broadcast(r0, total).shape),
                       dtype=np.result_type(r0, total, gamma))
        total = total.astype(np.result_type(total, gamma))
        for rl, dl in per_step[1:]:
            total = total * gamma
            ret = ret + np.asarray(rl[leaf]) * total
            total = total * np.asarray(dl[leaf])
        returns.append(ret)
        totals.append(total)
    if structure is None:
        return returns[0], totals[0]
    return _nest.unflatten_as(structure, returns), _nest.unflatten_as(structure, totals)


class NStepTransitionAdder(ReverbAdder):
    """Writes n-step transitions ``Transition(s_t, a_t, R, D, s_{t+k}, e_t)``.

    ``R`` and ``D`` are ``n_step_return`` over the ``k <= n_step`` steps
    from ``t``: the first steps of an episode give the shorter transitions
    ``s_0 -> s_1 .. s_0 -> s_n`` and its end the shorter ``s_{T-n+1} -> s_T
    .. s_{T-1} -> s_T`` (Acme's layout), so every step starts at least one
    transition.  ``extras`` are the first step's.  ``discount`` (the agent's
    ``g``) is a float32, so float32 rewards stay float32.

    Parameters
    ----------
    client : Client
        Items go to its tables (default table ``"priority_table"``).
    n_step : int
        The longest window (``>= 1``; 1 gives one-step transitions).
    discount : float
        The agent's discount ``g``.
    priority_fns : mapping table name -> PriorityFn or None, optional
        See ``ReverbAdder``.
    max_in_flight_items : int
        Items the writer may have pending before ``add`` waits.
    """

    def __init__(self, client: Any, n_step: int, discount: float, *,
                 priority_fns: Mapping[str, PriorityFn | None] | None = None,
                 max_in_flight_items: int = 5, validate_items: bool = True) -> None:
        if isinstance(n_step, bool) or not isinstance(n_step, (int, np.integer)) \
                or n_step < 1:
            raise ValueError(f"n_step ({n_step!r}) must be an integer >= 1")
        self.n_step = int(n_step)
        self._discount = _nest.map_structure(np.float32, discount)
        # reward and discount of the last n steps (the window)
        self._rewards: deque[Any] = deque(maxlen=self.n_step)
        self._discounts: deque[Any] = deque(maxlen=self.n_step)
        self._rows = 0      # writer rows of this episode (row i holds s_i)
        self._extras = False
        super().__init__(client, self.n_step + 1, max_in_flight_items,
                         priority_fns, validate_items)

    @classmethod
    def signature(cls, environment_spec: Any, extras_spec: Any = ()) -> Transition:
        """The table signature of this adder's items (a ``Transition`` of
        ``TensorSpec``) for an environment spec with ``observations``,
        ``actions``, ``rewards`` and ``discounts`` (nests of objects with
        ``shape`` and ``dtype``: dm_env / Acme specs, numpy arrays).  The
        reward's shape and dtype are those of reward and discount together.
        """
        rewards, discounts = environment_spec.rewards, environment_spec.discounts
        rl, dl, structure = _pair(rewards, discounts)
        both = [np.broadcast(np.zeros(r.shape), np.zeros(d.shape)).shape
                for r, d in zip(rl, dl, strict=True)]
        rew = [np.zeros(s, np.result_type(r.dtype, d.dtype))
               for s, r, d in zip(both, rl, dl, strict=True)]
        disc = [np.zeros(d.shape, d.dtype) for d in dl]
        if structure is not None:
            rew_nest = _nest.unflatten_as(structure, rew)
            disc_nest = _nest.unflatten_as(structure, disc)
        else:
            rew_nest, disc_nest = rew[0], disc[0]
        obs = environment_spec.observations
        return Transition(
            observation=spec_nest(obs, "observation"),
            action=spec_nest(environment_spec.actions, "action"),
            reward=spec_nest(rew_nest, "reward"),
            discount=spec_nest(disc_nest, "discount"),
            next_observation=spec_nest(obs, "next_observation"),
            extras=spec_nest(extras_spec, "extras"))

    def reset(self, timeout_ms: int | None = None) -> None:
        super().reset(timeout_ms)
        self._rewards.clear()
        self._discounts.clear()
        self._rows = 0

    def _first(self, timestep: Any) -> None:
        self._writer.append({"observation": timestep.observation}, partial_step=True)
        self._rows = 1

    def _step(self, action: Any, next_timestep: Any, extras: Any) -> None:
        w = self._writer
        closing: dict[str, Any] = {"action": action}
        if extras is not None:
            closing["extras"] = extras
            self._extras = True
        w.append(closing)  # completes row t: (s_t, a_t, e_t)
        self._rewards.append(next_timestep.reward)
        self._discounts.append(next_timestep.discount)
        ret, total = n_step_return(list(self._rewards), list(self._discounts),
                                   self._discount)
        w.append({"observation": next_timestep.observation, "n_step_return": ret,
                  "total_discount": total}, partial_step=True)
        self._rows += 1
        # the transition from s_(rows-1-k) to the newest observation
        self._write(len(self._rewards), arrival=-1, value=-1)
        self._closing = closing

    def _last(self) -> None:
        # Complete the final row, then one row per shorter transition that
        # ends at s_T, holding its return and discount.
        w = self._writer
        w.append(zeros_like(self._closing))
        rows_after = 0
        while len(self._rewards) > 1:
            self._rewards.popleft()
            self._discounts.popleft()
            ret, total = n_step_return(list(self._rewards), list(self._discounts),
                                       self._discount)
            w.append({"n_step_return": ret, "total_discount": total})
            rows_after += 1
            self._write(len(self._rewards), arrival=-1 - rows_after, value=-1)

    def _write(self, k: int, arrival: int, value: int) -> None:
        """Item: s and a of ``k`` observation rows before the ``arrival`` row,
        the return and discount of the ``value`` row (indexes from the end)."""
        h = self._writer.history
        start = arrival - k
        item = Transition(
            observation=_nest.map_structure(lambda c: c[start], h["observation"]),
            action=_nest.map_structure(lambda c: c[start], h["action"]),
            reward=_nest.map_structure(lambda c: c[value], h["n_step_return"]),
            discount=_nest.map_structure(lambda c: c[value], h["total_discount"]),
            next_observation=_nest.map_structure(lambda c: c[arrival],
                                                 h["observation"]),
            extras=(_nest.map_structure(lambda c: c[start], h["extras"])
                    if self._extras else ()),
        )
        self._create_item(item)
