/* Batched insertion of one-step items (transitions) without a writer: each
 * column's n rows become one chunk, and row r of every column becomes item
 * keys[r] (each column squeezed).  The path under fastreplay.ReplayBuffer's
 * add(): one call per batch, no Python work per transition.
 */
#ifndef FASTREPLAY_ROWS_H
#define FASTREPLAY_ROWS_H

#include "table.h"
#include "trajectory.h"

/* Insert n_rows items into t.  cols[c] points at n_rows C-contiguous rows of
 * specs[c]; columns are compressed by the writer's rule
 * (fr_should_compress).  Priorities are validated
 * first (*bad_index names the first invalid one; nothing is inserted).  Waits
 * for the rate limiter up to timeout_ns; *n_done receives how many were
 * inserted.  FR_OK, FR_EPRIORITY_*, FR_EINVAL, FR_ETIMEOUT, FR_ECLOSED or
 * FR_ENOMEM. */
int fr_insert_rows(fr_table *t, fr_store *store, int32_t n_cols,
                   const fr_spec *specs, const void *const *cols,
                   int64_t n_rows,
                   const uint64_t *keys, const double *priorities,
                   uint64_t chunk_key, int64_t timeout_ns, int64_t *n_done,
                   int64_t *bad_index);

#endif /* FASTREPLAY_ROWS_H */
