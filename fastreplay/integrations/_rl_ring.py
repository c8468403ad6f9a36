"""The ring of slots under the rlightning adapter's ``Storage``.

Transitions occupy ring slots in a ``SlotStore`` (rows in fastreplay's
chunks and a compiled table; reads gathered in C).  Episodes are slot
intervals kept in insertion order (episode i is the i-th oldest).  Each slot
has a use counter: -1 unused, 0 written, +1 per read.

The push rules are upstream's (a push crossing the end is split; one longer
than the ring keeps its last ``capacity`` rows from slot 0; an episode that
does not fit before the end starts at slot 0, evicting every episode it
overlaps and every one between the old write position and the end), with
its fixes: a fixed ring refuses any push that does not fit, also after one
that filled it exactly (R1).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from fastreplay.integrations._slots import SlotStore

__all__ = ["Path", "SlotRing", "flatten", "nest"]

Path = tuple[str, ...]


def flatten(data: Any, prefix: Path = ()) -> dict[Path, Any]:
    """Leaves of a dict or TensorDict (nested keys allowed) by key path."""
    out: dict[Path, Any] = {}
    for key, value in data.items():
        path = prefix + (key if isinstance(key, tuple) else (key,))
        if isinstance(value, dict) or hasattr(value, "batch_size") and \
                hasattr(value, "items") and not isinstance(value, torch.Tensor):
            out.update(flatten(value, path))
        else:
            out[path] = value
    return out


def nest(paths: list[Path], values: list[Any]) -> dict[str, Any]:
    """The nested dict of ``values`` at ``paths``."""
    out: dict[str, Any] = {}
    for path, value in zip(paths, values, strict=True):
        d = out
        for k in path[:-1]:
            d = d.setdefault(k, {})
        d[path[-1]] = value
    return out


def _to_numpy(value: Any) -> tuple[np.ndarray, torch.dtype]:
    """A CPU numpy view of a tensor-like value, and its torch dtype."""
    t = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    dtype = t.dtype
    if dtype == torch.bfloat16:  # numpy has no bfloat16: its bits
        t = t.view(torch.int16)
    return t.numpy(), dtype


class SlotRing:
    """``capacity`` slots written as a ring (circular) or once (fixed)."""

    def __init__(self, capacity: int, circular: bool, episodic: bool,
                 device: torch.device) -> None:
        self.capacity = capacity
        self.circular = circular
        self.episodic = episodic
        self.device = device
        self.store = SlotStore(capacity, "rlightning storage")
        self.counter = np.full(capacity, -1, dtype=np.int32)
        self.pointer = 0  # next write position
        self.size = 0  # written transitions
        self.begins = np.empty(0, dtype=np.int64)  # episodes, oldest first
        self.ends = np.empty(0, dtype=np.int64)
        self.paths: list[Path] = []
        self.names: list[str] = []
        self.dtypes: list[torch.dtype] = []
        self.flat = True  # no nested keys: rows() builds a flat dict
        self.keys: list[str] = []

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Ray unpickles numpy arrays as read-only views of its object store:
        # the use counter is written by every read, so it gets its own copy.
        state["counter"] = np.array(state["counter"], dtype=np.int32)
        self.__dict__.update(state)

    # -- schema ---------------------------------------------------------------
    def _fast_columns(self, data: Any) -> list[np.ndarray] | None:
        """The columns of a flat dict of CPU tensors with the stored keys
        (the learner's push), else None: the general path checks them."""
        if not self.flat or type(data) is not dict or len(data) != len(self.keys):
            return None
        try:
            return [data[k].numpy() for k in self.keys]
        except (KeyError, AttributeError, TypeError, RuntimeError):
            return None  # other keys, non-tensors, bfloat16, grads, GPU

    def _columns(self, data: Any) -> list[np.ndarray]:
        """The columns of any episode (dict, nested dict or TensorDict of
        tensors or arrays), in storage order; fixes the keys on the first."""
        leaves = flatten(data)
        if not leaves:
            raise ValueError("rlightning Storage: an episode needs at least one key")
        arrays = {}
        dtypes = {}
        for path, value in leaves.items():
            arr, dtype = _to_numpy(value)
            if arr.ndim == 0:
                raise ValueError(f"rlightning Storage: key {'.'.join(path)!r} is a "
                                 "scalar; every value needs a leading time axis")
            arrays[path], dtypes[path] = arr, dtype
        if not self.paths:
            self.paths = list(arrays)
            self.names = [".".join(p) if len(p) > 1 else p[0] for p in self.paths]
            if len(set(self.names)) != len(self.names):
                self.names = [repr(p) for p in self.paths]
            self.dtypes = [dtypes[p] for p in self.paths]
            self.flat = all(len(p) == 1 for p in self.paths)
            self.keys = [p[0] for p in self.paths]
        elif arrays.keys() != set(self.paths):
            raise ValueError(f"rlightning Storage: keys {sorted(arrays)} differ from "
                             f"the stored {sorted(self.paths)} (clear() to change "
                             "them)")
        else:
            for path, dtype in zip(self.paths, self.dtypes, strict=True):
                if dtypes[path] != dtype:
                    raise ValueError(f"rlightning Storage: key {'.'.join(path)!r} has "
                                     f"dtype {dtypes[path]}, the stored one {dtype}")
        return [arrays[p] for p in self.paths]

    def _steps(self, cols: list[np.ndarray]) -> int:
        """The common number of steps (ValueError naming a key that differs)."""
        n = len(cols[0])
        for name, arr in zip(self.names, cols, strict=True):
            if len(arr) != n:
                raise ValueError(f"rlightning Storage: key {name!r} has {len(arr)} "
                                 f"steps, others {n}")
        return n

    def clear(self) -> None:
        self.store.clear()
        self.counter[:] = -1
        self.pointer = self.size = 0
        self.begins = self.ends = np.empty(0, dtype=np.int64)
        self.paths, self.names, self.dtypes = [], [], []
        self.flat, self.keys = True, []

    # -- writes ---------------------------------------------------------------
    def push(self, data: Any, num_episodes: int = 1, length: int = 0) -> None:
        """Store one episode or batch of transitions (``num_episodes``
        env-major episodes of ``length`` steps when > 1)."""
        fresh = not self.paths
        try:
            cols = self._fast_columns(data)
            if cols is None:
                cols = self._columns(data)
            n = self._steps(cols)
            if n:
                self._push(cols, n, num_episodes, length if num_episodes > 1 else n)
        except BaseException:
            if fresh and len(self.store) == 0:
                self.paths, self.names, self.dtypes = [], [], []
                self.flat, self.keys = True, []
            raise

    def _push(self, cols: list[np.ndarray], n: int, num: int, length: int) -> None:
        cap = self.capacity
        if not self.circular and self.pointer + n > cap:
            raise RuntimeError(f"Cannot push {n} items to storage of capacity {cap}. "
                               f"Current size is {self.size}.")
        if n > cap:  # circular: the last `capacity` rows, from slot 0
            cols = [v[n - cap:] for v in cols]
            skipped, n = n - cap, cap
            self._write(0, cols, n)
            if self.episodic:
                self._evict(0, cap)
                if num > 1:  # the whole sub-episodes that fit, oldest first
                    first = -(-skipped // length) * length - skipped
                    starts = np.arange(first, cap - length + 1, length)
                    self._register(starts, starts + length)
                else:
                    self._register(np.array([0]), np.array([cap]))
            self.counter[:] = 0
            self.pointer = 0
            self.size = cap
            return
        start = self.pointer
        if start + n > cap and self.episodic:  # starts over at slot 0
            self._evict(start, cap)
            self._erase(start, cap)
            start = 0
        if self.episodic:
            self._evict(start, start + n)
            starts = start + np.arange(num, dtype=np.int64) * length
            self._register(starts, starts + length)
        if start + n > cap:  # transitions: split at the end
            head = cap - start
            self._write(start, [v[:head] for v in cols], head)
            self._write(0, [v[head:] for v in cols], n - head)
            self.counter[start:] = 0
            self.counter[:n - head] = 0
        else:
            self._write(start, cols, n)
            self.counter[start:start + n] = 0
        end = start + n
        self.pointer = end % cap if self.circular else end
        self.size = min(self.size + n, cap)

    def _write(self, start: int, cols: list[np.ndarray], n: int) -> None:
        self.store.write_columns(np.arange(start, start + n), self.names, cols)

    def _erase(self, a: int, b: int) -> None:
        """Slots [a, b) that no episode uses any more (evicted ones)."""
        if b > a:
            self.store.erase(np.arange(a, b))

    def _evict(self, a: int, b: int) -> None:
        """Drop the episodes overlapping [a, b); their slots become unused."""
        hit = (self.begins < b) & (self.ends > a)
        if hit.any():
            for s, e in zip(self.begins[hit], self.ends[hit], strict=True):
                self.counter[s:e] = -1
            self.begins, self.ends = self.begins[~hit], self.ends[~hit]

    def _register(self, begins: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]
                  ) -> None:
        self.begins = np.concatenate([self.begins, begins.astype(np.int64)])
        self.ends = np.concatenate([self.ends, ends.astype(np.int64)])

    # -- reads ----------------------------------------------------------------
    def rows(self, slots: npt.NDArray[np.int64], shape: tuple[int, ...],
             count: bool = True) -> dict[str, Any]:
        """Nested dict of tensors of ``slots`` reshaped to ``shape + row``;
        each read row counts one use of its slot (repeats too) unless
        ``count`` is False.  KeyError for an empty slot."""
        got = self.store.read_columns(slots, self.counter if count else None)
        values = []
        plain = self.device.type == "cpu"
        from_numpy = torch.from_numpy
        for arr, dtype in zip(got, self.dtypes, strict=True):
            if arr.shape[:1] != shape:
                arr = arr.reshape(shape + arr.shape[1:])
            t = from_numpy(arr)
            if dtype == torch.bfloat16:
                t = t.view(torch.bfloat16)
            values.append(t if plain else t.to(self.device))
        if self.flat:
            return dict(zip(self.keys, values, strict=True))
        return nest(self.paths, values)

    def empty_rows(self, shape: tuple[int, ...]) -> dict[str, Any]:
        """Rows of no slot (the schema's dtypes and row shapes)."""
        specs = self.store.specs
        values = []
        for name, dtype in zip(self.names, self.dtypes, strict=True):
            _dt, row = specs[name]
            values.append(torch.empty(shape + row, dtype=dtype, device=self.device))
        return nest(self.paths, values)
