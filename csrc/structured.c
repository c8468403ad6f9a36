#include "structured.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    fr_sw_config cfg;      /* nodes/conditions point into the plan's arrays */
    int64_t steps_since;   /* steps since this config last made an item */
    int64_t applied;       /* step serial it last made an item in, or -1 */
    int has_end_episode;   /* has an is_end_episode condition */
    int32_t max_refs;      /* cells of one item */
} sw_config;

struct fr_sw {
    fr_writer *w;
    int32_t n_configs, n_data;
    sw_config *configs;
    fr_sw_node *nodes;
    fr_sw_condition *conditions;
    int64_t *data;         /* data-condition values of the newest step */
    unsigned char *present;
    int64_t serial;        /* steps begun since the plan was made */
    /* scratch for one item */
    int32_t *lens, *cols;
    uint8_t *squeeze;
    int64_t *ids;
    fr_ref_run *runs;      /* one per node when each is consecutive cells */
};

static int64_t node_count(const fr_sw_node *n) {
    if (!n->has_start) return 1;
    return (n->stop - n->start + n->step - 1) / n->step;
}

fr_sw *fr_sw_new(fr_writer *w, int32_t n_configs, const fr_sw_config *configs,
                 int32_t n_data) {
    fr_sw *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    int64_t n_nodes = 0, n_conds = 0, max_nodes = 1, max_refs = 1;
    for (int32_t i = 0; i < n_configs; i++) {
        n_nodes += configs[i].n_nodes;
        n_conds += configs[i].n_conditions;
        if (configs[i].n_nodes > max_nodes) max_nodes = configs[i].n_nodes;
    }
    s->w = w;
    s->n_configs = n_configs;
    s->n_data = n_data;
    s->configs = calloc((size_t)n_configs + 1, sizeof *s->configs);
    s->nodes = calloc((size_t)n_nodes + 1, sizeof *s->nodes);
    s->conditions = calloc((size_t)n_conds + 1, sizeof *s->conditions);
    s->data = calloc((size_t)n_data + 1, sizeof *s->data);
    s->present = calloc((size_t)n_data + 1, 1);
    if (!s->configs || !s->nodes || !s->conditions || !s->data || !s->present) {
        fr_sw_free(s);
        return NULL;
    }
    fr_sw_node *nodes = s->nodes;
    fr_sw_condition *conds = s->conditions;
    for (int32_t i = 0; i < n_configs; i++) {
        sw_config *c = &s->configs[i];
        c->cfg = configs[i];
        memcpy(nodes, configs[i].nodes, (size_t)configs[i].n_nodes * sizeof *nodes);
        memcpy(conds, configs[i].conditions,
               (size_t)configs[i].n_conditions * sizeof *conds);
        c->cfg.nodes = nodes;
        c->cfg.conditions = conds;
        c->applied = -1;
        int64_t refs = 0;
        for (int32_t k = 0; k < configs[i].n_nodes; k++) refs += node_count(&nodes[k]);
        c->max_refs = (int32_t)refs;
        if (refs > max_refs) max_refs = refs;
        for (int32_t k = 0; k < configs[i].n_conditions; k++)
            c->has_end_episode |= conds[k].left == FR_SW_END_EPISODE;
        nodes += configs[i].n_nodes;
        conds += configs[i].n_conditions;
    }
    s->lens = malloc((size_t)max_nodes * sizeof *s->lens);
    s->squeeze = malloc((size_t)max_nodes);
    s->cols = malloc((size_t)max_refs * sizeof *s->cols);
    s->ids = malloc((size_t)max_refs * sizeof *s->ids);
    s->runs = malloc((size_t)max_nodes * sizeof *s->runs);
    if (!s->lens || !s->squeeze || !s->cols || !s->ids || !s->runs) {
        fr_sw_free(s);
        return NULL;
    }
    return s;
}

void fr_sw_free(fr_sw *s) {
    if (!s) return;
    free(s->configs);
    free(s->nodes);
    free(s->conditions);
    free(s->data);
    free(s->present);
    free(s->lens);
    free(s->squeeze);
    free(s->cols);
    free(s->ids);
    free(s->runs);
    free(s);
}

void fr_sw_begin_step(fr_sw *s) {
    s->serial++;
    for (int32_t i = 0; i < s->n_configs; i++) s->configs[i].steps_since++;
    memset(s->present, 0, (size_t)s->n_data);
}

void fr_sw_set_data(fr_sw *s, int32_t i, int64_t value, int present) {
    s->data[i] = value;
    s->present[i] = (unsigned char)(present != 0);
}

void fr_sw_end_episode(fr_sw *s) {
    /* steps_since_applied carries over into the next episode (as Reverb). */
    memset(s->present, 0, (size_t)s->n_data);
}

/* Whether the newest step holds a value of a field c references (pattern
 * or data condition): Reverb applies a config only then. */
static int touches_newest_step(const fr_sw *s, const sw_config *c) {
    for (int32_t k = 0; k < c->cfg.n_nodes; k++)
        if (fr_writer_set_in_newest_step(s->w, c->cfg.nodes[k].col)) return 1;
    for (int32_t k = 0; k < c->cfg.n_conditions; k++)
        if (c->cfg.conditions[k].left == FR_SW_DATA &&
            s->present[c->cfg.conditions[k].source])
            return 1;
    return 0;
}

