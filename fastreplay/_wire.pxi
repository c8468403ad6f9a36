# Items and chunks in the transport's binary form (fastreplay/net): a
# client packs the oldest items of a staging queue into record arrays and
# their chunks' bytes (this file); the server checks every record and
# inserts the items (_wire_insert.pxi).  Python touches each call, not each
# item.  Included by _core.pyx after _checkpoint.pxi.
# Needs: _table.pxi (TableCore), _codec.pxi (ChunkStore), _checkpoint.pxi
# (ChunkHandle, _spec_tuple, _spec_kind_ok).

from libc.stdlib cimport realloc

ITEM_DTYPE = np.dtype([("key", "<u8"), ("priority", "<f8"), ("structure", "<i4"),
                       ("n_columns", "<i4")])
COLUMN_DTYPE = np.dtype([("spec", "<i4"), ("squeeze", "<i4"), ("n_slices", "<i4")])
SLICE_DTYPE = np.dtype([("chunk", "<u8"), ("offset", "<i4"), ("length", "<i4")])
CHUNK_DTYPE = np.dtype([("key", "<u8"), ("episode_id", "<u8"), ("first_step", "<i8"),
                        ("last_step", "<i8"), ("row_bytes", "<i8"), ("n_rows", "<i4"),
                        ("compressed", "<i4"), ("stored_bytes", "<i8"), ("at", "<i8")])

cdef packed struct _WItem:
    uint64_t key
    double priority
    int32_t structure
    int32_t n_columns

cdef packed struct _WCol:
    int32_t spec
    int32_t squeeze
    int32_t n_slices

cdef packed struct _WSlice:
    uint64_t chunk
    int32_t offset
    int32_t length

cdef packed struct _WChunk:
    uint64_t key
    uint64_t episode_id
    int64_t first_step
    int64_t last_step
    int64_t row_bytes
    int32_t n_rows
    int32_t compressed
    int64_t stored_bytes
    int64_t at

# At most this many columns per item and slices per column on the wire.
DEF _WIRE_MAX_COLUMNS = 1 << 16
DEF _WIRE_MAX_SLICES = 1 << 20


# Merged chunks (pack_merged): a server's per-chunk work (restore, map,
# free) fell from ~4.0 to ~0.7 us a step of one-item-a-step writers with 64
# (wr.py, session 17); more rows would keep more rows alive for one item
# under a non-FIFO remover, for little more gain.
DEF _MERGE_ROWS = 64  # rows of a merged chunk at most
DEF _MERGE_PART_BYTES = 1024  # only chunks this small are merged
DEF _MERGE_BYTES = 1 << 16  # bytes of a merged chunk at most
DEF _WIRE_SPEC_CACHE = 64  # specs export_wire looks up without a dict


cdef struct _PtrSet:
    # Open addressing over pointers (NULL = empty), at most half full; each
    # pointer's index (the order it was first added in).
    void **slots
    int32_t *idx
    size_t mask


cdef int _ptrset_init(_PtrSet *p, int64_t n) except -1:
    cdef size_t cap = 16
    while cap < <size_t>(2 * n):
        cap *= 2
    p.slots = <void **>calloc(cap, sizeof(void *))
    p.idx = <int32_t *>malloc(cap * sizeof(int32_t))
    if p.slots == NULL or p.idx == NULL:
        raise MemoryError()
    p.mask = cap - 1
    return 0


cdef inline int32_t _ptrset_index(_PtrSet *p, void *x, int32_t fresh) noexcept nogil:
    """The index of x; x is added with index ``fresh`` when new."""
    cdef size_t h = (<size_t>x >> 4) * <size_t>0x9E3779B97F4A7C15ULL
    cdef size_t k = (h >> 17) & p.mask
    while p.slots[k] != NULL:
        if p.slots[k] == x:
            return p.idx[k]
        k = (k + 1) & p.mask
    p.slots[k] = x
    p.idx[k] = fresh
    return fresh


cdef void *_records(object arr, object dtype, str what) except NULL:
    """The data of a record array of ``dtype`` (FrameError-style
    DataLossError when it is not one)."""
    if type(arr) is not np.ndarray or arr.dtype != dtype or arr.ndim != 1:
        raise errors.DataLossError(f"{what} are not records of {dtype}")
    if not arr.flags.c_contiguous:
        raise errors.DataLossError(f"{what} are not contiguous")
    return <void *><size_t>arr.ctypes.data if len(arr) else <void *>&_EMPTY


