# insert_rows: many one-step items inserted into a table at once, without
# a writer (csrc/rows.h).  Included by _core.pyx.
# Needs: _table.pxi (TableCore), _codec.pxi (ChunkStore, _options),
# _steps.pxi (_Step).

#: A column's compression choice (csrc/column.h, FR_COMPRESSION_*).
COMPRESSION_AUTO = FR_COMPRESSION_AUTO
COMPRESSION_NONE = FR_COMPRESSION_NONE
COMPRESSION_LZ4 = FR_COMPRESSION_LZ4
_COMPRESSION_MODES = (FR_COMPRESSION_AUTO, FR_COMPRESSION_NONE, FR_COMPRESSION_LZ4)


def insert_rows(TableCore table not None, ChunkStore store not None, list names,
                list values, keys,
                priorities, uint64_t chunk_key, timeout=None,
                int32_t num_keep_alive_refs=1, max_chunk_length=None,
                compression=None) -> int:
    """Insert len(keys) one-step items: row r of every value (leading axis
    = rows) becomes item keys[r], its columns squeezed, in the order of
    ``values``.  ``compression`` gives each value's COMPRESSION_* choice
    (None: COMPRESSION_AUTO for all).  Compressed columns are cut into
    chunks by the writer's chunker rule for these options (csrc/rows.h),
    chunk keys counting up
    from ``chunk_key``.  Returns how many were inserted (fewer when the
    rate limiter timed out part-way, which then raises
    DeadlineExceededError)."""
    cdef fr_chunker_options o
    _options(&o, num_keep_alive_refs, max_chunk_length, 1.0)
    cdef const uint64_t[::1] kv = np.ascontiguousarray(keys, dtype=np.uint64)
    cdef const double[::1] pv = np.ascontiguousarray(priorities, dtype=np.float64)
    cdef Py_ssize_t n = kv.shape[0]
    if pv.shape[0] != n:
        raise ValueError(f"keys and priorities differ in length ({n} != {pv.shape[0]})")
    if len(names) != len(values):
        raise ValueError(f"names and values differ in length "
                         f"({len(names)} != {len(values)})")
    cdef const int32_t[::1] modes
    cdef const int32_t *mp = NULL
    if compression is not None:
        modes = np.ascontiguousarray(compression, dtype=np.int32)
        if modes.shape[0] != len(values) or any(
                m not in _COMPRESSION_MODES for m in compression):
            raise ValueError(f"compression must give one of {_COMPRESSION_MODES} per "
                             f"value, got {compression!r}")
        if modes.shape[0]:
            mp = &modes[0]
    if n == 0:
        return 0
    cdef _Step step = _Step(names, list(range(len(values))), values, n)
    text = step.text_path(names)
    if text is not None:
        raise ValueError(f"column {text}: string columns cannot be "
                         "inserted as rows; write them with a TrajectoryWriter")
    cdef int64_t tns = _timeout_ns(timeout)
    cdef int64_t done = 0, bad = -1
    cdef int rc
    try:
        with nogil:  # may wait for the rate limiter: not a hand-off section
            rc = fr_insert_rows(table._t, store._s, step.a.n, step.a.specs,
                                step.a.rows, n,
                                &kv[0], &pv[0], &o, mp, NULL, chunk_key, tns, &done,
                                &bad)
    finally:
        step.release()
    if rc != FR_OK:
        if bad >= 0:
            _raise_for_status(rc, table._ctx(kv[bad], pv[bad]))
        _raise_for_status(rc, table._ctx() + f", {done} of {n} inserted")
    return done


cdef class RowKeys:
    """A buffer's item keys (counting up from ``first_key``) and chunk keys
    (from ``first_chunk_key``, wrapping at 2**64), handed out in blocks.
    Taking a block holds the GIL throughout, so threads need no lock."""

    cdef uint64_t key, chunk_key

    def __cinit__(self, uint64_t first_key=0, uint64_t first_chunk_key=0):
        self.key = first_key
        self.chunk_key = first_chunk_key

    cdef inline void take(self, uint64_t n, uint64_t chunks, uint64_t *key,
                          uint64_t *chunk_key) noexcept:
        key[0] = self.key
        chunk_key[0] = self.chunk_key
        self.key += n
        self.chunk_key += chunks

    def reserve(self, uint64_t n, uint64_t chunk_keys) -> tuple:
        """``(key, chunk_key)``: the first of ``n`` item keys and of
        ``chunk_keys`` chunk keys, which no other call gets."""
        cdef uint64_t key, chunk_key
        self.take(n, chunk_keys, &key, &chunk_key)
        return key, chunk_key


