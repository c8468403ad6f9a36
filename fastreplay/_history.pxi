# WeakCellRef, TrajectoryColumn and ColumnHistory: views of writer cells.
# Included by _core.pyx after _writer.pxi.  Nothing here copies data: a
# TrajectoryColumn holds a column index (or a C array of them) and a C array
# of cell ids (inline for short columns), and slicing history fills that
# array in C: no Python object per cell.
# Needs: _writer.pxi (WriterCore, _WriterLock).

cimport cython
from cpython.object cimport Py_TYPE, PyObject, PyTypeObject
from cpython.ref cimport Py_REFCNT
from cpython.exc cimport PyErr_Clear, PyErr_Occurred
from cpython.slice cimport PySlice_GetIndicesEx


cdef extern from "Python.h":
    ctypedef struct _SliceFields "PySliceObject":
        PyObject *start
        PyObject *stop
        PyObject *step
    PyTypeObject PyLong_Type
    # Without Cython's error check: a failure is cleared, not raised.
    Py_ssize_t _as_ssize "PyLong_AsSsize_t"(object o) noexcept


cdef str _NONE_REFS = ("TrajectoryColumns cannot contain any None data references: "
                       "TrajectoryColumn at path {} got {}")


cdef class WeakCellRef:
    """Handle to one appended cell; ``expired`` once it left its column's
    keep-alive window and no queued item holds it."""

    cdef readonly WriterCore _core
    cdef readonly int32_t _col
    cdef readonly int64_t _id

    def __init__(self, WriterCore core not None, int32_t col, int64_t cell) -> None:
        self._core, self._col, self._id = core, col, cell

    @property
    def expired(self) -> bool:
        return not self._core.cell_alive(self._col, self._id)

    cdef _check(self):
        if self.expired:
            raise RuntimeError("Cannot access data from expired WeakCellRef ("
                               + self._core.expired_hint(self._col, self._id) + ")")

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


DEF _TC_INLINE = 8


