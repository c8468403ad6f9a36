"""StructuredWriter: items declared once as patterns (Reverb's
``reverb.structured``).

A ``Config`` names slices of the step history (``PatternNode``), a table,
conditions on the step and a priority function.  The writer compiles its
configs into a C plan (csrc/structured.c) and, after every ``append``,
creates the items whose conditions hold, without Python work per config.
Columns that no config references are never stored.  Semantics and
validation messages follow reverb-spec section 5.5.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import importlib.util
import secrets
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Union

import numpy as np

from fastreplay import _core, _nest, errors
from fastreplay.table import Table
from fastreplay.writer import DEFAULT_STORE, _seconds

__all__ = [
    "Condition",
    "ConditionProto",
    "Config",
    "ConstantPriorityFn",
    "ModEq",
    "Pattern",
    "PatternNode",
    "StructuredWriter",
    "TDError",
    "TensorSpec",
    "constant_priority_fn",
    "create_config",
    "create_reference_step",
    "infer_signature",
    "pattern_from_transform",
    "td_error",
    "unpack_pattern",
    "validate_config",
]


# ----- patterns -----

@dataclasses.dataclass(frozen=True)
class PatternNode:
    """A slice of one step field's history, relative to the newest step:
    ``start``/``stop``/``step`` as in Python slicing (``start`` unset: the
    single element at ``stop``, squeezed)."""

    flat_source_index: int
    start: int | None = None
    stop: int | None = None
    step: int | None = None

    def HasField(self, name: str) -> bool:  # noqa: N802 (protobuf's name)
        return getattr(self, name) is not None

    @property
    def length(self) -> int:
        """Elements the node selects (1 when squeezed)."""
        if self.start is None:
            return 1
        return len(range(self.start, self.stop or 0, self.step or 1))

    @property
    def max_age(self) -> int:
        """How many steps of history the node needs."""
        return -(self.start if self.start is not None else (self.stop or 0))


Pattern = Any  # a nest of PatternNode


class _RefNode:
    """Leaf of a reference step: indexing it builds a PatternNode."""

    def __init__(self, idx: int) -> None:
        self._idx = idx

    def __getitem__(self, key: int | slice) -> PatternNode:
        if isinstance(key, int):
            key = slice(key)
        elif not isinstance(key, slice):
            raise ValueError(
                f"Key must be int or slice by got {key} (type {type(key)}).")
        return PatternNode(self._idx, key.start, key.stop, key.step)


def _indexed(step_structure: Any, make: Callable[[int], Any]) -> Any:
    n = len(_nest.flatten(step_structure))
    return _nest.unflatten_as(step_structure, [make(i) for i in range(n)])


def create_reference_step(step_structure: Any) -> Any:
    """``step_structure`` with leaves that build PatternNodes when indexed:
    ``ref['a'][-2:]`` is the last two values of ``a``, ``ref['a'][-1]`` the
    newest one (squeezed)."""
    return _indexed(step_structure, _RefNode)


def pattern_from_transform(step_structure: Any, transform: Callable[[Any], Any]
                           ) -> Any:
    """The pattern ``transform`` builds from a reference step."""
    return transform(create_reference_step(step_structure))


# ----- conditions -----

@dataclasses.dataclass
class ModEq:
    mod: int = 0
    eq: int = 0


@dataclasses.dataclass
class ConditionProto:
    """One condition: a left-hand side (exactly one of ``step_index``,
    ``steps_since_applied``, ``buffer_length``, ``is_end_episode`` or
    ``flat_source_index``), a comparison (``eq``, ``ge`` or ``mod_eq``) and
    ``inverse``."""

    step_index: bool = False
    steps_since_applied: bool = False
    buffer_length: bool = False
    is_end_episode: bool = False
    flat_source_index: int | None = None
    eq: int | None = None
    ge: int | None = None
    mod_eq: ModEq | None = None
    inverse: bool = False

    @property
    def left(self) -> str | None:
        for name in ("step_index", "steps_since_applied", "buffer_length",
                     "is_end_episode"):
            if getattr(self, name):
                return name
        return "data" if self.flat_source_index is not None else None

    @property
    def cmp(self) -> str | None:
        if self.mod_eq is not None and self.mod_eq.mod:
            return "mod_eq"
        if self.eq is not None:
            return "eq"
        return "ge" if self.ge is not None else None


class _ConditionBuilder:
    """Left-hand side waiting for its comparison (``==``, ``>=``, ``% k``...)."""

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, incomplete: ConditionProto) -> None:
        self._incomplete = incomplete

    def _copy(self) -> ConditionProto:
        c = dataclasses.replace(self._incomplete)
        if c.mod_eq is not None:
            c.mod_eq = dataclasses.replace(c.mod_eq)
        return c

    def __mod__(self, cmp: int) -> _ConditionBuilder:
        c = self._copy()
        c.mod_eq = ModEq(mod=cmp)
        return _ConditionBuilder(c)

    def __eq__(self, cmp: int) -> ConditionProto:  # type: ignore[override]
        c = self._copy()
        if c.mod_eq is not None and c.mod_eq.mod:
            c.mod_eq.eq = cmp
        else:
            c.eq = cmp
        return c

    def __ne__(self, cmp: int) -> ConditionProto:  # type: ignore[override]
        c = self == cmp
        c.inverse = True
        return c

    def __ge__(self, cmp: int) -> ConditionProto:
        c = self._copy()
        c.ge = cmp
        return c

    def __gt__(self, cmp: int) -> ConditionProto:
        return self >= cmp + 1

    def __le__(self, cmp: int) -> ConditionProto:
        c = self > cmp
        c.inverse = True
        return c

    def __lt__(self, cmp: int) -> ConditionProto:
        return self <= cmp - 1


class Condition:
    """Building blocks of conditions."""

    @staticmethod
    def step_index() -> _ConditionBuilder:
        """(Zero-based) index of the newest step within the episode."""
        return _ConditionBuilder(ConditionProto(step_index=True))

    @staticmethod
    def steps_since_applied() -> _ConditionBuilder:
        """Steps added since this config last created an item."""
        return _ConditionBuilder(ConditionProto(steps_since_applied=True))

    @staticmethod
    def is_end_episode() -> ConditionProto:
        """True only while ``end_episode`` is called."""
        return ConditionProto(is_end_episode=True, eq=1)

    @staticmethod
    def data(step_structure: Any) -> Any:
        """Per field of the step, the value of a scalar int or bool in the
        newest step (a condition on an absent value is false)."""
        return _indexed(step_structure, lambda i: _ConditionBuilder(
            ConditionProto(flat_source_index=i)))


# ----- priorities -----

@dataclasses.dataclass(frozen=True)
class ConstantPriorityFn:
    value: float


@dataclasses.dataclass(frozen=True)
class TDError:
    max_priority_weight: float
    flat_source_index: int


Priority = Union[ConstantPriorityFn, TDError]  # noqa: UP007 (a runtime alias)


def constant_priority_fn(value: float) -> ConstantPriorityFn:
    """Every item gets priority ``value``."""
    return ConstantPriorityFn(float(value))


def td_error(max_priority_weight: float, step_structure: Any,
             get_field_from_step_fn: Callable[[Any], Any]) -> TDError:
    """Priority ``w * max|d| + (1 - w) * mean|d|`` over the cells the item
    references of the step field ``get_field_from_step_fn(step)`` (scalar
    float, double, int32 or int64 values)."""
    index = get_field_from_step_fn(_indexed(step_structure, lambda i: i))
    return TDError(float(max_priority_weight), int(index))


# ----- configs -----

@dataclasses.dataclass
class Config:
    """Reverb's StructuredWriterConfig: pattern nodes in flatten order, the
    pattern's nest (None leaves), the table, the priority and conditions."""

    flat: list[PatternNode]
    pattern_structure: Any
    table: str
    priority: Priority
    conditions: list[ConditionProto]

    @property
    def max_age(self) -> int:
        return max((node.max_age for node in self.flat), default=0)


