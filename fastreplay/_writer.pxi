# ChunkStore and WriterCore: the compiled side of TrajectoryWriter
# (csrc/chunk.h, column.h, writer.h).  Included by _core.pyx.

from cpython.buffer cimport (
    PyBUF_C_CONTIGUOUS,
    PyBUF_FORMAT,
    PyBUF_SIMPLE,
    PyBuffer_Release,
    PyObject_GetBuffer,
)

from cpython.exc cimport PyErr_CheckSignals
from cpython.pythread cimport (
    NOWAIT_LOCK,
    PyThread_acquire_lock,
    PyThread_allocate_lock,
    PyThread_free_lock,
    PyThread_release_lock,
    PyThread_type_lock,
)


cdef extern from "pythread.h":
    int PyThread_acquire_lock_timed(PyThread_type_lock lock, long long microseconds,
                                    int intr_flag) nogil


cdef class _WriterLock:
    """The lock of one writer (Reverb's writer mutex): every call that reads
    or changes a writer's columns, cells or queue holds it, so a writer used
    from several threads is serialized instead of corrupting its C state.
    Reentrant for its owner thread (append may add columns).

    The uncontended path is a try-lock with the GIL held (tens of ns).  A
    thread that finds it taken waits with the GIL released (the holder may
    need the GIL to finish), waking every 50 ms to run signal handlers, so
    Ctrl-C interrupts the wait.  ``close`` never takes it: it must wake a
    flush that holds it.
    """

    cdef PyThread_type_lock _lock
    cdef unsigned long _owner
    cdef Py_ssize_t _depth

    def __cinit__(self):
        self._lock = PyThread_allocate_lock()
        if self._lock == NULL:
            raise MemoryError()
        self._owner = 0
        self._depth = 0

    def __dealloc__(self):
        if self._lock != NULL:
            PyThread_free_lock(self._lock)

    cdef inline int acquire(self) except -1:
        cdef unsigned long me = PyThread_get_thread_ident()
        cdef int got = 0
        if self._depth and self._owner == me:
            self._depth += 1
            return 0
        if not PyThread_acquire_lock(self._lock, NOWAIT_LOCK):
            while not got:
                with nogil:
                    got = PyThread_acquire_lock_timed(self._lock, 50000, 0) == 1
                if not got:
                    PyErr_CheckSignals()
        self._owner = me
        self._depth = 1
        return 0

    cdef inline void release(self) noexcept:
        self._depth -= 1
        if self._depth == 0:
            self._owner = 0
            PyThread_release_lock(self._lock)

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        if not self._depth or self._owner != PyThread_get_thread_ident():
            raise RuntimeError("writer lock released by a thread not holding it")
        self.release()


# numpy kind+itemsize -> Reverb's (TensorFlow's) dtype names, for messages.
_TF_NAMES = {"f8": "double", "f4": "float", "f2": "half", "b1": "bool",
             "c8": "complex64", "c16": "complex128"}
_SUPPORTED_KINDS = "biufc"
# An append releases the GIL only when it copies at least this many bytes
# (its copy and any chunk compression then run in parallel with other
# threads' Python); shorter appends keep it, since a release costs more than
# they take.  Measured on 2 cores with Atari steps (28 KiB) once the per-step
# Python was ~2 us (fastreplay bench --only threads, writers + 1 sampler):
# 16 KiB gave 106-116k/99-109k/91-95k steps/s with 1/2/4 writers and
# 41k/23-27k/23-27k sampled items/s, keeping the GIL 91-105k/91-95k/103-111k
# steps/s and 21-26k/17-18k/16k items/s; single-writer speed is unchanged.
# (With ~6 us of Python per step, releasing was slower: 65k/51k/37k steps/s
# against 65k/60k/59k.)  Every such release goes through csrc/handoff.h, so
# a writer taking the GIL back spins behind another writer's Python instead
# of sleeping: 1/2/4 writers, no sampler, 117/199/185k steps/s against
# 119/142/108k (benchmarks/threads_ab.py).
DEF _NOGIL_MIN_BYTES = 16384


