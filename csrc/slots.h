/* Slot tables: rows addressed by slot number, for buffers that read by ring
 * position instead of sampling (rlightning's Storage, ALF's replayers).
 *
 * A slot table has `capacity` slots; an occupied slot holds one row of each
 * of its n_cols columns, as a reference to a row of a chunk (chunk.h) of the
 * table's store.  A write cuts each column's rows into chunks (raw ones of up
 * to FR_ROWS_RAW_CHUNK_BYTES, compressed ones of one row, so a random read
 * decodes only its row) and points the slots at them; a chunk holds one
 * reference per slot that points into it and is freed when the last of them
 * is overwritten, erased or cleared.  A read copies the rows of any slots
 * (repeats allowed) into stacked outputs: two dependent memory reads per
 * row and column (the slot's cell, the row), no per-item structure.
 *
 * The first write fixes the columns' specs (interned, trajectory.h); later
 * writes must give the same specs, until fr_slots_clear.
 *
 * Thread safety: every function takes the table's mutex, so any thread may
 * call any of them without the GIL; a read copies under the mutex (writes
 * wait for it), on the worker pool (pool.h) when it copies 128 KiB or more:
 * random rows are latency-bound and two threads keep twice the misses in
 * flight (ALF's replay(256, 8) of 2048 rows x 136 bytes: 94 -> 53 us).  Ownership: the table owns its cells' chunk references; the
 * caller keeps its arrays and output buffers for the length of a call.
 */
#ifndef FASTREPLAY_SLOTS_H
#define FASTREPLAY_SLOTS_H

#include "chunk.h"
#include "trajectory.h"

typedef struct fr_slots fr_slots;

/* A table of `capacity` (>= 1) empty slots whose chunks count in `store`
 * (retained).  NULL when out of memory. */
fr_slots *fr_slots_new(int64_t capacity, fr_store *store);
void fr_slots_free(fr_slots *s);

/* Row i of every column goes to slots[i] (0 <= slots[i] < capacity; a slot
 * given twice keeps its last row).  cols[c] points at n C-contiguous rows of
 * specs[c]; compression[c] is an FR_COMPRESSION_* choice (NULL: AUTO).  Chunk
 * keys count up from *chunk_key (advanced).  FR_OK; FR_EINVAL for a slot out
 * of range (*bad = its index) or n_cols differing from the table's; FR_EDTYPE
 * or FR_ESHAPE when column *bad differs from the table's spec; FR_ENOMEM.
 * On failure nothing changes. */
int fr_slots_write(fr_slots *s, int32_t n_cols, const fr_spec *specs,
                   const void *const *cols, int64_t n, const int64_t *slots,
                   const int32_t *compression, uint64_t *chunk_key, int64_t *bad);

/* Empty slots[0..n) (empty ones stay empty).  FR_OK, or FR_EINVAL for a slot
 * out of range (*bad = its index; nothing changes). */
int fr_slots_erase(fr_slots *s, int64_t n, const int64_t *slots, int64_t *bad);

/* Empty every slot and forget the specs. */
void fr_slots_clear(fr_slots *s);

/* Copy the rows of slots[0..n) into outs: column c of slots[i] at
 * outs[c] + i * row_bytes of c.  With `counter` (capacity int32s), add one to
 * counter[slots[i]] per read row, repeats included.  FR_OK; FR_EKEY_MISSING
 * for an empty slot or FR_EINVAL for one out of range (*bad = its index,
 * nothing copied or counted); FR_ECORRUPT when a chunk fails to decode
 * (*bad = -2 - the column). */
int fr_slots_read(fr_slots *s, int64_t n, const int64_t *slots, void *const *outs,
                  int32_t *counter, int64_t *bad);

/* Write the occupied slots, ascending, into out (room for `cap`); returns how
 * many there are (call again with a larger buffer if that exceeds cap). */
int64_t fr_slots_occupied(fr_slots *s, int64_t *out, int64_t cap);

/* Occupied slots; the number of columns (0 before the first write), and
 * spec of column c (NULL when out of range). */
int64_t fr_slots_size(fr_slots *s);
int32_t fr_slots_columns(fr_slots *s);
const fr_spec *fr_slots_spec(fr_slots *s, int32_t c);

#endif /* FASTREPLAY_SLOTS_H */
