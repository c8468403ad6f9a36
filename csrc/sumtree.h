/* Leaf-based sum tree with fan-out 8 for proportional sampling.
 *
 * Leaves hold non-negative weights; every internal node holds the sum of its
 * eight children, always recomputed from the children in a fixed order (never
 * by adding deltas), so sums cannot drift however many updates are made: after
 * inserting 1e-15, adding and removing 10,000 weights of 0.3, the root is
 * exactly 1e-15 again (Reverb's rounding test).  Each group of eight siblings
 * fills one 64-byte cache line, so a descent touches depth = ceil(log8 n)
 * lines instead of log2 n.
 *
 * Not thread-safe: callers serialize access (the table lock).
 */
#ifndef FASTREPLAY_SUMTREE_H
#define FASTREPLAY_SUMTREE_H

#include "fr_common.h"

#define FR_SUMTREE_FANOUT 8
#define FR_SUMTREE_MAX_LEVELS 24

typedef struct fr_sumtree {
    double *levels[FR_SUMTREE_MAX_LEVELS]; /* levels[0] = leaves */
    size_t width[FR_SUMTREE_MAX_LEVELS];   /* allocated nodes per level */
    int depth;                             /* number of levels; root is
                                              levels[depth-1][0] */
    size_t capacity;                       /* usable leaves */
} fr_sumtree;

/* Allocate a tree with room for `capacity` (>= 1) leaves, all zero.
 * Returns FR_OK or FR_ENOMEM. O(capacity). */
int fr_sumtree_init(fr_sumtree *t, size_t capacity);
void fr_sumtree_free(fr_sumtree *t);

/* Grow to at least `capacity` leaves, keeping every weight.  Returns FR_OK or
 * FR_ENOMEM (the tree is unchanged on failure).  O(capacity). */
int fr_sumtree_reserve(fr_sumtree *t, size_t capacity);

/* Zero every weight.  O(capacity). */
void fr_sumtree_clear(fr_sumtree *t);

/* Set leaf i (< capacity) to weight w (finite, >= 0; not checked here) and
 * recompute its ancestors.  O(8 log8 capacity). */
void fr_sumtree_set(fr_sumtree *t, size_t i, double w);

/* Set leaf i (< capacity) to w without touching its ancestors: the tree is
 * inconsistent until fr_sumtree_fix_up recomputes them (no find or total in
 * between). */
FR_INLINE void fr_sumtree_set_leaf(fr_sumtree *t, size_t i, double w) {
    t->levels[0][i] = w;
}

/* Recompute the ancestors of leaves idx[0..n) (set with fr_sumtree_set_leaf)
 * bottom-up, each touched node once per level: the tree then equals n
 * fr_sumtree_set calls exactly (every node is recomputed from its children
 * in the same order).  idx is overwritten (it holds the parents of each
 * level in turn).  O(n) per level, whatever the order of idx; runs of
 * neighbouring leaves share their ancestors' work. */
void fr_sumtree_fix_up(fr_sumtree *t, size_t *idx, size_t n);

/* Hint the cache lines that fr_sumtree_set(t, i, .) reads first. */
FR_INLINE void fr_sumtree_prefetch(const fr_sumtree *t, size_t i) {
    for (int l = 0; l < t->depth && l < 2; l++, i /= FR_SUMTREE_FANOUT)
        __builtin_prefetch(t->levels[l] + i / FR_SUMTREE_FANOUT * FR_SUMTREE_FANOUT);
}

FR_INLINE double fr_sumtree_get(const fr_sumtree *t, size_t i) {
    return t->levels[0][i];
}

FR_INLINE double fr_sumtree_total(const fr_sumtree *t) {
    return t->levels[t->depth - 1][0];
}

/* Leaf index whose cumulative weight interval contains u * total, for u in
 * [0, 1).  Never returns a zero-weight leaf; requires total > 0.
 * O(8 log8 capacity). */
size_t fr_sumtree_find(const fr_sumtree *t, double u);

/* find() for n values at once, interleaving the descents so their cache
 * misses overlap.  out[k] = find(u[k]).  Requires total > 0. */
void fr_sumtree_find_many(const fr_sumtree *t, size_t n, const double *u,
                          int64_t *out);

#endif /* FASTREPLAY_SUMTREE_H */
