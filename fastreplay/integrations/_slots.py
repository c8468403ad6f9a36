"""``SlotStore``: rows addressed by slot number, kept in fastreplay's core.

The storage under the framework adapters (rlightning's ``Storage``, ALF's
replayers), which address data by ring position rather than by sampling:
slot ``s`` holds one row of every column.  Each occupied slot is one item of
a private compiled table (``_core.TableCore``), its columns squeezed rows in
chunks of the store (``_core.insert_rows``: one call per write, compressed
by the same rule as every column); a read looks the slots' items up and
gathers their rows in C without the GIL (``TableCore.lookup_batch``).

Overwriting a slot deletes its old item first, so the table holds at most
``capacity`` items and a chunk is freed when its last row is overwritten.

Not thread-safe: the adapters own one store each and call it from one
thread at a time (as their upstreams do).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from fastreplay import _core
from fastreplay.chunkers import compression_mode

__all__ = ["SlotStore"]



class SlotStore:
    """``capacity`` slots, each empty or one row of every column.

    The first write fixes the columns (names, dtypes, row shapes); later
    writes must match (ValueError naming the column).  ``clear`` empties the
    store and forgets the columns.
    """

    def __init__(self, capacity: int, name: str = "slots",
                 compression: str | None = "auto") -> None:
        if int(capacity) < 1:
            raise ValueError(f"capacity ({capacity}) must be a positive integer")
        self._capacity = int(capacity)
        self._name = name
        self._compression = compression_mode(compression, name)
        self._table = self._new_table()
        self._store = _core.ChunkStore()
        self._keys = np.full(self._capacity, -1, dtype=np.int64)  # slot -> key
        self._next_key = 0
        self._chunk_key = secrets.randbits(62)
        self._names: list[str] | None = None
        self._specs: list[tuple[np.dtype[Any], tuple[int, ...]]] = []
        self._paths: list[str] = []

    def _new_table(self) -> _core.TableCore:
        kinds = _core.SELECTOR_KINDS
        return _core.TableCore(self._name, kinds["uniform"], 1.0, kinds["fifo"], 1.0,
                               self._capacity, 0, 1.0, 0, -1e308, 1e308,
                               secrets.randbits(63))

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def names(self) -> list[str] | None:
        """The column names in storage order (None before the first write)."""
        return None if self._names is None else list(self._names)

    @property
    def specs(self) -> dict[str, tuple[np.dtype[Any], tuple[int, ...]]]:
        """Column name -> (dtype, row shape)."""
        return dict(zip(self._names or [], self._specs, strict=True))

    def occupied(self, slots: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        return self._keys[np.asarray(slots, dtype=np.int64)] >= 0

    def __len__(self) -> int:
        """Occupied slots."""
        return int(self._table.size())

    def _columns(self, columns: Mapping[str, Any], n: int) -> list[np.ndarray]:
        """The values in storage order, checked against the schema."""
        if self._names is None:
            names = list(columns)
            if not names:
                raise ValueError(f"{self._name}: a write needs at least one column")
        else:
            names = self._names
            if columns.keys() != set(names):
                missing = sorted(set(names) - columns.keys())
                extra = sorted(columns.keys() - set(names))
                raise ValueError(
                    f"{self._name}: the columns differ from the stored ones "
                    f"(missing {missing}, unexpected {extra})")
        values = []
        for k in names:
            v = np.ascontiguousarray(columns[k])
            if v.ndim == 0 or len(v) != n:
                raise ValueError(f"{self._name}: column {k!r} has "
                                 f"{len(v) if v.ndim else 0} rows, expected {n}")
            values.append(v)
        if self._names is not None:
            for k, v, (dt, shape) in zip(names, values, self._specs, strict=True):
                if v.dtype != dt or v.shape[1:] != shape:
                    raise ValueError(
                        f"{self._name}: column {k!r} has rows of {v.dtype} "
                        f"{v.shape[1:]}, the stored rows are {dt} {shape}")
        else:
            self._names = names
            self._specs = [(v.dtype, v.shape[1:]) for v in values]
            self._paths = [repr((k,)) for k in names]
        return values

    def write(self, slots: npt.ArrayLike, columns: Mapping[str, Any]) -> None:
        """Row ``i`` of every column goes to ``slots[i]`` (distinct slots in
        range), replacing what the slot held."""
        s = np.asarray(slots, dtype=np.int64).reshape(-1)
        n = len(s)
        if n == 0:
            return
        if s.min() < 0 or s.max() >= self._capacity:
            raise IndexError(f"{self._name}: slots out of range [0, {self._capacity})")
        fresh = self._names is None
        try:
            values = self._columns(columns, n)
        except BaseException:
            if fresh:
                self._names = None
            raise
        old = self._keys[s]
        old = old[old >= 0]
        if len(old):
            self._table.mutate((), (), old.astype(np.uint64))
            self._keys[s] = -1
        keys = np.arange(self._next_key, self._next_key + n, dtype=np.int64)
        self._next_key += n
        chunk_key = self._chunk_key
        self._chunk_key = (self._chunk_key + n * len(values)) % 2**64
        done = _core.insert_rows(self._table, self._store, self._paths, values,
                                 keys.astype(np.uint64), np.ones(n), chunk_key,
                                 None, 1, None, [self._compression] * len(values))
        self._keys[s[:done]] = keys[:done]

    def read(self, slots: npt.ArrayLike) -> dict[str, np.ndarray]:
        """``{name: [len(slots), *shape]}`` rows of ``slots`` (repeats
        allowed); KeyError for an empty slot."""
        s = np.asarray(slots, dtype=np.int64).reshape(-1)
        if self._names is None:
            if len(s):
                raise KeyError(f"{self._name}: slot {int(s[0])} is empty")
            return {}
        if len(s) == 0:
            return {k: np.empty((0, *shape), dt)
                    for k, (dt, shape) in zip(self._names, self._specs, strict=True)}
        keys = self._keys[s]
        if keys.min() < 0:
            bad = int(s[int(np.argmin(keys >= 0))])
            raise KeyError(f"{self._name}: slot {bad} is empty")
        columns, _squeeze, _sid = self._table.lookup_batch(keys.astype(np.uint64))
        return dict(zip(self._names, columns, strict=True))

    def erase(self, slots: npt.ArrayLike) -> None:
        """Empty ``slots`` (empty ones stay empty)."""
        s = np.asarray(slots, dtype=np.int64).reshape(-1)
        old = self._keys[s]
        old = old[old >= 0]
        if len(old):
            self._table.mutate((), (), old.astype(np.uint64))
        self._keys[s] = -1

    def clear(self) -> None:
        """Empty every slot and forget the columns."""
        self._table.reset()
        self._keys[:] = -1
        self._names, self._specs, self._paths = None, [], []

    # Pickling (adapters live in Ray actors): the occupied slots' rows.
    def __getstate__(self) -> dict[str, Any]:
        slots = np.flatnonzero(self._keys >= 0)
        return {"capacity": self._capacity, "name": self._name,
                "compression": self._compression, "slots": slots,
                "names": self._names, "specs": self._specs,
                "rows": self.read(slots) if self._names is not None else {}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["capacity"], state["name"])  # type: ignore[misc]
        self._compression = state["compression"]
        if state["names"] is not None:
            self._names = state["names"]
            self._specs = state["specs"]
            self._paths = [repr((k,)) for k in state["names"]]
            self.write(state["slots"], state["rows"])
