"""``ReplayBuffer`` types: declared specs (``spec=`` / cpprb's
``env_dict=``), conversions, float32 weights, dict and nested fields, and
``sample`` on a buffer below ``min_size``."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from fastreplay import ReplayBuffer, _core
from fastreplay.errors import DeadlineExceededError, FailedPreconditionError

JOIN_TIMEOUT = 10.0
SPEC = {"obs": (np.float32, (4,)), "action": (np.int64, ()),
        "reward": (np.float32, ()), "done": (np.bool_, ())}


def step(i: int, **over: Any) -> dict[str, Any]:
    t = {"obs": np.full(4, i, np.float32), "action": i % 3, "reward": i * 0.5,
         "done": i % 2 == 0}
    t.update(over)
    return t


class TestDeclaredSpec:
    def test_int_then_float_reward(self) -> None:
        rb = ReplayBuffer(8, spec=SPEC)
        rb.add(**step(0, reward=1))
        rb.add(**step(1, reward=0.5))
        out = rb.sample(32)
        assert out["reward"].dtype == np.float32
        assert out["action"].dtype == np.int64
        assert set(out["reward"].tolist()) == {1.0, 0.5}

    def test_add_batch_converts(self) -> None:
        rb = ReplayBuffer(8, spec=SPEC)
        rb.add_batch(obs=np.zeros((3, 4)), action=[0, 1, 2], reward=[1, 2, 3],
                     done=[True, False, True])
        out = rb.sample(16)
        assert out["obs"].dtype == np.float32 and out["obs"].shape == (16, 4)
        assert out["reward"].dtype == np.float32

    def test_unsafe_cast_names_field_and_spec(self) -> None:
        rb = ReplayBuffer(8, spec=SPEC)
        with pytest.raises(ValueError, match=r"field 'action'.*spec \(int64, \(\)\)"):
            rb.add(**step(0, action=0.5))
        with pytest.raises(ValueError, match=r"field 'obs'.*shape \(3,\).*\(float32"):
            rb.add(**step(0, obs=np.zeros(3, np.float32)))
        assert len(rb) == 0

    def test_integers_must_fit(self) -> None:
        rb = ReplayBuffer(8, spec={"x": (np.uint8, ())})
        rb.add(x=3)
        rb.add_batch(x=np.array([4, 255], np.int64))
        with pytest.raises(ValueError, match="'x'"):
            rb.add(x=300)
        with pytest.raises(ValueError, match="'x'"):
            rb.add(x=-1)
        assert sorted(set(rb.sample(64)["x"].tolist())) == [3, 4, 255]

    def test_undeclared_and_missing_fields(self) -> None:
        rb = ReplayBuffer(8, spec=SPEC)
        with pytest.raises(ValueError, match=r"\['extra'\] not declared"):
            rb.add(**step(0), extra=1)
        t = step(0)
        del t["done"]
        with pytest.raises(ValueError, match=r"\['done'\] missing"):
            rb.add(**t)

    def test_declared_add_takes_compiled_path(self, monkeypatch: Any) -> None:
        rb = ReplayBuffer(8, spec=SPEC)

        def general(*a: Any, **k: Any) -> Any:
            raise AssertionError("general path taken")
        monkeypatch.setattr(_core, "insert_rows", general)
        rb.add(**step(0))  # Python int/float: converted, then compiled
        rb.add(**step(1, obs=np.ones(4, np.float32), action=np.int64(2)))
        rb.add_batch(obs=np.zeros((2, 4), np.float32), action=np.array([0, 1]),
                     reward=np.array([0.5, 1.0], np.float32),
                     done=np.array([1, 0], bool))
        assert len(rb) == 4

    def test_spec_leaves_with_dtype_and_shape(self) -> None:
        rb = ReplayBuffer(4, spec={"obs": np.zeros((2, 3), np.uint8),
                                   "r": ("float32", [])})
        rb.add(obs=np.ones((2, 3), np.uint8), r=1)
        assert rb.sample(2)["obs"].shape == (2, 2, 3)

    def test_bad_specs(self) -> None:
        with pytest.raises(ValueError, match="not supported"):
            ReplayBuffer(4, spec={"s": (object, ())})
        with pytest.raises(TypeError, match="shape"):
            ReplayBuffer(4, spec={"s": (np.float32, "x")})
        with pytest.raises(TypeError, match="pair"):
            ReplayBuffer(4, spec={"s": np.float32})
        with pytest.raises(ValueError, match="not both"):
            ReplayBuffer(4, spec={"a": (np.float32, ())}, env_dict={"a": {}})
        with pytest.raises(ValueError, match="compression names"):
            ReplayBuffer(4, spec={"a": (np.float32, ())}, compression={"b": None})

    def test_next_of_declares_next_twin(self) -> None:
        rb = ReplayBuffer(8, next_of="obs", spec={"obs": (np.float32, (2,)),
                                                  "r": (np.float32, ())})
        rb.add(obs=[0, 0], next_obs=[1, 1], r=1)
        rb.add(obs=[1, 1], next_obs=[2, 2], r=0.5)
        out = rb.sample(8)
        assert out["next_obs"].dtype == np.float32
        np.testing.assert_array_equal(out["next_obs"], out["obs"] + 1)


class TestEnvDict:
    def test_cpprb_defaults(self) -> None:
        rb = ReplayBuffer(8, env_dict={"obs": {"shape": (4,), "dtype": np.float32},
                                       "act": {"dtype": np.int32}, "rew": {}})
        rb.add(obs=np.zeros(4), act=1, rew=0.5)  # a scalar into cpprb's shape 1
        rb.add_batch(obs=np.zeros((2, 4)), act=[[1], [2]], rew=[0.5, 1.0])
        out = rb.sample(4)
        assert out["rew"].shape == (4, 1) and out["rew"].dtype == np.float32
        assert out["act"].shape == (4, 1) and out["act"].dtype == np.int32

    def test_unknown_keys(self) -> None:
        with pytest.raises(ValueError, match="add_shape"):
            ReplayBuffer(8, env_dict={"obs": {"add_shape": 2}})


class TestUndeclared:
    def test_later_float_reward_says_what_to_do(self) -> None:
        rb = ReplayBuffer(8)
        rb.add(obs=np.zeros(2), reward=1)
        with pytest.raises(ValueError, match=r"reward.*spec=\{'reward': \(np.float32, "
                                             r"\(\)\).*1.0 rather than 1"):
            rb.add(obs=np.zeros(2), reward=0.5)


class TestWeights:
    @pytest.mark.parametrize("alpha", [None, 0.6])
    def test_weights_float32(self, alpha: float | None) -> None:
        rb = ReplayBuffer(8, alpha=alpha, seed=0)
        rb.add_batch(x=np.arange(4), priorities=[1.0, 2.0, 3.0, 4.0])
        out = rb.sample(16, beta=0.4)
        assert out["weights"].dtype == np.float32
        assert out["probabilities"].dtype == np.float64
        assert out["weights"].max() == np.float32(1.0)


class TestNested:
    def test_dict_observation(self) -> None:
        rb = ReplayBuffer(8, seed=0, compression={"obs": None})
        for i in range(3):
            rb.add(obs={"image": np.full((2, 2), i, np.uint8),
                        "state": np.full(3, i, np.float32)},
                   action=i, next_obs={"image": np.full((2, 2), i + 1, np.uint8),
                                       "state": np.full(3, i + 1, np.float32)})
        out = rb.sample(16)
        assert set(out["obs"]) == {"image", "state"}
        assert out["obs"]["image"].shape == (16, 2, 2)
        np.testing.assert_array_equal(out["obs"]["state"][:, 0], out["action"])
        np.testing.assert_array_equal(out["next_obs"]["image"][:, 0, 0],
                                      out["action"] + 1)

    def test_deeper_nest_and_batches(self) -> None:
        rb = ReplayBuffer(8, seed=0)
        rb.add_batch(obs={"a": {"b": np.arange(3), "c": np.zeros((3, 2))}},
                     r=np.arange(3.0))
        rb.add(obs={"a": {"b": 3, "c": np.zeros(2)}}, r=3.0)
        out = rb.sample(16)
        np.testing.assert_array_equal(out["obs"]["a"]["b"], out["r"].astype(int))
        with pytest.raises(ValueError, match="missing field"):
            rb.add(obs={"a": {"b": 3}}, r=1.0)

    def test_bad_nests_name_the_field(self) -> None:
        rb = ReplayBuffer(8)
        rb.add(obs={"a": 1, "b": 2}, r=1.0)
        with pytest.raises(ValueError, match="'obs/a' is given twice"):
            rb.add(obs={"a": 1, "b": 2}, r=1.0, **{"obs/a": 3})
        with pytest.raises(ValueError, match="'obs' is an empty dict"):
            rb.add(obs={}, r=1.0)
        with pytest.raises(TypeError, match="got 1 in field 'obs'"):
            rb.add(obs={1: 2, "b": 2}, r=1.0)
        assert len(rb) == 1

    def test_declared_nested(self) -> None:
        rb = ReplayBuffer(8, spec={"obs": {"image": (np.uint8, (2,)),
                                           "state": (np.float32, ())}})
        rb.add(obs={"image": [1, 2], "state": 1})
        out = rb.sample(2)
        assert out["obs"]["state"].dtype == np.float32

    def test_nested_frames_refused(self) -> None:
        rb = ReplayBuffer(8, next_of="obs")
        with pytest.raises(ValueError, match="nested"):
            rb.add(obs={"a": 1}, next_obs={"a": 2})


def sample_error(rb: ReplayBuffer, n: int) -> BaseException:
    """What ``rb.sample(n)`` raises, run in a thread: a sample that waits
    instead is woken by closing the table and fails the test."""
    got: list[BaseException] = []

    def run() -> None:
        try:
            rb.sample(n)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            got.append(exc)
    th = threading.Thread(target=run, name="sample-below-min-size", daemon=True)
    th.start()
    th.join(JOIN_TIMEOUT)
    if th.is_alive():  # it waits: wake it so the test ends
        rb.table.close()
        th.join(JOIN_TIMEOUT)
        pytest.fail("sample below min_size waited instead of raising")
    assert len(got) == 1, "sample below min_size returned"
    return got[0]


class TestEmptySample:
    def test_empty_raises_at_once(self) -> None:
        exc = sample_error(ReplayBuffer(10), 4)
        assert isinstance(exc, FailedPreconditionError)
        assert isinstance(exc, RuntimeError)
        msg = str(exc)
        assert "0 transitions stored" in msg and "min_size=1" in msg
        assert "timeout=" in msg

    def test_below_min_size(self) -> None:
        rb = ReplayBuffer(10, min_size=3)
        rb.add(x=1)
        exc = sample_error(rb, 1)
        assert isinstance(exc, FailedPreconditionError)
        assert "1 transitions stored" in str(exc)
        with pytest.raises(DeadlineExceededError):
            rb.sample(1, timeout=0.01)
        rb.add_batch(x=[2, 3])
        assert len(rb.sample(2)["x"]) == 2
