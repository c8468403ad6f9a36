#define _POSIX_C_SOURCE 200809L
/* fr_ring: see ring.h. */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "ring.h"
#include "rng.h"
#include "selector.h"
#include "sumtree.h"
#include "table_internal.h"

/* A record's header: the transition's priority and times sampled, beside
 * its rows, so a sampled row costs no cache miss of its own for them (as
 * separate arrays they were 2 of the 3 misses per row: sample 256 of 1M
 * 72 -> see ring.h). */
typedef struct rec_head {
    double priority;
    int64_t times;
} rec_head;

#define HEAD(r, slot) ((rec_head *)((r)->data + (slot) * (r)->rec))

struct fr_ring {
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* size grew, closed or sealed */
    int64_t cap, rec;           /* slots; bytes per record */
    int32_t n_cols;
    int64_t *row_bytes, *off;   /* per column: row size, offset in a record */
    unsigned char *data;        /* cap records: a header, then the rows */
    int prioritized, closed, sealed;
    double exponent, memo_p, memo_w;
    fr_sumtree tree;
    fr_rng rng;
    uint64_t next_key;
    int64_t size;
    fr_ring_stats st;
};

fr_ring *fr_ring_new(int64_t capacity, int32_t n_cols, const int64_t *row_bytes,
                     int prioritized, double exponent, uint64_t first_key,
                     uint64_t seed) {
    if (capacity < 1 || n_cols < 0) return NULL;
    fr_ring *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->row_bytes = malloc(sizeof(int64_t) * (size_t)(n_cols + 1));
    r->off = malloc(sizeof(int64_t) * (size_t)(n_cols + 1));
    if (!r->row_bytes || !r->off) goto fail;
    r->rec = (int64_t)sizeof(rec_head);
    for (int32_t c = 0; c < n_cols; c++) {
        r->row_bytes[c] = row_bytes[c];
        r->off[c] = r->rec;
        r->rec += row_bytes[c];
    }
    r->rec = (r->rec + 7) & ~(int64_t)7; /* records start 8-byte aligned */
    r->cap = capacity;
    r->n_cols = n_cols;
    r->data = fr_alloc_large((size_t)(capacity * r->rec));
    if (!r->data) goto fail;
    r->prioritized = prioritized;
    r->exponent = exponent;
    r->memo_p = r->memo_w = 0.0;
    if (prioritized && fr_sumtree_init(&r->tree, (size_t)capacity) != FR_OK) goto fail;
    if (pthread_mutex_init(&r->mu, NULL)) goto fail_tree;
    if (fr_init_cond(&r->cv)) {
        pthread_mutex_destroy(&r->mu);
        goto fail_tree;
    }
    fr_rng_seed(&r->rng, seed);
    r->next_key = first_key;
    r->st.capacity = capacity;
    return r;
fail_tree:
    if (prioritized) fr_sumtree_free(&r->tree);
fail:
    if (r->data) fr_free_large(r->data, (size_t)(capacity * r->rec));
    free(r->row_bytes);
    free(r->off);
    free(r);
    return NULL;
}

void fr_ring_free(fr_ring *r) {
    if (!r) return;
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    if (r->prioritized) fr_sumtree_free(&r->tree);
    fr_free_large(r->data, (size_t)(r->cap * r->rec));
    free(r->row_bytes);
    free(r->off);
    free(r);
}

/* fr_selector_check's rules for a Prioritized sampler. */
static int check_priority(const fr_ring *r, double p) {
    if (!r->prioritized) return FR_OK;
    if (isnan(p)) return FR_EPRIORITY_NAN;
    if (p < 0.0) return FR_EPRIORITY_NEG;
    if (p <= 1.0 || (r->exponent <= 1.0 && p <= FR_MAX_WEIGHT)) return FR_OK;
    return fr_priority_weight(p, r->exponent) <= FR_MAX_WEIGHT ? FR_OK
                                                               : FR_EPRIORITY_BIG;
}

static double weight(fr_ring *r, double p) {
    if (p != r->memo_p) {
        r->memo_p = p;
        r->memo_w = fr_priority_weight(p, r->exponent);
    }
    return r->memo_w;
}

