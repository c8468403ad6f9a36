"""Weak cell references, trajectory columns and column history views.

None of these copy data: a ``WeakCellRef`` names one cell (writer column,
cell id), a ``TrajectoryColumn`` a list of cells held as two small integer
arrays, and a ``_ColumnHistory`` a column of a writer.  Slicing history builds
those arrays in C; no Python object is created per cell unless you iterate.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from fastreplay import _core

__all__ = ["TrajectoryColumn", "WeakCellRef"]


class WeakCellRef:
    """Handle to one appended cell; ``expired`` once it left its column's
    keep-alive window and no queued item holds it."""

    __slots__ = ("_core", "_col", "_id")

    def __init__(self, core: _core.WriterCore, col: int, cell_id: int) -> None:
        self._core, self._col, self._id = core, col, cell_id

    @property
    def expired(self) -> bool:
        return not self._core.cell_alive(self._col, self._id)

    def _check(self) -> None:
        if self.expired:
            raise RuntimeError("Cannot access data from expired WeakCellRef")

    @property
    def shape(self) -> list[int | None]:
        self._check()
        return list(self._core.column_info(self._col)["shape"])

    @property
    def dtype(self) -> np.dtype[Any]:
        self._check()
        return self._core.column_info(self._col)["dtype"]  # type: ignore[no-any-return]

    def numpy(self) -> np.ndarray:
        """The cell's value (a 0-d array for scalars)."""
        return self._core.read_cell(self._col, self._id)

    def __repr__(self) -> str:
        state = "expired" if self.expired else "alive"
        return f"WeakCellRef(column={self._col}, cell={self._id}, {state})"


