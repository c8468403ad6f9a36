"""ALF adapter workloads (issue 14): ``SyncUniformExperienceReplayer`` with
16 envs and a locomotion-sized experience (observation float32[17], action
and prev_action float32[6], reward, discount, step_type, env_id), rings of
10,000 steps per env filled past one wrap.

- ``replay(256, 8)``: 256 windows of 8 consecutive steps;
- ``observe``: one step of the 16 envs.

Upstream ALF is measured side by side by a scratch script (see the issue 14
closing note); it needs gin and ALF's source tree, so it is not a peer here.
Run: pytest benchmarks/test_bench_alf.py --benchmark-only
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from fastreplay.integrations.alf import (  # noqa: E402
    Experience,
    SyncUniformExperienceReplayer,
    TensorSpec,
)

ENVS, MAX_LENGTH, OBS, ACT = 16, 10_000, 17, 6


def _spec() -> Experience:
    return Experience(step_type=TensorSpec((), torch.int32), reward=TensorSpec(()),
                      discount=TensorSpec(()), observation=TensorSpec((OBS,)),
                      prev_action=TensorSpec((ACT,)),
                      env_id=TensorSpec((), torch.int64), action=TensorSpec((ACT,)))


def _steps(outer: tuple[int, ...]) -> Experience:
    """Random steps with outer dims ``outer`` (ending in the env dim)."""
    g = torch.Generator().manual_seed(0)
    env = torch.arange(ENVS).expand(*outer)
    return Experience(
        step_type=torch.randint(0, 3, outer, generator=g, dtype=torch.int32),
        reward=torch.randn(outer, generator=g), discount=torch.ones(outer),
        observation=torch.randn(*outer, OBS, generator=g),
        prev_action=torch.randn(*outer, ACT, generator=g), env_id=env.contiguous(),
        action=torch.randn(*outer, ACT, generator=g))


@pytest.fixture(scope="module")
def replayer() -> SyncUniformExperienceReplayer:
    r = SyncUniformExperienceReplayer(_spec(), ENVS, MAX_LENGTH)
    r.observe(_steps((1, MAX_LENGTH + MAX_LENGTH // 3, ENVS)))  # [Q, T, B]: wrapped
    assert int(r.total_size) == ENVS * MAX_LENGTH
    return r


@pytest.mark.benchmark(group="alf uniform: replay(256, 8), 16 envs")
def test_alf_uniform_replay(benchmark, replayer) -> None:
    torch.manual_seed(0)
    out = benchmark(replayer.replay, 256, 8)
    assert out.observation.shape == (256, 8, OBS)


@pytest.mark.benchmark(group="alf uniform: observe one step of 16 envs")
def test_alf_uniform_observe(benchmark, replayer) -> None:
    step = Experience(*[f[0, 0] if isinstance(f, torch.Tensor) else f
                        for f in _steps((1, 1, ENVS))])
    benchmark(replayer.observe, step)
