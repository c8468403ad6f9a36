# extend: many whole steps appended in one call (TrajectoryWriter.extend and
# StructuredWriter.extend; reverb#78).  Every value has a leading axis of the
# steps; the rows go in from C without the GIL inside a writer batch
# (fr_writer_set_batch in csrc/writer.h: the steps share chunks instead of
# one chunk per column a step), and a StructuredWriter's configs are
# evaluated after each step as ``append`` would.  Included by _core.pyx
# after _structured.pxi.
# Needs: _steps.pxi (_Step, _NOGIL_MIN_BYTES), _writer.pxi (WriterCore),
# _structured.pxi (StructuredCore, _condition_value's rules).


cdef struct _ExtendJob:
    fr_writer *w
    _StepArrays *a
    const void **rows        # scratch: the current step's row of every value
    Py_ssize_t steps
    fr_sw *sw                # NULL: no configs to evaluate
    const int64_t *data      # steps x n_data condition values (with sw)
    const uint8_t *has_data  # n_data flags: the value is in the batch
    Py_ssize_t n_data
    Py_ssize_t done          # out: steps appended
    int64_t created          # out: items the configs created
    int32_t bad              # out: the value (append) or config (evaluate)
    bint evaluating          # out: the failure came from a config


cdef int _extend_steps(void *arg) noexcept nogil:
    """Append the job's steps one by one (evaluating the configs after each)
    inside a writer batch."""
    cdef _ExtendJob *j = <_ExtendJob *>arg
    cdef _StepArrays *a = j.a
    cdef Py_ssize_t t, i
    cdef int64_t made
    cdef int rc = fr_writer_set_batch(j.w, j.steps), rc2
    while rc == FR_OK and j.done < j.steps:
        t = j.done
        for i in range(a.n):
            if a.env_offs[i] != NULL:  # string rows of varying length
                j.rows[i] = <const char *>a.rows[i] + a.env_offs[i][t]
                a.specs[i].row_bytes = a.env_offs[i][t + 1] - a.env_offs[i][t]
            else:
                j.rows[i] = <const char *>a.rows[i] + t * a.strides[i]
        rc = fr_writer_append(j.w, a.n, a.cols, j.rows, a.specs, 0, &j.bad)
        if rc != FR_OK:
            break
        j.done += 1
        if j.sw == NULL:
            continue
        fr_sw_begin_step(j.sw)
        for i in range(j.n_data):
            if j.has_data[i]:
                fr_sw_set_data(j.sw, <int32_t>i, j.data[t * j.n_data + i], 1)
        made = 0
        rc = fr_sw_evaluate(j.sw, 0, &made, &j.bad)
        j.created += made
        j.evaluating = rc != FR_OK
    rc2 = fr_writer_set_batch(j.w, 0)
    return rc if rc != FR_OK else rc2


cdef Py_ssize_t _num_steps(list values, list paths) except -1:
    """The common leading axis of the values (ValueError naming the column
    that has none, or another length)."""
    cdef Py_ssize_t steps = -1, c, n
    first = None
    for c in range(len(values)):
        v = values[c]
        if v is None:
            continue
        shape = getattr(v, "shape", None)
        if shape is None:
            shape = np.shape(v)
        if len(shape) == 0:
            raise ValueError(
                f"extend takes every value with a leading axis of steps, but "
                f"column {paths[c]} is a scalar.")
        n = shape[0]
        if steps < 0:
            steps, first = n, paths[c]
        elif n != steps:
            raise ValueError(
                f"extend takes every value with the same leading axis of steps: "
                f"column {paths[c]} has {n} but column {first} has {steps}.")
    if steps < 0:
        raise ValueError("extend needs at least one value.")
    return steps


