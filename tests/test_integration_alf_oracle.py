"""Differential tests of fastreplay.integrations.alf against RingModel, a
minimal pure-Python model of upstream ALF's per-env ring buffer (a fixed
array of ``max_length`` steps per env, an end position and a size per env,
as ``alf.utils.data_buffer.RingBuffer`` keeps them), with the spec's fixes
applied to its reads.

Random windows differ between the two by design, so a replayed row is
checked to be some contiguous window of the model's history of its env;
``replay_all`` must match exactly."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import (  # noqa: E402
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from fastreplay.integrations.alf import (  # noqa: E402
    CyclicOneTimeExperienceReplayer,
    Experience,
    SyncUniformExperienceReplayer,
    TensorSpec,
)

SPEC = Experience(step_type=TensorSpec((), torch.int32),
                  reward=TensorSpec((), torch.int64),
                  observation=TensorSpec((2,), torch.float64),
                  env_id=TensorSpec((), torch.int64))


class RingModel:
    """Per env: ``max_length`` cells, the position the next step goes to,
    and how many cells hold steps (upstream's ``_current_pos`` and
    ``_current_size``)."""

    def __init__(self, num_envs: int, max_length: int) -> None:
        self.num_envs, self.max_length = num_envs, max_length
        self.cells = [[None] * max_length for _ in range(num_envs)]
        self.pos = [0] * num_envs
        self.size = [0] * num_envs

    def add(self, envs: list[int], values: list[int]) -> None:
        assert len(set(envs)) == len(envs), "duplicated env ids"
        for e, v in zip(envs, values, strict=True):
            self.cells[e][self.pos[e]] = v
            self.pos[e] = (self.pos[e] + 1) % self.max_length
            self.size[e] = min(self.size[e] + 1, self.max_length)

    def history(self, e: int) -> list[int]:
        """Env e's steps, oldest first (what replay_all returns, fix A2)."""
        return [self.cells[e][(self.pos[e] - self.size[e] + i) % self.max_length]
                for i in range(self.size[e])]

    def clear(self) -> None:
        self.pos = [0] * self.num_envs
        self.size = [0] * self.num_envs


def make_step(envs: list[int], values: list[int]) -> Experience:
    v = torch.tensor(values, dtype=torch.int64)
    return Experience(step_type=(v % 3).to(torch.int32), reward=v,
                      observation=torch.stack([v, -v], 1).to(torch.float64),
                      env_id=torch.tensor(envs, dtype=torch.int64))


def check_fields(out: Experience) -> None:
    """Every field is derived from the reward as make_step does."""
    v = out.reward
    assert torch.equal(out.step_type, (v % 3).to(torch.int32))
    assert torch.equal(out.observation, torch.stack([v, -v], -1).to(torch.float64))
    assert out.prev_action == () and out.state == ()


def is_window(row: list[int], history: list[int]) -> bool:
    n = len(row)
    return any(history[s:s + n] == row for s in range(len(history) - n + 1))


