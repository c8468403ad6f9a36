#define _POSIX_C_SOURCE 200809L
/* Inspection (counters, items in insertion order, priority mass),
 * checkpoint restore and the item key prefix of a table. */

#include <stdlib.h>

#include "table_internal.h"

int fr_table_can_sample(fr_table *t, int64_t n) {
    pthread_mutex_lock(&t->mu);
    int r = fr_rate_limiter_can_sample(&t->limiter, n);
    pthread_mutex_unlock(&t->mu);
    return r;
}

int fr_table_can_insert(fr_table *t, int64_t n) {
    pthread_mutex_lock(&t->mu);
    int r = fr_rate_limiter_can_insert(&t->limiter, n);
    pthread_mutex_unlock(&t->mu);
    return r;
}

int64_t fr_table_size(fr_table *t) {
    pthread_mutex_lock(&t->mu);
    int64_t n = t->sampler.size;
    pthread_mutex_unlock(&t->mu);
    return n;
}

int fr_table_skip_episodes(fr_table *t) {
    pthread_mutex_lock(&t->mu);
    int rc = t->sampler.size ? FR_EINVAL : FR_OK;
    if (rc == FR_OK) t->ops.episodes = NULL;
    pthread_mutex_unlock(&t->mu);
    return rc;
}

void fr_table_stats_get(fr_table *t, fr_table_stats *out) {
    pthread_mutex_lock(&t->mu);
    *out = t->st;
    out->size = t->sampler.size;
    out->max_size = t->max_size;
    out->max_times_sampled = t->max_times_sampled;
    out->rl_inserts = t->limiter.inserts;
    out->rl_samples = t->limiter.samples;
    out->rl_deletes = t->limiter.deletes;
    out->num_episodes = (int64_t)t->episodes.size;
    pthread_mutex_unlock(&t->mu);
}

double fr_table_priority_mass(fr_table *t, int64_t *size) {
    pthread_mutex_lock(&t->mu);
    double m = t->sampler.kind == FR_SEL_PRIORITIZED
                   ? fr_sumtree_total(&t->sampler.tree)
                   : (double)t->sampler.size;
    if (size) *size = t->sampler.size;
    pthread_mutex_unlock(&t->mu);
    return m;
}

#define FR_KEY_LOW_BITS ((UINT64_C(1) << FR_KEY_PREFIX_SHIFT) - 1)

int fr_table_set_key_prefix(fr_table *t, int32_t prefix) {
    if (prefix < -1 || prefix > 255) return FR_EINVAL;
    uint64_t word = prefix < 0 ? 0 : (uint64_t)prefix << FR_KEY_PREFIX_SHIFT | 1;
    atomic_store_explicit(&t->key_word, word, memory_order_relaxed);
    return FR_OK;
}

int32_t fr_table_key_prefix(const fr_table *t) {
    uint64_t word = atomic_load_explicit(&t->key_word, memory_order_relaxed);
    return word ? (int32_t)(word >> FR_KEY_PREFIX_SHIFT) : -1;
}

uint64_t fr_table_item_key(const fr_table *t, uint64_t random_bits) {
    uint64_t word = atomic_load_explicit(&t->key_word, memory_order_relaxed);
    return word ? (random_bits & FR_KEY_LOW_BITS) | (word & ~FR_KEY_LOW_BITS)
                : random_bits;
}

int fr_table_restore_item(fr_table *t, uint64_t key, double priority,
                          int64_t times_sampled, uint64_t payload) {
    int rc = fr_table_check_priority(t, priority);
    if (rc != FR_OK) return rc;
    pthread_mutex_lock(&t->mu);
    if (fr_keymap_get(&t->index, key) >= 0) {
        rc = FR_EKEY_EXISTS;
    } else if (t->sampler.size >= t->max_size) {
        rc = FR_ETABLE_FULL;
    } else if ((rc = fr_table_ensure_slot(t)) == FR_OK) {
        int32_t slot = t->free_slots[t->num_free - 1];
        if ((rc = fr_keymap_put(&t->index, key, slot)) == FR_OK &&
            (rc = fr_table_episodes_add(t, payload)) != FR_OK)
            fr_keymap_del(&t->index, key);
        if (rc == FR_OK) {
            t->num_free--;
            t->items[slot] = (fr_item){key, priority, times_sampled, t->next_seq++,
                                       payload};
            fr_selector_insert(&t->sampler, slot, priority);
            fr_selector_insert(&t->remover, slot, priority);
        }
    }
    pthread_mutex_unlock(&t->mu);
    return rc;
}

void fr_table_restore_counters(fr_table *t, int64_t inserts, int64_t samples,
                               int64_t deletes, const fr_table_stats *stats) {
    pthread_mutex_lock(&t->mu);
    t->limiter.inserts = inserts;
    t->limiter.samples = samples;
    t->limiter.deletes = deletes;
    t->st = *stats;
    t->st.num_episodes = 0; /* derived from the restored items (stats_get) */
    pthread_cond_broadcast(&t->can_insert_cv);
    pthread_cond_broadcast(&t->can_sample_cv);
    pthread_mutex_unlock(&t->mu);
}

int fr_table_get(fr_table *t, uint64_t key, fr_item *out) {
    pthread_mutex_lock(&t->mu);
    int32_t slot = fr_keymap_get(&t->index, key);
    if (slot >= 0) *out = t->items[slot];
    pthread_mutex_unlock(&t->mu);
    return slot >= 0;
}

static int by_seq(const void *a, const void *b) {
    uint64_t x = ((const fr_item *)a)->inserted_seq;
    uint64_t y = ((const fr_item *)b)->inserted_seq;
    return (x > y) - (x < y);
}

int64_t fr_table_items(fr_table *t, fr_item *out, int64_t cap) {
    pthread_mutex_lock(&t->mu);
    int64_t n = t->sampler.size;
    if (n <= cap) {
        int64_t k = 0;
        for (size_t b = 0; b <= t->index.mask; b++) {
            if (t->index.b[b].val < 0) continue;
            out[k] = t->items[t->index.b[b].val];
            if (t->ops.retain) t->ops.retain(t->ops.ctx, out[k].payload);
            k++;
        }
        qsort(out, (size_t)n, sizeof *out, by_seq);
    }
    pthread_mutex_unlock(&t->mu);
    return n;
}

int64_t fr_table_items_oldest(fr_table *t, fr_item *out, int64_t cap) {
    pthread_mutex_lock(&t->mu);
    const fr_selector *s = t->remover.kind == FR_SEL_FIFO ? &t->remover
                           : t->sampler.kind == FR_SEL_FIFO ? &t->sampler : NULL;
    int64_t k = -1;
    if (s != NULL) {
        k = 0;
        for (int32_t slot = s->head; slot >= 0 && k < cap; slot = s->next[slot]) {
            out[k] = t->items[slot];
            if (t->ops.retain) t->ops.retain(t->ops.ctx, out[k].payload);
            k++;
        }
    }
    pthread_mutex_unlock(&t->mu);
    return k;
}
