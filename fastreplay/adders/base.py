"""The adder protocol and the records adders write (Acme's layout).

An adder turns an actor's stream of timesteps into items: ``add_first`` with
the episode's first timestep, then ``add(action, next_timestep, extras)``
per step; the episode ends with a timestep whose ``step_type`` is LAST.
Timesteps are anything with ``step_type``, ``reward``, ``discount`` and
``observation`` (``dm_env.TimeStep`` or this module's ``TimeStep``).
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

from fastreplay import _nest
from fastreplay._structured_config import TensorSpec

__all__ = [
    "DEFAULT_PRIORITY_TABLE",
    "PriorityFn",
    "ReverbAdder",
    "Step",
    "StepType",
    "TimeStep",
    "Trajectory",
    "Transition",
    "restart",
    "termination",
    "transition",
    "truncation",
]

#: The table adders write to when no ``priority_fns`` are given (Acme's).
DEFAULT_PRIORITY_TABLE = "priority_table"


class StepType(enum.IntEnum):
    """Where a timestep is in its episode (``dm_env.StepType``'s values)."""

    FIRST = 0
    MID = 1
    LAST = 2

    def first(self) -> bool:
        return self is StepType.FIRST

    def mid(self) -> bool:
        return self is StepType.MID

    def last(self) -> bool:
        return self is StepType.LAST


class TimeStep(NamedTuple):
    """A timestep for users without ``dm_env`` (same fields and order)."""

    step_type: StepType
    reward: Any
    discount: Any
    observation: Any

    def first(self) -> bool:
        return bool(self.step_type == StepType.FIRST)

    def mid(self) -> bool:
        return bool(self.step_type == StepType.MID)

    def last(self) -> bool:
        return bool(self.step_type == StepType.LAST)


def restart(observation: Any) -> TimeStep:
    """The first timestep of an episode (no reward or discount yet)."""
    return TimeStep(StepType.FIRST, None, None, observation)


def transition(reward: Any, observation: Any, discount: Any = 1.0) -> TimeStep:
    """A middle timestep."""
    return TimeStep(StepType.MID, reward, discount, observation)


def termination(reward: Any, observation: Any) -> TimeStep:
    """The last timestep of an episode that ended (discount 0)."""
    return TimeStep(StepType.LAST, reward, 0.0, observation)


def truncation(reward: Any, observation: Any, discount: Any = 1.0) -> TimeStep:
    """The last timestep of an episode cut short (a time limit: discount 1)."""
    return TimeStep(StepType.LAST, reward, discount, observation)


class Transition(NamedTuple):
    """An item of ``NStepTransitionAdder``: ``(s_t, a_t, R, D, s_{t+n}, e_t)``."""

    observation: Any
    action: Any
    reward: Any
    discount: Any
    next_observation: Any
    extras: Any = ()


class Step(NamedTuple):
    """One step of a ``SequenceAdder`` item (each field ``[T, ...]`` there)."""

    observation: Any
    action: Any
    reward: Any
    discount: Any
    start_of_episode: Any
    extras: Any = ()


Trajectory = Step

#: A priority function: the item (numpy leaves) -> its priority.
PriorityFn = Callable[[Any], float]


def _is_first(timestep: Any) -> bool:
    return int(timestep.step_type) == StepType.FIRST


def _is_last(timestep: Any) -> bool:
    return int(timestep.step_type) == StepType.LAST


def _has_extras(extras: Any) -> bool:
    if extras is None:
        return False
    if isinstance(extras, (tuple, list, dict)):
        return len(extras) > 0
    return True


def spec_nest(nest: Any, prefix: str, time: tuple[int | None, ...] = ()) -> Any:
    """``TensorSpec`` leaves (named by their path under ``prefix``, with
    leading ``time`` dimensions) for a nest of objects with ``shape`` and
    ``dtype`` (dm_env / Acme specs, numpy arrays)."""
    def leaf(path: tuple[Any, ...], x: Any) -> TensorSpec:
        name = "/".join([prefix, *map(str, path)])
        return TensorSpec((*time, *tuple(x.shape)), np.dtype(x.dtype), name)

    return _nest.map_structure_with_path(leaf, nest)


def zeros_like(nest: Any) -> Any:
    """The nest with every leaf replaced by zeros of its dtype and shape."""
    return _nest.map_structure(lambda x: np.zeros_like(np.asarray(x)), nest)


class ReverbAdder(abc.ABC):
    """Base of the adders: the ``add_first``/``add``/``reset`` protocol over
    one ``TrajectoryWriter`` of ``client``.

    Parameters
    ----------
    client : Client
        Where items go (``client.trajectory_writer``).
    max_sequence_length : int
        Steps the writer keeps referable (its ``num_keep_alive_refs``).
    max_in_flight_items : int
        After each item the writer is flushed down to this many pending items
        (``TrajectoryWriter.flush(block_until_num_items=...)``).
    priority_fns : mapping table name -> PriorityFn or None, optional
        Tables to write each item to, with a function computing its priority
        from the item (numpy leaves); None means priority 1.0.  Default:
        ``{"priority_table": None}``.
    validate_items : bool
        Check items against the tables' signatures.
    """

    def __init__(self, client: Any, max_sequence_length: int,
                 max_in_flight_items: int | None,
                 priority_fns: Mapping[str, PriorityFn | None] | None = None,
                 validate_items: bool = True) -> None:
        self._client = client
        self._priority_fns: dict[str, PriorityFn | None] = (
            dict(priority_fns) if priority_fns else {DEFAULT_PRIORITY_TABLE: None})
        self._max_sequence_length = int(max_sequence_length)
        self._max_in_flight_items = int(max_in_flight_items or 0)
        self._validate_items = validate_items
        self._writer_: Any = None
        self._add_first_called = False

    @property
    def _writer(self) -> Any:
        if self._writer_ is None:
            self._writer_ = self._client.trajectory_writer(
                num_keep_alive_refs=self._max_sequence_length,
                validate_items=self._validate_items)
        return self._writer_

    def add_priority_table(self, table_name: str, priority_fn: PriorityFn | None
                           ) -> None:
        """Also write every item to ``table_name`` (with ``priority_fn``)."""
        if table_name in self._priority_fns:
            raise ValueError(f"a priority function for table {table_name!r} exists "
                             f"already (tables: {', '.join(self._priority_fns)})")
        self._priority_fns[table_name] = priority_fn

    def add_first(self, timestep: Any) -> None:
        """Start an episode with its first timestep (``step_type`` FIRST)."""
        if not _is_first(timestep):
            raise ValueError("adder.add_first needs the first timestep of an "
                             "episode (step_type FIRST), got step_type "
                             f"{timestep.step_type!r}; call add() for the "
                             "following timesteps")
        self._first(timestep)
        self._add_first_called = True

    def add(self, action: Any, next_timestep: Any, extras: Any = ()) -> None:
        """Record ``action`` and the ``next_timestep`` it led to (and
        ``extras``, e.g. the policy's log-probabilities or recurrent state).
        A LAST ``next_timestep`` writes the episode's remaining items and
        resets the adder."""
        if not self._add_first_called:
            raise ValueError("adder.add_first must be called before adder.add "
                             "(with the episode's first timestep)")
        if _is_first(next_timestep):
            raise ValueError("adder.add got a FIRST timestep: start the new episode "
                             "with add_first()")
        try:
            self._step(action, next_timestep, extras if _has_extras(extras) else None)
            if _is_last(next_timestep):
                self._last()
        except Exception as exc:
            # The writer may hold half a step: drop the episode (items
            # already written stay) so that add_first starts clean.
            self.reset()
            if hasattr(exc, "add_note"):
                exc.add_note("The adder dropped the rest of this episode; start "
                             "the next one with add_first().")
            raise
        if _is_last(next_timestep):
            self.reset()

    def reset(self, timeout_ms: int | None = None) -> None:
        """Drop the current episode's partial data (``add_first`` comes next)."""
        if self._writer_ is not None:
            self._writer_.end_episode(clear_buffers=True, timeout_ms=timeout_ms)
        self._add_first_called = False

    def close(self) -> None:
        """Flush pending items and close the writer."""
        if self._writer_ is not None:
            try:
                self._writer_.flush()
            finally:
                self._writer_.close()
                self._writer_ = None

    def __del__(self) -> None:
        # Items still pending go to their tables (bounded: 10 s), as Acme's
        # adders do when they are deleted.
        writer = getattr(self, "_writer_", None)
        if writer is not None:
            try:
                writer.flush(0, timeout_ms=10_000)
                writer.close()
            except Exception:  # noqa: BLE001 - nothing to report to in __del__
                pass

    def __enter__(self) -> ReverbAdder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _create_item(self, trajectory: Any) -> None:
        """Write ``trajectory`` (TrajectoryColumn leaves) to every table."""
        fns = self._priority_fns
        numpy_item = None
        if any(fn is not None for fn in fns.values()):
            numpy_item = _nest.map_structure(lambda c: c.numpy(), trajectory)
        for table, fn in fns.items():
            priority = 1.0 if fn is None else float(fn(numpy_item))
            self._writer.create_item(table, priority, trajectory)
            self._writer.flush(self._max_in_flight_items)

    @abc.abstractmethod
    def _first(self, timestep: Any) -> None:
        """Record the episode's first observation."""

    @abc.abstractmethod
    def _step(self, action: Any, next_timestep: Any, extras: Any) -> None:
        """Record one step (``extras`` None when there are none)."""

    @abc.abstractmethod
    def _last(self) -> None:
        """Write the items the episode's end completes."""
