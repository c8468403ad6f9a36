"""Sampling ahead: a learner's next ``sample_batch`` asked for while it
works on the current one.

A learner calls ``sample_batch(table, n)`` in a loop.  Answered one at a
time, every call waits for a round trip, the server's sampling and both
sides' framing in turn (measured here: ~900 us a batch of 256 small items,
17% of the in-process rate).  Once a thread asked twice in a row for the
same ``(table, n)``, its connection asks for the next batch as soon as it
has answered the current one, so the server samples while the learner
computes.  Dm-reverb's samplers keep samples in flight the same way.

What a batch sampled ahead may not do, it does not:

* It is only asked for on tables that never remove an item because it was
  sampled (``max_times_sampled == 0``) and whose rate limiter holds no
  sampler or writer back by the ratio of samples to inserts (``MinSize``):
  a batch asked for and then not used loses no data and changes nothing a
  caller waits on (only the tables' sample counts see it).
* It never waits: it is asked for with ``timeout=0``, and a batch the table
  could not give at once is asked for again, the caller's way.
* It is used only by the next ``sample_batch`` calls of the same thread on
  that connection with the same ``(table, n)``, in the order asked for; any
  other call in between (other than priority updates) throws it away.
* It never contradicts the thread's own priority updates: a batch holding
  a key whose priority the thread updated or deleted after asking for it
  is thrown away, and the next batch asked for ahead answers the call
  instead (it is older than anything the thread has seen); with none left
  the call samples again.  When that keeps happening (a small table whose
  batches overlap), the connection stops sampling ahead for a while.

``FASTREPLAY_SAMPLE_AHEAD=0`` turns it off.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

__all__ = ["Ahead", "Streak", "depth", "eligible"]

#: Misses in a row after which a connection stops sampling ahead ...
MAX_MISSES = 4
#: ... for this many calls.
PAUSE_CALLS = 64
#: A thread that updates priorities keeps one batch this large asked ahead,
#: not two: the learner's own updates spoil most large batches asked ahead
#: (Atari frames, 88 of 5k items a shard: ~2 in 3), and each one spoiled
#: still moved ~600 KB.  Interleaved A/B, 4 shards on 2 nodes, 4 pairs:
#: 12.4-14.4k -> 14.6-16.1k rows/s; small transitions (2 shards of 50k, 256
#: a batch) showed no difference within the noise (session 17).
LARGE_BATCH_BYTES = 256 << 10
#: A thread that updates priorities keeps d small batches of n items asked
#: ahead (more than its socket's default) when d*n*n is at most its table's
#: size: not too many of them then hold a key it updated since (~1 -
#: exp(-d*n*n/size) at most; a batch that does is thrown away), and
#: waiting for a batch costs more than throwing some away.  The ray bench's
#: learner in the driver (2 shards of 500k items, one on its node, 160
#: asked of each), interleaved in one process: depth 8 on its Unix socket
#: against the default 2, two runs of 8 pairs, medians 244 -> 262k and 238
#: -> 241k rows/s (12 of 16 pairs faster); 16 on both the socket and the
#: Ray link against 8, two runs of 6 pairs, 250 -> 256k and 237 -> 257k (11
#: of 12 faster).  A learner over a Unix socket to a server process (500k
#: items, n=256: depth 4 against 2), 6 interleaved pairs: 698 -> 796k.
#: With 50k items a shard, 8 measured 132k against 2's 142k, so small
#: tables keep the default (session 20).
UPDATE_DEPTHS = (16, 8, 4)
#: Batches a thread that never updates priorities (a ``dataset`` worker:
#: none of its batches is ever thrown away) keeps asked for ahead on a
#: socket without an ``ahead_depth`` of its own (a Unix or TCP socket): the
#: ray bench's dataset(prefetch=2) in the driver, 2 shards of 500k (one over
#: a Unix socket), interleaved in one process, 6 rounds each: 2 -> 307k, 8
#: -> 332k, 16 -> 324k rows/s (session 20).
SOCKET_AHEAD_DEPTH = 8
#: Bytes of batches a thread that never updates priorities keeps asked for
#: ahead at most: its socket's deeper ``ahead_depth`` gives way to the
#: default for batches so large that a few of them fill it.
AHEAD_BYTES = 32 << 20
#: Items a thread that never updates priorities keeps asked for ahead at
#: most: the 16 batches of 160 (256 drawn over 2 shards) a Ray link kept
#: for a dataset worker before it drew 8 batches a request
#: (``fastreplay.ray``'s ``sample_batches``), so that larger requests do
#: not leave a learner's priority updates further behind.  The ray bench's
#: dataset(prefetch=2), 2 shards of 500k, 4 interleaved rounds: 8 batches a
#: request under this cap 690k rows/s, uncapped 830k, one batch a request
#: 331k.  A plain client's dataset of 1,024 or 4,096 (2 or 1 asked ahead
#: under the cap, 8 without) measured the same, 6 interleaved pairs each:
#: 1781k vs 1800k, 2213k vs 2178k (session 21).
AHEAD_ITEMS = 16 * 160


def eligible(info: Any) -> bool:
    """Whether batches of the table of TableInfo ``info`` may be asked for
    ahead (see above)."""
    if os.environ.get("FASTREPLAY_SAMPLE_AHEAD", "1") == "0":
        return False
    limiter = info.rate_limiter_info
    return bool(info.max_times_sampled <= 0 and limiter.min_diff <= -_UNBOUNDED
                and limiter.max_diff >= _UNBOUNDED)


_UNBOUNDED = 1e300  # MinSize's diffs are +-sys.float_info.max


def depth(sock: Any, updates: bool, default: int, nbytes: int = 0, n: int = 0,
          size: int = 0) -> int:
    """Batches a connection keeps asked for ahead: ``default``, or the
    socket's own ``ahead_depth`` (a Ray link's, where every message is an
    actor call; SOCKET_AHEAD_DEPTH for another socket) on a connection whose
    thread never updated priorities (a ``dataset`` worker's: no batch of it
    is ever thrown away for an update) as long as that many batches of
    ``nbytes`` fit AHEAD_BYTES and batches of ``n`` AHEAD_ITEMS; for
    a thread that updates priorities, one when it samples batches of
    ``nbytes`` >= LARGE_BATCH_BYTES, else the socket's
    ``update_ahead_depth`` when deeper than the default, or deeper still by
    UPDATE_DEPTHS for batches of ``n`` from a table of ``size`` items.
    Refilled when half are used, all in one message."""
    if updates:
        if nbytes >= LARGE_BATCH_BYTES:
            return 1
        deep = max(default, int(getattr(sock, "update_ahead_depth", 0)))
        for d in UPDATE_DEPTHS:
            if d > deep and n > 0 and d * n * n <= size:
                return d
        return deep
    deep = int(getattr(sock, "ahead_depth", SOCKET_AHEAD_DEPTH))
    if nbytes > 0:
        deep = min(deep, AHEAD_BYTES // nbytes)
    if n > 0:
        deep = min(deep, AHEAD_ITEMS // n)
    return deep if deep > default else default


class Ahead:
    """One batch asked for ahead on a connection (guarded by its lock)."""

    __slots__ = ("table", "n", "segment", "touched", "valid", "reply")

    def __init__(self, table: str, n: int, segment: Any) -> None:
        self.table, self.n, self.segment = table, n, segment
        self.touched: list[np.ndarray] = []  # keys the thread updated since
        self.valid = True  # False once another call came in between
        self.reply: tuple[int, Any, Any] | None = None  # (kind, message, blob)

    def answers(self, table: str, n: int, ok_kind: int) -> bool:
        """Whether its reply (already read) is a batch for ``sample_batch(table,
        n)`` with no other call in between (``usable`` also checks the keys
        the thread updated since)."""
        return bool(self.valid and self.reply is not None and self.reply[0] == ok_kind
                    and (self.table, self.n) == (table, n))

    def usable(self, table: str, n: int, ok_kind: int) -> bool:
        """Whether its reply (already read) answers ``sample_batch(table,
        n)`` now."""
        if not self.answers(table, n, ok_kind) or self.reply is None:
            return False
        if not self.touched:
            return True
        result, blob = self.reply[1].get("result"), self.reply[2]
        keys = _keys_of(result, blob, self.segment)
        if keys is None:
            return False
        return not _any_in(keys, self.touched)


def _any_in(keys: np.ndarray, touched: list[np.ndarray]) -> bool:
    """Whether any of ``keys`` is in one of the ``touched`` arrays (a sorted
    search: ``np.isin`` cost ~160 us a call for a few hundred keys, twice a
    learner iteration over two shards, session 16)."""
    t = np.sort(touched[0] if len(touched) == 1 else np.concatenate(touched))
    if not len(t) or not len(keys):
        return False
    at = np.searchsorted(t, keys)
    np.minimum(at, len(t) - 1, out=at)
    return bool((t[at] == keys).any())


def _keys_of(result: Any, blob: Any, segment: Any) -> np.ndarray | None:
    """The sampled keys of a ``sample_batch`` reply (its first array)."""
    try:
        dtype, shape, off, nbytes = result["arrays"][0]
        source = segment[1] if result.get("shm") else blob
        return np.frombuffer(source, np.dtype(dtype), count=shape[0], offset=off)
    except (KeyError, IndexError, TypeError, ValueError):
        return None


class Streak:
    """When a connection samples ahead: after two calls in a row with the
    same ``(table, n)``, unless it missed too often lately."""

    __slots__ = ("last", "count", "misses", "pause")

    def __init__(self) -> None:
        self.last: tuple[str, int] | None = None
        self.count = 0
        self.misses = 0
        self.pause = 0

    def called(self, table: str, n: int) -> bool:
        """Record a call; True when the next one should be asked for now."""
        if self.last == (table, n):
            self.count += 1
        else:
            self.last, self.count = (table, n), 1
        if self.pause:
            self.pause -= 1
            return False
        return self.count >= 2

    def outcome(self, hit: bool) -> None:
        if hit:
            self.misses = 0
            return
        self.misses += 1
        if self.misses >= MAX_MISSES:
            self.misses, self.pause = 0, PAUSE_CALLS
