"""``fastreplay.integrations.rlightning``: the module's surface (exports,
constructor keywords, attributes, types, default functions, ``BufferView``,
``print_timing_summary``), pickling, and fix R7 (unknown mode or unit).

The behaviour of ``Storage`` is tested in ``test_integration_rlightning_*``
(transitions, episodes, active episodes, and a stateful comparison with a
pure-Python oracle).
"""

from __future__ import annotations

import inspect
import pickle

import pytest

torch = pytest.importorskip("torch")
tensordict = pytest.importorskip("tensordict")

import numpy as np  # noqa: E402
from _rlightning_impls import (  # noqa: E402
    KEYWORDS,
    check_rows,
    columns,
    fastreplay_impl,
    ids,
    upstream_or_none,
)

TensorDict = tensordict.TensorDict

EXPORTS = {
    "Storage", "BufferView", "EnvRet", "PolicyResponse", "EnvMeta",
    "default_obs_preprocessor", "default_reward_preprocessor",
    "default_env_ret_preprocess_fn", "default_policy_resp_preprocess_fn",
    "default_preprocess_fn", "default_postprocess_fn",
}


def test_exports():
    from fastreplay.integrations import rlightning

    assert set(rlightning.__all__) == EXPORTS
    for name in EXPORTS:
        assert getattr(rlightning, name) is not None


def test_constructor_keywords_in_upstream_order(impl):
    params = list(inspect.signature(impl.Storage).parameters)
    assert params == KEYWORDS


def test_attributes(impl):
    s = impl.make(7, mode="fixed", unit="episode", auto_truncate_episode=False)
    assert s.capacity == 7
    assert s.mode == "fixed"
    assert s.unit == "episode"
    assert s.auto_truncate_episode is False
    assert s.device == torch.device("cpu")
    assert isinstance(s.device, torch.device)


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu")], ids=str)
def test_device_is_a_torch_device(impl, device):
    s = impl.make(4, device=device)
    assert isinstance(s.device, torch.device) and s.device.type == "cpu"
    s.add_episode(columns(0, 2))
    assert s[0]["observation"].device.type == "cpu"


def test_len_size_get_size(impl):
    for unit, expected in (("transition", 5), ("episode", 2)):
        s = impl.make(10, unit=unit)
        assert len(s) == s.size == s.get_size() == 0
        s.add_episode(columns(0, 2))
        s.add_episode(columns(2, 3))
        assert len(s) == s.size == s.get_size() == expected


def test_positional_construction(impl):
    s = impl.Storage(4, "circular", "transition", None, "cpu",
                     impl.default_obs_preprocessor, impl.default_reward_preprocessor,
                     impl.default_env_ret_preprocess_fn,
                     impl.default_policy_resp_preprocess_fn,
                     impl.default_preprocess_fn, impl.default_postprocess_fn, True)
    s.add_episode(columns(0, 3))
    assert len(s) == 3


def test_print_timing_summary(impl):
    s = impl.make(4)
    s.add_episode(columns(0, 2))
    assert s.print_timing_summary() is None
    assert s.print_timing_summary(reset=True) is None


def test_buffer_view(impl):
    td = TensorDict(columns(0, 5), batch_size=[5])
    view = impl.BufferView(td)
    assert len(view) == view.capacity == 5
    check_rows(view[3], [3])


# ----- types and default functions -----

def test_types(impl):
    er = impl.EnvRet(env_id="e", observation=torch.zeros(2))
    assert er.env_id == "e" and er.last_reward == 0.0
    assert er.last_terminated is False and er.last_truncated is False
    assert set(er.to_dict()) == {"observation", "last_reward", "last_terminated",
                                 "last_truncated", "info"}
    pr = impl.PolicyResponse(env_id="e", action=torch.tensor(1), logp=0.5)
    assert pr.env_id == "e" and pr.to_dict().keys() == {"action", "logp"}
    meta = impl.EnvMeta(env_id="e", num_envs=4)
    assert meta.env_id == "e" and meta.num_envs == 4


def test_default_functions(impl):
    o = [torch.tensor([1.0]), torch.tensor([2.0])]
    assert impl.default_obs_preprocessor(o) is o
    assert impl.default_reward_preprocessor(o) is o
    buf: dict = {}
    for t in range(3):
        er = impl.EnvRet(env_id="e", observation=torch.tensor([float(t)]),
                         last_reward=float(t), last_terminated=t == 2)
        pr = impl.PolicyResponse(env_id="e", action=torch.tensor(10 + t))
        d = impl.default_preprocess_fn({}, er, pr, impl.default_obs_preprocessor,
                                       impl.default_reward_preprocessor,
                                       impl.default_env_ret_preprocess_fn,
                                       impl.default_policy_resp_preprocess_fn)
        assert set(d) == {"observation", "last_reward", "last_terminated",
                          "last_truncated", "info", "action"}
        for k, v in d.items():
            buf.setdefault(k, []).append(v)
    with pytest.raises(ValueError):
        impl.default_preprocess_fn({}, None, None)
    out = impl.default_postprocess_fn(buf)
    assert set(out) == {"observation", "next_observation", "reward", "terminated",
                        "truncated", "action"}
    assert out["observation"].tolist() == [[0.0], [1.0]]
    assert out["next_observation"].tolist() == [[1.0], [2.0]]
    assert out["reward"].tolist() == [1.0, 2.0]
    assert out["terminated"].tolist() == [False, True]
    assert out["action"].tolist() == [10, 11]


