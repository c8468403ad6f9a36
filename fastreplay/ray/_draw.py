"""One globally exact draw of a batch over the shards (the math is in
``_sampling``; this module asks the shards).

Three ways to get the masses the counts are drawn from:

- one round (the default for tables where extra samples cost nothing):
  every live shard is asked for a few more items than it is expected to
  give (``overfetch``); the counts are drawn from the masses its reply
  carries, and the extra items are dropped;
- cached (``max_mass_age_s > 0``): counts from masses at most that old;
- two rounds (``max_times_sampled`` or a samples-per-insert limiter, where
  an extra sample would count): the masses first, then exact counts.

In each, a shard is sampled with its own probabilities and the reported
probability is ``(m_s / sum(m)) * p_local`` for the masses the counts were
drawn with: exact for the draw made.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from fastreplay import _nest, errors
from fastreplay.ray import _sampling
from fastreplay.ray._shards import Shards

__all__ = ["Draw"]

#: Bytes of items one call of several batches (``draw_many``) asks the
#: shards for at most, fewer batches when they would not fit: 8 batches of
#: 256 Atari frames (uint8[84,84], ~14 MB) fit, of 1,024 frames 4 do.
MANY_BYTES = 32 << 20


class Draw:
    """The sampling state of one client: cached masses, the generator of
    shard counts, counters."""

    def __init__(self, shards: Shards, max_mass_age_s: float, seed: int | None) -> None:
        self._shards = shards
        self._max_age = float(max_mass_age_s)
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()  # the generator
        self._masses: dict[str, tuple[float, np.ndarray, np.ndarray]] = {}
        self._item_bytes: dict[str, float] = {}  # per table, from its last replies
        self.stats = {"samples": 0, "second_rounds": 0, "overfetched": 0}

    def _counts(self, batch: int, masses: np.ndarray) -> np.ndarray:
        with self._lock:
            return _sampling.draw_counts(self._rng, batch, masses)

    def _unavailable(self, missing: list[int]) -> errors.ShardUnavailableError:
        return errors.ShardUnavailableError(
            f"shards {sorted(missing)} are unavailable (require_all_shards=True)",
            shard=missing[0], restarts=self._shards.restarts(missing[0]))

    def one_shard(self, table: str, n: int, timeout: float | None, s: int
                  ) -> tuple[_sampling.ShardedSampleInfo, Any]:
        """``n`` items of shard ``s`` alone (its own probabilities)."""
        sh = self._shards
        sh.check(s)
        r = sh.fetch(s, table, n, timeout)
        if isinstance(r, BaseException):
            raise sh.lost(s) from None
        if r is None:
            raise errors.DeadlineExceededError(
                "Rate Limiter: Timeout exceeded before the right to sample was "
                f"acquired. (table '{table}', shard {s})")
        info, columns, structure = r
        one = np.zeros(len(sh))
        one[s] = 1.0
        size = int(info.table_size[0]) if len(info) else 0
        return (_sampling.merge_info([(s, info)], one, size, ()),
                _nest.columns_as(structure, columns))

    def _live(self, require_all: bool) -> list[int]:
        sh = self._shards
        live = sh.live()
        if require_all and len(live) < len(sh):
            sh.revive()
            live = sh.live()
            if len(live) < len(sh):
                raise self._unavailable(sorted(set(range(len(sh))) - set(live)))
        return live

    def _ask(self, table: str, want: np.ndarray, live: list[int], wait: float | None,
             sizes: np.ndarray) -> tuple[dict[int, Any], list[int]]:
        """``want[s]`` items of each live shard, asked of all before any
        reply is read: the replies, and the shards that did not answer
        (``sizes`` gets the table size each reply reports)."""
        sh = self._shards
        replies: dict[int, Any] = {}
        unavailable = sorted(sh.dead)
        begun = {s: sh.begin(s, table, int(want[s]), wait) for s in live if want[s] > 0}
        for s, b in begun.items():
            r = sh.fetched(s, b)
            if isinstance(r, BaseException):
                unavailable.append(s)
            elif r is not None:
                replies[s] = r
                sizes[s] = int(r[0].table_size[0]) if len(r[0]) else 0
        return replies, unavailable

    def _reply_masses(self, replies: dict[int, Any], exponent: float | None
                      ) -> np.ndarray:
        masses = np.zeros(len(self._shards))
        for s, r in replies.items():
            masses[s] = _sampling.mass_of(r[0], exponent)
        return masses

    def _overfetch(self, table: str, n: int, live: list[int]) -> np.ndarray:
        """What to ask each live shard for, ``n`` items in all, from the
        masses of the table's last draw (even shares before the first)."""
        cached = self._masses.get(table)
        prior = cached[1][live] if cached is not None else np.ones(len(live))
        if not prior.sum() > 0:
            prior = np.ones(len(live))
        want = np.zeros(len(self._shards), np.int64)
        want[live] = _sampling.overfetch(n, prior / prior.sum())
        return want

    def _sizes(self, table: str) -> np.ndarray:
        cached = self._masses.get(table)
        return cached[2].copy() if cached is not None else np.zeros(len(self._shards),
                                                                    np.int64)

    def draw(self, table: str, batch: int, meta: dict[str, Any], require_all: bool,
             timeout: float | None) -> tuple[_sampling.ShardedSampleInfo, Any] | None:
        """One attempt at a batch; None when no shard can sample now.  A
        shard that gives fewer items than drawn (its rate limiter, within
        ``timeout``) makes the batch shorter: items once sampled are never
        dropped, since their samples count on the shard."""
        live = self._live(require_all)
        cached = self._masses.get(table)
        use_cache = (self._max_age > 0 and cached is not None
                     and time.monotonic() - cached[0] <= self._max_age)
        masses = np.zeros(len(self._shards))
        sizes = self._sizes(table)
        if use_cache:
            assert cached is not None
            masses[live] = cached[1][live]
            want = self._counts(batch, masses)
        elif meta["overfetch"]:
            want = self._overfetch(table, batch, live)
        else:
            masses = self._state_masses(table, live, sizes)
            want = self._counts(batch, masses)
        # Over-fetching asks without waiting (a shard that cannot sample now
        # has no mass in this draw); exact counts wait as a sample would.
        wait = 0.0 if meta["overfetch"] and not use_cache else timeout
        replies, unavailable = self._ask(table, want, live, wait, sizes)
        if require_all and unavailable:
            raise self._unavailable(unavailable)
        counts = want
        if not use_cache:
            if meta["overfetch"]:
                masses = self._reply_masses(replies, meta["exponent"])
                counts = self._counts(batch, masses)
                self.stats["overfetched"] += int(
                    sum(len(r[0]) for r in replies.values()) - counts.sum())
            self._masses[table] = (time.monotonic(), masses.copy(), sizes.copy())
        if counts.sum() == 0:
            return None
        parts, leaves, structure = self._assemble(table, counts, replies)
        if not parts:
            return None
        info = _sampling.merge_info(parts, masses, int(sizes.sum()), unavailable)
        flat = [np.concatenate([lv[i] for lv in leaves]) for i in range(len(leaves[0]))]
        self.stats["samples"] += len(info)
        return info, _nest.columns_as(structure, flat)

    def draw_many(self, table: str, batch: int, k: int, meta: dict[str, Any],
                  require_all: bool) -> list[tuple[_sampling.ShardedSampleInfo, Any]]:
        """Up to ``k`` batches from one over-fetching request per shard
        (``dataset``): each batch's shard counts are drawn apart from the
        masses the replies carry, and batch *j* takes the next ``counts[j,
        s]`` of shard *s*'s i.i.d. items, so each batch is exactly what
        ``draw`` would give for those masses.  Only for tables where extra
        samples cost nothing (``meta["overfetch"]``, no mass cache): the
        items left over are dropped, as ``draw`` drops its over-fetched
        ones.  Empty when no shard can sample now; when a shard runs out
        (after one top-up), the first batch alone, short as ``draw`` makes
        it.  At most MANY_BYTES a request: one batch until a reply says how
        large the table's items are."""
        sh = self._shards
        live = self._live(require_all)
        sizes = self._sizes(table)
        item = self._item_bytes.get(table)
        k = 1 if item is None else max(1, min(k, int(MANY_BYTES // (batch * item + 1))))
        want = self._overfetch(table, k * batch, live)
        replies, unavailable = self._ask(table, want, live, 0.0, sizes)
        if require_all and unavailable:
            raise self._unavailable(unavailable)
        items = sum(len(r[0]) for r in replies.values())
        if items:
            nbytes = sum(np.asarray(c).nbytes for r in replies.values() for c in r[1])
            self._item_bytes[table] = nbytes / items
        masses = self._reply_masses(replies, meta["exponent"])
        self._masses[table] = (time.monotonic(), masses.copy(), sizes.copy())
        total = float(masses.sum())
        if not total > 0 or not replies:
            return []
        with self._lock:
            counts = self._rng.multinomial(batch, masses / total, size=k)
        counts = counts.astype(np.int64)
        shards = sorted(replies)
        got = np.array([len(replies[s][0]) for s in shards], np.int64)
        need = counts[:, shards].sum(axis=0)
        extra = {s: sh.fetch(s, table, int(n - g), 0)
                 for s, n, g in zip(shards, need, got, strict=True) if n > g}
        if extra:
            self.stats["second_rounds"] += 1
        parts: list[list[Any]] = []  # per shard: info fields and columns
        for s in shards:
            info, columns, _ = replies[s]
            fields = [info.key, info.probability, info.priority, info.times_sampled,
                      *columns]
            e = extra.get(s)
            if e is not None and not isinstance(e, BaseException) and len(e[0]):
                ei, ec, _ = e
                fields = [np.concatenate([a, b]) for a, b in zip(
                    fields, [ei.key, ei.probability, ei.priority, ei.times_sampled,
                             *ec], strict=True)]
            parts.append(fields)
        have = np.array([len(p[0]) for p in parts], np.int64)
        if not np.all(need <= have):
            # A shard ran out: the first batch alone, shortened as ``draw``
            # shortens it (keeping the batches that happen to fit would
            # favour counts that ask little of the short shard).
            counts = counts[:1].copy()
            counts[0, shards] = np.minimum(counts[0, shards], have)
        per = counts[:, shards]
        used = int(per.sum())
        self.stats["overfetched"] += int(have.sum()) - used
        self.stats["samples"] += used
        # One gather per field for all the batches: batch j is shard by
        # shard the next per[j, s] items of each reply.
        base = np.concatenate([[0], np.cumsum(have)[:-1]])
        starts = (base + np.cumsum(per, axis=0) - per).ravel()
        lengths = per.ravel()
        ends = np.cumsum(lengths)
        index = np.repeat(starts - ends + lengths, lengths) + np.arange(used)
        fields = [np.concatenate([p[i] for p in parts])[index]
                  for i in range(len(parts[0]))]
        share = np.repeat(masses[shards] / total, have)[index]
        shard_ids = np.repeat(np.asarray(shards, np.int32), have)[index]
        probability = np.asarray(fields[1], np.float64) * share
        times = np.asarray(fields[3], np.int64)
        size = np.full(used, int(sizes.sum()), np.int64)
        structure = replies[shards[-1]][2]
        out = []
        bounds = np.concatenate([[0], np.cumsum(per.sum(axis=1))])
        unavailable_t = tuple(sorted(unavailable))
        for j in range(len(per)):
            a, b = int(bounds[j]), int(bounds[j + 1])
            if a == b:
                continue
            info_j = _sampling.ShardedSampleInfo(
                fields[0][a:b], probability[a:b], size[a:b], fields[2][a:b],
                times[a:b], shard_ids[a:b], unavailable_t)
            out.append((info_j, _nest.columns_as(structure,
                                                 [c[a:b] for c in fields[4:]])))
        return out

    def _assemble(self, table: str, counts: np.ndarray, replies: dict[int, Any]
                  ) -> tuple[list[Any], list[list[np.ndarray]], Any]:
        """Each shard's first ``counts[s]`` items, topping up a shard that
        gave fewer (a second round, without waiting: what it cannot give
        now makes the batch shorter)."""
        sh = self._shards
        short = {s: int(counts[s]) - (len(replies[s][0]) if s in replies else 0)
                 for s in range(len(sh)) if counts[s] > 0}
        extra = {s: sh.fetch(s, table, k, 0) for s, k in short.items() if k > 0}
        if extra:
            self.stats["second_rounds"] += 1
        parts: list[Any] = []
        leaves: list[list[np.ndarray]] = []
        structure = None
        for s in range(len(sh)):
            if counts[s] == 0:
                continue
            if s in replies:
                info, columns, structure = replies[s]
                k = min(int(counts[s]), len(info))
                parts.append((s, _sampling.trim_info(info, k)))
                leaves.append([np.asarray(x)[:k] for x in columns])
            if s in extra:
                r = extra[s]
                if r is None or isinstance(r, BaseException) or not len(r[0]):
                    continue
                parts.append((s, r[0]))
                leaves.append([np.asarray(x) for x in r[1]])
                structure = r[2]
        return parts, leaves, structure

    def _state_masses(self, table: str, live: list[int], sizes: np.ndarray
                      ) -> np.ndarray:
        """Masses read from the shards' tables (a round trip before the
        draw, for tables where extra samples would count)."""
        import ray

        masses = np.zeros(len(self._shards))
        refs = {s: self._shards.actors[s].state.remote() for s in live}
        for s, ref in refs.items():
            try:
                mass, size, can = ray.get(ref, timeout=30)[table]
            except Exception:  # noqa: BLE001 - skipped, as in the sample round
                self._shards.dead.add(s)
                continue
            masses[s] = mass if can else 0.0
            sizes[s] = size
        return masses
