"""Compression is a choice per column (issue 13, part 1): ``'auto'`` (the
measured rule), ``'lz4'`` and None, for ``ReplayBuffer`` fields and for
writer columns (``TrajectoryWriter.configure``); the data sampled back is
the data written whatever the choice."""

from __future__ import annotations

import numpy as np
import pytest

import fastreplay as reverb

N = 120


def frames(n: int = N) -> np.ndarray:
    """Atari-like frames: compressible (mostly flat with a moving block)."""
    out = np.zeros((n, 84, 84), np.uint8)
    for i in range(n):
        out[i, i % 60:i % 60 + 20, 10:30] = 200 + i % 50
    return out


def fill(rb: reverb.ReplayBuffer) -> tuple[np.ndarray, np.ndarray]:
    obs = frames()
    small = np.zeros((N, 8), np.float32)  # compressible, but 32-byte rows
    small[:, 0] = np.arange(N)
    rb.add_batch(obs=obs, x=small)
    return obs, small


def stats(rb: reverb.ReplayBuffer) -> dict[str, int]:
    return rb.chunk_store.stats()


@pytest.mark.parametrize("compression", ["auto", "lz4", None,
                                         {"obs": None}, {"x": "lz4"}])
def test_replay_buffer_returns_what_was_added(compression):
    rb = reverb.ReplayBuffer(N, compression=compression, seed=3)
    obs, small = fill(rb)
    batch = rb.sample(64)
    keys = batch["indexes"].astype(np.int64)  # keys count up from 0
    np.testing.assert_array_equal(batch["obs"], obs[keys])
    np.testing.assert_array_equal(batch["x"], small[keys])


def test_none_stores_raw_and_auto_compresses_only_large_rows():
    raw = N * (84 * 84 + 8 * 4)
    none = reverb.ReplayBuffer(N, compression=None)
    fill(none)
    assert stats(none)["stored_bytes"] == stats(none)["raw_bytes"] == raw
    auto = reverb.ReplayBuffer(N)
    fill(auto)
    lz4 = reverb.ReplayBuffer(N, compression="lz4")
    fill(lz4)
    # auto: the frames shrink, the 32-byte rows stay raw; lz4 shrinks both
    assert stats(auto)["stored_bytes"] < raw // 4
    assert N * 32 < stats(auto)["stored_bytes"]
    assert stats(lz4)["stored_bytes"] < stats(auto)["stored_bytes"] - N * 16


def test_per_field_choice():
    rb = reverb.ReplayBuffer(N, compression={"obs": None})
    fill(rb)
    # the frames raw, the small rows by the rule (raw as well)
    assert stats(rb)["stored_bytes"] == N * (84 * 84 + 32)
    rb2 = reverb.ReplayBuffer(N, compression={"x": "lz4"})
    fill(rb2)
    auto = reverb.ReplayBuffer(N)
    fill(auto)
    # the small rows now shrink too; the frames are compressed either way
    assert stats(rb2)["stored_bytes"] < stats(auto)["stored_bytes"] - N * 16


@pytest.mark.parametrize("bad, match", [
    ("zstd", "ReplayBuffer: compression must be 'auto', 'lz4' or None"),
    (1, "ReplayBuffer: compression"),
    ({"obs": "gzip"}, "field 'obs': compression must be"),
])
def test_bad_choice_is_refused_at_construction(bad, match):
    with pytest.raises(ValueError, match=match):
        reverb.ReplayBuffer(N, compression=bad)


def test_choice_for_a_field_the_transitions_lack_is_refused_and_keeps_nothing():
    rb = reverb.ReplayBuffer(N, compression={"image": None})
    with pytest.raises(ValueError, match=r"compression names fields \['image'\]"):
        fill(rb)
    assert len(rb) == 0
    rb2 = reverb.ReplayBuffer(N, compression={"obs": None})
    fill(rb2)  # the same data with a correct name goes in
    assert len(rb2) == N


