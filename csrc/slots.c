#include "slots_internal.h"

#include "column.h"
#include "mem.h"
#include "rows.h"
#include "traj_bulk.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* n zeroed cells, through mem.h: a large table's cells sit on huge pages
 * (reads index them at random; with 4 KiB pages every read of a table of
 * millions of slots also missed the TLB: ALF's replay(256, 8) over 1.6M
 * slots, read 158 -> 94 us).  Free with cells_free(p, n). */
static cell *cells_new(int64_t n) {
    cell *p = fr_alloc_large((size_t)n * sizeof(cell));
    if (p) memset(p, 0, (size_t)n * sizeof(cell));
    return p;
}

static void cells_free(cell *p, int64_t n) {
    fr_free_large(p, (size_t)n * sizeof(cell));
}

/* The layout a first write of these specs and choices gives. */
typedef struct layout {
    int32_t n_cells, has_record;
    int32_t *cell_of;
    int64_t *offset_of;
    int64_t record_bytes, max_row_bytes;
} layout;

static int layout_make(layout *l, int32_t n_cols, const fr_spec *specs,
                       const int32_t *compression) {
    l->cell_of = calloc((size_t)n_cols, sizeof *l->cell_of);
    l->offset_of = calloc((size_t)n_cols, sizeof *l->offset_of);
    if (!l->cell_of || !l->offset_of) return FR_ENOMEM;
    l->record_bytes = l->max_row_bytes = 0;
    l->has_record = 0;
    for (int32_t c = 0; c < n_cols; c++)
        if (!fr_compress_choice(&specs[c],
                                compression ? compression[c] : FR_COMPRESSION_AUTO))
            l->has_record = 1;
    l->n_cells = l->has_record;
    for (int32_t c = 0; c < n_cols; c++) {
        if (fr_compress_choice(&specs[c],
                               compression ? compression[c] : FR_COMPRESSION_AUTO)) {
            l->cell_of[c] = l->n_cells++;
            l->offset_of[c] = -1;
            if (specs[c].row_bytes > l->max_row_bytes) l->max_row_bytes = specs[c].row_bytes;
        } else {
            l->cell_of[c] = 0;
            l->offset_of[c] = l->record_bytes;
            l->record_bytes += specs[c].row_bytes;
        }
    }
    return FR_OK;
}

static void layout_free(layout *l) {
    free(l->cell_of);
    free(l->offset_of);
    l->cell_of = NULL;
    l->offset_of = NULL;
}

fr_slots *fr_slots_new(int64_t capacity, fr_store *store) {
    if (capacity < 1) return NULL;
    fr_slots *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        free(s);
        return NULL;
    }
    s->capacity = capacity;
    s->store = store;
    fr_store_retain(store);
    return s;
}

/* Release the chunks of n cells of one column (stride n_cols apart),
 * consecutive references to one chunk at once. */
static void release_cells(cell *first, int64_t n, int32_t stride) {
    fr_chunk *run = NULL;
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) {
        fr_chunk *c = first[i * stride].chunk;
        if (c != run) {
            if (run) fr_chunk_release_n(run, count);
            run = c;
            count = 0;
        }
        count += c != NULL;
        first[i * stride].chunk = NULL;
    }
    if (run && count) fr_chunk_release_n(run, count);
}

static void clear_locked(fr_slots *s) {
    if (s->cells)
        for (int32_t j = 0; j < s->n_cells; j++)
            release_cells(s->cells + j, s->capacity, s->n_cells);
    cells_free(s->cells, s->capacity * s->n_cells);
    free(s->specs);
    free(s->cell_of);
    free(s->offset_of);
    s->cells = NULL;
    s->specs = NULL;
    s->cell_of = NULL;
    s->offset_of = NULL;
    s->n_cols = s->n_cells = s->has_record = 0;
    s->size = 0;
    s->record_bytes = s->max_row_bytes = 0;
}

