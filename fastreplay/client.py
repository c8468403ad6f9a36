"""``Client``: Reverb's client API over a fastreplay ``Server``.

``Client('host:PORT')`` resolves to the ``Server`` of this process that
listens on that port when there is one: the calls then go straight to its
tables (no serialization).  Otherwise it talks to the server over the
network (``fastreplay.net``): another process of this machine or another
machine.  As in Reverb the client connects lazily: constructing it never
fails for a well-formed address.  fastreplay adds ``sample_batch`` (stacked
numpy arrays, gathered in C without the GIL) and ``dataset`` (a prefetching
iterator).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from fastreplay import _nest, errors, structured_writer
from fastreplay.backends import Backend, LocalBackend
from fastreplay.dataset import SampleDataset
from fastreplay.legacy_writer import Writer, check_step_signature
from fastreplay.replay_sample import ReplaySample, SampleInfoBatch
from fastreplay.reverb_types import ServerInfo
from fastreplay.server import lookup
from fastreplay.table import TableInfo
from fastreplay.writer import TrajectoryWriter

__all__ = ["Client", "SampleDataset", "Writer"]

_LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]", "::1", "0.0.0.0", "")


def _parse(address: str) -> tuple[str, int]:
    """(host, port) of a 'host:port' address; ValueError when malformed."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"server address must be 'host:port', got {address!r}")
    return host, int(port)


