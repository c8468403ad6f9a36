/* A replay table: items keyed by uint64, a sampler and a remover selector, a
 * rate limiter, eviction by the remover above max_size and deletion after
 * max_times_sampled samples (reverb-spec section 3).
 *
 * Thread-safe: every public function takes the table mutex.  Functions that
 * may wait (insert, insert_many, sample) sleep on condition variables with a
 * relative timeout in nanoseconds (negative = wait forever), so callers run
 * them without the GIL.  Counters follow Reverb: an eviction, an explicit
 * delete and a deletion after max_times_sampled each count as a rate-limiter
 * delete; re-inserting a present key only updates its priority.
 *
 * Items carry an opaque 64-bit payload.  The table calls ops.release on it
 * when the item leaves the table and ops.retain on every payload it returns
 * from sample (the caller then owns that reference).  NULL hooks mean plain
 * values.  ops.episodes, when set, names the episodes a payload's data comes
 * from: the table counts, per episode id, the items that reference it
 * (Reverb's num_episodes and num_deleted_episodes).
 */
#ifndef FASTREPLAY_TABLE_H
#define FASTREPLAY_TABLE_H

#include <pthread.h>
#include <stdatomic.h>

#include "fr_common.h"
#include "keymap.h"
#include "ratelimiter.h"
#include "rng.h"
#include "selector.h"

typedef struct fr_payload_ops {
    void (*retain)(void *ctx, uint64_t payload);
    void (*release)(void *ctx, uint64_t payload);
    void *ctx;
    /* Page through the episode ids of payload's data: write the episode of
     * each run of same-episode data from position *pos on into out (at most
     * cap), advance *pos, and return how many were written (0 at the end).
     * Start with *pos = 0; the same payload always yields the same runs. */
    int32_t (*episodes)(void *ctx, uint64_t payload, int32_t *pos,
                        uint64_t *out, int32_t cap);
    /* Optional: release n payloads at once (as n release calls would).
     * Bulk inserts hand it the items they evicted, without the table lock. */
    void (*release_many)(void *ctx, const uint64_t *payloads, int64_t n);
} fr_payload_ops;

typedef struct fr_item {
    uint64_t key;
    double priority;
    int64_t times_sampled;
    uint64_t inserted_seq; /* insertion order, for checkpoints */
    uint64_t payload;
} fr_item;

typedef struct fr_table_stats {
    int64_t size;
    int64_t max_size;
    int64_t max_times_sampled;
    int64_t num_inserts;        /* new keys inserted */
    int64_t num_updates;        /* priority updates (incl. re-inserts) */
    int64_t num_samples;
    int64_t num_unique_samples; /* items sampled at least once */
    int64_t num_deletes;        /* explicit deletes that removed an item */
    int64_t num_evictions;      /* removals by the remover over max_size */
    int64_t num_expired;        /* removals after max_times_sampled */
    int64_t rl_inserts, rl_samples, rl_deletes; /* rate-limiter counters */
    int64_t insert_stall_ns, sample_stall_ns;   /* time spent blocked */
    int64_t num_insert_stalls, num_sample_stalls;
    int64_t num_episodes;         /* episodes referenced by current items */
    int64_t num_deleted_episodes; /* episodes whose last item left */
} fr_table_stats;

typedef struct fr_table fr_table;

/* Completion counter shared by a writer and the tables that hold its queued
 * inserts (fr_table_insert_async).  Reference counted so a writer may be
 * closed while its inserts are still queued. */
typedef struct fr_sync {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t pending;  /* queued in tables, not yet inserted */
    int64_t dropped;  /* discarded because their table closed */
    int64_t refs;     /* guarded by mu */
    int closed;       /* set by fr_sync_close: waits return FR_ECLOSED */
    /* The first queued insert that failed and was dropped (its status, key
     * and table), until fr_sync_take_failure reports it; FR_OK if none. */
    atomic_int failed;   /* written under mu; fr_sync_failed reads it without */
    uint64_t failed_key;
    const fr_table *failed_table;
} fr_sync;

fr_sync *fr_sync_new(void);
void fr_sync_retain(fr_sync *s);
void fr_sync_release(fr_sync *s);
/* Wait until at most max_pending inserts are queued, up to timeout_ns
 * (negative = forever).  FR_OK, FR_ETIMEOUT, FR_ECLOSED, FR_EINTR, or
 * FR_EASYNC as soon as a queued insert failed (fr_sync_take_failure). */
int fr_sync_wait(fr_sync *s, int64_t max_pending, int64_t timeout_ns);
/* Record a failed (and dropped) queued insert, unless one is already
 * recorded; wakes waiters.  Only the pointer of `table` is kept. */