void fr_slots_free(fr_slots *s) {
    if (!s) return;
    clear_locked(s);
    fr_store_release(s->store);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void fr_slots_clear(fr_slots *s) {
    pthread_mutex_lock(&s->mu);
    clear_locked(s);
    pthread_mutex_unlock(&s->mu);
}

/* FR_OK if the table has no columns yet or exactly these specs and
 * layout. */
static int check_specs(const fr_slots *s, int32_t n_cols, const fr_spec **ispecs,
                       const layout *l, int64_t *bad) {
    if (s->n_cols == 0) return FR_OK;
    if (n_cols != s->n_cols) return FR_EINVAL;
    for (int32_t c = 0; c < n_cols; c++)
        if (ispecs[c] != s->specs[c]) {
            *bad = c;
            return ispecs[c]->dtype != s->specs[c]->dtype ? FR_EDTYPE : FR_ESHAPE;
        }
    if (l && l->n_cells != s->n_cells) return FR_EBUSY; /* other compression */
    if (l)
        for (int32_t c = 0; c < n_cols; c++)
            if (l->cell_of[c] != s->cell_of[c]) return FR_EBUSY;
    return FR_OK;
}

/* Chunks of `rows` (n rows of row_bytes): chunks[k] holds rows [k * len,
 * ...), with one reference per row. */
static int make_chunks(fr_slots *s, int64_t row_bytes, const void *rows, int64_t n,
                       int compress, int32_t len, fr_chunk **chunks,
                       uint64_t *chunk_key) {
    fr_spec spec = {0};
    spec.row_bytes = row_bytes;
    int rc = FR_OK;
    int64_t k = 0;
    for (int64_t r = 0; r < n; r += len, k++) {
        chunks[k] = fr_rows_make_chunk(s->store, &spec, compress, rows, n, r, len,
                                       chunk_key, &rc);
        if (rc != FR_OK) {
            if (chunks[k]) fr_chunk_release(chunks[k]);
            while (k-- > 0) fr_chunk_release_n(chunks[k], chunks[k]->n_rows);
            return rc;
        }
        /* One reference per row it holds (the first is the creator's). */
        if (chunks[k]->n_rows > 1) fr_chunk_retain_n(chunks[k], chunks[k]->n_rows - 1);
    }
    return FR_OK;
}

/* Release the chunks of cells [0, upto) that no slot took. */
static void drop_chunks(fr_chunk ***chunks, const int32_t *lens, int64_t n,
                        int32_t upto) {
    for (int32_t j = 0; j < upto; j++)
        for (int64_t k = 0; k * lens[j] < n; k++)
            fr_chunk_release_n(chunks[j][k], chunks[j][k]->n_rows);
}

/* The n records of the packed columns, back to back. */
static unsigned char *pack_records(const layout *l, int32_t n_cols,
                                   const fr_spec *specs, const void *const *cols,
                                   int64_t n) {
    unsigned char *buf = malloc((size_t)(n * l->record_bytes));
    if (!buf) return NULL;
    for (int32_t c = 0; c < n_cols; c++) {
        if (l->offset_of[c] < 0) continue;
        int64_t rb = specs[c].row_bytes;
        const unsigned char *src = cols[c];
        unsigned char *dst = buf + l->offset_of[c];
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + i * l->record_bytes, src + i * rb, (size_t)rb);
    }
    return buf;
}

/* Under the lock: point slots[0..n) at row i of the new chunks. */
static void assign(fr_slots *s, const int64_t *slots, int64_t n, fr_chunk ***chunks,
                   const int32_t *lens) {
    int32_t k = s->n_cells;
    for (int64_t i = 0; i < n; i++) {
        cell *row = s->cells + slots[i] * k;
        if (!row[0].chunk) s->size++;
        for (int32_t j = 0; j < k; j++) {
            if (row[j].chunk) fr_chunk_release(row[j].chunk);
            row[j].chunk = chunks[j][i / lens[j]];
            row[j].row = i % lens[j];
        }
    }
}

