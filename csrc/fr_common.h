/* Shared status codes and small helpers for the fastreplay core.
 *
 * Every fallible function in csrc/ returns an int: FR_OK (0) or one of the
 * negative FR_E* codes below.  The Cython layer translates codes into Python
 * exceptions in exactly one place (_raise_for_status in _core.pyx).  Nothing in
 * csrc/ includes Python.h.
 */
#ifndef FASTREPLAY_FR_COMMON_H
#define FASTREPLAY_FR_COMMON_H

#include <stdint.h>
#include <stddef.h>

enum fr_status {
    FR_OK = 0,
    FR_ENOMEM = -1,          /* allocation failed */
    FR_EINVAL = -2,          /* invalid argument (generic; prefer a specific code) */
    FR_EPRIORITY_NAN = -3,   /* priority is NaN */
    FR_EPRIORITY_NEG = -4,   /* priority is negative */
    FR_EKEY_EXISTS = -5,     /* key already present (checkpoint restore) */
    FR_EKEY_MISSING = -6,    /* selector update/delete of an absent key */
    FR_ETIMEOUT = -7,        /* rate limiter wait exceeded its deadline */
    FR_ECLOSED = -8,         /* table closed while waiting / after close */
    FR_EEMPTY = -9,          /* sample from an empty selector */
    FR_EFULL = -10,          /* capacity would overflow int32 slot ids */
    FR_EBUSY = -11,          /* chunker reconfigured with a non-empty buffer */
    FR_EEXPIRED = -12,       /* cell reference expired */
    FR_EDTYPE = -13,         /* value or reference of the wrong dtype */
    FR_ESHAPE = -14,         /* value or reference of an incompatible shape */
    FR_EREPEATED = -15,      /* column given twice in one step */
    FR_ESQUEEZE = -16,       /* squeezed column without exactly one row */
    FR_ECORRUPT = -17,       /* stored chunk data failed to decode */
    FR_EPRIORITY_BIG = -18,  /* priority ** exponent too large for the sum tree */
    FR_ETABLE_FULL = -19,    /* restore into a table already holding max_size */
    FR_EINTR = -20,          /* a wait stopped because the interrupt hook said so
                                (fr_interrupt_install): the caller's language
                                runtime has a pending exception to raise */
    FR_EASYNC = -21,         /* an earlier queued insert of this writer failed;
                                fr_writer_take_failure tells which and why */
    FR_ESAMPLE_TIMEOUT = -22,/* rate limiter wait of a sample hit its deadline
                                (FR_ETIMEOUT is the insert/flush timeout) */
    FR_ESYSTEM = -23,        /* the system refused a resource other than memory
                                (a mutex or condition variable) */
};

#define FR_INLINE static inline

/* Absolute deadlines are CLOCK_MONOTONIC nanoseconds; FR_NO_DEADLINE waits
 * forever. */
#define FR_NO_DEADLINE INT64_MAX

/* Blocking waits (rate limiter, empty table, writer flush) wake at least
 * this often to call the interrupt hook, when one is installed. */
#define FR_INTERRUPT_SLICE_NS 50000000LL

/* The interrupt hook: called by a blocked wait, with no core lock held,
 * every FR_INTERRUPT_SLICE_NS; a nonzero return ends the wait with FR_EINTR.
 * The bindings install one that runs Python's signal handlers.  Installed
 * once at start-up, before any wait (fr_interrupt_install is not meant to
 * race with waits).  Defined in sync.c. */
typedef int (*fr_interrupt_fn)(void);
void fr_interrupt_install(fr_interrupt_fn hook);

#endif /* FASTREPLAY_FR_COMMON_H */
