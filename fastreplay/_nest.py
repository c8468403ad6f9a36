"""Minimal nest utilities with dm-tree's conventions (no dm-tree needed).

A nest is a dict (any Mapping), list, tuple or namedtuple of nests or leaves;
everything else, including numpy arrays and None, is a leaf.  Mappings are
flattened in sorted key order and namedtuples by field, as ``tree.flatten``
does, and paths are tuples of keys, indices or field names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

Path = tuple[Any, ...]


def is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def is_nest(x: Any) -> bool:
    return isinstance(x, (dict, list, tuple)) or isinstance(x, Mapping)


def items(node: Any) -> list[tuple[Any, Any]]:
    """(key, child) pairs of a nest node in flatten order."""
    if isinstance(node, Mapping):
        try:
            keys = sorted(node)
        except TypeError:
            keys = list(node)
        return [(k, node[k]) for k in keys]
    if is_namedtuple(node):
        return list(zip(type(node)._fields, node, strict=False))
    return list(enumerate(node))


def flatten_with_path(nest: Any, prefix: Path = ()) -> Iterator[tuple[Path, Any]]:
    if not is_nest(nest):
        yield prefix, nest
        return
    for key, child in items(nest):
        yield from flatten_with_path(child, prefix + (key,))


def flatten(nest: Any) -> list[Any]:
    if type(nest) is dict:  # fast path: a flat dict of leaves
        try:
            leaves = [nest[k] for k in sorted(nest)]
        except TypeError:
            leaves = [(), ]  # unsortable keys: take the general path
        if not any(isinstance(v, (dict, list, tuple)) for v in leaves):
            return leaves
    return [leaf for _, leaf in flatten_with_path(nest)]


def map_structure(fn: Callable[[Any], Any], nest: Any) -> Any:
    if not is_nest(nest):
        return fn(nest)
    return rebuild(nest, [(k, map_structure(fn, v)) for k, v in items(nest)])


def rebuild(node: Any, children: list[tuple[Any, Any]]) -> Any:
    """A node of the same kind as ``node`` holding ``children``."""
    if isinstance(node, Mapping):
        values = dict(children)
        try:
            return type(node)(values)  # type: ignore[call-arg]
        except TypeError:
            return values
    if is_namedtuple(node):
        return type(node)(*[v for _, v in children])
    seq = [v for _, v in children]
    return type(node)(seq) if isinstance(node, tuple) else seq


def unflatten_as(structure: Any, flat: list[Any]) -> Any:
    """Pack ``flat`` (in flatten order) into the shape of ``structure``."""
    it = iter(flat)
    return map_structure(lambda _: next(it), structure)


def get_path(nest: Any, path: Path) -> Any:
    for key in path:
        nest = nest[key] if not is_namedtuple(nest) or isinstance(key, int) \
            else getattr(nest, key)
    return nest


def union(a: Any, b: Any, where: Path = ()) -> Any:
    """Structure holding every path of ``a`` and ``b`` (leaves None); dicts
    merge keys, sequences merge by position, namedtuples field-wise."""
    if not is_nest(a):
        if is_nest(b):
            raise ValueError(f"Structure mismatch at {where}: leaf vs {type(b)}")
        return None
    if not is_nest(b):
        raise ValueError(f"Structure mismatch at {where}: {type(a)} vs leaf")
    if isinstance(a, Mapping) != isinstance(b, Mapping) or (
        is_namedtuple(a) and is_namedtuple(b) and type(a) is not type(b)
    ):
        raise ValueError(f"Structure mismatch at {where}: {type(a)} vs {type(b)}")
    if isinstance(a, Mapping):
        keys = list(a) + [k for k in b if k not in a]
        merged = [
            (k, union(a[k], b[k], where + (k,)) if k in a and k in b
             else map_structure(lambda _: None, a[k] if k in a else b[k]))
            for k in keys
        ]
        return rebuild(a, merged)
    n = max(len(a), len(b))
    merged = []
    for i in range(n):
        if i < len(a) and i < len(b):
            merged.append((i, union(a[i], b[i], where + (i,))))
        else:
            rest = a[i] if i < len(a) else b[i]
            merged.append((i, map_structure(lambda _: None, rest)))
    if is_namedtuple(a):
        return type(a)(*[v for _, v in merged])
    return rebuild(a, merged)


def map_structure_with_path(
    fn: Callable[[Path, Any], Any], nest: Any, prefix: Path = ()
) -> Any:
    if not is_nest(nest):
        return fn(prefix, nest)
    return rebuild(
        nest,
        [(k, map_structure_with_path(fn, v, prefix + (k,))) for k, v in items(nest)],
    )


def columns_as(structure: Any, columns: list[Any]) -> Any:
    """Sampled ``columns`` in their items' nest ``structure`` (every item
    carries its structure id), else the flat columns."""
    if structure is not None and len(flatten(structure)) == len(columns):
        return unflatten_as(structure, columns)
    return columns
