# Declarations of the C core, one block per header in csrc/, in header order.
# This is the only place C is declared; _core.pyx cimports it.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t


cdef extern from "fr_common.h" nogil:
    enum fr_status:
        FR_OK
        FR_ENOMEM
        FR_EINVAL
        FR_EPRIORITY_NAN
        FR_EPRIORITY_NEG
        FR_EKEY_EXISTS
        FR_EKEY_MISSING
        FR_ETIMEOUT
        FR_ECLOSED
        FR_EEMPTY
        FR_EFULL
        FR_EBUSY
        FR_EEXPIRED
        FR_EDTYPE
        FR_ESHAPE
        FR_EREPEATED
        FR_ESQUEEZE
        FR_ECORRUPT
        FR_EPRIORITY_BIG
        FR_ETABLE_FULL
        FR_EINTR
        FR_EASYNC
        FR_ESAMPLE_TIMEOUT
        FR_ESYSTEM

    ctypedef int (*fr_interrupt_fn)() noexcept nogil
    void fr_interrupt_install(fr_interrupt_fn hook)


cdef extern from "shm.h" nogil:
    enum:
        FR_SHM_NAME_MAX
    void *fr_shm_create(const char *name, size_t size, int writable)
    void *fr_shm_attach(const char *name, size_t size, int writable)
    int fr_shm_unlink(const char *name)
    void fr_shm_unmap(void *p, size_t size)


cdef extern from "mem.h" nogil:
    void *fr_alloc_large(size_t n)
    void fr_free_large(void *p, size_t n)


cdef extern from "handoff.h" nogil:
    ctypedef int (*fr_handoff_fn)(void *arg) noexcept nogil
    int fr_handoff_run(fr_handoff_fn fn, void *arg)
    void fr_handoff_acquired()
    int fr_handoff_cores()


cdef extern from "chunk.h" nogil:
    ctypedef int (*fr_lz4_compress_fn)(const char *src, char *dst, int src_size,
                                      int dst_capacity) noexcept nogil
    ctypedef int (*fr_lz4_decompress_fn)(const char *src, char *dst,
                                        int compressed_size,
                                        int dst_capacity) noexcept nogil
    ctypedef int (*fr_lz4_bound_fn)(int input_size) noexcept nogil
    ctypedef int (*fr_lz4_partial_fn)(const char *src, char *dst, int compressed_size,
                                      int target, int dst_capacity) noexcept nogil
    void fr_codec_install_partial(fr_lz4_partial_fn partial)
    void fr_codec_install(fr_lz4_compress_fn compress,
                          fr_lz4_decompress_fn decompress, fr_lz4_bound_fn bound)
    int fr_codec_available()

    ctypedef struct fr_store:
        pass
    ctypedef struct fr_chunk:
        uint64_t key
        uint64_t episode_id
        int64_t first_step
        int64_t last_step
        int64_t row_bytes
        int32_t n_rows
        int32_t compressed
        int64_t stored_bytes
        unsigned char *data
    void fr_chunk_retain(fr_chunk *c)
    void fr_chunk_release(fr_chunk *c)
    int64_t fr_chunk_refs(const fr_chunk *c)
    int fr_chunk_ready(const fr_chunk *c)
    enum:
        FR_VAR_ROWS
    int64_t fr_chunk_var_scratch_bytes(const fr_chunk *c)
    int fr_chunk_var_data(const fr_chunk *c, void *scratch, const int64_t **offsets,
                          const unsigned char **payload)
    fr_chunk *fr_chunk_restore(fr_store *store, uint64_t key, uint64_t episode_id,
                               int64_t first_step, int64_t last_step,
                               int64_t row_bytes, int32_t n_rows, int compressed,
                               const void *data, int64_t stored_bytes)
    fr_store *fr_store_new()
    void fr_store_retain(fr_store *s)
    void fr_store_release(fr_store *s)
    void fr_store_stats(fr_store *s, int64_t out[3])


cdef extern from "keymap.h" nogil:
    ctypedef struct fr_keymap:
        size_t size
    int fr_keymap_init(fr_keymap *m)
    void fr_keymap_free(fr_keymap *m)
    void fr_keymap_clear(fr_keymap *m)
    int32_t fr_keymap_get(const fr_keymap *m, uint64_t key)
    int fr_keymap_put(fr_keymap *m, uint64_t key, int32_t val)
    int32_t fr_keymap_del(fr_keymap *m, uint64_t key)


cdef extern from "rng.h" nogil:
    ctypedef struct fr_rng:
        uint64_t s[4]
    void fr_rng_seed(fr_rng *r, uint64_t seed)
    double fr_rng_uniform(fr_rng *r)


