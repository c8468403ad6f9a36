"""rlightning's message types and default transition functions, for
``fastreplay.integrations.rlightning``.

When the real ``rlightning`` package is importable its own classes and
functions are exported (so users' objects pass ``isinstance`` checks either
way); otherwise these compatible definitions (the underscored ones) stand
in: the same fields, defaults and methods that the buffer path uses,
written for this project.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from types import SimpleNamespace
from typing import Any

import torch

__all__ = ["EnvMeta", "EnvRet", "PolicyResponse", "PROCESSED_ENV_RET_FIELDS",
           "default_env_ret_preprocess_fn", "default_obs_preprocessor",
           "default_policy_resp_preprocess_fn", "default_postprocess_fn",
           "default_preprocess_fn", "default_reward_preprocessor"]

#: Keys a postprocessed episode may hold that come from the env side.
PROCESSED_ENV_RET_FIELDS = ("next_observation", "reward", "terminated", "truncated",
                            "info")


def _latency(message: Any, now_ns: int | None) -> float:
    """Seconds from a message's ``ts_env_sent_ns`` to now (or ``now_ns``);
    0.0 when the timestamp is missing or not a number."""
    try:
        sent = int(message.ts_env_sent_ns)
    except (AttributeError, TypeError, ValueError):
        return 0.0
    now = time.time_ns() if now_ns is None else now_ns
    return max(0.0, (now - sent) / 1e9)


@dataclass
class _EnvRet:
    """What an env actor sends after ``reset``/``step`` for one env id."""

    env_id: str
    observation: Any
    last_reward: Any = 0.0
    last_terminated: Any = False
    last_truncated: Any = False
    info: dict[str, Any] = field(default_factory=dict)
    _extra: dict[str, Any] = field(default_factory=dict)
    ts_env_sent_ns: int = field(default_factory=time.time_ns)

    @classmethod
    def fields(cls) -> tuple[str, ...]:
        """The data fields (not env_id, _extra or the timestamp)."""
        skip = {"env_id", "_extra", "ts_env_sent_ns"}
        return tuple(f.name for f in fields(cls) if f.name not in skip)

    def to_dict(self) -> dict[str, Any]:
        """The data fields and the ``_extra`` ones (KeyError on a clash)."""
        out = {k: getattr(self, k) for k in self.fields()}
        for k, v in self._extra.items():
            if k in out:
                raise KeyError(f"Key {k} in _extra conflicts with existing fields.")
            out[k] = v
        return out

    def mark_env_sent(self) -> _EnvRet:
        self.ts_env_sent_ns = time.time_ns()
        return self

    def compute_sent_latency(self, now_ns: int | None = None) -> float:
        """Seconds since ``ts_env_sent_ns`` (0.0 when it is unusable)."""
        return _latency(self, now_ns)

    def __hash__(self) -> int:
        return hash(self.env_id)


class _PolicyResponse(SimpleNamespace):
    """A policy's answer for one env id: ``PolicyResponse(env_id, action=...)``."""

    def __init__(self, env_id: str, **data: Any) -> None:
        super().__init__(**data)
        self.env_id = env_id

    @property
    def _fields(self) -> set[str]:
        return set(self.__dict__) - {"env_id", "ts_policy_sent_ns"}

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self._fields}

    def mark_policy_sent(self) -> _PolicyResponse:
        self.ts_policy_sent_ns = time.time_ns()
        return self

    def compute_sent_latency(self, now_ns: int | None = None) -> float:
        """Seconds since ``ts_env_sent_ns`` (0.0 when it is unset or unusable)."""
        return _latency(self, now_ns)


@dataclass
class _EnvMeta:
    """An env's metadata; ``num_envs`` > 1 for a vectorised env."""

    env_id: str | None = None
    action_space: Any = None
    observation_space: Any = None
    num_envs: int | None = None


def _default_obs_preprocessor(obs_seq: Any) -> Any:
    """Observations as they are."""
    return obs_seq


def _default_reward_preprocessor(rew_seq: Any) -> Any:
    """Rewards as they are."""
    return rew_seq


def _default_env_ret_preprocess_fn(transition_dict: dict[str, Any], env_ret: Any,
                                  obs_preprocessor: Callable[[Any], Any],
                                  reward_preprocessor: Callable[[Any], Any]
                                  ) -> dict[str, Any]:
    """Put an EnvRet's fields into the transition, observation and reward
    preprocessed."""
    if not isinstance(env_ret, EnvRet):
        raise TypeError(f"env_ret must be an instance of EnvRet, got {type(env_ret)}")
    values = env_ret.to_dict()
    values["observation"] = obs_preprocessor(env_ret.observation)
    values["last_reward"] = reward_preprocessor(env_ret.last_reward)
    transition_dict.update(values)
    return transition_dict


