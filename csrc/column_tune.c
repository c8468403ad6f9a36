/* The chunk-length auto-tuner of AutoTuned columns (reverb-spec section
 * 2.4; column.h): items leaving the writer feed it their chunks' lengths
 * and bytes, and every FR_TUNE_ITEMS items and FR_TUNE_CHUNKS chunks it
 * moves max_chunk_length within [1, num_keep_alive_refs].  Not
 * thread-safe: the owning writer serializes access. */
#include "column.h"

#include <math.h>
#include <string.h>

/* Per-chunk bookkeeping bytes added to chunk sizes when tuning, standing in
 * for Reverb's proto overhead so that longer chunks amortise it. */
#define FR_TUNE_CHUNK_OVERHEAD 64.0

void fr_tuner_init(fr_tuner *t) {
    memset(t, 0, sizeof *t);
    t->prev_len = t->prev_cost = -1.0;
}

static double chunk_bytes(const fr_chunk *k) {
    return (double)k->stored_bytes + FR_TUNE_CHUNK_OVERHEAD;
}

static void push_stat(double *len, double *bps, int *n, int cap, double l, double b) {
    if (*n == cap) {
        memmove(len, len + 1, (size_t)(cap - 1) * sizeof *len);
        memmove(bps, bps + 1, (size_t)(cap - 1) * sizeof *bps);
        (*n)--;
    }
    len[*n] = l;
    bps[*n] = b;
    (*n)++;
}

static double mean(const double *x, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += x[i];
    return s / n;
}

/* Chunk k of an item into the chunk statistics, unless counted since the
 * last score. */
static void tune_chunk(fr_tuner *t, const fr_chunk *k) {
    /* Most often the newest chunk counted (an item's first chunk is usually
     * the last one of the item before). */
    int known = t->n_chunks > 0 && t->chunk_key[t->n_chunks - 1] == k->key;
    for (int i = 0; i < t->n_chunks - 1 && !known; i++) known = t->chunk_key[i] == k->key;
    if (known) return;
    if (t->n_chunks == FR_TUNE_CHUNKS)
        memmove(t->chunk_key, t->chunk_key + 1, (FR_TUNE_CHUNKS - 1) * sizeof *t->chunk_key);
    int slot = t->n_chunks < FR_TUNE_CHUNKS ? t->n_chunks : FR_TUNE_CHUNKS - 1;
    t->chunk_key[slot] = k->key;
    push_stat(t->chunk_len, t->chunk_bps, &t->n_chunks, FR_TUNE_CHUNKS, k->n_rows,
              chunk_bytes(k) / k->n_rows);
}

static void tune_item(fr_column *c, double rows, int distinct, double bytes,
                      int32_t n_refs);

/* Whether items of column c feed its tuner: never when num_keep_alive_refs
 * is 1 (the length can only be 1; the statistics cost ~5% of a writer
 * making one item a step), nor for an item in a chunk of a batch (longer
 * than the tuner's range, fr_column_set_batch). */
static int tunes(const fr_column *c, const fr_chunk *first) {
    return c->opt.autotune && c->opt.num_keep_alive_refs > 1 &&
           first->n_rows <= c->opt.num_keep_alive_refs;
}

void fr_column_on_item(fr_column *c, fr_chunk *const *chunks, int32_t n_chunks,
                       int32_t n_refs) {
    if (n_chunks <= 0 || !tunes(c, chunks[0])) return;
    double rows = 0.0, bytes = 0.0;
    int distinct = 0;
    for (int32_t i = 0; i < n_chunks; i++) {
        /* Rows of one chunk come in a run: most repeats are the previous. */
        int seen = i > 0 && chunks[i - 1] == chunks[i];
        for (int32_t j = 0; j < i - 1 && !seen; j++) seen = chunks[j] == chunks[i];
        if (seen) continue;
        distinct++;
        rows += chunks[i]->n_rows;
        bytes += chunk_bytes(chunks[i]);
        tune_chunk(&c->tuner, chunks[i]);
    }
    tune_item(c, rows, distinct, bytes, n_refs);
}

void fr_column_on_item_slices(fr_column *c, const fr_slice *slices, int32_t n_slices,
                              int32_t n_refs) {
    if (n_slices <= 0 || !tunes(c, slices[0].chunk)) return;
    double rows = 0.0, bytes = 0.0;
    for (int32_t i = 0; i < n_slices; i++) {
        rows += slices[i].chunk->n_rows;
        bytes += chunk_bytes(slices[i].chunk);
        tune_chunk(&c->tuner, slices[i].chunk);
    }
    tune_item(c, rows, n_slices, bytes, n_refs);
}

/* The item's statistics (its `distinct` chunks held `rows` rows and `bytes`
 * bytes), then a new chunk length once enough items and chunks are in. */
static void tune_item(fr_column *c, double rows, int distinct, double bytes,
                      int32_t n_refs) {
    fr_tuner *t = &c->tuner;
    push_stat(t->item_len, t->item_bps, &t->n_items, FR_TUNE_ITEMS,
              rows / distinct, bytes / n_refs);
    if (t->n_items < FR_TUNE_ITEMS || t->n_chunks < FR_TUNE_CHUNKS) return;

    double avg_len = (mean(t->item_len, FR_TUNE_ITEMS) * FR_TUNE_ITEMS +
                      mean(t->chunk_len, FR_TUNE_CHUNKS) * FR_TUNE_CHUNKS) /
                     (FR_TUNE_ITEMS + FR_TUNE_CHUNKS);
    double cost = mean(t->chunk_bps, FR_TUNE_CHUNKS) +
                  c->opt.throughput_weight * mean(t->item_bps, FR_TUNE_ITEMS);
    t->n_items = t->n_chunks = 0;
    int32_t limit = c->opt.num_keep_alive_refs;
    if (t->prev_len < 0) {
        t->prev_len = avg_len;
        t->prev_cost = cost;
        c->max_len = c->max_len + 2 < limit ? c->max_len + 2 : limit;
        return;
    }
    if (fabs(avg_len - c->max_len) > 0.25) return; /* not settled yet */
    int step_up = (cost < t->prev_cost) == (avg_len > t->prev_len);
    int32_t next = c->max_len + (step_up ? 2 : -1);
    if (next < 1) next = 1;
    if (next > limit) next = limit;
    if (next != c->max_len) {
        t->prev_len = avg_len;
        t->prev_cost = cost;
        c->max_len = next;
    }
}
