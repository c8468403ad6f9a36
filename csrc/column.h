/* Writer columns: Reverb's Chunker plus the bookkeeping of weak cell refs.
 *
 * A column buffers appended cells (rows of one dtype and shape) in an open
 * chunk and finalizes it once it holds max_chunk_length rows (or when asked).
 * Every appended cell gets an id (0, 1, 2, ... per column).  A cell is alive
 * while it is among the last num_keep_alive_refs cells appended since the last
 * reset, or while a pending item pins it; records of alive cells map the id
 * to (chunk, offset).  The records of a chunk (consecutive) retain it once,
 * so chunks live while a cell in them is alive or an item references them.
 *
 * AutoTuned columns adjust max_chunk_length within [1, num_keep_alive_refs]
 * with Reverb's algorithm (reverb-spec section 2.4; column_tune.c), fed by
 * fr_column_on_item for every item leaving the writer.
 *
 * Not thread-safe: the owning writer serializes access.
 */
#ifndef FASTREPLAY_COLUMN_H
#define FASTREPLAY_COLUMN_H

#include "chunk.h"
#include "trajectory.h"

typedef struct fr_chunker_options {
    int32_t max_chunk_length;    /* constant length; ignored when autotune */
    int32_t num_keep_alive_refs;
    int32_t autotune;
    double throughput_weight;
} fr_chunker_options;

/* FR_OK, or FR_EINVAL for Reverb's ValidateChunkerOptions failures. */
int fr_chunker_options_validate(const fr_chunker_options *o);

/* The chunker's rule for a new column: the most rows a chunk holds before it
 * is finalized (max_chunk_length, or 1 for an auto-tuned column until item
 * feedback grows it).  Batched row inserts (rows.h) split by it too. */
int32_t fr_chunker_start_length(const fr_chunker_options *o);

/* A chunk of at most this many bytes of rows (at the column's current
 * chunk length) keeps them in its own allocation (fr_chunk_new_inline): one
 * malloc per chunk instead of two for the small rows writers mostly append;
 * larger ones would hold unused room when the tuner shortens a chunk. */
#define FR_CHUNK_INLINE_MAX 1024

#define FR_TUNE_ITEMS 10
#define FR_TUNE_CHUNKS 5

typedef struct fr_tuner {
    double item_len[FR_TUNE_ITEMS], item_bps[FR_TUNE_ITEMS];
    double chunk_len[FR_TUNE_CHUNKS], chunk_bps[FR_TUNE_CHUNKS];
    uint64_t chunk_key[FR_TUNE_CHUNKS];
    int n_items, n_chunks;
    double prev_len, prev_cost; /* -1 before the first score */
} fr_tuner;

/* A tuner with no statistics yet (column_tune.c). */
void fr_tuner_init(fr_tuner *t);

typedef struct fr_cell {
    fr_chunk *chunk; /* retained once by its run of records (drop_front) */
    int32_t offset;
    int32_t pins;    /* pending items holding this cell */
    int64_t hpos;    /* history position (step since the last clear) */
} fr_cell;

/* A column's compression choice (fr_compress_choice). */
#define FR_COMPRESSION_AUTO 0 /* the rule below */
#define FR_COMPRESSION_NONE 1 /* never */
#define FR_COMPRESSION_LZ4 2  /* always tried (kept raw if it does not shrink) */

typedef struct fr_column {
    int has_spec;
    fr_spec spec;
    const fr_spec *ispec; /* interned copy of spec, for items */
    int compress;
    int32_t compression; /* FR_COMPRESSION_*; decides `compress` with the spec */
    fr_chunker_options opt;
    int32_t max_len; /* current max chunk length */
    /* Steps of the batch being appended (fr_column_set_batch), 0 outside
     * one: the open chunk may then hold more than max_len rows. */
    int64_t batch_steps;
    int32_t batch_rows; /* the batch's row limit once computed (limit()) */
    fr_tuner tuner;
    fr_store *store;
    fr_chunk *open;  /* retained; NULL when the buffer is empty */
    unsigned char *buf;
    int32_t buf_rows, buf_cap;
    /* Variable-length columns: buf holds the open rows' bytes (var_len of
     * var_cap), var_offs[0..buf_rows] their offsets (fr_chunk_finalize_var). */
    int64_t var_len, var_cap;
    int64_t *var_offs;
    int32_t var_offs_cap;
    int64_t open_first_step, open_last_step;
    fr_cell *cells;  /* ring of records for ids [cells_base, cells_base+cells_len) */
    int64_t cells_cap, cells_base, cells_len;  /* cells_cap: 0 or a power of 2 */
    int64_t n_appended;
    int64_t alive_from; /* ids below this were cleared by a reset */
} fr_column;

void fr_column_init(fr_column *c, fr_store *store, fr_chunker_options opt);

/* The ring slot of cell `id` (any id; cells_cap > 0). */
static inline fr_cell *fr_column_slot(const fr_column *c, int64_t id) {
    return &c->cells[id & (c->cells_cap - 1)];
}
void fr_column_free(fr_column *c);

/* The compression rule: whether chunks of rows of `spec` are LZ4-compressed
 * (rows of at least 256 bytes, when the codec is available). */
