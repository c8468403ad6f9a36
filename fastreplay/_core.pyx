# cython: freethreading_compatible = False
"""Compiled core of fastreplay: sum tree and thread-safe tables.

Thin wrappers over csrc/: arguments are checked and outputs allocated with the
GIL held; the C calls (which may wait on the rate limiter) run without it.
Status codes become exceptions in exactly one place, ``_raise_for_status``.
"""

from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset

import math
import numpy as np

cdef type _ndarray = np.ndarray  # a C global: the .pxi type checks compare pointers

from fastreplay import errors

from fastreplay._csrc cimport *

SELECTOR_KINDS = {
    "uniform": FR_SEL_UNIFORM,
    "prioritized": FR_SEL_PRIORITIZED,
    "fifo": FR_SEL_FIFO,
    "lifo": FR_SEL_LIFO,
    "min_heap": FR_SEL_MIN_HEAP,
    "max_heap": FR_SEL_MAX_HEAP,
}

RATE_LIMITER_TIMEOUT_MESSAGE = (
    "Rate Limiter: Timeout exceeded before the right to insert was acquired."
)
#: Reverb uses the insert text for samples too; fastreplay says what timed out.
RATE_LIMITER_SAMPLE_TIMEOUT_MESSAGE = (
    "Rate Limiter: Timeout exceeded before the right to sample was acquired."
)

# Every fr_status, its default text and its exception, each mapped once.
# FR_EINTR re-raises what a signal handler raised (see _interrupt_hook) and
# FR_EASYNC is resolved by the writer (fr_writer_take_failure) first.
_DEFAULT_MESSAGES = {
    FR_ENOMEM: "fastreplay core out of memory.",
    FR_EINVAL: "Invalid argument.",
    FR_EPRIORITY_NAN: "Priority must not be NaN.",
    FR_EPRIORITY_NEG: "Priority must not be negative.",
    FR_EPRIORITY_BIG: ("Priority is too large: priority ** priority_exponent must "
                       "be finite and at most 4.1e298."),
    FR_EKEY_EXISTS: "An item with this key is already in the table.",
    FR_EKEY_MISSING: "No item with this key is in the table.",
    FR_ETIMEOUT: RATE_LIMITER_TIMEOUT_MESSAGE,
    FR_ESAMPLE_TIMEOUT: RATE_LIMITER_SAMPLE_TIMEOUT_MESSAGE,
    FR_ECLOSED: "Table is closed.",
    FR_EEMPTY: "trajectory must not be empty.",
    FR_EFULL: "Table capacity exceeds 2**31 - 1 items.",
    FR_ETABLE_FULL: "Table is full: it already holds max_size items.",
    FR_EBUSY: "Flush must be called before ApplyConfig.",
    FR_EEXPIRED: "Column contains expired CellRef.",
    FR_EDTYPE: "Tensor of wrong dtype.",
    FR_ESHAPE: "Tensor of incompatible shape.",
    FR_EREPEATED: "Column already set in the active step.",
    FR_ESQUEEZE: "Squeezed column must contain exactly one row.",
    FR_ECORRUPT: "Stored chunk data is corrupt.",
    FR_ESYSTEM: "The system refused a lock or condition variable.",
    FR_EASYNC: "An earlier queued insert of this writer failed.",
}

_EXCEPTIONS = {
    FR_ENOMEM: MemoryError,
    FR_EINVAL: errors.InvalidArgumentError,
    FR_EPRIORITY_NAN: errors.InvalidPriorityError,
    FR_EPRIORITY_NEG: errors.InvalidPriorityError,
    FR_EPRIORITY_BIG: errors.InvalidPriorityError,
    FR_EKEY_EXISTS: errors.InvalidArgumentError,
    FR_EKEY_MISSING: errors.InvalidArgumentError,
    FR_ETIMEOUT: errors.DeadlineExceededError,
    FR_ESAMPLE_TIMEOUT: errors.DeadlineExceededError,
    FR_ECLOSED: errors.TableClosedError,
    FR_EEMPTY: errors.InvalidArgumentError,
    FR_EFULL: OverflowError,
    FR_ETABLE_FULL: errors.InvalidArgumentError,
    FR_EBUSY: errors.FailedPreconditionError,
    FR_EEXPIRED: errors.InvalidArgumentError,
    FR_EDTYPE: errors.InvalidArgumentError,
    FR_ESHAPE: errors.InvalidArgumentError,
    FR_EREPEATED: errors.InvalidArgumentError,
    FR_ESQUEEZE: errors.InvalidArgumentError,
    FR_ECORRUPT: errors.DataLossError,
    FR_ESYSTEM: errors.InternalError,
    FR_EASYNC: errors.InternalError,
}


