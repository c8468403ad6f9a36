/* Item selectors over int32 slot ids: Reverb's Uniform, Prioritized, Fifo,
 * Lifo, MinHeap and MaxHeap (reverb-spec section 4).
 *
 * A selector tracks which slots are present and picks one on sample().  The
 * table maps item keys to slots and guarantees that insert() is only called
 * for absent slots and update()/remove() only for present ones.  Slots are
 * below the capacity passed to fr_selector_reserve().
 *
 * Reported probabilities: Uniform 1/N; Prioritized w/sum(w) with
 * w = priority^exponent (w = 0 whenever priority = 0, also for exponent 0),
 * or 1/N when every weight is 0; Fifo, Lifo and the heaps 1.0.
 *
 * Not thread-safe: the owning table's lock serializes every call.
 */
#ifndef FASTREPLAY_SELECTOR_H
#define FASTREPLAY_SELECTOR_H

#include "fr_common.h"
#include "rng.h"
#include "sumtree.h"

typedef enum fr_selector_kind {
    FR_SEL_UNIFORM = 0,
    FR_SEL_PRIORITIZED = 1,
    FR_SEL_FIFO = 2,
    FR_SEL_LIFO = 3,
    FR_SEL_MIN_HEAP = 4,
    FR_SEL_MAX_HEAP = 5,
} fr_selector_kind;

typedef struct fr_selector {
    int kind;
    double exponent;      /* Prioritized only */
    size_t capacity;      /* slots addressable */
    int32_t size;         /* slots present */
    int32_t *dense;       /* Uniform/Prioritized: present slots; heaps: heap */
    int32_t *pos;         /* slot -> index in dense, -1 when absent */
    fr_sumtree tree;      /* Prioritized */
    int32_t *prev, *next; /* Fifo/Lifo: doubly linked list, -1 terminated */
    int32_t head, tail;
    double *hkey;         /* heaps: sign * priority per slot */
    uint64_t *hstamp;     /* heaps: insert/update counter per slot */
    uint64_t stamp;
    /* Prioritized between fr_selector_batch_begin and _end: leaves whose
     * weight changed, their ancestors not yet recomputed. */
    size_t *batch;
    size_t batch_len, batch_cap;
    int batching;
    double memo_priority, memo_weight; /* the last weight computed (pow) */
} fr_selector;

/* Set up an empty selector of `kind` for `capacity` slots.
 * Returns FR_OK, FR_EINVAL (unknown kind) or FR_ENOMEM. */
int fr_selector_init(fr_selector *s, int kind, double exponent,
                     size_t capacity);
void fr_selector_free(fr_selector *s);

/* Grow to `capacity` slots.  FR_OK or FR_ENOMEM (selector unchanged). */
int fr_selector_reserve(fr_selector *s, size_t capacity);

/* Largest sampling weight accepted: the sum of 2^31 of them stays finite. */
#define FR_MAX_WEIGHT (1.7976931348623157e308 / 4294967296.0)

/* FR_OK if `priority` is acceptable to this selector: Prioritized rejects
 * NaN (FR_EPRIORITY_NAN), negative values (FR_EPRIORITY_NEG) and priorities
 * whose weight exceeds FR_MAX_WEIGHT (FR_EPRIORITY_BIG); heaps reject NaN.  O(1). */
int fr_selector_check(const fr_selector *s, double priority);

/* Add an absent slot.  The priority must have passed fr_selector_check.
 * O(1) for Uniform/Fifo/Lifo, O(log n) otherwise. */
void fr_selector_insert(fr_selector *s, int32_t slot, double priority);

/* Change the priority of a present slot (moves it in heaps; for heaps it also
 * counts as the most recent touch for tie-breaking).  No-op for Uniform, Fifo
 * and Lifo. */
void fr_selector_update(fr_selector *s, int32_t slot, double priority);

/* Hint the cache lines an update of `slot` will touch (Prioritized only). */
FR_INLINE void fr_selector_prefetch(const fr_selector *s, int32_t slot) {
    if (s->kind == FR_SEL_PRIORITIZED) fr_sumtree_prefetch(&s->tree, (size_t)slot);
}

/* Remove a present slot.  O(1) or O(log n). */
void fr_selector_remove(fr_selector *s, int32_t slot);

/* Pick one present slot (size > 0 required); *probability receives the
 * probability with which it was chosen. */
int32_t fr_selector_sample(fr_selector *s, fr_rng *rng, double *probability);

/* Pick n slots independently (size > 0 required), writing out[k] and prob[k].
 * Equivalent to n calls of fr_selector_sample; Prioritized descends the tree
 * for all of them at once.  `scratch` must hold n doubles. */
void fr_selector_sample_many(fr_selector *s, fr_rng *rng, size_t n,
                             int64_t *out, double *prob, double *scratch);

/* Batched weight changes: after fr_selector_batch_begin(s, n), inserts,
 * updates and removes of a Prioritized selector set leaf weights only, and
 * fr_selector_batch_end recomputes their ancestors once per level
 * (fr_sumtree_fix_up), leaving the tree exactly as the single calls would
 * have.  No sample, clear or reserve in between.  Room is reserved for n
 * changes; changes past n are applied at once, as without batching (still
 * exact).  FR_OK, or FR_ENOMEM (then nothing is batched).  No-ops for the
 * other kinds. */
int fr_selector_batch_begin(fr_selector *s, size_t n);
void fr_selector_batch_end(fr_selector *s);

/* Remove every slot.  O(capacity) for Prioritized, O(1) otherwise. */
void fr_selector_clear(fr_selector *s);

/* Weight (priority^exponent, 0 for priority 0) used by Prioritized. */
double fr_priority_weight(double priority, double exponent);

#endif /* FASTREPLAY_SELECTOR_H */
