# TableCore: the thread-safe item table of csrc/table.h.  Included by
# _core.pyx (it shares the status translator and timeout helper).
# Needs: _outpool.pxi (_empty_output), _strings.pxi (_column_blobs,
# _decode_text, _gather_text).

from cpython.buffer cimport (
    PyBUF_C_CONTIGUOUS,
    PyBUF_WRITABLE,
    PyBuffer_Release,
    PyObject_GetBuffer,
)

cdef fr_payload_ops _TRAJECTORY_OPS
_TRAJECTORY_OPS.retain = fr_trajectory_payload_retain
_TRAJECTORY_OPS.release = fr_trajectory_payload_release
_TRAJECTORY_OPS.ctx = NULL
_TRAJECTORY_OPS.episodes = fr_trajectory_payload_episodes
_TRAJECTORY_OPS.release_many = fr_trajectory_payload_release_many


cdef object _dtype_of(const fr_spec *spec):
    return np.dtype(f"{chr(spec.dtype)}{spec.itemsize}")


cdef void *_data_of(object arr) except NULL:
    """Address of a C-contiguous writable array's data (which lives as long
    as ``arr``)."""
    cdef Py_buffer view
    PyObject_GetBuffer(arr, &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE)
    cdef void *buf = view.buf
    PyBuffer_Release(&view)
    return buf if buf != NULL else <void *>&_EMPTY


cdef uint64_t _EMPTY = 0

#: The most items one sample call may return (see TableCore._check_num_samples).
DEF _MAX_SAMPLES_PER_CALL = 4194304  # 2**22: ~170 MB of sample info


cdef dict _INTERNED_SPECS = {}  # interned spec address -> (shape, dtype)


cdef tuple _spec_info(const fr_spec *spec):
    """(shape, dtype) of an interned spec (fr_spec_intern), cached: interned
    specs live as long as the process."""
    info = _INTERNED_SPECS.get(<size_t>spec)
    if info is None:
        info = _INTERNED_SPECS[<size_t>spec] = (_shape_of(spec), _dtype_of(spec))
    return info


_ITEMS_DTYPE = np.dtype([("key", np.uint64), ("priority", np.float64),
                         ("times_sampled", np.int64), ("inserted_seq", np.uint64),
                         ("has_data", np.bool_)])


cdef struct _GatherCall:
    fr_gather_job job
    int32_t failed


cdef int _gather_columns(void *arg) noexcept nogil:
    """Copy every fixed-size column of an fr_gather_job (csrc/gather.h: on
    the worker pool when the batch is large enough); the failing column is
    set in ``failed``."""
    cdef _GatherCall *g = <_GatherCall *>arg
    return fr_gather_batch(&g.job, &g.failed)


