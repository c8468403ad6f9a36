/* Private to the table's sources (table.c, table_queue.c, table_info.c,
 * sync.c): the table's layout and the helpers they share.  Not part of the
 * core's interface; include after defining _POSIX_C_SOURCE. */
#ifndef FASTREPLAY_TABLE_INTERNAL_H
#define FASTREPLAY_TABLE_INTERNAL_H

#include <stdatomic.h>
#include <time.h>

#include "table.h"

typedef struct fr_async_insert {
    uint64_t key;
    double priority;
    uint64_t payload;
    fr_sync *sync;
} fr_async_insert;

struct fr_table {
    pthread_mutex_t mu;
    pthread_cond_t can_insert_cv; /* signalled after samples, deletes, reset */
    pthread_cond_t can_sample_cv; /* signalled after inserts, reset */
    fr_selector sampler, remover;
    fr_rate_limiter limiter;
    fr_keymap index;      /* key -> slot */
    fr_keymap episodes;   /* episode id -> number of items referencing it */
    fr_item *items;       /* by slot */
    size_t items_cap;     /* slots allocated in items (>= capacity) */
    int32_t *free_slots;  /* stack of unused slots */
    int64_t num_free;
    size_t capacity;
    int64_t max_size, max_times_sampled;
    uint64_t next_seq;
    fr_rng rng;
    fr_payload_ops ops;
    fr_table_stats st;
    double *scratch;      /* uniforms for batched sampling */
    int64_t *scratch_slots;
    size_t scratch_cap;
    fr_async_insert *queue; /* ring of pending async inserts */
    int64_t queue_stalled_since; /* when held-back inserts began waiting, or 0 */
    size_t queue_head, queue_len, queue_cap;
    int closed;
    /* Item key prefix (fr_table_item_key): 0 for none, else the prefix in
     * the top 8 bits and 1 in bit 0.  One word, so a key never mixes an old
     * and a new prefix. */
    _Atomic uint64_t key_word;
    /* While set (a bulk insert), payloads the table lets go of are kept
     * here, up to deferred_cap, to be released after the lock is dropped. */
    uint64_t *deferred;
    int64_t num_deferred, deferred_cap;
};

/* Payloads a bulk insert let go of, released after the table lock. */
typedef struct fr_table_released {
    uint64_t *payloads;
    int64_t n;
} fr_table_released;

FR_INLINE int64_t fr_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

FR_INLINE int64_t fr_deadline_from(int64_t timeout_ns) {
    if (timeout_ns < 0) return FR_NO_DEADLINE;
    int64_t now = fr_now_ns();
    return timeout_ns > FR_NO_DEADLINE - now ? FR_NO_DEADLINE : now + timeout_ns;
}

/* A condition variable on CLOCK_MONOTONIC (deadlines use fr_now_ns). */
int fr_init_cond(pthread_cond_t *cv);

/* The one timed wait of the core: with `mu` held, wait on cv until
 * signalled, until the absolute `deadline` (FR_NO_DEADLINE: forever) or for
 * at most one interrupt slice.  Once a slice (FR_INTERRUPT_SLICE_NS, counted
 * from *next_check, which a caller sets to 0 before its first wait) has
 * passed it calls the interrupt hook with `mu` released.  Returns FR_OK
 * (re-check the predicate: the state may have changed), FR_ETIMEOUT once
 * the deadline has passed, or FR_EINTR when the hook asked to stop. */
int fr_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu,
                       int64_t deadline, int64_t *next_check);

/* Add delta to a sync's pending count (and `dropped` to its drop count),
 * waking its waiters when something completed. */
void fr_sync_add(fr_sync *s, int64_t delta, int64_t dropped);

/* With the table lock held: */
int fr_table_ensure_slot(fr_table *t); /* room for one more item */
int fr_table_insert_locked(fr_table *t, uint64_t key, double priority,
                           uint64_t payload);
void fr_table_release_payload(fr_table *t, uint64_t payload);
/* Remove the item in `slot` from both selectors, the index and the episode
 * counts and count a rate-limiter delete; its payload reference is left to
 * the caller (fr_table_release_payload, or handed on). */
void fr_table_unlink_slot(fr_table *t, int32_t slot);
/* Count the episodes of a payload entering the table: FR_OK, or FR_ENOMEM
 * with nothing counted. */
int fr_table_episodes_add(fr_table *t, uint64_t payload);
/* Uncount them when it leaves; an episode no item references any more counts
 * as deleted. */
void fr_table_episodes_remove(fr_table *t, uint64_t payload);
/* Insert n items as fr_table_insert_locked would one by one (the rate
 * limiter admitted them all), with one sum-tree pass and prefetching
 * (table_bulk.c).  Stops at the first failure (*n_done: how many were
 * inserted).  Payloads it let go of are left in *released, for
 * fr_table_release_all once the lock is dropped. */
int fr_table_insert_bulk_locked(fr_table *t, int64_t n, const uint64_t *keys,
                                const double *priorities, const uint64_t *payloads,
                                int64_t *n_done, fr_table_released *released);
/* Release them (ops.release_many when set) and free the list; no lock
 * needed. */
void fr_table_release_all(fr_table *t, fr_table_released *released);
/* Insert queued async items while the rate limiter admits them. */
void fr_table_drain_queue(fr_table *t);
/* Discard every queued async insert (closing or freeing the table). */
void fr_table_drop_queue(fr_table *t);

#endif /* FASTREPLAY_TABLE_INTERNAL_H */
