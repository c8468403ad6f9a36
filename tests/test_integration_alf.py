"""fastreplay.integrations.alf: ALF's experience replayers (one_time,
uniform, cycle_one_time) against the behaviour of adapters-spec.md §3,
including the fixes A1-A3.  The differential check against a model of
upstream's rings is in test_integration_alf_oracle.py."""

from __future__ import annotations

import collections
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fastreplay.integrations import alf  # noqa: E402
from fastreplay.integrations._alf_nest import flatten, pack  # noqa: E402
from fastreplay.integrations.alf import (  # noqa: E402
    CyclicOneTimeExperienceReplayer,
    Experience,
    OnetimeExperienceReplayer,
    SyncExperienceReplayer,
    SyncUniformExperienceReplayer,
    TensorSpec,
)

B = 4


def spec(obs: int = 3) -> Experience:
    return Experience(step_type=TensorSpec((), torch.int32), reward=TensorSpec(()),
                      observation=TensorSpec((obs,)),
                      env_id=TensorSpec((), torch.int64))


def step(t: int, envs=range(B), obs: int = 3) -> Experience:
    """One step of ``envs``: reward = 1000 * env + t, observation rows full
    of the reward, step_type t."""
    e = torch.as_tensor(list(envs), dtype=torch.int64)
    reward = (1000 * e + t).to(torch.float32)
    return Experience(step_type=torch.full((len(e),), t, dtype=torch.int32),
                      reward=reward, observation=reward[:, None].repeat(1, obs),
                      env_id=e)


def stack_steps(fields: list, outer: tuple[int, ...]):  # type: ignore[no-untyped-def]
    """One field of steps ``[n, ...]`` stacked to ``[*outer, n, ...]``."""
    if fields[0] == ():
        return ()
    return torch.stack(fields).reshape(*outer, *fields[0].shape)


def uniform(max_length: int = 5, steps: int = 0) -> SyncUniformExperienceReplayer:
    r = SyncUniformExperienceReplayer(spec(), B, max_length)
    for t in range(steps):
        r.observe(step(t))
    return r


# ------------------------------------------------------------------ module

