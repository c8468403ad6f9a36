"""The two implementations of rlightning's ``Storage`` the integration tests
run against, and small helpers shared by ``test_integration_rlightning_*.py``.

``fastreplay`` is always available.  ``upstream`` is rlightning's own
``Storage`` and is used only when ``FR_RLIGHTNING_UPSTREAM=1`` is set and
``rlightning.buffer.utils.storage`` imports (a test-only install from its
source; CI has none), so every shared test doubles as a differential check
of its expectations against the original.

Import this module only after ``pytest.importorskip("torch")`` and
``pytest.importorskip("tensordict")``.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
from tensordict import TensorDict

#: Storage's constructor keywords, in upstream's order.
KEYWORDS = [
    "capacity", "mode", "unit", "env_meta_list", "device", "obs_preprocessor",
    "reward_preprocessor", "env_ret_preprocess_fn", "policy_resp_preprocess_fn",
    "preprocess_fn", "postprocess_fn", "auto_truncate_episode",
]


@dataclass
class Impl:
    """One implementation: its Storage class, types and default functions."""

    name: str
    Storage: Any
    BufferView: Any
    EnvRet: Any
    PolicyResponse: Any
    EnvMeta: Any
    default_obs_preprocessor: Any
    default_reward_preprocessor: Any
    default_env_ret_preprocess_fn: Any
    default_policy_resp_preprocess_fn: Any
    default_preprocess_fn: Any
    default_postprocess_fn: Any

    @property
    def upstream(self) -> bool:
        return self.name == "upstream"

    def counter(self, storage: Any) -> np.ndarray:
        """The storage's per-slot use counter (upstream keeps it inside)."""
        if self.upstream:
            return np.asarray(storage._data.data_use_counter)
        return np.asarray(storage.data_use_counter)

    def make(self, capacity: int, mode: str = "circular", unit: str = "transition",
             env_meta_list: Any = None, auto_truncate_episode: bool = True,
             device: Any = "cpu", **overrides: Any) -> Any:
        """A Storage with the default pre/post-processing functions, every
        keyword given by name."""
        kwargs: dict[str, Any] = dict(
            capacity=capacity, mode=mode, unit=unit, env_meta_list=env_meta_list,
            device=device,
            obs_preprocessor=self.default_obs_preprocessor,
            reward_preprocessor=self.default_reward_preprocessor,
            env_ret_preprocess_fn=self.default_env_ret_preprocess_fn,
            policy_resp_preprocess_fn=self.default_policy_resp_preprocess_fn,
            preprocess_fn=self.default_preprocess_fn,
            postprocess_fn=self.default_postprocess_fn,
            auto_truncate_episode=auto_truncate_episode,
        )
        kwargs.update(overrides)
        return self.Storage(**kwargs)


def _from_modules(name: str, storage: ModuleType, types: ModuleType,
                  utils: ModuleType, prep: ModuleType) -> Impl:
    return Impl(
        name=name, Storage=storage.Storage, BufferView=storage.BufferView,
        EnvRet=types.EnvRet, PolicyResponse=types.PolicyResponse, EnvMeta=types.EnvMeta,
        default_obs_preprocessor=prep.default_obs_preprocessor,
        default_reward_preprocessor=prep.default_reward_preprocessor,
        default_env_ret_preprocess_fn=utils.default_env_ret_preprocess_fn,
        default_policy_resp_preprocess_fn=utils.default_policy_resp_preprocess_fn,
        default_preprocess_fn=utils.default_preprocess_fn,
        default_postprocess_fn=utils.default_postprocess_fn,
    )


def load_impl(name: str) -> Impl:
    """The implementation ``name``, or ``pytest.skip`` when unavailable."""
    if name == "fastreplay":
        mod = importlib.import_module("fastreplay.integrations.rlightning")
        return _from_modules(name, mod, mod, mod, mod)
    if os.environ.get("FR_RLIGHTNING_UPSTREAM") != "1":
        pytest.skip("upstream rlightning: set FR_RLIGHTNING_UPSTREAM=1 to compare")
    try:
        return _from_modules(
            name,
            importlib.import_module("rlightning.buffer.utils.storage"),
            importlib.import_module("rlightning.types"),
            importlib.import_module("rlightning.buffer.utils.utils"),
            importlib.import_module("rlightning.buffer.utils.preprocessors"),
        )
    except ImportError as e:  # pragma: no cover - depends on the machine
        pytest.skip(f"upstream rlightning is not importable: {e}")


def fastreplay_impl() -> Impl:
    return load_impl("fastreplay")


def upstream_or_none() -> Impl | None:
    """Upstream when requested and importable (for "upstream shows the bug"
    checks inside fastreplay-only regression tests), else None."""
    if os.environ.get("FR_RLIGHTNING_UPSTREAM") != "1":
        return None
    try:
        return load_impl("upstream")
    except pytest.skip.Exception:
        return None


# ----- data -----

def columns(start: int, n: int) -> dict[str, torch.Tensor]:
    """``n`` transitions numbered ``start..start+n-1``: float32[8]
    observation and next_observation, int64 action, float32 reward, bool
    done; every column encodes the number, so rows are recognisable."""
    v = torch.arange(start, start + n, dtype=torch.int64)
    obs = v.to(torch.float32)[:, None] + torch.arange(8, dtype=torch.float32) / 10
    return {
        "observation": obs,
        "next_observation": obs + 0.5,
        "action": v.clone(),
        "reward": v.to(torch.float32) * 2,
        "done": (v % 3) == 0,
    }


def ids(rows: Any) -> list[int]:
    """The numbers of the transitions in a read result (a dict or
    TensorDict of [n, ...] or [n, L, ...] columns, or a single row)."""
    a = rows["action"]
    return [int(x) for x in torch.as_tensor(a).reshape(-1)]


def check_rows(rows: Any, expected: list[int]) -> None:
    """``rows`` (flattened over leading dims) are transitions ``expected``
    with every column intact."""
    exp = columns(0, max(expected) + 1) if expected else columns(0, 0)
    idx = torch.tensor(expected, dtype=torch.int64)
    for k, col in exp.items():
        got = torch.as_tensor(rows[k])
        want = col[idx]
        assert got.dtype == want.dtype, (k, got.dtype, want.dtype)
        assert torch.equal(got.reshape(want.shape), want), (k, got, want)


def to_plain(x: Any) -> Any:
    """TensorDict -> nested dict; dicts and lists recursively."""
    if isinstance(x, TensorDict):
        return x.to_dict()
    if isinstance(x, dict):
        return {k: to_plain(v) for k, v in x.items()}
    if isinstance(x, list):
        return [to_plain(v) for v in x]
    return x