def create_config(pattern: Any, table: str, conditions: Sequence[ConditionProto] = (),
                  priority: Priority | None = None) -> Config:
    """A config creating items shaped like ``pattern`` in ``table``."""
    return Config(
        flat=list(_nest.flatten(pattern)),
        pattern_structure=_nest.map_structure(lambda _: None, pattern),
        table=table,
        priority=constant_priority_fn(1.0) if priority is None else priority,
        conditions=list(conditions),
    )


def unpack_pattern(config: Config) -> Any:
    """The pattern (a nest of PatternNode) of ``config``."""
    return _nest.unflatten_as(config.pattern_structure, list(config.flat))


def _node_error(node: PatternNode) -> str | None:
    if node.flat_source_index < 0:
        return f"`flat_source_index` must be >= 0 but got {node.flat_source_index}."
    if node.start is None and node.stop is None:
        return "At least one of `start` and `stop` must be specified."
    if node.start is not None and node.start >= 0:
        return f"`start` must be < 0 but got {node.start}."
    if node.stop is not None and node.stop > 0:
        return f"`stop` must be <= 0 but got {node.stop}."
    if node.start is not None and node.stop is not None and node.stop <= node.start:
        return (f"`stop` ({node.stop}) must be > `start` ({node.start}) when both "
                "are specified.")
    if node.start is None and node.stop is not None and node.stop >= 0:
        return f"`stop` must be < 0 when `start` isn't set but got {node.stop}."
    if node.step is not None and node.start is None:
        return "`step` must only be set when `start` is set."
    if node.step is not None and node.step <= 0:
        return f"`step` must be > 0 but got {node.step}."
    return None


