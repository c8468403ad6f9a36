# StructuredCore: a StructuredWriter's compiled plan (csrc/structured.h) over
# a WriterCore.  One call per append: store the referenced columns, record
# the data-condition values, evaluate every config in C.  Included by
# _core.pyx after _trajwriter.pxi.
# Needs: _table.pxi (TableCore), _writer.pxi (WriterCore, _WriterLock),
# _trajwriter.pxi (FlattenPlan).

LEFT_KINDS = {
    "step_index": FR_SW_STEP_INDEX,
    "steps_since_applied": FR_SW_STEPS_SINCE,
    "buffer_length": FR_SW_BUFFER_LENGTH,
    "is_end_episode": FR_SW_END_EPISODE,
    "data": FR_SW_DATA,
}
CMP_KINDS = {"eq": FR_SW_EQ, "ge": FR_SW_GE, "mod_eq": FR_SW_MOD_EQ}
PRIORITY_FNS = {"constant": FR_SW_CONSTANT, "td_error": FR_SW_TD_ERROR}


cdef class StructuredCore:
    """StructuredCore(core, num_flat, stored, data_sources, configs)

    The plan of a StructuredWriter over ``core``: ``stored[c]`` is the flat
    step index that writer column c holds, ``data_sources[i]`` the flat
    index data condition value i reads, and each of ``configs`` is a tuple
    ``(table_core, nodes, conditions, priority_fn, priority, td_node)`` with
    nodes ``(column, has_start, start, stop, step)`` and conditions
    ``(left, source, cmp, inverse, value, mod)`` (kinds from LEFT_KINDS,
    CMP_KINDS, PRIORITY_FNS), already validated.
    """

    cdef fr_sw *_s
    cdef readonly WriterCore core
    cdef readonly Py_ssize_t num_flat
    cdef list _stored
    cdef list _data_sources
    cdef list _tables  # TableCore of each config, kept alive

    def __cinit__(self, *args, **kwargs):
        self._s = NULL

    def __init__(self, WriterCore core not None, Py_ssize_t num_flat, list stored,
                 list data_sources, list configs) -> None:
        cdef Py_ssize_t n = len(configs), i, k
        cdef Py_ssize_t n_nodes = sum(len(c[1]) for c in configs)
        cdef Py_ssize_t n_conds = sum(len(c[2]) for c in configs)
        cdef fr_sw_config *cfgs = <fr_sw_config *>calloc(max(n, 1),
                                                         sizeof(fr_sw_config))
        cdef fr_sw_node *nodes = <fr_sw_node *>calloc(max(n_nodes, 1),
                                                      sizeof(fr_sw_node))
        cdef fr_sw_condition *conds = <fr_sw_condition *>calloc(
            max(n_conds, 1), sizeof(fr_sw_condition))
        cdef fr_sw_node *nd = nodes
        cdef fr_sw_condition *cd = conds
        self.core, self.num_flat = core, num_flat
        self._stored, self._data_sources = list(stored), list(data_sources)
        self._tables = []
        try:
            if not cfgs or not nodes or not conds:
                raise MemoryError()
            for i in range(n):
                table, cnodes, cconds, fn, priority, td_node, sid = configs[i]
                self._tables.append(table)
                cfgs[i].table = (<TableCore>table)._t
                cfgs[i].n_nodes = len(cnodes)
                cfgs[i].n_conditions = len(cconds)
                cfgs[i].nodes = nd
                cfgs[i].conditions = cd
                cfgs[i].priority_fn = fn
                cfgs[i].priority = priority
                cfgs[i].td_node = td_node
                cfgs[i].structure_id = sid
                for k in range(len(cnodes)):
                    (nd.col, nd.has_start, nd.start, nd.stop, nd.step) = cnodes[k]
                    nd += 1
                for k in range(len(cconds)):
                    (cd.left, cd.source, cd.cmp, cd.inverse, cd.value,
                     cd.mod) = cconds[k]
                    cd += 1
            self._s = fr_sw_new(core._w, n, cfgs, len(self._data_sources))
            if self._s == NULL:
                raise MemoryError()
        finally:
            free(cfgs); free(nodes); free(conds)

    def __dealloc__(self):
        if self._s != NULL:
            fr_sw_free(self._s)

    def append(self, list flat, bint partial) -> int:
        """Append one (partial) step given as the flat list of all step
        values (None where absent), then create every item whose config now
        applies.  Returns the number of items created."""
        cdef _WriterLock lock = self.core.lock
        lock.acquire()
        try:
            return self._append(flat, partial)
        finally:
            lock.release()

    cdef int64_t _append(self, list flat, bint partial) except -1:
        if len(flat) != self.num_flat:
            raise ValueError(f"Flattened data has an unexpected length, got "
                             f"{len(flat)} but wanted {self.num_flat}.")
        cdef Py_ssize_t i, n_data = len(self._data_sources)
        cdef int64_t value
        values = [flat[<Py_ssize_t>i] for i in self._stored]
        data = [flat[<Py_ssize_t>i] for i in self._data_sources]
        for i in range(n_data):  # convert before anything is written
            if data[i] is not None:
                data[i] = _condition_value(data[i], self._data_sources[i])
        cdef bint new_step = not fr_writer_step_open(self.core._w)
        self.core._append(values, partial)
        if new_step:
            fr_sw_begin_step(self._s)
        for i in range(n_data):
            if data[i] is not None:
                value = data[i]
                fr_sw_set_data(self._s, i, value, 1)
        return self._evaluate(0)

    cdef int64_t _evaluate(self, int end_episode) except -1:
        cdef int64_t created = 0
        cdef int32_t bad = -1
        cdef int rc = fr_sw_evaluate(self._s, end_episode, &created, &bad)
        if rc != FR_OK:
            self._raise_evaluate(rc, bad)
        return created

    cdef int _raise_evaluate(self, int rc, int32_t bad) except -1:
        """Raise for a failed fr_sw_evaluate of config ``bad``."""
        if rc == FR_EASYNC:
            self.core._raise_status(rc)
        if rc != FR_OK:
            table = (<TableCore>self._tables[bad]).name if bad >= 0 else ""
            if rc in (FR_EDTYPE, FR_ESHAPE):
                _raise_for_status(rc, "", f"Config {bad} (table '{table}'): TD Error "
                                  "expects a scalar double, float, int32 or int64 "
                                  "column.")
            _raise_for_status(rc, f"config {bad} (table '{table}')")
        return 0

    def end_episode(self, bint clear_buffers, timeout) -> bool:
        """Create the items of configs conditioned on is_end_episode, then end
        the writer's episode; False when the flush timed out."""
        with self.core.lock:
            self._evaluate(1)
            done = self.core.end_episode(clear_buffers, timeout)
            fr_sw_end_episode(self._s)
        return done


