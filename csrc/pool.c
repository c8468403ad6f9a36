#define _POSIX_C_SOURCE 200809L
#include "pool.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "handoff.h"

/* All state below is guarded by `mu`, except next_share (claimed with
 * atomics while a job runs) and override (read without the lock). */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_cv = PTHREAD_COND_INITIALIZER; /* a job started */
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER; /* workers left / idle */
static int n_workers;      /* started workers: slots 1..n_workers */
static int busy;           /* a job or an acquired slot 0 is in flight */
static int job_live;       /* workers may still join the current job */
static int job_threads;    /* slots < job_threads may join it */
static int active;         /* workers inside the current job */
static uint64_t generation; /* bumped per job */
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

static void *worker_main(void *p) {
    int slot = (int)(intptr_t)p;
    pthread_mutex_lock(&mu);
    uint64_t seen = generation;
    for (;;) {
        while (!(job_live && generation != seen && slot < job_threads)) {
            if (generation != seen && !job_live) seen = generation; /* missed it */
            pthread_cond_wait(&work_cv, &mu);
        }
        seen = generation;
        fr_pool_fn fn = job_fn;
        void *arg = job_arg;
        int shares = job_shares;
        active++;
        pthread_mutex_unlock(&mu);
        run_shares(fn, arg, shares, slot);
        pthread_mutex_lock(&mu);
        if (--active == 0) pthread_cond_broadcast(&done_cv);
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
    n_workers = busy = job_live = job_threads = active = 0;
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
        pthread_cond_broadcast(&work_cv);
    }
    pthread_mutex_unlock(&mu);
    /* The mutex orders the job's fields before the workers read them; the
     * caller claims shares at once rather than waiting for workers to wake. */
    run_shares(fn, arg, shares, 0);
    pthread_mutex_lock(&mu);
    job_live = 0; /* no worker joins from now on */
    while (active > 0) pthread_cond_wait(&done_cv, &mu); /* bounded: they compute */
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
