"""TableInfo and server_info print readably, and keep Reverb's fields."""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import numpy as np
import pytest

from fastreplay import Client, Server, Table, TableInfo
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay.reverb_types import ServerInfo
from fastreplay.structured_writer import TensorSpec


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server([
        Table("replay", sel.Prioritized(0.6), sel.Fifo(), 100_000,
              rl.SampleToInsertRatio(4.0, 1000, 100.0), seed=1,
              signature={"obs": TensorSpec((84, 84, 4), np.dtype(np.uint8), "obs"),
                         "extras": [TensorSpec((i,), np.dtype(np.float32), f"e{i}")
                                    for i in range(1, 12)]}),
        Table.queue("q", 10),
        Table("u", sel.Uniform(), sel.Fifo(), 50, rl.MinSize(1), max_times_sampled=3,
              seed=2),
    ])
    client = srv.localhost_client()
    for i in range(5):
        client.insert({"x": np.int64(i)}, {"u": 1.0})
    client.sample_batch("u", 4)
    try:
        yield srv
    finally:
        srv.stop()


def test_repr_is_one_short_line_with_the_essentials(server: Server) -> None:
    info = server.tables["u"].info
    text = repr(info)
    assert "\n" not in text and len(text) < 250
    for part in ("name='u'", "current_size=5", "max_size=50", "sampler='uniform'",
                 "remover='fifo'", "rate_limiter='min_size:1'", "num_inserts=5",
                 "num_samples=4"):
        assert part in text, (part, text)
    assert text.startswith("TableInfo(") and text.endswith(")")


def test_repr_of_a_prioritized_table_with_a_ratio_limiter(server: Server) -> None:
    text = repr(server.tables["replay"].info)
    assert "sampler='prioritized:0.6'" in text
    assert "samples_per_insert=4" in text and "min_size=1000" in text
    assert len(text) < 250


def test_str_is_a_multi_line_summary(server: Server) -> None:
    text = str(server.tables["u"].info)
    lines = text.splitlines()
    assert lines[0] == "TableInfo 'u'"
    assert len(lines) >= 10 and all(len(line) <= 100 for line in lines)
    body = "\n".join(lines[1:])
    for part in ("5 / 50 items", "uniform", "fifo", "min_size:1",
                 "max_times_sampled", "3", "compression", "auto"):
        assert part in body, (part, text)
    samples = next(line for line in lines if line.startswith("  samples "))
    assert "4" in samples and "unique" in samples


def test_str_shortens_a_large_signature(server: Server) -> None:
    text = str(server.tables["replay"].info)
    sig = next(line for line in text.splitlines() if "signature" in line)
    assert "{'obs': uint8[84, 84, 4], 'extras': [float32[1], float32[2]" in sig
    assert len(sig) < 140 and sig.rstrip().endswith("...")


def test_fields_stay_reverbs(server: Server) -> None:
    info = server.tables["q"].info
    assert info.name == "q" and info.max_size == 10 and info.current_size == 0
    assert info.sampler_options.fifo and info.remover_options.fifo
    assert info.rate_limiter_info.max_diff == 10
    assert "fifo: true" in str(info.sampler_options)  # protobuf text format
    assert pickle.loads(pickle.dumps(info)) == info


@pytest.mark.parametrize("remote", [False, True])
def test_server_info_prints_one_table_a_line(server: Server, remote: bool) -> None:
    client = Client(f"localhost:{server.port}")
    if remote:
        from fastreplay.net.remote import RemoteBackend

        client._backend_found = RemoteBackend("127.0.0.1", server.port)
    infos = client.server_info()
    assert isinstance(infos, dict) and isinstance(infos, ServerInfo)
    assert sorted(infos) == ["q", "replay", "u"]
    assert all(isinstance(v, TableInfo) for v in infos.values())
    lines = repr(infos).splitlines()
    assert len(lines) == 3 and all(len(line) < 260 for line in lines)
    assert lines[0].startswith("{'replay': TableInfo(name='replay'")
    assert lines[-1].endswith(")}")
    printed = str(infos)
    assert printed.count("TableInfo '") == 3
    assert dict(infos) == {k: v for k, v in infos.items()}
    assert pickle.loads(pickle.dumps(infos)) == infos
    client.close()


def test_empty_server_info_repr() -> None:
    assert repr(ServerInfo()) == "{}" and str(ServerInfo()) == ""
