"""rlightning ``Storage`` in transition unit: pushes (wrap-around, oversize,
fixed-mode overflow), every index kind, ``data_use_counter``, ``get_data``,
``clear``, nested keys and dtypes.

Shared tests run against fastreplay's adapter and, with
``FR_RLIGHTNING_UPSTREAM=1``, against rlightning's own ``Storage``; the
fixes R1-R4 and R6 (``adapters-spec.md`` section 2) are fastreplay-only
regression tests that also check upstream shows the bug when it is
importable.
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


def filled(impl, capacity, pushes, mode="circular"):
    """A transition-unit storage after pushing runs of the given lengths,
    numbered consecutively from 0."""
    s = impl.make(capacity, mode=mode)
    n = 0
    for k in pushes:
        s.add_episode(columns(n, k))
        n += k
    return s


def slot_ids(impl, s):
    """Transition numbers in slot order, read from a copy so the counters
    of ``s`` stay as they are."""
    return ids(copy.deepcopy(s).get_data())


# ----- pushes -----

def test_push_and_read_back(impl):
    s = filled(impl, 10, [3, 2])
    assert len(s) == s.size == s.get_size() == 5
    assert slot_ids(impl, s) == [0, 1, 2, 3, 4]
    assert impl.counter(s).tolist() == [0] * 5 + [-1] * 5
    check_rows(s[np.arange(5)], [0, 1, 2, 3, 4])
    assert impl.counter(s).tolist() == [1] * 5 + [-1] * 5


def test_circular_push_crossing_the_end_is_split(impl):
    s = filled(impl, 5, [3, 4])
    assert len(s) == 5
    # slots 3, 4 get 3, 4; the rest (5, 6) wraps to slots 0, 1
    assert slot_ids(impl, s) == [5, 6, 2, 3, 4]
    check_rows(s[0], [5])
    assert impl.counter(s).tolist() == [1, 0, 0, 0, 0]
    s.add_episode(columns(7, 1))  # the write position is slot 2
    assert slot_ids(impl, s) == [5, 6, 7, 3, 4]


def test_circular_split_push_counts_both_parts():
    # Not one of R1-R7: upstream adds only the wrapped part of a split push
    # to its size, so 2 + 5 items on capacity 5 give len 4 (slot 4 unread).
    impl = fastreplay_impl()
    s = filled(impl, 5, [2, 5])
    assert len(s) == 5
    assert slot_ids(impl, s) == [5, 6, 2, 3, 4]
    s.add_episode(columns(7, 1))
    assert slot_ids(impl, s) == [5, 6, 7, 3, 4]
    up = upstream_or_none()
    if up is not None:
        s = filled(up, 5, [2, 5])
        assert len(s) == 4


@pytest.mark.parametrize("first", [0, 2])
def test_circular_oversize_push_keeps_the_last_capacity_items_from_slot_0(impl, first):
    s = filled(impl, 5, [first, 7] if first else [7])
    last = first + 7
    assert len(s) == 5
    assert slot_ids(impl, s) == list(range(last - 5, last))
    assert impl.counter(s).tolist() == [0] * 5
    s.add_episode(columns(last, 1))
    assert slot_ids(impl, s) == [last] + list(range(last - 4, last))


def test_circular_counters_of_overwritten_slots_restart_at_0(impl):
    s = filled(impl, 4, [4])
    s[np.arange(4)]
    s[np.arange(4)]
    s.add_episode(columns(4, 3))
    assert impl.counter(s).tolist() == [0, 0, 0, 2]


def test_fixed_mode_overflow_raises_and_changes_nothing(impl):
    s = filled(impl, 5, [3], mode="fixed")
    s[1]
    with pytest.raises(RuntimeError):
        s.add_episode(columns(3, 3))
    assert len(s) == 3
    assert impl.counter(s).tolist() == [0, 1, 0, -1, -1]
    assert slot_ids(impl, s) == [0, 1, 2]
    s.add_episode(columns(3, 2))  # fills it exactly
    assert slot_ids(impl, s) == [0, 1, 2, 3, 4]


def test_fixed_mode_refuses_a_push_longer_than_capacity(impl):
    s = impl.make(5, mode="fixed")
    with pytest.raises(RuntimeError):
        s.add_episode(columns(0, 6))
    assert len(s) == 0
    assert impl.counter(s).tolist() == [-1] * 5


def test_list_of_pushes(impl):
    s = impl.make(10)
    s.add_episode([columns(0, 2), columns(2, 3)])
    assert slot_ids(impl, s) == [0, 1, 2, 3, 4]


def test_push_with_num_envs_is_env_major(impl):
    env = [columns(100 * j, 3) for j in range(2)]
    ep = {k: torch.stack([env[0][k], env[1][k]], dim=1) for k in env[0]}
    s = impl.make(10)
    s.add_episode(ep, num_envs=2)
    assert slot_ids(impl, s) == [0, 1, 2, 100, 101, 102]


def test_tensordict_push(impl):
    s = impl.make(10)
    s.add_episode(TensorDict(columns(0, 4), batch_size=[4]))
    check_rows(s[np.arange(4)], [0, 1, 2, 3])


# ----- dtypes, shapes, nested keys, types out -----

def test_dtypes_and_shapes_are_preserved(impl):
    n = 5
    g = torch.Generator().manual_seed(0)
    cols = {
        "f64": torch.randn(n, 3, 2, generator=g, dtype=torch.float64),
        "f16": torch.randn(n, generator=g).to(torch.float16),
        "i32": torch.randint(-9, 9, (n, 4), generator=g, dtype=torch.int32),
        "u8": torch.randint(0, 255, (n, 2, 2), generator=g, dtype=torch.uint8),
        "b": torch.rand(n, generator=g) > 0.5,
        "i64": torch.arange(n),
    }
    s = impl.make(8)
    s.add_episode(cols)
    one = s[3]
    many = s[np.array([4, 0])]
    for k, v in cols.items():
        assert one[k].dtype == v.dtype and torch.equal(one[k], v[3]), k
        assert many[k].dtype == v.dtype and torch.equal(many[k], v[[4, 0]]), k
    data = s.get_data()
    assert isinstance(data, TensorDict)
    assert data.batch_size == torch.Size([n])
    for k, v in cols.items():
        assert torch.equal(data[k], v), k


def test_reads_are_plain_dicts_of_cpu_tensors(impl):
    s = filled(impl, 10, [4])
    for idx in (1, slice(0, 2), np.array([0, 3]), torch.tensor([2])):
        out = s[idx]
        assert type(out) is dict
        assert set(out) == set(columns(0, 1))
        assert all(isinstance(v, torch.Tensor) and v.device.type == "cpu"
                   for v in out.values())


def test_nested_keys(impl):
    n = 4
    td = TensorDict({
        "obs": {"pos": torch.arange(n * 2, dtype=torch.float32).reshape(n, 2),
                "id": torch.arange(n)},
        "reward": torch.arange(n, dtype=torch.float32),
    }, batch_size=[n])
    s = impl.make(6)
    s.add_episode(td)
    one = s[2]
    assert type(one) is dict and type(one["obs"]) is dict
    assert torch.equal(one["obs"]["pos"], td["obs", "pos"][2])
    assert torch.equal(one["obs"]["id"], td["obs", "id"][2])
    many = s[np.array([3, 1])]
    assert torch.equal(many["obs"]["pos"], td["obs", "pos"][[3, 1]])
    assert torch.equal(many["reward"], td["reward"][[3, 1]])
    data = s.get_data()
    assert torch.equal(data["obs", "id"], td["obs", "id"])


# ----- index kinds (a full storage: upstream and fastreplay agree) -----

@pytest.mark.parametrize("idx, expected", [
    (2, [2]),
    (-1, [5]),
    (-6, [0]),
    (np.int64(3), [3]),
    (np.int32(1), [1]),
    (slice(1, 4), [1, 2, 3]),
    (slice(None, None, 2), [0, 2, 4]),
    (slice(-2, None), [4, 5]),
    (slice(2, 100), [2, 3, 4, 5]),
    (np.array([4, 0, 4]), [4, 0, 4]),
    (np.array([-1, -6]), [5, 0]),
    (np.array([1, 2], dtype=np.int32), [1, 2]),
    (torch.tensor([3, 1]), [3, 1]),
    (torch.tensor([-2]), [4]),
], ids=repr)
def test_index_kinds(impl, idx, expected):
    s = filled(impl, 6, [6])
    out = s[idx]
    check_rows(out, expected)
    if isinstance(idx, (int, np.integer)):
        assert out["observation"].shape == (8,)
    else:
        assert out["observation"].shape == (len(expected), 8)


@pytest.mark.parametrize("idx", [
    6, -7, 100, np.int64(6), np.array([0, 6]), np.array([-7]),
    torch.tensor([6]), torch.tensor([1, -7]),
], ids=repr)
def test_out_of_range_index_raises_and_counts_nothing(impl, idx):
    s = filled(impl, 6, [6])
    with pytest.raises(IndexError):
        s[idx]
    assert impl.counter(s).tolist() == [0] * 6


def test_out_of_range_on_a_partly_filled_storage(impl):
    s = filled(impl, 6, [4])
    for idx in (4, 5, np.array([4]), np.array([0, 5]),
                torch.tensor([0, 5]), np.array([-1, 4], dtype=np.int32)):
        with pytest.raises(IndexError):
            s[idx]
    assert impl.counter(s).tolist() == [0] * 4 + [-1] * 2


# ----- data_use_counter -----

def test_counter_starts_unused_and_marks_written_slots(impl):
    s = impl.make(6)
    c = impl.counter(s)
    assert c.dtype == np.int32 and c.shape == (6,)
    assert c.tolist() == [-1] * 6
    s.add_episode(columns(0, 2))
    assert impl.counter(s).tolist() == [0, 0, -1, -1, -1, -1]


def test_counter_counts_reads_of_every_index_kind(impl):
    s = filled(impl, 6, [6])
    s[2]
    s[-1]
    s[np.int64(0)]
    s[1:3]
    s[np.array([3, 4])]
    s[torch.tensor([4])]
    assert impl.counter(s).tolist() == [1, 1, 2, 1, 2, 1]


def test_get_data_counts_as_a_read(impl):
    # upstream's get_data is self._data[:size], a read like any other
    s = filled(impl, 6, [4])
    s.get_data()
    assert impl.counter(s).tolist() == [1] * 4 + [-1] * 2


def test_data_use_counter_property():
    impl = fastreplay_impl()
    s = filled(impl, 5, [2])
    c = s.data_use_counter
    assert isinstance(c, np.ndarray) and c.dtype == np.int32 and c.shape == (5,)
    assert c.tolist() == [0, 0, -1, -1, -1]


# ----- get_data, read pattern, clear -----

def test_get_data_is_in_slot_order_after_a_wrap(impl):
    s = filled(impl, 4, [3, 3])
    data = s.get_data()
    assert isinstance(data, TensorDict)
    assert data.batch_size == torch.Size([4])
    check_rows(data, [4, 5, 2, 3])


def test_random_choice_read_pattern(impl):
    s = filled(impl, 50, [40, 30])  # wrapped
    order = slot_ids(impl, s)
    np.random.seed(0)
    idx = np.random.choice(len(s), 64)
    out = s[idx]
    assert out["observation"].shape == (64, 8)
    check_rows(out, [order[i] for i in idx])
    assert (impl.counter(s)[np.unique(idx)] >= 1).all()


def test_clear_resets_data_counters_and_schema(impl):
    s = filled(impl, 5, [4])
    s[0]
    s.clear()
    assert len(s) == 0 and s.size == 0 and s.get_size() == 0
    assert impl.counter(s).tolist() == [-1] * 5
    with pytest.raises(IndexError):
        s[0]
    s.add_episode({"other": torch.arange(3, dtype=torch.int16)})
    assert len(s) == 3
    out = s[np.array([2, 0])]
    assert set(out) == {"other"}
    assert out["other"].dtype == torch.int16 and out["other"].tolist() == [2, 0]
    assert impl.counter(s).tolist() == [1, 0, 1, -1, -1]
    s.add_episode({"other": torch.arange(3, 7, dtype=torch.int16)})  # wraps
    assert s.get_data()["other"].tolist() == [5, 6, 2, 3, 4]


# ----- fixes (fastreplay-only regression tests) -----

def test_R1_fixed_mode_refuses_a_push_after_an_exact_fill():
    impl = fastreplay_impl()
    for pushes in ([5], [3, 2]):
        s = filled(impl, 5, pushes, mode="fixed")
        with pytest.raises(RuntimeError):
            s.add_episode(columns(5, 1))
        assert slot_ids(impl, s) == [0, 1, 2, 3, 4]
        assert impl.counter(s).tolist() == [0] * 5
    up = upstream_or_none()
    if up is not None:  # upstream's pointer wraps: slot 0 is silently overwritten
        s = filled(up, 5, [5], mode="fixed")
        s.add_episode(columns(5, 1))
        assert slot_ids(up, s) == [5, 1, 2, 3, 4]


def test_R2_repeated_indexes_count_every_use():
    impl = fastreplay_impl()
    s = filled(impl, 6, [6])
    s[np.array([1, 1, 1, 4])]
    s[torch.tensor([4, 2, 4])]
    assert impl.counter(s).tolist() == [0, 3, 1, 0, 3, 0]
    up = upstream_or_none()
    if up is not None:  # upstream: counter[idx] += 1 counts each slot once
        s = filled(up, 6, [6])
        s[np.array([1, 1, 1, 4])]
        assert up.counter(s).tolist() == [0, 1, 0, 0, 1, 0]


@pytest.mark.parametrize("idx, expected", [
    (-1, [3]),
    (-4, [0]),
    (slice(None), [0, 1, 2, 3]),
    (slice(-2, None), [2, 3]),
    (slice(2, 100), [2, 3]),
    (slice(-100, 2), [0, 1]),
    (slice(None, None, 3), [0, 3]),
    (np.array([-1, -4, 1]), [3, 0, 1]),
    (torch.tensor([-2]), [2]),
    (np.int64(-1), [3]),
], ids=repr)
def test_R3_negative_indexes_and_slices_resolve_against_len(idx, expected):
    impl = fastreplay_impl()
    s = filled(impl, 6, [4])
    check_rows(s[idx], expected)
    counts = [0] * 4 + [-1] * 2
    for i in expected:
        counts[i] += 1
    assert impl.counter(s).tolist() == counts


@pytest.mark.parametrize("idx", [-5, -6, np.array([-5]), torch.tensor([0, -6]),
                                 np.int64(-5)], ids=repr)
def test_R3_negative_index_beyond_len_raises(idx):
    impl = fastreplay_impl()
    s = filled(impl, 6, [4])
    with pytest.raises(IndexError):
        s[idx]
    assert impl.counter(s).tolist() == [0] * 4 + [-1] * 2


def test_R3_upstream_resolves_against_capacity():
    up = upstream_or_none()
    if up is None:
        pytest.skip("needs upstream rlightning (FR_RLIGHTNING_UPSTREAM=1)")
    s = filled(up, 6, [4])
    with pytest.raises(IndexError):
        s[-1]
    with pytest.raises(IndexError):
        s[:]
    check_rows(s[-6], [0])


@pytest.mark.parametrize("scalar", [np.int64, np.int32, np.uint64, np.int16])
def test_R4_numpy_integer_scalars_are_range_checked(scalar):
    impl = fastreplay_impl()
    s = filled(impl, 6, [4])
    for k in (4, 5):
        with pytest.raises(IndexError):
            s[scalar(k)]
    assert impl.counter(s).tolist() == [0] * 4 + [-1] * 2
    check_rows(s[scalar(3)], [3])
    up = upstream_or_none()
    if up is not None:  # upstream reads the unwritten slot and marks it used
        s = filled(up, 6, [4])
        s[scalar(4)]
        assert up.counter(s).tolist() == [0] * 5 + [-1]


def test_R6_get_data_on_an_empty_storage_is_empty():
    impl = fastreplay_impl()
    s = impl.make(5)
    assert len(s.get_data()) == 0
    s.add_episode(columns(0, 2))
    s.clear()
    assert len(s.get_data()) == 0
    assert impl.counter(s).tolist() == [-1] * 5
    up = upstream_or_none()
    if up is not None:
        with pytest.raises(ValueError):
            up.make(5).get_data()