def test_import_fastreplay_does_not_import_torch():
    code = ("import sys, fastreplay, fastreplay.integrations; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_exports():
    assert set(alf.__all__) == {
        "OnetimeExperienceReplayer", "SyncUniformExperienceReplayer",
        "SyncExperienceReplayer", "CyclicOneTimeExperienceReplayer", "Experience",
        "TensorSpec"}
    assert SyncExperienceReplayer is SyncUniformExperienceReplayer
    assert issubclass(CyclicOneTimeExperienceReplayer, SyncUniformExperienceReplayer)


def test_experience_fields_default_to_empty():
    assert Experience._fields == ("step_type", "reward", "discount", "observation",
                                  "prev_action", "env_id", "action", "rollout_info",
                                  "state")
    assert Experience() == ((),) * 9


def test_tensor_spec():
    s = TensorSpec((2, 3))
    assert tuple(s.shape) == (2, 3) and s.dtype == torch.float32
    assert TensorSpec([2], "int64").dtype == torch.int64
    assert s == TensorSpec((2, 3)) and s != TensorSpec((2, 3), torch.int32)
    assert tuple(s.zeros((4,)).shape) == (4, 2, 3)


def test_readme_example_runs(capsys):
    """The README's ALF section runs as shown."""
    from readme_blocks import block

    exec(compile(block("### ALF's experience replayers"), "README ALF", "exec"), {})
    assert capsys.readouterr().out.split() == [
        "torch.Size([8,", "3,", "8])", "torch.int32", "40", "torch.Size([4,", "10])"]


# ------------------------------------------------------------------ one_time

def test_one_time_replay_all_stacks_batch_major():
    r = OnetimeExperienceReplayer()
    for t in range(3):
        r.observe(step(t))
    out = r.replay_all()
    assert isinstance(out, Experience)
    assert out.observation.shape == (B, 3, 3) and out.reward.shape == (B, 3)
    assert out.step_type.dtype == torch.int32
    assert out.reward[2].tolist() == [2000.0, 2001.0, 2002.0]
    assert out.rollout_info == ()
    assert r.batch_size == B and int(r.total_size) == 3 * B


def test_one_time_total_size_before_observe_is_zero_a1():
    # A1: upstream raised TypeError from torch.tensor(0, torch.int64).
    assert int(OnetimeExperienceReplayer().total_size) == 0


def test_one_time_asserts_before_observe():
    r = OnetimeExperienceReplayer()
    with pytest.raises(AssertionError):
        r.replay_all()
    with pytest.raises(AssertionError):
        _ = r.batch_size
    r.clear()  # nothing to clear


def test_one_time_replay_raises():
    r = OnetimeExperienceReplayer()
    r.observe(step(0))
    with pytest.raises(NotImplementedError):
        r.replay(2, 1)


@pytest.mark.parametrize("save_last", [False, True])
def test_one_time_clear(save_last):
    r = OnetimeExperienceReplayer(save_last_exp=save_last)
    for t in range(3):
        r.observe(step(t))
    r.clear()
    assert int(r.total_size) == (B if save_last else 0)
    r.observe(step(3))
    out = r.replay_all()
    assert out.step_type[0].tolist() == ([2, 3] if save_last else [3])


def test_one_time_cleared_replay_all_is_empty():
    r = OnetimeExperienceReplayer()
    r.observe(step(0))
    r.clear()
    out = r.replay_all()
    assert out.observation.shape == (B, 0, 3) and out.step_type.dtype == torch.int32


def test_one_time_detaches_and_keeps_nests():
    r = OnetimeExperienceReplayer()
    x = torch.ones(B, 2, requires_grad=True)
    r.observe({"a": x * 2, "b": [torch.zeros(B, dtype=torch.int8), ()]})
    r.observe({"a": x * 3, "b": [torch.ones(B, dtype=torch.int8), ()]})
    out = r.replay_all()
    assert isinstance(out, dict) and isinstance(out["b"], list) and out["b"][1] == ()
    assert not out["a"].requires_grad and out["a"].shape == (B, 2, 2)
    assert out["b"][0].dtype == torch.int8 and out["b"][0][0].tolist() == [0, 1]


def test_one_time_structure_change_asserts():
    r = OnetimeExperienceReplayer()
    r.observe({"a": torch.zeros(B)})
    with pytest.raises(AssertionError):
        r.observe({"b": torch.zeros(B)})


# ------------------------------------------------------------------ uniform

def test_uniform_replay_shapes_dtypes_and_env_order():
    r = uniform(steps=5)
    torch.manual_seed(0)
    out = r.replay(10, 3)  # 2 rounds of envs 0..3, then 2 distinct random envs
    assert isinstance(out, Experience)
    assert out.observation.shape == (10, 3, 3) and out.reward.shape == (10, 3)
    assert out.step_type.dtype == torch.int32 and out.env_id.dtype == torch.int64
    assert out.rollout_info == () and out.state == ()
    env = out.env_id[:, 0].tolist()
    assert env[:8] == [0, 1, 2, 3] * 2
    assert len(set(env[8:])) == 2 and set(env[8:]) <= set(range(B))
    for row in range(10):  # contiguous window of the row's env
        rew = out.reward[row]
        assert (out.env_id[row] == env[row]).all()
        assert torch.equal(rew - rew[0], torch.arange(3, dtype=torch.float32))
        assert int(rew[0]) // 1000 == env[row]
        assert torch.equal(out.observation[row], rew[:, None].repeat(1, 3))
        assert torch.equal(out.step_type[row].float(), rew - 1000 * env[row])


def test_uniform_replay_is_reproducible_with_torch_seed():
    r = uniform(max_length=50, steps=40)
    torch.manual_seed(7)
    a = r.replay(9, 4)
    torch.manual_seed(7)
    b = r.replay(9, 4)
    assert all(torch.equal(getattr(a, f), getattr(b, f))
               for f in ("step_type", "reward", "observation", "env_id"))


def test_uniform_windows_are_uniform_over_valid_starts():
    """Each of the size - L + 1 starts of every env is drawn with the same
    probability: chi-square over N = 64,000 windows, fixed seed, threshold
    at p ~ 1e-6 (so it cannot flake)."""
    r = uniform(max_length=12, steps=20)  # ring wrapped: steps 8..19 held
    torch.manual_seed(1234)
    length, valid = 4, 12 - 4 + 1
    counts = np.zeros((B, valid))
    for _ in range(250):
        out = r.replay(256, length)
        first = out.reward[:, 0].numpy().astype(np.int64)
        env, start = first // 1000, first % 1000 - 8
        assert start.min() >= 0 and start.max() < valid
        np.add.at(counts, (env, start), 1)
    expected = counts.sum() / counts.size
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 95, chi2  # 35 degrees of freedom: P(chi2 > 95) ~ 1e-7


def test_uniform_replay_needs_enough_steps():
    r = uniform(steps=2)
    with pytest.raises(AssertionError):
        r.replay(4, 3)
    r.replay(4, 2)
    r.observe(step(2, envs=[0, 1, 2]))  # env 3 still holds 2
    with pytest.raises(AssertionError):
        r.replay(4, 3)


def test_uniform_ring_wraps_keeping_the_newest():
    r = uniform(max_length=5, steps=13)
    assert int(r.total_size) == 5 * B
    torch.manual_seed(0)
    out = r.replay(40, 5)  # the only window is the whole ring
    assert (out.step_type == torch.arange(8, 13, dtype=torch.int32)).all()


def test_uniform_replay_all_after_wrap_is_oldest_first_a2():
    # A2: upstream returned the raw ring, [10, 11, 12, 8, 9].
    r = uniform(max_length=5, steps=13)
    out = r.replay_all()
    assert out.step_type.shape == (B, 5)
    for e in range(B):
        assert out.step_type[e].tolist() == [8, 9, 10, 11, 12]
        assert out.reward[e].tolist() == [1000.0 * e + t for t in range(8, 13)]


def test_uniform_replay_all_before_wrap_and_empty():
    r = uniform(max_length=5)
    empty = r.replay_all()
    assert empty.observation.shape == (B, 0, 3) and empty.step_type.dtype == torch.int32
    r.observe(step(0))
    r.observe(step(1))
    assert r.replay_all().step_type.tolist() == [[0, 1]] * B


def test_uniform_env_subsets_advance_only_those_envs():
    r = uniform(max_length=6)
    r.observe(step(0))
    r.observe(step(1, envs=[2, 0]))
    r.observe(step(2, envs=[3]))
    assert int(r.total_size) == 4 + 2 + 1
    r.observe(step(3, envs=[1, 2]))
    r.observe(step(4, envs=[0, 1, 3]))
    r.observe(step(5, envs=[3, 2]))  # sizes: 3 3 4 4
    with pytest.raises(AssertionError):
        r.replay_all()
    r.observe(step(6, envs=[0, 1]))
    out = r.replay_all()
    assert out.step_type.tolist() == [[0, 1, 4, 6], [0, 3, 4, 6], [0, 1, 3, 5],
                                      [0, 2, 4, 5]]
    assert out.env_id.tolist() == [[e] * 4 for e in range(B)]


def test_uniform_duplicate_env_ids_assert_and_store_nothing():
    r = uniform(steps=1)
    with pytest.raises(AssertionError, match="duplicated"):
        r.observe(step(1, envs=[1, 2, 1]))
    assert int(r.total_size) == B
    assert r.replay_all().step_type.tolist() == [[0]] * B


def test_uniform_env_id_out_of_range():
    r = uniform()
    with pytest.raises(IndexError):
        r.observe(step(0, envs=[0, B]))
    with pytest.raises(IndexError):
        r.observe(step(0, envs=[-1]))
    assert int(r.total_size) == 0


@pytest.mark.parametrize("outer", [(), (2, B), (1, 2, 3, B)])
def test_uniform_other_outer_ranks_raise_value_error(outer):
    r = uniform()
    exp = Experience(step_type=torch.zeros(outer, dtype=torch.int32),
                     reward=torch.zeros(outer), observation=torch.zeros(*outer, 3),
                     env_id=torch.zeros(outer, dtype=torch.int64))
    with pytest.raises(ValueError, match="outer rank"):
        r.observe(exp)


def test_uniform_outer_rank_3():
    r = uniform(max_length=10)
    q, t = 2, 3  # [Q, T, B]: q-major then t, as upstream's loops
    steps = [[step(10 * i + j) for j in range(t)] for i in range(q)]
    exp = Experience(*[torch.stack([torch.stack([getattr(s, f) for s in row])
                                    for row in steps])
                       if f in ("step_type", "reward", "observation", "env_id") else ()
                       for f in Experience._fields])
    assert exp.observation.shape == (q, t, B, 3)
    r.observe(exp)
    assert r.replay_all().step_type.tolist() == [[0, 1, 2, 10, 11, 12]] * B


def test_uniform_outer_rank_3_longer_than_the_ring():
    r = uniform(max_length=4)
    rows = [step(t, envs=[t % B, (t + 1) % B]) for t in range(12)]
    exp = Experience(*[stack_steps([getattr(s, f) for s in rows], (3, 4))
                       for f in Experience._fields])
    r.observe(exp)  # each env sees 6 steps; the ring keeps its last 4
    out = r.replay_all()
    for e in range(B):
        got = [t for t in range(12) if e in (t % B, (t + 1) % B)][-4:]
        assert out.step_type[e].tolist() == got


def test_uniform_rejects_a_mismatching_experience():
    r = uniform()
    with pytest.raises(AssertionError):  # observation's shape differs from the spec
        r.observe(step(0, obs=4))
    with pytest.raises(AssertionError):  # batch dims differ
        r.observe(step(0)._replace(reward=torch.zeros(B + 1)))
    with pytest.raises(AssertionError):  # a field the spec does not have
        r.observe(step(0)._replace(action=torch.zeros(B)))
    with pytest.raises(AssertionError):  # a field the spec has is missing
        r.observe(step(0)._replace(reward=()))
    assert int(r.total_size) == 0


def test_uniform_clear_resets_sizes():
    r = uniform(steps=3)
    r.clear()
    assert int(r.total_size) == 0
    with pytest.raises(AssertionError):
        r.replay(4, 1)
    r.observe(step(7))
    assert r.replay_all().step_type.tolist() == [[7]] * B


def test_uniform_batch_size_total_size_and_alias():
    r = SyncExperienceReplayer(spec(), B, 3)
    assert r.batch_size == B and int(r.total_size) == 0
    r.observe(step(0, envs=[1]))
    assert int(r.total_size) == 1


def test_uniform_bad_constructor_arguments():
    with pytest.raises(ValueError):
        SyncUniformExperienceReplayer(spec(), 0, 5)
    with pytest.raises(ValueError):
        SyncUniformExperienceReplayer(spec(), B, 0)
    with pytest.raises(ValueError):
        SyncUniformExperienceReplayer({"x": 3}, B, 5)


Pair = collections.namedtuple("Pair", "first second")


@pytest.mark.parametrize("kind", ["dict", "tuple", "list", "namedtuple", "nested"])
def test_uniform_nest_types_in_and_out(kind):
    s, v = TensorSpec((2,)), TensorSpec((), torch.int16)
    specs = {"dict": {"v": v, "x": s}, "tuple": (s, v, ()), "list": [s, v],
             "namedtuple": Pair(s, v), "nested": {"a": Pair([s], {"z": v}), "b": ()}}
    sp = specs[kind]

    leaves = dict(flatten(sp))

    def make(t):
        return pack(sp, lambda path: torch.full((B, *leaves[path].shape), t,
                                                dtype=leaves[path].dtype))

    r = SyncUniformExperienceReplayer(sp, B, 4)
    for t in range(3):
        r.observe(make(t))
    for out in (r.replay(6, 2), r.replay_all()):
        assert type(out) is type(sp)
        assert [p for p, _ in flatten(out)] == [p for p, _ in flatten(sp)]
        for (_, o), (_, leaf) in zip(flatten(out), flatten(sp), strict=True):
            assert o.dtype == leaf.dtype and tuple(o.shape[2:]) == tuple(leaf.shape)
    if kind == "nested":
        assert r.replay_all()["b"] == () and isinstance(r.replay_all()["a"], Pair)


def test_uniform_dict_with_env_id_key_and_no_env_id():
    r = SyncUniformExperienceReplayer({"env_id": TensorSpec((), torch.int64),
                                       "x": TensorSpec(())}, B, 4)
    r.observe({"x": torch.tensor([5.0]), "env_id": torch.tensor([2])})
    assert int(r.total_size) == 1
    r2 = SyncUniformExperienceReplayer({"x": TensorSpec(())}, B, 4)
    r2.observe({"x": torch.arange(B, dtype=torch.float32)})  # rows are envs 0..B-1
    assert r2.replay_all()["x"].tolist() == [[0.0], [1.0], [2.0], [3.0]]
    with pytest.raises(AssertionError):
        r2.observe({"x": torch.zeros(B - 1)})


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8, torch.int16,
                                   torch.int32, torch.int64, torch.float16,
                                   torch.bfloat16, torch.float32, torch.float64])
