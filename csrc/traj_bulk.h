/* Trajectories in bulk, for row inserts (rows.h) and the evictions they
 * cause.  Under perf, add_batch of small rows into a full table spent ~13%
 * in atomic operations on a few shared chunks (one per row and column, on
 * insert and on eviction) and ~16% in malloc and free of one trajectory per
 * row, and the evictions read trajectories scattered over the heap.  Here:
 *  - a slab holds the one-row trajectories of up to FR_SLAB_ROWS
 *    consecutive rows in one allocation (made once, freed with its last
 *    trajectory), so evicting them in order reads memory in order;
 *  - a chunk takes the references of all its rows at once, and releasing
 *    many trajectories drops the references of consecutive ones to the
 *    same chunks together.
 *
 * Thread safety as for single trajectories (trajectory.h): a slab's
 * trajectories are private to its builder until inserted; the slab's count
 * is atomic.
 */
#ifndef FASTREPLAY_TRAJ_BULK_H
#define FASTREPLAY_TRAJ_BULK_H

#include "trajectory.h"

/* The most trajectories of one slab: a sampled item that outlives its
 * neighbours keeps at most this many trajectories' memory (~64 KB for five
 * columns). */
#define FR_SLAB_ROWS 256

/* Add k references to chunk c at once (the caller holds one). */
FR_INLINE void fr_chunk_retain_n(fr_chunk *c, int64_t k) {
    atomic_fetch_add_explicit(&c->refs, k, memory_order_relaxed);
}

/* Drop k (>= 1) references of c at once, as k fr_chunk_release calls. */
void fr_chunk_release_n(fr_chunk *c, int64_t k);

typedef struct fr_traj_slab fr_traj_slab;

/* A slab for n_rows (1..FR_SLAB_ROWS) one-row trajectories of n_cols
 * columns, to be filled with fr_slab_row.  Their chunks must all be of
 * episode 0 (as rows.h makes them): the table's episode accounting takes
 * that without reading them.  NULL when out of memory. */
fr_traj_slab *fr_slab_new(int32_t n_cols, int32_t n_rows);

/* Fill row `row` (each once, in any order) of the slab: a one-step item's
 * trajectory with, per column c, row offsets[c] of chunks[c] (squeezed,
 * spec specs[c], interned), one reference.  It does NOT retain the chunks:
 * the caller adds one reference per trajectory to each (fr_chunk_retain_n)
 * before it can be released. */
fr_trajectory *fr_slab_row(fr_traj_slab *s, int32_t row, const fr_spec *const *specs,
                           fr_chunk *const *chunks, const int32_t *offsets);

/* fr_slab_row for rows row0 .. row0 + n - 1 (within the slab), row
 * row0 + k with offsets[c] + k of chunks[c]: consecutive rows of the same
 * chunks, each copied from the first and patched (a few stores per row
 * instead of a trajectory built field by field).  out[k] receives row
 * row0 + k's trajectory as a payload. */
void fr_slab_fill(fr_traj_slab *s, int32_t row0, int32_t n, const fr_spec *const *specs,
                  fr_chunk *const *chunks, const int32_t *offsets, uint64_t *out);

/* Give up the rows of the slab that were never filled (after a failure):
 * the slab is freed with its last filled trajectory, or now if none. */
void fr_slab_abandon(fr_traj_slab *s, int32_t filled);

/* Free a released trajectory's memory (free, or its share of a slab). */
void fr_trajectory_free_memory(fr_trajectory *t);

/* fr_payload_ops.release_many for trajectories: n fr_trajectory_payload_release
 * calls, with the references of consecutive trajectories to the same
 * chunks and slabs dropped together. */
void fr_trajectory_payload_release_many(void *ctx, const uint64_t *payloads,
                                        int64_t n);

#endif /* FASTREPLAY_TRAJ_BULK_H */
