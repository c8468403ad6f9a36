#define _POSIX_C_SOURCE 200809L
/* The table's queue of asynchronous inserts (fr_table_insert_async): items
 * from writers wait here, in order, until the rate limiter admits them. */

#include <stdlib.h>

#include "table_internal.h"

void fr_table_drain_queue(fr_table *t) {
    int64_t done = 0;
    while (t->queue_len > 0 && !t->closed &&
           fr_rate_limiter_can_insert(&t->limiter, 1)) {
        fr_async_insert *q = &t->queue[t->queue_head];
        int rc = fr_table_insert_locked(t, q->key, q->priority, q->payload);
        if (rc != FR_OK) {
            /* Dropped, not retried: its writer's next flush, end_episode or
             * create_item raises the cause instead of waiting for it. */
            fr_table_release_payload(t, q->payload);
            fr_sync_fail(q->sync, rc, q->key, t);
        }
        fr_sync_add(q->sync, -1, rc != FR_OK);
        fr_sync_release(q->sync);
        t->queue_head = (t->queue_head + 1) % t->queue_cap;
        t->queue_len--;
        done++;
    }
    if (done > 0) pthread_cond_broadcast(&t->can_sample_cv);
    /* Stall time is wall time with held-back inserts (not summed per item). */
    if (t->queue_len == 0 && t->queue_stalled_since) {
        t->st.insert_stall_ns += fr_now_ns() - t->queue_stalled_since;
        t->queue_stalled_since = 0;
    }
}

void fr_table_drop_queue(fr_table *t) {
    if (t->queue_stalled_since) {
        t->st.insert_stall_ns += fr_now_ns() - t->queue_stalled_since;
        t->queue_stalled_since = 0;
    }
    while (t->queue_len > 0) {
        fr_async_insert *q = &t->queue[t->queue_head];
        fr_table_release_payload(t, q->payload);
        fr_sync_fail(q->sync, FR_ECLOSED, q->key, t);
        fr_sync_add(q->sync, -1, 1);
        fr_sync_release(q->sync);
        t->queue_head = (t->queue_head + 1) % t->queue_cap;
        t->queue_len--;
    }
}

static int queue_push(fr_table *t, fr_async_insert item) {
    if (t->queue_len == t->queue_cap) {
        size_t cap = t->queue_cap ? t->queue_cap * 2 : 64;
        fr_async_insert *q = malloc(cap * sizeof *q);
        if (!q) return FR_ENOMEM;
        for (size_t i = 0; i < t->queue_len; i++)
            q[i] = t->queue[(t->queue_head + i) % t->queue_cap];
        free(t->queue);
        t->queue = q;
        t->queue_head = 0;
        t->queue_cap = cap;
    }
    t->queue[(t->queue_head + t->queue_len) % t->queue_cap] = item;
    t->queue_len++;
    return FR_OK;
}

int fr_table_insert_async(fr_table *t, uint64_t key, double priority,
                          uint64_t payload, fr_sync *sync) {
    int rc = fr_table_check_priority(t, priority);
    if (rc != FR_OK) return rc;
    pthread_mutex_lock(&t->mu);
    if (t->closed) {
        rc = FR_ECLOSED;
    } else if (t->queue_len == 0 && fr_rate_limiter_can_insert(&t->limiter, 1)) {
        /* Nothing queued ahead and admitted: insert now, without the queue
         * and the sync's counters (a writer step's most common case). */
        if ((rc = fr_table_insert_locked(t, key, priority, payload)) == FR_OK)
            pthread_cond_broadcast(&t->can_sample_cv);
    } else if ((rc = queue_push(t, (fr_async_insert){key, priority, payload,
                                                      sync})) == FR_OK) {
        fr_sync_retain(sync);
        fr_sync_add(sync, 1, 0);
        fr_table_drain_queue(t);
        if (t->queue_len > 0) { /* held back: a stall, timed until drained */
            t->st.num_insert_stalls++;
            if (!t->queue_stalled_since) t->queue_stalled_since = fr_now_ns();
        }
    }
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int64_t fr_table_take_oldest(fr_table *t, fr_item *out, int64_t cap) {
    pthread_mutex_lock(&t->mu);
    if (t->sampler.kind != FR_SEL_FIFO || t->max_times_sampled != 1) {
        pthread_mutex_unlock(&t->mu);
        return -1;
    }
    int64_t k = 0;
    /* What fr_table_sample does for each of these draws (a Fifo sampler
     * draws the oldest item, and one sample expires it), except that the
     * table's payload reference goes to the caller instead of being
     * released under the lock. */
    while (k < cap && !t->closed && t->sampler.size >= 1 &&
           fr_rate_limiter_can_sample(&t->limiter, 1)) {
        double p;
        int32_t slot = fr_selector_sample(&t->sampler, &t->rng, &p);
        fr_item *it = &t->items[slot];
        if (it->times_sampled++ == 0) t->st.num_unique_samples++;
        t->limiter.samples++;
        t->st.num_samples++;
        t->st.num_expired++;
        out[k++] = *it;
        fr_table_unlink_slot(t, slot);
    }
    if (k > 0) {
        fr_table_drain_queue(t);
        pthread_cond_broadcast(&t->can_insert_cv);
    }
    pthread_mutex_unlock(&t->mu);
    return k;
}