def test_uniform_dtypes_kept(dtype):
    r = SyncUniformExperienceReplayer({"x": TensorSpec((2,), dtype)}, 2, 3)
    values = [torch.tensor([[t % 2, 1], [0, t % 3]]).to(dtype) for t in range(4)]
    for v in values:
        r.observe({"x": v})
    out = r.replay_all()["x"]
    assert out.dtype == dtype
    assert torch.equal(out, torch.stack(values[1:], dim=1))


def test_uniform_casts_to_the_spec_dtype_and_detaches():
    r = SyncUniformExperienceReplayer({"x": TensorSpec(())}, 2, 3)
    x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    r.observe({"x": x * 2})
    r.observe({"x": torch.tensor([3, 4])})
    out = r.replay(2, 2)["x"]
    assert out.dtype == torch.float32 and not out.requires_grad
    assert out.tolist() == [[2.0, 3.0], [4.0, 4.0]]


def test_uniform_results_are_independent_of_later_writes():
    r = uniform(max_length=3, steps=3)
    out = r.replay_all()
    before = out.reward.clone()
    for t in range(3, 9):
        r.observe(step(t))
    assert torch.equal(out.reward, before)


def test_uniform_results_are_contiguous_and_writable():
    r = uniform(steps=4)
    for out in (r.replay(6, 3), r.replay_all()):
        for f in ("step_type", "reward", "observation", "env_id"):
            t = getattr(out, f)
            assert t.is_contiguous()
            t.view(-1)[0] = 0  # a view of the whole batch, writable


