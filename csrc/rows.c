#include "rows.h"

#include "traj_bulk.h"

#include <stdlib.h>

int32_t fr_rows_chunk_length(const fr_spec *spec, const fr_chunker_options *opt,
                             int64_t n_rows, int32_t compression) {
    int64_t raw_rows = spec->row_bytes > 0 ? FR_ROWS_RAW_CHUNK_BYTES / spec->row_bytes
                                           : n_rows;
    int64_t len = fr_compress_choice(spec, compression) ? fr_chunker_start_length(opt)
                                                        : raw_rows;
    if (len > n_rows) len = n_rows;
    return len < 1 ? 1 : (int32_t)len;
}

fr_chunk *fr_rows_make_chunk(fr_store *store, const fr_spec *spec, int compress,
                             const void *rows, int64_t n_rows, int64_t r, int32_t len,
                             uint64_t *next_key, int *rc) {
    int32_t n = n_rows - r < len ? (int32_t)(n_rows - r) : len;
    fr_chunk *c = fr_chunk_new(store, (*next_key)++, 0, spec->row_bytes);
    *rc = FR_ENOMEM;
    if (!c) return NULL;
    *rc = fr_chunk_finalize(c, (const unsigned char *)rows + r * spec->row_bytes, n, r,
                            r + n - 1, compress);
    return c;
}

int fr_insert_rows(fr_table *t, fr_store *store, int32_t n_cols,
                   const fr_spec *specs, const void *const *cols,
                   int64_t n_rows,
                   const uint64_t *keys, const double *priorities,
                   const fr_chunker_options *opt, const int32_t *compression,
                   const fr_spec *const *interned, uint64_t chunk_key,
                   int64_t timeout_ns, int64_t *n_done, int64_t *bad_index) {
    *n_done = 0;
    *bad_index = -1;
    for (int64_t r = 0; r < n_rows; r++) {
        if (r > 0 && priorities[r] == priorities[r - 1]) continue; /* checked */
        int rc = fr_table_check_priority(t, priorities[r]);
        if (rc != FR_OK) {
            *bad_index = r;
            return rc;
        }
    }
    if (n_rows <= 0 || n_rows > INT32_MAX) return n_rows == 0 ? FR_OK : FR_EINVAL;
    int rc = FR_ENOMEM;
    int64_t built = 0; /* trajectories made */
    fr_traj_slab *slab = NULL; /* the trajectories of the last rows */
    int32_t slab_filled = 0;
    /* Per column: the chunk being filled, its first row, its length; and
     * the trajectories.  On the stack for small calls (ReplayBuffer.add). */
    enum { SMALL = 16 };
    fr_chunk *cur_s[SMALL] = {0};
    int64_t first_s[SMALL] = {0};
    int32_t lens_s[SMALL], offs_s[SMALL];
    const fr_spec *ispecs_s[SMALL];
    uint64_t trajs_s[SMALL];
    int small = n_cols <= SMALL, few = n_rows <= SMALL;
    fr_chunk **cur = small ? cur_s : calloc((size_t)n_cols, sizeof *cur);
    int64_t *first = small ? first_s : calloc((size_t)n_cols, sizeof *first);
    int32_t *lens = small ? lens_s : calloc((size_t)n_cols, sizeof *lens);
    int32_t *offs = small ? offs_s : calloc((size_t)n_cols, sizeof *offs);
    const fr_spec **ispecs = small ? ispecs_s : calloc((size_t)n_cols, sizeof *ispecs);
    uint64_t *trajs = few ? trajs_s : calloc((size_t)n_rows, sizeof *trajs);
    if (!cur || !first || !lens || !offs || !ispecs || !trajs) goto out;
    for (int32_t c = 0; c < n_cols; c++) {
        int32_t mode = compression ? compression[c] : FR_COMPRESSION_AUTO;
        lens[c] = fr_rows_chunk_length(&specs[c], opt, n_rows, mode);
        ispecs[c] = interned ? interned[c] : fr_spec_intern(&specs[c]);
        if (!ispecs[c]) goto out;
    }
    /* Row by row, each row's new chunks and then its trajectory, so that
     * what one sampled item reads lies together in memory as after `add`
     * (column by column, sample_batch of image rows was ~15% slower).  A
     * new chunk takes at once the references of all the rows it will hold
     * (fr_chunk_retain_n), not one per row; the rows up to the next chunk
     * or slab boundary get their trajectories in one fr_slab_fill. */
    for (int64_t r = 0; r < n_rows;) {
        int64_t end = n_rows;
        for (int32_t c = 0; c < n_cols; c++) {
            if (!cur[c] || r - first[c] == cur[c]->n_rows) {
                if (cur[c]) fr_chunk_release(cur[c]); /* its rows hold it */
                int32_t mode = compression ? compression[c] : FR_COMPRESSION_AUTO;
                cur[c] = fr_rows_make_chunk(store, &specs[c],
                                            fr_compress_choice(&specs[c], mode), cols[c],
                                            n_rows, r, lens[c], &chunk_key, &rc);
                if (rc != FR_OK) goto out;
                first[c] = r;
                fr_chunk_retain_n(cur[c], cur[c]->n_rows);
            }
            offs[c] = (int32_t)(r - first[c]);
            if (first[c] + cur[c]->n_rows < end) end = first[c] + cur[c]->n_rows;
        }
        rc = FR_ENOMEM;
        if (r % FR_SLAB_ROWS == 0) {
            int64_t left = n_rows - r;
            slab = fr_slab_new(n_cols, left < FR_SLAB_ROWS ? (int32_t)left : FR_SLAB_ROWS);
            if (!slab) goto out;
            slab_filled = 0;
        }
        if (end > r - r % FR_SLAB_ROWS + FR_SLAB_ROWS) end = r - r % FR_SLAB_ROWS + FR_SLAB_ROWS;
        fr_slab_fill(slab, slab_filled, (int32_t)(end - r), ispecs, cur, offs, trajs + r);
        slab_filled += (int32_t)(end - r);
        built = r = end;
    }
    rc = fr_table_insert_many(t, n_rows, keys, priorities, trajs, timeout_ns,
                              n_done, bad_index);
out:
    if (slab) /* after a failure part-way through it */
        fr_slab_abandon(slab, slab_filled);
    /* Items not inserted (failure, timeout) still own their trajectory. */
    if (trajs && built > *n_done)
        fr_trajectory_payload_release_many(NULL, trajs + *n_done, built - *n_done);
    if (cur)
        for (int32_t c = 0; c < n_cols; c++) {
            if (!cur[c]) continue;
            /* The references taken for rows left without a trajectory. */
            int64_t unbuilt = first[c] + cur[c]->n_rows - built;
            if (unbuilt > 0) fr_chunk_release_n(cur[c], unbuilt);
            fr_chunk_release(cur[c]);
        }
    if (!small) {
        free(cur);
        free(first);
        free(lens);
        free(offs);
        free(ispecs);
    }
    if (!few) free(trajs);
    return rc;
}