cdef extern from "sumtree.h" nogil:
    ctypedef struct fr_sumtree:
        size_t capacity
        int depth
    int fr_sumtree_init(fr_sumtree *t, size_t capacity)
    void fr_sumtree_free(fr_sumtree *t)
    int fr_sumtree_reserve(fr_sumtree *t, size_t capacity)
    void fr_sumtree_clear(fr_sumtree *t)
    void fr_sumtree_set(fr_sumtree *t, size_t i, double w)
    void fr_sumtree_set_leaf(fr_sumtree *t, size_t i, double w)
    void fr_sumtree_fix_up(fr_sumtree *t, size_t *idx, size_t n)
    double fr_sumtree_get(const fr_sumtree *t, size_t i)
    double fr_sumtree_total(const fr_sumtree *t)
    size_t fr_sumtree_find(const fr_sumtree *t, double u)
    void fr_sumtree_find_many(const fr_sumtree *t, size_t n, const double *u,
                              int64_t *out)


cdef extern from "selector.h" nogil:
    enum fr_selector_kind:
        FR_SEL_UNIFORM
        FR_SEL_PRIORITIZED
        FR_SEL_FIFO
        FR_SEL_LIFO
        FR_SEL_MIN_HEAP
        FR_SEL_MAX_HEAP
    double fr_priority_weight(double priority, double exponent)


cdef extern from "ratelimiter.h" nogil:
    ctypedef struct fr_rate_limiter:
        double samples_per_insert
        int64_t min_size_to_sample
        double min_diff
        double max_diff
        int64_t inserts
        int64_t samples
        int64_t deletes


cdef extern from "table.h" nogil:
    ctypedef struct fr_payload_ops:
        void (*retain)(void *ctx, uint64_t payload) noexcept nogil
        void (*release)(void *ctx, uint64_t payload) noexcept nogil
        void *ctx
        int32_t (*episodes)(void *ctx, uint64_t payload, int32_t *pos,
                            uint64_t *out, int32_t cap) noexcept nogil
        void (*release_many)(void *ctx, const uint64_t *payloads,
                             int64_t n) noexcept nogil

    ctypedef struct fr_item:
        uint64_t key
        double priority
        int64_t times_sampled
        uint64_t inserted_seq
        uint64_t payload

    ctypedef struct fr_table_stats:
        int64_t size
        int64_t max_size
        int64_t max_times_sampled
        int64_t num_inserts
        int64_t num_updates
        int64_t num_samples
        int64_t num_unique_samples
        int64_t num_deletes
        int64_t num_evictions
        int64_t num_expired
        int64_t rl_inserts
        int64_t rl_samples
        int64_t rl_deletes
        int64_t insert_stall_ns
        int64_t sample_stall_ns
        int64_t num_insert_stalls
        int64_t num_sample_stalls
        int64_t num_episodes
        int64_t num_deleted_episodes

    ctypedef struct fr_table:
        pass

    fr_table *fr_table_new(int sampler_kind, double sampler_exponent,
                           int remover_kind, double remover_exponent,
                           int64_t max_size, int64_t max_times_sampled,
                           fr_rate_limiter limiter, uint64_t seed,
                           fr_payload_ops ops)
    int fr_table_create(int sampler_kind, double sampler_exponent,
                        int remover_kind, double remover_exponent,
                        int64_t max_size, int64_t max_times_sampled,
                        fr_rate_limiter limiter, uint64_t seed,
                        fr_payload_ops ops, fr_table **out)
    void fr_table_free(fr_table *t)
    void fr_table_close(fr_table *t)
    int fr_table_insert(fr_table *t, uint64_t key, double priority,
                        uint64_t payload, int64_t timeout_ns)
    int fr_table_insert_many(fr_table *t, int64_t n, const uint64_t *keys,
                             const double *priorities, const uint64_t *payloads,
                             int64_t timeout_ns, int64_t *n_done,
                             int64_t *bad_index)
    int fr_table_sample(fr_table *t, int64_t n, int64_t timeout_ns,
                        uint64_t *keys, double *probabilities,
                        double *priorities, int64_t *times_sampled,
                        int64_t *table_sizes, uint64_t *payloads,
                        int64_t *n_done)
    int fr_table_mutate(fr_table *t, int64_t n_updates, const uint64_t *keys,
                        const double *priorities, int64_t n_deletes,
                        const uint64_t *delete_keys, int64_t *bad_index)
    void fr_table_reset(fr_table *t)
    int fr_table_can_sample(fr_table *t, int64_t n)
    int fr_table_can_insert(fr_table *t, int64_t n)
    int fr_table_check_priority(const fr_table *t, double priority)
    int64_t fr_table_size(fr_table *t)
    void fr_table_stats_get(fr_table *t, fr_table_stats *out)
    int fr_table_restore_item(fr_table *t, uint64_t key, double priority,
                              int64_t times_sampled, uint64_t payload)
    void fr_table_restore_counters(fr_table *t, int64_t inserts, int64_t samples,
                                   int64_t deletes, const fr_table_stats *stats)
    int fr_table_get(fr_table *t, uint64_t key, fr_item *out)
    int64_t fr_table_items(fr_table *t, fr_item *out, int64_t cap)
    int64_t fr_table_items_oldest(fr_table *t, fr_item *out, int64_t cap)
    int64_t fr_table_take_oldest(fr_table *t, fr_item *out, int64_t cap)
    int fr_table_skip_episodes(fr_table *t)
    int fr_table_set_key_prefix(fr_table *t, int32_t prefix)
    int32_t fr_table_key_prefix(const fr_table *t)
    double fr_table_priority_mass(fr_table *t, int64_t *size)


