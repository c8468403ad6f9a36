"""StructuredWriter configurations (Reverb's ``reverb.structured``
patterns, conditions, priorities, configs, validation and signatures).

Plain dataclasses stand in for Reverb's protobufs; the names and the
validation messages are Reverb's.  ``fastreplay.structured_writer``
re-exports everything here.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from typing import Any, Union

import numpy as np

from fastreplay import _nest
from fastreplay.chunkers import compression_mode

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
    #: fastreplay's: the path of the step field the node slices, when built
    #: from a reference step (names the field in error messages).
    source_path: tuple[Any, ...] | None = dataclasses.field(
        default=None, compare=False, repr=False, kw_only=True)

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


def _ref_text(path: tuple[Any, ...] | None) -> str:
    """How a user wrote the reference of a step field: ``ref['obs']``."""
    return "ref" + "".join(f"[{k!r}]" for k in (path or ()))


class _RefNode:
    """Leaf of a reference step: indexing it builds a PatternNode."""

    def __init__(self, idx: int, path: tuple[Any, ...] = ()) -> None:
        self._idx = idx
        self._path = path

    def __getitem__(self, key: int | slice) -> PatternNode:
        if isinstance(key, int):
            key = slice(key)
        elif not isinstance(key, slice):
            ref = _ref_text(self._path)
            raise ValueError(
                f"Key must be int or slice by got {key} (type {type(key)}). "
                f"{ref} is the history of one step field: index it with a "
                f"negative int or slice, e.g. {ref}[-1] (newest step) or "
                f"{ref}[-3:] (last three).")
        return PatternNode(self._idx, key.start, key.stop, key.step,
                           source_path=self._path)

    def __repr__(self) -> str:
        return f"{_ref_text(self._path)} (a whole step field)"


def _indexed(step_structure: Any, make: Callable[[int], Any]) -> Any:
    n = len(_nest.flatten(step_structure))
    return _nest.unflatten_as(step_structure, [make(i) for i in range(n)])


def create_reference_step(step_structure: Any) -> Any:
    """``step_structure`` with leaves that build PatternNodes when indexed:
    ``ref['a'][-2:]`` is the last two values of ``a``, ``ref['a'][-1]`` the
    newest one (squeezed)."""
    paths = [p for p, _ in _nest.flatten_with_path(step_structure)]
    return _nest.unflatten_as(step_structure,
                              [_RefNode(i, p) for i, p in enumerate(paths)])


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

class Unset:
    """The type of ``UNSET``: a keyword argument not given."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET = Unset()


@dataclasses.dataclass
class Config:
    """Reverb's StructuredWriterConfig: pattern nodes in flatten order, the
    pattern's nest (None leaves), the table, the priority and conditions."""

    flat: list[PatternNode]
    pattern_structure: Any
    table: str
    priority: Priority
    conditions: list[ConditionProto]
    #: fastreplay's: the compression of the columns the pattern stores
    #: (``'auto'``, ``'lz4'`` or None); unset: the table's default.
    compression: str | None | Unset = UNSET

    @property
    def max_age(self) -> int:
        return max((node.max_age for node in self.flat), default=0)


def create_config(pattern: Any, table: str, conditions: Sequence[ConditionProto] = (),
                  priority: Priority | None = None, *,
                  compression: str | None | Unset = UNSET) -> Config:
    """A config creating items shaped like ``pattern`` in ``table``.

    ``compression`` (fastreplay's): how the columns the pattern references
    are stored, ``'auto'``, ``'lz4'`` or None; by default the table's
    (``Table(compression=...)``).
    """
    if not isinstance(compression, Unset):
        compression_mode(compression, f"config for table '{table}'")
    _check_create_config(pattern, table, conditions, priority)
    return Config(
        flat=list(_nest.flatten(pattern)),
        pattern_structure=_nest.map_structure(lambda _: None, pattern),
        table=table,
        priority=constant_priority_fn(1.0) if priority is None else priority,
        conditions=list(conditions),
        compression=compression,
    )


def _check_create_config(pattern: Any, table: Any,
                         conditions: Sequence[ConditionProto],
                         priority: Priority | None) -> None:
    """create_config's checks: ValueError naming the pattern path, the table
    and the fix (Reverb defers these to the writer, or never makes them)."""
    where = f"create_config (table {table!r})"
    if not isinstance(table, str) or not table:
        raise ValueError(f"{where}: `table` must be a non-empty table name, got "
                         f"{table!r}.")
    leaves = list(_nest.flatten_with_path(pattern))
    if not leaves:
        raise ValueError(f"{where}: the pattern has no slices; give at least one, "
                         "e.g. {'obs': ref['obs'][-1]} with ref = "
                         "create_reference_step(step).")
    for path, leaf in leaves:
        if isinstance(leaf, _RefNode):
            ref = _ref_text(leaf._path)
            raise ValueError(
                f"{where}: the pattern at {path} is {ref}, a whole step field, "
                f"not a slice of its history: use {ref}[-1] for one step or "
                f"{ref}[-3:] for three.")
        if not isinstance(leaf, PatternNode):
            raise ValueError(
                f"{where}: the pattern at {path} is a {type(leaf).__name__}, but "
                "pattern leaves must be slices of a reference step: ref = "
                "create_reference_step(step), then e.g. ref['obs'][-1] for one "
                "step or ref['obs'][-3:] for three.")
        problem = _node_error(leaf)
        if problem is not None:
            known = leaf.source_path is not None
            ref = _ref_text(leaf.source_path) if known else "ref[...]"
            field = ref if known else (
                f"the field at flat index {leaf.flat_source_index}")
            raise ValueError(
                f"{where}: the pattern at {path} (a slice of {field}) is invalid: "
                f"{problem} Slices count back from the newest step with negative "
                f"indices: use {ref}[-1] for the newest step or {ref}[-3:] for the "
                "last three.")
    for i, c in enumerate(conditions):
        if not isinstance(c, ConditionProto):
            raise ValueError(
                f"{where}: condition {i} is a {type(c).__name__}, not a complete "
                "condition: compare it, e.g. Condition.step_index() % 2 == 0 or "
                "Condition.steps_since_applied() >= 3.")
        problem = _condition_error(c)
        if problem is not None:
            raise ValueError(f"{where}: condition {i} is invalid: {problem}")
    if priority is not None and not isinstance(priority, (ConstantPriorityFn,
                                                          TDError)):
        raise ValueError(
            f"{where}: priority must be constant_priority_fn(value) or "
            f"td_error(...), got {type(priority).__name__}.")


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
