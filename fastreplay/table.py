"""``Table``: Reverb's table configuration over the compiled, thread-safe
``TableCore``.

Besides Reverb's surface (``name``, ``info``, ``can_sample``,
``can_insert``, ``replace``, ``Table.queue``, ``Table.stack``) a table offers
the direct operations that the client and writers build on: ``insert``,
``insert_batch``, ``sample``, ``mutate_priorities``, ``reset``, ``close``.
All are thread-safe; the blocking ones release the GIL and take ``timeout``
in seconds (``None`` waits forever).
"""

from __future__ import annotations

import copy
import operator
import secrets
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from fastreplay import _core
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay.chunkers import compression_mode
from fastreplay.replay_sample import ReplaySample, SampleInfo, SampleInfoBatch
from fastreplay.reverb_types import (
    KeyDistributionOptions,
    RateLimiterCallStats,
    RateLimiterInfo,
    TableInfo,
    TableWorkerTime,
)

__all__ = ["CallStats", "KeyDistributionOptions", "RateLimiterCallStats",
           "RateLimiterInfo", "Table", "TableInfo", "TableWorkerTime"]


#: fastreplay's earlier name of RateLimiterCallStats.
CallStats = RateLimiterCallStats


def _integer(table: str, what: str, value: object) -> int:
    """``value`` as a Python int; TypeError naming the table for floats,
    bools, strings and other non-integers (``1.5`` must not become 1)."""
    if isinstance(value, bool):
        raise TypeError(f"Table '{table}': {what} must be an integer, got {value!r}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"Table '{table}': {what} must be an integer, got "
            f"{type(value).__name__} {value!r}"
        ) from None


_KEY_LIMIT = 2**64


def _key(table: str, key: object) -> int:
    k = _integer(table, "key", key)
    if not 0 <= k < _KEY_LIMIT:
        raise ValueError(f"Table '{table}': key {k} is outside [0, 2**64)")
    return k


def key_array(table: str, keys: Any) -> np.ndarray:
    """``keys`` (of ``table``, named in errors) as a 1-D uint64 array;
    integer dtypes (or Python ints) only, every key in [0, 2**64)."""
    if type(keys) is list and keys and set(map(type, keys)) == {int}:
        try:  # Reverb's keys as Python ints, half of them past 2**63
            return np.fromiter(keys, np.uint64, len(keys))
        except OverflowError:
            pass  # the checks below name the bad key
    arr = np.asarray(keys)
    if arr.ndim > 1:
        raise ValueError(f"Table '{table}': keys must be one-dimensional, got "
                         f"shape {arr.shape}")
    arr = arr.reshape(-1)
    if arr.dtype.kind == "u":
        return arr.astype(np.uint64, copy=False)
    if arr.dtype.kind == "i":
        if arr.size and arr.min() < 0:
            raise ValueError(f"Table '{table}': keys must be >= 0, got "
                             f"{int(arr.min())}")
        return arr.astype(np.uint64)
    if arr.size == 0:
        return np.empty(0, dtype=np.uint64)
    if arr.dtype.kind == "O" or not isinstance(keys, np.ndarray):
        # Python ints beyond int64 (numpy makes a list mixing them with
        # smaller ones float64): convert one by one, refusing floats.
        items = list(keys) if isinstance(keys, (list, tuple)) else arr.tolist()
        return np.array([_key(table, k) for k in items], dtype=np.uint64)
    raise TypeError(f"Table '{table}': keys must be integers, got dtype "
                    f"{arr.dtype}")


def _check_selector(what: str, value: object, table: str = "") -> sel.ItemSelector:
    if not isinstance(value, sel.ItemSelector):
        hint = ""
        if isinstance(value, type) and issubclass(value, sel.ItemSelector):
            hint = f"; pass an instance: {value.__name__}()"
        raise TypeError(
            f"{what} must be a fastreplay.selectors selector, got {value!r}"
            f" (table '{table}'){hint or '; e.g. selectors.Uniform()'}"
        )
    return value


