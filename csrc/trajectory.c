#include "trajectory.h"

#include "frames.h"
#include "traj_bulk.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

int fr_spec_equal(const fr_spec *a, const fr_spec *b) {
    if (a->dtype != b->dtype || a->itemsize != b->itemsize || a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

static pthread_mutex_t intern_mu = PTHREAD_MUTEX_INITIALIZER;
static const fr_spec **interned; /* open addressing, power-of-2 capacity */
static size_t n_interned, intern_cap;

static size_t spec_hash(const fr_spec *s) {
    uint64_t h = (uint64_t)s->dtype * 31u + (uint64_t)s->itemsize;
    h = h * 131u + (uint64_t)s->ndim;
    for (int i = 0; i < s->ndim; i++) h = h * 1000003u + (uint64_t)s->shape[i];
    return (size_t)(h * 0x9e3779b97f4a7c15ULL >> 17);
}

static const fr_spec **intern_slot(const fr_spec **table, size_t cap,
                                   const fr_spec *s) {
    size_t i = spec_hash(s) & (cap - 1);
    while (table[i] && !fr_spec_equal(table[i], s)) i = (i + 1) & (cap - 1);
    return &table[i];
}

/* Forks keep the interned specs consistent: the mutex is held across fork()
 * (a child of a thread that was interning would otherwise inherit it
 * locked forever) and released on both sides. */
static void intern_lock(void) { pthread_mutex_lock(&intern_mu); }
static void intern_unlock(void) { pthread_mutex_unlock(&intern_mu); }
static void intern_register_fork(void) {
    pthread_atfork(intern_lock, intern_unlock, intern_unlock);
}

const fr_spec *fr_spec_intern(const fr_spec *s) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, intern_register_fork);
    const fr_spec *out = NULL;
    pthread_mutex_lock(&intern_mu);
    if (2 * (n_interned + 1) > intern_cap) {
        size_t cap = intern_cap ? 2 * intern_cap : 64;
        const fr_spec **table = calloc(cap, sizeof *table);
        if (!table) goto done;
        for (size_t i = 0; i < intern_cap; i++)
            if (interned[i]) *intern_slot(table, cap, interned[i]) = interned[i];
        free(interned);
        interned = table;
        intern_cap = cap;
    }
    const fr_spec **slot = intern_slot(interned, intern_cap, s);
    if (!*slot) {
        fr_spec *copy = calloc(1, sizeof *copy);
        if (!copy) goto done;
        copy->dtype = s->dtype;
        copy->itemsize = s->itemsize;
        copy->ndim = s->ndim;
        copy->row_bytes = s->row_bytes;
        for (int i = 0; i < s->ndim; i++) copy->shape[i] = s->shape[i];
        *slot = copy;
        n_interned++;
    }
    out = *slot;
done:
    pthread_mutex_unlock(&intern_mu);
    return out;
}

fr_trajectory *fr_trajectory_new(int32_t n_columns, int32_t max_slices) {
    size_t size = sizeof(fr_trajectory) + (size_t)n_columns * sizeof(fr_traj_column) +
                  (size_t)max_slices * sizeof(fr_slice);
    /* Cleared up to the slices (written as they are pushed); malloc, not
     * calloc, for the reason in fr_chunk_new. */
    fr_trajectory *t = malloc(size);
    if (!t) return NULL;
    memset(t, 0, sizeof(fr_trajectory) + (size_t)n_columns * sizeof(fr_traj_column));
    atomic_init(&t->refs, 1);
    atomic_init(&t->scratch_bytes, -1);
    t->n_columns = n_columns;
    t->columns = (fr_traj_column *)(t + 1);
    t->slices = (fr_slice *)(t->columns + n_columns);
    for (int32_t c = 0; c < n_columns; c++) t->columns[c].first_slice = -1;
    return t;
}

