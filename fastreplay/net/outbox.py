"""The client's outbox: ships the items writers staged in local queues
(one per remote table) to the server as frames of chunks and item records.

Each chunk travels once per connection (an LRU of the chunks the server
keeps for the connection, with explicit forgets), item records are packed
in Cython (``_core.export_wire``) and the server checks a frame whole before
it inserts any item through its rate limiter.  A full staging queue blocks
the writers (back-pressure); a writer's ``flush`` returns once the server
has inserted its items.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from fastreplay import _core, _structures, errors
from fastreplay.net import wire
from fastreplay.net.codec import distinct_structures
from fastreplay.net.ring import SendRing
from fastreplay.table import Table

if TYPE_CHECKING:
    from fastreplay.net.conn import Conn
    from fastreplay.net.remote import RemoteBackend

__all__ = ["HeldChunks", "Outbox", "STAGING_ITEMS", "Sink"]

#: Items in flight per remote table before a writer blocks.
STAGING_ITEMS = 16_384
#: Chunks a connection asks the server to keep (least recently used first
#: forgotten; a forgotten chunk is sent again if an item needs it).
KEEP_CHUNKS = 8_192
#: Items per insert frame at most.
FRAME_ITEMS = 2_048
#: How long the outbox lets items gather after a pass while fewer than
#: FRAME_ITEMS are staged and no flush waits: fewer, larger frames.  A
#: writer making one small item per step (5 float columns) sent 16k steps/s
#: to another process with a pass per handful of items (each pass's Python
#: competing with the writer for the GIL), 21-32k with 2 ms (medians of
#: paired runs on the loaded 2-core CI machine).
COALESCE_S = 0.002
#: Whether an insert frame's item records go through the ring with its
#: chunk bytes (same host).  One writer extending 256 one-item steps of 5
#: columns a call into a server process: 1.07-1.16M items/s with them on
#: the socket (the outbox thread ~45% of its time in send(), py-spy),
#: 1.11-1.34M (median ~1.3M) with them in the ring, the outbox thread
#: 0.50 -> 0.35 us an item (9 interleaved rounds each, session 22).
RECORDS_IN_RING = True
#: Whether a writer ships the full frames it staged itself (after an
#: ``extend``), through the outbox's connection, when the frame's bytes fit
#: the shared-memory ring and few replies are owed (so that nothing it does
#: waits for the server).  A writer's thread and the outbox thread on two
#: cores passed each item across (its records, chunks, allocations and
#: the GIL): one StructuredWriter extending 256 steps a call into a server
#: process made 1.08-1.16M items/s that way and 1.56-1.60M with both
#: threads pinned to one core (scratch aff.py, session 23); a Ray writer
#: actor 0.95-1.57M free, 1.59-1.61M pinned.
INLINE_FRAMES = True
#: Items per frame a writer ships itself (it ships once that many are
#: staged): the frame's Python (held chunks, JSON, replies) now runs in the
#: writer's thread.  One writer extending into a server process, 3
#: interleaved runs of 4 rounds: writer thread 0.58-0.67 us of CPU an item
#: with 2,048, 0.51-0.55 with 4,096 or 8,192 (the server 0.29 -> 0.25 ->
#: 0.22); 1.62-1.71M items/s with 2,048, 1.76-1.90M with 4,096 in two runs
#: of three (session 23).
INLINE_FRAME_ITEMS = 4_096
#: Replies owed on the outbox's connection beyond which a writer leaves the
#: shipping to the outbox thread (which reads them).
INLINE_OWED = 8
#: How long after a writer shipped a frame itself the outbox thread leaves
#: a partial frame staged (unless a flush waits): writers that keep
#: shipping would otherwise see it sent in small pieces.
INLINE_HOLD_S = 0.02


class Outbox:
    """Ships the items writers put in the staging queues to the server.

    One thread ships, in passes: each pass sends everything staged (waiting
    as long as the server's rate limiter makes it wait, as an insert in
    process does) and then reads the replies.  ``flush`` waits, up to its
    timeout, for a pass that started after it was called; items that did
    not fit before the timeout are still inserted later."""

    def __init__(self, backend: RemoteBackend, staging: dict[str, Table]) -> None:
        # Weakly: the backend holds the outbox; writers hold both (``Sink``),
        # so no cycle keeps a dropped client's sockets and thread alive.
        self._backend_ref = weakref.ref(backend)
        self._staging = staging
        self._cv = threading.Condition()
        self._started = 0  # passes begun
        self._done = 0     # passes ended
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._waiting = 0  # flush calls waiting for a pass
        # Every shipment goes through one connection (kept here; see
        # RemoteBackend.through), by the thread holding _ship_lock.
        self._chan = _Channel()
        self._ship_lock = threading.Lock()
        self._frame_bytes = 0  # the most ring bytes a frame took so far
        self._inline_at = 0.0  # when a writer last shipped a frame
        # The thread holds the outbox weakly between passes, so a client
        # and writers nobody references any more are collected (their
        # backend's finalizer closes the outbox) and the thread ends.
        self._thread = threading.Thread(
            target=_run_passes, args=(weakref.ref(self), self._stop), daemon=True,
            name="fastreplay-outbox")
        self._thread.start()

    @property
    def _backend(self) -> RemoteBackend:
        backend = self._backend_ref()
        if backend is None:
            raise errors.UnavailableError("the client of this outbox was closed")
        return backend

    def kick(self) -> None:
        self._wake.set()

    def flush(self, timeout: float | None = None, keep: int = 0) -> None:
        """Wait until the server inserted everything staged so far (with
        ``keep``, only while more than ``keep`` items are staged); raise
        what a shipment failed with, or DeadlineExceededError after
        ``timeout`` seconds."""
        if keep and sum(len(t) for t in self._staging.values()) <= keep:
            self._wake.set()
            self._raise()
            return
        with self._cv:
            want = self._started + 1
            self._waiting += 1
            self._wake.set()
            try:
                done = self._cv.wait_for(
                    lambda: self._done >= want or self._error is not None
                    or self._stop.is_set(), timeout)
            finally:
                self._waiting -= 1
            if self._error is not None:
                exc, self._error = self._error, None
                raise exc
        if not done:
            raise errors.DeadlineExceededError(
                f"Flush call did not complete within provided timeout of {timeout} s "
                "(the items are still inserted later)")

    def _raise(self) -> None:
        with self._cv:
            if self._error is not None:
                exc, self._error = self._error, None
                raise exc

    def ship_full(self) -> None:
        """Ship the full frames staged, from the calling thread (a writer's,
        after an extend), when that cannot wait for the server: see
        INLINE_FRAMES.  An error is raised by the next flush, as the outbox
        thread's are."""
        if not INLINE_FRAMES or not self._frame_bytes or \
                self._num_staged() < INLINE_FRAME_ITEMS:
            return
        backend = self._backend_ref()
        if backend is None or not self._ship_lock.acquire(blocking=False):
            return
        try:
            with backend.through(self._chan):
                conn = self._chan.conn
                if conn is not None and isinstance(conn.ring, SendRing):
                    with conn.lock:  # the replies that came: ring regions back
                        conn.settle_arrived()
                self._drain(inline=True)
        except Exception as exc:  # noqa: BLE001 - raised by the next flush
            with self._cv:
                if self._error is None:
                    self._error = exc
        finally:
            self._ship_lock.release()

    def _inline_ok(self) -> bool:
        """Whether a writer's thread may ship a frame now (the ship lock
        held): it goes into the ring whole and is sent without reading a
        reply first."""
        conn = self._chan.conn
        return (conn is not None and conn.failed is None and not conn.ops.items
                and isinstance(conn.ring, SendRing) and len(conn.pending) < INLINE_OWED
                and conn.ring.room() >= 2 * self._frame_bytes)

    def _writers_ship(self) -> bool:
        """Whether a writer shipped a frame itself within INLINE_HOLD_S:
        the outbox thread then leaves what is staged to the writers (it
        would take the ship lock from them, and send partial frames)."""
        return time.monotonic() - self._inline_at <= INLINE_HOLD_S

    def _staged(self) -> bool:
        return any(len(t) for t in self._staging.values())

    def _num_staged(self) -> int:
        return sum(len(t) for t in self._staging.values())

    def _run(self) -> None:
        """Passes: ship what is staged; when a flush waits or nothing more
        is staged, read the server's replies (the pass is then done).  While
        writers keep staging, the next pass ships without waiting for the
        replies of the last (``RemoteBackend.call`` reads them once
        MAX_OWED are owed), so the server inserts one frame while the next
        is packed.  One pass per call (``_run_passes`` loops and waits)."""
        if not self._stop.is_set():
            self._wake.clear()
            with self._cv:
                self._started += 1
                this = self._started
            try:
                with self._ship_lock, self._backend.through(self._chan):
                    with self._cv:
                        settle = self._waiting > 0
                    conn = self._chan.conn
                    if not settle and self._writers_ship() and conn is not None:
                        # this thread only reads the replies that came
                        with conn.lock:
                            conn.settle_arrived()
                    else:
                        self._drain()
                        with self._cv:
                            settle = self._waiting > 0
                        if not settle and self._staged():
                            return
                        self._backend.settle()
            except BaseException as exc:  # noqa: BLE001 - raised by the next flush
                with self._cv:
                    self._error = exc
            with self._cv:
                self._done = this
                self._cv.notify_all()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        with self._cv:
            self._cv.notify_all()
        if self._thread is not threading.current_thread():  # closed by GC there
            self._thread.join(timeout=5)

    def _drain(self, inline: bool = False) -> None:
        """Ship every staged item, a frame of at most FRAME_ITEMS per
        export (``inline``: only frames of INLINE_FRAME_ITEMS, while
        ``_inline_ok``): which chunks are sealed (``pack_merged``) is known
        for one export's items.  The ship lock is held."""
        for name, table in self._staging.items():
            most = INLINE_FRAME_ITEMS if inline else FRAME_ITEMS
            while len(table) >= (most if inline else 1):
                if inline:
                    if not self._inline_ok():
                        return
                    self._inline_at = time.monotonic()
                # Taken as a queue's consumer: the oldest items leave and the
                # queue's rate limiter lets the writers go on.
                items, columns, slices, specs, handles, keys = table.export_records(
                    most, take=True)
                if not len(items):  # its rate limiter holds them back
                    break
                self._ship(name, (items, columns, slices), specs, handles, keys)

    def _ship(self, table: str, records: tuple[np.ndarray, ...], specs: list[Any],
              handles: Any, keys: np.ndarray) -> None:
        """One frame of the exported items with the chunks of theirs the
        server does not keep yet, sent without waiting for the server's
        reply (the server works on one frame while the next travels).  No
        Python runs per item or per chunk: an actor's items often have a
        chunk each.  The server waits for its rate limiter as long as it
        takes (flush bounds the writer's wait, not the insert)."""
        items, columns, slices = records
        # A writer's chunk keys grow, so an export's usually come sorted:
        # then no argsort and no reordered copies (~10% of the outbox
        # thread of a one-item-a-step writer, perf, session 18).
        if len(keys) < 2 or bool((keys[1:] > keys[:-1]).all()):
            order, wanted, sealed = None, keys, handles.sealed
        else:
            order = np.argsort(keys)
            wanted, sealed = keys[order], handles.sealed[order]
        structures = [[int(s), _structures.to_json(int(s))]
                      for s in distinct_structures(items["structure"])]

        def build(conn: Conn) -> tuple[dict[str, Any], list[Any]]:
            new, forget = conn.held.use(wanted, transient=sealed)
            index = np.flatnonzero(new) if order is None else order[new]
            size = _core.chunk_bytes(handles, index)
            region = self._backend.ring_region(conn, size) if size else None
            # pack_merged renames merged chunks in it; copied as bytes (a
            # record array's copy goes field by field: ~75 us for a frame's
            # 10k slices, 5 us as bytes)
            sent = slices.view(np.uint8).copy().view(slices.dtype)
            if region is not None:  # the bytes go through shared memory
                ring, start = region
                target = np.frombuffer(ring.segment, np.uint8, size, start)
                chunk_records, _, merged = _core.pack_merged(handles, index, sent,
                                                             out=target)
                data: Any = {"shm": ring.name, "at": start, "n": size}
                tail = []
            else:
                chunk_records, chunk_data, merged = _core.pack_merged(handles, index,
                                                                      sent)
                tail = [chunk_data]
            # Sealed chunks are needed for this frame's items only: the
            # server lets them go after inserting them (kept ones it had too).
            after = np.concatenate([wanted[sealed & ~new], merged])
            arrays = [items, columns, sent, chunk_records, forget, after]
            descs, bufs = wire.pack_arrays([a.view(np.uint8) for a in arrays])
            args = {"table": table, "records": descs, "specs": specs,
                    "structures": structures, "timeout": None}
            if bufs_to_ring(conn, bufs, args):
                if region is not None:  # the frame went into the ring whole
                    self._frame_bytes = max(self._frame_bytes, size + sum(
                        b.nbytes for b in bufs))
                bufs = []
            args["data"] = data if region is not None else [
                sum(b.nbytes for b in bufs), size]
            return args, [*bufs, *tail]

        def bufs_to_ring(conn: Conn, bufs: list[np.ndarray], args: dict[str, Any]
                         ) -> bool:
            """The item records into a region of the ring too, when it has
            room: a frame of 2,048 one-step items of 5 columns carries 336
            KiB of records, more than a Unix socket buffers (208 KiB), so
            each send waited for the server to finish the frame before (see
            RECORDS_IN_RING)."""
            n = sum(b.nbytes for b in bufs)
            got = self._backend.ring_region(conn, n) if RECORDS_IN_RING and n else None
            if got is None:
                return False
            ring, at = got
            target = np.frombuffer(ring.segment, np.uint8, n, at)
            pos = 0
            for b in bufs:
                target[pos:pos + b.nbytes] = b
                pos += b.nbytes
            args["records_in"] = {"shm": ring.name, "at": at, "n": n}
            return True

        self._backend.call("insert", {}, build=build, defer=True)


