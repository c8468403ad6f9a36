"""ReplayBuffer's errors name the field or argument and the fix, and leave
the buffer as it was."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from fastreplay import ReplayBuffer, errors


def _buffer() -> ReplayBuffer:
    rb = ReplayBuffer(10, alpha=0.6, seed=0)
    rb.add(obs=np.zeros(2), reward=1)
    return rb


Case = tuple[str, Callable[[ReplayBuffer], Any], type[BaseException], list[str]]
CASES: list[Case] = [
    ("missing field", lambda rb: rb.add(obs=np.zeros(2)), ValueError,
     ["missing field(s) ['reward']", "['obs', 'reward']", "spec="]),
    ("unexpected field", lambda rb: rb.add(obs=np.zeros(2), reward=1, extra=3),
     ValueError, ["unexpected field(s) ['extra']"]),
    ("float into int field", lambda rb: rb.add(obs=np.zeros(2), reward=0.5), ValueError,
     ["'reward'", "np.float32", "1.0 rather than 1"]),
    ("wrong shape", lambda rb: rb.add(obs=np.zeros(3), reward=1), ValueError,
     ["'obs'", "(2,)", "spec="]),
    ("rows differ", lambda rb: rb.add_batch(obs=np.zeros((2, 2)),
                                            reward=np.zeros(3, np.int64)),
     ValueError, ["'obs': 2", "'reward': 3", "same leading axis"]),
    ("negative priority", lambda rb: rb.add(obs=np.zeros(2), reward=1, priority=-1),
     errors.InvalidPriorityError,
     ["ReplayBuffer index", "-1.0", ">= 0", "abs(td_error)"]),
    ("nan priority in a batch",
     lambda rb: rb.add_batch(obs=np.zeros((2, 2)), reward=np.zeros(2, np.int64),
                             priorities=[1.0, float("nan")]),
     errors.InvalidPriorityError, ["NaN", "ReplayBuffer index"]),
    ("negative update", lambda rb: rb.update_priorities([0], [-1.0]),
     errors.InvalidPriorityError, ["ReplayBuffer index 0", "nothing was changed"]),
    ("batch_size 0", lambda rb: rb.sample(0), ValueError,
     ["batch_size (0)", "rb.sample("]),
    ("batch_size float", lambda rb: rb.sample(2.5), TypeError, ["batch_size", "float"]),
    ("bad beta", lambda rb: rb.sample(1, beta=-1), ValueError, ["beta"]),
]


@pytest.mark.parametrize("trigger, cls, names", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_message_names_the_field_and_fix(trigger: Callable[[ReplayBuffer], Any],
                                          cls: type[BaseException],
                                          names: list[str]) -> None:
    rb = _buffer()
    before = rb.sample(1)["indexes"].tolist()
    with pytest.raises(cls) as info:
        trigger(rb)
    for name in names:
        assert name in str(info.value), (name, str(info.value))
    assert len(rb) == 1 and rb.sample(1)["indexes"].tolist() == before
    rb.add(obs=np.ones(2), reward=2)  # still usable
    assert len(rb) == 2


@pytest.mark.parametrize("capacity, cls", [(0, ValueError), (-3, ValueError),
                                           (1.5, TypeError), ("10", TypeError)])
def test_capacity_is_named(capacity: Any, cls: type[BaseException]) -> None:
    with pytest.raises(cls, match="ReplayBuffer capacity"):
        ReplayBuffer(capacity)


def test_numpy_int_capacity_is_fine() -> None:
    assert ReplayBuffer(np.int64(5)).capacity == 5
