"""Nests for the ALF adapter: ``Experience``, ``TensorSpec`` and the walk
from a nest of torch tensors to named numpy columns and back.

Imported only by ``fastreplay.integrations.alf`` (it imports torch).

A nest is a namedtuple, tuple, list or dict (any Mapping) of nests, or a
leaf; ``()``, ``[]``, ``{}`` and ``None`` are empty nests without leaves
(ALF's ``Experience`` fills unused fields with ``()``).  A leaf is a torch
tensor (anything ``torch.as_tensor`` takes) in an experience, and an object
with ``shape`` and ``dtype`` (ALF's ``TensorSpec``) in a spec.  Leaves are
addressed by their path, the tuple of keys, field names and indices from
the root.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

__all__ = ["Experience", "TensorSpec", "builder", "flatten", "pack", "Column",
           "spec_columns", "exp_leaves", "to_numpy", "from_numpy", "np_dtype"]

Path = tuple[Any, ...]


def _alf_types() -> tuple[Any, Any] | None:
    """ALF's own ``Experience`` and ``TensorSpec`` when alf is importable."""
    if importlib.util.find_spec("alf") is None:
        return None
    try:
        experience = importlib.import_module("alf.data_structures").Experience
        spec = importlib.import_module("alf.tensor_specs").TensorSpec
    except Exception:  # an alf that does not import is no alf
        return None
    return experience, spec


class _FallbackExperience(NamedTuple):
    """ALF's ``Experience``: a step of ``TimeStep`` plus the action taken,
    the rollout info and the state; every field defaults to ``()``."""

    step_type: Any = ()
    reward: Any = ()
    discount: Any = ()
    observation: Any = ()
    prev_action: Any = ()
    env_id: Any = ()
    action: Any = ()
    rollout_info: Any = ()
    state: Any = ()

    def is_first(self) -> Any:
        return self.step_type == 0

    def is_mid(self) -> Any:
        return self.step_type == 1

    def is_last(self) -> Any:
        return self.step_type == 2


class _FallbackTensorSpec:
    """ALF's ``TensorSpec(shape, dtype=torch.float32)``: the shape and dtype
    of one unbatched tensor.  ``dtype`` is a ``torch.dtype`` or its name."""

    __slots__ = ("_shape", "_dtype")

    def __init__(self, shape: Sequence[int], dtype: torch.dtype | str = torch.float32
                 ) -> None:
        self._shape = tuple(int(d) for d in shape)
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype)
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"TensorSpec: dtype must be a torch.dtype or its name, "
                            f"got {dtype!r}")
        self._dtype = dtype

    @classmethod
    def from_spec(cls, spec: Any) -> _FallbackTensorSpec:
        return cls(spec.shape, spec.dtype)

    @classmethod
    def from_tensor(cls, tensor: torch.Tensor,
                    from_dim: int = 0) -> _FallbackTensorSpec:
        return cls(tensor.shape[from_dim:], tensor.dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    @property
    def is_discrete(self) -> bool:
        return not self._dtype.is_floating_point

    @property
    def is_continuous(self) -> bool:
        return self._dtype.is_floating_point

    def __repr__(self) -> str:
        return f"TensorSpec(shape={self._shape}, dtype={self._dtype!r})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, _FallbackTensorSpec) and type(self) is type(other)
                and self._shape == other._shape and self._dtype == other._dtype)

    def __hash__(self) -> int:
        return hash((self._shape, self._dtype))

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self._shape, self._dtype)

    def constant(self, value: Any,
                 outer_dims: Sequence[int] | None = None) -> torch.Tensor:
        shape = (*(outer_dims or ()), *self._shape)
        return torch.full(shape, value, dtype=self._dtype)

    def zeros(self, outer_dims: Sequence[int] | None = None) -> torch.Tensor:
        return self.constant(0, outer_dims)

    def ones(self, outer_dims: Sequence[int] | None = None) -> torch.Tensor:
        return self.constant(1, outer_dims)


_found = _alf_types()
Experience: Any = _found[0] if _found else _FallbackExperience
TensorSpec: Any = _found[1] if _found else _FallbackTensorSpec
if not _found:
    _FallbackExperience.__name__ = _FallbackExperience.__qualname__ = "Experience"
    _FallbackTensorSpec.__name__ = _FallbackTensorSpec.__qualname__ = "TensorSpec"
    _FallbackExperience.__module__ = _FallbackTensorSpec.__module__ = \
        "fastreplay.integrations.alf"


# ---------------------------------------------------------------- nests

def _is_namedtuple(node: Any) -> bool:
    return isinstance(node, tuple) and hasattr(type(node), "_fields")


def _children(node: Any) -> Iterator[tuple[Any, Any]] | None:
    """``(key, child)`` pairs of a container node, None for a leaf."""
    if node is None:
        return iter(())
    if isinstance(node, Mapping):
        return iter(node.items())
    if _is_namedtuple(node):
        return iter(zip(type(node)._fields, node, strict=True))
    if isinstance(node, (tuple, list)):
        return iter(enumerate(node))
    return None


def flatten(nest: Any, path: Path = ()) -> list[tuple[Path, Any]]:
    """``[(path, leaf)]`` in the nest's own order (depth first)."""
    children = _children(nest)
    if children is None:
        return [(path, nest)]
    out: list[tuple[Path, Any]] = []
    for key, child in children:
        out.extend(flatten(child, (*path, key)))
    return out


