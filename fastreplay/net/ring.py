"""Chunk bytes from a writer's process to a server on the same host through
shared memory.

The outbox's connection owns one segment (``SendRing``, made with
``_core.SharedSegment`` and attached by the server, ``shm_attach``).  An
insert frame's chunk bytes are packed straight from the writer's chunks
into a region of it (``_core.pack_chunks(out=)``) and the frame names the
region instead of carrying the bytes; the server copies them into its
chunk store while it checks the frame.  Regions are taken in order and
given back in the same order, as the server's replies to the frames that
named them are read.  A frame whose bytes do not fit (the ring is full, or
they are more than half of it) carries them on the socket as before.
"""

from __future__ import annotations

import collections
from typing import Any

__all__ = ["RING_BYTES", "SendRing"]

#: Bytes of an outbox connection's ring: frames of 2048 Atari steps
#: (uint8[84,84,4], about 7 kB each compressed) fit four times.
RING_BYTES = 64 << 20


class SendRing:
    """A segment used as a ring of regions (guarded by the connection's
    lock)."""

    def __init__(self, segment: Any) -> None:
        self.segment = segment
        self.name: str = segment.name
        self.size: int = segment.size
        self._head = 0  # where the next region starts
        self._live: collections.deque[tuple[int, int]] = collections.deque()

    def take(self, n: int) -> int | None:
        """The offset of a free region of ``n`` bytes, or None."""
        if n <= 0 or n > self.size // 2:
            return None
        if not self._live:
            self._head = 0
        start = self._head
        if self._live:
            tail = self._live[0][0]
            if start >= tail:  # free: [start, size) and [0, tail)
                if start + n > self.size:
                    if n >= tail:
                        return None
                    start = 0
            elif start + n >= tail:  # free: [start, tail)
                return None
        self._live.append((start, n))
        self._head = start + n
        return start

    def room(self) -> int:
        """The most bytes ``take`` gives a region of now."""
        if not self._live:
            return self.size // 2
        tail, start = self._live[0][0], self._head
        free = max(self.size - start, tail - 1) if start >= tail else tail - start - 1
        return max(0, min(free, self.size // 2))

    def give_back(self, start: int) -> None:
        """The oldest region (at ``start``) is free again."""
        if self._live and self._live[0][0] == start:
            self._live.popleft()

    def __len__(self) -> int:
        return len(self._live)