cdef extern from "trajectory.h" nogil:
    ctypedef struct fr_gather_key:
        pass
    enum:
        FR_MAX_NDIM
        FR_ROWS_LAST_AXIS
    ctypedef struct fr_spec:
        int32_t dtype
        int32_t itemsize
        int32_t ndim
        int64_t shape[16]
        int64_t row_bytes
    ctypedef struct fr_traj_column:
        const fr_spec *spec
        int32_t first_slice
        int32_t n_slices
        int32_t length
        int32_t squeeze
    ctypedef struct fr_slice:
        fr_chunk *chunk
        int32_t offset
        int32_t length
    ctypedef struct fr_trajectory:
        int32_t n_columns
        int32_t n_slices
        int32_t structure_id
        fr_traj_column *columns
        fr_slice *slices
    fr_trajectory *fr_trajectory_new(int32_t n_columns, int32_t max_slices)
    void fr_trajectory_push_row(fr_trajectory *t, int32_t col, fr_chunk *chunk,
                                int32_t offset)
    void fr_trajectory_push_slice(fr_trajectory *t, int32_t col, fr_chunk *chunk,
                                  int32_t offset, int32_t length)
    void fr_trajectory_retain(fr_trajectory *t)
    void fr_trajectory_release(fr_trajectory *t)
    int fr_trajectory_read_column(const fr_trajectory *t, int32_t col, void *dst,
                                  void *scratch)
    int64_t fr_trajectory_scratch_bytes(const fr_trajectory *t)
    int fr_trajectories_check(fr_trajectory *const *ts, int64_t n,
                              int64_t *scratch, int32_t *bad_column)
    int fr_trajectories_gather(fr_trajectory *const *ts, int64_t n, int32_t col,
                               void *out, int64_t item_stride, void *cache,
                               int64_t cache_bytes_each, int32_t cache_slots)
    int fr_spec_equal(const fr_spec *a, const fr_spec *b)
    int fr_spec_is_var(const fr_spec *s)
    const fr_spec *fr_spec_intern(const fr_spec *s)
    void fr_trajectory_payload_retain(void *ctx, uint64_t payload) noexcept nogil
    void fr_trajectory_payload_release(void *ctx, uint64_t payload) noexcept nogil
    int32_t fr_trajectory_payload_episodes(void *ctx, uint64_t payload, int32_t *pos,
                                           uint64_t *out, int32_t cap) noexcept nogil


cdef extern from "traj_bulk.h" nogil:
    void fr_trajectory_payload_release_many(void *ctx, const uint64_t *payloads,
                                            int64_t n) noexcept nogil


cdef extern from "pool.h" nogil:
    int fr_pool_threads()
    void fr_pool_set_threads(int n)


cdef extern from "gather.h" nogil:
    ctypedef struct fr_gather_job:
        fr_trajectory *const *ts
        int64_t n
        int32_t n_cols
        void *const *outs
        const int64_t *strides
        int64_t most
    int fr_gather_batch(const fr_gather_job *job, int32_t *failed)
    void fr_gather_cache_trim()
    int fr_gather_cache_clear()
    int64_t fr_gather_cache_held()
    void fr_gather_set_flags(int flags)
    enum:
        FR_GATHER_ALWAYS_POOL


