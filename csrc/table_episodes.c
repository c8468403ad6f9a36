#define _POSIX_C_SOURCE 200809L
/* Episode accounting of a table (Reverb's num_episodes and
 * num_deleted_episodes): per episode id, how many runs of data of current
 * items come from it.  Only whether a count is zero matters, and an item adds
 * and removes the same runs (ops.episodes is deterministic), so a run count
 * serves as well as a count of items and needs no memory per item.  Called
 * with the table lock held. */

#include "table_internal.h"

enum { FR_EPISODE_PAGE = 16 };

/* Drop one reference of `episode`; count the episode as deleted when it was
 * the last and `deleting`. */
static void uncount(fr_table *t, uint64_t episode, int deleting) {
    int32_t refs = fr_keymap_get(&t->episodes, episode);
    if (refs > 1) {
        fr_keymap_set(&t->episodes, episode, refs - 1);
    } else if (refs == 1) {
        fr_keymap_del(&t->episodes, episode);
        if (deleting) t->st.num_deleted_episodes++;
    }
}

/* Uncount the first `limit` runs of payload (all when limit < 0). */
static void uncount_runs(fr_table *t, uint64_t payload, int64_t limit,
                         int deleting) {
    uint64_t page[FR_EPISODE_PAGE];
    int32_t pos = 0, n;
    while (limit != 0 &&
           (n = t->ops.episodes(t->ops.ctx, payload, &pos, page, FR_EPISODE_PAGE)) > 0) {
        for (int32_t i = 0; i < n && limit != 0; i++, limit--)
            uncount(t, page[i], deleting);
    }
}

int fr_table_episodes_add(fr_table *t, uint64_t payload) {
    if (!t->ops.episodes || !payload) return FR_OK;
    uint64_t page[FR_EPISODE_PAGE];
    int32_t pos = 0, n;
    int64_t counted = 0;
    while ((n = t->ops.episodes(t->ops.ctx, payload, &pos, page, FR_EPISODE_PAGE)) > 0) {
        for (int32_t i = 0; i < n; i++, counted++) {
            int32_t refs = fr_keymap_get(&t->episodes, page[i]);
            if (refs >= 0) {
                fr_keymap_set(&t->episodes, page[i], refs + 1);
            } else if (fr_keymap_put(&t->episodes, page[i], 1) != FR_OK) {
                uncount_runs(t, payload, counted, 0);
                return FR_ENOMEM;
            }
        }
    }
    return FR_OK;
}

void fr_table_episodes_remove(fr_table *t, uint64_t payload) {
    if (!t->ops.episodes || !payload) return;
    uncount_runs(t, payload, -1, 1);
}
