/* StructuredWriter plan (reverb-spec section 5.5): configs compiled to C
 * structs and evaluated after every append, without the GIL or any Python
 * object.  Each config is a list of pattern nodes (history slices of one
 * writer column relative to the newest step), conditions on the step, and
 * a priority function; when every condition holds and every referenced cell
 * exists, an item is created on the writer (fr_writer_create_item).
 *
 * The caller owns the arrays it passes to fr_sw_new (they are copied).  Not
 * thread-safe: the writer's thread drives it.
 */
#ifndef FASTREPLAY_STRUCTURED_H
#define FASTREPLAY_STRUCTURED_H

#include "writer.h"

enum { /* condition left-hand sides */
    FR_SW_STEP_INDEX = 0,     /* index of the newest step in the episode */
    FR_SW_STEPS_SINCE = 1,    /* steps since the config last made an item */
    FR_SW_BUFFER_LENGTH = 2,  /* steps in the history buffer */
    FR_SW_END_EPISODE = 3,    /* 1 only while end_episode evaluates */
    FR_SW_DATA = 4,           /* an int/bool scalar of the newest step */
};
enum { FR_SW_EQ = 0, FR_SW_GE = 1, FR_SW_MOD_EQ = 2 }; /* comparisons */
enum { FR_SW_CONSTANT = 0, FR_SW_TD_ERROR = 1 };       /* priority fns */

typedef struct {
    int32_t left;    /* FR_SW_* left-hand side */
    int32_t source;  /* FR_SW_DATA: index into the data values */
    int32_t cmp;     /* FR_SW_EQ, FR_SW_GE or FR_SW_MOD_EQ */
    int32_t inverse; /* negate the result */
    int64_t value;   /* right-hand side (the remainder for FR_SW_MOD_EQ) */
    int64_t mod;     /* FR_SW_MOD_EQ only, > 0 */
} fr_sw_condition;

typedef struct {
    int32_t col;       /* writer column */
    int32_t has_start; /* 0: the single (squeezed) cell at `stop` */
    int64_t start, stop, step; /* start < stop <= 0, step > 0 */
} fr_sw_node;

typedef struct {
    fr_table *table;
    int32_t n_nodes, n_conditions;
    const fr_sw_node *nodes;
    const fr_sw_condition *conditions;
    int32_t priority_fn;   /* FR_SW_CONSTANT or FR_SW_TD_ERROR */
    double priority;       /* the constant, or td_error's max weight */
    int32_t td_node;       /* FR_SW_TD_ERROR: the node whose cells hold deltas */
    int32_t structure_id;  /* items' nest (fr_trajectory.structure_id) */
} fr_sw_config;

typedef struct fr_sw fr_sw;

/* A plan over writer `w` (not owned) with n_data data-condition values. */
fr_sw *fr_sw_new(fr_writer *w, int32_t n_configs, const fr_sw_config *configs,
                 int32_t n_data);
void fr_sw_free(fr_sw *s);

/* Call before the append that opens a new step (no step is open). */
void fr_sw_begin_step(fr_sw *s);
/* The data-condition value `i` of the newest step (present = 0: absent). */
void fr_sw_set_data(fr_sw *s, int32_t i, int64_t value, int present);
/* Evaluate every config not yet applied in this step (end_episode = 1: only
 * the configs with an is_end_episode condition, which are false otherwise).
 * *created counts new items; on an error *bad_config names the config. */
int fr_sw_evaluate(fr_sw *s, int end_episode, int64_t *created,
                   int32_t *bad_config);
/* Start a new episode's counters (after the writer's end_episode). */
void fr_sw_end_episode(fr_sw *s);

#endif /* FASTREPLAY_STRUCTURED_H */
