# The server's side of the transport's binary form (fastreplay/net): the
# chunks a connection sent, kept by key (ChunkMap), restored into the chunk
# store, and items inserted from their records after every record is
# checked.  Included by _core.pyx after _wire.pxi (records, ChunkList).

cdef class ChunkMap:
    """The chunks a server keeps for one connection, by key: one reference
    each, released by ``forget``, ``clear`` or collection.  Compiled (a key
    map of slots) because a writer making one item per step sends a chunk
    per column a step: a dict of ChunkHandles cost the server a Python int,
    an object and three dict operations a chunk (~25% of its time on a
    remote writer's inserts, perf, session 16).  Not thread-safe: one
    connection's thread uses it."""

    cdef fr_keymap _km
    cdef fr_chunk **_c
    cdef int32_t *_free
    cdef int32_t _n_free, _cap

    def __cinit__(self):
        if fr_keymap_init(&self._km) != FR_OK:
            raise MemoryError()
        self._c, self._free, self._n_free, self._cap = NULL, NULL, 0, 0

    def __dealloc__(self):
        self._release_all()
        fr_keymap_free(&self._km)
        free(self._c)
        free(self._free)

    cdef void _release_all(self):
        cdef int32_t i
        for i in range(self._cap):
            if self._c[i] != NULL:
                fr_chunk_release(self._c[i])
                self._c[i] = NULL

    def __len__(self) -> int:
        return self._km.size

    def __contains__(self, key) -> bool:
        return fr_keymap_get(&self._km, <uint64_t>key) >= 0

    cdef fr_chunk *get(self, uint64_t key):
        cdef int32_t i = fr_keymap_get(&self._km, key)
        return NULL if i < 0 else self._c[i]

    cdef int put(self, uint64_t key, fr_chunk *c) except -1:
        """Keep ``c`` (its reference passes to the map) under ``key``,
        releasing a chunk kept under it before."""
        cdef int32_t i = fr_keymap_get(&self._km, key)
        cdef int32_t cap
        cdef fr_chunk **grown_c
        cdef int32_t *grown_f
        if i >= 0:
            fr_chunk_release(self._c[i])
            self._c[i] = c
            return 0
        if self._n_free == 0:
            cap = max(64, 2 * self._cap)
            grown_c = <fr_chunk **>realloc(self._c, cap * sizeof(fr_chunk *))
            if grown_c == NULL:
                fr_chunk_release(c)
                raise MemoryError()
            self._c = grown_c
            grown_f = <int32_t *>realloc(self._free, cap * sizeof(int32_t))
            if grown_f == NULL:
                fr_chunk_release(c)
                raise MemoryError()
            self._free = grown_f
            for i in range(cap - 1, self._cap - 1, -1):
                self._c[i] = NULL
                self._free[self._n_free] = i
                self._n_free += 1
            self._cap = cap
        i = self._free[self._n_free - 1]
        if fr_keymap_put(&self._km, key, i) != FR_OK:
            fr_chunk_release(c)
            raise MemoryError()
        self._n_free -= 1
        self._c[i] = c
        return 0

    def forget(self, keys) -> None:
        """Release the chunks of ``keys`` (uint64; absent ones are skipped)."""
        cdef const uint64_t[::1] kv = np.ascontiguousarray(keys, dtype=np.uint64)
        cdef Py_ssize_t k
        cdef int32_t i
        for k in range(kv.shape[0]):
            i = fr_keymap_del(&self._km, kv[k])
            if i >= 0:
                fr_chunk_release(self._c[i])
                self._c[i] = NULL
                self._free[self._n_free] = i
                self._n_free += 1

    def clear(self) -> None:
        """Release every chunk."""
        cdef int32_t i
        self._release_all()
        fr_keymap_clear(&self._km)
        self._n_free = 0
        for i in range(self._cap - 1, -1, -1):
            self._free[self._n_free] = i
            self._n_free += 1


