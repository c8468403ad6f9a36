"""``EnvRings``: one ring of ``max_length`` steps per environment, kept in a
``SlotStore``, the storage under ALF's uniform and cycle_one_time replayers.

Layout, chosen for ``replay(S, L)``, which reads S windows of L
consecutive steps of one env:

* a step is one *record*: every column's row packed into one byte row
  (columns ordered by item size, so each starts aligned, and the record
  padded to the largest item size);
* an env's ring is cut into blocks of ``block`` consecutive positions; slot
  ``env * blocks + b`` of the store holds block ``b`` of that env, one row of
  ``[block, record]`` bytes.  A window is then one or two slots instead of L
  (a read costs per slot: the store looks each up and gathers it in C);
* the block an env is writing is staged in numpy until it is complete, then
  written to its slot once.  Until then its new rows are read from the
  stage; the rows it has not overwritten yet still come from the slot.

Not thread-safe (the replayers are not).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fastreplay.integrations._slots import SlotStore

__all__ = ["EnvRings"]


class EnvRings:
    """``num_envs`` rings of ``max_length`` records.

    Parameters
    ----------
    dtypes, shapes : sequences
        The numpy dtype and row shape of each column.
    num_envs, max_length : int
        Rings and records per ring.
    block : int
        Positions per stored slot (at most ``max_length``).
    """

    def __init__(self, dtypes: Sequence[np.dtype], shapes: Sequence[tuple[int, ...]],
                 num_envs: int, max_length: int, block: int = 16) -> None:
        self.num_envs, self.max_length = num_envs, max_length
        self.block = min(block, max_length)
        self.blocks = -(-max_length // self.block)
        self.dtypes = [np.dtype(d) for d in dtypes]
        self.shapes = [tuple(s) for s in shapes]
        self.nbytes = [d.itemsize * math.prod(s)
                       for d, s in zip(self.dtypes, self.shapes, strict=True)]
        self.offsets = [0] * len(self.dtypes)
        at = 0
        by_size = sorted(range(len(self.dtypes)),
                         key=lambda i: -self.dtypes[i].itemsize)
        for i in by_size:
            self.offsets[i] = at
            at += self.nbytes[i]
        align = max((d.itemsize for d in self.dtypes), default=1)
        self.record = max(-(-at // align) * align, 1)
        self.store = SlotStore(num_envs * self.blocks, "alf", compression=None)
        self.stage = np.zeros((num_envs, self.block, self.record), np.uint8)
        self.pos = np.zeros(num_envs, np.int64)  # where each env writes next
        self.size = np.zeros(num_envs, np.int64)

    def pack(self, rows: Sequence[np.ndarray]) -> np.ndarray:
        """Records ``[n, record]`` of the columns' rows ``[n, *shape]``."""
        n = len(rows[0])
        out = np.zeros((n, self.record), np.uint8)
        for r, off, nb in zip(rows, self.offsets, self.nbytes, strict=True):
            if nb:
                raw = np.ascontiguousarray(r).view(np.uint8)
                out[:, off:off + nb] = raw.reshape(n, nb)
        return out

    def unpack(self, records: np.ndarray, lead: tuple[int, ...]) -> list[np.ndarray]:
        """Each column of ``records`` ``[n, record]`` as ``[*lead, *shape]``
        (views into ``records``)."""
        out = []
        for d, s, off, nb in zip(self.dtypes, self.shapes, self.offsets, self.nbytes,
                                 strict=True):
            if nb == 0:
                out.append(np.zeros((*lead, *s), d))
            else:
                out.append(records[:, off:off + nb].view(d).reshape(*lead, *s))
        return out

    def append(self, env: np.ndarray, records: np.ndarray) -> None:
        """Record ``j`` is the next step of env ``env.flat[j]``; ``env`` is
        ``[steps, n]`` with distinct ids in range in each step."""
        steps, n = env.shape
        k = self.block
        for s in range(steps):
            e = env[s]
            p = self.pos[e]
            self.stage[e, p % k] = records[s * n:(s + 1) * n]
            nxt = (p + 1) % self.max_length
            self.pos[e] = nxt
            self.size[e] = np.minimum(self.size[e] + 1, self.max_length)
            full = nxt % k == 0  # the block is complete (the last one may be short)
            if full.any():
                done = e[full]
                self.store.write(done * self.blocks + p[full] // k,
                                 {"records": self.stage[done]})

    def read(self, env: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """The records of env ``env[i]`` at consecutive ring positions
        ``pos[i, :]`` (valid ones), ``[len(env) * pos.shape[1], record]``."""
        k = self.block
        cur = self.pos[env]
        b, r = np.divmod(pos, k)
        # The staged rows are an env's newest; a window holds some iff its
        # newest step is among them.
        age = (cur - 1 - pos[:, -1]) % self.max_length
        staged_windows = age < cur % k
        staged = None
        if staged_windows.any():
            staged = ((b == (cur // k)[:, None]) & (r < (cur % k)[:, None])).reshape(-1)
        key = (env * self.blocks)[:, None] + b
        flat_key, flat_r = key.reshape(-1), r.reshape(-1)
        if staged is not None:
            flat_key = np.where(staged, -1, flat_key)
        first = np.empty(len(flat_key), bool)  # runs of one slot: read it once
        first[0] = True
        np.not_equal(flat_key[1:], flat_key[:-1], out=first[1:])
        if staged is not None:
            first &= ~staged
        src = (np.cumsum(first) - 1) * k + flat_r
        out = np.empty((len(flat_key), self.record), np.uint8)
        if staged is None:
            data = self.store.read(flat_key[first])["records"].reshape(-1, self.record)
            return np.take(data, src, axis=0, out=out)
        stored = ~staged
        if stored.any():
            data = self.store.read(flat_key[first])["records"].reshape(-1, self.record)
            out[stored] = data[src[stored]]
        e = np.repeat(env, pos.shape[1])
        out[staged] = self.stage.reshape(-1, self.record)[(e * k + flat_r)[staged]]
        return out

    def clear(self) -> None:
        self.pos[:] = 0
        self.size[:] = 0
        self.store.clear()