void fr_sync_fail(fr_sync *s, int status, uint64_t key, const fr_table *table);
/* The recorded failure's status (FR_OK if none), without clearing it. */
int fr_sync_failed(fr_sync *s);
/* The recorded failure's status, key and table; clears it. */
int fr_sync_take_failure(fr_sync *s, uint64_t *key, const fr_table **table);
int64_t fr_sync_pending(fr_sync *s);
/* Inserts discarded so far because their table closed. */
int64_t fr_sync_dropped(fr_sync *s);
/* Wake every waiter with FR_ECLOSED; later waits fail at once. */
void fr_sync_close(fr_sync *s);

/* Create a table into *out.  sampler_kind/remover_kind are fr_selector_kind
 * values with their exponents; max_size >= 1; max_times_sampled < 1 means
 * unlimited; the limiter's samples_per_insert finite and > 0,
 * min_size_to_sample >= 0, min_diff <= max_diff and neither NaN.  FR_OK,
 * FR_EINVAL for an invalid parameter, FR_ENOMEM, or FR_ESYSTEM when a lock
 * could not be initialised. */
int fr_table_create(int sampler_kind, double sampler_exponent,
                    int remover_kind, double remover_exponent,
                    int64_t max_size, int64_t max_times_sampled,
                    fr_rate_limiter limiter, uint64_t seed,
                    fr_payload_ops ops, fr_table **out);

/* fr_table_create returning the table, or NULL on any failure. */
fr_table *fr_table_new(int sampler_kind, double sampler_exponent,
                       int remover_kind, double remover_exponent,
                       int64_t max_size, int64_t max_times_sampled,
                       fr_rate_limiter limiter, uint64_t seed,
                       fr_payload_ops ops);

/* Release every item payload and free the table.  No thread may be using it
 * (close it and join users first). */
void fr_table_free(fr_table *t);

/* Wake every waiter with FR_ECLOSED; later waits fail with FR_ECLOSED. */
void fr_table_close(fr_table *t);

/* Insert or assign one item, waiting up to timeout_ns for the rate limiter.
 * An invalid priority fails with its FR_EPRIORITY_* code before any wait and
 * changes nothing.  On success the table owns the payload (for a re-insert of
 * a present key the new payload is released at once); on failure the caller
 * keeps it.  Returns FR_OK, FR_EPRIORITY_*, FR_ETIMEOUT, FR_ECLOSED,
 * FR_EINTR (the interrupt hook stopped the wait), FR_EFULL or FR_ENOMEM.
 * O(log n) per item. */
int fr_table_insert(fr_table *t, uint64_t key, double priority,
                    uint64_t payload, int64_t timeout_ns);

/* Queue an insert-or-assign that never blocks: it happens, in FIFO order,
 * as soon as the rate limiter admits it, in whichever thread changes the
 * limiter state (this one, a sampler, a deleter).  Counts one pending insert
 * on `sync` until then.  An insert with nothing queued ahead that the
 * limiter admits happens at once, uncounted; its failure (FR_EFULL,
 * FR_ENOMEM) is returned and the caller keeps the payload.  An invalid
 * priority fails before queueing.  On success the table owns the payload.
 * FR_OK, FR_EPRIORITY_*, FR_ECLOSED, FR_EFULL or FR_ENOMEM.  A queued
 * insert that fails later (the table closes, or
 * FR_ENOMEM/FR_EFULL when it is applied) is dropped and recorded with
 * fr_sync_fail. */
int fr_table_insert_async(fr_table *t, uint64_t key, double priority,
                          uint64_t payload, fr_sync *sync);

/* FR_OK if both selectors accept `priority`, else its FR_EPRIORITY_* code.
 * Reads only the selectors' kind and exponent, which are fixed when the
 * table is created: callable with or without the table lock. */
int fr_table_check_priority(const fr_table *t, double priority);

/* Insert n items in order with one lock acquisition while the rate limiter
 * allows.  Every priority is validated first: on an invalid one *bad_index
 * receives its index and nothing is inserted.  *n_done receives the number
 * inserted (payloads [0, n_done) now belong to the table) even when a
 * timeout or close stops the batch part-way. */
int fr_table_insert_many(fr_table *t, int64_t n, const uint64_t *keys,
                         const double *priorities, const uint64_t *payloads,
                         int64_t timeout_ns, int64_t *n_done,
                         int64_t *bad_index);

/* Sample up to n items, each with the rate limiter's permission, waiting up to
 * timeout_ns in total.  Writes key, probability, priority, times_sampled
 * (after this sample) and table_size (before any deletion it causes) per
 * item; payloads may be NULL.  *n_done receives the number sampled; a timeout
 * or close after at least one sample returns FR_OK with a partial batch.
 * FR_ESAMPLE_TIMEOUT or FR_ECLOSED with none; FR_EINTR when the interrupt
 * hook stopped the wait (*n_done items were sampled and their payloads
 * retained all the same). */
int fr_table_sample(fr_table *t, int64_t n, int64_t timeout_ns,
                    uint64_t *keys, double *probabilities, double *priorities,
                    int64_t *times_sampled, int64_t *table_sizes,
                    uint64_t *payloads, int64_t *n_done);

