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
                                &kv[0], &pv[0], &o, mp, chunk_key, tns, &done, &bad)
    finally:
        step.release()
    if rc != FR_OK:
        if bad >= 0:
            _raise_for_status(rc, table._ctx(kv[bad], pv[bad]))
        _raise_for_status(rc, table._ctx() + f", {done} of {n} inserted")
    return done