cdef struct _Export:
    # What export_wire's loop fills (arrays allocated by the caller).
    _WItem *iv
    _WCol *cv
    _WSlice *sv
    uint64_t *kv      # per distinct chunk: its key
    int32_t *xv       # per slice: its chunk's index
    int64_t *uv       # per distinct chunk: the slices naming it
    int64_t *tv       # per distinct chunk: the item column that named it first
    fr_chunk **held   # per distinct chunk: retained
    const fr_spec *spec[_WIRE_SPEC_CACHE]  # the first distinct specs
    int32_t n_spec
    int64_t *missed   # columns whose spec is not among them (resolved after) ...
    const fr_spec **missed_spec  # ... and their specs
    int64_t n_missed
    int64_t n_keys


cdef void _export_fill(const fr_item *buf, int64_t m, _Export *e,
                       _PtrSet *seen) noexcept nogil:
    """export_wire's loop over the items, without the GIL: it was ~24% of
    an outbox thread whose writer thread waited for the GIL (session 18)."""
    cdef int64_t i, n_cols = 0, n_slices = 0
    cdef const fr_trajectory *t
    cdef const fr_slice *s
    cdef int32_t ci, si, sid, j
    for i in range(m):
        t = <const fr_trajectory *><size_t>buf[i].payload
        e.iv[i].key, e.iv[i].priority = buf[i].key, buf[i].priority
        e.iv[i].structure, e.iv[i].n_columns = t.structure_id, t.n_columns
        for ci in range(t.n_columns):
            # Interned specs: a handful of pointers (more resolved after).
            for sid in range(e.n_spec):
                if e.spec[sid] == t.columns[ci].spec:
                    break
            else:
                if e.n_spec < _WIRE_SPEC_CACHE:
                    sid = e.n_spec
                    e.spec[sid] = t.columns[ci].spec
                    e.n_spec += 1
                else:
                    sid = -1
                    e.missed[e.n_missed] = n_cols
                    e.missed_spec[e.n_missed] = t.columns[ci].spec
                    e.n_missed += 1
            e.cv[n_cols].spec = sid
            e.cv[n_cols].squeeze = t.columns[ci].squeeze
            e.cv[n_cols].n_slices = t.columns[ci].n_slices
            n_cols += 1
            for si in range(t.columns[ci].first_slice,
                            t.columns[ci].first_slice + t.columns[ci].n_slices):
                s = &t.slices[si]
                e.sv[n_slices].chunk = s.chunk.key
                e.sv[n_slices].offset, e.sv[n_slices].length = s.offset, s.length
                j = _ptrset_index(seen, s.chunk, <int32_t>e.n_keys)
                e.xv[n_slices] = j
                n_slices += 1
                if j == e.n_keys:
                    fr_chunk_retain(s.chunk)
                    e.held[e.n_keys] = s.chunk
                    e.kv[e.n_keys] = s.chunk.key
                    # Chunks of the same item column may merge (pack_merged).
                    e.tv[e.n_keys] = (<int64_t>t.structure_id << 32) | ci
                    e.n_keys += 1
                e.uv[j] += 1


