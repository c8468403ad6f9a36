#define _POSIX_C_SOURCE 200809L

#include "table_internal.h"

#include "mem.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FR_TABLE_MIN_CAPACITY 1024


/* Wait on cv (fr_cond_wait_until) until signalled, past the deadline or one
 * interrupt slice.  Returns FR_ETIMEOUT once the deadline has passed,
 * FR_EINTR when the interrupt hook stops the wait, FR_ECLOSED when the table
 * is closed, else FR_OK (the caller re-checks its predicate). */
static int wait_until(fr_table *t, pthread_cond_t *cv, int64_t deadline,
                      int64_t *next_check) {
    if (t->closed) return FR_ECLOSED;
    int rc = fr_cond_wait_until(cv, &t->mu, deadline, next_check);
    if (rc != FR_OK) return rc;
    return t->closed ? FR_ECLOSED : FR_OK;
}

/* Grow every per-slot array to `cap` slots, pushing the new slots on the
 * free stack. */
static int grow_slots(fr_table *t, size_t cap) {
    if (cap > INT32_MAX) return FR_EFULL;
    if (fr_grow_large((void **)&t->items, t->items_cap * sizeof *t->items,
                      cap * sizeof *t->items))
        return FR_ENOMEM;
    t->items_cap = cap;
    int32_t *fs = realloc(t->free_slots, cap * sizeof *fs);
    if (!fs) return FR_ENOMEM;
    t->free_slots = fs;
    int rc = fr_selector_reserve(&t->sampler, cap);
    if (rc == FR_OK) rc = fr_selector_reserve(&t->remover, cap);
    if (rc != FR_OK) return rc;
    for (size_t s = cap; s-- > t->capacity;)
        t->free_slots[t->num_free++] = (int32_t)s;
    t->capacity = cap;
    return FR_OK;
}

/* Make room for one more item: double the slots, up to max_size + 1. */
int fr_table_ensure_slot(fr_table *t) {
    if (t->num_free > 0) return FR_OK;
    size_t limit = (size_t)t->max_size + 1;
    size_t cap = t->capacity * 2;
    if (cap > limit) cap = limit;
    if (cap <= t->capacity) cap = t->capacity + 1;
    return grow_slots(t, cap);
}

static int valid_limiter(const fr_rate_limiter *r) {
    return r->samples_per_insert > 0 && r->samples_per_insert <= DBL_MAX &&
           r->min_size_to_sample >= 0 && r->min_diff == r->min_diff &&
           r->max_diff == r->max_diff && r->min_diff <= r->max_diff;
}

fr_table *fr_table_new(int sampler_kind, double sampler_exponent,
                       int remover_kind, double remover_exponent,
                       int64_t max_size, int64_t max_times_sampled,
                       fr_rate_limiter limiter, uint64_t seed,
                       fr_payload_ops ops) {
    fr_table *t = NULL;
    fr_table_create(sampler_kind, sampler_exponent, remover_kind, remover_exponent,
                    max_size, max_times_sampled, limiter, seed, ops, &t);
    return t;
}

