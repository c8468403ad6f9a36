/* TrajectoryWriter core: columns of cells, items built from cell ids, a FIFO
 * of items waiting for their chunks, and episodes (reverb-spec section 1).
 *
 * append() copies one step's values into the columns; create_item() turns
 * lists of cell ids into a trajectory of chunk slices and queues the item;
 * an item moves to its table (fr_table_insert_async, which never blocks) as
 * soon as every chunk it references is finalized, strictly in creation order.
 * flush() finalizes the chunks of all but the last N queued items and waits
 * until at most N items are queued here or in tables.  All of it runs
 * without the GIL.  Not thread-safe: one thread drives a writer.
 */
#ifndef FASTREPLAY_WRITER_H
#define FASTREPLAY_WRITER_H

#include "column.h"
#include "table.h"

typedef struct fr_writer fr_writer;

/* New writer into *out; columns start with `default_opt`.  FR_OK, FR_EINVAL
 * (invalid options), FR_ENOMEM or FR_ESYSTEM. */
int fr_writer_create(fr_store *store, uint64_t seed, fr_chunker_options default_opt,
                     fr_writer **out);
/* fr_writer_create returning the writer, or NULL on any failure. */
fr_writer *fr_writer_new(fr_store *store, uint64_t seed,
                         fr_chunker_options default_opt);
/* Free the writer.  Queued items that never reached a table are dropped;
 * items already queued in tables stay there. */
void fr_writer_free(fr_writer *w);

/* Add a column (returns its index) with `opt`, or the default when NULL.
 * The new column's history is back-filled with empty steps. */
int32_t fr_writer_add_column(fr_writer *w, const fr_chunker_options *opt);
int32_t fr_writer_num_columns(const fr_writer *w);
/* Reconfigure an existing column; FR_EBUSY when its buffer is not empty. */
int fr_writer_configure(fr_writer *w, int32_t col, fr_chunker_options opt);
fr_column *fr_writer_column(fr_writer *w, int32_t col);

/* Append one (partial) step: n values for distinct columns cols[i], each a
 * C-contiguous row described by specs[i].  Everything is validated before
 * anything is written: on failure *bad receives the offending position i and
 * the status says why (FR_EDTYPE, FR_ESHAPE, FR_EREPEATED).  A step stays
 * open after partial=1 and closes with partial=0. */
int fr_writer_append(fr_writer *w, int32_t n, const int32_t *cols,
                     const void *const *rows, const fr_spec *specs,
                     int partial, int32_t *bad);

/* Batches: between fr_writer_set_batch(w, steps) and fr_writer_set_batch(w,
 * 0) the caller appends up to `steps` steps (an extend) and each column's
 * open chunk grows past the chunker's length to hold up to
 * min(steps, FR_BATCH_CHUNK_BYTES / row bytes) of them (column.h), so the
 * items made of those steps share a few chunks instead of one per step.
 * Ending the batch finalizes the open chunks that reached the chunker's
 * length and hands ready items to their tables.  FR_OK or FR_ENOMEM. */
int fr_writer_set_batch(fr_writer *w, int64_t steps);

/* The validation half of fr_writer_append (nothing is written). */
int fr_writer_check_append(const fr_writer *w, int32_t n, const int32_t *cols,
                           const fr_spec *specs, int32_t *bad);

/* History length: steps since the last clear, counting an open step. */
int64_t fr_writer_history_len(const fr_writer *w);
/* Closed steps since the last end_episode. */
int64_t fr_writer_episode_steps(const fr_writer *w);
int fr_writer_step_open(const fr_writer *w);
/* 1 when column `col` has a value in the newest (open or last) step. */
int fr_writer_set_in_newest_step(const fr_writer *w, int32_t col);

/* For history positions pos[0..n) of column col write the cell id there, or
 * -1 where the column had no value or the cell expired. */
void fr_writer_cells_at(fr_writer *w, int32_t col, int64_t n,
                        const int64_t *pos, int64_t *ids);

/* fr_writer_cells_at for the positions start, start+step, ... (count of
 * them); returns how many positions had no alive cell (-1 written). */
