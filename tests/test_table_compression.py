"""A table's compression default (issue 13, part 1): ``Table(...,
compression=)`` decides the columns that no writer setting decides, for the
TrajectoryWriter (the table of a column's first item) and the
StructuredWriter (the table of the first config storing it; a config's own
``compression`` wins, and two configs naming different ones are refused)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import fastreplay as reverb
from fastreplay import _core
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay import structured_writer as sw
from fastreplay.net import codec
from fastreplay.net.wire import FrameError

N = 64
SMALL = np.zeros(8, np.float32)  # compressible, but 32-byte rows: 'auto' keeps them raw


def fifo(name: str, compression: Any = "auto") -> reverb.Table:
    """Each item sampled once, oldest first."""
    return reverb.Table(name, sel.Fifo(), sel.Fifo(), 10_000, rl.MinSize(1),
                        max_times_sampled=1, compression=compression)


def frame(i: int) -> np.ndarray:
    out = np.zeros((84, 84), np.uint8)
    out[i % 60:i % 60 + 20, 10:30] = 200
    return out


def write(server: reverb.Server, tables: list[str], *, data: Any = None,
          configure: tuple[Any, ...] = ()) -> dict[str, Any]:
    """Items of {'x': row} into ``tables`` in turn; the column's info."""
    client = reverb.Client(f"localhost:{server.port}")
    with client.trajectory_writer(1) as w:
        if configure:
            w.configure(("x",), num_keep_alive_refs=1, max_chunk_length=1,
                        compression=configure[0])
        for i in range(N):
            w.append({"x": SMALL + i if data is None else data(i)})
            w.create_item(tables[i % len(tables)], 1.0, {"x": w.history["x"][-1]})
        info = w._core.column_info(0)  # noqa: SLF001 - the column's choice
    return info


def test_table_default_is_reported_and_kept_by_replace():
    t = fifo("t", "lz4")
    assert t.compression == "lz4" and t.info.compression == "lz4"
    assert t.replace(max_size=5).compression == "lz4"
    assert fifo("u", None).info.compression is None
    assert fifo("v").compression == "auto"
    assert reverb.Table.queue("q", 3, compression=None).compression is None
    assert reverb.Table.stack("s", 3, compression="lz4").compression == "lz4"


def test_bad_table_default_names_the_table():
    with pytest.raises(ValueError, match=r"table 'bad': compression must be"):
        fifo("bad", "zip")


@pytest.mark.parametrize("default,expect", [("lz4", _core.COMPRESSION_LZ4),
                                            (None, _core.COMPRESSION_NONE),
                                            ("auto", _core.COMPRESSION_AUTO)])
def test_writer_column_takes_its_first_items_table_default(default, expect):
    table = fifo("t", default)
    server = reverb.Server([table])
    try:
        info = write(server, ["t"])
        assert info["compression"] == expect
        assert info["compress"] is (default == "lz4")  # 32-byte rows: auto is raw
        _, cols, _ = table.sample_batch(N)
        np.testing.assert_array_equal(cols[0], SMALL + np.arange(N)[:, None])
    finally:
        server.stop()


def test_table_default_changes_the_stored_bytes_from_the_first_row():
    """The writer's tables agree: the column is decided when it is added,
    before its first chunk."""
    stored = {}
    for default in ("lz4", None):
        server = reverb.Server([fifo("t", default)])
        try:
            write(server, ["t"], data=frame)
            stored[default] = server.chunk_store.stats()["stored_bytes"]
        finally:
            server.stop()
    assert stored[None] == N * 84 * 84  # raw
    assert stored["lz4"] < stored[None] // 4


def test_configure_wins_over_the_table_default():
    server = reverb.Server([fifo("t", "lz4")])
    try:
        info = write(server, ["t"], configure=(None,))
        assert info["compression"] == _core.COMPRESSION_NONE
    finally:
        server.stop()


def test_the_first_items_table_decides_a_shared_column():
    server = reverb.Server([fifo("raw", None), fifo("packed", "lz4")])
    try:
        info = write(server, ["raw", "packed"])
        assert info["compression"] == _core.COMPRESSION_NONE
        info = write(server, ["packed", "raw"])
        assert info["compression"] == _core.COMPRESSION_LZ4
    finally:
        server.stop()


def test_a_column_added_later_is_decided_by_its_own_first_item():
    server = reverb.Server([fifo("raw", None), fifo("packed", "lz4")])
    client = reverb.Client(f"localhost:{server.port}")
    try:
        with client.trajectory_writer(1) as w:
            w.append({"x": SMALL})
            w.create_item("raw", 1.0, {"x": w.history["x"][-1]})
            w.append({"x": SMALL, "y": SMALL})  # a new column
            w.create_item("packed", 1.0, {"y": w.history["y"][-1]})
            assert w._core.column_info(0)["compression"] == _core.COMPRESSION_NONE
            assert w._core.column_info(1)["compression"] == _core.COMPRESSION_LZ4
            assert w._undecided == set()  # noqa: SLF001 - steady state: no check
    finally:
        server.stop()


def test_table_info_carries_the_default_over_the_wire():
    info = fifo("t", None).info
    assert codec.info_from_json(codec.info_to_json(info)).compression is None
    doc = codec.info_to_json(fifo("t", "lz4").info)
    assert codec.info_from_json(doc).compression == "lz4"
    del doc["compression"]  # an older server
    assert codec.info_from_json(doc).compression == "auto"
    doc["compression"] = "zip"
    with pytest.raises(FrameError, match="bad table compression"):
        codec.info_from_json(doc)


# ----- StructuredWriter -----

STEP = {"x": SMALL}
REF = sw.create_reference_step(STEP)


def structured_bytes(tables: list[reverb.Table], configs: list[sw.Config]) -> int:
    store = _core.ChunkStore()
    w = sw.StructuredWriter(tables, configs, chunk_store=store)
    for _ in range(N):
        w.append(STEP)
    w.flush()
    assert all(len(t) == N for t in tables)
    return int(store.stats()["stored_bytes"])


@pytest.mark.parametrize("default", ["lz4", None])
def test_structured_writer_uses_the_tables_default(default):
    t = fifo("t", default)
    stored = structured_bytes([t], [sw.create_config(REF["x"][-1], "t")])
    assert (stored < N * 32) is (default == "lz4")
    _, cols, _ = t.sample_batch(N)
    np.testing.assert_array_equal(cols[0], np.zeros((N, 8), np.float32))


def test_structured_config_compression_wins_over_the_table():
    t = fifo("t", "lz4")
    assert structured_bytes([t], [sw.create_config(REF["x"][-1], "t",
                                                   compression=None)]) == N * 32
    u = fifo("u")
    assert structured_bytes([u], [sw.create_config(REF["x"][-1], "u",
                                                   compression="lz4")]) < N * 32


def test_structured_configs_naming_different_compressions_are_refused():
    configs = [sw.create_config(REF["x"][-1], "t", compression="lz4"),
               sw.create_config(REF["x"][-2:], "t", compression=None)]
    with pytest.raises(ValueError, match=r"position 1: its compression None for "
                                         r"flat index 0 differs from 'lz4'"):
        sw.StructuredWriter([fifo("t")], configs)


def test_structured_config_refuses_a_bad_compression():
    with pytest.raises(ValueError, match=r"config for table 't': compression must"):
        sw.create_config(REF["x"][-1], "t", compression="zip")
