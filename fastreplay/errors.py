"""Exceptions raised by fastreplay.

Every exception derives from :class:`ReverbError` and, where Reverb raises a
builtin for the same condition, from that builtin too, so both
``except fastreplay.errors.ReverbError`` and Reverb-style ``except ValueError``
work.  ``DeadlineExceededError`` is a ``ReverbError`` exactly as in Reverb.
"""

from __future__ import annotations

__all__ = [
    "DataLossError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "HistoryIndexError",
    "InternalError",
    "InvalidArgumentError",
    "InvalidPriorityError",
    "ReverbError",
    "ShardUnavailableError",
    "TableClosedError",
    "UnavailableError",
]


class ReverbError(Exception):
    """Base class of every fastreplay error (Reverb's name)."""


class DeadlineExceededError(ReverbError, TimeoutError):
    """A blocking call (rate limiter, flush, end_episode) ran out of time."""


class InvalidArgumentError(ReverbError, ValueError):
    """An argument was rejected (Reverb's INVALID_ARGUMENT status)."""


class InvalidPriorityError(InvalidArgumentError):
    """A priority is NaN, negative or too large for its selector.

    Only the offending call fails; the table and its items are unchanged.
    """


class TableClosedError(ReverbError, RuntimeError):
    """The table was closed while the call waited or before it started."""


class FailedPreconditionError(ReverbError, RuntimeError):
    """The object is not in a state that allows the call (e.g. reconfiguring
    a chunker whose buffer is not empty, or a closed writer)."""


class DataLossError(ReverbError, RuntimeError):
    """Stored data failed to decode (corrupt chunk or checkpoint)."""


class InternalError(ReverbError, RuntimeError):
    """The core failed in a way no argument explains (Reverb's INTERNAL)."""


class UnavailableError(ReverbError, RuntimeError):
    """No server answers at the client's address (Reverb's UNAVAILABLE, which
    its Python client raises as RuntimeError)."""


class ShardUnavailableError(UnavailableError):
    """A shard of a ``fastreplay.ray.ShardedServer`` does not answer (it died,
    or restarted and lost the writer's chunks).  ``shard`` is its index,
    ``restarts`` how often Ray restarted it, ``unacknowledged_items`` how many
    items the writer had created that the shard had not confirmed."""

    def __init__(self, message: str, shard: int | None = None, restarts: int = 0,
                 unacknowledged_items: int = 0) -> None:
        super().__init__(message)
        self.shard = shard
        self.restarts = restarts
        self.unacknowledged_items = unacknowledged_items

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.shard, self.restarts,
                             self.unacknowledged_items))


class HistoryIndexError(ReverbError, IndexError, ValueError):
    """A history index outside the appended steps.  Reverb raises
    ValueError for an index before the first step (IndexError past the
    last), so both ``except`` clauses catch it."""
