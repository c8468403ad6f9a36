"""Same-host clients over the server's abstract Unix socket
(``wire.local_socket_name``, ``service._local_listener``,
``RemoteBackend._open``): used on Linux unless ``FASTREPLAY_UNIX_SOCKET=0``;
a foreign socket under the name is not used (TCP instead) and a server
whose name is taken still serves over TCP."""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from fastreplay import Client, Server, Table
from fastreplay.net import wire
from fastreplay.net.remote import RemoteBackend

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="abstract Unix sockets are Linux's")
WAIT = 10.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def family_of(backend: RemoteBackend) -> int:
    """The family of the calling thread's connection."""
    return int(backend._local.conn.sock.family)


def check_serves(backend: RemoteBackend, server: Server, table: str = "q") -> None:
    local = Client(f"localhost:{server.port}")
    local.insert({"x": np.int64(41)}, {table: 1.0})
    info, cols, _ = backend.sample_batch(table, 1, WAIT)
    assert cols[0].reshape(-1).tolist() == [41]
    backend.update_priorities(table, info.key, [1.0])
    assert backend.info()[table].num_samples >= 1


class Impostor:
    """A Unix listener under a server's name that answers every hello with
    ``port`` (or closes at once when ``port`` is None)."""

    def __init__(self, name: str, port: int | None) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(name)
        self.sock.listen(16)
        self.port = port
        self.hellos = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(WAIT)
                try:
                    if self.port is None:
                        continue
                    wire.recv_frame(conn)
                    self.hellos += 1
                    wire.send_frame(conn, wire.KIND_REPLY, {"result": {
                        "tables": ["q"], "version": wire.VERSION, "port": self.port}})
                    wire.recv_frame(conn)  # the client hangs up
                except (OSError, wire.FrameError):
                    pass

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(WAIT)


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server([Table.queue("q", 10)])
    try:
        yield srv
    finally:
        srv.stop()


def test_same_host_connection_is_a_unix_socket(server: Server) -> None:
    for host in ("127.0.0.1", "localhost"):
        be = RemoteBackend(host, server.port)
        try:
            check_serves(be, server)
            assert family_of(be) == socket.AF_UNIX
        finally:
            be.close()


def test_unix_socket_off_gives_tcp(server: Server, monkeypatch: pytest.MonkeyPatch
                                   ) -> None:
    monkeypatch.setenv("FASTREPLAY_UNIX_SOCKET", "0")
    assert wire.local_socket_name(server.port) is None
    be = RemoteBackend("127.0.0.1", server.port)
    try:
        check_serves(be, server)
        assert family_of(be) == socket.AF_INET
    finally:
        be.close()


def test_server_started_with_unix_socket_off_serves_tcp(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTREPLAY_UNIX_SOCKET", "0")
    srv = Server([Table.queue("q", 10)])
    monkeypatch.delenv("FASTREPLAY_UNIX_SOCKET")
    be = RemoteBackend("127.0.0.1", srv.port)
    try:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with pytest.raises(OSError):
            probe.connect(wire.local_socket_name(srv.port))  # nobody there
        probe.close()
        check_serves(be, srv)
        assert family_of(be) == socket.AF_INET
    finally:
        be.close()
        srv.stop()


@pytest.mark.parametrize("answer", ["other-port", "hang-up"])
def test_taken_name_server_serves_tcp_and_client_falls_back(answer: str) -> None:
    """The name of the server's port is taken before it starts: the server
    skips its Unix socket, and a client that reaches the impostor uses TCP."""
    port = free_port()
    name = wire.local_socket_name(port)
    assert name is not None
    impostor = Impostor(name, port + 1 if answer == "other-port" else None)
    try:
        srv = Server([Table.queue("q", 10)], port=port)
        be = RemoteBackend("127.0.0.1", port, reconnect_window=1.0)
        try:
            check_serves(be, srv)
            assert family_of(be) == socket.AF_INET
        finally:
            be.close()
            srv.stop()
    finally:
        impostor.close()


def test_server_of_another_loopback_address_is_not_reached() -> None:
    port = free_port()
    first = Server([Table.queue("on_127_0_0_2", 10)], port=port, host="127.0.0.2")
    second = Server([Table.queue("on_127_0_0_1", 10)], port=port, host="127.0.0.1")
    be = RemoteBackend("127.0.0.1", port)
    try:
        assert sorted(be.info()) == ["on_127_0_0_1"]
    finally:
        be.close()
        second.stop()
        first.stop()


def test_server_releases_its_name_on_stop() -> None:
    srv = Server([Table.queue("q", 10)])
    port = srv.port
    srv.stop()
    name = wire.local_socket_name(port)
    assert name is not None
    again = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        again.bind(name)  # free again
    finally:
        again.close()


def test_each_thread_has_its_own_unix_connection(server: Server) -> None:
    be = RemoteBackend("127.0.0.1", server.port)
    families: list[int] = []
    socks: list[object] = []

    def work() -> None:
        be.info()
        families.append(family_of(be))
        socks.append(be._local.conn.sock)

    try:
        threads = [threading.Thread(target=work) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
        assert not any(t.is_alive() for t in threads)
        assert families == [socket.AF_UNIX] * 3
        assert len({id(s) for s in socks}) == 3
    finally:
        be.close()
