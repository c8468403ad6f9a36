"""Peer replay-buffer workloads for benchmarking (no fastreplay import: the
peers are driven through their own public APIs only).

Each factory returns None when its peer is missing or broken (the reason goes
to ``UNAVAILABLE[name]``), else a workload already filled to ``capacity`` by
the peer's batched path in ``_CHUNK``-row chunks (wall time: ``fill_seconds``).

Prioritized workloads, filled with uniform(1e-3, 1) priorities, offer
``.sample(batch_size, beta) -> (batch, indexes)``, ``.update(indexes,
priorities)`` and ``.sample_update(batch_size, beta)`` (sample, then fresh
random priorities at the sampled indexes):

* ``cpprb_prioritized``: ``cpprb.PrioritizedReplayBuffer`` with one float32
  field ``obs`` of shape 1; filled by ``add(obs=..., priorities=...)``.  The
  sample returns ``obs``, ``weights`` and ``indexes``; ``weights`` is a view
  of a cpprb-owned array that the next ``sample`` overwrites or frees (copy it
  to keep it).  cpprb's C++ sampler cannot be seeded.
* ``torchrl_prioritized``: ``torchrl.data.PrioritizedReplayBuffer`` (a
  ``PrioritizedSampler`` over ``LazyTensorStorage``) holding a float32 (N, 1)
  tensor; filled by ``extend`` + ``update_priority``.  It needs torchrl's C++
  segment trees (``torchrl._torchrl``), which torchrl wheels ship built for one
  torch release only; on a mismatch (torchrl 0.14.1 vs torch 2.13: "undefined
  symbol") the factory returns None with that ImportError in UNAVAILABLE.
* ``tianshou_prioritized``: ``tianshou.data.PrioritizedReplayBuffer``.  Its
  ``add`` takes one transition per call, so it is filled the way tianshou's own
  ``ReplayBuffer.from_data`` does it: ``set_batch`` with full-size arrays, then
  ``_size`` set, then ``update_weight`` on all indexes.  tianshou requires the
  keys obs, act, rew, terminated, truncated, done (all gathered on sample,
  obs float32 of shape 1, the rest scalars); it samples with the global NumPy
  RNG, which the factory seeds.  Its ``SegmentTree`` is numba-compiled on the
  first construction in a process (~4 s here); the factory does that on a
  16-slot buffer first and reports it as ``setup_seconds``, not in the fill.

Uniform workloads (``.sample(batch_size)``) hold small transitions: obs and
next_obs float32[4], act float32[1], rew float32, done float32:

* ``cpprb_uniform``: ``cpprb.ReplayBuffer`` filled by batched ``add``
  (samples with the global NumPy RNG, seeded by the factory).
* ``torchrl_uniform``: ``torchrl.data.ReplayBuffer`` + ``LazyTensorStorage``
  (default ``RandomSampler``) filled by ``extend`` with a ``TensorDict``;
  sampling returns a ``TensorDict``; seeded through ``generator=``.
* ``sb3_uniform``: ``stable_baselines3.common.buffers.ReplayBuffer`` on CPU
  (n_envs=1).  Its ``add`` takes one step per call, so its public NumPy arrays
  are written directly and ``full`` is set.  ``sample`` returns torch tensors
  and uses the global NumPy RNG, seeded by the factory.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

UNAVAILABLE: dict[str, str] = {}
"""Peer name -> why its factory returned None ("ExceptionType: message")."""

_CHUNK = 100_000
_OBS_DIM = 4
_W = TypeVar("_W")


@dataclass
class PrioritizedWorkload:
    """A filled prioritized peer buffer; see the module docstring."""

    name: str
    capacity: int
    fill_seconds: float
    #: (batch_size, beta) -> (batch, indexes)
    sample: Callable[[int, float], tuple[Any, Any]]
    update: Callable[[Any, np.ndarray], None]  # (indexes, priorities) -> None
    rng: np.random.Generator = field(repr=False)
    setup_seconds: float = 0.0  # one-off per-process cost kept out of fill_seconds

    def sample_update(self, batch_size: int = 256, beta: float = 0.4) -> None:
        """Sample a batch, then give its indexes fresh uniform(1e-3, 1) priorities."""
        _, indexes = self.sample(batch_size, beta)
        self.update(indexes, self.rng.uniform(1e-3, 1.0, batch_size))


@dataclass
class UniformWorkload:
    """A filled uniform peer buffer; see the module docstring."""

    name: str
    capacity: int
    fill_seconds: float
    sample: Callable[[int], Any]  # batch_size -> batch


def guard(name: str, build: Callable[[], _W]) -> _W | None:
    """Run ``build``; on any failure record the reason and return None."""
    try:
        result = build()
    except Exception as exc:  # noqa: BLE001 - any failure means "peer unavailable"
        UNAVAILABLE[name] = f"{type(exc).__name__}: {exc}"
        return None
    UNAVAILABLE.pop(name, None)
    return result


def _chunks(capacity: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + _CHUNK, capacity)) for lo in range(0, capacity, _CHUNK)]


def transitions(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """n small uniform-workload transitions, all float32."""
    f32 = np.float32
    return {
        "obs": rng.standard_normal((n, _OBS_DIM), f32),
        "act": rng.standard_normal((n, 1), f32),
        "rew": rng.standard_normal((n, 1), f32),
        "next_obs": rng.standard_normal((n, _OBS_DIM), f32),
        "done": (rng.random((n, 1)) < 0.01).astype(f32),
    }


def cpprb_prioritized(
    capacity: int = 1_000_000, alpha: float = 0.6, seed: int = 0
) -> PrioritizedWorkload | None:
    def build() -> PrioritizedWorkload:
        import cpprb

        rng = np.random.default_rng(seed)
        t0 = time.perf_counter()
        rb = cpprb.PrioritizedReplayBuffer(capacity, {"obs": {"dtype": np.float32}},
                                           alpha=alpha)
        for lo, hi in _chunks(capacity):
            n = hi - lo
            rb.add(obs=rng.standard_normal((n, 1), np.float32),
                   priorities=rng.uniform(1e-3, 1, n))
        fill = time.perf_counter() - t0

        def sample(batch_size: int, beta: float) -> tuple[Any, Any]:
            batch = rb.sample(batch_size, beta=beta)
            return batch, batch["indexes"]

        return PrioritizedWorkload("cpprb_prioritized", capacity, fill, sample,
                                   rb.update_priorities, rng)

    return guard("cpprb_prioritized", build)


def torchrl_prioritized(
    capacity: int = 1_000_000, alpha: float = 0.6, seed: int = 0
) -> PrioritizedWorkload | None:
    def build() -> PrioritizedWorkload:
        import torch
        import torchrl._torchrl  # noqa: F401  C++ segment trees; raises the real ImportError
        from torchrl.data import LazyTensorStorage, PrioritizedReplayBuffer

        logging.getLogger("torchrl").setLevel(logging.WARNING)
        rng = np.random.default_rng(seed)
        t0 = time.perf_counter()
        rb = PrioritizedReplayBuffer(alpha=alpha, beta=0.4,
                                     storage=LazyTensorStorage(capacity))
        rb.set_rng(torch.Generator().manual_seed(seed))
        for lo, hi in _chunks(capacity):
            obs = rng.standard_normal((hi - lo, 1), dtype=np.float32)
            idx = rb.extend(torch.from_numpy(obs))
            rb.update_priority(idx, torch.from_numpy(rng.uniform(1e-3, 1.0, hi - lo)))
        fill = time.perf_counter() - t0
        sampler: Any = rb.prioritized_sampler

        def sample(batch_size: int, beta: float) -> tuple[Any, Any]:
            sampler.beta = beta
            batch, info = rb.sample(batch_size, return_info=True)
            return (batch, info), info["index"]

        def update(indexes: Any, priorities: np.ndarray) -> None:
            rb.update_priority(indexes, torch.from_numpy(priorities))

        return PrioritizedWorkload("torchrl_prioritized", capacity, fill, sample,
                                   update, rng)

    return guard("torchrl_prioritized", build)


def tianshou_prioritized(
    capacity: int = 1_000_000, alpha: float = 0.6, seed: int = 0
) -> PrioritizedWorkload | None:
    def build() -> PrioritizedWorkload:
        from tianshou.data import Batch, PrioritizedReplayBuffer

        np.random.seed(seed)  # tianshou's prioritized sampling uses np.random.rand
        rng = np.random.default_rng(seed)
        t_jit = time.perf_counter()
        # numba JIT of its SegmentTree, kept out of the fill time
        PrioritizedReplayBuffer(16, alpha=alpha, beta=0.4)
        t0 = time.perf_counter()
        rb = PrioritizedReplayBuffer(capacity, alpha=alpha, beta=0.4, random_seed=seed)
        no = np.zeros(capacity, bool)
        rb.set_batch(Batch(obs=rng.standard_normal((capacity, 1), np.float32),
                           act=np.zeros(capacity, np.int64),
                           rew=np.zeros(capacity, np.float32),
                           terminated=no, truncated=no.copy(), done=no.copy()))
        rb._size = capacity  # as tianshou's ReplayBuffer.from_data does
        rb.last_index[0] = capacity - 1
        rb.update_weight(np.arange(capacity), rng.uniform(1e-3, 1.0, capacity))
        fill = time.perf_counter() - t0

        def sample(batch_size: int, beta: float) -> tuple[Any, Any]:
            rb.set_beta(beta)
            batch, indexes = rb.sample(batch_size)
            return batch, indexes

        return PrioritizedWorkload("tianshou_prioritized", capacity, fill, sample,
                                   rb.update_weight, rng, setup_seconds=t0 - t_jit)

    return guard("tianshou_prioritized", build)


def cpprb_uniform(capacity: int = 1_000_000, seed: int = 0) -> UniformWorkload | None:
    def build() -> UniformWorkload:
        import cpprb

        np.random.seed(seed)  # cpprb.ReplayBuffer samples with np.random
        rng = np.random.default_rng(seed)
        t0 = time.perf_counter()
        env_dict = {k: {"shape": v.shape[1:], "dtype": np.float32}
                    for k, v in transitions(rng, 1).items()}
        rb = cpprb.ReplayBuffer(capacity, env_dict)
        for lo, hi in _chunks(capacity):
            rb.add(**transitions(rng, hi - lo))
        fill = time.perf_counter() - t0
        return UniformWorkload("cpprb_uniform", capacity, fill, rb.sample)

    return guard("cpprb_uniform", build)


def torchrl_uniform(capacity: int = 1_000_000, seed: int = 0) -> UniformWorkload | None:
    def build() -> UniformWorkload:
        import torch
        from tensordict import TensorDict
        from torchrl.data import LazyTensorStorage, ReplayBuffer

        logging.getLogger("torchrl").setLevel(logging.WARNING)
        rng = np.random.default_rng(seed)
        t0 = time.perf_counter()
        rb = ReplayBuffer(storage=LazyTensorStorage(capacity),
                          generator=torch.Generator().manual_seed(seed))
        for lo, hi in _chunks(capacity):
            data = {k: torch.from_numpy(v)
                    for k, v in transitions(rng, hi - lo).items()}
            rb.extend(TensorDict(data, batch_size=[hi - lo]))
        fill = time.perf_counter() - t0
        return UniformWorkload("torchrl_uniform", capacity, fill, rb.sample)

    return guard("torchrl_uniform", build)


def sb3_uniform(capacity: int = 1_000_000, seed: int = 0) -> UniformWorkload | None:
    def build() -> UniformWorkload:
        from gymnasium import spaces
        from stable_baselines3.common.buffers import ReplayBuffer

        np.random.seed(seed)  # SB3 samples with np.random.randint
        rng = np.random.default_rng(seed)
        t0 = time.perf_counter()
        rb = ReplayBuffer(capacity,
                          spaces.Box(-np.inf, np.inf, (_OBS_DIM,), np.float32),
                          spaces.Box(-1.0, 1.0, (1,), np.float32), device="cpu",
                          n_envs=1)
        for lo, hi in _chunks(capacity):  # arrays are (capacity, n_envs, ...)
            t = transitions(rng, hi - lo)
            rb.observations[lo:hi, 0] = t["obs"]
            rb.next_observations[lo:hi, 0] = t["next_obs"]
            rb.actions[lo:hi, 0] = t["act"]
            rb.rewards[lo:hi, 0] = t["rew"][:, 0]
            rb.dones[lo:hi, 0] = t["done"][:, 0]
        rb.pos, rb.full = 0, True
        fill = time.perf_counter() - t0
        return UniformWorkload("sb3_uniform", capacity, fill, rb.sample)

    return guard("sb3_uniform", build)


PRIORITIZED: dict[str, Callable[..., PrioritizedWorkload | None]] = {
    f.__name__: f
    for f in (cpprb_prioritized, torchrl_prioritized, tianshou_prioritized)}
UNIFORM: dict[str, Callable[..., UniformWorkload | None]] = {
    f.__name__: f for f in (cpprb_uniform, torchrl_uniform, sb3_uniform)}
