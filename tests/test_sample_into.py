"""``Table.sample_batch(n, out=buf, offset=k)``: the columns gathered
straight into a caller's buffer, back to back from ``k``, each 64-byte
aligned (what the server does for a same-host learner's shared segment),
with the same data as a normal ``sample_batch``; columns that don't fit are
normal arrays."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from fastreplay import Client, Server, Table
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel

SENTINEL = 0xAB


def _address(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


def _up64(x: int) -> int:
    return (x + 63) // 64 * 64


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Server, Table]]:
    """A Fifo table (a deterministic sampler: the oldest item each time)
    holding items of four columns: two squeezed, two of three steps."""
    table = Table("fifo", sel.Fifo(), sel.Fifo(), 100, rl.MinSize(1))
    queue = Table.queue("queue", 10)
    server = Server([table, queue])
    try:
        client = Client(f"localhost:{server.port}")
        with client.trajectory_writer(3) as w:
            for i in range(6):
                w.append({"obs": np.full((3, 5), i + 0.25, np.float32),
                          "act": np.int64(100 + i),
                          "odd": np.arange(7, dtype=np.int16) + i,
                          "flag": np.uint8(i)})
                if i >= 2:
                    w.create_item("fifo", 1.0, {
                        "obs": w.history["obs"][-1],
                        "act": w.history["act"][-3:],
                        "odd": w.history["odd"][-3:],
                        "flag": w.history["flag"][-1]})
        yield server, table
    finally:
        server.stop()


def _normal(table: Table, n: int) -> tuple[Any, list[np.ndarray]]:
    info, cols, _ = table.sample_batch(n)
    return info, cols


def test_columns_live_in_the_buffer_back_to_back(served: Any) -> None:
    _, table = served
    info0, expected = _normal(table, 4)
    assert len(expected) == 4
    shapes = sorted(c.shape for c in expected)
    # two squeezed ([B, ...]) and two of three steps ([B, 3, ...])
    assert shapes == sorted([(4, 3, 5), (4,), (4, 3, 7), (4, 3)])
    for k in (0, 1, 63, 64, 100, 1000):
        buf = np.full(1 << 14, SENTINEL, np.uint8)
        info, cols, _ = table.sample_batch(4, out=buf, offset=k)
        np.testing.assert_array_equal(info.key, info0.key)
        at = k
        for col, exp in zip(cols, expected, strict=True):
            assert col.dtype == exp.dtype and col.shape == exp.shape
            np.testing.assert_array_equal(col, exp)
            assert np.shares_memory(col, buf)
            off = _address(col) - _address(buf)
            assert off == _up64(at), (k, off)  # back to back, 64-byte aligned
            at = off + col.nbytes
        # Nothing before k or after the last column was written.
        assert (buf[:k] == SENTINEL).all()
        assert (buf[at:] == SENTINEL).all()


def test_aligned_addresses_in_an_aligned_buffer(served: Any) -> None:
    _, table = served
    raw = np.zeros((1 << 14) + 64, np.uint8)
    start = (-_address(raw)) % 64
    buf = raw[start:start + (1 << 14)]
    assert _address(buf) % 64 == 0
    _, cols, _ = table.sample_batch(3, out=buf, offset=5)
    for c in cols:
        assert np.shares_memory(c, buf)
        assert _address(c) % 64 == 0


def test_buffer_too_small_gives_normal_arrays_with_the_same_data(served: Any) -> None:
    _, table = served
    _, expected = _normal(table, 4)
    for size in (0, 16, 64, 200):
        buf = np.full(size, SENTINEL, np.uint8)
        _, cols, _ = table.sample_batch(4, out=buf, offset=0)
        for col, exp in zip(cols, expected, strict=True):
            np.testing.assert_array_equal(col, exp)
            assert col.dtype == exp.dtype
            inside = np.shares_memory(col, buf)
            if inside:  # wholly inside, never straddling the end
                off = _address(col) - _address(buf)
                assert 0 <= off and off + col.nbytes <= size
            assert inside or col.flags.writeable
        if size == 0:
            assert not any(np.shares_memory(c, buf) for c in cols)


def test_offset_at_the_end_puts_nothing_in_the_buffer(served: Any) -> None:
    _, table = served
    _, expected = _normal(table, 2)
    buf = np.full(4096, SENTINEL, np.uint8)
    _, cols, _ = table.sample_batch(2, out=buf, offset=4096)
    for col, exp in zip(cols, expected, strict=True):
        np.testing.assert_array_equal(col, exp)
        assert not np.shares_memory(col, buf)
    assert (buf == SENTINEL).all()


def test_partly_fitting_buffer(served: Any) -> None:
    """A buffer with room for the first column only: it is in the buffer,
    the others are not (and hold the same data)."""
    _, table = served
    _, expected = _normal(table, 4)
    first = expected[0].nbytes
    buf = np.full(first + 8, SENTINEL, np.uint8)
    _, cols, _ = table.sample_batch(4, out=buf, offset=0)
    assert np.shares_memory(cols[0], buf)
    for col, exp in zip(cols, expected, strict=True):
        np.testing.assert_array_equal(col, exp)
    for c in cols[1:]:
        if np.shares_memory(c, buf):
            off = _address(c) - _address(buf)
            assert off >= first and off % 64 == 0 and off + c.nbytes <= buf.nbytes


def test_other_writable_buffers(served: Any) -> None:
    _, table = served
    _, expected = _normal(table, 3)
    for buf in (bytearray(8192), memoryview(bytearray(8192)),
                np.zeros(1024, np.float64)):
        _, cols, _ = table.sample_batch(3, out=buf, offset=8)
        target = np.frombuffer(buf, np.uint8)
        for col, exp in zip(cols, expected, strict=True):
            np.testing.assert_array_equal(col, exp)
            assert np.shares_memory(col, target)


@pytest.mark.parametrize("bad", [b"\0" * 8192, 5, "text"], ids=["bytes", "int", "str"])
def test_bad_buffer_raises_and_keeps_the_items(served: Any, bad: Any) -> None:
    """A read-only or non-buffer ``out`` is an error, and it costs no item
    of a queue (whose sampled items are removed)."""
    server, _ = served
    queue = server.tables["queue"]
    client = Client(f"localhost:{server.port}")
    queue.reset()
    for i in range(3):
        client.insert({"x": np.int64(i)}, {"queue": 1.0})
    before = bytes(bad) if isinstance(bad, bytes) else None
    with pytest.raises((TypeError, ValueError, BufferError)):
        queue.sample_batch(1, out=bad)
    if before is not None:
        assert bad == before  # an immutable object was not written
    assert len(queue) == 3
    _, cols, _ = queue.sample_batch(3)
    assert cols[0].reshape(-1).tolist() == [0, 1, 2]  # none lost, in order
