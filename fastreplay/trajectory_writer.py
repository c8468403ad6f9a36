"""Reverb's module name for the writer (``reverb.trajectory_writer``)."""

from fastreplay.history import ColumnHistory, TrajectoryColumn, WeakCellRef
from fastreplay.writer import StepReferences, TrajectoryWriter

#: Reverb's private name for a column's history view (its tests annotate
#: with it).
_ColumnHistory = ColumnHistory

__all__ = ["StepReferences", "TrajectoryColumn", "TrajectoryWriter", "WeakCellRef"]