void fr_trajectory_push_row(fr_trajectory *t, int32_t col, fr_chunk *chunk,
                            int32_t offset) {
    fr_traj_column *c = &t->columns[col];
    if (c->first_slice < 0) c->first_slice = t->n_slices;
    if (c->n_slices > 0) {
        fr_slice *last = &t->slices[t->n_slices - 1];
        if (last->chunk == chunk && last->offset + last->length == offset) {
            last->length++;
            c->length++;
            return;
        }
    }
    fr_chunk_retain(chunk);
    t->slices[t->n_slices++] = (fr_slice){chunk, offset, 1};
    c->n_slices++;
    c->length++;
}

void fr_trajectory_push_slice(fr_trajectory *t, int32_t col, fr_chunk *chunk,
                              int32_t offset, int32_t length) {
    fr_traj_column *c = &t->columns[col];
    if (c->first_slice < 0) c->first_slice = t->n_slices;
    c->length += length;
    if (c->n_slices > 0) {
        fr_slice *last = &t->slices[t->n_slices - 1];
        if (last->chunk == chunk && last->offset + last->length == offset) {
            last->length += length;
            return;
        }
    }
    fr_chunk_retain(chunk);
    t->slices[t->n_slices++] = (fr_slice){chunk, offset, length};
    c->n_slices++;
}

void fr_trajectory_release(fr_trajectory *t) {
    if (atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1)
        return;
    for (int32_t i = 0; i < t->n_slices; i++) fr_chunk_release(t->slices[i].chunk);
    fr_trajectory_free_memory(t);
}

const fr_chunk *fr_trajectory_unready(const fr_trajectory *t) {
    for (int32_t i = 0; i < t->n_slices; i++)
        if (!atomic_load_explicit(&t->slices[i].chunk->ready, memory_order_acquire))
            return t->slices[i].chunk;
    return NULL;
}

int fr_trajectory_ready(const fr_trajectory *t) { return fr_trajectory_unready(t) == NULL; }

int fr_trajectory_read_column(const fr_trajectory *t, int32_t col, void *dst,
                              void *scratch) {
    const fr_traj_column *c = &t->columns[col];
    unsigned char *out = dst;
    for (int32_t i = 0; i < c->n_slices; i++) {
        const fr_slice *s = &t->slices[c->first_slice + i];
        int rc = fr_chunk_read(s->chunk, s->offset, s->length, out, scratch);
        if (rc != FR_OK) return rc;
        out += (int64_t)s->length * s->chunk->row_bytes;
    }
    return FR_OK;
}

int64_t fr_trajectory_scratch_bytes(const fr_trajectory *t) {
    int64_t most = atomic_load_explicit(&t->scratch_bytes, memory_order_relaxed);
    if (most >= 0) return most;
    int ready = 1;
    most = 0;
    for (int32_t i = 0; i < t->n_slices; i++) {
        const fr_chunk *c = t->slices[i].chunk;
        ready &= atomic_load_explicit(&c->ready, memory_order_acquire);
        int64_t n = c->compressed ? (int64_t)c->n_rows * c->row_bytes : 0;
        if (n > most) most = n;
    }
    /* Ready chunks never change, so every thread computes the same value. */
    if (ready)
        atomic_store_explicit(&((fr_trajectory *)t)->scratch_bytes, most,
                              memory_order_relaxed);
    return most;
}

void fr_trajectory_payload_retain(void *ctx, uint64_t payload) {
    (void)ctx;
    if (payload) fr_trajectory_retain((fr_trajectory *)(uintptr_t)payload);
}

void fr_trajectory_payload_release(void *ctx, uint64_t payload) {
    (void)ctx;
    if (payload) fr_trajectory_release((fr_trajectory *)(uintptr_t)payload);
}