cdef int _raise_for_status(int rc, str context, str message=None) except -1:
    """The one status -> exception translator: raise for a negative
    fr_status (with ``message``, else the code's default text, followed by
    ``context`` in parentheses); return 0 for FR_OK.  FR_EINTR raises what
    the interrupted wait's signal handler raised (KeyboardInterrupt)."""
    if rc == FR_OK:
        return 0
    if rc == FR_EINTR:
        _raise_interrupt()
    text = message if message is not None else _DEFAULT_MESSAGES.get(
        rc, f"fastreplay core error {rc}.")
    if context:
        text = f"{text} ({context})"
    raise _EXCEPTIONS.get(rc, errors.InvalidArgumentError)(text)


# ----- Ctrl-C during blocking waits -----
#
# Every blocking wait in csrc/ goes through fr_cond_wait_until, which wakes
# every FR_INTERRUPT_SLICE_NS (50 ms) and calls this hook with no core lock
# held.  In the main thread (the only one where Python runs signal handlers)
# it takes the GIL and runs them; if one raises, the wait ends with FR_EINTR
# and the exception is kept here until _raise_for_status re-raises it.
# Deadlines are absolute, so the overall timeout is unchanged.

cdef extern from "pythread.h":
    unsigned long PyThread_get_thread_ident() nogil

from cpython.exc cimport PyErr_CheckSignals

import threading as _threading

cdef unsigned long _MAIN_THREAD = _threading.main_thread().ident
cdef object _pending_interrupt = None  # set and taken in the main thread only


cdef int _run_signal_handlers() noexcept with gil:
    global _pending_interrupt
    try:
        PyErr_CheckSignals()
    except BaseException as exc:
        _pending_interrupt = exc
        return 1
    return 0


cdef int _interrupt_hook() noexcept nogil:
    if PyThread_get_thread_ident() != _MAIN_THREAD:
        return 0
    return _run_signal_handlers()


cdef int _raise_interrupt() except -1:
    global _pending_interrupt
    exc, _pending_interrupt = _pending_interrupt, None
    if exc is None:
        exc = KeyboardInterrupt()
    raise exc


def _after_fork_in_child() -> None:
    # The forking thread is the child's main thread (and Python's).
    global _MAIN_THREAD
    _MAIN_THREAD = PyThread_get_thread_ident()


import os as _os

_os.register_at_fork(after_in_child=_after_fork_in_child)
fr_interrupt_install(_interrupt_hook)


cdef int64_t _timeout_ns(object timeout) except? -2:
    """Seconds (None = forever) -> nanoseconds (-1 = forever)."""
    if timeout is None:
        return -1
    cdef double seconds = timeout
    if seconds != seconds or seconds < 0:
        raise ValueError(f"timeout must be None or >= 0 seconds, got {timeout!r}")
    if seconds > 9.2e9:
        return -1
    return <int64_t>(seconds * 1e9)


cdef int _run_gil_free(fr_handoff_fn fn, void *arg) noexcept:
    """Run the compute job ``fn(arg)`` without the GIL and return its status.
    The one place that follows the GIL hand-off protocol (csrc/handoff.h):
    writer and learner threads finishing such work spin briefly behind a
    thread running Python instead of sleeping in CPython.  Only for work that
    cannot block: rate-limiter waits release the GIL plainly."""
    cdef int rc
    with nogil:
        rc = fr_handoff_run(fn, arg)
    fr_handoff_acquired()
    return rc


def _handoff_cores() -> int:
    """Cores the GIL hand-off counts (csrc/handoff.h), for tests."""
    return fr_handoff_cores()


