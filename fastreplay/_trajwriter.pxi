# The per-step half of TrajectoryWriter in compiled code: the flatten plan,
# append, history, create_item and StepReferences.  fastreplay/writer.py
# subclasses _WriterBase for everything that is not per step (construction,
# structure bookkeeping, configure, flush, end_episode, close).  Included by
# _core.pyx after _history.pxi.
# Needs: _table.pxi (TableCore), _writer.pxi (WriterCore, _WriterLock),
# _history.pxi (TrajectoryColumn, WeakCellRef).

from cpython.dict cimport (
    PyDict_Check,
    PyDict_GetItemWithError,
    PyDict_Next,
    PyDict_Size,
)
from cpython.list cimport PyList_Check, PyList_GET_ITEM
from cpython.object cimport Py_TYPE, PyObject, PyTypeObject
from cpython.tuple cimport PyTuple_Check, PyTuple_GET_ITEM, PyTuple_GET_SIZE

DEF _KIND_DICT = 0       # exactly dict: PyDict_GetItem
DEF _KIND_MAPPING = 1    # another mapping type: obj[key]
DEF _KIND_SEQ = 2        # list, tuple or a namedtuple: by position


cdef class FlattenPlan:
    """FlattenPlan(structure, column_of)

    The flatten of one nested structure compiled to a tree walk in C:
    ``flatten(data)`` returns the leaves of ``data`` in column order (a list
    of length ``num_columns``, None for columns the structure lacks), or None
    when ``data`` does not have exactly this structure (same container types
    and keys), in which case the caller takes the general path.

    ``column_of`` maps each leaf path (tuple of keys) to its column.
    """

    cdef object root                # node: column int, or (kind, type, keys, kids)
    cdef readonly Py_ssize_t num_columns
    # A flat dict root (every child a leaf, at most _STEP_INLINE columns):
    # its column per key, and the keys in the order callers' dicts iterate
    # them (learnt from a call, same objects), for _dict_leaves.
    cdef dict _col_of_key
    cdef tuple _order
    cdef int32_t _order_cols[_STEP_INLINE]
    cdef int _learnt

    def __init__(self, structure, dict column_of) -> None:
        from fastreplay import _nest

        def compile_node(node, path):
            if not _nest.is_nest(node):
                return column_of[path]
            pairs = _nest.items(node)
            if type(node) is dict:
                kind = _KIND_DICT
            elif isinstance(node, (list, tuple)):
                kind = _KIND_SEQ
            else:
                kind = _KIND_MAPPING
            return (kind, type(node), tuple(k for k, _ in pairs),
                    tuple(compile_node(v, path + (k,)) for k, v in pairs))

        self.root = compile_node(structure, ())
        self.num_columns = len(column_of)
        root = self.root
        if (type(root) is tuple and root[0] == _KIND_DICT and root[1] is dict
                and self.num_columns <= _STEP_INLINE
                and all(type(kid) is int for kid in root[3])):
            self._col_of_key = dict(zip(root[2], root[3]))

    def flatten(self, data):
        """Leaves of ``data`` in column order, or None on a mismatch."""
        return self._flatten(data)

    cdef Py_ssize_t _dict_leaves(self, dict d, PyObject **vals) except -2:
        """The values of flat dict ``d`` per column into ``vals`` (NULL where
        absent; num_columns entries) when the plan is a flat dict of these
        keys and ``d`` iterates them as learnt (the same key objects in the
        same order: one pass, no lookups); -1 otherwise (``_flatten``)."""
        cdef Py_ssize_t n, pos = 0, i = 0
        cdef PyObject *k
        cdef PyObject *v
        if self._col_of_key is None:
            return -1
        n = PyDict_Size(d)
        if n != len(self._col_of_key):
            return -1
        if self._order is None or PyTuple_GET_SIZE(self._order) != n:
            if not self._learn(d):
                return -1
        for i in range(self.num_columns):
            vals[i] = NULL
        for i in range(n):  # n entries: no call to find the end
            PyDict_Next(d, &pos, &k, &v)
            if k != PyTuple_GET_ITEM(self._order, i):
                return self._dict_leaves(d, vals) if self._learn(d) else -1
            if PyDict_Check(<object>v) or PyList_Check(<object>v) or PyTuple_Check(<object>v):
                return -1  # a nest where the plan has a leaf
            vals[self._order_cols[i]] = v
        return self.num_columns

    cdef bint _learn(self, dict d) except -1:
        """Remember the key order of ``d`` (its keys are the plan's); at most
        a few times, so that keys equal but never the same objects do not
        make every call learn."""
        if self._learnt >= 4 or len(d) != len(self._col_of_key):
            return False
        cols = [self._col_of_key.get(k, -1) for k in d]
        if -1 in cols:
            return False
        self._learnt += 1
        self._order = tuple(d)
        for i, c in enumerate(cols):
            self._order_cols[i] = c
        return True

    cdef list _flatten(self, data):
        cdef list out = [None] * self.num_columns
        if not _plan_walk(self.root, data, out):
            return None
        return out