@cython.freelist(32)
@cython.no_gc  # holds only a WriterCore and a path: no cycles through it
cdef class TrajectoryColumn:
    """TrajectoryColumn(data_references, *, squeeze=False, path=None)

    A column of an item: references to cells (WeakCellRef, never None),
    optionally squeezed (exactly one reference, no leading time axis).

    Other reference objects with ``shape``, ``dtype`` and ``numpy()`` (as
    Reverb's tests use) make a detached column: its length, shape, dtype,
    ``numpy()``, iteration and indexing work, but no writer can store it.
    """

    cdef readonly object _core     # WriterCore, or None when empty or detached
    cdef readonly tuple _refs      # the references of a detached column, or None
    cdef readonly bint _squeeze
    cdef readonly object _path
    cdef Py_ssize_t n
    cdef int32_t col               # the column of every cell when cols is NULL
    cdef int32_t *cols             # per-cell columns (heap), or NULL
    cdef int64_t *ids              # cell ids: _inline or heap
    cdef bint _run                 # ids are consecutive cells of column col
    cdef int64_t _inline[_TC_INLINE]

    def __cinit__(self):  # no arguments: Cython ignores the constructor's
        self.n = 0
        self.cols = NULL
        self.ids = self._inline

    def __init__(self, data_references, *, bint squeeze=False, path=None) -> None:
        refs = list(data_references)
        if any(r is None for r in refs):
            raise ValueError(_NONE_REFS.format(path, refs) + (
                ". A None reference is a step where the column had no value (a "
                "None leaf of append's result): build columns from "
                "WeakCellRef objects only, e.g. writer.history[path][-3:]."))
        for r in refs:
            if not isinstance(r, WeakCellRef):
                self._init_detached(refs, squeeze, path)
                return
        if len({id((<WeakCellRef>r)._core) for r in refs}) > 1:
            raise ValueError("a TrajectoryColumn cannot mix cells of two writers")
        self._check_squeeze(len(refs), squeeze)
        self._reserve(len(refs), True)
        cdef Py_ssize_t k
        for k in range(self.n):
            self.cols[k] = (<WeakCellRef>refs[k])._col
            self.ids[k] = (<WeakCellRef>refs[k])._id
        self._core = refs[0]._core if refs else None
        self._squeeze, self._path = squeeze, path

    cdef _init_detached(self, list refs, bint squeeze, path):
        for r in refs:
            if isinstance(r, WeakCellRef) or not all(
                    hasattr(r, a) for a in ("shape", "dtype", "numpy")):
                raise TypeError("TrajectoryColumn takes WeakCellRef objects (or "
                                "objects with shape, dtype and numpy()), got "
                                f"{type(r).__name__}")
        self._check_squeeze(len(refs), squeeze)
        self._reserve(len(refs), False)
        cdef Py_ssize_t k
        for k in range(self.n):
            self.ids[k] = -1
        self.col = -1
        self._refs = tuple(refs)
        self._core, self._squeeze, self._path = None, squeeze, path

    def __dealloc__(self):
        if self.ids != self._inline:
            free(self.ids)
        free(self.cols)

    cdef int _check_squeeze(self, Py_ssize_t n, bint squeeze) except -1:
        if squeeze and n != 1:
            raise ValueError("Columns must contain exactly one data reference when "
                             f"squeeze set, got {n}")
        return 0

    cdef int _reserve(self, Py_ssize_t n, bint per_cell_cols) except -1:
        """Room for n cells (per-cell columns too when asked)."""
        if self.ids != self._inline:
            free(self.ids)
        free(self.cols)
        self.ids, self.cols, self.n = self._inline, NULL, 0
        if n > _TC_INLINE:
            self.ids = <int64_t *>malloc(n * sizeof(int64_t))
        if per_cell_cols:
            self.cols = <int32_t *>malloc(max(n, 1) * sizeof(int32_t))
        if self.ids == NULL or (per_cell_cols and self.cols == NULL):
            self.ids = self._inline
            raise MemoryError()
        self.n = n
        return 0

    @staticmethod
    cdef TrajectoryColumn empty(WriterCore core, int32_t col, Py_ssize_t n,
                                bint squeeze, path):
        """A column of n cells of writer column ``col``, ids to be filled."""
        cdef TrajectoryColumn c = TrajectoryColumn.__new__(TrajectoryColumn)
        if n > _TC_INLINE:
            c._reserve(n, False)
        else:  # __cinit__ left ids on the inline room and cols NULL
            c.n = n
        c.col = col
        c._core, c._squeeze, c._path = core, squeeze, path
        return c

    cdef inline bint _as_run(self, fr_ref_run *run) noexcept:
        """Fill ``run`` when the column is one run of consecutive cells of
        one writer column (``_run``, a history slice); False otherwise."""
        if not self._run or self.cols != NULL:
            return False
        run.first, run.col, run.count = self.ids[0], self.col, self.n
        return True

    cdef inline int32_t col_at(self, Py_ssize_t k) noexcept:
        return self.col if self.cols == NULL else self.cols[k]

    cdef list _pairs(self):
        return [(self.col_at(k), self.ids[k]) for k in range(self.n)]

    @property
    def _ids(self):
        """The cell ids (a copy)."""
        return np.array([self.ids[k] for k in range(self.n)], dtype=np.int64)

    @property
    def _cols(self):
        """The column of every cell: an int, or an int32 array (a copy)."""
        if self.cols == NULL:
            return self.col
        return np.array([self.cols[k] for k in range(self.n)], dtype=np.int32)

    @property
    def is_squeezed(self) -> bool:
        return self._squeeze

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        if self._refs is not None:
            yield from self._refs
            return
        for c, i in self._pairs():
            yield WeakCellRef(self._core, c, i)

    def __getitem__(self, val) -> TrajectoryColumn:
        cdef Py_ssize_t n = self.n, k
        cdef bint squeeze = False
        if self._refs is not None:
            picked = self._refs[val] if isinstance(val, slice) else (
                [self._refs[v] for v in val] if isinstance(val, list)
                else [self._refs[val]])
            return TrajectoryColumn(picked, squeeze=not isinstance(val, (slice, list)),
                                    path=self._path)
        if isinstance(val, (int, np.integer)):
            if not -n <= val < n:
                raise IndexError(f"index {val} out of range for column of length {n}")
            picks = [int(val) % n]
            squeeze = True
        elif isinstance(val, slice):
            picks = list(range(n))[val]
        elif isinstance(val, list):
            picks = []
            for v in val:
                if not -n <= v < n:
                    raise IndexError(f"index {v} out of range for column of length "
                                     f"{n}")
                picks.append(int(v) % n)
        else:
            raise TypeError("TrajectoryColumn indices must be int, slice or list, "
                            f"got {type(val).__name__}")
        cdef TrajectoryColumn c = TrajectoryColumn.__new__(TrajectoryColumn)
        c._reserve(len(picks), self.cols != NULL)  # one writer column stays one
        c.col = self.col
        for k in range(c.n):
            if c.cols != NULL:
                c.cols[k] = self.col_at(picks[k])
            c.ids[k] = self.ids[<Py_ssize_t>picks[k]]
        c._core, c._squeeze, c._path = self._core, squeeze, self._path
        return c

    cdef dict _info(self):
        # An empty view of one writer column (history[5:2]) still knows its
        # column; an empty TrajectoryColumn([]) does not.
        if not self.n and (self._core is None or self.cols != NULL):
            raise ValueError("an empty TrajectoryColumn has no dtype or shape")
        info = (<WriterCore>self._core).column_info(self.col_at(0))
        if info["dtype"] is None:
            raise ValueError("an empty TrajectoryColumn has no dtype or shape")
        return info

    @property
    def shape(self) -> tuple:
        if self._refs is not None and self.n:
            shape = tuple(self._refs[0].shape)
        else:
            shape = tuple(self._info()["shape"])
        return shape if self._squeeze else (self.n, *shape)

    @property
    def dtype(self):
        if self._refs is not None and self.n:
            return self._refs[0].dtype
        return self._info()["dtype"]

    def numpy(self):
        """The referenced values, stacked (or the single value if squeezed)."""
        if self._refs is not None and self.n:
            values = [r.numpy() for r in self._refs]
            return values[0] if self._squeeze else np.stack(values)
        if not self.n:
            info = self._info()
            return np.empty((0, *info["shape"]), dtype=info["dtype"])
        cdef WriterCore core = self._core
        pairs = self._pairs()
        with core.lock:  # all cells read at one point of the writer's history
            for c, i in pairs:
                if not core.cell_alive(c, i):
                    raise RuntimeError(
                        "Cannot convert TrajectoryColumn with expired data "
                        f"references to numpy array. ({core._expired_hint(c, i)})")
            values = [core.read_cell(c, i) for c, i in pairs]
        return values[0] if self._squeeze else np.stack(values)

    def __repr__(self) -> str:
        return (f"TrajectoryColumn(path={self._path}, length={self.n}, "
                f"squeeze={self._squeeze})")