def _check_signature(signature: Any, table: str = "") -> Any:
    """Accept a nest (dict/list/tuple) whose leaves have .shape and .dtype."""
    if signature is None:
        return None
    stack = [signature]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)) and not hasattr(node, "dtype"):
            stack.extend(node)
        elif not (hasattr(node, "shape") and hasattr(node, "dtype")):
            raise ValueError(
                f"Unsupported signature spec: {node!r} (table '{table}'): "
                "signature leaves need .shape and .dtype, e.g. "
                "fastreplay.structured_writer.TensorSpec((4,), np.dtype('float32')) "
                "or tf.TensorSpec")
    return signature


def _check_size(table: str, max_size: object) -> None:
    """Table.queue/stack: max_size named with the table before the rate
    limiter (which does not know the table) sees it."""
    n = _integer(table, "max_size", max_size)
    if n <= 0:
        raise ValueError(f"max_size ({n}) must be a positive integer "
                         f"(table '{table}')")


#: A table's compression default by the core's code (_core.COMPRESSION_*).
_COMPRESSION_NAMES: dict[int, str | None] = {
    int(_core.COMPRESSION_AUTO): "auto", int(_core.COMPRESSION_LZ4): "lz4",
    int(_core.COMPRESSION_NONE): None}


class Table:
    """A replay table (Reverb's ``reverb.Table``).

    Parameters
    ----------
    name : str
        Non-empty table name.
    sampler, remover : ItemSelector
        Distinct selector objects: the sampler picks items to sample, the
        remover picks the item to evict when an insert exceeds ``max_size``.
    max_size : int
        Maximum number of items (> 0).
    rate_limiter : RateLimiter
        Controls when inserts and samples may proceed; one table per object.
    max_times_sampled : int
        Items are deleted after this many samples; < 1 means unlimited.
    extensions : tuple
        Must be empty: table extensions are not supported.
    signature : nest of specs, optional
        Objects with ``.shape`` and ``.dtype`` (e.g. ``tf.TensorSpec``).
    seed : int, optional
        Seed of the table's sampling generator (fastreplay addition); a fixed
        seed makes sampling reproducible for a fixed sequence of calls.

    Raises
    ------
    ValueError
        Empty name, ``max_size <= 0``, the same selector as sampler and
        remover, a rate limiter already used by another table, extensions,
        or an unsupported signature.
    TypeError
        A sampler or remover that is not a selector, a rate limiter that
        is not a ``RateLimiter``, or a ``max_size``/``max_times_sampled``
        that is not an integer.

    Keys (``insert``, ``update_priorities``, ``mutate_priorities``,
    ``delete``, ``get``) must be integers in [0, 2**64): a float key raises
    ``TypeError`` rather than being truncated.
    """

    def __init__(
        self,
        name: str,
        sampler: sel.ItemSelector,
        remover: sel.ItemSelector,
        max_size: int,
        rate_limiter: rl.RateLimiter,
        max_times_sampled: int = 0,
        extensions: Sequence[Any] = (),
        signature: Any = None,
        *,
        seed: int | None = None,
        compression: str | None = "auto",
    ) -> None:
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {name!r}")
        if not name:
            raise ValueError("name must be nonempty")
        max_size = _integer(name, "max_size", max_size)
        if max_size <= 0:
            raise ValueError(f"max_size ({max_size}) must be a positive integer "
                             f"(table '{name}')")
        max_times_sampled = _integer(name, "max_times_sampled", max_times_sampled)
        _check_selector("sampler", sampler, name)
        _check_selector("remover", remover, name)
        if sampler is remover:
            raise ValueError(
                f"Table '{name}': sampler and remover must be distinct selector "
                "objects (the same object cannot track both roles); pass e.g. "
                f"sampler={sampler!r}, remover={type(remover).__name__}(...)"
            )
        if not isinstance(rate_limiter, rl.RateLimiter):
            hint = "e.g. rate_limiters.MinSize(1)"
            if isinstance(rate_limiter, type) and issubclass(rate_limiter,
                                                             rl.RateLimiter):
                hint = f"pass an instance, e.g. {rate_limiter.__name__}(...)"
            raise TypeError(
                f"rate_limiter must be a fastreplay.rate_limiters.RateLimiter, "
                f"got {rate_limiter!r} (table '{name}'); {hint}"
            )
        if tuple(extensions):
            raise ValueError("table extensions are not supported by fastreplay "
                             f"(table '{name}'): pass extensions=()")
        self._signature = _check_signature(signature, name)
        self._compression_mode = compression_mode(compression, f"table '{name}'")
        self._compression = _COMPRESSION_NAMES[self._compression_mode]
        if rate_limiter._table is not None:
            rate_limiter._bind(name)  # raises: the limiter belongs to a table
        self._name = name
        self._sampler = sampler
        self._remover = remover
        self._max_size = int(max_size)
        self._max_times_sampled = max(int(max_times_sampled), 0)
        self._rate_limiter = rate_limiter
        self._seed = secrets.randbits(64) if seed is None else int(seed) % 2**64
        kinds = _core.SELECTOR_KINDS
        self._core = _core.TableCore(
            name,
            kinds[sampler.kind],
            sampler.priority_exponent,
            kinds[remover.kind],
            remover.priority_exponent,
            self._max_size,
            self._max_times_sampled,
            rate_limiter.samples_per_insert,
            rate_limiter.min_size_to_sample,
            rate_limiter.min_diff,
            rate_limiter.max_diff,
            self._seed,
        )
        rate_limiter._bind(name)  # only once the table exists

    @classmethod
    def queue(
        cls,
        name: str,
        max_size: int,
        extensions: Sequence[Any] = (),
        signature: Any = None,
        *,
        compression: str | None = "auto",
    ) -> Table:
        """A FIFO queue: Fifo sampler and remover, each item sampled once,
        inserts block when full and samples block when empty."""
        _check_size(name, max_size)
        return cls(
            name, sel.Fifo(), sel.Fifo(), max_size, rl.Queue(max_size),
            max_times_sampled=1, extensions=extensions, signature=signature,
            compression=compression,
        )

    @classmethod
    def stack(
        cls,
        name: str,
        max_size: int,
        extensions: Sequence[Any] = (),
        signature: Any = None,
        *,
        compression: str | None = "auto",
    ) -> Table:
        """A LIFO stack: as :meth:`queue` with Lifo selectors."""
        _check_size(name, max_size)
        return cls(
            name, sel.Lifo(), sel.Lifo(), max_size, rl.Stack(max_size),
            max_times_sampled=1, extensions=extensions, signature=signature,
            compression=compression,
        )

    def replace(self, **overrides: Any) -> Table:
        """A new, empty table with this configuration and ``overrides``."""
        return type(self)(**{**self.config(), **overrides})

    def config(self) -> dict[str, Any]:
        """The constructor arguments of a new, empty table like this one
        (picklable: fresh selectors and an unbound rate limiter), e.g. to
        build copies of it in other processes (``fastreplay.ray``)."""
        kwargs: dict[str, Any] = dict(
            name=self._name,
            sampler=copy.copy(self._sampler),
            remover=copy.copy(self._remover),
            max_size=self._max_size,
            rate_limiter=None,
            max_times_sampled=self._max_times_sampled,
            signature=self._signature,
            compression=self._compression,
        )
        limiter = copy.copy(self._rate_limiter)
        limiter._table = None
        kwargs["rate_limiter"] = limiter
        return kwargs

    # ----- Reverb surface -----

    @property
    def name(self) -> str:
        return self._name

    @property
    def signature(self) -> Any:
        return self._signature

    @property
    def compression(self) -> str | None:
        """The default compression of the columns this table's items come
        from (fastreplay's): ``'auto'``, ``'lz4'`` or None.  A writer column
        that ``configure`` (or a StructuredWriter config) does not decide
        takes the default of the table its first item goes to."""
        return self._compression

    @property
    def info(self) -> TableInfo:
        """Reverb's ``TableInfo`` of this table (a snapshot)."""
        return self.info_from(self._core.stats())

    def info_from(self, s: Mapping[str, int]) -> TableInfo:
        """``TableInfo`` of this table's configuration with the counters
        ``s`` (the form of ``TableCore.stats()``): for storage that keeps
        the table's items elsewhere (``ReplayBuffer``'s ring form)."""
        limiter = self._rate_limiter
        return TableInfo(
            name=self._name,
            sampler_options=KeyDistributionOptions.from_selector(self._sampler),
            remover_options=KeyDistributionOptions.from_selector(self._remover),
            max_size=self._max_size,
            max_times_sampled=self._max_times_sampled,
            rate_limiter_info=RateLimiterInfo(
                samples_per_insert=limiter.samples_per_insert,
                min_diff=limiter.min_diff,
                max_diff=limiter.max_diff,
                min_size_to_sample=limiter.min_size_to_sample,
                insert_stats=RateLimiterCallStats(
                    s["rl_inserts"], s["num_insert_stalls"],
                    s["insert_stall_ns"] / 1e9,
                ),
                sample_stats=RateLimiterCallStats(
                    s["rl_samples"], s["num_sample_stalls"],
                    s["sample_stall_ns"] / 1e9,
                ),
                deletes=s["rl_deletes"],
            ),
            signature=self._signature,
            current_size=s["size"],
            num_episodes=s["num_episodes"],
            num_deleted_episodes=s["num_deleted_episodes"],
            num_unique_samples=s["num_unique_samples"],
            table_worker_time=TableWorkerTime(
                waiting_for_sampling_ms=s["insert_stall_ns"] // 1_000_000,
                waiting_for_inserts_ms=s["sample_stall_ns"] // 1_000_000,
            ),
            num_inserts=s["num_inserts"],
            num_samples=s["num_samples"],
            num_updates=s["num_updates"],
            num_deletes=s["num_deletes"],
            num_evictions=s["num_evictions"],
            compression=self._compression,
            num_expired=s["num_expired"],
        )

    def can_sample(self, num_samples: int) -> bool:
        """Whether the rate limiter would admit ``num_samples`` samples now
        (ignores max_times_sampled, as in Reverb)."""
        num_samples = _integer(self._name, "num_samples", num_samples)
        if num_samples < 1:
            raise ValueError(f"num_samples ({num_samples}) must be >= 1")
        return bool(self._core.can_sample(num_samples))

    def can_insert(self, num_inserts: int) -> bool:
        """Whether the rate limiter would admit ``num_inserts`` inserts now
        (ignores max_size, as in Reverb)."""
        num_inserts = _integer(self._name, "num_inserts", num_inserts)
        if num_inserts < 1:
            raise ValueError(f"num_inserts ({num_inserts}) must be >= 1")
        return bool(self._core.can_insert(num_inserts))

    def check_priority(self, priority: float) -> None:
        """Raise ``InvalidPriorityError`` if inserting with ``priority``
        would be refused (NaN, negative or too large for a selector)."""
        self._core.check_priority(priority)

    # ----- operations -----

    def _num_samples(self, num_samples: object) -> int:
        """An integer batch size (TypeError naming the table otherwise); the
        core refuses n < 1 and n beyond its per-call limit."""
        n = _integer(self._name, "num_samples", num_samples)
        if n < 1:
            raise ValueError(f"num_samples ({n}) must be a positive integer "
                             f"(table '{self._name}')")
        if n >= 2**62:  # the core's own limit is far lower and names it
            raise ValueError(f"num_samples ({n}) is too large (table "
                             f"'{self._name}')")
        return n

    def __len__(self) -> int:
        return int(self._core.size())

    @property
    def size(self) -> int:
        return len(self)

    @property
    def priority_mass(self) -> float:
        """The sampler's total mass (fastreplay addition), read under the
        table's lock in O(1): the sum of ``priority ** priority_exponent``
        over the items (the sum-tree root; 0.0 when every priority is 0) for
        a ``Prioritized`` sampler, and the number of items for every other
        sampler (``Uniform``, ``Fifo``, ``Lifo``, ``MinHeap``, ``MaxHeap``).
        A sharded table draws each shard's share of a batch from these."""
        return float(self._core.priority_mass()[0])

    def mass_and_size(self) -> tuple[float, int]:
        """``(priority_mass, size)`` read together under the table's lock
        (fastreplay addition): a consistent pair for a shard's share of a
        sharded batch."""
        mass, size = self._core.priority_mass()
        return float(mass), int(size)

    @property
    def key_prefix(self) -> int | None:
        """The top 8 bits of every item key writers draw for this table
        (``key >> 56``), set by ``Server(key_prefix=...)``; None when all
        64 bits are random (the default)."""
        return self._core.key_prefix

    def _skip_episodes(self) -> None:
        """Stop counting episodes (a remote client's staging queue, whose
        items only pass through); the table must be empty."""
        self._core.skip_episodes()

    def _set_key_prefix(self, prefix: int | None) -> None:
        """Set by the server holding this table (or a remote client's
        staging queue): items stored already keep their keys."""
        self._core.set_key_prefix(prefix)

    def insert(
        self, key: int, priority: float, *, timeout: float | None = None
    ) -> None:
        """Insert an item, or update its priority if ``key`` is present.

        Waits while the rate limiter blocks inserts; a NaN or negative
        priority on a Prioritized selector raises InvalidPriorityError
        before anything changes.  O(log n).

        Raises
        ------
        InvalidPriorityError, DeadlineExceededError, TableClosedError
        TypeError
            A key that is not an integer (``1.5`` is not stored as key 1).
        """
        self._core.insert(_key(self._name, key), priority, timeout)

    def insert_batch(
        self,
        keys: npt.ArrayLike,
        priorities: npt.ArrayLike,
        *,
        timeout: float | None = None,
    ) -> int:
        """Insert many items in one call; returns the number inserted.

        Every priority is validated before the first insert.
        """
        return int(self._core.insert_many(key_array(self._name, keys), priorities,
                                          timeout))

    def sample(
        self, num_samples: int = 1, *, timeout: float | None = None
    ) -> SampleInfoBatch:
        """Sample ``num_samples`` items (with replacement) in one call.

        Each sample takes one rate-limiter permit; when the limiter blocks
        the call waits.  If the timeout expires after at least one sample a
        shorter batch is returned; with none, DeadlineExceededError.
        """
        num_samples = self._num_samples(num_samples)
        keys, probs, prios, times, sizes, _ = self._core.sample(num_samples, timeout)
        return SampleInfoBatch(keys, probs, sizes, prios, times)

    def sample_items(
        self, num_samples: int = 1, *, timeout: float | None = None
    ) -> list[ReplaySample]:
        """Sample items with their data: one ``ReplaySample(info, data)`` per
        item, ``data`` the flat list of the item's columns as numpy arrays
        (``[T, *shape]``, or ``shape`` when squeezed).  Rate limiting and
        timeouts as :meth:`sample`."""
        keys, probs, prios, times, sizes, trajs = self._core.sample(
            self._num_samples(num_samples), timeout, True
        )
        assert trajs is not None
        return [
            ReplaySample(
                SampleInfo(int(keys[i]), float(probs[i]), int(sizes[i]),
                           float(prios[i]), int(times[i])),
                trajs[i].columns(),
            )
            for i in range(len(keys))
        ]

    def sample_batch(
        self, num_samples: int, *, timeout: float | None = None, out: Any = None,
        offset: int = 0,
    ) -> tuple[SampleInfoBatch, list[Any], int]:
        """Sample items as stacked arrays: ``(info, columns, structure_id)``
        with ``columns`` the flat list of ``[B, T, ...]`` arrays (``[B, ...]``
        when squeezed) and the items' structure id (``_structures``).  Rate
        limiting and timeouts as :meth:`sample`.  With ``out`` (a writable
        buffer) the columns that fit are gathered into it from ``offset``
        on, each 64-byte aligned (``TableCore.sample_batch``)."""
        keys, probs, prios, times, sizes, columns, _, sid = self._core.sample_batch(
            self._num_samples(num_samples), timeout, out, offset)
        return SampleInfoBatch(keys, probs, sizes, prios, times), columns, sid

    def export_records(self, max_items: int, take: bool = False) -> tuple[Any, ...]:
        """The oldest ``max_items`` items as record arrays, their column
        specs, their chunks and the chunks' keys (``_core.export_wire``):
        what the network transport sends.  With ``take`` (a queue only),
        they leave the table as if sampled."""
        return _core.export_wire(self._core, max_items, take)

    def insert_records(self, chunk_map: _core.ChunkMap, items: Any, columns: Any,
                       slices: Any, specs: list[Any],
                       timeout: float | None = None) -> int:
        """Insert items sent as :meth:`export_records` gives them through
        the rate limiter; every record is checked before any item is
        inserted (``_core.insert_wire``)."""
        return _core.insert_wire(self._core, chunk_map, items, columns, slices,
                                 specs, timeout)

    def mutate_priorities(
        self,
        updates: Mapping[int, float] | None = None,
        deletes: Iterable[int] | None = None,
    ) -> None:
        """Apply ``deletes``, then priority ``updates`` (Reverb's order).

        Unknown keys are ignored.  All priorities are validated first: an
        invalid one raises InvalidPriorityError and nothing is applied.
        """
        updates = updates or {}
        self._core.mutate(
            key_array(self._name, list(updates)),
            np.fromiter(updates.values(), dtype=np.float64, count=len(updates)),
            key_array(self._name, list(deletes or ())),
        )

    def update_priorities(
        self, keys: npt.ArrayLike, priorities: npt.ArrayLike
    ) -> None:
        """Vectorised priority update (unknown keys ignored)."""
        self._core.mutate(key_array(self._name, keys), priorities,
                          np.empty(0, dtype=np.uint64))

    def mutate_keys(self, update_keys: npt.ArrayLike, priorities: npt.ArrayLike,
                    delete_keys: npt.ArrayLike) -> None:
        """:meth:`mutate_priorities` with arrays: delete ``delete_keys``,
        then set the ``priorities`` of ``update_keys``."""
        self._core.mutate(key_array(self._name, update_keys), priorities,
                          key_array(self._name, delete_keys))

    def delete(self, keys: npt.ArrayLike) -> None:
        """Delete items by key (unknown keys ignored)."""
        self._core.mutate(
            np.empty(0, dtype=np.uint64), np.empty(0), key_array(self._name, keys)
        )

    def get(self, key: int) -> tuple[int, float, int] | None:
        """``(key, priority, times_sampled)`` of a stored item, else None."""
        item = self._core.get(_key(self._name, key))
        return None if item is None else (item[0], item[1], item[2])

    def items(self) -> np.ndarray:
        """Structured array of every item in insertion order (key, priority,
        times_sampled, inserted_seq, has_data)."""
        return self._core.items()  # type: ignore[no-any-return, unused-ignore]

    def metrics(self) -> dict[str, float]:
        """This table's counters as a flat dict for loggers
        (``table/<name>/inserts`` ...; ``fastreplay.metrics`` lists the keys)."""
        from fastreplay.metrics import table_metrics

        return table_metrics(self.info)

    def reset(self) -> None:
        """Delete every item and zero the rate-limiter counters."""
        self._core.reset()

    def close(self) -> None:
        """Cancel waiting calls (TableClosedError) and refuse later waits."""
        self._core.close()

    def __repr__(self) -> str:
        return (
            f"Table(name={self._name!r}, sampler={self._sampler!r}, "
            f"remover={self._remover!r}, max_size={self._max_size}, "
            f"rate_limiter={self._rate_limiter!r}, "
            f"max_times_sampled={self._max_times_sampled})"
        )
