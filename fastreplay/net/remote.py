"""The client side of the transport: ``RemoteBackend`` gives ``Client`` the
tables of a server in another process or on another machine.

Calls travel as frames (``wire``) over one connection per calling thread
(``conn.Conn``: the server's Unix socket on its host, else TCP; held as
``connections`` says).  Writers
write into local staging queues (one per remote table, ``Table.queue``)
with the same compiled writer as in process, and an ``outbox.Outbox``
thread ships what they created (chunk bytes through a shared-memory
``ring`` on the server's host).  Large batches sampled on the server's host
come through shared memory and a learner's next batches are asked for
``ahead`` (both in ``sampling``); priority updates are sent in batches
(``priorities``).

When the server goes away, calls reconnect for up to ``reconnect_window``
seconds (``FASTREPLAY_RECONNECT_WINDOW``, default 10) and then raise
``UnavailableError`` (a ``ConnectionError``-style error); no call waits
forever on a dead server.
"""

from __future__ import annotations

import itertools
import os
import secrets
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from fastreplay import _core, errors
from fastreplay.net import wire
from fastreplay.net.codec import info_from_json
from fastreplay.net.conn import Conn, deliver, error_from, push
from fastreplay.net.connections import Connections, RefusedError
from fastreplay.net.outbox import STAGING_ITEMS, Outbox, Sink
from fastreplay.net.priorities import MAX_KEYS, Flusher
from fastreplay.net.ring import RING_BYTES, SendRing
from fastreplay.net.sampling import Sampling
from fastreplay.rate_limiters import MinSize
from fastreplay.table import Table, TableInfo, key_array

__all__ = ["RemoteBackend"]

#: Deferred calls (priority updates) a connection sends before it reads
#: their replies: few enough that the replies never fill a socket buffer
#: (a Unix socket charges ~0.8 KiB of its ~208 KiB for each small reply:
#: 256 owed replies took 196 KiB of it, and with a batch asked ahead
#: unread on top the server blocked and the connection deadlocked; 64
#: leave room, session 19).
MAX_OWED = 64
_LOOPBACK = ("127.0.0.1", "::1")
_counter = itertools.count()
def _window() -> float:
    text = os.environ.get("FASTREPLAY_RECONNECT_WINDOW", "10")
    try:
        value = float(text)
    except ValueError:
        raise ValueError("FASTREPLAY_RECONNECT_WINDOW must be a number of seconds, "
                         f"got {text!r}") from None
    return max(value, 0.0)