def _gather_threads(n=None, always=None) -> int:
    """Threads sample_batch's gather may use (csrc/pool.h); with ``n``, set
    it first (0: back to FASTREPLAY_GATHER_THREADS or the CPU quota); with
    ``always``, whether every batch of two or more items goes to the pool,
    however small (tests).  For tests and benchmarks."""
    if n is not None:
        if not 0 <= n <= 64:
            raise ValueError(f"gather threads ({n}) must be in [0, 64]")
        fr_pool_set_threads(n)
    if always is not None:
        fr_gather_set_flags(FR_GATHER_ALWAYS_POOL if always else 0)
    return fr_pool_threads()


def _gather_cache(clear: bool = False) -> int:
    """Chunks the gather's decode caches hold (csrc/gather.h), after
    releasing the ones only the cache references; with ``clear``, drop them
    all first (unless a batch is being gathered)."""
    if clear:
        fr_gather_cache_clear()
    fr_gather_cache_trim()
    return fr_gather_cache_held()


cdef class SumTree:
    """SumTree(capacity)

    Flat fan-out-8 sum tree over ``capacity`` non-negative leaf weights.
    Exposed for tests and advanced users; tables use it internally.
    """

    cdef fr_sumtree _tree
    cdef bint _ready

    def __cinit__(self, *args, **kwargs):
        self._ready = False

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity ({capacity}) must be >= 1")
        _raise_for_status(fr_sumtree_init(&self._tree, capacity), "")
        self._ready = True

    def __dealloc__(self):
        if self._ready:
            fr_sumtree_free(&self._tree)

    @property
    def capacity(self) -> int:
        return self._tree.capacity

    @property
    def total(self) -> float:
        return fr_sumtree_total(&self._tree)

    cdef size_t _index(self, Py_ssize_t i) except? 0:
        if i < 0 or <size_t>i >= self._tree.capacity:
            raise IndexError(f"leaf {i} out of range [0, {self._tree.capacity})")
        return <size_t>i

    def reserve(self, capacity: int) -> None:
        """Grow to at least ``capacity`` leaves, keeping every weight."""
        _raise_for_status(fr_sumtree_reserve(&self._tree, capacity), "")

    def clear(self) -> None:
        fr_sumtree_clear(&self._tree)

    def set(self, Py_ssize_t i, double weight) -> None:
        """Set leaf ``i`` to ``weight`` (finite, >= 0).  O(log n)."""
        if not (weight >= 0 and weight < float("inf")):
            raise ValueError(f"weight must be finite and >= 0, got {weight}")
        fr_sumtree_set(&self._tree, self._index(i), weight)

    def get(self, Py_ssize_t i) -> float:
        return fr_sumtree_get(&self._tree, self._index(i))

    def set_many(self, indices, weights) -> None:
        """Set leaves ``indices[k]`` to ``weights[k]`` in order (a repeated
        leaf keeps its last weight), then recompute the touched ancestors
        once per level: the tree ends exactly as after ``set`` of each."""
        cdef const int64_t[::1] iv = np.ascontiguousarray(indices, dtype=np.int64)
        cdef const double[::1] wv = np.ascontiguousarray(weights, dtype=np.float64)
        cdef Py_ssize_t k, n = iv.shape[0]
        if wv.shape[0] != n:
            raise ValueError(f"indices and weights differ in length ({n} != {wv.shape[0]})")
        for k in range(n):
            self._index(iv[k])
            if not (wv[k] >= 0 and wv[k] < float("inf")):
                raise ValueError(f"weight must be finite and >= 0, got {wv[k]}")
        cdef size_t *scratch = <size_t *>malloc(max(n, 1) * sizeof(size_t))
        if scratch == NULL:
            raise MemoryError()
        for k in range(n):
            fr_sumtree_set_leaf(&self._tree, <size_t>iv[k], wv[k])
            scratch[k] = <size_t>iv[k]
        fr_sumtree_fix_up(&self._tree, scratch, n)
        free(scratch)

    def find(self, double u) -> int:
        """Leaf whose cumulative interval holds ``u * total``, u in [0, 1)."""
        if not (0.0 <= u < 1.0):
            raise ValueError(f"u must be in [0, 1), got {u}")
        if not fr_sumtree_total(&self._tree) > 0:
            raise ValueError("cannot search a tree whose total weight is 0")
        return fr_sumtree_find(&self._tree, u)

    def find_many(self, u) -> np.ndarray:
        """Vectorised :meth:`find`; returns int64 leaf indices."""
        cdef const double[::1] uv = np.ascontiguousarray(u, dtype=np.float64)
        if uv.shape[0] and not (np.min(uv) >= 0.0 and np.max(uv) < 1.0):
            raise ValueError("every u must be in [0, 1)")
        if not fr_sumtree_total(&self._tree) > 0:
            raise ValueError("cannot search a tree whose total weight is 0")
        out = np.empty(uv.shape[0], dtype=np.int64)
        cdef int64_t[::1] ov = out
        if uv.shape[0]:
            with nogil:
                fr_sumtree_find_many(&self._tree, uv.shape[0], &uv[0], &ov[0])
        return out


