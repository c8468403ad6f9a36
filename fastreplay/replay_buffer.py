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
import operator
import os
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from fastreplay import _core, _rb_persist, _rb_ring, errors, rate_limiters, selectors
from fastreplay._frames import FrameFields, field_names
from fastreplay._nstep import nstep_from_args
from fastreplay._rb_fields import (
    SEP,
    FieldLayout,
    field_difference,
    mismatch,
    parse_spec,
    priority_error,
    rows_error,
)
from fastreplay.chunkers import compression_mode
from fastreplay.table import Table, TableInfo, key_array

__all__ = ["ReplayBuffer"]

#: The chunker options of a writer of one-step items (num_keep_alive_refs=1,
#: auto-tuned): compressed fields get one row per chunk, as with ``add``.
_KEEP_ALIVE = 1


def _batch_of_one(value: Any) -> Any:
    """A value (or a dict of them) with a leading batch axis of 1."""
    if isinstance(value, Mapping):
        return {k: _batch_of_one(v) for k, v in value.items()}
    return np.asarray(value)[None]


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
                 Nstep: Mapping[str, Any] | None = None,
                 spec: Mapping[str, Any] | None = None,
                 env_dict: Mapping[str, Any] | None = None) -> None:
        if type(capacity) is not int or capacity < 1:
            capacity = _positive("capacity", capacity, "ReplayBuffer(100_000)")
        # n-step transitions are made before anything is stored (_nstep.py)
        self._nstep = nstep_from_args(n_step, gamma, Nstep)
        #: the arguments ``save`` records and ``load`` passes back
        self._config = _rb_persist.config_of(
            capacity=capacity, alpha=alpha, min_size=min_size,
            compression=compression, next_of=next_of, stack_compress=stack_compress,
            n_step=n_step, gamma=gamma, Nstep=Nstep)
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
        self._alpha = 1.0 if alpha is None else float(alpha)
        self._seed = secrets.randbits(64) if seed is None else seed % 2**64
        #: the ring form (_rb_ring) while the buffer is in it, else None
        self._ring: _core.Ring | None = None
        self._table_only = False  # once the table was handed out
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
        self._layout = FieldLayout()
        self._layout = self._declare(spec, env_dict, nexts + stacks)

    def _declare(self, spec: Mapping[str, Any] | None,
                 env_dict: Mapping[str, Any] | None,
                 frame_fields: tuple[str, ...]) -> FieldLayout:
        """The field layout of ``spec`` / ``env_dict``; a fully declared
        buffer without frame streams gets its compiled add path now."""
        parsed = parse_spec(spec, env_dict)
        if parsed is None:
            return FieldLayout()
        leaves, paths = parsed
        for x in (self._frames.next_of if self._frames is not None else ()):
            nxt = f"next_{x}"
            if x in leaves and nxt not in leaves:  # declared with its source
                leaves[nxt], paths[nxt] = leaves[x], (nxt,)
        nested = sorted(k for k in frame_fields if k not in leaves and any(
            n.startswith(k + SEP) for n in leaves))
        if nested:
            raise ValueError(f"next_of / stack_compress fields {nested} are nested "
                             "in the spec; they must be arrays")
        layout = self._layout = FieldLayout(dict(sorted(leaves.items())), paths)
        unknown = sorted(set(self._compression) - set(leaves) - layout.tops)
        if unknown:
            raise ValueError(f"compression names fields {unknown} that the spec lacks "
                             f"(fields: {sorted(leaves)})")
        if self._frames is None:
            names = sorted(leaves)
            self._fields = names
            self._specs = [leaves[k] for k in names]
            self._set_plan(names, [np.zeros(shape, dt) for dt, shape in self._specs])
            _rb_ring.start(self)
        return layout

    def _mode(self, name: str) -> int:
        """A column's compression: its own entry, its top-level field's
        (a dict field), or the default."""
        mode = self._compression.get(name)
        if mode is None and SEP in name:
            mode = self._compression.get(self._layout.paths.get(name, (name,))[0])
        return self._default_compression if mode is None else mode

    def _set_plan(self, names: list[str], rows: list[np.ndarray]) -> None:
        """``add``'s compiled path for rows like ``rows``."""
        paths = [repr(self._layout.paths.get(k, (k,))) for k in names]
        modes = [self._mode(k) for k in names]
        self._paths, self._field_set = paths, set(names)
        self._plan = _core.RowPlan(paths, rows, modes)

    def _retry_row(self, transition: dict[str, Any], prio: float) -> bool:
        """``add``'s compiled path after converting to the declared specs
        (False: the general path reports what does not fit)."""
        try:
            values = self._layout.conform(transition, 0)
        except ValueError:
            return False
        names = self._fields
        assert names is not None
        if _rb_ring.add(self, [values[k] for k in names], None, prio, False):
            return True
        return bool(_core.insert_row(self._table._core, self._store, self._plan,
                                     self._keys, self._paths,
                                     [values[k] for k in names], prio))

    @property
    def capacity(self) -> int:
        return self._table._max_size

    @property
    def table(self) -> Table:
        """The buffer's table (a buffer in the ring form moves into it
        first, and stays there)."""
        _rb_ring.to_table(self)
        return self._table

    @property
    def chunk_store(self) -> _core.ChunkStore:
        """The store of this buffer's chunks (``stats()``: stored and raw
        bytes; a buffer in the ring form moves into its table first)."""
        _rb_ring.to_table(self)
        return self._store

    @property
    def info(self) -> TableInfo:
        ring = self._ring
        if ring is not None:
            return self._table.info_from(_rb_ring.table_stats(ring))
        return self._table.info

    def __len__(self) -> int:
        ring = self._ring
        return len(ring) if ring is not None else len(self._table)

    def add(self, *, priority: float | None = None, **transition: Any) -> None:
        """Add one transition: ``add(obs=o, action=a, reward=r, ...)``.

        The first call fixes the field names (and, without a ``spec``, their
        dtypes and shapes); a prioritized buffer gives new transitions
        ``priority`` or else the largest priority seen so far.
        """
        try:
            if self._layout.nested:
                transition = self._layout.flatten(transition)[0]
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
                if _rb_ring.add(self, values, None, prio, False) or (
                        self._ring is None and _core.insert_row(
                            self._table._core, self._store, plan, self._keys,
                            self._paths, values, prio)):
                    if priority is not None:
                        self._max_priority = max(self._max_priority, prio)
                    return
                if (self._layout.declared is not None
                        and self._retry_row(transition, prio)):
                    if priority is not None:
                        self._max_priority = max(self._max_priority, prio)
                    return
            batch: dict[str, Any] = {k: _batch_of_one(v) for k, v in transition.items()}
            self.add_batch(priorities=None if priority is None else [priority], **batch)
        except errors.InvalidPriorityError as exc:
            raise priority_error(exc) from None

    def add_batch(self, *, priorities: npt.ArrayLike | None = None,
                  timeout: float | None = None, **transitions: Any) -> None:
        """Add N transitions at once: every field has a leading axis N (a
        dict field: each of its leaves)."""
        try:
            layout = self._layout
            if layout.nested:
                transitions = layout.flatten(transitions)[0]
            if self._nstep is not None:  # N consecutive steps -> finished transitions
                ready = self._nstep.add(transitions, priorities)
                if ready is None:
                    return
                transitions, priorities = self._nstep_ready(ready)
            if self._frames is not None:
                flat, fpaths = layout.flatten(transitions)
                nested = sorted(k for k, p in fpaths.items() if len(p) > 1)
                if nested:
                    raise ValueError(f"fields {nested} are nested, which a buffer with "
                                     "next_of / stack_compress does not support")
                self._add_frames(priorities, timeout, layout.conform(flat, 1))
                return
            plan, names = self._plan, self._fields
            if (plan is not None and names is not None
                    and transitions.keys() == self._field_set):
                # The compiled path: fields as given, checked against the first
                # insert's specs in C (anything else takes the general path).
                prios = (None if priorities is None else
                         np.asarray(priorities, dtype=np.float64).reshape(-1))
                default = self._max_priority if self._prioritized else 1.0
                done = 1 if _rb_ring.add(self, [transitions[k] for k in names], prios,
                                           default, True) else -1
                if done < 0 and self._ring is None:
                    done = _core.insert_batch(
                        self._table._core, self._store, plan, self._keys, self._paths,
                        [transitions[k] for k in names], prios, default, timeout)
                if done >= 0:
                    if prios is not None and len(prios):
                        self._max_priority = max(self._max_priority, float(prios.max()))
                    return
            flat, fpaths = layout.flatten(transitions)
            flat = layout.conform(flat, 1)
            names = sorted(flat)
            if not names:
                raise ValueError("add needs at least one field")
            if self._fields is not None and names != self._fields:
                raise field_difference(names, self._fields)
            unknown = sorted(set(self._compression) - set(names) - layout.tops
                             - {fpaths[k][0] for k in names})
            if unknown:
                raise ValueError(f"compression names fields {unknown} that the "
                                 f"transitions lack (fields: {names})")
            values = [np.asarray(flat[k]) for k in names]
            specs = [(v.dtype, v.shape[1:]) for v in values]
            if self._specs is not None and specs != self._specs:
                raise mismatch(names, specs, self._specs, self._layout.declared is None)
            n = len(values[0])
            if priorities is None:
                prios = np.full(n, self._max_priority if self._prioritized else 1.0)
            else:
                prios = np.asarray(priorities, dtype=np.float64).reshape(-1)
            with self._lock:
                first = self._fields is None
                if first:  # set before rows can be sampled; undone if none land
                    self._fields, self._specs = names, specs
                    layout.learn({k: fpaths[k] for k in names})
                    if n and self._plan is None:  # add's compiled path from now on
                        self._set_plan(names, [v[0] for v in values])
                        _rb_ring.start(self)
            try:
                if any(len(v) != n for v in values):
                    raise ValueError("rows != number of environments")  # rows_error
                if len(prios) != n:
                    raise ValueError(f"add_batch: {len(prios)} priorities for {n} "
                                     "transitions; give one per transition")
                values = [np.ascontiguousarray(v) for v in values]
                if not _rb_ring.add(self, values, prios, 1.0, True):
                    if self._ring is not None:  # never: values are the plan's rows
                        raise errors.InternalError("ReplayBuffer: ring refused rows")
                    self._insert_rows(names, values, prios, timeout)
            except BaseException:
                with self._lock:
                    if first and len(self) == 0:
                        self._fields = self._specs = self._plan = self._ring = None
                        layout.learn({})
                raise
            # Only a successful insert raises the default priority.
            if priorities is not None and len(prios):
                self._max_priority = max(self._max_priority, float(prios.max()))
        except errors.InvalidPriorityError as exc:
            raise priority_error(exc) from None
        except ValueError as exc:
            raise rows_error(exc, transitions) from None

    def _insert_rows(self, names: list[str], values: list[Any], prios: Any,
                     timeout: float | None) -> None:
        """add_batch's general path into the table."""
        n = len(prios)
        with self._lock:  # keys and chunk keys stay unique across threads
            key, chunk_key = self._keys.reserve(n, len(names) * n)  # one per chunk
        paths = [repr(self._layout.paths.get(k, (k,))) for k in names]
        _core.insert_rows(self._table._core, self._store, paths, values,
                          np.arange(key, key + n, dtype=np.uint64), prios, chunk_key,
                          timeout, _KEEP_ALIVE, None, [self._mode(k) for k in names])

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
               timeout: float | None = 0.0) -> dict[str, Any]:
        """Sample a batch: each field ``[batch_size, *shape]`` (a dict field
        nested as added) plus ``indexes`` (keys for ``update_priorities``),
        ``weights`` (float32 importance weights with exponent ``beta``,
        normalized to a maximum of 1; ones for a uniform buffer) and
        ``probabilities`` (float64, each row's sampling probability).

        With fewer than ``min_size`` transitions stored, the default
        ``timeout=0`` raises ``FailedPreconditionError`` (a RuntimeError) at
        once; ``timeout=t`` waits up to t seconds for other threads to add
        (then ``DeadlineExceededError``, a TimeoutError) and ``timeout=None``
        waits as long as it takes.
        """
        beta = float(beta)
        if not (beta >= 0 and math.isfinite(beta)):
            raise ValueError(f"beta ({beta}) must be finite and >= 0")
        if type(batch_size) is not int or batch_size < 1:
            batch_size = _positive("batch_size", batch_size, "rb.sample(256)")
        n = self._table._num_samples(batch_size)
        if timeout == 0 and not self._can_sample(n):
            raise errors.FailedPreconditionError(
                f"ReplayBuffer.sample: {len(self)} transitions stored, fewer than "
                f"min_size={self._config['min_size']}; add more first, or pass "
                "timeout= (seconds, None: forever) to wait for other threads to add")
        ring = self._ring
        got = None
        if ring is not None:
            start = time.monotonic()
            got = ring.sample(n, self._config["min_size"], timeout)
            if got is None:  # moved to the table: sample there once it is filled
                _rb_ring.wait_for_move(self)
        sizes: Any
        if got is not None:
            keys, probs, _, sizes, columns = got
        else:
            if ring is not None and timeout:  # the time left of the wait
                timeout = max(0.0, timeout - (time.monotonic() - start))
            keys, probs, _, _, sizes, columns, *_ = self._table._core.sample_batch(
                n, timeout)
        assert self._fields is not None
        out: dict[str, Any] = dict(zip(self._fields, columns, strict=False))
        if self._layout.nested:
            out = self._layout.unflatten(out)
        out["indexes"] = keys
        out["probabilities"] = probs
        if self._prioritized:
            w = (sizes * probs) ** -beta
            out["weights"] = (w / w.max()).astype(np.float32)
        else:
            out["weights"] = np.ones(len(keys), np.float32)
        return out

    def _can_sample(self, n: int) -> bool:
        ring = self._ring
        if ring is not None:
            return len(ring) >= max(1, int(self._config["min_size"]))
        return bool(self._table._core.can_sample(n))

    def update_priorities(self, indexes: npt.ArrayLike, priorities: npt.ArrayLike
                          ) -> None:
        """Set new priorities; keys of transitions already evicted are ignored."""
        try:
            prios = np.asarray(priorities, dtype=np.float64).reshape(-1)
            ring = self._ring
            if ring is None or not ring.update(key_array("replay_buffer", indexes),
                                               prios):
                if ring is not None:  # moved to the table: update it once filled
                    _rb_ring.wait_for_move(self)
                self._table.update_priorities(indexes, prios)
            if len(prios):
                self._max_priority = max(self._max_priority, float(prios.max()))
        except errors.InvalidPriorityError as exc:
            raise priority_error(exc) from None

    # ----- persistence (fastreplay._rb_persist) -----

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write the whole buffer to the directory ``path``; returns its
        absolute path.  ``ReplayBuffer.load(path)`` gives it back.

        Everything is kept: the constructor arguments (capacity, alpha,
        min_size, compression, next_of, stack_compress, spec), the fields
        and their dtypes and shapes, every stored transition in insertion
        order (so FIFO eviction goes on where it was) with its key
        (``indexes`` sampled before still work in ``update_priorities``),
        priority and sample count, and the largest priority.  Not kept: the
        position of the sampling generator (``load`` seeds a new one).

        The directory is a fastreplay checkpoint (``checkpointers``), written
        under a temporary name, fsynced and renamed into place; an earlier
        save at ``path`` is replaced, anything else there raises
        ``FileExistsError``.  Do not add from other threads while saving.
        """
        return _rb_persist.save(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, seed: int | None = None
             ) -> ReplayBuffer:
        """A new buffer equal to the one ``save`` wrote to ``path``, ready
        to add, sample and update priorities; ``seed`` seeds its sampling
        generator (random when None).

        Everything is verified before anything is built: a truncated,
        corrupted or forged directory raises ``DataLossError``, a path that
        holds a Server checkpoint rather than a buffer ``ValueError``.
        """
        return _rb_persist.load(cls, path, seed)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickling (and ``copy.deepcopy``) carries the files of ``save``:
        the copy is a new, independent buffer with a new sampling seed."""
        return _rb_persist.reduce(self)

    def save_transitions(self, file: str | os.PathLike[str] | IO[bytes], *,
                         safe: bool = True) -> None:
        """cpprb's ``save_transitions``: the stored transitions (oldest
        first, each column as added) and, for a prioritized buffer, their
        priorities, to a ``.npz`` file of plain arrays readable with
        ``np.load`` (no pickle).  ``safe`` is accepted for cpprb's sake;
        the file is always this portable form."""
        _rb_persist.save_transitions(self, file, safe)

    def load_transitions(self, file: str | os.PathLike[str] | IO[bytes], *,
                         allow_pickle: bool = False) -> None:
        """cpprb's ``load_transitions``: append the transitions of a
        ``save_transitions`` file through ``add_batch`` (with their
        priorities when both buffers are prioritized).

        Files written by cpprb's ``save_transitions`` (safe=True, or
        without next_of) load too, but cpprb pickles them: pass
        ``allow_pickle=True`` only for a file you trust.  Their ``(N, 1)``
        scalar columns and float32 defaults are fitted to this buffer's
        fields (declare them with ``spec=`` when the buffer is empty).
        """
        _rb_persist.load_transitions(self, file, allow_pickle)


def _positive(name: str, value: Any, example: str) -> int:
    """``value`` as a positive int, or an error naming ``name``."""
    try:
        number = operator.index(value)
    except TypeError:
        kind = type(value).__name__
        raise TypeError(f"ReplayBuffer {name} must be an int, got {kind} "
                        f"{value!r:.40} (e.g. {example})") from None
    if number < 1:
        raise ValueError(f"ReplayBuffer {name} ({number}) must be a positive integer "
                         f"(e.g. {example})")
    return number
