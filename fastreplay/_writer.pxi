# ChunkStore and WriterCore: the compiled side of TrajectoryWriter
# (csrc/chunk.h, column.h, writer.h).  Included by _core.pyx.

from cpython.buffer cimport (
    PyBUF_C_CONTIGUOUS,
    PyBUF_FORMAT,
    PyBuffer_Release,
    PyObject_GetBuffer,
)

# numpy kind+itemsize -> Reverb's (TensorFlow's) dtype names, for messages.
_TF_NAMES = {"f8": "double", "f4": "float", "f2": "half", "b1": "bool",
             "c8": "complex64", "c16": "complex128"}
_SUPPORTED_KINDS = "biufc"
# An append releases the GIL only when it copies at least this many bytes.
# Shorter appends keep it, chunk compression included: with several writer
# threads every release is a hand-off to another thread and back, and the
# returning thread then waits for the holder to let go.  Measured with Atari
# steps (benchmarks/test_bench_writer.py, 2 cores): releasing for every
# append >= 16 KiB gave 65k/51k/37k steps/s with 1/2/4 threads, releasing
# around compression 65k/51k/37k, keeping the GIL 65k/60k/59k.
DEF _NOGIL_MIN_BYTES = 262144


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
    cdef size_t c = fns[0], d = fns[1], b = fns[2]
    fr_codec_install(<fr_lz4_compress_fn>c, <fr_lz4_decompress_fn>d,
                     <fr_lz4_bound_fn>b)
    return bool(fr_codec_available())


LZ4_AVAILABLE = _install_lz4()


def dtype_name(dtype) -> str:
    """Reverb's name for a numpy dtype ('double', 'int64', ...)."""
    dt = np.dtype(dtype)
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