def _install_lz4() -> bool:
    """Point the core at the LZ4 block functions of the ``lz4`` package's
    extension (its exported C symbols), so chunks are (de)compressed in C
    without the GIL.  Returns False (chunks stay raw) where they are not
    exported."""
    import ctypes

    try:
        import lz4.block._block as block

        lib = ctypes.CDLL(block.__file__)
        fns = [ctypes.cast(getattr(lib, name), ctypes.c_void_p).value for name in
               ("LZ4_compress_default", "LZ4_decompress_safe", "LZ4_compressBound")]
    except (ImportError, OSError, AttributeError):
        return False
    cdef size_t c = fns[0], d = fns[1], b = fns[2], p = 0
    fr_codec_install(<fr_lz4_compress_fn>c, <fr_lz4_decompress_fn>d,
                     <fr_lz4_bound_fn>b)
    try:  # optional: lets reads decode a chunk only as far as they need
        p = ctypes.cast(lib.LZ4_decompress_safe_partial, ctypes.c_void_p).value or 0
    except AttributeError:
        pass
    fr_codec_install_partial(<fr_lz4_partial_fn>p)
    return bool(fr_codec_available())


LZ4_AVAILABLE = _install_lz4()


def _handoff_cores() -> int:
    """Cores the GIL hand-off counts (csrc/handoff.h), for tests."""
    return fr_handoff_cores()


def dtype_name(dtype) -> str:
    """Reverb's name for a numpy dtype ('double', 'int64', ...)."""
    dt = np.dtype(dtype)
    if dt.kind in _TEXT_KINDS:  # TensorFlow's one string type
        return "string"
    return _TF_NAMES.get(f"{dt.kind}{dt.itemsize}", dt.name)


cdef class ChunkStore:
    """Accounting shared by the chunks of the writers that use it: live
    chunks, bytes stored (compressed or raw) and the bytes they hold raw."""

    cdef fr_store *_s

    def __cinit__(self):
        self._s = fr_store_new()
        if self._s == NULL:
            raise MemoryError()

    def __init__(self) -> None:
        pass

    def __dealloc__(self):
        if self._s != NULL:
            fr_store_release(self._s)

    def stats(self) -> dict:
        cdef int64_t out[3]
        fr_store_stats(self._s, out)
        return {"live_chunks": out[0], "stored_bytes": out[1], "raw_bytes": out[2]}


cdef int _options(fr_chunker_options *o, int32_t keep_alive, object max_len,
                  double throughput_weight) except -1:
    o.num_keep_alive_refs = keep_alive
    o.autotune = max_len is None
    o.max_chunk_length = 0 if max_len is None else max_len
    o.throughput_weight = throughput_weight
    if fr_chunker_options_validate(o) != FR_OK:
        raise ValueError(
            f"invalid chunker options: num_keep_alive_refs={keep_alive}, "
            f"max_chunk_length={max_len}")
    return 0


cdef inline str _shape_str(shape):
    return "[" + ",".join(str(d) for d in shape) + "]"


cdef char _format_kind(const char *fmt) noexcept:
    """numpy kind ('f', 'i', 'u', 'b', 'c') of a native buffer format, or 0
    (unsupported or non-native byte order: the caller converts with numpy)."""
    if fmt == NULL:
        return 0
    if fmt[0] == b'=' or fmt[0] == b'@' or fmt[0] == b'<':
        fmt += 1
    if fmt[0] == 0 or fmt[1] != 0 and fmt[0] != b'Z':
        return 0
    if fmt[0] in b'efd':
        return b'f'
    if fmt[0] in b'bhilq':
        return b'i'
    if fmt[0] in b'BHILQ':
        return b'u'
    if fmt[0] == b'?':
        return b'b'
    if fmt[0] == b'Z' and fmt[1] in b'fd' and fmt[2] == 0:
        return b'c'
    return 0


DEF _STEP_INLINE = 16
_ndarray = np.ndarray
_generic = np.generic  # numpy scalars export typed buffers too


