"""rlightning's buffer ``Storage`` over fastreplay's core.

A drop-in for ``rlightning.buffer.utils.storage``: the same constructor,
methods, types in and out, and behaviour, with upstream's bugs R1-R7 fixed
(README, "Differences from rlightning / ALF").  Transitions live in
fastreplay chunks and a compiled table addressed by ring slot
(``_rl_ring.SlotRing``); reads gather in C and come back as torch tensors
sharing the gathered arrays' memory::

    from fastreplay.integrations.rlightning import Storage
    s = Storage(200_000, "circular", "transition", None, "cpu", ...)
    s.add_episode({"obs": obs, "action": act})          # [T, ...] tensors
    batch = s[np.random.choice(len(s), 256)]              # dict of [256, ...]

When the ``rlightning`` package is importable its ``EnvRet``,
``PolicyResponse``, ``EnvMeta`` and ``default_*`` functions are re-exported;
otherwise compatible ones (``_rl_types``).  Needs torch and tensordict
(``pip install fastreplay[rlightning]``).
"""

from __future__ import annotations

import logging
import numbers
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import torch
from tensordict import TensorDict

from fastreplay.integrations._rl_episodes import ActiveEpisodes, SubEpisodes
from fastreplay.integrations._rl_ring import SlotRing
from fastreplay.integrations._rl_types import (
    EnvMeta,
    EnvRet,
    PolicyResponse,
    default_env_ret_preprocess_fn,
    default_obs_preprocessor,
    default_policy_resp_preprocess_fn,
    default_postprocess_fn,
    default_preprocess_fn,
    default_reward_preprocessor,
)

__all__ = ["BufferView", "EnvMeta", "EnvRet", "PolicyResponse", "Storage",
           "default_env_ret_preprocess_fn", "default_obs_preprocessor",
           "default_policy_resp_preprocess_fn", "default_postprocess_fn",
           "default_preprocess_fn", "default_reward_preprocessor"]

logger = logging.getLogger(__name__)

_MODES = {"circular": True, "fixed": False, "standard": False}
_UNITS = ("transition", "episode")


class BufferView:
    """A read-only, buffer-like view of a TensorDict (datasets)."""

    def __init__(self, data: Any) -> None:
        self._data = data
        self.capacity = len(data)

    def __len__(self) -> int:
        return self.capacity

    def __getitem__(self, idx: Any) -> Any:
        return self._data[idx]


def _resolve(idx: Any, n: int, what: str) -> tuple[np.ndarray, bool]:
    """Positions in [0, n) that ``idx`` selects (negative ones count from
    ``n``; slices clamp like Python's), and whether it was a scalar."""
    if isinstance(idx, torch.Tensor):
        idx = idx.detach().cpu().numpy()
    if isinstance(idx, numbers.Integral) or (
            isinstance(idx, np.ndarray) and idx.ndim == 0 and idx.dtype.kind in "iu"):
        i = int(idx)
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError(f"{what} index {i} out of range for {n}")
        return np.array([j], dtype=np.int64), True
    if isinstance(idx, slice):
        return np.arange(*idx.indices(n), dtype=np.int64), False
    if isinstance(idx, (list, tuple)):
        idx = np.asarray(idx)
    if isinstance(idx, np.ndarray):
        if idx.dtype == np.bool_:
            if idx.shape != (n,):
                raise IndexError(f"boolean index of shape {idx.shape} for {n} {what}s")
            return np.flatnonzero(idx), False
        if idx.dtype.kind not in "iu":
            raise IndexError(f"{what} indexes must be integers, got {idx.dtype}")
        pos = idx.astype(np.int64).reshape(-1)
        pos = np.where(pos < 0, pos + n, pos)
        if len(pos) and (pos.min() < 0 or pos.max() >= n):
            raise IndexError(f"{what} index array contains out of range indices "
                             f"for {n}")
        return pos, False
    raise TypeError(f"unsupported index type {type(idx).__name__} for a Storage")