/* Apply deletes, then priority updates, under one lock (Reverb's order).
 * Unknown keys are ignored.  Every update priority is validated first: on an
 * invalid one *bad_index receives its index and nothing changes.
 * O((n_updates + n_deletes) log n). */
int fr_table_mutate(fr_table *t, int64_t n_updates, const uint64_t *keys,
                    const double *priorities, int64_t n_deletes,
                    const uint64_t *delete_keys, int64_t *bad_index);

/* Remove every item and zero the rate-limiter and table counters (episode
 * counts included). */
void fr_table_reset(fr_table *t);

int fr_table_can_sample(fr_table *t, int64_t n);
int fr_table_can_insert(fr_table *t, int64_t n);
int64_t fr_table_size(fr_table *t);
/* Stop counting episodes (num_episodes stays 0): a remote client's staging
 * queue, whose items only pass through, need not pay for it (~7% of an
 * outbox thread shipping one-step items, perf, session 17).  FR_OK, or
 * FR_EINVAL when the table holds items (nothing changes). */
int fr_table_skip_episodes(fr_table *t);
void fr_table_stats_get(fr_table *t, fr_table_stats *out);

/* Checkpoint restore: add an item exactly as it was saved (priority,
 * times_sampled, payload owned by the table on success), without rate-limiter
 * accounting or eviction.  FR_EKEY_EXISTS if the key is present,
 * FR_ETABLE_FULL if the table holds max_size items; FR_EPRIORITY_* for a
 * priority the selectors refuse. */
int fr_table_restore_item(fr_table *t, uint64_t key, double priority,
                          int64_t times_sampled, uint64_t payload);

/* Checkpoint restore: set the rate-limiter counters and statistics
 * (num_episodes stays what the restored items reference). */
void fr_table_restore_counters(fr_table *t, int64_t inserts, int64_t samples,
                               int64_t deletes, const fr_table_stats *stats);

/* Item keys drawn for this table (fr_writer_create_item): with a key prefix
 * p in [0, 255] every key has p in its top 8 bits (key >> 56 == p) and 56
 * random low bits; without one (the default, prefix -1) all 64 bits are
 * random.  Keys that callers give (fr_table_insert*, checkpoint restore) are
 * kept as they are.  Lock-free (one atomic word): a key drawn while the
 * prefix changes carries the old or the new prefix, never a mix. */
#define FR_KEY_PREFIX_SHIFT 56
/* Set the prefix, or clear it with -1.  FR_OK, or FR_EINVAL outside
 * [-1, 255] (nothing changes). */
int fr_table_set_key_prefix(fr_table *t, int32_t prefix);
/* The prefix, -1 when none. */
int32_t fr_table_key_prefix(const fr_table *t);
/* The key of a new item from 64 random bits: one mask and one or.  O(1). */
uint64_t fr_table_item_key(const fr_table *t, uint64_t random_bits);

/* The sampler's total mass, under the table lock: the sum over items of
 * priority^exponent (the sum-tree root: exact per fr_sumtree, 0 when every
 * priority is 0) for a Prioritized sampler; the item count for every other
 * sampler (Uniform, Fifo, Lifo and the heaps).  *size (unless NULL)
 * receives the item count read under the same lock.  O(1). */
double fr_table_priority_mass(fr_table *t, int64_t *size);

/* Copy the item with `key` into *out.  Returns 1 if found, else 0. */
int fr_table_get(fr_table *t, uint64_t key, fr_item *out);

/* Copy up to `cap` items, in insertion order, into out; returns how many
 * items the table holds (call again with a larger buffer if that exceeds
 * cap).  Payloads copied out are retained for the caller. */
int64_t fr_table_items(fr_table *t, fr_item *out, int64_t cap);

/* The oldest min(cap, size) items, oldest first, into out, for a table
 * whose remover or sampler is Fifo (its list is the insertion order): no
 * scan of the key map and no sort, and only those items' payloads are
 * retained for the caller (a remote writer's outbox exports its staging
 * queue this way: scanning and sorting every staged item cost ~15% of a
 * fast writer's time, perf, session 16).  Returns how many were copied,
 * or -1 (nothing copied) for a table without a Fifo selector. */
int64_t fr_table_items_oldest(fr_table *t, fr_item *out, int64_t cap);

/* Take up to `cap` of a queue's oldest items out of it, into out, oldest
 * first: what sampling them does to a table with a Fifo sampler and
 * max_times_sampled 1 (each draw counted, the item expired, writers waiting
 * for room let in), without waiting for the rate limiter.  Each payload's
 * reference passes to the caller, released after the lock is dropped (a
 * remote writer's outbox exported its staging queue and then sampled the
 * same items: the second pass, and payloads freed under the lock the
 * writer thread waits for, session 23).  Returns how many were taken, or
 * -1 (nothing taken) for a table that is not such a queue. */
int64_t fr_table_take_oldest(fr_table *t, fr_item *out, int64_t cap);

#endif /* FASTREPLAY_TABLE_H */
