"""Reverb's ``reverb.pybind`` names that user code and Reverb's tests touch."""

from __future__ import annotations

import fastreplay as reverb
from fastreplay import pybind, selectors


def test_heap_selector_is_the_base_of_both_heaps() -> None:
    assert isinstance(selectors.MinHeap(), pybind.HeapSelector)
    assert isinstance(selectors.MaxHeap(), pybind.HeapSelector)
    assert not isinstance(selectors.Fifo(), pybind.HeapSelector)
    assert selectors.MinHeap().min_heap and not selectors.MaxHeap().min_heap


def test_heap_selector_builds_the_heap_it_names() -> None:
    assert type(pybind.HeapSelector(True)) is selectors.MinHeap
    assert type(pybind.HeapSelector(min_heap=False)) is selectors.MaxHeap
    assert pybind.HeapSelector(False).kind == "max_heap"


def test_heap_selectors_configure_tables() -> None:
    table = reverb.Table("t", sampler=pybind.HeapSelector(False),
                         remover=selectors.Fifo(), max_size=10,
                         rate_limiter=reverb.rate_limiters.MinSize(1))
    table.insert(1, 1.0)
    table.insert(2, 5.0)
    assert table.info.sampler_options.heap.min_heap is False
    assert int(table.sample(1)[0][0]) == 2


def test_pybind_names_are_the_package_classes() -> None:
    assert pybind.ConstantChunkerOptions is reverb.ConstantChunkerOptions
    assert pybind.AutoTunedChunkerOptions is reverb.AutoTunedChunkerOptions
    assert pybind.WeakCellRef is reverb.WeakCellRef
    assert pybind.FifoSelector is selectors.Fifo
    assert pybind.PrioritizedSelector is selectors.Prioritized
    assert reverb.pybind is pybind
