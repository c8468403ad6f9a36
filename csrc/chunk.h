/* Chunks: consecutive cells of one column, stacked [n, *shape], immutable
 * once finalized, optionally LZ4-compressed, reference counted.
 *
 * A chunk is created *open* when its column buffers the first cell; items may
 * reference it (and retain it) from then on.  fr_chunk_finalize stores the
 * rows, after which the chunk never changes and any thread may read it.  The
 * last fr_chunk_release frees it and updates its store's accounting.
 *
 * Compression uses the LZ4 block API through function pointers installed
 * once at import (fr_codec_install): the core links no LZ4 itself and never
 * needs the GIL to (de)compress.  Without installed pointers chunks are kept
 * raw.
 */
#ifndef FASTREPLAY_CHUNK_H
#define FASTREPLAY_CHUNK_H

#include <stdatomic.h>

#include "fr_common.h"

typedef int (*fr_lz4_compress_fn)(const char *src, char *dst, int src_size,
                                  int dst_capacity);
typedef int (*fr_lz4_decompress_fn)(const char *src, char *dst,
                                    int compressed_size, int dst_capacity);
typedef int (*fr_lz4_bound_fn)(int input_size);
/* LZ4_decompress_safe_partial: decode at least target bytes (or the whole
 * block), returning the bytes decoded, at most dst_capacity. */
typedef int (*fr_lz4_partial_fn)(const char *src, char *dst, int compressed_size,
                                 int target, int dst_capacity);

/* Install the LZ4 block functions (any may be NULL to disable compression).
 * Call once, before any chunk is finalized. */
void fr_codec_install(fr_lz4_compress_fn compress,
                      fr_lz4_decompress_fn decompress, fr_lz4_bound_fn bound);
/* Whether compression is available. */
int fr_codec_available(void);
/* Install partial decompression (NULL: chunks are always decoded whole). */
void fr_codec_install_partial(fr_lz4_partial_fn partial);

/* row_bytes of a chunk of variable-length rows (string and bytes cells,
 * trajectory.h fr_spec_is_var).  Its data is an offsets table of n_rows + 1
 * int64 (0 = offsets[0] <= offsets[1] <= ... <= offsets[n_rows] = payload
 * bytes), kept raw, followed by the payload: the rows' bytes back to back,
 * an LZ4 block when `compressed`.  fr_chunk_read/rows refuse such chunks;
 * read them with fr_chunk_var_data. */
#define FR_VAR_ROWS (-1)

/* Accounting shared by every chunk of one server (or standalone writer). */
typedef struct fr_store {
    atomic_int_fast64_t refs;
    atomic_int_fast64_t live_chunks;
    atomic_int_fast64_t stored_bytes; /* bytes held, compressed or raw */
    atomic_int_fast64_t raw_bytes;    /* bytes the same rows take raw */
} fr_store;

fr_store *fr_store_new(void);
void fr_store_retain(fr_store *s);
void fr_store_release(fr_store *s);
/* out = {live_chunks, stored_bytes, raw_bytes}. */
void fr_store_stats(fr_store *s, int64_t out[3]);

typedef struct fr_chunk {
    atomic_int_fast64_t refs;
    atomic_int ready;      /* 1 once finalized */
    fr_store *store;
    uint64_t key;
    uint64_t episode_id;
    int64_t first_step, last_step;
    int64_t row_bytes;
    int32_t n_rows;        /* rows stored (valid once ready) */
    int32_t compressed;    /* data is an LZ4 block of n_rows * row_bytes */
    int64_t stored_bytes;
    unsigned char *data;
    /* Bytes of room for the data right after the struct (same allocation):
     * finalize stores uncompressed rows there when they fit. */
    int64_t inline_cap;
} fr_chunk;

/* A new open chunk with one reference.  NULL on allocation failure. */
fr_chunk *fr_chunk_new(fr_store *store, uint64_t key, uint64_t episode_id,
                       int64_t row_bytes);
/* The same with inline_cap bytes of room for its data in its own
 * allocation: a writer's small chunks then cost one allocation instead of
 * two (a writer step of small rows allocates ~0.6 chunks). */
fr_chunk *fr_chunk_new_inline(fr_store *store, uint64_t key, uint64_t episode_id,
                              int64_t row_bytes, int64_t inline_cap);

FR_INLINE void fr_chunk_retain(fr_chunk *c) {
    atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
}

