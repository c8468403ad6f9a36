#include "gather.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

/* A batch goes to the pool only when its work may pay for waking workers.
 * Measured on this 2-core VM while other jobs kept it busy (load 2.4-3.5;
 * scratch script threshold.py: ReplayBuffer.sample(n) of uint8[84,84] rows,
 * pool at 1 vs 2 threads with every batch sent to the pool, paired medians
 * of 7 rounds), 2 threads / 1 thread time: LZ4 n=4 (28 KB decoded) 0.60,
 * n=32 (220 KB) 0.80, n=64 (441 KB) 0.91, n=128 (882 KB) 0.86, n=256
 * (1.7 MB) 0.85; raw n=128 1.00, n=256 0.99.  Waking a worker cost ~12 us
 * and, with the other core busy, the second thread rarely ran in parallel,
 * so the pool never won there.  With the other core free, a 256-image
 * batch (3.6 MB decoded) ran 1.46x faster on 2 threads (ReplayBuffer.sample,
 * 2294 -> 3353 batches/s, 9 rounds); LZ4 decode is most of it (perf: 62% of
 * both threads' samples).  Hence only large decodes
 * (>= 1 MiB, a batch of ~75 images) go to the pool, and raw copies, which
 * are bound by memory rather than by a core, only when they are very large
 * (>= 8 MiB, e.g. 256 length-5 items of stacked frames). */
#define POOL_MIN_DECODE_BYTES ((int64_t)1 << 20)
#define POOL_MIN_RAW_BYTES ((int64_t)8 << 20)
/* Shares per thread: claimed dynamically, so a thread that wakes late or is
 * descheduled leaves its shares to the others. */
#define SHARES_PER_THREAD 4
/* Slots of a cache: direct-mapped by chunk key. */
#define MAX_CACHE_SLOTS 256
#define PRIVATE_CACHE_SLOTS 16

typedef struct slot_cache {
    unsigned char *mem; /* fr_trajectories_gather's [keys][rows] layout */
    fr_chunk **held;    /* the chunk each key retains (NULL: none) */
    int64_t each;
    int32_t slots;
} slot_cache;

/* Slot i's cache belongs to whoever runs pool slot i (pool.h): no lock. */
static slot_cache caches[FR_POOL_MAX_THREADS];
static atomic_int_fast64_t held_total;
static atomic_int flags; /* fr_gather_set_flags */

static int32_t slots_for(int64_t most, int64_t budget, int32_t cap) {
    int64_t s = budget / most;
    return s < 1 ? 1 : s > cap ? cap : (int32_t)s;
}

static void cache_drop(slot_cache *sc) {
    for (int32_t h = 0; sc->held && h < sc->slots; h++)
        if (sc->held[h]) {
            fr_chunk_release(sc->held[h]);
            atomic_fetch_sub(&held_total, 1);
        }
    free(sc->mem);
    free(sc->held);
    memset(sc, 0, sizeof *sc);
}

/* Make sc hold chunks of up to `most` raw bytes; 0 when out of memory. */
static int cache_prepare(slot_cache *sc, int64_t most) {
    if (sc->mem && sc->each >= most && sc->each <= 4 * most) return 1;
    cache_drop(sc);
    int64_t each = (most + 63) / 64 * 64;
    int32_t slots = slots_for(each, FR_GATHER_CACHE_BUDGET, MAX_CACHE_SLOTS);
    sc->mem = malloc((size_t)slots * (sizeof(fr_gather_key) + (size_t)each));
    sc->held = calloc((size_t)slots, sizeof *sc->held);
    if (!sc->mem || !sc->held) {
        cache_drop(sc);
        return 0;
    }
    memset(sc->mem, 0, (size_t)slots * sizeof(fr_gather_key));
    sc->each = each;
    sc->slots = slots;
    return 1;
}

/* After a gather into sc: retain the chunks keys now name, release the ones
 * they replaced (the new ones are alive: the caller's items hold them). */
static void cache_sync(slot_cache *sc) {
    fr_gather_key *keys = (fr_gather_key *)sc->mem;
    for (int32_t h = 0; h < sc->slots; h++) {
        fr_chunk *k = (fr_chunk *)keys[h].chunk;
        if (k == sc->held[h]) continue;
        if (k) {
            fr_chunk_retain(k);
            atomic_fetch_add(&held_total, 1);
        }
        if (sc->held[h]) {
            fr_chunk_release(sc->held[h]);
            atomic_fetch_sub(&held_total, 1);
        }
        sc->held[h] = k;
    }
}

typedef struct share_ctx {
    const fr_gather_job *job;
    int shares;
    atomic_int rc;     /* first failure, FR_OK when none */
    atomic_int failed; /* its column */
} share_ctx;

static void fail(share_ctx *x, int rc, int32_t col) {
    int ok = FR_OK;
    if (atomic_compare_exchange_strong(&x->rc, &ok, rc)) atomic_store(&x->failed, col);
}