cdef tuple _gather(fr_trajectory **ts, int64_t n, str table, object out=None,
                   Py_ssize_t offset=0):
    """Stack column c of the n trajectories into one array per column: in
    ``out`` (a writable uint8 array) back to back from ``offset``, each 64-byte
    aligned, while they fit; in new (pooled) arrays otherwise."""
    if n == 0:
        return [], []
    cdef int64_t most = 0
    cdef int32_t c, n_cols, bad = -1
    cdef fr_traj_column *first
    cdef _GatherCall call
    cdef int rc = fr_trajectories_check(ts, n, &most, &bad)
    if rc == FR_EEMPTY:
        raise ValueError(f"Table '{table}' holds items without data "
                         "(inserted by key only); sample() them instead")
    if rc == FR_EINVAL:
        raise ValueError(f"Items sampled from table '{table}' have different "
                         "numbers of columns; use sample() for such items")
    if rc != FR_OK:
        raise ValueError(
            f"Items sampled from table '{table}' differ in column {bad} "
            "(dtype, shape, length or squeeze); use sample() for such items")
    n_cols = ts[0].n_columns
    columns, squeeze = [], []
    cdef void **outs = <void **>malloc(max(n_cols, 1) * sizeof(void *))
    cdef int64_t *strides = <int64_t *>malloc(max(n_cols, 1) * sizeof(int64_t))
    target = out  # a writable uint8 array or None
    cdef Py_ssize_t at = offset, size
    try:
        if not outs or not strides:
            raise MemoryError()
        for c in range(n_cols):  # allocate with the GIL ...
            first = &ts[0].columns[c]
            if fr_spec_is_var(first.spec):  # decoded here, skipped below
                columns.append(_gather_text(ts, n, c))
                squeeze.append(bool(first.squeeze))
                outs[c], strides[c] = NULL, 0
                continue
            shape, dtype = _spec_info(first.spec)
            full = (n,) + (() if first.squeeze else (first.length,)) + shape
            if first.squeeze == FR_ROWS_LAST_AXIS:  # a frame stack
                full = (n,) + shape + (first.length,)
            size = dtype.itemsize * math.prod(full)
            at = (at + 63) // 64 * 64
            if target is not None and 0 <= at and at + size <= target.size:
                column = target[at:at + size].view(dtype).reshape(full)
                at += size
            else:
                column = _empty_output(full, dtype)
            outs[c], strides[c] = _data_of(column), column.nbytes // n
            columns.append(column)
            squeeze.append(bool(first.squeeze))
        call.job.ts, call.job.n, call.job.n_cols = ts, n, n_cols
        call.job.outs, call.job.strides, call.job.most = outs, strides, most
        call.failed = -1
        rc = _run_gil_free(_gather_columns, &call)  # ... and copy without it
        if rc != FR_OK:
            _raise_for_status(rc, f"table '{table}', column {call.failed}")
    finally:
        free(outs); free(strides)
    return columns, squeeze


cdef int32_t _same_structure(fr_trajectory **ts, int64_t n, str table) except -1:
    """The structure id shared by the n sampled trajectories (NULL ones are
    reported by _gather); ValueError naming two different structures."""
    cdef int64_t i, first = -1
    for i in range(n):
        if ts[i] == NULL:
            continue
        if first < 0:
            first = i
        elif ts[i].structure_id != ts[first].structure_id:
            from fastreplay import _structures
            raise ValueError(
                f"Items sampled from table '{table}' have different structures: "
                f"{_structures.describe(ts[first].structure_id)} and "
                f"{_structures.describe(ts[i].structure_id)}; sample_batch stacks "
                "items of one structure (use sample() for such items)")
    return ts[first].structure_id if first >= 0 else 0


cdef class SampledTrajectory:
    """One reference to a sampled item's trajectory (chunk slices per
    column); released when this object is freed."""

    cdef fr_trajectory *_t

    def __cinit__(self):
        self._t = NULL

    def __dealloc__(self):
        if self._t != NULL:
            fr_trajectory_release(self._t)

    @staticmethod
    cdef SampledTrajectory wrap(uint64_t payload):
        cdef SampledTrajectory s = SampledTrajectory.__new__(SampledTrajectory)
        s._t = <fr_trajectory *><size_t>payload
        return s

    @property
    def num_columns(self) -> int:
        return 0 if self._t == NULL else self._t.n_columns

    def squeeze(self) -> list:
        """Per column, whether it is squeezed."""
        if self._t == NULL:
            return []
        return [bool(self._t.columns[c].squeeze) for c in range(self._t.n_columns)]

    def columns(self) -> list:
        """The trajectory's data: one numpy array per column, ``[T, *shape]``
        (``shape`` for squeezed columns), decompressed and concatenated."""
        if self._t == NULL:
            return []
        cdef int64_t scratch_n = fr_trajectory_scratch_bytes(self._t)
        scratch = np.empty(max(scratch_n, 1), dtype=np.uint8)
        cdef unsigned char[::1] sv = scratch
        cdef unsigned char[::1] ov
        cdef fr_traj_column *c
        cdef int rc
        out = []
        for i in range(self._t.n_columns):
            c = &self._t.columns[i]
            if fr_spec_is_var(c.spec):
                blobs = []
                _column_blobs(self._t, i, blobs)
                arr = _decode_text(c.spec, blobs, (c.length,))
                out.append(arr[0, ...] if c.squeeze else arr)
                continue
            shape = _shape_of(c.spec)
            arr = np.empty((c.length,) + shape, dtype=_dtype_of(c.spec))
            if arr.nbytes:
                ov = arr.reshape(-1).view(np.uint8)
                with nogil:
                    rc = fr_trajectory_read_column(self._t, i, &ov[0], &sv[0])
                _raise_for_status(rc, f"column {i}")
            if c.squeeze == FR_ROWS_LAST_AXIS:  # a frame stack
                out.append(np.ascontiguousarray(np.moveaxis(arr, 0, -1)))
                continue
            out.append(arr[0, ...] if c.squeeze else arr)
        return out


