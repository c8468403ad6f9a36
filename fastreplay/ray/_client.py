"""``fastreplay.ray.Client``: Reverb's client API across the shards of a
``ShardedServer``.

Each shard is reached through a ``fastreplay.Client`` of its server: on the
caller's Ray node through the socket / shared-memory transport, elsewhere
through Ray actor calls (``_link``).  Sampling, priority updates and
``sync`` for shard *s* run on one thread per shard, so they keep their order
per shard and the shards work in parallel.  Writers are bound to one shard
for their life (items must live where their chunks live).
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from fastreplay import _nest, errors
from fastreplay.client import Client as ShardClient
from fastreplay.dataset import SampleDataset
from fastreplay.ray import _sampling
from fastreplay.ray._info import ShardInfo, merge_table_info
from fastreplay.ray._writers import ShardWriter, raise_unavailable
from fastreplay.table import key_array

__all__ = ["Client", "shard_of"]

_TRANSPORTS = ("auto", "shm", "ray")
_FAILURES = (errors.UnavailableError, OSError, ConnectionError)


def shard_of(key: int | npt.ArrayLike) -> Any:
    """The shard index of an item key (its top 8 bits); an array for an
    array of keys."""
    if isinstance(key, (int, np.integer)):
        return int(key) >> 56
    return (key_array("", key) >> np.uint64(56)).astype(np.int64)


def _ray() -> Any:
    import ray

    return ray


class Client:
    """Reverb's client API over every shard (see ``fastreplay.ray``).

    Picklable and cheap: a copy in a task or actor connects lazily.
    ``transport`` is ``"auto"`` (shared memory on the caller's node, Ray
    calls elsewhere), or forces ``"shm"`` (only for shards on this node) or
    ``"ray"``.  ``max_mass_age_s > 0`` draws shard counts from
    masses up to that old (one round trip, no over-fetch)."""

    def __init__(
        self,
        actors: Sequence[Any],
        tables: Mapping[str, dict[str, Any]],
        *,
        transport: str = "auto",
        max_mass_age_s: float = 0.0,
        seed: int | None = None,
    ) -> None:
        if transport not in _TRANSPORTS:
            raise ValueError(f"transport ({transport!r}) must be one of {_TRANSPORTS}")
        self._actors = list(actors)
        self._tables = dict(tables)
        self._transport = transport
        self._max_age = float(max_mass_age_s)
        self._seed = seed
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()  # connections, threads and the generator
        n = len(self._actors)
        self._hellos: list[dict[str, Any] | None] = [None] * n
        self._conns: list[ShardClient | None] = [None] * n
        self._kinds: list[str] = [""] * n
        self._dead: set[int] = set()
        self._bound = [0] * n  # writers bound per shard (this client's)
        self._masses: dict[str, tuple[float, np.ndarray, np.ndarray]] = {}
        self._threads: list[cf.ThreadPoolExecutor | None] = [None] * n
        self._pending: list[cf.Future[Any]] = []
        self._stats = {
            "updates_dropped_unavailable": 0,
            "samples": 0,
            "second_rounds": 0,
            "overfetched": 0,
        }

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self._actors, self._tables, self._transport, self._max_age))

    def __repr__(self) -> str:
        return (
            f"fastreplay.ray.Client(shards={len(self._actors)}, "
            f"tables={sorted(self._tables)})"
        )

    @property
    def num_shards(self) -> int:
        return len(self._actors)

    # ----- shards -----

    def _hello(
        self, s: int, timeout: float | None = 30.0, fresh: bool = False
    ) -> dict[str, Any]:
        h = self._hellos[s]
        if h is None or fresh:
            ray = _ray()
            try:
                h = ray.get(self._actors[s].hello.remote(), timeout=timeout)
            except Exception as exc:  # noqa: BLE001 - dead, restarting or slow
                raise errors.ShardUnavailableError(
                    f"shard {s} does not answer ({type(exc).__name__})",
                    shard=s,
                    restarts=self._restarts(s),
                ) from None
            self._hellos[s] = h
        assert h is not None
        return h

    def _restarts(self, s: int) -> int:
        h = self._hellos[s]
        return int(h["restarts"]) if h is not None else 0

    def _conn(self, s: int) -> ShardClient:
        conn = self._conns[s]
        if conn is not None:
            return conn
        with self._lock:
            if self._conns[s] is None:
                self._conns[s], self._kinds[s] = self._open(s)
            conn = self._conns[s]
        assert conn is not None
        return conn

    def _open(self, s: int) -> tuple[ShardClient, str]:
        h = self._hello(s)
        mode = self._transport
        if mode == "auto":
            same = h["node_id"] == _ray().get_runtime_context().get_node_id()
            mode = "shm" if same else "ray"
        if mode == "ray":
            return (
                ShardClient(
                    f"{h['host']}:{h['port']}",
                    reconnect_window=0.0,
                    connector=_Pinned(self._actors[s], s, h),
                ),
                "ray",
            )
        return ShardClient(f"{h['host']}:{h['port']}", reconnect_window=1.0), "shm"

    def _lost(self, s: int) -> errors.ShardUnavailableError:
        """Shard ``s`` failed a call: drop its connection, see whether it
        answers again (restarted: a new address next time)."""
        with self._lock:
            # Dropped, not closed: writers of the shard still hold it and
            # must see the failure themselves (closing would ship nothing
            # and hide it); it closes when the last of them lets it go.
            self._conns[s] = None
        try:
            self._hello(s, timeout=2.0, fresh=True)
            self._dead.discard(s)
        except errors.ShardUnavailableError:
            self._dead.add(s)
        return errors.ShardUnavailableError(
            f"shard {s} is unavailable (restarts: {self._restarts(s)})",
            shard=s,
            restarts=self._restarts(s),
        )

    def _on(self, s: int) -> cf.ThreadPoolExecutor:
        """The thread that talks to shard ``s`` for this client."""
        ex = self._threads[s]
        if ex is None:
            with self._lock:
                if self._threads[s] is None:
                    self._threads[s] = cf.ThreadPoolExecutor(
                        1, thread_name_prefix=f"fastreplay-ray-shard{s}"
                    )
                ex = self._threads[s]
        assert ex is not None
        return ex

    def transport(self, shard: int) -> str:
        """``"shm"`` or ``"ray"``: how this client reaches ``shard``."""
        self._conn(shard)
        return self._kinds[shard]

    def wait_for_shards(self, timeout: float | None = 60.0) -> None:
        """Return when every shard answers (``DeadlineExceededError`` after
        ``timeout``)."""
        ray = _ray()
        try:
            hellos = ray.get([a.hello.remote() for a in self._actors], timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise errors.DeadlineExceededError(
                f"the shards did not all answer within {timeout} s"
            ) from None
        self._hellos = list(hellos)
        self._dead.clear()

    def shard_info(self, timeout: float | None = 30.0) -> list[ShardInfo]:
        ray = _ray()
        out = []
        refs = [
            (a.hello.remote(), a.info.remote(), a.state.remote()) for a in self._actors
        ]
        for s, (h_ref, i_ref, st_ref) in enumerate(refs):
            try:
                h, tables, state = ray.get([h_ref, i_ref, st_ref], timeout=timeout)
            except Exception:  # noqa: BLE001 - a dead shard is reported, not raised
                old = self._hellos[s] or {}
                out.append(
                    ShardInfo(
                        s,
                        old.get("node_id", ""),
                        False,
                        self._restarts(s),
                        old.get("restored_from"),
                        self._kinds[s] or "",
                        {},
                        {},
                        old.get("host", ""),
                        old.get("port", 0),
                    )
                )
                continue
            self._hellos[s] = h
            out.append(
                ShardInfo(
                    s,
                    h["node_id"],
                    True,
                    int(h["restarts"]),
                    h["restored_from"],
                    self._kinds[s] or "",
                    tables,
                    {n: v[0] for n, v in state.items()},
                    h["host"],
                    h["port"],
                )
            )
        return out

    # ----- writing -----

    def _route(self, shard: int | None) -> int:
        if shard is not None:
            if not 0 <= shard < len(self._actors):
                raise ValueError(f"shard ({shard}) must be in [0, {len(self._actors)})")
            return shard
        live = [s for s in range(len(self._actors)) if s not in self._dead]
        if not live:
            raise errors.ShardUnavailableError("no shard is available")
        here = _ray().get_runtime_context().get_node_id()
        local = [
            s for s in live if (self._hellos[s] or self._hello(s))["node_id"] == here
        ]
        pool = local or live
        return min(pool, key=lambda s: (self._bound[s], s))

    def trajectory_writer(
        self,
        num_keep_alive_refs: int,
        *,
        shard: int | None = None,
        validate_items: bool = True,
    ) -> ShardWriter:
        """Reverb's ``TrajectoryWriter``, bound to one shard (``writer.shard``):
        a shard on the caller's node if there is one, else the one with the
        fewest writers of this client."""
        s = self._route(shard)
        try:
            w = self._conn(s).trajectory_writer(
                num_keep_alive_refs, validate_items=validate_items
            )
        except _FAILURES:
            raise self._lost(s) from None
        self._bound[s] += 1
        return ShardWriter(w, s, self)

    def structured_writer(
        self, configs: Sequence[Any], *, shard: int | None = None
    ) -> ShardWriter:
        s = self._route(shard)
        try:
            w = self._conn(s).structured_writer(configs)
        except _FAILURES:
            raise self._lost(s) from None
        self._bound[s] += 1
        return ShardWriter(w, s, self)

    def insert(
        self, data: Any, priorities: Mapping[str, float], *, shard: int | None = None
    ) -> None:
        s = self._route(shard)
        try:
            self._conn(s).insert(data, priorities)
        except _FAILURES:
            raise_unavailable(self._lost(s), 1)

    def writer_closed(self, s: int) -> None:
        self._bound[s] = max(0, self._bound[s] - 1)

    def writer_failed(self, s: int) -> errors.ShardUnavailableError:
        return self._lost(s)

    # ----- sampling -----

    def _meta(self, table: str) -> dict[str, Any]:
        meta = self._tables.get(table)
        if meta is None:
            raise ValueError(
                f'Could not find table "{table}". The following tables '
                f"exists: {', '.join(sorted(self._tables))}"
            )
        return meta

    def _fetch(self, s: int, table: str, n: int, timeout: float | None) -> Any:
        """``(info, data)`` of ``n`` items of shard ``s``; None when it
        cannot sample now; the exception when it is unavailable."""
        try:
            return self._conn(s).sample_batch(table, n, timeout=timeout)
        except errors.DeadlineExceededError:
            return None
        except _FAILURES as exc:
            self._lost(s)
            return exc

    def sample_batch(
        self,
        table: str,
        batch_size: int,
        *,
        timeout: float | None = None,
        shard: int | None = None,
        require_all_shards: bool = False,
    ) -> tuple[_sampling.ShardedSampleInfo, Any]:
        """``batch_size`` items drawn exactly from the global distribution
        (``p_i**alpha / sum_all p**alpha``; by size for uniform tables).
        ``info`` reports global probabilities and table size, the shard of
        each item and the shards skipped (``unavailable_shards``)."""
        meta = self._meta(table)
        if type(batch_size) is not int or batch_size < 1:
            raise ValueError(f"batch_size ({batch_size!r}) must be a positive integer")
        self.sync_wait()
        if shard is not None:
            return self._sample_one(table, batch_size, timeout, shard)
        if meta["kind"] not in ("prioritized", "uniform"):
            raise ValueError(
                f"table '{table}' samples in {meta['kind']} order, which has no global "
                "order across shards: pass shard= to sample one shard"
            )
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.002
        while True:
            got = self._draw(table, batch_size, meta, require_all_shards)
            if got is not None:
                return got
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                if len(self._dead) == len(self._actors):
                    raise errors.ShardUnavailableError(
                        f"every shard of table '{table}' is unavailable"
                    )
                raise errors.DeadlineExceededError(
                    "Rate Limiter: Timeout exceeded before the right to sample was "
                    f"acquired. (table '{table}', every shard)"
                )
            time.sleep(delay if left is None else min(delay, left))
            delay = min(delay * 2, 0.05)

    def _sample_one(
        self, table: str, n: int, timeout: float | None, s: int
    ) -> tuple[_sampling.ShardedSampleInfo, Any]:
        if not 0 <= s < len(self._actors):
            raise ValueError(f"shard ({s}) must be in [0, {len(self._actors)})")
        try:
            info, data = (
                self._on(s)
                .submit(self._conn(s).sample_batch, table, n, timeout=timeout)
                .result()
            )
        except _FAILURES:
            raise self._lost(s) from None
        size = int(info.table_size[0]) if len(info) else 0
        return _sampling.merge_info(
            [(s, info)], _one_hot(len(self._actors), s), size, ()
        ), data

    def _draw(
        self, table: str, batch: int, meta: dict[str, Any], require_all: bool
    ) -> tuple[_sampling.ShardedSampleInfo, Any] | None:
        """One attempt; None when no shard can sample now."""
        n_sh = len(self._actors)
        live = [s for s in range(n_sh) if s not in self._dead]
        if require_all and len(live) < n_sh:
            self._revive()
            live = [s for s in range(n_sh) if s not in self._dead]
            if len(live) < n_sh:
                missing = sorted(set(range(n_sh)) - set(live))
                raise errors.ShardUnavailableError(
                    f"shards {missing} are unavailable (require_all_shards=True)",
                    shard=missing[0],
                    restarts=self._restarts(missing[0]),
                )
        cached = self._masses.get(table)
        fresh = cached is not None and time.monotonic() - cached[0] <= self._max_age
        masses = np.zeros(n_sh)
        sizes = cached[2].copy() if cached is not None else np.zeros(n_sh, np.int64)
        if self._max_age > 0 and fresh:
            assert cached is not None
            masses[live] = cached[1][live]
            want = self._counts(batch, masses)
        elif meta["overfetch"]:
            prior = cached[1][live] if cached is not None else np.ones(len(live))
            if not prior.sum() > 0:
                prior = np.ones(len(live))
            want = np.zeros(n_sh, np.int64)
            want[live] = _sampling.overfetch(batch, prior / prior.sum())
        else:
            masses = self._state_masses(table, live, sizes)
            want = self._counts(batch, masses)
        futures = {
            s: self._on(s).submit(self._fetch, s, table, int(want[s]), 0)
            for s in live
            if want[s] > 0
        }
        replies: dict[int, Any] = {}
        unavailable = [s for s in range(n_sh) if s in self._dead]
        for s, f in futures.items():
            r = f.result()
            if isinstance(r, BaseException):
                unavailable.append(s)
            elif r is not None:
                replies[s] = r
                sizes[s] = int(r[0].table_size[0]) if len(r[0]) else 0
        if require_all and unavailable:
            raise errors.ShardUnavailableError(
                f"shards {sorted(unavailable)} are unavailable "
                "(require_all_shards=True)",
                shard=unavailable[0],
                restarts=self._restarts(unavailable[0]),
            )
        if not (self._max_age > 0 and fresh):
            if meta["overfetch"]:
                masses = np.zeros(n_sh)
                for s, (info, _) in replies.items():
                    masses[s] = _sampling.mass_of(info, meta["exponent"])
                counts = self._counts(batch, masses)
                self._stats["overfetched"] += int(
                    sum(len(r[0]) for r in replies.values()) - counts.sum()
                )
            else:
                counts = want
            self._masses[table] = (time.monotonic(), masses.copy(), sizes.copy())
        else:
            counts = want
        if counts.sum() == 0:
            return None
        parts, leaves, structure = [], [], None
        short = {
            s: int(counts[s]) - (len(replies[s][0]) if s in replies else 0)
            for s in range(n_sh)
            if counts[s] > 0
        }
        extra = {
            s: self._on(s).submit(self._fetch, s, table, k, 0)
            for s, k in short.items()
            if k > 0
        }
        if extra:
            self._stats["second_rounds"] += 1
        for s in range(n_sh):
            if counts[s] == 0:
                continue
            info, data = replies[s] if s in replies else (None, None)
            chunks = []
            if info is not None:
                k = min(int(counts[s]), len(info))
                chunks.append(
                    (
                        _sampling.trim_info(info, k),
                        [np.asarray(x)[:k] for x in _nest.flatten(data)],
                    )
                )
                structure = data
            if s in extra:
                r = extra[s].result()
                if r is None or isinstance(r, BaseException) or len(r[0]) < short[s]:
                    return None  # the shard changed under us: draw again
                chunks.append((r[0], [np.asarray(x) for x in _nest.flatten(r[1])]))
                structure = r[1]
            for ci, cl in chunks:
                parts.append((s, ci))
                leaves.append(cl)
        info_all = _sampling.merge_info(parts, masses, int(sizes.sum()), unavailable)
        flat = [np.concatenate([lv[i] for lv in leaves]) for i in range(len(leaves[0]))]
        self._stats["samples"] += batch
        return info_all, _nest.unflatten_as(structure, flat)

    def _counts(self, batch: int, masses: np.ndarray) -> np.ndarray:
        with self._lock:
            return _sampling.draw_counts(self._rng, batch, masses)

    def _state_masses(
        self, table: str, live: list[int], sizes: np.ndarray
    ) -> np.ndarray:
        """Masses read from the shards' tables (a round trip before the draw,
        for tables where extra samples would count)."""
        ray = _ray()
        masses = np.zeros(len(self._actors))
        refs = {s: self._actors[s].state.remote() for s in live}
        for s, ref in refs.items():
            try:
                mass, size, can = ray.get(ref, timeout=30)[table]
            except Exception:  # noqa: BLE001 - skipped, as in the sample round
                self._dead.add(s)
                continue
            masses[s] = mass if can else 0.0
            sizes[s] = size
        return masses

    def _revive(self) -> None:
        for s in list(self._dead):
            try:
                self._hello(s, timeout=1.0, fresh=True)
                self._dead.discard(s)
            except errors.ShardUnavailableError:
                pass

    def dataset(
        self,
        table: str,
        batch_size: int,
        *,
        prefetch: int = 2,
        num_workers: int = 1,
        timeout: float | None = None,
    ) -> SampleDataset:
        """Batches of ``sample_batch`` made ahead by background threads."""
        self._meta(table)
        return SampleDataset(self, table, batch_size, prefetch, num_workers, timeout)

    # ----- priorities -----

    def update_priorities(
        self, table: str, keys: npt.ArrayLike, priorities: npt.ArrayLike
    ) -> None:
        """Grouped by ``shard_of(key)``: one asynchronous message per shard, in
        order per shard (``sync()`` or the next ``sample_batch`` waits)."""
        self._meta(table)
        k = key_array(table, keys)
        p = np.asarray(priorities, dtype=np.float64).reshape(-1)
        if len(k) != len(p):
            raise ValueError(
                f"keys and priorities differ in length ({len(k)} != {len(p)})"
            )
        if not np.all(p >= 0):
            raise errors.InvalidPriorityError(
                f"priorities must be >= 0 and not NaN (table '{table}')"
            )
        for s, idx in _groups(k):
            self._submit(s, "update_priorities", table, k[idx].copy(), p[idx].copy())

    def mutate_priorities(
        self,
        table: str,
        updates: Mapping[int, float] | None = None,
        deletes: Iterable[int] | None = None,
    ) -> None:
        self._meta(table)
        by: dict[int, tuple[dict[int, float], list[int]]] = {}
        for key, value in (updates or {}).items():
            by.setdefault(shard_of(key), ({}, []))[0][int(key)] = float(value)
        for key in deletes or ():
            by.setdefault(shard_of(key), ({}, []))[1].append(int(key))
        for s, (u, d) in by.items():
            self._submit(s, "mutate_priorities", table, u, d)

    def _submit(self, s: int, op: str, *args: Any) -> None:
        if not 0 <= s < len(self._actors) or s in self._dead:
            self._stats["updates_dropped_unavailable"] += len(args[1])
            return
        self._pending.append(self._on(s).submit(self._apply, s, op, args))

    def _apply(self, s: int, op: str, args: tuple[Any, ...]) -> None:
        """On shard ``s``'s thread: queue the update on its connection (sent
        with that thread's next call, or by the connection's flusher)."""
        try:
            getattr(self._conn(s), op)(*args)
        except _FAILURES:
            self._stats["updates_dropped_unavailable"] += len(args[1])
            self._lost(s)

    def _settle(self, s: int) -> None:
        conn = self._conns[s]
        if conn is None:
            return
        try:
            conn.sync()
        except _FAILURES:
            self._lost(s)

    def sync_wait(self) -> None:
        """Wait until the updates are queued on the shards' threads (each
        shard's next sample ships them first)."""
        pending, self._pending = self._pending, []
        for f in pending:
            f.result()

    def sync(self) -> None:
        """Wait until the shards applied every priority update sent so far."""
        self.sync_wait()
        for f in [
            self._on(s).submit(self._settle, s)
            for s in range(len(self._actors))
            if self._threads[s] is not None
        ]:
            f.result()

    def stats(self) -> dict[str, int]:
        return dict(self._stats)

    # ----- tables -----

    def server_info(self, timeout: float | None = None) -> dict[str, Any]:
        """One ``TableInfo`` per table, summed over the live shards."""
        ray = _ray()
        per = []
        refs = [a.info.remote() for a in self._actors]
        for ref in refs:
            try:
                per.append(ray.get(ref, timeout=30 if timeout is None else timeout))
            except Exception:  # noqa: BLE001 - a dead shard counts nothing
                continue
        if not per:
            raise errors.ShardUnavailableError("no shard answers server_info")
        return {
            name: merge_table_info([p[name] for p in per if name in p])
            for name in self._tables
        }

    def metrics(self) -> dict[str, float]:
        """The shards' ``Server.metrics()`` summed (ratios recomputed)."""
        ray = _ray()
        per = ray.get([a.metrics.remote() for a in self._actors], timeout=60)
        out: dict[str, float] = {}
        for m in per:
            for k, v in m.items():
                out[k] = out.get(k, 0.0) + float(v)
        stored = out.get("chunk_store/stored_bytes", 0.0)
        if "chunk_store/compression_ratio" in out:
            out["chunk_store/compression_ratio"] = (
                out.get("chunk_store/raw_bytes", 0.0) / stored if stored else 0.0
            )
        for name in self._tables:
            size, cap = out.get(f"table/{name}/size"), out.get(f"table/{name}/max_size")
            if size is not None and cap:
                out[f"table/{name}/fill"] = size / cap
        return out

    def checkpoint(self) -> list[str]:
        """Every shard checkpoints (in parallel); one path per shard."""
        ray = _ray()
        return list(ray.get([a.checkpoint.remote() for a in self._actors]))

    def close(self) -> None:
        for ex in self._threads:
            if ex is not None:
                ex.shutdown(wait=True)
        self._threads = [None] * len(self._actors)
        for s, conn in enumerate(self._conns):
            if conn is not None:
                conn.close()
                self._conns[s] = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Pinned:
    """A Ray-call connector to one incarnation of a shard: after Ray
    restarts the shard, connecting again raises ``ShardUnavailableError``
    (the writer's chunks and unacknowledged items died with it), the way a
    restarted shard's new port refuses a socket client."""

    def __init__(self, actor: Any, shard: int, hello: dict[str, Any]) -> None:
        from fastreplay.ray._link import RayConnector

        self._inner = RayConnector(actor)
        self._actor = actor
        self._shard = shard
        self._pid, self._restarts = hello["pid"], hello["restarts"]
        self._first = True

    def __call__(self, timeout: float) -> Any:
        if not self._first:
            ray = _ray()
            try:
                h = ray.get(self._actor.hello.remote(), timeout=max(timeout, 0.1))
            except Exception as exc:  # noqa: BLE001 - dead or restarting
                raise OSError(f"shard {self._shard}: {type(exc).__name__}") from None
            if (h["pid"], h["restarts"]) != (self._pid, self._restarts):
                raise errors.ShardUnavailableError(
                    f"shard {self._shard} restarted (restarts: {h['restarts']})",
                    shard=self._shard,
                    restarts=int(h["restarts"]),
                )
        self._first = False
        return self._inner(timeout)


def _groups(keys: np.ndarray) -> list[tuple[int, np.ndarray]]:
    shards = (keys >> np.uint64(56)).astype(np.int64)
    return [(int(s), np.flatnonzero(shards == s)) for s in np.unique(shards)]


def _one_hot(n: int, s: int) -> np.ndarray:
    m = np.zeros(n)
    m[s] = 1.0
    return m


def _rebuild(actors: Any, tables: Any, transport: str, max_age: float) -> Client:
    return Client(actors, tables, transport=transport, max_mass_age_s=max_age)
