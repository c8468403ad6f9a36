"""Client and Server in different processes (issue 12, "Done when").

Every server and actor runs in a child process (``net_children.py``): in the
process of a ``Server``, ``Client('host:port')`` resolves to it directly and
nothing would cross the wire.  The test process is a remote client of a
server child.  Every wait is bounded (line reads, ``wait``, thread joins,
``server_info(timeout=...)``) and every child this module starts is killed
by its PID in a ``finally`` (the ``children`` fixture); servers also exit
when their stdin closes.  Loopback only.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import queue
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import net_children
import numpy as np
import pytest

from fastreplay import Client, errors
from fastreplay.net import wire

CHILDREN = str(Path(__file__).with_name("net_children.py"))
#: Bound on any single wait for a child (process start-up on a busy CI box).
WAIT = 60.0
K = 300


class Child:
    """A child process running one role of ``net_children``; its stdout
    lines are collected by a thread so reads can be bounded."""

    def __init__(self, started: list[Child], role: str, **args: Any) -> None:
        env = {k: v for k, v in os.environ.items() if k != "FASTREPLAY_TOKEN"}
        self.proc = subprocess.Popen(
            [sys.executable, CHILDREN, role, json.dumps(args)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.err: list[str] = []
        self.readers = [
            threading.Thread(target=self._read, daemon=True,
                             args=(self.proc.stdout, self.lines.put)),
            threading.Thread(target=self._read, daemon=True,
                             args=(self.proc.stderr, self.err.append))]
        for r in self.readers:
            r.start()
        started.append(self)  # ended by Children.end whatever happens next

    @staticmethod
    def _read(stream: Any, put: Any) -> None:
        for line in stream:
            put(line.rstrip("\n"))
        put(None)

    def expect(self, prefix: str, timeout: float = WAIT) -> str:
        """The next stdout line, which must start with ``prefix``."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            line = "<no line within the timeout>"
        if line is None or not line.startswith(prefix):
            time.sleep(0.2)  # let the stderr reader catch up
            raise AssertionError(f"child {self.proc.args[2]} said {line!r}, expected "
                                 f"{prefix!r}; stderr:\n" + self.stderr())
        return line

    def stderr(self) -> str:
        return "\n".join(map(str, self.err[-30:]))

    def reap(self) -> None:
        """Kill (when still running), wait and close the pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=WAIT)
        for r in self.readers:
            r.join(timeout=WAIT)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=WAIT)

    def stop(self) -> None:
        """Close stdin (a server then stops cleanly); kill after a bound."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def wait_done(self) -> None:
        self.expect("DONE")
        assert self.proc.wait(timeout=WAIT) == 0, self.stderr()


class Server(Child):
    def __init__(self, started: list[Child], **args: Any) -> None:
        super().__init__(started, "serve", **args)
        self.port = int(self.expect("PORT").split()[1])
        self.address = f"127.0.0.1:{self.port}"


class Children:
    """Children and clients a test starts; the fixture ends them all."""

    def __init__(self) -> None:
        self.started: list[Child] = []
        self.clients: list[Client] = []

    def client(self, address: str, **kwargs: Any) -> Client:
        c = Client(address, **kwargs)
        self.clients.append(c)
        return c

    def close_clients(self) -> None:
        for c in self.clients:
            c.close()

    def server(self, **args: Any) -> Server:
        return Server(self.started, **args)

    def start(self, role: str, **args: Any) -> Child:
        return Child(self.started, role, **args)


    def end(self) -> None:
        self.close_clients()
        for c in self.started:
            if c.proc.poll() is None:
                c.proc.kill()
        for c in self.started:
            c.reap()


@pytest.fixture
def children() -> Iterator[Children]:
    kids = Children()
    try:
        yield kids
    finally:
        kids.end()


@pytest.fixture(scope="module")
def shared() -> Iterator[Server]:
    """One server for the tests that each use tables no other test of this
    module uses on it (process start-up dominates this module's time)."""
    kids = Children()
    try:
        yield kids.server()
    finally:
        kids.end()


