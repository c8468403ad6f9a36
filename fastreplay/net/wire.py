"""The wire format between a fastreplay ``Server`` and clients of other
processes: length-prefixed, versioned frames; nothing is unpickled.

A frame is a 20-byte header, then ``json_len`` bytes of UTF-8 JSON (the call
or the reply), then ``blob_len`` bytes of raw array and chunk data that the
JSON refers to by offset.  Every declared size is checked against a limit
before anything is allocated, and a blob is read in steps that grow the
buffer only as bytes actually arrive, so a peer that declares 2 GiB and
sends nothing costs nothing.  Any violation raises ``FrameError``: the
receiver closes that connection and nothing else.
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import sys
from typing import Any

import numpy as np

__all__ = ["FrameError", "MAGIC", "VERSION", "Reader", "recv_frame", "send_frame",
           "pack_arrays", "unpack_arrays", "max_blob_bytes", "local_socket_name",
           "split_frame"]

MAGIC = b"FRWP"
VERSION = 1
# magic, version, kind, reserved, json_len, blob_len
_HEADER = struct.Struct("<4sBBHIQ")
KIND_CALL, KIND_REPLY, KIND_ERROR = 0, 1, 2
_KINDS = (KIND_CALL, KIND_REPLY, KIND_ERROR)

#: The largest JSON part of a frame (a call's items and chunk records).
MAX_JSON_BYTES = 64 << 20
#: The largest JSON part of a connection's first frame (its hello).
MAX_HELLO_BYTES = 64 << 10
#: Default largest blob (chunk bytes, a sampled batch): 4 GiB;
#: ``FASTREPLAY_MAX_FRAME_BYTES`` changes it.
_DEFAULT_MAX_BLOB = 4 << 30
#: Blob bytes read per step (the buffer grows by at most this much ahead of
#: what was received).
_STEP = 16 << 20
# dtypes an array on the wire may have: numeric kinds and fixed bytes.
_ARRAY_KINDS = frozenset("biufcS")


class FrameError(ConnectionError):
    """A malformed, truncated or oversized frame: the connection is closed."""


def local_socket_name(port: int) -> str | None:
    """The abstract Unix socket through which a server listening on TCP
    ``port`` also takes connections from its own host (Linux; None
    elsewhere or with ``FASTREPLAY_UNIX_SOCKET=0``).  Same frames; measured
    here, a Unix socket's round trip costs 0.6-0.7x a loopback TCP one
    (21.8 vs 32.1 us for 100 bytes, 27 vs 40 us for 20 kB) and a 200 kB
    reply 0.45x.  Abstract names live in the network namespace, so another
    container falls back to TCP by itself."""
    if not sys.platform.startswith("linux") or \
            os.environ.get("FASTREPLAY_UNIX_SOCKET", "1") == "0":
        return None
    return f"\0fastreplay-{port}"


def max_blob_bytes() -> int:
    text = os.environ.get("FASTREPLAY_MAX_FRAME_BYTES")
    if not text:
        return _DEFAULT_MAX_BLOB
    try:
        value = int(text)
    except ValueError:
        raise ValueError(
            f"FASTREPLAY_MAX_FRAME_BYTES must be an integer, got {text!r}") from None
    if value < 1 << 20:
        raise ValueError(f"FASTREPLAY_MAX_FRAME_BYTES must be >= 1 MiB, got {value}")
    return value


def send_frame(sock: socket.socket, kind: int, message: Any,
               blobs: list[Any] | tuple[Any, ...] = ()) -> None:
    """Send one frame: ``message`` as JSON, then the buffers of ``blobs``
    back to back (their offsets are the caller's business)."""
    body = json.dumps(message, separators=(",", ":"), allow_nan=True).encode()
    views = [memoryview(b).cast("B") for b in blobs]
    blob_len = sum(v.nbytes for v in views)
    head = _HEADER.pack(MAGIC, VERSION, kind, 0, len(body), blob_len)
    if blob_len < 1 << 16:
        sock.sendall(b"".join([head, body, *views]))
        return
    sock.sendall(head + body)
    for v in views:
        sock.sendall(v)


def _recv_into(sock: socket.socket, view: memoryview) -> None:
    got, n = 0, view.nbytes
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise FrameError("connection closed in the middle of a frame"
                             if got else "connection closed")
        got += k


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    _recv_into(sock, memoryview(buf))
    return buf


def _recv_blob(sock: socket.socket, n: int) -> Any:
    """n bytes as a writable uint8 array.  Up to _STEP * 4 bytes are
    allocated at once (untouched pages cost nothing until data arrives);
    beyond, the buffer grows by _STEP only as bytes arrive, so a peer that
    declares gigabytes and sends nothing costs nothing."""
    if n <= 4 * _STEP:
        buf = np.empty(n, np.uint8)
        _recv_into(sock, buf.data)
        return buf
    parts = []
    left = n
    while left:
        part = np.empty(min(_STEP, left), np.uint8)
        _recv_into(sock, part.data)
        parts.append(part)
        left -= part.nbytes
    return np.concatenate(parts)


def _check_head(head: Any, max_blob: int | None, max_json: int) -> tuple[int, int, int]:
    """``(kind, json_len, blob_len)`` of a frame header, every size checked
    against its limit."""
    magic, version, kind, _, json_len, blob_len = _HEADER.unpack(head)
    if magic != MAGIC:
        raise FrameError(f"not a fastreplay frame (magic {bytes(magic)!r})")
    if version != VERSION:
        raise FrameError(f"wire version {version} is not supported (this side "
                         f"speaks {VERSION})")
    if kind not in _KINDS:
        raise FrameError(f"unknown frame kind {kind}")
    if json_len > max_json:
        raise FrameError(f"frame declares {json_len} bytes of JSON "
                         f"(at most {max_json})")
    limit = max_blob_bytes() if max_blob is None else max_blob
    if blob_len > limit:
        raise FrameError(f"frame declares {blob_len} bytes of data (at most {limit}; "
                         "FASTREPLAY_MAX_FRAME_BYTES raises the limit)")
    return kind, json_len, blob_len


def _parse(body: bytes) -> dict[str, Any]:
    try:
        message = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FrameError(f"frame JSON is malformed: {exc}") from None
    if not isinstance(message, dict):
        raise FrameError("frame JSON is not an object")
    return message


def recv_frame(sock: socket.socket, max_blob: int | None = None,
               max_json: int = MAX_JSON_BYTES) -> tuple[int, Any, Any]:
    """``(kind, message, blob)`` of the next frame, read without a buffer
    (nothing past the frame is taken from the socket); FrameError when the
    peer closed or sent something that is not a valid frame."""
    kind, json_len, blob_len = _check_head(_recv_exact(sock, _HEADER.size),
                                           max_blob, max_json)
    body = _recv_blob(sock, json_len)  # pages touched only as bytes arrive
    return kind, _parse(body.tobytes()), _recv_blob(sock, blob_len)


def split_frame(buf: bytearray | bytes, start: int = 0, max_blob: int | None = None,
                max_json: int = MAX_JSON_BYTES) -> tuple[int, int, Any, Any] | None:
    """``(end, kind, message, blob)`` of the frame at ``buf[start:]`` (for
    frames that arrive as bytes rather than on a socket), the blob copied
    into a new writable uint8 array; None while the frame is incomplete.
    The header is checked as soon as it is there (FrameError)."""
    if len(buf) - start < _HEADER.size:
        return None
    kind, json_len, blob_len = _check_head(bytes(buf[start:start + _HEADER.size]),
                                           max_blob, max_json)
    at = start + _HEADER.size
    end = at + json_len + blob_len
    if len(buf) < end:
        return None
    with memoryview(buf) as view:
        message = _parse(bytes(view[at:at + json_len]))
        blob = np.empty(blob_len, np.uint8)
        blob[:] = np.frombuffer(view[at + json_len:end], np.uint8)
    return end, kind, message, blob


class Reader:
    """The frames of one socket, read through a buffer: one system call
    takes in whatever the peer has sent (often a whole frame, sometimes
    several), where reading header, JSON and data apart costs three.  A
    frame's data is copied out of the buffer into its own array."""

    SIZE = 1 << 16

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = bytearray(self.SIZE)
        self._view = memoryview(self._buf)
        self._start = self._end = 0
        self._poll: Any = None  # ready()'s, made at its first call

    def ready(self) -> bool:
        """Whether bytes of a frame are buffered or wait on the socket (a
        reply the peer is sending: reading it takes no waiting for the
        peer to work).  Polled (select() refuses descriptors past 1023,
        which a process with many sockets, a Ray worker say, reaches)."""
        if self._end > self._start:
            return True
        if self._poll is None:
            self._poll = select.poll()
            self._poll.register(self.sock, select.POLLIN)
        return bool(self._poll.poll(0))

    def _have(self, n: int, inside: bool = True) -> None:
        """At least ``n`` (<= SIZE) bytes buffered from ``_start`` (``inside``
        a frame already begun, for the error when the peer hangs up)."""
        if self._start + n > self.SIZE:
            left = self._end - self._start
            self._buf[:left] = self._buf[self._start:self._end]
            self._start, self._end = 0, left
        while self._end - self._start < n:
            k = self.sock.recv_into(self._view[self._end:], self.SIZE - self._end)
            if k == 0:
                raise FrameError("connection closed in the middle of a frame"
                                 if inside or self._end > self._start
                                 else "connection closed")
            self._end += k

    def _take(self, n: int) -> Any:
        """The next ``n`` bytes as a new uint8 array."""
        out = np.empty(n, np.uint8)
        have = min(n, self._end - self._start)
        out[:have] = np.frombuffer(self._buf, np.uint8, have, self._start)
        self._start += have
        if have < n:
            if n - have <= self.SIZE // 2:
                self._have(n - have)
                out[have:] = np.frombuffer(self._buf, np.uint8, n - have, self._start)
                self._start += n - have
            else:  # large: straight into the array
                _recv_into(self.sock, out.data[have:])
        return out

    def recv_frame(self, max_blob: int | None = None,
                   max_json: int = MAX_JSON_BYTES) -> tuple[int, Any, Any]:
        """As the module's ``recv_frame``."""
        self._have(_HEADER.size, inside=False)
        head = self._view[self._start:self._start + _HEADER.size]
        kind, json_len, blob_len = _check_head(head, max_blob, max_json)
        self._start += _HEADER.size
        if json_len <= self.SIZE:
            self._have(json_len)
            body = bytes(self._view[self._start:self._start + json_len])
            self._start += json_len
        else:
            body = self._take(json_len).tobytes()
        message = _parse(body)
        if blob_len > 4 * _STEP:
            have = self._end - self._start
            prefix = self._take(have)
            return kind, message, np.concatenate([prefix, _recv_blob(self.sock,
                                                                     blob_len - have)])
        return kind, message, self._take(blob_len)


# ----- arrays -----

def pack_arrays(arrays: list[np.ndarray], start: int = 0
                ) -> tuple[list[list[Any]], list[np.ndarray]]:
    """Descriptors ``[dtype, shape, offset, nbytes]`` of C-contiguous copies
    of ``arrays`` laid out back to back from ``start``, and the buffers."""
    descs, bufs, at = [], [], start
    for a in arrays:
        a = np.ascontiguousarray(a)
        if a.dtype.kind not in _ARRAY_KINDS:
            raise TypeError(f"arrays of dtype {a.dtype} can't be sent")
        descs.append([a.dtype.str, list(a.shape), at, a.nbytes])
        bufs.append(a)
        at += a.nbytes
    return descs, bufs


#: dtypes by the strings peers name them with (checked once; at most 256).
_DTYPES: dict[str, np.dtype[Any]] = {}


def _wire_dtype(name: Any) -> np.dtype[Any]:
    """The dtype a descriptor names; FrameError unless it is allowed."""
    cached = _DTYPES.get(name) if type(name) is str else None
    if cached is not None:
        return cached
    try:
        dtype: np.dtype[Any] = np.dtype(name)
    except (TypeError, ValueError):
        raise FrameError(f"bad array dtype {name!r}") from None
    if dtype.kind not in _ARRAY_KINDS or dtype.hasobject:
        raise FrameError(f"dtype {name!r} is not allowed on the wire")
    if dtype.itemsize == 0:
        raise FrameError(f"dtype {name!r} has no size")
    if type(name) is str and len(_DTYPES) < 256:
        _DTYPES[name] = dtype
    return dtype


def unpack_arrays(descs: Any, blob: Any) -> list[np.ndarray]:
    """The arrays ``descs`` describe in ``blob`` (views, no copy); FrameError
    for a descriptor that does not fit.  (A learner unpacks two replies of
    ~13 arrays a batch: 19.5 -> 11.4 us a reply with the dtypes looked up
    once and one pass over each shape, session 19.)"""
    if not isinstance(descs, list):
        raise FrameError("array descriptors are not a list")
    out = []
    end = len(blob)
    for d in descs:
        try:
            dtype_s, shape, off, nbytes = d
        except (TypeError, ValueError):
            raise FrameError(f"bad array descriptor {d!r}") from None
        dtype = _wire_dtype(dtype_s)
        if (type(shape) is not list or len(shape) > 32 or type(off) is not int
                or type(nbytes) is not int):
            raise FrameError(f"bad array descriptor {d!r}")
        count = 1
        for s in shape:
            if type(s) is not int or s < 0:
                raise FrameError(f"bad array descriptor {d!r}")
            count *= s
        if count * dtype.itemsize != nbytes or off < 0 or off + nbytes > end:
            raise FrameError(f"array descriptor {d!r} does not fit the frame")
        a = np.frombuffer(blob, dtype=dtype, count=count, offset=off)
        out.append(a if len(shape) == 1 else a.reshape(shape))
    return out
