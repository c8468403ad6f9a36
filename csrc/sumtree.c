#include "sumtree.h"

#include <stdlib.h>
#include <string.h>

#define FAN FR_SUMTREE_FANOUT
#define ALIGN 64

static size_t round_up(size_t n, size_t k) { return (n + k - 1) / k * k; }

static double *alloc_zeroed(size_t n) {
    double *p = aligned_alloc(ALIGN, round_up(n * sizeof(double), ALIGN));
    if (p) memset(p, 0, n * sizeof(double));
    return p;
}

/* Build the level shape for `capacity` leaves into t (allocating zeroed
 * arrays).  Each level is padded to a whole number of sibling groups. */
static int alloc_levels(fr_sumtree *t, size_t capacity) {
    memset(t, 0, sizeof *t);
    size_t n = capacity < 1 ? 1 : capacity;
    int d = 0;
    for (;;) {
        if (d == FR_SUMTREE_MAX_LEVELS) goto fail;
        size_t w = n == 1 ? 1 : round_up(n, FAN);
        t->levels[d] = alloc_zeroed(w);
        if (!t->levels[d]) goto fail;
        t->width[d] = w;
        d++;
        if (n == 1) break;
        n = w / FAN;
    }
    t->depth = d;
    t->capacity = capacity < 1 ? 1 : capacity;
    return FR_OK;
fail:
    for (int i = 0; i < d; i++) free(t->levels[i]);
    memset(t, 0, sizeof *t);
    return FR_ENOMEM;
}

int fr_sumtree_init(fr_sumtree *t, size_t capacity) {
    return alloc_levels(t, capacity);
}

void fr_sumtree_free(fr_sumtree *t) {
    for (int i = 0; i < t->depth; i++) free(t->levels[i]);
    memset(t, 0, sizeof *t);
}

FR_INLINE double group_sum(const double *c) {
    double s = 0.0;
    for (int k = 0; k < FAN; k++) s += c[k];
    return s;
}

/* Recompute every internal level from the leaves.  O(capacity). */
static void rebuild(fr_sumtree *t) {
    for (int l = 1; l < t->depth; l++) {
        size_t parents = t->width[l - 1] / FAN;
        for (size_t j = 0; j < parents; j++)
            t->levels[l][j] = group_sum(t->levels[l - 1] + j * FAN);
    }
}

int fr_sumtree_reserve(fr_sumtree *t, size_t capacity) {
    if (capacity <= t->capacity) return FR_OK;
    fr_sumtree grown;
    int rc = alloc_levels(&grown, capacity);
    if (rc != FR_OK) return rc;
    memcpy(grown.levels[0], t->levels[0], t->capacity * sizeof(double));
    rebuild(&grown);
    fr_sumtree_free(t);
    *t = grown;
    return FR_OK;
}

void fr_sumtree_clear(fr_sumtree *t) {
    for (int l = 0; l < t->depth; l++)
        memset(t->levels[l], 0, t->width[l] * sizeof(double));
}

void fr_sumtree_set(fr_sumtree *t, size_t i, double w) {
    t->levels[0][i] = w;
    for (int l = 1; l < t->depth; l++) {
        size_t parent = i / FAN;
        t->levels[l][parent] = group_sum(t->levels[l - 1] + parent * FAN);
        i = parent;
    }
}

/* Pick the child of group c that contains offset *x and subtract the weight
 * to its left.  Only children with positive weight are eligible; when
 * rounding leaves *x past the last positive child, that child is taken. */
FR_INLINE size_t pick_child(const double *c, double *x) {
    int last = 0;
    double v = *x;
    for (int k = 0; k < FAN; k++) {
        double s = c[k];
        if (s > 0.0) {
            if (v < s) {
                *x = v;
                return (size_t)k;
            }
            v -= s;
            last = k;
        }
    }
    *x = c[last] * 0.5;
    return (size_t)last;
}

size_t fr_sumtree_find(const fr_sumtree *t, double u) {
    double x = u * fr_sumtree_total(t);
    size_t j = 0;
    for (int l = t->depth - 2; l >= 0; l--)
        j = j * FAN + pick_child(t->levels[l] + j * FAN, &x);
    return j;
}

#define FIND_GROUP 16

void fr_sumtree_find_many(const fr_sumtree *t, size_t n, const double *u,
                          int64_t *out) {
    double total = fr_sumtree_total(t);
    double x[FIND_GROUP];
    size_t j[FIND_GROUP];
    for (size_t base = 0; base < n; base += FIND_GROUP) {
        size_t m = n - base < FIND_GROUP ? n - base : FIND_GROUP;
        for (size_t g = 0; g < m; g++) {
            x[g] = u[base + g] * total;
            j[g] = 0;
        }
        /* Level by level over the whole group: the loads of one level are
         * independent, so their cache misses are serviced in parallel. */
        for (int l = t->depth - 2; l >= 0; l--) {
            const double *lev = t->levels[l];
            for (size_t g = 0; g < m; g++) {
                j[g] = j[g] * FAN + pick_child(lev + j[g] * FAN, &x[g]);
                if (l > 0) __builtin_prefetch(t->levels[l - 1] + j[g] * FAN);
            }
        }
        for (size_t g = 0; g < m; g++) out[base + g] = (int64_t)j[g];
    }
}
