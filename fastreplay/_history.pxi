# WeakCellRef, TrajectoryColumn and ColumnHistory: views of writer cells.
# Included by _core.pyx after _writer.pxi.  Nothing here copies data: a
# TrajectoryColumn holds a column index (or an int32 array of them) and an
# int64 array of cell ids, and slicing history fills that array in C.

from cpython.slice cimport PySlice_GetIndicesEx


cdef str _NONE_REFS = ("TrajectoryColumns cannot contain any None data references: "
                       "TrajectoryColumn at path {} got {}")


cdef class WeakCellRef:
    """Handle to one appended cell; ``expired`` once it left its column's
    keep-alive window and no queued item holds it."""

    cdef readonly WriterCore _core
    cdef readonly int32_t _col
    cdef readonly int64_t _id

    def __init__(self, WriterCore core, int32_t col, int64_t cell) -> None:
        self._core, self._col, self._id = core, col, cell

    @property
    def expired(self) -> bool:
        return not fr_writer_cell_alive(self._core._w, self._col, self._id)

    cdef _check(self):
        if self.expired:
            raise RuntimeError("Cannot access data from expired WeakCellRef")

    @property
    def shape(self) -> list:
        self._check()
        return list(self._core.column_info(self._col)["shape"])

    @property
    def dtype(self):
        self._check()
        return self._core.column_info(self._col)["dtype"]

    def numpy(self):
        """The cell's value (a 0-d array for scalars)."""
        return self._core.read_cell(self._col, self._id)

    def __repr__(self) -> str:
        state = "expired" if self.expired else "alive"
        return f"WeakCellRef(column={self._col}, cell={self._id}, {state})"


cdef class TrajectoryColumn:
    """TrajectoryColumn(data_references, *, squeeze=False, path=None)

    A column of an item: references to cells (WeakCellRef, never None),
    optionally squeezed (exactly one reference, no leading time axis).
    """

    cdef readonly object _core     # WriterCore, or None when empty
    cdef readonly object _cols     # int (one writer column) or int32 array
    cdef readonly object _ids      # int64 array of cell ids
    cdef readonly bint _squeeze
    cdef readonly object _path

    def __init__(self, data_references, *, bint squeeze=False, path=None) -> None:
        refs = list(data_references)
        if any(r is None for r in refs):
            raise ValueError(_NONE_REFS.format(path, refs))
        for r in refs:
            if not isinstance(r, WeakCellRef):
                raise TypeError(f"TrajectoryColumn takes WeakCellRef objects, got "
                                f"{type(r).__name__}")
        if len({id((<WeakCellRef>r)._core) for r in refs}) > 1:
            raise ValueError("a TrajectoryColumn cannot mix cells of two writers")
        self._set(refs[0]._core if refs else None,
                  np.array([(<WeakCellRef>r)._col for r in refs], dtype=np.int32),
                  np.array([(<WeakCellRef>r)._id for r in refs], dtype=np.int64),
                  squeeze, path)

    cdef _set(self, core, cols, ids, bint squeeze, path):
        if squeeze and len(ids) != 1:
            raise ValueError("Columns must contain exactly one data reference when "
                             f"squeeze set, got {len(ids)}")
        self._core, self._cols, self._ids = core, cols, ids
        self._squeeze, self._path = squeeze, path

    @staticmethod
    cdef TrajectoryColumn make(core, cols, ids, bint squeeze, path):
        cdef TrajectoryColumn c = TrajectoryColumn.__new__(TrajectoryColumn)
        c._set(core, cols, ids, squeeze, path)
        return c

    cdef object col_array(self):
        if isinstance(self._cols, int):
            return np.full(len(self._ids), self._cols, dtype=np.int32)
        return self._cols

    @property
    def is_squeezed(self) -> bool:
        return self._squeeze

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self):
        for c, i in zip(self.col_array().tolist(), self._ids.tolist()):
            yield WeakCellRef(self._core, c, i)

    def __getitem__(self, val) -> TrajectoryColumn:
        cdef Py_ssize_t n = len(self._ids)
        if isinstance(val, (int, np.integer)):
            if not -n <= val < n:
                raise IndexError(f"index {val} out of range for column of length {n}")
            idx = [int(val) % n]
            squeeze = True
        elif isinstance(val, (slice, list)):
            idx, squeeze = val, False
        else:
            raise TypeError("TrajectoryColumn indices must be int, slice or list, "
                            f"got {type(val).__name__}")
        return TrajectoryColumn.make(self._core, self.col_array()[idx],
                                     self._ids[idx], squeeze, self._path)

    cdef dict _info(self):
        if not len(self._ids):
            raise ValueError("an empty TrajectoryColumn has no dtype or shape")
        return (<WriterCore>self._core).column_info(int(self.col_array()[0]))

    @property
    def shape(self) -> tuple:
        shape = tuple(self._info()["shape"])
        return shape if self._squeeze else (len(self._ids), *shape)

    @property
    def dtype(self):
        return self._info()["dtype"]

    def numpy(self):
        """The referenced values, stacked (or the single value if squeezed)."""
        cdef WriterCore core = self._core
        pairs = list(zip(self.col_array().tolist(), self._ids.tolist()))
        if any(not fr_writer_cell_alive(core._w, c, i) for c, i in pairs):
            raise RuntimeError("Cannot convert TrajectoryColumn with expired data "
                               "references to numpy array.")
        values = [core.read_cell(c, i) for c, i in pairs]
        return values[0] if self._squeeze else np.stack(values)

    def __repr__(self) -> str:
        return (f"TrajectoryColumn(path={self._path}, length={len(self._ids)}, "
                f"squeeze={self._squeeze})")


