# A step's values as C rows: parsing of appended values (Python scalars
# inline, numpy arrays and scalars pinned through the buffer protocol,
# strings encoded into blobs), their conversion to native arrays, and the
# job that appends a parsed step to one writer or to one writer per
# environment (csrc/writer.h).  Used by WriterCore.append (_writer.pxi),
# append_batch (_append_batch.pxi) and insert_rows (_rows.pxi).  Included by
# _core.pyx.
# Needs: _strings.pxi (_TEXT_KINDS, _encode_text for string values).

from cpython.buffer cimport (
    PyBUF_C_CONTIGUOUS,
    PyBUF_FORMAT,
    PyBUF_SIMPLE,
    PyBuffer_Release,
    PyObject_GetBuffer,
)


# numpy kind+itemsize -> Reverb's (TensorFlow's) dtype names, for messages.
_TF_NAMES = {"f8": "double", "f4": "float", "f2": "half", "b1": "bool",
             "c8": "complex64", "c16": "complex128"}
_SUPPORTED_KINDS = "biufc"


def dtype_name(dtype) -> str:
    """Reverb's name for a numpy dtype ('double', 'int64', ...)."""
    dt = np.dtype(dtype)
    if dt.kind in _TEXT_KINDS:  # TensorFlow's one string type
        return "string"
    return _TF_NAMES.get(f"{dt.kind}{dt.itemsize}", dt.name)


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
    if not batched and _np_fast_put(spec, &s.rows[i], &s.strides[i], v):
        s.total += s.strides[i]
        s.n += 1
        return 0
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
            "numeric and bool arrays (and str/bytes) only; convert the value, "
            "e.g. np.asarray(value, dtype=np.float32)")
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    # (np.ascontiguousarray would turn a 0-d array into shape (1,).)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


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