def export_wire(TableCore table not None, int64_t max_items, bint take=False) -> tuple:
    """``(items, columns, slices, specs, chunks, chunk_keys)`` of the oldest
    ``max_items`` items of ``table`` (insertion order): record arrays of
    ITEM_DTYPE, COLUMN_DTYPE and SLICE_DTYPE (slices name chunks by key),
    the distinct column specs as ``(kind, itemsize, shape)``, a ChunkHandle
    per distinct chunk and their keys (uint64, in the same order).  With
    ``take``, the items leave the table as sampling them would (a queue:
    Fifo sampler, max_times_sampled 1; ValueError for another table)."""
    cdef int64_t cap = min(fr_table_size(table._t), max(max_items, 0)) + 16, n, i
    cdef int64_t want = min(cap, max(max_items, 0))
    cdef fr_item *buf = <fr_item *>malloc(cap * sizeof(fr_item))
    if buf == NULL:
        raise MemoryError()
    if take:
        with nogil:
            n = fr_table_take_oldest(table._t, buf, want)
        if n < 0:
            free(buf)
            raise ValueError(f"table '{table.name}' is not a queue (a Fifo sampler "
                             "and max_times_sampled 1): its items cannot be taken")
    else:  # a Fifo table (a staging queue) gives its oldest items in order
        n = fr_table_items_oldest(table._t, buf, want)
    while n < 0:  # fr_table_items copies (and retains) nothing when cap is short
        n = fr_table_items(table._t, buf, cap)
        if n <= cap:
            break
        free(buf)
        cap = n + 16
        buf = <fr_item *>malloc(cap * sizeof(fr_item))
        if buf == NULL:
            raise MemoryError()
        n = -1
    cdef int64_t m = min(n, max(max_items, 0)), n_cols = 0, n_slices = 0, k
    cdef fr_trajectory *t
    cdef int32_t ci
    cdef _Export e
    cdef _PtrSet seen
    cdef uint64_t[::1] kv
    cdef int32_t[::1] xv
    cdef int64_t[::1] uv, tv
    cdef ChunkList chunks = ChunkList()
    memset(&e, 0, sizeof(e))
    seen.slots, seen.idx = NULL, NULL
    try:
        for i in range(m):
            t = <fr_trajectory *><size_t>buf[i].payload
            if t == NULL:
                raise ValueError(f"table '{table.name}': item {buf[i].key} has no data")
            n_cols += t.n_columns
            for ci in range(t.n_columns):
                n_slices += t.columns[ci].n_slices
        items = np.empty(m, ITEM_DTYPE)
        columns = np.empty(n_cols, COLUMN_DTYPE)
        slices = np.empty(n_slices, SLICE_DTYPE)
        keys = np.empty(n_slices, np.uint64)
        e.iv = <_WItem *>_records(items, ITEM_DTYPE, "items")
        e.cv = <_WCol *>_records(columns, COLUMN_DTYPE, "columns")
        e.sv = <_WSlice *>_records(slices, SLICE_DTYPE, "slices")
        kv = keys
        chunks._slice_index = np.empty(n_slices, np.int32)
        chunks._uses = np.zeros(n_slices, np.int64)
        chunks._tags = np.empty(n_slices, np.int64)
        xv, uv, tv = chunks._slice_index, chunks._uses, chunks._tags
        if n_slices:
            e.kv, e.xv, e.uv, e.tv = &kv[0], &xv[0], &uv[0], &tv[0]
        e.held = <fr_chunk **>malloc(max(n_slices, 1) * sizeof(fr_chunk *))
        e.missed = <int64_t *>malloc(max(n_cols, 1) * sizeof(int64_t))
        e.missed_spec = <const fr_spec **>malloc(max(n_cols, 1) * sizeof(fr_spec *))
        if e.held == NULL or e.missed == NULL or e.missed_spec == NULL:
            raise MemoryError()
        _ptrset_init(&seen, n_slices)
        with nogil:
            _export_fill(buf, m, &e, &seen)
        # The list owns the retained chunks from here (released with it).
        chunks._c, chunks._n, chunks._cap = e.held, e.n_keys, max(n_slices, 1)
        e.held = NULL
        specs = [_spec_tuple(e.spec[k]) for k in range(e.n_spec)]
        if e.n_missed:  # more distinct specs than the loop looks up
            spec_ids = {<size_t>e.spec[k]: k for k in range(e.n_spec)}
            for k in range(e.n_missed):
                sid = spec_ids.get(<size_t>e.missed_spec[k], -1)
                if sid < 0:
                    sid = spec_ids[<size_t>e.missed_spec[k]] = len(specs)
                    specs.append(_spec_tuple(e.missed_spec[k]))
                e.cv[e.missed[k]].spec = sid
        chunks._mark_sealed()
    finally:
        free(seen.slots)
        free(seen.idx)
        free(e.missed)
        free(e.missed_spec)
        if e.held != NULL:
            free(e.held)
        with nogil:
            for i in range(n):
                fr_trajectory_payload_release(NULL, buf[i].payload)
            free(buf)
    return items, columns, slices, specs, chunks, keys[:e.n_keys]