@pytest.mark.parametrize("compression", ["auto", "lz4", None])
@pytest.mark.parametrize("when", ["before", "after"])
def test_writer_column_choice(compression, when):
    table = reverb.Table("t", reverb.selectors.Fifo(), reverb.selectors.Fifo(), 1000,
                         reverb.rate_limiters.MinSize(1))
    server = reverb.Server([table])
    client = reverb.Client(f"localhost:{server.port}")
    obs = frames()
    try:
        with client.trajectory_writer(2) as w:
            if when == "before":  # the column does not exist yet
                w.configure(("obs",), num_keep_alive_refs=2, max_chunk_length=1,
                            compression=compression)
            w.append({"obs": obs[0]})
            if when == "after":  # applies from the column's next chunk
                w.flush()
                w.configure(("obs",), num_keep_alive_refs=2, max_chunk_length=1,
                            compression=compression)
            for i in range(1, N):
                w.append({"obs": obs[i]})
                w.create_item("t", 1.0, {"obs": w.history["obs"][-2:]})
            info = w._core.column_info(0)  # noqa: SLF001
        expect = {"auto": True, "lz4": True, None: False}[compression]
        assert info["compress"] is expect
        _, cols, _ = table.sample_batch(N - 1)
        # Fifo sampler: the oldest item every time
        np.testing.assert_array_equal(cols[0][0], obs[0:2])
        items = table.items()
        assert len(items) == N - 1
    finally:
        server.stop()


def test_writer_refuses_a_bad_choice_naming_the_column():
    table = reverb.Table.queue("q", 10)
    server = reverb.Server([table])
    client = reverb.Client(f"localhost:{server.port}")
    try:
        w = client.trajectory_writer(1)
        with pytest.raises(ValueError, match=r"column \('obs',\): compression must be"):
            w.configure(("obs",), num_keep_alive_refs=1, max_chunk_length=1,
                        compression="zip")
        w.append({"obs": np.zeros(3)})  # the writer still works
        w.create_item("q", 1.0, {"obs": w.history["obs"][-1:]})
        w.flush()
        assert len(table) == 1
    finally:
        server.stop()


# ----- ReplayBuffer.add's compiled path (one row, _core.insert_row) -----


def test_add_one_at_a_time_stores_what_add_batch_stores():
    obs = frames()
    one = reverb.ReplayBuffer(N, compression={"obs": None}, seed=1)
    many = reverb.ReplayBuffer(N, compression={"obs": None}, seed=1)
    for i in range(N):  # Python scalars, numpy scalars and rows mixed
        one.add(obs=obs[i], a=i, r=float(i) / 2, d=bool(i % 2), f=np.float32(i))
    many.add_batch(obs=obs, a=np.arange(N), r=np.arange(N) / 2,
                   d=np.arange(N) % 2 == 1, f=np.arange(N, dtype=np.float32))
    assert len(one) == len(many) == N
    for key in ("stored_bytes", "raw_bytes"):  # the same bytes, raw frames
        assert stats(one)[key] == stats(many)[key] == N * (84 * 84 + 8 + 8 + 1 + 4)
    for rb in (one, many):
        batch = rb.sample(64)
        k = batch["indexes"].astype(np.int64)
        np.testing.assert_array_equal(batch["obs"], obs[k])
        np.testing.assert_array_equal(batch["a"], k)
        np.testing.assert_array_equal(batch["r"], k / 2)
        np.testing.assert_array_equal(batch["d"], k % 2 == 1)
        np.testing.assert_array_equal(batch["f"], k.astype(np.float32))
        assert batch["a"].dtype == np.int64 and batch["d"].dtype == np.bool_


@pytest.mark.parametrize("bad", [
    {"obs": np.zeros(3, np.float32), "a": 1.5},       # dtype of a changes
    {"obs": np.zeros(4, np.float32), "a": 1},         # shape of obs changes
    {"obs": np.zeros(3, np.float64), "a": 1},         # dtype of obs changes
    {"obs": np.zeros(3, np.float32)},                 # a field missing
    {"obs": np.zeros(3, np.float32), "a": 1, "b": 2},  # a field more
    {"obs": "text", "a": 1},                          # a string
])
def test_add_refuses_rows_unlike_the_first_and_inserts_nothing(bad):
    rb = reverb.ReplayBuffer(10)
    rb.add(obs=np.zeros(3, np.float32), a=1)
    rb.add(obs=np.ones(3, np.float32), a=2)  # the compiled path
    with pytest.raises((ValueError, TypeError)):
        rb.add(**bad)
    assert len(rb) == 2
    rb.add(obs=np.full(3, 2, np.float32), a=3)  # the buffer still works
    assert len(rb) == 3


def test_add_priorities_on_the_compiled_path():
    rb = reverb.ReplayBuffer(10, alpha=1.0)
    rb.add(x=0)
    rb.add(x=1, priority=5.0)
    rb.add(x=2)  # the largest priority so far
    assert sorted(rb.table.items()["priority"].tolist()) == [1.0, 5.0, 5.0]
    with pytest.raises(reverb.errors.InvalidPriorityError):
        rb.add(x=3, priority=float("nan"))
    assert len(rb) == 3
