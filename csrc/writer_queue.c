/* The writer's queue of items waiting for their chunks (writer_internal.h):
 * the ring, and what an item gives back when it leaves (tuning feedback,
 * unpins). */
#include "writer_internal.h"

#include <stdlib.h>

fr_pending_item *fr_wq_at(fr_writer *w, int64_t i) {
    return &w->queue[(w->q_head + i) % w->q_cap];
}

/* A run of an item's references to one writer column: [start, end). */
typedef struct ref_run {
    int32_t start, end;
} ref_run;

/* The runs of its references (a trajectory column is usually one run). */
static int32_t ref_runs(const fr_pending_item *it, ref_run *runs) {
    int32_t n = 0;
    for (int32_t k = 0; k < it->n_refs; n++) {
        int32_t e = k + 1;
        while (e < it->n_refs && it->cols[e] == it->cols[k]) e++;
        runs[n] = (ref_run){k, e};
        k = e;
    }
    return n;
}

/* Unpin an item's cells (one at a time when runs is NULL). */
static void unpin(fr_writer *w, const fr_pending_item *it, const ref_run *runs,
                  int32_t n_runs) {
    if (!runs) {
        for (int32_t k = 0; k < it->n_refs; k++)
            fr_column_unpin(&w->cols[it->cols[k]], it->ids + k, 1);
        return;
    }
    for (int32_t r = 0; r < n_runs; r++)
        fr_column_unpin(&w->cols[it->cols[runs[r].start]], it->ids + runs[r].start,
                        runs[r].end - runs[r].start);
}

/* Tuning feedback per writer column with that column's chunks (in
 * reference order, 64 at most), column by column in order of first
 * reference. */
static void feedback(fr_writer *w, const fr_pending_item *it, const ref_run *runs,
                     int32_t n_runs) {
    fr_chunk *chunks[64];
    for (int32_t r = 0; r < n_runs; r++) {
        int32_t col = it->cols[runs[r].start], first = 1, n = 0;
        for (int32_t q = 0; q < r && first; q++) first = it->cols[runs[q].start] != col;
        if (!first) continue;
        fr_column *c = &w->cols[col];
        for (int32_t q = r; q < n_runs && n < 64; q++) {
            if (it->cols[runs[q].start] != col) continue;
            for (int32_t i = runs[q].start; i < runs[q].end && n < 64; i++) {
                fr_cell *cell = fr_column_cell(c, it->ids[i]);
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
    int32_t wcol[16];
    int32_t at = 0;
    if (t->n_columns > 16) return 0;
    for (int32_t c = 0; c < t->n_columns; at += t->columns[c].length, c++) {
        int32_t len = t->columns[c].length;
        if (len <= 0 || len > 64 || at + len > it->n_refs) return 0;
        wcol[c] = it->cols[at];
        for (int32_t k = at + 1; k < at + len; k++)
            if (it->cols[k] != wcol[c]) return 0;
        for (int32_t q = 0; q < c; q++)
            if (wcol[q] == wcol[c]) return 0;
    }
    if (at != it->n_refs) return 0;
    for (int32_t c = 0; c < t->n_columns; c++) {
        const fr_traj_column *tc = &t->columns[c];
        fr_chunk *chunks[64];
        for (int32_t i = 0; i < tc->n_slices; i++)
            chunks[i] = t->slices[tc->first_slice + i].chunk;
        fr_column_on_item(&w->cols[wcol[c]], chunks, tc->n_slices, tc->length);
    }
    return 1;
}

/* Tuning feedback (when `tune`) and unpins of an item leaving the writer;
 * without memory for its runs, no feedback. */
void fr_wq_release_refs(fr_writer *w, const fr_pending_item *it, int tune) {
    ref_run inline_runs[16];
    ref_run *runs = it->n_refs <= 16 ? inline_runs
                                     : malloc((size_t)it->n_refs * sizeof *runs);
    int32_t n_runs = runs ? ref_runs(it, runs) : 0;
    if (tune && runs && !feedback_from_slices(w, it)) feedback(w, it, runs, n_runs);
    unpin(w, it, runs, n_runs);
    if (runs != inline_runs) free(runs);
}

void fr_wq_pop(fr_writer *w) {
    fr_pending_item *it = fr_wq_at(w, 0);
    free(it->ids); /* and cols */
    w->q_head = (w->q_head + 1) % w->q_cap;
    w->q_len--;
}

int fr_wq_push(fr_writer *w, fr_pending_item it) {
    if (w->q_len == w->q_cap) {
        int64_t cap = w->q_cap ? w->q_cap * 2 : 16;
        fr_pending_item *q = malloc((size_t)cap * sizeof *q);
        if (!q) return FR_ENOMEM;
        for (int64_t i = 0; i < w->q_len; i++) q[i] = *fr_wq_at(w, i);
        free(w->queue);
        w->queue = q;
        w->q_head = 0;
        w->q_cap = cap;
    }
    w->queue[(w->q_head + w->q_len) % w->q_cap] = it;
    w->q_len++;
    return FR_OK;
}

