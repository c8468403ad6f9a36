/* The writer's queue of items waiting for their chunks (writer_internal.h):
 * the ring, and what an item gives back when it leaves (tuning feedback,
 * unpins). */
#include "writer_internal.h"

#include <stdlib.h>
#include <string.h>

fr_pending_item *fr_wq_at(fr_writer *w, int64_t i) {
    return &w->queue[(w->q_head + i) & (w->q_cap - 1)];
}

int fr_wq_set_runs(fr_pending_item *it, int32_t n_columns, const int32_t *lens,
                   const int32_t *cols, const int64_t *ids) {
    fr_ref_run local[64];
    fr_ref_run *runs = it->n_refs <= 64 ? local : malloc((size_t)it->n_refs * sizeof *runs);
    if (!runs) return FR_ENOMEM;
    int32_t n = 0;
    for (int32_t c = 0, at = 0; c < n_columns; at += lens[c], c++) {
        for (int32_t k = at, e, end = at + lens[c]; k < end; k = e) {
            for (e = k + 1; e < end && cols[e] == cols[k] && ids[e] == ids[k] + (e - k); e++) {
            }
            runs[n++] = (fr_ref_run){ids[k], cols[k], e - k};
        }
    }
    if (runs != local && n > FR_INLINE_RUNS) {
        it->n_runs = n;
        it->heap = runs;  /* the n_refs-long buffer (freed with the item) */
        return FR_OK;
    }
    int rc = fr_wq_store_runs(it, runs, n);
    if (runs != local) free(runs);
    return rc;
}

int fr_wq_store_runs(fr_pending_item *it, const fr_ref_run *runs, int32_t n) {
    it->n_runs = n;
    it->heap = NULL;
    if (n <= FR_INLINE_RUNS) {
        memcpy(it->inline_runs, runs, (size_t)n * sizeof *runs);
        return FR_OK;
    }
    if (!(it->heap = malloc((size_t)n * sizeof *runs))) return FR_ENOMEM;
    memcpy(it->heap, runs, (size_t)n * sizeof *runs);
    return FR_OK;
}

/* Tuning feedback per writer column with that column's chunks (in
 * reference order, 64 at most), column by column in order of first
 * reference. */
static void feedback(fr_writer *w, const fr_pending_item *it) {
    const fr_ref_run *runs = fr_wq_runs(it);
    fr_chunk *chunks[64];
    for (int32_t r = 0; r < it->n_runs; r++) {
        int32_t col = runs[r].col, first = 1, n = 0;
        for (int32_t q = 0; q < r && first; q++) first = runs[q].col != col;
        if (!first) continue;
        fr_column *c = &w->cols[col];
        for (int32_t q = r; q < it->n_runs && n < 64; q++) {
            if (runs[q].col != col) continue;
            for (int32_t i = 0; i < runs[q].count && n < 64; i++) {
                fr_cell *cell = fr_column_cell(c, runs[q].first + i);
                if (cell) chunks[n++] = cell->chunk;
            }
        }
        fr_column_on_item(c, chunks, n, n);
    }
}

/* feedback() read from the trajectory's slices (their chunks are the refs'
 * chunks, one per run of rows) when every trajectory column refers to one
 * writer column of its own with at most 64 refs, as history slices make
 * them; 0 (nothing done) for any other item. */
static int feedback_from_slices(fr_writer *w, const fr_pending_item *it) {
    const fr_trajectory *t = it->traj;
    const fr_ref_run *runs = fr_wq_runs(it);
    if (it->run_columns) { /* checked when queued: run c is column c */
        for (int32_t c = 0; c < t->n_columns; c++)
            fr_column_on_item_slices(&w->cols[runs[c].col],
                                     t->slices + t->columns[c].first_slice,
                                     t->columns[c].n_slices, t->columns[c].length);
        return 1;
    }
    int32_t wcol[16], r = 0;
    if (t->n_columns > 16) return 0;
    for (int32_t c = 0; c < t->n_columns; c++) {
        int32_t len = t->columns[c].length;
        if (len <= 0 || len > 64 || r >= it->n_runs) return 0;
        wcol[c] = runs[r].col;
        for (; len > 0 && r < it->n_runs; len -= runs[r++].count)
            if (runs[r].col != wcol[c]) return 0;
        if (len != 0) return 0;
        for (int32_t q = 0; q < c; q++)
            if (wcol[q] == wcol[c]) return 0;
    }
    if (r != it->n_runs) return 0;
    for (int32_t c = 0; c < t->n_columns; c++) {
        const fr_traj_column *tc = &t->columns[c];
        fr_chunk *chunks[64];
        for (int32_t i = 0; i < tc->n_slices; i++)
            chunks[i] = t->slices[tc->first_slice + i].chunk;
        fr_column_on_item(&w->cols[wcol[c]], chunks, tc->n_slices, tc->length);
    }
    return 1;
}

/* Tuning feedback (when `tune`) and unpins of an item leaving the writer. */
void fr_wq_release_refs(fr_writer *w, const fr_pending_item *it, int tune) {
    if (tune && !feedback_from_slices(w, it)) feedback(w, it);
    const fr_ref_run *runs = fr_wq_runs(it);
    for (int32_t r = 0; r < it->n_runs; r++)
        fr_column_unpin(&w->cols[runs[r].col], runs[r].first, runs[r].count);
}

void fr_wq_pop(fr_writer *w) {
    fr_pending_item *it = fr_wq_at(w, 0);
    free(it->heap);
    w->front_waits = NULL;
    w->q_head = (w->q_head + 1) & (w->q_cap - 1);
    w->q_len--;
}

fr_pending_item *fr_wq_tail(fr_writer *w) {
    if (w->q_len == w->q_cap) {
        int64_t cap = w->q_cap ? w->q_cap * 2 : 16;
        fr_pending_item *q = malloc((size_t)cap * sizeof *q);
        if (!q) return NULL;
        for (int64_t i = 0; i < w->q_len; i++) q[i] = *fr_wq_at(w, i);
        free(w->queue);
        w->queue = q;
        w->q_head = 0;
        w->q_cap = cap;
    }
    return fr_wq_at(w, w->q_len);
}
