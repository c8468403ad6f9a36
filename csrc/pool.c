#define _POSIX_C_SOURCE 200809L
#include "pool.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "handoff.h"

/* How long a worker that finished a job, and a caller waiting for workers
 * to finish theirs, spin before sleeping on a condition variable: waking a
 * sleeper costs ~12 us here (a futex and, on a VM, an inter-processor
 * interrupt), and a learner's loop posts its next job after the serial
 * part of a sample (~100 us for the batch below).  Measured with
 * per_images.py (PER 100k Atari-like uint8[84,84] obs + next_obs, lz4,
 * sample 256; 2 gather threads over 1, 3 paired runs of 7 rounds each on
 * the 2-vCPU VM, load < 1): no spin 1.37-1.46x (median 1.42x), 100 us
 * 1.44-1.52x (1.51x), 300 us 1.49-1.55x (1.52x). */
#define FR_POOL_SPIN_NS 100000

/* All state below is guarded by `mu`, except next_share (claimed with
 * atomics while a job runs) and override (read without the lock). */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_cv = PTHREAD_COND_INITIALIZER; /* a job started */
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER; /* workers left / idle */
static int n_workers;      /* started workers: slots 1..n_workers */
static int busy;           /* a job or an acquired slot 0 is in flight */
static int job_live;       /* workers may still join the current job */
static int job_threads;    /* slots < job_threads may join it */
static atomic_int active;  /* workers inside the current job (changed under mu) */
static uint64_t generation; /* bumped per job */
static atomic_uint_fast64_t posted; /* generation, for spinners without mu */
static fr_pool_fn job_fn;
static void *job_arg;
static int job_shares;
static atomic_int next_share;
static atomic_int override; /* fr_pool_set_threads, 0: default */
static int env_threads = -1; /* FASTREPLAY_GATHER_THREADS, 0: unset */

static void run_shares(fr_pool_fn fn, void *arg, int shares, int slot) {
    int s;
    while ((s = atomic_fetch_add_explicit(&next_share, 1, memory_order_relaxed)) <
           shares)
        fn(arg, s, slot);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Spin (without mu) until *v differs from `was` or FR_POOL_SPIN_NS pass. */
static void spin_while_equal(atomic_uint_fast64_t *v, uint64_t was) {
    int64_t until = now_ns() + FR_POOL_SPIN_NS;
    for (int i = 1;; i++) {
        if (atomic_load_explicit(v, memory_order_acquire) != was) return;
        if ((i & 63) == 0 && now_ns() > until) return;
        __builtin_ia32_pause();
    }
}

static void *worker_main(void *p) {
    int slot = (int)(intptr_t)p;
    pthread_mutex_lock(&mu);
    uint64_t seen = generation;
    int spun = 0;
    for (;;) {
        while (!(job_live && generation != seen && slot < job_threads)) {
            if (generation != seen && !job_live) { /* missed it: spin for the next */
                seen = generation;
                spun = 0;
            }
            if (!spun) { /* the next job often comes soon: no sleep for it */
                spun = 1;
                pthread_mutex_unlock(&mu);
                spin_while_equal(&posted, seen);
                pthread_mutex_lock(&mu);
                continue;
            }
            pthread_cond_wait(&work_cv, &mu);
        }
        spun = 0;
        seen = generation;
        fr_pool_fn fn = job_fn;
        void *arg = job_arg;
        int shares = job_shares;
        atomic_fetch_add(&active, 1);
        pthread_mutex_unlock(&mu);
        run_shares(fn, arg, shares, slot);
        pthread_mutex_lock(&mu);
        if (atomic_fetch_sub(&active, 1) == 1) pthread_cond_broadcast(&done_cv);
    }
    return NULL;
}

/* Start workers until `want` exist (under mu); returns how many exist.
 * Workers block every signal: CPython handles signals on its main thread. */
static int start_workers_locked(int want) {
    if (want > FR_POOL_MAX_THREADS - 1) want = FR_POOL_MAX_THREADS - 1;
    if (n_workers >= want) return n_workers;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 << 10);
    while (n_workers < want) {
        pthread_t th;
        if (pthread_create(&th, &attr, worker_main, (void *)(intptr_t)(n_workers + 1)))
            break;
        n_workers++;
    }
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return n_workers;
}

/* Fork: the prepare handler waits until no job is in flight and keeps the
 * lock over fork(); the parent releases it; the child, which has none of
 * the workers, starts from an empty pool with fresh primitives. */