int fr_slots_write(fr_slots *s, int32_t n_cols, const fr_spec *specs,
                   const void *const *cols, int64_t n, const int64_t *slots,
                   const int32_t *compression, uint64_t *chunk_key, int64_t *bad) {
    *bad = -1;
    if (n_cols < 1) return FR_EINVAL;
    for (int64_t i = 0; i < n; i++)
        if (slots[i] < 0 || slots[i] >= s->capacity) {
            *bad = i;
            return FR_EINVAL;
        }
    if (n == 0) return FR_OK;
    int rc = FR_ENOMEM;
    layout l = {0};
    const fr_spec **ispecs = calloc((size_t)n_cols, sizeof *ispecs);
    int32_t *lens = calloc((size_t)n_cols + 1, sizeof *lens);
    fr_chunk ***chunks = calloc((size_t)n_cols + 1, sizeof *chunks);
    unsigned char *records = NULL;
    cell *cells = NULL;
    int32_t built = 0;
    if (!ispecs || !lens || !chunks) goto out;
    for (int32_t c = 0; c < n_cols; c++)
        if (!(ispecs[c] = fr_spec_intern(&specs[c]))) goto out;
    if ((rc = layout_make(&l, n_cols, specs, compression)) != FR_OK) goto out;
    pthread_mutex_lock(&s->mu); /* refuse early, before building chunks */
    rc = check_specs(s, n_cols, ispecs, &l, bad);
    int fresh = s->n_cols == 0;
    pthread_mutex_unlock(&s->mu);
    if (rc != FR_OK) goto out;
    rc = FR_ENOMEM;
    if (fresh && !(cells = cells_new(s->capacity * l.n_cells)))
        goto out;
    if (l.has_record) { /* cell 0: the packed columns' records */
        int64_t len = FR_ROWS_RAW_CHUNK_BYTES / (l.record_bytes ? l.record_bytes : 1);
        lens[0] = (int32_t)(len < 1 ? 1 : len > n ? n : len);
        if (!(records = pack_records(&l, n_cols, specs, cols, n))) goto out;
        if (!(chunks[0] = calloc((size_t)((n + lens[0] - 1) / lens[0]), sizeof **chunks)))
            goto out;
        rc = make_chunks(s, l.record_bytes, records, n, 0, lens[0], chunks[0], chunk_key);
        if (rc != FR_OK) goto out;
        built = 1;
        rc = FR_ENOMEM;
    }
    for (int32_t c = 0; c < n_cols; c++) { /* a chunk per row of the others */
        if (l.offset_of[c] >= 0) continue;
        int32_t j = l.cell_of[c];
        lens[j] = 1;
        if (!(chunks[j] = calloc((size_t)n, sizeof **chunks))) goto out;
        rc = make_chunks(s, specs[c].row_bytes, cols[c], n, 1, 1, chunks[j], chunk_key);
        if (rc != FR_OK) goto out;
        built = j + 1;
        rc = FR_ENOMEM;
    }
    pthread_mutex_lock(&s->mu);
    rc = check_specs(s, n_cols, ispecs, &l, bad); /* a clear may have come between */
    if (rc == FR_OK && s->n_cols == 0 && !cells) /* cleared since: rare */
        cells = cells_new(s->capacity * l.n_cells);
    if (rc == FR_OK && s->n_cols == 0 && !cells) rc = FR_ENOMEM;
    if (rc == FR_OK && s->n_cols == 0) { /* the first write: its layout */
        s->cells = cells;
        s->specs = ispecs;
        s->cell_of = l.cell_of;
        s->offset_of = l.offset_of;
        s->n_cols = n_cols;
        s->n_cells = l.n_cells;
        s->has_record = l.has_record;
        s->record_bytes = l.record_bytes;
        s->max_row_bytes = l.max_row_bytes;
        cells = NULL;
        ispecs = NULL;
        l.cell_of = NULL;
        l.offset_of = NULL;
    }
    if (rc == FR_OK) {
        assign(s, slots, n, chunks, lens);
        built = 0;
    }
    pthread_mutex_unlock(&s->mu);
out:
    drop_chunks(chunks, lens, n, built);
    if (chunks)
        for (int32_t j = 0; j <= n_cols; j++) free(chunks[j]);
    free(chunks);
    free(lens);
    free(ispecs);
    cells_free(cells, s->capacity * l.n_cells);
    free(records);
    layout_free(&l);
    return rc;
}

int fr_slots_erase(fr_slots *s, int64_t n, const int64_t *slots, int64_t *bad) {
    *bad = -1;
    for (int64_t i = 0; i < n; i++)
        if (slots[i] < 0 || slots[i] >= s->capacity) {
            *bad = i;
            return FR_EINVAL;
        }
    pthread_mutex_lock(&s->mu);
    if (s->cells)
        for (int64_t i = 0; i < n; i++) {
            cell *row = s->cells + slots[i] * s->n_cells;
            if (!row[0].chunk) continue;
            for (int32_t j = 0; j < s->n_cells; j++) {
                fr_chunk_release(row[j].chunk);
                row[j].chunk = NULL;
            }
            s->size--;
        }
    pthread_mutex_unlock(&s->mu);
    return FR_OK;
}

int64_t fr_slots_size(fr_slots *s) {
    pthread_mutex_lock(&s->mu);
    int64_t n = s->size;
    pthread_mutex_unlock(&s->mu);
    return n;
}

int32_t fr_slots_columns(fr_slots *s) {
    pthread_mutex_lock(&s->mu);
    int32_t n = s->n_cols;
    pthread_mutex_unlock(&s->mu);
    return n;
}

const fr_spec *fr_slots_spec(fr_slots *s, int32_t c) {
    pthread_mutex_lock(&s->mu);
    const fr_spec *spec = c >= 0 && c < s->n_cols ? s->specs[c] : NULL;
    pthread_mutex_unlock(&s->mu);
    return spec;
}