int fr_should_compress(const fr_spec *spec);

/* Whether chunks of rows of `spec` are LZ4-compressed under `compression`
 * (FR_COMPRESSION_*): AUTO is fr_should_compress, NONE never, LZ4 whenever
 * the codec is available. */
int fr_compress_choice(const fr_spec *spec, int32_t compression);

/* Set a column's compression choice; it applies from the next chunk. */
void fr_column_set_compression(fr_column *c, int32_t compression);

/* Set the spec on the first value; decides compression (rule in column.c). */
int fr_column_set_spec(fr_column *c, const fr_spec *spec);

/* Append one row (spec already checked) as cell `hpos` of episode
 * `episode_id`, step `step`; a new chunk takes key *next_key, which then
 * grows by one (see fr_writer.next_chunk_key).  Finalizes the
 * chunk when full and forgets cells that left the keep-alive window.
 * FR_OK or FR_ENOMEM. */
int fr_column_append(fr_column *c, const void *row, int64_t hpos,
                     uint64_t episode_id, int64_t step, uint64_t *next_key);

/* fr_column_append for variable-length columns (fr_spec_is_var): the row
 * is the `len`-byte blob.  The chunk (FR_VAR_ROWS) is compressed when the
 * column compresses and its rows total at least 256 bytes.  FR_OK,
 * FR_EINVAL (negative len) or FR_ENOMEM. */
int fr_column_append_var(fr_column *c, const void *blob, int64_t len,
                         int64_t hpos, uint64_t episode_id, int64_t step,
                         uint64_t *next_key);

/* The most bytes of rows a chunk takes while a batch of steps is appended
 * (fr_column_set_batch).  Items of one step each, written one step at a
 * time, leave one 1-row chunk per column a step, and shipping those cost
 * the writer's process ~0.7 us a step more than 256-row chunks did (5 small
 * columns to a server process: 2.5-2.9 against 1.8 us of client CPU a
 * step; scratch ck.py, session 22).  16 KiB keeps a sampled row's chunk
 * small to decompress (2 rows of an Atari frame) while small rows reach
 * hundreds a chunk. */
#define FR_BATCH_CHUNK_BYTES 16384
/* Variable-length (string) rows in such a chunk, at most. */
#define FR_BATCH_VAR_ROWS 256

/* Start (steps > 1) or end (steps <= 1) a batch of `steps` steps appended in
 * one call: until it ends the open chunk takes up to min(steps,
 * FR_BATCH_CHUNK_BYTES / row bytes) rows when that is more than max_len.
 * Ending it finalizes an open chunk holding max_len rows or more.  FR_OK or
 * FR_ENOMEM. */
int fr_column_set_batch(fr_column *c, int64_t steps);

/* Finalize the open chunk, if any.  FR_OK or FR_ENOMEM. */
int fr_column_finalize(fr_column *c);

/* End of episode with clear_buffers: drop the open rows (finalizing them
 * instead if a pending item pins one) and expire every cell. */
int fr_column_reset(fr_column *c);

/* Change options; requires an empty buffer (FR_EBUSY otherwise). */
int fr_column_configure(fr_column *c, fr_chunker_options opt);

/* Whether cell `id` is in the keep-alive window (and not cleared). */
static inline int fr_column_id_alive(const fr_column *c, int64_t id) {
    int64_t window = c->n_appended - c->opt.num_keep_alive_refs;
    return id >= c->alive_from && id >= window;
}

/* Record of an alive cell, or NULL when `id` is expired or unknown. */
static inline fr_cell *fr_column_cell(fr_column *c, int64_t id) {
    if (id < c->cells_base || id >= c->cells_base + c->cells_len) return NULL;
    fr_cell *cell = fr_column_slot(c, id);
    return cell->pins > 0 || fr_column_id_alive(c, id) ? cell : NULL;
}

/* A pending item pins its alive cells (cell->pins++, so they outlive the
 * keep-alive window); this unpins cells first .. first + n - 1, then drops
 * expired cells. */
void fr_column_unpin(fr_column *c, int64_t first, int32_t n);

/* Copy the row of alive cell `id` into dst (fr_column_row_bytes bytes);
 * scratch holds one raw chunk (fr_column_scratch_bytes). */
int fr_column_read(fr_column *c, int64_t id, void *dst, void *scratch);

/* Bytes of alive cell `id`'s row (a variable-length row's own length), and
 * the scratch fr_column_read needs for it; FR_EEXPIRED when not alive. */
int64_t fr_column_row_bytes(fr_column *c, int64_t id);
int64_t fr_column_scratch_bytes(fr_column *c, int64_t id);

/* Auto-tuning feedback: the item used n_refs refs of this column, whose
 * chunks (all finalized, repeats allowed) are chunks[0..n_chunks). */
void fr_column_on_item(fr_column *c, fr_chunk *const *chunks, int32_t n_chunks,
                       int32_t n_refs);
/* The same for an item whose refs of this column are one run of consecutive
 * cells, read from its n_slices slices (each slice its own chunk). */
void fr_column_on_item_slices(fr_column *c, const fr_slice *slices, int32_t n_slices,
                              int32_t n_refs);

#endif /* FASTREPLAY_COLUMN_H */