def restore_chunks(ChunkStore store not None, ChunkMap chunk_map not None, records,
                   data) -> None:
    """Rebuild chunks sent by a peer into ``chunk_map``; every field is
    checked against ``data`` before anything is allocated
    (DataLossError)."""
    cdef Py_ssize_t k, n = len(records)
    cdef const unsigned char[::1] dv = data if len(data) else b"\0"
    cdef int64_t size = len(data)
    cdef _WChunk *rv = <_WChunk *>_records(records, CHUNK_DTYPE, "chunk records")
    cdef _WChunk r
    cdef fr_chunk *c
    for k in range(n):
        r = rv[k]
        if (r.at < 0 or r.stored_bytes < 0 or r.at > size or r.stored_bytes > size - r.at
                or r.n_rows < 0 or r.compressed not in (0, 1) or
                (r.row_bytes < 0 and r.row_bytes != FR_VAR_ROWS)):
            raise errors.DataLossError(f"chunk {r.key}: bad record")
        c = fr_chunk_restore(store._s, r.key, r.episode_id, r.first_step, r.last_step,
                             r.row_bytes, r.n_rows, r.compressed,
                             <const char *>&dv[r.at if r.stored_bytes else 0],
                             r.stored_bytes)
        if c == NULL:
            raise errors.DataLossError(f"chunk {r.key} is inconsistent")
        chunk_map.put(r.key, c)


cdef const fr_spec *_wire_spec(object spec, Py_ssize_t i) except NULL:
    try:
        kind, itemsize, shape = spec
        shape = tuple(shape)
    except (TypeError, ValueError):
        raise errors.DataLossError(f"spec {i} is malformed") from None
    if not _spec_kind_ok(kind, itemsize):
        raise errors.DataLossError(f"spec {i} has unsupported kind {kind!r}")
    if len(shape) > FR_MAX_NDIM or any(type(d) is not int or not 0 <= d < 2**40
                                       for d in shape):
        raise errors.DataLossError(f"spec {i} has a bad shape {shape!r}")
    cdef fr_spec sp
    memset(&sp, 0, sizeof(sp))
    sp.dtype, sp.itemsize, sp.ndim, sp.row_bytes = ord(kind), itemsize, len(shape), itemsize
    for d in range(len(shape)):
        sp.shape[d] = shape[d]
        sp.row_bytes *= shape[d]
        if sp.row_bytes >= 2**40:
            raise errors.DataLossError(f"spec {i}: rows are too large")
    cdef const fr_spec *out = fr_spec_intern(&sp)
    if out == NULL:
        raise MemoryError()
    return out


# A column's rows, at most (a C int64: with a Python 2**31 the check below
# boxed every column's count, ~3% of a server's inserts, perf).
cdef int64_t _ROWS_LIMIT = 2147483648