def _condition_error(c: ConditionProto) -> str | None:
    if c.left is None:
        return "Conditions must specify a value for `left`."
    if c.flat_source_index is not None and c.flat_source_index < 0:
        return f"flat_source_index must be >= 0 but got {c.flat_source_index}."
    if c.mod_eq is not None and c.mod_eq.mod <= 0:
        return f"`mod_eq.mod` must be > 0 but got {c.mod_eq.mod}."
    if c.cmp is None:
        return "Conditions must specify a value for `cmp`."
    if c.mod_eq is not None and c.mod_eq.eq < 0:
        return f"`mod_eq.eq` must be >= 0 but got {c.mod_eq.eq}."
    if c.is_end_episode and (c.cmp != "eq" or c.eq != 1 or c.inverse):
        return "Condition must use `eq=1` when using `is_end_episode`."
    return None


def validate_config(config: Config, position: int = 0) -> None:
    """Reverb's configuration rules; raises ValueError("Invalid configuration
    at position i: ...")."""
    problem: str | None = None
    if not config.flat:
        problem = "`flat` must not be empty."
    elif not config.table:
        problem = "`table` must not be empty."
    else:
        problems = [_node_error(n) for n in config.flat]
        problems += [_condition_error(c) for c in config.conditions]
        problem = next((p for p in problems if p), None)
    if problem is None and not any(
        c.buffer_length and c.ge is not None and c.ge >= config.max_age
        and not c.inverse for c in config.conditions
    ):
        problem = ("Config does not contain required buffer length condition; "
                   f"buffer_length >= {config.max_age}.")
    if problem is None and isinstance(config.priority, TDError) and not any(
        n.flat_source_index == config.priority.flat_source_index for n in config.flat
    ):
        problem = (f"td_error's field (flat index "
                   f"{config.priority.flat_source_index}) is not in the pattern.")
    if problem is not None:
        raise ValueError(f"Invalid configuration at position {position}: {problem}")


def with_buffer_length_condition(config: Config) -> Config:
    """A copy of ``config`` that only applies once the history holds every
    step it references (what ``Client.structured_writer`` adds)."""
    cond = ConditionProto(buffer_length=True, ge=config.max_age)
    return dataclasses.replace(config, conditions=[*config.conditions, cond])


# ----- signatures -----

@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """numpy-style spec: shape (None for a varying dimension), dtype, name."""

    shape: tuple[int | None, ...]
    dtype: np.dtype[Any]
    name: str | None = None


def _tf() -> Any:
    if "tensorflow" in sys.modules or importlib.util.find_spec("tensorflow"):
        try:
            return importlib.import_module("tensorflow")
        except ImportError:
            return None
    return None


def _np_dtype(dtype: Any) -> np.dtype[Any]:
    """numpy dtype of a numpy or TensorFlow dtype."""
    out: np.dtype[Any] = np.dtype(getattr(dtype, "as_numpy_dtype", dtype))
    return out


