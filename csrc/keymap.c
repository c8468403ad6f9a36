#include "keymap.h"

#include "mem.h"

#include <stdlib.h>
#include <string.h>

#define FR_KEYMAP_MIN_BUCKETS 64

static void mark_empty(fr_keymap_slot *b, size_t n) {
    for (size_t i = 0; i < n; i++) b[i].val = -1;
}

static int alloc_buckets(fr_keymap *m, size_t n) {
    fr_keymap_slot *b = fr_alloc_large(n * sizeof *b);
    if (!b) return FR_ENOMEM;
    mark_empty(b, n);
    m->b = b;
    m->mask = n - 1;
    m->shift = 64 - ((unsigned)__builtin_ctzll((unsigned long long)n) - FR_KEYMAP_RUN_BITS);
    return FR_OK;
}

int fr_keymap_init(fr_keymap *m) {
    m->size = 0;
    return alloc_buckets(m, FR_KEYMAP_MIN_BUCKETS);
}

void fr_keymap_free(fr_keymap *m) {
    if (m->b) fr_free_large(m->b, (m->mask + 1) * sizeof *m->b);
    m->b = NULL;
    m->size = 0;
}

void fr_keymap_clear(fr_keymap *m) {
    mark_empty(m->b, m->mask + 1);
    m->size = 0;
}

static void raw_put(fr_keymap *m, uint64_t key, int32_t val) {
    size_t i = fr_keymap_bucket(m, key);
    while (m->b[i].val >= 0) i = (i + 1) & m->mask;
    m->b[i].key = key;
    m->b[i].val = val;
}

static int grow(fr_keymap *m) {
    fr_keymap old = *m;
    int rc = alloc_buckets(m, (old.mask + 1) * 2);
    if (rc != FR_OK) {
        *m = old;
        return rc;
    }
    for (size_t i = 0; i <= old.mask; i++)
        if (old.b[i].val >= 0) raw_put(m, old.b[i].key, (int32_t)old.b[i].val);
    fr_free_large(old.b, (old.mask + 1) * sizeof *old.b);
    return FR_OK;
}

int fr_keymap_put(fr_keymap *m, uint64_t key, int32_t val) {
    if (8 * (m->size + 1) > 3 * (m->mask + 1)) { /* load above 3/8 */
        int rc = grow(m);
        if (rc != FR_OK) return rc;
    }
    raw_put(m, key, val);
    m->size++;
    return FR_OK;
}

void fr_keymap_set(fr_keymap *m, uint64_t key, int32_t val) {
    size_t i = fr_keymap_bucket(m, key);
    while (m->b[i].val >= 0) {
        if (m->b[i].key == key) {
            m->b[i].val = val;
            return;
        }
        i = (i + 1) & m->mask;
    }
}

int32_t fr_keymap_del(fr_keymap *m, uint64_t key) {
    size_t i = fr_keymap_bucket(m, key);
    while (m->b[i].val >= 0 && m->b[i].key != key) i = (i + 1) & m->mask;
    int32_t found = (int32_t)m->b[i].val;
    if (found < 0) return -1;
    /* Backward-shift: pull later members of the probe run into the hole so
     * lookups never need tombstones. */
    size_t hole = i;
    for (;;) {
        i = (i + 1) & m->mask;
        if (m->b[i].val < 0) break;
        size_t home = fr_keymap_bucket(m, m->b[i].key);
        /* Move entry i into the hole unless its home lies cyclically in
         * (hole, i]. */
        int in_range = hole <= i ? (hole < home && home <= i)
                                 : (hole < home || home <= i);
        if (!in_range) {
            m->b[hole] = m->b[i];
            hole = i;
        }
    }
    m->b[hole].val = -1;
    m->size--;
    return found;
}
