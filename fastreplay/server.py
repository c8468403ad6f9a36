"""``Server``: holds tables in this process (Reverb's ``reverb.Server``).

A server listens on a TCP port (loopback unless ``host=`` or
``FASTREPLAY_HOST`` says otherwise), so Reverb code that connects with
``Client(f'localhost:{server.port}')`` works unchanged: in this process the
address resolves to the server directly, with no serialization; from other
processes and machines calls go over the port (``fastreplay.net``).
"""

from __future__ import annotations

import operator
import os
import socket
import threading
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, SupportsIndex

from fastreplay import _core
from fastreplay.table import Table

if TYPE_CHECKING:
    from fastreplay.client import Client
    from fastreplay.net.service import Session

__all__ = ["Server"]

_SERVERS: weakref.WeakValueDictionary[int, Server] = weakref.WeakValueDictionary()
_LOCK = threading.Lock()


def _reserve_port(host: str, port: int | None) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port or 0))
    except OSError:
        sock.close()
        raise
    return sock


def _check_key_prefix(key_prefix: object) -> int | None:
    """``Server``'s key_prefix as an int in [0, 255] or None; ValueError
    naming the argument otherwise."""
    if key_prefix is None:
        return None
    value = None
    if isinstance(key_prefix, SupportsIndex) and not isinstance(key_prefix, bool):
        value = operator.index(key_prefix)
    if value is None or not 0 <= value <= 255:
        raise ValueError(f"key_prefix must be None or an int in [0, 255] (the top "
                         f"8 bits of item keys), got {key_prefix!r}")
    return value


def lookup(port: int) -> Server | None:
    """The running server of this process on ``port``, if any."""
    with _LOCK:
        return _SERVERS.get(port)


class Server:
    """Tables served in this process.

    ``stop()`` (or leaving a ``with Server(...)`` block) closes the tables
    and the port; so does dropping the last reference to the server (a
    ``Client`` of this process made for it, e.g. ``localhost_client()``,
    keeps it alive).

    Parameters
    ----------
    tables : iterable of Table
        At least one, with distinct names.
    port : int, optional
        Port to listen on; a free one is picked when None.
    checkpointer : CheckpointerBase, optional
        Where ``client.checkpoint()`` writes, and from where this server
        restores its tables at start-up (a temporary directory is used for
        checkpoints when None).
    host : str, optional
        Interface to listen on: ``FASTREPLAY_HOST`` or else ``127.0.0.1``
        (loopback: other processes of this machine only).  ``'0.0.0.0'``
        accepts other machines.
    token : str, optional
        A shared secret clients must present (``FASTREPLAY_TOKEN`` by
        default); connections without it are refused.
    key_prefix : int, optional
        An int in [0, 255] (fastreplay addition): every item key made for
        this server's tables, by writers in this process and by remote
        clients' writers alike, then has it in its top 8 bits
        (``key >> 56 == key_prefix``) and 56 random bits below.  A sharded
        server gives each shard its index, so a key names its shard.  None
        (the default): all 64 bits random.  Keys restored from a checkpoint
        stay as they were saved.

    Raises
    ------
    ValueError
        No tables, two with the same name, or a ``key_prefix`` that is not
        an int in [0, 255].
    """

    def __init__(self, tables: Iterable[Table], port: int | None = None,
                 checkpointer: Any = None, host: str | None = None,
                 token: str | None = None, key_prefix: int | None = None) -> None:
        key_prefix = _check_key_prefix(key_prefix)
        tables = list(tables)
        if not tables:
            raise ValueError("At least one table must be provided")
        for i, t in enumerate(tables):
            if not isinstance(t, Table):
                raise TypeError(
                    f"Server tables must be fastreplay.Table objects, but entry {i} "
                    f"is {type(t).__name__} {t!r}: build it with e.g. "
                    "Table('name', selectors.Uniform(), selectors.Fifo(), 1000, "
                    "rate_limiters.MinSize(1)) or Table.queue('name', 1000).")
        names = [t.name for t in tables]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(
                f"Multiple items in tables have the same name: {', '.join(duplicates)}"
            )
        self._tables = {t.name: t for t in tables}
        self._key_prefix = key_prefix
        if key_prefix is not None:
            for t in tables:
                t._set_key_prefix(key_prefix)
        self._store = _core.ChunkStore()
        self._checkpointer = checkpointer
        if checkpointer is not None:
            checkpointer.restore(self._tables, self._store)
        self._host = host or os.environ.get("FASTREPLAY_HOST") or "127.0.0.1"
        if token is None:
            token = os.environ.get("FASTREPLAY_TOKEN") or None
        self._socket = _reserve_port(self._host, port)
        self._port = int(self._socket.getsockname()[1])
        self._stopped = threading.Event()
        with _LOCK:
            _SERVERS[self._port] = self
        from fastreplay.net.service import Service

        self._service = Service(self, self._socket, token)

    @property
    def port(self) -> int:
        return self._port

    @property
    def host(self) -> str:
        return self._host

    @property
    def key_prefix(self) -> int | None:
        """The top 8 bits of the item keys made for this server's tables
        (``Server(key_prefix=...)``), or None."""
        return self._key_prefix

    @property
    def tables(self) -> dict[str, Table]:
        return dict(self._tables)

    @property
    def chunk_store(self) -> _core.ChunkStore:
        """Accounting of every chunk written through this server's clients."""
        return self._store

    @property
    def checkpointer(self) -> Any:
        return self._checkpointer

    def _checkpointer_for_save(self) -> Any:
        """The checkpointer; without one, a temporary directory is made on the
        first checkpoint (Reverb's default TempDirCheckpointer)."""
        if self._checkpointer is None:
            from fastreplay.checkpointers import TempDirCheckpointer

            self._checkpointer = TempDirCheckpointer()
        return self._checkpointer

    def checkpoint(self) -> str:
        """Write every table to the checkpointer; returns the path."""
        return str(self._checkpointer_for_save().save(self._tables, self._store))

    def metrics(self) -> dict[str, float]:
        """Every table's counters and the chunk store's bytes as one flat
        dict for loggers (``table/<name>/inserts``, ``chunk_store/stored_bytes``
        ...; ``fastreplay.metrics`` lists the keys)."""
        from fastreplay.metrics import chunk_store_metrics

        out: dict[str, float] = {}
        for table in self._tables.values():
            out.update(table.metrics())
        out.update(chunk_store_metrics(self._store.stats()))
        return out

    def session(self) -> Session:
        """A virtual connection to this server whose protocol frames come as
        bytes through another transport (``Session.feed``), e.g. Ray actor
        calls (``fastreplay.ray``): it serves them as a socket connection."""
        return self._service.session()

    def localhost_client(self) -> Client:
        from fastreplay.client import Client

        return Client(f"localhost:{self._port}")

    def stop(self) -> None:
        """Stop serving: close every table (waiting calls raise) and release
        the port.  Idempotent."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        with _LOCK:
            if _SERVERS.get(self._port) is self:
                del _SERVERS[self._port]
        for table in self._tables.values():
            table.close()
        self._service.close()

    def wait(self) -> None:
        """Block until ``stop`` is called (Ctrl-C raises KeyboardInterrupt)."""
        while not self._stopped.wait(0.5):
            pass

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __del__(self) -> None:
        try:
            self.stop()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __repr__(self) -> str:
        return f"Server(port={self._port}, tables={sorted(self._tables)})"