@pytest.fixture(scope="module")
def token_server() -> Iterator[Server]:
    kids = Children()
    try:
        yield kids.server(token="s3cret")
    finally:
        kids.end()


# ----- helpers -----


def drain_queue(client: Client, n: int) -> tuple[np.ndarray, np.ndarray]:
    """All ``n`` items of the server's queue table: (obs, a) stacked."""
    obs, acts = [], []
    got = 0
    while got < n:
        info, data = client.sample_batch("queue", n - got, timeout=WAIT)
        assert set(data) == {"obs", "a"}
        obs.append(data["obs"])
        acts.append(data["a"])
        got += len(info.key)
    with pytest.raises(errors.DeadlineExceededError):
        client.sample_batch("queue", 1, timeout=0.2)  # nothing more arrived
    return np.concatenate(obs), np.concatenate(acts)


def write(client: Client, table: str, actor: int, steps: range) -> None:
    """Items as an actor process writes them, from this process."""
    with client.trajectory_writer(1) as writer:
        for i in steps:
            writer.append(net_children.payload(actor, i))
            writer.create_item(table, 1.0, {"obs": writer.history["obs"][-1],
                                            "a": writer.history["a"][-1]})
        writer.flush()


def expected_obs(a: np.ndarray) -> np.ndarray:
    return (a.astype(np.float32)[..., None]
            + np.arange(8, dtype=np.float32) / 16).astype(np.float32)


def check_steps(obs: np.ndarray, a: np.ndarray) -> None:
    """Payloads of ``net_children.payload``: obs[..., 8] float32 matching a."""
    assert obs.dtype == np.float32 and a.dtype == np.int64
    assert obs.shape == (*a.shape, 8)
    np.testing.assert_array_equal(obs, expected_obs(a))


# ----- 1. exact delivery -----


