/* Batched insertion of one-step items (transitions) without a writer: row r
 * of every column becomes item keys[r] (each column squeezed).  The path
 * under fastreplay.ReplayBuffer's add() and add_batch(): one call per batch,
 * no Python work per transition.
 *
 * Chunking follows the writer's chunker (column.h): a compressed column is
 * cut into chunks of fr_chunker_start_length(opt) rows, the length a writer
 * column with the same options would give, so reading one row decodes at
 * most that many rows whatever the batch size, and the gather scratch
 * (trajectory.h, sized from compressed chunks) stays bounded.  A raw column
 * is cut into chunks of FR_ROWS_RAW_CHUNK_BYTES (at least one row): its rows
 * are read in place (nothing is decoded), one chunk per row would cost more
 * memory than the rows themselves, and one chunk per batch would keep a
 * whole large batch (65,536 images: 462 MB) alive until its last row is
 * evicted.
 *
 * Costs per row (what add_batch of small rows runs at): one trajectory
 * allocation, no reference-count operation (a chunk takes those of all its
 * rows at once, traj_bulk.h), and the table's bulk insert (table.h).
 *
 * Thread-safe as far as the table is (the chunks are private until the items
 * are inserted).
 */
#ifndef FASTREPLAY_ROWS_H
#define FASTREPLAY_ROWS_H

#include "column.h"
#include "table.h"
#include "trajectory.h"

/* The most bytes of a chunk of raw rows. */
#define FR_ROWS_RAW_CHUNK_BYTES (1 << 20)

/* Rows of one chunk of a column of `spec` inserted with options `opt`. */
int32_t fr_rows_chunk_length(const fr_spec *spec, const fr_chunker_options *opt,
                             int64_t n_rows, int32_t compression);

/* The finalized chunk of rows [r, r + len) of a column of n_rows rows
 * (fewer at the end), keyed *next_key (then incremented); NULL with *rc set
 * when it fails. */
fr_chunk *fr_rows_make_chunk(fr_store *store, const fr_spec *spec, int compress,
                             const void *rows, int64_t n_rows, int64_t r, int32_t len,
                             uint64_t *next_key, int *rc);

/* Insert n_rows items into t.  cols[c] points at n_rows C-contiguous rows of
 * specs[c]; columns are compressed by compression[c] (FR_COMPRESSION_*,
 * fr_compress_choice; NULL: AUTO for all) and chunked as described above,
 * interned[c] is fr_spec_intern(&specs[c]) when the caller has it (NULL:
 * interned here, under a process-wide lock), chunk keys counting
 * up from chunk_key.  Priorities are validated first (*bad_index names the
 * first invalid one; nothing is inserted).  Waits for the rate limiter up to
 * timeout_ns; *n_done receives how many were inserted.  FR_OK,
 * FR_EPRIORITY_*, FR_EINVAL, FR_ETIMEOUT, FR_ECLOSED or FR_ENOMEM. */
int fr_insert_rows(fr_table *t, fr_store *store, int32_t n_cols,
                   const fr_spec *specs, const void *const *cols,
                   int64_t n_rows,
                   const uint64_t *keys, const double *priorities,
                   const fr_chunker_options *opt, const int32_t *compression,
                   const fr_spec *const *interned, uint64_t chunk_key,
                   int64_t timeout_ns, int64_t *n_done, int64_t *bad_index);

#endif /* FASTREPLAY_ROWS_H */
