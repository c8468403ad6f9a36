"""rlightning ``Storage``: episodes being collected.  ``add_transition``,
the async path ``add_data_async``, per-env active episodes, sub-env
splitting with auto-truncate on and off, ``truncate_episodes`` /
``truncate_one_episode`` and ``env_meta_list=None``.

With the default pre/post-processing, an episode of K transitions
(EnvRet + PolicyResponse pairs) is stored as K-1 rows: ``observation`` is
steps 0..K-2, ``next_observation`` steps 1..K-1, ``reward``/``terminated``/
``truncated`` are the ``last_*`` fields of steps 1..K-1, ``action`` the
actions of steps 0..K-2, and ``info`` is dropped.
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
tensordict = pytest.importorskip("tensordict")

import numpy as np  # noqa: E402

TensorDict = tensordict.TensorDict
KEYS = {"observation", "next_observation", "reward", "terminated", "truncated",
        "action"}


def obs(env, t, n=None):
    """Observation of step ``t``: float32[3] (or [n, 3] for a vector env)."""
    if n is None:
        return torch.tensor([env, t, env + t], dtype=torch.float32)
    return torch.stack([obs(env * 10 + j, t) for j in range(n)])


def pair(impl, env_id, env, t, done=False, truncated=False, n=None):
    """The EnvRet and PolicyResponse of step ``t``; for a vector env of ``n``
    sub-envs ``done`` is the list of sub-envs whose episode ends."""
    if n is None:
        er = impl.EnvRet(env_id=env_id, observation=obs(env, t), last_reward=float(t),
                         last_terminated=done, last_truncated=truncated)
        pr = impl.PolicyResponse(env_id=env_id, action=torch.tensor(env * 100 + t))
    else:
        term = torch.zeros(n, dtype=torch.bool)
        term[list(done or [])] = True
        er = impl.EnvRet(env_id=env_id, observation=obs(env, t, n),
                         last_reward=torch.full((n,), float(t)),
                         last_terminated=term,
                         last_truncated=torch.zeros(n, dtype=torch.bool))
        pr = impl.PolicyResponse(env_id=env_id,
                                 action=torch.arange(n) * 1000 + env * 100 + t)
    return er, pr


def step(impl, s, env_id, env, t, **kw):
    s.add_transition(*pair(impl, env_id, env, t, **kw))


def check_episode(rows, env, steps, last_done=True, sub=None):
    """``rows`` are the K-1 rows of the single-env episode of ``steps``."""
    steps = list(steps)
    k = len(steps)
    if sub is None:
        o = torch.stack([obs(env, t) for t in steps])
        a = torch.tensor([env * 100 + t for t in steps])
    else:
        o = torch.stack([obs(env * 10 + sub, t) for t in steps])
        a = torch.tensor([sub * 1000 + env * 100 + t for t in steps])
    assert set(rows) == KEYS
    assert torch.equal(rows["observation"], o[:-1])
    assert torch.equal(rows["next_observation"], o[1:])
    assert rows["reward"].dtype == torch.float32
    assert rows["reward"].tolist() == [float(t) for t in steps[1:]]
    assert rows["terminated"].dtype == torch.bool
    assert rows["terminated"].tolist() == [False] * (k - 2) + [last_done]
    assert rows["truncated"].tolist() == [False] * (k - 1)
    assert rows["action"].dtype == torch.int64
    assert torch.equal(rows["action"], a[:-1])


def all_rows(s):
    return copy.deepcopy(s).get_data()


# ----- single env, auto-truncate -----

@pytest.mark.parametrize("unit", ["transition", "episode"])
def test_done_transition_stores_the_episode(impl, unit):
    s = impl.make(20, unit=unit)
    for t in range(3):
        step(impl, s, "e", 0, t)
    assert len(s) == 0
    step(impl, s, "e", 0, 3, done=True)
    assert len(s) == (3 if unit == "transition" else 1)
    check_episode(s[0:3] if unit == "transition" else s[0], 0, range(4))
    # the next transition of the env starts a new episode
    for t in range(4, 6):
        step(impl, s, "e", 0, t)
    step(impl, s, "e", 0, 6, truncated=True)
    assert len(s) == (5 if unit == "transition" else 2)


def test_truncated_flag_also_ends_the_episode(impl):
    s = impl.make(20)
    step(impl, s, "e", 0, 0)
    step(impl, s, "e", 0, 1, truncated=True)
    assert len(s) == 1
    assert s[0]["truncated"].item() is True


def test_active_episodes_are_kept_per_env(impl):
    s = impl.make(20, unit="episode")
    for t in range(3):
        step(impl, s, "a", 1, t)
        step(impl, s, "b", 2, t)
    step(impl, s, "b", 2, 3, done=True)
    assert len(s) == 1
    check_episode(s[0], 2, range(4))
    step(impl, s, "a", 1, 3, done=True)
    assert len(s) == 2


def test_async_path_matches_add_transition(impl):
    sync, async_ = impl.make(20), impl.make(20)
    for t in range(4):
        er, pr = pair(impl, "e", 0, t, done=t == 3)
        sync.add_transition(er, pr)
        er, pr = pair(impl, "e", 0, t, done=t == 3)
        async_.add_data_async(er)
        assert len(async_) == 0
        async_.add_data_async(pr)
    assert len(async_) == len(sync) == 3
    a, b = all_rows(async_), all_rows(sync)
    for k in KEYS:
        assert torch.equal(a[k], b[k]), k
    check_episode(async_[0:3], 0, range(4))


@pytest.mark.parametrize("bad", [{"env_id": "e"}, "e", None, 3])
def test_async_path_rejects_other_types(impl, bad):
    s = impl.make(5)
    with pytest.raises(TypeError):
        s.add_data_async(bad)


def test_mismatched_env_ids_raise(impl):
    s = impl.make(5)
    er, _ = pair(impl, "a", 0, 0)
    _, pr = pair(impl, "b", 0, 0)
    with pytest.raises(ValueError):
        s.add_transition(er, pr)


# ----- truncation without auto-truncate -----

def test_done_flags_are_ignored_without_auto_truncate(impl):
    s = impl.make(20, auto_truncate_episode=False)
    for t in range(3):
        step(impl, s, "e", 0, t, done=t == 1)
    assert len(s) == 0
    s.truncate_episodes(["e"])
    assert len(s) == 2
    assert s[0:2]["terminated"].tolist() == [True, False]


@pytest.mark.parametrize("auto", [True, False])
def test_truncate_one_episode_by_id_or_object(impl, auto):
    s = impl.make(20, unit="episode", auto_truncate_episode=auto)
    for t in range(3):
        step(impl, s, "a", 1, t)
        step(impl, s, "b", 2, t)
    s.truncate_one_episode("a")
    assert len(s) == 1
    check_episode(s[0], 1, range(3), last_done=False)
    er, _ = pair(impl, "b", 2, 9)
    s.truncate_one_episode(er)  # any object with .env_id
    assert len(s) == 2
    with pytest.raises(KeyError):
        s.truncate_one_episode("a")  # nothing pending any more
    with pytest.raises(KeyError):
        s.truncate_episodes(["never-seen"])


def test_truncate_episodes_stores_each_env(impl):
    s = impl.make(20, auto_truncate_episode=False)
    for t in range(3):
        step(impl, s, "a", 1, t)
        step(impl, s, "b", 2, t)
    s.truncate_episodes(["b", "a"])
    assert len(s) == 4
    check_episode(s[0:2], 2, range(3), last_done=False)
    check_episode(s[2:4], 1, range(3), last_done=False)


def test_clear_keeps_episodes_being_collected(impl):
    s = impl.make(20, auto_truncate_episode=False)
    s.add_episode({"x": torch.zeros(3)})  # a schema clear() must forget
    for t in range(3):
        step(impl, s, "e", 0, t)
    s.clear()
    s.truncate_one_episode("e")
    assert len(s) == 2
    check_episode(s[0:2], 0, range(3), last_done=False)


# ----- vector envs -----

def meta(impl, n, env_id="v"):
    return [impl.EnvMeta(env_id=env_id, num_envs=n)]


@pytest.mark.parametrize("unit", ["transition", "episode"])
def test_auto_truncate_splits_sub_envs(impl, unit):
    s = impl.make(40, unit=unit, env_meta_list=meta(impl, 2))
    step(impl, s, "v", 3, 0, n=2)
    step(impl, s, "v", 3, 1, n=2, done=[1])
    assert len(s) == 1  # sub-env 1: 2 transitions, 1 row
    step(impl, s, "v", 3, 2, n=2, done=[0])
    assert len(s) == (3 if unit == "transition" else 2)
    if unit == "transition":
        check_episode(s[0:1], 3, [0, 1], sub=1)
        check_episode(s[1:3], 3, [0, 1, 2], sub=0)
    else:
        rows = sorted((s[i] for i in range(2)), key=lambda r: len(r["action"]))
        check_episode(rows[0], 3, [0, 1], sub=1)
        check_episode(rows[1], 3, [0, 1, 2], sub=0)
    # sub-env 1 went on from step 2, sub-env 0 from step 3
    step(impl, s, "v", 3, 3, n=2)
    step(impl, s, "v", 3, 4, n=2)
    s.truncate_episodes(["v"])
    assert len(s) == (6 if unit == "transition" else 4)
    if unit == "transition":
        check_episode(s[3:4], 3, [3, 4], sub=0, last_done=False)
        check_episode(s[4:6], 3, [2, 3, 4], sub=1, last_done=False)


@pytest.mark.parametrize("unit", ["transition", "episode"])
def test_without_auto_truncate_sub_env_episodes_are_stored_at_once(impl, unit):
    s = impl.make(40, unit=unit, env_meta_list=meta(impl, 3),
                  auto_truncate_episode=False)
    for t in range(4):
        step(impl, s, "v", 5, t, n=3, done=[1] if t == 2 else None)
    assert len(s) == 0
    s.truncate_episodes(["v"])
    if unit == "transition":
        assert len(s) == 9  # env-major: sub-env 0's 3 rows, then 1's, then 2's
        for j in range(3):
            rows = s[3 * j:3 * j + 3]
            assert torch.equal(rows["observation"],
                               torch.stack([obs(50 + j, t) for t in range(3)]))
            assert rows["action"].tolist() == [j * 1000 + 500 + t for t in range(3)]
            assert rows["terminated"].tolist() == [False, j == 1, False]
    else:
        assert len(s) == 3
        out = s[np.arange(3)]
        assert tuple(out["observation"].shape) == (3, 3, 3)
        got = sorted(out["action"].tolist())
        assert got == [[j * 1000 + 500 + t for t in range(3)] for j in range(3)]
    assert np.asarray(all_rows(s)["action"]).size == 9
    with pytest.raises(KeyError):
        s.truncate_episodes(["v"])


@pytest.mark.parametrize("unit", ["transition", "episode"])
def test_sub_env_episodes_wrap_around(impl, unit):
    # each truncation stores 2 sub-env episodes of 3 rows (6 slots) in one push
    s = impl.make(10, unit=unit, env_meta_list=meta(impl, 2),
                  auto_truncate_episode=False)
    for r in range(2):
        for t in range(4):
            step(impl, s, "v", r, t, n=2)
        s.truncate_episodes(["v"])
    if unit == "transition":
        # the second push is split: slots 6..9, then 0..1 (upstream's len is 8
        # here, see test_circular_split_push_counts_both_parts)
        assert len(s) == (8 if impl.upstream else 10)
        got = s[np.arange(8)]["action"].tolist()
        assert got == [1101, 1102, 2, 1000, 1001, 1002, 100, 101]
    else:
        assert len(s) == 2  # the second push starts at slot 0 and evicts the first
        got = sorted(all_rows(s)["action"].tolist())
        assert got == [[100, 101, 102], [1100, 1101, 1102]]
        assert impl.counter(s).tolist() == [0] * 6 + [-1] * 4


def test_oversize_sub_env_push_keeps_whole_episodes(impl):
    s = impl.make(5, unit="episode", env_meta_list=meta(impl, 2),
                  auto_truncate_episode=False)
    for t in range(4):
        step(impl, s, "v", 0, t, n=2)
    s.truncate_episodes(["v"])  # 6 rows > 5: slots 0..4 hold rows 1..5
    assert len(s) == 1
    assert s[0]["action"].tolist() == [1000, 1001, 1002]
    assert impl.counter(s).tolist() == [0, 0, 1, 1, 1]


def test_unknown_env_id_raises_key_error(impl):
    s = impl.make(20, env_meta_list=meta(impl, 2))
    with pytest.raises(KeyError):
        step(impl, s, "w", 0, 0)


def test_without_env_meta_every_env_is_single(impl):
    s = impl.make(20, env_meta_list=None, auto_truncate_episode=False)
    for t in range(3):
        er, pr = pair(impl, "v", 4, t, n=2)
        er.last_terminated, er.last_truncated = False, False
        s.add_transition(er, pr)
    s.truncate_episodes(["v"])
    assert len(s) == 2  # one episode of [2, 2, ...] rows, not split
    rows = s[0:2]
    assert tuple(rows["observation"].shape) == (2, 2, 3)
    want = torch.stack([obs(4, t, 2) for t in range(2)])
    assert torch.equal(rows["observation"], want)


@pytest.mark.parametrize("unit", ["transition", "episode"])
def test_numpy_values_from_gym_envs(impl, unit):
    # gymnasium envs give numpy observations and numpy scalars; extra policy
    # outputs (logits) are stored like the action
    s = impl.make(10, unit=unit)
    for t in range(3):
        er = impl.EnvRet(env_id="e", observation=np.full(3, t, dtype=np.float32),
                         last_reward=np.float32(t), last_terminated=np.bool_(t == 2),
                         info={"x": 1})
        pr = impl.PolicyResponse(env_id="e", action=np.int64(t),
                                 logits=np.full(2, t, dtype=np.float32))
        s.add_transition(er, pr)
    rows = s[0] if unit == "episode" else s[0:2]
    assert set(rows) == KEYS | {"logits"}
    assert rows["observation"].dtype == torch.float32
    assert rows["observation"].tolist() == [[0.0] * 3, [1.0] * 3]
    assert rows["next_observation"].tolist() == [[1.0] * 3, [2.0] * 3]
    assert rows["reward"].dtype == torch.float32 and rows["reward"].tolist() == [1, 2]
    assert rows["terminated"].tolist() == [False, True]
    assert rows["action"].dtype == torch.int64 and rows["action"].tolist() == [0, 1]
    assert rows["logits"].tolist() == [[0.0] * 2, [1.0] * 2]


@pytest.mark.parametrize("unit", ["transition", "episode"])
def test_custom_processing_functions_are_used(impl, unit):
    def postprocess(episode):  # keeps every step, unlike the default
        return {"obs": torch.stack(episode["observation"]),
                "r": torch.tensor(episode["last_reward"], dtype=torch.float64),
                "a": torch.stack(episode["action"])}

    s = impl.make(10, unit=unit, obs_preprocessor=lambda o: o * 2,
                  reward_preprocessor=lambda r: r + 100, postprocess_fn=postprocess)
    for t in range(3):
        step(impl, s, "e", 0, t, done=t == 2)
    assert len(s) == (3 if unit == "transition" else 1)
    rows = s[0:3] if unit == "transition" else s[0]
    assert set(rows) == {"obs", "r", "a"}
    assert torch.equal(rows["obs"], torch.stack([obs(0, t) * 2 for t in range(3)]))
    assert rows["r"].dtype == torch.float64 and rows["r"].tolist() == [100, 101, 102]
    assert rows["a"].tolist() == [0, 1, 2]


def test_custom_preprocess_fn_builds_the_transition(impl):
    def preprocess(transition, env_ret, policy_resp, *fns):
        if env_ret is not None:
            transition["o"] = env_ret.observation
            transition["last_terminated"] = env_ret.last_terminated
        if policy_resp is not None:
            transition["a"] = policy_resp.action
        return transition

    def postprocess(episode):
        return {"o": torch.stack(episode["o"]), "a": torch.stack(episode["a"])}

    s = impl.make(10, preprocess_fn=preprocess, postprocess_fn=postprocess)
    for t in range(2):
        er, pr = pair(impl, "e", 0, t, done=t == 1)
        s.add_data_async(er)
        s.add_data_async(pr)
    assert len(s) == 2
    rows = s[np.arange(2)]
    assert set(rows) == {"o", "a"} and rows["a"].tolist() == [0, 1]