@pytest.mark.parametrize("kind", ["uniform", "cyclic", "one_time"])
def test_replayers_pickle(kind):
    import pickle

    if kind == "one_time":
        r = OnetimeExperienceReplayer()
        for t in range(3):
            r.observe(step(t))
    elif kind == "uniform":
        r = uniform(max_length=4, steps=6)
    else:
        r = cyclic(rollout_length=3)
        r.observe(rollout(0, 3))
    copy = pickle.loads(pickle.dumps(r))
    a, b = r.replay_all(), copy.replay_all()
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True)
               if isinstance(x, torch.Tensor))
    assert int(copy.total_size) == int(r.total_size)
    if kind == "uniform":
        copy.observe(step(6))
        assert copy.replay_all().step_type[0].tolist() == [3, 4, 5, 6]


@pytest.mark.parametrize("kind", ["uniform", "cyclic"])
def test_replayers_unpickled_from_read_only_buffers_still_work(kind):
    """Ray hands numpy arrays out of its object store read-only: the
    unpickled rings must still advance, compact and clear."""
    import pickle

    r = uniform(max_length=4, steps=6) if kind == "uniform" else cyclic(3)
    if kind == "cyclic":
        r.observe(rollout(0, 3))
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(r, protocol=5, buffer_callback=buffers.append)
    frozen = [memoryview(b.raw()).toreadonly() for b in buffers]
    copy = pickle.loads(data, buffers=frozen)
    pickle.loads(data, buffers=frozen).clear()
    if kind == "cyclic":
        copy.replay_all()
        copy.observe(rollout(3, 3))
        assert copy.replay_all().step_type.tolist() == [[2, 3, 4, 5]] * B
    else:
        for t in range(6, 40):
            copy.observe(step(t))
        assert copy.replay_all().step_type[0].tolist() == [36, 37, 38, 39]
    copy.clear()
    assert int(copy.total_size) == (4 * B if kind == "cyclic" else 0)