cdef class RowPlan:
    """The row specs of a buffer's fields, fixed by its first insert, with
    their compression choices (COMPRESSION_*, None: AUTO) and the chunker
    options of one-step items: ``insert_row`` and ``insert_batch`` check
    each later row or batch against them."""

    cdef fr_spec *specs
    cdef const fr_spec **interned  # fr_spec_intern of each spec
    cdef int32_t *modes
    cdef fr_chunker_options opt
    cdef readonly Py_ssize_t n
    cdef list cols  # [0, n): the column of each value

    def __cinit__(self, list names, list rows, compression=None):
        cdef Py_ssize_t i
        self.cols = list(range(len(rows)))
        cdef _Step step = _Step(names, self.cols, rows, 0)
        self.n = len(rows)
        self.specs = <fr_spec *>malloc(max(self.n, 1) * sizeof(fr_spec))
        self.modes = <int32_t *>malloc(max(self.n, 1) * sizeof(int32_t))
        if self.specs == NULL or self.modes == NULL:
            raise MemoryError()
        memcpy(self.specs, step.a.specs, self.n * sizeof(fr_spec))
        step.release()
        self.interned = <const fr_spec **>malloc(max(self.n, 1) * sizeof(fr_spec *))
        if self.interned == NULL:
            raise MemoryError()
        for i in range(self.n):
            self.interned[i] = fr_spec_intern(&self.specs[i])
            if self.interned[i] == NULL:
                raise MemoryError()
        if compression is not None and (len(compression) != self.n or any(
                m not in _COMPRESSION_MODES for m in compression)):
            raise ValueError(f"compression must give one of {_COMPRESSION_MODES} per "
                             f"row, got {compression!r}")
        for i in range(self.n):
            self.modes[i] = FR_COMPRESSION_AUTO if compression is None else compression[i]
        _options(&self.opt, 1, None, 1.0)

    def __dealloc__(self):
        free(self.specs)
        free(<void *>self.interned)
        free(self.modes)

    cdef bint matches(self, const _StepArrays *a) noexcept:
        """Whether ``a`` holds this plan's rows (strings never do: the
        plan's specs come from an insert of rows, which has none)."""
        cdef Py_ssize_t i
        if a.n != self.n:
            return False
        for i in range(self.n):
            if not fr_spec_equal(&a.specs[i], &self.specs[i]):
                return False
        return True


cdef struct _RowsInline:
    # Stack storage of the values of insert_row/insert_batch (at most
    # _STEP_INLINE of them), with room for batched string offsets.
    _StepInline s
    int64_t *env_offs[_STEP_INLINE]


cdef int _rows_fill(_RowsInline *inline, list names, list values,
                   Py_ssize_t batched) except -1:
    """Put at most _STEP_INLINE values into ``inline`` as C rows (the
    caller releases ``&inline.s.a`` with _rows_release, also on error)."""
    cdef Py_ssize_t i
    for i in range(len(values)):
        _step_put(&inline.s.a, <int32_t>i, values[i], names[i], batched)
    return 0


cdef inline void _rows_init(_RowsInline *inline) noexcept:
    cdef Py_ssize_t i
    _step_inline_init(&inline.s)
    for i in range(_STEP_INLINE):
        inline.env_offs[i] = NULL
    inline.s.a.env_offs = inline.env_offs


cdef void _rows_release(_RowsInline *inline, _StepArrays *a) noexcept:
    _step_release(a)
    cdef Py_ssize_t i
    if a == &inline.s.a:
        for i in range(_STEP_INLINE):
            free(inline.env_offs[i])
            inline.env_offs[i] = NULL


