#include "writer_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

fr_writer *fr_writer_new(fr_store *store, uint64_t seed,
                         fr_chunker_options default_opt) {
    fr_writer *w = NULL;
    fr_writer_create(store, seed, default_opt, &w);
    return w;
}

int fr_writer_create(fr_store *store, uint64_t seed, fr_chunker_options default_opt,
                     fr_writer **out) {
    *out = NULL;
    int rc = fr_chunker_options_validate(&default_opt);
    if (rc != FR_OK) return rc;
    fr_writer *w = calloc(1, sizeof *w);
    if (!w) return FR_ENOMEM;
    w->sync = fr_sync_new();
    if (!w->sync) {
        /* fr_sync_new fails on memory or on the system's lock limits. */
        free(w);
        return FR_ESYSTEM;
    }
    w->store = store;
    fr_store_retain(store);
    fr_rng_seed(&w->rng, seed);
    w->default_opt = default_opt;
    w->episode_id = fr_rng_next(&w->rng);
    w->next_key = fr_rng_next(&w->rng);
    w->next_chunk_key = fr_rng_next(&w->rng);
    *out = w;
    return FR_OK;
}

void fr_writer_free(fr_writer *w) {
    if (!w) return;
    while (w->q_len > 0) {
        fr_pending_item *it = fr_wq_at(w, 0);
        fr_wq_release_refs(w, it, 0);
        fr_trajectory_release(it->traj);
        fr_wq_pop(w);
    }
    for (int32_t c = 0; c < w->n_cols; c++) fr_column_free(&w->cols[c]);
    free(w->cols);
    free(w->last_set);
    free(w->queue);
    free(w->scratch);
    fr_sync_release(w->sync);
    fr_store_release(w->store);
    free(w);
}

int32_t fr_writer_add_column(fr_writer *w, const fr_chunker_options *opt) {
    if (w->n_cols == w->cap_cols) {
        int32_t cap = w->cap_cols ? w->cap_cols * 2 : 8;
        fr_column *cols = realloc(w->cols, (size_t)cap * sizeof *cols);
        if (!cols) return FR_ENOMEM;
        w->cols = cols;
        int64_t *last = realloc(w->last_set, (size_t)cap * sizeof *last);
        if (!last) return FR_ENOMEM;
        w->last_set = last;
        w->cap_cols = cap;
    }
    fr_column_init(&w->cols[w->n_cols], w->store, opt ? *opt : w->default_opt);
    w->last_set[w->n_cols] = -1;
    return w->n_cols++;
}

int32_t fr_writer_num_columns(const fr_writer *w) { return w->n_cols; }

fr_column *fr_writer_column(fr_writer *w, int32_t col) { return &w->cols[col]; }

int fr_writer_configure(fr_writer *w, int32_t col, fr_chunker_options opt) {
    return fr_column_configure(&w->cols[col], opt);
}

int64_t fr_writer_history_len(const fr_writer *w) { return w->hlen + w->step_open; }
int64_t fr_writer_episode_steps(const fr_writer *w) { return w->episode_steps; }
int fr_writer_step_open(const fr_writer *w) { return w->step_open; }
int fr_writer_set_in_newest_step(const fr_writer *w, int32_t col) {
    int64_t newest = fr_writer_history_len(w) - 1;
    return newest >= 0 && w->last_set[col] == newest;
}

void fr_writer_pump(fr_writer *w) {
    while (w->q_len > 0 && w->status == FR_OK) {
        if (w->front_waits &&
            !atomic_load_explicit(&w->front_waits->ready, memory_order_acquire))
            return;
        fr_pending_item *it = fr_wq_at(w, 0);
        if ((w->front_waits = fr_trajectory_unready(it->traj))) return;
        fr_wq_release_refs(w, it, 1);
        int rc = fr_table_insert_async(it->table, it->key, it->priority,
                                       (uint64_t)(uintptr_t)it->traj, w->sync);
        if (rc != FR_OK) {
            /* Reported by the next flush, end_episode or create_item. */
            fr_trajectory_release(it->traj);
            fr_sync_fail(w->sync, rc, it->key, it->table);
        }
        fr_wq_pop(w);
    }
}

