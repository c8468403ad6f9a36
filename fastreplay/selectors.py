"""Item selectors: how a table picks the item to sample or to evict.

The same classes serve as ``sampler`` and ``remover`` of a :class:`Table`
(Reverb's ``reverb.selectors``).  A selector object is a description; each
table builds its own compiled state from it, so one object may configure
several tables, but never both the sampler and the remover of one table.
"""

from __future__ import annotations

import math

__all__ = [
    "Fifo",
    "HeapSelector",
    "ItemSelector",
    "Lifo",
    "MaxHeap",
    "MinHeap",
    "Prioritized",
    "Uniform",
]


class ItemSelector:
    """Base class of the selectors below."""

    kind: str = ""
    #: Fifo, Lifo and the heaps pick deterministically; the others randomly.
    is_deterministic: bool = False

    @property
    def priority_exponent(self) -> float:
        return 1.0

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Uniform(ItemSelector):
    """Every item equally likely; reported probability ``1/N``."""

    kind = "uniform"


class Prioritized(ItemSelector):
    """Sample proportionally to ``priority ** priority_exponent``.

    Reported probability ``w / sum(w)``; a zero priority is never drawn, and
    when every weight is zero items are drawn uniformly (``1/N``).  NaN and
    negative priorities are rejected.  O(log N) per insert, update and sample.
    """

    kind = "prioritized"

    def __init__(self, priority_exponent: float) -> None:
        exponent = float(priority_exponent)
        if not math.isfinite(exponent) or exponent < 0:
            raise ValueError(
                f"priority_exponent ({priority_exponent}) must be a finite "
                "number >= 0"
            )
        self._priority_exponent = exponent

    @property
    def priority_exponent(self) -> float:
        return self._priority_exponent

    def __repr__(self) -> str:
        return f"Prioritized(priority_exponent={self._priority_exponent!r})"


class Fifo(ItemSelector):
    """Oldest item first; reported probability 1.0."""

    kind = "fifo"
    is_deterministic = True


class Lifo(ItemSelector):
    """Newest item first; reported probability 1.0."""

    kind = "lifo"
    is_deterministic = True


class HeapSelector(ItemSelector):
    """Base of :class:`MinHeap` and :class:`MaxHeap` (Reverb's
    ``pybind.HeapSelector``): ``HeapSelector(min_heap=True)`` builds a
    MinHeap, ``HeapSelector(False)`` a MaxHeap."""

    is_deterministic = True
    min_heap: bool = True

    def __new__(cls, min_heap: bool = True) -> HeapSelector:
        if cls is HeapSelector:
            cls = MinHeap if min_heap else MaxHeap
        return super().__new__(cls)

    def __init__(self, min_heap: bool = True) -> None:
        pass


class MinHeap(HeapSelector):
    """Lowest priority first; ties go to the least recently inserted or
    updated item.  Reported probability 1.0."""

    kind = "min_heap"


class MaxHeap(HeapSelector):
    """Highest priority first; ties as :class:`MinHeap`."""

    kind = "max_heap"
    min_heap = False
