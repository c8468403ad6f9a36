"""Values an append reads without the buffer protocol (fastreplay/_npfast.pxi):
numpy scalars of every supported type and small C-contiguous native arrays
must store exactly what the buffer protocol stored, and every other value
(non-native byte order, strided views, large arrays, 0-d and empty arrays)
must still take the general path with the same result."""

from __future__ import annotations

import numpy as np
import pytest

import fastreplay
from fastreplay import _core

SCALAR_TYPES = [np.float32, np.int32, np.int64, np.float64, np.bool_, np.uint8,
                np.int8, np.int16, np.uint16, np.uint32, np.uint64, np.float16,
                np.complex64, np.complex128]


@pytest.fixture()
def client():
    sel = fastreplay.selectors
    table = fastreplay.Table("t", sel.Fifo(), sel.Fifo(), 100,
                             fastreplay.rate_limiters.MinSize(1))
    server = fastreplay.Server([table])
    yield server.localhost_client()
    server.stop()


def test_the_fast_path_is_on() -> None:
    arrays, scalar_types = _core._npfast_state()
    assert arrays
    assert {np.float32, np.int32, np.int64, np.float64, np.bool_, np.uint8} <= set(
        scalar_types)


def _round_trip(client, values):  # type: ignore[no-untyped-def]
    """Append each value as one step of column 'v'; read every cell back."""
    with client.trajectory_writer(len(values)) as w:
        for v in values:
            w.append({"v": v})
        return w.history["v"][:].numpy()


@pytest.mark.parametrize("t", SCALAR_TYPES, ids=lambda t: t.__name__)
def test_numpy_scalars_store_their_value_and_dtype(client, t) -> None:  # type: ignore[no-untyped-def]
    values = [t(0), t(1), t(3) if t is not np.bool_ else t(True)]
    if np.dtype(t).kind == "f":
        values.append(t(-2.5))
    got = _round_trip(client, values)
    assert got.dtype == np.dtype(t)
    np.testing.assert_array_equal(got, np.array(values, dtype=t))


@pytest.mark.parametrize("dtype", ["f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2",
                                   "u4", "u8", "?", "f2", "c8", "c16"])
def test_small_arrays_store_their_rows(client, dtype) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    values = [(rng.random((3, 4)) * 100).astype(dtype) for _ in range(4)]
    got = _round_trip(client, values)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, np.stack(values))


@pytest.mark.parametrize("make", [
    lambda k: np.arange(12, dtype=">f4").reshape(3, 4) + k,   # non-native order
    lambda k: (np.arange(24, dtype=np.float32).reshape(3, 8) + k)[:, ::2],  # strided
    lambda k: np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4) + k),
    lambda k: np.full((64, 64), k, dtype=np.float64),  # 32 KiB: the GIL-free path
    lambda k: np.array(k, dtype=np.int16),              # 0-d
    lambda k: np.zeros((0, 3), dtype=np.float32),       # empty
    lambda k: np.arange(6, dtype=np.float32).reshape(2, 3)[::-1] + k,  # copied view
], ids=["big-endian", "strided", "fortran", "32KiB", "0-d", "empty", "reversed"])
def test_other_arrays_take_the_general_path(client, make) -> None:  # type: ignore[no-untyped-def]
    values = [make(k) for k in range(3)]
    got = _round_trip(client, values)
    want = np.stack([np.asarray(v) for v in values])
    assert got.dtype == want.dtype.newbyteorder("=")
    np.testing.assert_array_equal(got, want)


def test_fast_values_are_checked_against_the_column(client) -> None:  # type: ignore[no-untyped-def]
    with client.trajectory_writer(3) as w:
        w.append({"obs": np.zeros(4, np.float32), "a": np.int32(1)})
        wrong, shape = "wrong dtype provided for column", "incompatible shape provided"
        with pytest.raises(ValueError, match=wrong + r" \('a',\). Got int64"):
            w.append({"obs": np.zeros(4, np.float32), "a": np.int64(1)})
        with pytest.raises(ValueError, match=shape + r" for column \('obs',\)"):
            w.append({"obs": np.zeros(5, np.float32), "a": np.int32(1)})
        with pytest.raises(ValueError, match=wrong + r" \('obs',\). Got double"):
            w.append({"obs": np.zeros(4, np.float64), "a": np.int32(1)})
        # Nothing of the refused steps was written.
        w.append({"obs": np.ones(4, np.float32), "a": np.int32(2)})
        assert len(w.history["a"]) == 2
        np.testing.assert_array_equal(w.history["a"][:].numpy(), [1, 2])
        np.testing.assert_array_equal(w.history["obs"][-1].numpy(), np.ones(4))


def test_values_mutated_after_append_do_not_change_the_cell(client) -> None:  # type: ignore[no-untyped-def]
    obs = np.arange(4, dtype=np.float32)
    with client.trajectory_writer(2) as w:
        w.append({"obs": obs})
        obs[:] = -1
        w.append({"obs": obs})
        np.testing.assert_array_equal(w.history["obs"][:].numpy(),
                                      [[0, 1, 2, 3], [-1, -1, -1, -1]])


def test_many_dtypes_beyond_the_remembered_table(client) -> None:  # type: ignore[no-untyped-def]
    # Dtype objects the table does not hold (it keeps 16) take the buffer path.
    dtypes = [np.dtype(c) for c in "bhilqBHILQefdFD?"]
    dtypes += [np.dtype(">i4"), np.dtype("<i4")]
    for dt in dtypes:
        v = np.arange(3).astype(dt)
        got = _round_trip(client, [v, v])
        np.testing.assert_array_equal(got, [v, v])
