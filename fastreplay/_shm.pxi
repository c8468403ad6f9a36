# Shared-memory segments for sampled batches (fastreplay/net, csrc/shm.h).
# Included by _core.pyx.  Needs nothing from earlier includes.

from cpython.buffer cimport PyBUF_WRITABLE
from libc.errno cimport errno
from libc.string cimport strerror


cdef class SharedSegment:
    """A mapped shared-memory segment: ``create`` makes a new one (mapped
    read-only: the client's side), ``attach`` maps an existing one
    read-write (the server's side).  The mapping lives as long as this
    object; ``unlink`` removes the name only."""

    cdef void *_p
    cdef size_t _size
    cdef Py_ssize_t _shape[1]
    cdef readonly str name
    cdef readonly bint writable

    def __cinit__(self):
        self._p = NULL
        self._size = 0

    def __dealloc__(self):
        fr_shm_unmap(self._p, self._size)

    @staticmethod
    def create(str name, size_t size, bint writable=False) -> SharedSegment:
        return SharedSegment._map(name, size, writable, True)

    @staticmethod
    def attach(str name, size_t size, bint writable=True) -> SharedSegment:
        return SharedSegment._map(name, size, writable, False)

    @staticmethod
    cdef SharedSegment _map(str name, size_t size, bint writable, bint create):
        cdef bytes raw = name.encode()
        if len(raw) >= FR_SHM_NAME_MAX:
            raise ValueError(f"shared-memory name {name!r} is too long")
        cdef const char *c_name = raw
        cdef void *p
        with nogil:
            p = (fr_shm_create(c_name, size, writable) if create
                 else fr_shm_attach(c_name, size, writable))
        if p == NULL:
            raise OSError(errno, f"shared memory {name!r} ({size} bytes): "
                                 f"{strerror(errno).decode()}")
        cdef SharedSegment s = SharedSegment.__new__(SharedSegment)
        s._p, s._size, s.name, s.writable = p, size, name, writable
        s._shape[0] = <Py_ssize_t>size
        return s

    @property
    def size(self) -> int:
        return self._size

    def unlink(self) -> None:
        """Remove the segment's name (its mappings stay valid)."""
        cdef bytes raw = self.name.encode()
        if fr_shm_unlink(raw) != 0:
            raise OSError(errno, f"unlink {self.name!r}: {strerror(errno).decode()}")

    def __getbuffer__(self, Py_buffer *view, int flags):
        if flags & PyBUF_WRITABLE and not self.writable:
            raise BufferError("this side maps the segment read-only")
        # Field by field, as _PooledBuffer does (see _outpool.pxi).
        view.buf = self._p
        view.obj = self
        view.len = self._shape[0]
        view.readonly = not self.writable
        view.itemsize = 1
        view.format = NULL
        if flags & PyBUF_FORMAT:
            view.format = b"B"
        view.ndim = 1
        view.shape = self._shape if flags & PyBUF_ND else NULL
        view.strides = &view.itemsize if flags & PyBUF_STRIDES else NULL
        view.suboffsets = NULL
        view.internal = NULL