static void gather_share(void *arg, int share, int slot) {
    share_ctx *x = arg;
    const fr_gather_job *j = x->job;
    int64_t lo = j->n * share / x->shares, hi = j->n * (share + 1) / x->shares;
    if (lo >= hi || atomic_load_explicit(&x->rc, memory_order_relaxed) != FR_OK)
        return;
    slot_cache *sc = NULL;
    unsigned char *priv = NULL, *cache = NULL;
    int64_t each = 0;
    int32_t slots = 0;
    if (j->most > 0) { /* some chunk is compressed */
        if (slot >= 0 && cache_prepare(&caches[slot], j->most)) {
            sc = &caches[slot];
            cache = sc->mem;
            each = sc->each;
            slots = sc->slots;
        } else {
            each = j->most;
            slots = slots_for(each, 4 * FR_GATHER_CACHE_BUDGET, PRIVATE_CACHE_SLOTS);
            priv = malloc((size_t)slots * (sizeof(fr_gather_key) + (size_t)each));
            if (!priv) {
                fail(x, FR_ENOMEM, -1);
                return;
            }
            memset(priv, 0, (size_t)slots * sizeof(fr_gather_key));
            cache = priv;
        }
    }
    for (int32_t c = 0; c < j->n_cols; c++) {
        int64_t stride = j->strides[c];
        if (stride == 0) continue;
        int rc = fr_trajectories_gather(j->ts + lo, hi - lo, c,
                                        (unsigned char *)j->outs[c] + lo * stride,
                                        stride, cache, each, slots);
        if (rc != FR_OK) {
            fail(x, rc, c);
            break;
        }
    }
    if (sc) cache_sync(sc);
    free(priv);
}

int fr_gather_batch(const fr_gather_job *job, int32_t *failed) {
    *failed = -1;
    if (job->n <= 0) return FR_OK;
    int64_t bytes = 0;
    for (int32_t c = 0; c < job->n_cols; c++) bytes += job->strides[c];
    bytes *= job->n;
    int threads = fr_pool_threads();
    int64_t min = job->most > 0 ? POOL_MIN_DECODE_BYTES : POOL_MIN_RAW_BYTES;
    if (atomic_load_explicit(&flags, memory_order_relaxed) & FR_GATHER_ALWAYS_POOL)
        min = 0;
    int shares = 1;
    if (threads > 1 && bytes >= min)
        shares = job->n < threads * SHARES_PER_THREAD ? (int)job->n
                                                       : threads * SHARES_PER_THREAD;
    share_ctx x = {.job = job, .shares = shares};
    atomic_init(&x.rc, FR_OK);
    atomic_init(&x.failed, -1);
    fr_pool_run(gather_share, &x, shares);
    *failed = atomic_load(&x.failed);
    return atomic_load(&x.rc);
}

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = (uintptr_t) * (fr_chunk *const *)a, y = (uintptr_t) * (fr_chunk *const *)b;
    return x < y ? -1 : x > y;
}

void fr_gather_cache_trim(void) {
    if (atomic_load_explicit(&held_total, memory_order_relaxed) == 0) return;
    if (!fr_pool_try_acquire()) return;
    size_t n = 0, cap = (size_t)atomic_load(&held_total), dead = 0;
    fr_chunk **all = malloc(cap * sizeof *all);
    for (int i = 0; all && i < FR_POOL_MAX_THREADS; i++)
        for (int32_t h = 0; caches[i].held && h < caches[i].slots; h++)
            if (caches[i].held[h] && n < cap) all[n++] = caches[i].held[h];
    if (all) qsort(all, n, sizeof *all, cmp_ptr);
    /* Several slots may hold one chunk: it is referenced only by caches when
     * its count equals its number of entries.  Those chunks, first decided
     * for all (releasing changes the counts), go to the front of `all`. */
    for (size_t lo = 0, hi; all && lo < n; lo = hi) {
        for (hi = lo + 1; hi < n && all[hi] == all[lo];) hi++;
        if (atomic_load_explicit(&all[lo]->refs, memory_order_acquire) ==
            (int64_t)(hi - lo))
            all[dead++] = all[lo];
    }
    for (int i = 0; dead && i < FR_POOL_MAX_THREADS; i++) {
        slot_cache *sc = &caches[i];
        fr_gather_key *keys = (fr_gather_key *)sc->mem;
        for (int32_t h = 0; sc->held && h < sc->slots; h++) {
            fr_chunk *k = sc->held[h];
            if (!k || !bsearch(&k, all, dead, sizeof *all, cmp_ptr)) continue;
            keys[h].chunk = NULL;
            sc->held[h] = NULL;
            fr_chunk_release(k); /* the last holder frees it */
            atomic_fetch_sub(&held_total, 1);
        }
    }
    free(all);
    fr_pool_release();
}

int fr_gather_cache_clear(void) {
    if (!fr_pool_try_acquire()) return 0;
    for (int i = 0; i < FR_POOL_MAX_THREADS; i++) cache_drop(&caches[i]);
    fr_pool_release();
    return 1;
}

void fr_gather_set_flags(int f) { atomic_store(&flags, f); }

int64_t fr_gather_cache_held(void) { return atomic_load(&held_total); }
