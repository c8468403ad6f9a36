"""The server side of the transport: accepts connections on the port a
``Server`` reserved and answers calls on its tables.

One thread per connection; table calls run in compiled code that releases
the GIL while it waits (rate limiters) or gathers.  A connection that sends
a malformed frame, a bad token or items that do not check out is closed;
nothing it sent half-way reaches a table (a frame of items is checked whole
before any is inserted) and every other connection keeps being served.
"""

from __future__ import annotations

import hmac
import socket
import threading
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from fastreplay import _core, _structures, errors
from fastreplay.net import priorities, wire
from fastreplay.net.codec import (
    distinct_structures,
    info_to_json,
    structure_from_json,
    structure_to_json,
)
from fastreplay.replay_sample import SampleInfoBatch

if TYPE_CHECKING:
    from fastreplay.server import Server
    from fastreplay.table import Table

__all__ = ["Service", "Session"]

#: Chunks one connection may keep for items still to come (the client
#: forgets older ones explicitly; past this the connection is closed).
MAX_CHUNKS_PER_CONNECTION = 1 << 20


class _State:
    """What one connection keeps between calls: chunks for items still to
    come and the shared-memory segments its client attached."""

    def __init__(self) -> None:
        self.chunks = _core.ChunkMap()
        self.segments: dict[str, Any] = {}


class _ProtocolError(Exception):
    """The peer broke the protocol: reply with the error, then close."""