/* Fixed-size moves for the common row sizes (a call to memcpy otherwise). */
static inline void copy_row(unsigned char *dst, const unsigned char *src, int64_t n) {
    switch (n) {
    case 1: memcpy(dst, src, 1); break;
    case 4: memcpy(dst, src, 4); break;
    case 8: memcpy(dst, src, 8); break;
    case 16: memcpy(dst, src, 16); break;
    case 32: memcpy(dst, src, 32); break;
    default: memcpy(dst, src, (size_t)n);
    }
}

static inline int64_t slot_of(const fr_ring *r, uint64_t key) {
    return (int64_t)(key % (uint64_t)r->cap);
}

int fr_ring_add(fr_ring *r, int64_t n, const void *const *cols, const int64_t *strides,
                const double *prios, double priority, uint64_t *key, int64_t *bad) {
    if (!strides) strides = r->row_bytes;
    int64_t skip = n > r->cap ? n - r->cap : 0;
    size_t *idx = NULL;
    if (r->prioritized && n > 0 && !(idx = malloc(sizeof(size_t) * (size_t)(n - skip))))
        return FR_ENOMEM;
    pthread_mutex_lock(&r->mu);
    *key = r->next_key;
    int rc = r->sealed ? FR_RING_MOVED : FR_OK;
    for (int64_t i = 0; rc == FR_OK && i < (prios ? n : 1); i++)
        if ((rc = check_priority(r, prios ? prios[i] : priority)) != FR_OK) *bad = i;
    if (rc != FR_OK) {
        pthread_mutex_unlock(&r->mu);
        free(idx);
        return rc;
    }
    int64_t m = 0;
    for (int64_t i = skip; i < n; i++) {
        int64_t slot = slot_of(r, r->next_key + (uint64_t)i);
        unsigned char *rec = r->data + slot * r->rec;
        for (int32_t c = 0; c < r->n_cols; c++)
            copy_row(rec + r->off[c],
                     (const unsigned char *)cols[c] + i * strides[c],
                     r->row_bytes[c]);
        double p = prios ? prios[i] : priority;
        HEAD(r, slot)->priority = p;
        HEAD(r, slot)->times = 0;
        if (idx) {
            fr_sumtree_set_leaf(&r->tree, (size_t)slot, weight(r, p));
            idx[m++] = (size_t)slot;
        }
    }
    if (idx) fr_sumtree_fix_up(&r->tree, idx, (size_t)m);
    r->next_key += (uint64_t)n;
    r->st.inserts += n;
    r->size = r->size + n < r->cap ? r->size + n : r->cap;
    if (n > 0) pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    free(idx);
    return FR_OK;
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
    if (!slots || (r->prioritized && !u)) {
        free(slots);
        free(u);
        return FR_ENOMEM;
    }
    int64_t deadline = fr_deadline_from(timeout_ns);
    pthread_mutex_lock(&r->mu);
    int rc = wait_for(r, min_size > 1 ? min_size : 1, deadline);
    if (rc != FR_OK) {
        pthread_mutex_unlock(&r->mu);
        free(slots);
        free(u);
        return rc;
    }
    uint64_t oldest = r->next_key - (uint64_t)r->size;
    double total = r->prioritized ? fr_sumtree_total(&r->tree) : 0.0;
    if (total > 0.0) {
        for (int64_t i = 0; i < n; i++) u[i] = fr_rng_uniform(&r->rng);
        fr_sumtree_find_many(&r->tree, (size_t)n, u, slots);
        int64_t base = slot_of(r, oldest);
        for (int64_t i = 0; i < n; i++) {
            int64_t d = slots[i] - base;
            keys[i] = oldest + (uint64_t)(d < 0 ? d + r->cap : d);
            probs[i] = fr_sumtree_get(&r->tree, (size_t)slots[i]) / total;
        }
    } else { /* uniform, or every weight zero (as fr_selector) */
        double p = 1.0 / (double)r->size;
        for (int64_t i = 0; i < n; i++) {
            keys[i] = oldest + fr_rng_below(&r->rng, (uint64_t)r->size);
            slots[i] = slot_of(r, keys[i]);
            probs[i] = p;
            __builtin_prefetch(r->data + slots[i] * r->rec);
        }
    }
    for (int64_t i = 0; i < n; i++) {
        if (i + 8 < n) __builtin_prefetch(r->data + slots[i + 8] * r->rec);
        const unsigned char *rec = r->data + slots[i] * r->rec;
        for (int32_t c = 0; c < r->n_cols; c++)
            copy_row((unsigned char *)outs[c] + i * r->row_bytes[c], rec + r->off[c],
                     r->row_bytes[c]);
        prios[i] = ((const rec_head *)rec)->priority;
        if (((rec_head *)rec)->times++ == 0) r->st.unique_samples++;
    }
    r->st.samples += n;
    *size = r->size;
    pthread_mutex_unlock(&r->mu);
    free(slots);
    free(u);
    return FR_OK;
}