cdef class TableCore:
    """TableCore(name, sampler_kind, sampler_exponent, remover_kind, remover_exponent, max_size, max_times_sampled, samples_per_insert, min_size_to_sample, min_diff, max_diff, seed)

    Compiled table: items keyed by uint64 with priority, times_sampled and an
    opaque uint64 payload.  ``fastreplay.Table`` validates arguments and owns
    one of these; every method here is safe to call from many threads.
    """

    cdef fr_table *_t
    cdef readonly str name

    def __cinit__(self, *args, **kwargs):
        self._t = NULL

    def __init__(self, str name, int sampler_kind, double sampler_exponent,
                 int remover_kind, double remover_exponent, int64_t max_size,
                 int64_t max_times_sampled, double samples_per_insert,
                 int64_t min_size_to_sample, double min_diff, double max_diff,
                 uint64_t seed) -> None:
        cdef fr_rate_limiter rl
        rl.samples_per_insert = samples_per_insert
        rl.min_size_to_sample = min_size_to_sample
        rl.min_diff = min_diff
        rl.max_diff = max_diff
        rl.inserts = rl.samples = rl.deletes = 0
        if max_size < 1:
            raise ValueError(f"max_size ({max_size}) must be a positive integer "
                             f"(table '{name}')")
        if not (0 < samples_per_insert < float("inf")):
            raise ValueError(f"samples_per_insert ({samples_per_insert}) must be "
                             f"finite and > 0 (table '{name}')")
        if min_size_to_sample < 0:
            raise ValueError(f"min_size_to_sample ({min_size_to_sample}) must be "
                             f">= 0 (table '{name}')")
        if not min_diff <= max_diff:  # also refuses NaN
            raise ValueError(f"min_diff ({min_diff}) must be <= max_diff "
                             f"({max_diff}) and neither NaN (table '{name}')")
        if sampler_kind not in SELECTOR_KINDS.values() or \
                remover_kind not in SELECTOR_KINDS.values():
            raise ValueError(f"unknown selector kind {sampler_kind} or "
                             f"{remover_kind} (table '{name}')")
        self.name = name
        cdef int rc = fr_table_create(sampler_kind, sampler_exponent, remover_kind,
                                      remover_exponent, max_size, max_times_sampled,
                                      rl, seed, _TRAJECTORY_OPS, &self._t)
        _raise_for_status(rc, f"could not create table '{name}'")

    def __dealloc__(self):
        if self._t != NULL:
            fr_table_free(self._t)
            self._t = NULL

    cdef int _check_num_samples(self, Py_ssize_t n) except -1:
        """Refuse n < 1 and batches beyond _MAX_SAMPLES_PER_CALL (sampling is
        with replacement, so n may exceed the table's size, but a typo such
        as sample(2**31) must not allocate tens of gigabytes)."""
        if n < 1:
            raise ValueError(f"num_samples ({n}) must be a positive integer "
                             f"({self._ctx()})")
        if n > _MAX_SAMPLES_PER_CALL:
            raise ValueError(
                f"num_samples ({n}) exceeds the {_MAX_SAMPLES_PER_CALL} items one "
                f"call may sample ({self._ctx()}); sample in several calls")
        return 0

    cdef str _ctx(self, object key=None, object priority=None):
        s = f"table '{self.name}'"
        if key is not None:
            s += f", key {key}"
        if priority is not None:
            s += f", priority {priority!r}"
        return s

    def insert(self, uint64_t key, double priority, timeout=None) -> None:
        """Insert or assign one item without data (key and priority only),
        waiting for the rate limiter.  Items with data come from compiled
        code only (writers, insert_rows, restore_item): no data pointer
        crosses into Python."""
        cdef int64_t tns = _timeout_ns(timeout)
        cdef int rc
        with nogil:
            rc = fr_table_insert(self._t, key, priority, 0, tns)
        if rc != FR_OK:
            _raise_for_status(rc, self._ctx(key, priority))

    def insert_many(self, keys, priorities, timeout=None) -> int:
        """Insert n items without data in order; returns how many were
        inserted.

        Every priority is validated before anything is inserted.  When the
        rate limiter times out part-way, the inserted prefix stays and
        DeadlineExceededError reports how many were inserted.
        """
        cdef const uint64_t[::1] kv = np.ascontiguousarray(keys, dtype=np.uint64)
        cdef const double[::1] pv = np.ascontiguousarray(priorities,
                                                         dtype=np.float64)
        cdef Py_ssize_t n = kv.shape[0]
        if pv.shape[0] != n:
            raise ValueError(
                f"keys and priorities differ in length ({n} != {pv.shape[0]})")
        if n == 0:
            return 0
        cdef const uint64_t[::1] yv = np.zeros(n, dtype=np.uint64)
        cdef int64_t tns = _timeout_ns(timeout)
        cdef int64_t done = 0, bad = -1
        cdef int rc
        with nogil:
            rc = fr_table_insert_many(self._t, n, &kv[0], &pv[0], &yv[0], tns,
                                      &done, &bad)
        if rc != FR_OK:
            if bad >= 0:
                _raise_for_status(rc, self._ctx(kv[bad], pv[bad]))
            _raise_for_status(rc, self._ctx() + f", {done} of {n} inserted")
        return done

    def sample(self, Py_ssize_t n, timeout=None, bint with_data=False):
        """Sample up to n items under one lock acquisition.

        Returns ``(keys, probabilities, priorities, times_sampled,
        table_sizes, trajectories)``: numpy arrays and, with ``with_data``, a
        list of SampledTrajectory (else None).  A timeout after at least one
        sample returns the partial batch; with none it raises
        DeadlineExceededError.
        """
        self._check_num_samples(n)
        cdef int64_t tns = _timeout_ns(timeout)
        keys = np.empty(n, dtype=np.uint64)
        probs = np.empty(n, dtype=np.float64)
        prios = np.empty(n, dtype=np.float64)
        times = np.empty(n, dtype=np.int64)
        sizes = np.empty(n, dtype=np.int64)
        pays = np.zeros(n if with_data else 1, dtype=np.uint64)
        cdef uint64_t[::1] kv = keys
        cdef double[::1] bv = probs
        cdef double[::1] qv = prios
        cdef int64_t[::1] tv = times
        cdef int64_t[::1] sv = sizes
        cdef uint64_t[::1] yv = pays
        cdef int64_t done = 0
        cdef int rc
        cdef uint64_t *payloads = &yv[0] if with_data else NULL
        with nogil:  # may wait for the rate limiter: not a hand-off section
            rc = fr_table_sample(self._t, n, tns, &kv[0], &bv[0], &qv[0],
                                 &tv[0], &sv[0], payloads, &done)
        if rc != FR_OK:
            if payloads != NULL:  # FR_EINTR after `done` samples
                for i in range(done):
                    fr_trajectory_payload_release(NULL, yv[i])
            _raise_for_status(rc, self._ctx())
        data = None
        if with_data:
            data = [SampledTrajectory.wrap(yv[i]) for i in range(done)]
        if done < n:
            return (keys[:done], probs[:done], prios[:done], times[:done],
                    sizes[:done], data)
        return keys, probs, prios, times, sizes, data

    def sample_batch(self, Py_ssize_t n, timeout=None, out=None, Py_ssize_t offset=0):
        """Sample up to n items and gather their data into stacked arrays.

        Returns ``(keys, probabilities, priorities, times_sampled,
        table_sizes, columns, squeeze, structure_id)``: ``columns[c]`` is
        ``[B, T, *shape]`` (``[B, *shape]`` when squeezed); structure_id is
        the items' nest in fastreplay._structures.  Every sampled item must
        have the same structure, columns, dtypes and lengths.  Selection and gathering (with
        decompression) run without the GIL.  With ``out`` (a writable
        buffer), the columns that fit are gathered straight into it, from
        ``offset`` on, each 64-byte aligned (a batch for another process).
        """
        self._check_num_samples(n)
        cdef int64_t tns = _timeout_ns(timeout)
        target = None
        if out is not None:  # checked before anything is sampled
            target = np.frombuffer(out, np.uint8)
            if not target.flags.writeable:
                raise ValueError("sample_batch: out must be a writable buffer")
        keys = np.empty(n, dtype=np.uint64)
        probs = np.empty(n, dtype=np.float64)
        prios = np.empty(n, dtype=np.float64)
        times = np.empty(n, dtype=np.int64)
        sizes = np.empty(n, dtype=np.int64)
        cdef uint64_t *kv = <uint64_t *>_data_of(keys)
        cdef double *bv = <double *>_data_of(probs)
        cdef double *qv = <double *>_data_of(prios)
        cdef int64_t *tv = <int64_t *>_data_of(times)
        cdef int64_t *sv = <int64_t *>_data_of(sizes)
        cdef uint64_t *yv = <uint64_t *>calloc(n, sizeof(uint64_t))
        cdef int64_t done = 0, i
        cdef int rc
        if yv == NULL:
            raise MemoryError()
        try:
            with nogil:  # may wait for the rate limiter: not a hand-off section
                rc = fr_table_sample(self._t, n, tns, kv, bv, qv, tv, sv, yv, &done)
            if rc != FR_OK:
                _raise_for_status(rc, self._ctx())
            sid = _same_structure(<fr_trajectory **>yv, done, self.name)
            columns, squeeze = _gather(<fr_trajectory **>yv, done, self.name, target,
                                       offset)
        finally:
            for i in range(done):
                fr_trajectory_payload_release(NULL, yv[i])
            free(yv)
        if done < n:
            keys, probs, prios = keys[:done], probs[:done], prios[:done]
            times, sizes = times[:done], sizes[:done]
        return keys, probs, prios, times, sizes, columns, squeeze, sid

    def mutate(self, update_keys, update_priorities, delete_keys) -> None:
        """Delete ``delete_keys``, then set priorities (unknown keys ignored).

        Every update priority is validated first; an invalid one raises
        InvalidPriorityError and nothing changes.
        """
        cdef const uint64_t[::1] uk = np.ascontiguousarray(update_keys,
                                                           dtype=np.uint64)
        cdef const double[::1] up = np.ascontiguousarray(update_priorities,
                                                         dtype=np.float64)
        cdef const uint64_t[::1] dk = np.ascontiguousarray(delete_keys,
                                                           dtype=np.uint64)
        if uk.shape[0] != up.shape[0]:
            raise ValueError(f"update keys and priorities differ in length "
                             f"({uk.shape[0]} != {up.shape[0]}) ({self._ctx()}): "
                             "pass one priority per key")
        cdef uint64_t zero_key = 0
        cdef double zero_prio = 0.0
        cdef const uint64_t *ukp = &uk[0] if uk.shape[0] else &zero_key
        cdef const double *upp = &up[0] if up.shape[0] else &zero_prio
        cdef const uint64_t *dkp = &dk[0] if dk.shape[0] else &zero_key
        cdef int64_t bad = -1
        cdef int rc
        with nogil:
            rc = fr_table_mutate(self._t, uk.shape[0], ukp, upp, dk.shape[0],
                                 dkp, &bad)
        if rc != FR_OK:
            _raise_for_status(rc, self._ctx(uk[bad], up[bad]) if bad >= 0
                              else self._ctx())

    def reset(self) -> None:
        """Remove every item and zero the rate-limiter counters."""
        with nogil:
            fr_table_reset(self._t)

    def close(self) -> None:
        """Wake every waiting call with TableClosedError; later waits fail."""
        with nogil:
            fr_table_close(self._t)

    def can_sample(self, int64_t n) -> bool:
        return bool(fr_table_can_sample(self._t, n))

    def can_insert(self, int64_t n) -> bool:
        return bool(fr_table_can_insert(self._t, n))

    def check_priority(self, double priority) -> None:
        """Raise InvalidPriorityError if the selectors would refuse
        ``priority`` (what an insert would raise); changes nothing."""
        _raise_for_status(fr_table_check_priority(self._t, priority),
                          self._ctx(None, priority))

    def size(self) -> int:
        return fr_table_size(self._t)

    def priority_mass(self) -> tuple:
        """``(mass, size)`` read together under the table lock: the
        sampler's total mass (the sum of priority**exponent over items, the
        sum-tree root, for Prioritized; the item count for the other
        samplers) and the item count.  O(1)."""
        cdef int64_t size = 0
        cdef double mass = fr_table_priority_mass(self._t, &size)
        return mass, size

    @property
    def key_prefix(self):
        """The top 8 bits of the item keys writers draw for this table, or
        None (all 64 bits random)."""
        cdef int32_t p = fr_table_key_prefix(self._t)
        return None if p < 0 else p

    def skip_episodes(self) -> None:
        """Stop counting episodes (an empty table only)."""
        _raise_for_status(fr_table_skip_episodes(self._t),
                          f"table '{self.name}' holds items: episodes are counted")

    def set_key_prefix(self, prefix) -> None:
        """Make writers draw this table's item keys with ``prefix`` (an int
        in [0, 255]) in their top 8 bits; None: all 64 bits random.  Items
        already stored keep their keys."""
        if prefix is None:
            fr_table_set_key_prefix(self._t, -1)
            return
        if type(prefix) is bool or not isinstance(prefix, int) or \
                not 0 <= prefix <= 255:
            raise ValueError(f"key_prefix must be None or an int in [0, 255], "
                             f"got {prefix!r} ({self._ctx()})")
        fr_table_set_key_prefix(self._t, prefix)

    def stats(self) -> dict:
        """Counters of csrc/table.h ``fr_table_stats`` as a dict."""
        cdef fr_table_stats s
        fr_table_stats_get(self._t, &s)
        return s

    def get(self, uint64_t key):
        """``(key, priority, times_sampled, inserted_seq, has_data)`` or None."""
        cdef fr_item it
        if not fr_table_get(self._t, key, &it):
            return None
        has_data = it.payload != 0  # (not retained: compared only)
        return it.key, it.priority, it.times_sampled, it.inserted_seq, has_data

    def items(self):
        """All items in insertion order as a numpy structured array (key,
        priority, times_sampled, inserted_seq, has_data)."""
        dtype = np.dtype([("key", np.uint64), ("priority", np.float64),
                          ("times_sampled", np.int64),
                          ("inserted_seq", np.uint64), ("payload", np.uint64)])
        cdef int64_t cap = fr_table_size(self._t) + 16
        cdef fr_item *buf
        cdef int64_t n
        while True:
            buf = <fr_item *>malloc(cap * sizeof(fr_item))
            if buf == NULL:
                raise MemoryError()
            n = fr_table_items(self._t, buf, cap)
            if n <= cap:
                break
            free(buf)
            cap = n + 16
        try:
            out = np.empty(n, dtype=dtype)
            if n:
                memcpy(<void *><size_t>out.ctypes.data,
                       buf, n * sizeof(fr_item))
        finally:
            for i in range(n):
                fr_trajectory_payload_release(NULL, buf[i].payload)
            free(buf)
        items = np.empty(n, dtype=_ITEMS_DTYPE)
        for name in ("key", "priority", "times_sampled", "inserted_seq"):
            items[name] = out[name]
        items["has_data"] = out["payload"] != 0
        return items
