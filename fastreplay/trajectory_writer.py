"""Reverb's module name for the writer (``reverb.trajectory_writer``)."""

from fastreplay.history import TrajectoryColumn, WeakCellRef
from fastreplay.writer import StepReferences, TrajectoryWriter

__all__ = ["StepReferences", "TrajectoryColumn", "TrajectoryWriter", "WeakCellRef"]