static void fork_prepare(void) {
    pthread_mutex_lock(&mu);
    while (busy) pthread_cond_wait(&done_cv, &mu);
}
static void fork_parent(void) { pthread_mutex_unlock(&mu); }
static void fork_child(void) {
    pthread_mutex_init(&mu, NULL);
    pthread_cond_init(&work_cv, NULL);
    pthread_cond_init(&done_cv, NULL);
    n_workers = busy = job_live = job_threads = 0;
    atomic_store(&active, 0);
}

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init_once(void) {
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    const char *s = getenv("FASTREPLAY_GATHER_THREADS");
    long v = s && *s ? strtol(s, NULL, 10) : 0;
    env_threads = v >= 1 && v <= FR_POOL_MAX_THREADS ? (int)v : 0;
}

int fr_pool_threads(void) {
    pthread_once(&once, init_once);
    int n = atomic_load_explicit(&override, memory_order_relaxed);
    if (n <= 0) n = env_threads > 0 ? env_threads : fr_handoff_cores();
    return n < 1 ? 1 : n > FR_POOL_MAX_THREADS ? FR_POOL_MAX_THREADS : n;
}

void fr_pool_set_threads(int n) {
    atomic_store_explicit(&override, n < 0 ? 0 : n, memory_order_relaxed);
}

int fr_pool_run(fr_pool_fn fn, void *arg, int shares) {
    int want = fr_pool_threads();
    if (want > shares) want = shares;
    pthread_mutex_lock(&mu);
    if (busy) { /* another caller's job: run it all here, no slot */
        pthread_mutex_unlock(&mu);
        for (int s = 0; s < shares; s++) fn(arg, s, -1);
        return 1;
    }
    busy = 1;
    if (want > 1) {
        int have = 1 + start_workers_locked(want - 1);
        if (want > have) want = have;
    }
    job_fn = fn;
    job_arg = arg;
    job_shares = shares;
    job_threads = want;
    atomic_store_explicit(&next_share, 0, memory_order_relaxed);
    if (want > 1) {
        job_live = 1;
        generation++;
        atomic_store_explicit(&posted, generation, memory_order_release);
        pthread_cond_broadcast(&work_cv);
    }
    pthread_mutex_unlock(&mu);
    /* The mutex orders the job's fields before the workers read them; the
     * caller claims shares at once rather than waiting for workers to wake. */
    run_shares(fn, arg, shares, 0);
    pthread_mutex_lock(&mu);
    job_live = 0; /* no worker joins from now on */
    if (atomic_load(&active) > 0) { /* their last shares end soon */
        pthread_mutex_unlock(&mu);
        int64_t until = now_ns() + FR_POOL_SPIN_NS;
        for (int i = 1; atomic_load(&active) > 0; i++) {
            if ((i & 63) == 0 && now_ns() > until) break;
            __builtin_ia32_pause();
        }
        pthread_mutex_lock(&mu);
    }
    while (atomic_load(&active) > 0)
        pthread_cond_wait(&done_cv, &mu); /* bounded: they compute */
    busy = 0;
    pthread_cond_broadcast(&done_cv);
    pthread_mutex_unlock(&mu);
    return want;
}

int fr_pool_try_acquire(void) {
    pthread_once(&once, init_once);
    pthread_mutex_lock(&mu);
    int got = !busy;
    if (got) busy = 1;
    pthread_mutex_unlock(&mu);
    return got;
}

void fr_pool_release(void) {
    pthread_mutex_lock(&mu);
    busy = 0;
    pthread_cond_broadcast(&done_cv);
    pthread_mutex_unlock(&mu);
}

typedef struct range_job {
    fr_pool_range_fn fn;
    void *arg;
    int64_t n, bad;
    int shares;
    atomic_int rc;
} range_job;

static void range_share(void *arg, int share, int slot) {
    (void)slot;
    range_job *j = arg;
    int64_t lo = j->n * share / j->shares, hi = j->n * (share + 1) / j->shares;
    int64_t bad = -1;
    int rc = j->fn(j->arg, lo, hi, &bad);
    int ok = 0;
    if (rc != 0 && atomic_compare_exchange_strong(&j->rc, &ok, rc)) j->bad = bad;
}

int fr_pool_run_ranges(fr_pool_range_fn fn, void *arg, int64_t n, int shares,
                       int64_t *bad) {
    range_job j = {.fn = fn, .arg = arg, .n = n, .bad = -1, .shares = shares};
    atomic_init(&j.rc, 0);
    fr_pool_run(range_share, &j, shares);
    *bad = j.bad;
    return atomic_load(&j.rc);
}
