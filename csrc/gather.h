/* The gather of sample_batch: copy every fixed-size column of n sampled
 * trajectories into stacked outputs, decoding compressed chunks on the
 * worker pool (pool.h) and through a cache of decoded chunks.
 *
 * Work split: a batch whose decode (or copy) is large enough to pay for
 * waking workers is cut into shares of consecutive items; a share copies
 * every column of its items (fr_trajectories_gather on the item range), so
 * shares write disjoint output bytes and the result does not depend on how
 * many threads ran them.  Smaller batches run on the calling thread.
 *
 * Decode cache: every pool slot (the calling thread, each worker) owns a
 * direct-mapped cache of decoded chunks (FR_GATHER_CACHE_BUDGET bytes at
 * most per slot) that persists across calls, so rows shared by several
 * items of one batch or of consecutive batches are decoded once.  Each
 * cached chunk is retained (a reference) while cached, so a chunk the
 * table evicts and frees is never read afterwards and its address cannot
 * be reused by a new chunk while an entry names it.  Entries whose chunk
 * only the cache still references can never be hit again; they are
 * released when their slot is reused, by fr_gather_cache_trim (called
 * before store statistics are read, so live_chunks counts what items and
 * writers hold) or fr_gather_cache_clear.  So after items are deleted, up
 * to FR_GATHER_CACHE_BUDGET decoded bytes and as many compressed chunks per
 * slot stay allocated until then.
 * A call that finds the pool busy with another sampler's batch uses a
 * private per-call cache instead (pool.h, slot -1).
 *
 * Thread safety: every function may be called from any thread without the
 * GIL.  Ownership: the caller keeps its references to the trajectories and
 * the output buffers for the length of the call.
 */
#ifndef FASTREPLAY_GATHER_H
#define FASTREPLAY_GATHER_H

#include "trajectory.h"

/* Decoded bytes one slot's cache holds at most (at least one chunk). */
#define FR_GATHER_CACHE_BUDGET ((int64_t)16 << 20)

typedef struct fr_gather_job {
    fr_trajectory *const *ts; /* n trajectories passing fr_trajectories_check */
    int64_t n;
    int32_t n_cols;
    void *const *outs;      /* per column: item b's rows at outs[c] + b * strides[c] */
    const int64_t *strides; /* per column; 0 skips the column (strings) */
    int64_t most;           /* fr_trajectories_check's *scratch */
} fr_gather_job;

/* Gather every column of the job.  FR_OK, FR_ENOMEM, or FR_ECORRUPT with
 * *failed set to the column that did not decode. */
int fr_gather_batch(const fr_gather_job *job, int32_t *failed);

/* Release cached chunks no one else references (see above); cheap when the
 * cache is empty.  Skipped while a batch is being gathered. */
void fr_gather_cache_trim(void);
/* Release every cached chunk and the cache memory (waits for no one: skipped
 * while a batch is being gathered; returns 0 then, else 1). */
int fr_gather_cache_clear(void);
/* Tests: FR_GATHER_ALWAYS_POOL sends every batch of two or more items to
 * the pool (as many shares as threads allow), however small; 0 is the
 * default (the measured thresholds). */
enum { FR_GATHER_ALWAYS_POOL = 1 };
void fr_gather_set_flags(int flags);
/* Chunks the caches currently hold (tests). */
int64_t fr_gather_cache_held(void);

#endif /* FASTREPLAY_GATHER_H */