def insert_row(TableCore table not None, ChunkStore store not None,
               RowPlan plan not None, RowKeys keys not None, list names,
               list values, double priority, timeout=None) -> bool:
    """``insert_rows`` of one row, given as it is (no leading axis; Python
    floats, ints and bools as numpy stores them, nothing else converted):
    one item in one call, for ``ReplayBuffer.add``, its key and chunk keys
    taken from ``keys``.  Returns False, inserting nothing and taking no
    key, when the values are not ``plan``'s rows (count, dtype or shape;
    the caller's general path then reports it)."""
    cdef Py_ssize_t n = len(values)
    if n != plan.n or len(names) != n:
        return False
    cdef _RowsInline inline
    cdef _Step heap = None
    cdef _StepArrays *a = NULL
    cdef int64_t tns = _timeout_ns(timeout)
    cdef int64_t done = 0, bad = -1
    cdef uint64_t key, chunk_key
    cdef int rc
    try:
        if n > _STEP_INLINE:
            heap = _Step(names, plan.cols, values, 0)
            a = &heap.a
        else:
            _rows_init(&inline)
            a = &inline.s.a
            _rows_fill(&inline, names, values, 0)
        if not plan.matches(a):
            return False
        keys.take(1, n, &key, &chunk_key)
        with nogil:  # may wait for the rate limiter: not a hand-off section
            rc = fr_insert_rows(table._t, store._s, <int32_t>n, a.specs, a.rows, 1,
                                &key, &priority, &plan.opt, plan.modes, plan.interned,
                                chunk_key, tns, &done, &bad)
    finally:
        if a != NULL:
            _rows_release(&inline, a)
    if rc != FR_OK:
        if bad >= 0:
            _raise_for_status(rc, table._ctx(key, priority))
        _raise_for_status(rc, table._ctx() + ", 0 of 1 inserted")
    return True


def insert_batch(TableCore table not None, ChunkStore store not None,
                 RowPlan plan not None, RowKeys keys not None, list names,
                 list values, priorities=None, double default_priority=1.0,
                 timeout=None) -> int:
    """``insert_rows`` of a batch of ``plan``'s rows (each value with a
    leading axis of the same length N > 0; numpy arrays are read in place)
    as items with consecutive keys taken from ``keys`` and ``priorities``
    (None: ``default_priority`` each), for ``ReplayBuffer.add_batch``.
    Returns how many were inserted, or -1, inserting nothing and taking no
    key, when the values are not such a batch (the caller's general path
    then reports it).  Raises as insert_rows."""
    cdef Py_ssize_t n_cols = len(values), n, r
    if n_cols != plan.n or len(names) != n_cols or n_cols == 0:
        return -1
    try:
        n = len(values[0])
    except TypeError:
        return -1
    if n <= 0:
        return -1
    cdef const double[::1] pv
    cdef const double *given = NULL
    if priorities is not None:
        pv = np.ascontiguousarray(priorities, dtype=np.float64).reshape(-1)
        if pv.shape[0] != n:
            return -1
        given = &pv[0]
    cdef _RowsInline inline
    cdef _Step heap = None
    cdef _StepArrays *a = NULL
    cdef int64_t tns = _timeout_ns(timeout)
    cdef int64_t done = 0, bad = -1
    cdef uint64_t key, chunk_key
    cdef uint64_t *kp = NULL
    cdef double *pp = NULL
    cdef int rc = FR_ENOMEM
    try:
        try:
            if n_cols > _STEP_INLINE:
                heap = _Step(names, plan.cols, values, n)
                a = &heap.a
            else:
                _rows_init(&inline)
                a = &inline.s.a
                _rows_fill(&inline, names, values, n)
        except (ValueError, TypeError, BufferError, OverflowError):
            return -1
        if not plan.matches(a):
            return -1
        kp = <uint64_t *>malloc(n * sizeof(uint64_t))
        if given == NULL:
            pp = <double *>malloc(n * sizeof(double))
        if kp == NULL or (given == NULL and pp == NULL):
            raise MemoryError()
        keys.take(n, n * n_cols, &key, &chunk_key)
        with nogil:  # may wait for the rate limiter: not a hand-off section
            for r in range(n):
                kp[r] = key + r
            if given == NULL:
                for r in range(n):
                    pp[r] = default_priority
                given = pp
            rc = fr_insert_rows(table._t, store._s, <int32_t>n_cols, a.specs, a.rows, n,
                                kp, given, &plan.opt, plan.modes, plan.interned,
                                chunk_key, tns, &done, &bad)
        if rc != FR_OK:
            if bad >= 0:
                _raise_for_status(rc, table._ctx(kp[bad], given[bad]))
            _raise_for_status(rc, table._ctx() + f", {done} of {n} inserted")
    finally:
        if a != NULL:
            _rows_release(&inline, a)
        free(kp)
        free(pp)
    return done
