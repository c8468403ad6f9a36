#include "chunk.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static fr_lz4_compress_fn lz4_compress;
static fr_lz4_decompress_fn lz4_decompress;
static fr_lz4_bound_fn lz4_bound;
static fr_lz4_partial_fn lz4_partial;

void fr_codec_install(fr_lz4_compress_fn compress,
                      fr_lz4_decompress_fn decompress, fr_lz4_bound_fn bound) {
    if (compress && decompress && bound) {
        lz4_compress = compress;
        lz4_decompress = decompress;
        lz4_bound = bound;
    } else {
        lz4_compress = NULL;
        lz4_decompress = NULL;
        lz4_bound = NULL;
    }
}

int fr_codec_available(void) { return lz4_compress != NULL; }

void fr_codec_install_partial(fr_lz4_partial_fn partial) { lz4_partial = partial; }

fr_store *fr_store_new(void) {
    fr_store *s = calloc(1, sizeof *s);
    if (s) atomic_init(&s->refs, 1);
    return s;
}

void fr_store_retain(fr_store *s) {
    atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}

void fr_store_release(fr_store *s) {
    if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1)
        free(s);
}

void fr_store_stats(fr_store *s, int64_t out[3]) {
    out[0] = atomic_load(&s->live_chunks);
    out[1] = atomic_load(&s->stored_bytes);
    out[2] = atomic_load(&s->raw_bytes);
}

fr_chunk *fr_chunk_new(fr_store *store, uint64_t key, uint64_t episode_id,
                       int64_t row_bytes) {
    return fr_chunk_new_inline(store, key, episode_id, row_bytes, 0);
}

fr_chunk *fr_chunk_new_inline(fr_store *store, uint64_t key, uint64_t episode_id,
                              int64_t row_bytes, int64_t inline_cap) {
    /* malloc and a fixed-size clear rather than calloc: the writer step is
     * instruction-cache bound and already runs malloc (calloc is another
     * ~11 L1i misses per step under cachegrind). */
    fr_chunk *c = malloc(sizeof *c + (size_t)inline_cap);
    if (!c) return NULL;
    memset(c, 0, sizeof *c);
    c->inline_cap = inline_cap;
    atomic_init(&c->refs, 1);
    atomic_init(&c->ready, 0);
    c->store = store;
    fr_store_retain(store);
    c->key = key;
    c->episode_id = episode_id;
    c->row_bytes = row_bytes;
    return c;
}

/* Offsets table of a variable-length chunk's data, and its size. */
static const int64_t *var_offsets(const fr_chunk *c) {
    return (const int64_t *)(const void *)c->data;
}
static int64_t var_header(int32_t n_rows) {
    return (int64_t)sizeof(int64_t) * ((int64_t)n_rows + 1);
}

/* Bytes the rows of a ready chunk take raw (the stores' raw_bytes). */
static int64_t raw_bytes(const fr_chunk *c) {
    if (c->row_bytes != FR_VAR_ROWS) return (int64_t)c->n_rows * c->row_bytes;
    return var_header(c->n_rows) + var_offsets(c)[c->n_rows];
}

/* The room after the struct, or NULL when it has none. */
static unsigned char *inline_data(fr_chunk *c) {
    return c->inline_cap > 0 ? (unsigned char *)(c + 1) : NULL;
}

void fr_chunk_release(fr_chunk *c) {
    if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (atomic_load_explicit(&c->ready, memory_order_acquire)) {
        atomic_fetch_sub(&c->store->live_chunks, 1);
        atomic_fetch_sub(&c->store->stored_bytes, c->stored_bytes);
        atomic_fetch_sub(&c->store->raw_bytes, raw_bytes(c));
    }
    fr_store_release(c->store);
    if (c->data != inline_data(c)) free(c->data);
    free(c);
}

/* LZ4 block of `raw` into a fresh buffer, or NULL when it does not save at
 * least 1/8 of the bytes (then the raw rows are kept).  LZ4 writes into a
 * per-thread scratch buffer kept across calls and the result is copied into
 * a block of its exact size: allocating the worst-case bound per chunk and
 * shrinking it made the allocator return and re-fault those pages for every
 * chunk (page faults, which writer threads contend on in one process). */
typedef struct scratch_buf {
    unsigned char *data;
    int cap;
} scratch_buf;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *p) {
    free(((scratch_buf *)p)->data);
    free(p);
}

static void scratch_init(void) { pthread_key_create(&scratch_key, scratch_free); }

