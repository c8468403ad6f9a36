# Reading a small numpy array or scalar without the buffer protocol.
#
# Exporting a buffer costs numpy 150-330 ns per value (array_getbuffer,
# _buffer_get_info, the format string), as much as the rest of an append
# of that value (callgrind of the writer-step loop, session 12: 660 of the
# 7,150 instructions of an append of three values).  The object layouts
# read here are numpy's public ABI (PyArrayObject_fields and the
# Py<Type>ScalarObject structs of ndarraytypes.h / arrayscalars.h, the same
# in numpy 1.x and 2.x), and _npfast_init checks them on live objects at
# import: any mismatch turns the fast path off and every value takes the
# buffer protocol as before.  Used by _step_put (_steps.pxi) for appends
# that keep the GIL only (no other thread can resize the array meanwhile;
# the caller's reference keeps it alive).  Included by _core.pyx after
# _steps.pxi (_NOGIL_MIN_BYTES, _SUPPORTED_KINDS).

from cpython.object cimport PyObject, Py_TYPE
from cpython.ref cimport Py_INCREF

cdef extern from *:
    """
    typedef struct {
        PyObject_HEAD
        char *data;
        int nd;
        Py_ssize_t *dimensions;
        Py_ssize_t *strides;
        PyObject *base;
        PyObject *descr;
        int flags;
    } fr_np_array_head;
    #define FR_NP_SCALAR_OFFSET sizeof(PyObject)
    """
    ctypedef struct fr_np_array_head:
        char *data
        int nd
        Py_ssize_t *dimensions
        PyObject *descr
        int flags
    size_t FR_NP_SCALAR_OFFSET


DEF _NP_C_CONTIGUOUS = 0x0001  # NPY_ARRAY_C_CONTIGUOUS
DEF _NP_FAST_TYPES = 16        # scalar types and dtypes remembered

cdef struct _NpKind:
    void *key        # a scalar type or a dtype object (referenced forever)
    char kind        # numpy kind ('f', 'i', 'u', 'b', 'c')
    int32_t itemsize

cdef bint _np_fast_arrays = False
cdef _NpKind _np_scalars[_NP_FAST_TYPES]
cdef int _np_n_scalars = 0
cdef _NpKind _np_dtypes[_NP_FAST_TYPES]
cdef int _np_n_dtypes = 0


cdef int _np_remember(_NpKind *table, int *n, object key, object dtype) except -1:
    """Add ``key`` with ``dtype``'s kind and size when it is a supported,
    native dtype and there is room; a reference to ``key`` is kept."""
    if n[0] >= _NP_FAST_TYPES or dtype.kind not in _SUPPORTED_KINDS \
            or not dtype.isnative or dtype.fields is not None:
        return 0
    Py_INCREF(key)
    table[n[0]] = _NpKind(<void *>key, ord(dtype.kind), dtype.itemsize)
    n[0] += 1
    return 0


cdef inline _NpKind *_np_find(_NpKind *table, int n, void *key) noexcept:
    cdef int k
    for k in range(n):
        if table[k].key == key:
            return &table[k]
    return NULL


cdef bint _np_layout_ok(object arr) noexcept:
    """Whether the array head read through fr_np_array_head matches what
    numpy reports for ``arr`` (a C-contiguous 2-d array)."""
    cdef fr_np_array_head *h = <fr_np_array_head *><PyObject *>arr
    try:
        return (<size_t>h.data == arr.__array_interface__["data"][0]
                and h.nd == arr.ndim and h.dimensions[0] == arr.shape[0]
                and h.dimensions[1] == arr.shape[1]
                and h.descr == <PyObject *>arr.dtype
                and (h.flags & _NP_C_CONTIGUOUS) != 0)
    except Exception:
        return False


cdef int _npfast_init() except -1:
    """Check the layouts on live objects; remember the scalar types whose
    value sits where arrayscalars.h puts it."""
    global _np_fast_arrays, _np_n_scalars
    _np_fast_arrays = _np_layout_ok(np.arange(6, dtype=np.float32).reshape(2, 3))
    # The usual ones first: a lookup walks the table in order.
    for t in (np.float32, np.int32, np.int64, np.float64, np.bool_, np.uint8,
              np.int8, np.int16, np.uint16, np.uint32, np.uint64, np.float16,
              np.complex64, np.complex128):
        x = t(1)
        if bytes((<char *><PyObject *>x)[FR_NP_SCALAR_OFFSET:
                                         FR_NP_SCALAR_OFFSET + x.itemsize]) \
                != x.tobytes():
            continue
        _np_remember(_np_scalars, &_np_n_scalars, t, x.dtype)
    return 0


cdef inline bint _np_fast_put(fr_spec *spec, const void **row, int64_t *nbytes,
                              object v) except -1:
    """Fill ``spec``, ``row`` and ``nbytes`` for a C-contiguous native array
    under 16 KiB or a numpy scalar of a remembered type; False when ``v`` is
    neither (the caller takes the buffer protocol)."""
    cdef PyObject *o = <PyObject *>v
    cdef fr_np_array_head *h
    cdef _NpKind *k
    cdef int d
    cdef int64_t n
    if type(v) is _ndarray:
        if not _np_fast_arrays:
            return False
        h = <fr_np_array_head *>o
        if not (h.flags & _NP_C_CONTIGUOUS) or h.nd > FR_MAX_NDIM:
            return False
        k = _np_find(_np_dtypes, _np_n_dtypes, <void *>h.descr)
        if k == NULL:
            _np_remember(_np_dtypes, &_np_n_dtypes, v.dtype, v.dtype)
            k = _np_find(_np_dtypes, _np_n_dtypes, <void *>h.descr)
            if k == NULL:
                return False
        n = k.itemsize
        for d in range(h.nd):
            spec.shape[d] = h.dimensions[d]
            n *= h.dimensions[d]
        if n >= _NOGIL_MIN_BYTES:
            return False
        spec.ndim = h.nd
        row[0] = h.data
    else:
        k = _np_find(_np_scalars, _np_n_scalars, <void *>Py_TYPE(v))
        if k == NULL:
            return False
        n = k.itemsize
        spec.ndim = 0
        row[0] = (<char *>o) + FR_NP_SCALAR_OFFSET
    spec.dtype = k.kind
    spec.itemsize = k.itemsize
    spec.row_bytes = n
    nbytes[0] = n
    return True


def _npfast_state():
    """(whether arrays take the fast path, the scalar types that do): for
    the tests."""
    return _np_fast_arrays, [<object>_np_scalars[k].key for k in range(_np_n_scalars)]