int fr_writer_check_append(const fr_writer *w, int32_t n, const int32_t *cols,
                           const fr_spec *specs, int32_t *bad) {
    if (w->status != FR_OK) return w->status;
    for (int32_t i = 0; i < n; i++) {
        const fr_column *c = &w->cols[cols[i]];
        *bad = i;
        if (c->has_spec && (c->spec.dtype != specs[i].dtype ||
                            c->spec.itemsize != specs[i].itemsize))
            return FR_EDTYPE;
        if (c->has_spec && !fr_spec_equal(&c->spec, &specs[i])) return FR_ESHAPE;
        if (w->step_open && w->last_set[cols[i]] == w->hlen) return FR_EREPEATED;
    }
    *bad = -1;
    return FR_OK;
}

int fr_writer_append(fr_writer *w, int32_t n, const int32_t *cols,
                     const void *const *rows, const fr_spec *specs,
                     int partial, int32_t *bad) {
    int rc = fr_writer_check_append(w, n, cols, specs, bad);
    if (rc != FR_OK) return rc;
    int64_t step = w->episode_steps;
    for (int32_t i = 0; i < n; i++) {
        fr_column *c = &w->cols[cols[i]];
        if (!c->has_spec && (rc = fr_column_set_spec(c, &specs[i])) != FR_OK)
            return rc;
        rc = fr_spec_is_var(&c->spec)
                 ? fr_column_append_var(c, rows[i], specs[i].row_bytes, w->hlen,
                                        w->episode_id, step, &w->next_chunk_key)
                 : fr_column_append(c, rows[i], w->hlen, w->episode_id, step,
                                    &w->next_chunk_key);
        if (rc != FR_OK) return rc;
        w->last_set[cols[i]] = w->hlen;
    }
    if (partial) {
        w->step_open = 1;
    } else {
        w->step_open = 0;
        w->hlen++;
        w->episode_steps++;
    }
    fr_writer_pump(w);
    return FR_OK;
}

int fr_writer_set_batch(fr_writer *w, int64_t steps) {
    int rc = FR_OK;
    for (int32_t c = 0; c < w->n_cols; c++) {
        int rc2 = fr_column_set_batch(&w->cols[c], steps);
        if (rc == FR_OK) rc = rc2;
    }
    if (steps <= 1) fr_writer_pump(w);
    return rc;
}

/* The id of the cell at history position `pos` of column c, or -1 where
 * the column had no value or the cell expired.  `hint` is an id to try
 * first (the next cell of a run), or -1. */
static int64_t cell_at(fr_column *c, int64_t pos, int64_t hint) {
    int64_t lo = c->cells_base, end = c->cells_base + c->cells_len;
    if (hint >= lo && hint < end && fr_column_slot(c, hint)->hpos == pos) {
        lo = hint;
    } else {
        /* Records are ordered by id and by history position: bisect. */
        int64_t hi = end;
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (fr_column_slot(c, mid)->hpos < pos) lo = mid + 1;
            else hi = mid;
        }
        if (lo >= end || fr_column_slot(c, lo)->hpos != pos) return -1;
    }
    return fr_column_cell(c, lo) != NULL ? lo : -1;
}

void fr_writer_cells_at(fr_writer *w, int32_t col, int64_t n,
                        const int64_t *pos, int64_t *ids) {
    for (int64_t i = 0; i < n; i++) ids[i] = cell_at(&w->cols[col], pos[i], -1);
}

