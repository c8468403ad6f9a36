#define _POSIX_C_SOURCE 200809L
/* fr_ring: sampling and reads (see ring.h); large ones on the worker pool. */

#include <stdlib.h>

#include "pool.h"
#include "ring_internal.h"
#include "table_internal.h"

/* A sample goes to the pool only when its work pays for waking a worker:
 * the thresholds gather.c measured for the same rows (1 MiB to decode,
 * 8 MiB of raw copies); shares are claimed dynamically, 4 per thread. */
#define POOL_MIN_DECODE_BYTES ((int64_t)1 << 20)
#define POOL_MIN_RAW_BYTES ((int64_t)8 << 20)
#define SHARES_PER_THREAD 4

/* Copy the records of slots[lo..hi) into row i of outs, with the mutex
 * held: raw columns, and packed ones too (decoded) when `held` is NULL;
 * else each packed row's chunk is retained into held[i * n_cols + c] for
 * decode_rows after the mutex is released (a chunk the ring then evicts
 * stays alive).  FR_OK or FR_ECORRUPT (*bad_col = the column). */
static int copy_rows(fr_ring *r, const int64_t *slots, int64_t lo, int64_t hi,
                     void *const *outs, fr_chunk **held, int32_t *bad_col) {
    for (int64_t i = lo; i < hi; i++) {
        if (i + 8 < hi) __builtin_prefetch(r->data + slots[i + 8] * r->rec);
        const unsigned char *rec = r->data + slots[i] * r->rec;
        for (int32_t c = 0; c < r->n_cols; c++) {
            unsigned char *dst = (unsigned char *)outs[c] + i * r->row_bytes[c];
            if (!r->packed[c]) {
                fr_ring_copy(dst, rec + r->off[c], r->row_bytes[c]);
                continue;
            }
            fr_chunk *ch;
            memcpy(&ch, rec + r->off[c], sizeof ch);
            if (held) {
                fr_chunk_retain(ch);
                held[i * r->n_cols + c] = ch;
                continue;
            }
            const unsigned char *row = fr_chunk_rows(ch, dst);
            if (!row) {
                *bad_col = c;
                return FR_ECORRUPT;
            }
            if (row != dst) memcpy(dst, row, (size_t)r->row_bytes[c]);
        }
    }
    return FR_OK;
}

/* Decode the held chunks of rows lo..hi into outs (no lock needed). */
static int decode_rows(const fr_ring *r, fr_chunk *const *held, int64_t lo, int64_t hi,
                       void *const *outs, int32_t *bad_col) {
    for (int64_t i = lo; i < hi; i++)
        for (int32_t c = 0; c < r->n_cols; c++) {
            if (!r->packed[c]) continue;
            unsigned char *dst = (unsigned char *)outs[c] + i * r->row_bytes[c];
            const unsigned char *row = fr_chunk_rows(held[i * r->n_cols + c], dst);
            if (!row) {
                *bad_col = c;
                return FR_ECORRUPT;
            }
            if (row != dst) memcpy(dst, row, (size_t)r->row_bytes[c]);
        }
    return FR_OK;
}

typedef struct copy_job {
    fr_ring *r;
    const int64_t *slots;
    void *const *outs;
    fr_chunk **held;
    int decode; /* 0: copy_rows, 1: decode_rows */
} copy_job;

static int copy_range(void *arg, int64_t lo, int64_t hi, int64_t *bad) {
    copy_job *j = arg;
    int32_t col = -1;
    int rc = j->decode ? decode_rows(j->r, j->held, lo, hi, j->outs, &col)
                       : copy_rows(j->r, j->slots, lo, hi, j->outs, j->held, &col);
    *bad = col;
    return rc;
}

/* The job over rows [0, n), on the pool when its `bytes` reach `min`. */
static int run(copy_job *j, int64_t n, int64_t bytes, int64_t min, int32_t *bad_col) {
    int threads = fr_pool_threads();
    int64_t bad = -1;
    int rc;
    if (threads < 2 || n < 2 || bytes < min) {
        rc = copy_range(j, 0, n, &bad);
    } else {
        int shares = n < threads * SHARES_PER_THREAD ? (int)n
                                                      : threads * SHARES_PER_THREAD;
        rc = fr_pool_run_ranges(copy_range, j, n, shares, &bad);
    }
    *bad_col = (int32_t)bad;
    return rc;
}

