/* Trajectories: an item's data as, per output column, a list of chunk slices
 * (chunk, offset, length) plus a squeeze flag and the column's spec.
 *
 * A trajectory retains every chunk it references and is itself reference
 * counted: the table holds one reference per item (as its payload) and
 * sampling hands out more.  Immutable after construction, so any thread may
 * read it.
 */
#ifndef FASTREPLAY_TRAJECTORY_H
#define FASTREPLAY_TRAJECTORY_H

#include "chunk.h"
#include "fr_common.h"

#define FR_MAX_NDIM 16

/* dtype and shape of one cell.  `dtype` is numpy's type character code. */
typedef struct fr_spec {
    int32_t dtype;
    int32_t itemsize;
    int32_t ndim;
    int64_t shape[FR_MAX_NDIM];
    int64_t row_bytes;
} fr_spec;

/* Variable-length cells: strings (dtype 'S', Reverb's tf.string: byte
 * strings, text stored as UTF-8).  Their spec has itemsize 0 and row_bytes
 * 0, so values of any width are one column kind.  Each such cell is one encoded blob
 * (fastreplay/_strings.pxi: per element a uint32 byte length, then the
 * bytes), stored as a variable-length row of a chunk (chunk.h,
 * FR_VAR_ROWS); readers parse and bounds-check blobs, never trust them.
 * Gathers (fr_trajectory_read_column, fr_trajectories_gather) are for
 * fixed-size columns only. */
FR_INLINE int fr_spec_is_var(const fr_spec *s) {
    return s->dtype == 'S';
}

/* 1 if a and b have the same dtype and shape. */
int fr_spec_equal(const fr_spec *a, const fr_spec *b);

/* The process-wide copy of a spec: equal specs get the same pointer, valid
 * for the life of the process (there are few distinct specs), so items
 * store 8 bytes per column and compare specs by pointer.  Thread-safe.
 * NULL when out of memory. */
const fr_spec *fr_spec_intern(const fr_spec *s);

typedef struct fr_slice {
    fr_chunk *chunk;
    int32_t offset;
    int32_t length;
} fr_slice;

/* fr_traj_column.squeeze: 0 rows [length, *shape]; 1 the one row, shape;
 * FR_ROWS_LAST_AXIS the rows stacked on a new last axis, [*shape, length]
 * (frame stacks, frames.h). */
#define FR_ROWS_LAST_AXIS 2

typedef struct fr_traj_column {
    const fr_spec *spec; /* interned (fr_spec_intern) */
    int32_t first_slice;
    int32_t n_slices;
    int32_t length; /* rows over all slices */
    int32_t squeeze;
} fr_traj_column;

typedef struct fr_trajectory {
    atomic_int_fast64_t refs;
    int32_t n_columns;
    int32_t n_slices;
    /* The item's nest structure: an id in the bindings' process-wide
     * registry (0: none, data is a flat list of columns).  Set once before
     * the trajectory is shared. */
    int32_t structure_id;
    /* 0, or 1 + its row in a slab of one-row trajectories (traj_bulk.h),
     * whose memory it shares: freed with the slab's last one.  Their chunks
     * are all of episode 0 (rows.h), so fr_trajectory_payload_episodes
     * answers without reading them. */
    int32_t slab_row;
    /* fr_trajectory_scratch_bytes once every chunk is ready (-1 before):
     * sampling reads it instead of every slice's chunk, a random DRAM read
     * each (~9% of sample_batch of image items under perf). */
    atomic_int_fast64_t scratch_bytes;
    fr_traj_column *columns; /* same allocation as the struct */
    fr_slice *slices;
} fr_trajectory;

/* Allocate a trajectory with room for n_columns columns and at most
 * max_slices slices (one reference, zero slices used).  NULL on failure. */
fr_trajectory *fr_trajectory_new(int32_t n_columns, int32_t max_slices);

/* Append one row of `chunk` to column `col` (columns are filled in order):
 * extends the last slice when it is the same chunk and the row is the next
 * one, else starts a new slice and retains the chunk.  Only contiguous rows
 * are merged (Reverb merged any rows of one chunk, reading wrong data). */
void fr_trajectory_push_row(fr_trajectory *t, int32_t col, fr_chunk *chunk,
                            int32_t offset);

/* Append rows [offset, offset + length) of `chunk` to column `col` as one
 * slice (merged with the previous one when contiguous); the caller checked
 * the range against the chunk and reserved the slice (checkpoint restore). */
void fr_trajectory_push_slice(fr_trajectory *t, int32_t col, fr_chunk *chunk,
                              int32_t offset, int32_t length);

FR_INLINE void fr_trajectory_retain(fr_trajectory *t) {
    atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
}

/* Drop one reference; at zero release every chunk and free. */
void fr_trajectory_release(fr_trajectory *t);

/* 1 when every referenced chunk is finalized. */
int fr_trajectory_ready(const fr_trajectory *t);
/* The first chunk of t that is not ready yet, or NULL when all are. */
const fr_chunk *fr_trajectory_unready(const fr_trajectory *t);

/* Copy column `col` ([length, *shape] rows, contiguous) into dst, which must
 * hold length * row_bytes bytes; `scratch` must hold the largest referenced
 * chunk's raw bytes (fr_trajectory_scratch_bytes).  FR_OK or FR_EINVAL. */
int fr_trajectory_read_column(const fr_trajectory *t, int32_t col, void *dst,
                              void *scratch);

/* Check that n sampled trajectories can be stacked: none is NULL
 * (FR_EEMPTY), all have ts[0]'s number of columns (FR_EINVAL) and the same
 * spec, length and squeeze per column (FR_ESHAPE, *bad_column set).  On
 * FR_OK *scratch is the largest fr_trajectory_scratch_bytes among them. */
int fr_trajectories_check(fr_trajectory *const *ts, int64_t n, int64_t *scratch,
                          int32_t *bad_column);

/* A gather cache slot's key: the chunk and how many of its rows are decoded. */
typedef struct fr_gather_key {
    const struct fr_chunk *chunk;
    int64_t rows;
} fr_gather_key;

/* Copy column `col` of n trajectories into out: item b's rows start at
 * out + b * item_stride bytes.  Every trajectory must have that column with
 * the same spec and length (the caller checks).  Compressed chunks are
 * decoded once per call even when several items share them, and only as far
 * as the rows items use: `cache` holds cache_slots fr_gather_keys (zeroed
 * before a column) followed by cache_slots rows buffers of cache_bytes_each
 * bytes.  FR_OK or FR_ECORRUPT. */
int fr_trajectories_gather(fr_trajectory *const *ts, int64_t n, int32_t col,
                           void *out, int64_t item_stride, void *cache,
                           int64_t cache_bytes_each, int32_t cache_slots);

/* fr_payload_ops hooks for tables whose payloads are trajectories (0 is no
 * trajectory). */
void fr_trajectory_payload_retain(void *ctx, uint64_t payload);
void fr_trajectory_payload_release(void *ctx, uint64_t payload);
/* fr_payload_ops.episodes: the episode of each run of consecutive slices
 * from one episode, in slice order. */
int32_t fr_trajectory_payload_episodes(void *ctx, uint64_t payload, int32_t *pos,
                                       uint64_t *out, int32_t cap);

/* Raw size of the largest chunk the trajectory references. */
int64_t fr_trajectory_scratch_bytes(const fr_trajectory *t);

#endif /* FASTREPLAY_TRAJECTORY_H */
