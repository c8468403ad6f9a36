"""The ``"ray"`` transport: fastreplay's wire protocol carried by Ray actor
calls, for a client on another node than its shard.

Both sides speak the protocol of ``fastreplay.net`` unchanged (writers'
outbox, deferred calls, priority updates, batches asked for ahead): only
the bytes travel differently.

- Client: ``RayConnector(actor)`` is a ``fastreplay.Client`` connector.  Each
  connection is a ``RaySocket``: what the client sends is buffered and
  shipped as one asynchronous ``actor.link_exchange(session, seq, data)``
  call when 64 KiB are waiting or when the client reads; the calls' replies
  (the server's frames) are read in order.  Large messages travel in parts
  of at most PART_BYTES: what the client sends as several arguments, a
  reply it expects to be large as several return values (``num_returns``).
  Ray carries values that small inside the call and its reply instead of
  through the object store.  A dead actor is a broken socket
  (``ConnectionResetError``), so the client's reconnect window applies; a
  socket timeout is ``ray.get``'s.
- Shard: ``LinkHost(server)`` answers ``link_open``, ``link_exchange`` and
  ``link_close`` (the shard actor delegates to it).  Each session is one
  ``Server.session()``.  A threaded actor runs calls in any order, so the
  host runs each session's exchanges in ``seq`` order (waiting a bounded
  time for a missing one) and different sessions concurrently.  The bytes
  Ray hands over are copied by the session, never kept (ray#8227).
"""

from __future__ import annotations

import collections
import secrets
import threading
import time
from typing import Any

from fastreplay.net.service import Session
from fastreplay.server import Server

__all__ = ["LinkHost", "RayConnector", "RaySocket", "SHIP_BYTES", "MAX_IN_FLIGHT",
           "PART_BYTES"]

#: Bytes a RaySocket buffers before it ships them without waiting for a read.
SHIP_BYTES = 64 << 10
#: Exchanges of one RaySocket in flight; past this a send waits for the oldest
#: reply (as a full socket buffer would), so one connection keeps at most this
#: many of the actor's threads (one running, the next waiting its turn).
MAX_IN_FLIGHT = 2
#: Bytes of a message's part at most.  Ray passes an argument or a return
#: value under its max_direct_call_object_size (100 KiB by default) inline
#: in the call or its reply, and puts a larger one in the object store,
#: which the other node then pulls.  Medians of 60-100 calls, 3 rounds,
#: 2-node loopback cluster (session 18): two actors on the other node
#: answering 620 KB each (88 Atari frames) took 10.4-15.8 ms as one return
#: value each and 2.2-4.6 ms as 8; a 250 KB argument to an actor on the
#: other node 3.8-5.2 ms as one and 0.9-1.1 ms as 3 (same node: 1.7-2.0
#: and 0.9-1.1 ms).
PART_BYTES = 96 << 10
#: Parts of one message at most (Ray inlines up to 10 MB of a call's
#: arguments or returns; past that, or past this, the last part carries
#: the rest).
MAX_PARTS = 64
#: Replies whose sizes predict the next one's (the largest of them counts:
#: a learner's exchanges alternate batches asked for and bare updates).
SIZE_MEMORY = 4


def _broken(exc: BaseException) -> OSError:
    return ConnectionResetError(f"fastreplay shard actor unreachable: {exc}")