@pytest.mark.parametrize("transport", ["same host", "tcp only"])
def test_exact_delivery_from_three_actor_processes(children: Children, transport: str,
                                                   monkeypatch: Any) -> None:
    if transport == "tcp only":  # what a client on another host or container uses
        monkeypatch.setenv("FASTREPLAY_SHM", "0")
        monkeypatch.setenv("FASTREPLAY_UNIX_SOCKET", "0")
    server = children.server()
    actors = [children.start("actor", address=server.address, actor=n, count=K,
                             tables=["queue", "uniform"]) for n in (1, 2, 3)]
    for a in actors:
        a.wait_done()
    client = children.client(server.address)
    info = client.server_info(timeout=WAIT)
    for name in ("queue", "uniform"):
        assert info[name].num_inserts == 3 * K, name
        assert info[name].current_size == 3 * K, name

    obs, a = drain_queue(client, 3 * K)
    check_steps(obs, a)
    want = sorted(n * net_children.STRIDE + i for n in (1, 2, 3) for i in range(K))
    assert sorted(a.tolist()) == want  # exactly once each, nothing else
    # Each actor's items arrive in the order it wrote them.
    for n in (1, 2, 3):
        mine = a[a // net_children.STRIDE == n]
        assert mine.tolist() == sorted(mine.tolist())

    info_u, data = client.sample_batch("uniform", 256, timeout=WAIT)
    assert len(info_u.key) == 256
    check_steps(data["obs"], data["a"])
    assert set(data["a"].tolist()) <= set(want)


# ----- 2. priorities -----


def test_priorities_across_processes(children: Children, shared: Server) -> None:
    server = shared
    client = children.client(server.address)
    for i in range(4):
        client.insert(net_children.payload(0, i), {"prio": 1.0})
    info, _ = client.sample_batch("prio", 64, timeout=WAIT)
    keys = sorted(set(info.key.tolist()))
    assert len(keys) == 4
    assert np.all(info.priority == 1.0)

    client.update_priorities("prio", keys, [1.0, 2.0, 3.0, 4.0])
    want = dict(zip(keys, [1.0, 2.0, 3.0, 4.0], strict=True))
    info, _ = client.sample_batch("prio", 64, timeout=WAIT)
    for k, p in zip(info.key.tolist(), info.priority.tolist(), strict=True):
        assert p == want[k]

    client.mutate_priorities("prio", updates={keys[0]: 5.0}, deletes=[keys[3]])
    want = {keys[0]: 5.0, keys[1]: 2.0, keys[2]: 3.0}
    assert client.server_info()["prio"].current_size == 3
    info, _ = client.sample_batch("prio", 64, timeout=WAIT)
    assert set(info.key.tolist()) <= set(want)
    for k, p in zip(info.key.tolist(), info.priority.tolist(), strict=True):
        assert p == want[k]

    # Bad priorities: the call fails naming the table, nothing changes and
    # the connection keeps working.
    with pytest.raises(errors.InvalidPriorityError, match="prio"):
        client.update_priorities("prio", [keys[1]], [float("nan")])
    with pytest.raises(errors.InvalidPriorityError, match="prio"):
        client.mutate_priorities("prio", updates={keys[2]: -1.0})
    with pytest.raises(ValueError, match="nope"):
        client.update_priorities("nope", [keys[1]], [1.0])
        # A deferred update reports its error at the thread's next call.
        client.server_info()
    info, _ = client.sample_batch("prio", 64, timeout=WAIT)
    for k, p in zip(info.key.tolist(), info.priority.tolist(), strict=True):
        assert p == want[k]
    assert client.server_info()["prio"].current_size == 3


# ----- 3. rate limits -----


def test_rate_limiter_waits_across_processes(children: Children,
                                             shared: Server) -> None:
    server = shared
    client = children.client(server.address)
    write(client, "min10", 0, range(5))
    start = time.monotonic()
    with pytest.raises(errors.DeadlineExceededError) as caught:
        client.sample_batch("min10", 1, timeout=0.5)
    elapsed = time.monotonic() - start
    # The server's rate limiter timed out, not the client's socket fallback
    # (which fires 10 s after the call's timeout).
    assert "no reply within" not in str(caught.value)
    assert elapsed < 10.0, elapsed

    # A sample blocked in the test process is released by inserts that an
    # actor process makes.
    result: list[Any] = []

    def blocked() -> None:
        try:
            result.append(client.sample_batch("min10", 4, timeout=WAIT))
        except BaseException as exc:  # noqa: BLE001 - checked below
            result.append(exc)

    t = threading.Thread(target=blocked, daemon=True)
    t.start()
    children.start("actor", address=server.address, actor=4, count=5,
                   tables=["min10"]).wait_done()
    t.join(timeout=WAIT)
    assert not t.is_alive(), "sample_batch still blocked after 10 inserts"
    (got,) = result
    assert not isinstance(got, BaseException), got
    info, data = got
    assert len(info.key) == 4
    check_steps(data["obs"], data["a"])
    assert client.server_info()["min10"].num_inserts == 10


# ----- 4. killed actor -----


def test_killed_actor_loses_only_its_unsent_items(children: Children) -> None:
    server = children.server()
    endless = children.start("endless", address=server.address, actor=5)
    normal = children.start("actor", address=server.address, actor=6, count=K,
                            tables=["uniform"])
    flushed = int(endless.expect("READY").split()[1])
    endless.kill()  # SIGKILL, mid-episode and likely mid-frame
    normal.wait_done()

    client = children.client(server.address)
    info = client.server_info(timeout=WAIT)
    assert info["uniform"].num_inserts == K
    n = info["queue"].current_size
    assert n >= flushed
    obs, a = drain_queue(client, n)
    # Every item whole: two consecutive steps of actor 5, payloads intact.
    assert a.shape == (n, 2)
    check_steps(obs, a)
    assert np.all(a[:, 1] == a[:, 0] + 1)
    assert np.all(a // net_children.STRIDE == 5)
    first = a[:, 0] - 5 * net_children.STRIDE
    assert sorted(first.tolist()) == list(range(n))  # no gap, no repeat

    # The server keeps serving: a new writer process and this client.
    write(children.client(server.address), "uniform", 7, range(10))
    write(client, "uniform", 8, range(1))
    assert client.server_info()["uniform"].num_inserts == K + 11
    _, data = client.sample_batch("uniform", 64, timeout=WAIT)
    check_steps(data["obs"], data["a"])


# ----- 5. killed server -----


def test_killed_server_raises_unavailable_within_window(children: Children) -> None:
    server = children.server()
    client = children.client(server.address, reconnect_window=1.0)
    client.insert(net_children.payload(0, 0), {"uniform": 1.0})
    writer = client.trajectory_writer(1)
    assert client.server_info()["uniform"].current_size == 1
    server.kill()

    for call in (lambda: client.server_info(),
                 lambda: client.sample_batch("uniform", 1, timeout=5.0),
                 lambda: client.update_priorities("uniform", [1], [1.0])):
        start = time.monotonic()
        with pytest.raises(errors.UnavailableError):
            call()
        elapsed = time.monotonic() - start
        assert elapsed < 1.0 + 5.0, elapsed  # the window plus slack

    start = time.monotonic()
    with pytest.raises(errors.UnavailableError):
        writer.append(net_children.payload(0, 2))
        writer.create_item("uniform", 1.0, {"obs": writer.history["obs"][-1],
                                            "a": writer.history["a"][-1]})
        writer.flush()
    assert time.monotonic() - start < 1.0 + 5.0
    writer.close()


def test_restarted_server_resumes_pending_call(children: Children) -> None:
    server = children.server()
    port = server.port
    client = children.client(server.address, reconnect_window=WAIT)
    client.insert(net_children.payload(0, 0), {"uniform": 1.0})
    writer = client.trajectory_writer(3)
    for i in range(3):
        writer.append(net_children.payload(1, i))
    writer.create_item("queue", 1.0, {"obs": writer.history["obs"][-3:],
                                      "a": writer.history["a"][-3:]})
    writer.flush()  # its chunks are in the old server only
    assert client.server_info()["uniform"].current_size == 1
    server.kill()

    result: list[Any] = []

    def call() -> None:
        try:
            result.append(client.server_info())
        except BaseException as exc:  # noqa: BLE001 - checked below
            result.append(exc)

    t = threading.Thread(target=call, daemon=True)
    t.start()  # retries while no server listens
    time.sleep(0.2)
    restarted = children.server(port=port)
    assert restarted.port == port
    t.join(timeout=WAIT)
    assert not t.is_alive(), "server_info did not resume"
    (info,) = result
    assert not isinstance(info, BaseException), info
    assert info["uniform"].current_size == 0  # the new server's tables

    # The same client (its old connection is dead) keeps writing and sampling.
    client.insert(net_children.payload(0, 1), {"uniform": 1.0})
    _, data = client.sample_batch("uniform", 1, timeout=WAIT)
    assert data["a"].tolist() == [[1]]
    # A writer of before the restart goes on: its next item spans steps
    # whose chunks only the old server had, and arrives whole.
    writer.append(net_children.payload(1, 3))
    writer.create_item("queue", 1.0, {"obs": writer.history["obs"][-3:],
                                      "a": writer.history["a"][-3:]})
    writer.flush()
    writer.close()
    obs, a = drain_queue(client, 1)
    assert a.tolist() == [[net_children.STRIDE + i for i in (1, 2, 3)]]
    check_steps(obs, a)


# ----- 6. garbage on the port -----

# The frame header as wire.py documents it: magic, version, kind, reserved,
# json_len, blob_len.
HEADER = struct.Struct("<4sBBHIQ")


def closed_by_server(payload: bytes, port: int, hello: bool = False,
                     shut_write: bool = False) -> bytes:
    """Send ``payload`` on a fresh connection (after a valid hello when
    asked); everything the server sends back until it closes.  Fails when it
    keeps the connection open for WAIT seconds."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
        if hello:
            wire.send_frame(sock, wire.KIND_CALL, {"op": "hello", "token": None,
                                                   "args": {}})
            kind, _, _ = wire.recv_frame(sock)
            assert kind == wire.KIND_REPLY
        sock.sendall(payload)
        if shut_write:
            sock.shutdown(socket.SHUT_WR)
        received = b""
        while True:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                return received
            except TimeoutError:
                raise AssertionError("the server kept a bad connection open") from None
            if not data:
                return received
            received += data


def test_garbage_closes_only_that_connection(children: Children,
                                             shared: Server) -> None:
    server = shared
    client = children.client(server.address)
    client.insert(net_children.payload(0, 0), {"uniform": 1.0})
    rng = np.random.default_rng(12)
    garbage = rng.integers(0, 256, 256, dtype=np.uint8).tobytes()
    huge_json = HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_CALL, 0,
                            0xFFFFFFFF, 0)
    huge_blob = HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_CALL, 0, 2, 1 << 62)
    bad_version = HEADER.pack(wire.MAGIC, 255, wire.KIND_CALL, 0, 2, 0) + b"{}"
    truncated = HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_CALL, 0, 100, 0)
    truncated += b'{"op": "in'
    not_json = HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_CALL, 0, 4, 0)
    not_json += b"\xff" * 4

    port = server.port
    for payload in (garbage, huge_json, huge_blob, bad_version, not_json):
        closed_by_server(payload, port)
        closed_by_server(payload, port, hello=True)
    closed_by_server(truncated, port, shut_write=True)
    closed_by_server(truncated, port, hello=True, shut_write=True)
    # An unknown call or a malformed insert after a valid hello: an error
    # frame, then the connection is closed.
    for msg in ({"op": "frobnicate", "args": {}},
                {"op": "insert", "args": {"table": "uniform", "items": [[1, 2]],
                                          "chunks": [], "forget": [],
                                          "structures": []}}):
        body = json.dumps(msg).encode()
        closed_by_server(HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_CALL, 0,
                                     len(body), 0) + body, port, hello=True)

    # The server and the earlier client's connection are unharmed.
    info = client.server_info(timeout=WAIT)
    assert info["uniform"].num_inserts == 1
    client.insert(net_children.payload(0, 1), {"uniform": 1.0})
    fresh = children.client(server.address)
    assert fresh.server_info(timeout=WAIT)["uniform"].num_inserts == 2
    _, data = fresh.sample_batch("uniform", 8, timeout=WAIT)
    check_steps(data["obs"], data["a"])


def _rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_declared_sizes_cost_nothing_before_bytes_arrive(
        children: Children, token_server: Server) -> None:
    """Regression: recv_frame allocated a declared JSON part (up to 64 MiB)
    before any of it arrived, also for a token server's hello."""
    pid = token_server.proc.pid
    header = HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_CALL, 0,
                         wire.MAX_JSON_BYTES, 0)
    before = _rss_mib(pid)
    socks = [socket.create_connection(("127.0.0.1", token_server.port), timeout=WAIT)
             for _ in range(4)]
    try:
        for sock in socks:
            sock.sendall(header)  # and nothing more
        grown = 0
        for _ in range(10):  # the server reads the headers at once
            time.sleep(0.1)
            grown = max(grown, _rss_mib(pid) - before)
        assert grown < 32, f"the server grew by {grown} MiB for 80 bytes"
    finally:
        for sock in socks:
            sock.close()


def test_wrong_token_is_refused(children: Children, token_server: Server) -> None:
    server = token_server
    for token in ("wrong", None):
        client = children.client(server.address, reconnect_window=1.0, token=token)
        with pytest.raises(errors.UnavailableError, match="token"):
            client.server_info()
        with pytest.raises(errors.UnavailableError, match="token"):
            client.insert(net_children.payload(0, 0), {"uniform": 1.0})
    good = children.client(server.address, reconnect_window=1.0, token="s3cret")
    good.insert(net_children.payload(0, 0), {"uniform": 1.0})
    assert good.server_info()["uniform"].num_inserts == 1


# ----- 7. checkpoint from a client -----


def test_checkpoint_from_client_restores_in_new_server(children: Children,
                                                       tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    server = children.server(checkpoint_root=str(root))
    client = children.client(server.address)
    with client.trajectory_writer(1) as writer:  # this process is remote too
        for i in range(100):
            writer.append(net_children.payload(9, i))
            item = {"obs": writer.history["obs"][-1], "a": writer.history["a"][-1]}
            writer.create_item("queue", 1.0, item)
            writer.create_item("uniform", 1.0, item)
        writer.flush()
    path = client.checkpoint()
    assert os.path.isdir(path)
    assert Path(path).parent == root
    server.stop()

    restored = children.server(checkpoint_root=os.path.dirname(path))
    again = children.client(restored.address)
    info = again.server_info(timeout=WAIT)
    assert info["queue"].current_size == 100
    assert info["uniform"].current_size == 100
    obs, a = drain_queue(again, 100)
    check_steps(obs, a)
    assert a.tolist() == [9 * net_children.STRIDE + i for i in range(100)]  # Fifo order
    _, data = again.sample_batch("uniform", 64, timeout=WAIT)
    check_steps(data["obs"], data["a"])


# ----- 8. pickling -----


def _run_pickled(client: Client) -> tuple[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=net_children.pickled_client_child, args=(client, out))
    proc.start()
    try:
        deadline = time.monotonic() + WAIT
        while True:
            try:
                result: tuple[str, Any] = out.get(timeout=0.2)
                break
            except queue.Empty:
                assert proc.is_alive(), f"child exited with {proc.exitcode}, no result"
                assert time.monotonic() < deadline, "child gave no result in time"
        proc.join(timeout=WAIT)
        return result
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=WAIT)


def test_pickled_client_works_in_spawned_process(children: Children,
                                                 shared: Server) -> None:
    server = shared
    client = children.client(server.address)
    assert pickle.loads(pickle.dumps(client)).server_address == server.address
    assert _run_pickled(client) == ("ok", 1)
    assert client.server_info()["queue"].num_inserts == 1


def test_pickled_client_keeps_its_token(children: Children,
                                        token_server: Server) -> None:
    """Regression: Client pickled only its address (token and
    reconnect_window were lost)."""
    server = token_server
    client = children.client(server.address, token="s3cret", reconnect_window=5.0)
    assert _run_pickled(client) == ("ok", 1)


# ----- writer flush timeouts against a full remote table -----


@pytest.mark.parametrize("shipped_by", ["flush", "outbox"])
def test_flush_timeout_on_full_remote_table_is_bounded_and_keeps_items(
        children: Children, shared: Server, shipped_by: str) -> None:
    """Regression: flush(timeout_ms) blocked without bound when the outbox
    thread had already shipped the items (its insert waiting on the server's
    rate limiter), and items the server had not inserted by the timeout were
    dropped when flush shipped them itself (in process they go in later)."""
    server = shared
    client = children.client(server.address)
    other = children.client(server.address)
    writer = client.trajectory_writer(1)
    for i in range(8):  # the 'tiny' queue holds 5
        writer.append(net_children.payload(0, i))
        writer.create_item("tiny", 1.0, {"obs": writer.history["obs"][-1],
                                         "a": writer.history["a"][-1]})
    if shipped_by == "outbox":  # wait until the outbox thread is blocked
        deadline = time.monotonic() + WAIT
        while other.server_info()["tiny"].current_size < 5:
            assert time.monotonic() < deadline, "the outbox shipped nothing"
            time.sleep(0.01)
    outcome: list[BaseException | None] = []

    def flush() -> None:
        try:
            writer.flush(timeout_ms=500)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - checked below
            outcome.append(exc)

    t = threading.Thread(target=flush, daemon=True)
    t.start()
    try:
        t.join(timeout=10.0)  # twenty times the flush timeout
        assert not t.is_alive(), "flush(timeout_ms=500) still blocked"
        (exc,) = outcome
        assert isinstance(exc, errors.DeadlineExceededError), exc
        # As in process: what did not fit is inserted once there is room.
        _, data = other.sample_batch("tiny", 5, timeout=WAIT)
        got = data["a"].tolist()
        while len(got) < 8:
            _, data = other.sample_batch("tiny", 8 - len(got), timeout=3.0)
            got += data["a"].tolist()
        assert got == list(range(8))
    finally:
        for _ in range(2):  # free the table so a blocked outbox can finish
            try:
                other.sample_batch("tiny", 5, timeout=0.5)
            except errors.DeadlineExceededError:
                pass
        t.join(timeout=WAIT)
        writer.close()
