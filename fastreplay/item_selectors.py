"""Reverb's module name for the selectors (``reverb.item_selectors``)."""

from fastreplay.selectors import (
    Fifo,
    HeapSelector,
    ItemSelector,
    Lifo,
    MaxHeap,
    MinHeap,
    Prioritized,
    Uniform,
)

__all__ = ["Fifo", "HeapSelector", "ItemSelector", "Lifo", "MaxHeap", "MinHeap",
           "Prioritized", "Uniform"]
