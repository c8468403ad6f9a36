#define _POSIX_C_SOURCE 200809L
/* fr_ring: lifecycle, adds and priorities (sampling: ring_read.c). */

#include <math.h>
#include <stdlib.h>

#include "mem.h"
#include "ring_internal.h"
#include "selector.h"
#include "table_internal.h"

static void free_arrays(fr_ring *r) {
    free(r->row_bytes);
    free(r->off);
    free(r->packed);
    free(r);
}

fr_ring *fr_ring_new(int64_t capacity, int32_t n_cols, const int64_t *row_bytes,
                     const int32_t *packed, fr_store *store, int prioritized,
                     double exponent, uint64_t first_key, uint64_t seed) {
    if (capacity < 1 || n_cols < 0) return NULL;
    fr_ring *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    size_t k = (size_t)n_cols + 1;
    r->row_bytes = malloc(sizeof(int64_t) * k);
    r->off = malloc(sizeof(int64_t) * k);
    r->packed = calloc(k, sizeof(int32_t));
    if (!r->row_bytes || !r->off || !r->packed) {
        free_arrays(r);
        return NULL;
    }
    /* Chunk pointers first (8-byte aligned after the header), then rows. */
    r->rec = (int64_t)sizeof(rec_head);
    for (int pass = 1; pass >= 0; pass--)
        for (int32_t c = 0; c < n_cols; c++) {
            int is_packed = packed && packed[c] && store;
            if (is_packed != pass) continue;
            r->row_bytes[c] = row_bytes[c];
            r->packed[c] = is_packed;
            r->off[c] = r->rec;
            r->rec += is_packed ? (int64_t)sizeof(fr_chunk *) : row_bytes[c];
            r->any_packed |= is_packed;
        }
    r->rec = (r->rec + 7) & ~(int64_t)7; /* records start 8-byte aligned */
    r->cap = capacity;
    r->n_cols = n_cols;
    r->data = fr_alloc_large((size_t)(capacity * r->rec));
    if (!r->data) {
        free_arrays(r);
        return NULL;
    }
    r->prioritized = prioritized;
    r->exponent = exponent;
    if ((prioritized && fr_sumtree_init(&r->tree, (size_t)capacity) != FR_OK) ||
        pthread_mutex_init(&r->mu, NULL)) {
        if (prioritized) fr_sumtree_free(&r->tree);
        fr_free_large(r->data, (size_t)(capacity * r->rec));
        free_arrays(r);
        return NULL;
    }
    if (fr_init_cond(&r->cv)) {
        pthread_mutex_destroy(&r->mu);
        if (prioritized) fr_sumtree_free(&r->tree);
        fr_free_large(r->data, (size_t)(capacity * r->rec));
        free_arrays(r);
        return NULL;
    }
    if (r->any_packed) {
        r->store = store;
        fr_store_retain(store);
    }
    fr_rng_seed(&r->rng, seed);
    r->next_key = first_key;
    r->st.capacity = capacity;
    return r;
}

/* The chunk of packed column c in a record. */
static fr_chunk *chunk_at(const fr_ring *r, int64_t slot, int32_t c) {
    fr_chunk *ch;
    memcpy(&ch, r->data + slot * r->rec + r->off[c], sizeof ch);
    return ch;
}

