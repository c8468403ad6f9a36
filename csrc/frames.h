/* Frame streams: each frame stored once, for ReplayBuffer(next_of=...,
 * stack_compress=...) (cpprb's names and meaning).
 *
 * A stream follows the values of one or more columns in the order they are
 * offered (obs_t, next_obs_t, obs_{t+1}, ...).  A value is k frames: the
 * slices along its last axis when the stream is stacked (k = that axis'
 * length), else the whole value (k = 1).  The stream remembers the last
 * value offered and the chunk rows that hold its frames.  A new value
 *   - equal to the last one (obs_{t+1} == next_obs_t) refers to its rows;
 *   - whose first k-1 frames are the last one's last k-1 (a stack sliding by
 *     one frame) refers to k-1 of them and stores its newest frame;
 *   - else (an episode start, or anything else) stores its frames,
 * and a new frame equal to the frame before it in the same value refers to
 * that frame's row (a reset stack repeats its first frame).  Matches are
 * found by comparing bytes, so every item reads back exactly what was
 * added, across episode boundaries and in any order of values: no
 * episode-end call is needed for correctness.
 *
 * Frames go into the stream's own chunks (rows of one frame), cut and
 * compressed like rows.h columns (raw chunks bounded to FR_FRAMES_RAW_CHUNK
 * bytes); an item refers to its k frames as k rows of a column of layout
 * FR_ROWS_LAST_AXIS (trajectory.h), and the gather rebuilds the stack on the
 * last axis.  Chunks are reference counted: a frame lives while an item or
 * the stream refers to it, whatever was evicted before.
 *
 * Not thread-safe: one call at a time per stream (the caller serializes).
 * The stream owns its last value and retains the chunks of its rows.
 */
#ifndef FASTREPLAY_FRAMES_H
#define FASTREPLAY_FRAMES_H

#include "column.h"
#include "table.h"
#include "trajectory.h"

/* Most bytes of a raw (uncompressed) frame chunk. */
#define FR_FRAMES_RAW_CHUNK (4 << 20)

typedef struct fr_frames fr_frames;

/* A stream of values of spec `value` (fixed-size dtype; stacked: at least
 * one axis, its last one the stack), its frame chunks compressed by
 * `compression` (FR_COMPRESSION_*).  NULL when out of memory or the spec
 * does not fit. */
fr_frames *fr_frames_new(const fr_spec *value, int stacked, int32_t compression);
void fr_frames_free(fr_frames *f);

/* Frames per value (k) and the interned spec of one frame. */
int32_t fr_frames_k(const fr_frames *f);
const fr_spec *fr_frames_frame_spec(const fr_frames *f);

/* Forget the last value (the next one stores all its frames). */
void fr_frames_reset(fr_frames *f);

/* As fr_insert_rows (rows.h), except that column c is offered to stream
 * streams[c] when that is not NULL (specs[c] must be its value spec): row by
 * row, in column order, so a next-of column follows its source column.
 * Such a column of item r is the value's k frame rows, layout
 * FR_ROWS_LAST_AXIS when stacked, else squeezed.  Streams advance even when
 * the table refuses items (their state stays valid).  FR_OK, FR_EPRIORITY_*,
 * FR_EINVAL, FR_ETIMEOUT, FR_ECLOSED or FR_ENOMEM. */
int fr_insert_frame_rows(fr_table *t, fr_store *store, int32_t n_cols,
                         const fr_spec *specs, const void *const *cols,
                         fr_frames *const *streams, int64_t n_rows,
                         const uint64_t *keys, const double *priorities,
                         const fr_chunker_options *opt, const int32_t *compression,
                         uint64_t chunk_key, int64_t timeout_ns, int64_t *n_done,
                         int64_t *bad_index);

/* Interleave k planes of n elements of `itemsize` bytes into dst
 * ([n, k]: element i of plane j at dst[(i * k + j) * itemsize]), and the
 * inverse.  The gather of FR_ROWS_LAST_AXIS columns and the stream's
 * comparisons use them. */
void fr_frames_interleave(unsigned char *dst, const unsigned char *const *planes,
                          int32_t k, int64_t n, int32_t itemsize);
void fr_frames_deinterleave(unsigned char *planes, const unsigned char *src,
                            int32_t k, int64_t n, int32_t itemsize);

#endif /* FASTREPLAY_FRAMES_H */
