#include "frames.h"

#include <stdlib.h>
#include <string.h>

#include "rows.h"

/* A row of a frame: the chunk (retained by whoever holds the ref) and row. */
typedef struct frame_ref {
    fr_chunk *chunk;
    int32_t row;
} frame_ref;

struct fr_frames {
    fr_spec value;        /* the values offered */
    const fr_spec *frame; /* interned */
    int32_t k, itemsize, stacked, compression, have;
    int64_t n_elems;            /* elements of one frame */
    unsigned char *last, *next; /* planar values: k frames each */
    frame_ref *refs, *new_refs; /* the last value's rows (retained) */
    /* The chunk being filled during an insert (finalized at its end). */
    fr_chunk *open;
    unsigned char *buf;
    int32_t n_open, cap_open, len_open;
};

fr_frames *fr_frames_new(const fr_spec *value, int stacked, int32_t compression) {
    if (fr_spec_is_var(value) || value->itemsize <= 0) return NULL;
    if (stacked && (value->ndim < 1 || value->shape[value->ndim - 1] < 1)) return NULL;
    fr_spec frame = *value;
    int32_t k = 1;
    if (stacked) {
        k = (int32_t)value->shape[value->ndim - 1];
        frame.ndim--;
        frame.shape[frame.ndim] = 0;
        frame.row_bytes = value->row_bytes / k;
    }
    if (frame.row_bytes <= 0) return NULL;
    fr_frames *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->value = *value;
    f->frame = fr_spec_intern(&frame);
    f->k = k;
    f->itemsize = value->itemsize;
    f->stacked = stacked != 0;
    f->compression = compression;
    f->n_elems = frame.row_bytes / value->itemsize;
    f->last = malloc((size_t)value->row_bytes);
    f->next = malloc((size_t)value->row_bytes);
    f->refs = calloc((size_t)k, sizeof *f->refs);
    f->new_refs = calloc((size_t)k, sizeof *f->new_refs);
    if (!f->frame || !f->last || !f->next || !f->refs || !f->new_refs) {
        fr_frames_free(f);
        return NULL;
    }
    return f;
}

void fr_frames_reset(fr_frames *f) {
    if (f->have)
        for (int32_t j = 0; j < f->k; j++) fr_chunk_release(f->refs[j].chunk);
    f->have = 0;
}

void fr_frames_free(fr_frames *f) {
    if (!f) return;
    fr_frames_reset(f);
    if (f->open) fr_chunk_release(f->open); /* never published: not counted */
    free(f->last);
    free(f->next);
    free(f->refs);
    free(f->new_refs);
    free(f->buf);
    free(f);
}

int32_t fr_frames_k(const fr_frames *f) { return f->k; }
const fr_spec *fr_frames_frame_spec(const fr_frames *f) { return f->frame; }

void fr_frames_interleave(unsigned char *dst, const unsigned char *const *planes,
                          int32_t k, int64_t n, int32_t itemsize) {
    if (k == 4 && itemsize == 1) { /* Atari frame stacks: vectorized */
        const unsigned char *a = planes[0], *b = planes[1], *c = planes[2],
                            *d = planes[3];
        for (int64_t i = 0; i < n; i++) {
            dst[4 * i] = a[i];
            dst[4 * i + 1] = b[i];
            dst[4 * i + 2] = c[i];
            dst[4 * i + 3] = d[i];
        }
        return;
    }
    for (int32_t j = 0; j < k; j++) {
        const unsigned char *p = planes[j];
        unsigned char *o = dst + (size_t)j * itemsize;
        size_t step = (size_t)k * itemsize;
        switch (itemsize) {
        case 1: for (int64_t i = 0; i < n; i++) o[i * step] = p[i]; break;
        case 4:
            for (int64_t i = 0; i < n; i++) memcpy(o + i * step, p + 4 * i, 4);
            break;
        default:
            for (int64_t i = 0; i < n; i++)
                memcpy(o + i * step, p + i * itemsize, (size_t)itemsize);
        }
    }
}

void fr_frames_deinterleave(unsigned char *planes, const unsigned char *src,
                            int32_t k, int64_t n, int32_t itemsize) {
    size_t plane = (size_t)n * itemsize, step = (size_t)k * itemsize;
    if (k == 4 && itemsize == 1) {
        unsigned char *a = planes, *b = a + n, *c = b + n, *d = c + n;
        for (int64_t i = 0; i < n; i++) {
            a[i] = src[4 * i];
            b[i] = src[4 * i + 1];
            c[i] = src[4 * i + 2];
            d[i] = src[4 * i + 3];
        }
        return;
    }
    for (int32_t j = 0; j < k; j++) {
        unsigned char *p = planes + j * plane;
        const unsigned char *s = src + (size_t)j * itemsize;
        for (int64_t i = 0; i < n; i++)
            memcpy(p + i * itemsize, s + i * step, (size_t)itemsize);
    }
}

