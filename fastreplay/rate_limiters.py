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

Every parameter is checked at construction (Reverb's checks, plus the NaN,
infinite and zero values Reverb lets through and that would then block every
insert or sample forever): ``ValueError`` for a bad value, ``TypeError`` for
a size that is not an integer.
"""

from __future__ import annotations

import logging
import math
import numbers
import operator
import sys

__all__ = ["MinSize", "Queue", "RateLimiter", "SampleToInsertRatio", "Stack"]

_log = logging.getLogger(__name__)


def _positive_int(name: str, value: object) -> int:
    """``value`` as an int >= 1 (bools and non-integral numbers refused)."""
    try:
        if isinstance(value, bool):
            raise TypeError
        n = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"{name} ({value!r}) must be a positive integer, got "
            f"{type(value).__name__}"
        ) from None
    if n < 1:
        raise ValueError(f"{name} ({value!r}) must be a positive integer")
    return int(n)


def _check_min_size(min_size_to_sample: object) -> int:
    return _positive_int("min_size_to_sample", min_size_to_sample)


def _real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} ({value!r}) must be a real number")
    x = float(value)
    if math.isnan(x):
        raise ValueError(f"{name} must not be NaN")
    return x


def _check_samples_per_insert(samples_per_insert: object) -> float:
    spi = _real("samples_per_insert", samples_per_insert)
    if not (spi > 0 and math.isfinite(spi)):
        raise ValueError(
            f"samples_per_insert ({samples_per_insert}) must be finite and > 0"
        )
    return spi


class RateLimiter:
    """A limiter with explicit parameters (Reverb's base class)."""

    def __init__(
        self,
        samples_per_insert: float,
        min_size_to_sample: int,
        min_diff: float,
        max_diff: float,
    ) -> None:
        spi = _check_samples_per_insert(samples_per_insert)
        min_size = _check_min_size(min_size_to_sample)
        lo, hi = _real("min_diff", min_diff), _real("max_diff", max_diff)
        if lo > hi:
            raise ValueError(
                f"min_diff ({min_diff}) must be <= max_diff ({max_diff})"
            )
        if lo == math.inf or hi == -math.inf:
            raise ValueError(
                f"min_diff ({min_diff}) = inf or max_diff ({max_diff}) = -inf "
                "would block every sample or insert"
            )
        self.samples_per_insert = spi
        self.min_size_to_sample = min_size
        self.min_diff = lo
        self.max_diff = hi
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
        min_size_to_sample = _check_min_size(min_size_to_sample)
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
        samples_per_insert = _check_samples_per_insert(samples_per_insert)
        min_size_to_sample = _check_min_size(min_size_to_sample)
        if isinstance(error_buffer, numbers.Real):
            buffer = _real("error_buffer", error_buffer)
            offset = samples_per_insert * min_size_to_sample
            min_diff, max_diff = offset - buffer, offset + buffer
        else:
            try:
                lo, hi = error_buffer  # type: ignore[misc]
            except (TypeError, ValueError):
                raise TypeError(
                    "error_buffer must be a number or a (min_diff, max_diff) pair, "
                    f"got {error_buffer!r}"
                ) from None
            min_diff = _real("error_buffer[0] (min_diff)", lo)
            max_diff = _real("error_buffer[1] (max_diff)", hi)
        if max_diff - min_diff < 2 * max(1.0, samples_per_insert):
            raise ValueError(
                "The size of error_buffer must be >= 2 * max(1.0, samples_per_insert) "
                "as smaller values could completely block samples and/or insert "
                f"calls. Got min_diff={min_diff:g}, max_diff={max_diff:g}; use "
                f"error_buffer >= {max(1.0, samples_per_insert):g} (a scalar "
                "error_buffer e allows min_size_to_sample * samples_per_insert "
                "+- e)."
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
        super().__init__(samples_per_insert, min_size_to_sample, min_diff, max_diff)


class Queue(RateLimiter):
    """Queue semantics (use :meth:`Table.queue` rather than this directly).

    ``size`` must be a positive integer (a zero size would block every
    insert)."""

    def __init__(self, size: int) -> None:
        super().__init__(1.0, 1, 0.0, float(_positive_int("size", size)))


class Stack(RateLimiter):
    """Stack semantics (use :meth:`Table.stack` rather than this directly).

    ``size`` must be a positive integer."""

    def __init__(self, size: int) -> None:
        super().__init__(1.0, 1, 0.0, float(_positive_int("size", size)))