def test_uniform_zero_sized_replays():
    r = uniform(steps=2)
    assert r.replay(0, 2).observation.shape == (0, 2, 3)
    assert r.replay(3, 0).observation.shape == (3, 0, 3)


# ------------------------------------------------------------------ cycle_one_time

def rollout(t0: int, length: int, envs=range(B)) -> Experience:
    """A [1, T, B] rollout (learn_queue_cap 1) of steps t0..t0+T-1."""
    steps = [step(t0 + j, envs) for j in range(length)]
    return Experience(*[torch.stack([getattr(s, f) for s in steps])[None]
                        if getattr(steps[0], f) != () else ()
                        for f in Experience._fields])


def cyclic(rollout_length: int = 3, batch_size: int = B, num_actors: int = 1,
           learn_queue_cap: int = 1) -> CyclicOneTimeExperienceReplayer:
    return CyclicOneTimeExperienceReplayer(spec(), batch_size, num_actors,
                                           rollout_length, learn_queue_cap)


@pytest.mark.parametrize("args", [(B, 0, 1), (B, 3, 1), (B, 2, 0), (B, 4, 3)])
def test_cyclic_constructor_asserts(args):
    batch_size, num_actors, cap = args
    with pytest.raises(AssertionError):
        cyclic(3, batch_size, num_actors, cap)