cdef class ChunkList:
    """Retained chunks as a C array (what ``export_wire`` gives): indexing
    gives a ChunkHandle, ``chunk_bytes`` and ``pack_chunks`` read them
    without a Python object per chunk.  From export_wire it also knows
    which of its chunks each exported slice names and which chunks are
    sealed (``pack_merged``)."""

    cdef fr_chunk **_c
    cdef Py_ssize_t _n, _cap
    # From export_wire (None otherwise): per slice, the index of its chunk;
    # per chunk, the slices naming it, the item column (structure << 32 |
    # column) that named it first and whether it is sealed.
    cdef object _slice_index, _uses, _tags, _sealed

    def __cinit__(self):
        self._c, self._n, self._cap = NULL, 0, 0

    def __dealloc__(self):
        # Without the GIL: the last references of a frame's chunks (one per
        # column a step for one-item-a-step writers) free them, ~17% of an
        # outbox thread whose writer thread waits for the GIL (session 18).
        cdef Py_ssize_t k, n = self._n
        cdef fr_chunk **c = self._c
        with nogil:
            for k in range(n):
                fr_chunk_release(c[k])
            free(c)

    cdef int _adopt(self, fr_chunk *c) except -1:
        """Append c, taking over one reference (released on failure)."""
        cdef fr_chunk **grown
        if self._n == self._cap:
            grown = <fr_chunk **>realloc(self._c, max(16, 2 * self._cap)
                                         * sizeof(fr_chunk *))
            if grown == NULL:
                fr_chunk_release(c)
                raise MemoryError()
            self._c, self._cap = grown, max(16, 2 * self._cap)
        self._c[self._n] = c
        self._n += 1
        return 0

    def __len__(self) -> int:
        return self._n

    cdef int _mark_sealed(self) except -1:
        """A chunk is sealed when the exported slices hold every reference
        to it but this list's: no writer history or other staged item can
        name it again, so it may travel merged with others and the receiver
        needs it only for these items.  Only small raw chunks of fixed-size
        rows qualify (merging big or compressed ones saves nothing)."""
        cdef Py_ssize_t k, n = self._n
        cdef fr_chunk *c
        cdef fr_chunk **cs = self._c
        cdef const int64_t[::1] uv = self._uses
        sealed = np.zeros(n, np.bool_)
        cdef unsigned char[::1] sv = sealed.view(np.uint8)
        with nogil:
            for k in range(n):
                c = cs[k]
                sv[k] = (fr_chunk_ready(c) and not c.compressed and c.row_bytes > 0 and
                         c.stored_bytes <= _MERGE_PART_BYTES and
                         c.stored_bytes == c.n_rows * c.row_bytes and
                         fr_chunk_refs(c) == uv[k] + 1)
        self._sealed = sealed
        return 0

    @property
    def sealed(self):
        """Per chunk, whether it is sealed (all False unless export_wire
        made the list)."""
        return self._sealed if self._sealed is not None else np.zeros(self._n, np.bool_)

    def __getitem__(self, Py_ssize_t k) -> ChunkHandle:
        if not 0 <= k < self._n:
            raise IndexError(f"chunk index {k} out of range for {self._n} chunks")
        fr_chunk_retain(self._c[k])
        return ChunkHandle.adopt(self._c[k])


cdef fr_chunk **_chunk_array(object handles, object index, Py_ssize_t *n) except NULL:
    """The chunks of ``handles`` (a ChunkList or a list of ChunkHandle),
    ``handles[index]`` when an index array is given, as a malloc'd array of
    borrowed pointers (``handles`` keeps them alive; the caller frees it)."""
    cdef Py_ssize_t k, m, total = len(handles)
    cdef const Py_ssize_t[::1] iv
    cdef ChunkList cl = handles if type(handles) is ChunkList else None
    if index is not None:
        iv = np.ascontiguousarray(index, dtype=np.intp).reshape(-1)
        m = iv.shape[0]
    else:
        m = total
    cdef fr_chunk **out = <fr_chunk **>malloc(max(m, 1) * sizeof(fr_chunk *))
    if out == NULL:
        raise MemoryError()
    try:
        for k in range(m):
            j = iv[k] if index is not None else k
            if not 0 <= j < total:
                raise IndexError(f"chunk index {j} out of range for {total} chunks")
            out[k] = cl._c[j] if cl is not None else (<ChunkHandle?>handles[j])._c
    except BaseException:
        free(out)
        raise
    n[0] = m
    return out