int fr_table_create(int sampler_kind, double sampler_exponent,
                    int remover_kind, double remover_exponent,
                    int64_t max_size, int64_t max_times_sampled,
                    fr_rate_limiter limiter, uint64_t seed,
                    fr_payload_ops ops, fr_table **out) {
    *out = NULL;
    if (max_size < 1 || !valid_limiter(&limiter))
        return FR_EINVAL;
    fr_table *t = calloc(1, sizeof *t);
    if (!t) return FR_ENOMEM;
    atomic_init(&t->key_word, 0); /* no key prefix */
    size_t cap = (size_t)max_size + 1;
    if (cap > FR_TABLE_MIN_CAPACITY) cap = FR_TABLE_MIN_CAPACITY;
    t->max_size = max_size;
    t->max_times_sampled = max_times_sampled < 1 ? 0 : max_times_sampled;
    t->limiter = limiter;
    t->limiter.inserts = t->limiter.samples = t->limiter.deletes = 0;
    t->ops = ops;
    fr_rng_seed(&t->rng, seed);
    int rc = fr_selector_init(&t->sampler, sampler_kind, sampler_exponent, 0);
    if (rc == FR_OK) rc = fr_selector_init(&t->remover, remover_kind, remover_exponent, 0);
    if (rc == FR_OK) rc = fr_keymap_init(&t->index);
    if (rc == FR_OK) rc = fr_keymap_init(&t->episodes);
    if (rc == FR_OK && (pthread_mutex_init(&t->mu, NULL) ||
                        fr_init_cond(&t->can_insert_cv) ||
                        fr_init_cond(&t->can_sample_cv)))
        rc = FR_ESYSTEM;
    if (rc != FR_OK) {
        fr_selector_free(&t->sampler);
        fr_selector_free(&t->remover);
        fr_keymap_free(&t->index);
        fr_keymap_free(&t->episodes);
        free(t);
        return rc;
    }
    if ((rc = grow_slots(t, cap)) != FR_OK) {
        fr_table_free(t);
        return rc;
    }
    *out = t;
    return FR_OK;
}

void fr_table_release_payload(fr_table *t, uint64_t payload) {
    if (t->num_deferred < t->deferred_cap) {
        t->deferred[t->num_deferred++] = payload;
        return;
    }
    if (t->ops.release) t->ops.release(t->ops.ctx, payload);
}

void fr_table_unlink_slot(fr_table *t, int32_t slot) {
    fr_item *it = &t->items[slot];
    fr_selector_remove(&t->sampler, slot);
    fr_selector_remove(&t->remover, slot);
    fr_keymap_del(&t->index, it->key);
    fr_table_episodes_remove(t, it->payload);
    t->free_slots[t->num_free++] = slot;
    t->limiter.deletes++;
}

/* fr_table_unlink_slot, and release the item's payload. */
static void remove_slot(fr_table *t, int32_t slot) {
    uint64_t payload = t->items[slot].payload;
    fr_table_unlink_slot(t, slot);
    fr_table_release_payload(t, payload);
}

