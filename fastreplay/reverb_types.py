"""``TableInfo`` and the messages it holds (Reverb's ``reverb.reverb_types``).

Reverb builds these from protobuf messages (``schema.proto``); fastreplay has
no protobuf, so they are small objects with the same field names, nesting and
defaults, and the parts of the message interface that code reads:
``HasField``, ``WhichOneof``, equality, and protobuf's text format as
``str()``.  A oneof member that is not set reads as its default (``False``,
or a default sub-message), as in protobuf.

fastreplay adds a few counters (marked below); Reverb code never sees a
difference because it only reads Reverb's fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, ClassVar

__all__ = [
    "KeyDistributionOptions",
    "RateLimiterCallStats",
    "RateLimiterInfo",
    "ServerInfo",
    "TableInfo",
    "TableWorkerTime",
]


class _Message:
    """Message-like base: fields named in ``_fields`` (in proto order),
    sub-messages named in ``_messages``, the members of the oneof named
    ``_oneof_name`` in ``_oneof``."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _messages: ClassVar[frozenset[str]] = frozenset()
    _oneof: ClassVar[tuple[str, ...]] = ()
    _oneof_name: ClassVar[str] = ""

    def _which(self) -> str | None:
        return None

    def HasField(self, field_name: str) -> bool:  # noqa: N802 - protobuf's name
        """Whether a oneof member or sub-message is set (protobuf semantics:
        plain scalar fields have no presence and raise ValueError)."""
        if field_name in self._oneof:
            return self._which() == field_name
        if field_name in self._messages:
            return True
        if field_name in self._fields:
            raise ValueError(
                f'Can\'t test non-optional, non-submessage field '
                f'"{type(self).__name__}.{field_name}" for presence in proto3.'
            )
        raise ValueError(
            f'Protocol message {type(self).__name__} has no "{field_name}" field.'
        )

    def WhichOneof(self, oneof_group: str) -> str | None:  # noqa: N802
        """Name of the set member of the oneof ``oneof_group``, or None."""
        if not self._oneof_name or oneof_group != self._oneof_name:
            raise ValueError(
                f'Protocol message has no oneof "{oneof_group}" field.'
            )
        return self._which()

    def _items(self) -> Iterator[tuple[str, Any]]:
        for name in self._fields:
            yield name, getattr(self, name)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._which() == other._which() and all(
            a == b for (_, a), (_, b) in zip(self._items(), other._items(),
                                            strict=True))

    __hash__ = None  # type: ignore[assignment]  # mutable-message semantics

    def _text(self, indent: str) -> list[str]:
        """protobuf's text format: set fields only (defaults omitted)."""
        lines: list[str] = []
        for name, value in self._items():
            if isinstance(value, _Message):
                if name in self._oneof and self._which() != name:
                    continue
                lines.append(f"{indent}{name} {{")
                lines.extend(value._text(indent + "  "))
                lines.append(f"{indent}}}")
            elif value or name in self._oneof and self._which() == name:
                text = str(value).lower() if isinstance(value, bool) else repr(value)
                lines.append(f"{indent}{name}: {text}")
        return lines

    def __str__(self) -> str:
        return "".join(line + "\n" for line in self._text(""))

    def __repr__(self) -> str:
        default = type(self)()
        args = ", ".join(f"{k}={v!r}" for k, v in self._items()
                         if v != getattr(default, k) or self._which() == k)
        return f"{type(self).__qualname__}({args})"