class Client:
    """Client of a fastreplay ``Server`` (Reverb's ``reverb.Client``).

    Parameters
    ----------
    server_address : str
        ``'host:PORT'`` of a server of this process, of another process or
        of another machine.  The server need not exist yet.
    reconnect_window : float, optional
        Seconds a call to a server of another process keeps reconnecting
        when the server is unreachable before raising UnavailableError
        (``FASTREPLAY_RECONNECT_WINDOW``, default 10).
    token : str, optional
        The server's shared token (``FASTREPLAY_TOKEN`` by default).
    connector : callable, optional
        ``connector(timeout)`` returns a socket-like object (``sendall``,
        ``recv_into``, ``settimeout``, ``close``) that carries the calls to
        the server at ``server_address`` instead of a socket (e.g. Ray actor
        calls, ``fastreplay.ray``); it is pickled with the client.

    Raises
    ------
    ValueError
        A malformed address (not ``'host:port'``).
    """

    def __init__(self, server_address: str, *, reconnect_window: float | None = None,
                 token: str | None = None,
                 connector: Callable[[float], Any] | None = None) -> None:
        self._host, self._port = _parse(server_address)
        self._connector = connector
        self._server_address = server_address
        self._reconnect_window = reconnect_window
        self._token = token
        self._backend_lock = threading.Lock()
        self._backend_found: Backend | None = None
        if (connector is None and self._host in _LOCAL_HOSTS
                and lookup(self._port) is not None):
            self._backend  # noqa: B018 - resolved now: the client keeps its server alive

    @property
    def _backend(self) -> Backend:
        backend = self._backend_found
        if backend is None:
            with self._backend_lock:
                if self._backend_found is None:
                    server = (lookup(self._port) if self._connector is None
                              and self._host in _LOCAL_HOSTS else None)
                    if server is not None:
                        self._backend_found = LocalBackend(server)
                    else:
                        from fastreplay.net.remote import RemoteBackend

                        self._backend_found = RemoteBackend(
                            self._host, self._port,
                            reconnect_window=self._reconnect_window,
                            token=self._token, connector=self._connector)
                backend = self._backend_found
        return backend

    @property
    def server_address(self) -> str:
        return self._server_address

    def close(self) -> None:
        """Close the connections to a server of another process (items its
        writers staged are shipped first).  Later calls connect again."""
        with self._backend_lock:
            backend, self._backend_found = self._backend_found, None
        close = getattr(backend, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, ...]:
        # By address (and how to connect): a process that unpickles it
        # connects on its first call.
        return _rebuild, (self._server_address, self._reconnect_window, self._token,
                          self._connector)

    def __repr__(self) -> str:
        return f"Client(server_address={self._server_address!r})"

    # ----- writing -----

    def trajectory_writer(self, num_keep_alive_refs: int, *,
                          validate_items: bool = True) -> TrajectoryWriter:
        """A TrajectoryWriter into this server's tables."""
        if num_keep_alive_refs < 1:
            raise ValueError(
                f"num_keep_alive_refs ({num_keep_alive_refs}) must be a positive "
                "integer"
            )
        tables, store, sink = self._backend.staging()
        return TrajectoryWriter(tables, num_keep_alive_refs,
                                validate_items=validate_items,
                                chunk_store=store, sink=sink)

    def structured_writer(self, configs: Sequence[structured_writer.Config]
                          ) -> structured_writer.StructuredWriter:
        """A StructuredWriter creating the items of ``configs`` in this
        server's tables (each config gets its buffer-length condition).

        Raises ValueError for no configs or an invalid one."""
        if not configs:
            raise ValueError("At least one config must be provided.")
        tables, store, sink = self._backend.staging()
        return structured_writer.StructuredWriter(tables, configs, chunk_store=store,
                                                  sink=sink)

    def writer(self, max_sequence_length: int, delta_encoded: bool = False,
               chunk_length: int | None = None,
               max_in_flight_items: int | None = 25) -> Writer:
        """The legacy ``Writer`` (prefer ``trajectory_writer``): items over
        the last ``num_timesteps <= max_sequence_length`` appended steps.

        ``chunk_length`` defaults to ``min(10, max_sequence_length)``;
        ``max_in_flight_items=None`` means unlimited (1,000,000);
        ``delta_encoded`` is accepted and ignored.

        Raises
        ------
        ValueError
            ``max_sequence_length < 1``, ``chunk_length`` outside
            ``[1, max_sequence_length]`` or ``max_in_flight_items < 1``.
        """
        del delta_encoded  # chunks are LZ4-compressed by the measured rule
        if max_sequence_length < 1:
            raise ValueError(f"max_sequence_length ({max_sequence_length}) must be "
                             "a positive integer")
        if chunk_length is None:
            chunk_length = min(10, max_sequence_length)
        if chunk_length < 1 or chunk_length > max_sequence_length:
            raise ValueError(
                f"chunk_length ({chunk_length}) must be a positive integer le to "
                f"max_sequence_length ({max_sequence_length})")
        if max_in_flight_items is None:
            max_in_flight_items = 1_000_000
        if max_in_flight_items < 1:
            raise ValueError(f"max_in_flight_items ({max_in_flight_items}) must be "
                             "a positive integer")
        tables, store, sink = self._backend.staging()
        return Writer(tables, max_sequence_length, chunk_length,
                      max_in_flight_items, chunk_store=store, sink=sink)

    def insert(self, data: Any, priorities: Mapping[str, float]) -> None:
        """Insert ``data`` (a nest of one step) as one item into each table
        of ``priorities`` (table -> priority); blocks until inserted.

        As in Reverb each step is checked against a table's signature (a
        signature may also describe the length-1 trajectory), and sampled
        data has a leading time axis of length 1.  Nothing is inserted when
        any table rejects the data.
        """
        if not priorities:
            raise ValueError(
                "priorities must contain at least one item: map each table to "
                "insert into to a priority, e.g. client.insert(data, "
                "priorities={'my_table': 1.0})")
        tables, store, sink = self._backend.staging()
        for name in priorities:
            if name not in tables:
                raise ValueError(
                    f'Could not find table "{name}". The following tables exists: '
                    f"{', '.join(sorted(tables))}")
        targets = [tables[name] for name in priorities]
        # The legacy writer's rules without its per-call overhead: one step,
        # each signature checked against it (or the length-1 trajectory),
        # every table checked before any item is created.
        writer = TrajectoryWriter(tables, 1, validate_items=False,
                                  chunk_store=store, sink=sink)
        try:
            writer.append(data)
            step = _nest.map_structure(lambda h: h[-1:], writer.history)
            for target, priority in zip(targets, priorities.values(), strict=True):
                target.check_priority(priority)
                if target.signature is not None:
                    check_step_signature(target.name, target.signature,
                                         _nest.flatten(step), 1)
            for name, priority in priorities.items():
                writer.create_item(name, priority, step)
            writer.flush()
        finally:
            writer.close()

    # ----- sampling -----

    def sample(self, table: str, num_samples: int = 1, *,
               emit_timesteps: bool = True,
               unpack_as_table_signature: bool = False) -> Iterator[Any]:
        """Yield ``num_samples`` samples, each blocking until available.

        With ``emit_timesteps`` each sample is a list of ``ReplaySample``, one
        per timestep; otherwise one ``ReplaySample`` whose data is the flat
        list of the item's columns (or the table signature's nest).
        """
        backend = self._backend
        info = backend.table_info(table)
        if num_samples < 1:
            raise ValueError(f"num_samples ({num_samples}) must be a positive integer")
        # Without a signature, flat data is returned (as Reverb does).
        signature = info.signature if unpack_as_table_signature else None
        for _ in range(num_samples):
            (sample,) = backend.sample_items(table, 1)
            if emit_timesteps:
                steps = _split_timesteps(sample)
                if signature is not None:
                    steps = [ReplaySample(s.info, _nest.unflatten_as(signature, s.data))
                             for s in steps]
                yield steps
            elif signature is not None:
                yield ReplaySample(sample.info, _nest.unflatten_as(signature,
                                                                   sample.data))
            else:
                yield sample

    def sample_batch(self, table: str, batch_size: int, *,
                     timeout: float | None = None
                     ) -> tuple[SampleInfoBatch, Any]:
        """Sample ``batch_size`` items as stacked arrays (fastreplay addition).

        Returns ``(info, data)``: ``info`` holds numpy arrays of keys,
        probabilities, table sizes, priorities and times sampled; ``data`` is
        the trajectory nest (as written, or the table signature's) with
        ``[B, T, ...]`` arrays (``[B, ...]`` for squeezed columns).  A timeout
        after at least one sample returns a shorter batch.
        """
        info, columns, structure = self._backend.sample_batch(table, batch_size,
                                                              timeout)
        return info, _nest.columns_as(structure, columns)

    def sample_batch_begin(self, table: str, batch_size: int, *,
                           timeout: float | None = None, flat: bool = False
                           ) -> Callable[[], tuple[Any, ...]]:
        """``sample_batch`` in two halves (fastreplay addition): the request
        goes out now and the returned function waits for the batch, so that
        batches begun on several servers overlap their round trips (a
        ``fastreplay.ray`` client's draw over its shards).  In process the
        batch is sampled now.  Errors are raised by either half.  With
        ``flat=True`` the function gives ``(info, columns, structure)``: the
        flat columns and their items' nest, for a caller that joins batches
        before nesting them once (``fastreplay._nest.columns_as``)."""
        finish = self._backend.sample_batch_begin(table, batch_size, timeout)
        if flat:
            return finish

        def result() -> tuple[SampleInfoBatch, Any]:
            info, columns, structure = finish()
            return info, _nest.columns_as(structure, columns)

        return result

    def dataset(self, table: str, batch_size: int, *, prefetch: int = 2,
                num_workers: int = 1, timeout: float | None = None
                ) -> SampleDataset:
        """Iterator of ``sample_batch`` results filled by background threads.

        Use it as a context manager (``with client.dataset(...) as ds:``) or
        call ``close()``; its threads also stop when it is garbage-collected.
        ``num_workers`` threads sample at once, ``prefetch`` batches wait in
        its queue, and a finite ``timeout`` ends the iteration when no full
        batch can be sampled within it.
        """
        self._backend.table_info(table)
        return SampleDataset(self, table, batch_size, prefetch, num_workers, timeout)

    # ----- priorities and tables -----

    def mutate_priorities(self, table: str,
                          updates: Mapping[int, float] | None = None,
                          deletes: Iterable[int] | None = None) -> None:
        """Delete keys, then update priorities (unknown keys are ignored)."""
        self._backend.mutate_priorities(table, updates, deletes)

    def update_priorities(self, table: str, keys: npt.ArrayLike,
                          priorities: npt.ArrayLike) -> None:
        """Vectorised priority update (unknown keys are ignored)."""
        self._backend.update_priorities(table, keys, priorities)

    def sync(self) -> None:
        """Send the priority updates this thread queued and wait until the
        server applied them (fastreplay addition; in process they already
        are)."""
        settle = getattr(self._backend, "settle", None)
        if settle is not None:
            settle()

    def reset(self, table: str) -> None:
        """Delete every item of ``table`` and reset its rate limiter."""
        self._backend.reset(table)

    def server_info(self, timeout: float | None = None) -> dict[str, TableInfo]:
        """TableInfo of every table, by name (a ``dict`` that prints one
        table a line; ``print()`` it for every table's summary).

        With a ``timeout`` (seconds; None or 0 waits no deadline) the call
        waits that long for a server that is not running yet.

        Raises
        ------
        DeadlineExceededError
            No server at the address within ``timeout``.
        UnavailableError
            No server at the address (without a timeout: after the
            reconnect window).
        """
        if (timeout and self._connector is None and self._host in _LOCAL_HOSTS
                and self._backend_found is None):
            # A server of this process may still be starting.
            deadline = time.monotonic() + timeout
            while lookup(self._port) is None and time.monotonic() < deadline:
                if _port_open(self._port):
                    break
                time.sleep(0.02)
            if lookup(self._port) is None and not _port_open(self._port):
                raise errors.DeadlineExceededError(
                    "ServerInfo call did not complete within provided "
                    f"timeout of {timeout}s")
        return ServerInfo(self._backend.info(timeout))

    def metrics(self) -> dict[str, float]:
        """The server's counters as one flat dict for loggers (TensorBoard,
        W&B): ``table/<name>/inserts``, ``table/<name>/samples``,
        ``table/<name>/rate_limiter/insert_stall_s``, ``chunk_store/stored_bytes``
        ... (``fastreplay.metrics`` lists the keys; ``fastreplay.metrics.Meter``
        adds rates).  Works for a server of another process too."""
        return self._backend.metrics()

    def checkpoint(self) -> str:
        """Write every table to the server's checkpointer; returns the path."""
        return self._backend.checkpoint()


def _rebuild(address: str, reconnect_window: float | None, token: str | None,
             connector: Callable[[float], Any] | None = None) -> Client:
    return Client(address, reconnect_window=reconnect_window, token=token,
                  connector=connector)


def _port_open(port: int) -> bool:
    """Whether something listens on loopback ``port``."""
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def _split_timesteps(sample: ReplaySample) -> list[ReplaySample]:
    data = sample.data
    lengths = {-1 if np.ndim(c) == 0 else len(c) for c in data}
    if len(lengths) != 1 or -1 in lengths:  # a squeezed column has no time axis
        raise ValueError("Can't split non timestep trajectory into timesteps.")
    (length,) = lengths
    return [ReplaySample(sample.info, [c[t] for c in data]) for t in range(length)]

