#include "traj_bulk.h"

#include <stdlib.h>
#include <string.h>

struct fr_traj_slab {
    atomic_int_fast64_t live; /* rows not yet freed (filled or not) */
    int64_t stride;           /* bytes per trajectory */
    int32_t n_cols, n_rows;
};

/* Trajectories start past the header, each `stride` bytes (a multiple of
 * the struct's alignment). */
enum { HEAD = (sizeof(fr_traj_slab) + 15) / 16 * 16 };

static int64_t stride_of(int32_t n_cols) {
    size_t b = sizeof(fr_trajectory) + (size_t)n_cols * (sizeof(fr_traj_column) +
                                                         sizeof(fr_slice));
    return (int64_t)((b + 15) / 16 * 16);
}

void fr_chunk_release_n(fr_chunk *c, int64_t k) {
    /* Never the last reference but the final one, which frees. */
    if (k > 1) atomic_fetch_sub_explicit(&c->refs, k - 1, memory_order_release);
    fr_chunk_release(c);
}

fr_traj_slab *fr_slab_new(int32_t n_cols, int32_t n_rows) {
    int64_t stride = stride_of(n_cols);
    fr_traj_slab *s = malloc(HEAD + (size_t)(stride * n_rows));
    if (!s) return NULL;
    atomic_init(&s->live, n_rows);
    s->stride = stride;
    s->n_cols = n_cols;
    s->n_rows = n_rows;
    return s;
}

fr_trajectory *fr_slab_row(fr_traj_slab *s, int32_t row, const fr_spec *const *specs,
                           fr_chunk *const *chunks, const int32_t *offsets) {
    fr_trajectory *t = (fr_trajectory *)((char *)s + HEAD + row * s->stride);
    int32_t n_cols = s->n_cols;
    atomic_init(&t->refs, 1);
    atomic_init(&t->scratch_bytes, -1);
    t->n_columns = t->n_slices = n_cols;
    t->structure_id = 0;
    t->slab_row = row + 1;
    /* Slices first: with the header they fill the first two cache lines,
     * all that an eviction reads (episodes, release). */
    t->slices = (fr_slice *)(t + 1);
    t->columns = (fr_traj_column *)(t->slices + n_cols);
    for (int32_t c = 0; c < n_cols; c++) {
        t->columns[c] = (fr_traj_column){specs[c], c, 1, 1, 1};
        t->slices[c] = (fr_slice){chunks[c], offsets[c], 1};
    }
    return t;
}

void fr_slab_fill(fr_traj_slab *s, int32_t row0, int32_t n, const fr_spec *const *specs,
                  fr_chunk *const *chunks, const int32_t *offsets, uint64_t *out) {
    if (n <= 0) return;
    fr_trajectory *first = fr_slab_row(s, row0, specs, chunks, offsets);
    out[0] = (uint64_t)(uintptr_t)first;
    int32_t n_cols = s->n_cols;
    for (int32_t k = 1; k < n; k++) {
        fr_trajectory *t = (fr_trajectory *)((char *)first + k * s->stride);
        memcpy(t, first, (size_t)s->stride); /* refs 1, scratch_bytes -1 too */
        t->slab_row = row0 + k + 1;
        t->slices = (fr_slice *)(t + 1);
        t->columns = (fr_traj_column *)(t->slices + n_cols);
        for (int32_t c = 0; c < n_cols; c++) t->slices[c].offset += k;
        out[k] = (uint64_t)(uintptr_t)t;
    }
}

static fr_traj_slab *slab_of(fr_trajectory *t) {
    int64_t stride = stride_of(t->n_columns);
    return (fr_traj_slab *)((char *)t - (t->slab_row - 1) * stride - HEAD);
}

static void slab_release_n(fr_traj_slab *s, int64_t k) {
    if (atomic_fetch_sub_explicit(&s->live, k, memory_order_acq_rel) == k) free(s);
}

void fr_slab_abandon(fr_traj_slab *s, int32_t filled) {
    if (filled < s->n_rows) slab_release_n(s, s->n_rows - filled);
}

void fr_trajectory_free_memory(fr_trajectory *t) {
    if (t->slab_row) slab_release_n(slab_of(t), 1);
    else free(t);
}

/* Chunks and a slab whose references are being dropped, with how many. */
enum { PENDING = 16, AHEAD = 4 };
typedef struct pending {
    fr_chunk *chunk[PENDING];
    int64_t count[PENDING];
    int n;
    fr_traj_slab *slab;
    int64_t slab_count;
} pending;

static void flush(pending *p) {
    for (int i = 0; i < p->n; i++) fr_chunk_release_n(p->chunk[i], p->count[i]);
    p->n = 0;
}

static void drop(pending *p, fr_chunk *c, int32_t hint) {
    /* Consecutive one-row trajectories have slice s in the same chunk. */
    if (hint < p->n && p->chunk[hint] == c) {
        p->count[hint]++;
        return;
    }
    for (int i = 0; i < p->n; i++)
        if (p->chunk[i] == c) {
            p->count[i]++;
            return;
        }
    if (p->n == PENDING) flush(p);
    p->chunk[p->n] = c;
    p->count[p->n++] = 1;
}

static void drop_memory(pending *p, fr_trajectory *t) {
    if (!t->slab_row) {
        free(t);
        return;
    }
    fr_traj_slab *s = slab_of(t);
    if (s != p->slab) {
        /* The chunks first: the slab's trajectories no longer need them. */
        if (p->slab) slab_release_n(p->slab, p->slab_count);
        p->slab = s;
        p->slab_count = 0;
    }
    p->slab_count++;
}

void fr_trajectory_payload_release_many(void *ctx, const uint64_t *payloads,
                                        int64_t n) {
    (void)ctx;
    pending p = {.n = 0, .slab = NULL, .slab_count = 0};
    for (int64_t k = 0; k < n; k++) {
        if (k + AHEAD < n) __builtin_prefetch((const void *)(uintptr_t)payloads[k + AHEAD]);
        fr_trajectory *t = (fr_trajectory *)(uintptr_t)payloads[k];
        if (!t || atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1)
            continue;
        for (int32_t s = 0; s < t->n_slices; s++) drop(&p, t->slices[s].chunk, s);
        drop_memory(&p, t);
    }
    flush(&p);
    if (p.slab) slab_release_n(p.slab, p.slab_count);
}
