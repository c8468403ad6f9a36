"""Reverb's module name for the selectors (``reverb.item_selectors``)."""

from fastreplay.selectors import (
    Fifo,
    ItemSelector,
    Lifo,
    MaxHeap,
    MinHeap,
    Prioritized,
    Uniform,
)

__all__ = ["Fifo", "ItemSelector", "Lifo", "MaxHeap", "MinHeap", "Prioritized",
           "Uniform"]
