# append_batch: one step appended to each of N writers (the vector path of
# VectorTrajectoryWriter, fastreplay/vector_writer.py).  Included by
# _core.pyx.
# Needs: _steps.pxi (_Step, _AppendJob, _append_envs, _NOGIL_MIN_BYTES),
# _writer.pxi (WriterCore and its lock).


def append_batch(list cores, list cols, list values, bint partial) -> None:
    """Append one step to each of N writers: row e of every value (leading
    axis N) goes to cores[e].  All writers are validated before any is
    written, so a bad value leaves every writer unchanged."""
    cdef Py_ssize_t n_envs = len(cores), e, i
    if n_envs == 0:
        return
    cdef int64_t n_cols = 2**31
    for obj in cores:
        if not isinstance(obj, WriterCore) or (<WriterCore>obj)._w == NULL:
            raise TypeError(f"append_batch takes WriterCore objects, got "
                            f"{type(obj).__name__}")
        n_cols = min(n_cols, fr_writer_num_columns((<WriterCore>obj)._w))
    if len(cols) != len(values):
        raise ValueError(f"cols and values differ in length "
                         f"({len(cols)} != {len(values)})")
    for c in cols:
        if not 0 <= c < n_cols:
            raise IndexError(f"column {c} out of range [0, {n_cols})")
    cdef _Step step = _Step((<WriterCore>cores[0])._paths, cols, values, n_envs)
    cdef WriterCore core
    cdef _AppendJob job
    cdef int32_t bad = -1
    cdef int rc = FR_OK
    cdef const void **rows = <const void **>malloc(max(step.a.n, 1) * sizeof(void *))
    cdef fr_writer **ws = <fr_writer **>malloc(max(n_envs, 1) * sizeof(void *))
    cdef Py_ssize_t locked = 0
    cores = list(cores)  # the writers locked below, whatever the caller does
    try:
        if not rows or not ws:
            raise MemoryError()
        for e in range(n_envs):  # (always in list order: no lock-order cycle)
            (<WriterCore>cores[e]).lock.acquire()
            locked += 1
        for e in range(n_envs):
            core = cores[e]
            ws[e] = core._w
            rc = fr_writer_check_append(ws[e], step.a.n, step.a.cols, step.a.specs, &bad)
            if rc != FR_OK:
                core._raise_append(rc, cols, values, bad, 1)
        job = _AppendJob(ws, n_envs, &step.a, rows, partial, -1)
        if step.a.total >= _NOGIL_MIN_BYTES or n_envs * step.a.n > 64:
            rc = _run_gil_free(_append_envs, &job)
        else:
            rc = _append_envs(&job)
        _raise_for_status(rc, "append_batch")
    finally:
        for e in range(locked):
            (<WriterCore>cores[e]).lock.release()
        step.release()
        free(rows)
        free(ws)