class KeyDistributionOptions(_Message):
    """How a selector picks items: exactly one of ``fifo``, ``uniform``,
    ``prioritized``, ``heap``, ``lifo`` (oneof ``distribution``), plus
    ``is_deterministic``."""

    class Prioritized(_Message):
        """``KeyDistributionOptions.Prioritized``."""

        __slots__ = ("priority_exponent",)
        _fields = ("priority_exponent",)

        def __init__(self, priority_exponent: float = 0.0) -> None:
            self.priority_exponent = float(priority_exponent)

    class Heap(_Message):
        """``KeyDistributionOptions.Heap``."""

        __slots__ = ("min_heap",)
        _fields = ("min_heap",)

        def __init__(self, min_heap: bool = False) -> None:
            self.min_heap = bool(min_heap)

    __slots__ = ("_set", "_prioritized", "_heap", "is_deterministic")
    _fields = ("fifo", "uniform", "prioritized", "heap", "lifo", "is_deterministic")
    _messages = frozenset()
    _oneof = ("fifo", "uniform", "prioritized", "heap", "lifo")
    _oneof_name = "distribution"

    def __init__(self, *, fifo: bool = False, uniform: bool = False,
                 prioritized: KeyDistributionOptions.Prioritized | None = None,
                 heap: KeyDistributionOptions.Heap | None = None,
                 lifo: bool = False, is_deterministic: bool = False) -> None:
        chosen = [name for name, value in (
            ("fifo", fifo), ("uniform", uniform), ("prioritized", prioritized),
            ("heap", heap), ("lifo", lifo)) if value not in (False, None)]
        if len(chosen) > 1:
            raise ValueError(
                f"only one distribution may be set, got {', '.join(chosen)}")
        self._set = chosen[0] if chosen else None
        self._prioritized = prioritized or KeyDistributionOptions.Prioritized()
        self._heap = heap or KeyDistributionOptions.Heap()
        self.is_deterministic = bool(is_deterministic)

    def _which(self) -> str | None:
        return self._set

    @property
    def fifo(self) -> bool:
        return self._set == "fifo"

    @property
    def uniform(self) -> bool:
        return self._set == "uniform"

    @property
    def lifo(self) -> bool:
        return self._set == "lifo"

    @property
    def prioritized(self) -> KeyDistributionOptions.Prioritized:
        return self._prioritized

    @property
    def heap(self) -> KeyDistributionOptions.Heap:
        return self._heap

    @classmethod
    def from_selector(cls, selector: Any) -> KeyDistributionOptions:
        """The options describing a ``fastreplay.selectors`` selector."""
        kind = selector.kind
        det = bool(selector.is_deterministic)
        if kind == "prioritized":
            return cls(prioritized=cls.Prioritized(selector.priority_exponent),
                       is_deterministic=det)
        if kind in ("min_heap", "max_heap"):
            return cls(heap=cls.Heap(kind == "min_heap"), is_deterministic=det)
        if kind in ("fifo", "uniform", "lifo"):
            return cls(fifo=kind == "fifo", uniform=kind == "uniform",
                       lifo=kind == "lifo", is_deterministic=det)
        raise ValueError(f"unknown selector kind {kind!r}")

    def to_selector(self) -> Any:
        """The ``fastreplay.selectors`` selector these options describe
        (the inverse of ``from_selector``)."""
        from fastreplay import selectors

        which = self.WhichOneof("distribution")
        if which == "prioritized":
            return selectors.Prioritized(self.prioritized.priority_exponent)
        if which == "heap":
            return selectors.MinHeap() if self.heap.min_heap else selectors.MaxHeap()
        return {"fifo": selectors.Fifo, "lifo": selectors.Lifo}.get(
            str(which), selectors.Uniform)()


class RateLimiterCallStats(_Message):
    """Calls a rate limiter admitted.  ``completed`` is Reverb's field;
    ``blocked`` (calls that had to wait) and ``stall_seconds`` (time they
    waited, summed over callers) are fastreplay's."""

    __slots__ = ("completed", "blocked", "stall_seconds")
    _fields = ("completed", "blocked", "stall_seconds")

    def __init__(self, completed: int = 0, blocked: int = 0,
                 stall_seconds: float = 0.0) -> None:
        self.completed = int(completed)
        self.blocked = int(blocked)
        self.stall_seconds = float(stall_seconds)


class RateLimiterInfo(_Message):
    """A rate limiter's parameters and counters (``deletes`` is fastreplay's
    addition: the rate limiter's delete counter)."""

    __slots__ = ("samples_per_insert", "min_diff", "max_diff",
                 "min_size_to_sample", "insert_stats", "sample_stats", "deletes")
    _fields = __slots__
    _messages = frozenset({"insert_stats", "sample_stats"})

    def __init__(self, samples_per_insert: float = 0.0, min_diff: float = 0.0,
                 max_diff: float = 0.0, min_size_to_sample: int = 0,
                 insert_stats: RateLimiterCallStats | None = None,
                 sample_stats: RateLimiterCallStats | None = None,
                 deletes: int = 0) -> None:
        self.samples_per_insert = float(samples_per_insert)
        self.min_diff = float(min_diff)
        self.max_diff = float(max_diff)
        self.min_size_to_sample = int(min_size_to_sample)
        self.insert_stats = insert_stats or RateLimiterCallStats()
        self.sample_stats = sample_stats or RateLimiterCallStats()
        self.deletes = int(deletes)


class TableWorkerTime(_Message):
    """Reverb's table-worker time distribution.  fastreplay has no table
    worker: inserts and samples run in the calling threads.  The two waiting
    fields report the time callers spent blocked by the rate limiter
    (inserts waiting for samples, samples waiting for inserts), summed over
    callers; the others are 0."""

    __slots__ = ("running_ms", "sampling_ms", "inserting_ms", "sleeping_ms",
                 "waiting_for_sampling_ms", "waiting_for_inserts_ms")
    _fields = __slots__

    def __init__(self, running_ms: int = 0, sampling_ms: int = 0,
                 inserting_ms: int = 0, sleeping_ms: int = 0,
                 waiting_for_sampling_ms: int = 0,
                 waiting_for_inserts_ms: int = 0) -> None:
        self.running_ms = int(running_ms)
        self.sampling_ms = int(sampling_ms)
        self.inserting_ms = int(inserting_ms)
        self.sleeping_ms = int(sleeping_ms)
        self.waiting_for_sampling_ms = int(waiting_for_sampling_ms)
        self.waiting_for_inserts_ms = int(waiting_for_inserts_ms)


