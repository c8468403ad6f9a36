"""StructuredWriter: items declared once as patterns (Reverb's
``reverb.structured``).

A ``Config`` names slices of the step history (``PatternNode``), a table,
conditions on the step and a priority function (fastreplay/_structured_config.py).
The writer compiles its configs into a C plan (csrc/structured.c) and, after
every ``append``, creates the items whose conditions hold, without Python
work per config.  Columns that no config references are never stored.
Semantics and validation messages follow reverb-spec section 5.5.
"""

from __future__ import annotations

import datetime
import secrets
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from fastreplay import _core, _nest, _structures, errors
from fastreplay._structured_config import (
    Condition,
    ConditionProto,
    Config,
    ConstantPriorityFn,
    ModEq,
    Pattern,
    PatternNode,
    Priority,
    TDError,
    TensorSpec,
    Unset,
    constant_priority_fn,
    create_config,
    create_reference_step,
    infer_signature,
    pattern_from_transform,
    td_error,
    unpack_pattern,
    validate_config,
    with_buffer_length_condition,
)
from fastreplay.chunkers import compression_mode
from fastreplay.table import Table
from fastreplay.writer import DEFAULT_STORE, _seconds, _sink_flush

__all__ = [
    "Condition",
    "ConditionProto",
    "Config",
    "ConstantPriorityFn",
    "ModEq",
    "Pattern",
    "PatternNode",
    "Priority",
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



# ----- the writer -----

class StructuredWriter(_core._StructuredBase):
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
                 seed: int | None = None, sink: Any = None) -> None:
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
        self._modes = _column_modes(self._configs, by_name)
        self._store = chunk_store
        self._sink = sink  # as TrajectoryWriter's
        self._seed = secrets.randbits(64) if seed is None else int(seed) % 2**64
        self._plan = None
        self._paths: list[tuple[Any, ...]] = []
        self._sw = None
        self._closed = False
        self._start_lock = threading.Lock()  # first appends of several threads

    def _start(self, data: Any, flat: list[Any]) -> None:
        """Compile the plan on the first append, when the step is known."""
        paths = [p for p, _ in _nest.flatten_with_path(data)]
        _check_first_step(self._configs, paths, flat)
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
        for s in stored:  # errors name a column as Reverb's writer does
            col = core.add_column(f"{s} (path={paths[s]!r})")
            if self._modes[s] != _core.COMPRESSION_AUTO:
                core.set_compression(col, self._modes[s])
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
            compiled.append((table._core, nodes, conds, *fn,
                             _structures.intern(config.pattern_structure)))
        self._paths = paths  # the step's field paths, for messages
        self._sw = _core.StructuredCore(core, len(flat), stored, data_sources, compiled)
        self._plan = _core.FlattenPlan(_nest.map_structure(lambda _: None, data),
                                       {p: i for i, p in enumerate(paths)})

    def _flatten_general(self, data: Any) -> list[Any]:
        """The flat step when the compiled plan does not fit ``data`` (or
        before the first append, which compiles it)."""
        flat = _nest.flatten(data)
        if self._sw is None:
            with self._start_lock:
                if self._sw is None:
                    self._start(data, flat)
        paths = [p for p, _ in _nest.flatten_with_path(data)]
        if paths != self._paths:
            _raise_structure_change(paths, self._paths)
        return flat

    def extend(self, data: Any) -> int:
        """Append several whole steps at once (a fastreplay addition, as
        ``TrajectoryWriter.extend``): every leaf of ``data`` has a leading
        axis of the steps, and after each step the configs create their
        items, as one ``append`` per step would, all in one call into C
        with the steps sharing chunks.  Returns the number of items created.

        Raises
        ------
        ValueError
            As ``append``, and for a leaf without a leading axis or with
            another length than the others (naming both columns), or an
            open partial step; nothing is written then.  A config failing on
            a step (a td_error priority that is NaN, say) raises with that
            step appended, as ``append`` would, and the steps before it
            appended with their items.
        """
        self._check_open()
        if self._sw is None:
            self._flatten_general(_nest.map_structure(_first_row, data))
        plan, sw = self._plan, self._sw
        assert plan is not None and sw is not None  # compiled above
        flat = plan.flatten(data)
        if flat is None:
            flat = self._flatten_general(data)
        made = int(_core.extend_structured(sw, flat))
        if made and self._sink is not None:
            self._sink.ship()
        return made

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
        _sink_flush(self._sink, block_until_num_items, timeout_ms)

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
        _sink_flush(self._sink, 0, timeout_ms)

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


