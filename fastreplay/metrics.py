"""Counters as flat dicts, for TensorBoard, W&B or any logger.

``Table.metrics()``, ``Server.metrics()`` and ``Client.metrics()`` (also
against a server of another process) return ``dict[str, float]`` with
stable keys:

* ``table/<name>/size``, ``max_size``, ``fill`` (size / max_size),
  ``episodes``, ``deleted_episodes``;
* counters since the table was made (or reset): ``inserts``, ``samples``,
  ``unique_samples``, ``updates``, ``deletes``, ``evictions``, ``expired``;
* the rate limiter: ``rate_limiter/insert_stalls`` (inserts that had to
  wait), ``rate_limiter/insert_stall_s`` (seconds they waited, summed over
  callers), ``rate_limiter/sample_stalls``, ``rate_limiter/sample_stall_s``;
* ``chunk_store/live_chunks``, ``stored_bytes``, ``raw_bytes``,
  ``compression_ratio`` (servers and clients only).

``Meter`` adds per-second rates (``table/<name>/inserts_per_s`` ...)
between two polls.  Nothing here starts a thread unless asked:
``Meter.every(seconds, callback)`` calls ``callback(metrics)`` from one
background thread until it is closed (or garbage-collected).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from fastreplay.reverb_types import TableInfo

__all__ = ["RATE_COUNTERS", "Meter", "Reporter", "chunk_store_metrics", "table_metrics"]

#: Counters ``Meter`` turns into ``<key>_per_s`` rates.
RATE_COUNTERS = ("inserts", "samples", "updates", "deletes", "evictions")


def table_metrics(info: TableInfo) -> dict[str, float]:
    """The ``table/<name>/...`` metrics of a table's ``TableInfo``."""
    p = f"table/{info.name}/"
    rl = info.rate_limiter_info
    return {
        p + "size": info.current_size,
        p + "max_size": info.max_size,
        p + "fill": info.current_size / info.max_size if info.max_size else 0.0,
        p + "episodes": info.num_episodes,
        p + "deleted_episodes": info.num_deleted_episodes,
        p + "inserts": info.num_inserts,
        p + "samples": info.num_samples,
        p + "unique_samples": info.num_unique_samples,
        p + "updates": info.num_updates,
        p + "deletes": info.num_deletes,
        p + "evictions": info.num_evictions,
        p + "expired": info.num_expired,
        p + "rate_limiter/insert_stalls": rl.insert_stats.blocked,
        p + "rate_limiter/insert_stall_s": rl.insert_stats.stall_seconds,
        p + "rate_limiter/sample_stalls": rl.sample_stats.blocked,
        p + "rate_limiter/sample_stall_s": rl.sample_stats.stall_seconds,
    }


def chunk_store_metrics(stats: Mapping[str, int]) -> dict[str, float]:
    """The ``chunk_store/...`` metrics of ``ChunkStore.stats()``."""
    stored, raw = stats["stored_bytes"], stats["raw_bytes"]
    return {
        "chunk_store/live_chunks": stats["live_chunks"],
        "chunk_store/stored_bytes": stored,
        "chunk_store/raw_bytes": raw,
        "chunk_store/compression_ratio": raw / max(stored, 1),
    }


class _HasMetrics(Protocol):
    def metrics(self) -> dict[str, float]: ...


class Meter:
    """Polls a metrics source and adds per-second rates.

    ``source`` is a ``Client``, ``Server`` or ``Table`` (anything with a
    ``metrics()`` method) or a function returning such a dict.  Each
    ``poll()`` returns the source's metrics plus ``<key>_per_s`` for the
    counters of ``RATE_COUNTERS``, over the time since the previous poll
    (since the meter was made, for the first).  With ``interval``,
    ``due()`` says whether that many seconds passed since the last poll::

        meter = Meter(client, interval=10.0)
        for step in range(num_steps):
            ...
            if meter.due():
                for key, value in meter.poll().items():
                    tensorboard_writer.add_scalar(key, value, step)

    No thread is started.
    """

    def __init__(self, source: _HasMetrics | Callable[[], Mapping[str, float]],
                 interval: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if interval is not None and not interval > 0:
            raise ValueError(f"interval must be None or > 0 seconds, got {interval!r}")
        method: Any = getattr(source, "metrics", None)
        self._read: Callable[[], Mapping[str, float]] = (
            method if callable(method) else source)  # type: ignore[assignment]
        self._interval = interval
        self._clock = clock
        self._last = dict(self._read())
        self._at = clock()

    def due(self) -> bool:
        """Whether ``interval`` seconds passed since the last poll (always
        True without an interval)."""
        return self._interval is None or self._clock() - self._at >= self._interval

    def poll(self) -> dict[str, float]:
        """The current metrics with the rates since the last poll."""
        now_values = dict(self._read())
        now = self._clock()
        dt = now - self._at
        out: dict[str, float] = dict(now_values)
        for key, value in now_values.items():
            if key.rpartition("/")[2] in RATE_COUNTERS:
                before = self._last.get(key, 0)
                delta = value - before if value >= before else value  # a reset
                out[key + "_per_s"] = delta / dt if dt > 0 else 0.0
        self._last, self._at = now_values, now
        return out

    def every(self, seconds: float, callback: Callable[[dict[str, float]], Any]
              ) -> Reporter:
        """Call ``callback(self.poll())`` every ``seconds`` from a background
        thread until the returned ``Reporter`` is closed (``with`` block,
        ``close()``, or garbage collection)::

            with Meter(client).every(10.0, lambda m: wandb.log(m)):
                train()

        An exception of the callback stops the reporting; ``close()``
        raises it.  Leave the meter's ``poll`` to that thread meanwhile."""
        if not seconds > 0:
            raise ValueError(f"seconds must be > 0, got {seconds!r}")
        return Reporter(self, seconds, callback)


class _ReporterState:
    """What the reporting thread holds (never the ``Reporter``)."""

    def __init__(self, meter: Meter, seconds: float,
                 callback: Callable[[dict[str, float]], Any]) -> None:
        self.meter, self.seconds, self.callback = meter, seconds, callback
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        while not self.stop.wait(self.seconds):
            try:
                self.callback(self.meter.poll())
            except BaseException as exc:  # noqa: BLE001 - raised by close()
                self.error = exc
                return


class Reporter:
    """A running ``Meter.every``: one daemon thread calling the callback."""

    def __init__(self, meter: Meter, seconds: float,
                 callback: Callable[[dict[str, float]], Any]) -> None:
        self._state = _ReporterState(meter, seconds, callback)
        self._thread = threading.Thread(target=self._state.run, daemon=True,
                                        name="fastreplay-metrics")
        self._finalizer = weakref.finalize(self, self._state.stop.set)
        self._thread.start()

    def close(self) -> None:
        """Stop reporting (idempotent); raise the callback's error, if any."""
        self._finalizer.detach()
        self._state.stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        error, self._state.error = self._state.error, None
        if error is not None:
            raise error

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