/* This thread's scratch of at least `cap` bytes (freed when it exits). */
static unsigned char *scratch_get(int cap) {
    pthread_once(&scratch_once, scratch_init);
    scratch_buf *s = pthread_getspecific(scratch_key);
    if (!s) {
        if (!(s = calloc(1, sizeof *s))) return NULL;
        if (pthread_setspecific(scratch_key, s) != 0) {
            free(s);
            return NULL;
        }
    }
    if (cap > s->cap) {
        unsigned char *buf = realloc(s->data, (size_t)cap);
        if (!buf) return NULL;
        s->data = buf;
        s->cap = cap;
    }
    return s->data;
}

static unsigned char *try_compress(const void *raw, int64_t n, int64_t *out_n) {
    if (!lz4_compress || n <= 0 || n > 0x7E000000) return NULL;
    int cap = lz4_bound((int)n);
    unsigned char *scratch = scratch_get(cap);
    if (!scratch) return NULL;
    int got = lz4_compress(raw, (char *)scratch, (int)n, cap);
    if (got <= 0 || got > n - n / 8) return NULL;
    unsigned char *out = malloc((size_t)got);
    if (!out) return NULL;
    memcpy(out, scratch, (size_t)got);
    *out_n = got;
    return out;
}

/* Publish finalized data: accounting, then ready (release order). */
static void publish(fr_chunk *c, unsigned char *data, int32_t n_rows,
                    int64_t stored, int64_t first_step, int64_t last_step) {
    c->data = data;
    c->n_rows = n_rows;
    c->stored_bytes = stored;
    c->first_step = first_step;
    c->last_step = last_step;
    atomic_fetch_add(&c->store->live_chunks, 1);
    atomic_fetch_add(&c->store->stored_bytes, stored);
    atomic_fetch_add(&c->store->raw_bytes, raw_bytes(c));
    atomic_store_explicit(&c->ready, 1, memory_order_release);
}

int fr_chunk_finalize(fr_chunk *c, const void *rows, int32_t n_rows,
                      int64_t first_step, int64_t last_step, int compress) {
    int64_t raw_n = (int64_t)n_rows * c->row_bytes;
    int64_t stored = raw_n;
    unsigned char *data = compress ? try_compress(rows, raw_n, &stored) : NULL;
    c->compressed = data != NULL;
    if (!data) {
        data = raw_n > 0 && raw_n <= c->inline_cap ? inline_data(c)
                                      : malloc(raw_n > 0 ? (size_t)raw_n : 1);
        if (!data) return FR_ENOMEM;
        memcpy(data, rows, (size_t)raw_n);
        stored = raw_n;
    }
    publish(c, data, n_rows, stored, first_step, last_step);
    return FR_OK;
}

/* An LZ4 length of 15 continues in bytes of 255 up to one below 255: add
 * them to *len, reading from src[*i]; -1 if the block ends first. */
static int extend_length(const unsigned char *src, int64_t n, int64_t *i,
                         int64_t *len) {
    unsigned b;
    do {
        if (*i >= n) return -1;
        b = src[(*i)++];
        *len += b;
    } while (b == 255);
    return 0;
}

int64_t fr_lz4_block_size(const unsigned char *src, int64_t n) {
    int64_t i = 0, out = 0;
    while (i < n) {
        unsigned token = src[i++];
        int64_t lit = token >> 4;
        if (lit == 15 && extend_length(src, n, &i, &lit) != 0) return -1;
        if (lit > n - i) return -1;
        i += lit;
        out += lit;
        if (i == n) return out; /* the last sequence has literals only */
        if (n - i < 2) return -1;
        int64_t offset = src[i] | ((int64_t)src[i + 1] << 8);
        i += 2;
        if (offset == 0 || offset > out) return -1;
        int64_t match = token & 15;
        if (match == 15 && extend_length(src, n, &i, &match) != 0) return -1;
        out += match + 4;
    }
    return -1; /* empty block, or one ending in a match */
}

int fr_chunk_finalize_var(fr_chunk *c, const int64_t *offsets, const void *payload,
                          int32_t n_rows, int64_t first_step, int64_t last_step,
                          int compress) {
    int64_t head = var_header(n_rows), raw_n = offsets[n_rows], packed = raw_n;
    unsigned char *z = compress && raw_n >= 256 ? try_compress(payload, raw_n, &packed)
                                                : NULL;
    unsigned char *data = malloc((size_t)(head + packed));
    if (!data) {
        free(z);
        return FR_ENOMEM;
    }
    memcpy(data, offsets, (size_t)head);
    if (packed > 0) /* an all-empty payload may be NULL */
        memcpy(data + head, z ? (const void *)z : payload, (size_t)packed);
    c->compressed = z != NULL;
    free(z);
    publish(c, data, n_rows, head + packed, first_step, last_step);
    return FR_OK;
}

/* Whether `data` (stored bytes) is a consistent variable-length chunk of
 * n_rows rows: a rising offsets table from 0 and a payload of its last
 * offset's size, raw or as a well-formed LZ4 block decoding to that size. */