cdef struct _StepArrays:
    # One append's values as C rows (see _step_put); the arrays have room
    # for every value, views[0..n_views) are held buffers.
    Py_ssize_t n, n_views
    int64_t total          # bytes referenced
    int32_t *cols
    const void **rows
    fr_spec *specs
    Py_buffer *views
    int64_t *strides       # bytes between environments (batched)
    int64_t *scalars       # storage of Python scalars (8 bytes each)
    int64_t **env_offs     # batched string values: per value NULL or the
                           # n_envs + 1 offsets of each environment's blob


cdef struct _StepInline:
    # Stack storage of a step of at most _STEP_INLINE values.
    _StepArrays a
    int32_t cols[_STEP_INLINE]
    const void *rows[_STEP_INLINE]
    fr_spec specs[_STEP_INLINE]
    Py_buffer views[_STEP_INLINE]
    int64_t strides[_STEP_INLINE]
    int64_t scalars[_STEP_INLINE]


cdef inline void _step_inline_init(_StepInline *s) noexcept:
    s.a.n = s.a.n_views = s.a.total = 0
    s.a.cols, s.a.rows, s.a.specs = s.cols, s.rows, s.specs
    s.a.views, s.a.strides, s.a.scalars = s.views, s.strides, s.scalars
    s.a.env_offs = NULL  # never batched


cdef dict _SCALAR_TYPES = {}  # type -> numpy scalar of a supported kind?


cdef inline bint _numeric_scalar_type(object t):
    """Whether values of type t are numpy scalars of a supported dtype (they
    export typed buffers); cached per type."""
    ok = _SCALAR_TYPES.get(t)
    if ok is None:
        ok = _SCALAR_TYPES[t] = (issubclass(t, _generic) and
                                 np.dtype(t).kind in _SUPPORTED_KINDS)
    return ok