cdef extern from "column.h" nogil:
    int fr_compress_choice(const fr_spec *spec, int32_t compression)
    ctypedef struct fr_chunker_options:
        int32_t max_chunk_length
        int32_t num_keep_alive_refs
        int32_t autotune
        double throughput_weight
    int FR_COMPRESSION_AUTO
    int FR_COMPRESSION_NONE
    int FR_COMPRESSION_LZ4
    void fr_column_set_compression(fr_column *c, int32_t compression)
    int fr_chunker_options_validate(const fr_chunker_options *o)
    int32_t fr_chunker_start_length(const fr_chunker_options *o)
    ctypedef struct fr_column:
        int has_spec
        fr_spec spec
        int compress
        int32_t compression
        fr_chunker_options opt
        int32_t max_len
        int32_t buf_rows
        int64_t n_appended
        int64_t alive_from


cdef extern from "writer.h" nogil:
    ctypedef struct fr_writer:
        pass
    fr_writer *fr_writer_new(fr_store *store, uint64_t seed,
                             fr_chunker_options default_opt)
    int fr_writer_create(fr_store *store, uint64_t seed,
                         fr_chunker_options default_opt, fr_writer **out)
    int fr_writer_take_failure(fr_writer *w, uint64_t *key, const fr_table **table)
    void fr_writer_free(fr_writer *w)
    int32_t fr_writer_add_column(fr_writer *w, const fr_chunker_options *opt)
    int32_t fr_writer_num_columns(const fr_writer *w)
    int fr_writer_configure(fr_writer *w, int32_t col, fr_chunker_options opt)
    fr_column *fr_writer_column(fr_writer *w, int32_t col)
    int fr_writer_set_batch(fr_writer *w, int64_t steps)
    int fr_writer_check_append(const fr_writer *w, int32_t n, const int32_t *cols,
                               const fr_spec *specs, int32_t *bad)
    int fr_writer_append(fr_writer *w, int32_t n, const int32_t *cols,
                         const void *const *rows, const fr_spec *specs,
                         int partial, int32_t *bad)
    int64_t fr_writer_history_len(const fr_writer *w)
    int64_t fr_writer_episode_steps(const fr_writer *w)
    int fr_writer_step_open(const fr_writer *w)
    int64_t fr_writer_cell_bytes(fr_writer *w, int32_t col, int64_t id)
    int fr_writer_set_in_newest_step(const fr_writer *w, int32_t col)
    void fr_writer_cells_at(fr_writer *w, int32_t col, int64_t n,
                            const int64_t *pos, int64_t *ids)
    int64_t fr_writer_cells_range(fr_writer *w, int32_t col, int64_t start,
                                  int64_t step, int64_t count, int64_t *ids)
    ctypedef struct fr_ref_run:
        int64_t first
        int32_t col, count
    int fr_writer_create_item_runs(fr_writer *w, fr_table *table, double priority,
                                   int32_t structure_id, int32_t n_columns,
                                   const fr_ref_run *runs, const uint8_t *squeeze,
                                   uint64_t *key, int32_t *bad_column, int32_t *bad_ref)
    int fr_writer_create_item(fr_writer *w, fr_table *table, double priority,
                              int32_t structure_id,
                              int32_t n_columns, const int32_t *lens,
                              const uint8_t *squeeze, const int32_t *cols,
                              const int64_t *ids, uint64_t *key,
                              int32_t *bad_column, int32_t *bad_ref)
    int64_t fr_writer_pending(fr_writer *w)
    int fr_writer_flush(fr_writer *w, int64_t ignore_last, int64_t timeout_ns)
    int fr_writer_end_episode(fr_writer *w, int clear_buffers, int64_t timeout_ns)
    void fr_writer_close(fr_writer *w)
    int fr_writer_cell_alive(fr_writer *w, int32_t col, int64_t id)
    int fr_writer_read_cell(fr_writer *w, int32_t col, int64_t id, void *dst)


cdef extern from "rows.h" nogil:
    int fr_insert_rows(fr_table *t, fr_store *store, int32_t n_cols,
                       const fr_spec *specs, const void *const *cols,
                       int64_t n_rows, const uint64_t *keys,
                       const double *priorities, const fr_chunker_options *opt,
                       const int32_t *compression,
                       const fr_spec *const *interned, uint64_t chunk_key,
                       int64_t timeout_ns, int64_t *n_done, int64_t *bad_index)
    int32_t fr_rows_chunk_length(const fr_spec *spec, const fr_chunker_options *opt,
                                 int64_t n_rows, int32_t compression)