int32_t fr_trajectory_payload_episodes(void *ctx, uint64_t payload, int32_t *pos,
                                       uint64_t *out, int32_t cap) {
    (void)ctx;
    const fr_trajectory *t = (const fr_trajectory *)(uintptr_t)payload;
    int32_t n = 0, s = *pos;
    if (t && t->slab_row) { /* rows' items: one run, episode 0 (traj_bulk.h) */
        *pos = t->n_slices;
        if (s > 0 || cap < 1) return 0;
        out[0] = 0;
        return 1;
    }
    for (; t && s < t->n_slices && n < cap; s++) {
        uint64_t e = t->slices[s].chunk->episode_id;
        if (s == 0 || t->slices[s - 1].chunk->episode_id != e) out[n++] = e;
    }
    /* Skip the rest of the last run so the next page starts a new one. */
    while (t && s < t->n_slices && n > 0 &&
           t->slices[s].chunk->episode_id == out[n - 1])
        s++;
    *pos = s;
    return n;
}

/* Rows of a ready chunk (at least its first `need` rows valid), decoded
 * through a small direct-mapped cache laid out as [slots][keys | rows]: a
 * slot keeps a chunk and how many rows of it are decoded. */
static const unsigned char *cached_rows(const fr_chunk *c, void *cache, int64_t each,
                                        int32_t slots, int32_t need) {
    if (!c->compressed) return c->data;
    if (slots <= 0 || (int64_t)c->n_rows * c->row_bytes > each) return NULL;
    fr_gather_key *keys = cache;
    unsigned char *rows = (unsigned char *)cache + (size_t)slots * sizeof *keys;
    size_t h = (size_t)((c->key * 0x9e3779b97f4a7c15ULL) >> 32) % (size_t)slots;
    unsigned char *slot = rows + (size_t)h * (size_t)each;
    if (keys[h].chunk == c && keys[h].rows >= need) return slot;
    keys[h].chunk = NULL;
    int32_t decoded;
    if (!fr_chunk_rows_upto(c, slot, need, &decoded)) return NULL;
    keys[h].chunk = c;
    keys[h].rows = decoded;
    return slot;
}

/* 1 when slice s is the one row of a compressed one-row chunk (what
 * ReplayBuffer stores for compressed fields) that the cache does not hold:
 * decoding it straight into the output saves the copy out of the cache
 * (~17% of sampling such image rows under perf).  Chunks of several rows
 * still go through the cache: overlapping items share them. */
static inline int whole_miss(const fr_slice *s, void *cache, int32_t slots) {
    const fr_chunk *c = s->chunk;
    if (!c->compressed || c->n_rows != 1 || s->length != 1) return 0;
    if (slots <= 0) return 1;
    const fr_gather_key *keys = cache;
    size_t h = (size_t)((c->key * 0x9e3779b97f4a7c15ULL) >> 32) % (size_t)slots;
    return keys[h].chunk != c;
}

int fr_trajectories_check(fr_trajectory *const *ts, int64_t n, int64_t *scratch,
                          int32_t *bad_column) {
    enum { AHEAD = 8 }; /* the records are random reads: keep some in flight */
    *scratch = 0;
    *bad_column = -1;
    for (int64_t b = 0; b < n; b++)
        if (!ts[b]) return FR_EEMPTY;
    for (int64_t b = 0; b < n && b < AHEAD; b++) __builtin_prefetch(ts[b]->columns);
    const fr_trajectory *first = ts[0];
    for (int64_t b = 0; b < n; b++) {
        if (b + AHEAD < n) {
            __builtin_prefetch(ts[b + AHEAD]->columns);
            __builtin_prefetch(ts[b + AHEAD]->slices);
        }
        const fr_trajectory *t = ts[b];
        if (t->n_columns != first->n_columns) return FR_EINVAL;
        for (int32_t c = 0; c < t->n_columns; c++) {
            const fr_traj_column *x = &first->columns[c], *y = &t->columns[c];
            if (x->spec != y->spec || x->length != y->length ||
                x->squeeze != y->squeeze) {
                *bad_column = c;
                return FR_ESHAPE;
            }
        }
        int64_t need = fr_trajectory_scratch_bytes(t);
        if (need > *scratch) *scratch = need;
    }
    return FR_OK;
}

/* Prefetch the first rows of column col of t: the rows when they are
 * stored raw, the start of the LZ4 block when compressed. */
