#include "sumtree.h"

#include "mem.h"

#include <stdlib.h>
#include <string.h>

#define FAN FR_SUMTREE_FANOUT
#define ALIGN 64

static size_t round_up(size_t n, size_t k) { return (n + k - 1) / k * k; }

static size_t level_bytes(size_t n) { return round_up(n * sizeof(double), ALIGN); }

static double *alloc_zeroed(size_t n) {
    size_t bytes = level_bytes(n);
    double *p = bytes >= FR_HUGE_MIN ? fr_alloc_large(bytes) : aligned_alloc(ALIGN, bytes);
    if (p) memset(p, 0, n * sizeof(double));
    return p;
}

/* Free a level of n doubles made by alloc_zeroed. */
static void free_level(double *p, size_t n) {
    size_t bytes = level_bytes(n);
    if (bytes >= FR_HUGE_MIN) fr_free_large(p, bytes);
    else free(p);
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
    for (int i = 0; i < d; i++) free_level(t->levels[i], t->width[i]);
    memset(t, 0, sizeof *t);
    return FR_ENOMEM;
}

int fr_sumtree_init(fr_sumtree *t, size_t capacity) {
    return alloc_levels(t, capacity);
}

void fr_sumtree_free(fr_sumtree *t) {
    for (int i = 0; i < t->depth; i++) free_level(t->levels[i], t->width[i]);
    memset(t, 0, sizeof *t);
}

/* Running sums of a sibling group, pre[k] = weight of children [0, k),
 * formed pairwise so the dependency chain is 3 additions deep instead of 8.
 * Each pre[k+1] >= pre[k], and a zero-weight child k gives pre[k+1] ==
 * pre[k] exactly: find relies on both.  pre[FAN] is the group's sum. */
FR_INLINE void group_prefix(const double *c, double pre[FAN + 1]) {
    double s01 = c[0] + c[1], s45 = c[4] + c[5];
    double s0123 = s01 + (c[2] + c[3]);
    double s456 = s45 + c[6];
    pre[0] = 0.0;
    pre[1] = c[0];
    pre[2] = s01;
    pre[3] = s01 + c[2];
    pre[4] = s0123;
    pre[5] = s0123 + c[4];
    pre[6] = s0123 + s45;
    pre[7] = s0123 + s456;
    pre[8] = s0123 + (s45 + (c[6] + c[7]));
}

FR_INLINE double group_sum(const double *c) {
    return (c[0] + c[1] + (c[2] + c[3])) + (c[4] + c[5] + (c[6] + c[7]));
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

void fr_sumtree_fix_up(fr_sumtree *t, size_t *idx, size_t n) {
    for (int l = 1; l < t->depth && n > 0; l++) {
        double *up = t->levels[l];
        const double *down = t->levels[l - 1];
        /* Each parent once: the first child to reach it marks it with -1
         * (sums are >= 0) and keeps it; a run of siblings is caught without
         * reading the mark. */
        size_t m = 0, last = (size_t)-1;
        for (size_t k = 0; k < n; k++) {
            size_t p = idx[k] / FAN;
            if (p == last || up[p] == -1.0) continue;
            up[p] = -1.0;
            idx[m++] = last = p;
        }
        for (size_t k = 0; k < m; k++) up[idx[k]] = group_sum(down + idx[k] * FAN);
        n = m;
    }
}

/* Pick the child of group c that contains offset *x and subtract the weight
 * to its left.  Branch-free: the child is the number of running sums that
 * stay <= *x.  A zero-weight child repeats the previous running sum, so it is
 * always counted and never picked.  When rounding leaves *x at or past the
 * group total, the last positive child is taken, at its right edge (rare, so the branch
 * predicts well). */
FR_INLINE size_t pick_child(const double *c, double *x) {
    double pre[FAN + 1];
    group_prefix(c, pre);
    double v = *x;
    int k = 0;
    for (int i = 1; i <= FAN; i++) k += pre[i] <= v;
    if (k < FAN) {
        *x = v - pre[k];
        return (size_t)k;
    }
    int last = FAN - 1;
    while (last > 0 && !(c[last] > 0.0)) last--;
    *x = c[last]; /* keep to the right edge of that child */
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
