"""``SequenceAdder``: fixed-length sequences of steps (Acme's item layout),
for recurrent learners (R2D2) that sample ``[B, T, ...]`` batches."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from fastreplay import _nest
from fastreplay._structured_config import TensorSpec
from fastreplay.adders.base import PriorityFn, ReverbAdder, Step, spec_nest, zeros_like

__all__ = ["EndBehavior", "SequenceAdder", "episode_masks"]


class EndBehavior(enum.Enum):
    """What ``SequenceAdder`` writes when an episode ends (``sequence_length``
    3, ``period`` 2, an episode of steps 1..6, writes after 3 and 5)::

        WRITE     . . . 4 5 6      the last full sequence, overlapping
        CONTINUE  . . . . 5 6 F    go on into the next episode (F its first)
        ZERO_PAD  . . . . 5 6 0    pad to full length with zero steps
        TRUNCATE  . . . . 5 6      a shorter last sequence
    """

    WRITE = "write_buffer"
    CONTINUE = "continue_to_next_episode"
    ZERO_PAD = "zero_pad_til_next_write"
    TRUNCATE = "write_truncated_buffer"


def _behavior(end_of_episode_behavior: EndBehavior | None,
              pad_end_of_episode: bool | None,
              break_end_of_episode: bool | None) -> EndBehavior:
    """The behaviour from the new argument or Acme's two older flags."""
    legacy = pad_end_of_episode is not None or break_end_of_episode is not None
    if end_of_episode_behavior is not None:
        if legacy:
            raise ValueError("give end_of_episode_behavior or the older "
                             "pad_end_of_episode/break_end_of_episode, not both")
        if not isinstance(end_of_episode_behavior, EndBehavior):
            raise ValueError("end_of_episode_behavior must be an EndBehavior (e.g. "
                             f"EndBehavior.ZERO_PAD), got {end_of_episode_behavior!r}")
        return end_of_episode_behavior
    pad = True if pad_end_of_episode is None else pad_end_of_episode
    brk = True if break_end_of_episode is None else break_end_of_episode
    if not brk:
        if pad_end_of_episode:
            raise ValueError("pad_end_of_episode=True needs break_end_of_episode="
                             "True (sequences that continue are never padded)")
        return EndBehavior.CONTINUE
    return EndBehavior.ZERO_PAD if pad else EndBehavior.TRUNCATE


