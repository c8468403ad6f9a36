"""Priority updates and mutations of a remote client, sent in batches.

A learner updates priorities once per sampled batch.  One frame per call
costs a system call on the client and a wake-up and a frame on the server:
about 150 us here, 6.8k calls/s of 256 keys (``benchmarks/net_processes.py``
before this module).  Instead every connection keeps its thread's updates
and mutations, in order, in an ``Ops`` list and sends them as one
``priorities`` frame

* when ``MAX_KEYS`` keys are waiting,
* before that thread's next other call on the connection (so everything a
  thread does later is answered after its updates were applied), or
* about ``MAX_DELAY`` seconds after the first one waited (at most one and
  a half: the ``Flusher`` thread looks once per delay; a connection whose
  socket names its own ``flush_delay`` waits that long: a Ray actor call
  costs far more than a socket write),

whichever comes first.  The server applies the operations of a frame in
order, each as one compiled mutation of its table.
"""

from __future__ import annotations

import threading
import time
import types
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from fastreplay.net import wire

__all__ = ["MAX_DELAY", "MAX_KEYS", "Flusher", "Ops", "read_frame"]

#: Keys waiting on a connection before they are sent without waiting more
#: (64 calls of 256 keys; 192 KiB of frame).
MAX_KEYS = 1 << 14
#: Seconds an update waits at most before it is sent.
MAX_DELAY = 0.002


class Ops:
    """The updates and mutations one connection has not sent yet, oldest
    first.  Guarded by the connection's lock."""

    __slots__ = ("items", "keys", "since")

    def __init__(self) -> None:
        self.items: list[tuple[str, np.ndarray, np.ndarray, np.ndarray | None]] = []
        self.keys = 0
        self.since = 0.0

    def add(self, table: str, keys: np.ndarray, priorities: np.ndarray,
            deletes: np.ndarray | None) -> bool:
        """Queue one operation; True when it is the first one waiting."""
        first = not self.items
        if first:
            self.since = time.monotonic()
        self.items.append((table, keys, priorities, deletes))
        self.keys += len(keys) + (0 if deletes is None else len(deletes))
        return first

    def take(self) -> tuple[dict[str, Any], list[np.ndarray]]:
        """The ``priorities`` call's arguments and buffers for everything
        waiting; the list is empty afterwards."""
        items, self.items, self.keys = self.items, [], 0
        none = np.empty(0, np.uint64)
        ops = [[t, len(k), 0 if d is None else len(d)] for t, k, _, d in items]
        arrays = [np.concatenate([k for _, k, _, _ in items]),
                  np.concatenate([p for _, _, p, _ in items]),
                  np.concatenate([none, *(d for *_, d in items if d is not None)])]
        descs, bufs = wire.pack_arrays(arrays)
        return {"ops": ops, "arrays": descs}, bufs


def read_frame(args: dict[str, Any], blob: Any
               ) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray, list[int]]]:
    """The operations of a ``priorities`` frame as ``(table, keys,
    priorities, deletes, ends)``, consecutive updates of one table without
    deletes merged into one (applied in order, the later priority of a key
    wins either way; ``ends`` are where each merged call's keys end, to
    apply them one by one if the merged one is refused); FrameError when
    the frame does not add up."""
    arrays = wire.unpack_arrays(args.get("arrays"), blob)
    ops = args.get("ops")
    if len(arrays) != 3 or not isinstance(ops, list):
        raise wire.FrameError("a priorities frame has three arrays and a list of ops")
    keys, prios, dels = arrays
    if keys.dtype != np.uint64 or prios.dtype != np.float64 or dels.dtype != np.uint64:
        raise wire.FrameError("priorities frame arrays have the wrong dtypes")
    runs: list[list[Any]] = []  # [table, update start, end, delete start, end]
    at_u = at_d = 0
    for op in ops:
        if (not isinstance(op, list) or len(op) != 3 or not isinstance(op[0], str)
                or type(op[1]) is not int or type(op[2]) is not int
                or op[1] < 0 or op[2] < 0):
            raise wire.FrameError(f"bad priorities op {op!r}")
        table, nu, nd = op
        last = runs[-1] if runs else None
        if last is not None and nd == 0 and last[0] == table and last[3] == last[4]:
            last[2] += nu
            last[5].append(nu)
        else:
            runs.append([table, at_u, at_u + nu, at_d, at_d + nd, [nu]])
        at_u, at_d = at_u + nu, at_d + nd
    if at_u != len(keys) or at_u != len(prios) or at_d != len(dels):
        raise wire.FrameError("priorities ops do not add up to the arrays sent")
    return [(t, keys[a:b], prios[a:b], dels[c:d], np.cumsum(sizes).tolist())
            for t, a, b, c, d, sizes in runs]


def _delay(conn: Any) -> float:
    return float(getattr(conn.sock, "flush_delay", MAX_DELAY))


class Flusher:
    """Sends operations that waited about ``MAX_DELAY`` on connections
    whose threads made no call since (one daemon thread per backend,
    started with the first operation).

    While connections are watched it wakes once per delay (a tick) and
    sends what waited half a delay or more; a connection with nothing
    waiting at a tick is no longer watched, and with none watched the
    thread sleeps until the next ``watch``.  (It used to wake for every
    watch and again a delay later: two wake-ups per connection per learner
    batch, each taking the GIL from the learner; session 19.)"""

    def __init__(self, ship: Callable[[Any], None]) -> None:
        # ship(conn): send conn.ops; called with conn.lock held.  A method
        # is held weakly: the thread must not keep its backend alive (the
        # backend's finalizer closes this flusher).
        self._ship: Callable[[], Callable[[Any], None] | None] = (
            weakref.WeakMethod(ship) if isinstance(ship, types.MethodType)
            else lambda: ship)
        self._cond = threading.Condition()
        self._watched: dict[int, Any] = {}  # id(conn) -> conn, until a tick
        self._ticking = False  # the thread wakes by itself: no notify needed
        self._thread: threading.Thread | None = None
        self._closed = False

    def watch(self, conn: Any) -> None:
        """``conn`` got its first waiting operation: look at it at the
        next ticks."""
        with self._cond:
            if self._closed:
                return
            self._watched[id(conn)] = conn
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="fastreplay-priorities")
                self._thread.start()
            elif not self._ticking:
                self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._watched and not self._closed:
                    self._ticking = False
                    self._cond.wait()
                if self._closed:
                    return
                self._ticking = True
                self._cond.wait(min(_delay(c) for c in self._watched.values()))
                if self._closed:
                    return
                conns, self._watched = self._watched, {}
            ship = self._ship()
            if ship is None:  # the backend was collected
                return
            again = {key: conn for key, conn in conns.items() if _look(conn, ship)}
            if again:
                with self._cond:
                    again.update(self._watched)
                    self._watched = again
            del conns, again, ship  # hold nothing while waiting


def _look(conn: Any, ship: Callable[[Any], None]) -> bool:
    """Send what waited half a delay or more on ``conn``; True when
    operations still wait (to look again at the next tick)."""
    if not conn.lock.acquire(blocking=False):
        return True  # its thread is in a call, which sends them first
    try:
        if not conn.ops.items:
            return False  # the thread's call sent them
        if time.monotonic() - conn.ops.since < _delay(conn) / 2:
            return True  # queued just before this tick: the next one sends them
        ship(conn)
    except (OSError, wire.FrameError):
        pass  # the thread's next call reconnects and sends them again
    finally:
        conn.lock.release()
    return False
