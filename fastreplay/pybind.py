"""Reverb's ``reverb.pybind`` names that user code touches, without a C++
extension of their own: the chunker options, ``WeakCellRef`` and the selector
classes under their pybind names (``pybind.HeapSelector`` is the base of
``MinHeap`` and ``MaxHeap``, so ``isinstance`` checks written for Reverb hold).
"""

from fastreplay.chunkers import AutoTunedChunkerOptions, ConstantChunkerOptions
from fastreplay.history import WeakCellRef
from fastreplay.selectors import Fifo as FifoSelector
from fastreplay.selectors import HeapSelector
from fastreplay.selectors import ItemSelector as ItemSelector
from fastreplay.selectors import Lifo as LifoSelector
from fastreplay.selectors import Prioritized as PrioritizedSelector
from fastreplay.selectors import Uniform as UniformSelector

__all__ = [
    "AutoTunedChunkerOptions",
    "ConstantChunkerOptions",
    "FifoSelector",
    "HeapSelector",
    "ItemSelector",
    "LifoSelector",
    "PrioritizedSelector",
    "UniformSelector",
    "WeakCellRef",
]
