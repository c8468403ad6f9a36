#include "slots_internal.h"

#include "pool.h"


#include <stdlib.h>
#include <string.h>

/* n rows of rb bytes, src_stride apart, to dst back to back; the common
 * sizes as fixed-size copies (single moves) instead of memcpy calls. */
static void copy_strided(unsigned char *dst, const unsigned char *src, int64_t n,
                         int64_t rb, int64_t src_stride) {
    switch (rb) {
    case 4:
        for (int64_t i = 0; i < n; i++) memcpy(dst + 4 * i, src + i * src_stride, 4);
        break;
    case 8:
        for (int64_t i = 0; i < n; i++) memcpy(dst + 8 * i, src + i * src_stride, 8);
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + rb * i, src + i * src_stride, (size_t)rb);
    }
}

/* How many slots from slots[i] on are consecutive rows of one record chunk
 * (ALF's windows, rlightning's episodes: one strided copy per column). */
static int64_t run_length(const fr_slots *s, const int64_t *slots, int64_t i,
                          int64_t n) {
    if (!s->has_record) return 1;
    int32_t k = s->n_cells;
    const cell *first = s->cells + slots[i] * k;
    int64_t j = i + 1;
    while (j < n && slots[j] == slots[j - 1] + 1) {
        const cell *x = s->cells + slots[j] * k;
        if (x->chunk != first->chunk || x->row != first->row + (j - i)) break;
        j++;
    }
    return j - i;
}

/* Rows of slots[i .. i + len) into outs (cells checked occupied; a run of
 * one record chunk when len > 1). */
static int copy_run(const fr_slots *s, const int64_t *slots, int64_t i, int64_t len,
                    void *const *outs, void *scratch, int64_t *bad) {
    const cell *row = s->cells + slots[i] * s->n_cells;
    const unsigned char *record = NULL;
    if (s->has_record) record = row[0].chunk->data + row[0].row * s->record_bytes;
    for (int32_t c = 0; c < s->n_cols; c++) {
        int64_t rb = s->specs[c]->row_bytes;
        unsigned char *dst = (unsigned char *)outs[c] + i * rb;
        if (s->offset_of[c] >= 0) {
            copy_strided(dst, record + s->offset_of[c], len, rb, s->record_bytes);
            continue;
        }
        for (int64_t j = 0; j < len; j++, dst += rb) { /* own chunk per row */
            const cell *x = &s->cells[slots[i + j] * s->n_cells + s->cell_of[c]];
            if (!x->chunk->compressed)
                memcpy(dst, x->chunk->data + x->row * rb, (size_t)rb);
            else if (fr_chunk_read(x->chunk, (int32_t)x->row, 1, dst, scratch) != FR_OK) {
                *bad = -2 - c;
                return FR_ECORRUPT;
            }
        }
    }
    return FR_OK;
}

enum { AHEAD = 16 };

/* Copy slots[lo .. hi): runs of consecutive rows at a time, prefetching
 * every line of the records AHEAD slots ahead (random slots, or the start
 * of the next window, are otherwise each a cache miss that stalls the copy:
 * 256 random slots of 200k, four small columns, 65 -> 22 us with the packed
 * record and this; ALF's 256 windows of 8 steps, seven columns, 100 -> 62 us
 * with the runs). */
static int copy_range(const fr_slots *s, const int64_t *slots, int64_t lo, int64_t hi,
                      void *const *outs, int64_t *bad) {
    void *scratch = NULL;
    if (s->max_row_bytes > 0 && !(scratch = malloc((size_t)s->max_row_bytes)))
        return FR_ENOMEM;
    int rc = FR_OK;
    int32_t k = s->n_cells;
    int64_t pf = lo; /* records prefetched for slots [lo, pf) */
    for (int64_t i = lo; rc == FR_OK && i < hi;) {
        int64_t len = run_length(s, slots, i, hi);
        for (; s->has_record && pf < hi && pf < i + len + AHEAD; pf++) {
            const cell *x = s->cells + slots[pf] * k;
            const unsigned char *rec = x->chunk->data + x->row * s->record_bytes;
            for (int64_t b = 0; b < s->record_bytes; b += 64) __builtin_prefetch(rec + b);
            __builtin_prefetch(rec + s->record_bytes - 1);
        }
        rc = copy_run(s, slots, i, len, outs, scratch, bad);
        i += len;
    }
    free(scratch);
    return rc;
}

/* A read large enough for the worker pool (pool.h): shares of consecutive
 * slots, each copied by one thread.  Random rows are latency-bound, so two
 * threads keep twice as many misses in flight (ALF's replay(256, 8), 2048
 * rows of 136 bytes: see slots.h). */
#define FR_SLOTS_POOL_BYTES ((int64_t)128 << 10)

typedef struct read_job {
    const fr_slots *s;
    const int64_t *slots;
    void *const *outs;
} read_job;

static int read_range(void *arg, int64_t lo, int64_t hi, int64_t *bad) {
    read_job *j = arg;
    return copy_range(j->s, j->slots, lo, hi, j->outs, bad);
}

int fr_slots_read(fr_slots *s, int64_t n, const int64_t *slots, void *const *outs,
                  int32_t *counter, int64_t *bad) {
    *bad = -1;
    int rc = FR_OK;
    pthread_mutex_lock(&s->mu);
    int32_t k = s->n_cells;
    int64_t row_bytes = 0;
    for (int32_t c = 0; c < s->n_cols; c++) row_bytes += s->specs[c]->row_bytes;
    for (int64_t i = 0; i < n; i++) { /* check (and bring the cells in) */
        int64_t slot = slots[i];
        if (slot < 0 || slot >= s->capacity) {
            *bad = i;
            rc = FR_EINVAL;
            break;
        }
        if (!s->cells || !s->cells[slot * k].chunk) {
            *bad = i;
            rc = FR_EKEY_MISSING;
            break;
        }
    }
    int threads = rc == FR_OK && n * row_bytes >= FR_SLOTS_POOL_BYTES && n >= 64
                      ? fr_pool_threads() : 1;
    if (rc == FR_OK && threads > 1) {
        read_job j = {.s = s, .slots = slots, .outs = outs};
        rc = fr_pool_run_ranges(read_range, &j, n, threads, bad);
    } else if (rc == FR_OK) {
        rc = copy_range(s, slots, 0, n, outs, bad);
    }
    if (rc == FR_OK && counter)
        for (int64_t i = 0; i < n; i++) counter[slots[i]]++;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int64_t fr_slots_occupied(fr_slots *s, int64_t *out, int64_t cap) {
    pthread_mutex_lock(&s->mu);
    int64_t n = 0;
    if (s->cells)
        for (int64_t slot = 0; slot < s->capacity; slot++)
            if (s->cells[slot * s->n_cells].chunk) {
                if (n < cap) out[n] = slot;
                n++;
            }
    pthread_mutex_unlock(&s->mu);
    return n;
}

