# Export and restore of tables for checkpoints (fastreplay/checkpoint.py
# writes and reads the files).  Included by _core.pyx.

from cpython.bytes cimport PyBytes_FromStringAndSize


cdef class ChunkHandle:
    """One reference to a finalized chunk: its metadata and stored bytes."""

    cdef fr_chunk *_c

    def __cinit__(self):
        self._c = NULL

    def __dealloc__(self):
        if self._c != NULL:
            fr_chunk_release(self._c)

    @staticmethod
    cdef ChunkHandle adopt(fr_chunk *c):
        cdef ChunkHandle h = ChunkHandle.__new__(ChunkHandle)
        h._c = c
        return h

    @property
    def meta(self) -> dict:
        return {"key": self._c.key, "episode_id": self._c.episode_id,
                "first_step": self._c.first_step, "last_step": self._c.last_step,
                "row_bytes": self._c.row_bytes, "n_rows": self._c.n_rows,
                "compressed": bool(self._c.compressed),
                "stored_bytes": self._c.stored_bytes}

    def data(self) -> bytes:
        """The stored bytes (an LZ4 block when compressed)."""
        return PyBytes_FromStringAndSize(<char *>self._c.data, self._c.stored_bytes)


cdef tuple _spec_tuple(const fr_spec *s):
    return (chr(s.dtype), s.itemsize, _shape_of(s))


def export_items(TableCore table) -> tuple:
    """``(items, chunks)``: items in insertion order as ``(key, priority,
    times_sampled, columns)`` with columns ``(spec, squeeze, slices)`` and
    slices ``(chunk_id, offset, length)``; chunks maps chunk_id to a
    ChunkHandle.  The table lock is held only while item records are copied."""
    cdef int64_t cap = fr_table_size(table._t) + 16, n, i
    cdef fr_item *buf
    while True:
        buf = <fr_item *>malloc(cap * sizeof(fr_item))
        if buf == NULL:
            raise MemoryError()
        n = fr_table_items(table._t, buf, cap)
        if n <= cap:
            break
        free(buf)
        cap = n + 16
    cdef fr_trajectory *t
    cdef fr_traj_column *c
    cdef fr_slice *s
    cdef int32_t ci, si
    items, chunks = [], {}
    try:
        for i in range(n):
            t = <fr_trajectory *><size_t>buf[i].payload
            columns = []
            if t != NULL:
                for ci in range(t.n_columns):
                    c = &t.columns[ci]
                    slices = []
                    for si in range(c.first_slice, c.first_slice + c.n_slices):
                        s = &t.slices[si]
                        cid = <size_t>s.chunk
                        if cid not in chunks:
                            fr_chunk_retain(s.chunk)
                            chunks[cid] = ChunkHandle.adopt(s.chunk)
                        slices.append((cid, s.offset, s.length))
                    columns.append((_spec_tuple(c.spec), bool(c.squeeze), slices))
            items.append((buf[i].key, buf[i].priority, buf[i].times_sampled,
                          columns if t != NULL else None))
    finally:
        for i in range(n):
            fr_trajectory_payload_release(NULL, buf[i].payload)
        free(buf)
    return items, chunks


def restore_chunk(ChunkStore store, dict meta, bytes data) -> ChunkHandle:
    """A ready chunk rebuilt from its metadata and stored bytes."""
    if len(data) != meta["stored_bytes"]:
        raise errors.DataLossError(f"chunk {meta['key']}: {len(data)} bytes stored, "
                                   f"{meta['stored_bytes']} expected")
    cdef fr_chunk *c = fr_chunk_restore(
        store._s, meta["key"], meta["episode_id"], meta["first_step"],
        meta["last_step"], meta["row_bytes"], meta["n_rows"], meta["compressed"],
        <const char *>data, len(data))
    if c == NULL:
        raise errors.DataLossError(f"chunk {meta['key']} is inconsistent: {meta}")
    return ChunkHandle.adopt(c)


def restore_item(TableCore table, uint64_t key, double priority, int64_t times_sampled,
                 columns, dict chunks) -> None:
    """Add a checkpointed item (see export_items) without touching the rate
    limiter.  Chunk ids refer to ``chunks`` (id -> ChunkHandle); ``columns``
    None restores an item without data."""
    cdef int rc
    if columns is None:
        rc = fr_table_restore_item(table._t, key, priority, times_sampled, 0)
        if rc != FR_OK:
            _raise_for_status(rc, table._ctx(key, priority), None if rc != FR_EINVAL
                              else "duplicate key or table full")
        return
    cdef Py_ssize_t total = 0
    for spec, squeeze, slices in columns:
        for cid, offset, length in slices:
            total += length
    cdef fr_trajectory *t = fr_trajectory_new(len(columns), max(total, 1))
    if t == NULL:
        raise MemoryError()
    cdef ChunkHandle h
    cdef fr_traj_column *c
    cdef fr_spec sp
    cdef int32_t ci = 0, r
    try:
        for spec, squeeze, slices in columns:
            kind, itemsize, shape = spec
            if len(shape) > FR_MAX_NDIM:
                raise errors.DataLossError(f"item {key}: column {ci} has "
                                           f"{len(shape)} dimensions")
            c = &t.columns[ci]
            c.squeeze = squeeze
            memset(&sp, 0, sizeof(sp))
            sp.dtype = ord(kind)
            sp.itemsize = itemsize
            sp.ndim = len(shape)
            sp.row_bytes = itemsize
            for d in range(len(shape)):
                sp.shape[d] = shape[d]
                sp.row_bytes *= shape[d]
            c.spec = fr_spec_intern(&sp)
            if c.spec == NULL:
                raise MemoryError()
            for cid, offset, length in slices:
                h = chunks[cid]
                if (offset < 0 or length < 1 or offset + length > h._c.n_rows or
                        h._c.row_bytes != (FR_VAR_ROWS if fr_spec_is_var(c.spec)
                                           else c.spec.row_bytes)):
                    raise errors.DataLossError(
                        f"item {key}: slice ({offset}, {length}) does not fit "
                        f"chunk {h._c.key}")
                for r in range(offset, offset + length):
                    fr_trajectory_push_row(t, ci, h._c, r)
            ci += 1
    except BaseException:
        fr_trajectory_release(t)
        raise
    rc = fr_table_restore_item(table._t, key, priority, times_sampled,
                               <uint64_t><size_t>t)
    if rc != FR_OK:
        fr_trajectory_release(t)
        _raise_for_status(rc, table._ctx(key, priority), None if rc != FR_EINVAL
                          else "duplicate key or table full")


def restore_counters(TableCore table, int64_t inserts, int64_t samples,
                     int64_t deletes, dict stats) -> None:
    cdef fr_table_stats st
    memset(&st, 0, sizeof(st))
    st.num_inserts = stats.get("num_inserts", 0)
    st.num_updates = stats.get("num_updates", 0)
    st.num_samples = stats.get("num_samples", 0)
    st.num_unique_samples = stats.get("num_unique_samples", 0)
    st.num_deletes = stats.get("num_deletes", 0)
    st.num_evictions = stats.get("num_evictions", 0)
    st.num_expired = stats.get("num_expired", 0)
    fr_table_restore_counters(table._t, inserts, samples, deletes, &st)