cdef extern from "slots.h" nogil:
    ctypedef struct fr_slots:
        pass
    fr_slots *fr_slots_new(int64_t capacity, fr_store *store)
    void fr_slots_free(fr_slots *s)
    int fr_slots_write(fr_slots *s, int32_t n_cols, const fr_spec *specs,
                       const void *const *cols, int64_t n, const int64_t *slots,
                       const int32_t *compression, uint64_t *chunk_key, int64_t *bad)
    int fr_slots_erase(fr_slots *s, int64_t n, const int64_t *slots, int64_t *bad)
    void fr_slots_clear(fr_slots *s)
    int fr_slots_read(fr_slots *s, int64_t n, const int64_t *slots, void *const *outs,
                      int32_t *counter, int64_t *bad)
    int64_t fr_slots_occupied(fr_slots *s, int64_t *out, int64_t cap)
    int64_t fr_slots_size(fr_slots *s)
    int32_t fr_slots_columns(fr_slots *s)
    const fr_spec *fr_slots_spec(fr_slots *s, int32_t c)


cdef extern from "frames.h" nogil:
    ctypedef struct fr_frames:
        pass
    fr_frames *fr_frames_new(const fr_spec *value, int stacked, int32_t compression)
    void fr_frames_free(fr_frames *f)
    int32_t fr_frames_k(const fr_frames *f)
    void fr_frames_reset(fr_frames *f)
    int fr_insert_frame_rows(fr_table *t, fr_store *store, int32_t n_cols,
                             const fr_spec *specs, const void *const *cols,
                             fr_frames *const *streams, int64_t n_rows,
                             const uint64_t *keys, const double *priorities,
                             const fr_chunker_options *opt,
                             const int32_t *compression, uint64_t chunk_key,
                             int64_t timeout_ns, int64_t *n_done, int64_t *bad_index)


cdef extern from "structured.h" nogil:
    enum:
        FR_SW_STEP_INDEX
        FR_SW_STEPS_SINCE
        FR_SW_BUFFER_LENGTH
        FR_SW_END_EPISODE
        FR_SW_DATA
        FR_SW_EQ
        FR_SW_GE
        FR_SW_MOD_EQ
        FR_SW_CONSTANT
        FR_SW_TD_ERROR
    ctypedef struct fr_sw_condition:
        int32_t left
        int32_t source
        int32_t cmp
        int32_t inverse
        int64_t value
        int64_t mod
    ctypedef struct fr_sw_node:
        int32_t col
        int32_t has_start
        int64_t start
        int64_t stop
        int64_t step
    ctypedef struct fr_sw_config:
        fr_table *table
        int32_t n_nodes
        int32_t n_conditions
        const fr_sw_node *nodes
        const fr_sw_condition *conditions
        int32_t priority_fn
        double priority
        int32_t td_node
        int32_t structure_id
    ctypedef struct fr_sw:
        pass
    fr_sw *fr_sw_new(fr_writer *w, int32_t n_configs, const fr_sw_config *configs,
                     int32_t n_data)
    void fr_sw_free(fr_sw *s)
    void fr_sw_begin_step(fr_sw *s)
    void fr_sw_set_data(fr_sw *s, int32_t i, int64_t value, int present)
    int fr_sw_evaluate(fr_sw *s, int end_episode, int64_t *created,
                       int32_t *bad_config)
    void fr_sw_end_episode(fr_sw *s)


cdef extern from "ring.h" nogil:
    enum:
        FR_RING_MOVED
    ctypedef struct fr_ring:
        pass
    ctypedef struct fr_ring_stats:
        int64_t size, capacity
        uint64_t next_key
        int64_t inserts, samples, updates, unique_samples
        int64_t sample_stalls, sample_stall_ns
    fr_ring *fr_ring_new(int64_t capacity, int32_t n_cols, const int64_t *row_bytes,
                         const int32_t *packed, fr_store *store, int prioritized,
                         double exponent, uint64_t first_key, uint64_t seed)
    void fr_ring_free(fr_ring *r)
    int fr_ring_add(fr_ring *r, int64_t n, const void *const *cols,
                    const int64_t *strides, const double *prios, double priority,
                    uint64_t *key, int64_t *bad)
    int fr_ring_sample(fr_ring *r, int64_t n, int64_t min_size, int64_t timeout_ns,
                       void *const *outs, uint64_t *keys, double *probs, double *prios,
                       int64_t *size)
    int fr_ring_update(fr_ring *r, int64_t n, const uint64_t *keys, const double *prios,
                       int64_t *bad)
    int fr_ring_read(fr_ring *r, int64_t first, int64_t n, void *const *outs,
                     uint64_t *keys, double *prios, int64_t *times)
    int fr_ring_restore(fr_ring *r, const fr_ring_stats *st, const int64_t *times,
                        int64_t n)
    void fr_ring_close(fr_ring *r)
    void fr_ring_seal(fr_ring *r)
    void fr_ring_stats_get(fr_ring *r, fr_ring_stats *out)