def infer_signature(configs: Sequence[Config], step_spec: Any) -> Any:
    """The table signature of the items ``configs`` create from steps like
    ``step_spec`` (a nest of objects with ``.shape`` and ``.dtype``): a nest
    of TensorSpec (``tf.TensorSpec`` when TensorFlow is importable).  A
    leading dimension that differs between configs becomes None.

    Raises ValueError without configs, or when they differ in table or
    pattern structure, or produce different dtypes, ranks or trailing dims.
    """
    if not configs:
        raise ValueError("At least one config must be provided.")
    if any(c.pattern_structure != configs[0].pattern_structure for c in configs):
        raise ValueError("All configs must have exactly the same pattern_structure.")
    if any(c.table != configs[0].table for c in configs):
        raise ValueError(
            "All configs must target the same table but provided configs included "
            f"{', '.join(sorted({c.table for c in configs}))}.")
    flat_spec = _nest.flatten(step_spec)
    tf = _tf()

    def spec_of(path: tuple[Any, ...], *nodes: PatternNode) -> Any:
        dtypes = [_np_dtype(flat_spec[n.flat_source_index].dtype) for n in nodes]
        if any(d != dtypes[0] for d in dtypes):
            raise ValueError(f"Configs produce trajectories with multiple dtypes at "
                             f"{path}. Got {dtypes}.")
        shapes = []
        for n in nodes:
            shape = [None if d is None else int(d)
                     for d in flat_spec[n.flat_source_index].shape]
            shapes.append(shape if n.start is None else [n.length, *shape])
        if any(len(s) != len(shapes[0]) for s in shapes) or (
            len(shapes[0]) > 1 and any(s[1:] != shapes[0][1:] for s in shapes)
        ):
            raise ValueError(f"Configs produce trajectories with incompatible shapes "
                             f"at {path}. Got {shapes}.")
        merged = shapes[0] if all(s == shapes[0] for s in shapes) else [
            None, *shapes[0][1:]]
        name = "/".join(str(x) for x in path)
        if tf is not None:
            return tf.TensorSpec(shape=merged, dtype=dtypes[0], name=name)
        return TensorSpec(tuple(merged), dtypes[0], name)

    paths = [p for p, _ in _nest.flatten_with_path(unpack_pattern(configs[0]))]
    specs = [spec_of(path, *(c.flat[i] for c in configs))
             for i, path in enumerate(paths)]
    return _nest.unflatten_as(configs[0].pattern_structure, specs)


# ----- the writer -----