int fr_ring_update(fr_ring *r, int64_t n, const uint64_t *keys, const double *prios,
                   int64_t *bad) {
    size_t *idx = NULL;
    if (r->prioritized && n > 0 && !(idx = malloc(sizeof(size_t) * (size_t)n)))
        return FR_ENOMEM;
    pthread_mutex_lock(&r->mu);
    int rc = r->sealed ? FR_RING_MOVED : FR_OK;
    for (int64_t i = 0; rc == FR_OK && i < n; i++)
        if ((rc = check_priority(r, prios[i])) != FR_OK) *bad = i;
    if (rc != FR_OK) {
        pthread_mutex_unlock(&r->mu);
        free(idx);
        return rc;
    }
    uint64_t oldest = r->next_key - (uint64_t)r->size;
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (keys[i] < oldest || keys[i] >= r->next_key) continue; /* evicted */
        int64_t slot = slot_of(r, keys[i]);
        HEAD(r, slot)->priority = prios[i];
        if (idx) {
            fr_sumtree_set_leaf(&r->tree, (size_t)slot, weight(r, prios[i]));
            idx[m++] = (size_t)slot;
        }
        r->st.updates++;
    }
    if (idx) fr_sumtree_fix_up(&r->tree, idx, (size_t)m);
    pthread_mutex_unlock(&r->mu);
    free(idx);
    return FR_OK;
}

int fr_ring_read(fr_ring *r, int64_t first, int64_t n, void *const *outs,
                 uint64_t *keys, double *prios, int64_t *times) {
    pthread_mutex_lock(&r->mu);
    if (first < 0 || n < 0 || first + n > r->size) {
        pthread_mutex_unlock(&r->mu);
        return FR_EINVAL;
    }
    uint64_t oldest = r->next_key - (uint64_t)r->size;
    for (int64_t i = 0; i < n; i++) {
        uint64_t key = oldest + (uint64_t)(first + i);
        int64_t slot = slot_of(r, key);
        const unsigned char *rec = r->data + slot * r->rec;
        for (int32_t c = 0; c < r->n_cols; c++)
            copy_row((unsigned char *)outs[c] + i * r->row_bytes[c], rec + r->off[c],
                     r->row_bytes[c]);
        keys[i] = key;
        prios[i] = ((const rec_head *)rec)->priority;
        times[i] = ((const rec_head *)rec)->times;
    }
    pthread_mutex_unlock(&r->mu);
    return FR_OK;
}

int fr_ring_restore(fr_ring *r, const fr_ring_stats *st, const int64_t *times,
                    int64_t n) {
    pthread_mutex_lock(&r->mu);
    if (n != r->size) {
        pthread_mutex_unlock(&r->mu);
        return FR_EINVAL;
    }
    uint64_t oldest = r->next_key - (uint64_t)r->size;
    for (int64_t i = 0; i < n; i++)
        HEAD(r, slot_of(r, oldest + (uint64_t)i))->times = times[i];
    r->st.inserts = st->inserts;
    r->st.samples = st->samples;
    r->st.updates = st->updates;
    r->st.unique_samples = st->unique_samples;
    pthread_mutex_unlock(&r->mu);
    return FR_OK;
}

static void set_flag(fr_ring *r, int *flag) {
    pthread_mutex_lock(&r->mu);
    *flag = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

void fr_ring_close(fr_ring *r) { set_flag(r, &r->closed); }
void fr_ring_seal(fr_ring *r) { set_flag(r, &r->sealed); }

void fr_ring_stats_get(fr_ring *r, fr_ring_stats *out) {
    pthread_mutex_lock(&r->mu);
    *out = r->st;
    out->size = r->size;
    out->next_key = r->next_key;
    pthread_mutex_unlock(&r->mu);
}