def priority_weight(double priority, double exponent) -> float:
    """The sampling weight ``priority ** exponent`` (0 when priority is 0)."""
    return fr_priority_weight(priority, exponent)


cdef tuple _shape_of(const fr_spec *spec):
    return tuple([spec.shape[i] for i in range(spec.ndim)])


# The rest of the module, one concern per file.  What the order binds:
# Cython resolves cdef functions, classes and structs across the whole
# module, but a DEF constant must be defined before the code using it, and
# module-level statements run in this order at import.  Still, each file
# comes after the files it needs (its "Needs:" line), so it reads top-down;
# the one forward reference is WriterCore's use of TrajectoryColumn and
# WeakCellRef (cdef classes) from _history.pxi, which needs WriterCore.
#
#   _outpool.pxi       pooled output buffers (_empty_output).  Needs nothing.
#   _strings.pxi       string-column blobs (_encode_text, _decode_text,
#                      _gather_text, _column_blobs, _TEXT_KINDS).  Needs
#                      nothing.
#   _table.pxi         TableCore, SampledTrajectory, _dtype_of.  Needs
#                      _outpool, _strings.
#   _codec.pxi         LZ4 install (LZ4_AVAILABLE, at import), ChunkStore,
#                      _options (chunker options).  Needs nothing.
#   _steps.pxi         a step's values as C rows (structs _StepArrays,
#                      _StepInline, _AppendJob; DEF _STEP_INLINE,
#                      _NOGIL_MIN_BYTES; _Step, _step_put, _append_envs),
#                      dtype_name, _shape_str.  Needs _strings.
#   _writer.pxi        WriterCore and _WriterLock.  Needs _strings, _table,
#                      _codec, _steps (its DEFs must come earlier); forward:
#                      _history.
#   _append_batch.pxi  append_batch.  Needs _steps, _writer.
#   _rows.pxi          insert_rows.  Needs _table, _codec, _steps.
#   _history.pxi       WeakCellRef, TrajectoryColumn, ColumnHistory.  Needs
#                      _writer.
#   _trajwriter.pxi    FlattenPlan, StepReferences, _WriterBase.  Needs
#                      _table, _writer, _history.
#   _structured.pxi    StructuredCore, _StructuredBase.  Needs _table,
#                      _writer, _trajwriter.
#   _checkpoint.pxi    ChunkHandle, checkpoint export/restore.  Needs _table,
#                      _codec.
#   _wire.pxi          items and chunks as record arrays for the transport
#                      (export_wire, pack_chunks, restore_chunks,
#                      insert_wire).  Needs _table, _codec, _checkpoint.
#   _shm.pxi           SharedSegment (shared-memory batches).  Needs
#                      _outpool (buffer flags).
include "_outpool.pxi"
include "_strings.pxi"
include "_table.pxi"
include "_codec.pxi"
include "_steps.pxi"
include "_npfast.pxi"
include "_writer.pxi"
include "_append_batch.pxi"
include "_rows.pxi"
include "_slots.pxi"
include "_ring.pxi"
include "_frames.pxi"
include "_history.pxi"
include "_trajwriter.pxi"
include "_structured.pxi"
include "_extend.pxi"
include "_checkpoint.pxi"
include "_wire.pxi"
include "_wire_insert.pxi"
include "_shm.pxi"

_npfast_init()
