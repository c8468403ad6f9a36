/* Open-addressing hash map from 64-bit item keys to int32 slot ids.
 *
 * Linear probing with backward-shift deletion (no tombstones), load factor at
 * most 3/8 (16 bytes per bucket: 43-85 bytes per key).  Not thread-safe: the owning table serializes access.
 */
#ifndef FASTREPLAY_KEYMAP_H
#define FASTREPLAY_KEYMAP_H

#include "fr_common.h"

/* Key and value share a bucket so a probe touches one cache line. */
typedef struct fr_keymap_slot {
    uint64_t key;
    int64_t val; /* -1 marks an empty bucket */
} fr_keymap_slot;

typedef struct fr_keymap {
    fr_keymap_slot *b;
    size_t mask; /* number of buckets - 1 (a power of two minus one) */
    size_t size;
    unsigned shift; /* 64 - log2(buckets >> FR_KEYMAP_RUN_BITS) */
} fr_keymap;

/* Initialise an empty map.  Returns FR_OK or FR_ENOMEM. */
int fr_keymap_init(fr_keymap *m);
void fr_keymap_free(fr_keymap *m);
/* Remove every entry, keeping the allocation.  O(buckets). */
void fr_keymap_clear(fr_keymap *m);

/* Keys that differ only in their low FR_KEYMAP_RUN_BITS bits (runs of
 * consecutive keys, as ReplayBuffer hands out) share one 64-byte line of
 * buckets, so inserting or evicting a run of them misses the cache once
 * instead of once per key (those misses and long probe runs were the
 * largest cost of add_batch of small rows into a full table); the rest of
 * the key is mixed (Fibonacci hashing) so that runs land apart.  Random
 * keys are spread as before.  Simulated with a FIFO window of
 * consecutive keys: at load 0.35, 1.0 probe per insert and 3.5 per delete
 * (every bit mixed: 4.0 and 5.0); at load 0.46, 5.0 and 6.7 (5.0 and 6.0),
 * hence the lower maximum load.
 *
 * A run's line is the top bits of its hash (Fibonacci hashing proper), so
 * doubling the map sends old bucket i to new buckets near 2i: growth copies
 * in one streaming pass instead of one cache miss per key (a writer filling
 * a 1M-item table: share per step 1.05-1.11 -> 1.04-1.07 us, paired). */
#define FR_KEYMAP_RUN_BITS 2

FR_INLINE size_t fr_keymap_bucket(const fr_keymap *m, uint64_t key) {
    uint64_t run = (key >> FR_KEYMAP_RUN_BITS) * 0x9e3779b97f4a7c15ULL;
    return (size_t)(((run >> m->shift) << FR_KEYMAP_RUN_BITS) |
                    (key & ((1u << FR_KEYMAP_RUN_BITS) - 1)));
}

/* Slot id stored for key, or -1.  O(1) expected. */
FR_INLINE int32_t fr_keymap_get(const fr_keymap *m, uint64_t key) {
    size_t i = fr_keymap_bucket(m, key);
    while (m->b[i].val >= 0) {
        if (m->b[i].key == key) return (int32_t)m->b[i].val;
        i = (i + 1) & m->mask;
    }
    return -1;
}

/* Hint the cache lines a lookup of key will read first. */
FR_INLINE void fr_keymap_prefetch(const fr_keymap *m, uint64_t key) {
    __builtin_prefetch(&m->b[fr_keymap_bucket(m, key)]);
}

/* Insert key -> val; the key must be absent.  Returns FR_OK or FR_ENOMEM
 * (the map is unchanged on failure).  O(1) amortised. */
int fr_keymap_put(fr_keymap *m, uint64_t key, int32_t val);
/* Overwrite the value of a present key.  O(1) expected. */
void fr_keymap_set(fr_keymap *m, uint64_t key, int32_t val);
/* Remove key if present; returns its slot id or -1.  O(1) expected. */
int32_t fr_keymap_del(fr_keymap *m, uint64_t key);

#endif /* FASTREPLAY_KEYMAP_H */
