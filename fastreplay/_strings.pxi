# String columns: encoding of appended values into cell blobs and decoding
# of stored blobs back into numpy arrays.  Included by _core.pyx.
# Needs: nothing from earlier includes (_shape_of, _ndarray: _core.pyx).
#
# As in Reverb (where every one of them is a tf.string), Python str and
# bytes, numpy str_ and bytes_ arrays of any width and object arrays of
# str and/or bytes are ONE column kind, spec dtype 'S', whose values are
# byte strings: str is stored as its UTF-8 (surrogates passed through), and
# str and bytes values may share a column.  itemsize and row_bytes are 0,
# so values of any width are the same column.  One cell of shape `shape`
# (N = prod(shape) elements) is one blob: N little-endian uint32 byte
# lengths, then the N elements' bytes.  Reads return numpy bytes_ arrays.
# The C core stores the blobs as the variable-length rows of chunks
# (csrc/chunk.h, FR_VAR_ROWS), chunked and compressed like fixed-size rows.
# Strings are not a hot path: this runs per call in Python-level Cython.
# Stored blobs (a checkpoint may be hostile) are parsed and bounds-checked,
# and only ever become bytes objects.

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize

_TEXT_KINDS = "USO"  # numpy kinds stored as string columns
_LENS = np.dtype("<u4")


cdef object _utf8(object x, object path):
    """An element of a string value as bytes (str as UTF-8)."""
    if isinstance(x, bytes):
        return x
    if isinstance(x, str):
        return x.encode("utf-8", "surrogatepass")
    raise TypeError(f"Unsupported value for column {path}: an object array must "
                    f"hold only str or bytes, got {type(x).__name__}; give a "
                    "numeric or bool array or a str/bytes value (writers also "
                    "take a nest, a dict, list or tuple, of such values)")


cdef tuple _encode_text(object v, object path):
    """``(shape, blob)`` of a str or bytes value, or of a numpy array of kind
    'U', 'S' or 'O' (whose objects must be str or bytes)."""
    if not isinstance(v, _ndarray):  # str, bytes, or an object array's element
        shape, items = (), [_utf8(v, path)]
    else:
        shape = tuple(v.shape)
        if len(shape) > FR_MAX_NDIM:
            raise ValueError(f"column {path}: expected at most {FR_MAX_NDIM} "
                             f"dimensions, got {len(shape)}")
        items = [_utf8(x, path) for x in v.ravel().tolist()]
    lens = [len(x) for x in items]
    if lens and max(lens) > 0xFFFFFFFF:
        raise ValueError(f"column {path}: a string element is longer than 4 GiB")
    blob = np.array(lens, dtype=_LENS).tobytes() + b"".join(items)
    return shape, blob


cdef int _column_blobs(fr_trajectory *t, int32_t col, list out) except -1:
    """Append the blobs of column ``col`` of a ready trajectory to ``out``
    (each slice's chunk is decoded once)."""
    cdef fr_traj_column *c = &t.columns[col]
    cdef fr_slice *s
    cdef int32_t si, r
    cdef int64_t need
    cdef const int64_t *offs
    cdef const unsigned char *payload
    cdef unsigned char[::1] sv
    for si in range(c.first_slice, c.first_slice + c.n_slices):
        s = &t.slices[si]
        need = fr_chunk_var_scratch_bytes(s.chunk)
        if need < 0 or s.offset < 0 or s.offset + s.length > s.chunk.n_rows:
            raise errors.DataLossError(f"chunk {s.chunk.key} is not a string chunk")
        scratch = bytearray(max(need, 1))
        sv = scratch
        if fr_chunk_var_data(s.chunk, &sv[0], &offs, &payload) != FR_OK:
            raise errors.DataLossError(f"chunk {s.chunk.key} does not decode")
        for r in range(s.offset, s.offset + s.length):
            out.append(PyBytes_FromStringAndSize(<const char *>payload + offs[r],
                                                 offs[r + 1] - offs[r]))
    return 0


cdef object _decode_text(const fr_spec *spec, list blobs, tuple lead):
    """The cells ``blobs`` of a string column decoded and stacked: a numpy
    bytes_ array of shape ``lead + shape``, as wide as its longest element
    (numpy drops trailing NULs, as it does for any bytes_ array)."""
    shape = _shape_of(spec)
    cdef Py_ssize_t n_el = 1, pos, i
    for d in shape:
        n_el *= d
    values = []
    for blob in blobs:
        if 4 * n_el > len(blob):
            raise errors.DataLossError("stored string cell is truncated")
        lens = np.frombuffer(blob, dtype=_LENS, count=n_el).tolist()
        pos = 4 * n_el
        if pos + sum(lens) != len(blob):
            raise errors.DataLossError("stored string cell has inconsistent lengths")
        for i in range(n_el):
            values.append(blob[pos:pos + lens[i]])
            pos += lens[i]
    width = max(1, max([len(x) for x in values], default=1))
    out = np.array(values, dtype=f"S{width}")
    return out.reshape(lead + shape)


cdef object _gather_text(fr_trajectory **ts, int64_t n, int32_t col):
    """Column ``col`` of n checked trajectories (fr_trajectories_check) as
    one array ``[n, T, *shape]`` (``[n, *shape]`` when squeezed)."""
    cdef fr_traj_column *first = &ts[0].columns[col]
    cdef int64_t b
    blobs = []
    for b in range(n):
        _column_blobs(ts[b], col, blobs)
    cdef tuple lead = (n,)
    if not first.squeeze:
        lead = (n, first.length)
    return _decode_text(first.spec, blobs, lead)


def _decode_text_for_tests(tuple shape, list blobs):
    """_decode_text of string cells of ``shape`` (tests)."""
    cdef fr_spec spec
    memset(&spec, 0, sizeof(spec))
    spec.dtype = b'S'
    spec.ndim = len(shape)
    for d in range(spec.ndim):
        spec.shape[d] = shape[d]
    return _decode_text(&spec, blobs, (len(blobs),))[0]
