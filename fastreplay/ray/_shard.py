"""One shard of a ``ShardedServer``: the body of a Ray actor hosting an
in-process ``fastreplay.Server``.

The shard builds its tables from the templates' configurations (``max_size``
and the rate limiter's ``min_size_to_sample`` already split by
``split_tables``), generates item keys with its index in their top 8 bits
(``Server(key_prefix=)``), restores the newest valid checkpoint under
``<checkpoint_dir>/shard-<i>/`` when Ray (re)starts it, and checkpoints
every ``checkpoint_every_s`` seconds.  Clients on its node reach the server
through the socket / shared-memory transport (``hello`` gives the address);
others through Ray calls (``link_*``).

Thread safety: Ray runs the methods of this actor on several threads
(``max_concurrency``), so a blocking sample never holds up writers; every
method only calls thread-safe ``Server`` and ``Table`` methods.
"""

from __future__ import annotations

import copy
import math
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from fastreplay import errors, rate_limiters
from fastreplay.checkpointers import DefaultCheckpointer, load
from fastreplay.server import Server
from fastreplay.table import Table

__all__ = ["Shard", "split_tables", "table_meta"]

#: Ray-internal key-value namespace where shards count their starts.
_KV_NAMESPACE = "fastreplay"


def split_tables(tables: Sequence[Table], num_shards: int) -> list[dict[str, Any]]:
    """The per-shard configurations of ``tables``: ``max_size`` and the rate
    limiter's ``min_size_to_sample`` divided evenly (rounded up) over the
    shards; the rest (samples per insert, error buffer) acts per shard."""
    out = []
    for t in tables:
        cfg = t.config()
        cfg["max_size"] = max(1, math.ceil(cfg["max_size"] / num_shards))
        limiter = cfg["rate_limiter"]
        if type(limiter) in (rate_limiters.MinSize, rate_limiters.SampleToInsertRatio,
                             rate_limiters.RateLimiter):
            split = copy.copy(limiter)
            split.min_size_to_sample = max(
                1, math.ceil(limiter.min_size_to_sample / num_shards))
            # The samples-insert window stays centred on samples_per_insert
            # * min_size_to_sample, as SampleToInsertRatio builds it; its
            # width (the error buffer) acts per shard.
            shift = limiter.samples_per_insert * (
                limiter.min_size_to_sample - split.min_size_to_sample)
            if abs(limiter.min_diff) < 1e300:
                split.min_diff = limiter.min_diff - shift
            if abs(limiter.max_diff) < 1e300:
                split.max_diff = limiter.max_diff - shift
            cfg["rate_limiter"] = split
        out.append(cfg)
    return out


def table_meta(t: Table) -> dict[str, Any]:
    """What a client needs to know of a table to sample it across shards:
    its sampler's kind, the priority exponent, and whether asking a shard
    for a few items more than kept is harmless (no ``max_times_sampled``
    and a rate limiter that does not count samples against inserts)."""
    info = t.info
    kind = info.sampler_options.WhichOneof("distribution")
    exponent = (
        float(info.sampler_options.prioritized.priority_exponent)
        if kind == "prioritized"
        else None
    )
    limiter = info.rate_limiter_info
    spare = (
        info.max_times_sampled <= 0
        and limiter.min_diff <= -1e300
        and limiter.max_diff >= 1e300
    )
    return {"kind": kind, "exponent": exponent, "overfetch": spare}


class _Restore(DefaultCheckpointer):
    """Restores the newest checkpoint that loads, skipping damaged ones."""

    restored_from: str | None = None
    skipped: list[str]

    def restore(self, tables: Any, store: Any) -> bool:
        self.skipped = []
        for path in self.checkpoints():
            try:
                load(path, tables, store)
            except errors.DataLossError as exc:
                self.skipped.append(f"{path}: {exc}")
                for t in tables.values():
                    t.reset()
                continue
            self.restored_from = path
            return True
        return False