class SequenceAdder(ReverbAdder):
    """Writes overlapping sequences of ``sequence_length`` steps, one every
    ``period`` steps, each a ``Step`` whose fields are ``[T, ...]`` columns
    (``observation``, ``action``, ``reward``, ``discount``,
    ``start_of_episode``, ``extras``).  The step after the last action holds
    the final observation with zero action, reward and discount.

    Parameters
    ----------
    client : Client
        Items go to its tables (default table ``"priority_table"``).
    sequence_length : int
        Steps per item (``T``).
    period : int
        Steps between the starts of consecutive items (``period <
        sequence_length`` overlaps them).
    end_of_episode_behavior : EndBehavior, optional
        See ``EndBehavior`` (default ``ZERO_PAD``).
    pad_end_of_episode, break_end_of_episode : bool, optional
        Acme's older flags: ``pad=False`` is TRUNCATE, ``break=False`` is
        CONTINUE.
    priority_fns, max_in_flight_items, validate_items
        See ``ReverbAdder``.
    delta_encoded, chunk_length
        Accepted for Acme's callers and ignored (fastreplay's chunks are
        LZ4-compressed and sized by the writer's chunker).
    """

    def __init__(self, client: Any, sequence_length: int, period: int, *,
                 priority_fns: Mapping[str, PriorityFn | None] | None = None,
                 max_in_flight_items: int | None = 2,
                 end_of_episode_behavior: EndBehavior | None = None,
                 pad_end_of_episode: bool | None = None,
                 break_end_of_episode: bool | None = None,
                 validate_items: bool = True, delta_encoded: bool = False,
                 chunk_length: int | None = None) -> None:
        del delta_encoded, chunk_length  # see the docstring
        for name, value in (("sequence_length", sequence_length), ("period", period)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                    or value < 1:
                raise ValueError(f"{name} ({value!r}) must be an integer >= 1")
        self._sequence_length = int(sequence_length)
        self._period = int(period)
        self._end = _behavior(end_of_episode_behavior, pad_end_of_episode,
                              break_end_of_episode)
        self._extras = False
        self._zero_row: dict[str, Any] | None = None
        # one more row than a sequence: the open row of the next observation
        super().__init__(client, self._sequence_length + 1, max_in_flight_items,
                         priority_fns, validate_items)

    @classmethod
    def signature(cls, environment_spec: Any, extras_spec: Any = (),
                  sequence_length: int | None = None) -> Step:
        """The table signature of this adder's items: a ``Step`` of
        ``TensorSpec`` with a leading time dimension (``sequence_length``;
        None when items may be shorter, as with TRUNCATE).  See
        ``NStepTransitionAdder.signature`` for ``environment_spec``."""
        t = (sequence_length,)
        return Step(
            observation=spec_nest(environment_spec.observations, "observation", t),
            action=spec_nest(environment_spec.actions, "action", t),
            reward=spec_nest(environment_spec.rewards, "reward", t),
            discount=spec_nest(environment_spec.discounts, "discount", t),
            start_of_episode=TensorSpec(t, np.dtype(bool), "start_of_episode"),
            extras=spec_nest(extras_spec, "extras", t))

    @property
    def end_of_episode_behavior(self) -> EndBehavior:
        return self._end

    def reset(self, timeout_ms: int | None = None) -> None:
        if self._end is EndBehavior.CONTINUE:  # sequences run across episodes
            self._add_first_called = False
            return
        super().reset(timeout_ms)

    def _first(self, timestep: Any) -> None:
        self._writer.append({"observation": timestep.observation,
                             "start_of_episode": True}, partial_step=True)

    def _step(self, action: Any, next_timestep: Any, extras: Any) -> None:
        row: dict[str, Any] = {"action": action, "reward": next_timestep.reward,
                               "discount": next_timestep.discount}
        if extras is not None:
            row["extras"] = extras
            self._extras = True
        w = self._writer
        w.append(row)
        w.append({"observation": next_timestep.observation,
                  "start_of_episode": False}, partial_step=True)
        self._zero_row = row
        self._maybe_write(self._sequence_length, at_end=False)

    def _last(self) -> None:
        assert self._zero_row is not None
        zeros = zeros_like(self._zero_row)
        self._writer.append(zeros)  # completes the final observation's row
        steps = self._writer.episode_steps
        length, period = self._sequence_length, self._period
        end = self._end
        if end is EndBehavior.CONTINUE:
            self._maybe_write(length, at_end=True)
        elif end is EndBehavior.WRITE:
            if steps >= length:  # shorter episodes write nothing
                self._maybe_write(length, at_end=True, force=True)
        else:
            # steps missing to the next regular write
            short = length - steps
            if short < 0:
                short %= period
            if short >= length:
                # period > sequence_length: the next sequence would start
                # past the episode and hold none of its steps (Acme writes
                # an all-zero or empty item there)
                return
            if end is EndBehavior.TRUNCATE:
                self._maybe_write(length - short, at_end=True, force=True)
            else:  # ZERO_PAD
                last = self._writer.history
                obs = _nest.map_structure(lambda c: np.zeros_like(c[-1].numpy()),
                                          last["observation"])
                pad = {"observation": obs, "start_of_episode": False, **zeros}
                for _ in range(short):
                    self._writer.append(pad)
                self._maybe_write(length, at_end=True, force=True)

    def _maybe_write(self, length: int, *, at_end: bool, force: bool = False) -> None:
        steps = self._writer.episode_steps
        full = self._sequence_length
        due = steps == length or (steps > full and (steps - full) % self._period == 0)
        if not (due or force):
            return
        # the newest rows; before the end the open row (next observation) is
        # not part of the sequence
        rows = slice(-length, None) if at_end else slice(-length - 1, -1)
        h = self._writer.history

        def cut(name: str) -> Any:
            return _nest.map_structure(lambda c: c[rows], h[name])

        self._create_item(Step(
            observation=cut("observation"), action=cut("action"),
            reward=cut("reward"), discount=cut("discount"),
            start_of_episode=cut("start_of_episode"),
            extras=cut("extras") if self._extras else ()))


def episode_masks(start_of_episode: npt.ArrayLike
                  ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Masks of a sampled ``[B, T]`` ``start_of_episode`` batch.

    Returns ``(reset, same_episode)``: ``reset`` is where a recurrent core
    must start from its initial state (the first step of an episode);
    ``same_episode`` is True for the steps in the episode of each sequence's
    first step (False from the next episode's first step on, which
    ``EndBehavior.CONTINUE`` sequences can reach).
    """
    start = np.asarray(start_of_episode).astype(bool)
    if start.ndim != 2:
        raise ValueError(f"start_of_episode must be [B, T], got shape {start.shape}")
    later = start.copy()
    later[:, 0] = False
    same = np.cumsum(later, axis=1) == 0
    return start, same
