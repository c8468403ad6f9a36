# Declarations of the C core, one block per header in csrc/, in header order.
# This is the only place C is declared; _core.pyx cimports it.
from libc.stdint cimport int32_t, int64_t, uint64_t


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

    ctypedef struct fr_table:
        pass

    fr_table *fr_table_new(int sampler_kind, double sampler_exponent,
                           int remover_kind, double remover_exponent,
                           int64_t max_size, int64_t max_times_sampled,
                           fr_rate_limiter limiter, uint64_t seed,
                           fr_payload_ops ops)
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
    int64_t fr_table_size(fr_table *t)
    void fr_table_stats_get(fr_table *t, fr_table_stats *out)
    int fr_table_get(fr_table *t, uint64_t key, fr_item *out)
    int64_t fr_table_items(fr_table *t, fr_item *out, int64_t cap)
