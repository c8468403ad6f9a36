"""One connection of a ``RemoteBackend`` to a server, and what the client
keeps for it: deferred calls not yet confirmed, priority updates not yet
sent, batches asked for ahead, the chunks the server holds, shared-memory
segments and the ring (``remote.py`` and ``sampling.py`` make and use
them)."""

from __future__ import annotations

import collections
import socket
import threading
import weakref
from typing import Any

import numpy as np

from fastreplay import errors
from fastreplay.net import ahead, wire
from fastreplay.net.outbox import HeldChunks
from fastreplay.net.priorities import Ops
from fastreplay.net.ring import SendRing

__all__ = ["SHM_KEEP", "Conn", "deliver", "error_from", "segment_arrays"]

#: Free segments a connection keeps.
SHM_KEEP = 3

_BUILTIN_ERRORS = {e.__name__: e for e in (
    ValueError, TypeError, KeyError, IndexError, OverflowError, RuntimeError,
    MemoryError, TimeoutError)}


def error_from(msg: dict[str, Any]) -> BaseException:
    name, text = str(msg.get("error")), str(msg.get("message"))
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        return cls(text)
    if name in _BUILTIN_ERRORS:
        return _BUILTIN_ERRORS[name](text)
    return errors.InternalError(f"{name}: {text}")


class Conn:
    """One connection and the chunks the server keeps for it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = wire.Reader(sock)
        self.held = HeldChunks()  # the chunks the server keeps for this connection
        # Deferred calls sent whose replies are not read yet, oldest first,
        # as call() arguments: sent again on a new connection if this one
        # dies before they are confirmed.
        self.pending: collections.deque[tuple[Any, ...]] = collections.deque()
        # Shared-memory segments the server attached for this connection,
        # free for the next batch (in use while a sampled array views one).
        self.free: list[Any] = []
        # Held by the thread using the connection for a whole call (and by
        # the priorities Flusher while it sends).
        self.lock = threading.RLock()
        self.ops = Ops()  # priority updates not sent yet
        # An error of a deferred call the Flusher read: raised by the next call.
        self.failed: BaseException | None = None
        # Batches asked for ahead, oldest first.
        self.ahead: collections.deque[ahead.Ahead] = collections.deque()
        # Shared memory the outbox packs chunk bytes into (same host only);
        # False once the server could not map one.
        self.ring: SendRing | None | bool = None
        self.streak = ahead.Streak()
        # Whether this connection's thread ever queued a priority update
        # (its batches asked for ahead can then be thrown away for them).
        self.updates = False

    def settle(self, until: Any = None) -> None:
        """Read the replies owed for deferred calls (up to the batch asked
        for ahead ``until``, when given); raise the first error among them
        (after reading them)."""
        self._read_replies(until, wait=True)

    def settle_arrived(self) -> None:
        """``settle`` for the replies that have arrived (a writer shipping
        frames itself reads them without waiting; ``outbox.ship_full``)."""
        self._read_replies(None, wait=False)

    def _read_replies(self, until: Any, wait: bool) -> None:
        first: BaseException | None = None
        while self.pending and (wait or self.reader.ready()):
            kind, msg, blob = self.reader.recv_frame()
            op, args, _, _, done = self.pending.popleft()
            if isinstance(done, ahead.Ahead):
                done.reply = (kind, msg, blob)
                if done is until:
                    break
                continue
            if op == "insert" and isinstance(self.ring, SendRing):
                for key in ("data", "records_in"):  # in the order taken
                    region = args.get(key)
                    if isinstance(region, dict):
                        self.ring.give_back(region["at"])  # the server is done
            if kind == wire.KIND_ERROR and first is None:
                first = error_from(msg)
        if first is not None:
            raise first

    def unconfirmed(self) -> list[tuple[Any, ...]]:
        """Deferred calls sent and not confirmed, to send again on a new
        connection (batches asked for ahead are not)."""
        return [c for c in self.pending if not isinstance(c[4], ahead.Ahead)]

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def deliver(conn: Conn, ship: Any) -> None:
    """Send ``conn``'s waiting priority updates and read the replies it is
    owed (bounded), so that closing it loses nothing it accepted."""
    with conn.lock:
        try:
            conn.sock.settimeout(5.0)
            if conn.ops.items:
                ship(conn)
            conn.settle()
        except Exception:  # noqa: BLE001 - closing: errors are no one's now
            pass


def push(conn: Conn) -> None:
    """Ship what a connector's socket-like object buffers (``push``, e.g.
    a Ray link's, which otherwise waits for 64 KiB or a read): for
    requests sent ahead of their reads."""
    ship = getattr(conn.sock, "push", None)
    if ship is not None:
        try:
            ship()
        except OSError:
            pass  # the next call finds the connection broken, reconnects


def segment_arrays(descs: Any, conn: Conn, segment: Any) -> list[np.ndarray]:
    """Read-only views of a batch the server wrote into ``segment``; the
    segment goes back to ``conn``'s free list when the last view is gone."""
    holder = np.frombuffer(segment, np.uint8)
    arrays = wire.unpack_arrays(descs, holder)
    weakref.finalize(holder, give_back, conn, segment)
    return arrays


def give_back(conn: Conn, segment: Any) -> None:
    if len(conn.free) < SHM_KEEP:
        conn.free.append(segment)
