#define _POSIX_C_SOURCE 200809L
/* fr_sync: the completion counter a writer shares with the tables holding
 * its queued inserts. */

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
    int64_t deadline = fr_deadline_from(timeout_ns);
    int rc = FR_OK;
    pthread_mutex_lock(&s->mu);
    while (s->pending > max_pending) {
        if (s->closed) {
            rc = FR_ECLOSED;
            break;
        }
        if (deadline == FR_NO_DEADLINE) {
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        if (fr_now_ns() >= deadline) {
            rc = FR_ETIMEOUT;
            break;
        }
        struct timespec ts = {deadline / 1000000000LL, deadline % 1000000000LL};
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int64_t fr_sync_dropped(fr_sync *s) {
    pthread_mutex_lock(&s->mu);
    int64_t n = s->dropped;
    pthread_mutex_unlock(&s->mu);
    return n;
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