class RaySocket:
    """A socket-like connection to a ``LinkHost`` behind ``actor`` (session
    ``session_id``).  Used by one thread at a time (the client's
    ``Conn.lock``)."""

    #: The client sends a call before reading the replies it owes
    #: (``RemoteBackend.call``): one exchange instead of two.
    pipelined = True
    #: Seconds queued priority updates wait for the thread's next call
    #: before the Flusher ships them alone (``priorities``): a learner's
    #: updates then ride with its next batch asked for ahead, one actor
    #: call an iteration instead of two (each ~0.3 ms of the client's CPU
    #: and ~1 ms of latency here, session 16).
    flush_delay = 0.025
    #: Batches a thread that never updates priorities (a ``dataset``
    #: worker) keeps asked for ahead (``ahead.depth``): refilled eight at a
    #: time, one actor call per eight batches.  A dataset over 2 shards (one
    #: across nodes), learner in the driver, interleaved A/B, 4 pairs:
    #: 168-208k rows/s with 8, 216-255k with 16 (32: +2-31%, 3 pairs;
    #: a deeper local socket: no gain), session 18.
    ahead_depth = 16
    #: Batches a learner's thread (it updates priorities) keeps asked for
    #: ahead when they are small: refilled four at a time, an actor call per
    #: four batches; batches holding keys it updated are skipped as ever.
    #: Learner in the driver, 2 shards (one across nodes), interleaved A/B in
    #: one process: 2 -> 4 gave 65.6-105.4k -> 81.1-110.2k rows/s (4 pairs,
    #: session 18); 4 -> 8 with 500k items a shard (the bench's full tables)
    #: 148-200k -> 171-235k (median 170k -> 195k, 4 triples; 16: 165-255k,
    #: more batches thrown for the learner's own updates), with 50k a shard
    #: 79-110k -> 87-104k (median 94k -> 98k, 5 pairs; session 19).
    update_ahead_depth = 8

    def __init__(self, actor: Any, session_id: int) -> None:
        self._actor = actor
        self._session = session_id
        self._seq = 0
        self._out = bytearray()
        self._flight: collections.deque[Any] = collections.deque()
        self._in: bytes = b""
        self._pos = 0
        self._ready: collections.deque[bytes] = collections.deque()  # parts to read
        self._sizes: collections.deque[int] = collections.deque([0], SIZE_MEMORY)
        #: Exchanges whose reply was asked for in several parts.
        self.split_replies = 0
        self._timeout: float | None = None
        self._eof = False
        self._closed = False

    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout

    def gettimeout(self) -> float | None:
        return self._timeout

    def sendall(self, data: Any) -> None:
        if self._closed or self._eof:
            raise BrokenPipeError("fastreplay ray link is closed")
        self._out += data
        if len(self._out) >= SHIP_BYTES:
            self._ship()

    def push(self) -> None:
        """Ship what is buffered now (requests sent ahead of their reads:
        batches asked for ahead, priority updates of the Flusher)."""
        if self._out and not (self._closed or self._eof):
            self._ship()

    def _ship(self) -> None:
        """Send what is buffered as one exchange."""
        while len(self._flight) >= MAX_IN_FLIGHT:
            self._collect()
        data = split(self._out, -(-len(self._out) // PART_BYTES))
        self._out = bytearray()
        parts = reply_parts(max(self._sizes))
        if parts == 1:
            ref: Any = self._actor.link_exchange.remote(self._session, self._seq, *data)
        else:
            ref = self._actor.link_exchange.options(num_returns=parts).remote(
                self._session, self._seq, *data, parts=parts)
            self.split_replies += 1
        self._flight.append(ref)
        self._seq += 1

    def _collect(self) -> None:
        """Wait for the oldest exchange's reply and buffer it for reading."""
        import ray
        from ray.exceptions import GetTimeoutError, RayError

        try:
            reply = ray.get(self._flight[0], timeout=self._timeout)
        except GetTimeoutError:
            raise TimeoutError("timed out") from None  # the reply may still come
        except RayError as exc:
            self._flight.clear()
            raise _broken(exc) from None
        self._flight.popleft()
        parts = reply if isinstance(reply, list) else [reply]
        if parts[0] is None:  # the host closed the session
            self._eof = True
            self._flight.clear()
            return
        self._sizes.append(sum(len(p) for p in parts))
        self._ready.extend(p for p in parts if p)  # read in place: Ray's bytes are ours

    def recv_into(self, buffer: Any, nbytes: int = 0) -> int:
        view = memoryview(buffer).cast("B")
        n = nbytes or view.nbytes
        while self._pos == len(self._in):
            if self._ready:
                self._in, self._pos = self._ready.popleft(), 0
                continue
            if self._eof or self._closed:
                return 0
            if self._out:
                self._ship()
            if not self._flight:
                # Nothing asked: a real socket would wait for the timeout.
                if self._timeout is not None:
                    time.sleep(self._timeout)
                    raise TimeoutError("timed out")
                raise ConnectionAbortedError("fastreplay ray link: read with "
                                             "nothing sent")
            self._collect()
        k = min(n, len(self._in) - self._pos)
        with memoryview(self._in) as src:
            view[:k] = src[self._pos:self._pos + k]
        self._pos += k
        return k

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._flight.clear()
        self._ready.clear()
        try:  # in order after what was shipped; nobody waits for it
            self._actor.link_close.remote(self._session, self._seq)
        except Exception:  # noqa: BLE001, S110 - a dead actor or Ray shut down
            pass


class RayConnector:
    """A ``fastreplay.Client`` connector (``connector=``) to the
    ``LinkHost`` an actor exposes as ``link_open`` / ``link_exchange`` /
    ``link_close``; picklable (it holds the actor handle)."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def __call__(self, timeout: float) -> RaySocket:
        import ray
        from ray.exceptions import GetTimeoutError, RayError

        try:
            session = ray.get(self.actor.link_open.remote(), timeout=timeout)
        except GetTimeoutError:
            raise TimeoutError("fastreplay shard actor did not answer") from None
        except RayError as exc:
            raise ConnectionRefusedError(
                f"fastreplay shard actor unreachable: {exc}") from None
        return RaySocket(self.actor, int(session))

    def __reduce__(self) -> tuple[Any, ...]:
        return RayConnector, (self.actor,)


class _Link:
    """One session and the turn of its exchanges."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.turn = threading.Condition()
        self.next_seq = 0
        self.used = time.monotonic()


class LinkHost:
    """Serves ``server`` to ``RaySocket`` clients (the shard actor's
    ``link_open``, ``link_exchange`` and ``link_close`` delegate here).

    ``order_wait`` bounds how long an exchange waits for its predecessor
    (Ray delivers a threaded actor's calls out of order, not never); past
    it the session is closed.  Sessions unused for ``max_idle_s`` (their
    client vanished without closing) are dropped when another opens."""

    def __init__(self, server: Server, *, order_wait: float = 60.0,
                 max_idle_s: float = 3600.0) -> None:
        self._server = server
        self._order_wait = order_wait
        self._max_idle = max_idle_s
        self._lock = threading.Lock()
        self._links: dict[int, _Link] = {}

    def link_open(self) -> int:
        """A new session's id."""
        link = _Link(self._server.session())
        now = time.monotonic()
        with self._lock:
            for sid, old in list(self._links.items()):
                if now - old.used > self._max_idle:
                    del self._links[sid]
                    old.session.close()
            # Random: a client of this actor's previous life (before a
            # restart) must not find its session id taken by another client.
            sid = secrets.randbits(62)
            while sid in self._links:
                sid = secrets.randbits(62)
            self._links[sid] = link
        return sid

    def _turn(self, session_id: int, seq: int) -> _Link | None:
        """The session, its ``turn`` held, once exchange ``seq`` is next;
        None (nothing held) when the session is gone."""
        link = self._links.get(session_id)
        if link is None:
            return None
        link.turn.acquire()
        deadline = time.monotonic() + self._order_wait
        while link.next_seq != seq and not link.session.closed:
            left = deadline - time.monotonic()
            if left <= 0 or link.next_seq > seq:
                self._end(session_id, link)
                break
            link.turn.wait(left)
        if link.session.closed:
            link.turn.release()
            return None
        return link

    def link_exchange(self, session_id: int, seq: int, *data: bytes, parts: int = 1
                      ) -> Any:
        """The reply frames to the frames in ``data`` (its parts in order;
        exchange ``seq`` of the session, counted from 0); None once the
        session is gone.  With ``parts`` > 1, a tuple of that many values
        (``split``; all None once the session is gone), for a call made
        with as many ``num_returns``."""
        whole = data[0] if len(data) == 1 else b"".join(data)
        if parts > 1:
            reply = self._exchange(session_id, seq, whole)
            return (None,) * parts if reply is None else split(reply, parts)
        return self._exchange(session_id, seq, whole)

    def _exchange(self, session_id: int, seq: int, data: bytes) -> bytes | None:
        link = self._turn(session_id, seq)
        if link is None:
            return None
        try:
            reply = link.session.feed(data)
            link.used = time.monotonic()
        finally:
            link.next_seq += 1
            link.turn.notify_all()
            link.turn.release()
        if link.session.closed:
            with self._lock:
                self._links.pop(session_id, None)
        return reply

    def link_close(self, session_id: int, seq: int | None = None) -> None:
        """End a session (after exchange ``seq - 1`` when ``seq`` is given)."""
        link = self._turn(session_id, seq) if seq is not None else \
            self._links.get(session_id)
        if link is None:
            return
        if seq is not None:
            link.turn.notify_all()
            link.turn.release()
        self._end(session_id, link)

    def _end(self, session_id: int, link: _Link) -> None:
        with self._lock:
            self._links.pop(session_id, None)
        link.session.close()
        with link.turn:
            link.turn.notify_all()

    def close(self) -> None:
        """End every session."""
        with self._lock:
            links = list(self._links.items())
        for sid, link in links:
            self._end(sid, link)

    @property
    def num_sessions(self) -> int:
        return len(self._links)


def reply_parts(expected: int) -> int:
    """Parts to ask a reply of about ``expected`` bytes in (a quarter more
    room: batches vary)."""
    return max(1, min(MAX_PARTS, -(-(expected + expected // 4) // PART_BYTES)))


def split(data: bytes | bytearray, parts: int) -> tuple[bytes, ...]:
    """``data`` as ``max(parts, 1)`` values in order (at most MAX_PARTS):
    PART_BYTES each, the last one the rest (empty when ``data`` is short)."""
    parts = max(1, min(parts, MAX_PARTS))
    if parts == 1:
        return (bytes(data),)
    step, view = PART_BYTES, memoryview(data)
    last = (parts - 1) * step
    return (*(bytes(view[i * step:(i + 1) * step]) for i in range(parts - 1)),
            bytes(view[last:]))
