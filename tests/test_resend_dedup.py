"""A writer's message delivered twice (a resend after a lost reply, on a new
connection) never lands twice: items carry their keys, and inserting a key
the table holds assigns its priority (Reverb's semantics), so the second
copy changes nothing.  The transport is the bytes-fed one Ray calls use."""

from __future__ import annotations

from typing import Any

import numpy as np

import fastreplay as reverb


class _Recorder:
    """A socket-like connection to ``server`` (through ``Server.session``)
    that records every byte the client sends."""

    def __init__(self, server: reverb.Server, log: list[bytes]) -> None:
        self._session = server.session()
        self._log = log
        self._out = bytearray()
        self._timeout: float | None = None

    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout

    def gettimeout(self) -> float | None:
        return self._timeout

    def sendall(self, data: Any) -> None:
        raw = bytes(data)
        self._log.append(raw)
        self._out += self._session.feed(raw)

    def recv_into(self, buffer: Any, nbytes: int = 0) -> int:
        view = memoryview(buffer)
        n = min(len(self._out), nbytes or len(view))
        view[:n] = self._out[:n]
        del self._out[:n]
        return n

    def close(self) -> None:
        pass


def _table() -> reverb.Table:
    return reverb.Table("t", reverb.selectors.Prioritized(0.8), reverb.selectors.Fifo(),
                        100, reverb.rate_limiters.MinSize(1))


def test_a_resent_flush_does_not_insert_twice() -> None:
    server = reverb.Server([_table()], key_prefix=7)
    try:
        logs: list[list[bytes]] = []  # what each connection sent

        def connect(timeout: float) -> _Recorder:
            logs.append([])
            return _Recorder(server, logs[-1])

        client = reverb.Client(f"127.0.0.1:{server.port}", connector=connect)
        with client.trajectory_writer(1) as w:
            for i in range(5):
                w.append({"x": np.float32(i)})
                w.create_item("t", 1.0 + i, {"x": w.history["x"][-1]})
        table = server.tables["t"]
        before = table.info
        assert before.current_size == 5 and before.num_inserts == 5
        keys = set(table.items()["key"].tolist())
        # Each connection's bytes again, each on a new connection: hello,
        # chunks, items.
        for log in logs:
            reply = server.session().feed(b"".join(log))
            assert b'"error"' not in reply, reply[-500:]
        after = table.info
        assert after.current_size == 5 and after.num_inserts == 5
        assert after.num_updates == before.num_updates + 5  # same keys: assigned
        assert set(table.items()["key"].tolist()) == keys
        assert len(keys) == 5 and all(int(k) >> 56 == 7 for k in keys)
    finally:
        server.stop()