static int var_data_ok(const unsigned char *data, int64_t stored, int32_t n_rows,
                       int compressed) {
    int64_t head = var_header(n_rows), prev = 0;
    if (n_rows < 1 || stored < head) return 0;
    for (int32_t r = 0; r <= n_rows; r++) {
        int64_t off;
        memcpy(&off, data + (int64_t)sizeof off * r, sizeof off);
        if (off < prev || (r == 0 && off != 0)) return 0;
        prev = off;
    }
    if (!compressed) return stored - head == prev;
    return prev <= 0x7E000000 &&
           fr_lz4_block_size(data + head, stored - head) == prev;
}

fr_chunk *fr_chunk_restore(fr_store *store, uint64_t key, uint64_t episode_id,
                           int64_t first_step, int64_t last_step,
                           int64_t row_bytes, int32_t n_rows, int compressed,
                           const void *data, int64_t stored_bytes) {
    if (row_bytes == FR_VAR_ROWS) {
        if (stored_bytes < 0 || !var_data_ok(data, stored_bytes, n_rows, compressed) ||
            (compressed && !lz4_decompress))
            return NULL;
    } else {
        if (row_bytes < 0 || n_rows < 0 || stored_bytes < 0 ||
            (row_bytes > 0 && n_rows > INT64_MAX / row_bytes))
            return NULL;
        int64_t raw_n = (int64_t)n_rows * row_bytes;
        if (!compressed && stored_bytes != raw_n) return NULL;
        if (compressed && (!lz4_decompress || raw_n > 0x7E000000 ||
                           fr_lz4_block_size(data, stored_bytes) != raw_n))
            return NULL;
    }
    fr_chunk *c = fr_chunk_new(store, key, episode_id, row_bytes);
    if (!c) return NULL;
    c->data = malloc(stored_bytes > 0 ? (size_t)stored_bytes : 1);
    if (!c->data) {
        fr_chunk_release(c);
        return NULL;
    }
    memcpy(c->data, data, (size_t)stored_bytes);
    c->compressed = compressed != 0;
    publish(c, c->data, n_rows, stored_bytes, first_step, last_step);
    return c;
}

const unsigned char *fr_chunk_rows(const fr_chunk *c, void *scratch) {
    int32_t decoded;
    return fr_chunk_rows_upto(c, scratch, c->n_rows, &decoded);
}

int64_t fr_chunk_var_scratch_bytes(const fr_chunk *c) {
    if (c->row_bytes != FR_VAR_ROWS) return -1;
    return c->compressed ? var_offsets(c)[c->n_rows] : 0;
}

int fr_chunk_var_data(const fr_chunk *c, void *scratch, const int64_t **offsets,
                      const unsigned char **payload) {
    if (c->row_bytes != FR_VAR_ROWS) return FR_ECORRUPT;
    int64_t head = var_header(c->n_rows), raw_n = var_offsets(c)[c->n_rows];
    *offsets = var_offsets(c);
    *payload = c->data + head;
    if (!c->compressed) return FR_OK;
    int got = lz4_decompress ? lz4_decompress((const char *)c->data + head, scratch,
                                              (int)(c->stored_bytes - head), (int)raw_n)
                             : -1;
    *payload = scratch;
    return got == raw_n ? FR_OK : FR_ECORRUPT;
}

const unsigned char *fr_chunk_rows_upto(const fr_chunk *c, void *scratch,
                                        int32_t rows, int32_t *decoded) {
    *decoded = c->n_rows;
    if (c->row_bytes == FR_VAR_ROWS) return NULL; /* fr_chunk_var_data */
    if (!c->compressed) return c->data;
    int64_t raw_n = (int64_t)c->n_rows * c->row_bytes;
    int64_t want = (int64_t)(rows < c->n_rows ? rows : c->n_rows) * c->row_bytes;
    if (lz4_partial && want < raw_n) {
        int got = lz4_partial((const char *)c->data, scratch, (int)c->stored_bytes,
                              (int)want, (int)raw_n);
        if (got < want || got > raw_n) return NULL;
        *decoded = (int32_t)(got / c->row_bytes);
        return scratch;
    }
    int got = lz4_decompress ? lz4_decompress((const char *)c->data, scratch,
                                              (int)c->stored_bytes, (int)raw_n)
                             : -1;
    return got == raw_n ? scratch : NULL;
}

int fr_chunk_read(const fr_chunk *c, int32_t offset, int32_t length, void *dst,
                  void *scratch) {
    int32_t decoded;
    const unsigned char *rows = fr_chunk_rows_upto(c, scratch, offset + length, &decoded);
    if (!rows) return FR_ECORRUPT;
    memcpy(dst, rows + (int64_t)offset * c->row_bytes,
           (size_t)((int64_t)length * c->row_bytes));
    return FR_OK;
}
