"""String columns (issue 11, part 7): Python str/bytes, numpy str_/bytes_
arrays and object arrays of str and/or bytes are one column kind, as
Reverb's tf.string: stored as bytes (str as UTF-8, one encoded blob per
cell) and read back as numpy bytes_ arrays by history numpy(), sample,
sample_batch, checkpoints and StructuredWriter."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastreplay as reverb
from fastreplay import errors
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay import structured_writer as sw
from fastreplay.checkpointers import DefaultCheckpointer


def fifo(name: str = "t", max_size: int = 1000, **kw: Any) -> reverb.Table:
    return reverb.Table(name, sel.Fifo(), sel.Fifo(), max_size, rl.MinSize(1),
                        max_times_sampled=1, **kw)


@pytest.fixture
def server():
    s = reverb.Server([fifo("t"), reverb.Table.queue("q", 100)])
    yield s
    s.stop()


def u8(x: Any) -> Any:
    """``x`` (a str or a nested list of str) as UTF-8 bytes."""
    return [u8(e) for e in x] if isinstance(x, list) else x.encode()


def test_python_str_and_bytes_round_trip_through_history(server) -> None:
    with server.localhost_client().trajectory_writer(5) as w:
        w.append({"s": "héllo 🎉", "b": b"\x00raw\xff"})
        w.append({"s": "", "b": b""})
        s, b = w.history["s"], w.history["b"]
        assert s[0].numpy() == np.bytes_("héllo 🎉".encode())
        assert s[0].numpy().dtype.kind == "S" and s[0].numpy().shape == ()
        assert s[0].numpy().item().decode("utf-8") == "héllo 🎉"
        assert b[0].numpy() == np.bytes_(b"\x00raw\xff")
        assert s[:].numpy().tolist() == [u8("héllo 🎉"), b""]
        assert b[:].numpy().tolist() == [b"\x00raw\xff", b""]
        assert s[:].numpy().dtype == np.dtype("S11")
        assert s[:].shape == (2,) and s[:].dtype.kind == "S"
        assert w.history["b"][0].dtype.kind == "S"


def test_str_and_bytes_share_one_column(server) -> None:
    """Reverb has one string type: str and bytes values (and str_, bytes_
    and mixed object arrays) may be appended to one column in any order."""
    client = server.localhost_client()
    with client.trajectory_writer(5) as w:
        for v in ["é", b"\xff", np.array("abc"), np.bytes_(b"de"),
                  np.array(["x", b"y"], dtype=object)[0]]:
            w.append({"s": v})
        w.create_item("q", 1.0, w.history["s"][:])
        for v in [np.array(["p", "qq"]), np.array([b"r", "s"], dtype=object),
                  np.array([b"t", b"u"])]:
            w.append({"m": v})
        w.create_item("q", 1.0, w.history["m"][-3:])
        w.append({"n": np.array(["ab", b"\x00c", "😀"], dtype=object)})
        w.create_item("q", 1.0, w.history["n"][-1])
    _, (data,) = client.sample_batch("q", 1)
    assert data.tolist() == [[u8("é"), b"\xff", b"abc", b"de", b"x"]]
    assert data.dtype == np.dtype("S3")
    _, (data,) = client.sample_batch("q", 1)
    assert data.tolist() == [[[b"p", b"qq"], [b"r", b"s"], [b"t", b"u"]]]
    _, (data,) = client.sample_batch("q", 1)
    assert data.tolist() == [[b"ab", b"\x00c", u8("😀")]]


@pytest.mark.parametrize("shape", [(), (3,), (2, 3), (1, 0), (2, 1, 2)])
def test_numpy_arrays_of_several_shapes(server, shape) -> None:
    client = server.localhost_client()
    rng = np.random.default_rng(0)
    words = ["a", "bb", "ccc", "ü", "日本語", "", "😀x"]
    steps = [np.array(rng.choice(words, size=shape)) for _ in range(4)]
    raw = [np.array([w.encode() for w in s.ravel()], dtype=bytes).reshape(shape)
           for s in steps]
    with client.trajectory_writer(4) as w:
        for s, r in zip(steps, raw, strict=True):
            w.append({"s": s, "r": r, "x": np.float32(1)})
        w.create_item("q", 1.0, {"s": w.history["s"][:], "r": w.history["r"][:],
                                 "x": w.history["x"][:]})
        np.testing.assert_array_equal(w.history["s"][:].numpy(), np.stack(raw))
    info, data = client.sample_batch("q", 1)
    assert data["s"].shape == (1, 4) + shape and data["s"].dtype.kind == "S"
    assert data["r"].shape == (1, 4) + shape and data["r"].dtype.kind == "S"
    np.testing.assert_array_equal(data["s"][0], np.stack(raw))
    np.testing.assert_array_equal(np.char.decode(data["s"][0], "utf-8"),
                                  np.stack(steps))
    np.testing.assert_array_equal(data["r"][0], np.stack(raw))
    assert data["x"].dtype == np.float32


def test_object_arrays_of_str_and_bytes(server) -> None:
    client = server.localhost_client()
    with client.trajectory_writer(2) as w:
        w.append({"o": np.array(["x", "yy"], dtype=object),
                  "p": np.array([b"a", b"bcd"], dtype=object)})
        w.append({"o": np.array(["é", ""], dtype=object),
                  "p": np.array([b"", b"z"], dtype=object)})
        w.create_item("q", 1.0, {"o": w.history["o"][:], "p": w.history["p"][:]})
    _, data = client.sample_batch("q", 1)
    assert data["o"].dtype.kind == "S" and data["p"].dtype.kind == "S"
    assert data["o"][0].tolist() == [[b"x", b"yy"], [u8("é"), b""]]
    assert data["p"][0].tolist() == [[b"a", b"bcd"], [b"", b"z"]]


def test_str_of_different_widths_is_one_column(server) -> None:
    client = server.localhost_client()
    with client.trajectory_writer(3) as w:
        for v in [np.str_("a"), "bbbbb", np.array("cc")]:
            w.append({"s": v})
        w.create_item("q", 1.0, w.history["s"][:])
    (sample,) = client.sample("q", 1, emit_timesteps=False)
    assert sample.data[0].tolist() == [b"a", b"bbbbb", b"cc"]
    assert sample.data[0].dtype == np.dtype("S5")


def test_long_strings_over_64_kib_compress_and_round_trip(server) -> None:
    client = server.localhost_client()
    long_text = "ab€" * 30_000  # 150 KB of UTF-8, compressible
    long_bytes = bytes(range(1, 256)) * 300
    with client.trajectory_writer(2) as w:
        w.append({"s": long_text, "b": long_bytes})
        w.append({"s": long_text[::-1], "b": long_bytes[::-1]})
        w.create_item("q", 1.0, {"s": w.history["s"][:], "b": w.history["b"][:]})
        assert w.history["s"][0].numpy() == u8(long_text)
    stats = server.chunk_store.stats() if hasattr(server, "chunk_store") else None
    _, data = client.sample_batch("q", 1)
    assert data["s"][0].tolist() == [u8(long_text), u8(long_text[::-1])]
    assert data["b"][0].tolist() == [long_bytes, long_bytes[::-1]]
    if stats is not None and reverb._core.LZ4_AVAILABLE:
        assert stats["stored_bytes"] < stats["raw_bytes"]


def test_mixed_with_numeric_columns_sample_and_emit_timesteps(server) -> None:
    client = server.localhost_client()
    with client.trajectory_writer(3) as w:
        for i in range(5):
            w.append({"obs": np.full(3, i, np.float32), "tag": f"step-{i}",
                      "ep": b"episode-7"})
            if i >= 2:
                w.create_item("t", 1.0, {"obs": w.history["obs"][-3:],
                                         "tag": w.history["tag"][-3:],
                                         "ep": w.history["ep"][-1]})
    samples = list(client.sample("t", 3, emit_timesteps=False))
    for k, s in enumerate(samples):
        ep, obs, tag = s.data  # flat in sorted-key order
        assert ep == np.bytes_(b"episode-7") and ep.shape == ()
        assert tag.tolist() == [f"step-{k + j}".encode() for j in range(3)]
        assert obs[:, 0].tolist() == [k, k + 1, k + 2]
    with client.trajectory_writer(3) as w:
        w.append({"obs": np.zeros(3, np.float32), "tag": "only", "ep": b"e"})
        w.create_item("t", 1.0, {"obs": w.history["obs"][-1:],
                                 "tag": w.history["tag"][-1:],
                                 "ep": w.history["ep"][-1:]})
    (steps,) = client.sample("t", 1, emit_timesteps=True)
    assert len(steps) == 1
    assert steps[0].data[0] == np.bytes_(b"e")
    assert steps[0].data[2] == np.bytes_(b"only")


def test_sample_batch_stacks_squeezed_and_unsqueezed(server) -> None:
    client = server.localhost_client()
    with client.trajectory_writer(4) as w:
        for i in range(6):
            w.append({"s": "x" * i, "b": np.array([b"k", bytes([65 + i])])})
            if i >= 1:
                w.create_item("t", 1.0, {"pair": w.history["s"][-2:],
                                         "last": w.history["b"][-1]})
    _, data = client.sample_batch("t", 5)
    assert data["pair"].shape == (5, 2) and data["pair"].dtype == np.dtype("S5")
    assert data["pair"].tolist() == [[b"x" * i, b"x" * (i + 1)] for i in range(5)]
    assert data["last"].shape == (5, 2) and data["last"].dtype == np.dtype("S1")
    assert data["last"][:, 1].tolist() == [bytes([66 + i]) for i in range(5)]


def test_many_items_share_chunks(server) -> None:
    store = server.chunk_store
    before = store.stats()["live_chunks"]
    w = reverb.TrajectoryWriter(server.tables, 10, chunk_store=store,
                                chunker_options=reverb.ConstantChunkerOptions(5, 10))
    for i in range(10):
        w.append({"s": f"v{i}", "x": i})
        if i == 6:  # the open chunk's rows are readable before it is finalized
            assert w.history["s"][-3:].numpy().tolist() == [b"v4", b"v5", b"v6"]
    for start in range(8):
        w.create_item("t", 1.0, w.history["s"][start:start + 3])
    w.flush()
    # Two chunks of five rows per column, whatever the number of items.
    assert store.stats()["live_chunks"] - before == 4
    assert w.history["s"][:].numpy().tolist() == [f"v{i}".encode() for i in range(10)]
    _, data = server.localhost_client().sample_batch("t", 8)
    assert data[0].tolist() == [[f"v{s + j}".encode() for j in range(3)]
                                for s in range(8)]
    w.close()


def test_repetitive_strings_compress_across_rows(server) -> None:
    if not reverb._core.LZ4_AVAILABLE:
        pytest.skip("lz4 not available")
    store = server.chunk_store
    w = reverb.TrajectoryWriter(server.tables, 50, chunk_store=store,
                                chunker_options=reverb.ConstantChunkerOptions(50, 50))
    instruction = "pick up the red block and put it in the bowl"
    for _ in range(50):
        w.append({"instruction": instruction})
    w.create_item("t", 1.0, w.history["instruction"][:])
    w.flush()
    stats = store.stats()
    assert stats["stored_bytes"] < stats["raw_bytes"] // 4
    _, data = server.localhost_client().sample_batch("t", 1)
    assert data[0].tolist() == [[instruction.encode()] * 50]
    w.close()


def test_expired_string_refs_raise(server) -> None:
    with server.localhost_client().trajectory_writer(2) as w:
        w.append({"s": "v0"})
        old = w.history["s"][0]
        assert old.numpy() == b"v0"
        for i in range(1, 4):
            w.append({"s": f"v{i}"})
        with pytest.raises(RuntimeError, match="expired"):
            old.numpy()
        with pytest.raises(ValueError):
            w.create_item("t", 1.0, old)
        assert w.history["s"][-1].numpy() == b"v3"


def test_float_into_string_column_is_a_value_error_naming_the_column(server) -> None:
    with server.localhost_client().trajectory_writer(3) as w:
        w.append({"a": {"s": "text"}})
        with pytest.raises(ValueError, match=r"column \('a', 's'\).*Got double "
                                             r"but expected string"):
            w.append({"a": {"s": 1.5}})
        with pytest.raises(ValueError, match="Got int32 but expected string"):
            w.append({"a": {"s": np.zeros(2, np.int32)}})
        w.append({"a": {"s": b"still works"}})
        assert w.history["a"]["s"][:].numpy().tolist() == [b"text", b"still works"]


def test_string_into_numeric_column_is_a_value_error(server) -> None:
    with server.localhost_client().trajectory_writer(3) as w:
        w.append({"x": 1.0, "y": np.zeros(2, np.float32)})
        with pytest.raises(ValueError, match=r"column \('x',\).*Got string but "
                                             "expected double"):
            w.append({"x": "oops"})
        with pytest.raises(ValueError, match=r"column \('y',\)"):
            w.append({"y": np.array(["a", "b"])})
        with pytest.raises(ValueError, match=r"column \('x',\).*Got string but "
                                             "expected double"):
            w.append({"x": b"bytes"})
        with pytest.raises(ValueError, match=r"column \('x',\)"):
            w.append({"x": np.array(["a", b"b"], dtype=object)})
        w.append({"x": 2.0, "y": np.ones(2, np.float32)})
        assert w.history["x"][:].numpy().tolist() == [1.0, 2.0]


def test_shape_mismatch_of_string_column_names_it(server) -> None:
    with server.localhost_client().trajectory_writer(3) as w:
        w.append({"s": np.array(["a", "b"])})
        with pytest.raises(ValueError, match=r"shape.*column \('s',\).*Got \[3\]"):
            w.append({"s": np.array(["a", "b", "c"])})
        with pytest.raises(ValueError, match=r"column \('s',\)"):
            w.append({"s": "scalar"})


@pytest.mark.parametrize("bad", [
    np.array(["a", 1], dtype=object),
    np.array([None], dtype=object),
    np.array([b"a", 2.5], dtype=object),
])
def test_object_arrays_of_other_objects_are_rejected(server, bad) -> None:
    with server.localhost_client().trajectory_writer(3) as w:
        with pytest.raises(TypeError, match=r"column \('o',\)"):
            w.append({"o": bad, "x": 1})
        w.append({"o": np.array(["ok", "ok"], dtype=object), "x": 1})
        assert w.history["x"][:].numpy().tolist() == [1]
        assert w.history["o"][:].numpy().tolist() == [[b"ok", b"ok"]]


def test_vector_writer_appends_strings_per_environment() -> None:
    from fastreplay.vector_writer import VectorTrajectoryWriter

    table = fifo("t")
    w = VectorTrajectoryWriter([table], 3, 3)
    w.append({"s": np.array(["a", "bé", ""]), "x": np.arange(3),
              "o": np.array([b"1", b"22", b"333"], dtype=object),
              "m": np.array([["p", "q"], ["rr", "s"], ["", "t"]])})
    w.append({"s": np.array(["c", "d", "eee"], dtype=object), "x": np.arange(3),
              "o": np.array([b"4", b"", b"6"], dtype=object),
              "m": np.array([["u", "v"], ["w", "x"], ["y", "zz"]])})
    with pytest.raises(ValueError, match=r"column \('s',\).*leading axis 2"):
        w.append({"s": np.array(["a", "b"]), "x": np.zeros(3)})
    with pytest.raises(ValueError, match=r"column \('s',\).*scalar"):
        w.append({"s": "one for all", "x": np.zeros(3)})
    with pytest.raises(TypeError, match=r"column \('o',\)"):
        w.append({"o": np.array([b"1", 2, b"3"], dtype=object), "x": np.zeros(3)})
    assert [len(env.history["x"]) for env in w] == [2, 2, 2]  # unchanged
    for env in w:
        env.create_item("t", 1.0, {k: env.history[k][:] for k in "somx"})
    w.flush()
    got = [s.data for s in table.sample_items(3, timeout=1)]
    assert [d[2].tolist() for d in got] == [[b"a", b"c"], [u8("bé"), b"d"],
                                            [b"", b"eee"]]
    assert [d[1].tolist() for d in got] == [[b"1", b"4"], [b"22", b""],
                                            [b"333", b"6"]]
    assert [d[0].tolist() for d in got] == [[[b"p", b"q"], [b"u", b"v"]],
                                            [[b"rr", b"s"], [b"w", b"x"]],
                                            [[b"", b"t"], [b"y", b"zz"]]]
    w.close()


def test_replay_buffer_rows_of_strings_are_refused_cleanly() -> None:
    table = fifo("t")
    with pytest.raises(ValueError, match=r"column .*s.*TrajectoryWriter"):
        reverb._core.insert_rows(table._core, reverb._core.ChunkStore(), ["x", "s"],
                                 [np.arange(2), np.array(["a", "b"])],
                                 np.arange(2, dtype=np.uint64), np.ones(2), 1)
    assert len(table) == 0


def test_client_insert_of_strings(server) -> None:
    client = server.localhost_client()
    client.insert({"id": "episode-1", "n": np.int32(3), "raw": b"\x01\x02"},
                  {"q": 1.0})
    (sample,) = client.sample("q", 1, emit_timesteps=False)
    assert [x.tolist() for x in sample.data] == [[b"episode-1"], [3], [b"\x01\x02"]]


def test_table_signature_with_string_specs() -> None:
    spec = {"id": sw.TensorSpec((), np.dtype(str), "id"),
            "tf": sw.TensorSpec((2,), np.dtype(object), "tf"),  # tf.string
            "b": sw.TensorSpec((), np.dtype(bytes), "b")}
    server = reverb.Server([reverb.Table.queue("sig", 10, signature=spec)])
    try:
        with server.localhost_client().trajectory_writer(2) as w:
            w.append({"id": "a", "tf": np.array([b"x", b"y"]), "b": b"z", "u": "u",
                      "f": 1.0})
            h = w.history
            w.create_item("sig", 1.0, {"id": h["id"][-1], "tf": h["tf"][-1],
                                       "b": h["b"][-1]})
            # str and bytes are one kind: a str column fits a bytes_ spec.
            w.create_item("sig", 1.0, {"id": h["id"][-1], "tf": h["tf"][-1],
                                       "b": h["u"][-1]})
            with pytest.raises(ValueError, match="column 0 to be a string .* but got "
                                                 "a double"):
                w.create_item("sig", 1.0, {"id": h["id"][-1], "tf": h["tf"][-1],
                                           "b": h["f"][-1]})
            with pytest.raises(ValueError, match="column 1 to be a string .* but got "
                                                 "a double"):
                w.create_item("sig", 1.0, {"id": h["f"][-1], "tf": h["tf"][-1],
                                           "b": h["b"][-1]})
            w.append({"id": "bcd", "tf": np.array([b"x", b"yz"]), "b": b"",
                      "u": "u", "f": 1.0})
            w.create_item("sig", 1.0, {"id": h["id"][-1], "tf": h["tf"][-1],
                                       "b": h["b"][-1]})
        client = server.localhost_client()
        got = [s.data for s in client.sample("sig", 3, emit_timesteps=False,
                                             unpack_as_table_signature=True)]
        assert got[0]["tf"].tolist() == [b"x", b"y"] and got[0]["id"] == b"a"
        assert got[1]["b"] == b"u" and got[1]["b"].dtype == np.dtype("S1")
        assert got[2]["tf"].tolist() == [b"x", b"yz"] and got[2]["b"] == b""
    finally:
        server.stop()


def test_checkpoint_round_trip_of_strings(tmp_path) -> None:
    def tables() -> list[reverb.Table]:
        return [fifo("t")]

    server = reverb.Server(tables(), checkpointer=DefaultCheckpointer(str(tmp_path)))
    client = server.localhost_client()
    long_text = "long ✓ " * 20_000
    with client.trajectory_writer(3) as w:
        for i in range(4):
            w.append({"s": f"s{i}é", "b": np.array([b"x" * i, b"\xff"]),
                      "l": long_text + str(i), "f": np.float64(i)})
            if i:
                w.create_item("t", 1.0, {k: w.history[k][-2:] for k in "sblf"})
    client.checkpoint()
    server.stop()
    restored = reverb.Server(tables(), checkpointer=DefaultCheckpointer(str(tmp_path)))
    try:
        _, data = restored.localhost_client().sample_batch("t", 3)
        assert data["s"].tolist() == [[u8(f"s{i}é"), u8(f"s{i + 1}é")]
                                      for i in range(3)]
        assert data["b"][:, :, 0].tolist() == [[b"x" * i, b"x" * (i + 1)]
                                               for i in range(3)]
        assert data["l"][2, 1] == u8(long_text + "3")
        assert data["f"].dtype == np.float64
    finally:
        restored.stop()


def test_structured_writer_with_string_fields() -> None:
    ref = sw.create_reference_step({"x": np.int64(0), "tag": "t", "raw": b"r"})
    server = reverb.Server([fifo("t")])
    try:
        config = sw.create_config(
            {"tag": ref["tag"][-2:], "raw": ref["raw"][-1], "x": ref["x"][-1]}, "t",
            [sw.Condition.step_index() >= 1])
        w = server.localhost_client().structured_writer([config])
        for i in range(4):
            w.append({"x": np.int64(i), "tag": f"tag-{i}", "raw": bytes([i])})
        w.flush()
        _, data = server.localhost_client().sample_batch("t", 3)
        assert data["tag"].tolist() == [[f"tag-{i}".encode(), f"tag-{i + 1}".encode()]
                                        for i in range(3)]
        assert data["raw"].tolist() == [bytes([i]) for i in range(1, 4)]
        assert data["x"].tolist() == [1, 2, 3]
    finally:
        server.stop()


def test_corrupt_string_cells_raise_data_loss() -> None:
    from fastreplay._core import _decode_text_for_tests

    with pytest.raises(errors.DataLossError, match="truncated"):
        _decode_text_for_tests((2,), [b"\x01\x00\x00\x00"])
    with pytest.raises(errors.DataLossError, match="inconsistent"):
        _decode_text_for_tests((), [b"\x05\x00\x00\x00abc"])
    with pytest.raises(errors.DataLossError, match="inconsistent"):
        _decode_text_for_tests((), [b"\x01\x00\x00\x00ab"])
    # Bytes that are not UTF-8 come back as they are (they are never decoded).
    assert _decode_text_for_tests((), [b"\x01\x00\x00\x00\xff"]).tolist() == \
        b"\xff"


text = st.text(max_size=20)
cells = st.one_of(
    text,
    st.lists(text, min_size=2, max_size=2).map(lambda xs: np.array(xs, dtype=object)),
)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(text, st.binary(max_size=30)), min_size=1, max_size=12),
       st.integers(1, 4))
def test_stored_strings_match_a_python_model(steps, span) -> None:
    server = reverb.Server([fifo("t")])
    try:
        client = server.localhost_client()
        model = []
        with client.trajectory_writer(span) as w:
            for i, (s, b) in enumerate(steps):
                w.append({"s": s, "b": b})
                if i + 1 >= span:
                    w.create_item("t", 1.0, {"s": w.history["s"][-span:],
                                             "b": w.history["b"][-span:]})
                    model.append(([x for x, _ in steps[i + 1 - span:i + 1]],
                                  [y for _, y in steps[i + 1 - span:i + 1]]))
        if not model:
            return
        got = [(d.data[1].tolist(), d.data[0].tolist())
               for d in client.sample("t", len(model), emit_timesteps=False)]
        # numpy bytes_ drop trailing NULs, as numpy itself does.
        want = [([x.encode().rstrip(b"\0") for x in s], [y.rstrip(b"\0") for y in b])
                for s, b in model]
        assert got == want
    finally:
        server.stop()


def _var_chunk(offsets: list[int], payload: bytes, **meta: Any) -> tuple[dict, bytes]:
    data = np.array(offsets, dtype=np.int64).tobytes() + payload
    base = {"key": 7, "episode_id": 0, "first_step": 0, "last_step": 1,
            "row_bytes": -1, "n_rows": len(offsets) - 1, "compressed": False,
            "stored_bytes": len(data)}
    base.update(meta)
    return base, data


@pytest.mark.parametrize("offsets, payload, meta", [
    ([0, 5, 3], b"abcde", {}),          # falling offsets
    ([1, 3, 5], b"abcde", {}),          # not starting at 0
    ([0, 2, 9], b"abcde", {}),          # past the payload
    ([0, 2, 4], b"abcde", {}),          # payload longer than the rows
    ([0], b"", {}),                     # no rows
    ([0, 2, 2**40], b"xy", {"compressed": True}),  # impossible expansion
])
def test_restore_rejects_inconsistent_string_chunks(offsets, payload, meta) -> None:
    m, data = _var_chunk(offsets, payload, **meta)
    with pytest.raises(errors.DataLossError):
        reverb._core.restore_chunk(reverb._core.ChunkStore(), m, data)


def test_restored_string_chunk_must_match_the_column_kind() -> None:
    table = fifo("t")
    store = reverb._core.ChunkStore()
    # Rows: the string "ab" (length 2, then its bytes) and the empty string.
    m, data = _var_chunk([0, 6, 10], (2).to_bytes(4, "little") + b"ab"
                         + (0).to_bytes(4, "little"))
    chunk = reverb._core.restore_chunk(store, m, data)
    fixed = reverb._core.restore_chunk(store, {**m, "row_bytes": 5, "n_rows": 2,
                                               "stored_bytes": 10}, b"x" * 10)
    core = table._core
    with pytest.raises(errors.DataLossError):  # a numeric column on string rows
        reverb._core.restore_item(core, 1, 1.0, 0, [(("f", 4, ()), False, [(1, 0, 1)])],
                                  {1: chunk})
    with pytest.raises(errors.DataLossError):  # a string column on fixed rows
        reverb._core.restore_item(core, 2, 1.0, 0, [(("S", 0, ()), False, [(1, 0, 1)])],
                                  {1: fixed})
    with pytest.raises(errors.DataLossError):  # 'U' is no column kind
        reverb._core.restore_item(core, 2, 1.0, 0, [(("U", 0, ()), True, [(1, 0, 1)])],
                                  {1: chunk})
    reverb._core.restore_item(core, 3, 1.0, 0, [(("S", 0, ()), True, [(1, 0, 1)])],
                              {1: chunk})
    reverb._core.restore_counters(core, 1, 0, 0, {})  # the rate limiter's count
    (sample,) = table.sample_items(1, timeout=1)
    assert sample.data[0] == np.bytes_(b"ab")