def _first_row(value: Any) -> Any:
    """The first step of a leaf given with a leading axis of steps (the
    plan is compiled from one step)."""
    if value is None:
        return None
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    if arr.ndim == 0:
        return arr  # extend names the column that lacks the axis
    return arr[0] if len(arr) else np.zeros(arr.shape[1:], arr.dtype)


def _raise_structure_change(got: list[tuple[Any, ...]],
                            want: list[tuple[Any, ...]]) -> None:
    """ValueError for a step whose fields differ from the first step's,
    naming the missing and unexpected field paths (Reverb's length message
    first when the lengths differ)."""
    missing = [p for p in want if p not in set(got)]
    extra = [p for p in got if p not in set(want)]
    parts = []
    if len(got) != len(want):
        parts.append(f"Flattened data has an unexpected length, got {len(got)} "
                     f"but wanted {len(want)}.")
    else:
        parts.append("The step's fields differ from the first step's.")
    if missing:
        parts.append(f"Missing field(s): {', '.join(map(repr, missing))}.")
    if extra:
        parts.append(f"Unexpected field(s): {', '.join(map(repr, extra))}.")
    if not missing and not extra:
        parts.append("The fields are in a different order or container type.")
    parts.append("Every append must give the fields of the first step (its "
                 "structure is fixed then); give None for a field without a value "
                 "in this step.")
    raise ValueError(" ".join(parts))


def _check_first_step(configs: Sequence[Config], paths: list[tuple[Any, ...]],
                     flat: list[Any]) -> None:
    """Data conditions read scalar int or bool fields and a td_error
    priority a scalar float or int field: check the first step's values,
    naming the field (before anything is stored)."""
    for i, config in enumerate(configs):
        for c in config.conditions:
            s = c.flat_source_index
            if c.left != "data" or s is None or s >= len(flat) or flat[s] is None:
                continue
            arr = np.asarray(flat[s])
            if arr.ndim != 0 or arr.dtype.kind not in "biu":
                raise ValueError(
                    f"Config {i} (table '{config.table}'): data conditions read "
                    f"scalar int or bool values, but step field {paths[s]!r} "
                    f"holds a {arr.dtype} {list(arr.shape)} value: condition on "
                    "a scalar int or bool field (e.g. Condition.data(step)"
                    "['is_first'] == 1).")
        p = config.priority
        if not isinstance(p, TDError) or p.flat_source_index >= len(flat):
            continue
        value = flat[p.flat_source_index]
        if value is None:
            continue
        arr = np.asarray(value)
        if arr.ndim != 0 or arr.dtype.name not in ("float32", "float64", "int32",
                                                   "int64"):
            raise ValueError(
                f"Config {i} (table '{config.table}'): TD Error expects a scalar "
                "double, float, int32 or int64 column, but step field "
                f"{paths[p.flat_source_index]!r} is a {arr.dtype} {list(arr.shape)} "
                "value: point td_error's get_field_fn at a scalar field (e.g. "
                "lambda step: step['td_error']).")


def _column_modes(configs: Sequence[Config], tables: Mapping[str, Table]
                  ) -> dict[int, int]:
    """The compression (_core.COMPRESSION_*) of each flat index the configs
    store: the one the configs name (they must agree), else the default of
    the table of the first config that stores it."""
    explicit: dict[int, tuple[int, int]] = {}  # flat index -> (mode, config)
    modes: dict[int, int] = {}
    for i, config in enumerate(configs):
        given = None if isinstance(config.compression, Unset) else compression_mode(
            config.compression, f"Invalid configuration at position {i}")
        for node in config.flat:
            s = node.flat_source_index
            modes.setdefault(s, compression_mode(
                tables[config.table].compression, config.table))
            if given is None:
                continue
            mode, first = explicit.setdefault(s, (given, i))
            if mode != given:
                raise ValueError(
                    f"Invalid configuration at position {i}: its compression "
                    f"{config.compression!r} for flat index {s} differs from "
                    f"{configs[first].compression!r} of the configuration at "
                    f"position {first}.")
    modes.update({s: mode for s, (mode, _) in explicit.items()})
    return modes
