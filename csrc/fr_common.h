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
    FR_EINVAL = -2,          /* invalid argument (generic) */
    FR_EPRIORITY_NAN = -3,   /* priority is NaN */
    FR_EPRIORITY_NEG = -4,   /* priority is negative */
    FR_EKEY_EXISTS = -5,     /* selector insert of a key already present */
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
};

#define FR_INLINE static inline

/* Absolute deadlines are CLOCK_MONOTONIC nanoseconds; FR_NO_DEADLINE waits
 * forever. */
#define FR_NO_DEADLINE INT64_MAX

#endif /* FASTREPLAY_FR_COMMON_H */
