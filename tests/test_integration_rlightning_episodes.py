"""rlightning ``Storage`` in episode unit: episode reads (equal-length and
ragged), index kinds, ``data_use_counter`` bumps, circular eviction, fixed
overflow, ``get_data`` and ``clear``; fixes R1, R5 and R6.

Which episode index maps to which episode may differ from upstream (its
order is a set's), so shared tests compare episodes as a set; the
fastreplay-only R5 tests pin the order (oldest first).
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
tensordict = pytest.importorskip("tensordict")

import numpy as np  # noqa: E402
from _rlightning_impls import (  # noqa: E402
    check_rows,
    columns,
    fastreplay_impl,
    ids,
    upstream_or_none,
)

TensorDict = tensordict.TensorDict


def ep(k, length):
    """Episode ``k`` of ``length`` steps: transitions 100k .. 100k+length-1."""
    return columns(100 * k, length)


def episodes_of(impl, s, lengths, start=0):
    for i, n in enumerate(lengths):
        s.add_episode(ep(start + i, n))
    return s


def stored(s):
    """The stored episodes as sorted tuples of transition numbers, read from a
    copy (the counters of ``s`` are left alone)."""
    c = copy.deepcopy(s)
    return sorted(tuple(ids(c[i])) for i in range(len(c)))


def span(k, length):
    return tuple(range(100 * k, 100 * k + length))


# ----- reads -----

def test_single_episode_read(impl):
    s = episodes_of(impl, impl.make(10, unit="episode"), [4])
    assert len(s) == s.size == s.get_size() == 1
    out = s[0]
    assert type(out) is dict
    assert out["observation"].shape == (4, 8)
    check_rows(out, list(span(0, 4)))
    assert impl.counter(s).tolist() == [1] * 4 + [-1] * 6
    check_rows(s[-1], list(span(0, 4)))
    assert impl.counter(s).tolist() == [2] * 4 + [-1] * 6


@pytest.mark.parametrize("idx", [slice(None), slice(0, 3), np.array([0, 1, 2]),
                                 torch.tensor([2, 1, 0]), np.array([-1, -2, -3]),
                                 slice(-3, 100)], ids=repr)
def test_equal_length_multi_read_is_a_dict_of_n_by_L(impl, idx):
    s = episodes_of(impl, impl.make(12, unit="episode"), [3, 3, 3])
    out = s[idx]
    assert type(out) is dict
    for k, v in ep(0, 3).items():
        assert out[k].shape == (3, 3, *v.shape[1:]), k
        assert out[k].dtype == v.dtype, k
    got = sorted(tuple(int(a) for a in row) for row in out["action"])
    assert got == [span(0, 3), span(1, 3), span(2, 3)]
    check_rows(out, ids(out))  # every column of every row intact
    assert impl.counter(s).tolist() == [1] * 9 + [-1] * 3


def test_ragged_multi_read_is_a_list_of_tensordicts(impl):
    s = episodes_of(impl, impl.make(12, unit="episode"), [2, 4, 3])
    out = s[np.arange(3)]
    assert type(out) is list and len(out) == 3
    assert all(isinstance(e, TensorDict) for e in out)
    got = sorted(tuple(ids(e)) for e in out)
    assert got == [span(0, 2), span(1, 4), span(2, 3)]
    for e in out:
        assert e.batch_size == torch.Size([len(ids(e))])
        check_rows(e, ids(e))
    assert impl.counter(s).tolist() == [1] * 9 + [-1] * 3
    assert type(s[0:2]) is list


def test_repeated_episode_indexes_count_every_read(impl):
    s = episodes_of(impl, impl.make(8, unit="episode"), [3])
    out = s[np.array([0, 0, -1])]
    assert out["action"].shape == (3, 3)
    assert impl.counter(s).tolist() == [3] * 3 + [-1] * 5
    s[torch.tensor([0, 0])]
    assert impl.counter(s).tolist() == [5] * 3 + [-1] * 5


@pytest.mark.parametrize("idx", [3, -4, np.array([0, 3]), np.array([-4]),
                                 torch.tensor([3]), torch.tensor([-4, 0])], ids=repr)
def test_out_of_range_episode_index_raises_and_counts_nothing(impl, idx):
    s = episodes_of(impl, impl.make(10, unit="episode"), [2, 2, 2])
    with pytest.raises(IndexError):
        s[idx]
    assert impl.counter(s).tolist() == [0] * 6 + [-1] * 4


def test_list_and_num_envs_pushes(impl):
    s = impl.make(20, unit="episode")
    s.add_episode([ep(0, 2), ep(1, 3)])
    env = [ep(5 + j, 4) for j in range(3)]
    s.add_episode({k: torch.stack([e[k] for e in env], dim=1) for k in env[0]},
                  num_envs=3)
    assert len(s) == 5
    assert stored(s) == sorted([span(0, 2), span(1, 3), span(5, 4), span(6, 4),
                                span(7, 4)])
    assert impl.counter(s).tolist() == [0] * 17 + [-1] * 3


def test_tensordict_episode_with_nested_keys(impl):
    n = 3
    pos = torch.arange(2 * n, dtype=torch.float32).reshape(n, 2)
    td = TensorDict({"obs": {"pos": pos}, "action": torch.arange(n)}, batch_size=[n])
    s = impl.make(8, unit="episode")
    s.add_episode(td)
    s.add_episode(td)
    one = s[0]
    assert type(one["obs"]) is dict
    assert torch.equal(one["obs"]["pos"], td["obs", "pos"])
    both = s[np.array([0, 1])]
    assert torch.equal(both["obs"]["pos"], torch.stack([td["obs", "pos"]] * 2))


# ----- get_data -----

def test_get_data_equal_lengths(impl):
    s = episodes_of(impl, impl.make(10, unit="episode"), [3, 3])
    data = s.get_data()
    assert isinstance(data, (dict, TensorDict))
    assert tuple(data["observation"].shape) == (2, 3, 8)
    got = sorted(tuple(int(a) for a in row) for row in data["action"])
    assert got == [span(0, 3), span(1, 3)]
    assert impl.counter(s).tolist() == [1] * 6 + [-1] * 4


def test_get_data_ragged(impl):
    s = episodes_of(impl, impl.make(10, unit="episode"), [3, 2])
    data = s.get_data()
    assert type(data) is list and all(isinstance(e, TensorDict) for e in data)
    assert sorted(tuple(ids(e)) for e in data) == [span(0, 3), span(1, 2)]


# ----- circular eviction -----

def test_episode_that_does_not_fit_starts_at_slot_0_and_evicts_overlaps(impl):
    s = episodes_of(impl, impl.make(10, unit="episode"), [4, 4])
    s[0:2]
    s.add_episode(ep(2, 4))  # [8, 12) does not fit: goes to [0, 4), evicting ep 0
    assert stored(s) == [span(1, 4), span(2, 4)]
    assert impl.counter(s).tolist() == [0] * 4 + [1] * 4 + [-1] * 2
    s.add_episode(ep(3, 5))  # [4, 9) overlaps ep 1
    assert stored(s) == [span(2, 4), span(3, 5)]
    assert impl.counter(s).tolist() == [0] * 9 + [-1]


def test_wrap_evicts_episodes_between_the_write_position_and_the_end(impl):
    s = episodes_of(impl, impl.make(10, unit="episode"), [4, 4, 2])  # full, pointer 0
    s.add_episode(ep(3, 6))  # [0, 6): evicts ep 0 and ep 1
    assert stored(s) == [span(2, 2), span(3, 6)]
    s[np.arange(2)]
    # [6, 11) does not fit: [0, 5), evicting ep 3 (overlap) and ep 2 at
    # [8, 10), which it does not overlap but lies after the write position
    s.add_episode(ep(4, 5))
    assert stored(s) == [span(4, 5)]
    assert impl.counter(s).tolist() == [0] * 5 + [-1] * 5


def test_oversize_episode_keeps_its_last_capacity_steps(impl):
    s = episodes_of(impl, impl.make(10, unit="episode"), [3])
    s.add_episode(ep(1, 13))
    assert len(s) == 1
    check_rows(s[0], list(range(103, 113)))
    assert impl.counter(s).tolist() == [1] * 10
    s.add_episode(ep(2, 2))  # from slot 0: evicts the big one
    assert stored(s) == [span(2, 2)]
    assert impl.counter(s).tolist() == [0] * 2 + [-1] * 8


def test_fixed_mode_overflow_raises_and_changes_nothing(impl):
    s = episodes_of(impl, impl.make(10, mode="fixed", unit="episode"), [6])
    s[0]
    with pytest.raises(RuntimeError):
        s.add_episode(ep(1, 5))
    assert stored(s) == [span(0, 6)]
    assert impl.counter(s).tolist() == [1] * 6 + [-1] * 4
    s.add_episode(ep(2, 4))
    assert stored(s) == [span(0, 6), span(2, 4)]


def test_clear_resets_episodes_counters_and_schema(impl):
    s = episodes_of(impl, impl.make(10, unit="episode"), [3, 3])
    s.clear()
    assert len(s) == 0
    assert impl.counter(s).tolist() == [-1] * 10
    with pytest.raises(IndexError):
        s[0]
    s.add_episode({"z": torch.arange(4, dtype=torch.float64)})
    out = s[0]
    assert set(out) == {"z"} and out["z"].dtype == torch.float64
    assert impl.counter(s).tolist() == [1] * 4 + [-1] * 6


# ----- fixes -----

def test_R1_fixed_episode_storage_refuses_a_push_after_an_exact_fill():
    impl = fastreplay_impl()
    s = episodes_of(impl, impl.make(10, mode="fixed", unit="episode"), [6, 4])
    with pytest.raises(RuntimeError):
        s.add_episode(ep(2, 1))
    assert stored(s) == [span(0, 6), span(1, 4)]
    assert impl.counter(s).tolist() == [0] * 10
    up = upstream_or_none()
    if up is not None:  # upstream wraps and evicts episode 0
        s = episodes_of(up, up.make(10, mode="fixed", unit="episode"), [6, 4])
        s.add_episode(ep(2, 1))
        assert stored(s) == [span(1, 4), span(2, 1)]


def test_R5_episode_index_is_age_order():
    impl = fastreplay_impl()
    s = episodes_of(impl, impl.make(10, unit="episode"), [4, 4])
    s.add_episode(ep(2, 4))  # wraps to slot 0, evicting ep 0
    check_rows(s[0], list(span(1, 4)))
    check_rows(s[1], list(span(2, 4)))
    check_rows(s[-1], list(span(2, 4)))
    check_rows(s[-2], list(span(1, 4)))
    out = s[np.array([1, 0])]
    assert [tuple(int(a) for a in r) for r in out["action"]] == [span(2, 4), span(1, 4)]
    out = s.get_data()
    assert [tuple(int(a) for a in r) for r in out["action"]] == [span(1, 4), span(2, 4)]
    up = upstream_or_none()
    if up is not None:  # upstream: list(IntervalTree), here slot order
        s = episodes_of(up, up.make(10, unit="episode"), [4, 4])
        s.add_episode(ep(2, 4))
        check_rows(s[0], list(span(2, 4)))


def test_R5_many_episodes_in_age_order():
    impl = fastreplay_impl()
    s = episodes_of(impl, impl.make(18, unit="episode"), [3] * 6)
    for i in range(6):
        check_rows(s[i], list(span(i, 3)))
    check_rows(s[2:5], [a for i in range(2, 5) for a in span(i, 3)])
    s.add_episode(ep(6, 5))  # evicts ep 0 and ep 1 (slots 0..5)
    assert len(s) == 5
    assert [ids(s[i])[0] for i in range(5)] == [200, 300, 400, 500, 600]
    up = upstream_or_none()
    if up is not None:  # upstream's order follows the hashes of the intervals
        s = episodes_of(up, up.make(18, unit="episode"), [3] * 6)
        assert [ids(s[i])[0] for i in range(6)] != [0, 100, 200, 300, 400, 500]


def test_R5_env_major_episodes_of_one_push():
    impl = fastreplay_impl()
    env = [ep(j, 3) for j in range(3)]
    s = impl.make(20, unit="episode")
    s.add_episode({k: torch.stack([e[k] for e in env], dim=1) for k in env[0]},
                  num_envs=3)
    for j in range(3):
        check_rows(s[j], list(span(j, 3)))


def test_R5_numpy_scalar_episode_index():
    impl = fastreplay_impl()  # upstream: TypeError for a numpy scalar
    s = episodes_of(impl, impl.make(10, unit="episode"), [2, 3])
    check_rows(s[np.int64(1)], list(span(1, 3)))
    check_rows(s[np.int32(-2)], list(span(0, 2)))
    with pytest.raises(IndexError):
        s[np.int64(2)]
    assert impl.counter(s).tolist() == [1] * 5 + [-1] * 5


def test_R6_get_data_on_an_empty_episode_storage_is_empty():
    impl = fastreplay_impl()
    s = impl.make(5, unit="episode")
    assert len(s.get_data()) == 0
    s.add_episode(ep(0, 2))
    s.clear()
    assert len(s.get_data()) == 0
    up = upstream_or_none()
    if up is not None:
        with pytest.raises(ValueError):
            up.make(5, unit="episode").get_data()