int64_t fr_writer_cells_range(fr_writer *w, int32_t col, int64_t start,
                              int64_t step, int64_t count, int64_t *ids) {
    fr_column *c = &w->cols[col];
    if (step == 1 && count > 0) {
        /* Usually the newest `count` steps, each with a value: then the ids
         * are consecutive too (ids and positions both increase, so equal
         * spans mean one id per position), and all alive when the first is
         * in the keep-alive window (it only moves forward). */
        int64_t end = c->cells_base + c->cells_len;
        int64_t first = cell_at(c, start, end - count), last = first + count - 1;
        if (first >= 0 && last < end && fr_column_id_alive(c, first) &&
            fr_column_slot(c, last)->hpos == start + count - 1) {
            for (int64_t i = 0; i < count; i++) ids[i] = first + i;
            return 0;
        }
    }
    int64_t missing = 0, hint = -1;
    for (int64_t i = 0; i < count; i++) {
        ids[i] = cell_at(c, start + i * step, hint);
        missing += ids[i] < 0;
        hint = ids[i] < 0 ? -1 : ids[i] + step;  /* runs of steps: ids too */
    }
    return missing;
}

int64_t fr_writer_pending(fr_writer *w) { return w->q_len + fr_sync_pending(w->sync); }

int fr_writer_flush(fr_writer *w, int64_t ignore_last, int64_t timeout_ns) {
    if (w->status != FR_OK) return w->status;
    if (fr_sync_failed(w->sync) != FR_OK) return FR_EASYNC;
    for (int64_t i = 0; i < w->q_len - ignore_last; i++) {
        const fr_pending_item *it = fr_wq_at(w, i);
        const fr_ref_run *runs = fr_wq_runs(it);
        for (int32_t r = 0; r < it->n_runs; r++) {
            fr_column *c = &w->cols[runs[r].col];
            for (int32_t k = 0; k < runs[r].count; k++) {
                fr_cell *cell = fr_column_cell(c, runs[r].first + k);
                if (cell && cell->chunk == c->open) {
                    int rc = fr_column_finalize(c);
                    if (rc != FR_OK) return rc;
                }
            }
        }
    }
    fr_writer_pump(w);
    if (w->status != FR_OK) return w->status;
    int64_t allowed = ignore_last - w->q_len;
    return fr_sync_wait(w->sync, allowed < 0 ? 0 : allowed, timeout_ns);
}

int fr_writer_take_failure(fr_writer *w, uint64_t *key, const fr_table **table) {
    return fr_sync_take_failure(w->sync, key, table);
}

void fr_writer_close(fr_writer *w) {
    atomic_store(&w->status, FR_ECLOSED);
    fr_sync_close(w->sync);
}

int fr_writer_end_episode(fr_writer *w, int clear_buffers, int64_t timeout_ns) {
    int rc = fr_writer_flush(w, 0, timeout_ns);
    if (rc != FR_OK && rc != FR_ETIMEOUT) return rc;
    for (int32_t c = 0; c < w->n_cols; c++) {
        int rc2 = clear_buffers ? fr_column_reset(&w->cols[c])
                                : fr_column_finalize(&w->cols[c]);
        if (rc2 != FR_OK) return rc2;
        if (clear_buffers) w->last_set[c] = -1;
    }
    w->episode_id = fr_rng_next(&w->rng);
    w->episode_steps = 0;
    if (w->step_open && !clear_buffers) w->hlen++; /* close the partial step */
    w->step_open = 0;
    if (clear_buffers) w->hlen = 0;
    return rc;
}

int fr_writer_cell_alive(fr_writer *w, int32_t col, int64_t id) {
    return col >= 0 && col < w->n_cols && fr_column_cell(&w->cols[col], id) != NULL;
}

int64_t fr_writer_cell_bytes(fr_writer *w, int32_t col, int64_t id) {
    return fr_column_row_bytes(&w->cols[col], id);
}

int fr_writer_read_cell(fr_writer *w, int32_t col, int64_t id, void *dst) {
    fr_column *c = &w->cols[col];
    int64_t need = fr_column_scratch_bytes(c, id);
    if (need < 0) return FR_EEXPIRED;
    if (need > w->scratch_cap) {
        unsigned char *s = realloc(w->scratch, (size_t)need);
        if (!s) return FR_ENOMEM;
        w->scratch = s;
        w->scratch_cap = need;
    }
    return fr_column_read(c, id, dst, w->scratch);
}