def _default_policy_resp_preprocess_fn(transition_dict: dict[str, Any],
                                      policy_resp: Any) -> dict[str, Any]:
    """Put a PolicyResponse's fields into the transition."""
    if not isinstance(policy_resp, PolicyResponse):
        raise TypeError("policy_resp must be an instance of PolicyResponse, got "
                        f"{type(policy_resp)}")
    transition_dict.update(policy_resp.to_dict())
    return transition_dict


def _default_preprocess_fn(
    transition_dict: dict[str, Any],
    env_ret: Any = None,
    policy_resp: Any = None,
    obs_preprocessor: Callable[[Any], Any] = _default_obs_preprocessor,
    reward_preprocessor: Callable[[Any], Any] = _default_reward_preprocessor,
    env_ret_preprocess_fn: Callable[..., dict[str, Any]] = (
        _default_env_ret_preprocess_fn),
    policy_resp_preprocess_fn: Callable[..., dict[str, Any]] = (
        _default_policy_resp_preprocess_fn),
) -> dict[str, Any]:
    """Fill the transition from an EnvRet, a PolicyResponse or both (the
    synchronous path gives both; the asynchronous one, one at a time)."""
    if env_ret is None and policy_resp is None:
        raise ValueError("At least one of env_ret or policy_resp must be provided.")
    if env_ret is not None and policy_resp is not None \
            and env_ret.env_id != policy_resp.env_id:
        raise ValueError("Mismatched env_id in env_ret and policy_resp, got "
                         f"{env_ret.env_id} and {policy_resp.env_id}")
    if env_ret is not None:
        transition_dict = env_ret_preprocess_fn(transition_dict, env_ret,
                                                obs_preprocessor, reward_preprocessor)
    if policy_resp is not None:
        transition_dict = policy_resp_preprocess_fn(transition_dict, policy_resp)
    return transition_dict


def _default_postprocess_fn(episode_buffer: dict[str, list[Any]]) -> dict[str, Any]:
    """Turn an episode's per-step lists into training tensors of T - 1 steps:
    ``observation``/``next_observation`` from the observations, each
    ``last_x`` shifted to ``x`` (the outcome of step t), policy fields without
    their last step; keys containing "info" are dropped."""
    env_side = set(EnvRet.fields()) | set(PROCESSED_ENV_RET_FIELDS)
    data: dict[str, Any] = {}
    for key, steps in episode_buffer.items():
        if "info" in key:
            continue
        v = (torch.stack(steps, dim=0) if isinstance(steps[0], torch.Tensor)
             else torch.tensor(steps))
        if key.startswith("last_"):
            data[key[5:]] = v[1:]
        if key == "observation":
            data["next_observation"] = v[1:]
            data["observation"] = v[:-1]
        elif key not in env_side:
            data[key] = v[:-1]
    return data


# The real package's types and functions when it is installed, else ours.
try:
    import rlightning.buffer.utils.preprocessors as _up_pre
    import rlightning.buffer.utils.utils as _up_utils
    import rlightning.types as _up_types
except ImportError:
    _up_pre = _up_utils = _up_types = None

_HAVE_UPSTREAM = _up_types is not None
EnvRet: Any = _up_types.EnvRet if _HAVE_UPSTREAM else _EnvRet
PolicyResponse: Any = _up_types.PolicyResponse if _HAVE_UPSTREAM else _PolicyResponse
EnvMeta: Any = _up_types.EnvMeta if _HAVE_UPSTREAM else _EnvMeta
default_obs_preprocessor: Callable[..., Any] = (
    _up_pre.default_obs_preprocessor if _HAVE_UPSTREAM else _default_obs_preprocessor)
default_reward_preprocessor: Callable[..., Any] = (
    _up_pre.default_reward_preprocessor if _HAVE_UPSTREAM
    else _default_reward_preprocessor)
default_env_ret_preprocess_fn: Callable[..., Any] = (
    _up_utils.default_env_ret_preprocess_fn if _HAVE_UPSTREAM
    else _default_env_ret_preprocess_fn)
default_policy_resp_preprocess_fn: Callable[..., Any] = (
    _up_utils.default_policy_resp_preprocess_fn if _HAVE_UPSTREAM
    else _default_policy_resp_preprocess_fn)
default_preprocess_fn: Callable[..., Any] = (
    _up_utils.default_preprocess_fn if _HAVE_UPSTREAM else _default_preprocess_fn)
default_postprocess_fn: Callable[..., Any] = (
    _up_utils.default_postprocess_fn if _HAVE_UPSTREAM else _default_postprocess_fn)
