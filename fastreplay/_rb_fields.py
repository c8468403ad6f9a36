"""The fields of a ``ReplayBuffer``: declared specs, conversions and nests.

``spec={"obs": (np.float32, (4,)), "reward": (np.float32, ())}`` (or
cpprb's ``env_dict={"obs": {"shape": 4, "dtype": np.float32}}``) fixes each
field's dtype and row shape when the buffer is built; a value of another
dtype is converted by :func:`convert`'s rule, and anything else raises
``ValueError`` naming the field and its spec.

A field whose value is a dict (``obs={"image": ..., "state": ...}``) is
stored as one column per leaf, flattened in sorted key order as the writers
flatten a nest (``fastreplay._nest``), each named by its path joined with
``/`` (``"obs/image"``); ``sample`` returns the same nesting.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from fastreplay import errors

__all__ = ["FieldLayout", "SEP", "convert", "field_difference", "mismatch",
           "parse_spec", "priority_error", "rows_error"]

#: Joins the keys of a nested field's path into its column name.
SEP = "/"

#: Numpy kinds a ReplayBuffer field may have (numbers and bools).
_KINDS = "biufc"

Leaf = tuple[np.dtype[Any], tuple[int, ...]]

#: Python scalars converted directly to declared scalar fields of these
#: kinds (numpy raises OverflowError for an int out of range).
_SCALARS: dict[type, str] = {bool: "biufc", int: "iufc", float: "fc"}


def _leaf(value: Any, where: str) -> Leaf:
    """(dtype, shape) of a declared leaf: a ``(dtype, shape)`` pair or an
    object with ``.dtype`` and ``.shape`` (a numpy array, a gym ``Box``, a
    ``tf.TensorSpec``)."""
    if (not isinstance(value, type) and hasattr(value, "dtype")
            and hasattr(value, "shape")):
        dtype, shape = value.dtype, value.shape
    elif isinstance(value, tuple) and len(value) == 2:
        dtype, shape = value
    else:
        raise TypeError(f"spec of field {where!r} must be a (dtype, shape) pair, an "
                        f"object with .dtype and .shape, or a dict of those; got "
                        f"{value!r:.80}")
    try:
        dt = np.dtype(getattr(dtype, "as_numpy_dtype", dtype))
    except TypeError as exc:
        raise TypeError(f"spec of field {where!r}: {dtype!r} is not a dtype") from exc
    if dt.kind not in _KINDS:
        raise ValueError(f"spec of field {where!r}: dtype {dt} is not supported "
                         "(numbers and bools only)")
    return dt, _shape(shape, where)


def _shape(shape: Any, where: str) -> tuple[int, ...]:
    if shape is None:
        return ()
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"spec of field {where!r}: shape {shape!r} is not a tuple "
                        "of integers (fixed sizes only)") from exc
    if any(d < 0 for d in dims):
        raise ValueError(f"spec of field {where!r}: shape {dims} has a negative size")
    return dims


def _env_leaf(value: Any, where: str) -> Leaf:
    """cpprb's ``env_dict`` entry: ``{"shape": ..., "dtype": ...}``, both
    optional (cpprb's defaults: shape 1, dtype float32)."""
    if not isinstance(value, Mapping):
        raise TypeError(f"env_dict[{where!r}] must be a dict like "
                        f"{{'shape': (4,), 'dtype': np.float32}}, got {value!r:.80}")
    unknown = sorted(set(value) - {"shape", "dtype"})
    if unknown:
        raise ValueError(f"env_dict[{where!r}] has keys {unknown} that fastreplay "
                         "does not support (only 'shape' and 'dtype')")
    return _leaf((value.get("dtype", np.float32), value.get("shape", 1)), where)


def parse_spec(spec: Mapping[str, Any] | None, env_dict: Mapping[str, Any] | None
               ) -> tuple[dict[str, Leaf], dict[str, tuple[str, ...]]] | None:
    """``(leaves, paths)``: column name -> (dtype, shape) and column name ->
    path, from ``spec`` (nested dicts allowed) or ``env_dict``; None when
    neither is given."""
    if spec is not None and env_dict is not None:
        raise ValueError("pass spec= or env_dict=, not both")
    if spec is None and env_dict is None:
        return None
    leaves: dict[str, Leaf] = {}
    paths: dict[str, tuple[str, ...]] = {}
    source = spec if spec is not None else env_dict
    what = "spec" if spec is not None else "env_dict"
    if not isinstance(source, Mapping) or not source:
        raise TypeError(f"{what} must be a non-empty dict of fields, got "
                        f"{source!r:.80}")

    def walk(node: Mapping[str, Any], prefix: tuple[str, ...]) -> None:
        for key in sorted(node):
            check_key(key, prefix)
            value, path = node[key], prefix + (key,)
            name = SEP.join(path)
            if spec is not None and isinstance(value, Mapping):
                if not value:
                    raise ValueError(f"spec of field {name!r} is an empty dict")
                walk(value, path)
                continue
            leaves[name] = (_leaf(value, name) if spec is not None
                            else _env_leaf(value, name))
            paths[name] = path
    walk(source, ())
    return leaves, paths


def check_key(key: Any, prefix: tuple[str, ...]) -> None:
    if not isinstance(key, str) or not key:
        where = f" in field {SEP.join(prefix)!r}" if prefix else ""
        raise TypeError(f"field names must be non-empty str, got {key!r}{where}")


def _fits(arr: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray | None:
    """``arr`` as ``dtype`` when every value survives the conversion, else
    None (for integer targets: no wrap-around)."""
    out = arr.astype(dtype)
    with np.errstate(all="ignore"):
        back = out.astype(arr.dtype)
    return out if np.array_equal(back, arr) else None


def convert(name: str, value: Any, dtype: np.dtype[Any], shape: tuple[int, ...],
            lead: int) -> np.ndarray:
    """``value`` as rows of ``dtype`` and ``shape`` after ``lead`` leading
    axes (0 or 1).

    The rule: a dtype that numpy's ``same_kind`` casting allows is
    converted (int -> float, float64 -> float32, bool -> int), except that
    an integer target takes integers only when every value fits (Python
    ``3`` into uint8 works, ``300`` does not); float -> int and the like
    raise.  A shape that differs from ``shape`` only by axes of size 1
    (cpprb's ``(N, 1)`` scalars) is reshaped.  ValueError names the field
    and its spec otherwise.
    """
    if (not lead and not shape and type(value) in _SCALARS
            and dtype.kind in _SCALARS[type(value)]):
        try:  # a Python scalar: numpy checks the range of an int
            return np.array(value, dtype)
        except OverflowError:
            pass
    arr = np.asarray(value)
    if arr.dtype != dtype:
        out: np.ndarray | None = None
        if arr.dtype.kind in _KINDS:
            if dtype.kind in "iu" and arr.dtype.kind in "biu":
                if np.can_cast(arr.dtype, dtype, "safe"):
                    out = arr.astype(dtype)
                else:
                    out = _fits(arr, dtype)
            elif np.can_cast(arr.dtype, dtype, "same_kind"):
                out = arr.astype(dtype)
        if out is None:
            raise ValueError(
                f"field {name!r}: values of dtype {arr.dtype} cannot be stored in "
                f"its spec ({dtype}, {shape}) without losing information (e.g. "
                f"float -> int, or an integer out of range); convert them first, e.g. "
                f"np.asarray(x).astype(np.{dtype.name})")
        arr = out
    rows = arr.shape[lead:]
    if rows != shape:
        if (arr.ndim >= lead and int(np.prod(rows)) == int(np.prod(shape))
                and tuple(d for d in rows if d != 1)
                == tuple(d for d in shape if d != 1)):
            arr = arr.reshape(arr.shape[:lead] + shape)
        else:
            axis = " after the leading batch axis" if lead else ""
            raise ValueError(f"field {name!r}: rows of shape {rows}{axis} do not "
                             f"match its spec ({dtype}, {shape})")
    return arr


def mismatch(names: list[str], got: list[tuple[Any, ...]],
             want: list[tuple[Any, ...]], hint: bool) -> ValueError:
    """The error for the first field whose rows (dtype, shape) differ from
    the buffer's; with ``hint`` (no spec declared) it says what to do."""
    for name, g, w in zip(names, got, want, strict=False):
        if g != w:
            fix = ""
            if hint:
                wide = w
                if w[0].kind in "biu" and g[0].kind == "f" and g[1] == w[1]:
                    wide = (np.dtype(np.float32), w[1])  # a float into an int column
                fix = ("; the first add fixed it; declare the field, e.g. ReplayBuffer("
                       f"..., spec={{{name!r}: (np.{wide[0].name}, {wide[1]}), ...}}) "
                       "or add values of one dtype and shape from the start")
                if wide is not w:
                    fix += " (e.g. 1.0 rather than 1)"
            return ValueError(f"field {name!r}: rows of dtype {g[0]} and shape {g[1]} "
                              f"differ from the buffer's {w[0]} {w[1]}{fix}")
    return ValueError(f"fields {names} differ from the buffer's")


def field_difference(names: list[str], fields: list[str]) -> ValueError:
    """The error for a transition whose field names are not the buffer's."""
    missing = sorted(set(fields) - set(names))
    extra = sorted(set(names) - set(fields))
    parts = ([f"missing field(s) {missing}"] if missing else []) + (
        [f"unexpected field(s) {extra}"] if extra else [])
    return ValueError(f"this transition has {' and '.join(parts)}: every add gives the "
                      f"buffer's fields {fields} (fixed by the first add or spec=)")


class FieldLayout:
    """A buffer's column names, their paths (nested fields) and declared
    specs.  ``nested`` says whether any field is a dict; a flat buffer's
    transitions are used as they come."""

    def __init__(self, declared: dict[str, Leaf] | None = None,
                 paths: dict[str, tuple[str, ...]] | None = None) -> None:
        self.declared = declared
        self.paths: dict[str, tuple[str, ...]] = dict(paths or {})
        self.nested = any(len(p) > 1 for p in self.paths.values())
        #: top-level field -> its column names (nested fields only)
        self.tops: set[str] = {p[0] for p in self.paths.values()}

    def learn(self, flat_paths: dict[str, tuple[str, ...]]) -> None:
        """Record the paths of the first insert (undeclared buffers)."""
        if self.declared is None:
            self.paths = dict(flat_paths)
            self.nested = any(len(p) > 1 for p in self.paths.values())
            self.tops = {p[0] for p in self.paths.values()}

    def flatten(self, transition: Mapping[str, Any]
                ) -> tuple[dict[str, Any], dict[str, tuple[str, ...]]]:
        """Column name -> value and column name -> path of one transition
        (or batch); dict values are flattened, everything else is a leaf."""
        flat: dict[str, Any] = {}
        paths: dict[str, tuple[str, ...]] = {}
        if self.nested and all(
                type(v) is not dict or all(type(k) is str and type(x) is not dict
                                           for k, x in v.items())
                for v in transition.values()):
            # the common case of a known layout: str-keyed dicts one level deep
            for key, value in transition.items():
                if type(value) is not dict:
                    flat[key], paths[key] = value, (key,)
                    continue
                for k in sorted(value):
                    name = key + SEP + k
                    flat[name], paths[name] = value[k], (key, k)
            count = sum(len(v) or -1 if type(v) is dict else 1
                        for v in transition.values())
            if count == len(flat) and all(type(k) is str and k for k in transition):
                return flat, paths  # else a collision, empty dict or bad key:
            flat, paths = {}, {}

        def walk(key: str, value: Any, prefix: tuple[str, ...]) -> None:
            check_key(key, prefix)
            path = prefix + (key,)
            if isinstance(value, Mapping):
                if not value:
                    raise ValueError(f"field {SEP.join(path)!r} is an empty dict")
                for k in value:
                    check_key(k, path)
                for k in sorted(value):
                    walk(k, value[k], path)
                return
            name = SEP.join(path)
            if name in flat:
                raise ValueError(f"field {name!r} is given twice (as a nested key and "
                                 "as a flat name)")
            flat[name], paths[name] = value, path
        for key, value in transition.items():
            walk(key, value, ())
        return flat, paths

    def unflatten(self, columns: dict[str, Any]) -> dict[str, Any]:
        """Sampled columns nested as the transitions were added."""
        out: dict[str, Any] = {}
        for name, value in columns.items():
            path = self.paths.get(name)
            if path is None or len(path) == 1:
                out[name] = value
                continue
            node = out
            for key in path[:-1]:
                node = node.setdefault(key, {})
            node[path[-1]] = value
        return out

    def conform(self, flat: dict[str, Any], lead: int) -> dict[str, Any]:
        """Declared fields converted to their specs (ValueError naming an
        undeclared or missing field)."""
        declared = self.declared
        if declared is None:
            return flat
        if flat.keys() != declared.keys():
            extra = sorted(set(flat) - set(declared))
            missing = sorted(set(declared) - set(flat))
            raise ValueError(
                "the transition's fields do not match the declared spec: "
                + (f"{extra} not declared" if extra else "")
                + ("; " if extra and missing else "")
                + (f"{missing} missing" if missing else "")
                + f" (declared: {sorted(declared)})")
        out = {}
        for name, value in flat.items():
            dtype, shape = declared[name]
            kind = type(value)
            if (kind is np.ndarray and value.dtype == dtype
                    and value.shape[lead:] == shape):
                out[name] = value
                continue
            if not lead and not shape and dtype.kind in _SCALARS.get(kind, ""):
                try:  # a Python scalar (add): numpy checks an int's range
                    out[name] = np.array(value, dtype)
                    continue
                except OverflowError:
                    pass
            out[name] = convert(name, value, dtype, shape, lead)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "declared": None if self.declared is None else {
                k: [dt.str, list(shape)] for k, (dt, shape) in self.declared.items()},
            "paths": {k: list(p) for k, p in self.paths.items()},
        }


def priority_error(exc: errors.InvalidPriorityError) -> errors.InvalidPriorityError:
    """The table's priority error in the buffer's words (its table and item
    keys are internal)."""
    text = re.sub(r"\(table 'replay_buffer', key (\d+), priority ([^)]*)\)",
                  r"(ReplayBuffer index \1, priority \2)", str(exc))
    if text == str(exc):
        return exc
    return errors.InvalidPriorityError(
        text + ": priorities must be finite and >= 0 (e.g. abs(td_error) + 1e-6); "
        "nothing was changed")


def rows_error(exc: ValueError, transitions: Mapping[str, Any]) -> ValueError:
    """``exc``, or, when the fields' leading axes differ, an error naming
    each field's row count."""
    if "number of environments" not in str(exc):
        return exc
    counts = {k: len(v) if hasattr(v, "__len__") else 1 for k, v in transitions.items()}
    return ValueError(f"add_batch: fields have different numbers of rows {counts}; "
                      "give every field the same leading axis (one row per transition)")
