"""Rate limiters (Reverb's ``reverb.rate_limiters``, rules of spec 3.7).

A rate limiter decides when a table may be sampled and when it may be
inserted into, from three counters (inserts, samples, deletes):

- ``can_sample(n)``: at least ``min_size_to_sample`` items, and
  ``inserts * samples_per_insert - samples - n >= min_diff``;
- ``can_insert(n)``: free while the table stays at or below
  ``min_size_to_sample`` items, otherwise
  ``(inserts + n) * samples_per_insert - samples <= max_diff``.

Inserts and samples wait (releasing the GIL) while the limiter says no.  A
limiter object belongs to one table only.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["MinSize", "Queue", "RateLimiter", "SampleToInsertRatio", "Stack"]

_log = logging.getLogger(__name__)


def _check_min_size(min_size_to_sample: int) -> None:
    if min_size_to_sample < 1:
        raise ValueError(
            f"min_size_to_sample ({min_size_to_sample}) must be a positive integer"
        )


class RateLimiter:
    """A limiter with explicit parameters (Reverb's base class)."""

    def __init__(
        self,
        samples_per_insert: float,
        min_size_to_sample: int,
        min_diff: float,
        max_diff: float,
    ) -> None:
        if not samples_per_insert > 0:
            raise ValueError(
                f"samples_per_insert ({samples_per_insert}) must be > 0"
            )
        _check_min_size(min_size_to_sample)
        if min_diff > max_diff:
            raise ValueError(
                f"min_diff ({min_diff}) must be <= max_diff ({max_diff})"
            )
        self.samples_per_insert = float(samples_per_insert)
        self.min_size_to_sample = int(min_size_to_sample)
        self.min_diff = float(min_diff)
        self.max_diff = float(max_diff)
        self._table: str | None = None

    def _bind(self, table_name: str) -> None:
        """Claim this limiter for one table (a limiter holds that table's
        counters, so sharing it would couple two tables)."""
        if self._table is not None:
            raise ValueError(
                f"{self!r} is already used by table '{self._table}'; "
                f"create a separate rate limiter for table '{table_name}'"
            )
        self._table = table_name

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(samples_per_insert={self.samples_per_insert!r}, "
            f"min_size_to_sample={self.min_size_to_sample!r}, "
            f"min_diff={self.min_diff!r}, max_diff={self.max_diff!r})"
        )


class MinSize(RateLimiter):
    """Block sampling until the table holds ``min_size_to_sample`` items."""

    def __init__(self, min_size_to_sample: int) -> None:
        _check_min_size(min_size_to_sample)
        super().__init__(
            samples_per_insert=1.0,
            min_size_to_sample=min_size_to_sample,
            min_diff=-sys.float_info.max,
            max_diff=sys.float_info.max,
        )


class SampleToInsertRatio(RateLimiter):
    """Keep ``samples / inserts`` near ``samples_per_insert``.

    Below ``min_size_to_sample`` items it acts as :class:`MinSize`; above, it
    blocks inserts when the sample deficit exceeds the buffer and samples
    when the surplus does.  A scalar ``error_buffer`` ``e`` gives
    ``(m * spi - e, m * spi + e)``; a pair is used as ``(min_diff, max_diff)``.
    """

    def __init__(
        self,
        samples_per_insert: float,
        min_size_to_sample: int,
        error_buffer: float | tuple[float, float],
    ) -> None:
        if not samples_per_insert > 0:
            raise ValueError(
                f"samples_per_insert ({samples_per_insert}) must be > 0"
            )
        if isinstance(error_buffer, (int, float)):
            offset = samples_per_insert * min_size_to_sample
            min_diff, max_diff = offset - error_buffer, offset + error_buffer
        else:
            min_diff, max_diff = error_buffer
        if max_diff - min_diff < 2 * max(1.0, samples_per_insert):
            raise ValueError(
                "The size of error_buffer must be >= max(1.0, samples_per_insert) "
                "as smaller values could completely block samples and/or insert "
                "calls."
            )
        if max_diff < samples_per_insert * min_size_to_sample:
            _log.warning(
                "The range covered by error_buffer is below samples_per_insert * "
                "min_size_to_sample. If the sampler cannot sample concurrently, "
                "this will result in a deadlock as soon as min_size_to_sample "
                "items have been inserted."
            )
        if min_diff > samples_per_insert * min_size_to_sample:
            raise ValueError(
                "The range covered by error_buffer is above samples_per_insert * "
                "min_size_to_sample. This will result in a deadlock as soon as "
                "min_size_to_sample items have been inserted."
            )
        _check_min_size(min_size_to_sample)
        super().__init__(samples_per_insert, min_size_to_sample, min_diff, max_diff)


class Queue(RateLimiter):
    """Queue semantics (use :meth:`Table.queue` rather than this directly)."""

    def __init__(self, size: int) -> None:
        super().__init__(1.0, 1, 0.0, float(size))


class Stack(RateLimiter):
    """Stack semantics (use :meth:`Table.stack` rather than this directly)."""

    def __init__(self, size: int) -> None:
        super().__init__(1.0, 1, 0.0, float(size))
