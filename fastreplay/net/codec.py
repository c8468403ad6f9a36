"""JSON forms of what crosses the wire besides arrays: ``TableInfo`` (with
its signature) and item nests.  Decoding builds only fastreplay's own types
from checked fields; a malformed form raises ``FrameError``."""

from __future__ import annotations

from typing import Any

import numpy as np

from fastreplay import _nest, _structures
from fastreplay._structured_config import TensorSpec
from fastreplay.chunkers import COMPRESSIONS
from fastreplay.net.wire import FrameError
from fastreplay.reverb_types import (
    KeyDistributionOptions,
    RateLimiterCallStats,
    RateLimiterInfo,
    TableInfo,
    TableWorkerTime,
)

__all__ = ["distinct_structures", "info_to_json", "info_from_json",
           "structure_to_json", "structure_from_json"]

def distinct_structures(ids: np.ndarray) -> np.ndarray:
    """The sorted distinct structure ids of a frame's items: a frame's items
    usually share one, then without np.unique's sort (its unique with the
    inverse took ~45% of a server's CPU for a frame of 6 items, py-spy,
    session 20)."""
    if len(ids) and (ids == ids[0]).all():
        return ids[:1]
    return np.unique(ids)


_COUNTERS = ("current_size", "num_episodes", "num_deleted_episodes",
             "num_unique_samples", "num_inserts", "num_samples", "num_updates",
             "num_deletes", "num_evictions", "num_expired")


def structure_to_json(structure: Any) -> Any:
    """A nest's structure (leaves dropped); None for no structure."""
    return None if structure is None else _structures.to_json(
        _structures.intern(structure))


def structure_from_json(obj: Any) -> Any:
    if obj is None:
        return None
    try:
        return _structures.get(_structures.from_json(obj))
    except Exception as exc:  # noqa: BLE001 - any malformed form
        raise FrameError(f"bad item structure: {exc}") from None


def _selector(o: KeyDistributionOptions) -> dict[str, Any]:
    return {"which": o.WhichOneof("distribution"),
            "exponent": o.prioritized.priority_exponent,
            "min_heap": o.heap.min_heap, "deterministic": o.is_deterministic}


def _selector_from(d: dict[str, Any]) -> KeyDistributionOptions:
    which = d["which"]
    det = bool(d["deterministic"])
    if which == "prioritized":
        return KeyDistributionOptions(
            prioritized=KeyDistributionOptions.Prioritized(float(d["exponent"])),
            is_deterministic=det)
    if which == "heap":
        return KeyDistributionOptions(
            heap=KeyDistributionOptions.Heap(bool(d["min_heap"])), is_deterministic=det)
    if which in ("fifo", "uniform", "lifo"):
        return KeyDistributionOptions(fifo=which == "fifo", uniform=which == "uniform",
                                      lifo=which == "lifo", is_deterministic=det)
    if which is None:
        return KeyDistributionOptions(is_deterministic=det)
    raise FrameError(f"unknown selector {which!r}")


def _fields(m: Any) -> dict[str, Any]:
    return {k: getattr(m, k) for k in m._fields}


def info_to_json(info: TableInfo) -> dict[str, Any]:
    rl = info.rate_limiter_info
    sig = info.signature
    leaves = [] if sig is None else _nest.flatten(sig)
    return {
        "name": info.name,
        "sampler": _selector(info.sampler_options),
        "remover": _selector(info.remover_options),
        "max_size": info.max_size, "max_times_sampled": info.max_times_sampled,
        "rate_limiter": {**{k: v for k, v in _fields(rl).items()
                            if k not in ("insert_stats", "sample_stats")},
                         "insert_stats": _fields(rl.insert_stats),
                         "sample_stats": _fields(rl.sample_stats)},
        "signature": None if sig is None else {
            "structure": structure_to_json(sig),
            "leaves": [[[None if d is None else int(d) for d in s.shape],
                        np.dtype(getattr(s.dtype, "as_numpy_dtype", s.dtype)).str,
                        getattr(s, "name", None)] for s in leaves]},
        "worker_time": _fields(info.table_worker_time),
        **{k: getattr(info, k) for k in _COUNTERS},
        "compression": info.compression,
    }


def _compression_from(value: Any) -> str | None:
    if value not in COMPRESSIONS:
        raise FrameError(f"bad table compression {value!r}")
    return value  # type: ignore[no-any-return]


def info_from_json(d: Any) -> TableInfo:
    try:
        rl = dict(d["rate_limiter"])
        rl["insert_stats"] = RateLimiterCallStats(**rl["insert_stats"])
        rl["sample_stats"] = RateLimiterCallStats(**rl["sample_stats"])
        signature = None
        if d["signature"] is not None:
            structure = structure_from_json(d["signature"]["structure"])
            specs = [TensorSpec(tuple(shape), np.dtype(dtype), name)
                     for shape, dtype, name in d["signature"]["leaves"]]
            signature = (specs[0] if structure is None and len(specs) == 1
                         else _nest.unflatten_as(structure, specs))
        return TableInfo(
            name=str(d["name"]), sampler_options=_selector_from(d["sampler"]),
            remover_options=_selector_from(d["remover"]),
            max_size=int(d["max_size"]),
            max_times_sampled=int(d["max_times_sampled"]),
            rate_limiter_info=RateLimiterInfo(**rl), signature=signature,
            table_worker_time=TableWorkerTime(**d["worker_time"]),
            compression=_compression_from(d.get("compression", "auto")),
            **{k: int(d[k]) for k in _COUNTERS})
    except FrameError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise FrameError(f"bad table info: {exc!r}") from None
