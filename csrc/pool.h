/* A small process-wide pool of worker threads for GIL-free compute (the
 * decode and gather of sample_batch).
 *
 * One job runs at a time.  fr_pool_run(fn, arg, shares) runs fn(arg, share,
 * slot) for every share in [0, shares): the calling thread and the workers
 * claim shares one by one until none is left, and the call returns once
 * every share has finished.  `slot` names the thread running the share (0:
 * the caller, 1..: a worker) and is exclusive to that thread for the length
 * of the job, so per-slot state (a decode cache) needs no lock.  A caller
 * that finds the pool busy with another caller's job, or started in a forked
 * child before the pool was rebuilt, or whose workers could not be created,
 * runs every share itself with slot -1 (no per-slot state may be touched):
 * results never depend on the pool.
 *
 * Size: FASTREPLAY_GATHER_THREADS in the environment (read once, 1..64;
 * 1 runs every job on the caller), else fr_handoff_cores() (the CPU quota),
 * at most FR_POOL_MAX_THREADS.  fr_pool_set_threads overrides it (tests,
 * benchmarks).  Workers start on the first job that wants more than one
 * thread and stay: after a job a worker spins up to FR_POOL_SPIN_NS (pool.c)
 * for the next one, then sleeps on a condition variable; a caller waiting
 * for workers' last shares spins as long before it sleeps.
 *
 * Fork: a child does not inherit threads.  fr_pool_run notices a changed
 * process id (and a pthread_atfork child handler resets the state), forgets
 * the parent's workers and starts its own on its next job.  The fork
 * prepare handler waits (bounded by the running job, which only computes)
 * until no job is in flight, so per-slot state is consistent in the child.
 *
 * Thread safety: every function may be called from any thread.  fn must not
 * block (it runs on workers that other callers share) and must not call
 * fr_pool_run.
 */
#ifndef FASTREPLAY_POOL_H
#define FASTREPLAY_POOL_H

#include <stdint.h>

#define FR_POOL_MAX_THREADS 64

typedef void (*fr_pool_fn)(void *arg, int share, int slot);

/* Run fn over `shares` shares as described above; returns when all are
 * done.  Returns the number of threads the job was offered to (1 when the
 * caller ran every share; workers that wake late may find none left). */
int fr_pool_run(fr_pool_fn fn, void *arg, int shares);

/* Threads a job may use (the caller included): the override, else the
 * environment variable, else the CPU quota. */
int fr_pool_threads(void);

/* Override the size (n >= 1), or go back to the default (n == 0).  Workers
 * beyond the new size sleep; new ones start when needed. */
void fr_pool_set_threads(int n);

/* Exclusive use of slot 0 without workers (a one-share job that keeps
 * per-slot state): 1 when acquired (release with fr_pool_release), 0 when
 * another job is in flight. */
int fr_pool_try_acquire(void);
void fr_pool_release(void);

/* A job over the items [0, n) cut into `shares` equal ranges of
 * consecutive items: fn(arg, lo, hi, &bad) returns 0 (FR_OK) or a failing
 * status with *bad set.  fr_pool_run_ranges returns the first failing
 * status a range returned (*bad: that range's) or 0. */
typedef int (*fr_pool_range_fn)(void *arg, int64_t lo, int64_t hi, int64_t *bad);
int fr_pool_run_ranges(fr_pool_range_fn fn, void *arg, int64_t n, int shares,
                       int64_t *bad);

#endif /* FASTREPLAY_POOL_H */