class Shard:
    """The actor body (wrapped by ``ray.remote`` in ``_server``)."""

    def __init__(
        self,
        index: int,
        num_shards: int,
        configs: list[dict[str, Any]],
        checkpoint_dir: str | None,
        checkpoint_every_s: float | None,
    ) -> None:
        import ray

        from fastreplay.ray._link import LinkHost

        self._index = index
        ctx = ray.get_runtime_context()
        self._node_id = ctx.get_node_id()
        self._restarts = _count_start(str(ctx.get_actor_id()))
        tables = [Table(**copy.deepcopy(cfg)) for cfg in configs]
        self._checkpointer: _Restore | None = None
        if checkpoint_dir is not None:
            self._checkpointer = _Restore(
                os.path.join(checkpoint_dir, f"shard-{index}")
            )
        # Clients on this node connect through loopback (Unix socket and
        # shared memory); clients elsewhere through Ray calls (link_*).
        self._server = Server(
            tables,
            port=0,
            host="127.0.0.1",
            key_prefix=index,
            checkpointer=self._checkpointer,
        )
        self._link = LinkHost(self._server)
        self._stop = threading.Event()
        self._bound = 0  # writers bound to this shard (every client's)
        self._bound_lock = threading.Lock()
        if checkpoint_dir is not None and checkpoint_every_s:
            threading.Thread(
                target=self._every,
                args=(float(checkpoint_every_s),),
                name=f"fastreplay-shard{index}-checkpoints",
                daemon=True,
            ).start()

    def _every(self, period: float) -> None:
        while not self._stop.wait(period):
            try:
                self._server.checkpoint()
            except Exception:  # noqa: BLE001 - the next period tries again
                pass

    # ----- state -----

    def hello(self) -> dict[str, Any]:
        """Where this shard is and what it restored (``shard_info``)."""
        cp = self._checkpointer
        return {
            "shard": self._index,
            "node_id": self._node_id,
            "host": self._server.host,
            "port": self._server.port,
            "pid": os.getpid(),
            "restarts": self._restarts,
            "restored_from": cp.restored_from if cp is not None else None,
            "skipped_checkpoints": list(cp.skipped) if cp is not None else [],
        }

    def state(self) -> dict[str, tuple[float, int, bool]]:
        """``{table: (priority mass, size, can sample one)}``."""
        return {
            n: (*t.mass_and_size(), t.can_sample(1))
            for n, t in self._server.tables.items()
        }

    def tables_meta(self) -> dict[str, dict[str, Any]]:
        return {n: table_meta(t) for n, t in self._server.tables.items()}

    def info(self) -> dict[str, Any]:
        return {n: t.info for n, t in self._server.tables.items()}

    def checkpoint(self) -> str:
        return self._server.checkpoint()

    def metrics(self) -> dict[str, float]:
        return self._server.metrics()

    def ping(self) -> float:
        return time.time()

    def bind(self, delta: int) -> int:
        """Count a writer bound to this shard (+1) or gone (-1); the count."""
        with self._bound_lock:
            self._bound = max(0, self._bound + int(delta))
            return self._bound

    # ----- the Ray transport (fastreplay.ray._link) -----

    def link_open(self) -> int:
        return int(self._link.link_open())

    def link_exchange(self, session: int, seq: int, *data: bytes, parts: int = 1
                      ) -> Any:
        return self._link.link_exchange(session, seq, *data, parts=parts)

    def link_close(self, session: int, seq: int | None = None) -> None:
        self._link.link_close(session, seq)

    def close(self) -> None:
        self._stop.set()
        self._link.close()
        self._server.stop()


def _count_start(actor_id: str) -> int:
    """How many times Ray restarted this actor (its starts, counted in
    Ray's cluster-wide key-value store, minus one; 0 without the store)."""
    try:
        from ray.experimental import internal_kv

        key = f"shard-starts/{actor_id}".encode()
        raw = internal_kv._internal_kv_get(key, namespace=_KV_NAMESPACE)
        starts = int(raw) + 1 if raw else 1
        internal_kv._internal_kv_put(
            key, str(starts).encode(), overwrite=True, namespace=_KV_NAMESPACE
        )
        return starts - 1
    except Exception:  # noqa: BLE001 - no store: counted as a first start
        return 0