def pack(template: Any, leaf: Callable[[Path], Any], path: Path = ()) -> Any:
    """``template``'s structure (same container types) with ``leaf(path)``
    at every leaf; empty containers are kept as they are."""
    children = _children(template)
    if children is None:
        return leaf(path)
    if template is None:
        return None
    if isinstance(template, Mapping):
        items = [(k, pack(v, leaf, (*path, k))) for k, v in template.items()]
        kind: Any = type(template)
        try:
            return kind(items)
        except TypeError:
            return dict(items)
    if _is_namedtuple(template):
        fields = type(template)._fields
        return type(template)(*[pack(v, leaf, (*path, k))
                                for k, v in zip(fields, template, strict=True)])
    return type(template)([pack(v, leaf, (*path, i)) for i, v in enumerate(template)])


def builder(template: Any) -> Callable[[Sequence[Any]], Any]:
    """A function of the leaves in ``flatten(template)`` order that builds
    ``template``'s structure around them (``pack`` without the walk)."""
    count = 0

    def build(node: Any) -> Callable[[Sequence[Any]], Any]:
        nonlocal count
        children = _children(node)
        if children is None:
            i = count
            count += 1
            return lambda leaves: leaves[i]
        if node is None:
            return lambda leaves: None
        parts = [(k, build(v)) for k, v in children]
        kind: Any = type(node)
        if isinstance(node, Mapping):
            try:
                kind([])
            except TypeError:
                kind = dict
            return lambda leaves: kind([(k, f(leaves)) for k, f in parts])
        if _is_namedtuple(node):
            return lambda leaves: kind(*[f(leaves) for _, f in parts])
        return lambda leaves: kind([f(leaves) for _, f in parts])

    return build(template)


# ---------------------------------------------------------------- columns

def _carrier(dtype: torch.dtype) -> torch.dtype | None:
    """A same-size integer dtype to store ``dtype`` in when numpy has no
    equivalent (bfloat16, float8 kinds, ...), else None."""
    try:
        torch.empty(0, dtype=dtype).numpy()
        return None
    except TypeError:
        size = torch.empty(0, dtype=dtype).element_size()
        return {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size]


class Column(NamedTuple):
    """One leaf of a spec: its path, column name, row shape and dtype."""

    path: Path
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    carrier: torch.dtype | None  # the storage dtype when numpy lacks ``dtype``


def _name(path: Path) -> str:
    return "/".join(str(k) for k in path) or "."


def spec_columns(spec: Any) -> list[Column]:
    """The columns of a nested spec; ValueError if a leaf is no spec."""
    columns = []
    for path, leaf in flatten(spec):
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            raise ValueError(f"experience_spec: the leaf at {_name(path)!r} is "
                             f"{type(leaf).__name__}, not a TensorSpec")
        dtype = leaf.dtype if isinstance(leaf.dtype, torch.dtype) else \
            getattr(torch, str(leaf.dtype))
        columns.append(Column(path, _name(path), tuple(int(d) for d in leaf.shape),
                              dtype, _carrier(dtype)))
    if len({c.name for c in columns}) != len(columns):  # keys that contain "/"
        columns = [c._replace(name=repr(c.path)) for c in columns]
    return columns


def exp_leaves(exp: Any, columns: Sequence[Column], what: str) -> list[torch.Tensor]:
    """The tensors of ``exp`` at the columns' paths, in column order;
    AssertionError (as ALF's nest functions) when the structures differ."""
    leaves = dict(flatten(exp))
    if len(leaves) != len(columns) or any(c.path not in leaves for c in columns):
        got = {_name(p) for p in leaves}
        want = {c.name for c in columns}
        raise AssertionError(
            f"{what}: the experience's structure differs from the spec's "
            f"(missing {sorted(want - got)}, unexpected {sorted(got - want)})")
    out = []
    for c in columns:
        leaf = leaves[c.path]
        out.append(leaf if isinstance(leaf, torch.Tensor) else torch.as_tensor(leaf))
    return out


def outer_rank(tensors: Sequence[torch.Tensor], columns: Sequence[Column],
               what: str) -> int:
    """The number of outer dims shared by every tensor beyond its spec's
    shape; AssertionError naming the column otherwise (ALF's
    ``get_outer_rank``)."""
    rank = None
    for t, c in zip(tensors, columns, strict=True):
        r = t.dim() - len(c.shape)
        if r < 0 or tuple(t.shape[r:]) != c.shape:
            raise AssertionError(f"{what}: {c.name!r} has shape {tuple(t.shape)}, "
                                 f"which does not end in the spec's {c.shape}")
        if rank is not None and r != rank:
            raise AssertionError(f"{what}: {c.name!r} has {r} outer dims, the "
                                 f"columns before it {rank}")
        rank = r
    if rank is None:
        raise ValueError(f"{what}: the experience spec has no tensors")
    return rank


def to_numpy(t: torch.Tensor, c: Column) -> np.ndarray:
    """``t`` detached, on the CPU, in the column's dtype, as numpy."""
    t = t.detach()
    if t.dtype != c.dtype:
        t = t.to(c.dtype)
    if c.carrier is not None:
        t = t.view(c.carrier)
    return np.asarray(t.cpu().numpy())


def np_dtype(c: Column) -> np.dtype[Any]:
    """The numpy dtype a column is stored in."""
    return torch.empty(0, dtype=c.carrier or c.dtype).numpy().dtype


def from_numpy(a: np.ndarray, c: Column) -> torch.Tensor:
    """The torch view of ``a`` (no copy) in the column's dtype."""
    t = torch.from_numpy(a)
    return t if c.carrier is None else t.view(c.dtype)