class Service:
    """Serves ``server``'s tables on ``listener`` (a bound TCP socket)."""

    def __init__(self, server: Server, listener: socket.socket,
                 token: str | None) -> None:
        # Weakly: the threads below must not keep the server alive, so a
        # Server nobody references stops (its __del__) and they end.
        self._server_ref = weakref.ref(server)
        self._token = token
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._closed = False
        self._listeners = [listener]
        local = _local_listener(server.host, server.port)
        if local is not None:
            self._listeners.append(local)
        self._threads = []
        for sock in self._listeners:
            sock.listen(128)
            thread = threading.Thread(target=self._accept, args=(sock,), daemon=True,
                                      name="fastreplay-accept")
            thread.start()
            self._threads.append(thread)

    @property
    def _server(self) -> Server:
        server = self._server_ref()
        if server is None:
            raise errors.UnavailableError("the fastreplay server was stopped")
        return server

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns = list(self._conns)
        for listener in self._listeners:
            try:
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            listener.close()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            with self._lock:
                if self._closed:
                    sock.close()
                    return
                self._conns.add(sock)
            threading.Thread(target=self._serve, args=(sock,), daemon=True,
                             name="fastreplay-conn").start()

    # ----- one connection -----

    def _serve(self, sock: socket.socket) -> None:
        state = _State()
        try:
            if sock.family != socket.AF_UNIX:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            self._hello(sock)
            reader = wire.Reader(sock)
            while True:
                _, msg, blob = reader.recv_frame()
                if not self._answer(sock, msg, blob, state):
                    return
        except (OSError, wire.FrameError):
            pass  # peer gone or garbage: drop this connection only
        finally:
            state.chunks.clear()
            state.segments.clear()
            with self._lock:
                self._conns.discard(sock)
            sock.close()

    def _hello(self, sock: socket.socket) -> None:
        sock.settimeout(10.0)  # a peer that says nothing is dropped
        _, msg, _ = wire.recv_frame(sock, max_blob=0, max_json=wire.MAX_HELLO_BYTES)
        sock.settimeout(None)
        self._greet(sock, msg)

    def _greet(self, sock: Any, msg: dict[str, Any]) -> None:
        """Answer a connection's first frame (FrameError: close it)."""
        if msg.get("op") != "hello":
            raise wire.FrameError("first frame is not a hello")
        if self._token is not None:
            got = msg.get("token")
            if not isinstance(got, str) or not hmac.compare_digest(
                    got.encode(), self._token.encode()):
                _send_error(sock, errors.UnavailableError(
                    "fastreplay server: wrong or missing token"))
                raise wire.FrameError("bad token")
        wire.send_frame(sock, wire.KIND_REPLY, {"result": {
            "tables": sorted(self._server.tables), "version": wire.VERSION,
            "host": self._server.host, "port": self._server.port,
            "key_prefix": self._server.key_prefix}})

    def _answer(self, sock: Any, msg: dict[str, Any], blob: Any, state: _State) -> bool:
        """Handle one call and send its reply or error on ``sock``; False
        when the connection must be closed (after the error is sent)."""
        try:
            result, blobs = self._call(msg, blob, state)
        except _ProtocolError as exc:
            _send_error(sock, errors.DataLossError(str(exc)))
            return False
        except Exception as exc:  # noqa: BLE001 - goes back to the caller
            _send_error(sock, exc)
            return True
        wire.send_frame(sock, wire.KIND_REPLY, {"result": result}, blobs)
        return True

    def session(self) -> Session:
        """A virtual connection whose frames arrive as bytes (``Session``)."""
        return Session(self)

    def _table(self, args: dict[str, Any]) -> Table:
        name = args.get("table")
        tables = self._server.tables
        if not isinstance(name, str) or name not in tables:
            raise ValueError(f'Could not find table "{name}". The following tables '
                             f"exists: {', '.join(sorted(tables))}")
        return tables[name]

    def _call(self, msg: dict[str, Any], blob: Any, state: _State
              ) -> tuple[Any, list[Any]]:
        op, args = msg.get("op"), msg.get("args")
        if not isinstance(args, dict):
            raise _ProtocolError("call without arguments")
        handler = _OPS.get(op) if isinstance(op, str) else None
        if handler is None:
            raise _ProtocolError(f"unknown call {op!r}")
        return handler(self, args, blob, state)

    # ----- calls -----

    def _info(self, args: dict[str, Any], blob: Any, state: _State
              ) -> tuple[Any, list[Any]]:
        return {n: info_to_json(t.info) for n, t in self._server.tables.items()}, []

    def _metrics(self, args: dict[str, Any], blob: Any, state: _State
                 ) -> tuple[Any, list[Any]]:
        return self._server.metrics(), []

    def _sample_batch(self, args: dict[str, Any], blob: Any, state: _State
                      ) -> tuple[Any, list[Any]]:
        table = self._table(args)
        n = int(args["n"])
        segment = state.segments.get(args.get("shm"))  # type: ignore[arg-type]
        # The columns go straight into the client's segment (no bytes on
        # the socket, no copy), after room for the sample info arrays.
        head = len(SampleInfoBatch._fields) * ((8 * n + 63) // 64 * 64)
        info, columns, sid = table.sample_batch(n, timeout=_timeout(args),
                                                out=segment, offset=head)
        mass, size = table.mass_and_size()  # what a sharded client weighs by
        structure = (table.signature if table.signature is not None
                     else _structures.get(sid))
        arrays = [*info, *columns]
        offsets, total = _shm_layout(arrays)
        reply = {"n_info": len(SampleInfoBatch._fields),
                 "structure": structure_to_json(structure),
                 "n_leaves": len(columns), "nbytes": total,
                 "mass": mass, "size": size}
        if segment is not None and total <= segment.size:
            target = np.frombuffer(segment, np.uint8)
            descs = []
            for a, off in zip(arrays, offsets, strict=True):
                a = np.ascontiguousarray(a)
                if _address(a) != _address(target) + off:  # not gathered in place
                    target[off:off + a.nbytes] = a.reshape(-1).view(np.uint8)
                descs.append([a.dtype.str, list(a.shape), off, a.nbytes])
            return {**reply, "arrays": descs, "shm": segment.name}, []
        descs, bufs = wire.pack_arrays(arrays)
        return {**reply, "arrays": descs}, bufs

    def _shm_attach(self, args: dict[str, Any], blob: Any, state: _State
                    ) -> tuple[Any, list[Any]]:
        """Map the client's segment (same host only; OSError otherwise):
        writable for batches it samples, read-only for chunk bytes it
        sends (``read_only``)."""
        name, size = args.get("name"), args.get("size")
        if (not isinstance(name, str) or not name.startswith("/fastreplay-") or
                type(size) is not int or not 0 < size <= wire.max_blob_bytes()):
            raise _ProtocolError("bad shared-memory segment")
        if len(state.segments) >= 8:  # a client keeps a few; drop the oldest
            state.segments.pop(next(iter(state.segments)))
        state.segments[name] = _core.SharedSegment.attach(
            name, size, writable=args.get("read_only") is not True)
        return None, []

    def _shm_detach(self, args: dict[str, Any], blob: Any, state: _State
                    ) -> tuple[Any, list[Any]]:
        state.segments.pop(args.get("name"), None)  # type: ignore[arg-type]
        return None, []

    def _sample_items(self, args: dict[str, Any], blob: Any, state: _State
                      ) -> tuple[Any, list[Any]]:
        table = self._table(args)
        samples = table.sample_items(int(args["n"]), timeout=_timeout(args))
        arrays: list[np.ndarray] = []
        items = []
        for s in samples:
            items.append([list(s.info), len(s.data)])
            arrays.extend(np.asarray(c) for c in s.data)
        descs, bufs = wire.pack_arrays(arrays)
        return {"items": items, "arrays": descs}, bufs

    def _insert(self, args: dict[str, Any], blob: Any, state: _State
                ) -> tuple[Any, list[Any]]:
        """Chunks then items of one writer flush (outbox.Outbox._ship)."""
        table = self._table(args)
        chunks = state.chunks
        try:
            where = args.get("records_in")
            if where is not None and not isinstance(where, dict):
                raise _ProtocolError("records_in is not a region")
            records = blob if where is None else np.array(  # a copy: the client
                _chunk_data(where, blob, state, "item records"))  # may write it
            raw = wire.unpack_arrays(args["records"], records)
            if len(raw) != 6:
                raise _ProtocolError("an items frame has six record arrays")
            items, columns, slices, chunk_records, forget, after = (
                _as_records(a, d) for a, d in zip(raw, _RECORD_DTYPES, strict=True))
            data = _chunk_data(args["data"], blob, state)
            chunks.forget(forget)
            _core.restore_chunks(self._server.chunk_store, chunks, chunk_records, data)
            if len(chunks) > MAX_CHUNKS_PER_CONNECTION:
                raise _ProtocolError("too many chunks kept for one connection")
            mapped = {}
            for local, obj in args["structures"]:
                structure = structure_from_json(obj)
                mapped[local] = (0 if structure is None
                                 else _structures.intern(structure))
            local_ids = distinct_structures(items["structure"])
            if any(int(s) not in mapped for s in local_ids):
                raise _ProtocolError("an item names a structure the frame lacks")
            ids = np.asarray([mapped[int(s)] for s in local_ids], dtype=np.int32)
            items["structure"] = (ids[0] if len(ids) == 1 else
                                  ids[np.searchsorted(local_ids, items["structure"])])
            specs = args["specs"]
            if not isinstance(specs, list):
                raise _ProtocolError("specs are not a list")
            try:
                return table.insert_records(chunks, items, columns, slices, specs,
                                            timeout=_timeout(args)), []
            finally:
                # Sealed chunks: this frame's items hold what they need.
                chunks.forget(after)
        except errors.DataLossError as exc:
            raise _ProtocolError(str(exc)) from None
        except (KeyError, TypeError, ValueError, AttributeError,
                wire.FrameError) as exc:
            if isinstance(exc, errors.ReverbError):
                raise  # e.g. InvalidPriorityError: the caller's error
            raise _ProtocolError(f"malformed items frame: {exc!r}") from None

    def _priorities(self, args: dict[str, Any], blob: Any, state: _State
                    ) -> tuple[Any, list[Any]]:
        """Priority updates and mutations of one client thread, in order
        (``priorities.Ops``)."""
        try:
            ops = priorities.read_frame(args, blob)
        except wire.FrameError as exc:
            raise _ProtocolError(str(exc)) from None
        first: Exception | None = None
        for name, keys, prios, deletes, ends in ops:
            try:
                table = self._table({"table": name})
                try:
                    table.mutate_keys(keys, prios, deletes)
                except errors.InvalidPriorityError:
                    if len(ends) == 1:
                        raise
                    # One of the merged calls was refused: the others apply.
                    for lo, hi in zip([0, *ends[:-1]], ends, strict=True):
                        try:
                            table.mutate_keys(keys[lo:hi], prios[lo:hi], deletes[:0])
                        except errors.InvalidPriorityError as exc:
                            first = first or exc
            except Exception as exc:  # noqa: BLE001 - the caller's, after the rest
                first = first or exc
        if first is not None:
            raise first
        return None, []

    def _reset(self, args: dict[str, Any], blob: Any, state: _State
               ) -> tuple[Any, list[Any]]:
        self._table(args).reset()
        return None, []

    def _checkpoint(self, args: dict[str, Any], blob: Any, state: _State
                    ) -> tuple[Any, list[Any]]:
        return self._server.checkpoint(), []


class _Replies:
    """Socket-like collector of the frames a ``Session`` answers with."""

    def __init__(self) -> None:
        self.parts: list[Any] = []

    def sendall(self, data: Any) -> None:
        self.parts.append(data)  # kept alive (and unchanged) until joined

    def join(self) -> bytes:
        return b"".join(self.parts)


class Session:
    """One virtual connection to a ``Service`` whose frames come as bytes
    (another transport carries them, e.g. Ray actor calls): ``feed``
    handles every complete frame exactly as a socket connection would
    (hello first, the same replies and errors) and returns the reply
    frames.  Bytes of an incomplete frame wait for the next ``feed``; the
    bytes fed are copied, never kept.  Calls of one session run one at a
    time, in the order fed; sessions run concurrently."""

    def __init__(self, service: Service) -> None:
        self._service = service
        self._state = _State()
        self._buf = bytearray()
        self._greeted = False
        self._closed = False
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        """True once the connection is over (a protocol error, a bad token,
        a malformed frame or ``close``): later feeds answer nothing."""
        return self._closed

    def feed(self, data: Any) -> bytes:
        """The reply frames to the complete frames of what was fed so far."""
        out = _Replies()
        with self._lock:
            if self._closed:
                return b""
            self._buf += data
            at = 0
            try:
                while not self._closed:
                    hello = not self._greeted
                    got = wire.split_frame(
                        self._buf, at, max_blob=0 if hello else None,
                        max_json=wire.MAX_HELLO_BYTES if hello else wire.MAX_JSON_BYTES)
                    if got is None:
                        break
                    at, _, msg, blob = got
                    if hello:
                        self._service._greet(out, msg)
                        self._greeted = True
                    elif not self._service._answer(out, msg, blob, self._state):
                        self._close()
            except wire.FrameError:
                self._close()  # garbage or a refused hello: dropped, as a socket
            if self._closed:
                self._buf = bytearray()
            else:
                del self._buf[:at]
        return out.join()

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        self._closed = True
        self._buf = bytearray()
        self._state.chunks.clear()
        self._state.segments.clear()


_OPS = {"info": Service._info, "sample_batch": Service._sample_batch,
        "shm_attach": Service._shm_attach, "shm_detach": Service._shm_detach,
        "sample_items": Service._sample_items, "insert": Service._insert,
        "priorities": Service._priorities,
        "reset": Service._reset, "checkpoint": Service._checkpoint,
        "metrics": Service._metrics}


_RECORD_DTYPES = (_core.ITEM_DTYPE, _core.COLUMN_DTYPE, _core.SLICE_DTYPE,
                  _core.CHUNK_DTYPE, np.dtype(np.uint64), np.dtype(np.uint64))


def _as_records(raw: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """Bytes of the wire as records of ``dtype`` (a copy when unaligned)."""
    if raw.dtype != np.uint8 or raw.ndim != 1 or raw.nbytes % dtype.itemsize:
        raise _ProtocolError(f"records of {dtype} have a bad size")
    out = raw.view(dtype)
    return out if out.flags.aligned else out.copy()


def _chunk_data(where: Any, blob: Any, state: _State, what: str = "chunk data"
                ) -> Any:
    """The chunk bytes (or item records) of an insert frame: ``[at, n]`` in
    the frame's blob, or ``{"shm", "at", "n"}`` in a segment the client
    attached (``ring``; copied into the chunk store by restore_chunks)."""
    if isinstance(where, dict):
        source = state.segments.get(where.get("shm"))  # type: ignore[arg-type]
        at, n = where.get("at"), where.get("n")
        if source is None:
            verb = "name" if what.endswith("s") else "names"
            raise _ProtocolError(f"{what} {verb} a segment this connection lacks")
        size = source.size
    else:
        at, n = where
        source, size = blob, len(blob)
    if type(at) is not int or type(n) is not int or not (
            0 <= at <= size and 0 <= n <= size - at):
        verb = "do" if what.endswith("s") else "does"
        raise _ProtocolError(f"{what} {verb} not fit the frame")
    return np.frombuffer(source, np.uint8, n, at) if n else memoryview(b"")


def _address(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


def _shm_layout(arrays: list[np.ndarray]) -> tuple[list[int], int]:
    """Offsets of ``arrays`` back to back in a segment (64-byte aligned) and
    the bytes they take."""
    offsets, at = [], 0
    for a in arrays:
        offsets.append(at)
        at += (a.nbytes + 63) // 64 * 64
    return offsets, at


def _local_listener(host: str, port: int) -> socket.socket | None:
    """The abstract Unix socket (``wire.local_socket_name``) for clients of
    this host, when the server listens on a loopback or every address;
    None when the name is taken (then those clients use TCP)."""
    name = wire.local_socket_name(port)
    if name is None or not (host.startswith("127.")
                            or host in ("::1", "0.0.0.0", "::")):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(name)
    except OSError:
        sock.close()
        return None
    return sock


def _timeout(args: dict[str, Any]) -> float | None:
    t = args.get("timeout")
    if t is None:
        return None
    if type(t) not in (int, float) or not t >= 0:
        raise ValueError(f"timeout must be None or >= 0, got {t!r}")
    return float(t)


def _send_error(sock: socket.socket, exc: BaseException) -> None:
    try:
        wire.send_frame(sock, wire.KIND_ERROR,
                        {"error": type(exc).__name__, "message": str(exc)})
    except OSError:
        pass
