# SlotTable: rows addressed by slot number (csrc/slots.h), the storage of the
# framework adapters (fastreplay/integrations/_slots.py).  Included by
# _core.pyx.
# Needs: _codec.pxi (ChunkStore), _steps.pxi (_Step), _table.pxi (_spec_info,
# _data_of), _outpool.pxi (_empty_output).


cdef class SlotTable:
    """SlotTable(capacity, store)

    ``capacity`` slots, each empty or one row of every column, the rows in
    chunks of ``store``.  ``write`` copies rows into chunks and points slots
    at them; ``read`` gathers the rows of any slots (repeats allowed) into
    stacked arrays without the GIL.  Thread-safe.
    """

    cdef fr_slots *_s
    cdef readonly ChunkStore store
    cdef readonly int64_t capacity
    cdef uint64_t _chunk_key

    def __cinit__(self, int64_t capacity, ChunkStore store not None):
        if capacity < 1:
            raise ValueError(f"capacity ({capacity}) must be a positive integer")
        self._s = fr_slots_new(capacity, store._s)
        if self._s == NULL:
            raise MemoryError()
        self.store = store
        self.capacity = capacity
        self._chunk_key = int.from_bytes(_os.urandom(8), "little") >> 2

    def __dealloc__(self):
        if self._s != NULL:
            fr_slots_free(self._s)
            self._s = NULL

    def write(self, slots, list names not None, list values not None,
              compression=None) -> None:
        """Row i of every value (leading axis = rows) goes to ``slots[i]``;
        ``names`` name the columns in errors; ``compression`` gives each
        value's COMPRESSION_* choice (None: AUTO)."""
        cdef const int64_t[::1] sv = np.ascontiguousarray(slots, dtype=np.int64)
        cdef Py_ssize_t n = sv.shape[0], k = len(values)
        if len(names) != k:
            raise ValueError(f"names and values differ in length ({len(names)} != {k})")
        if k == 0:
            raise ValueError("a write needs at least one column")
        if n == 0:
            return
        cdef const int32_t[::1] modes
        cdef const int32_t *mp = NULL
        if compression is not None:
            modes = np.ascontiguousarray(compression, dtype=np.int32)
            if modes.shape[0] != k or any(m not in _COMPRESSION_MODES
                                          for m in compression):
                raise ValueError(f"compression must give one of {_COMPRESSION_MODES} "
                                 f"per value, got {compression!r}")
            mp = &modes[0]
        cdef _Step step = _Step(names, list(range(k)), values, n)
        text = step.text_path(names)
        if text is not None:
            raise ValueError(f"column {text}: string columns cannot be stored in slots")
        cdef int64_t bad = -1
        cdef int rc
        try:
            with nogil:
                rc = fr_slots_write(self._s, <int32_t>k, step.a.specs, step.a.rows, n,
                                    &sv[0], mp, &self._chunk_key, &bad)
        finally:
            step.release()
        if rc == FR_EINVAL and bad >= 0:
            raise IndexError(f"slot {sv[bad]} out of range [0, {self.capacity})")
        if rc == FR_EINVAL:
            raise ValueError(f"a write gives {k} columns, the slots hold "
                             f"{fr_slots_columns(self._s)}")
        if rc in (FR_EDTYPE, FR_ESHAPE):
            shape, dtype = _spec_info(fr_slots_spec(self._s, <int32_t>bad))
            got = np.asarray(values[bad])
            raise ValueError(f"column {names[bad]}: rows of {got.dtype} "
                             f"{tuple(got.shape[1:])} differ from the stored "
                             f"{dtype} {shape}")
        if rc == FR_EBUSY:
            raise ValueError("a write's compression choices differ from the first "
                             "write's (they fix which columns are packed)")
        _raise_for_status(rc, "slot table write")

    def read(self, slots, counter=None) -> list:
        """The rows of ``slots`` as one ``[len(slots), *shape]`` array per
        column; with ``counter`` (an int32 array of ``capacity``) add one per
        read row to counter[slot].  KeyError names an empty slot."""
        cdef const int64_t[::1] sv = np.ascontiguousarray(slots, dtype=np.int64)
        cdef Py_ssize_t n = sv.shape[0], c
        cdef int32_t k = fr_slots_columns(self._s)
        cdef int32_t[::1] cv
        cdef int32_t *cp = NULL
        if counter is not None:
            cv = counter
            if cv.shape[0] != self.capacity:
                raise ValueError(f"counter has {cv.shape[0]} entries, not "
                                 f"{self.capacity}")
            cp = &cv[0]
        if k == 0:
            if n:
                raise KeyError(f"slot {sv[0]} is empty")
            return []
        columns = []
        cdef void **outs = <void **>malloc(k * sizeof(void *))
        if outs == NULL:
            raise MemoryError()
        cdef int64_t bad = -1, zero = 0
        cdef int rc
        try:
            for c in range(k):
                shape, dtype = _spec_info(fr_slots_spec(self._s, <int32_t>c))
                col = _empty_output((n,) + shape, dtype) if n else \
                    np.empty((0,) + shape, dtype)
                outs[c] = _data_of(col)
                columns.append(col)
            with nogil:
                rc = fr_slots_read(self._s, n, &sv[0] if n else &zero, outs, cp, &bad)
        finally:
            free(outs)
        if rc == FR_EKEY_MISSING:
            raise KeyError(f"slot {sv[bad]} is empty")
        if rc == FR_EINVAL:
            raise IndexError(f"slot {sv[bad]} out of range [0, {self.capacity})")
        _raise_for_status(rc, "slot table read" if bad >= -1 else
                          f"slot table read, column {-2 - bad}")
        return columns

    def read_windows(self, bases, starts, Py_ssize_t length, int64_t period,
                     counter=None) -> list:
        """``read`` of windows of ``length`` consecutive ring positions:
        window i is slots ``bases[i] + (starts[i] + j) % period`` for j in
        [0, length), so rows come back ``[len(bases) * length, *shape]``
        (ALF's ``replay``: the slots of 256 windows without numpy work)."""
        cdef const int64_t[::1] bv = np.ascontiguousarray(bases, dtype=np.int64)
        cdef const int64_t[::1] sv = np.ascontiguousarray(starts, dtype=np.int64)
        cdef Py_ssize_t n = bv.shape[0], i, j
        if sv.shape[0] != n:
            raise ValueError(f"bases and starts differ in length ({n} != "
                             f"{sv.shape[0]})")
        if length < 0 or period < 1:
            raise ValueError(f"length ({length}) must be >= 0 and period ({period}) "
                             ">= 1")
        slots = np.empty(n * length, dtype=np.int64)
        cdef int64_t[::1] out = slots
        cdef int64_t p
        for i in range(n):
            p = sv[i] % period
            if p < 0:
                p += period
            for j in range(length):
                out[i * length + j] = bv[i] + p
                p += 1
                if p == period:
                    p = 0
        return self.read(slots, counter)

    def erase(self, slots) -> None:
        """Empty ``slots`` (empty ones stay empty)."""
        cdef const int64_t[::1] sv = np.ascontiguousarray(slots, dtype=np.int64)
        cdef int64_t bad = -1
        cdef int rc
        if sv.shape[0] == 0:
            return
        with nogil:
            rc = fr_slots_erase(self._s, sv.shape[0], &sv[0], &bad)
        if rc == FR_EINVAL:
            raise IndexError(f"slot {sv[bad]} out of range [0, {self.capacity})")

    def clear(self) -> None:
        """Empty every slot and forget the columns' specs."""
        with nogil:
            fr_slots_clear(self._s)

    def occupied(self):
        """The occupied slots, ascending (an int64 array)."""
        cdef int64_t got, cap = fr_slots_size(self._s) + 16
        cdef int64_t[::1] ov
        while True:
            out = np.empty(cap, dtype=np.int64)
            ov = out
            with nogil:
                got = fr_slots_occupied(self._s, &ov[0], cap)
            if got <= cap:
                return out[:got]
            cap = got + 16

    def size(self) -> int:
        """Occupied slots."""
        return fr_slots_size(self._s)

    def specs(self) -> list:
        """(shape, dtype) of each column (empty before the first write)."""
        cdef int32_t c, k = fr_slots_columns(self._s)
        return [_spec_info(fr_slots_spec(self._s, c)) for c in range(k)]
