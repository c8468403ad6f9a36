"""The process-wide registry of item structures (nests with None leaves).

Every item's trajectory carries the id of its nest (``fr_trajectory
.structure_id``), so ``sample_batch`` unpacks each item as it was written,
whatever other writers did to the table, and checkpoints keep it.  Equal
structures (same container types, keys and fields; dict keys compared as a
set) get one id, like interned specs; id 0 is "no structure" (data is the
flat list of columns).  Ids live as long as the process and are never
reused; interning is thread-safe.

Checkpoints store structures as JSON (``to_json``/``from_json``); a
namedtuple is stored by module, name and fields and restored as the class of
that name when its module is already imported (nothing is imported on behalf
of a checkpoint), else as an equivalent ``collections.namedtuple``.
"""

from __future__ import annotations

import collections
import sys
import threading
from collections.abc import Mapping
from typing import Any

from fastreplay import errors

__all__ = ["intern", "get", "describe", "to_json", "from_json"]

_lock = threading.Lock()
_by_id: list[Any] = [None]
_ids: dict[Any, int] = {}
_KEY_TYPES = (str, int, float, bool, type(None))
MAX_DEPTH = 64  # nesting accepted from a checkpoint
MAX_NODES = 1 << 16  # containers plus leaves accepted from a checkpoint


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _sorted_items(node: Mapping[Any, Any]) -> list[tuple[Any, Any]]:
    try:
        keys = sorted(node)
    except TypeError:
        keys = list(node)
    return [(k, node[k]) for k in keys]


def _key(node: Any) -> Any:
    """A hashable canonical form of a structure."""
    if isinstance(node, Mapping):
        return ("d", tuple((k, _key(v)) for k, v in _sorted_items(node)))
    if _is_namedtuple(node):
        return ("n", type(node), tuple(_key(v) for v in node))
    if isinstance(node, tuple):
        return ("t", type(node), tuple(_key(v) for v in node))
    if isinstance(node, list):
        return ("l", tuple(_key(v) for v in node))
    return None


def intern(structure: Any) -> int:
    """The id of ``structure`` (a nest; leaves are ignored).  None, a leaf or
    a flat list of leaves still gets an id of its own: only 0 means flat."""
    key = _key(structure)
    sid = _ids.get(key)
    if sid is not None:
        return sid
    with _lock:
        sid = _ids.get(key)
        if sid is None:
            if len(_by_id) >= 0x7FFFFFFF:
                raise OverflowError("too many distinct item structures")
            sid = len(_by_id)
            _by_id.append(structure)
            _ids[key] = sid
    return sid


def get(sid: int) -> Any:
    """The structure of id ``sid`` (None for 0)."""
    return _by_id[sid]


def describe(sid: int) -> str:
    """A short readable form of a structure for error messages."""
    if sid == 0:
        return "flat list (no structure)"
    return repr(_by_id[sid])


# ----- checkpoints -----

def to_json(sid: int) -> Any:
    """A JSON-able form of structure ``sid``; ValueError when a dict key is
    not a str, int, float, bool, None or a tuple of those."""
    return _node_json(_by_id[sid]) if sid else None


def _json_key(k: Any) -> Any:
    if isinstance(k, tuple):
        return {"tuple": [_json_key(x) for x in k]}
    if isinstance(k, _KEY_TYPES):
        return k
    raise ValueError(f"a checkpoint cannot store the dict key {k!r} of an "
                     "item structure (keys must be str, int, float, bool, None "
                     "or tuples of those)")