class TrajectoryColumn:
    """A column of an item: references to cells, optionally squeezed.

    Parameters
    ----------
    data_references : sequence of WeakCellRef
        The cells, in order; None is rejected.
    squeeze : bool
        Drop the leading (time) axis; requires exactly one reference.
    path : tuple, optional
        The column's path, for error messages.
    """

    __slots__ = ("_core", "_cols", "_ids", "_squeeze", "_path")

    def __init__(
        self,
        data_references: Sequence[WeakCellRef | None],
        *,
        squeeze: bool = False,
        path: tuple[Any, ...] | None = None,
    ) -> None:
        refs = list(data_references)
        if any(r is None for r in refs):
            raise ValueError(
                "TrajectoryColumns cannot contain any None data references: "
                f"TrajectoryColumn at path {path} got {refs}"
            )
        cores = {id(r._core) for r in refs}  # type: ignore[union-attr]
        if len(cores) > 1:
            raise ValueError("a TrajectoryColumn cannot mix cells of two writers")
        core = refs[0]._core if refs else None  # type: ignore[union-attr]
        self._init(
            core,
            np.array([r._col for r in refs], dtype=np.int32),  # type: ignore[union-attr]
            np.array([r._id for r in refs], dtype=np.int64),  # type: ignore[union-attr]
            squeeze,
            path,
        )

    def _init(self, core: Any, cols: npt.NDArray[np.int32] | int,
              ids: npt.NDArray[np.int64], squeeze: bool, path: Any) -> None:
        if squeeze and len(ids) != 1:
            raise ValueError(
                "Columns must contain exactly one data reference when squeeze set, "
                f"got {len(ids)}"
            )
        self._core, self._cols, self._ids = core, cols, ids
        self._squeeze, self._path = bool(squeeze), path

    @classmethod
    def _make(cls, core: Any, cols: npt.NDArray[np.int32] | int,
              ids: npt.NDArray[np.int64], squeeze: bool, path: Any,
              checked: bool = False) -> TrajectoryColumn:
        """Build from ids (no per-cell objects); ``cols`` is one column index
        or an array; ids of -1 (no value) are rejected unless ``checked``."""
        if not checked and (ids < 0).any():
            cols_arr = np.broadcast_to(np.asarray(cols), ids.shape)
            refs = [None if i < 0 else WeakCellRef(core, int(c), int(i))
                    for c, i in zip(cols_arr, ids)]
            raise ValueError(
                "TrajectoryColumns cannot contain any None data references: "
                f"TrajectoryColumn at path {path} got {refs}"
            )
        column = cls.__new__(cls)
        column._init(core, cols, ids, squeeze, path)
        return column

    def _col_array(self) -> npt.NDArray[np.int32]:
        if isinstance(self._cols, int):
            return np.full(len(self._ids), self._cols, dtype=np.int32)
        return self._cols

    @property
    def is_squeezed(self) -> bool:
        return self._squeeze

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[WeakCellRef]:
        for c, i in zip(self._col_array(), self._ids):
            yield WeakCellRef(self._core, int(c), int(i))

    def __getitem__(self, val: Any) -> TrajectoryColumn:
        if isinstance(val, (int, np.integer)):
            n = len(self)
            if not -n <= val < n:
                raise IndexError(f"index {val} out of range for column of length {n}")
            idx: Any = [int(val) % n]
            squeeze = True
        elif isinstance(val, (slice, list)):
            idx, squeeze = val, False
        else:
            raise TypeError(f"TrajectoryColumn indices must be int, slice or list, "
                            f"got {type(val).__name__}")
        return TrajectoryColumn._make(self._core, self._col_array()[idx],
                                      self._ids[idx], squeeze, self._path)

    def _info(self) -> dict[str, Any]:
        if not len(self):
            raise ValueError("an empty TrajectoryColumn has no dtype or shape")
        return self._core.column_info(  # type: ignore[no-any-return]
            int(self._col_array()[0]))

    @property
    def shape(self) -> tuple[int | None, ...]:
        shape = tuple(self._info()["shape"])
        return shape if self._squeeze else (len(self), *shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._info()["dtype"]  # type: ignore[no-any-return]

    def numpy(self) -> np.ndarray:
        """The referenced values, stacked (or the single value if squeezed)."""
        pairs = list(zip(self._col_array().tolist(), self._ids.tolist()))
        if any(not self._core.cell_alive(c, i) for c, i in pairs):
            raise RuntimeError(
                "Cannot convert TrajectoryColumn with expired data references to "
                "numpy array."
            )
        values = [self._core.read_cell(c, i) for c, i in pairs]
        return values[0] if self._squeeze else np.stack(values)

    def __repr__(self) -> str:
        return (f"TrajectoryColumn(path={self._path}, length={len(self)}, "
                f"squeeze={self._squeeze})")


class _ColumnHistory:
    """The history of one writer column, indexed like a list of steps."""

    __slots__ = ("_core", "_col", "_path")

    def __init__(self, core: _core.WriterCore, col: int, path: tuple[Any, ...]) -> None:
        self._core, self._col, self._path = core, col, path

    def __len__(self) -> int:
        return int(self._core.history_len)

    def _positions(self, val: Any) -> tuple[npt.NDArray[np.int64], bool]:
        n = len(self)
        if isinstance(val, (int, np.integer)):
            if not -n <= val < n:
                raise IndexError(f"history index {val} out of range for {n} steps")
            return np.array([int(val) % n], dtype=np.int64), True
        if isinstance(val, slice):
            return np.arange(n, dtype=np.int64)[val], False
        if isinstance(val, list):
            pos = np.asarray(val, dtype=np.int64).reshape(-1)
            if ((pos < -n) | (pos >= n)).any():
                raise IndexError(f"history indices {val} out of range for {n} steps")
            return pos % max(n, 1), False
        raise TypeError(f"history indices must be int, slice or list, "
                        f"got {type(val).__name__}")

    def __getitem__(self, val: Any) -> TrajectoryColumn:
        if type(val) is slice:
            start, stop, step = val.indices(len(self))
            count = len(range(start, stop, step))
            ids = self._core.cells_range(self._col, start, step, count)
            if ids is not None:
                return TrajectoryColumn._make(self._core, self._col, ids, False,
                                              self._path, checked=True)
        pos, squeeze = self._positions(val)
        ids = self._core.cells_at(self._col, pos)
        return TrajectoryColumn._make(self._core, self._col, ids, squeeze, self._path)

    def __iter__(self) -> Iterator[WeakCellRef | None]:
        ids = self._core.cells_at(self._col, np.arange(len(self)))
        for i in ids:
            yield None if i < 0 else WeakCellRef(self._core, self._col, int(i))

    def __repr__(self) -> str:
        return f"_ColumnHistory(path={self._path}, length={len(self)})"