@cython.no_gc  # holds only a WriterCore, a path and a TrajectoryColumn of them
cdef class ColumnHistory:
    """The history of one writer column, indexed like a list of steps: an int
    gives a squeezed column, a slice or list of ints a non-squeezed one."""

    cdef readonly WriterCore _core
    cdef readonly int32_t _col
    cdef readonly object _path
    # The column the last slice returned.  Once nothing else holds it (the
    # user's loop dropped its item dict) no one can see it change, so the
    # next slice refills it instead of allocating and freeing one: a third of
    # a history slice's cost in the Reverb writer loop.
    cdef TrajectoryColumn _spare

    def __init__(self, WriterCore core not None, int32_t col, path) -> None:
        core._check_col(col)
        self._core, self._col, self._path = core, col, path

    def __len__(self) -> int:
        return fr_writer_history_len(self._core._w)

    cdef TrajectoryColumn _range(self, Py_ssize_t start, Py_ssize_t step,
                                 Py_ssize_t count, bint squeeze):
        cdef TrajectoryColumn c = self._spare
        if (c is not None and Py_REFCNT(c) == 2  # self._spare and c
                and count <= _TC_INLINE):
            c.n, c._squeeze = count, squeeze  # ids inline, cols NULL (as made)
        else:
            c = TrajectoryColumn.empty(self._core, self._col, count, squeeze, self._path)
            if count <= _TC_INLINE:
                self._spare = c
        cdef int64_t missing = 0
        cdef _WriterLock lock = self._core.lock
        if count and lock._depth == 0:
            # No thread is inside a writer call, and none can start one
            # before this returns: it holds the GIL throughout.
            missing = fr_writer_cells_range(self._core._w, self._col, start, step,
                                            count, c.ids)
        elif count:
            lock.acquire()
            missing = fr_writer_cells_range(self._core._w, self._col, start, step,
                                            count, c.ids)
            lock.release()
        if missing:
            self._raise_missing([c.ids[k] for k in range(count)],
                                [start + k * step for k in range(count)])
        # Every position of a step-1 range has a cell: ids and positions both
        # increase, so the ids are consecutive (fr_writer_cells_range).
        c._run = step == 1 and count > 0
        return c

    cdef _raise_missing(self, list ids, list positions=None):
        """Raise Reverb's None-reference error for the history positions
        ``positions`` (default: consecutive up to the newest step) whose
        cells ``ids`` are missing (< 0), and say why and what to do."""
        cdef Py_ssize_t n = fr_writer_history_len(self._core._w)
        if positions is None:
            positions = list(range(n - len(ids), n))
        text = _NONE_REFS.format(self._path, [
            None if i < 0 else WeakCellRef(self._core, self._col, i) for i in ids])
        raise ValueError(f"{text}. {self._missing_hint(ids, positions, n)}")

    cdef str _missing_hint(self, list ids, list positions, Py_ssize_t n):
        keep = self._core.column_info(self._col)["num_keep_alive_refs"]
        missing = [p for i, p in zip(ids, positions) if i < 0]
        reach = n - min(positions)  # steps back to the oldest position asked for
        if reach > keep:
            return (f"Column {self._path} keeps only its last {keep} values "
                    f"(num_keep_alive_refs={keep}) but this slice reaches {reach} "
                    f"steps back: increase num_keep_alive_refs to at least {reach} "
                    f"(e.g. client.trajectory_writer(num_keep_alive_refs={reach})), "
                    f"or slice at most the last {keep} steps.")
        back = [p - n for p in missing]
        return (f"Column {self._path} has no value at history index(es) {back} "
                "(those steps did not set it, or set it to None): slice only "
                "steps that have a value.")

    def __getitem__(self, val) -> TrajectoryColumn:
        cdef Py_ssize_t n = fr_writer_history_len(self._core._w)
        cdef Py_ssize_t start, stop, step, count, k
        cdef PyObject *lo
        if type(val) is slice:
            lo = (<_SliceFields *><PyObject *>val).start
            if ((<_SliceFields *><PyObject *>val).stop == <PyObject *>None
                    and (<_SliceFields *><PyObject *>val).step == <PyObject *>None
                    and Py_TYPE(<object>lo) == &PyLong_Type):  # h[-5:]
                start = _as_ssize(<object>lo)
                if start == -1 and PyErr_Occurred():
                    PyErr_Clear()  # beyond Py_ssize_t: the general path
                elif -n <= start <= n:
                    if start < 0:
                        start += n
                    return self._range(start, 1, n - start, False)
            PySlice_GetIndicesEx(val, n, &start, &stop, &step, &count)
            return self._range(start, step, count, False)
        if Py_TYPE(val) == &PyLong_Type:  # h[-1], the usual index
            start = _as_ssize(val)
            if start == -1 and PyErr_Occurred():
                PyErr_Clear()  # beyond Py_ssize_t: out of range below
            elif -n <= start < n:
                return self._range(start + n if start < 0 else start, 1, 1, True)
        if isinstance(val, (int, np.integer)):
            if not -n <= val < n:
                raise errors.HistoryIndexError(
                    f"history index {val} out of range for {n} steps (column "
                    f"{self._path}: valid indices are {-n} to {n - 1})")
            return self._range(int(val) % n, 1, 1, True)
        if isinstance(val, list):
            pos = np.asarray(val, dtype=np.int64).reshape(-1)
            if ((pos < -n) | (pos >= n)).any():
                raise errors.HistoryIndexError(
                    f"history indices {val} out of range for {n} steps (column "
                    f"{self._path}: valid indices are {-n} to {n - 1})")
            pos %= max(n, 1)
            ids = self._core.cells_at(self._col, pos).tolist()
            if any(i < 0 for i in ids):
                self._raise_missing(ids, pos.tolist())
            c = TrajectoryColumn.empty(self._core, self._col, len(ids), False,
                                       self._path)
            for k in range(len(ids)):
                (<TrajectoryColumn>c).ids[k] = ids[k]
            return c
        raise TypeError("history indices must be int, slice or list, "
                        f"got {type(val).__name__}")

    def __iter__(self):
        ids = self._core.cells_at(self._col, np.arange(len(self)))
        for i in ids.tolist():
            yield None if i < 0 else WeakCellRef(self._core, self._col, i)

    def __repr__(self) -> str:
        return f"ColumnHistory(path={self._path}, length={len(self)})"


def columns_of(list columns) -> set:
    """The writer columns the cells of these TrajectoryColumns are in."""
    cdef set out = set()
    cdef TrajectoryColumn tc
    cdef Py_ssize_t i
    for c in columns:
        if type(c) is not TrajectoryColumn:
            continue
        tc = <TrajectoryColumn>c
        if tc.cols == NULL:
            if tc.n:
                out.add(tc.col)
        else:
            for i in range(tc.n):
                out.add(tc.cols[i])
    return out
