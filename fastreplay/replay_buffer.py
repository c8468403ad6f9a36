"""``ReplayBuffer``: a transition buffer for users of cpprb, SB3 or Tianshou.

One table of one-step items (each field a squeezed column), uniform or
prioritized, with the familiar ``add`` / ``sample`` / ``update_priorities``
calls.  A batch of transitions is one call into C, which cuts each field into
chunks as a writer with one-step items would (``_core.insert_rows``), so
sampling after ``add_batch`` is as fast as after ``add``.  Sampling gathers
``[batch, *shape]`` arrays in C without the GIL.
"""

from __future__ import annotations

import math
import secrets
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from fastreplay import _core, rate_limiters, selectors
from fastreplay._frames import FrameFields, field_names
from fastreplay._nstep import nstep_from_args
from fastreplay.chunkers import compression_mode
from fastreplay.table import Table, TableInfo

__all__ = ["ReplayBuffer"]

#: The chunker options of a writer of one-step items (num_keep_alive_refs=1,
#: auto-tuned): compressed fields get one row per chunk, as with ``add``.
_KEEP_ALIVE = 1


class ReplayBuffer:
    """A bounded buffer of transitions (oldest evicted first).

    Parameters
    ----------
    capacity : int
        Maximum number of transitions.
    alpha : float, optional
        Prioritized sampling with exponent ``alpha`` (PER); uniform when None.
    seed : int, optional
        Seed of the sampling generator.
    min_size : int
        Transitions needed before ``sample`` returns (it waits until then, up
        to ``timeout``).
    compression : {'auto', 'lz4', None} or dict, optional
        How fields are stored: ``'auto'`` (LZ4 for rows of 256 bytes or
        more), ``'lz4'`` or None (raw: sampling copies rows without
        decoding, the fastest for images that do not compress); a dict gives
        it per field (fields it does not name are ``'auto'``).
    next_of : str or sequence of str, optional
        cpprb's ``next_of``: for each name ``x`` the transitions carry ``x``
        and ``next_x``, stored as one stream of frames, so ``next_x`` of a
        step that is ``x`` of the next one is stored once (episode starts
        are detected by comparing values: ``on_episode_end`` is optional).
    stack_compress : str or sequence of str, optional
        cpprb's ``stack_compress``: fields (and their ``next_`` fields)
        whose last axis is a stack of frames sliding by one per step; each
        frame is stored once and ``sample`` rebuilds the stacks.
    n_step : int, optional
        Store n-step transitions (cpprb's ``Nstep``): the reward field
        (``rew`` or ``reward``) becomes ``r_t + gamma r_{t+1} + ...`` over up
        to ``n_step`` steps, the ``next_*`` fields and ``done`` come from the
        window's last step.  A window stops at a step whose ``done`` is set;
        call ``on_episode_end()`` when an episode ends to store the last
        ``n_step - 1`` transitions (windows cut short).  ``add`` and
        ``add_batch`` take consecutive steps of one episode stream.
    gamma : float
        The n-step discount (default 0.99).
    Nstep : dict, optional
        cpprb's form, ``{"size": n, "gamma": g, "rew": "rew", "next":
        "next_obs"}`` (``"done"`` names the done field, default ``"done"``;
        ``"discount": "name"`` adds a float32 field ``gamma ** k``, or 0 at a
        done, the bootstrap factor of each k-step window, right also for
        windows an episode's end cut short); as in cpprb, fields it does not
        name are neither summed nor shifted.
    """

    def __init__(self, capacity: int, *, alpha: float | None = None,
                 seed: int | None = None, min_size: int = 1,
                 compression: str | None | Mapping[str, str | None] = "auto",
                 next_of: str | Sequence[str] | None = None,
                 stack_compress: str | Sequence[str] | None = None,
                 n_step: int | None = None, gamma: float = 0.99,
                 Nstep: Mapping[str, Any] | None = None) -> None:
        # n-step transitions are made before anything is stored (_nstep.py)
        self._nstep = nstep_from_args(n_step, gamma, Nstep)
        if isinstance(compression, Mapping):
            self._compression = {str(k): compression_mode(v, f"field {k!r}")
                                 for k, v in compression.items()}
            self._default_compression = compression_mode("auto", "")
        else:
            self._compression = {}
            self._default_compression = compression_mode(compression, "ReplayBuffer")
        sampler: selectors.ItemSelector = (
            selectors.Uniform() if alpha is None else selectors.Prioritized(alpha)
        )
        self._table = Table("replay_buffer", sampler, selectors.Fifo(), capacity,
                            rate_limiters.MinSize(min_size), seed=seed)
        self._prioritized = alpha is not None
        self._store = _core.ChunkStore()
        self._fields: list[str] | None = None
        self._specs: list[tuple[Any, ...]] | None = None
        self._lock = threading.Lock()
        self._keys = _core.RowKeys(0, secrets.randbits(63))  # item, chunk keys
        self._max_priority = 1.0
        # the compiled paths (_core.insert_row, insert_batch), set by the
        # first insert
        self._plan: Any = None
        self._paths: list[str] = []
        self._field_set: set[str] = set()
        # next_of / stack_compress: fields stored as frame streams (_frames)
        nexts = field_names(next_of, "next_of")
        stacks = field_names(stack_compress, "stack_compress")
        self._frames = (FrameFields(nexts, stacks, self._compression,
                                    self._default_compression)
                        if nexts or stacks else None)

    @property
    def capacity(self) -> int:
        return self._table.info.max_size

    @property
    def table(self) -> Table:
        return self._table

    @property
    def chunk_store(self) -> _core.ChunkStore:
        """The store of this buffer's chunks (``stats()``: stored and raw
        bytes)."""
        return self._store

    @property
    def info(self) -> TableInfo:
        return self._table.info

    def __len__(self) -> int:
        return len(self._table)

    def add(self, *, priority: float | None = None, **transition: Any) -> None:
        """Add one transition: ``add(obs=o, action=a, reward=r, ...)``.

        The first call fixes the field names; a prioritized buffer gives new
        transitions ``priority`` or else the largest priority seen so far.
        """
        if self._nstep is not None:  # one step of the n-step stream
            self._add_nstep(self._nstep.add_one(transition, priority))
            return
        plan, names = self._plan, self._fields
        values = None
        if plan is not None and names is not None and len(transition) == len(names):
            try:  # the same count and every name: the same fields
                values = list(map(transition.__getitem__, names))
            except KeyError:
                pass
        if values is not None:
            # The compiled path: one row as given, checked against the
            # first insert's specs (anything else takes the general path).
            prio = (float(priority) if priority is not None else
                    self._max_priority if self._prioritized else 1.0)
            if _core.insert_row(self._table._core, self._store, plan, self._keys,
                                self._paths, values, prio):
                if priority is not None:
                    self._max_priority = max(self._max_priority, prio)
                return
        batch: dict[str, Any] = {k: np.asarray(v)[None] for k, v in transition.items()}
        self.add_batch(priorities=None if priority is None else [priority], **batch)

    def add_batch(self, *, priorities: npt.ArrayLike | None = None,
                  timeout: float | None = None, **transitions: Any) -> None:
        """Add N transitions at once: every field has a leading axis N."""
        if self._nstep is not None:  # N consecutive steps -> finished transitions
            ready = self._nstep.add(transitions, priorities)
            if ready is None:
                return
            transitions, priorities = self._nstep_ready(ready)
        if self._frames is not None:
            self._add_frames(priorities, timeout, transitions)
            return
        plan, names = self._plan, self._fields
        if (plan is not None and names is not None
                and transitions.keys() == self._field_set):
            # The compiled path: fields as given, checked against the first
            # insert's specs in C (anything else takes the general path).
            prios = (None if priorities is None else
                     np.asarray(priorities, dtype=np.float64).reshape(-1))
            done = _core.insert_batch(
                self._table._core, self._store, plan, self._keys, self._paths,
                [transitions[k] for k in names], prios,
                self._max_priority if self._prioritized else 1.0, timeout)
            if done >= 0:
                if prios is not None and len(prios):
                    self._max_priority = max(self._max_priority, float(prios.max()))
                return
        names = sorted(transitions)
        if not names:
            raise ValueError("add needs at least one field")
        if self._fields is not None and names != self._fields:
            raise ValueError(f"fields {names} differ from the buffer's {self._fields}")
        unknown = sorted(set(self._compression) - set(names))
        if unknown:
            raise ValueError(f"compression names fields {unknown} that the transitions "
                             f"lack (fields: {names})")
        values = [np.asarray(transitions[k]) for k in names]
        specs = [(v.dtype, v.shape[1:]) for v in values]
        if self._specs is not None and specs != self._specs:
            for name, got, want in zip(names, specs, self._specs, strict=False):
                if got != want:
                    raise ValueError(
                        f"field {name!r}: rows of dtype {got[0]} and shape {got[1]} "
                        f"differ from the buffer's {want[0]} {want[1]}")
        n = len(values[0])
        if priorities is None:
            prios = np.full(n, self._max_priority if self._prioritized else 1.0)
        else:
            prios = np.asarray(priorities, dtype=np.float64).reshape(-1)
        with self._lock:  # keys and chunk keys stay unique across threads
            key, chunk_key = self._keys.reserve(n, len(names) * n)  # one per chunk
            keys = np.arange(key, key + n, dtype=np.uint64)
            first = self._fields is None
            if first:  # set before rows can be sampled; undone if none land
                self._fields, self._specs = names, specs
        paths = [f"({k!r},)" for k in names]
        modes = [self._compression.get(k, self._default_compression) for k in names]
        try:
            done = _core.insert_rows(self._table._core, self._store, paths, values,
                                     keys, prios, chunk_key, timeout, _KEEP_ALIVE,
                                     None, modes)
        except BaseException:
            with self._lock:
                if first and len(self._table) == 0:
                    self._fields = self._specs = None
            raise
        if first and done and self._plan is None:  # add's compiled path from now on
            self._paths, self._field_set = paths, set(names)
            self._plan = _core.RowPlan(paths, [v[0] for v in values], modes)
        # Only a successful insert raises the default priority.
        if priorities is not None and len(prios):
            self._max_priority = max(self._max_priority, float(prios.max()))

    def _add_frames(self, priorities: npt.ArrayLike | None, timeout: float | None,
                    transitions: dict[str, Any]) -> None:
        """add_batch with frame streams (next_of / stack_compress)."""
        frames = self._frames
        assert frames is not None
        if not transitions:
            raise ValueError("add needs at least one field")
        n = len(np.asarray(next(iter(transitions.values()))))
        if priorities is None:
            prios = np.full(n, self._max_priority if self._prioritized else 1.0)
        else:
            prios = np.asarray(priorities, dtype=np.float64).reshape(-1)
        with frames.lock:  # the streams see the batches in order
            with self._lock:
                key, chunk_key = self._keys.reserve(
                    n, frames.chunk_keys(n, transitions) % 2**64)
                keys = np.arange(key, key + n, dtype=np.uint64)
            frames.insert(self._table._core, self._store, transitions, keys, prios,
                          chunk_key, timeout)
            self._fields = frames.columns
        if priorities is not None and len(prios):
            self._max_priority = max(self._max_priority, float(prios.max()))

    def on_episode_end(self) -> None:
        """cpprb's episode-end call.  With ``n_step`` it stores the episode's
        last transitions (their windows cut at the end); otherwise there is
        nothing to do (episode starts are found by comparing values)."""
        if self._nstep is not None:
            self._add_nstep(self._nstep.flush())

    def _add_nstep(self, ready: Any) -> None:
        """Insert finished n-step transitions (if any) as they are."""
        if ready is None:
            return
        transitions, priorities = self._nstep_ready(ready)
        nstep, self._nstep = self._nstep, None  # n-step buffers take one stream
        try:
            self.add_batch(priorities=priorities, **transitions)
        finally:
            self._nstep = nstep

    def _nstep_ready(self, ready: Any) -> tuple[dict[str, Any], Any]:
        """n-step transitions and priorities (the default where none was
        given) for add_batch."""
        transitions, prios = ready
        if prios is not None:  # the default counts the priorities just given
            default = (max(self._max_priority, float(np.nanmax(prios)))
                       if self._prioritized else 1.0)
            prios = np.where(np.isnan(prios), default, prios)
        return transitions, prios

    def sample(self, batch_size: int, beta: float = 0.4, *,
               timeout: float | None = None) -> dict[str, np.ndarray]:
        """Sample a batch: each field ``[batch_size, *shape]`` plus
        ``indexes`` (keys for ``update_priorities``), ``weights`` (importance
        weights with exponent ``beta``; ones for a uniform buffer) and
        ``probabilities``."""
        beta = float(beta)
        if not (beta >= 0 and math.isfinite(beta)):
            raise ValueError(f"beta ({beta}) must be finite and >= 0")
        keys, probs, prios, times, sizes, columns, *_ = self._table._core.sample_batch(
            self._table._num_samples(batch_size), timeout
        )
        assert self._fields is not None
        out = dict(zip(self._fields, columns, strict=False))
        out["indexes"] = keys
        out["probabilities"] = probs
        if self._prioritized:
            w = (sizes * probs) ** -beta
            out["weights"] = w / w.max()
        else:
            out["weights"] = np.ones(len(keys))
        return out

    def update_priorities(self, indexes: npt.ArrayLike, priorities: npt.ArrayLike
                          ) -> None:
        """Set new priorities; keys of transitions already evicted are ignored."""
        prios = np.asarray(priorities, dtype=np.float64).reshape(-1)
        self._table.update_priorities(indexes, prios)
        if len(prios):
            self._max_priority = max(self._max_priority, float(prios.max()))
