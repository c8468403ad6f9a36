#define _POSIX_C_SOURCE 200809L
/* fr_sync: the completion counter a writer shares with the tables holding
 * its queued inserts; and the one timed wait every blocking call uses. */

#include <stdlib.h>

#include "table_internal.h"

int fr_init_cond(pthread_cond_t *cv) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(cv, &attr);
    pthread_condattr_destroy(&attr);
    return rc;
}

static fr_interrupt_fn interrupt_hook;

void fr_interrupt_install(fr_interrupt_fn hook) { interrupt_hook = hook; }

int fr_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu,
                       int64_t deadline, int64_t *next_check) {
    int64_t now = fr_now_ns();
    if (deadline != FR_NO_DEADLINE && now >= deadline) return FR_ETIMEOUT;
    fr_interrupt_fn hook = interrupt_hook;
    int64_t until = deadline;
    if (hook) {
        if (*next_check == 0) *next_check = now + FR_INTERRUPT_SLICE_NS;
        if (now >= *next_check) {
            /* Unlocked: the hook may take a lock (the GIL) that another
             * thread holds while it waits for `mu`. */
            pthread_mutex_unlock(mu);
            int stop = hook();
            pthread_mutex_lock(mu);
            *next_check = fr_now_ns() + FR_INTERRUPT_SLICE_NS;
            return stop ? FR_EINTR : FR_OK;
        }
        if (*next_check < until) until = *next_check;
    }
    if (until == FR_NO_DEADLINE) {
        pthread_cond_wait(cv, mu);
    } else {
        struct timespec ts = {until / 1000000000LL, until % 1000000000LL};
        pthread_cond_timedwait(cv, mu, &ts);
    }
    return FR_OK;
}

fr_sync *fr_sync_new(void) {
    fr_sync *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (pthread_mutex_init(&s->mu, NULL) || fr_init_cond(&s->cv)) {
        free(s);
        return NULL;
    }
    s->refs = 1;
    return s;
}

void fr_sync_retain(fr_sync *s) {
    pthread_mutex_lock(&s->mu);
    s->refs++;
    pthread_mutex_unlock(&s->mu);
}

void fr_sync_release(fr_sync *s) {
    pthread_mutex_lock(&s->mu);
    int64_t left = --s->refs;
    pthread_mutex_unlock(&s->mu);
    if (left) return;
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void fr_sync_add(fr_sync *s, int64_t delta, int64_t dropped) {
    pthread_mutex_lock(&s->mu);
    s->pending += delta;
    s->dropped += dropped;
    if (delta < 0) pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

int fr_sync_wait(fr_sync *s, int64_t max_pending, int64_t timeout_ns) {
    int64_t deadline = fr_deadline_from(timeout_ns), next_check = 0;
    int rc = FR_OK;
    pthread_mutex_lock(&s->mu);
    while (s->pending > max_pending && s->failed == FR_OK) {
        if (s->closed) {
            rc = FR_ECLOSED;
            break;
        }
        if ((rc = fr_cond_wait_until(&s->cv, &s->mu, deadline, &next_check)) != FR_OK)
            break;
    }
    if (rc == FR_OK && s->failed != FR_OK) rc = FR_EASYNC;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int64_t fr_sync_dropped(fr_sync *s) {
    pthread_mutex_lock(&s->mu);
    int64_t n = s->dropped;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void fr_sync_fail(fr_sync *s, int status, uint64_t key, const fr_table *table) {
    pthread_mutex_lock(&s->mu);
    if (s->failed == FR_OK) {
        s->failed = status;
        s->failed_key = key;
        s->failed_table = table;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

int fr_sync_failed(fr_sync *s) {
    /* Read without the lock (every writer call asks): `failed` changes only
     * under it, and a failure recorded concurrently is seen by the next call. */
    return atomic_load_explicit(&s->failed, memory_order_acquire);
}

int fr_sync_take_failure(fr_sync *s, uint64_t *key, const fr_table **table) {
    pthread_mutex_lock(&s->mu);
    int rc = s->failed;
    *key = s->failed_key;
    *table = s->failed_table;
    s->failed = FR_OK;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void fr_sync_close(fr_sync *s) {
    pthread_mutex_lock(&s->mu);
    s->closed = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

int64_t fr_sync_pending(fr_sync *s) {
    pthread_mutex_lock(&s->mu);
    int64_t n = s->pending;
    pthread_mutex_unlock(&s->mu);
    return n;
}
