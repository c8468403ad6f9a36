#include "keymap.h"

#include <stdlib.h>
#include <string.h>

#define FR_KEYMAP_MIN_BUCKETS 64

static int alloc_buckets(fr_keymap *m, size_t n) {
    uint64_t *keys = malloc(n * sizeof *keys);
    int32_t *vals = malloc(n * sizeof *vals);
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return FR_ENOMEM;
    }
    memset(vals, 0xff, n * sizeof *vals); /* every bucket -1 */
    m->keys = keys;
    m->vals = vals;
    m->mask = n - 1;
    return FR_OK;
}

int fr_keymap_init(fr_keymap *m) {
    m->size = 0;
    return alloc_buckets(m, FR_KEYMAP_MIN_BUCKETS);
}

void fr_keymap_free(fr_keymap *m) {
    free(m->keys);
    free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    m->size = 0;
}

void fr_keymap_clear(fr_keymap *m) {
    memset(m->vals, 0xff, (m->mask + 1) * sizeof *m->vals);
    m->size = 0;
}

static void raw_put(fr_keymap *m, uint64_t key, int32_t val) {
    size_t i = fr_keymap_bucket(m, key);
    while (m->vals[i] >= 0) i = (i + 1) & m->mask;
    m->keys[i] = key;
    m->vals[i] = val;
}

static int grow(fr_keymap *m) {
    fr_keymap old = *m;
    int rc = alloc_buckets(m, (old.mask + 1) * 2);
    if (rc != FR_OK) {
        *m = old;
        return rc;
    }
    for (size_t i = 0; i <= old.mask; i++)
        if (old.vals[i] >= 0) raw_put(m, old.keys[i], old.vals[i]);
    free(old.keys);
    free(old.vals);
    return FR_OK;
}

int fr_keymap_put(fr_keymap *m, uint64_t key, int32_t val) {
    if (2 * (m->size + 1) > m->mask + 1) {
        int rc = grow(m);
        if (rc != FR_OK) return rc;
    }
    raw_put(m, key, val);
    m->size++;
    return FR_OK;
}

void fr_keymap_set(fr_keymap *m, uint64_t key, int32_t val) {
    size_t i = fr_keymap_bucket(m, key);
    while (m->vals[i] >= 0) {
        if (m->keys[i] == key) {
            m->vals[i] = val;
            return;
        }
        i = (i + 1) & m->mask;
    }
}

int32_t fr_keymap_del(fr_keymap *m, uint64_t key) {
    size_t i = fr_keymap_bucket(m, key);
    while (m->vals[i] >= 0 && m->keys[i] != key) i = (i + 1) & m->mask;
    int32_t found = m->vals[i];
    if (found < 0) return -1;
    /* Backward-shift: pull later members of the probe run into the hole so
     * lookups never need tombstones. */
    size_t hole = i;
    for (;;) {
        i = (i + 1) & m->mask;
        if (m->vals[i] < 0) break;
        size_t home = fr_keymap_bucket(m, m->keys[i]);
        /* Move entry i into the hole unless its home lies cyclically in
         * (hole, i]. */
        int in_range = hole <= i ? (hole < home && home <= i)
                                 : (hole < home || home <= i);
        if (!in_range) {
            m->keys[hole] = m->keys[i];
            m->vals[hole] = m->vals[i];
            hole = i;
        }
    }
    m->vals[hole] = -1;
    m->size--;
    return found;
}
