/* The writer's private layout, shared by writer.c and writer_queue.c (the
 * queue of items waiting for their chunks).  Not for other modules: they use
 * writer.h.  Thread safety as writer.h: the caller serializes calls on one
 * writer. */
#ifndef FASTREPLAY_WRITER_INTERNAL_H
#define FASTREPLAY_WRITER_INTERNAL_H

#include "rng.h"
#include "writer.h"

#include <stdatomic.h>

/* A run of an item's refs: cells first, first + 1, ... (count of them) of
 * writer column col.  An item's runs are in reference order and never span
 * two of its trajectory columns. */
#define FR_INLINE_RUNS 4 /* history slices of up to 4 columns: no allocation */

typedef struct fr_pending_item {
    uint64_t key;
    double priority;
    fr_table *table;
    fr_trajectory *traj;
    int32_t n_refs, n_runs;
    /* Trajectory column c is run c, of its own writer column, of at most 64
     * cells (history slices): tuning reads its slices directly. */
    int run_columns;
    /* The refs, pinned while queued: heap when more than FR_INLINE_RUNS
     * runs (fr_wq_runs), else inline_runs. */
    fr_ref_run *heap;
    fr_ref_run inline_runs[FR_INLINE_RUNS];
} fr_pending_item;

static inline const fr_ref_run *fr_wq_runs(const fr_pending_item *it) {
    return it->heap ? it->heap : it->inline_runs;
}

struct fr_writer {
    fr_store *store;
    fr_sync *sync;
    fr_rng rng;
    fr_chunker_options default_opt;
    fr_column *cols;
    int64_t *last_set; /* per column: history position last written */
    int32_t n_cols, cap_cols;
    uint64_t episode_id;
    /* The next item's key bits: a random start, then consecutive.  The
     * table's key map keeps runs of consecutive keys in one cache line
     * (keymap.h), so a writer's inserts (and a FIFO table's evictions) miss
     * it once per run instead of once per item: the writer-step loop's share
     * fell from 1.17-1.25 to 1.09-1.14 us (paired rounds, 1M-item table). */
    uint64_t next_key;
    /* The next chunk's key: a random start, then consecutive, so that one
     * writer's chunks go out sorted (a remote client's outbox then skips an
     * argsort of every frame's chunk keys: 10-13% of that thread, perf,
     * session 20) and land in the server's key maps in runs (keymap.h). */
    uint64_t next_chunk_key;
    int64_t episode_steps;
    int64_t hlen; /* closed steps since the last clear */
    int step_open;
    /* A chunk the queue's front item waits for (it holds the chunk), or
     * NULL: the pump looks at that one chunk until it is ready instead of
     * every chunk of the item at each append and create_item. */
    const fr_chunk *front_waits;
    fr_pending_item *queue;
    int64_t q_head, q_len, q_cap;
    unsigned char *scratch;
    int64_t scratch_cap;
    atomic_int status;     /* FR_ECLOSED after close */
};

/* The queue of pending items, oldest first (a ring of w->q_cap entries, a
 * power of 2). */
fr_pending_item *fr_wq_at(fr_writer *w, int64_t i);
/* The free entry after the newest item, for the caller to fill and then
 * count with q_len++ (NULL without memory, the queue unchanged then). */
fr_pending_item *fr_wq_tail(fr_writer *w);
/* Record refs (cols[k], ids[k]) of an item whose trajectory columns hold
 * lens[0..n_columns) of them as runs in *it (FR_OK or FR_ENOMEM). */
int fr_wq_set_runs(fr_pending_item *it, int32_t n_columns, const int32_t *lens,
                   const int32_t *cols, const int64_t *ids);
/* Record the n runs `runs` (already formed) in *it (FR_OK or FR_ENOMEM). */
int fr_wq_store_runs(fr_pending_item *it, const fr_ref_run *runs, int32_t n);
/* Hand ready items at the head of the queue to their tables, in order. */
void fr_writer_pump(fr_writer *w);
/* Drop the oldest item's runs and its queue entry. */
void fr_wq_pop(fr_writer *w);
/* Tuning feedback (when `tune`) and unpins of an item leaving the writer. */
void fr_wq_release_refs(fr_writer *w, const fr_pending_item *it, int tune);

#endif /* FASTREPLAY_WRITER_INTERNAL_H */
