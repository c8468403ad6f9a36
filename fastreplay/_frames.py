"""Each frame once: ``ReplayBuffer(next_of=..., stack_compress=...)``.

cpprb's names and meaning.  ``next_of='obs'``: the transitions carry ``obs``
and ``next_obs``, and ``next_obs`` of one step is usually ``obs`` of the
next; ``stack_compress='obs'``: ``obs`` is a stack of frames on its last
axis that slides by one frame per step.  Both fields are stored as one
stream of frames (``_core.FrameStream``, csrc/frames.h): a value equal to
the stream's last one refers to its rows, a value slid by one frame stores
its newest frame, anything else (an episode start) stores all its frames.
Values are compared by bytes, so ``sample`` returns exactly what was added
(also across episodes, without ``on_episode_end``) and the stack is rebuilt
on the last axis by the gather in C.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from fastreplay import _core

__all__ = ["FrameFields", "field_names"]


def field_names(value: str | Iterable[str] | None, what: str) -> tuple[str, ...]:
    """cpprb's ``next_of`` / ``stack_compress``: a str or a sequence of str."""
    if value is None:
        return ()
    names = (value,) if isinstance(value, str) else value
    if not isinstance(names, Iterable):
        raise TypeError(f"{what} must be a field name or a sequence of them, "
                        f"got {value!r}")
    names = tuple(names)
    for n in names:
        if not isinstance(n, str) or not n:
            raise TypeError(f"{what} must be a field name or a sequence of them, "
                            f"got {value!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"{what} names a field twice: {value!r}")
    return names


class FrameFields:
    """The fields of a ReplayBuffer stored as frame streams, and the column
    order of its items (a next-of column right after its source, so the
    stream sees obs_t before next_obs_t).  Fixed by the first insert."""

    def __init__(self, next_of: tuple[str, ...], stack: tuple[str, ...],
                 modes: Mapping[str, int], default_mode: int) -> None:
        self.next_of, self.stack = next_of, stack
        self._modes, self._default = dict(modes), default_mode
        self.columns: list[str] | None = None  # item column order
        self._specs: dict[str, tuple[Any, tuple[int, ...]]] = {}
        self._streams: list[_core.FrameStream | None] = []
        self._paths: list[str] = []
        self._col_modes: list[int] = []
        #: held around an insert: a stream sees one batch at a time, in order
        self.lock = threading.Lock()

    def check_names(self, names: Iterable[str]) -> None:
        have = set(names)
        for x in self.next_of:
            for need in (x, f"next_{x}"):
                if need not in have:
                    raise ValueError(f"next_of={x!r} needs fields {x!r} and "
                                     f"'next_{x}'; the transitions lack {need!r}")
        unknown = sorted(set(self._modes) - have)
        if unknown:
            raise ValueError(f"compression names fields {unknown} that the "
                             f"transitions lack (fields: {sorted(have)})")
        for x in self.stack:
            if x not in have:
                raise ValueError(f"stack_compress names {x!r}, which the "
                                 f"transitions lack (fields: {sorted(have)})")

    def _plan(self, values: dict[str, np.ndarray]) -> None:
        """Column order, streams and compression from the first batch."""
        nexts = {f"next_{x}": x for x in self.next_of}
        order: list[str] = []
        for name in sorted(values):
            if name in nexts and nexts[name] in values:
                continue  # placed after its source
            order.append(name)
            if name in self.next_of:
                order.append(f"next_{name}")
        streams: dict[str, _core.FrameStream] = {}
        for name in order:
            v = values[name]
            src = nexts.get(name) if name not in self.next_of else None
            mode = self._modes.get(name, self._modes.get(src or name, self._default))
            if src is not None and src in streams:
                self._streams.append(streams[src])  # next_x shares x's stream
            elif name in self.next_of or name in self.stack:
                stacked = name in self.stack
                if stacked and v.ndim < 2:
                    raise ValueError(f"stack_compress: field {name!r} has rows of "
                                     f"shape {v.shape[1:]}, without a last axis to "
                                     "stack frames on")
                streams[name] = _core.FrameStream(v[0], stacked, mode)
                self._streams.append(streams[name])
            else:
                self._streams.append(None)
            self._col_modes.append(mode)
        self._paths = [f"({k!r},)" for k in order]
        self._specs = {k: (values[k].dtype, values[k].shape[1:]) for k in order}
        self.columns = order

    def chunk_keys(self, n: int, transitions: Mapping[str, Any]) -> int:
        """Chunk keys one insert of n rows may take at most: a chunk per row
        and frame of each field."""
        total = 0
        for name, v in transitions.items():
            shape = np.shape(v)
            nxt = name.startswith("next_") and name[5:] in self.next_of
            src = name[5:] if nxt else name
            total += shape[-1] if src in self.stack and len(shape) > 1 else 1
        return n * max(total, 1)

    def insert(self, table: Any, store: Any, transitions: Mapping[str, Any],
               keys: np.ndarray, prios: np.ndarray, chunk_key: int,
               timeout: float | None) -> int:
        """Insert a batch (every field with a leading axis); the caller holds
        ``self.lock``."""
        values = {k: np.asarray(v) for k, v in transitions.items()}
        first = self.columns is None
        if first:
            self.check_names(values)
            self._plan(values)
        assert self.columns is not None
        if set(values) != set(self.columns):
            raise ValueError(f"fields {sorted(values)} differ from the buffer's "
                             f"{sorted(self.columns)}")
        for name in self.columns:
            got = (values[name].dtype, values[name].shape[1:])
            want = self._specs[name]
            if got != want:
                raise ValueError(
                    f"field {name!r}: rows of dtype {got[0]} and shape {got[1]} "
                    f"differ from the buffer's {want[0]} {want[1]}")
        try:
            return int(_core.insert_frame_rows(
                table, store, self._paths, [values[k] for k in self.columns],
                self._streams, keys, prios, chunk_key, timeout, self._col_modes))
        except BaseException:
            if first and len(keys) and table.size() == 0:
                self.columns, self._streams = None, []
                self._paths, self._col_modes, self._specs = [], [], {}
            raise