/* Publish the open chunk (its rows so far) and drop the stream's reference
 * to it: items and the stream's refs keep it alive. */
static int finish_open(fr_frames *f) {
    if (!f->open) return FR_OK;
    int rc = fr_chunk_finalize(f->open, f->buf, f->n_open, 0, f->n_open - 1,
                               fr_compress_choice(f->frame, f->compression));
    /* On failure the refs to the unready chunk are forgotten; items that
     * refer to it are never inserted, and its last holder frees it. */
    if (rc != FR_OK) fr_frames_reset(f);
    fr_chunk_release(f->open);
    f->open = NULL;
    return rc;
}

/* Store one frame in the open chunk (starting one of len_open rows when
 * there is none or it is full); *ref gets its row, retained. */
static int store_frame(fr_frames *f, fr_store *store, const unsigned char *frame,
                       uint64_t *next_key, frame_ref *ref) {
    int64_t F = f->frame->row_bytes;
    if (f->open && f->n_open == f->len_open) {
        int rc = finish_open(f);
        if (rc != FR_OK) return rc;
    }
    if (!f->open) {
        if (!(f->open = fr_chunk_new(store, (*next_key)++, 0, F))) return FR_ENOMEM;
        f->n_open = 0;
    }
    if (f->n_open == f->cap_open) {
        int32_t cap = f->cap_open ? 2 * f->cap_open : 8;
        if (cap > f->len_open) cap = f->len_open;
        unsigned char *buf = realloc(f->buf, (size_t)cap * (size_t)F);
        if (!buf) return FR_ENOMEM;
        f->buf = buf;
        f->cap_open = cap;
    }
    memcpy(f->buf + (size_t)f->n_open * (size_t)F, frame, (size_t)F);
    fr_chunk_retain(f->open);
    *ref = (frame_ref){f->open, f->n_open++};
    return FR_OK;
}

/* Offer one value: afterwards f->refs are the rows of its k frames. */
static int offer(fr_frames *f, fr_store *store, const unsigned char *value,
                 uint64_t *next_key) {
    int32_t k = f->k, j, first_new = 0, shift = 0;
    size_t F = (size_t)f->frame->row_bytes;
    if (k > 1)
        fr_frames_deinterleave(f->next, value, k, f->n_elems, f->itemsize);
    else
        memcpy(f->next, value, F);
    if (f->have && memcmp(f->next, f->last, (size_t)k * F) == 0)
        first_new = k; /* the same value: the same rows */
    else if (f->have && k > 1 && memcmp(f->next, f->last + F, (size_t)(k - 1) * F) == 0)
        first_new = k - 1, shift = 1; /* slid by one frame */
    for (j = 0; j < first_new; j++) {
        f->new_refs[j] = f->refs[j + shift];
        fr_chunk_retain(f->new_refs[j].chunk);
    }
    int rc = FR_OK;
    for (; j < k; j++) {
        const unsigned char *frame = f->next + (size_t)j * F;
        if (j > 0 && memcmp(frame, frame - F, F) == 0) { /* a repeated frame */
            f->new_refs[j] = f->new_refs[j - 1];
            fr_chunk_retain(f->new_refs[j].chunk);
            continue;
        }
        if ((rc = store_frame(f, store, frame, next_key, &f->new_refs[j])) != FR_OK)
            break;
    }
    if (rc != FR_OK) { /* drop the partial value and forget the last one */
        while (j-- > 0) fr_chunk_release(f->new_refs[j].chunk);
        fr_frames_reset(f);
        return rc;
    }
    fr_frames_reset(f);
    frame_ref *r = f->refs;
    f->refs = f->new_refs;
    f->new_refs = r;
    unsigned char *v = f->last;
    f->last = f->next;
    f->next = v;
    f->have = 1;
    return FR_OK;
}

/* Rows of a frame chunk: the chunker's length, bounded for raw chunks. */
static int32_t frame_chunk_length(const fr_frames *f, const fr_chunker_options *opt,
                                  int64_t n_rows) {
    int64_t most = FR_FRAMES_RAW_CHUNK / f->frame->row_bytes;
    int64_t want = n_rows * f->k;
    if (want > most) want = most;
    return fr_rows_chunk_length(f->frame, opt, want < 1 ? 1 : want, f->compression);
}

