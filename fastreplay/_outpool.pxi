# Reused output memory for large sample_batch results.  Included by
# _core.pyx before _table.pxi.
# Needs: nothing from earlier includes.
#
# A batch of 256 Atari items is 36 MB.  Fresh from the allocator, every
# batch faulted in and zeroed those pages again: under perf, clear_page and
# the faults were ~35% of sample_batch.  Outputs of _POOL_MIN_BYTES or more
# therefore live in _PooledBuffer objects.  The numpy arrays handed out keep
# their buffer alive, and when the last array dies the memory goes back to a
# small pool for the next batch, instead of to the OS.

from cpython.buffer cimport PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES

DEF _POOL_MIN_BYTES = 1 << 20
DEF _POOL_SLOTS = 4
DEF _POOL_MAX_BYTES = 512 << 20  # pooled in all, at most

cdef void *_pool_ptr[_POOL_SLOTS]
cdef size_t _pool_size[_POOL_SLOTS]
cdef size_t _pool_total = 0


cdef void *_pool_take(size_t n, size_t *size) noexcept:
    """A pooled block of at least n bytes (at most twice that; its size in
    *size), or NULL.  Called with the GIL, which guards the pool."""
    global _pool_total
    cdef int i, best = -1
    for i in range(_POOL_SLOTS):
        if (_pool_ptr[i] != NULL and n <= _pool_size[i] <= 2 * n and
                (best < 0 or _pool_size[i] < _pool_size[best])):
            best = i
    if best < 0:
        return NULL
    cdef void *p = _pool_ptr[best]
    size[0] = _pool_size[best]
    _pool_ptr[best] = NULL
    _pool_total -= _pool_size[best]
    return p


cdef void _pool_give(void *p, size_t n) noexcept:
    """Keep block p of n bytes (as allocated) for reuse, or free it when the
    pool is full."""
    global _pool_total
    cdef int i, slot = -1
    for i in range(_POOL_SLOTS):
        if _pool_ptr[i] == NULL:
            slot = i
            break
    if slot < 0 or _pool_total + n > _POOL_MAX_BYTES:
        fr_free_large(p, n)
        return
    _pool_ptr[slot] = p
    _pool_size[slot] = n
    _pool_total += n


def _pool_stats() -> tuple:
    """(blocks, bytes) held by the output pool, for tests."""
    cdef int i, blocks = 0
    for i in range(_POOL_SLOTS):
        blocks += _pool_ptr[i] != NULL
    return blocks, _pool_total


def _pool_clear() -> None:
    """Free every pooled block (tests start from an empty pool)."""
    global _pool_total
    cdef int i
    for i in range(_POOL_SLOTS):
        if _pool_ptr[i] != NULL:
            fr_free_large(_pool_ptr[i], _pool_size[i])
            _pool_ptr[i] = NULL
    _pool_total = 0


cdef class _PooledBuffer:
    """n writable bytes from the pool, exposed through the buffer protocol;
    returned to the pool when the last array viewing them is freed."""

    cdef void *_p
    cdef size_t _n     # bytes exposed
    cdef size_t _size  # bytes allocated (what fr_free_large needs)
    cdef Py_ssize_t _shape[1]

    def __cinit__(self, size_t n):
        self._n = self._size = n
        self._shape[0] = <Py_ssize_t>n
        self._p = _pool_take(n, &self._size)
        if self._p == NULL:
            self._p = fr_alloc_large(n)
            if self._p == NULL:
                raise MemoryError()

    def __getbuffer__(self, Py_buffer *view, int flags):
        # Filled field by field: Cython's wrapper has set view.obj to None
        # (a reference it releases only if view.obj is still None), which
        # PyBuffer_FillInfo would overwrite and leak.
        view.buf = self._p
        view.obj = self
        view.len = self._shape[0]
        view.readonly = 0
        view.itemsize = 1
        view.format = NULL
        if flags & PyBUF_FORMAT:
            view.format = b"B"
        view.ndim = 1
        view.shape = self._shape if flags & PyBUF_ND else NULL
        view.strides = &view.itemsize if flags & PyBUF_STRIDES else NULL
        view.suboffsets = NULL
        view.internal = NULL

    def __dealloc__(self):
        if self._p != NULL:
            _pool_give(self._p, self._size)


cdef object _empty_output(tuple shape, object dtype):
    """np.empty(shape, dtype), in pooled memory when it is large."""
    cdef size_t nbytes = dtype.itemsize
    for d in shape:
        nbytes *= <size_t>d
    if nbytes < _POOL_MIN_BYTES:
        return np.empty(shape, dtype=dtype)
    return np.frombuffer(_PooledBuffer(nbytes), dtype=dtype).reshape(shape)