cdef class _Step:
    """The values of one append, validated and pinned as C rows: buffers of
    numpy arrays and scalars are held (not copied) until release(); Python
    floats, ints and bools are stored inline.  With ``batched`` each value
    has a leading environment axis that is not part of the spec."""

    cdef Py_ssize_t n, n_views
    cdef int32_t *cols
    cdef const void **rows
    cdef fr_spec *specs
    cdef Py_buffer *views
    cdef int64_t *strides  # bytes between environments (batched)
    cdef int64_t *scalars  # storage of Python scalars (8 bytes each)
    cdef bint heavy        # enough bytes that releasing the GIL pays off
    cdef bint owned        # arrays were malloc'ed (more than _STEP_INLINE)
    cdef int32_t _cols[_STEP_INLINE]
    cdef const void *_rows[_STEP_INLINE]
    cdef fr_spec _specs[_STEP_INLINE]
    cdef Py_buffer _views[_STEP_INLINE]
    cdef int64_t _strides[_STEP_INLINE]
    cdef int64_t _scalars[_STEP_INLINE]

    def __cinit__(self, list paths, list cols, list values, Py_ssize_t batched):
        cdef Py_ssize_t n = len(cols), i, d, lead = 1 if batched else 0
        cdef int64_t total = 0
        cdef Py_buffer *view
        cdef fr_spec *spec
        cdef char kind
        cdef object v
        self.n = n
        self.n_views = 0
        self.owned = n > _STEP_INLINE
        if self.owned:
            self.cols = <int32_t *>malloc(n * sizeof(int32_t))
            self.rows = <const void **>malloc(n * sizeof(void *))
            self.specs = <fr_spec *>malloc(n * sizeof(fr_spec))
            self.views = <Py_buffer *>malloc(n * sizeof(Py_buffer))
            self.strides = <int64_t *>malloc(n * sizeof(int64_t))
            self.scalars = <int64_t *>malloc(n * sizeof(int64_t))
            if not (self.cols and self.rows and self.specs and self.views and
                    self.strides and self.scalars):
                raise MemoryError()
        else:
            self.cols, self.rows, self.specs = self._cols, self._rows, self._specs
            self.views, self.strides = self._views, self._strides
            self.scalars = self._scalars
        for i in range(n):
            self.cols[i] = cols[i]
            v = values[i]
            spec = &self.specs[i]
            if not batched and (type(v) is float or type(v) is int
                                or type(v) is bool):
                _scalar_spec(v, spec, &self.scalars[i])
                self.rows[i] = &self.scalars[i]
                self.strides[i] = spec.row_bytes
                continue
            view = &self.views[self.n_views]
            kind = 0
            if type(v) is _ndarray or (isinstance(v, _generic) and
                                       v.dtype.kind in _SUPPORTED_KINDS):
                try:
                    PyObject_GetBuffer(v, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
                    kind = _format_kind(view.format)
                    if kind == 0:
                        PyBuffer_Release(view)
                except (BufferError, ValueError):  # not C-contiguous: copy below
                    kind = 0
            if kind == 0:
                v = _as_native_array(v, paths[self.cols[i]])
                PyObject_GetBuffer(v, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
                kind = _format_kind(view.format)
            self.n_views += 1
            if view.ndim - lead > FR_MAX_NDIM or view.ndim < lead:
                raise ValueError(
                    f"column {paths[self.cols[i]]}: expected between {lead} and "
                    f"{FR_MAX_NDIM + lead} dimensions, got {view.ndim}")
            if batched and view.shape[0] != batched:
                raise ValueError(
                    f"column {paths[self.cols[i]]}: leading axis {view.shape[0]} "
                    f"!= number of environments {batched}")
            spec.dtype = kind
            spec.itemsize = view.itemsize
            spec.ndim = view.ndim - lead
            spec.row_bytes = view.itemsize
            for d in range(lead, view.ndim):
                spec.shape[d - lead] = view.shape[d]
                spec.row_bytes *= view.shape[d]
            self.strides[i] = spec.row_bytes
            self.rows[i] = view.buf
            total += view.len
        self.heavy = total >= _NOGIL_MIN_BYTES

    cdef void release(self):
        cdef Py_ssize_t i
        for i in range(self.n_views):
            PyBuffer_Release(&self.views[i])
        self.n_views = 0

    def __dealloc__(self):
        self.release()
        if self.owned:
            free(self.cols); free(self.rows); free(self.specs); free(self.views)
            free(self.strides); free(self.scalars)


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


cdef int _append_envs(fr_writer **ws, Py_ssize_t n_envs, _Step step,
                      const void **rows, bint partial) noexcept nogil:
    cdef Py_ssize_t e, i
    cdef int32_t bad = -1
    cdef int rc = FR_OK
    for e in range(n_envs):
        for i in range(step.n):
            rows[i] = <const char *>step.rows[i] + e * step.strides[i]
        rc = fr_writer_append(ws[e], step.n, step.cols, rows, step.specs,
                              partial, &bad)
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
    cdef _Step step = _Step((<WriterCore>cores[0])._paths, cols, values, n_envs)
    cdef WriterCore core
    cdef int32_t bad = -1
    cdef int rc = FR_OK
    cdef const void **rows = <const void **>malloc(max(step.n, 1) * sizeof(void *))
    cdef fr_writer **ws = <fr_writer **>malloc(max(n_envs, 1) * sizeof(void *))
    try:
        if not rows or not ws:
            raise MemoryError()
        for e in range(n_envs):
            core = cores[e]
            ws[e] = core._w
            rc = fr_writer_check_append(ws[e], step.n, step.cols, step.specs, &bad)
            if rc != FR_OK:
                core._raise_append(rc, cols, values, bad, 1)
        if step.heavy or n_envs * step.n > 64:
            with nogil:
                rc = _append_envs(ws, n_envs, step, rows, partial)
        else:
            rc = _append_envs(ws, n_envs, step, rows, partial)
        _raise_for_status(rc, "append_batch")
    finally:
        step.release()
        free(rows)
        free(ws)


cdef int _raise_writer_status(int rc) except -1:
    if rc == FR_ECLOSED:
        _raise_for_status(rc, "", "A table this writer inserts into was closed "
                          "and dropped queued items (or the writer was closed).")
    return _raise_for_status(rc, "writer")


cdef class WriterCore:
    """WriterCore(store, seed, num_keep_alive_refs, max_chunk_length=None, throughput_weight=1.0)

    One writer's columns, cells, queued items and episode.  Columns are
    addressed by index; ``paths`` name them in error messages.
    """

    cdef fr_writer *_w
    cdef readonly ChunkStore store
    cdef list _paths

    def __cinit__(self, *args, **kwargs):
        self._w = NULL

    def __init__(self, ChunkStore store, uint64_t seed, int32_t num_keep_alive_refs,
                 max_chunk_length=None, double throughput_weight=1.0) -> None:
        cdef fr_chunker_options o
        _options(&o, num_keep_alive_refs, max_chunk_length, throughput_weight)
        self.store = store
        self._paths = []
        self._w = fr_writer_new(store._s, seed, o)
        if self._w == NULL:
            raise MemoryError()

    def __dealloc__(self):
        if self._w != NULL:
            fr_writer_free(self._w)

    def add_column(self, str path, num_keep_alive_refs=None, max_chunk_length=None,
                   double throughput_weight=1.0) -> int:
        """Add a column named ``path`` (for messages); options default to the
        writer's.  Returns its index."""
        cdef fr_chunker_options o
        cdef int32_t col
        if num_keep_alive_refs is None:
            col = fr_writer_add_column(self._w, NULL)
        else:
            _options(&o, num_keep_alive_refs, max_chunk_length, throughput_weight)
            col = fr_writer_add_column(self._w, &o)
        if col < 0:
            _raise_for_status(col, path)
        self._paths.append(path)
        return col

    def configure(self, int32_t col, int32_t num_keep_alive_refs, max_chunk_length,
                  double throughput_weight=1.0) -> None:
        cdef fr_chunker_options o
        _options(&o, num_keep_alive_refs, max_chunk_length, throughput_weight)
        _raise_for_status(fr_writer_configure(self._w, col, o),
                          f"column {self._paths[col]}")

    def column_info(self, int32_t col) -> dict:
        """Spec (dtype, shape or None), options and current chunk length."""
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
        anything.  Steps copying 256 KiB or more run without the GIL (see
        _NOGIL_MIN_BYTES for why smaller ones keep it).
        """
        cdef list cols = [], values = []
        cdef Py_ssize_t c
        for c in range(len(flat)):
            if flat[c] is not None:
                cols.append(c)
                values.append(flat[c])
        cdef _Step step = _Step(self._paths, cols, values, 0)
        cdef int32_t bad = -1
        cdef int rc
        try:
            if step.heavy:
                with nogil:
                    rc = fr_writer_append(self._w, step.n, step.cols, step.rows,
                                          step.specs, partial, &bad)
            else:
                rc = fr_writer_append(self._w, step.n, step.cols, step.rows,
                                      step.specs, partial, &bad)
        finally:
            step.release()
        if rc != FR_OK:
            self._raise_append(rc, cols, values, bad, 0)

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
        cdef const int64_t[::1] pv = np.ascontiguousarray(positions, dtype=np.int64)
        out = np.empty(pv.shape[0], dtype=np.int64)
        cdef int64_t[::1] ov = out
        if pv.shape[0]:
            fr_writer_cells_at(self._w, col, pv.shape[0], &pv[0], &ov[0])
        return out

    def cells_range(self, int32_t col, int64_t start, int64_t step, int64_t count):
        """Cell ids at positions start + k*step (k < count), or None when
        any position has no alive cell."""
        out = np.empty(count, dtype=np.int64)
        cdef int64_t[::1] ov = out
        cdef int64_t missing = 0
        if count:
            missing = fr_writer_cells_range(self._w, col, start, step, count, &ov[0])
        return None if missing else out

    def cell_alive(self, int32_t col, int64_t cell) -> bool:
        """Whether the cell is in its keep-alive window or pinned by an item."""
        return bool(fr_writer_cell_alive(self._w, col, cell))

    def read_cell(self, int32_t col, int64_t cell) -> np.ndarray:
        """The value of cell ``cell`` of column ``col`` (a copy)."""
        cdef fr_column *c = fr_writer_column(self._w, col)
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

    def create_item(self, TableCore table, double priority, list columns) -> int:
        """Queue an item whose trajectory columns are the TrajectoryColumn
        objects ``columns`` (in flatten order).  Returns the item's key."""
        cdef Py_ssize_t n = len(columns), total = 0, i, k, at = 0
        cdef TrajectoryColumn tc
        for c in columns:
            if not isinstance(c, TrajectoryColumn):
                raise TypeError("All leaves of the trajectory must be "
                                f"TrajectoryColumn, got {type(c).__name__}")
            tc = c
            if len(tc._ids) and tc._core is not self:
                raise ValueError("TrajectoryColumn refers to another writer's cells")
            total += len(tc._ids)
        cdef int32_t *lens = <int32_t *>malloc(max(n, 1) * sizeof(int32_t))
        cdef uint8_t *sq = <uint8_t *>malloc(max(n, 1))
        cdef int32_t *cv = <int32_t *>malloc(max(total, 1) * sizeof(int32_t))
        cdef int64_t *iv = <int64_t *>malloc(max(total, 1) * sizeof(int64_t))
        cdef const int32_t[::1] cm
        cdef const int64_t[::1] im
        cdef int32_t one_col
        cdef uint64_t key = 0
        cdef int32_t bad_column = -1, bad_ref = -1
        cdef int rc
        try:
            if not lens or not sq or not cv or not iv:
                raise MemoryError()
            for i in range(n):
                tc = columns[i]
                im = tc._ids
                lens[i] = im.shape[0]
                sq[i] = tc._squeeze
                if isinstance(tc._cols, int):
                    one_col = tc._cols
                    for k in range(im.shape[0]):
                        cv[at + k] = one_col
                        iv[at + k] = im[k]
                else:
                    cm = tc._cols
                    for k in range(im.shape[0]):
                        cv[at + k] = cm[k]
                        iv[at + k] = im[k]
                at += im.shape[0]
            # Short and non-blocking: keeping the GIL is cheaper than handing
            # it over twice.
            rc = fr_writer_create_item(self._w, table._t, priority, n, lens, sq,
                                       cv, iv, &key, &bad_column, &bad_ref)
            if rc != FR_OK:
                self._raise_create(rc, table, priority, columns, bad_column, bad_ref)
        finally:
            free(lens); free(sq); free(cv); free(iv)
        return key

    cdef _raise_create(self, int rc, TableCore table, double priority, list columns,
                       int32_t bad_column, int32_t bad_ref):
        if rc == FR_EPRIORITY_NAN and bad_column < 0:
            _raise_for_status(rc, "", "`priority` must not be nan.")
        if bad_column < 0:
            _raise_for_status(rc, f"table '{table.name}', priority {priority!r}")
        cols = (<TrajectoryColumn>columns[bad_column]).col_array().tolist()
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
        """Refuse further calls and wake a flush blocked in another thread."""
        fr_writer_close(self._w)

    def pending(self) -> int:
        """Items not yet inserted: queued here or in their tables."""
        return fr_writer_pending(self._w)

    def flush(self, int64_t ignore_last, timeout) -> bool:
        """Finalize and hand over all but the last ``ignore_last`` items and
        wait; returns False when the timeout (seconds) expired."""
        cdef int64_t tns = _timeout_ns(timeout)
        cdef int rc
        with nogil:
            rc = fr_writer_flush(self._w, ignore_last, tns)
        if rc == FR_ETIMEOUT:
            return False
        _raise_writer_status(rc)
        return True

    def end_episode(self, bint clear_buffers, timeout) -> bool:
        """End the episode (always, even on timeout); False on timeout."""
        cdef int64_t tns = _timeout_ns(timeout)
        cdef int rc
        with nogil:
            rc = fr_writer_end_episode(self._w, clear_buffers, tns)
        if rc == FR_ETIMEOUT:
            return False
        _raise_writer_status(rc)
        return True


def insert_rows(TableCore table, ChunkStore store, list names, list values, keys,
                priorities, uint64_t chunk_key, timeout=None) -> int:
    """Insert len(keys) one-step items: row r of every value (leading axis
    = rows) becomes item keys[r], its columns squeezed, in the order of
    ``values``.  One chunk per column for the whole batch.  Returns how many
    were inserted (fewer when the rate limiter timed out part-way, which then
    raises DeadlineExceededError)."""
    cdef const uint64_t[::1] kv = np.ascontiguousarray(keys, dtype=np.uint64)
    cdef const double[::1] pv = np.ascontiguousarray(priorities, dtype=np.float64)
    cdef Py_ssize_t n = kv.shape[0]
    if pv.shape[0] != n:
        raise ValueError(f"keys and priorities differ in length ({n} != {pv.shape[0]})")
    if n == 0:
        return 0
    cdef _Step step = _Step(names, list(range(len(values))), values, n)
    cdef int64_t tns = _timeout_ns(timeout)
    cdef int64_t done = 0, bad = -1
    cdef int rc
    try:
        with nogil:
            rc = fr_insert_rows(table._t, store._s, step.n, step.specs, step.rows, n,
                                &kv[0], &pv[0], chunk_key, tns, &done, &bad)
    finally:
        step.release()
    if rc != FR_OK:
        if bad >= 0:
            _raise_for_status(rc, table._ctx(kv[bad], pv[bad]))
        _raise_for_status(rc, table._ctx() + f", {done} of {n} inserted")
    return done