/* The references held now.  A count equal to the references the caller
 * knows of means nobody else holds the chunk, so nobody can take a new
 * one: the net outbox ships such chunks as parts of merged ones. */
FR_INLINE int64_t fr_chunk_refs(const fr_chunk *c) {
    return (int64_t)atomic_load_explicit(&c->refs, memory_order_acquire);
}

/* Whether the chunk is finalized (its rows may be read). */
FR_INLINE int fr_chunk_ready(const fr_chunk *c) {
    return atomic_load_explicit(&c->ready, memory_order_acquire);
}

/* Drop one reference; frees the chunk (and its data) at zero. */
void fr_chunk_release(fr_chunk *c);

/* A ready chunk rebuilt from a checkpoint: `data` holds stored_bytes bytes,
 * an LZ4 block when `compressed`, else n_rows * row_bytes raw bytes (copied);
 * with row_bytes FR_VAR_ROWS, the layout above (offsets checked, the LZ4
 * block must decode to the last offset's size).
 * Every size is checked before anything is allocated: an LZ4 block must be
 * well formed and decode to exactly n_rows * row_bytes bytes (< 2 GiB,
 * checked by fr_lz4_block_size without decoding).  NULL on allocation
 * failure or inconsistent sizes. */
fr_chunk *fr_chunk_restore(fr_store *store, uint64_t key, uint64_t episode_id,
                           int64_t first_step, int64_t last_step,
                           int64_t row_bytes, int32_t n_rows, int compressed,
                           const void *data, int64_t stored_bytes);

/* The number of bytes the LZ4 block src[0..n) decodes to, found by walking
 * its sequences without writing anything; -1 when the block is malformed
 * (a length or match offset past its bounds).  Pure; O(n). */
int64_t fr_lz4_block_size(const unsigned char *src, int64_t n);

/* Store n_rows rows (n_rows * row_bytes bytes at rows), compressing them when
 * `compress` is set and it saves space, and mark the chunk ready.
 * Returns FR_OK or FR_ENOMEM (the chunk stays open).  O(bytes). */
int fr_chunk_finalize(fr_chunk *c, const void *rows, int32_t n_rows,
                      int64_t first_step, int64_t last_step, int compress);

/* Variable-length rows (row_bytes FR_VAR_ROWS), n_rows of them:
 * offsets[0..n_rows] as described at FR_VAR_ROWS, payload offsets[n_rows]
 * bytes.  Compresses the payload when `compress` is set, it has at least
 * 256 bytes and that saves space; marks the chunk ready.  FR_OK or
 * FR_ENOMEM (the chunk stays open).  O(bytes). */
int fr_chunk_finalize_var(fr_chunk *c, const int64_t *offsets, const void *payload,
                          int32_t n_rows, int64_t first_step, int64_t last_step,
                          int compress);

/* Bytes of scratch fr_chunk_var_data needs (the raw payload when
 * compressed, else 0); -1 when c is not a variable-length chunk. */
int64_t fr_chunk_var_scratch_bytes(const fr_chunk *c);

/* The offsets table and raw payload of a ready variable-length chunk: row r
 * is (*payload)[(*offsets)[r] .. (*offsets)[r+1]).  A compressed payload is
 * decoded into `scratch` (fr_chunk_var_scratch_bytes).  FR_OK, or
 * FR_ECORRUPT on undecodable data or a fixed-size chunk. */
int fr_chunk_var_data(const fr_chunk *c, void *scratch, const int64_t **offsets,
                      const unsigned char **payload);

/* Copy rows [offset, offset + length) of a ready chunk to dst.  A compressed
 * chunk is decompressed whole into `scratch` (n_rows * row_bytes bytes)
 * first.  Returns FR_OK or FR_ECORRUPT on undecodable data. */
int fr_chunk_read(const fr_chunk *c, int32_t offset, int32_t length, void *dst,
                  void *scratch);

/* Pointer to the raw rows of a ready chunk: its own data when uncompressed,
 * else `scratch` after decompressing into it.  NULL on corrupt data. */
const unsigned char *fr_chunk_rows(const fr_chunk *c, void *scratch);

/* As fr_chunk_rows, but a compressed chunk is decoded only as far as its
 * first `rows` rows need (LZ4 blocks decode front to back); *decoded gets
 * the number of whole rows that are valid (at least `rows`). */
const unsigned char *fr_chunk_rows_upto(const fr_chunk *c, void *scratch,
                                        int32_t rows, int32_t *decoded);

#endif /* FASTREPLAY_CHUNK_H */
