/* GIL hand-offs between writer threads without sleeping.
 *
 * A writer thread releases the GIL for the copy and compression of an
 * append.  When it finishes while another writer thread runs Python (holds
 * the GIL), CPython puts it to sleep on a condition variable, and waking it
 * costs a futex call and, on virtual machines, an inter-processor interrupt:
 * several microseconds, as much as the Python part of a step.  Writer
 * threads therefore note here when they hold the GIL in Python code between
 * appends; a thread done with its GIL-free work spins briefly (bounded, and
 * only while no core is oversubscribed) until that holder releases the GIL
 * for its own append, and then takes it without sleeping.
 *
 * Only sections that compute belong here, not ones that may block (a rate
 * limiter wait): "no core is oversubscribed" counts every thread inside a
 * section as busy.
 *
 * Advisory only: which thread actually gets the GIL is still CPython's
 * business, so any interleaving stays correct.  The calls take no locks.
 */
#ifndef FASTREPLAY_HANDOFF_H
#define FASTREPLAY_HANDOFF_H

/* The one entry point for GIL-free compute: call with the GIL released;
 * runs fn(arg) between the two steps of the protocol (marking this thread
 * busy once the GIL is dropped, then spinning briefly behind a holder that
 * runs Python before the caller takes the GIL back) and returns its status.
 * The caller calls fr_handoff_acquired() first thing with the GIL again.
 * Never for work that may block (a rate-limiter wait, a flush): the spin
 * rule counts every thread inside as running on a core. */
typedef int (*fr_handoff_fn)(void *arg);
int fr_handoff_run(fr_handoff_fn fn, void *arg);
/* First thing with the GIL again. */
void fr_handoff_acquired(void);

/* Cores the spin rule counts: the affinity mask, capped by a cgroup CPU
 * quota (at least 1). */
int fr_handoff_cores(void);

#endif /* FASTREPLAY_HANDOFF_H */
