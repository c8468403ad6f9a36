#include "column.h"

#include <stdlib.h>
#include <string.h>

/* Rows of at least this many bytes are LZ4-compressed when the chunk is
 * finalized (and kept raw if that saves under 1/8).  Smaller rows -- scalar
 * rewards, actions, short float vectors -- compress poorly and cost more
 * time than they save; see README "Compression" for the measurements. */
#define FR_COMPRESS_MIN_ROW_BYTES 256

int fr_chunker_options_validate(const fr_chunker_options *o) {
    if (o->num_keep_alive_refs <= 0) return FR_EINVAL;
    if (!o->autotune && (o->max_chunk_length <= 0 ||
                         o->max_chunk_length > o->num_keep_alive_refs))
        return FR_EINVAL;
    if (o->autotune && !(o->throughput_weight >= 0)) return FR_EINVAL;
    return FR_OK;
}

int32_t fr_chunker_start_length(const fr_chunker_options *o) {
    return o->autotune || o->max_chunk_length < 1 ? 1 : o->max_chunk_length;
}

void fr_column_init(fr_column *c, fr_store *store, fr_chunker_options opt) {
    memset(c, 0, sizeof *c);
    c->store = store;
    c->opt = opt;
    c->max_len = fr_chunker_start_length(&opt);
    fr_tuner_init(&c->tuner);
}

/* The records of one chunk are consecutive and share one reference to it
 * (push_record): the last of them gives it back.  A reference per record
 * cost two atomic operations per column a step, most of an append (perf,
 * session 22). */
static void drop_front(fr_column *c) {
    fr_cell *cell = fr_column_slot(c, c->cells_base);
    if (c->cells_len == 1 || fr_column_slot(c, c->cells_base + 1)->chunk != cell->chunk)
        fr_chunk_release(cell->chunk);
    c->cells_base++;
    c->cells_len--;
}

void fr_column_free(fr_column *c) {
    while (c->cells_len > 0) drop_front(c);
    if (c->open) fr_chunk_release(c->open);
    free(c->cells);
    free(c->buf);
    free(c->var_offs);
    memset(c, 0, sizeof *c);
}

int fr_should_compress(const fr_spec *spec) {
    return fr_codec_available() && spec->row_bytes >= FR_COMPRESS_MIN_ROW_BYTES;
}

int fr_compress_choice(const fr_spec *spec, int32_t compression) {
    if (compression == FR_COMPRESSION_NONE) return 0;
    if (compression == FR_COMPRESSION_LZ4) return fr_codec_available();
    /* Variable-length chunks are compressed by their size (finalize_var). */
    return fr_spec_is_var(spec) ? fr_codec_available() : fr_should_compress(spec);
}

void fr_column_set_compression(fr_column *c, int32_t compression) {
    c->compression = compression;
    if (c->has_spec) c->compress = fr_compress_choice(&c->spec, compression);
}

int fr_column_set_spec(fr_column *c, const fr_spec *spec) {
    fr_spec s = *spec;
    if (fr_spec_is_var(&s)) s.itemsize = 0, s.row_bytes = 0; /* one kind */
    c->ispec = fr_spec_intern(&s);
    if (!c->ispec) return FR_ENOMEM;
    c->spec = s;
    c->has_spec = 1;
    c->compress = fr_compress_choice(&s, c->compression);
    return FR_OK;
}

/* The rows the open chunk takes before it is finalized: max_len, or more
 * during a batch (fr_column_set_batch). */
static int32_t limit(fr_column *c) {
    int64_t n = c->batch_steps;
    if (n <= c->max_len) return c->max_len;
    if (c->has_spec) {
        if (!c->batch_rows) { /* once a batch: a division per append showed */
            int64_t cap = fr_spec_is_var(&c->spec) ? FR_BATCH_VAR_ROWS
                          : FR_BATCH_CHUNK_BYTES /
                                (c->spec.row_bytes > 0 ? c->spec.row_bytes : 1);
            c->batch_rows = (int32_t)(n < cap ? n : cap);
        }
        n = c->batch_rows;
    }
    return n > c->max_len ? (int32_t)n : c->max_len;
}

/* Capacity of the open-chunk buffer: the longest chunk the options allow,
 * or a batch's (limit). */
static int32_t buffer_rows(fr_column *c) {
    int32_t n = limit(c);
    return n > c->opt.num_keep_alive_refs ? n : c->opt.num_keep_alive_refs;
}

