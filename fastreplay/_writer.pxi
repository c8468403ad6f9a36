# WriterCore and its lock: the compiled side of TrajectoryWriter
# (csrc/column.h, writer.h).  Included by _core.pyx.
# Needs: _strings.pxi (_decode_text), _table.pxi (TableCore, _dtype_of),
# _codec.pxi (ChunkStore, _options), _steps.pxi (_StepInline, _Step,
# _step_put, _AppendJob, _append_envs, _NOGIL_MIN_BYTES, dtype_name,
# _shape_str).  Later: _history.pxi (TrajectoryColumn, WeakCellRef; the one
# forward reference, see _core.pyx).

from cpython.exc cimport PyErr_CheckSignals
from cpython.object cimport PyObject
from cpython.pythread cimport (
    NOWAIT_LOCK,
    PyThread_acquire_lock,
    PyThread_allocate_lock,
    PyThread_free_lock,
    PyThread_release_lock,
    PyThread_type_lock,
)


cdef extern from "Python.h":
    PyObject **PySequence_Fast_ITEMS(object o)


cdef extern from "pythread.h":
    int PyThread_acquire_lock_timed(PyThread_type_lock lock, long long microseconds,
                                    int intr_flag) nogil


cdef class _WriterLock:
    """The lock of one writer (Reverb's writer mutex): every call that reads
    or changes a writer's columns, cells or queue holds it, so a writer used
    from several threads is serialized instead of corrupting its C state.
    Reentrant for its owner thread (append may add columns).

    Taken and released only with the GIL held, so the GIL guards its state
    (owner, depth, waiters) and the uncontended path is two field stores: no
    lock call (CPython's try-lock reads the monotonic clock every time, 3% of
    a writer step in perf).  A thread that finds it taken counts itself a
    waiter and sleeps with the GIL released on ``_wake``, a semaphore the
    owner posts when it lets go with waiters; it wakes at least every 50 ms
    to run signal handlers (Ctrl-C interrupts the wait) and tries again.
    ``close`` never takes it: it must wake a flush that holds it.
    """

    cdef PyThread_type_lock _wake  # posted by a release that has waiters
    cdef unsigned long _owner
    cdef Py_ssize_t _depth
    cdef Py_ssize_t _waiters

    def __cinit__(self):
        self._wake = PyThread_allocate_lock()
        if self._wake == NULL:
            raise MemoryError()
        PyThread_acquire_lock(self._wake, NOWAIT_LOCK)  # no post yet
        self._owner = 0
        self._depth = 0
        self._waiters = 0

    def __dealloc__(self):
        if self._wake != NULL:
            PyThread_free_lock(self._wake)

    cdef inline int acquire(self) except -1:
        cdef unsigned long me = PyThread_get_thread_ident()
        if self._depth:
            if self._owner == me:
                self._depth += 1
                return 0
            self._wait()
        self._owner = me
        self._depth = 1
        return 0

    cdef int _wait(self) except -1:
        """Until no thread holds the lock (the GIL held on return)."""
        self._waiters += 1
        try:
            while self._depth:
                with nogil:
                    PyThread_acquire_lock_timed(self._wake, 50000, 0)
                PyErr_CheckSignals()
        finally:
            self._waiters -= 1
        return 0

    cdef inline void release(self) noexcept:
        self._depth -= 1
        if self._depth == 0:
            self._owner = 0
            if self._waiters:
                PyThread_release_lock(self._wake)  # one post: a waiter retries

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        if not self._depth or self._owner != PyThread_get_thread_ident():
            raise RuntimeError("writer lock released by a thread not holding it")
        self.release()


cdef int _raise_writer_status(int rc) except -1:
    if rc == FR_ECLOSED:
        _raise_for_status(rc, "", "The writer was closed.")
    return _raise_for_status(rc, "writer")


cdef inline bint _has_value(PyObject *v) noexcept:
    """A step value slot that holds a value (not NULL, not None)."""
    return v != NULL and v != <PyObject *>None