def _node_json(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {"dict": [[_json_key(k), _node_json(v)] for k, v in node.items()]}
    if _is_namedtuple(node):
        cls = type(node)
        return {"namedtuple": [cls.__module__, cls.__qualname__, list(cls._fields),
                               [_node_json(v) for v in node]]}
    if isinstance(node, tuple):
        return {"tuple": [_node_json(v) for v in node]}
    if isinstance(node, list):
        return {"list": [_node_json(v) for v in node]}
    return None


class _Budget:
    def __init__(self) -> None:
        self.nodes = 0

    def take(self, depth: int) -> None:
        self.nodes += 1
        if depth > MAX_DEPTH or self.nodes > MAX_NODES:
            raise errors.DataLossError(
                "item structure is nested too deeply or too large "
                f"(limits: depth {MAX_DEPTH}, {MAX_NODES} nodes)")


def from_json(obj: Any) -> int:
    """Intern a structure read from a checkpoint; DataLossError when ``obj``
    is not one ``to_json`` writes."""
    if obj is None:
        return 0
    return intern(_parse(obj, 0, _Budget()))


def n_leaves(sid: int) -> int:
    """Number of leaves of structure ``sid`` (0 for the flat structure)."""
    def count(node: Any) -> int:
        if isinstance(node, Mapping):
            return sum(count(v) for v in node.values())
        if isinstance(node, (list, tuple)):
            return sum(count(v) for v in node)
        return 1
    return count(_by_id[sid]) if sid else 0


def _bad(what: str) -> errors.DataLossError:
    return errors.DataLossError(f"malformed item structure in checkpoint: {what}")


def _parse_key(k: Any, depth: int, budget: _Budget) -> Any:
    budget.take(depth)
    if isinstance(k, dict):
        parts = k.get("tuple")
        if len(k) != 1 or not isinstance(parts, list):
            raise _bad(f"dict key {k!r}")
        return tuple(_parse_key(x, depth + 1, budget) for x in parts)
    if isinstance(k, _KEY_TYPES):
        return k
    raise _bad(f"dict key {k!r}")


def _parse(obj: Any, depth: int, budget: _Budget) -> Any:
    budget.take(depth)
    if obj is None:
        return None
    if not isinstance(obj, dict) or len(obj) != 1:
        raise _bad(repr(obj)[:80])
    ((kind, body),) = obj.items()
    if not isinstance(body, list):
        raise _bad(f"{kind} body {repr(body)[:80]}")
    if kind in ("list", "tuple"):
        children = [_parse(v, depth + 1, budget) for v in body]
        return children if kind == "list" else tuple(children)
    if kind == "dict":
        out: dict[Any, Any] = {}
        for pair in body:
            if not isinstance(pair, list) or len(pair) != 2:
                raise _bad(f"dict entry {repr(pair)[:80]}")
            key = _parse_key(pair[0], depth + 1, budget)
            try:
                out[key] = _parse(pair[1], depth + 1, budget)
            except TypeError as exc:  # unhashable key cannot happen, kept safe
                raise _bad(str(exc)) from exc
        return out
    if kind == "namedtuple":
        if len(body) != 4:
            raise _bad("namedtuple entry")
        module, qualname, fields, values = body
        if (not isinstance(module, str) or not isinstance(qualname, str)
                or not isinstance(fields, list) or not isinstance(values, list)
                or not all(isinstance(f, str) for f in fields)
                or len(fields) != len(values)):
            raise _bad(f"namedtuple {qualname!r}")
        cls = _namedtuple_class(module, qualname, fields)
        return cls(*[_parse(v, depth + 1, budget) for v in values])
    raise _bad(f"unknown node kind {kind!r}")


def _namedtuple_class(module: str, qualname: str, fields: list[str]) -> Any:
    """The already-imported namedtuple class ``module.qualname`` with these
    fields, else a new namedtuple of that name (nothing is imported)."""
    cls: Any = sys.modules.get(module)
    for part in qualname.split("."):
        cls = getattr(cls, part, None) if cls is not None else None
    if (isinstance(cls, type) and issubclass(cls, tuple)
            and list(getattr(cls, "_fields", ())) == fields):
        return cls
    name = qualname.rsplit(".", 1)[-1]
    try:
        return collections.namedtuple(name if name.isidentifier() else "Structure",
                                      fields)
    except (ValueError, TypeError) as exc:
        raise _bad(f"namedtuple {qualname!r} with fields {fields!r}: {exc}") from exc