def test_cyclic_first_replay_is_exactly_the_rollout_a3():
    # A3: upstream's first replay began with an unwritten slot and dropped
    # the newest step (for T >= 2).
    r = cyclic(rollout_length=3)
    r.observe(rollout(0, 3))
    out = r.replay_all()
    assert out.step_type.tolist() == [[0, 1, 2]] * B
    assert out.observation.shape == (B, 3, 3)


def test_cyclic_later_cycles_keep_the_previous_last_step():
    r = cyclic(rollout_length=3)
    r.observe(rollout(0, 3))
    r.replay_all()
    for c in range(1, 5):
        r.observe(rollout(3 * c, 3))
        out = r.replay_all()
        assert out.step_type.tolist() == [list(range(3 * c - 1, 3 * c + 3))] * B


def test_cyclic_observe_and_replay_all_alternate():
    r = cyclic()
    with pytest.raises(AssertionError):
        r.replay_all()
    r.observe(rollout(0, 3))
    with pytest.raises(AssertionError):
        r.observe(rollout(3, 3))
    assert int(r.total_size) == 3 * B  # the refused observe stored nothing
    r.replay_all()
    with pytest.raises(AssertionError):
        r.replay_all()
    r.observe(rollout(3, 3))


def test_cyclic_replays_only_the_last_observed_envs():
    r = cyclic(rollout_length=2, batch_size=B, num_actors=2, learn_queue_cap=1)
    r.observe(rollout(0, 2, envs=[2, 3]))
    out = r.replay_all()
    assert out.env_id[:, 0].tolist() == [2, 3]
    r.observe(rollout(0, 2, envs=[1, 0]))
    out = r.replay_all()
    assert out.env_id[:, 0].tolist() == [1, 0]  # in the observed order
    assert out.step_type.tolist() == [[0, 1], [0, 1]]


def test_cyclic_learn_queue_of_two_actors():
    r = cyclic(rollout_length=2, batch_size=B, num_actors=2, learn_queue_cap=2)
    a, b = rollout(0, 2, envs=[0, 1]), rollout(0, 2, envs=[2, 3])
    exp = Experience(*[torch.cat([x, y]) if x != () else ()
                       for x, y in zip(a, b, strict=True)])  # [Q=2, T, 2]
    r.observe(exp)
    out = r.replay_all()
    assert out.env_id[:, 0].tolist() == [0, 1, 2, 3]
    assert out.step_type.tolist() == [[0, 1]] * B


def test_cyclic_clear_is_a_no_op_and_replay_raises():
    r = cyclic()
    r.observe(rollout(0, 3))
    r.clear()
    assert int(r.total_size) == 3 * B
    with pytest.raises(NotImplementedError):
        r.replay(2, 1)
    assert r.replay_all().step_type.tolist() == [[0, 1, 2]] * B
