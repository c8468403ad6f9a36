#include "traj_bulk.h"

#include <stdlib.h>

void fr_chunk_release_n(fr_chunk *c, int64_t k) {
    /* Never the last reference but the final one, which frees. */
    if (k > 1) atomic_fetch_sub_explicit(&c->refs, k - 1, memory_order_release);
    fr_chunk_release(c);
}

fr_trajectory *fr_trajectory_new_row(int32_t n_cols, const fr_spec *const *specs,
                                     fr_chunk *const *chunks, const int32_t *offsets) {
    fr_trajectory *t = malloc(sizeof *t + (size_t)n_cols * (sizeof(fr_traj_column) +
                                                            sizeof(fr_slice)));
    if (!t) return NULL;
    atomic_init(&t->refs, 1);
    atomic_init(&t->scratch_bytes, -1);
    t->n_columns = t->n_slices = n_cols;
    t->structure_id = 0;
    t->columns = (fr_traj_column *)(t + 1);
    t->slices = (fr_slice *)(t->columns + n_cols);
    for (int32_t c = 0; c < n_cols; c++) {
        t->columns[c] = (fr_traj_column){specs[c], c, 1, 1, 1};
        t->slices[c] = (fr_slice){chunks[c], offsets[c], 1};
    }
    return t;
}

/* Chunks whose references are being dropped, with how many. */
enum { PENDING = 16, AHEAD = 4 };
typedef struct pending {
    fr_chunk *chunk[PENDING];
    int64_t count[PENDING];
    int n;
} pending;

static void flush(pending *p) {
    for (int i = 0; i < p->n; i++) fr_chunk_release_n(p->chunk[i], p->count[i]);
    p->n = 0;
}

static void drop(pending *p, fr_chunk *c) {
    for (int i = 0; i < p->n; i++)
        if (p->chunk[i] == c) {
            p->count[i]++;
            return;
        }
    if (p->n == PENDING) flush(p);
    p->chunk[p->n] = c;
    p->count[p->n++] = 1;
}

void fr_trajectory_payload_release_many(void *ctx, const uint64_t *payloads,
                                        int64_t n) {
    (void)ctx;
    pending p = {.n = 0};
    for (int64_t k = 0; k < n; k++) {
        if (k + AHEAD < n) __builtin_prefetch((const void *)(uintptr_t)payloads[k + AHEAD]);
        fr_trajectory *t = (fr_trajectory *)(uintptr_t)payloads[k];
        if (!t || atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1)
            continue;
        for (int32_t s = 0; s < t->n_slices; s++) drop(&p, t->slices[s].chunk);
        free(t);
    }
    flush(&p);
}
