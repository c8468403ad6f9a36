#define _POSIX_C_SOURCE 200809L
/* A table's bulk insert (fr_table_insert_many when the rate limiter admits
 * the whole batch): the same per-item steps as fr_table_insert_locked, in
 * order, so the table ends exactly as after n single inserts, but
 *  - the sampler's sum tree is updated once per level over the touched
 *    leaves at the end (fr_selector_batch_begin/_end), not n root-to-leaf
 *    walks for the inserts and n more for the evictions;
 *  - the random reads are prefetched ahead as a pipeline: the index buckets
 *    of the keys to come, and for a Fifo remover the records, index buckets
 *    and payloads of the items it will evict;
 *  - the payloads of evicted items are collected and released after the
 *    table lock is dropped, all at once (fr_payload_ops.release_many: one
 *    reference-count change per chunk rather than per row).
 * Called with the table lock held (table_internal.h). */

#include <stdlib.h>

#include "table_internal.h"

/* Prefetch distances, in items: the far stage reads ahead the records of
 * Fifo victims, the near stage their keys' buckets and payloads. */
enum { NEAR = 8, FAR = 16 };

/* Walks the Fifo remover's list ahead of the evictions, prefetching. */
typedef struct victim_cursor {
    int32_t far, near; /* slots FAR and NEAR victims ahead, -1 at the end */
    int64_t lead;      /* victims the far cursor is ahead of the next one */
} victim_cursor;

static void cursor_start(fr_table *t, victim_cursor *c) {
    c->far = c->near = t->remover.head;
    c->lead = 0;
}

/* Advance by one victim: the far cursor's record is prefetched, the near
 * cursor's (read FAR - NEAR victims ago) tells its key and payload. */
static void cursor_step(fr_table *t, victim_cursor *c) {
    const fr_selector *r = &t->remover;
    const fr_selector *sp = &t->sampler;
    if (c->far >= 0) {
        __builtin_prefetch(&t->items[c->far]);
        __builtin_prefetch(&r->next[c->far]);
        if (sp->pos) __builtin_prefetch(&sp->pos[c->far]);
        c->far = r->next[c->far];
        c->lead++;
    }
    if (c->lead > FAR - NEAR && c->near >= 0) {
        const fr_item *it = &t->items[c->near];
        fr_keymap_prefetch(&t->index, it->key);
        __builtin_prefetch((const void *)(uintptr_t)it->payload);
        /* Uniform and Prioritized samplers move their last slot into the
         * victim's place in the dense array: a random line. */
        if (sp->pos && sp->dense && sp->pos[c->near] >= 0)
            __builtin_prefetch(&sp->dense[sp->pos[c->near]], 1);
        c->near = r->next[c->near];
    }
}

int fr_table_insert_bulk_locked(fr_table *t, int64_t n, const uint64_t *keys,
                                const double *priorities, const uint64_t *payloads,
                                int64_t *n_done, fr_table_released *out) {
    int rc = FR_OK;
    int64_t i = 0;
    out->payloads = NULL;
    out->n = 0;
    /* Each item inserts a leaf and may evict one. */
    int batching = fr_selector_batch_begin(&t->sampler, 2 * (size_t)n) == FR_OK;
    uint64_t *released = t->ops.release ? malloc((size_t)n * 2 * sizeof *released)
                                        : NULL;
    if (released) {
        t->deferred = released;
        t->deferred_cap = 2 * n;
        t->num_deferred = 0;
    }
    int fifo = t->remover.kind == FR_SEL_FIFO;
    int64_t room = t->max_size - t->sampler.size; /* inserts before evictions */
    victim_cursor vc;
    if (fifo) {
        cursor_start(t, &vc);
        /* The far cursor stays FAR victims ahead: item i evicts victim
         * i - room. */
        for (int64_t k = 0; k < FAR - room && k < n - room; k++) cursor_step(t, &vc);
    }
    for (int64_t k = 0; k < NEAR && k < n; k++) fr_keymap_prefetch(&t->index, keys[k]);
    for (; i < n; i++) {
        if (i + NEAR < n) fr_keymap_prefetch(&t->index, keys[i + NEAR]);
        if (fifo && i + FAR >= room && i + FAR < n) cursor_step(t, &vc);
        if ((rc = fr_table_insert_locked(t, keys[i], priorities[i], payloads[i])))
            break;
    }
    if (batching) fr_selector_batch_end(&t->sampler);
    if (released) {
        out->payloads = released;
        out->n = t->num_deferred;
        t->deferred = NULL;
        t->deferred_cap = t->num_deferred = 0;
    }
    *n_done = i;
    return rc;
}

void fr_table_release_all(fr_table *t, fr_table_released *r) {
    if (r->n > 0) {
        if (t->ops.release_many) {
            t->ops.release_many(t->ops.ctx, r->payloads, r->n);
        } else {
            for (int64_t k = 0; k < r->n; k++) t->ops.release(t->ops.ctx, r->payloads[k]);
        }
    }
    free(r->payloads);
    r->payloads = NULL;
    r->n = 0;
}
