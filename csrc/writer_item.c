/* create_item (writer.h): the checks of an item's references, then its
 * trajectory, pins and queue entry.  Two ways in: refs as (column, id)
 * pairs, and refs as one run of consecutive cells per trajectory column
 * (history slices h[k][-n:], the common case), which skips expanding and
 * regrouping them.  Same checks, errors and results either way. */
#include "writer_internal.h"

#include <math.h>
#include <stdlib.h>

/* The checks every item gets before its references are looked at. */
static int check_item(fr_writer *w, fr_table *table, double priority, int32_t total) {
    if (total == 0) return FR_EEMPTY;
    if (isnan(priority)) return FR_EPRIORITY_NAN;
    int rc = fr_table_check_priority(table, priority);
    if (rc != FR_OK) return rc;
    if (w->status != FR_OK) return w->status;
    if (fr_sync_failed(w->sync) != FR_OK) return FR_EASYNC;
    return FR_OK;
}

static int check_column(fr_writer *w, int32_t len, int squeeze,
                        const int32_t *cols, const int64_t *ids, fr_cell **cells,
                        int32_t *bad_ref) {
    *bad_ref = 0;
    if (len == 0) return FR_EEMPTY;
    for (int32_t k = 0; k < len; k++) {
        *bad_ref = k;
        if (cols[k] < 0 || cols[k] >= w->n_cols ||
            !(cells[k] = fr_column_cell(&w->cols[cols[k]], ids[k])))
            return FR_EEXPIRED;
    }
    *bad_ref = len;
    if (squeeze && len != 1) return FR_ESQUEEZE;
    const fr_spec *first = len ? &w->cols[cols[0]].spec : NULL;
    for (int32_t k = 1; k < len; k++) {
        if (cols[k] == cols[k - 1]) continue;  /* one column: one spec */
        const fr_spec *s = &w->cols[cols[k]].spec;
        *bad_ref = k;
        if (s->dtype != first->dtype || s->itemsize != first->itemsize)
            return FR_EDTYPE;
        if (!fr_spec_equal(s, first)) return FR_ESHAPE;
    }
    *bad_ref = -1;
    return FR_OK;
}

/* check_column for a column of one run: every cell alive (one column, so
 * one spec).  Adds the run's slices to *n_slices: one per chunk, since a
 * chunk holds consecutive cells of its column at consecutive offsets. */
static int check_run(fr_writer *w, const fr_ref_run *run, int squeeze, int32_t *n_slices,
                     int32_t *bad_ref) {
    *bad_ref = 0;
    if (run->count == 0) return FR_EEMPTY;
    if (run->col < 0 || run->col >= w->n_cols) return FR_EEXPIRED;
    fr_column *c = &w->cols[run->col];
    int64_t first = run->first;
    /* Ids only grow past the keep-alive window: when the first cell is
     * alive, so is every later one that exists. */
    if (!(first >= c->cells_base && first + run->count <= c->cells_base + c->cells_len &&
          fr_column_id_alive(c, first))) {
        for (int32_t k = 0; k < run->count; k++) {
            *bad_ref = k;
            if (!fr_column_cell(c, first + k)) return FR_EEXPIRED;
        }
    }
    const fr_chunk *prev = NULL;
    for (int32_t k = 0; k < run->count; k++) {
        const fr_chunk *chunk = fr_column_slot(c, first + k)->chunk;
        *n_slices += chunk != prev;
        prev = chunk;
    }
    *bad_ref = run->count;
    if (squeeze && run->count != 1) return FR_ESQUEEZE;
    *bad_ref = -1;
    return FR_OK;
}

/* Column c of t (still empty) from the (checked) run: a slice per chunk,
 * written in place (fr_trajectory_push_slice's result for slices that never
 * merge), and a pin on each cell. */
