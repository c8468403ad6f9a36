"""``wire.Reader``: frames read through a per-connection buffer
(fastreplay/net/wire.py) come out exactly as sent whatever the peer's
bytes are cut into (every byte boundary, several frames per receive, data
and JSON larger than the buffer), and a truncated or oversized frame is a
FrameError, the oversized one before anything is allocated."""

from __future__ import annotations

import json
import socket
import struct
import threading
import tracemalloc
from typing import Any

import numpy as np
import pytest

from fastreplay.net import wire

HEADER = struct.Struct("<4sBBHIQ")  # as documented in wire.py
WAIT = 10.0


def frame(kind: int, message: Any, blob: bytes = b"") -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode()
    return HEADER.pack(wire.MAGIC, wire.VERSION, kind, 0, len(body), len(blob)) \
        + body + blob


class ChoppedSocket:
    """A socket stand-in whose ``recv_into`` hands out the stream in the
    pieces given (then end of stream), never more than asked for."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = [p for p in pieces if p]
        self.calls = 0

    def recv_into(self, buf: Any, nbytes: int = 0) -> int:
        self.calls += 1
        if not self.pieces:
            return 0
        view = memoryview(buf).cast("B")
        n = min(nbytes or view.nbytes, view.nbytes, len(self.pieces[0]))
        view[:n] = self.pieces[0][:n]
        rest = self.pieces[0][n:]
        if rest:
            self.pieces[0] = rest
        else:
            self.pieces.pop(0)
        return n


def blob_of(n: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


SMALL = [  # (kind, message, blob)
    (wire.KIND_CALL, {"op": "hello", "args": {}}, b""),
    (wire.KIND_REPLY, {"result": [1, 2.5, "x"]}, blob_of(37, 1)),
    (wire.KIND_ERROR, {"error": "ValueError", "message": "\u00e9t\u00e9"}, b""),
    (wire.KIND_REPLY, {"result": None}, blob_of(3, 2)),
]

SIZE = wire.Reader.SIZE
LARGE = [
    (wire.KIND_REPLY, {"result": 1}, blob_of(SIZE // 2 - 100, 3)),  # fits the buffer
    (wire.KIND_REPLY, {"result": 2}, blob_of(SIZE - 10, 4)),  # > SIZE // 2
    (wire.KIND_CALL, {"op": "x", "args": {}}, b""),
    (wire.KIND_REPLY, {"result": 3}, blob_of(3 * SIZE + 7, 5)),  # > SIZE
    (wire.KIND_CALL, {"pad": "j" * (SIZE + 5)}, blob_of(11, 6)),  # JSON > SIZE
    (wire.KIND_CALL, {"p": "k" * (SIZE - 8)}, b""),  # JSON of exactly SIZE bytes
    (wire.KIND_REPLY, {"result": 4}, blob_of(5, 7)),
]


def stream_of(frames: list[tuple[int, Any, bytes]]) -> bytes:
    return b"".join(frame(*f) for f in frames)


def read_all(reader: wire.Reader, expected: list[tuple[int, Any, bytes]]) -> None:
    for kind, message, blob in expected:
        got_kind, got_msg, got_blob = reader.recv_frame()
        assert got_kind == kind
        assert got_msg == message
        assert isinstance(got_blob, np.ndarray) and got_blob.dtype == np.uint8
        assert got_blob.tobytes() == blob
    with pytest.raises(wire.FrameError, match="connection closed"):
        reader.recv_frame()  # nothing more: a clean end of stream


def test_json_of_exactly_size_bytes_is_built_right() -> None:
    assert len(json.dumps(LARGE[5][1], separators=(",", ":"))) == SIZE


def test_small_frames_split_at_every_byte_boundary() -> None:
    data = stream_of(SMALL)
    for cut in range(len(data) + 1):
        read_all(wire.Reader(ChoppedSocket([data[:cut], data[cut:]])), SMALL)


def test_small_frames_split_at_every_pair_of_boundaries() -> None:
    data = stream_of(SMALL[:2])
    for a in range(len(data) + 1):
        for b in range(a, len(data) + 1):
            read_all(wire.Reader(ChoppedSocket([data[:a], data[a:b], data[b:]])),
                     SMALL[:2])


def test_one_byte_at_a_time() -> None:
    data = stream_of(SMALL + LARGE[:3])
    read_all(wire.Reader(ChoppedSocket([data[i:i + 1] for i in range(len(data))])),
             SMALL + LARGE[:3])


def test_several_frames_in_one_receive() -> None:
    data = stream_of(SMALL * 3)
    sock = ChoppedSocket([data])
    reader = wire.Reader(sock)
    read_all(reader, SMALL * 3)
    assert sock.calls == 2  # one receive took all twelve frames (+ the end)


def test_large_parts_across_buffer_boundaries() -> None:
    data = stream_of(LARGE)
    rng = np.random.default_rng(8)
    # Cuts at every header / JSON / data boundary (+-1) and at buffer sizes.
    marks, at = [], 0
    for f in LARGE:
        raw = frame(*f)
        body = len(raw) - len(f[2])
        marks += [at, at + HEADER.size, at + body, at + len(raw)]
        at += len(raw)
    marks += [k * SIZE for k in range(1, len(data) // SIZE + 1)]
    marks += [k * SIZE // 2 for k in range(1, 2 * len(data) // SIZE + 1)]
    cuts = sorted({max(0, min(len(data), m + d)) for m in marks for d in (-1, 0, 1)})
    for cut in cuts:
        read_all(wire.Reader(ChoppedSocket([data[:cut], data[cut:]])), LARGE)
    for _ in range(20):  # and random pieces
        points = sorted(rng.integers(0, len(data), 12).tolist())
        pieces = [data[a:b]
                  for a, b in zip([0, *points], [*points, len(data)], strict=True)]
        read_all(wire.Reader(ChoppedSocket(pieces)), LARGE)


def test_data_over_the_step_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    """Data larger than 4 * _STEP is read in steps after what the buffer
    already holds (a smaller _STEP, still over the buffer's size, keeps
    this cheap)."""
    monkeypatch.setattr(wire, "_STEP", SIZE // 2 + 64)
    frames = [(wire.KIND_REPLY, {"result": 1}, blob_of(5 * SIZE + 3, 9)),
              (wire.KIND_REPLY, {"result": 2}, blob_of(9, 10)),
              (wire.KIND_REPLY, {"result": 3}, blob_of(2 * SIZE + 100, 11))]
    data = stream_of(frames)
    for cut in (0, 1, HEADER.size + 5, SIZE - 1, SIZE, SIZE + 1, 3 * SIZE,
                len(data) - 1):
        read_all(wire.Reader(ChoppedSocket([data[:cut], data[cut:]])), frames)
    read_all(wire.Reader(ChoppedSocket([data[i:i + 4096]
                                        for i in range(0, len(data), 4096)])), frames)


def test_over_a_real_socketpair() -> None:
    frames = SMALL + LARGE + SMALL
    data = stream_of(frames)
    a, b = socket.socketpair()
    a.settimeout(WAIT)
    b.settimeout(WAIT)

    def send() -> None:
        for i in range(0, len(data), 1000):
            b.sendall(data[i:i + 1000])
        b.shutdown(socket.SHUT_WR)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        read_all(wire.Reader(a), frames)
    finally:
        sender.join(WAIT)
        a.close()
        b.close()
    assert not sender.is_alive()


def test_send_frame_then_reader_round_trip() -> None:
    a, b = socket.socketpair()
    a.settimeout(WAIT)
    b.settimeout(WAIT)
    try:
        arrays = [np.arange(10, dtype=np.int64), np.ones((3, 4), np.float32)]
        descs, bufs = wire.pack_arrays(arrays)
        wire.send_frame(b, wire.KIND_REPLY, {"result": descs}, bufs)
        wire.send_frame(b, wire.KIND_CALL, {"op": "info", "args": {}})
        reader = wire.Reader(a)
        kind, msg, blob = reader.recv_frame()
        assert kind == wire.KIND_REPLY
        got = wire.unpack_arrays(msg["result"], blob)
        for x, y in zip(arrays, got, strict=True):
            np.testing.assert_array_equal(x, y)
            assert x.dtype == y.dtype
        assert reader.recv_frame()[1] == {"op": "info", "args": {}}
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("keep", [
    1, HEADER.size - 1, HEADER.size, HEADER.size + 3,  # in the header / JSON
    -1, -50,  # in the data
])
def test_truncated_frame_is_a_frame_error(keep: int) -> None:
    good = frame(wire.KIND_REPLY, {"result": 1}, blob_of(100, 12))
    cut = keep if keep > 0 else len(good) + keep
    reader = wire.Reader(ChoppedSocket([good, good[:cut]]))
    assert reader.recv_frame()[1] == {"result": 1}
    with pytest.raises(wire.FrameError):
        reader.recv_frame()


@pytest.mark.parametrize("blob_len", [SIZE - 1, 2 * SIZE])
def test_truncated_large_data_is_a_frame_error(blob_len: int) -> None:
    good = frame(wire.KIND_REPLY, {"result": 1}, blob_of(blob_len, 13))
    reader = wire.Reader(ChoppedSocket([good[:-1]]))
    with pytest.raises(wire.FrameError):
        reader.recv_frame()


def test_truncated_large_json_is_a_frame_error() -> None:
    good = frame(wire.KIND_CALL, {"pad": "z" * (2 * SIZE)})
    with pytest.raises(wire.FrameError):
        wire.Reader(ChoppedSocket([good[:-1]])).recv_frame()


def test_closed_socketpair_in_the_middle_is_a_frame_error() -> None:
    a, b = socket.socketpair()
    a.settimeout(WAIT)
    try:
        b.sendall(frame(wire.KIND_REPLY, {"result": 1}, b"abc")[:-1])
        b.close()
        with pytest.raises(wire.FrameError):
            wire.Reader(a).recv_frame()
    finally:
        a.close()


@pytest.mark.parametrize("head", [
    HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_CALL, 0,
                wire.MAX_JSON_BYTES + 1, 0),
    HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_CALL, 0, 0xFFFFFFFF, 0),
    HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_CALL, 0, 2, 1 << 62),
    HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_CALL, 0, 2, (4 << 30) + 1),
    HEADER.pack(b"XXXX", wire.VERSION, wire.KIND_CALL, 0, 2, 0),
    HEADER.pack(wire.MAGIC, wire.VERSION + 1, wire.KIND_CALL, 0, 2, 0),
    HEADER.pack(wire.MAGIC, wire.VERSION, 7, 0, 2, 0),
], ids=["json-over", "json-huge", "blob-huge", "blob-over", "magic", "version",
        "kind"])
def test_bad_header_is_a_frame_error_before_allocating(head: bytes) -> None:
    sock = ChoppedSocket([head + b"{}"])
    tracemalloc.start()
    try:
        with pytest.raises(wire.FrameError):
            wire.Reader(sock).recv_frame()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak} bytes allocated for a bad header"


def test_frame_byte_limit_from_the_environment(monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    monkeypatch.setenv("FASTREPLAY_MAX_FRAME_BYTES", str(1 << 20))
    ok = frame(wire.KIND_REPLY, {"result": 1}, blob_of(1 << 20, 14))
    over = HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_REPLY, 0, 2,
                       (1 << 20) + 1) + b"{}"
    reader = wire.Reader(ChoppedSocket([ok, over]))
    assert reader.recv_frame()[2].nbytes == 1 << 20
    with pytest.raises(wire.FrameError, match="FASTREPLAY_MAX_FRAME_BYTES"):
        reader.recv_frame()


def test_explicit_limits_of_a_call() -> None:
    data = frame(wire.KIND_CALL, {"op": "hello"}, b"x")
    with pytest.raises(wire.FrameError):
        wire.Reader(ChoppedSocket([data])).recv_frame(max_blob=0)
    with pytest.raises(wire.FrameError):
        wire.Reader(ChoppedSocket([data])).recv_frame(max_json=4)
    assert wire.Reader(ChoppedSocket([data])).recv_frame(max_blob=1)[1] == {
        "op": "hello"}


@pytest.mark.parametrize("body", [b"\xff\xfe", b"[1, 2]", b"{\"a\": ", b"nul"])
def test_bad_json_is_a_frame_error(body: bytes) -> None:
    data = HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_CALL, 0, len(body), 0) + body
    with pytest.raises(wire.FrameError):
        wire.Reader(ChoppedSocket([data])).recv_frame()


def test_unpack_arrays_reads_packed_arrays_and_refuses_bad_descriptors() -> None:
    arrays = [np.arange(5, dtype=np.uint64), np.ones((3, 2), np.float32),
              np.zeros((2, 0, 4), np.int16), np.array([b"ab", b"c"]),
              np.array([True, False])]
    descs, bufs = wire.pack_arrays(arrays)
    descs = json.loads(json.dumps(descs))  # as they arrive
    blob = b"".join(np.ascontiguousarray(b).tobytes() for b in bufs)
    for _ in range(2):  # the second time with the dtypes looked up before
        got = wire.unpack_arrays(descs, blob)
        assert [a.dtype for a in got] == [a.dtype for a in arrays]
        assert all(np.array_equal(g, a) for g, a in zip(got, arrays, strict=True))
        assert all(g.shape == a.shape for g, a in zip(got, arrays, strict=True))
    good = ["<f4", [3, 2], 0, 24]
    bad = [
        ("<f4", [3, 2], 0),  # three fields
        ["no-such-dtype", [3], 0, 12],
        [["<f4"], [3], 0, 12],  # a list for a dtype
        ["O", [1], 0, 8],  # objects never come off the wire
        ["V4", [1], 0, 4],  # not a kind the wire carries
        ["S0", [1], 0, 0],  # no size
        ["<f4", (3, 2), 0, 24],  # a shape that is not a list
        ["<f4", [3, -2], 0, 24],
        ["<f4", [-3, -2], 0, 24],  # the product fits; the dims do not
        ["<f4", [3, 2.0], 0, 24],
        ["<f4", [1] * 33, 0, 4],
        ["<f4", [3, 2], 0, 20],  # nbytes disagrees with the shape
        ["<f4", [3, 2], len(blob), 24],  # past the end
        ["<f4", [3, 2], -1, 24],
        ["<f4", [3, 2], 0.0, 24],
    ]
    assert wire.unpack_arrays([good], blob)[0].shape == (3, 2)
    for d in bad:
        with pytest.raises(wire.FrameError):
            wire.unpack_arrays([good, d], blob)
    with pytest.raises(wire.FrameError):
        wire.unpack_arrays({"not": "a list"}, blob)