cdef int _step_put(_StepArrays *s, int32_t col, object v, object path,
                   Py_ssize_t batched) except -1:
    """Add value ``v`` for column ``col`` as entry s.n: Python floats, ints
    and bools are stored inline, numpy arrays and scalars are pinned through
    the buffer protocol (not copied), anything else is converted by numpy.
    With ``batched`` the value has a leading environment axis of that length
    which is not part of the spec."""
    cdef Py_ssize_t i = s.n, d, lead = 1 if batched else 0
    cdef fr_spec *spec = &s.specs[i]
    cdef Py_buffer *view
    cdef char kind = 0
    s.cols[i] = col
    if not batched and (type(v) is float or type(v) is int or type(v) is bool):
        _scalar_spec(v, spec, &s.scalars[i])
        s.rows[i] = &s.scalars[i]
        s.strides[i] = spec.row_bytes
        s.n += 1
        return 0
    view = &s.views[s.n_views]
    if type(v) is _ndarray or _numeric_scalar_type(type(v)):
        try:
            PyObject_GetBuffer(v, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
            kind = _format_kind(view.format)
            if kind == 0:
                PyBuffer_Release(view)
        except (BufferError, ValueError):  # not C-contiguous: copy below
            kind = 0
    if kind == 0:
        if not isinstance(v, (str, bytes)):
            v = np.asarray(v)
        if isinstance(v, (str, bytes)) or v.dtype.kind in _TEXT_KINDS:
            return _step_put_text(s, v, path, batched)
        v = _as_native_array(v, path)
        PyObject_GetBuffer(v, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
        kind = _format_kind(view.format)
    s.n_views += 1
    if view.ndim - lead > FR_MAX_NDIM or view.ndim < lead:
        raise ValueError(
            f"column {path}: expected between {lead} and "
            f"{FR_MAX_NDIM + lead} dimensions, got {view.ndim}")
    if batched and view.shape[0] != batched:
        raise ValueError(
            f"column {path}: leading axis {view.shape[0]} "
            f"!= number of environments {batched}")
    spec.dtype = ord(kind)
    spec.itemsize = view.itemsize
    spec.ndim = view.ndim - lead
    spec.row_bytes = view.itemsize
    for d in range(lead, view.ndim):
        spec.shape[d - lead] = view.shape[d]
        spec.row_bytes *= view.shape[d]
    s.strides[i] = spec.row_bytes
    s.rows[i] = view.buf
    s.total += view.len
    s.n += 1
    return 0


cdef int _step_put_text(_StepArrays *s, object v, object path,
                        Py_ssize_t batched) except -1:
    """_step_put for a string or bytes value (see _strings.pxi): the value
    is encoded into one blob, which the step holds as a buffer.  Batched,
    each environment's row is encoded and the blobs are concatenated, with
    their offsets in s.env_offs[i]."""
    cdef Py_ssize_t i = s.n, d, e
    cdef fr_spec *spec = &s.specs[i]
    cdef Py_buffer *view = &s.views[s.n_views]
    cdef int64_t *offs
    if not batched:
        shape, blob = _encode_text(v, path)
    else:
        if not isinstance(v, _ndarray) or v.ndim < 1:
            raise ValueError(f"column {path}: expected a leading axis of "
                             f"{batched} environments, got a scalar")
        if v.shape[0] != batched:
            raise ValueError(f"column {path}: leading axis {v.shape[0]} "
                             f"!= number of environments {batched}")
        rows = [_encode_text(v[e], path) for e in range(batched)]
        shape = rows[0][0]
        offs = s.env_offs[i] = <int64_t *>malloc((batched + 1) * sizeof(int64_t))
        if offs == NULL:
            raise MemoryError()
        offs[0] = 0
        for e in range(batched):
            offs[e + 1] = offs[e] + len(rows[e][1])
        blob = b"".join([r[1] for r in rows])
    PyObject_GetBuffer(blob, view, PyBUF_SIMPLE)
    s.n_views += 1
    spec.dtype = b'S'
    spec.itemsize = 0
    spec.ndim = len(shape)
    for d in range(spec.ndim):
        spec.shape[d] = shape[d]
    # The row's length (per environment: _append_envs); the column's spec
    # keeps 0.
    spec.row_bytes = view.len if not batched else s.env_offs[i][1]
    s.strides[i] = spec.row_bytes
    s.rows[i] = view.buf
    s.total += view.len
    s.n += 1
    return 0


cdef void _step_release(_StepArrays *s) noexcept:
    cdef Py_ssize_t i
    for i in range(s.n_views):
        PyBuffer_Release(&s.views[i])
    s.n_views = 0


cdef class _Step:
    """A step of any number of values on the heap (_StepArrays), for batched
    appends and row inserts: values[i] goes to column cols[i]."""

    cdef _StepArrays a

    def __cinit__(self, list paths, list cols, list values, Py_ssize_t batched):
        cdef Py_ssize_t n = len(cols), i
        cdef size_t m = max(n, 1)
        self.a.cols = <int32_t *>malloc(m * sizeof(int32_t))
        self.a.rows = <const void **>malloc(m * sizeof(void *))
        self.a.specs = <fr_spec *>malloc(m * sizeof(fr_spec))
        self.a.views = <Py_buffer *>malloc(m * sizeof(Py_buffer))
        self.a.strides = <int64_t *>malloc(m * sizeof(int64_t))
        self.a.scalars = <int64_t *>malloc(m * sizeof(int64_t))
        self.a.env_offs = <int64_t **>calloc(m, sizeof(int64_t *))
        if not (self.a.cols and self.a.rows and self.a.specs and self.a.views and
                self.a.strides and self.a.scalars and self.a.env_offs):
            raise MemoryError()
        for i in range(n):
            _step_put(&self.a, cols[i], values[i], paths[cols[i]], batched)

    cdef void release(self):
        _step_release(&self.a)

    def __dealloc__(self):
        _step_release(&self.a)
        free(self.a.cols); free(self.a.rows); free(self.a.specs)
        free(self.a.views); free(self.a.strides); free(self.a.scalars)
        cdef Py_ssize_t i
        if self.a.env_offs != NULL:
            for i in range(self.a.n):
                free(self.a.env_offs[i])
            free(self.a.env_offs)

    cdef str text_path(self, list paths):
        """Path of the first string/bytes value, or None."""
        cdef Py_ssize_t i
        for i in range(self.a.n):
            if self.a.env_offs[i] != NULL:
                return paths[i]
        return None


cdef int _scalar_spec(object v, fr_spec *spec, int64_t *slot) except -1:
    """Python bool, int and float as numpy would store them (bool, int64,
    float64), written into ``slot``."""
    spec.ndim = 0
    spec.itemsize = spec.row_bytes = 8
    if type(v) is float:
        spec.dtype = b'f'
        (<double *>slot)[0] = v
    elif type(v) is bool:
        spec.dtype = b'b'
        spec.itemsize = spec.row_bytes = 1
        (<uint8_t *>slot)[0] = v
    else:
        spec.dtype = b'i'
        slot[0] = v  # OverflowError beyond int64, as numpy
    return 0


cdef object _as_native_array(object v, object path):
    """A C-contiguous, native-order numpy array of a supported dtype."""
    arr = np.asarray(v)
    if arr.dtype.kind not in _SUPPORTED_KINDS:
        raise TypeError(
            f"Unsupported dtype {arr.dtype} for column {path}: fastreplay stores "
            "numeric and bool arrays only")
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    # (np.ascontiguousarray would turn a 0-d array into shape (1,).)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


cdef struct _AppendJob:
    fr_writer **ws       # one writer per environment (1 for a plain append)
    Py_ssize_t n_envs
    _StepArrays *a
    const void **rows    # per-environment row pointers (scratch, n_envs > 1)
    bint partial
    int32_t bad          # out: the column fr_writer_append rejected


cdef int _append_envs(void *arg) noexcept nogil:
    """Append environment e's row of every column of the job's step to
    writer e (rows of environment e sit at e * stride, or at the string
    offsets of the env)."""
    cdef _AppendJob *j = <_AppendJob *>arg
    cdef _StepArrays *a = j.a
    cdef Py_ssize_t e, i
    cdef int rc = FR_OK
    if j.n_envs == 1 and j.rows == NULL:
        return fr_writer_append(j.ws[0], a.n, a.cols, a.rows, a.specs, j.partial,
                                &j.bad)
    for e in range(j.n_envs):
        for i in range(a.n):
            if a.env_offs[i] != NULL:  # string rows of varying length
                j.rows[i] = <const char *>a.rows[i] + a.env_offs[i][e]
                a.specs[i].row_bytes = a.env_offs[i][e + 1] - a.env_offs[i][e]
                continue
            j.rows[i] = <const char *>a.rows[i] + e * a.strides[i]
        rc = fr_writer_append(j.ws[e], a.n, a.cols, j.rows, a.specs, j.partial,
                              &j.bad)
        if rc != FR_OK:
            break
    return rc


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


cdef int _raise_writer_status(int rc) except -1:
    if rc == FR_ECLOSED:
        _raise_for_status(rc, "", "The writer was closed.")
    return _raise_for_status(rc, "writer")


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
            "num_keep_alive_refs": c.opt.num_keep_alive_refs,
            "autotune": bool(c.opt.autotune),
            "max_chunk_length": c.max_len,
            "buffered": c.buf_rows,
        }

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
        cdef Py_ssize_t c, n = len(flat), m = 0
        cdef _StepInline inline
        cdef _StepArrays *a = &inline.a
        cdef _Step heap = None
        cdef _AppendJob job
        cdef int32_t bad = -1
        cdef int rc
        if n > fr_writer_num_columns(self._w):
            raise ValueError(f"{n} values for {fr_writer_num_columns(self._w)} columns")
        for c in range(n):
            if flat[c] is not None:
                m += 1
        if m > _STEP_INLINE:
            heap = _Step(self._paths, [c for c in range(n) if flat[c] is not None],
                         [v for v in flat if v is not None], 0)
            a = &heap.a
        else:
            _step_inline_init(&inline)
        try:
            if heap is None:
                for c in range(n):
                    if flat[c] is not None:
                        _step_put(a, c, flat[c], self._paths[c], 0)
            job = _AppendJob(&self._w, 1, a, NULL, partial, -1)
            if a.total >= _NOGIL_MIN_BYTES:
                rc = _run_gil_free(_append_envs, &job)
            else:
                rc = _append_envs(&job)
            bad = job.bad
        finally:
            _step_release(a)
        if rc != FR_OK:
            cols = [c for c in range(n) if flat[c] is not None]
            self._raise_append(rc, cols, [flat[c] for c in cols], bad, 0)
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
            raise RuntimeError("Cannot access data from expired WeakCellRef")
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
        cdef Py_ssize_t n = len(columns), total = 0, i, k, at = 0
        cdef TrajectoryColumn tc
        for c in columns:
            if type(c) is not TrajectoryColumn and not isinstance(c, TrajectoryColumn):
                raise TypeError("All leaves of the trajectory must be "
                                f"TrajectoryColumn, got {type(c).__name__}")
            tc = c
            if tc.n and tc._core is not self:
                raise ValueError("TrajectoryColumn refers to another writer's cells")
            total += tc.n
        # Stack arrays for the usual few short columns, else the heap.
        cdef int32_t lens_s[16]
        cdef uint8_t sq_s[16]
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
                tc = columns[i]
                lens[i] = <int32_t>tc.n
                sq[i] = tc._squeeze
                for k in range(tc.n):
                    cv[at + k] = tc.col_at(k)
                    iv[at + k] = tc.ids[k]
                at += tc.n
            if table._t != self._last_table:  # for failure reports
                self._table_names[<size_t>table._t] = table.name
                self._last_table = table._t
            # Short and non-blocking: keeping the GIL is cheaper than handing
            # it over twice.
            rc = fr_writer_create_item(self._w, table._t, priority, structure_id,
                                       n, lens, sq,
                                       cv, iv, &key, &bad_column, &bad_ref)
            if rc != FR_OK:
                self._raise_create(rc, table, priority, columns, bad_column, bad_ref)
        finally:
            if lens != lens_s:
                free(lens); free(sq)
            if cv != cv_s:
                free(cv); free(iv)
        return key

    cdef _raise_create(self, int rc, TableCore table, double priority, list columns,
                       int32_t bad_column, int32_t bad_ref):
        if rc == FR_EASYNC:
            self._raise_status(rc)
        if rc == FR_EPRIORITY_NAN and bad_column < 0:
            _raise_for_status(rc, "", "`priority` must not be nan.")
        if bad_column < 0:
            _raise_for_status(rc, f"table '{table.name}', priority {priority!r}")
        cols = [c for c, _ in (<TrajectoryColumn>columns[bad_column])._pairs()]
        prefix = f"Error in column {bad_column}: "
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
        elif rc == FR_EEMPTY:
            message = "TrajectoryColumn must not be empty."
        else:
            message = _DEFAULT_MESSAGES.get(rc, f"fastreplay core error {rc}.")
        _raise_for_status(rc, "", prefix + message)

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


def insert_rows(TableCore table not None, ChunkStore store not None, list names,
                list values, keys,
                priorities, uint64_t chunk_key, timeout=None,
                int32_t num_keep_alive_refs=1, max_chunk_length=None) -> int:
    """Insert len(keys) one-step items: row r of every value (leading axis
    = rows) becomes item keys[r], its columns squeezed, in the order of
    ``values``.  Compressed columns are cut into chunks by the writer's
    chunker rule for these options (csrc/rows.h), chunk keys counting up
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
                                &kv[0], &pv[0], &o, chunk_key, tns, &done, &bad)
    finally:
        step.release()
    if rc != FR_OK:
        if bad >= 0:
            _raise_for_status(rc, table._ctx(kv[bad], pv[bad]))
        _raise_for_status(rc, table._ctx() + f", {done} of {n} inserted")
    return done
