# Export and restore of tables for checkpoints (fastreplay/checkpoint.py
# writes and reads the files).  Included by _core.pyx.
# Needs: _table.pxi (TableCore), _codec.pxi (ChunkStore).

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
    def key(self) -> int:
        return self._c.key

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


cdef object _layout(int32_t squeeze):
    """A column's squeeze flag as exported: False, True or FR_ROWS_LAST_AXIS
    (a frame stack, csrc/frames.h)."""
    return squeeze if squeeze == FR_ROWS_LAST_AXIS else bool(squeeze)


cdef tuple _spec_tuple(const fr_spec *s):
    return (chr(s.dtype), s.itemsize, _shape_of(s))


def export_items(TableCore table not None) -> tuple:
    """``(items, chunks)``: items in insertion order as ``(key, priority,
    times_sampled, columns, structure_id)`` with columns ``(spec, squeeze, slices)`` and
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
                    columns.append((_spec_tuple(c.spec), _layout(c.squeeze), slices))
            items.append((buf[i].key, buf[i].priority, buf[i].times_sampled,
                          columns if t != NULL else None,
                          t.structure_id if t != NULL else 0))
    finally:
        for i in range(n):
            fr_trajectory_payload_release(NULL, buf[i].payload)
        free(buf)
    return items, chunks


# row_bytes of chunks of variable-length (string and bytes) rows.
VAR_ROWS = FR_VAR_ROWS

# Numpy kinds a column may have, with the item sizes numpy gives them.
_COLUMN_KINDS = {"b": (1,), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8),
                 "f": (2, 4, 8, 16), "c": (8, 16, 32),
                 "S": (0,)}  # strings: variable-length rows


def _spec_kind_ok(kind, itemsize) -> bool:
    """Whether a stored column spec's (kind, itemsize) is one fastreplay
    writes and reads (raw bytes, or for 'S' variable-length rows that
    are parsed, never trusted): the ONE place that decides which column
    kinds a checkpoint may declare.  Object columns are never materialized
    from raw bytes."""
    if type(kind) is not str or type(itemsize) is not int:
        return False
    sizes = _COLUMN_KINDS.get(kind)
    if sizes is None or itemsize not in sizes:
        return False
    try:
        dt = np.dtype(f"{kind}{itemsize}")
    except TypeError:
        return False
    return dt.kind == kind and dt.itemsize == itemsize and not dt.hasobject


def restore_chunk(ChunkStore store not None, dict meta, bytes data) -> ChunkHandle:
    """A ready chunk rebuilt from its metadata and stored bytes (every size
    checked against ``data`` before anything is allocated)."""
    if len(data) != meta["stored_bytes"]:
        raise errors.DataLossError(f"chunk {meta['key']}: {len(data)} bytes stored, "
                                   f"{meta['stored_bytes']} expected")
    for name in ("key", "episode_id"):
        if not 0 <= meta[name] < 2**64:
            raise errors.DataLossError(f"chunk {meta['key']}: bad {name}")
    for name in ("first_step", "last_step", "row_bytes"):
        if not -2**63 <= meta[name] < 2**63:
            raise errors.DataLossError(f"chunk {meta['key']}: bad {name}")
    if not 0 <= meta["n_rows"] < 2**31 or (meta["row_bytes"] < 0 and
                                           meta["row_bytes"] != FR_VAR_ROWS):
        raise errors.DataLossError(f"chunk {meta['key']}: bad size {meta}")
    cdef fr_chunk *c = fr_chunk_restore(
        store._s, meta["key"], meta["episode_id"], meta["first_step"],
        meta["last_step"], meta["row_bytes"], meta["n_rows"], meta["compressed"],
        <const char *>data, len(data))
    if c == NULL:
        raise errors.DataLossError(f"chunk {meta['key']} is inconsistent: {meta}")
    return ChunkHandle.adopt(c)


cdef fr_trajectory *_build_trajectory(uint64_t key, columns, dict chunks,
                                      int32_t structure_id) except NULL:
    """A new trajectory (one reference) over ``columns`` of slices into
    ``chunks`` (id -> ChunkHandle), as export_items describes them.  Every
    spec, slice and length is checked before it is allocated
    (DataLossError): checkpoints and network peers are not trusted."""
    cdef Py_ssize_t n_slices = 0
    cdef ChunkHandle h
    cdef int64_t row_bytes, rows
    if type(columns) is not list and type(columns) is not tuple:
        raise errors.DataLossError(f"item {key}: columns are not a list")
    for ci, column in enumerate(columns):
        try:
            spec, squeeze, slices = column
            kind, itemsize, shape = spec
            if squeeze not in (False, True, FR_ROWS_LAST_AXIS):  # 0, 1 or stacked
                raise ValueError
            shape = tuple(shape)
        except (TypeError, ValueError):
            raise errors.DataLossError(f"item {key}: column {ci} is malformed") from None
        if not _spec_kind_ok(kind, itemsize):
            raise errors.DataLossError(f"item {key}: column {ci} has unsupported "
                                       f"kind {kind!r} of {itemsize!r} bytes")
        if len(shape) > FR_MAX_NDIM or any(
                type(d) is not int or not 0 <= d < 2**40 for d in shape):
            raise errors.DataLossError(f"item {key}: column {ci} has a bad shape "
                                       f"{shape!r}")
        size = itemsize
        for d in shape:
            size *= d
        if size >= 2**40:
            raise errors.DataLossError(f"item {key}: column {ci} rows are too large")
        # String columns live on variable-length chunks only.
        row_bytes = FR_VAR_ROWS if kind == "S" else size
        rows = 0
        for sl in slices:
            try:
                cid, offset, length = sl
            except (TypeError, ValueError):
                raise errors.DataLossError(
                    f"item {key}: column {ci} has a malformed slice") from None
            h = chunks.get(cid)
            if h is None:
                raise errors.DataLossError(f"item {key}: unknown chunk {cid}")
            if (type(offset) is not int or type(length) is not int or offset < 0 or
                    length < 1 or offset + length > h._c.n_rows or
                    h._c.row_bytes != row_bytes):
                raise errors.DataLossError(
                    f"item {key}: slice ({offset}, {length}) does not fit "
                    f"chunk {h._c.key}")
            rows += length
            n_slices += 1
        if rows < 1 or rows >= 2**31 or (squeeze == 1 and rows != 1):
            raise errors.DataLossError(f"item {key}: column {ci} has {rows} rows"
                                       + (" but is squeezed" if squeeze else ""))
    if not 0 < len(columns) < 2**31 or n_slices >= 2**31:
        raise errors.DataLossError(f"item {key}: {len(columns)} columns")
    cdef fr_trajectory *t = fr_trajectory_new(len(columns), max(n_slices, 1))
    if t == NULL:
        raise MemoryError()
    t.structure_id = structure_id
    cdef fr_traj_column *c
    cdef fr_spec sp
    cdef int32_t ci2 = 0
    try:
        for spec, squeeze, slices in columns:
            kind, itemsize, shape = spec
            c = &t.columns[ci2]
            c.squeeze = int(squeeze)
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
                fr_trajectory_push_slice(t, ci2, h._c, offset, length)
            ci2 += 1
    except BaseException:
        fr_trajectory_release(t)
        raise
    return t


def restore_item(TableCore table not None, uint64_t key, double priority,
                 int64_t times_sampled,
                 columns, dict chunks, int32_t structure_id=0) -> None:
    """Add a checkpointed item (see export_items) without touching the rate
    limiter.  Chunk ids refer to ``chunks`` (id -> ChunkHandle); ``columns``
    None restores an item without data.  Every spec, slice and length is
    checked before the trajectory is allocated (DataLossError)."""
    cdef int rc
    if columns is None:
        rc = fr_table_restore_item(table._t, key, priority, times_sampled, 0)
        if rc != FR_OK:
            _raise_for_status(rc, table._ctx(key, priority), None if rc != FR_EINVAL
                              else "duplicate key or table full")
        return
    cdef fr_trajectory *t = _build_trajectory(key, columns, chunks, structure_id)
    rc = fr_table_restore_item(table._t, key, priority, times_sampled,
                               <uint64_t><size_t>t)
    if rc != FR_OK:
        fr_trajectory_release(t)
        _raise_for_status(rc, table._ctx(key, priority), None if rc != FR_EINVAL
                          else "duplicate key or table full")


def restore_counters(TableCore table not None, int64_t inserts, int64_t samples,
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
    st.num_deleted_episodes = stats.get("num_deleted_episodes", 0)
    fr_table_restore_counters(table._t, inserts, samples, deletes, &st)