class StructuredWriter:
    """Appends steps and creates the items of ``configs`` (Reverb's
    ``StructuredWriter``; usually made by ``Client.structured_writer``).

    Parameters
    ----------
    tables : Table, iterable of Table or mapping name -> Table
        The tables the configs may name.
    configs : sequence of Config
        Validated here; each gets the buffer-length condition it needs.
    chunk_store : ChunkStore, optional
        Accounting for the chunks (default: the TrajectoryWriter default).
    seed : int, optional
        Seed for chunk and item keys.
    """

    def __init__(self, tables: Table | Iterable[Table] | Mapping[str, Table],
                 configs: Sequence[Config], *,
                 chunk_store: _core.ChunkStore | None = None,
                 seed: int | None = None) -> None:
        if not configs:
            raise ValueError("At least one config must be provided.")
        if isinstance(tables, Table):
            tables = [tables]
        by_name = dict(tables) if isinstance(tables, Mapping) else {
            t.name: t for t in tables}
        self._configs = [with_buffer_length_condition(c) for c in configs]
        for i, config in enumerate(self._configs):
            validate_config(config, i)
            if config.table not in by_name:
                raise ValueError(
                    f"Invalid configuration at position {i}: table '{config.table}' "
                    f"not found; the tables are {', '.join(sorted(by_name))}.")
        self._tables = by_name
        self._store = chunk_store
        self._seed = secrets.randbits(64) if seed is None else int(seed) % 2**64
        self._plan: _core.FlattenPlan | None = None
        self._sw: _core.StructuredCore | None = None
        self._closed = False

    def _start(self, data: Any, flat: list[Any]) -> None:
        """Compile the plan on the first append, when the step is known."""
        paths = [p for p, _ in _nest.flatten_with_path(data)]
        for i, config in enumerate(self._configs):
            sources = [n.flat_source_index for n in config.flat] + [
                c.flat_source_index for c in config.conditions
                if c.flat_source_index is not None]
            if any(s >= len(flat) for s in sources):
                raise ValueError(
                    f"Invalid configuration at position {i}: it references flat "
                    f"index {max(sources)} but steps have {len(flat)} fields.")
        stored = sorted({n.flat_source_index for c in self._configs for n in c.flat})
        column = {s: k for k, s in enumerate(stored)}
        data_sources = sorted({c.flat_source_index for cfg in self._configs
                               for c in cfg.conditions
                               if c.flat_source_index is not None})
        data_index = {s: k for k, s in enumerate(data_sources)}
        keep_alive = max(1, max(c.max_age for c in self._configs))
        core = _core.WriterCore(self._store or DEFAULT_STORE, self._seed, keep_alive)
        for s in stored:
            core.add_column(repr(paths[s]))
        compiled = []
        for config in self._configs:
            nodes = [(column[n.flat_source_index], int(n.start is not None),
                      n.start or 0, n.stop or 0, n.step or 1) for n in config.flat]
            conds = [(_core.LEFT_KINDS[c.left or ""],
                      data_index.get(c.flat_source_index or 0, 0) if c.left == "data"
                      else 0,
                      _core.CMP_KINDS[c.cmp or ""], int(c.inverse),
                      (c.mod_eq.eq if c.cmp == "mod_eq" and c.mod_eq is not None
                       else c.eq if c.cmp == "eq" else c.ge) or 0,
                      c.mod_eq.mod if c.mod_eq is not None else 0)
                     for c in config.conditions]
            p = config.priority
            if isinstance(p, TDError):
                td_node = next(k for k, n in enumerate(config.flat)
                               if n.flat_source_index == p.flat_source_index)
                fn = (_core.PRIORITY_FNS["td_error"], p.max_priority_weight, td_node)
            else:
                fn = (_core.PRIORITY_FNS["constant"], p.value, -1)
            table = self._tables[config.table]
            table._structure = config.pattern_structure
            compiled.append((table._core, nodes, conds, *fn))
        self._sw = _core.StructuredCore(core, len(flat), stored, data_sources, compiled)
        self._plan = _core.FlattenPlan(_nest.map_structure(lambda _: None, data),
                                       {p: i for i, p in enumerate(paths)})

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("StructuredWriter::Close has been called.")

    def append(self, data: Any, *, partial_step: bool = False) -> None:
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
            flat = _nest.flatten(data)
            if self._sw is None:
                self._start(data, flat)
        assert self._sw is not None
        self._sw.append(flat, partial_step)

    @property
    def step_is_open(self) -> bool:
        """True after an ``append(..., partial_step=True)`` until the step
        is closed."""
        return self._sw is not None and self._sw.core.step_open

    def flush(self, block_until_num_items: int = 0, timeout_ms: int | None = None
              ) -> None:
        """Send all created items but the last ``block_until_num_items`` and
        wait until at most that many are not yet in their tables.

        Raises ValueError for ``block_until_num_items < 0`` and
        DeadlineExceededError when ``timeout_ms`` expires."""
        self._check_open()
        if block_until_num_items < 0:
            raise ValueError(
                f"block_until_num_items must be >= 0, got {block_until_num_items}")
        if self._sw is not None and not self._sw.core.flush(
                block_until_num_items, _seconds(timeout_ms)):
            raise errors.DeadlineExceededError(
                "Flush call did not complete within provided timeout of "
                f"{datetime.timedelta(milliseconds=timeout_ms or 0)}")

    def end_episode(self, clear_buffers: bool = True, timeout_ms: int | None = None
                    ) -> None:
        """Create the items of configs conditioned on ``is_end_episode``,
        flush, and start a new episode (clearing the history with
        ``clear_buffers``).  The episode ends even on timeout."""
        self._check_open()
        if self._sw is not None and not self._sw.end_episode(
                clear_buffers, _seconds(timeout_ms)):
            raise errors.DeadlineExceededError(
                "End episode call did not complete within provided timeout of "
                f"{datetime.timedelta(milliseconds=timeout_ms or 0)}")

    @property
    def num_pending_items(self) -> int:
        return 0 if self._sw is None else int(self._sw.core.pending())

    def close(self) -> None:
        """Stop the writer; items not yet in their tables are dropped."""
        self._closed = True
        if self._sw is not None:
            self._sw.core.close()

    def __enter__(self) -> StructuredWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None and not self._closed:
            self.flush()