void fr_table_free(fr_table *t) {
    if (!t) return;
    if (t->items) {
        /* Release payloads of live items: walk the index. */
        for (size_t b = 0; b <= t->index.mask; b++)
            if (t->index.b[b].val >= 0)
                fr_table_release_payload(t, t->items[t->index.b[b].val].payload);
    }
    fr_table_drop_queue(t);
    free(t->queue);
    fr_selector_free(&t->sampler);
    fr_selector_free(&t->remover);
    fr_keymap_free(&t->index);
    fr_keymap_free(&t->episodes);
    fr_free_large(t->items, t->items_cap * sizeof *t->items);
    free(t->free_slots);
    free(t->scratch);
    free(t->scratch_slots);
    pthread_cond_destroy(&t->can_insert_cv);
    pthread_cond_destroy(&t->can_sample_cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

void fr_table_close(fr_table *t) {
    pthread_mutex_lock(&t->mu);
    t->closed = 1;
    fr_table_drop_queue(t);
    pthread_cond_broadcast(&t->can_insert_cv);
    pthread_cond_broadcast(&t->can_sample_cv);
    pthread_mutex_unlock(&t->mu);
}

int fr_table_check_priority(const fr_table *t, double priority) {
    int rc = fr_selector_check(&t->sampler, priority);
    return rc != FR_OK ? rc : fr_selector_check(&t->remover, priority);
}

/* Wait for the rate limiter to admit one insert; accounts stall time. */
static int await_insert(fr_table *t, int64_t deadline, int64_t *next_check) {
    if (t->closed) return FR_ECLOSED;
    if (fr_rate_limiter_can_insert(&t->limiter, 1)) return FR_OK;
    int64_t start = fr_now_ns();
    int rc = FR_OK;
    t->st.num_insert_stalls++;
    while (!fr_rate_limiter_can_insert(&t->limiter, 1)) {
        rc = wait_until(t, &t->can_insert_cv, deadline, next_check);
        if (rc != FR_OK) break;
    }
    t->st.insert_stall_ns += fr_now_ns() - start;
    return rc;
}

/* Insert or assign one pre-validated item; the rate limiter has agreed. */
int fr_table_insert_locked(fr_table *t, uint64_t key, double priority,
                         uint64_t payload) {
    int32_t slot = fr_keymap_get(&t->index, key);
    if (slot >= 0) {
        t->items[slot].priority = priority;
        fr_selector_update(&t->sampler, slot, priority);
        fr_selector_update(&t->remover, slot, priority);
        fr_table_release_payload(t, payload);
        t->st.num_updates++;
        return FR_OK;
    }
    int rc = fr_table_ensure_slot(t);
    if (rc != FR_OK) return rc;
    slot = t->free_slots[t->num_free - 1];
    if ((rc = fr_keymap_put(&t->index, key, slot)) != FR_OK) return rc;
    if ((rc = fr_table_episodes_add(t, payload)) != FR_OK) {
        fr_keymap_del(&t->index, key);
        return rc;
    }
    t->num_free--;
    t->items[slot] = (fr_item){key, priority, 0, t->next_seq++, payload};
    fr_selector_insert(&t->sampler, slot, priority);
    fr_selector_insert(&t->remover, slot, priority);
    t->limiter.inserts++;
    t->st.num_inserts++;
    if (t->sampler.size > t->max_size) {
        double p;
        remove_slot(t, fr_selector_sample(&t->remover, &t->rng, &p));
        t->st.num_evictions++;
    }
    return FR_OK;
}

int fr_table_insert(fr_table *t, uint64_t key, double priority,
                    uint64_t payload, int64_t timeout_ns) {
    int64_t done, bad;
    return fr_table_insert_many(t, 1, &key, &priority, &payload, timeout_ns,
                                &done, &bad);
}

int fr_table_insert_many(fr_table *t, int64_t n, const uint64_t *keys,
                         const double *priorities, const uint64_t *payloads,
                         int64_t timeout_ns, int64_t *n_done,
                         int64_t *bad_index) {
    int64_t deadline = fr_deadline_from(timeout_ns), next_check = 0;
    int rc = FR_OK;
    int64_t i = 0;
    fr_table_released released = {NULL, 0};
    *n_done = 0;
    *bad_index = -1;
    pthread_mutex_lock(&t->mu);
    for (int64_t k = 0; k < n; k++) {
        if (k > 0 && priorities[k] == priorities[k - 1]) continue; /* checked */
        if ((rc = fr_table_check_priority(t, priorities[k])) != FR_OK) {
            *bad_index = k;
            goto out;
        }
    }
    /* The whole batch admitted at once: the bulk path (table_bulk.c). */
    if (n > 1 && !t->closed && fr_rate_limiter_can_insert(&t->limiter, n))
        rc = fr_table_insert_bulk_locked(t, n, keys, priorities, payloads, &i,
                                         &released);
    for (; i < n && rc == FR_OK; i++) {
        if ((rc = await_insert(t, deadline, &next_check)) != FR_OK) break;
        if ((rc = fr_table_insert_locked(t, keys[i], priorities[i], payloads[i])))
            break;
    }
    if (i > 0) pthread_cond_broadcast(&t->can_sample_cv);
out:
    *n_done = i;
    pthread_mutex_unlock(&t->mu);
    fr_table_release_all(t, &released);
    return rc;
}

/* Make the scratch buffers hold n entries. */
static int reserve_scratch(fr_table *t, size_t n) {
    if (n <= t->scratch_cap) return FR_OK;
    double *d = realloc(t->scratch, n * sizeof *d);
    if (!d) return FR_ENOMEM;
    t->scratch = d;
    int64_t *s = realloc(t->scratch_slots, n * sizeof *s);
    if (!s) return FR_ENOMEM;
    t->scratch_slots = s;
    t->scratch_cap = n;
    return FR_OK;
}

/* Count one sample of `slot`, write its record at index k and delete the
 * item when it reached max_times_sampled. */
static void commit_sample(fr_table *t, int32_t slot, double probability,
                          int64_t k, uint64_t *keys, double *probabilities,
                          double *priorities, int64_t *times_sampled,
                          int64_t *table_sizes, uint64_t *payloads) {
    fr_item *it = &t->items[slot];
    if (it->times_sampled++ == 0) t->st.num_unique_samples++;
    t->limiter.samples++;
    t->st.num_samples++;
    keys[k] = it->key;
    probabilities[k] = probability;
    priorities[k] = it->priority;
    times_sampled[k] = it->times_sampled;
    table_sizes[k] = t->sampler.size;
    if (payloads) {
        payloads[k] = it->payload;
        if (t->ops.retain) t->ops.retain(t->ops.ctx, it->payload);
    }
    if (t->max_times_sampled > 0 && it->times_sampled >= t->max_times_sampled) {
        remove_slot(t, slot);
        t->st.num_expired++;
    }
}

static int can_sample_locked(fr_table *t, int64_t n) {
    return t->sampler.size >= 1 && fr_rate_limiter_can_sample(&t->limiter, n);
}

int fr_table_sample(fr_table *t, int64_t n, int64_t timeout_ns,
                    uint64_t *keys, double *probabilities, double *priorities,
                    int64_t *times_sampled, int64_t *table_sizes,
                    uint64_t *payloads, int64_t *n_done) {
    int64_t deadline = fr_deadline_from(timeout_ns), next_check = 0;
    int rc = FR_OK;
    int64_t k = 0;
    pthread_mutex_lock(&t->mu);
    /* Fast path: the limiter admits the whole batch and no sample can delete
     * an item, so all n draws see the same selector state. */
    if (!t->closed && t->max_times_sampled == 0 && n > 1 &&
        can_sample_locked(t, n) && reserve_scratch(t, (size_t)n) == FR_OK) {
        fr_selector_sample_many(&t->sampler, &t->rng, (size_t)n,
                                t->scratch_slots, probabilities, t->scratch);
        /* Random reads in a pipeline: item records FAR ahead, the payload
         * records they point to (retained in commit_sample) NEAR ahead. */
        enum { FAR = 16, NEAR = 8 };
        const int64_t *slot = t->scratch_slots;
        int retain = payloads && t->ops.retain;
        for (int64_t j = 0; j < n && j < FAR; j++) __builtin_prefetch(&t->items[slot[j]]);
        for (int64_t j = 0; retain && j < n && j < NEAR; j++)
            __builtin_prefetch((const void *)(uintptr_t)t->items[slot[j]].payload, 1);
        for (; k < n; k++) {
            if (k + FAR < n) __builtin_prefetch(&t->items[slot[k + FAR]]);
            if (retain && k + NEAR < n)
                __builtin_prefetch((const void *)(uintptr_t)t->items[slot[k + NEAR]].payload,
                                   1);
            commit_sample(t, (int32_t)slot[k], probabilities[k], k, keys,
                          probabilities, priorities, times_sampled, table_sizes,
                          payloads);
        }
    }
    int64_t start = 0;
    for (; k < n; k++) {
        if (t->closed) {
            rc = FR_ECLOSED;
            break;
        }
        if (!can_sample_locked(t, 1)) {
            if (start == 0) {
                start = fr_now_ns();
                t->st.num_sample_stalls++;
            }
            while (!can_sample_locked(t, 1)) {
                if ((rc = wait_until(t, &t->can_sample_cv, deadline, &next_check)) !=
                    FR_OK)
                    break;
            }
            if (rc != FR_OK) break;
        }
        double p;
        int32_t slot = fr_selector_sample(&t->sampler, &t->rng, &p);
        commit_sample(t, slot, p, k, keys, probabilities, priorities,
                      times_sampled, table_sizes, payloads);
    }
    if (start != 0) t->st.sample_stall_ns += fr_now_ns() - start;
    if (k > 0) {
        fr_table_drain_queue(t);
        pthread_cond_broadcast(&t->can_insert_cv);
        if (rc == FR_ETIMEOUT || rc == FR_ECLOSED) rc = FR_OK;
    }
    if (rc == FR_ETIMEOUT) rc = FR_ESAMPLE_TIMEOUT;
    *n_done = k;
    pthread_mutex_unlock(&t->mu);
    return rc;
}

/* Prefetch distance, in items, of the update pipeline below. */
#define FR_AHEAD 8

/* Set the priorities of present keys as a three-stage software pipeline:
 * item i's index bucket is prefetched, FR_AHEAD items later its slot is
 * looked up and its item and tree path prefetched, and FR_AHEAD items after
 * that it is applied, so each stage's cache misses overlap the others. */
static void apply_updates(fr_table *t, int64_t n, const uint64_t *keys,
                          const double *priorities) {
    int32_t slots[2 * FR_AHEAD];
    for (int64_t i = 0; i < n + 2 * FR_AHEAD; i++) {
        if (i < n) fr_keymap_prefetch(&t->index, keys[i]);
        int64_t j = i - FR_AHEAD;
        if (j >= 0 && j < n) {
            int32_t slot = fr_keymap_get(&t->index, keys[j]);
            slots[j % (2 * FR_AHEAD)] = slot;
            if (slot >= 0) {
                __builtin_prefetch(&t->items[slot]);
                fr_selector_prefetch(&t->sampler, slot);
                fr_selector_prefetch(&t->remover, slot);
            }
        }
        int64_t k = i - 2 * FR_AHEAD;
        if (k < 0 || k >= n) continue;
        int32_t slot = slots[k % (2 * FR_AHEAD)];
        if (slot < 0) continue;
        double p = priorities[k];
        t->items[slot].priority = p;
        fr_selector_update(&t->sampler, slot, p);
        fr_selector_update(&t->remover, slot, p);
        t->st.num_updates++;
    }
}

int fr_table_mutate(fr_table *t, int64_t n_updates, const uint64_t *keys,
                    const double *priorities, int64_t n_deletes,
                    const uint64_t *delete_keys, int64_t *bad_index) {
    *bad_index = -1;
    pthread_mutex_lock(&t->mu);
    for (int64_t i = 0; i < n_updates; i++) {
        int rc = fr_table_check_priority(t, priorities[i]);
        if (rc != FR_OK) {
            *bad_index = i;
            pthread_mutex_unlock(&t->mu);
            return rc;
        }
    }
    int64_t removed = 0;
    for (int64_t i = 0; i < n_deletes; i++) {
        int32_t slot = fr_keymap_get(&t->index, delete_keys[i]);
        if (slot < 0) continue;
        remove_slot(t, slot);
        removed++;
    }
    t->st.num_deletes += removed;
    apply_updates(t, n_updates, keys, priorities);
    if (removed > 0) {
        fr_table_drain_queue(t);
        pthread_cond_broadcast(&t->can_insert_cv);
    }
    pthread_mutex_unlock(&t->mu);
    return FR_OK;
}

void fr_table_reset(fr_table *t) {
    pthread_mutex_lock(&t->mu);
    for (size_t b = 0; b <= t->index.mask; b++)
        if (t->index.b[b].val >= 0)
            fr_table_release_payload(t, t->items[t->index.b[b].val].payload);
    fr_keymap_clear(&t->index);
    fr_keymap_clear(&t->episodes);
    fr_selector_clear(&t->sampler);
    fr_selector_clear(&t->remover);
    t->num_free = 0;
    for (size_t s = t->capacity; s-- > 0;) t->free_slots[t->num_free++] = (int32_t)s;
    t->limiter.inserts = t->limiter.samples = t->limiter.deletes = 0;
    memset(&t->st, 0, sizeof t->st);
    fr_table_drain_queue(t);
    pthread_cond_broadcast(&t->can_insert_cv);
    pthread_cond_broadcast(&t->can_sample_cv);
    pthread_mutex_unlock(&t->mu);
}