static void push_run(fr_writer *w, fr_trajectory *t, int32_t c, const fr_ref_run *run) {
    fr_column *col = &w->cols[run->col];
    fr_traj_column *tc = &t->columns[c];
    fr_slice *s = NULL;
    tc->first_slice = t->n_slices;
    tc->length = run->count;
    for (int32_t k = 0; k < run->count; k++) {
        fr_cell *cell = fr_column_slot(col, run->first + k);
        cell->pins++; /* fr_column_pin's +1 */
        if (!s || cell->chunk != s->chunk) {
            fr_chunk_retain(cell->chunk);
            s = &t->slices[t->n_slices++];
            *s = (fr_slice){cell->chunk, cell->offset, 0};
            tc->n_slices++;
        }
        s->length++;
    }
}

/* Split each column's rows into maximal runs of consecutive rows of one
 * chunk (one slice each, what pushing row by row merges into, so items stay
 * small): ends[r] is where run r stops.  Returns the number of runs. */
static int32_t find_runs(int32_t n_columns, const int32_t *lens,
                         fr_cell *const *cells, int32_t *ends) {
    int32_t n = 0;
    for (int32_t c = 0, at = 0; c < n_columns; at += lens[c], c++) {
        for (int32_t k = at, e; k < at + lens[c]; k = e) {
            for (e = k + 1; e < at + lens[c] && cells[e]->chunk == cells[k]->chunk &&
                            cells[e]->offset == cells[k]->offset + (e - k);
                 e++) {
            }
            ends[n++] = e;
        }
    }
    return n;
}

/* A new item at the queue's tail (joining it with q_len++ in
 * commit_item): its key and fields, refs as `runs` or from cols/ids (runs
 * NULL), and a trajectory of n_columns columns with room for max_slices
 * slices.  NULL when out of memory (nothing queued). */
static fr_pending_item *start_item(fr_writer *w, fr_table *table, double priority,
                                   int32_t structure_id, int32_t n_columns, int32_t total,
                                   const int32_t *lens, const fr_ref_run *runs,
                                   const int32_t *cols, const int64_t *ids,
                                   int32_t max_slices) {
    fr_pending_item *it = fr_wq_tail(w);
    if (!it) return NULL;
    it->key = fr_table_item_key(table, w->next_key++);
    it->priority = priority;
    it->table = table;
    it->n_refs = total;
    it->traj = NULL;
    it->heap = NULL;
    it->run_columns = 0;
    int rc = runs ? fr_wq_store_runs(it, runs, n_columns)
                  : fr_wq_set_runs(it, n_columns, lens, cols, ids);
    if (rc == FR_OK) it->traj = fr_trajectory_new(n_columns, max_slices);
    if (!it->traj) {
        free(it->heap);
        return NULL;
    }
    it->traj->structure_id = structure_id;
    return it;
}

/* The item start_item began joins the queue; then the pump. */
static void commit_item(fr_writer *w, const fr_pending_item *it, uint64_t *key) {
    w->q_len++;
    *key = it->key;
    fr_writer_pump(w);
}

/* The cells (checked, `total` of them, column by column) as an item: its
 * trajectory, queue entry, pins; then the pump. */
static int queue_item(fr_writer *w, fr_table *table, double priority,
                      int32_t structure_id, int32_t n_columns, const int32_t *lens,
                      const uint8_t *squeeze, fr_cell **cells, int32_t *ends,
                      int32_t total, const int32_t *cols, const int64_t *ids,
                      uint64_t *key) {
    fr_pending_item *it =
        start_item(w, table, priority, structure_id, n_columns, total, lens, NULL, cols,
                   ids, find_runs(n_columns, lens, cells, ends));
    if (!it) return FR_ENOMEM;
    for (int32_t c = 0, at = 0, r = 0; c < n_columns; at += lens[c], c++) {
        fr_traj_column *tc = &it->traj->columns[c];
        tc->squeeze = squeeze[c];
        if (lens[c] > 0) tc->spec = w->cols[cols[at]].ispec;
        for (int32_t k = at; k < at + lens[c]; k = ends[r++])
            fr_trajectory_push_slice(it->traj, c, cells[k]->chunk, cells[k]->offset,
                                     ends[r] - k);
    }
    for (int32_t k = 0; k < total; k++) cells[k]->pins++;  /* fr_column_pin's +1 */
    commit_item(w, it, key);
    return FR_OK;
}