static inline void prefetch_rows(const fr_trajectory *t, int32_t col) {
    const fr_traj_column *c = &t->columns[col];
    if (c->n_slices <= 0) return;
    const fr_slice *s = &t->slices[c->first_slice];
    if (!s->chunk->compressed)
        __builtin_prefetch(s->chunk->data + (int64_t)s->offset * s->chunk->row_bytes);
    else
        __builtin_prefetch(s->chunk->data);
}

/* Prefetch the chunk record of column col's first slice of t, which
 * prefetch_rows reads AHEAD items later. */
static inline void prefetch_chunk(const fr_trajectory *t, int32_t col) {
    const fr_traj_column *c = &t->columns[col];
    if (c->n_slices > 0) __builtin_prefetch(t->slices[c->first_slice].chunk);
}

/* The common case of fr_trajectories_gather: every slice of the column is
 * in a raw (uncompressed) chunk.  Each batch of slices' source addresses is
 * collected first, then copied in a tight loop that keeps many random reads
 * in flight.  Returns 0 when some slice is compressed (rows copied so far
 * are then copied again by the general path). */
static int gather_raw(fr_trajectory *const *ts, int64_t n, int32_t col,
                      unsigned char *out, int64_t stride) {
    enum { BATCH = 64, AHEAD = 16 };
    const unsigned char *src[BATCH];
    unsigned char *dst[BATCH];
    size_t len[BATCH];
    int m = 0;
    for (int64_t b = 0; b <= n; b++) {
        const fr_traj_column *c = b < n ? &ts[b]->columns[col] : NULL;
        if (b == n || m + c->n_slices > BATCH) { /* copy what is collected */
            for (int j = 0; j < m && j < AHEAD; j++) __builtin_prefetch(src[j]);
            for (int j = 0; j < m; j++) {
                if (j + AHEAD < m) __builtin_prefetch(src[j + AHEAD]);
                switch (len[j]) { /* small rows: no call per row */
                case 4: memcpy(dst[j], src[j], 4); break;
                case 8: memcpy(dst[j], src[j], 8); break;
                case 16: memcpy(dst[j], src[j], 16); break;
                default: memcpy(dst[j], src[j], len[j]);
                }
            }
            m = 0;
            if (b == n) break;
        }
        if (c->n_slices > BATCH) return 0;
        if (b + AHEAD < n) prefetch_chunk(ts[b + AHEAD], col);
        unsigned char *at = out + b * stride;
        for (int32_t i = 0; i < c->n_slices; i++) {
            const fr_slice *sl = &ts[b]->slices[c->first_slice + i];
            if (sl->chunk->compressed) return 0;
            src[m] = sl->chunk->data + (int64_t)sl->offset * sl->chunk->row_bytes;
            dst[m] = at;
            len[m] = (size_t)sl->length * (size_t)sl->chunk->row_bytes;
            at += len[m++];
        }
    }
    return 1;
}

/* fr_trajectories_gather of a FR_ROWS_LAST_AXIS column (frame stacks): each
 * item's rows interleaved on a new last axis.  Raw rows are read in place;
 * a compressed row is copied out of the decode cache at once (the next
 * row's chunk may take its cache slot). */