cdef bint _plan_walk(object node, object value, list out) except -1:
    cdef Py_ssize_t i, n
    cdef PyObject *item
    cdef tuple keys, kids
    if type(node) is int:
        if PyDict_Check(value) or PyList_Check(value) or PyTuple_Check(value):
            return False  # a nest where the structure has a leaf
        out[<Py_ssize_t>node] = value
        return True
    kind = (<tuple>node)[0]
    if type(value) is not (<tuple>node)[1]:
        return False
    keys, kids = (<tuple>node)[2], (<tuple>node)[3]
    n = PyTuple_GET_SIZE(kids)
    if kind == _KIND_DICT:
        if PyDict_Size(value) != n:
            return False
        for i in range(n):
            item = PyDict_GetItemWithError(value, <object>PyTuple_GET_ITEM(keys, i))
            if item == NULL:
                return False
            if not _plan_walk(<object>PyTuple_GET_ITEM(kids, i), <object>item, out):
                return False
        return True
    if kind == _KIND_SEQ:
        if len(value) != n:
            return False
        for i in range(n):
            if PyList_Check(value):
                v = <object>PyList_GET_ITEM(value, i)
            else:
                v = <object>PyTuple_GET_ITEM(value, i)
            if not _plan_walk(<object>PyTuple_GET_ITEM(kids, i), v, out):
                return False
        return True
    if len(value) != n:
        return False
    for i in range(n):
        try:
            v = value[<object>PyTuple_GET_ITEM(keys, i)]
        except (KeyError, IndexError, TypeError):
            return False
        if not _plan_walk(<object>PyTuple_GET_ITEM(kids, i), v, out):
            return False
    return True


cdef class _ColumnsBase:
    """Base of writer._Columns: its compiled flatten plan, read per append."""

    cdef public FlattenPlan _plan


@cython.freelist(16)
cdef class StepReferences:
    """References returned by ``append``: built lazily, structured like the
    appended data (a WeakCellRef per leaf, None where no value was given)."""

    cdef object _writer
    cdef readonly Py_ssize_t _position
    cdef readonly Py_ssize_t _generation
    cdef object _data
    cdef object _refs

    def __init__(self, writer, Py_ssize_t position, data) -> None:
        self._writer, self._position, self._data = writer, position, data
        self._generation = writer._generation
        self._refs = None

    def materialize(self):
        if self._refs is None:
            self._refs = self._writer._step_refs(self._position, self._generation,
                                                 self._data)
        return self._refs

    def __getitem__(self, key):
        return self.materialize()[key]

    def __getattr__(self, str name):
        return getattr(self.materialize(), name)

    def __iter__(self):
        return iter(self.materialize())

    def __len__(self) -> int:
        return len(self.materialize())

    def __repr__(self) -> str:
        return repr(self.materialize())


DEF _ITEM_FAST_MAX = 32  # flat dict items of at most this many columns


cdef object _LEAF_SID = None


cdef object _leaf_structure():
    """The nest registry's id of an item that is one column (no nest)."""
    global _LEAF_SID
    if _LEAF_SID is None:
        from fastreplay import _structures
        _LEAF_SID = _structures.intern(None)
    return _LEAF_SID


