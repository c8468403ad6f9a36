"""``SlotStore``: rows addressed by slot number, kept in fastreplay's core.

The storage under the framework adapters (rlightning's ``Storage``, ALF's
replayers), which address data by ring position rather than by sampling:
slot ``s`` holds one row of every column.  The rows live in chunks of a
``_core.ChunkStore`` (compressed by the same rule as every column), and a
compiled slot table (``_core.SlotTable``, csrc/slots.h) points each slot at
its rows: a write is one call that copies the rows into chunks, a read one
call that gathers the rows of any slots in C without the GIL.  A chunk is
freed when the last slot pointing into it is overwritten.

Thread-safe as far as the slot table is; the column bookkeeping here
expects one writer at a time (the adapters, as their upstreams, are used
from one thread).
"""

from __future__ import annotations

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
        self._store = _core.ChunkStore()
        self._table = _core.SlotTable(self._capacity, self._store)
        self._names: list[str] | None = None

    @property
    def capacity(self) -> int:
        return self._capacity

    def _modes(self, n: int) -> list[int] | None:
        """The table's compression argument (None: AUTO, checked nowhere)."""
        if self._compression == _core.COMPRESSION_AUTO:
            return None
        return [self._compression] * n

    @property
    def chunk_store(self) -> _core.ChunkStore:
        """The store of the rows' chunks (``stats()``: live chunks, bytes)."""
        return self._store

    @property
    def names(self) -> list[str] | None:
        """The column names in storage order (None before the first write)."""
        return None if self._names is None else list(self._names)

    @property
    def specs(self) -> dict[str, tuple[np.dtype[Any], tuple[int, ...]]]:
        """Column name -> (dtype, row shape)."""
        return {name: (dtype, shape) for name, (shape, dtype)
                in zip(self._names or [], self._table.specs(), strict=False)}

    def __len__(self) -> int:
        """Occupied slots."""
        return int(self._table.size())

    def _columns(self, columns: Mapping[str, Any], n: int) -> tuple[list[str],
                                                                    list[np.ndarray]]:
        """The names and values in storage order, checked against the
        schema (the table checks dtypes and shapes)."""
        names = list(columns) if self._names is None else self._names
        if not names:
            raise ValueError(f"{self._name}: a write needs at least one column")
        if self._names is not None and columns.keys() != set(names):
            missing = sorted(set(names) - columns.keys())
            extra = sorted(columns.keys() - set(names))
            raise ValueError(f"{self._name}: the columns differ from the stored ones "
                             f"(missing {missing}, unexpected {extra})")
        values = [np.asarray(columns[k]) for k in names]
        for k, v in zip(names, values, strict=True):
            if v.ndim == 0 or len(v) != n:
                raise ValueError(f"{self._name}: column {k!r} has "
                                 f"{len(v) if v.ndim else 0} rows, expected {n}")
        return names, values

    def write(self, slots: npt.ArrayLike, columns: Mapping[str, Any]) -> None:
        """Row ``i`` of every column goes to ``slots[i]``, replacing what the
        slot held (a slot given twice keeps its last row)."""
        s = np.asarray(slots, dtype=np.int64).reshape(-1)
        names, values = self._columns(columns, len(s))
        if not len(s):
            return
        self._table.write(s, names, values, self._modes(len(values)))
        if self._names is None:
            self._names = names

    def write_columns(self, slots: npt.ArrayLike, names: list[str],
                      values: list[np.ndarray]) -> None:
        """``write`` of values in the order of ``names``, which must be the
        stored names once there are any: the hot path (the table checks
        dtypes, shapes and row counts)."""
        if self._names is not None and names is not self._names \
                and names != self._names:
            raise ValueError(f"{self._name}: columns {names} differ from the stored "
                             f"{self._names}")
        s = np.asarray(slots, dtype=np.int64).reshape(-1)
        if not len(s):
            return
        self._table.write(s, names, values, self._modes(len(values)))
        if self._names is None:
            self._names = list(names)

    def read(self, slots: npt.ArrayLike, counter: np.ndarray | None = None
             ) -> dict[str, np.ndarray]:
        """``{name: [len(slots), *shape]}`` rows of ``slots`` (repeats
        allowed); with ``counter`` (int32, one per slot) each read row adds
        one to its slot's entry.  KeyError for an empty slot."""
        if self._names is None:
            s = np.asarray(slots, dtype=np.int64).reshape(-1)
            if len(s):
                raise KeyError(f"{self._name}: slot {int(s[0])} is empty")
            return {}
        return dict(zip(self._names, self.read_columns(slots, counter), strict=True))

    def read_columns(self, slots: npt.ArrayLike, counter: np.ndarray | None = None
                     ) -> list[np.ndarray]:
        """``read`` as a list in column order (``names``): the hot path."""
        try:
            return self._table.read(slots, counter)
        except KeyError as e:
            raise KeyError(f"{self._name}: {e.args[0]}") from None

    def read_windows(self, bases: npt.ArrayLike, starts: npt.ArrayLike, length: int,
                     period: int) -> list[np.ndarray]:
        """Windows of ``length`` consecutive ring positions, in column order:
        window i is slots ``bases[i] + (starts[i] + j) % period``, its rows
        at ``[i * length, (i + 1) * length)``."""
        try:
            return self._table.read_windows(bases, starts, length, period)
        except KeyError as e:
            raise KeyError(f"{self._name}: {e.args[0]}") from None

    def erase(self, slots: npt.ArrayLike) -> None:
        """Empty ``slots`` (empty ones stay empty)."""
        self._table.erase(np.asarray(slots, dtype=np.int64).reshape(-1))

    def clear(self) -> None:
        """Empty every slot and forget the columns."""
        self._table.clear()
        self._names = None

    def occupied(self) -> npt.NDArray[np.int64]:
        """The occupied slots, ascending."""
        if self._names is None:
            return np.empty(0, dtype=np.int64)
        return self._table.occupied()

    # Pickling (adapters live in Ray actors): the occupied slots' rows.
    def __getstate__(self) -> dict[str, Any]:
        slots = self.occupied()
        return {"capacity": self._capacity, "name": self._name,
                "compression": self._compression, "slots": slots,
                "names": self._names, "rows": self.read(slots)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["capacity"], state["name"])  # type: ignore[misc]
        self._compression = state["compression"]
        if state["names"] is not None:
            self._names = list(state["names"])
            rows = state["rows"]
            if len(state["slots"]):
                self._table.write(state["slots"], self._names,
                                  [rows[k] for k in self._names],
                                  self._modes(len(self._names)))
