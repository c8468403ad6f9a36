/* Trajectories in bulk, for row inserts (rows.h) and the evictions they
 * cause: building many one-row trajectories and releasing many at once,
 * with one reference-count change per chunk instead of one per row and
 * column (atomic operations on a few shared chunks were ~13% of add_batch
 * of small rows under perf).
 *
 * Thread safety as for single trajectories (trajectory.h): a trajectory
 * being built is private to its builder.
 */
#ifndef FASTREPLAY_TRAJ_BULK_H
#define FASTREPLAY_TRAJ_BULK_H

#include "trajectory.h"

/* Add k references to chunk c at once (the caller holds one). */
FR_INLINE void fr_chunk_retain_n(fr_chunk *c, int64_t k) {
    atomic_fetch_add_explicit(&c->refs, k, memory_order_relaxed);
}

/* Drop k (>= 1) references of c at once, as k fr_chunk_release calls. */
void fr_chunk_release_n(fr_chunk *c, int64_t k);

/* A one-step item's trajectory: per column c, row offsets[c] of chunks[c]
 * (squeezed, spec specs[c], interned).  It does NOT retain the chunks: the
 * caller adds one reference per trajectory to each (fr_chunk_retain_n)
 * before the trajectory can be released.  One reference; NULL when out of
 * memory. */
fr_trajectory *fr_trajectory_new_row(int32_t n_cols, const fr_spec *const *specs,
                                     fr_chunk *const *chunks, const int32_t *offsets);

/* fr_payload_ops.release_many for trajectories: n fr_trajectory_payload_release
 * calls, with the references of consecutive trajectories to the same
 * chunks dropped together. */
void fr_trajectory_payload_release_many(void *ctx, const uint64_t *payloads,
                                        int64_t n);

#endif /* FASTREPLAY_TRAJ_BULK_H */