def insert_wire(TableCore table not None, ChunkMap chunk_map not None, items, columns,
                slices, list specs, timeout=None) -> int:
    """Check every record, then insert the items (records of
    export_wire; slices name chunks of ``chunk_map``) through the rate
    limiter, waiting up to ``timeout``; returns how many were inserted.  A
    bad record raises DataLossError and inserts nothing; a bad priority
    raises as Table.insert does and inserts nothing."""
    cdef Py_ssize_t n = len(items), nc = len(columns), ns = len(slices), k
    cdef _WItem *iv = <_WItem *>_records(items, ITEM_DTYPE, "items")
    cdef _WCol *cv = <_WCol *>_records(columns, COLUMN_DTYPE, "columns")
    cdef _WSlice *sv = <_WSlice *>_records(slices, SLICE_DTYPE, "slices")
    cdef const fr_spec **sp = <const fr_spec **>malloc(max(len(specs), 1) * sizeof(void *))
    cdef fr_chunk **ch = <fr_chunk **>malloc(max(ns, 1) * sizeof(void *))
    cdef uint64_t *keys = <uint64_t *>malloc(max(n, 1) * sizeof(uint64_t))
    cdef double *prios = <double *>malloc(max(n, 1) * sizeof(double))
    cdef uint64_t *trajs = <uint64_t *>calloc(max(n, 1), sizeof(uint64_t))
    cdef Py_ssize_t i, j, q, c, s, built = 0
    cdef int64_t rows, want, done = 0, bad = -1, tns = _timeout_ns(timeout)
    cdef int rc
    cdef fr_chunk *h
    cdef fr_trajectory *t
    # The chunk each item column's slice named last, per column (mod 16):
    # one-step items of a batch of steps name the same few chunks item after
    # item, and a lookup a slice was ~1/8 of an insert (perf, session 22).
    cdef uint64_t seen_key[16]
    cdef fr_chunk *seen[16]
    memset(seen, 0, sizeof(seen))
    try:
        if not sp or not ch or not keys or not prios or not trajs:
            raise MemoryError()
        for k in range(len(specs)):
            sp[k] = _wire_spec(specs[k], k)
        # Pass 1: every record checked, chunks looked up.
        c = s = 0
        for i in range(n):
            if not 0 < iv[i].n_columns <= _WIRE_MAX_COLUMNS or iv[i].n_columns > nc - c:
                raise errors.DataLossError(f"item {iv[i].key}: bad column count")
            rc = fr_table_check_priority(table._t, iv[i].priority)
            if rc != FR_OK:
                _raise_for_status(rc, table._ctx(iv[i].key, iv[i].priority))
            for j in range(iv[i].n_columns):
                if (not 0 <= cv[c].spec < len(specs) or cv[c].squeeze not in (0, 1) or
                        not 0 < cv[c].n_slices <= _WIRE_MAX_SLICES or
                        cv[c].n_slices > ns - s):
                    raise errors.DataLossError(f"item {iv[i].key}: bad column record")
                want = FR_VAR_ROWS if fr_spec_is_var(sp[cv[c].spec]) else \
                    sp[cv[c].spec].row_bytes
                rows = 0
                for q in range(cv[c].n_slices):
                    if seen[j & 15] != NULL and seen_key[j & 15] == sv[s].chunk:
                        h = seen[j & 15]
                    else:
                        h = chunk_map.get(sv[s].chunk)
                        seen[j & 15], seen_key[j & 15] = h, sv[s].chunk
                    if h == NULL:
                        raise errors.DataLossError(
                            f"item {iv[i].key}: unknown chunk {sv[s].chunk}")
                    if (sv[s].offset < 0 or sv[s].length < 1 or
                            sv[s].offset > h.n_rows - sv[s].length or
                            h.row_bytes != want):
                        raise errors.DataLossError(
                            f"item {iv[i].key}: slice ({sv[s].offset}, "
                            f"{sv[s].length}) does not fit chunk {sv[s].chunk}")
                    ch[s] = h
                    rows += sv[s].length
                    s += 1
                if rows >= _ROWS_LIMIT or (cv[c].squeeze and rows != 1):
                    raise errors.DataLossError(f"item {iv[i].key}: bad row count")
                c += 1
        if c != nc or s != ns:
            raise errors.DataLossError("records left over after the last item")
        # Pass 2: the trajectories (the chunk map holds the chunks meanwhile).
        c = s = 0
        for i in range(n):
            k = 0
            for j in range(iv[i].n_columns):
                k += cv[c + j].n_slices
            t = fr_trajectory_new(iv[i].n_columns, <int32_t>k)
            if t == NULL:
                raise MemoryError()
            t.structure_id = iv[i].structure
            trajs[i] = <uint64_t><size_t>t
            built = i + 1
            keys[i], prios[i] = iv[i].key, iv[i].priority
            for j in range(iv[i].n_columns):
                t.columns[j].spec = sp[cv[c].spec]
                t.columns[j].squeeze = cv[c].squeeze
                for q in range(cv[c].n_slices):
                    fr_trajectory_push_slice(t, <int32_t>j, ch[s], sv[s].offset,
                                             sv[s].length)
                    s += 1
                c += 1
        if n == 0:
            return 0
        with nogil:
            rc = fr_table_insert_many(table._t, n, keys, prios, trajs, tns, &done, &bad)
        if rc != FR_OK:
            if bad >= 0:
                _raise_for_status(rc, table._ctx(keys[bad], prios[bad]))
            _raise_for_status(rc, table._ctx() + f", {done} of {n} inserted")
        return done
    finally:
        for i in range(done, built):
            fr_trajectory_release(<fr_trajectory *><size_t>trajs[i])
        free(sp); free(ch); free(keys); free(prios); free(trajs)