void fr_ring_free(fr_ring *r) {
    if (!r) return;
    if (r->any_packed) {
        uint64_t oldest = r->next_key - (uint64_t)r->size;
        for (int64_t i = 0; i < r->size; i++)
            for (int32_t c = 0; c < r->n_cols; c++)
                if (r->packed[c])
                    fr_chunk_release(chunk_at(r, fr_ring_slot(r, oldest + (uint64_t)i), c));
        fr_store_release(r->store);
    }
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    if (r->prioritized) fr_sumtree_free(&r->tree);
    fr_free_large(r->data, (size_t)(r->cap * r->rec));
    free_arrays(r);
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

/* One-row chunks of the packed columns of rows skip..n, made without the
 * mutex: made[(i - skip) * n_cols + c].  FR_OK or FR_ENOMEM (none kept). */
static int pack_rows(fr_ring *r, int64_t skip, int64_t n, const void *const *cols,
                     const int64_t *strides, fr_chunk **made) {
    for (int64_t i = skip; i < n; i++)
        for (int32_t c = 0; c < r->n_cols; c++) {
            if (!r->packed[c]) continue;
            fr_chunk *ch = fr_chunk_new(r->store, 0, 0, r->row_bytes[c]);
            const unsigned char *src = (const unsigned char *)cols[c] + i * strides[c];
            if (ch && fr_chunk_finalize(ch, src, 1, 0, 0, 1) != FR_OK) {
                fr_chunk_release(ch);
                ch = NULL;
            }
            made[(i - skip) * r->n_cols + c] = ch;
            if (!ch) return FR_ENOMEM;
        }
    return FR_OK;
}

int fr_ring_add(fr_ring *r, int64_t n, const void *const *cols, const int64_t *strides,
                const double *prios, double priority, uint64_t *key, int64_t *bad) {
    if (!strides) strides = r->row_bytes;
    int64_t skip = n > r->cap ? n - r->cap : 0, m = n - skip;
    int rc = FR_OK;
    for (int64_t i = 0; rc == FR_OK && i < (prios ? n : 1); i++)
        if ((rc = check_priority(r, prios ? prios[i] : priority)) != FR_OK) *bad = i;
    size_t *idx = NULL;
    fr_chunk **made = NULL; /* new chunks, then the ones they replace */
    if (rc == FR_OK && r->prioritized && m > 0 &&
        !(idx = malloc(sizeof(size_t) * (size_t)m)))
        rc = FR_ENOMEM;
    if (rc == FR_OK && r->any_packed && m > 0) {
        made = calloc((size_t)(m * r->n_cols), sizeof *made);
        rc = made ? pack_rows(r, skip, n, cols, strides, made) : FR_ENOMEM;
    }
    pthread_mutex_lock(&r->mu);
    *key = r->next_key;
    if (rc == FR_OK && r->sealed) rc = FR_RING_MOVED;
    if (rc == FR_OK) {
        uint64_t oldest = r->next_key - (uint64_t)r->size;
        int64_t t = 0;
        for (int64_t i = skip; i < n; i++) {
            uint64_t k = r->next_key + (uint64_t)i;
            int64_t slot = fr_ring_slot(r, k);
            /* The slot holds key k - cap if that is stored (not one of the
             * rows skipped above, which never were). */
            int live = k >= oldest + (uint64_t)r->cap &&
                       k - (uint64_t)r->cap < r->next_key;
            unsigned char *rec = r->data + slot * r->rec;
            for (int32_t c = 0; c < r->n_cols; c++) {
                if (r->packed[c]) {
                    fr_chunk **cell = &made[(i - skip) * r->n_cols + c], *old;
                    if (live) memcpy(&old, rec + r->off[c], sizeof old);
                    memcpy(rec + r->off[c], cell, sizeof *cell);
                    *cell = live ? old : NULL; /* released below */
                } else {
                    fr_ring_copy(rec + r->off[c],
                                 (const unsigned char *)cols[c] + i * strides[c],
                                 r->row_bytes[c]);
                }
            }
            double p = prios ? prios[i] : priority;
            HEAD(r, slot)->priority = p;
            HEAD(r, slot)->times = 0;
            if (idx) {
                fr_sumtree_set_leaf(&r->tree, (size_t)slot, weight(r, p));
                idx[t++] = (size_t)slot;
            }
        }
        if (idx) fr_sumtree_fix_up(&r->tree, idx, (size_t)t);
        r->next_key += (uint64_t)n;
        r->st.inserts += n;
        r->size = r->size + n < r->cap ? r->size + n : r->cap;
        if (n > 0) pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    if (made)
        for (int64_t j = 0; j < m * r->n_cols; j++)
            if (made[j]) fr_chunk_release(made[j]);
    free(made);
    free(idx);
    return rc;
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
        int64_t slot = fr_ring_slot(r, keys[i]);
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

int fr_ring_restore(fr_ring *r, const fr_ring_stats *st, const int64_t *times,
                    int64_t n) {
    pthread_mutex_lock(&r->mu);
    if (n != r->size) {
        pthread_mutex_unlock(&r->mu);
        return FR_EINVAL;
    }
    uint64_t oldest = r->next_key - (uint64_t)r->size;
    for (int64_t i = 0; i < n; i++)
        HEAD(r, fr_ring_slot(r, oldest + (uint64_t)i))->times = times[i];
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