def chunk_bytes(handles, index=None) -> int:
    """The stored bytes of the chunks of ``handles`` (a ChunkList or a list
    of ChunkHandle; ``handles[index]`` when an index array is given): what
    ``pack_chunks`` writes."""
    cdef Py_ssize_t k, n
    cdef int64_t total = 0
    cdef fr_chunk **c = _chunk_array(handles, index, &n)
    for k in range(n):
        total += c[k].stored_bytes
    free(c)
    return total


def pack_chunks(handles, index=None, out=None) -> tuple:
    """``(records, data)``: a CHUNK_DTYPE record per chunk of ``handles``
    (as ``chunk_bytes`` takes them) and their stored bytes back to back
    (``at`` is each one's offset in data), in ``out`` (a writable buffer of
    ``chunk_bytes`` bytes or more, e.g. a region of a shared segment) when
    given, else in a new bytearray."""
    records, data, _ = _pack(handles, index, out, None)
    return records, data


def pack_merged(ChunkList handles not None, index, slices, out=None) -> tuple:
    """``(records, data, transient)``: ``pack_chunks`` of an export's
    chunks (``export_wire``), except that its sealed chunks
    (``ChunkList.sealed``) of one item column and episode with consecutive
    steps travel as one chunk of up to 64 rows (the first one's key).
    ``slices`` (the export's slice records) are rewritten in place to name
    the merged chunks and rows; ``transient`` are the keys of the chunks
    made of sealed ones, which the receiver needs only for these items.

    A writer making one item per step makes a one-row chunk per column a
    step: merged, the server stores, maps and frees a chunk per 64 rows."""
    if handles._slice_index is None:
        raise ValueError("pack_merged takes the chunks of an export (export_wire)")
    return _pack(handles, index, out, slices)


DEF _MERGE_OPEN = 16  # item columns merged at once (more close runs early)


cdef struct _Run:
    int64_t tag
    fr_chunk *first
    fr_chunk *last
    int64_t rows, nbytes, at