class RemoteBackend(Connections, Sampling):
    """The tables of the server at ``host:port`` in another process
    (sampling: ``net.sampling``)."""

    def __init__(self, host: str, port: int, *, reconnect_window: float | None = None,
                 token: str | None = None,
                 connector: Callable[[float], Any] | None = None) -> None:
        self._host = "127.0.0.1" if host in ("", "localhost") else host.strip("[]")
        self._port = port
        self._window = _window() if reconnect_window is None else reconnect_window
        self._token = token if token is not None else os.environ.get("FASTREPLAY_TOKEN")
        self._local = threading.local()
        self._lock = threading.Lock()
        self._conns: list[Conn] = []
        # Connections of threads that ended, closed by the next _connect
        # (a finalizer must not take locks: it may run anywhere).
        self._gone: list[Conn] = []
        self._staging: dict[str, Table] | None = None
        self._key_prefix: int | None = None  # the server's (hello)
        self._infos: dict[str, TableInfo] = {}
        self._outbox: Outbox | None = None
        self._store = _core.ChunkStore()
        # connector(wait): a socket-like object (sendall, recv_into,
        # settimeout, close) carrying the frames instead of TCP or the Unix
        # socket, e.g. Ray actor calls; no shared memory through it.
        self._connector = connector
        self._same_host = connector is None and (
            self._host in _LOOPBACK or self._host.startswith("127."))
        self._shm = self._same_host and os.environ.get("FASTREPLAY_SHM", "1") != "0"
        self._batch_bytes: dict[tuple[str, int], int] = {}
        self._table_sizes: dict[str, int] = {}  # as the last sample reply said
        # Per table, the last sample reply's structure form and structure.
        self._structures_seen: dict[str, tuple[Any, Any]] = {}
        self._flusher: Flusher | None = None
        self._checkers: dict[str, Table] = {}
        # When the backend is collected without close(): stop its threads
        # and close its sockets.  A finalize callback runs before the
        # finalizers of the sockets it would otherwise leave to the gc.
        self._closers: list[Callable[[], None]] = []
        weakref.finalize(self, _release, self._conns, self._closers)

    def call(self, op: str, args: dict[str, Any],
             blobs: Any = (), timeout: float | None = None,
             build: Any = None, defer: bool = False) -> tuple[Any, Any]:
        """``(result, blob)`` of call ``op``; reconnects within the window
        (counted from the first failure).  ``build(conn)`` makes ``(args,
        blobs)`` per attempt when given.  A ``defer``red call returns at
        once: its reply is read before the next call of this thread (or
        after MAX_OWED such calls), which raises its error if it failed; if
        the connection dies first, it is sent again on the next one.
        Priority updates waiting on the connection are sent first."""
        deadline = time.monotonic() + self._window
        failed = False
        carry: list[tuple[Any, ...]] = []
        while True:
            conn = self._conn(deadline)
            with conn.lock:
                for a_op, a_args, a_blobs, a_timeout, a_build in carry:
                    # unconfirmed deferred calls go first
                    self.call(a_op, a_args, a_blobs, a_timeout, a_build, defer=True)
                carry = []
                if conn.failed is not None:
                    exc, conn.failed = conn.failed, None
                    raise exc
                if build is not None:
                    args, blobs = build(conn)
                if conn.ahead and not defer and op != "shm_attach":
                    for a in conn.ahead:
                        a.valid = False  # another call came in between
                try:
                    conn.sock.settimeout(None if timeout is None else timeout + 10.0)
                    if conn.ops.items:
                        self._ship_ops(conn)
                    # A pipelined connection (a Ray link, where a round trip
                    # costs a millisecond) sends the call before reading the
                    # replies owed; a socket reads them first.
                    pipelined = getattr(conn.sock, "pipelined", False) and not defer
                    if len(conn.pending) >= MAX_OWED or not (defer or pipelined):
                        conn.settle()
                    wire.send_frame(conn.sock, wire.KIND_CALL, {"op": op, "args": args},
                                    blobs)
                    if defer:
                        conn.pending.append((op, args, blobs, timeout, build))
                        return None, None
                    if conn.pending:
                        _settle_before(conn)
                    kind, msg, blob = conn.reader.recv_frame()
                except TimeoutError:
                    self._drop(conn)
                    raise errors.DeadlineExceededError(
                        f"{op} on {self._host}:{self._port}: no reply within "
                        f"{timeout} s") from None
                except (OSError, wire.FrameError):
                    carry = conn.unconfirmed()
                    self._drop(conn)
                    if not failed:  # the window starts at the first failure
                        failed, deadline = True, time.monotonic() + self._window
                    elif time.monotonic() > deadline:
                        raise errors.UnavailableError(
                            f"No fastreplay server at {self._host}:{self._port}: the "
                            f"connection kept failing for {self._window:g} s") from None
                    continue  # the server went away: reconnect and try again
            if kind == wire.KIND_ERROR:
                exc = error_from(msg)
                if isinstance(exc, errors.DataLossError):
                    self._drop(conn)  # the server closed this connection
                raise exc
            return msg.get("result"), blob

    def _ship_ops(self, conn: Conn) -> None:
        """Send the priority updates waiting on ``conn`` as one deferred
        call (``conn.lock`` held).  Its reply is read like any deferred
        call's; an error read here waits in ``conn.failed`` for the next
        call of the connection's thread."""
        if len(conn.pending) >= MAX_OWED:
            _read_owed(conn)
        args, blobs = conn.ops.take()
        conn.pending.append(("priorities", args, blobs, None, None))
        wire.send_frame(conn.sock, wire.KIND_CALL, {"op": "priorities", "args": args},
                        blobs)

    def _ship_ops_unread(self, conn: Conn) -> None:
        """``_ship_ops`` where the connection's thread is not about to read
        its replies (the Flusher's sends, MAX_KEYS reached in an update):
        what the connection is owed is read first.  A thread that sampled
        ahead and then only updates priorities (a learner that moved to a
        ``dataset``) never reads again; the server, blocked sending it a
        batch, stops reading, and updates sent meanwhile fill the other
        direction until both wait forever (session 19).  A pipelined link
        (Ray) holds its replies itself: read at MAX_OWED, as ever."""
        if conn.pending and not getattr(conn.sock, "pipelined", False):
            _read_owed(conn)
        self._ship_ops(conn)

    def _flush_ops(self, conn: Conn) -> None:
        """``_ship_ops`` for the Flusher: what it sends goes now even
        through a connector that buffers until a read (``_push``)."""
        self._ship_ops_unread(conn)
        push(conn)

    def settle(self) -> None:
        """Send this thread's waiting priority updates and wait for the
        replies its deferred calls still owe (sending them again on a new
        connection if the server went away); raise the first error among
        them."""
        deadline = time.monotonic() + self._window
        while True:
            conn = getattr(self._chan(), "conn", None)
            if conn is None or not (conn.pending or conn.ops.items or conn.failed):
                return
            with conn.lock:
                try:
                    conn.sock.settimeout(None)
                    if conn.ops.items:
                        self._ship_ops(conn)
                    if conn.failed is not None:
                        exc, conn.failed = conn.failed, None
                        raise exc
                    conn.settle()
                    return
                except (OSError, wire.FrameError):
                    carry = conn.unconfirmed()
                    self._drop(conn)
                    if time.monotonic() > deadline:
                        raise errors.UnavailableError(
                            f"fastreplay server at {self._host}:{self._port} went "
                            "away before confirming the items sent") from None
            for a_op, a_args, a_blobs, a_timeout, a_build in carry:
                self.call(a_op, a_args, a_blobs, a_timeout, a_build, defer=True)

    def close(self, ship: bool = True) -> None:
        """Stop shipping (with ``ship``, what is staged is sent first) and
        close every connection."""
        if self._outbox is not None:
            if ship:
                try:
                    self._outbox.flush(None)
                except errors.ReverbError:
                    pass
            self._outbox.close()
        if self._flusher is not None:
            self._flusher.close()
        with self._lock:
            conns = list(self._conns)
            self._conns.clear()
        for c in conns:
            if ship:
                deliver(c, self._ship_ops)
            c.close()

    # ----- tables -----

    def info(self, timeout: float | None = None) -> dict[str, TableInfo]:
        if timeout:
            saved, self._window = self._window, float(timeout)
            try:
                result, _ = self.call("info", {})
            except RefusedError:
                raise
            except errors.UnavailableError:
                raise errors.DeadlineExceededError(
                    "ServerInfo call did not complete within provided timeout of "
                    f"{timeout}s") from None
            finally:
                self._window = saved
        else:
            result, _ = self.call("info", {})
        infos = {name: info_from_json(d) for name, d in result.items()}
        self._infos = infos
        return infos

    def table_info(self, table: str) -> TableInfo:
        info = self._infos.get(table) or self.info().get(table)
        if info is None:
            raise ValueError(f'Could not find table "{table}". The following tables '
                             f"exists: {', '.join(sorted(self._infos))}")
        return info

    def staging(self) -> tuple[dict[str, Table], _core.ChunkStore, Sink]:
        """Local queues mirroring the remote tables, for writers."""
        with self._lock:
            if self._staging is None:
                infos = self._infos or None
            else:
                assert self._outbox is not None
                return self._staging, self._store, Sink(self._outbox, self)
        if infos is None:
            infos = self.info()
        with self._lock:
            if self._staging is None:
                staging = {
                    n: Table.queue(n, STAGING_ITEMS, signature=i.signature,
                                   compression=i.compression)
                    for n, i in infos.items()}
                for table in staging.values():
                    table._set_key_prefix(self._key_prefix)
                    table._skip_episodes()  # items only pass through
                self._staging = staging
                self._outbox = Outbox(self, self._staging)
                self._closers.append(self._outbox.close)
            return self._staging, self._store, Sink(self._outbox, self)

    def ring_region(self, conn: Conn, n: int) -> tuple[SendRing, int] | None:
        """``(ring, offset)`` of ``n`` bytes of shared memory on ``conn``
        for an insert frame's chunk bytes (``ring``; ``conn.lock`` held),
        the ring made and attached the first time; None when the bytes
        must travel on the socket."""
        if not self._shm or conn.ring is False:
            return None
        if conn.ring is None:
            name = f"/fastreplay-{os.getpid()}-{next(_counter)}-{secrets.token_hex(4)}"
            conn.ring = False
            try:
                seg = _core.SharedSegment.create(name, RING_BYTES, writable=True)
            except OSError:
                return None
            try:
                self.call("shm_attach", {"name": name, "size": RING_BYTES,
                                         "read_only": True})
            except (errors.ReverbError, OSError):
                return None
            finally:
                seg.unlink()  # mapped by both sides now: the name is not needed
            if getattr(self._chan(), "conn", None) is not conn:
                return None  # reconnected meanwhile
            conn.ring = SendRing(seg)
        assert isinstance(conn.ring, SendRing)
        at = conn.ring.take(n)
        return None if at is None else (conn.ring, at)

    def mutate_priorities(self, table: str, updates: Mapping[int, float] | None,
                          deletes: Iterable[int] | None) -> None:
        self.table_info(table)  # an unknown table fails here, not later
        updates = updates or {}
        keys = key_array(table, list(updates))
        prios = np.fromiter(updates.values(), np.float64, len(updates))
        dels = key_array(table, list(deletes or ()))
        self._check_priorities(table, prios)
        self._queue(table, keys, prios, dels)

    def update_priorities(self, table: str, keys: Any, priorities: Any) -> None:
        self.table_info(table)  # an unknown table fails here, not later
        k = key_array(table, keys).copy()  # kept until sent: the caller may reuse it
        p = np.array(priorities, dtype=np.float64).reshape(-1)
        if len(k) != len(p):
            raise ValueError(f"keys and priorities differ in length ({len(k)} != "
                             f"{len(p)})")
        self._check_priorities(table, p)
        self._queue(table, k, p, None)

    def _check_priorities(self, table: str, priorities: np.ndarray) -> None:
        """Refuse, at the call, priorities the server's table would refuse
        (InvalidPriorityError, as in process): an empty local table with the
        same selectors checks them (the server checks them again)."""
        checker = self._checkers.get(table)
        if checker is None:
            info = self.table_info(table)
            checker = self._checkers[table] = Table(
                table, info.sampler_options.to_selector(),
                info.remover_options.to_selector(), 1, MinSize(1))
        checker.mutate_keys(np.zeros(len(priorities), np.uint64), priorities,
                            np.empty(0, np.uint64))

    def _queue(self, table: str, keys: np.ndarray, priorities: np.ndarray,
               deletes: np.ndarray | None) -> None:
        """Add one update to this thread's connection (``priorities``): sent
        with the thread's next call, once MAX_KEYS keys wait, or by the
        Flusher after MAX_DELAY."""
        conn = self._conn(time.monotonic() + self._window)
        with conn.lock:
            first = conn.ops.add(table, keys, priorities, deletes)
            conn.updates = True
            for a in conn.ahead:
                a.touched.append(keys)
                if deletes is not None:
                    a.touched.append(deletes)
            full = conn.ops.keys >= MAX_KEYS
        if full:
            self._send_ops()
        elif first:
            if self._flusher is None:
                with self._lock:
                    if self._flusher is None:
                        self._flusher = Flusher(self._flush_ops)
                        self._closers.append(self._flusher.close)
            self._flusher.watch(conn)

    def _send_ops(self) -> None:
        """Send this thread's waiting priority updates now (their replies
        are read later, like any deferred call's)."""
        conn = self._conn(time.monotonic() + self._window)
        with conn.lock:
            if not conn.ops.items:
                return
            try:
                self._ship_ops_unread(conn)
                return
            except (OSError, wire.FrameError):
                carry = conn.unconfirmed()
                self._drop(conn)
        for a_op, a_args, a_blobs, a_timeout, a_build in carry:
            self.call(a_op, a_args, a_blobs, a_timeout, a_build, defer=True)

    def reset(self, table: str) -> None:
        self.call("reset", {"table": table})

    def checkpoint(self) -> str:
        result, _ = self.call("checkpoint", {})
        return str(result)

    def metrics(self) -> dict[str, float]:
        result, _ = self.call("metrics", {})
        return {str(k): v for k, v in result.items()}


def _settle_before(conn: Conn) -> None:
    """Read the replies owed before a pipelined call's; when one is an
    error, the call's reply is read and dropped and the error raised."""
    try:
        conn.settle()
    except (OSError, wire.FrameError):
        raise
    except Exception:
        try:
            conn.reader.recv_frame()
        except (OSError, wire.FrameError):
            pass  # the next call reconnects
        raise


def _release(conns: list[Conn], closers: list[Callable[[], None]]) -> None:
    """What a backend collected without ``close()`` leaves: its outbox and
    flusher threads stop, its connections close (staged items are dropped)."""
    for close in closers:
        try:
            close()
        except Exception:  # noqa: BLE001, S110 - interpreter shutdown
            pass
    for conn in list(conns):
        conn.close()
    conns.clear()


def _read_owed(conn: Conn) -> None:
    """Read the replies ``conn`` is owed (``conn.lock`` held); an error
    among them waits in ``conn.failed`` for the thread's next call."""
    try:
        conn.settle()
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001 - the caller's error, for later
        conn.failed = conn.failed or exc