cdef class _WriterBase:
    """Per-step methods of TrajectoryWriter (see fastreplay/writer.py, which
    sets these attributes up and provides the general paths they fall back
    to: ``_columns._flatten_slow``, ``_build_history``, ``_item_columns``,
    ``_target``)."""

    cdef public WriterCore _core
    cdef public _ColumnsBase _columns    # writer._Columns
    cdef public object _history          # cached history views (or None)
    cdef public Py_ssize_t _generation   # end_episode(clear_buffers) calls
    cdef public bint _closed
    cdef public dict _targets            # table name -> (Table, TableCore, check)
    # Called with what append or create_item raised, before it propagates
    # (it may raise another error instead): a fastreplay.ray writer turns a
    # lost shard into ShardUnavailableError without a Python frame a step.
    cdef public object _failure_hook
    cdef public int64_t _items_created   # create_item calls that succeeded
    # create_item's cache for flat dict trajectories: the keys of the last
    # one (iteration order), the same keys in flatten order, its structure.
    cdef public tuple _item_keys
    cdef public tuple _item_order
    cdef public object _item_structure  # the cached item nest's registry id
    cdef object _item_perm_of             # the _item_keys _item_perm is for
    cdef Py_ssize_t _item_perm[_ITEM_FAST_MAX]  # key i's position in _item_order

    def __cinit__(self, *args, **kwargs):
        self._targets = {}

    cpdef int _check_open(self) except -1:
        """Raise RuntimeError once ``close`` was called."""
        if self._closed:
            raise RuntimeError("TrajectoryWriter::Close has been called.")
        return 0

    def append(self, data, *, bint partial_step=False):
        """Append one step (or part of one) column by column.

        The first non-None value of a column fixes its dtype and shape; new
        paths add columns (earlier steps read as None).  With
        ``partial_step=True`` the step stays open for more columns.

        Returns
        -------
        StepReferences
            References to the appended cells, structured like ``data`` on
            access.

        Raises
        ------
        ValueError
            Wrong dtype or shape for a column (naming its path), or a column
            already set in the open step.  Nothing is written then.
        TypeError
            A value that is not numeric or bool.
        """
        if self._failure_hook is None:
            return self._append_step(data, partial_step)
        try:
            return self._append_step(data, partial_step)
        except BaseException as exc:
            self._failure_hook(exc)
            raise

    cdef _append_step(self, data, bint partial_step):
        if self._closed:
            self._check_open()
        cdef FlattenPlan plan
        cdef PyObject *vals[_STEP_INLINE]
        cdef Py_ssize_t n
        cdef StepReferences refs = StepReferences.__new__(StepReferences)
        cdef _WriterLock lock = self._core.lock  # one thread at a time
        lock.acquire()
        try:
            columns = self._columns
            plan = (<_ColumnsBase>columns)._plan
            n = -1
            if plan is not None and type(data) is dict:
                n = plan._dict_leaves(<dict>data, vals)
            if n >= 0:
                self._core._append_vals(vals, n, partial_step)
            else:
                flat = None if plan is None else plan._flatten(data)
                if flat is None:
                    flat = columns._flatten_slow(data)
                self._core._append(flat, partial_step)
            refs._position = fr_writer_history_len(self._core._w) - 1
            refs._generation = self._generation
        finally:
            lock.release()
        refs._writer, refs._data = self, data
        return refs

    @property
    def history(self):
        """Per-column history views, structured like the appended data."""
        if self._history is not None:
            return self._history
        return self._build_history()

    @property
    def episode_steps(self) -> int:
        """Closed steps since the last ``end_episode``."""
        return fr_writer_episode_steps(self._core._w)

    def create_item(self, table, priority, trajectory) -> None:
        """Queue an item referencing the cells of ``trajectory``.

        Never blocks; the item reaches the table once its chunks are
        finalized (``flush`` forces that) and the rate limiter admits it.

        Raises
        ------
        TypeError
            A trajectory leaf that is not a TrajectoryColumn.
        ValueError
            Empty trajectory, NaN priority, an unknown table, expired
            references, mixed dtypes or shapes, bad squeeze, a priority the
            table's selectors reject, or a signature mismatch.
        """
        if self._failure_hook is None:
            self._create_item_locked(table, priority, trajectory)
            return
        try:
            self._create_item_locked(table, priority, trajectory)
        except BaseException as exc:
            self._failure_hook(exc)
            raise

    cdef _create_item_locked(self, table, priority, trajectory):
        if self._closed:
            self._check_open()
        cdef _WriterLock lock = self._core.lock  # one thread at a time
        lock.acquire()
        try:
            self._create_item(table, priority, trajectory)
            self._items_created += 1
        finally:
            lock.release()

    cdef _create_item(self, table, priority, trajectory):
        cdef PyObject *flat[_ITEM_FAST_MAX]
        cdef fr_ref_run runs[_ITEM_FAST_MAX]
        cdef uint8_t squeeze[_ITEM_FAST_MAX]
        cdef Py_ssize_t n = 0
        cdef bint as_runs = False
        cdef list columns
        if type(trajectory) is dict and self._item_keys is not None:
            n = self._item_flat(<dict>trajectory, flat, runs, squeeze, &as_runs)
        if n > 0:  # a flat dict of columns with the remembered keys
            entry = self._targets.get(table)
            if entry is None or (<tuple>entry)[2]:
                columns = [<object>flat[i] for i in range(n)]
                if entry is None:
                    entry = self._target(table, columns)
                if (<tuple>entry)[2]:
                    self._check_item(table, (<tuple>entry)[0], columns)
            if as_runs:  # history slices h[k][-n:]: one run per column
                self._core._create_runs((<tuple>entry)[1], priority, flat, n, runs,
                                        squeeze, self._item_structure)
            else:
                self._core._create_flat((<tuple>entry)[1], priority, flat, n,
                                        self._item_structure)
            return
        if type(trajectory) is TrajectoryColumn:  # one column, no nest
            columns = [trajectory]
            structure = _leaf_structure()
        else:
            columns, structure = self._item_columns(trajectory)
        entry = self._targets.get(table)
        if entry is None:
            entry = self._target(table, columns)
        cdef TableCore tcore = (<tuple>entry)[1]
        if (<tuple>entry)[2]:
            self._check_item(table, (<tuple>entry)[0], columns)
        self._core._create(tcore, priority, columns, structure)

    cdef Py_ssize_t _item_flat(self, dict d, PyObject **flat, fr_ref_run *runs,
                               uint8_t *squeeze, bint *as_runs) except -1:
        """The columns of ``d`` in flatten order into ``flat`` when its keys
        are the remembered ones (same objects, same order) and every value is
        a TrajectoryColumn; 0 otherwise (the general path).  When every
        column is a run of this writer's cells (``TrajectoryColumn._run``),
        also their runs and squeeze flags, and ``as_runs`` set."""
        cdef tuple keys = self._item_keys
        cdef Py_ssize_t n = PyTuple_GET_SIZE(keys), pos = 0, i = 0, at
        cdef PyObject *k
        cdef PyObject *v
        cdef TrajectoryColumn tc
        cdef object core = self._core
        as_runs[0] = True
        if n > _ITEM_FAST_MAX or PyDict_Size(d) != n:
            return 0
        if self._item_perm_of is not keys:  # flatten position of each key
            order = {key: j for j, key in enumerate(self._item_order)}
            for j in range(n):
                self._item_perm[j] = order[keys[j]]
            self._item_perm_of = keys
        for i in range(n):  # PyDict_Size(d) == n: no call to find the end
            PyDict_Next(d, &pos, &k, &v)
            if (k != PyTuple_GET_ITEM(keys, i)
                    or Py_TYPE(<object>v) != <PyTypeObject *>TrajectoryColumn):
                return 0
            at = self._item_perm[i]
            flat[at] = v
            tc = <TrajectoryColumn>v
            squeeze[at] = tc._squeeze
            if tc._core is not core or not tc._as_run(&runs[at]):
                as_runs[0] = False
        return n
