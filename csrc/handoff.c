#define _GNU_SOURCE
#include "handoff.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Spin at most this long for one hand-off, and not at all behind a holder
 * that has run Python this long (it is doing something other than
 * appending: its loop ended, or it waits in join()). */
#define SPIN_MAX_NS 40000
#define HOLDER_STALE_NS 40000

static _Thread_local char token; /* its address names the thread */
static atomic_uintptr_t holder;   /* writer thread running Python, or 0 */
static atomic_llong holder_since; /* when it took the GIL */
static atomic_int busy;           /* writer threads in GIL-free sections */
static atomic_int ncpu;           /* usable cores; 0 until first asked */

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* A child forked while other threads were inside GIL-free sections has only
 * the forking thread: forget the others' marks. */
static void forget_other_threads(void) {
    atomic_store(&holder, 0);
    atomic_store(&busy, 0);
}

static pthread_once_t fork_handler_once = PTHREAD_ONCE_INIT;

static void register_fork_handler(void) {
    pthread_atfork(NULL, NULL, forget_other_threads);
}

/* Whole cores a CPU quota allows (cgroup v2 cpu.max, else v1
 * cfs_quota_us / cfs_period_us, as a container sees its own cgroup), at
 * least 1; 0 when no quota is set or none can be read.  A container
 * limited to one core must not spin although the machine has more. */
static int quota_cores(void) {
    long long quota = -1, period = 0;
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (f) {
        char max[32] = "";
        if (fscanf(f, "%31s %lld", max, &period) == 2 && strcmp(max, "max") != 0)
            quota = atoll(max);
        fclose(f);
    } else if ((f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r"))) {
        if (fscanf(f, "%lld", &quota) != 1) quota = -1;
        fclose(f);
        if ((f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r"))) {
            if (fscanf(f, "%lld", &period) != 1) period = 0;
            fclose(f);
        }
    }
    if (quota <= 0 || period <= 0) return 0;
    return quota / period > 0 ? (int)(quota / period) : 1;
}

static int cores(void) {
    int n = atomic_load_explicit(&ncpu, memory_order_relaxed);
    if (n > 0) return n;
#if defined(CPU_COUNT)
    cpu_set_t set;
    n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
#endif
    if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int q = quota_cores();
    if (q > 0 && q < n) n = q;
    if (n <= 0) n = 1;
    atomic_store_explicit(&ncpu, n, memory_order_relaxed);
    return n;
}

int fr_handoff_cores(void) { return cores(); }

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void handoff_release(void) {
    /* Before the first count, so a fork after it resets the count. */
    pthread_once(&fork_handler_once, register_fork_handler);
    uintptr_t me = (uintptr_t)&token;
    atomic_compare_exchange_strong(&holder, &me, 0);
    atomic_fetch_add_explicit(&busy, 1, memory_order_relaxed);
}

static void handoff_wait(void) {
    uintptr_t me = (uintptr_t)&token;
    /* Spinning threads plus the holder must fit on the cores, or spinning
     * would take the holder's core away and delay the release it waits for. */
    int spin = atomic_load_explicit(&busy, memory_order_relaxed) + 1 <= cores();
    if (spin) {
        long long start = 0;
        for (;;) {
            uintptr_t h = atomic_load_explicit(&holder, memory_order_acquire);
            if (h == 0 || h == me) break;
            long long t = now_ns();
            if (!start) start = t;
            if (t - start > SPIN_MAX_NS ||
                t - atomic_load_explicit(&holder_since, memory_order_relaxed) >
                    HOLDER_STALE_NS)
                break;
            for (int i = 0; i < 16; i++) cpu_relax();
        }
    }
    atomic_fetch_sub_explicit(&busy, 1, memory_order_relaxed);
}

int fr_handoff_run(fr_handoff_fn fn, void *arg) {
    handoff_release();
    int rc = fn(arg);
    handoff_wait();
    return rc;
}

void fr_handoff_acquired(void) {
    atomic_store_explicit(&holder_since, now_ns(), memory_order_relaxed);
    atomic_store_explicit(&holder, (uintptr_t)&token, memory_order_release);
}