cdef object _condition_value(object v, Py_ssize_t source):
    """A data-condition value as a Python int (int or bool scalars only)."""
    if type(v) is int or type(v) is bool:
        return int(v)
    arr = np.asarray(v)
    if arr.ndim != 0 or arr.dtype.kind not in "biu":
        raise ValueError(
            f"Data conditions read scalar int or bool values, but flat step "
            f"index {source} holds a {arr.dtype} {list(arr.shape)} value.")
    return int(arr)


cdef class _StructuredBase:
    """The per-step method of StructuredWriter (fastreplay/structured_writer.py
    sets these attributes up; ``_flatten_general`` compiles the plan on the
    first append)."""

    cdef public FlattenPlan _plan
    cdef public StructuredCore _sw
    cdef public bint _closed

    cpdef int _check_open(self) except -1:
        """Raise RuntimeError once ``close`` was called."""
        if self._closed:
            raise RuntimeError("StructuredWriter::Close has been called.")
        return 0

    def append(self, data, *, bint partial_step=False) -> None:
        """Append a step (or part of one; leaves may be None) and create the
        items of every config that now applies.

        Raises
        ------
        ValueError
            The flattened step has a different length than the first one, a
            field has the wrong dtype or shape (naming its path), or a field
            was already given in the open step.
        """
        self._check_open()
        flat = None if self._plan is None else self._plan.flatten(data)
        if flat is None:
            flat = self._flatten_general(data)
        cdef StructuredCore sw = self._sw
        cdef _WriterLock lock = sw.core.lock  # one thread at a time
        lock.acquire()
        try:
            sw._append(flat, partial_step)
        finally:
            lock.release()