@dataclasses.dataclass(frozen=True)
class TableInfo:
    """A table's configuration and counters: Reverb's fields in Reverb's
    order, then fastreplay's counters.

    ``num_episodes`` counts the episodes the current items' data comes from;
    ``num_deleted_episodes`` the episodes whose last item left the table
    (both zeroed by ``reset``; the first is recomputed from the items after a
    checkpoint restore, the second is saved in the checkpoint).
    """

    name: str
    sampler_options: KeyDistributionOptions
    remover_options: KeyDistributionOptions
    max_size: int
    max_times_sampled: int
    rate_limiter_info: RateLimiterInfo
    signature: Any
    current_size: int
    num_episodes: int = 0
    num_deleted_episodes: int = 0
    num_unique_samples: int = 0
    table_worker_time: TableWorkerTime = dataclasses.field(
        default_factory=TableWorkerTime)
    # fastreplay's counters:
    num_inserts: int = 0
    num_samples: int = 0
    num_updates: int = 0
    num_deletes: int = 0
    num_evictions: int = 0
    num_expired: int = 0
    #: fastreplay's: the table's default column compression (Table.compression)
    compression: str | None = "auto"

    # ----- reading it -----

    def _described(self) -> tuple[str, str, str]:
        """(sampler, remover, rate limiter) in table-spec syntax."""
        from fastreplay.table_spec import describe_rate_limiter, describe_selector

        sampler = describe_selector(self.sampler_options)
        remover = describe_selector(self.remover_options)
        return sampler, remover, describe_rate_limiter(self.rate_limiter_info,
                                                       sampler)

    def __repr__(self) -> str:
        """One line: the name, the size, the selectors and rate limiter (in
        ``fastreplay serve`` table-spec syntax) and the main counters.  Every
        field stays readable as an attribute; ``str()`` shows them all."""
        sampler, remover, limiter = self._described()
        return (f"TableInfo(name={self.name!r}, current_size={self.current_size}, "
                f"max_size={self.max_size}, sampler={sampler!r}, "
                f"remover={remover!r}, rate_limiter={limiter!r}, "
                f"num_inserts={self.num_inserts}, num_samples={self.num_samples})")

    def __str__(self) -> str:
        """A multi-line summary, one topic a line."""
        sampler, remover, limiter = self._described()
        rl = self.rate_limiter_info
        times = self.max_times_sampled
        signature = "none" if self.signature is None else _shorten(
            _spec_text(self.signature), 100)

        def calls(stats: RateLimiterCallStats) -> str:
            return (f"{stats.blocked:,} of {stats.completed:,} calls "
                    f"({stats.stall_seconds:.2f} s)")

        rows = [
            ("size", f"{self.current_size:,} / {self.max_size:,} items from "
                     f"{_count(self.num_episodes, 'episode')} "
                     f"({self.num_deleted_episodes:,} deleted)"),
            ("sampler", sampler),
            ("remover", remover),
            ("max_times_sampled", f"{times:,}" if times > 0 else "unlimited"),
            ("rate limiter", limiter),
            ("  inserts waited", calls(rl.insert_stats)),
            ("  samples waited", calls(rl.sample_stats)),
            ("inserts", f"{self.num_inserts:,}"),
            ("samples", f"{self.num_samples:,} ({self.num_unique_samples:,} "
                        "unique items)"),
            ("updates", f"{self.num_updates:,}"),
            ("removed", f"{self.num_deletes:,} deleted, {self.num_evictions:,} "
                        f"evicted, {self.num_expired:,} expired"),
            ("compression", str(self.compression)),
            ("signature", signature),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join([f"TableInfo {self.name!r}"]
                         + [f"  {k:<{width}}  {v}" for k, v in rows])


def _spec_text(spec: Any) -> str:
    """A signature as ``{'obs': uint8[84, 84, 4], ...}`` (leaves with a
    shape and dtype shown by them, other leaves by their one-line repr)."""
    if isinstance(spec, dict):
        return "{" + ", ".join(f"{k!r}: {_spec_text(v)}" for k, v in spec.items()) + "}"
    if isinstance(spec, (list, tuple)):
        inner = ", ".join(_spec_text(v) for v in spec)
        return f"[{inner}]" if isinstance(spec, list) else f"({inner})"
    shape, dtype = getattr(spec, "shape", None), getattr(spec, "dtype", None)
    if shape is not None and dtype is not None:
        name = getattr(dtype, "name", None) or str(dtype)
        return f"{name}{list(shape)}"
    return " ".join(repr(spec).split())


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


class ServerInfo(dict[str, TableInfo]):
    """``Client.server_info()``: a plain ``dict`` of table name ->
    ``TableInfo`` that prints readably (``repr``: one table a line;
    ``str``: each table's multi-line summary)."""

    def __repr__(self) -> str:
        if not self:
            return "{}"
        lines = [f"{name!r}: {info!r}" for name, info in self.items()]
        return "{" + ",\n ".join(lines) + "}"

    def __str__(self) -> str:
        return "\n\n".join(str(info) for info in self.values())
