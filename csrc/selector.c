#include "selector.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int uses_dense(int kind) {
    return kind == FR_SEL_UNIFORM || kind == FR_SEL_PRIORITIZED ||
           kind == FR_SEL_MIN_HEAP || kind == FR_SEL_MAX_HEAP;
}

static int is_heap(int kind) {
    return kind == FR_SEL_MIN_HEAP || kind == FR_SEL_MAX_HEAP;
}

/* realloc that leaves *p untouched on failure. */
static int grow_array(void **p, size_t elem, size_t n) {
    void *q = realloc(*p, elem * (n ? n : 1));
    if (!q) return FR_ENOMEM;
    *p = q;
    return FR_OK;
}

static void fill_i32(int32_t *a, size_t from, size_t to, int32_t v) {
    for (size_t i = from; i < to; i++) a[i] = v;
}

int fr_selector_init(fr_selector *s, int kind, double exponent,
                     size_t capacity) {
    memset(s, 0, sizeof *s);
    if (kind < FR_SEL_UNIFORM || kind > FR_SEL_MAX_HEAP) return FR_EINVAL;
    s->kind = kind;
    s->exponent = exponent;
    s->head = s->tail = -1;
    if (kind == FR_SEL_PRIORITIZED) {
        int rc = fr_sumtree_init(&s->tree, 1);
        if (rc != FR_OK) return rc;
    }
    int rc = fr_selector_reserve(s, capacity);
    if (rc != FR_OK) fr_selector_free(s);
    return rc;
}

void fr_selector_free(fr_selector *s) {
    free(s->dense);
    free(s->pos);
    free(s->prev);
    free(s->next);
    free(s->hkey);
    free(s->hstamp);
    free(s->batch);
    if (s->kind == FR_SEL_PRIORITIZED) fr_sumtree_free(&s->tree);
    memset(s, 0, sizeof *s);
}

int fr_selector_reserve(fr_selector *s, size_t capacity) {
    if (capacity <= s->capacity) return FR_OK;
    int rc = FR_OK;
    if (uses_dense(s->kind)) {
        if ((rc = grow_array((void **)&s->dense, sizeof(int32_t), capacity)) ||
            (rc = grow_array((void **)&s->pos, sizeof(int32_t), capacity)))
            return rc;
        fill_i32(s->pos, s->capacity, capacity, -1);
    } else {
        if ((rc = grow_array((void **)&s->prev, sizeof(int32_t), capacity)) ||
            (rc = grow_array((void **)&s->next, sizeof(int32_t), capacity)))
            return rc;
    }
    if (is_heap(s->kind)) {
        if ((rc = grow_array((void **)&s->hkey, sizeof(double), capacity)) ||
            (rc = grow_array((void **)&s->hstamp, sizeof(uint64_t), capacity)))
            return rc;
    }
    if (s->kind == FR_SEL_PRIORITIZED &&
        (rc = fr_sumtree_reserve(&s->tree, capacity)))
        return rc;
    s->capacity = capacity;
    return FR_OK;
}

double fr_priority_weight(double priority, double exponent) {
    if (priority == 0.0) return 0.0;
    if (exponent == 1.0) return priority;
    return pow(priority, exponent);
}

int fr_selector_check(const fr_selector *s, double priority) {
    if (s->kind == FR_SEL_PRIORITIZED) {
        if (isnan(priority)) return FR_EPRIORITY_NAN;
        if (priority < 0.0) return FR_EPRIORITY_NEG;
        /* Bounding each weight by DBL_MAX / 2^32 keeps the sum of up to
         * 2^31 weights finite, so sampling never sees an infinite total.
         * p^a <= max(p, 1) for a <= 1 and p^a <= 1 for p <= 1: no pow then. */
        if (priority <= 1.0 || (s->exponent <= 1.0 && priority <= FR_MAX_WEIGHT))
            return FR_OK;
        if (!(fr_priority_weight(priority, s->exponent) <= FR_MAX_WEIGHT))
            return FR_EPRIORITY_BIG;
    } else if (is_heap(s->kind) && isnan(priority)) {
        return FR_EPRIORITY_NAN;
    }
    return FR_OK;
}

/* ---- dense array (Uniform, Prioritized) ---- */

static void dense_push(fr_selector *s, int32_t slot) {
    s->pos[slot] = s->size;
    s->dense[s->size++] = slot;
}