cdef class WriterCore:
    """WriterCore(store, seed, num_keep_alive_refs, max_chunk_length=None, throughput_weight=1.0)

    One writer's columns, cells, queued items and episode.  Columns are
    addressed by index; ``paths`` name them in error messages.
    """

    cdef fr_writer *_w
    cdef readonly ChunkStore store
    cdef list _paths
    cdef dict _table_names        # table address -> name, for failure reports
    cdef const fr_table *_last_table
    #: Serializes every use of this writer across threads (_WriterLock).
    cdef readonly _WriterLock lock

    def __cinit__(self, *args, **kwargs):
        self._w = NULL
        self._table_names = {}
        self._last_table = NULL
        self.lock = _WriterLock()
        self._paths = []

    def __init__(self, ChunkStore store not None, uint64_t seed,
                 int32_t num_keep_alive_refs,
                 max_chunk_length=None, double throughput_weight=1.0) -> None:
        cdef fr_chunker_options o
        if self._w != NULL:
            raise RuntimeError("WriterCore is already initialized")
        _options(&o, num_keep_alive_refs, max_chunk_length, throughput_weight)
        self.store = store
        _raise_for_status(fr_writer_create(store._s, seed, o, &self._w),
                          "could not create the writer")

    cdef int _raise_status(self, int rc) except -1:
        """Raise for a status of flush, end_episode or create_item: an
        FR_EASYNC becomes the recorded failure of the queued insert, naming
        its table and key (then the writer is usable again)."""
        cdef uint64_t key = 0
        cdef const fr_table *table = NULL
        if rc != FR_EASYNC:
            return _raise_writer_status(rc)
        rc = fr_writer_take_failure(self._w, &key, &table)
        name = self._table_names.get(<size_t>table, "?")
        if rc == FR_ECLOSED:
            _raise_for_status(rc, "", f"Table '{name}' was closed before item {key} "
                              "of this writer could be inserted; the item was "
                              "dropped.")
        text = _DEFAULT_MESSAGES.get(rc, f"fastreplay core error {rc}.")
        return _raise_for_status(rc, "", f"Item {key} of this writer could not be "
                                 f"inserted into table '{name}' and was dropped: "
                                 f"{text}")

    cdef int _check_col(self, int32_t col) except -1:
        if self._w == NULL:
            raise RuntimeError("WriterCore is not initialized")
        if not 0 <= col < fr_writer_num_columns(self._w):
            raise IndexError(f"column {col} out of range "
                             f"[0, {fr_writer_num_columns(self._w)})")
        return 0

    def __dealloc__(self):
        if self._w != NULL:
            fr_writer_free(self._w)

    def add_column(self, str path, num_keep_alive_refs=None, max_chunk_length=None,
                   double throughput_weight=1.0) -> int:
        """Add a column named ``path`` (for messages); options default to the
        writer's.  Returns its index."""
        cdef fr_chunker_options o
        cdef int32_t col = -1
        if num_keep_alive_refs is not None:
            _options(&o, num_keep_alive_refs, max_chunk_length, throughput_weight)
        with self.lock:
            if self._w == NULL:
                raise RuntimeError("WriterCore is not initialized")
            col = fr_writer_add_column(self._w,
                                       NULL if num_keep_alive_refs is None else &o)
            if col < 0:
                _raise_for_status(col, path)
            self._paths.append(path)
        return col

    def configure(self, int32_t col, int32_t num_keep_alive_refs, max_chunk_length,
                  double throughput_weight=1.0) -> None:
        cdef fr_chunker_options o
        _options(&o, num_keep_alive_refs, max_chunk_length, throughput_weight)
        with self.lock:
            self._check_col(col)
            _raise_for_status(fr_writer_configure(self._w, col, o),
                              f"column {self._paths[col]}")

    def set_compression(self, int32_t col, int32_t compression) -> None:
        """Column ``col``'s COMPRESSION_* choice, from its next chunk on."""
        if compression not in _COMPRESSION_MODES:
            raise ValueError(f"compression must be one of {_COMPRESSION_MODES}, "
                             f"got {compression}")
        with self.lock:
            self._check_col(col)
            fr_column_set_compression(fr_writer_column(self._w, col), compression)

    def column_info(self, int32_t col) -> dict:
        """Spec (dtype, shape or None), options and current chunk length."""
        with self.lock:
            self._check_col(col)
            return self._column_info(col)

    cdef dict _column_info(self, int32_t col):
        cdef fr_column *c = fr_writer_column(self._w, col)
        return {
            "dtype": _dtype_of(&c.spec) if c.has_spec else None,
            "shape": _shape_of(&c.spec) if c.has_spec else None,
            "compress": bool(c.compress),
            "compression": c.compression,
            "num_keep_alive_refs": c.opt.num_keep_alive_refs,
            "autotune": bool(c.opt.autotune),
            "max_chunk_length": c.max_len,
            "buffered": c.buf_rows,
            "appended": c.n_appended,
            "alive_from": c.alive_from,
        }

    def expired_hint(self, int32_t col, int64_t cell) -> str:
        """Why cell ``cell`` of column ``col`` is expired and what to do,
        for error messages (error paths only)."""
        with self.lock:
            self._check_col(col)
            return self._expired_hint(col, cell)

    cdef str _expired_hint(self, int32_t col, int64_t cell):
        cdef fr_column *c = fr_writer_column(self._w, col)
        path = self._paths[col]
        cdef int32_t keep = c.opt.num_keep_alive_refs
        if cell < 0:  # a step reference first read after its cell expired
            return (f"column {path}: the value expired before the reference was "
                    f"first used (the column keeps its last {keep} values, "
                    "num_keep_alive_refs, and end_episode(clear_buffers=True) "
                    "expires all): use references before appending more steps, "
                    "or increase num_keep_alive_refs")
        if cell < c.alive_from:
            return (f"column {path}: the reference is from before the last "
                    "end_episode(clear_buffers=True), which expires every "
                    "reference; create items before ending the episode (or "
                    "call end_episode(clear_buffers=False))")
        cdef int64_t need = c.n_appended - cell
        return (f"column {path} keeps only its last {keep} values "
                f"(num_keep_alive_refs={keep}) but this reference is {need} values "
                "old: create the item before appending more steps, or increase "
                f"num_keep_alive_refs to at least {need}")

    @property
    def history_len(self) -> int:
        return fr_writer_history_len(self._w)

    @property
    def episode_steps(self) -> int:
        return fr_writer_episode_steps(self._w)

    @property
    def step_open(self) -> bool:
        return bool(fr_writer_step_open(self._w))

    def append(self, list flat, bint partial) -> None:
        """Append one (partial) step: ``flat[c]`` is column c's value, or
        None where the step has none.

        Validates every value (dtype, shape, repeated column) before writing
        anything.  Steps copying 16 KiB (_NOGIL_MIN_BYTES) or more run
        without the GIL (its comment says why smaller ones keep it).
        """
        self.lock.acquire()
        try:
            self._append(flat, partial)
        finally:
            self.lock.release()

    cdef int _append(self, list flat, bint partial) except -1:
        return self._append_vals(PySequence_Fast_ITEMS(flat), len(flat), partial)

    cdef int _append_vals(self, PyObject **flat, Py_ssize_t n, bint partial) except -1:
        """Append one step: ``flat[c]`` is column c's value (NULL or None:
        none), borrowed for the call."""
        cdef Py_ssize_t c, m = 0
        cdef _StepInline inline
        cdef _StepArrays *a = &inline.a
        cdef _Step heap = None
        cdef _AppendJob job
        cdef int32_t bad = -1
        cdef int rc
        if n > fr_writer_num_columns(self._w):
            raise ValueError(f"{n} values for {fr_writer_num_columns(self._w)} columns")
        for c in range(n):
            if _has_value(flat[c]):
                m += 1
        if m > _STEP_INLINE:
            cols = [c for c in range(n) if _has_value(flat[c])]
            heap = _Step(self._paths, cols, [<object>flat[c] for c in cols], 0)
            a = &heap.a
        else:
            _step_inline_init(&inline)
        try:
            if heap is None:
                for c in range(n):
                    if not _has_value(flat[c]):
                        continue
                    # _step_put's fast case inline: the common small array or
                    # numpy scalar runs no code of its (large) general path.
                    if _np_fast_put(&a.specs[a.n], &a.rows[a.n], &a.strides[a.n],
                                    <object>flat[c]):
                        a.cols[a.n] = c
                        a.total += a.strides[a.n]
                        a.n += 1
                    else:
                        _step_put(a, c, <object>flat[c], self._paths[c], 0)
            job = _AppendJob(&self._w, 1, a, NULL, partial, -1)
            if a.total >= _NOGIL_MIN_BYTES:
                rc = _run_gil_free(_append_envs, &job)
            else:
                rc = _append_envs(&job)
            bad = job.bad
        finally:
            _step_release(a)
        if rc != FR_OK:
            cols = [c for c in range(n) if _has_value(flat[c])]
            self._raise_append(rc, cols, [<object>flat[c] for c in cols], bad, 0)
        return 0

    cdef _raise_append(self, int rc, list cols, list values, int32_t bad,
                       int batched):
        if bad < 0:
            _raise_for_status(rc, "")
        cdef fr_column *c = fr_writer_column(self._w, cols[bad])
        path = self._paths[cols[bad]]
        got = np.asarray(values[bad])
        if batched:
            got = got[0]
        if rc == FR_EDTYPE:
            message = (f"Tensor of wrong dtype provided for column {path}. Got "
                       f"{dtype_name(got.dtype)} but expected "
                       f"{dtype_name(_dtype_of(&c.spec))}.")
        elif rc == FR_ESHAPE:
            message = (f"Tensor of incompatible shape provided for column {path}. "
                       f"Got {_shape_str(got.shape)} which is incompatible with "
                       f"{_shape_str(_shape_of(&c.spec))}.")
        elif rc == FR_EREPEATED:
            message = (f"Field {path} has already been set in the active step by "
                       "previous (partial) append call and thus must be omitted "
                       f"or set to None but got: {values[bad]}")
        else:
            message = None
        _raise_for_status(rc, "", message)

    def cells_at(self, int32_t col, positions) -> np.ndarray:
        """Cell ids at history positions (-1 where none or expired)."""
        cdef const int64_t[::1] pv = np.ascontiguousarray(positions,
                                                          dtype=np.int64).reshape(-1)
        out = np.empty(pv.shape[0], dtype=np.int64)
        cdef int64_t[::1] ov = out
        with self.lock:
            self._check_col(col)
            if pv.shape[0]:
                fr_writer_cells_at(self._w, col, pv.shape[0], &pv[0], &ov[0])
        return out

    def cells_range(self, int32_t col, int64_t start, int64_t step, int64_t count):
        """Cell ids at positions start + k*step (k < count), or None when
        any position has no alive cell."""
        with self.lock:
            self._check_col(col)
            if count < 0 or count > fr_writer_history_len(self._w):
                raise ValueError(f"count ({count}) must be in [0, history length "
                                 f"{fr_writer_history_len(self._w)}]")
            out = np.empty(count, dtype=np.int64)
            return self._cells_range(col, start, step, count, out)

    cdef object _cells_range(self, int32_t col, int64_t start, int64_t step,
                             int64_t count, out):
        cdef int64_t[::1] ov = out
        cdef int64_t missing = 0
        if count:
            missing = fr_writer_cells_range(self._w, col, start, step, count, &ov[0])
        return None if missing else out

    def cell_alive(self, int32_t col, int64_t cell) -> bool:
        """Whether the cell is in its keep-alive window or pinned by an item."""
        with self.lock:
            return self._w != NULL and bool(fr_writer_cell_alive(self._w, col, cell))

    def read_cell(self, int32_t col, int64_t cell) -> np.ndarray:
        """The value of cell ``cell`` of column ``col`` (a copy)."""
        with self.lock:
            self._check_col(col)
            return self._read_cell(col, cell)

    cdef object _read_cell(self, int32_t col, int64_t cell):
        cdef fr_column *c = fr_writer_column(self._w, col)
        if not fr_writer_cell_alive(self._w, col, cell):
            raise RuntimeError("Cannot access data from expired WeakCellRef ("
                               + self._expired_hint(col, cell) + ")")
        if fr_spec_is_var(&c.spec):
            return self._read_text_cell(c, col, cell)
        out = np.empty(_shape_of(&c.spec), dtype=_dtype_of(&c.spec))
        cdef unsigned char[::1] ov = out.reshape(-1).view(np.uint8)
        cdef unsigned char dummy = 0
        cdef void *dst = &ov[0] if out.nbytes else &dummy
        cdef int rc
        with nogil:
            rc = fr_writer_read_cell(self._w, col, cell, dst)
        if rc == FR_EEXPIRED:
            raise RuntimeError("Cannot access data from expired WeakCellRef")
        _raise_for_status(rc, f"column {self._paths[col]}")
        return out

    cdef object _read_text_cell(self, fr_column *c, int32_t col, int64_t cell):
        cdef int64_t n = fr_writer_cell_bytes(self._w, col, cell)
        if n == FR_EEXPIRED:
            raise RuntimeError("Cannot access data from expired WeakCellRef")
        blob = PyBytes_FromStringAndSize(NULL, n)
        cdef char *dst = PyBytes_AS_STRING(blob)
        cdef int rc
        with nogil:
            rc = fr_writer_read_cell(self._w, col, cell, dst)
        _raise_for_status(rc, f"column {self._paths[col]}")
        return _decode_text(&c.spec, [blob], ())

    def create_item(self, TableCore table not None, double priority,
                    list columns) -> int:
        """Queue an item whose trajectory columns are the TrajectoryColumn
        objects ``columns`` (in flatten order).  Returns the item's key."""
        self.lock.acquire()
        try:
            return self._create(table, priority, columns)
        finally:
            self.lock.release()

    cdef uint64_t _create(self, TableCore table, double priority,
                          list columns, int32_t structure_id=0) except? 0:
        return self._create_flat(table, priority, PySequence_Fast_ITEMS(columns),
                                 len(columns), structure_id)

    cdef uint64_t _create_flat(self, TableCore table, double priority,
                               PyObject **columns, Py_ssize_t n,
                               int32_t structure_id) except? 0:
        """_create of the n columns at ``columns`` (borrowed references)."""
        cdef Py_ssize_t total = 0, i, k, at = 0
        cdef TrajectoryColumn tc
        cdef fr_ref_run runs[16]
        cdef uint8_t sq_s[16]
        cdef bint as_runs = n <= 16
        for i in range(n):
            c = <object>columns[i]
            if type(c) is not TrajectoryColumn and not isinstance(c, TrajectoryColumn):
                raise TypeError("All leaves of the trajectory must be "
                                f"TrajectoryColumn, got {type(c).__name__}")
            tc = c
            if tc.n and tc._core is not self:
                raise ValueError("TrajectoryColumn refers to another writer's cells")
            total += tc.n
            if as_runs:
                sq_s[i] = tc._squeeze
                as_runs = tc._as_run(&runs[i])
        if as_runs:  # history slices h[k][-n:]: one run per column
            return self._create_runs(table, priority, columns, n, runs, sq_s,
                                     structure_id)
        # Stack arrays for the usual few short columns, else the heap.
        cdef int32_t lens_s[16]
        cdef int32_t cv_s[64]
        cdef int64_t iv_s[64]
        cdef int32_t *lens = lens_s
        cdef uint8_t *sq = sq_s
        cdef int32_t *cv = cv_s
        cdef int64_t *iv = iv_s
        cdef uint64_t key = 0
        cdef int32_t bad_column = -1, bad_ref = -1
        cdef int rc
        if n > 16:
            lens = <int32_t *>malloc(n * sizeof(int32_t))
            sq = <uint8_t *>malloc(n)
        if total > 64:
            cv = <int32_t *>malloc(total * sizeof(int32_t))
            iv = <int64_t *>malloc(total * sizeof(int64_t))
        try:
            if not lens or not sq or not cv or not iv:
                raise MemoryError()
            for i in range(n):
                tc = <TrajectoryColumn>columns[i]
                lens[i] = <int32_t>tc.n
                sq[i] = tc._squeeze
                for k in range(tc.n):
                    cv[at + k] = tc.col_at(k)
                    iv[at + k] = tc.ids[k]
                at += tc.n
            self._note_table(table)
            # Short and non-blocking: keeping the GIL is cheaper than handing
            # it over twice.
            rc = fr_writer_create_item(self._w, table._t, priority, structure_id,
                                       n, lens, sq,
                                       cv, iv, &key, &bad_column, &bad_ref)
            if rc != FR_OK:
                self._raise_create(rc, table, priority,
                                   [<object>columns[i] for i in range(n)],
                                   bad_column, bad_ref)
        finally:
            if lens != lens_s:
                free(lens); free(sq)
            if cv != cv_s:
                free(cv); free(iv)
        return key

    cdef uint64_t _create_runs(self, TableCore table, double priority,
                               PyObject **columns, Py_ssize_t n, fr_ref_run *runs,
                               uint8_t *sq, int32_t structure_id) except? 0:
        """_create_flat of the n columns at ``columns`` that are one run each
        (``runs``, squeeze flags ``sq``)."""
        cdef uint64_t key = 0
        cdef int32_t bad_column = -1, bad_ref = -1
        cdef Py_ssize_t i
        self._note_table(table)
        cdef int rc = fr_writer_create_item_runs(self._w, table._t, priority,
                                                 structure_id, n, runs, sq, &key,
                                                 &bad_column, &bad_ref)
        if rc != FR_OK:
            self._raise_create(rc, table, priority,
                               [<object>columns[i] for i in range(n)],
                               bad_column, bad_ref)
        return key

    cdef inline void _note_table(self, TableCore table):
        """Remember the table's name for failure reports."""
        if table._t != self._last_table:
            self._table_names[<size_t>table._t] = table.name
            self._last_table = table._t

    cdef _raise_create(self, int rc, TableCore table, double priority, list columns,
                       int32_t bad_column, int32_t bad_ref):
        if rc == FR_EASYNC:
            self._raise_status(rc)
        if rc == FR_EPRIORITY_NAN and bad_column < 0:
            _raise_for_status(rc, f"table '{table.name}'",
                              "`priority` must not be nan.")
        if bad_column < 0:
            if rc == FR_EEMPTY:
                _raise_for_status(rc, f"table '{table.name}'", (
                    "trajectory must not be empty. Give at least one non-empty "
                    "TrajectoryColumn, e.g. {'obs': writer.history['obs'][-1:]}."))
            _raise_for_status(rc, f"table '{table.name}', priority {priority!r}")
        pairs = (<TrajectoryColumn>columns[bad_column])._pairs()
        cols = [c for c, _ in pairs]
        prefix = f"Error in column {bad_column}: "
        where = f" (table '{table.name}', item column {bad_column}"
        if cols:
            at = bad_ref if 0 <= bad_ref < len(cols) else 0
            where += f", writer column {self._paths[cols[at]]}"
        where += ")"
        if rc == FR_ESQUEEZE:
            message = (f"TrajectoryColumn must contain exactly one row when squeeze "
                       f"is set but got {len(cols)}.")
        elif rc in (FR_EDTYPE, FR_ESHAPE):
            first = self.column_info(cols[0])
            other = self.column_info(cols[bad_ref])
            if rc == FR_EDTYPE:
                message = (f"Column references tensors with different dtypes: "
                           f"{dtype_name(first['dtype'])} (index 0) != "
                           f"{dtype_name(other['dtype'])} (index {bad_ref}).")
            else:
                message = (f"Column references tensors with incompatible shapes: "
                           f"{_shape_str(first['shape'])} (index 0) not compatible "
                           f"with {_shape_str(other['shape'])} (index {bad_ref}).")
            message += (" Build each TrajectoryColumn from one history column, "
                        "e.g. writer.history['obs'][-3:].")
        elif rc == FR_EEMPTY:
            message = ("TrajectoryColumn must not be empty; slice at least one "
                       "step, e.g. writer.history[...][-1:].")
        elif rc == FR_EEXPIRED and 0 <= bad_ref < len(cols):
            c, i = pairs[bad_ref]
            message = (_DEFAULT_MESSAGES[rc] + where + ": "
                       + self._expired_hint(c, i) + ".")
            where = ""
        else:
            message = _DEFAULT_MESSAGES.get(rc, f"fastreplay core error {rc}.")
        _raise_for_status(rc, "", prefix + message + where)

    def close(self) -> None:
        """Refuse further calls and wake a flush blocked in another thread.
        Never takes the writer lock (a blocked flush holds it)."""
        if self._w != NULL:
            fr_writer_close(self._w)

    def pending(self) -> int:
        """Items not yet inserted: queued here or in their tables (two
        counters read without the lock, so a blocked flush does not block
        this)."""
        return fr_writer_pending(self._w)

    def flush(self, int64_t ignore_last, timeout) -> bool:
        """Finalize and hand over all but the last ``ignore_last`` items and
        wait; returns False when the timeout (seconds) expired."""
        cdef int64_t tns = _timeout_ns(timeout)
        cdef int rc
        if ignore_last < 0:
            raise ValueError(f"ignore_last ({ignore_last}) must be >= 0")
        with self.lock:  # (close() wakes this wait without the lock)
            with nogil:
                rc = fr_writer_flush(self._w, ignore_last, tns)
        if rc == FR_ETIMEOUT:
            return False
        self._raise_status(rc)
        return True

    def end_episode(self, bint clear_buffers, timeout) -> bool:
        """End the episode (always, even on timeout); False on timeout."""
        cdef int64_t tns = _timeout_ns(timeout)
        cdef int rc
        with self.lock:
            with nogil:
                rc = fr_writer_end_episode(self._w, clear_buffers, tns)
        if rc == FR_ETIMEOUT:
            return False
        self._raise_status(rc)
        return True