static int gather_last_axis(fr_trajectory *const *ts, int64_t n, int32_t col,
                            unsigned char *out, int64_t stride, void *cache,
                            int64_t each, int32_t slots) {
    enum { INLINE = 16, AHEAD = 4 };
    const fr_traj_column *c0 = &ts[0]->columns[col];
    int32_t k = c0->length;
    int64_t row_bytes = c0->spec->row_bytes, itemsize = c0->spec->itemsize;
    const unsigned char *inline_planes[INLINE];
    const unsigned char **planes = inline_planes;
    unsigned char *copies = NULL; /* k rows for compressed ones */
    if (k > INLINE && !(planes = malloc((size_t)k * sizeof *planes))) return FR_ENOMEM;
    int rc = FR_OK;
    for (int64_t b = 0; b < n && b < AHEAD; b++) prefetch_rows(ts[b], col);
    for (int64_t b = 0; b < n && rc == FR_OK; b++) {
        if (b + AHEAD < n) prefetch_rows(ts[b + AHEAD], col);
        const fr_traj_column *c = &ts[b]->columns[col];
        int32_t j = 0;
        for (int32_t i = 0; i < c->n_slices && rc == FR_OK; i++) {
            const fr_slice *s = &ts[b]->slices[c->first_slice + i];
            const unsigned char *rows = cached_rows(s->chunk, cache, each, slots,
                                                    s->offset + s->length);
            if (!rows) rc = FR_ECORRUPT;
            for (int32_t r = 0; rows && r < s->length; r++, j++) {
                planes[j] = rows + (int64_t)(s->offset + r) * row_bytes;
                if (!s->chunk->compressed) continue;
                if (!copies && !(copies = malloc((size_t)(k * row_bytes)))) {
                    rc = FR_ENOMEM;
                    break;
                }
                memcpy(copies + j * row_bytes, planes[j], (size_t)row_bytes);
                planes[j] = copies + j * row_bytes;
            }
        }
        if (rc == FR_OK)
            fr_frames_interleave(out + b * stride, planes, k, row_bytes / itemsize,
                                 (int32_t)itemsize);
    }
    if (planes != inline_planes) free(planes);
    free(copies);
    return rc;
}

int fr_trajectories_gather(fr_trajectory *const *ts, int64_t n, int32_t col,
                           void *out, int64_t item_stride, void *cache,
                           int64_t cache_bytes_each, int32_t cache_slots) {
    unsigned char *base = out;
    if (n > 0 && ts[0]->columns[col].squeeze == FR_ROWS_LAST_AXIS)
        return gather_last_axis(ts, n, col, base, item_stride, cache, cache_bytes_each,
                                cache_slots);
    if (gather_raw(ts, n, col, base, item_stride)) return FR_OK;
    enum { AHEAD = 8 }; /* rows are random reads: keep several in flight */
    /* Three dependent random reads per item, each prefetched AHEAD items
     * before the next one needs it: the item's record (with its columns and
     * slices), its chunk's record, then the chunk's data.  The decoding in
     * between evicts the records, so every column's pass misses on them. */
    for (int64_t b = 0; b < n && b < 3 * AHEAD; b++) __builtin_prefetch(ts[b]);
    for (int64_t b = 0; b < n && b < 2 * AHEAD; b++) prefetch_chunk(ts[b], col);
    for (int64_t b = 0; b < n && b < AHEAD; b++) prefetch_rows(ts[b], col);
    for (int64_t b = 0; b < n; b++) {
        if (b + 3 * AHEAD < n) __builtin_prefetch(ts[b + 3 * AHEAD]);
        if (b + 2 * AHEAD < n) prefetch_chunk(ts[b + 2 * AHEAD], col);
        if (b + AHEAD < n) prefetch_rows(ts[b + AHEAD], col);
        const fr_traj_column *c = &ts[b]->columns[col];
        unsigned char *dst = base + b * item_stride;
        for (int32_t i = 0; i < c->n_slices; i++) {
            const fr_slice *s = &ts[b]->slices[c->first_slice + i];
            size_t bytes = (size_t)s->length * (size_t)s->chunk->row_bytes;
            if (whole_miss(s, cache, cache_slots)) { /* decode straight to dst */
                int32_t decoded;
                if (!fr_chunk_rows_upto(s->chunk, dst, s->length, &decoded))
                    return FR_ECORRUPT;
                dst += bytes;
                continue;
            }
            const unsigned char *rows = cached_rows(s->chunk, cache, cache_bytes_each,
                                                    cache_slots, s->offset + s->length);
            if (!rows) return FR_ECORRUPT;
            memcpy(dst, rows + (int64_t)s->offset * s->chunk->row_bytes, bytes);
            dst += bytes;
        }
    }
    return FR_OK;
}
