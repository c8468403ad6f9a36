#include "rows.h"

#include "column.h"

#include <stdlib.h>

int fr_insert_rows(fr_table *t, fr_store *store, int32_t n_cols,
                   const fr_spec *specs, const void *const *cols,
                   int64_t n_rows,
                   const uint64_t *keys, const double *priorities,
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
    int rc = FR_ENOMEM;
    fr_chunk **chunks = calloc((size_t)n_cols, sizeof *chunks);
    const fr_spec **ispecs = calloc((size_t)n_cols, sizeof *ispecs);
    uint64_t *trajs = calloc((size_t)n_rows, sizeof *trajs);
    if (!chunks || !ispecs || !trajs) goto out;
    for (int32_t c = 0; c < n_cols; c++) {
        if (!(ispecs[c] = fr_spec_intern(&specs[c]))) goto out;
        chunks[c] = fr_chunk_new(store, chunk_key + (uint64_t)c, 0, specs[c].row_bytes);
        if (!chunks[c] ||
            fr_chunk_finalize(chunks[c], cols[c], (int32_t)n_rows, 0, n_rows - 1,
                              fr_should_compress(&specs[c])) != FR_OK)
            goto out;
    }
    for (int64_t r = 0; r < n_rows; r++) {
        fr_trajectory *tr = fr_trajectory_new(n_cols, n_cols);
        if (!tr) goto out;
        for (int32_t c = 0; c < n_cols; c++) {
            tr->columns[c].spec = ispecs[c];
            tr->columns[c].squeeze = 1;
            fr_trajectory_push_row(tr, c, chunks[c], (int32_t)r);
        }
        trajs[r] = (uint64_t)(uintptr_t)tr;
    }
    rc = fr_table_insert_many(t, n_rows, keys, priorities, trajs, timeout_ns,
                              n_done, bad_index);
out:
    /* Items not inserted (failure, timeout) still own their trajectory. */
    if (trajs)
        for (int64_t r = *n_done; r < n_rows; r++)
            fr_trajectory_payload_release(NULL, trajs[r]);
    if (chunks)
        for (int32_t c = 0; c < n_cols; c++)
            if (chunks[c]) fr_chunk_release(chunks[c]);
    free(chunks);
    free(ispecs);
    free(trajs);
    return rc;
}
