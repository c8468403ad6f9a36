"""ALF's experience replayers over fastreplay's core.

``SyncUniformExperienceReplayer`` keeps one ring of ``max_length`` steps
per environment in a ``SlotStore``: step ``p`` of env ``e`` is slot
``e * max_length + p``, and each leaf of the experience spec is a column
named by its path.  ``replay(S, L)`` computes the ``[S, L]`` slots in numpy
and reads them with one ``SlotStore.read`` (gathered in C); the columns come
back as torch tensors over the gathered numpy arrays (no copy).
``CyclicOneTimeExperienceReplayer`` is the same ring with
``rollout_length + 1`` steps.  ``OnetimeExperienceReplayer`` keeps the
observed steps (each is replayed once, by ``replay_all``).

Not thread-safe, as upstream: one thread calls a replayer at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from fastreplay.integrations._alf_nest import (
    Column,
    builder,
    exp_leaves,
    flatten,
    from_numpy,
    outer_rank,
    pack,
    spec_columns,
    to_numpy,
)
from fastreplay.integrations._alf_rings import EnvRings

__all__ = ["OnetimeExperienceReplayer", "SyncUniformExperienceReplayer",
           "CyclicOneTimeExperienceReplayer"]


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


class OnetimeExperienceReplayer:
    """Keeps every observed step until ``clear``; ``replay_all`` returns
    them batch-major ``[B, T, ...]``.  For algorithms that train on each
    rollout once (PPO, IMPALA).

    Parameters
    ----------
    save_last_exp : bool
        ``clear`` keeps the last observed step, so every replay after the
        first starts with the step the previous one ended with.
    """

    def __init__(self, save_last_exp: bool = False) -> None:
        self._save_last_exp = bool(save_last_exp)
        self._template: Any = None
        self._paths: list[tuple[Any, ...]] = []
        self._steps: list[list[torch.Tensor]] = []
        self._shapes: list[tuple[tuple[int, ...], torch.dtype]] = []
        self._batch_size: int | None = None

    def observe(self, exp: Any) -> None:
        """Append one step ``exp`` (a nest of ``[B, ...]`` tensors).

        Raises
        ------
        AssertionError
            ``exp`` has no tensors, or its structure differs from the first
            observed step's.
        """
        leaves = flatten(exp)
        paths = [p for p, _ in leaves]
        tensors = [t if isinstance(t, torch.Tensor) else torch.as_tensor(t)
                   for _, t in leaves]
        if self._template is None:
            if not tensors or tensors[0].dim() == 0:
                raise AssertionError("OnetimeExperienceReplayer.observe: the "
                                     "experience has no batched tensor")
            self._template, self._paths = exp, paths
            self._steps = [[] for _ in paths]
            self._shapes = [(tuple(t.shape), t.dtype) for t in tensors]
            self._batch_size = int(tensors[0].shape[0])
        elif paths != self._paths:
            raise AssertionError("OnetimeExperienceReplayer.observe: the experience's "
                                 "structure differs from the first one's")
        for steps, t in zip(self._steps, tensors, strict=True):
            steps.append(t.detach())

    def replay(self, sample_batch_size: int, mini_batch_length: int) -> Any:
        """Not supported: this replayer only replays everything.

        Raises
        ------
        NotImplementedError
            Always.
        """
        raise NotImplementedError(
            "OnetimeExperienceReplayer only supports replay_all()")

    def replay_all(self) -> Any:
        """Every step since the last ``clear``, ``[B, T, ...]`` per leaf.

        Raises
        ------
        AssertionError
            Nothing was observed yet.
        """
        if self._template is None:
            raise AssertionError("No experience is observed yet!")
        stacked = {}
        for path, steps, (shape, dtype) in zip(self._paths, self._steps, self._shapes,
                                               strict=True):
            stacked[path] = (torch.stack(steps, dim=1) if steps else
                             torch.empty((shape[0], 0, *shape[1:]), dtype=dtype))
        return pack(self._template, stacked.__getitem__)

    def clear(self) -> None:
        """Forget the steps (all but the last one with ``save_last_exp``)."""
        self._steps = [s[-1:] if self._save_last_exp else [] for s in self._steps]

    @property
    def batch_size(self) -> int:
        """The batch size of the observed steps.

        Raises
        ------
        AssertionError
            Nothing was observed yet.
        """
        if self._batch_size is None:
            raise AssertionError("No experience is observed yet!")
        return self._batch_size

    @property
    def total_size(self) -> int:
        """Steps held times the batch size; 0 before any observe (A1)."""
        if not self._batch_size or not self._steps:
            return 0
        return self._batch_size * len(self._steps[0])


class SyncUniformExperienceReplayer:
    """A ring of ``max_length`` steps per environment, replayed in uniformly
    drawn windows.  For synchronous off-policy training (DDPG, SAC).

    Parameters
    ----------
    experience_spec : nest of TensorSpec
        The structure, shapes and dtypes of one step of one environment.
    batch_size : int
        The number of environments.
    max_length : int
        Steps kept per environment (the oldest are overwritten).
    """

    def __init__(self, experience_spec: Any, batch_size: int, max_length: int) -> None:
        self._experience_spec = experience_spec
        self._columns: list[Column] = spec_columns(experience_spec)
        self._num_envs = _positive(batch_size, "batch_size")
        self._max_length = _positive(max_length, "max_length")
        self._rings = EnvRings([c.name for c in self._columns], self._num_envs,
                               self._max_length)
        env = [i for i, c in enumerate(self._columns) if c.path == ("env_id",)]
        self._env_column = env[0] if env else None
        self._build = builder(experience_spec)
        self._rounds: dict[int, np.ndarray] = {}  # S // B -> envs of those rounds

    def __getstate__(self) -> dict[str, Any]:
        """Pickling keeps the spec and the rings (the store's rows)."""
        state = dict(self.__dict__)
        del state["_build"], state["_rounds"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._build = builder(self._experience_spec)
        self._rounds = {}

    # ------------------------------------------------------------ observe

    def observe(self, exp: Any) -> None:
        """Store ``exp``: one step of a batch of envs (outer rank 1,
        ``[B, ...]``) or ``[Q, T, B, ...]`` steps (outer rank 3, stored
        ``q``-major then ``t``).  Row ``i`` goes to env ``exp.env_id[i]``
        (to env ``i`` when the spec has no ``env_id``).

        Raises
        ------
        AssertionError
            The structure or shapes differ from the spec, the leaves' batch
            dims differ, or a step names an env twice.
        IndexError
            An env id outside ``[0, batch_size)``.
        ValueError
            An outer rank other than 1 or 3.
        """
        self._observe(exp)

    def _observe(self, exp: Any) -> np.ndarray:
        """Store ``exp``; returns its env ids, ``[Q, T, B]``."""
        what = f"{type(self).__name__}.observe"
        tensors = exp_leaves(exp, self._columns, what)
        rank = outer_rank(tensors, self._columns, what)
        if rank not in (1, 3):
            raise ValueError(f"Unsupported outer rank {rank} of `exp`")
        outer = tuple(tensors[0].shape[:rank])
        for t, c in zip(tensors, self._columns, strict=True):
            if tuple(t.shape[:rank]) != outer:
                raise AssertionError(f"{what}: {c.name!r} has outer dims "
                                     f"{tuple(t.shape[:rank])}, the first leaf {outer}")
        if rank == 1:
            outer = (1, 1, outer[0])
        if self._env_column is not None:
            env = to_numpy(tensors[self._env_column], self._columns[self._env_column])
            env = env.astype(np.int64).reshape(outer)
        elif outer[2] == self._num_envs:
            env = np.broadcast_to(np.arange(self._num_envs), outer)
        else:
            raise AssertionError(f"{what}: {outer[2]} rows without env_id, the "
                                 f"replayer has {self._num_envs} envs")
        rows = [to_numpy(t, c).reshape(-1, *c.shape)
                for t, c in zip(tensors, self._columns, strict=True)]
        self._append(env.reshape(-1, outer[2]), rows, what)
        return env

    def _append(self, env: np.ndarray, rows: Sequence[np.ndarray], what: str) -> None:
        """Row ``j`` of ``rows`` is the next step of env ``env.flat[j]``;
        ``env`` is ``[steps, B]``, distinct ids in each step (checked before
        anything is stored)."""
        if env.size == 0:
            return
        if env.min() < 0 or env.max() >= self._num_envs:
            raise IndexError(f"{what}: env ids must be in [0, {self._num_envs}), "
                             f"got {env.min()}..{env.max()}")
        ordered = np.sort(env, axis=1)
        if (ordered[:, 1:] == ordered[:, :-1]).any():
            raise AssertionError(f"There are duplicated ids in env_ids {env.tolist()}")
        self._rings.append(env, rows)

    @property
    def _size(self) -> np.ndarray:
        return self._rings.size

    @property
    def _pos(self) -> np.ndarray:
        return self._rings.pos

    # ------------------------------------------------------------ replay

    def _read(self, env: np.ndarray, pos: np.ndarray) -> Any:
        """The spec's nest of ``[N, T, ...]`` tensors of envs ``env`` [N] at
        ring positions ``pos`` [N, T]."""
        return self._read_slots((env * self._max_length)[:, None] + pos)

    def _read_slots(self, slots: np.ndarray) -> Any:
        """The spec's nest of ``[N, T, ...]`` tensors of ``slots`` [N, T]."""
        n, length = slots.shape
        if slots.size == 0:
            return self._build([torch.empty((n, length, *c.shape), dtype=c.dtype)
                                for c in self._columns])
        return self._tensors(self._rings.read(slots.reshape(-1)), n, length)

    def _tensors(self, columns: Sequence[np.ndarray], n: int, length: int) -> Any:
        """The spec's nest of ``[n, length, ...]`` tensors of the columns'
        rows (views, no copy)."""
        return self._build([from_numpy(a.reshape(n, length, *c.shape), c)
                            for c, a in zip(self._columns, columns, strict=True)])

    def replay(self, sample_batch_size: int, mini_batch_length: int) -> Any:
        """``sample_batch_size`` windows of ``mini_batch_length`` consecutive
        steps, ``[S, L, ...]`` per leaf.  Rows are ``S // B`` rounds of envs
        ``0..B-1`` then ``S % B`` distinct random envs; each window starts
        uniformly among the env's valid starts.  Draws from torch's global
        generator, so ``torch.manual_seed`` makes it reproducible.

        Raises
        ------
        AssertionError
            An env holds fewer than ``mini_batch_length`` steps.
        """
        batch = int(sample_batch_size)
        length = int(mini_batch_length)
        if batch < 0 or length < 0:
            raise ValueError(f"replay({sample_batch_size}, {mini_batch_length}): "
                             f"sizes must be >= 0")
        rings, ml = self._rings, self._max_length
        min_size = int(rings.size.min())
        if min_size < length:
            raise AssertionError(
                f"Not all environments have enough data. The smallest data size is: "
                f"{min_size} Try storing more data before calling replay")
        rounds, rest = divmod(batch, self._num_envs)
        env = self._rounds.get(rounds)
        if env is None:
            env = np.arange(rounds * self._num_envs, dtype=np.int64) % self._num_envs
            self._rounds = {rounds: env}
        if rest:
            env = np.concatenate([env, torch.randperm(self._num_envs)[:rest].numpy()])
        r = torch.rand(batch, dtype=torch.float64).numpy()
        size = rings.size[env]
        start = (r * (size - length + 1)).astype(np.int64)  # among the valid starts
        start += rings.pos[env] - size  # ring position (mod ml) of the oldest + start
        if batch == 0 or length == 0:
            return self._read_slots(np.empty((batch, length), np.int64))
        # windows that run past the ring's end continue at 0: the table
        # computes the slots (env * ml + (start + j) % ml)
        columns = rings.read_windows(env * ml, start, length)
        return self._tensors(columns, batch, length)

    def _all(self, env: np.ndarray) -> Any:
        """Every step of envs ``env``, oldest first (A2); their sizes must agree."""
        sizes = self._size[env]
        if len(sizes) and sizes.min() != sizes.max():
            raise AssertionError(f"Not all environments have the same size. min_size: "
                                 f"{sizes.min()} max_size: {sizes.max()}")
        size = int(sizes[0]) if len(sizes) else 0
        return self._read(env, (self._pos[env][:, None] - size + np.arange(size))
                          % self._max_length)

    def replay_all(self) -> Any:
        """Every env's steps, oldest first, ``[B, size, ...]`` per leaf.

        Raises
        ------
        AssertionError
            The envs hold different numbers of steps.
        """
        return self._all(np.arange(self._num_envs, dtype=np.int64))

    def clear(self) -> None:
        """Empty every env's ring."""
        self._rings.clear()

    @property
    def batch_size(self) -> int:
        """The number of environments."""
        return self._num_envs

    @property
    def total_size(self) -> int:
        """Steps held, summed over the envs."""
        return int(self._size.sum())


class CyclicOneTimeExperienceReplayer(SyncUniformExperienceReplayer):
    """A ring of ``rollout_length + 1`` steps per env whose ``replay_all``
    returns the envs of the last ``observe``: each rollout of T steps comes
    back with the last step of the previous one (for IMPALA's V-trace).
    ``observe`` and ``replay_all`` must alternate.

    Parameters
    ----------
    experience_spec : nest of TensorSpec
        One step of one environment.
    batch_size : int
        The number of environments over all actors.
    num_actors : int
        Actors sharing the envs; ``batch_size % num_actors == 0``.
    rollout_length : int
        Steps per observed rollout.
    learn_queue_cap : int
        Actors' rollouts per observe; ``num_actors % learn_queue_cap == 0``.
    """

    def __init__(self, experience_spec: Any, batch_size: int, num_actors: int,
                 rollout_length: int, learn_queue_cap: int) -> None:
        if not num_actors > 0:
            raise AssertionError(f"num_actors ({num_actors}) must be > 0")
        if batch_size % num_actors != 0:
            raise AssertionError(f"batch_size ({batch_size}) must be a multiple of "
                                 f"num_actors ({num_actors})")
        if not learn_queue_cap > 0:
            raise AssertionError(f"learn_queue_cap ({learn_queue_cap}) must be > 0")
        if num_actors % learn_queue_cap != 0:
            raise AssertionError(f"num_actors ({num_actors}) must be a multiple of "
                                 f"learn_queue_cap ({learn_queue_cap})")
        super().__init__(experience_spec, batch_size, int(rollout_length) + 1)
        self._last_env: np.ndarray | None = None
        self._buffered = 0

    def observe(self, exp: Any) -> None:
        """Store a rollout ``[Q, T, B, ...]`` (or one step ``[B, ...]``) and
        remember its envs (of its first step) for ``replay_all``.

        Raises
        ------
        AssertionError
            The previous observe was not replayed yet, or as
            ``SyncUniformExperienceReplayer.observe``.
        """
        if self._buffered:
            raise AssertionError("CyclicOneTimeExperienceReplayer: observe() called "
                                 "twice without replay_all() between")
        env = self._observe(exp)
        self._last_env = np.ascontiguousarray(env[:, 0, :].reshape(-1))
        self._buffered = 1

    def replay_all(self) -> Any:
        """The envs of the last observe, each with its last
        ``rollout_length + 1`` steps at most, oldest first (A3).

        Raises
        ------
        AssertionError
            No observe since the last replay_all, or those envs hold
            different numbers of steps.
        """
        if not self._buffered or self._last_env is None:
            raise AssertionError("CyclicOneTimeExperienceReplayer: replay_all() must "
                                 "follow an observe()")
        out = self._all(self._last_env)
        self._buffered = 0
        return out

    def clear(self) -> None:
        """Nothing to do: new rollouts overwrite the oldest steps."""

    def replay(self, sample_batch_size: int, mini_batch_length: int) -> Any:
        """Not supported: use ``replay_all``.

        Raises
        ------
        NotImplementedError
            Always.
        """
        raise NotImplementedError("Should not be called, use replay_all instead.")
