"""Weak cell references, trajectory columns and column history views.

None of these copy data: a ``WeakCellRef`` names one cell (writer column,
cell id), a ``TrajectoryColumn`` a list of cells held as a column index and
an array of cell ids, and a column history one column of a writer.  They are
compiled (``fastreplay/_history.pxi``) because a step slices history and
builds columns several times: no Python object is created per cell unless
you iterate over a column.
"""

from fastreplay._core import ColumnHistory, TrajectoryColumn, WeakCellRef

_ColumnHistory = ColumnHistory

__all__ = ["ColumnHistory", "TrajectoryColumn", "WeakCellRef"]