int64_t fr_writer_cells_range(fr_writer *w, int32_t col, int64_t start,
                              int64_t step, int64_t count, int64_t *ids);

/* A run of `count` consecutive cells first, first + 1, ... of writer column
 * `col` (what a history slice h[k][-n:] refers to). */
typedef struct fr_ref_run {
    int64_t first;
    int32_t col, count;
} fr_ref_run;

/* Queue an item for `table`: column c of the trajectory has lens[c] refs
 * (cols[k], ids[k]) in order; squeeze[c] marks squeezed columns.  Validates
 * like Reverb (empty trajectory FR_EEMPTY, NaN priority FR_EPRIORITY_NAN,
 * the table's priority rules, then per column: FR_EEMPTY for an empty
 * column, FR_EEXPIRED, FR_ESQUEEZE, FR_EDTYPE, FR_ESHAPE with *bad_column /
 * *bad_ref set).  FR_EASYNC (before any check of the trajectory) when an
 * earlier item failed on its way into a table (fr_writer_take_failure).
 * *key receives the new item's random key.  `structure_id` is stored in the
 * item's trajectory (the bindings' nest registry; 0: none). */
int fr_writer_create_item(fr_writer *w, fr_table *table, double priority,
                          int32_t structure_id,
                          int32_t n_columns, const int32_t *lens,
                          const uint8_t *squeeze, const int32_t *cols,
                          const int64_t *ids, uint64_t *key,
                          int32_t *bad_column, int32_t *bad_ref);

/* fr_writer_create_item for an item whose trajectory column c is the one
 * run runs[c] (lens[c] = runs[c].count; cols and ids the run's cells): the
 * same checks, errors and result, without expanding the refs. */
int fr_writer_create_item_runs(fr_writer *w, fr_table *table, double priority,
                               int32_t structure_id, int32_t n_columns,
                               const fr_ref_run *runs, const uint8_t *squeeze,
                               uint64_t *key, int32_t *bad_column, int32_t *bad_ref);

/* Items queued here plus items queued in tables. */
int64_t fr_writer_pending(fr_writer *w);

/* An item of this writer that failed on its way into a table (the table
 * closed, or it refused the insert) is dropped and recorded; the next
 * create_item, flush or end_episode returns FR_EASYNC, and this returns the
 * recorded status with the item's key and table, and clears it (the writer
 * stays usable).  FR_OK when nothing is recorded. */
int fr_writer_take_failure(fr_writer *w, uint64_t *key, const fr_table **table);

/* Finalize the chunks of every queued item but the last `ignore_last`, hand
 * ready items to their tables, then wait (timeout_ns < 0: forever) until at
 * most ignore_last items are pending.  FR_OK, FR_ETIMEOUT, FR_EASYNC,
 * FR_EINTR (interrupt hook; nothing lost, flush again) or FR_ECLOSED. */
int fr_writer_flush(fr_writer *w, int64_t ignore_last, int64_t timeout_ns);

/* flush(0, timeout); then clear (or, with clear_buffers=0, finalize) every
 * column, start a new episode id and zero the step count.  The reset happens
 * even when the flush times out (FR_ETIMEOUT is still returned); on any other
 * flush failure nothing is reset. */
int fr_writer_end_episode(fr_writer *w, int clear_buffers, int64_t timeout_ns);

/* 1 when column `col` exists and cell `id` of it is alive. */
int fr_writer_cell_alive(fr_writer *w, int32_t col, int64_t id);

/* Close from any thread: wakes a flush blocked in another thread with
 * FR_ECLOSED; every later call returns FR_ECLOSED. */
void fr_writer_close(fr_writer *w);

/* Bytes fr_writer_read_cell writes for cell (col, id): the spec's row_bytes,
 * or a variable-length cell's blob length.  FR_EEXPIRED when not alive. */
int64_t fr_writer_cell_bytes(fr_writer *w, int32_t col, int64_t id);

/* Copy the value of cell (col, id) into dst.  FR_EEXPIRED when not alive. */
int fr_writer_read_cell(fr_writer *w, int32_t col, int64_t id, void *dst);

#endif /* FASTREPLAY_WRITER_H */
