/* fr_ring's layout, shared by ring.c (lifecycle, adds, priorities) and
 * ring_read.c (sampling and reads); nothing else includes this. */
#ifndef FASTREPLAY_RING_INTERNAL_H
#define FASTREPLAY_RING_INTERNAL_H

#include <pthread.h>
#include <string.h>

#include "chunk.h"
#include "ring.h"
#include "rng.h"
#include "sumtree.h"

/* A record's header: the transition's priority and times sampled, beside
 * its rows, so a sampled row costs no cache miss of its own for them (as
 * separate arrays they were 2 of the 3 misses per row: uniform sample 256
 * of 1M small rows 72 -> 22 us). */
typedef struct rec_head {
    double priority;
    int64_t times;
} rec_head;

struct fr_ring {
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* size grew, closed or sealed */
    int64_t cap, rec;           /* slots; bytes per record */
    int32_t n_cols;
    int64_t *row_bytes, *off;   /* per column: row size, offset in a record */
    int32_t *packed;            /* per column: 1 = a one-row chunk pointer */
    int any_packed;
    fr_store *store;            /* accounting of the chunks (retained) */
    uint64_t chunk_key;
    unsigned char *data;        /* cap records: a header, then the rows */
    int prioritized, closed, sealed;
    double exponent, memo_p, memo_w;
    fr_sumtree tree;
    fr_rng rng;
    uint64_t next_key;
    int64_t size;
    fr_ring_stats st;
};

#define HEAD(r, slot) ((rec_head *)((r)->data + (slot) * (r)->rec))

FR_INLINE int64_t fr_ring_slot(const fr_ring *r, uint64_t key) {
    return (int64_t)(key % (uint64_t)r->cap);
}

/* Fixed-size moves for the common row sizes (a call to memcpy otherwise). */
FR_INLINE void fr_ring_copy(unsigned char *dst, const unsigned char *src, int64_t n) {
    switch (n) {
    case 1: memcpy(dst, src, 1); break;
    case 4: memcpy(dst, src, 4); break;
    case 8: memcpy(dst, src, 8); break;
    case 16: memcpy(dst, src, 16); break;
    case 32: memcpy(dst, src, 32); break;
    default: memcpy(dst, src, (size_t)n);
    }
}

#endif /* FASTREPLAY_RING_INTERNAL_H */