static void dense_remove(fr_selector *s, int32_t slot) {
    int32_t i = s->pos[slot];
    int32_t last = s->dense[--s->size];
    s->dense[i] = last;
    s->pos[last] = i;
    s->pos[slot] = -1;
}

/* ---- binary heap ordered by (hkey, hstamp) ---- */

FR_INLINE int heap_before(const fr_selector *s, int32_t a, int32_t b) {
    if (s->hkey[a] != s->hkey[b]) return s->hkey[a] < s->hkey[b];
    return s->hstamp[a] < s->hstamp[b];
}

static void heap_place(fr_selector *s, int32_t i, int32_t slot) {
    s->dense[i] = slot;
    s->pos[slot] = i;
}

static void heap_up(fr_selector *s, int32_t i) {
    int32_t slot = s->dense[i];
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (!heap_before(s, slot, s->dense[p])) break;
        heap_place(s, i, s->dense[p]);
        i = p;
    }
    heap_place(s, i, slot);
}

static void heap_down(fr_selector *s, int32_t i) {
    int32_t slot = s->dense[i];
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= s->size) break;
        if (c + 1 < s->size && heap_before(s, s->dense[c + 1], s->dense[c]))
            c++;
        if (!heap_before(s, s->dense[c], slot)) break;
        heap_place(s, i, s->dense[c]);
        i = c;
    }
    heap_place(s, i, slot);
}

static void heap_set_key(fr_selector *s, int32_t slot, double priority) {
    s->hkey[slot] = s->kind == FR_SEL_MIN_HEAP ? priority : -priority;
    s->hstamp[slot] = s->stamp++;
}

/* ---- linked list (Fifo, Lifo) ---- */

static void list_unlink(fr_selector *s, int32_t slot) {
    int32_t p = s->prev[slot], n = s->next[slot];
    if (p >= 0) s->next[p] = n; else s->head = n;
    if (n >= 0) s->prev[n] = p; else s->tail = p;
}

static void list_push_back(fr_selector *s, int32_t slot) {
    s->prev[slot] = s->tail;
    s->next[slot] = -1;
    if (s->tail >= 0) s->next[s->tail] = slot; else s->head = slot;
    s->tail = slot;
}

static void list_push_front(fr_selector *s, int32_t slot) {
    s->next[slot] = s->head;
    s->prev[slot] = -1;
    if (s->head >= 0) s->prev[s->head] = slot; else s->tail = slot;
    s->head = slot;
}

/* ---- sampling weights (Prioritized) ---- */

/* fr_priority_weight, remembering the last one: inserts mostly repeat one
 * priority (a buffer's default), and pow costs more than the rest of an
 * insert.  (Starts at 0 -> 0, which is right.) */
static double weight_of(fr_selector *s, double priority) {
    if (priority != s->memo_priority) {
        s->memo_weight = fr_priority_weight(priority, s->exponent);
        s->memo_priority = priority;
    }
    return s->memo_weight;
}

/* Set slot's weight now, or only its leaf while batching. */
static void set_weight(fr_selector *s, int32_t slot, double w) {
    if (s->batching && s->batch_len < s->batch_cap) {
        fr_sumtree_set_leaf(&s->tree, (size_t)slot, w);
        s->batch[s->batch_len++] = (size_t)slot;
    } else {
        fr_sumtree_set(&s->tree, (size_t)slot, w);
    }
}

int fr_selector_batch_begin(fr_selector *s, size_t n) {
    if (s->kind != FR_SEL_PRIORITIZED) return FR_OK;
    if (n > s->batch_cap) {
        size_t *b = realloc(s->batch, n * sizeof *b);
        if (!b) return FR_ENOMEM;
        s->batch = b;
        s->batch_cap = n;
    }
    s->batch_len = 0;
    s->batching = 1;
    return FR_OK;
}

void fr_selector_batch_end(fr_selector *s) {
    if (!s->batching) return;
    fr_sumtree_fix_up(&s->tree, s->batch, s->batch_len);
    s->batch_len = 0;
    s->batching = 0;
}

/* ---- public operations ---- */

