"""Sampling through a remote client (``RemoteBackend`` takes these
methods): ``sample_batch`` with batches asked for ahead (``ahead``) and
large batches through shared memory leased per connection;
``sample_items``.

Thread safety: as ``RemoteBackend``: each thread uses its own connection,
under that connection's lock.
"""

from __future__ import annotations

import itertools
import os
import secrets
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from fastreplay import _core, errors
from fastreplay.net import ahead, wire
from fastreplay.net.codec import structure_from_json
from fastreplay.net.conn import Conn, error_from, push, segment_arrays
from fastreplay.replay_sample import ReplaySample, SampleInfo, SampleInfoBatch

if TYPE_CHECKING:
    from fastreplay.table import TableInfo

__all__ = ["AHEAD_DEPTH", "SHM_MIN_BYTES", "Sampling"]

#: Batches at least this large come through shared memory when the server
#: is on this host (``FASTREPLAY_SHM=0`` turns it off).
SHM_MIN_BYTES = 1 << 20
#: Batches a learner's connection keeps asked for ahead (``ahead``): with
#: two, the server finds the next request waiting when it sends a batch and
#: the learner finds the next batch waiting when it asks.
AHEAD_DEPTH = 2
_names = itertools.count()


class Sampling:
    """The sampling calls of ``RemoteBackend`` (a base class of it)."""

    if TYPE_CHECKING:  # RemoteBackend's, used here
        _local: threading.local
        _window: float
        _shm: bool
        _batch_bytes: dict[tuple[str, int], int]
        _table_sizes: dict[str, int]
        _structures_seen: dict[str, tuple[Any, Any]]

        def _conn(self, deadline: float) -> Conn: ...
        def call(self, op: str, args: dict[str, Any], blobs: Any = (),
                 timeout: float | None = None, build: Any = None,
                 defer: bool = False) -> tuple[Any, Any]: ...
        def _ship_ops(self, conn: Conn) -> None: ...
        def _drop(self, conn: Conn) -> None: ...
        def table_info(self, table: str) -> TableInfo: ...

    def sample_batch(self, table: str, n: int, timeout: float | None,
                     meta: dict[str, Any] | None = None
                     ) -> tuple[SampleInfoBatch, list[np.ndarray], Any]:
        """A batch of ``n`` from ``table``; ``meta`` (when given) receives
        the table's ``"mass"`` (``Table.priority_mass``) and ``"size"`` as
        the server read them right after sampling this batch."""
        return self.sample_batch_begin(table, n, timeout)(meta)

    def sample_batch_begin(self, table: str, n: int, timeout: float | None
                           ) -> Callable[..., tuple[SampleInfoBatch,
                                                    list[np.ndarray], Any]]:
        """``sample_batch`` in two halves: the request goes out now unless a
        batch asked ahead answers it; the returned function (taking
        ``meta``) waits for the reply.  Begun on several servers, their
        round trips overlap (a sharded client's draw over Ray links).  On
        tables where sampling ahead is not allowed (``ahead.eligible``)
        the first half samples, answered, as ``sample_batch`` does."""
        conn = self._conn(time.monotonic() + self._window)
        own: ahead.Ahead | None = None
        with conn.lock:
            got = self._take_ahead(conn, table, n)
            if got is not None or conn.failed is not None:
                pass  # a call raises what the connection failed with
            elif self._ask_with_next(conn, table, n):
                own = conn.ahead[0]  # its own batch, the next ones behind it
            elif (not conn.ahead and ahead.eligible(self.table_info(table))
                  and self._ask_ahead(conn, table, n, timeout)):
                # Only where a batch drawn and not used loses nothing (as
                # batches asked ahead): another call in between throws it away.
                own = conn.ahead[0]
            if own is not None:
                push(conn)  # a Ray link sends it now, not at the read
            elif got is None:
                got = self._sample_call(table, n, timeout)

        def finish(meta: dict[str, Any] | None = None
                   ) -> tuple[SampleInfoBatch, list[np.ndarray], Any]:
            return self._sample_finish(table, n, timeout, got, own, conn, meta)

        return finish

    def _sample_call(self, table: str, n: int, timeout: float | None
                     ) -> tuple[Any, Any, Any]:
        """One ``sample_batch`` call, answered before it returns."""
        args: dict[str, Any] = {"table": table, "n": n, "timeout": timeout}
        segment = self._segment_for(table, n)
        if segment is not None:
            args["shm"] = segment[1].name
        result, blob = self.call("sample_batch", args, timeout=timeout)
        return result, blob, segment

    def _take_own(self, conn: Conn, own: ahead.Ahead, table: str, n: int,
                  timeout: float | None) -> tuple[Any, Any, Any] | None:
        """The reply of the request ``sample_batch_begin`` sent (the oldest
        asked on ``conn``, ``conn.lock`` held), raising its error as a call
        would; None when the connection broke (the caller calls again)."""
        if not conn.ahead or conn.ahead[0] is not own:
            return None  # reconnected, or taken meanwhile
        conn.sock.settimeout(None if timeout is None else timeout + 10.0)
        try:
            got = self._take_ahead(conn, table, n)
        except TimeoutError:
            self._drop(conn)
            raise errors.DeadlineExceededError(
                f"sample_batch on {table}: no reply within {timeout} s") from None
        if got is None and own.reply is not None and own.reply[0] == wire.KIND_ERROR:
            raise error_from(own.reply[1])
        return got

    def _sample_finish(self, table: str, n: int, timeout: float | None,
                       got: tuple[Any, Any, Any] | None, own: ahead.Ahead | None,
                       began: Conn, meta: dict[str, Any] | None
                       ) -> tuple[SampleInfoBatch, list[np.ndarray], Any]:
        """The second half of ``sample_batch_begin``: ``got`` is the reply
        when the first half had it, else ``own`` was asked on ``began``."""
        conn = self._conn(time.monotonic() + self._window)
        with conn.lock:
            if got is None and own is not None and conn is began:
                got = self._take_own(conn, own, table, n, timeout)
            if got is None:
                got = self._sample_call(table, n, timeout)
            now = getattr(self._local, "conn", None)  # another after a reconnect
            if (now is not None and now.streak.called(table, n)
                    and ahead.eligible(self.table_info(table))):
                depth = ahead.depth(now.sock, now.updates, AHEAD_DEPTH,
                                    self._batch_bytes.get((table, n), 0), n,
                                    self._table_sizes.get(table, 0))
                if len(now.ahead) <= depth // 2:
                    while len(now.ahead) < depth and self._ask_ahead(now, table, n):
                        pass
                    push(now)
        result, blob, segment = got
        self._batch_bytes[(table, n)] = int(result["nbytes"])
        if meta is not None and "mass" in result:  # older servers send neither
            meta["mass"] = float(result["mass"])
            meta["size"] = int(result["size"])
        if "size" in result:
            self._table_sizes[table] = int(result["size"])
        if segment is not None and result.get("shm") == segment[1].name:
            arrays = segment_arrays(result["arrays"], *segment)
        else:
            if segment is not None:
                segment[0].free.append(segment[1])
            arrays = wire.unpack_arrays(result["arrays"], blob)
        k = result["n_info"]
        return (SampleInfoBatch(*arrays[:k]), arrays[k:],
                self._structure(table, result["structure"]))

    def _structure(self, table: str, form: Any) -> Any:
        """The item structure of a reply's JSON ``form``: the last one of
        ``table`` again when the form is equal (a comparison in C), else
        parsed and interned.  Parsing took ~11% of a sharded learner's
        sampling loop (cProfile, two replies a batch: 739-756 -> 649 us a
        batch); the ray bench's dataset in the driver, 6 interleaved pairs:
        323.5k -> 335.7k rows/s (session 20)."""
        seen = self._structures_seen.get(table)
        if seen is not None and seen[0] == form:
            return seen[1]
        structure = structure_from_json(form)
        self._structures_seen[table] = (form, structure)
        return structure

    def _ask_with_next(self, conn: Conn, table: str, n: int) -> bool:
        """On a pipelined connection (a Ray link, where each message is an
        actor call), a call in a streak whose batches asked ahead were all
        thrown away asks for its own batch the way batches are asked ahead,
        together with the next ones, in one message; True when asked.  (A
        call and then the asks would be two actor calls.)"""
        streak = conn.streak
        if not (getattr(conn.sock, "pipelined", False) and streak.last == (table, n)
                and streak.count >= 1 and not streak.pause
                and ahead.eligible(self.table_info(table))):
            return False
        depth = ahead.depth(conn.sock, conn.updates, AHEAD_DEPTH,
                            self._batch_bytes.get((table, n), 0), n,
                            self._table_sizes.get(table, 0))
        while len(conn.ahead) <= depth and self._ask_ahead(conn, table, n):
            pass
        return bool(conn.ahead)

    def _segment_for(self, table: str, n: int) -> tuple[Conn, Any] | None:
        """A shared-memory segment for a batch of ``n`` of ``table`` when
        such batches are large and the server is on this host."""
        want = self._batch_bytes.get((table, n), 0)
        return self._lease(want) if self._shm and want >= SHM_MIN_BYTES else None

    def _ask_ahead(self, conn: Conn, table: str, n: int,
                   timeout: float | None = 0) -> bool:
        """Ask for a next batch now (``ahead``; ``conn.lock`` held); with a
        ``timeout``, for the caller's own batch (``sample_batch_begin``)."""
        segment = self._segment_for(table, n)
        args: dict[str, Any] = {"table": table, "n": n, "timeout": timeout}
        if segment is not None:
            args["shm"] = segment[1].name
        try:
            if conn.ops.items:
                self._ship_ops(conn)
            wire.send_frame(conn.sock, wire.KIND_CALL,
                            {"op": "sample_batch", "args": args})
        except OSError:
            return False  # the next call finds the connection broken, reconnects
        a = ahead.Ahead(table, n, segment)
        conn.ahead.append(a)
        conn.pending.append(("sample_batch", args, (), 0, a))
        return True

    def _take_ahead(self, conn: Conn, table: str, n: int
                    ) -> tuple[Any, Any, Any] | None:
        """The reply of the oldest batch asked for ahead that answers this
        call (``conn.lock`` held); None when none does (each one looked at is
        thrown away).  A batch holding keys the thread updated since it was
        asked is skipped for the next one asked (still older than anything
        the thread has seen), so one overlap does not cost a round trip."""
        while conn.ahead:
            a = conn.ahead.popleft()
            error: Exception | None = None
            try:
                if a.reply is None:
                    conn.sock.settimeout(None)
                    conn.settle(a)  # with the deferred calls' replies before it
            except OSError:
                a.valid = False  # the next call reconnects
            except Exception as exc:  # noqa: BLE001 - a deferred call's error: raised below
                a.valid, error = False, exc
            hit = a.usable(table, n, wire.KIND_REPLY)
            if not hit and a.segment is not None:
                a.segment[0].free.append(a.segment[1])
            if error is not None:
                conn.streak.outcome(False)
                raise error
            if hit:
                conn.streak.outcome(True)
                assert a.reply is not None
                return a.reply[1].get("result"), a.reply[2], a.segment
            if not a.answers(table, n, wire.KIND_REPLY):
                break  # not this call's batch: the others are not either
        conn.streak.outcome(False)
        return None

    def _lease(self, nbytes: int) -> tuple[Conn, Any] | None:
        """A free segment of this thread's connection holding ``nbytes``,
        made and attached when there is none; None when the server can't
        map it (another host or container): batches then come over the
        socket."""
        conn = self._conn(time.monotonic() + self._window)
        for i, seg in enumerate(conn.free):
            if seg.size >= nbytes:
                return conn, conn.free.pop(i)
        size = -(-(nbytes + nbytes // 4) // (1 << 20)) << 20
        name = f"/fastreplay-{os.getpid()}-{next(_names)}-{secrets.token_hex(4)}"
        try:
            seg = _core.SharedSegment.create(name, size)
        except OSError:
            self._shm = False
            return None
        try:
            self.call("shm_attach", {"name": name, "size": size})
        except (errors.ReverbError, OSError):
            self._shm = False
            return None
        finally:
            seg.unlink()  # mapped by both sides now: the name is not needed
        if getattr(self._local, "conn", None) is not conn:
            return None  # reconnected meanwhile: attached on a closed connection
        return conn, seg

    def sample_items(self, table: str, n: int, timeout: float | None = None
                     ) -> list[ReplaySample]:
        result, blob = self.call("sample_items",
                                 {"table": table, "n": n, "timeout": timeout},
                                 timeout=timeout)
        arrays = wire.unpack_arrays(result["arrays"], blob)
        out, at = [], 0
        for info, n_cols in result["items"]:
            out.append(ReplaySample(SampleInfo(*info), arrays[at:at + n_cols]))
            at += n_cols
        return out