cdef class ColumnHistory:
    """The history of one writer column, indexed like a list of steps: an int
    gives a squeezed column, a slice or list of ints a non-squeezed one."""

    cdef readonly WriterCore _core
    cdef readonly int32_t _col
    cdef readonly object _path

    def __init__(self, WriterCore core, int32_t col, path) -> None:
        self._core, self._col, self._path = core, col, path

    def __len__(self) -> int:
        return fr_writer_history_len(self._core._w)

    cdef TrajectoryColumn _range(self, Py_ssize_t start, Py_ssize_t step,
                                 Py_ssize_t count, bint squeeze):
        ids = np.empty(count, dtype=np.int64)
        cdef int64_t[::1] iv = ids
        cdef int64_t missing = 0
        if count:
            missing = fr_writer_cells_range(self._core._w, self._col, start, step,
                                            count, &iv[0])
        if missing:
            raise ValueError(_NONE_REFS.format(self._path, [
                None if i < 0 else WeakCellRef(self._core, self._col, i)
                for i in ids.tolist()]))
        return TrajectoryColumn.make(self._core, self._col, ids, squeeze, self._path)

    def __getitem__(self, val) -> TrajectoryColumn:
        cdef Py_ssize_t n = fr_writer_history_len(self._core._w)
        cdef Py_ssize_t start, stop, step, count
        if isinstance(val, slice):
            PySlice_GetIndicesEx(val, n, &start, &stop, &step, &count)
            return self._range(start, step, count, False)
        if isinstance(val, (int, np.integer)):
            if not -n <= val < n:
                raise IndexError(f"history index {val} out of range for {n} steps")
            return self._range(int(val) % n, 1, 1, True)
        if isinstance(val, list):
            pos = np.asarray(val, dtype=np.int64).reshape(-1)
            if ((pos < -n) | (pos >= n)).any():
                raise IndexError(f"history indices {val} out of range for {n} steps")
            pos %= max(n, 1)
            ids = self._core.cells_at(self._col, pos)
            if (ids < 0).any():
                raise ValueError(_NONE_REFS.format(self._path, [
                    None if i < 0 else WeakCellRef(self._core, self._col, i)
                    for i in ids.tolist()]))
            return TrajectoryColumn.make(self._core, self._col, ids, False, self._path)
        raise TypeError("history indices must be int, slice or list, "
                        f"got {type(val).__name__}")

    def __iter__(self):
        ids = self._core.cells_at(self._col, np.arange(len(self)))
        for i in ids.tolist():
            yield None if i < 0 else WeakCellRef(self._core, self._col, i)

    def __repr__(self) -> str:
        return f"ColumnHistory(path={self._path}, length={len(self)})"