cdef tuple _pack(handles, index, out, slices):
    """pack_chunks, merging the sealed chunks when slices are given.

    Runs are formed in export order (the items' order, so a column's
    chunks come in step order), a run open per item column, without
    sorting: sorting the chunks by column and step was ~11% of a remote
    writer's time (perf, session 17)."""
    cdef Py_ssize_t k, p, j, n, nj, nc = 0, n_runs = 0, r = 0
    cdef int64_t total = 0
    cdef fr_chunk **c = _chunk_array(handles, index, &n)
    cdef fr_chunk *h
    cdef _WChunk *rv
    cdef _WSlice *sv
    cdef unsigned char[::1] dv
    cdef _Run *runs = NULL
    cdef int32_t *run_of = NULL  # per handle: its run, -1 when not merged
    cdef Py_ssize_t *pos_of = NULL  # per handle: its place in c, -1 if absent
    cdef int32_t open_run[_MERGE_OPEN]
    cdef int n_open = 0, o, evict = 0
    cdef const Py_ssize_t[::1] jv
    cdef const unsigned char[::1] sd
    cdef const int64_t[::1] tv
    cdef const int32_t[::1] xv
    cdef int32_t[::1] rowoff
    cdef unsigned char *dp
    cdef uint64_t *tp = NULL
    cdef uint64_t[::1] tview
    cdef Py_ssize_t ns = 0
    cdef bint merging
    cdef ChunkList cl = handles if slices is not None else None
    try:
        for k in range(n):
            total += c[k].stored_bytes
        if cl is not None:  # the sealed ones, in runs
            sv = <_WSlice *>_records(slices, SLICE_DTYPE, "slices")
            if len(slices) != cl._slice_index.shape[0]:
                raise ValueError("pack_merged: the slices are not the export's")
            nj = cl._n
            jv = (np.arange(n, dtype=np.intp) if index is None else
                  np.ascontiguousarray(index, dtype=np.intp).reshape(-1))
            sd, tv = cl.sealed.view(np.uint8), cl._tags
            runs = <_Run *>malloc(max(n, 1) * sizeof(_Run))
            run_of = <int32_t *>malloc(max(nj, 1) * sizeof(int32_t))
            pos_of = <Py_ssize_t *>malloc(max(nj, 1) * sizeof(Py_ssize_t))
            if runs == NULL or run_of == NULL or pos_of == NULL:
                raise MemoryError()
            rowoff = np.full(nj, -1, np.int32)  # row of a merged chunk in its run
            with nogil:  # this and the copies below: ~9% of an outbox thread
                for j in range(nj):
                    run_of[j], pos_of[j] = -1, -1
                for p in range(n):
                    pos_of[jv[p]] = p
                for j in range(nj):
                    p = pos_of[j]
                    if p < 0 or not sd[j]:
                        continue
                    h = c[p]
                    nc += 1
                    for o in range(n_open):
                        if runs[open_run[o]].tag == tv[j]:
                            break
                    else:
                        o = -1
                    if o >= 0 and not _merge_breaks(&runs[open_run[o]], h):
                        k = open_run[o]
                    else:
                        k = n_runs
                        n_runs += 1
                        runs[k] = _Run(tv[j], h, h, 0, 0, 0)
                        if o < 0:  # a new column: a free slot, else the next one
                            if n_open < _MERGE_OPEN:
                                o = n_open
                                n_open += 1
                            else:
                                o = evict
                                evict = (evict + 1) % _MERGE_OPEN
                        open_run[o] = <int32_t>k
                    run_of[j], rowoff[j] = <int32_t>k, <int32_t>runs[k].rows
                    runs[k].last = h
                    runs[k].rows += h.n_rows
                    runs[k].nbytes += h.stored_bytes
        records = np.empty(n - nc + n_runs, CHUNK_DTYPE)
        transient = np.empty(n_runs, np.uint64)
        if out is None:
            data = bytearray(total)
        else:
            data = out
            if len(memoryview(out).cast("B")) < total:
                raise ValueError(f"pack_chunks: {total} bytes do not fit the buffer "
                                 "given")
        rv = <_WChunk *>_records(records, CHUNK_DTYPE, "chunks")
        dv = data if total else bytearray(1)
        dp = &dv[0]
        total = 0
        merging = cl is not None
        if merging:
            xv = cl._slice_index
            ns = len(slices)
            if n_runs:
                tview = transient
                tp = &tview[0]
        with nogil:
            for p in range(n):  # each chunk not merged: as it is
                if merging and sd[jv[p]]:
                    continue
                h = c[p]
                rv[r] = _WChunk(h.key, h.episode_id, h.first_step, h.last_step, h.row_bytes,
                                h.n_rows, h.compressed, h.stored_bytes, total)
                if h.stored_bytes:
                    memcpy(dp + total, h.data, h.stored_bytes)
                total += h.stored_bytes
                r += 1
            if merging:
                for k in range(n_runs):  # each run: one chunk of its rows
                    h = runs[k].first
                    rv[r + k] = _WChunk(h.key, h.episode_id, h.first_step,
                                        runs[k].last.last_step, h.row_bytes, runs[k].rows,
                                        0, runs[k].nbytes, total)
                    tp[k] = h.key
                    runs[k].at = total
                    total += runs[k].nbytes
                for j in range(nj):  # the rows, each in its run's place
                    if run_of[j] >= 0:
                        h = c[pos_of[j]]
                        memcpy(dp + runs[run_of[j]].at, h.data, h.stored_bytes)
                        runs[run_of[j]].at += h.stored_bytes
                for k in range(ns):
                    j = xv[k]
                    if run_of[j] >= 0:
                        sv[k].chunk = runs[run_of[j]].first.key
                        sv[k].offset += rowoff[j]
    finally:
        free(c)
        free(runs)
        free(run_of)
        free(pos_of)
    return records, data, transient


cdef inline bint _merge_breaks(const _Run *run, const fr_chunk *h) noexcept nogil:
    """Whether chunk h cannot follow the rows of run."""
    return (run.last.row_bytes != h.row_bytes or run.last.episode_id != h.episode_id
            or h.first_step != run.last.last_step + 1
            or run.rows + h.n_rows > _MERGE_ROWS or run.nbytes + h.stored_bytes > _MERGE_BYTES)
