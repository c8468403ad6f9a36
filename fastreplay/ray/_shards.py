"""How a ``fastreplay.ray.Client`` reaches its shards.

Each shard is reached through a ``fastreplay.Client`` of its server: on the
caller's Ray node through the socket / shared-memory transport, elsewhere
through Ray actor calls (``_link``).  Calls run on the calling thread, which
has its own connection to each shard (as with ``fastreplay.Client``), so a
thread's priority updates and samples keep their order per shard and a
thread's batches asked for ahead are judged against its own updates only: a
``dataset`` worker's batches are not thrown away for the consumer's updates.
(Running every call of a shard on one thread of its own cost ~0.5 ms of CPU
a learner iteration in thread hand-offs and threw away half the batches
asked for ahead, session 16.)

Thread safety: every method may be called from any thread; the lock guards
the lazily made connections.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from fastreplay import errors
from fastreplay.client import Client as ShardClient

__all__ = ["FAILURES", "TRANSPORTS", "Shards"]

TRANSPORTS = ("auto", "shm", "ray")
#: What a call to a shard that died (or restarted) raises.
FAILURES = (errors.UnavailableError, OSError, ConnectionError)


def _ray() -> Any:
    import ray

    return ray


class Shards:
    """The shard actors, their ``hello`` records, one ``fastreplay.Client``
    per shard, and which shards do not answer."""

    def __init__(self, actors: Sequence[Any], transport: str) -> None:
        if transport not in TRANSPORTS:
            raise ValueError(f"transport ({transport!r}) must be one of {TRANSPORTS}")
        self.actors = list(actors)
        self.transport = transport
        n = len(self.actors)
        self.dead: set[int] = set()
        self._lock = threading.Lock()
        self._hellos: list[dict[str, Any] | None] = [None] * n
        self._conns: list[ShardClient | None] = [None] * n
        self.kinds: list[str] = [""] * n

    def __len__(self) -> int:
        return len(self.actors)

    def check(self, s: int) -> int:
        if type(s) is not int or not 0 <= s < len(self.actors):
            raise ValueError(f"shard ({s!r}) must be in [0, {len(self.actors)})")
        return s

    def live(self) -> list[int]:
        return [s for s in range(len(self.actors)) if s not in self.dead]

    def hello(self, s: int, timeout: float | None = 30.0, fresh: bool = False
              ) -> dict[str, Any]:
        """Shard ``s``'s ``hello`` record (asked again when ``fresh``);
        ``ShardUnavailableError`` when it does not answer."""
        h = self._hellos[s]
        if h is None or fresh:
            try:
                h = _ray().get(self.actors[s].hello.remote(), timeout=timeout)
            except Exception as exc:  # noqa: BLE001 - dead, restarting or slow
                raise errors.ShardUnavailableError(
                    f"shard {s} does not answer ({type(exc).__name__})", shard=s,
                    restarts=self.restarts(s)) from None
            self._hellos[s] = h
        assert h is not None
        return h

    def known(self, s: int) -> dict[str, Any]:
        """The last ``hello`` of shard ``s`` (empty when never asked)."""
        return self._hellos[s] or {}

    def set_hellos(self, hellos: Sequence[dict[str, Any]]) -> None:
        self._hellos = list(hellos)
        self.dead.clear()

    def restarts(self, s: int) -> int:
        h = self._hellos[s]
        return int(h["restarts"]) if h is not None else 0

    def conn(self, s: int) -> ShardClient:
        """The ``fastreplay.Client`` of shard ``s`` (made on first use)."""
        conn = self._conns[s]
        if conn is not None:
            return conn
        with self._lock:
            if self._conns[s] is None:
                self._conns[s], self.kinds[s] = self._open(s)
            conn = self._conns[s]
        assert conn is not None
        return conn

    def _open(self, s: int) -> tuple[ShardClient, str]:
        h = self.hello(s)
        mode = self.transport
        if mode == "auto":
            same = h["node_id"] == _ray().get_runtime_context().get_node_id()
            mode = "shm" if same else "ray"
        address = f"{h['host']}:{h['port']}"
        if mode == "ray":
            return ShardClient(address, reconnect_window=0.0,
                               connector=_Pinned(self.actors[s], s, h)), "ray"
        return ShardClient(address, reconnect_window=1.0), "shm"

    def lost(self, s: int) -> errors.ShardUnavailableError:
        """Shard ``s`` failed a call: forget its connection and see whether
        it answers again (a restarted shard has a new address)."""
        with self._lock:
            # Dropped, not closed: writers of the shard still hold it and
            # must see the failure themselves (closing would ship nothing
            # and hide it); it closes when the last of them lets it go.
            self._conns[s] = None
        try:
            self.hello(s, timeout=2.0, fresh=True)
            self.dead.discard(s)
        except errors.ShardUnavailableError:
            self.dead.add(s)
        return errors.ShardUnavailableError(
            f"shard {s} is unavailable (restarts: {self.restarts(s)})", shard=s,
            restarts=self.restarts(s))

    def revive(self) -> None:
        """Ask the shards marked dead whether they answer again."""
        for s in list(self.dead):
            try:
                self.hello(s, timeout=1.0, fresh=True)
                self.dead.discard(s)
            except errors.ShardUnavailableError:
                pass

    def opened(self) -> list[int]:
        """The shards with a connection."""
        return [s for s, c in enumerate(self._conns) if c is not None]

    def fetch(self, s: int, table: str, n: int, timeout: float | None) -> Any:
        """``(info, columns, structure)`` of ``n`` items of shard ``s`` (the
        flat columns and their items' nest); None when it cannot sample now;
        the exception when it is gone."""
        return self.fetched(s, self.begin(s, table, n, timeout))

    def begin(self, s: int, table: str, n: int, timeout: float | None) -> Any:
        """``fetch`` in two halves (``Client.sample_batch_begin``): the
        request to shard ``s`` goes out now; ``fetched(s, begun)`` waits for
        it.  Begun on every shard first, a draw waits for the slowest shard
        instead of for each in turn."""
        try:
            return self.conn(s).sample_batch_begin(table, n, timeout=timeout,
                                                   flat=True)
        except errors.DeadlineExceededError:
            return None
        except FAILURES as exc:
            self.lost(s)
            return exc

    def fetched(self, s: int, begun: Any) -> Any:
        """What ``fetch`` gives, from what ``begin`` gave."""
        if begun is None or isinstance(begun, BaseException):
            return begun
        try:
            return begun()
        except errors.DeadlineExceededError:
            return None
        except FAILURES as exc:
            self.lost(s)
            return exc

    def close(self) -> None:
        for s, conn in enumerate(self._conns):
            if conn is not None:
                conn.close()
                self._conns[s] = None


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
            try:
                h = _ray().get(self._actor.hello.remote(), timeout=max(timeout, 0.1))
            except Exception as exc:  # noqa: BLE001 - dead or restarting
                raise OSError(f"shard {self._shard}: {type(exc).__name__}") from None
            if (h["pid"], h["restarts"]) != (self._pid, self._restarts):
                raise errors.ShardUnavailableError(
                    f"shard {self._shard} restarted (restarts: {h['restarts']})",
                    shard=self._shard, restarts=int(h["restarts"]))
        self._first = False
        return self._inner(timeout)