cdef int64_t _extend(WriterCore core, list values, StructuredCore sw,
                     list data) except -1:
    """Append ``len`` steps: ``values[c]`` holds writer column c's rows (or
    None); with ``sw`` evaluate its configs after each step, ``data[i]``
    being data condition i's values (or None).  The caller holds the lock.
    Returns the items the configs created."""
    if core._w == NULL:
        raise RuntimeError("WriterCore is not initialized")
    if len(values) > fr_writer_num_columns(core._w):
        raise ValueError(f"{len(values)} values for "
                         f"{fr_writer_num_columns(core._w)} columns")
    cdef Py_ssize_t steps = _num_steps(values, core._paths), i, n_data = 0
    if steps == 0:
        return 0
    if fr_writer_step_open(core._w):
        raise ValueError("extend appends whole steps, but a partial step is open: "
                         "close it with append(..., partial_step=False) first.")
    cols = [c for c in range(len(values)) if values[c] is not None]
    vals = [values[c] for c in cols]
    cdef _Step step = _Step(core._paths, cols, vals, steps)
    cdef int32_t bad = -1
    cdef int rc = fr_writer_check_append(core._w, step.a.n, step.a.cols,
                                         step.a.specs, &bad)
    if rc != FR_OK:
        step.release()
        core._raise_append(rc, cols, vals, bad, 1)
    cdef int64_t[:, ::1] conds
    cdef uint8_t[::1] has
    cdef _ExtendJob job
    memset(&job, 0, sizeof(job))
    if sw is not None:
        n_data = len(data)
        conds_arr = np.zeros((steps, max(n_data, 1)), dtype=np.int64)
        has_arr = np.zeros(max(n_data, 1), dtype=np.uint8)
        for i in range(n_data):
            if data[i] is not None:
                conds_arr[:, i] = _condition_values(data[i], sw._data_sources[i])
                has_arr[i] = 1
        conds, has = conds_arr, has_arr
        job.sw, job.data, job.has_data = sw._s, &conds[0, 0], &has[0]
    job.w, job.a, job.steps, job.n_data, job.bad = core._w, &step.a, steps, n_data, -1
    job.rows = <const void **>malloc(max(step.a.n, 1) * sizeof(void *))
    try:
        if job.rows == NULL:
            raise MemoryError()
        if step.a.total >= _NOGIL_MIN_BYTES or steps * step.a.n > 64:
            rc = _run_gil_free(_extend_steps, &job)
        else:
            rc = _extend_steps(&job)
    finally:
        free(job.rows)
        step.release()
    if rc == FR_OK:
        return job.created
    if job.evaluating:
        sw._raise_evaluate(rc, job.bad)
    core._raise_status(rc)
    return -1


cdef object _condition_values(object v, Py_ssize_t source):
    """A data condition's values over the steps as int64 (int or bool)."""
    arr = np.asarray(v)
    if arr.ndim != 1 or arr.dtype.kind not in "biu":
        raise ValueError(
            f"Data conditions read scalar int or bool values, but flat step "
            f"index {source} holds {arr.dtype} {list(arr.shape[1:])} values.")
    return arr.astype(np.int64, copy=False)


def extend_trajectory(WriterCore core not None, list values) -> None:
    """TrajectoryWriter.extend's core: append whole steps, ``values[c]``
    holding column c's rows with a leading axis of the steps (or None).
    Everything is validated before anything is written."""
    core.lock.acquire()
    try:
        _extend(core, values, None, None)
    finally:
        core.lock.release()


def extend_structured(StructuredCore sw not None, list flat) -> int:
    """StructuredWriter.extend's core: append whole steps given as the flat
    list of all step values (leading axis of the steps; None where absent)
    and create the items of every config after each step.  Returns the
    number of items created."""
    if len(flat) != sw.num_flat:
        raise ValueError(f"Flattened data has an unexpected length, got "
                         f"{len(flat)} but wanted {sw.num_flat}.")
    values = [flat[<Py_ssize_t>i] for i in sw._stored]
    data = [flat[<Py_ssize_t>i] for i in sw._data_sources]
    cdef _WriterLock lock = sw.core.lock
    lock.acquire()
    try:
        return _extend(sw.core, values, sw, data)
    finally:
        lock.release()
