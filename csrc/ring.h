/* Rings: ReplayBuffer's storage of transitions of fixed-size fields (the
 * cpprb / SB3 / Tianshou workload: float32[8] observations, an action, a
 * reward, a done flag; or image frames).
 *
 * A ring of `capacity` slots holds the newest transitions; the one with key
 * k sits in slot k % capacity, so keys are consecutive from the first one
 * (`first_key`) and a key is stored iff oldest <= k < next.  Each slot is one
 * record: the row of every raw column packed side by side (a compressed
 * column: a pointer to a one-row chunk), so a sampled transition costs one
 * or two cache misses however many fields it has (a table of items with one
 * chunk reference per column costs a miss per column, plus the item and its
 * key-map entry, on insert, eviction and sample: add_batch of 256 small
 * transitions 60 -> 8-12 us, sample 256 of 1M 117 -> 31 us on the shared
 * 2-vCPU EPYC VM, 2026-12-01).  Eviction is overwriting the oldest slot.
 *
 * Sampling is uniform over the stored transitions, or prioritized: slot
 * weights priority ** exponent in a sum tree (sumtree.h), every weight zero
 * sampling uniformly, as fr_selector does.  Priorities follow
 * fr_selector_check's rules (FR_EPRIORITY_*).
 *
 * Thread safety: every function takes the ring's mutex, so any thread may
 * call any of them without the GIL; fr_ring_sample waits (releasing the
 * mutex) until min_size transitions are stored, and decodes compressed rows
 * after releasing it (holding a reference to each chunk, so an add that
 * evicts the row meanwhile frees nothing it reads).  Ownership: the ring owns
 * its records; callers keep their input and output buffers for a call.
 */
#ifndef FASTREPLAY_RING_H
#define FASTREPLAY_RING_H

#include "chunk.h"

/* fr_ring_seal: the ring's contents moved to a table; calls after it return
 * this and the caller goes to the table instead. */
#define FR_RING_MOVED 1

typedef struct fr_ring fr_ring;

typedef struct fr_ring_stats {
    int64_t size, capacity;
    uint64_t next_key;       /* key of the next transition added */
    int64_t inserts, samples, updates, unique_samples;
    int64_t sample_stalls, sample_stall_ns;
} fr_ring_stats;

/* A ring of `capacity` (>= 1) slots of n_cols columns whose rows are
 * row_bytes[c] bytes; a column with packed[c] set (packed may be NULL)
 * keeps each row in a one-row chunk of `store` (retained), LZ4-compressed
 * when that saves space, and a record holds its pointer; `prioritized` with
 * sampling exponent `exponent`; keys start at first_key; the generator is
 * seeded with `seed`.  NULL when out of memory. */
fr_ring *fr_ring_new(int64_t capacity, int32_t n_cols, const int64_t *row_bytes,
                     const int32_t *packed, fr_store *store, int prioritized,
                     double exponent, uint64_t first_key, uint64_t seed);
void fr_ring_free(fr_ring *r);

/* Add n rows (row i of column c at cols[c] + i * strides[c]; strides NULL:
 * row_bytes) with priorities prios
 * (NULL: `priority` for every row), keys *key, *key + 1, ... (*key is set to
 * the first; of more than capacity rows only the last capacity stay).
 * FR_OK; FR_EPRIORITY_* for row *bad (nothing added; *key is still set);
 * FR_RING_MOVED. */
int fr_ring_add(fr_ring *r, int64_t n, const void *const *cols, const int64_t *strides,
                const double *prios, double priority, uint64_t *key, int64_t *bad);

/* Sample n transitions once min_size are stored (waiting up to timeout_ns,
 * < 0: forever, releasing the mutex): row i of column c
 * goes to outs[c] + i * row_bytes[c], its key, probability and priority to
 * keys[i], probs[i] and prios[i]; *size is the number stored.  Large
 * samples copy and decode on the worker pool (pool.h).  FR_OK;
 * FR_ESAMPLE_TIMEOUT, FR_ECLOSED, FR_EINTR (nothing sampled); FR_ECORRUPT
 * when a packed row does not decode; FR_RING_MOVED. */
int fr_ring_sample(fr_ring *r, int64_t n, int64_t min_size, int64_t timeout_ns,
                   void *const *outs, uint64_t *keys, double *probs, double *prios,
                   int64_t *size);

/* Set the priorities of keys[0..n) (keys no longer stored are skipped; a key
 * given twice keeps its last priority).  FR_OK; FR_EPRIORITY_* for
 * prios[*bad] (nothing changed); FR_RING_MOVED. */
int fr_ring_update(fr_ring *r, int64_t n, const uint64_t *keys, const double *prios,
                   int64_t *bad);

/* Copy the stored transitions first..first+n (0 = the oldest; first + n <=
 * size) into outs, keys, prios and times (times sampled).  FR_OK; FR_EINVAL
 * for a range outside the stored ones. */
int fr_ring_read(fr_ring *r, int64_t first, int64_t n, void *const *outs,
                 uint64_t *keys, double *prios, int64_t *times);

/* Restore a loaded buffer's counters: inserts, samples, updates and
 * unique_samples from *st, and the times sampled of the n stored
 * transitions, oldest first.  FR_OK, or FR_EINVAL unless n == size. */
int fr_ring_restore(fr_ring *r, const fr_ring_stats *st, const int64_t *times,
                    int64_t n);

/* Wake waiting samplers with FR_ECLOSED and refuse later waits. */
void fr_ring_close(fr_ring *r);
/* Refuse every later add, sample and update with FR_RING_MOVED (waiting
 * samplers wake with it): the caller is moving the contents to a table. */
void fr_ring_seal(fr_ring *r);

void fr_ring_stats_get(fr_ring *r, fr_ring_stats *out);

#endif /* FASTREPLAY_RING_H */