int fr_column_set_batch(fr_column *c, int64_t steps) {
    c->batch_steps = steps > 1 ? (steps < INT32_MAX ? steps : INT32_MAX) : 0;
    c->batch_rows = 0;
    if (c->batch_steps || !c->open || c->buf_rows < c->max_len) return FR_OK;
    return fr_column_finalize(c);
}

int fr_column_finalize(fr_column *c) {
    if (!c->open) return FR_OK;
    int rc = fr_spec_is_var(&c->spec)
                 ? fr_chunk_finalize_var(c->open, c->var_offs, c->buf, c->buf_rows,
                                         c->open_first_step, c->open_last_step,
                                         c->compress)
                 : fr_chunk_finalize(c->open, c->buf, c->buf_rows,
                                     c->open_first_step, c->open_last_step,
                                     c->compress);
    if (rc != FR_OK) return rc;
    fr_chunk_release(c->open);
    c->open = NULL;
    c->buf_rows = 0;
    return FR_OK;
}

/* Forget records at the front that are out of the window and unpinned. */
static void trim(fr_column *c) {
    while (c->cells_len > 0) {
        fr_cell *front = fr_column_slot(c, c->cells_base);
        if (front->pins > 0 || fr_column_id_alive(c, c->cells_base)) break;
        drop_front(c);
    }
}

static int push_cell(fr_column *c, fr_cell cell) {
    if (c->cells_len == c->cells_cap) {
        int64_t cap = c->cells_cap ? c->cells_cap * 2 : 16;
        fr_cell *cells = malloc((size_t)cap * sizeof *cells);
        if (!cells) return FR_ENOMEM;
        for (int64_t i = 0; i < c->cells_len; i++)
            cells[(c->cells_base + i) & (cap - 1)] =
                *fr_column_slot(c, c->cells_base + i);
        free(c->cells);
        c->cells = cells;
        c->cells_cap = cap;
    }
    *fr_column_slot(c, c->cells_base + c->cells_len) = cell;
    c->cells_len++;
    return FR_OK;
}

/* A record for the next row of the open chunk; its run of records holds
 * one reference to the chunk (drop_front). */
static int push_record(fr_column *c, int64_t hpos) {
    if (c->cells_len == 0) c->cells_base = c->n_appended;
    int shared = c->cells_len > 0 &&
                 fr_column_slot(c, c->cells_base + c->cells_len - 1)->chunk == c->open;
    if (!shared) fr_chunk_retain(c->open);
    int rc = push_cell(c, (fr_cell){c->open, c->buf_rows, 0, hpos});
    if (rc != FR_OK && !shared) fr_chunk_release(c->open);
    return rc;
}

int fr_column_append(fr_column *c, const void *row, int64_t hpos,
                     uint64_t episode_id, int64_t step, uint64_t *next_key) {
    if (c->buf_cap < buffer_rows(c)) {
        unsigned char *buf = realloc(c->buf, (size_t)buffer_rows(c) * c->spec.row_bytes);
        if (!buf) return FR_ENOMEM;
        c->buf = buf;
        c->buf_cap = buffer_rows(c);
    }
    if (!c->open) {
        int64_t room = (int64_t)limit(c) * c->spec.row_bytes;
        c->open = fr_chunk_new_inline(c->store, (*next_key)++, episode_id,
                                      c->spec.row_bytes,
                                      room <= FR_CHUNK_INLINE_MAX ? room : 0);
        if (!c->open) return FR_ENOMEM;
        c->open_first_step = step;
    }
    int rc = push_record(c, hpos);
    if (rc != FR_OK) return rc;
    memcpy(c->buf + (int64_t)c->buf_rows * c->spec.row_bytes, row,
           (size_t)c->spec.row_bytes);
    c->buf_rows++;
    c->open_last_step = step;
    c->n_appended++;
    if (c->buf_rows >= limit(c)) rc = fr_column_finalize(c);
    trim(c);
    return rc;
}

/* Make room for one more variable-length row of `len` bytes. */
static int var_reserve(fr_column *c, int64_t len) {
    if (c->var_offs_cap < buffer_rows(c) + 1) {
        int64_t *offs = realloc(c->var_offs,
                                ((size_t)buffer_rows(c) + 1) * sizeof *offs);
        if (!offs) return FR_ENOMEM;
        c->var_offs = offs;
        c->var_offs_cap = buffer_rows(c) + 1;
    }
    int64_t len_now = c->open ? c->var_len : 0;
    if (len_now + len > c->var_cap) {
        int64_t cap = c->var_cap * 2 > len_now + len ? c->var_cap * 2 : len_now + len;
        unsigned char *buf = realloc(c->buf, (size_t)(cap > 256 ? cap : 256));
        if (!buf) return FR_ENOMEM;
        c->buf = buf;
        c->var_cap = cap > 256 ? cap : 256;
    }
    return FR_OK;
}

