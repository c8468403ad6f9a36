"""Table/Server/Client.metrics(): flat dicts with stable keys, also over the
network; Meter adds rates; the demo's summary comes from them."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from fastreplay import Client, Server, Table
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay.demo import TABLE, DemoConfig, summarize
from fastreplay.metrics import RATE_COUNTERS, Meter
from fastreplay.net.remote import RemoteBackend

TABLE_KEYS = {
    "size", "max_size", "fill", "episodes", "deleted_episodes", "inserts",
    "samples", "unique_samples", "updates", "deletes", "evictions", "expired",
    "rate_limiter/insert_stalls", "rate_limiter/insert_stall_s",
    "rate_limiter/sample_stalls", "rate_limiter/sample_stall_s",
}
STORE_KEYS = {"chunk_store/live_chunks", "chunk_store/stored_bytes",
              "chunk_store/raw_bytes", "chunk_store/compression_ratio"}


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server([
        Table("a", sel.Prioritized(1.0), sel.Fifo(), 4, rl.MinSize(1), seed=1),
        Table("b", sel.Uniform(), sel.Fifo(), 100, rl.MinSize(1), seed=2),
    ])
    try:
        yield srv
    finally:
        srv.stop()


def fill(client: Client) -> None:
    with client.trajectory_writer(2) as w:
        for i in range(6):
            w.append({"obs": np.full(64, i, np.float32)})
            w.create_item("a", 1.0, {"obs": w.history["obs"][-1:]})
        w.end_episode()
    client.sample_batch("a", 3)
    client.update_priorities("a", np.array([1, 2], np.uint64), np.array([2.0, 3.0]))


def test_table_metrics_keys_and_values(server: Server) -> None:
    fill(server.localhost_client())
    m = server.tables["a"].metrics()
    assert set(m) == {f"table/a/{k}" for k in TABLE_KEYS}
    assert m["table/a/size"] == 4 and m["table/a/max_size"] == 4
    assert m["table/a/fill"] == 1.0
    assert m["table/a/inserts"] == 6 and m["table/a/evictions"] == 2
    assert m["table/a/samples"] == 3 and m["table/a/episodes"] == 1
    assert all(isinstance(v, (int, float)) and not isinstance(v, bool)
               for v in m.values())


@pytest.mark.parametrize("remote", [False, True])
def test_server_and_client_metrics_agree(server: Server, remote: bool) -> None:
    client = Client(f"localhost:{server.port}")
    if remote:
        client._backend_found = RemoteBackend("127.0.0.1", server.port)
    fill(client)
    client.server_info()  # the remote updates above are sent by now
    m = client.metrics()
    assert m == server.metrics()
    assert set(m) == ({f"table/{t}/{k}" for t in "ab" for k in TABLE_KEYS}
                      | STORE_KEYS)
    assert m["chunk_store/raw_bytes"] >= 4 * 64 * 4
    assert m["chunk_store/compression_ratio"] > 0
    json.dumps(m)  # a logger can take it as is
    client.close()


def test_meter_rates_between_polls(server: Server) -> None:
    now = [100.0]
    client = server.localhost_client()
    meter = Meter(client, interval=10.0, clock=lambda: now[0])
    assert not meter.due()
    fill(client)
    now[0] += 2.0
    first = meter.poll()
    assert first["table/a/inserts_per_s"] == 3.0  # 6 inserts in 2 s
    assert first["table/a/samples_per_s"] == 1.5
    assert first["table/b/inserts_per_s"] == 0.0
    assert {k for k in first if k.endswith("_per_s")} == {
        f"table/{t}/{c}_per_s" for t in "ab" for c in RATE_COUNTERS}
    assert not meter.due()
    now[0] += 10.0
    assert meter.due()
    client.reset("a")  # counters start over: no negative rate
    assert meter.poll()["table/a/inserts_per_s"] == 0.0


def test_meter_takes_a_function(server: Server) -> None:
    values = {"x/inserts": 1.0}
    now = [0.0]
    meter = Meter(lambda: values, clock=lambda: now[0])
    values = {"x/inserts": 5.0}
    now[0] = 4.0
    assert meter.poll() == {"x/inserts": 5.0, "x/inserts_per_s": 1.0}
    with pytest.raises(ValueError, match="interval"):
        Meter(server, interval=0)


def test_demo_summary_comes_from_the_metrics(server: Server) -> None:
    t = f"table/{TABLE}/"
    metrics = {t + k: 0 for k in TABLE_KEYS}
    metrics.update({t + "inserts": 50, t + "size": 40, t + "evictions": 10,
                    t + "rate_limiter/insert_stall_s": 1.5,
                    t + "rate_limiter/sample_stalls": 7,
                    "chunk_store/stored_bytes": 1000, "chunk_store/raw_bytes": 4000,
                    "chunk_store/compression_ratio": 4.0,
                    "chunk_store/live_chunks": 3})
    s = summarize(DemoConfig(obs_shape=(4,)), 10.0, metrics, steps=100,
                  items_created=60, actor_wait_s=0.5, batches=2, samples=20,
                  priority_updates=20, peak_rss_bytes=1 << 20)
    assert s["items_inserted"] == 50 and s["items_per_s"] == 5.0
    assert s["table_size"] == 40 and s["evictions"] == 10
    assert s["compression_ratio"] == 4.0 and s["stored_bytes"] == 1000
    assert s["insert_stall_s"] == 1.5 and s["sample_stalls"] == 7


def test_every_reports_from_a_thread_until_closed(server: Server) -> None:
    got: list[dict[str, float]] = []
    twice = threading.Event()

    def log(m: dict[str, float]) -> None:
        got.append(m)
        if len(got) >= 2:
            twice.set()

    with Meter(server).every(0.01, log):
        assert twice.wait(10.0)
    count = len(got)
    assert not any(t.name == "fastreplay-metrics" for t in threading.enumerate())
    assert len(got) == count and "table/a/inserts_per_s" in got[0]


def test_every_raises_the_callbacks_error_on_close(server: Server) -> None:
    def bad(m: dict[str, float]) -> None:
        raise KeyError("logger broke")

    reporter = Meter(server).every(0.01, bad)
    deadline = 100
    while reporter._state.error is None and deadline:  # bounded: 100 x 0.05 s
        deadline -= 1
        reporter._thread.join(0.05)
    with pytest.raises(KeyError, match="logger broke"):
        reporter.close()
    reporter.close()  # once


def test_a_dropped_reporter_stops_its_thread(server: Server) -> None:
    import gc

    reporter = Meter(server).every(0.01, lambda m: None)
    thread = reporter._thread
    del reporter
    gc.collect()
    thread.join(10.0)
    assert not thread.is_alive()
    with pytest.raises(ValueError, match="seconds"):
        Meter(server).every(0, print)