def test_env_ret_preprocess_rejects_other_types(impl):
    with pytest.raises(TypeError):
        impl.default_env_ret_preprocess_fn({}, {"observation": 1},
                                           impl.default_obs_preprocessor,
                                           impl.default_reward_preprocessor)
    with pytest.raises(TypeError):
        impl.default_policy_resp_preprocess_fn({}, {"action": 1})


def test_upstream_types_are_reexported_when_importable():
    up = upstream_or_none()
    if up is None:
        pytest.skip("needs upstream rlightning (FR_RLIGHTNING_UPSTREAM=1)")
    fr = fastreplay_impl()
    assert fr.EnvRet is up.EnvRet
    assert fr.PolicyResponse is up.PolicyResponse
    assert fr.EnvMeta is up.EnvMeta
    s = fr.make(10)
    s.add_data_async(up.EnvRet(env_id="e", observation=torch.zeros(1)))


# ----- pickling -----

@pytest.mark.parametrize("unit", ["transition", "episode"])
def test_pickle_round_trip_keeps_data_counters_and_episodes(impl, unit):
    s = impl.make(10, unit=unit)
    for k, n in enumerate([4, 3, 2, 3]):  # wraps
        s.add_episode(columns(100 * k, n))
    s[0]
    s[np.array([1, 1])]
    s2 = pickle.loads(pickle.dumps(s))
    assert len(s2) == len(s)
    assert impl.counter(s2).tolist() == impl.counter(s).tolist()
    assert s2.capacity == 10 and s2.unit == unit and s2.device == torch.device("cpu")
    if unit == "transition":
        assert ids(s2.get_data()) == ids(s.get_data())
    else:
        got = sorted(tuple(ids(s2[i])) for i in range(len(s2)))
        want = sorted(tuple(ids(s[i])) for i in range(len(s)))
        assert got == want
    assert impl.counter(s2).tolist() == impl.counter(s).tolist()
    s2.add_episode(columns(900, 2))  # the copy goes on independently
    assert impl.counter(s2).tolist() != impl.counter(s).tolist()


def test_pickle_round_trip_keeps_episodes_being_collected(impl):
    s = impl.make(10, auto_truncate_episode=False)
    for t in range(3):
        s.add_transition(impl.EnvRet(env_id="e", observation=torch.tensor([float(t)])),
                         impl.PolicyResponse(env_id="e", action=torch.tensor(t)))
    s2 = pickle.loads(pickle.dumps(s))
    s2.truncate_one_episode("e")
    assert len(s2) == 2 and len(s) == 0
    assert s2[np.arange(2)]["action"].tolist() == [0, 1]


def test_pickle_empty_storage(impl):
    s2 = pickle.loads(pickle.dumps(impl.make(3, unit="episode")))
    assert len(s2) == 0
    s2.add_episode(columns(0, 2))
    assert len(s2) == 1


# ----- R7 and the "standard" alias -----

@pytest.mark.parametrize("kw", [{"mode": "ring"}, {"mode": "Circular"},
                                {"unit": "step"}, {"unit": "episodes"}], ids=str)
def test_R7_unknown_mode_or_unit_is_rejected(kw):
    impl = fastreplay_impl()
    with pytest.raises(ValueError):
        impl.make(4, **kw)
    up = upstream_or_none()
    if up is not None:  # upstream accepts any string at construction
        up.make(4, **kw)


def test_standard_is_fixed_if_accepted():
    impl = fastreplay_impl()
    try:
        s = impl.make(3, mode="standard")
    except ValueError:
        pytest.skip("mode='standard' is not accepted (allowed by the spec)")
    s.add_episode(columns(0, 3))
    with pytest.raises(RuntimeError):
        s.add_episode(columns(3, 1))
    assert ids(s.get_data()) == [0, 1, 2]


def test_readme_example_runs(capsys) -> None:  # type: ignore[no-untyped-def]
    """The README's rlightning section runs as shown."""
    from readme_blocks import block

    exec(compile(block("### rlightning's `Storage`"), "README rlightning", "exec"), {})
    assert capsys.readouterr().out.split() == ["1000", "torch.Size([256,", "8])",
                                               "True"]