/* With the mutex held: wait until min_size are stored. */
static int wait_for(fr_ring *r, int64_t min_size, int64_t deadline) {
    int64_t next_check = 0, start = 0;
    int rc = FR_OK;
    while (rc == FR_OK && !r->sealed && r->size < min_size) {
        if (r->closed) {
            rc = FR_ECLOSED;
            break;
        }
        if (!start) {
            start = fr_now_ns();
            r->st.sample_stalls++;
        }
        rc = fr_cond_wait_until(&r->cv, &r->mu, deadline, &next_check);
    }
    if (start) r->st.sample_stall_ns += fr_now_ns() - start;
    if (r->sealed) return FR_RING_MOVED;
    return rc == FR_ETIMEOUT ? FR_ESAMPLE_TIMEOUT : rc;
}

int fr_ring_sample(fr_ring *r, int64_t n, int64_t min_size, int64_t timeout_ns,
                   void *const *outs, uint64_t *keys, double *probs, double *prios,
                   int64_t *size) {
    int64_t *slots = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    double *u = r->prioritized ? malloc(sizeof(double) * (size_t)(n > 0 ? n : 1)) : NULL;
    fr_chunk **held = r->any_packed && n > 0
                          ? calloc((size_t)(n * r->n_cols), sizeof *held) : NULL;
    if (!slots || (r->prioritized && !u) || (r->any_packed && n > 0 && !held)) {
        free(slots);
        free(u);
        free(held);
        return FR_ENOMEM;
    }
    int64_t deadline = fr_deadline_from(timeout_ns);
    pthread_mutex_lock(&r->mu);
    int rc = wait_for(r, min_size > 1 ? min_size : 1, deadline);
    if (rc != FR_OK) {
        pthread_mutex_unlock(&r->mu);
        free(slots);
        free(u);
        free(held);
        return rc;
    }
    uint64_t oldest = r->next_key - (uint64_t)r->size;
    double total = r->prioritized ? fr_sumtree_total(&r->tree) : 0.0;
    if (total > 0.0) {
        for (int64_t i = 0; i < n; i++) u[i] = fr_rng_uniform(&r->rng);
        fr_sumtree_find_many(&r->tree, (size_t)n, u, slots);
        int64_t base = fr_ring_slot(r, oldest);
        for (int64_t i = 0; i < n; i++) {
            int64_t d = slots[i] - base;
            keys[i] = oldest + (uint64_t)(d < 0 ? d + r->cap : d);
            probs[i] = fr_sumtree_get(&r->tree, (size_t)slots[i]) / total;
        }
    } else { /* uniform, or every weight zero (as fr_selector) */
        double p = 1.0 / (double)r->size;
        for (int64_t i = 0; i < n; i++) {
            keys[i] = oldest + fr_rng_below(&r->rng, (uint64_t)r->size);
            slots[i] = fr_ring_slot(r, keys[i]);
            probs[i] = p;
            __builtin_prefetch(r->data + slots[i] * r->rec);
        }
    }
    int64_t packed = 0, raw = 0;
    for (int32_t c = 0; c < r->n_cols; c++)
        *(r->packed[c] ? &packed : &raw) += r->row_bytes[c] * n;
    int32_t bad_col = -1;
    copy_job j = {.r = r, .slots = slots, .outs = outs, .held = held};
    run(&j, n, raw, POOL_MIN_RAW_BYTES, &bad_col); /* raw rows: cannot fail */
    for (int64_t i = 0; i < n; i++) {
        rec_head *h = HEAD(r, slots[i]);
        prios[i] = h->priority;
        if (h->times++ == 0) r->st.unique_samples++;
    }
    r->st.samples += n;
    *size = r->size;
    pthread_mutex_unlock(&r->mu);
    if (held) { /* decode without the mutex: adds go on meanwhile */
        j.decode = 1;
        rc = run(&j, n, packed, POOL_MIN_DECODE_BYTES, &bad_col);
        for (int64_t k = 0; k < n * r->n_cols; k++)
            if (held[k]) fr_chunk_release(held[k]);
        free(held);
    }
    free(slots);
    free(u);
    return rc;
}


int fr_ring_read(fr_ring *r, int64_t first, int64_t n, void *const *outs,
                 uint64_t *keys, double *prios, int64_t *times) {
    int64_t *slots = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    if (!slots) return FR_ENOMEM;
    pthread_mutex_lock(&r->mu);
    int rc = FR_EINVAL;
    if (first >= 0 && n >= 0 && first + n <= r->size) {
        uint64_t oldest = r->next_key - (uint64_t)r->size;
        for (int64_t i = 0; i < n; i++) {
            keys[i] = oldest + (uint64_t)(first + i);
            slots[i] = fr_ring_slot(r, keys[i]);
            prios[i] = HEAD(r, slots[i])->priority;
            times[i] = HEAD(r, slots[i])->times;
        }
        int32_t bad_col = -1;
        rc = copy_rows(r, slots, 0, n, outs, NULL, &bad_col);
    }
    pthread_mutex_unlock(&r->mu);
    free(slots);
    return rc;
}