class _Channel:
    """Where the outbox's connection is kept (``RemoteBackend.through``)."""

    __slots__ = ("conn",)

    def __init__(self) -> None:
        self.conn: Conn | None = None


class Sink:
    """What a remote client's writers hold: its outbox, and its backend so
    that a writer keeps working when the client object is dropped."""

    __slots__ = ("_backend", "_outbox")

    def __init__(self, outbox: Outbox, backend: RemoteBackend) -> None:
        self._outbox, self._backend = outbox, backend

    def kick(self) -> None:
        self._outbox.kick()

    def ship(self) -> None:
        """Ship full frames from this writer's thread (Outbox.ship_full)."""
        self._outbox.ship_full()

    def flush(self, timeout: float | None = None, keep: int = 0) -> None:
        self._outbox.flush(timeout, keep)


def _run_passes(ref: weakref.ref[Outbox], stop: threading.Event) -> None:
    """The outbox thread: passes until the outbox is closed or collected."""
    while not stop.is_set():
        outbox = ref()
        if outbox is None:
            return
        wake, staged = outbox._wake, outbox._staged()
        gather = staged and outbox._waiting == 0 and (
            outbox._num_staged() < FRAME_ITEMS or outbox._writers_ship())
        del outbox  # not held while waiting
        if not staged:
            wake.wait(0.005)
        elif gather:
            wake.wait(COALESCE_S)  # a flush sets wake: it never waits for this
        outbox = ref()
        if outbox is None:
            return
        outbox._run()
        del outbox


