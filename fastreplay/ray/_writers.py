"""Writers bound to one shard: Reverb's writer API, and a shard that stops
answering turns into ``ShardUnavailableError`` (then the writer is closed)."""

from __future__ import annotations

import operator
import weakref
from typing import TYPE_CHECKING, Any, NoReturn

from fastreplay import _core, errors

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


class _Hook:
    """A TrajectoryWriter's failure hook (``_WriterBase._failure_hook``):
    what append or create_item raised for a lost shard becomes
    ShardUnavailableError.  Holds its ShardWriter weakly (no cycle)."""

    __slots__ = ("_ref",)

    def __init__(self, owner: ShardWriter) -> None:
        self._ref = weakref.ref(owner)

    def __call__(self, exc: BaseException) -> None:
        owner = self._ref()
        if owner is not None and isinstance(exc, _FAILURES) and not isinstance(
                exc, _TIMEOUT):
            owner._fail()


def _forward(name: str) -> Any:
    """The wrapped writer's attribute ``name`` (a method comes back bound
    to it), read without a Python frame."""
    return property(operator.attrgetter(f"_writer.{name}"),
                    doc=f"The wrapped writer's ``{name}``.")


class ShardWriter:
    """A ``TrajectoryWriter`` (or ``StructuredWriter``) of one shard
    (``shard``); every other attribute is the wrapped writer's.

    A TrajectoryWriter's ``append`` and ``create_item`` are its own bound
    methods (no Python frame a step: the wrappers cost ~0.4 us of ~2.2 a
    step of the ray bench's loop, session 18); its failure hook turns a lost
    shard into ShardUnavailableError.  The class has no ``__getattr__`` (a
    StructuredWriter's gets one, ``_Forwarding``): with one, CPython looks
    every attribute up through a slower hook, and ``history`` is a C
    attrgetter, not a Python frame (the bench's step loop, interleaved in one
    process: 1.84 -> 1.77 us against the bare writer's 1.65, session 20)."""

    def __new__(cls, writer: Any, shard: int, client: Client) -> ShardWriter:
        if cls is ShardWriter and not isinstance(writer, _core._WriterBase):
            cls = _Forwarding
        return object.__new__(cls)

    def __init__(self, writer: Any, shard: int, client: Client) -> None:
        self._writer = writer
        # Another writer's (a StructuredWriter's) methods, wrapped below.
        self._append: Any = writer.append
        self._create_item: Any = getattr(writer, "create_item", None)
        self._client = client
        self._traj = isinstance(writer, _core._WriterBase)
        self._created = 0  # by the wrapped create_item (not a TrajectoryWriter's)
        self._acked = 0  # items created by the last acknowledged flush
        self._closed = False
        self.shard = shard
        if self._traj:
            writer._failure_hook = _Hook(self)
            self.__dict__["append"] = writer.append
            self.__dict__["create_item"] = writer.create_item
            self.__dict__["extend"] = writer.extend

    # history is read every step (Acme's adders, the bench's loop); the rest
    # of a TrajectoryWriter's public API is the wrapped writer's too.
    history = _forward("history")
    configure = _forward("configure")
    configure_chunker = _forward("configure_chunker")
    episode_steps = _forward("episode_steps")
    max_num_keep_alive_refs = _forward("max_num_keep_alive_refs")
    num_pending_items = _forward("num_pending_items")

    def _created_items(self) -> int:
        return int(self._writer._items_created) if self._traj else self._created

    def _unacknowledged(self) -> int:
        """Items created that the shard has not confirmed: since the last
        flush that waited for all (a StructuredWriter: its pending ones)."""
        n = self._created_items() - self._acked
        if self._create_item is None:  # its items come from its configs
            n += int(getattr(self._writer, "num_pending_items", 0) or 0)
        return n

    def _fail(self) -> NoReturn:
        err = self._client.writer_failed(self.shard)
        n = self._unacknowledged()
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
        """A StructuredWriter's append (a TrajectoryWriter's is its own)."""
        try:
            if partial_step:
                return self._append(data, partial_step=True)
            return self._append(data)
        except _TIMEOUT:
            raise
        except _FAILURES:
            self._fail()

    def extend(self, data: Any) -> Any:
        """A StructuredWriter's ``extend`` (several whole steps at once;
        returns the items created; a TrajectoryWriter's is its own)."""
        return self._call("extend", data)

    def create_item(self, table: str, priority: float, trajectory: Any) -> None:
        """Another writer's create_item (a TrajectoryWriter's is its own;
        a StructuredWriter has none)."""
        if self._create_item is None:
            raise AttributeError("a StructuredWriter makes its items from its configs")
        try:
            self._create_item(table, priority, trajectory)
        except _TIMEOUT:
            raise
        except _FAILURES:
            self._fail()
        self._created += 1

    def flush(
        self, block_until_num_items: int = 0, timeout_ms: int | None = None
    ) -> None:
        self._call("flush", block_until_num_items, timeout_ms)
        if block_until_num_items == 0:
            self._acked = self._created_items()

    def end_episode(
        self, clear_buffers: bool = True, timeout_ms: int | None = None
    ) -> None:
        self._call("end_episode", clear_buffers, timeout_ms)
        self._acked = self._created_items()

    def _close(self, ship: bool) -> None:
        if self._closed:
            return
        self._closed = True
        self._append = self._create_item = _closed
        self.__dict__["append"] = self.__dict__["create_item"] = _closed
        self.__dict__["extend"] = _closed
        if self._traj:
            self._writer._failure_hook = None
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


class _Forwarding(ShardWriter):
    """A ShardWriter of a writer other than a TrajectoryWriter (a
    StructuredWriter): any other attribute is the wrapped writer's."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)

