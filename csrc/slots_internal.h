/* The slot table's structure, shared by slots.c (writes) and slots_read.c
 * (reads); nothing outside those two files includes this. */
#ifndef FASTREPLAY_SLOTS_INTERNAL_H
#define FASTREPLAY_SLOTS_INTERNAL_H

#include "slots.h"

#include <pthread.h>

typedef struct cell {
    fr_chunk *chunk; /* NULL: the slot is empty */
    int64_t row;
} cell;

/* A slot's cells: cell 0 is a record of every column stored raw, packed
 * back to back (a random read then touches one or two cache lines instead
 * of one per column: 256 random slots of 200k with four small columns,
 * 45 -> see slots.h), when there is such a column; then one cell per
 * compressed column. */
struct fr_slots {
    pthread_mutex_t mu;
    int64_t capacity, size;
    int32_t n_cols;        /* 0 until the first write (and after a clear) */
    int32_t n_cells;       /* cells per slot */
    int32_t has_record;    /* cell 0 is the record */
    const fr_spec **specs; /* n_cols interned specs */
    int32_t *cell_of;      /* per column: its cell */
    int64_t *offset_of;    /* per column: its byte offset in the record (packed) */
    int64_t record_bytes;
    cell *cells;           /* capacity * n_cells, slot-major */
    int64_t max_row_bytes; /* of the compressed columns: a read's scratch */
    fr_store *store;
};

#endif /* FASTREPLAY_SLOTS_INTERNAL_H */
