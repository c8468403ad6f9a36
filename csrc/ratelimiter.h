/* Reverb's rate limiter (reverb-spec section 3.7), as pure arithmetic.
 *
 * Nothing blocks here: the table waits on its condition variables while these
 * predicates say no.  Counters change only under the table lock.
 */
#ifndef FASTREPLAY_RATELIMITER_H
#define FASTREPLAY_RATELIMITER_H

#include "fr_common.h"

typedef struct fr_rate_limiter {
    double samples_per_insert;
    int64_t min_size_to_sample;
    double min_diff;
    double max_diff;
    int64_t inserts;
    int64_t samples;
    int64_t deletes;
} fr_rate_limiter;

/* True iff n (>= 1) more samples may be taken now: the table holds at least
 * min_size_to_sample items and inserts*spi - samples - n >= min_diff. */
FR_INLINE int fr_rate_limiter_can_sample(const fr_rate_limiter *r, int64_t n) {
    if (r->inserts - r->deletes < r->min_size_to_sample) return 0;
    return (double)r->inserts * r->samples_per_insert - (double)r->samples -
               (double)n >=
           r->min_diff;
}

/* True iff n (>= 1) more inserts may be made now: always while the table
 * would stay at or below min_size_to_sample, otherwise iff
 * (inserts + n)*spi - samples <= max_diff. */
FR_INLINE int fr_rate_limiter_can_insert(const fr_rate_limiter *r, int64_t n) {
    if (r->inserts + n - r->deletes <= r->min_size_to_sample) return 1;
    return (double)(r->inserts + n) * r->samples_per_insert -
               (double)r->samples <=
           r->max_diff;
}

#endif /* FASTREPLAY_RATELIMITER_H */
