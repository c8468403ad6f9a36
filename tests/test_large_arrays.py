"""Large table arrays (csrc/mem.h) are mapped on their own, never carved
from malloc's heap: advising huge pages on a heap range outlives the array,
and later small allocations there fault (and zero) 2 MiB at a time."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from fastreplay import Table
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not os.path.exists("/proc/self/smaps"),
    reason="reads /proc/self/smaps")


def huge_advised_heap_kib() -> int:
    """KiB of [heap] mappings advised for huge pages (VmFlags "hg")."""
    total, size, heap = 0, 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and ":" not in head[0]:  # a mapping's first line
                heap = head[-1] == "[heap]"
            elif head[0] == "Size:":
                size = int(head[1])
            elif head[0] == "VmFlags:" and heap and "hg" in head[1:]:
                total += size
    return total


def test_freed_large_table_leaves_no_huge_page_advice_on_the_heap() -> None:
    keys = np.arange(1, 300_001, dtype=np.uint64)  # item slots, index: > 4 MiB
    prios = np.ones(len(keys))
    before = huge_advised_heap_kib()
    for _ in range(2):
        table = Table("t", sel.Prioritized(0.6), sel.Fifo(), 1_000_000, rl.MinSize(1))
        assert table.insert_batch(keys, prios) == len(keys)
        del table
    assert huge_advised_heap_kib() <= before