void fr_selector_insert(fr_selector *s, int32_t slot, double priority) {
    switch (s->kind) {
    case FR_SEL_PRIORITIZED:
        set_weight(s, slot, weight_of(s, priority));
        dense_push(s, slot);
        return;
    case FR_SEL_UNIFORM:
        dense_push(s, slot);
        return;
    case FR_SEL_FIFO:
        list_push_back(s, slot);
        break;
    case FR_SEL_LIFO:
        list_push_front(s, slot);
        break;
    default: /* heaps */
        heap_set_key(s, slot, priority);
        heap_place(s, s->size++, slot);
        heap_up(s, s->size - 1);
        return;
    }
    s->size++;
}

void fr_selector_update(fr_selector *s, int32_t slot, double priority) {
    if (s->kind == FR_SEL_PRIORITIZED) {
        set_weight(s, slot, weight_of(s, priority));
    } else if (is_heap(s->kind)) {
        heap_set_key(s, slot, priority);
        heap_up(s, s->pos[slot]);
        heap_down(s, s->pos[slot]);
    }
}

void fr_selector_remove(fr_selector *s, int32_t slot) {
    switch (s->kind) {
    case FR_SEL_PRIORITIZED:
        set_weight(s, slot, 0.0);
        dense_remove(s, slot);
        return;
    case FR_SEL_UNIFORM:
        dense_remove(s, slot);
        return;
    case FR_SEL_FIFO:
    case FR_SEL_LIFO:
        list_unlink(s, slot);
        s->size--;
        return;
    default: { /* heaps: move the last element into the hole */
        int32_t i = s->pos[slot];
        int32_t last = s->dense[--s->size];
        s->pos[slot] = -1;
        if (i < s->size) {
            heap_place(s, i, last);
            heap_up(s, i);
            heap_down(s, s->pos[last]);
        }
        return;
    }
    }
}

int32_t fr_selector_sample(fr_selector *s, fr_rng *rng, double *probability) {
    switch (s->kind) {
    case FR_SEL_PRIORITIZED: {
        double total = fr_sumtree_total(&s->tree);
        if (total > 0.0) {
            size_t i = fr_sumtree_find(&s->tree, fr_rng_uniform(rng));
            *probability = fr_sumtree_get(&s->tree, i) / total;
            return (int32_t)i;
        }
    } /* fall through: every weight is zero, so sample uniformly */
    /* FALLTHROUGH */
    case FR_SEL_UNIFORM:
        *probability = 1.0 / (double)s->size;
        return s->dense[fr_rng_below(rng, (uint64_t)s->size)];
    case FR_SEL_FIFO:
    case FR_SEL_LIFO:
        *probability = 1.0;
        return s->head;
    default:
        *probability = 1.0;
        return s->dense[0];
    }
}

void fr_selector_sample_many(fr_selector *s, fr_rng *rng, size_t n,
                             int64_t *out, double *prob, double *scratch) {
    double total = s->kind == FR_SEL_PRIORITIZED ? fr_sumtree_total(&s->tree)
                                                 : 0.0;
    if (total > 0.0) {
        for (size_t k = 0; k < n; k++) scratch[k] = fr_rng_uniform(rng);
        fr_sumtree_find_many(&s->tree, n, scratch, out);
        for (size_t k = 0; k < n; k++)
            prob[k] = fr_sumtree_get(&s->tree, (size_t)out[k]) / total;
        return;
    }
    if (s->kind == FR_SEL_UNIFORM || s->kind == FR_SEL_PRIORITIZED) {
        /* Uniform draws are random reads of the dense array: draw every
         * position first and prefetch, so the reads overlap. */
        double p = 1.0 / (double)s->size;
        for (size_t k = 0; k < n; k++) {
            out[k] = (int64_t)fr_rng_below(rng, (uint64_t)s->size);
            __builtin_prefetch(&s->dense[out[k]]);
        }
        for (size_t k = 0; k < n; k++) {
            out[k] = s->dense[out[k]];
            prob[k] = p;
        }
        return;
    }
    for (size_t k = 0; k < n; k++)
        out[k] = fr_selector_sample(s, rng, &prob[k]);
}

void fr_selector_clear(fr_selector *s) {
    if (uses_dense(s->kind)) fill_i32(s->pos, 0, s->capacity, -1);
    if (s->kind == FR_SEL_PRIORITIZED) fr_sumtree_clear(&s->tree);
    s->size = 0;
    s->head = s->tail = -1;
}
