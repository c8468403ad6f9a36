"""``fastreplay.ray.Client``: Reverb's client API across the shards of a
``ShardedServer``.

Writers are bound to one shard for their life (items must live where their
chunks live); ``sample_batch`` draws globally exactly (``_draw``); priority
updates go to the shard in each key's top 8 bits, asynchronously and in
order per shard (queued on the calling thread's connection to the shard,
ahead of that thread's next sample there).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from fastreplay import errors
from fastreplay.dataset import SampleDataset
from fastreplay.ray._draw import Draw
from fastreplay.ray._info import ShardInfo, merge_table_info
from fastreplay.ray._sampling import ShardedSampleInfo
from fastreplay.ray._shards import FAILURES, Shards
from fastreplay.ray._writers import ShardWriter, raise_unavailable
from fastreplay.table import key_array

__all__ = ["Client", "shard_of"]

_T = TypeVar("_T")

#: Seconds a call that gathers every shard's answer waits by default.
GATHER_TIMEOUT = 60.0

#: Batches a dataset worker draws per request to each shard
#: (``sample_batches``): the worker's Python per request (framing, Ray's
#: call, parsing a reply) was most of a batch's.  The ray bench's
#: dataset(prefetch=2) in the driver, 2 shards of 500k items, 4 interleaved
#: rounds, with as many items asked ahead as before (``AHEAD_ITEMS``):
#: 1 -> 327k, 4 -> 588k, 8 -> 699k, 16 -> 885k rows/s (16 keeps twice the
#: items in flight, so a learner's priority updates show later); Atari
#: frames, 4 shards of 5k, 4 pairs: 1 -> 72k, 8 -> 92k, the first batch
#: in 57-140 ms against 99-114 (session 21).
DATASET_BATCHES_PER_CALL = 8


def shard_of(key: int | npt.ArrayLike) -> Any:
    """The shard index of an item key (its top 8 bits); an array for an
    array of keys."""
    if isinstance(key, (int, np.integer)):
        return int(key) >> 56
    return (key_array("", key) >> np.uint64(56)).astype(np.int64)


def _global_order(table: str, meta: dict[str, Any]) -> None:
    if meta["kind"] not in ("prioritized", "uniform"):
        raise ValueError(
            f"table '{table}' samples in {meta['kind']} order, which has no "
            "global order across shards: pass shard= to sample one shard")


def _ray() -> Any:
    import ray

    return ray


class Client:
    """Reverb's client API over every shard (see ``fastreplay.ray``).

    Picklable and cheap: a copy in a task or actor connects lazily.
    ``transport`` is ``"auto"`` (shared memory to shards on the caller's
    node, Ray calls to the others), ``"shm"`` (only for shards on this node)
    or ``"ray"``.  ``max_mass_age_s > 0`` draws shard counts from masses up
    to that old instead of reading them in the same round."""

    def __init__(self, actors: Sequence[Any], tables: Mapping[str, dict[str, Any]], *,
                 transport: str = "auto", max_mass_age_s: float = 0.0,
                 seed: int | None = None) -> None:
        self._shards = Shards(actors, transport)
        self._tables = dict(tables)
        self._max_age = float(max_mass_age_s)
        self._draw = Draw(self._shards, self._max_age, seed)
        self._bound = [0] * len(self._shards)  # writers bound per shard (this client's)
        self._rng = np.random.default_rng()  # ties between shards to write to
        self._dropped = 0  # priority updates for keys of unavailable shards

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self._shards.actors, self._tables, self._shards.transport,
                           self._max_age))

    def __repr__(self) -> str:
        return (f"fastreplay.ray.Client(shards={len(self._shards)}, "
                f"tables={sorted(self._tables)})")

    @property
    def num_shards(self) -> int:
        return len(self._shards)

    # ----- shards -----

    def transport(self, shard: int) -> str:
        """``"shm"`` or ``"ray"``: how this client reaches ``shard``."""
        self._shards.conn(self._shards.check(shard))
        return self._shards.kinds[shard]

    def wait_for_shards(self, timeout: float | None = GATHER_TIMEOUT) -> None:
        """Return when every shard answers (``DeadlineExceededError`` after
        ``timeout``)."""
        ray = _ray()
        try:
            hellos = ray.get([a.hello.remote() for a in self._shards.actors],
                             timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise errors.DeadlineExceededError(
                f"the shards did not all answer within {timeout} s") from None
        self._shards.set_hellos(hellos)

    def shard_info(self, timeout: float | None = GATHER_TIMEOUT) -> list[ShardInfo]:
        """One ``ShardInfo`` per shard (``alive=False`` for one that does not
        answer within ``timeout``)."""
        ray = _ray()
        refs = [(a.hello.remote(), a.info.remote(), a.state.remote())
                for a in self._shards.actors]
        out = []
        for s, three in enumerate(refs):
            kind = self._shards.kinds[s]
            try:
                h, tables, state = ray.get(list(three), timeout=timeout)
            except Exception:  # noqa: BLE001 - a dead shard is reported, not raised
                old = self._shards.known(s)
                out.append(ShardInfo(s, old.get("node_id", ""), False,
                                     self._shards.restarts(s), old.get("restored_from"),
                                     kind, {}, {}, old.get("host", ""),
                                     old.get("port", 0)))
                continue
            out.append(ShardInfo(s, h["node_id"], True, int(h["restarts"]),
                                 h["restored_from"], kind, tables,
                                 {n: v[0] for n, v in state.items()},
                                 h["host"], h["port"]))
        return out

    # ----- writing -----

    def _route(self, shard: int | None) -> int:
        sh = self._shards
        if shard is not None:
            return sh.check(shard)
        live = sh.live()
        if not live:
            raise errors.ShardUnavailableError("no shard is available")
        ray = _ray()
        here = ray.get_runtime_context().get_node_id()
        pool = [s for s in live if sh.hello(s)["node_id"] == here] or live
        if len(pool) == 1:
            return pool[0]
        try:  # every client's writers, as the shards count them
            counts = ray.get([sh.actors[s].bind.remote(0) for s in pool],
                             timeout=GATHER_TIMEOUT)
        except Exception:  # noqa: BLE001 - then this client's own count
            counts = [self._bound[s] for s in pool]
        least = min(counts)
        return int(self._rng.choice([s for s, c in zip(pool, counts, strict=True)
                                     if c == least]))

    def _bind(self, shard: int | None, make: Any) -> ShardWriter:
        s = self._route(shard)
        try:
            w = make(self._shards.conn(s))
        except errors.DeadlineExceededError:
            raise
        except FAILURES:
            raise self._shards.lost(s) from None
        self._bound[s] += 1
        self._shards.actors[s].bind.remote(1)
        return ShardWriter(w, s, self)

    def trajectory_writer(self, num_keep_alive_refs: int, *, shard: int | None = None,
                          validate_items: bool = True) -> ShardWriter:
        """Reverb's ``TrajectoryWriter``, bound to one shard (``writer.shard``):
        ``shard``, else the shard with the fewest bound writers among those
        on the caller's node, else among all (ties broken at random)."""
        return self._bind(shard, lambda c: c.trajectory_writer(
            num_keep_alive_refs, validate_items=validate_items))

    def structured_writer(self, configs: Sequence[Any], *, shard: int | None = None
                          ) -> ShardWriter:
        """Reverb's ``StructuredWriter``, bound to one shard."""
        return self._bind(shard, lambda c: c.structured_writer(configs))

    def insert(self, data: Any, priorities: Mapping[str, float], *,
               shard: int | None = None) -> None:
        """Reverb's ``insert`` into one shard (routed as writers are)."""
        s = self._route(shard)
        try:
            self._shards.conn(s).insert(data, priorities)
        except errors.DeadlineExceededError:
            raise
        except FAILURES:
            raise_unavailable(self._shards.lost(s), 1)

    def writer_closed(self, s: int) -> None:
        self._bound[s] = max(0, self._bound[s] - 1)
        try:
            self._shards.actors[s].bind.remote(-1)
        except Exception:  # noqa: BLE001 - a dead shard counts nothing
            pass

    def writer_failed(self, s: int) -> errors.ShardUnavailableError:
        return self._shards.lost(s)

    # ----- sampling -----

    def _meta(self, table: str) -> dict[str, Any]:
        meta = self._tables.get(table)
        if meta is None:
            raise ValueError(f'Could not find table "{table}". The following tables '
                             f"exists: {', '.join(sorted(self._tables))}")
        return meta

    def sample_batch(self, table: str, batch_size: int, *, timeout: float | None = None,
                     shard: int | None = None, require_all_shards: bool = False
                     ) -> tuple[ShardedSampleInfo, Any]:
        """``batch_size`` items drawn exactly from the global distribution
        (``p_i**alpha / sum over all shards``; by size for uniform tables).
        ``info`` reports global probabilities and table size, each item's
        shard, and the shards skipped (``unavailable_shards``).  ``shard=``
        samples one shard alone (needed for Fifo, Lifo and heap tables).  As
        with ``fastreplay.Client``, a timeout after at least one sample
        returns a shorter batch."""
        meta = self._meta(table)
        if type(batch_size) is not int or batch_size < 1:
            raise ValueError(f"batch_size ({batch_size!r}) must be a positive integer")
        if shard is not None:
            return self._draw.one_shard(table, batch_size, timeout, shard)
        _global_order(table, meta)
        return self._retry(table, timeout, lambda left: self._draw.draw(
            table, batch_size, meta, require_all_shards, left))

    def sample_batches(self, table: str, batch_size: int, num_batches: int, *,
                       timeout: float | None = None,
                       require_all_shards: bool = False
                       ) -> list[tuple[ShardedSampleInfo, Any]]:
        """Up to ``num_batches`` batches of ``sample_batch(table, batch_size)``
        drawn from one request per shard (a fastreplay addition; ``dataset``
        uses it, as Reverb's dataset keeps many samples in flight per
        worker).  Each batch is globally exact for the masses the shards
        sampled with; the batches share those masses, so a priority updated
        after the call shows only in the next call.  One batch, short as
        ``sample_batch`` makes it, when a shard cannot give its part now;
        fewer batches when ``num_batches`` of them would pass 32 MiB (one
        until the table's item size is known).  Tables where an extra
        sample counts (``max_times_sampled``, a samples-per-insert limiter)
        and clients with ``max_mass_age_s`` get one batch."""
        meta = self._meta(table)
        if type(batch_size) is not int or batch_size < 1:
            raise ValueError(f"batch_size ({batch_size!r}) must be a positive integer")
        if type(num_batches) is not int or num_batches < 1:
            raise ValueError(
                f"num_batches ({num_batches!r}) must be a positive integer")
        _global_order(table, meta)
        if not meta["overfetch"] or self._max_age > 0 or num_batches == 1:
            return [self.sample_batch(table, batch_size, timeout=timeout,
                                      require_all_shards=require_all_shards)]
        return self._retry(table, timeout, lambda left: self._draw.draw_many(
            table, batch_size, num_batches, meta, require_all_shards) or None)

    def _retry(self, table: str, timeout: float | None,
               attempt: Callable[[float | None], _T | None]) -> _T:
        """``attempt(time left)`` until it gives something, backing off while
        no shard can sample; DeadlineExceededError (ShardUnavailableError
        when no shard is live) after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.002
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            got = attempt(left)
            if got is not None:
                return got
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                if not self._shards.live():
                    raise errors.ShardUnavailableError(
                        f"every shard of table '{table}' is unavailable")
                raise errors.DeadlineExceededError(
                    "Rate Limiter: Timeout exceeded before the right to sample was "
                    f"acquired. (table '{table}', every shard)")
            time.sleep(delay if left is None else min(delay, left))
            delay = min(delay * 2, 0.05)
            self._shards.revive()

    def dataset(self, table: str, batch_size: int, *, prefetch: int = 2,
                num_workers: int = 1, timeout: float | None = None) -> SampleDataset:
        """Batches of ``sample_batch`` made ahead by background threads."""
        self._meta(table)
        return SampleDataset(self, table, batch_size, prefetch, num_workers, timeout,
                             DATASET_BATCHES_PER_CALL)

    # ----- priorities -----

    def update_priorities(self, table: str, keys: npt.ArrayLike,
                          priorities: npt.ArrayLike) -> None:
        """Grouped by ``shard_of(key)``: one asynchronous message per shard, in
        order per shard (``sync()`` waits until they are applied).  Keys of
        unavailable shards are dropped and counted (``stats()``)."""
        self._meta(table)
        k = key_array(table, keys)
        p = np.asarray(priorities, dtype=np.float64).reshape(-1)
        if len(k) != len(p):
            raise ValueError(f"keys and priorities differ in length ({len(k)} != "
                             f"{len(p)})")
        if not np.all(p >= 0):
            raise errors.InvalidPriorityError(
                f"priorities must be >= 0 and not NaN (table '{table}')")
        if not len(k):
            return
        shards = k >> np.uint64(56)
        lo, hi = int(shards.min()), int(shards.max())
        if lo == hi:
            self._submit(lo, "update_priorities", table, k, p)
            return
        for s in range(lo, min(hi, len(self._shards) - 1) + 1):
            mask = shards == s
            if mask.any():
                self._submit(s, "update_priorities", table, k[mask], p[mask])
        if hi >= len(self._shards):  # keys of no shard: dropped and counted
            self._dropped += int((shards >= len(self._shards)).sum())

    def mutate_priorities(self, table: str, updates: Mapping[int, float] | None = None,
                          deletes: Iterable[int] | None = None) -> None:
        """Reverb's ``mutate_priorities``, routed by key like updates."""
        self._meta(table)
        by: dict[int, tuple[dict[int, float], list[int]]] = {}
        for key, value in (updates or {}).items():
            by.setdefault(shard_of(key), ({}, []))[0][int(key)] = float(value)
        for key in deletes or ():
            by.setdefault(shard_of(key), ({}, []))[1].append(int(key))
        for s, (u, d) in by.items():
            self._submit(s, "mutate_priorities", table, u, d)

    def _submit(self, s: int, op: str, table: str, a: Any, b: Any) -> None:
        if not 0 <= s < len(self._shards) or s in self._shards.dead:
            self._dropped += len(a)
            return
        # Queued on this thread's connection to the shard: sent with the
        # thread's next call there, or by the connection's flusher.
        try:
            getattr(self._shards.conn(s), op)(table, a, b)
        except FAILURES:
            self._dropped += len(a)
            self._shards.lost(s)

    def sync(self) -> None:
        """Wait until the shards applied every priority update this thread
        sent so far (as ``fastreplay.Client.sync``)."""
        for s in self._shards.opened():
            try:
                self._shards.conn(s).sync()
            except FAILURES:
                self._shards.lost(s)

    def stats(self) -> dict[str, int]:
        """Counters: samples, over-fetched items, second rounds, and
        ``updates_dropped_unavailable``."""
        return {**self._draw.stats, "updates_dropped_unavailable": self._dropped}

    # ----- tables -----

    def _gather(self, method: str, timeout: float | None) -> list[Any]:
        """Each live shard's answer to ``method`` (None for one that fails)."""
        ray = _ray()
        refs = [getattr(a, method).remote() for a in self._shards.actors]
        wait = GATHER_TIMEOUT if timeout is None else timeout
        out: list[Any] = []
        for ref in refs:
            try:
                out.append(ray.get(ref, timeout=wait))
            except Exception:  # noqa: BLE001 - a dead shard counts nothing
                out.append(None)
        return out

    def server_info(self, timeout: float | None = None) -> dict[str, Any]:
        """One ``TableInfo`` per table, summed over the shards that answer."""
        per = [p for p in self._gather("info", timeout) if p is not None]
        if not per:
            raise errors.ShardUnavailableError("no shard answers server_info")
        return {name: merge_table_info([p[name] for p in per if name in p])
                for name in self._tables}

    def metrics(self) -> dict[str, float]:
        """The shards' ``Server.metrics()`` summed (ratios recomputed)."""
        out: dict[str, float] = {}
        for m in self._gather("metrics", None):
            for k, v in (m or {}).items():
                out[k] = out.get(k, 0.0) + float(v)
        stored = out.get("chunk_store/stored_bytes", 0.0)
        if "chunk_store/compression_ratio" in out:
            out["chunk_store/compression_ratio"] = (
                out.get("chunk_store/raw_bytes", 0.0) / stored if stored else 0.0)
        for name in self._tables:
            size, cap = out.get(f"table/{name}/size"), out.get(f"table/{name}/max_size")
            if size is not None and cap:
                out[f"table/{name}/fill"] = size / cap
        return out

    def checkpoint(self) -> list[str]:
        """Every shard checkpoints (in parallel); one path per shard."""
        paths = self._gather("checkpoint", None)
        missing = [s for s, p in enumerate(paths) if p is None]
        if missing:
            raise errors.ShardUnavailableError(
                f"shards {missing} did not checkpoint", shard=missing[0],
                restarts=self._shards.restarts(missing[0]))
        return [str(p) for p in paths]

    def close(self) -> None:
        """Close this client's connections."""
        self._shards.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _rebuild(actors: Any, tables: Any, transport: str, max_age: float) -> Client:
    return Client(actors, tables, transport=transport, max_mass_age_s=max_age)