class Storage:
    """rlightning's buffer storage: ``capacity`` transitions in a ring
    (``mode="circular"``) or filled once (``"fixed"``, alias
    ``"standard"``), addressed per transition or per episode (``unit``)."""

    def __init__(
        self,
        capacity: int,
        mode: Literal["circular", "fixed", "standard"],
        unit: Literal["transition", "episode"],
        env_meta_list: list[Any] | None,
        device: str | torch.device,
        obs_preprocessor: Callable[..., Any] = default_obs_preprocessor,
        reward_preprocessor: Callable[..., Any] = default_reward_preprocessor,
        env_ret_preprocess_fn: Callable[..., Any] = default_env_ret_preprocess_fn,
        policy_resp_preprocess_fn: Callable[..., Any] = (
            default_policy_resp_preprocess_fn),
        preprocess_fn: Callable[..., Any] = default_preprocess_fn,
        postprocess_fn: Callable[..., Any] = default_postprocess_fn,
        auto_truncate_episode: bool = True,
    ) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, numbers.Integral) \
                or capacity < 1:
            raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
        if mode not in _MODES:
            raise ValueError(f"mode must be 'circular' or 'fixed' ('standard'), "
                             f"got {mode!r}")
        if unit not in _UNITS:
            raise ValueError(f"unit must be 'transition' or 'episode', got {unit!r}")
        self.capacity: int = int(capacity)
        self.mode: str = mode
        self.unit: str = unit
        self.device: torch.device = (torch.device(device) if isinstance(device, str)
                                     else device)
        self.auto_truncate_episode: bool = auto_truncate_episode
        self.transitions_buffer: defaultdict[str, Any] = defaultdict(dict)
        self.episodes_buffer: ActiveEpisodes = ActiveEpisodes(
            env_meta_list, auto_truncate_episode, postprocess_fn, self.device)
        self._ring: SlotRing = SlotRing(self.capacity, _MODES[mode],
                                        unit == "episode", self.device)
        self._obs_preprocessor: Callable[..., Any] = obs_preprocessor
        self._reward_preprocessor: Callable[..., Any] = reward_preprocessor
        self._env_ret_preprocess_fn: Callable[..., Any] = env_ret_preprocess_fn
        self._policy_resp_preprocess_fn: Callable[..., Any] = policy_resp_preprocess_fn
        self._preprocess_fn: Callable[..., Any] = preprocess_fn
        self.timing_raw: dict[str, dict[str, float]] = {}

    # -- size -----------------------------------------------------------------
    def __len__(self) -> int:
        """Transitions (transition unit) or episodes (episode unit)."""
        ring = self._ring
        return len(ring.begins) if ring.episodic else ring.size

    @property
    def size(self) -> int:
        return len(self)

    def get_size(self) -> int:
        return len(self)

    @property
    def data_use_counter(self) -> np.ndarray:
        """Per slot: -1 unused, 0 written, +1 per read (int32, ``capacity``)."""
        return self._ring.counter

    # -- reads ----------------------------------------------------------------
    def __getitem__(self, idx: Any) -> Any:
        """Transitions: a dict of tensors (nested keys: nested dicts), one
        row for an int, ``[n, ...]`` otherwise.  Episodes: an int gives the
        episode's ``[L, ...]`` dict; several give a dict of ``[n, L, ...]``
        when their lengths agree, else a list of TensorDicts."""
        out = self._read(idx)
        return out.to_dict() if isinstance(out, TensorDict) else out

    def _read(self, idx: Any) -> Any:
        ring = self._ring
        if isinstance(idx, torch.Tensor):  # torch.randint indexes: as numpy's
            idx = idx.detach().cpu().numpy()
        if not ring.episodic:
            if type(idx) is np.ndarray and idx.ndim and idx.dtype.kind in "iu":
                return self._read_slots(idx)  # the learner's path
            pos, scalar = _resolve(idx, ring.size, "Transition")
            if scalar:
                return ring.rows(pos, ())
            if not len(pos):
                return ring.empty_rows((0,)) if ring.paths else {}
            return ring.rows(pos, (len(pos),))
        pos, scalar = _resolve(idx, len(ring.begins), "Episode")
        begins, ends = ring.begins[pos], ring.ends[pos]
        lengths = ends - begins
        if scalar:
            slots = np.arange(begins[0], ends[0])
            return ring.rows(slots, (len(slots),))
        if not len(pos):
            return []
        slots = np.concatenate([np.arange(b, e) for b, e in zip(begins, ends,
                                                                strict=True)])
        if (lengths == lengths[0]).all():
            return ring.rows(slots, (len(pos), int(lengths[0])))
        rows = ring.rows(slots, (len(slots),))
        cuts = np.cumsum(lengths)[:-1]
        parts: list[dict[str, Any]] = [{} for _ in lengths]
        for path in ring.paths:
            d = rows
            for k in path[:-1]:
                d = d[k]
            pieces = torch.tensor_split(d[path[-1]], cuts.tolist())
            for part, piece in zip(parts, pieces, strict=True):
                p = part
                for k in path[:-1]:
                    p = p.setdefault(k, {})
                p[path[-1]] = piece
        return [TensorDict(p, batch_size=[int(n)], device=self.device)
                for p, n in zip(parts, lengths, strict=True)]

    def _read_slots(self, idx: np.ndarray) -> Any:
        """Transitions at an integer array of positions (shape kept)."""
        ring = self._ring
        pos = idx if idx.dtype == np.int64 else idx.astype(np.int64)
        if pos.size and pos.min() < 0:
            pos = np.where(pos < 0, pos + ring.size, pos)
        if not pos.size:
            return ring.empty_rows(idx.shape) if ring.paths else {}
        try:  # slots at or past size are empty: the table refuses them
            return ring.rows(pos.reshape(-1), idx.shape)
        except (KeyError, IndexError):
            raise IndexError("Transition index array contains out of range indices "
                             f"for storage of size {ring.size}") from None

    def get_data(self) -> Any:
        """Everything stored: a TensorDict of the transitions in slot order,
        or the episodes as a multi-episode read gives them (empty when
        nothing is stored)."""
        ring = self._ring
        if not ring.episodic:
            if ring.size == 0:
                return TensorDict({}, batch_size=[0], device=self.device)
            rows = self._read(slice(0, ring.size))
            return TensorDict(rows, batch_size=[ring.size], device=self.device)
        out = self._read(slice(0, len(self)))
        if isinstance(out, dict):
            n, length = len(ring.begins), int(ring.ends[0] - ring.begins[0])
            return TensorDict(out, batch_size=[n, length], device=self.device)
        return out

    def clear(self) -> None:
        """Drop the stored data, counters and key set (episodes still being
        collected stay)."""
        self._ring.clear()

    # -- writes ---------------------------------------------------------------
    def _push(self, items: Any) -> None:
        if isinstance(items, list):
            for item in items:
                self._push(item)
        elif isinstance(items, SubEpisodes):
            self._ring.push(items.data, items.num_episodes, items.length)
        elif isinstance(items, (dict, TensorDict)):
            self._ring.push(items)
        else:
            raise TypeError(f"Unsupported episode type: {type(items)}")

    def add_transition(self, env_ret: Any, policy_resp: Any) -> None:
        """Add the transition of an EnvRet and its PolicyResponse; with
        auto-truncate, store the episodes it completes."""
        if env_ret.env_id != policy_resp.env_id:
            raise ValueError(f"Mismatched env IDs: {env_ret.env_id}, "
                             f"{policy_resp.env_id}")
        env_id = env_ret.env_id
        self.transitions_buffer[env_id] = self._preprocess_fn(
            defaultdict(), env_ret, policy_resp, self._obs_preprocessor,
            self._reward_preprocessor, self._env_ret_preprocess_fn,
            self._policy_resp_preprocess_fn)
        self._collect(env_id)
        env_ret.ts_env_sent_ns = time.time_ns()

    def add_data_async(self, item: Any) -> None:
        """Asynchronous rollouts: an EnvRet starts a transition, the
        PolicyResponse for the same env completes and appends it."""
        if not isinstance(item, (EnvRet, PolicyResponse)):
            raise TypeError(f"Expected EnvRet or PolicyResponse, got {type(item)}")
        env_id = item.env_id
        if isinstance(item, EnvRet):
            self.transitions_buffer[env_id] = self._preprocess_fn(
                defaultdict(), item, None, self._obs_preprocessor,
                self._reward_preprocessor, self._env_ret_preprocess_fn,
                self._policy_resp_preprocess_fn)
            return
        self.transitions_buffer[env_id] = self._preprocess_fn(
            self.transitions_buffer[env_id], None, item, self._obs_preprocessor,
            self._reward_preprocessor, self._env_ret_preprocess_fn,
            self._policy_resp_preprocess_fn)
        self._collect(env_id)

    def _collect(self, env_id: str) -> None:
        self.episodes_buffer.add(env_id, self.transitions_buffer[env_id])
        if self.auto_truncate_episode:
            done = self.episodes_buffer.pop_done(env_id)
            if done:
                self._push(done)

    def add_episode(self, episode: Any, num_envs: int = 1) -> None:
        """Store a complete episode: a dict of ``[T, ...]`` tensors, a
        TensorDict or a list of those; with ``num_envs`` > 1 the values are
        ``[T, num_envs, ...]`` and each sub-env's episode is stored."""
        if num_envs > 1:
            length = len(next(iter(episode.values())))
            td = TensorDict(episode, batch_size=[length, num_envs])
            episode = list(td.unbind(1))
        self._push(episode)

    def truncate_episodes(self, env_ids: list[str]) -> None:
        """End the episodes being collected for ``env_ids`` and store them."""
        for env_id in env_ids:
            self.truncate_one_episode(env_id)

    def truncate_one_episode(self, item: Any) -> None:
        """End the episode of an env id (or of an object with ``env_id``)."""
        start = time.perf_counter()
        if isinstance(item, str):
            env_id = item
        elif hasattr(item, "env_id"):
            env_id = item.env_id
        else:
            raise TypeError("Expected env_id str or object with env_id attribute, "
                            f"got {type(item)}")
        self._push(self.episodes_buffer.pop(env_id))
        self._record("truncate_one_episode", time.perf_counter() - start)

    def _record(self, name: str, seconds: float) -> None:
        stats = self.timing_raw.setdefault(name, {"count": 0, "total": 0.0, "avg": 0.0})
        stats["count"] += 1
        stats["total"] += seconds
        stats["avg"] = stats["total"] / stats["count"]

    def print_timing_summary(self, reset: bool = False) -> None:
        """Log the recorded timings (debug level); ``reset`` clears them."""
        logger.debug("Buffer storage timing:")
        for name, s in dict(self.timing_raw).items():
            logger.debug(f"{name:28} count={s['count']:<3} total={s['total']:.6f}s "
                         f"avg={s['avg']:.6f}s")
        if reset:
            self.timing_raw.clear()
