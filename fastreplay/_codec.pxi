# Chunk storage: the LZ4 codec the core (de)compresses chunks with,
# ChunkStore (accounting shared by writers' chunks) and the chunker options
# of writers and row inserts (csrc/chunk.h).  Included by _core.pyx.
# Needs: nothing from earlier includes (only _core.pyx and _csrc.pxd).


def _install_lz4() -> bool:
    """Point the core at the LZ4 block functions of the ``lz4`` package's
    extension (its exported C symbols), so chunks are (de)compressed in C
    without the GIL.  Returns False (chunks stay raw) where they are not
    exported."""
    import ctypes

    try:
        import lz4.block._block as block

        lib = ctypes.CDLL(block.__file__)
        fns = [ctypes.cast(getattr(lib, name), ctypes.c_void_p).value for name in
               ("LZ4_compress_default", "LZ4_decompress_safe", "LZ4_compressBound")]
    except (ImportError, OSError, AttributeError):
        return False
    cdef size_t c = fns[0], d = fns[1], b = fns[2], p = 0
    fr_codec_install(<fr_lz4_compress_fn>c, <fr_lz4_decompress_fn>d,
                     <fr_lz4_bound_fn>b)
    try:  # optional: lets reads decode a chunk only as far as they need
        p = ctypes.cast(lib.LZ4_decompress_safe_partial, ctypes.c_void_p).value or 0
    except AttributeError:
        pass
    fr_codec_install_partial(<fr_lz4_partial_fn>p)
    return bool(fr_codec_available())


LZ4_AVAILABLE = _install_lz4()


cdef class ChunkStore:
    """Accounting shared by the chunks of the writers that use it: live
    chunks, bytes stored (compressed or raw) and the bytes they hold raw."""

    cdef fr_store *_s

    def __cinit__(self):
        self._s = fr_store_new()
        if self._s == NULL:
            raise MemoryError()

    def __init__(self) -> None:
        pass

    def __dealloc__(self):
        if self._s != NULL:
            fr_store_release(self._s)

    def stats(self) -> dict:
        cdef int64_t out[3]
        fr_gather_cache_trim()  # chunks only the decode cache still holds
        fr_store_stats(self._s, out)
        return {"live_chunks": out[0], "stored_bytes": out[1], "raw_bytes": out[2]}


cdef int _options(fr_chunker_options *o, int32_t keep_alive, object max_len,
                  double throughput_weight) except -1:
    o.num_keep_alive_refs = keep_alive
    o.autotune = max_len is None
    o.max_chunk_length = 0 if max_len is None else max_len
    o.throughput_weight = throughput_weight
    if fr_chunker_options_validate(o) != FR_OK:
        raise ValueError(
            f"invalid chunker options: num_keep_alive_refs={keep_alive}, "
            f"max_chunk_length={max_len}")
    return 0
