"""fastreplay: fast experience replay with Reverb's API, without TensorFlow."""

from fastreplay import errors, rate_limiters, selectors
from fastreplay._version import __version__

try:
    from fastreplay import _core  # noqa: F401
except ImportError as exc:  # pragma: no cover - a broken build must be loud
    raise ImportError(
        "fastreplay's compiled core (fastreplay._core) is missing or broken. "
        "Reinstall with a C compiler available: pip install --force-reinstall "
        f"fastreplay (original error: {exc})"
    ) from exc

from fastreplay import (  # Reverb's module names
    checkpointers,
    item_selectors,
    metrics,  # fastreplay's: counters as dicts for loggers
    pybind,
    reverb_types,
    structured_writer,
    trajectory_writer,
)
from fastreplay._core import ChunkStore
from fastreplay.chunkers import AutoTunedChunkerOptions, ConstantChunkerOptions
from fastreplay.client import Client, SampleDataset
from fastreplay.errors import DeadlineExceededError, ReverbError
from fastreplay.history import TrajectoryColumn, WeakCellRef
from fastreplay.legacy_writer import Writer
from fastreplay.replay_buffer import ReplayBuffer
from fastreplay.replay_sample import ReplaySample, SampleInfo, SampleInfoBatch
from fastreplay.server import Server
from fastreplay.structured_writer import StructuredWriter
from fastreplay.table import Table, TableInfo
from fastreplay.vector_writer import VectorTrajectoryWriter
from fastreplay.writer import TrajectoryWriter

structured = structured_writer  # Reverb's alias (``reverb.structured``)

__all__ = [
    "AutoTunedChunkerOptions",
    "ChunkStore",
    "Client",
    "ConstantChunkerOptions",
    "DeadlineExceededError",
    "ReplayBuffer",
    "ReplaySample",
    "ReverbError",
    "SampleInfo",
    "SampleDataset",
    "SampleInfoBatch",
    "Server",
    "StructuredWriter",
    "Table",
    "TableInfo",
    "TrajectoryColumn",
    "TrajectoryWriter",
    "VectorTrajectoryWriter",
    "WeakCellRef",
    "Writer",
    "__version__",
    "checkpointers",
    "errors",
    "item_selectors",
    "metrics",
    "pybind",
    "rate_limiters",
    "reverb_types",
    "selectors",
    "structured",
    "structured_writer",
    "trajectory_writer",
]