/* Room for the cells and find_runs' ends of `total` refs: the caller's
 * 64-entry arrays, else the heap (*heap, freed by the caller). */
static fr_cell **cell_room(int32_t total, fr_cell **inline_cells, int32_t *inline_ends,
                           int32_t **ends, void **heap) {
    *heap = NULL;
    *ends = inline_ends;
    if (total <= 64) return inline_cells;
    fr_cell **cells = *heap = malloc((size_t)total * (sizeof *cells + sizeof(int32_t)));
    if (cells) *ends = (int32_t *)(cells + total);
    return cells;
}

int fr_writer_create_item(fr_writer *w, fr_table *table, double priority,
                          int32_t structure_id,
                          int32_t n_columns, const int32_t *lens,
                          const uint8_t *squeeze, const int32_t *cols,
                          const int64_t *ids, uint64_t *key,
                          int32_t *bad_column, int32_t *bad_ref) {
    *bad_column = *bad_ref = -1;
    int32_t total = 0;
    for (int32_t c = 0; c < n_columns; c++) total += lens[c];
    int rc = check_item(w, table, priority, total);
    if (rc != FR_OK) return rc;
    fr_cell *inline_cells[64];  /* the cells, looked up once by the checks */
    int32_t inline_ends[64], *ends;
    void *heap;
    fr_cell **cells = cell_room(total, inline_cells, inline_ends, &ends, &heap);
    if (!cells) return FR_ENOMEM;
    for (int32_t c = 0, at = 0; c < n_columns && rc == FR_OK; at += lens[c], c++) {
        *bad_column = c;
        rc = check_column(w, lens[c], squeeze[c], cols + at, ids + at, cells + at,
                          bad_ref);
    }
    if (rc == FR_OK) {
        *bad_column = -1;
        rc = queue_item(w, table, priority, structure_id, n_columns, lens, squeeze,
                        cells, ends, total, cols, ids, key);
    }
    free(heap);
    return rc;
}

int fr_writer_create_item_runs(fr_writer *w, fr_table *table, double priority,
                               int32_t structure_id, int32_t n_columns,
                               const fr_ref_run *runs, const uint8_t *squeeze,
                               uint64_t *key, int32_t *bad_column, int32_t *bad_ref) {
    *bad_column = *bad_ref = -1;
    int32_t total = 0, n_slices = 0;
    for (int32_t c = 0; c < n_columns; c++) total += runs[c].count;
    int rc = check_item(w, table, priority, total);
    for (int32_t c = 0; c < n_columns && rc == FR_OK; c++) {
        *bad_column = c;
        rc = check_run(w, &runs[c], squeeze[c], &n_slices, bad_ref);
    }
    if (rc != FR_OK) return rc;
    *bad_column = -1;
    fr_pending_item *it = start_item(w, table, priority, structure_id, n_columns, total,
                                     NULL, runs, NULL, NULL, n_slices);
    if (!it) return FR_ENOMEM;
    it->run_columns = 1;
    for (int32_t c = 0; c < n_columns; c++) {
        it->run_columns &= runs[c].count <= 64;
        for (int32_t q = 0; q < c; q++) it->run_columns &= runs[q].col != runs[c].col;
        it->traj->columns[c].squeeze = squeeze[c];
        it->traj->columns[c].spec = w->cols[runs[c].col].ispec;
        push_run(w, it->traj, c, &runs[c]);
    }
    commit_item(w, it, key);
    return FR_OK;
}
