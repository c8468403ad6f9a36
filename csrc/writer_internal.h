/* The writer's private layout, shared by writer.c and writer_queue.c (the
 * queue of items waiting for their chunks).  Not for other modules: they use
 * writer.h.  Thread safety as writer.h: the caller serializes calls on one
 * writer. */
#ifndef FASTREPLAY_WRITER_INTERNAL_H
#define FASTREPLAY_WRITER_INTERNAL_H

#include "writer.h"

#include <stdatomic.h>

typedef struct fr_pending_item {
    uint64_t key;
    double priority;
    fr_table *table;
    fr_trajectory *traj;
    int32_t n_refs;
    int64_t *ids;  /* the item's refs, pinned while queued (one allocation: */
    int32_t *cols; /* cols follows ids) */
} fr_pending_item;

struct fr_writer {
    fr_store *store;
    fr_sync *sync;
    fr_rng rng;
    fr_chunker_options default_opt;
    fr_column *cols;
    int64_t *last_set; /* per column: history position last written */
    int32_t n_cols, cap_cols;
    uint64_t episode_id;
    int64_t episode_steps;
    int64_t hlen; /* closed steps since the last clear */
    int step_open;
    fr_pending_item *queue;
    int64_t q_head, q_len, q_cap;
    unsigned char *scratch;
    int64_t scratch_cap;
    atomic_int status;     /* FR_ECLOSED after close */
};

/* The queue of pending items, oldest first (a ring of w->q_cap entries). */
fr_pending_item *fr_wq_at(fr_writer *w, int64_t i);
/* Append an item (FR_OK or FR_ENOMEM, the queue unchanged then). */
int fr_wq_push(fr_writer *w, fr_pending_item it);
/* Drop the oldest item's reference arrays and its queue entry. */
void fr_wq_pop(fr_writer *w);
/* Tuning feedback (when `tune`) and unpins of an item leaving the writer;
 * without memory for its runs, no feedback. */
void fr_wq_release_refs(fr_writer *w, const fr_pending_item *it, int tune);

#endif /* FASTREPLAY_WRITER_INTERNAL_H */
