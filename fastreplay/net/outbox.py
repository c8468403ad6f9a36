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
from typing import TYPE_CHECKING, Any

import numpy as np

from fastreplay import _core, _structures, errors
from fastreplay.net import wire
from fastreplay.table import Table

if TYPE_CHECKING:
    from fastreplay.net.remote import RemoteBackend, _Conn

__all__ = ["Outbox", "STAGING_ITEMS"]

#: Items in flight per remote table before a writer blocks.
STAGING_ITEMS = 16_384
#: Chunks a connection asks the server to keep (least recently used first
#: forgotten; a forgotten chunk is sent again if an item needs it).
KEEP_CHUNKS = 8_192
#: Items per insert frame at most.
FRAME_ITEMS = 2_048


class Outbox:
    """Ships the items writers put in the staging queues to the server.

    One thread ships, in passes: each pass sends everything staged (waiting
    as long as the server's rate limiter makes it wait, as an insert in
    process does) and then reads the replies.  ``flush`` waits, up to its
    timeout, for a pass that started after it was called; items that did
    not fit before the timeout are still inserted later."""

    def __init__(self, backend: RemoteBackend, staging: dict[str, Table]) -> None:
        self._backend = backend
        self._staging = staging
        self._cv = threading.Condition()
        self._started = 0  # passes begun
        self._done = 0     # passes ended
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="fastreplay-outbox")
        self._thread.start()

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
            self._wake.set()
            done = self._cv.wait_for(
                lambda: self._done >= want or self._error is not None
                or self._stop.is_set(), timeout)
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

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(0.005)
            self._wake.clear()
            with self._cv:
                self._started += 1
                this = self._started
            try:
                self._drain()
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
        self._thread.join(timeout=5)

    def _drain(self) -> None:
        """Ship every staged item (the outbox thread only)."""
        for name, table in self._staging.items():
            while len(table):
                items, columns, slices, specs, handles = table.export_records(
                    STAGING_ITEMS)
                # Taken as a queue's consumer: the oldest items leave and the
                # queue's rate limiter lets the writers go on.
                taken = table.sample(len(items), timeout=0).key
                if not np.array_equal(taken, items["key"]):
                    raise errors.InternalError(
                        f"staging queue '{name}' changed while it was sent")
                self._ship(name, (items, columns, slices), specs, handles)

    def _ship(self, table: str, records: tuple[np.ndarray, ...], specs: list[Any],
              handles: list[Any]) -> None:
        """Send the exported items in frames of FRAME_ITEMS without waiting
        between them (the server works on one while the next travels), then
        wait for every reply."""
        items, columns, slices = records
        by_key = {h.key: h for h in handles}
        col_end = np.cumsum(items["n_columns"])
        slice_end = np.cumsum(columns["n_slices"])
        for lo in range(0, len(items), FRAME_ITEMS):
            hi = min(lo + FRAME_ITEMS, len(items))
            c0, c1 = (int(col_end[lo - 1]) if lo else 0), int(col_end[hi - 1])
            s0, s1 = (int(slice_end[c0 - 1]) if c0 else 0), int(slice_end[c1 - 1])
            part = (items[lo:hi], columns[c0:c1], slices[s0:s1])
            used = [by_key[k] for k in np.unique(part[2]["chunk"]).tolist()]
            self._ship_part(table, part, specs, used)
        self._backend.settle()

    def _ship_part(self, table: str, records: tuple[np.ndarray, ...],
                   specs: list[Any], handles: list[Any]) -> None:
        """One frame; the server waits for its rate limiter as long as it
        takes (flush bounds the writer's wait, not the insert)."""
        structures = [[int(s), _structures.to_json(int(s))]
                      for s in np.unique(records[0]["structure"])]
        used = {h.key for h in handles}

        def build(conn: _Conn) -> tuple[dict[str, Any], list[Any]]:
            new = []
            for h in handles:
                if h.key in conn.chunks:
                    conn.chunks.move_to_end(h.key)
                else:
                    new.append(h)
                    conn.chunks[h.key] = None
            forget = []
            while len(conn.chunks) > KEEP_CHUNKS:
                key = next(iter(conn.chunks))
                if key in used:  # the rest are this frame's too
                    break
                del conn.chunks[key]
                forget.append(key)
            chunk_records, data = _core.pack_chunks(new)
            arrays = [*records, chunk_records, np.asarray(forget, dtype=np.uint64)]
            descs, bufs = wire.pack_arrays([a.view(np.uint8) for a in arrays])
            at = sum(b.nbytes for b in bufs)
            return ({"table": table, "records": descs, "data": [at, len(data)],
                     "specs": specs, "structures": structures, "timeout": None},
                    [*bufs, data])

        self._backend.call("insert", {}, build=build, defer=True)