int fr_column_append_var(fr_column *c, const void *blob, int64_t len,
                         int64_t hpos, uint64_t episode_id, int64_t step,
                         uint64_t *next_key) {
    if (len < 0) return FR_EINVAL;
    int rc = var_reserve(c, len);
    if (rc != FR_OK) return rc;
    if (!c->open) {
        c->open = fr_chunk_new(c->store, (*next_key)++, episode_id, FR_VAR_ROWS);
        if (!c->open) return FR_ENOMEM;
        c->open_first_step = step;
        c->var_len = 0;
        c->var_offs[0] = 0;
    }
    rc = push_record(c, hpos);
    if (rc != FR_OK) return rc;
    if (len > 0) memcpy(c->buf + c->var_len, blob, (size_t)len); /* buf may be NULL */
    c->var_len += len;
    c->var_offs[++c->buf_rows] = c->var_len;
    c->open_last_step = step;
    c->n_appended++;
    if (c->buf_rows >= limit(c)) rc = fr_column_finalize(c);
    trim(c);
    return rc;
}

int fr_column_reset(fr_column *c) {
    int pinned = 0;
    for (int64_t i = 0; i < c->cells_len; i++) {
        const fr_cell *cell = fr_column_slot(c, c->cells_base + i);
        pinned |= cell->pins > 0 && cell->chunk == c->open;
    }
    if (pinned) {
        int rc = fr_column_finalize(c);
        if (rc != FR_OK) return rc;
    } else if (c->open) {
        fr_chunk_release(c->open);
        c->open = NULL;
        c->buf_rows = 0;
    }
    c->alive_from = c->n_appended;
    trim(c);
    return FR_OK;
}

int fr_column_configure(fr_column *c, fr_chunker_options opt) {
    if (c->buf_rows > 0) return FR_EBUSY;
    c->opt = opt;
    c->max_len = fr_chunker_start_length(&opt);
    fr_tuner_init(&c->tuner);
    trim(c);
    return FR_OK;
}

void fr_column_unpin(fr_column *c, int64_t first, int32_t n) {
    int64_t lo = first > c->cells_base ? first : c->cells_base;
    int64_t hi = first + n < c->cells_base + c->cells_len ? first + n
                                                           : c->cells_base + c->cells_len;
    for (int64_t id = lo; id < hi; id++) fr_column_slot(c, id)->pins--;
    trim(c);
}

int fr_column_read(fr_column *c, int64_t id, void *dst, void *scratch) {
    fr_cell *cell = fr_column_cell(c, id);
    if (!cell) return FR_EEXPIRED;
    if (fr_spec_is_var(&c->spec)) {
        const int64_t *offs = c->var_offs;
        const unsigned char *payload = c->buf;
        if (cell->chunk != c->open &&
            fr_chunk_var_data(cell->chunk, scratch, &offs, &payload) != FR_OK)
            return FR_ECORRUPT;
        int64_t n = offs[cell->offset + 1] - offs[cell->offset];
        if (n > 0) memcpy(dst, payload + offs[cell->offset], (size_t)n);
        return FR_OK;
    }
    if (cell->chunk == c->open) {
        memcpy(dst, c->buf + (int64_t)cell->offset * c->spec.row_bytes,
               (size_t)c->spec.row_bytes);
        return FR_OK;
    }
    return fr_chunk_read(cell->chunk, cell->offset, 1, dst, scratch) == FR_OK
               ? FR_OK
               : FR_ECORRUPT;
}

int64_t fr_column_row_bytes(fr_column *c, int64_t id) {
    fr_cell *cell = fr_column_cell(c, id);
    if (!cell) return FR_EEXPIRED;
    if (!fr_spec_is_var(&c->spec)) return c->spec.row_bytes;
    const int64_t *offs = cell->chunk == c->open
                              ? c->var_offs
                              : (const int64_t *)(const void *)cell->chunk->data;
    return offs[cell->offset + 1] - offs[cell->offset];
}

int64_t fr_column_scratch_bytes(fr_column *c, int64_t id) {
    fr_cell *cell = fr_column_cell(c, id);
    if (!cell) return FR_EEXPIRED;
    if (cell->chunk == c->open) return 0;
    if (fr_spec_is_var(&c->spec)) return fr_chunk_var_scratch_bytes(cell->chunk);
    return cell->chunk->compressed
               ? (int64_t)cell->chunk->n_rows * cell->chunk->row_bytes
               : 0;
}