int fr_insert_frame_rows(fr_table *t, fr_store *store, int32_t n_cols,
                         const fr_spec *specs, const void *const *cols,
                         fr_frames *const *streams, int64_t n_rows,
                         const uint64_t *keys, const double *priorities,
                         const fr_chunker_options *opt, const int32_t *compression,
                         uint64_t chunk_key, int64_t timeout_ns, int64_t *n_done,
                         int64_t *bad_index) {
    *n_done = 0;
    *bad_index = -1;
    for (int64_t r = 0; r < n_rows; r++) {
        int rc = fr_table_check_priority(t, priorities[r]);
        if (rc != FR_OK) {
            *bad_index = r;
            return rc;
        }
    }
    if (n_rows <= 0 || n_rows > INT32_MAX) return n_rows == 0 ? FR_OK : FR_EINVAL;
    if (n_cols < 0) return FR_EINVAL;
    for (int32_t c = 0; c < n_cols; c++)
        if (streams[c] && !fr_spec_equal(&specs[c], &streams[c]->value))
            return FR_ESHAPE;
    int rc = FR_ENOMEM;
    int32_t max_slices = 0;
    fr_chunk **chunks = calloc((size_t)n_cols, sizeof *chunks); /* current plain */
    int32_t *lens = calloc((size_t)n_cols, sizeof *lens);
    const fr_spec **ispecs = calloc((size_t)n_cols, sizeof *ispecs);
    uint64_t *trajs = calloc((size_t)n_rows, sizeof *trajs);
    if (!chunks || !lens || !ispecs || !trajs) goto out;
    for (int32_t c = 0; c < n_cols; c++) {
        fr_frames *f = streams[c];
        if (f) {
            ispecs[c] = f->frame;
            max_slices += f->k;
            f->len_open = frame_chunk_length(f, opt, n_rows);
            continue;
        }
        int32_t mode = compression ? compression[c] : FR_COMPRESSION_AUTO;
        lens[c] = fr_rows_chunk_length(&specs[c], opt, n_rows, mode);
        max_slices++;
        if (!(ispecs[c] = fr_spec_intern(&specs[c]))) goto out;
    }
    for (int64_t r = 0; r < n_rows; r++) {
        /* Offer the row's values to their streams first (in column order),
         * then fill the trajectory from the streams' refs. */
        fr_trajectory *tr = fr_trajectory_new(n_cols, max_slices);
        rc = FR_ENOMEM;
        if (!tr) goto out;
        trajs[r] = (uint64_t)(uintptr_t)tr;
        for (int32_t c = 0; c < n_cols; c++) {
            fr_frames *f = streams[c];
            tr->columns[c].spec = ispecs[c];
            if (!f) {
                if (r % lens[c] == 0) {
                    int32_t mode = compression ? compression[c] : FR_COMPRESSION_AUTO;
                    if (chunks[c]) fr_chunk_release(chunks[c]);
                    chunks[c] = fr_rows_make_chunk(
                        store, &specs[c], fr_compress_choice(&specs[c], mode), cols[c],
                        n_rows, r, lens[c], &chunk_key, &rc);
                    if (rc != FR_OK) goto out;
                }
                tr->columns[c].squeeze = 1;
                fr_trajectory_push_row(tr, c, chunks[c], (int32_t)(r % lens[c]));
                continue;
            }
            rc = offer(f, store,
                       (const unsigned char *)cols[c] + r * specs[c].row_bytes,
                       &chunk_key);
            if (rc != FR_OK) goto out;
            tr->columns[c].squeeze = f->stacked ? FR_ROWS_LAST_AXIS : 1;
            for (int32_t j = 0; j < f->k; j++)
                fr_trajectory_push_row(tr, c, f->refs[j].chunk, f->refs[j].row);
        }
    }
    for (int32_t c = 0; c < n_cols; c++)
        if (streams[c] && (rc = finish_open(streams[c])) != FR_OK) goto out;
    rc = fr_table_insert_many(t, n_rows, keys, priorities, trajs, timeout_ns, n_done,
                              bad_index);
out:
    for (int32_t c = 0; c < n_cols; c++)
        if (streams[c] && finish_open(streams[c]) != FR_OK && rc == FR_OK)
            rc = FR_ENOMEM;
    /* Items not inserted (failure, timeout) still own their trajectory. */
    if (trajs)
        for (int64_t r = *n_done; r < n_rows; r++)
            fr_trajectory_payload_release(NULL, trajs[r]);
    if (chunks)
        for (int32_t c = 0; c < n_cols; c++)
            if (chunks[c]) fr_chunk_release(chunks[c]);
    free(chunks);
    free(lens);
    free(ispecs);
    free(trajs);
    return rc;
}
