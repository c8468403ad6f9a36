"""``SampleDataset``: the iterator ``Client.dataset`` returns.

Worker threads call ``client.sample_batch`` and hand the batches to the
consumer through a bounded queue.  The workers never hold the dataset
itself, only its ``_Workers`` state, so a dataset nobody references any
more is collected and a ``weakref.finalize`` stops its threads (each wakes
within ``_POLL`` seconds: every wait of a worker is sliced that finely).
``close()`` (or leaving a ``with`` block) stops them at once and joins them.
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from typing import Any, Protocol, cast

import numpy as np

from fastreplay import _nest, errors
from fastreplay.replay_sample import SampleInfoBatch


class Sampler(Protocol):
    """What a dataset samples from: ``fastreplay.Client`` or
    ``fastreplay.ray.Client``."""

    def sample_batch(self, table: str, batch_size: int, *,
                     timeout: float | None = None) -> tuple[Any, Any]: ...


class ManySampler(Sampler, Protocol):
    """A sampler that also draws several batches in one call
    (``fastreplay.ray.Client.sample_batches``): whole batches, of which
    only the last may be short."""

    def sample_batches(self, table: str, batch_size: int, num_batches: int, *,
                       timeout: float | None = None) -> list[tuple[Any, Any]]: ...

__all__ = ["SampleDataset"]

#: Threads a dataset may start (a huge count would never finish starting).
_MAX_WORKERS = 256

#: Longest a worker waits before it looks at the stop flag again (s).
_POLL = 0.1

#: How long ``close`` waits for each worker to end (s).
_JOIN_TIMEOUT = 5.0


class _Workers:
    """What the worker threads share: the client, the queue, the stop flag.
    It holds no reference to the ``SampleDataset``, so the dataset can be
    garbage-collected while its workers run."""

    def __init__(self, client: Sampler, table: str, batch_size: int,
                 prefetch: int, timeout: float | None, per_call: int = 1) -> None:
        self.client, self.table = client, table
        self.batch_size, self.timeout = batch_size, timeout
        self.per_call = per_call  # batches a worker asks for at once
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=prefetch)
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self, num_workers: int) -> None:
        self.threads = [threading.Thread(target=self.work, daemon=True,
                                         name=f"fastreplay-dataset-{i}")
                        for i in range(num_workers)]
        for t in self.threads:
            t.start()

    def shutdown(self, join: bool) -> None:
        """Stop the workers (idempotent); with ``join``, wait for them."""
        self.stop.set()
        if join:
            me = threading.current_thread()
            for t in self.threads:
                if t is not me:
                    t.join(timeout=_JOIN_TIMEOUT)

    def batch(self, ready: list[Any], carry: list[Any]) -> Any:
        """One full batch, sampled in slices of at most ``_POLL`` s so that a
        stop is noticed; parts of a throttled batch are concatenated.  With
        ``per_call > 1`` a call may give more full batches: they go to
        ``ready`` (this worker's, handed out before it samples again), and
        a short one after them to ``carry`` (the start of the next batch)."""
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        parts: list[Any] = carry[:]
        carry.clear()
        need = self.batch_size - sum(len(p[0]) for p in parts)
        while need > 0:
            if self.stop.is_set():
                raise errors.TableClosedError("dataset closed")
            wait = _POLL if deadline is None else min(_POLL,
                                                      deadline - time.monotonic())
            if wait < 0:
                raise errors.DeadlineExceededError(
                    f"no full batch of {self.batch_size} within {self.timeout} s"
                )
            try:
                if self.per_call > 1 and need == self.batch_size:
                    many = cast("ManySampler", self.client)
                    got = many.sample_batches(self.table, need, self.per_call,
                                              timeout=wait)
                    full = [b for b in got if len(b[0]) == need]
                    if full:
                        ready.extend(full[1:])
                        carry.extend(b for b in got if len(b[0]) != need)
                        return full[0]
                    parts.extend(got)
                    need -= sum(len(b[0]) for b in got)
                    continue
                info, data = self.client.sample_batch(self.table, need, timeout=wait)
            except errors.DeadlineExceededError:
                continue
            parts.append((info, data))
            need -= len(info)
        return join(parts)

    def work(self) -> None:
        item: Any
        ready: list[Any] = []
        carry: list[Any] = []
        while not self.stop.is_set():
            try:
                item = ready.pop(0) if ready else self.batch(ready, carry)
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer
                item = exc
            while not self.stop.is_set():
                try:
                    self.queue.put(item, timeout=_POLL)
                    break
                except queue.Full:
                    continue
            if isinstance(item, BaseException):
                return


def join(parts: list[tuple[Any, Any]]) -> tuple[Any, Any]:
    """One batch of the ``(info, data)`` parts, in order (an info's tuple
    field, the shards a sharded draw skipped, is the union of the parts')."""
    if len(parts) == 1:
        return parts[0]
    first = parts[0][0]
    fields = [tuple(sorted(set().union(*f))) if isinstance(f[0], tuple)
              else np.concatenate(f)
              for f in zip(*[p[0] for p in parts], strict=True)]
    datas = zip(*[_nest.flatten(p[1]) for p in parts], strict=True)
    flat = [np.concatenate(cols) for cols in datas]
    return type(first)(*fields), _nest.unflatten_as(parts[0][1], flat)


class SampleDataset:
    """Iterator of ``(info, data)`` batches, prefetched by worker threads.

    Batches are numpy arrays owned by the consumer (``torch.from_numpy`` and
    ``jax.numpy.asarray`` take them without a copy).  Use it as a context
    manager so its threads stop when the block ends::

        with client.dataset("replay", batch_size=256) as ds:
            for step, (info, data) in zip(range(1000), ds):
                ...

    ``close()`` does the same; a dataset that is garbage-collected without
    either stops its threads too (within a fraction of a second).
    Iteration ends when a finite ``timeout`` expires with nothing to sample,
    or when the dataset is closed while a ``next`` waits; a ``next`` that
    starts after ``close`` raises ``FailedPreconditionError``.  Iterating
    and closing are safe from several threads.
    """

    def __init__(self, client: Sampler, table: str, batch_size: int,
                 prefetch: int, num_workers: int, timeout: float | None,
                 per_call: int = 1) -> None:
        for name, value in (("batch_size", batch_size), ("prefetch", prefetch),
                            ("num_workers", num_workers), ("per_call", per_call)):
            if value < 1:
                raise ValueError(f"dataset of table {table!r}: {name} ({value}) "
                                 f"must be >= 1, e.g. client.dataset({table!r}, "
                                 "batch_size=256, prefetch=2)")
        if num_workers > _MAX_WORKERS:
            raise ValueError(f"num_workers ({num_workers}) must be at most "
                             f"{_MAX_WORKERS} (one thread each)")
        self._table = table
        self._workers = _Workers(client, table, batch_size, prefetch, timeout,
                                 per_call)
        self._num_workers = num_workers
        self._lock = threading.Lock()
        self._done = 0  # workers that ended (timeout or stop), under _lock
        self._closed = False
        # Stops the threads when the dataset is collected without close();
        # it references the workers' state only, never ``self``.
        self._finalizer = weakref.finalize(self, self._workers.shutdown, False)
        self._workers.start(num_workers)

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called (or the ``with`` block ended)."""
        return self._closed

    def __iter__(self) -> SampleDataset:
        return self

    def __next__(self) -> tuple[SampleInfoBatch, Any]:
        if self._closed:
            raise errors.FailedPreconditionError(
                f"this dataset of table {self._table!r} is closed; create a new "
                "one with client.dataset(...) (use `with client.dataset(...) as "
                "ds:` so it lives exactly as long as the loop)")
        workers = self._workers
        while True:
            with self._lock:
                if self._done >= self._num_workers:
                    raise StopIteration
            try:
                item = workers.queue.get(timeout=_POLL)
            except queue.Empty:
                if workers.stop.is_set():
                    raise StopIteration from None
                continue
            if isinstance(item, (errors.DeadlineExceededError,
                                 errors.TableClosedError)):
                with self._lock:
                    self._done += 1
                continue
            if isinstance(item, BaseException):
                # Stop the others; later calls end the iteration.
                self._finalizer.detach()
                workers.shutdown(join=True)
                raise item
            return item  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stop the worker threads and wait for them (idempotent).  Batches
        prefetched but not taken are dropped."""
        self._closed = True
        self._finalizer.detach()
        self._workers.shutdown(join=True)

    def __enter__(self) -> SampleDataset:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        w = self._workers
        state = "closed" if self._closed else "open"
        return (f"SampleDataset(table={self._table!r}, batch_size={w.batch_size}, "
                f"num_workers={self._num_workers}, prefetch={w.queue.maxsize}, "
                f"{state})")