class UniformMachine(RuleBasedStateMachine):
    """Random observes (env subsets, outer rank 1 and 3, duplicates),
    replays, replay_all and clear on the adapter and on RingModel."""

    @initialize(num_envs=st.integers(1, 5), max_length=st.integers(1, 9),
                compact=st.integers(1, 10))
    def setup(self, num_envs: int, max_length: int, compact: int) -> None:
        self.ours = SyncUniformExperienceReplayer(SPEC, num_envs, max_length)
        # envs' fresh steps are rewritten env by env every `compact` steps
        self.ours._rings.compact = min(compact, max_length)
        self.model = RingModel(num_envs, max_length)
        self.counter = 0
        torch.manual_seed(0)

    def values(self, n: int) -> list[int]:
        self.counter += n
        return list(range(self.counter - n, self.counter))

    @rule(data=st.data())
    def observe_one_step(self, data: st.DataObject) -> None:
        envs = data.draw(st.lists(st.integers(0, self.model.num_envs - 1), min_size=1,
                                  max_size=self.model.num_envs + 1))
        values = self.values(len(envs))
        if len(set(envs)) < len(envs):
            with pytest.raises(AssertionError):
                self.ours.observe(make_step(envs, values))
            return
        self.ours.observe(make_step(envs, values))
        self.model.add(envs, values)

    @rule(data=st.data(), q=st.integers(1, 2), t=st.integers(1, 4))
    def observe_rollout(self, data: st.DataObject, q: int, t: int) -> None:
        n = data.draw(st.integers(1, self.model.num_envs))
        rows = [data.draw(st.permutations(range(self.model.num_envs)))[:n]
                for _ in range(q * t)]
        steps = [make_step(envs, self.values(n)) for envs in rows]
        exp = Experience(*[torch.stack([getattr(s, f) for s in steps]).reshape(
            q, t, *getattr(steps[0], f).shape) if getattr(steps[0], f) != () else ()
            for f in Experience._fields])
        self.ours.observe(exp)
        for s in steps:  # q-major, then t: upstream's loops
            self.model.add(s.env_id.tolist(), s.reward.tolist())

    @rule(batch=st.integers(0, 12), length=st.integers(0, 8))
    def replay(self, batch: int, length: int) -> None:
        if min(self.model.size) < length:
            with pytest.raises(AssertionError):
                self.ours.replay(batch, length)
            return
        out = self.ours.replay(batch, length)
        assert out.reward.shape == (batch, length)
        check_fields(out)
        envs = out.env_id[:, 0].tolist() if length else None
        b = self.model.num_envs
        if envs is not None:
            assert envs[:batch // b * b] == list(range(b)) * (batch // b)
            assert len(set(envs[batch // b * b:])) == batch % b
        for row in range(batch if length else 0):
            assert (out.env_id[row] == envs[row]).all()
            assert is_window(out.reward[row].tolist(), self.model.history(envs[row]))

    @rule()
    def replay_all(self) -> None:
        if len(set(self.model.size)) > 1:
            with pytest.raises(AssertionError):
                self.ours.replay_all()
            return
        out = self.ours.replay_all()
        check_fields(out)
        assert out.reward.tolist() == [self.model.history(e)
                                       for e in range(self.model.num_envs)]

    @precondition(lambda self: self.counter % 3 == 0)
    @rule()
    def clear(self) -> None:
        self.ours.clear()
        self.model.clear()

    @invariant()
    def sizes(self) -> None:
        if hasattr(self, "model"):
            assert int(self.ours.total_size) == sum(self.model.size)
            assert self.ours.batch_size == self.model.num_envs


TestUniformMachine = UniformMachine.TestCase
TestUniformMachine.settings = settings(max_examples=60, stateful_step_count=25,
                                       deadline=None)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), actors=st.integers(1, 3), per_actor=st.integers(1, 3),
       rollout_length=st.integers(1, 4), cycles=st.integers(1, 6))
def test_cyclic_matches_the_model(data, actors, per_actor, rollout_length, cycles):
    """Each cycle observes one actor's envs for rollout_length steps and
    replays them: the last rollout_length + 1 steps of those envs (all of
    them on an env's first cycle, fix A3), oldest first."""
    num_envs = actors * per_actor
    ours = CyclicOneTimeExperienceReplayer(SPEC, num_envs, actors, rollout_length, 1)
    model = RingModel(num_envs, rollout_length + 1)
    counter = 0
    for _ in range(cycles):
        actor = data.draw(st.integers(0, actors - 1))
        envs = list(range(actor * per_actor, (actor + 1) * per_actor))
        steps = []
        for _t in range(rollout_length):
            values = list(range(counter, counter + per_actor))
            counter += per_actor
            steps.append(make_step(envs, values))
            model.add(envs, values)
        exp = Experience(*[torch.stack([getattr(s, f) for s in steps])[None]
                           if getattr(steps[0], f) != () else ()
                           for f in Experience._fields])
        ours.observe(exp)
        out = ours.replay_all()
        check_fields(out)
        assert out.env_id[:, 0].tolist() == envs
        assert out.reward.tolist() == [model.history(e) for e in envs]