static int holds(const fr_sw *s, const sw_config *c, const fr_sw_condition *k,
                 int64_t step_index, int64_t hlen, int end_episode) {
    int64_t v;
    switch (k->left) {
    case FR_SW_STEP_INDEX: v = step_index; break;
    case FR_SW_STEPS_SINCE: v = c->steps_since; break;
    case FR_SW_BUFFER_LENGTH: v = hlen; break;
    case FR_SW_END_EPISODE: v = end_episode; break;
    default: /* FR_SW_DATA: an absent value fails whatever the comparison */
        if (!s->present[k->source]) return 0;
        v = s->data[k->source];
    }
    int ok;
    if (k->cmp == FR_SW_EQ) ok = v == k->value;
    else if (k->cmp == FR_SW_GE) ok = v >= k->value;
    else ok = v % k->mod == k->value; /* C's truncated modulo, as Reverb */
    return k->inverse ? !ok : ok;
}

/* max|d| * w + mean|d| * (1 - w) over the cells of the td node. */
static int td_priority(fr_sw *s, const sw_config *c, const int64_t *ids,
                       int32_t n, double *out) {
    const fr_sw_node *node = &c->cfg.nodes[c->cfg.td_node];
    const fr_spec *spec = &fr_writer_column(s->w, node->col)->spec;
    if (spec->ndim != 0) return FR_ESHAPE;
    int is_float = spec->dtype == 'f' && (spec->itemsize == 4 || spec->itemsize == 8);
    int is_int = spec->dtype == 'i' && (spec->itemsize == 4 || spec->itemsize == 8);
    if (!is_float && !is_int) return FR_EDTYPE;
    double max = 0.0, sum = 0.0;
    for (int32_t k = 0; k < n; k++) {
        union { float f; double d; int32_t i; int64_t l; } v;
        int rc = fr_writer_read_cell(s->w, node->col, ids[k], &v);
        if (rc != FR_OK) return rc;
        double x = is_float ? (spec->itemsize == 4 ? v.f : v.d)
                            : (spec->itemsize == 4 ? v.i : (double)v.l);
        x = fabs(x);
        if (x > max || isnan(x)) max = x;
        sum += x;
    }
    double w = c->cfg.priority;
    *out = w * max + (1.0 - w) * (n ? sum / n : 0.0);
    return FR_OK;
}

/* The item's nodes (ids and lens filled) as s->runs when each is a run of
 * consecutive cells of its column (h[k][-1], h[k][-n:], a value in every
 * step): fr_writer_create_item_runs then makes the same item without
 * expanding and regrouping the refs (~1/5 of a StructuredWriter's cost a
 * one-item step, session 22). */
static int as_runs(fr_sw *s, const sw_config *c) {
    for (int32_t k = 0, at = 0; k < c->cfg.n_nodes; at += s->lens[k], k++) {
        for (int32_t j = 1; j < s->lens[k]; j++)
            if (s->ids[at + j] != s->ids[at] + j) return 0;
        s->runs[k] = (fr_ref_run){s->ids[at], c->cfg.nodes[k].col, s->lens[k]};
    }
    return 1;
}

/* Build and create c's item if every referenced cell exists (*made = 1). */
static int make_item(fr_sw *s, const sw_config *c, int64_t hlen, int *made) {
    *made = 0;
    int32_t at = 0, td_at = 0, td_n = 0;
    for (int32_t k = 0; k < c->cfg.n_nodes; k++) {
        const fr_sw_node *node = &c->cfg.nodes[k];
        int64_t first = hlen + (node->has_start ? node->start : node->stop);
        int64_t count = node_count(node), step = node->has_start ? node->step : 1;
        if (first < 0) return FR_OK; /* not enough history: skip silently */
        if (fr_writer_cells_range(s->w, node->col, first, step, count, s->ids + at))
            return FR_OK;            /* a missing value: skip silently */
        for (int64_t j = 0; j < count; j++) s->cols[at + j] = node->col;
        if (k == c->cfg.td_node) td_at = at, td_n = (int32_t)count;
        s->lens[k] = (int32_t)count;
        s->squeeze[k] = !node->has_start;
        at += (int32_t)count;
    }
    double priority = c->cfg.priority;
    if (c->cfg.priority_fn == FR_SW_TD_ERROR) {
        int rc = td_priority(s, c, s->ids + td_at, td_n, &priority);
        if (rc != FR_OK) return rc;
    }
    uint64_t key;
    int32_t bad_column, bad_ref;
    int rc = as_runs(s, c)
                 ? fr_writer_create_item_runs(s->w, c->cfg.table, priority,
                                              c->cfg.structure_id, c->cfg.n_nodes,
                                              s->runs, s->squeeze, &key, &bad_column,
                                              &bad_ref)
                 : fr_writer_create_item(s->w, c->cfg.table, priority,
                                         c->cfg.structure_id, c->cfg.n_nodes,
                                         s->lens, s->squeeze, s->cols, s->ids, &key,
                                         &bad_column, &bad_ref);
    *made = rc == FR_OK;
    return rc;
}

int fr_sw_evaluate(fr_sw *s, int end_episode, int64_t *created,
                   int32_t *bad_config) {
    *created = 0;
    *bad_config = -1;
    int64_t hlen = fr_writer_history_len(s->w);
    if (hlen == 0) return FR_OK;
    int64_t step_index =
        fr_writer_episode_steps(s->w) - 1 + fr_writer_step_open(s->w);
    for (int32_t i = 0; i < s->n_configs; i++) {
        sw_config *c = &s->configs[i];
        if (c->applied == s->serial) continue;
        if (end_episode && !c->has_end_episode) continue;
        if (!touches_newest_step(s, c)) continue;
        int ok = 1;
        for (int32_t k = 0; ok && k < c->cfg.n_conditions; k++)
            ok = holds(s, c, &c->cfg.conditions[k], step_index, hlen, end_episode);
        if (!ok) continue;
        int made;
        int rc = make_item(s, c, hlen, &made);
        if (rc != FR_OK) {
            *bad_config = i;
            return rc;
        }
        if (made) {
            c->applied = s->serial;
            c->steps_since = 0;
            (*created)++;
        }
    }
    return FR_OK;
}
