# Frame streams: ReplayBuffer's next_of / stack_compress, each frame stored
# once (csrc/frames.h).  Included by _core.pyx.
# Needs: _table.pxi (TableCore), _codec.pxi (ChunkStore, _options),
# _steps.pxi (_Step), _rows.pxi (_COMPRESSION_MODES).


cdef class FrameStream:
    """FrameStream(example, stacked=False, compression=COMPRESSION_AUTO)

    A stream of values with ``example``'s dtype and shape whose frames are
    stored once (csrc/frames.h): with ``stacked`` the last axis is a frame
    stack and a value sliding by one frame stores one frame; a value equal
    to the last one stores nothing.  ``insert_frame_rows`` offers values to
    it; one call at a time (the caller serializes)."""

    cdef fr_frames *_f
    cdef readonly object dtype
    cdef readonly tuple shape
    cdef readonly bint stacked
    cdef readonly int32_t frames

    def __cinit__(self, example, bint stacked=False,
                  int compression=FR_COMPRESSION_AUTO):
        self._f = NULL
        arr = np.asarray(example)
        if arr.dtype.kind not in _SUPPORTED_KINDS:
            raise ValueError(f"a frame stream holds numbers, not {arr.dtype}")
        if stacked and (arr.ndim < 1 or arr.shape[arr.ndim - 1] < 1):
            raise ValueError(f"a stacked value needs a last axis (the stack), got "
                             f"shape {arr.shape}")
        if compression not in _COMPRESSION_MODES:
            raise ValueError(f"compression must be one of {_COMPRESSION_MODES}, "
                             f"got {compression!r}")
        cdef _Step step = _Step(["value"], [0], [np.ascontiguousarray(arr)], 0)
        cdef fr_spec spec = step.a.specs[0]
        step.release()
        self._f = fr_frames_new(&spec, stacked, compression)
        if self._f == NULL:
            raise MemoryError()
        self.dtype, self.shape, self.stacked = arr.dtype, arr.shape, stacked
        self.frames = fr_frames_k(self._f)

    def __dealloc__(self):
        if self._f != NULL:
            fr_frames_free(self._f)

    def reset(self) -> None:
        """Forget the last value: the next one stores all its frames."""
        fr_frames_reset(self._f)


def insert_frame_rows(TableCore table not None, ChunkStore store not None,
                      list names, list values, list streams, keys, priorities,
                      uint64_t chunk_key, timeout=None, compression=None) -> int:
    """``insert_rows`` where ``values[c]`` is offered to ``streams[c]`` (a
    FrameStream with that value's dtype and row shape) when that is not
    None: row by row in value order, so a next-of value follows its source.
    Such a column of an item is its value's frame rows: stacked on the last
    axis again when sampled (FR_ROWS_LAST_AXIS), else squeezed.  One-step
    chunker options; ``compression`` per value as for insert_rows."""
    cdef fr_chunker_options o
    _options(&o, 1, None, 1.0)
    cdef const uint64_t[::1] kv = np.ascontiguousarray(keys, dtype=np.uint64)
    cdef const double[::1] pv = np.ascontiguousarray(priorities, dtype=np.float64)
    cdef Py_ssize_t n = kv.shape[0], i, m = len(values)
    if pv.shape[0] != n:
        raise ValueError(f"keys and priorities differ in length ({n} != {pv.shape[0]})")
    if len(names) != m or len(streams) != m:
        raise ValueError(f"names, values and streams differ in length "
                         f"({len(names)}, {m}, {len(streams)})")
    cdef const int32_t[::1] modes
    cdef const int32_t *mp = NULL
    if compression is not None:
        modes = np.ascontiguousarray(compression, dtype=np.int32)
        if modes.shape[0] != m or any(c not in _COMPRESSION_MODES for c in compression):
            raise ValueError(f"compression must give one of {_COMPRESSION_MODES} per "
                             f"value, got {compression!r}")
        if m:
            mp = &modes[0]
    if n == 0:
        return 0
    cdef fr_frames **fs = <fr_frames **>calloc(max(m, 1), sizeof(fr_frames *))
    if fs == NULL:
        raise MemoryError()
    cdef FrameStream s
    cdef _Step step = None
    cdef int64_t tns = _timeout_ns(timeout)
    cdef int64_t done = 0, bad = -1
    cdef int rc
    try:
        for i in range(m):
            if streams[i] is not None:
                s = streams[i]
                v = values[i]
                if (v.dtype != s.dtype or v.shape[1:] != s.shape):
                    raise ValueError(
                        f"column {names[i]}: rows of dtype {v.dtype} and shape "
                        f"{v.shape[1:]} differ from its frame stream's {s.dtype} "
                        f"{s.shape}")
                fs[i] = s._f
        step = _Step(names, list(range(m)), values, n)
        text = step.text_path(names)
        if text is not None:
            raise ValueError(f"column {text}: string columns cannot be "
                             "inserted as rows; write them with a TrajectoryWriter")
        with nogil:  # may wait for the rate limiter: not a hand-off section
            rc = fr_insert_frame_rows(table._t, store._s, step.a.n, step.a.specs,
                                      step.a.rows, fs, n, &kv[0], &pv[0], &o, mp,
                                      chunk_key, tns, &done, &bad)
    finally:
        if step is not None:
            step.release()
        free(fs)
    if rc != FR_OK:
        if bad >= 0:
            _raise_for_status(rc, table._ctx(kv[bad], pv[bad]))
        _raise_for_status(rc, table._ctx() + f", {done} of {n} inserted")
    return done
