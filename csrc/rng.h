/* xoshiro256** pseudo random generator, seeded through splitmix64.
 *
 * Each table owns one generator and uses it only under the table lock.  The
 * generator is deterministic for a given seed so tests can fix sampling.
 */
#ifndef FASTREPLAY_RNG_H
#define FASTREPLAY_RNG_H

#include "fr_common.h"

typedef struct fr_rng {
    uint64_t s[4];
} fr_rng;

FR_INLINE uint64_t fr_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Seed all four words from one 64-bit seed.  O(1). */
FR_INLINE void fr_rng_seed(fr_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = fr_splitmix64(&seed);
}

FR_INLINE uint64_t fr_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* Next 64 random bits.  O(1). */
FR_INLINE uint64_t fr_rng_next(fr_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = fr_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = fr_rotl(s[3], 45);
    return result;
}

/* Uniform double in [0, 1) with 53 random bits. */
FR_INLINE double fr_rng_uniform(fr_rng *r) {
    return (double)(fr_rng_next(r) >> 11) * 0x1.0p-53;
}

/* Uniform integer in [0, n), n > 0 (Lemire's nearly divisionless method). */
FR_INLINE uint64_t fr_rng_below(fr_rng *r, uint64_t n) {
    unsigned __int128 m = (unsigned __int128)fr_rng_next(r) * n;
    uint64_t lo = (uint64_t)m;
    if (lo < n) {
        uint64_t threshold = (0 - n) % n;
        while (lo < threshold) {
            m = (unsigned __int128)fr_rng_next(r) * n;
            lo = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

#endif /* FASTREPLAY_RNG_H */
