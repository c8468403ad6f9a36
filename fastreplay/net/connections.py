"""How ``RemoteBackend`` holds its connections (a base class of it): one
per calling thread, opened with a hello (the server's Unix socket on its
host, else TCP, or the Ray link's connector), closed when its thread ends;
and the connection of a channel (the outbox's) that any thread may work
``through`` for a while, so that one client's frames reach the server in
order on one connection whichever thread sends them."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from fastreplay import errors
from fastreplay.net import wire
from fastreplay.net.conn import Conn, deliver

if TYPE_CHECKING:
    from fastreplay.table import Table

__all__ = ["Connections", "RefusedError"]


class RefusedError(errors.UnavailableError):
    """The server refused the connection (a wrong or missing token)."""


class Connections:
    """The connections of ``RemoteBackend`` (a base class of it)."""

    if TYPE_CHECKING:  # RemoteBackend's, used here
        _host: str
        _port: int
        _token: str | None
        _window: float
        _local: threading.local
        _lock: threading.Lock
        _conns: list[Conn]
        _gone: list[Conn]
        _staging: dict[str, Table] | None
        _key_prefix: int | None
        _connector: Callable[[float], Any] | None
        _same_host: bool

        def _ship_ops(self, conn: Conn) -> None: ...

    def _open(self, deadline: float, local: bool) -> socket.socket | None:
        """A connection that said hello: through the connector when there is
        one, else the server's Unix socket (``local``; None when there is
        none) or TCP."""
        wait = max(0.05, min(5.0, deadline - time.monotonic()))
        sock: socket.socket
        if self._connector is not None:
            sock = self._connector(wait)
        elif local:
            name = wire.local_socket_name(self._port)
            if name is None:
                return None
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(wait)
                sock.connect(name)
            except OSError:
                sock.close()
                return None
        else:
            sock = socket.create_connection((self._host, self._port), timeout=wait)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        try:
            sock.settimeout(max(1.0, deadline - time.monotonic()) + 5.0)
            wire.send_frame(sock, wire.KIND_CALL,
                            {"op": "hello", "token": self._token, "args": {}})
            kind, msg, _ = wire.recv_frame(sock)
            sock.settimeout(None)
        except (OSError, wire.FrameError):
            sock.close()
            if local:
                return None  # not a server that answers: TCP then
            raise
        except BaseException:
            sock.close()
            raise
        if kind == wire.KIND_ERROR:
            sock.close()
            raise RefusedError(str(msg.get("message")))
        result = msg.get("result")
        if local and not (isinstance(result, dict) and result.get("port") == self._port
                          and result.get("host") in (self._host, "0.0.0.0", "::")):
            sock.close()  # another server's socket (one on another loopback address)
            return None
        self._adopt_key_prefix(result)
        return sock

    def _adopt_key_prefix(self, hello: Any) -> None:
        """Take the server's item key prefix from its hello (None from a
        server without one): the staging queues' writers draw keys with it,
        as the server's own writers do."""
        prefix = hello.get("key_prefix") if isinstance(hello, dict) else None
        if type(prefix) is not int or not 0 <= prefix <= 255:
            prefix = None
        with self._lock:  # staging() builds the queues under it
            self._key_prefix = prefix
            for table in (self._staging or {}).values():
                table._set_key_prefix(prefix)

    def _connect(self, deadline: float, per_thread: bool = True) -> Conn:
        self._reap()
        delay = 0.01
        while True:
            try:
                sock = self._open(deadline, True) if self._same_host else None
                if sock is None:
                    sock = self._open(deadline, False)
                    assert sock is not None
                conn = Conn(sock)
                with self._lock:
                    self._conns.append(conn)
                # A thread's connection closes once the thread is gone (a
                # dataset's worker, say): threads that come and go would
                # otherwise each leave one open, with a Ray link's session.
                if per_thread:
                    weakref.finalize(threading.current_thread(), _thread_gone,
                                     weakref.ref(self), conn)
                return conn
            except (OSError, wire.FrameError) as exc:
                if isinstance(exc, errors.ReverbError):
                    raise
                left = deadline - time.monotonic()
                if left <= 0:
                    raise errors.UnavailableError(
                        f"No fastreplay server at {self._host}:{self._port} "
                        f"({exc}); retried for {self._window:g} s "
                        "(reconnect_window)") from None
                time.sleep(min(delay, left))
                delay = min(delay * 2, 0.5)

    def _reap(self) -> None:
        """Close the connections of threads that ended, after sending what
        they queued and reading what they are owed."""
        while self._gone:
            conn = self._gone.pop()
            with self._lock:
                if conn not in self._conns:
                    continue  # dropped or closed meanwhile
                self._conns.remove(conn)
            deliver(conn, self._ship_ops)
            conn.close()

    def _chan(self) -> Any:
        """Where the calling thread's connection is kept: in the thread
        (its own), or the channel it works ``through`` for now."""
        return getattr(self._local, "through", None) or self._local

    @contextlib.contextmanager
    def through(self, chan: Any) -> Iterator[None]:
        """The calling thread's calls go through the connection kept in
        ``chan`` (an object with a ``conn`` attribute) meanwhile: the
        outbox's, which any thread shipping staged items uses, so that the
        server gets a client's frames in order on one connection."""
        self._local.through = chan
        try:
            yield
        finally:
            self._local.through = None

    def _conn(self, deadline: float) -> Conn:
        chan = self._chan()
        conn: Conn | None = getattr(chan, "conn", None)
        if conn is None:
            conn = chan.conn = self._connect(deadline, chan is self._local)
        return conn

    def _drop(self, conn: Conn) -> None:
        conn.close()
        with self._lock:
            if conn in self._conns:
                self._conns.remove(conn)
        chan = self._chan()
        if getattr(chan, "conn", None) is conn:
            chan.conn = None


def _thread_gone(ref: weakref.ref[Connections], conn: Conn) -> None:
    backend = ref()
    if backend is not None:
        backend._gone.append(conn)
