# Ring: ReplayBuffer's storage of small raw transitions (csrc/ring.h).
# Included by _core.pyx.
# Needs: _rows.pxi (RowPlan, _RowsInline, _rows_*), _steps.pxi (_Step),
# _table.pxi (_data_of, _MAX_SAMPLES_PER_CALL), _outpool.pxi (_empty_output).

RING_MOVED = FR_RING_MOVED


cdef class Ring:
    """Ring(name, capacity, plan, dtypes, shapes, prioritized, exponent,
    first_key, seed, store)

    ``capacity`` slots of ``plan``'s rows (fixed-size; the columns the
    plan compresses as one-row chunks of ``store``: see csrc/ring.h), the
    newest transitions, keys consecutive from ``first_key``; uniform or
    prioritized (``exponent``) sampling.
    ``dtypes`` and ``shapes`` give each column's numpy form for ``sample``
    and ``read``; ``name`` names the buffer in errors.  Thread-safe; every
    call runs without the GIL.
    """

    cdef fr_ring *_r
    cdef readonly RowPlan plan
    cdef readonly int64_t capacity
    cdef readonly bint prioritized
    cdef readonly str name
    cdef list _forms  # (shape, dtype) per column

    def __cinit__(self, str name, int64_t capacity, RowPlan plan not None,
                  list dtypes, list shapes, bint prioritized, double exponent,
                  uint64_t first_key, uint64_t seed, ChunkStore store not None):
        cdef Py_ssize_t c, k = plan.n
        if len(dtypes) != k or len(shapes) != k:
            raise ValueError("a Ring needs one dtype and shape per column")
        cdef int64_t *rb = <int64_t *>malloc(max(k, 1) * sizeof(int64_t))
        cdef int32_t *packed = <int32_t *>malloc(max(k, 1) * sizeof(int32_t))
        if rb == NULL or packed == NULL:
            free(rb)
            free(packed)
            raise MemoryError()
        try:
            for c in range(k):
                if fr_spec_is_var(&plan.specs[c]) or plan.specs[c].row_bytes <= 0:
                    raise ValueError("a Ring holds fixed-size rows only")
                rb[c] = plan.specs[c].row_bytes
                # the plan's compression choice: compressed rows are packed
                packed[c] = fr_compress_choice(&plan.specs[c], plan.modes[c])
            self._r = fr_ring_new(capacity, <int32_t>k, rb, packed, store._s,
                                  prioritized, exponent, first_key, seed)
        finally:
            free(rb)
            free(packed)
        if self._r == NULL:
            raise MemoryError()
        self.plan, self.capacity, self.prioritized, self.name = (
            plan, capacity, prioritized, name)
        self._forms = [(tuple(s), np.dtype(d)) for d, s in zip(dtypes, shapes)]

    def __dealloc__(self):
        if self._r != NULL:
            fr_ring_free(self._r)
            self._r = NULL

    cdef str _ctx(self, object key, double priority):
        return f"table '{self.name}', key {key}, priority {priority}"

    def add(self, list names, list values, priorities, double priority,
            bint batched) -> int:
        """Add ``values`` (rows of ``plan``: a leading axis N when
        ``batched``, else one row each) with ``priorities`` (None:
        ``priority`` each).  Returns the first key; -1, adding nothing, when
        the values are not such rows (the caller converts or reports them);
        RING_MOVED's negation when the ring is sealed."""
        cdef Py_ssize_t k = len(values), n = 1
        if k != self.plan.n or len(names) != k or k == 0 or k > _STEP_INLINE:
            return -1
        if batched:
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
        cdef _StepArrays *a = &inline.s.a
        cdef uint64_t key = 0
        cdef int64_t bad = -1
        cdef int rc
        _rows_init(&inline)
        try:
            try:
                _rows_fill(&inline, names, values, n if batched else 0)
            except (ValueError, TypeError, BufferError, OverflowError):
                return -1
            if not self.plan.matches(a):
                return -1
            with nogil:
                rc = fr_ring_add(self._r, n, a.rows, a.strides if batched else NULL,
                                 given, priority, &key, &bad)
        finally:
            _rows_release(&inline, a)
        if rc == FR_RING_MOVED:
            return -FR_RING_MOVED
        if rc != FR_OK and bad >= 0:
            _raise_for_status(rc, self._ctx(key + <uint64_t>bad,
                                            given[bad] if given != NULL else priority))
        _raise_for_status(rc, f"table '{self.name}'")
        return key

    def sample(self, Py_ssize_t n, int64_t min_size, timeout=None):
        """``n`` transitions once ``min_size`` are stored (waiting up to
        ``timeout`` seconds, None: forever): ``(keys, probabilities,
        priorities, size, columns)``, or None when the ring is sealed."""
        if n < 1 or n > _MAX_SAMPLES_PER_CALL:
            raise ValueError(f"num_samples ({n}) must be in [1, "
                             f"{_MAX_SAMPLES_PER_CALL}] (table '{self.name}')")
        cdef int64_t tns = _timeout_ns(timeout)
        keys = np.empty(n, np.uint64)
        probs = np.empty(n, np.float64)
        prios = np.empty(n, np.float64)
        cdef Py_ssize_t c, k = len(self._forms)
        columns = [_empty_output((n,) + shape, dtype) for shape, dtype in self._forms]
        cdef void *outs[_STEP_INLINE]
        for c in range(k):
            outs[c] = _data_of(columns[c])
        cdef uint64_t *kv = <uint64_t *>_data_of(keys)
        cdef double *bv = <double *>_data_of(probs)
        cdef double *qv = <double *>_data_of(prios)
        cdef int64_t size = 0
        cdef int rc
        with nogil:
            rc = fr_ring_sample(self._r, n, min_size, tns, outs, kv, bv, qv, &size)
        if rc == FR_RING_MOVED:
            return None
        if rc != FR_OK:
            _raise_for_status(rc, f"table '{self.name}'")
        return keys, probs, prios, size, columns

    def update(self, keys, priorities) -> bool:
        """Set the priorities of ``keys`` (those no longer stored are
        skipped).  False when the ring is sealed."""
        cdef const uint64_t[::1] kv = np.ascontiguousarray(keys, dtype=np.uint64).reshape(-1)
        cdef const double[::1] pv = np.ascontiguousarray(priorities, dtype=np.float64).reshape(-1)
        if kv.shape[0] != pv.shape[0]:
            raise ValueError(f"update keys and priorities differ in length "
                             f"({kv.shape[0]} != {pv.shape[0]}) (table '{self.name}'): "
                             "pass one priority per key")
        if kv.shape[0] == 0:
            return True
        cdef int64_t bad = -1
        cdef int rc
        with nogil:
            rc = fr_ring_update(self._r, kv.shape[0], &kv[0], &pv[0], &bad)
        if rc == FR_RING_MOVED:
            return False
        if rc != FR_OK:
            _raise_for_status(rc, self._ctx(kv[bad], pv[bad]) if bad >= 0 else self.name)
        return True

    def read(self, int64_t first, int64_t n):
        """Stored transitions first..first+n, oldest first: ``(keys,
        priorities, times_sampled, columns)``."""
        keys = np.empty(n, np.uint64)
        prios = np.empty(n, np.float64)
        times = np.empty(n, np.int64)
        cdef Py_ssize_t c, k = len(self._forms)
        columns = [np.empty((n,) + shape, dtype) for shape, dtype in self._forms]
        cdef void *outs[_STEP_INLINE]
        for c in range(k):
            outs[c] = _data_of(columns[c])
        cdef uint64_t *kv = <uint64_t *>_data_of(keys)
        cdef double *qv = <double *>_data_of(prios)
        cdef int64_t *tv = <int64_t *>_data_of(times)
        cdef int rc
        with nogil:
            rc = fr_ring_read(self._r, first, n, outs, kv, qv, tv)
        _raise_for_status(rc, f"table '{self.name}', rows {first}..{first + n}")
        return keys, prios, times, columns

    def restore(self, dict counters, times) -> None:
        """A loaded buffer's counters (``inserts``, ``samples``,
        ``updates``, ``unique_samples``) and each stored transition's
        times sampled, oldest first."""
        cdef const int64_t[::1] tv = np.ascontiguousarray(times, dtype=np.int64).reshape(-1)
        cdef fr_ring_stats st
        memset(&st, 0, sizeof(st))
        st.inserts = counters["inserts"]
        st.samples = counters["samples"]
        st.updates = counters["updates"]
        st.unique_samples = counters["unique_samples"]
        cdef int64_t zero = 0
        cdef int rc = fr_ring_restore(self._r, &st, &tv[0] if tv.shape[0] else &zero,
                                      tv.shape[0])
        _raise_for_status(rc, f"table '{self.name}': restore {tv.shape[0]} counts")

    def close(self) -> None:
        """Wake waiting samplers (TableClosedError) and refuse later waits."""
        fr_ring_close(self._r)

    def seal(self) -> None:
        """Refuse later calls (add: RING_MOVED, sample: None, update: False),
        waking waiting samplers: the contents are moving to a table."""
        fr_ring_seal(self._r)

    def stats(self) -> dict:
        cdef fr_ring_stats s
        fr_ring_stats_get(self._r, &s)
        return s

    def __len__(self) -> int:
        cdef fr_ring_stats s
        fr_ring_stats_get(self._r, &s)
        return s.size
