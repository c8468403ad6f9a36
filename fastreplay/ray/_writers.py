"""Writers bound to one shard: Reverb's writer API, and a shard that stops
answering turns into ``ShardUnavailableError`` (then the writer is closed)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from fastreplay import errors

if TYPE_CHECKING:
    from fastreplay.ray._client import Client

__all__ = ["ShardWriter", "raise_unavailable"]

_FAILURES = (errors.UnavailableError, OSError, ConnectionError)
# DeadlineExceededError is a TimeoutError, so an OSError: a writer's own
# timeout (flush or end_episode waiting for a rate limiter) is re-raised
# before the clauses below take an OSError for a lost shard.
_TIMEOUT = errors.DeadlineExceededError


def raise_unavailable(
    exc: errors.ShardUnavailableError, unacknowledged: int
) -> NoReturn:
    raise errors.ShardUnavailableError(
        f"{exc}; {unacknowledged} item(s) were not acknowledged: open a new writer "
        "(it routes to a live shard) and start a new episode",
        shard=exc.shard,
        restarts=exc.restarts,
        unacknowledged_items=unacknowledged,
    ) from None


def _closed(*args: Any, **kwargs: Any) -> NoReturn:
    raise RuntimeError("the writer is closed")


def _structured(*args: Any) -> NoReturn:
    raise AttributeError("a StructuredWriter makes its items from its configs")


class ShardWriter:
    """A ``TrajectoryWriter`` (or ``StructuredWriter``) of one shard
    (``shard``); every other attribute is the wrapped writer's."""

    def __init__(self, writer: Any, shard: int, client: Client) -> None:
        self._writer = writer
        # The hot path (append, create_item: once a step) calls these bound
        # methods; a closed writer's raise instead (no flag to test).
        self._append: Any = writer.append
        self._create_item: Any = getattr(writer, "create_item", None) or _structured
        self._client = client
        self._unacked = 0  # items created since the last acknowledged flush
        self._closed = False
        self.shard = shard

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)

    @property
    def history(self) -> Any:
        # Read every step (Acme's adders, the bench's loop): an attribute
        # found on the class skips __getattr__'s failed lookup first, which
        # cost ~1 us a step (session 18).
        return self._writer.history

    def _fail(self) -> NoReturn:
        err = self._client.writer_failed(self.shard)
        n = self._unacked + int(getattr(self._writer, "num_pending_items", 0) or 0)
        self._close(ship=False)
        raise_unavailable(err, n)

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self._closed:
            raise RuntimeError("the writer is closed")
        try:
            return getattr(self._writer, name)(*args, **kwargs)
        except _TIMEOUT:
            raise  # the writer's own timeout, not a lost shard: it stays open
        except _FAILURES:
            self._fail()

    def append(self, data: Any, partial_step: bool = False) -> Any:
        try:  # the hot path: one bound call, no keywords, no lookups
            if partial_step:
                return self._append(data, partial_step=True)
            return self._append(data)
        except _TIMEOUT:
            raise
        except _FAILURES:
            self._fail()

    def create_item(self, table: str, priority: float, trajectory: Any) -> None:
        try:
            self._create_item(table, priority, trajectory)
        except _TIMEOUT:
            raise
        except _FAILURES:
            self._fail()
        self._unacked += 1

    def flush(
        self, block_until_num_items: int = 0, timeout_ms: int | None = None
    ) -> None:
        self._call("flush", block_until_num_items, timeout_ms)
        if block_until_num_items == 0:
            self._unacked = 0

    def end_episode(
        self, clear_buffers: bool = True, timeout_ms: int | None = None
    ) -> None:
        self._call("end_episode", clear_buffers, timeout_ms)
        self._unacked = 0

    def _close(self, ship: bool) -> None:
        if self._closed:
            return
        self._closed = True
        self._append = self._create_item = _closed
        self._client.writer_closed(self.shard)
        try:
            self._writer.close()
        except Exception:  # noqa: BLE001 - closing a writer of a dead shard
            if ship:
                raise

    def close(self) -> None:
        """Flush what was created (so a dead shard is reported) and close."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._close(ship=True)

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None:
            self.close()
        else:
            self._close(ship=False)

    def __repr__(self) -> str:
        return f"ShardWriter(shard={self.shard}, writer={self._writer!r})"