class HeldChunks:
    """The keys of the chunks the server keeps for one connection: at most
    KEEP_CHUNKS, the least recently used forgotten first (with numpy, a
    frame at a time)."""

    def __init__(self) -> None:
        self._keys = np.empty(0, np.uint64)  # sorted
        self._stamps = np.empty(0, np.int64)  # the frame that last used each
        self._clock = 0

    def __len__(self) -> int:
        return len(self._keys)

    def use(self, wanted: np.ndarray, transient: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
        """A frame uses the chunks of sorted unique keys ``wanted``: which
        of them the server lacks (a mask over ``wanted``; they count as kept
        from now on) and the keys it may forget (never one of ``wanted``).
        Chunks of the ``transient`` mask over ``wanted`` (sealed: no later
        frame names them) stop counting as kept: the server lets them go
        after this frame.

        A writer's chunk keys grow, so new keys usually go after every kept
        one and the least recently used are the first kept: then a frame
        costs an append and a slice instead of a sort and a partition of
        every kept key (~110 us a frame with 8k kept, 2.7 us an item of a
        frame of 40 one-step items, session 16)."""
        self._clock += 1
        keys, stamps = self._keys, self._stamps
        pos = np.searchsorted(keys, wanted)
        held = np.zeros(len(wanted), bool)
        inside = pos < len(keys)
        held[inside] = keys[pos[inside]] == wanted[inside]
        stamps[pos[held]] = self._clock
        new = ~held
        add_mask = new
        if transient is not None and transient.any():
            gone = held & transient
            if gone.any():
                keep = np.ones(len(keys), bool)
                keep[pos[gone]] = False
                keys, stamps = keys[keep], stamps[keep]
            add_mask = new & ~transient
        if add_mask.any():
            add = wanted[add_mask]
            keys = np.concatenate([keys, add])
            stamps = np.concatenate([stamps, np.full(len(add), self._clock, np.int64)])
            if len(keys) > len(add) and add[0] < keys[len(keys) - len(add) - 1]:
                order = np.argsort(keys, kind="stable")
                keys, stamps = keys[order], stamps[order]
        forget = np.empty(0, np.uint64)
        excess = len(keys) - KEEP_CHUNKS
        if excess > 0:
            head = int(stamps[:excess].max())
            if head < self._clock and head <= int(stamps[excess:].min()):
                forget, keys, stamps = keys[:excess], keys[excess:], stamps[excess:]
            else:
                old = np.flatnonzero(stamps < self._clock)
                if len(old) > excess:
                    old = old[np.argpartition(stamps[old], excess - 1)[:excess]]
                forget = keys[old]
                keep = np.ones(len(keys), bool)
                keep[old] = False
                keys, stamps = keys[keep], stamps[keep]
        self._keys, self._stamps = keys, stamps
        return new, forget
