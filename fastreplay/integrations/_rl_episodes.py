"""Episodes still being collected, per env id, for the rlightning adapter.

An env id names an env of ``env_meta_list``; a vectorised one
(``num_envs`` > 1) sends one transition for all its sub-envs.  With
auto-truncate its transitions are split per sub-env (ids ``"{env_id}/{i}"``)
and each sub-env's episode is complete when its own done flag is seen;
without, the whole env's steps are collected and cut into sub-env episodes
(env-major) when the user truncates it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

__all__ = ["ActiveEpisodes", "SubEpisodes"]


class SubEpisodes:
    """num_envs episodes of one length, env-major: row e * length + t is
    step t of sub-env e (stored and registered as num_envs episodes)."""

    __slots__ = ("data", "num_episodes", "length")

    def __init__(self, data: dict[str, Any], num_episodes: int, length: int) -> None:
        self.data, self.num_episodes, self.length = data, num_episodes, length


def _done(transition: Any) -> bool:
    get = transition.get
    return bool(get("last_terminated", False) or get("last_truncated", False))


def _as_tensors(value: Any) -> Any:
    """numpy leaves as tensors (the postprocess functions stack tensors)."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    if isinstance(value, dict):
        return {k: _as_tensors(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_tensors(v) for v in value]
    return value


class ActiveEpisodes:
    """Per env id, the transitions of the episode being collected."""

    def __init__(self, env_meta_list: list[Any] | None, auto_truncate: bool,
                 postprocess_fn: Callable[[dict[str, list[Any]]], Any],
                 device: torch.device) -> None:
        self._metas = (None if env_meta_list is None
                       else {m.env_id: m for m in env_meta_list})
        self._auto = auto_truncate
        self._postprocess = postprocess_fn
        self._device = device
        self._steps: defaultdict[str, list[Any]] = defaultdict(list)
        self._done: set[str] = set()

    def num_envs(self, env_id: str) -> int:
        """Sub-envs of ``env_id`` (1 for a sub-env id); KeyError for an id
        that ``env_meta_list`` does not know."""
        if self._metas is None:
            return 1
        meta = self._metas.get(env_id)
        if meta is not None:
            return int(meta.num_envs or 1)
        if env_id.rsplit("/", 1)[0] in self._metas and "/" in env_id:
            return 1
        raise KeyError(f"Env ID {env_id} not found in env_meta_list.")

    def add(self, env_id: str, transition: Any) -> None:
        n = self.num_envs(env_id)
        if not self._auto:
            self._steps[env_id].append(transition)
        elif n > 1:
            split = TensorDict(transition, batch_size=[n])
            for i in range(n):
                sub, sub_id = split[i].to_dict(), f"{env_id}/{i}"
                if _done(sub):
                    self._done.add(sub_id)
                self._steps[sub_id].append(sub)
        else:
            if _done(transition):
                self._done.add(env_id)
            self._steps[env_id].append(transition)

    def pending(self) -> list[str]:
        return list(self._steps)

    def pop(self, env_id: str) -> list[Any]:
        """The episodes of ``env_id`` (KeyError when it has no steps
        pending), postprocessed; a vectorised env without auto-truncate
        gives one SubEpisodes of all its sub-envs."""
        n = self.num_envs(env_id)
        ids = [f"{env_id}/{i}" for i in range(n)] if n > 1 and self._auto else [env_id]
        missing = [i for i in ids if i not in self._steps]
        if missing:
            raise KeyError(f"no pending steps for env {missing[0]!r} "
                           f"(pending: {sorted(self._steps)})")
        episodes = []
        for i in ids:
            steps = self._steps.pop(i)
            self._done.discard(i)
            merged = {k: [s[k] for s in steps] for k in steps[0].keys()}
            episodes.append(self._postprocess(_as_tensors(merged)))
        if n > 1 and not self._auto:
            return [self._split(e, n) for e in episodes]
        return episodes

    def _split(self, episode: Any, n: int) -> SubEpisodes:
        """[T, n, ...] steps of a vectorised env as n env-major episodes."""
        length = len(next(iter(episode.values())))
        td = TensorDict(episode, batch_size=[length, n])
        flat = td.permute(1, 0).reshape(n * length).contiguous()
        return SubEpisodes(flat, n, length)

    def pop_done(self, env_id: str) -> list[Any]:
        """The complete episodes of ``env_id`` or of its sub-envs."""
        if env_id in self._done:
            return self.pop(env_id)
        prefix = env_id + "/"
        ids = [i for i in self._steps if i.startswith(prefix) and i in self._done]
        return [e for i in ids for e in self.pop(i)]
