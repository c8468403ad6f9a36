"""Checkpoints: round trip of items, priorities, times_sampled, Fifo/Lifo
order, rate-limiter counters and data; corrupt, truncated, mismatched and
foreign checkpoints are rejected and load nothing."""

from __future__ import annotations

import json
import os
import pathlib

import numpy as np
import pytest
from checkpoint_forge import save_manifest

import fastreplay as reverb
from fastreplay import errors
from fastreplay.checkpointers import DefaultCheckpointer


def make_tables(sampler: str = "prioritized") -> list[reverb.Table]:
    selector = (reverb.selectors.Prioritized(0.5) if sampler == "prioritized"
                else reverb.selectors.Uniform())
    return [
        reverb.Table("data", selector, reverb.selectors.Fifo(), 50,
                     reverb.rate_limiters.SampleToInsertRatio(2.0, 1, 100.0), seed=1),
        reverb.Table("fifo", reverb.selectors.Fifo(), reverb.selectors.Fifo(), 10,
                     reverb.rate_limiters.MinSize(1), max_times_sampled=3),
        reverb.Table("lifo", reverb.selectors.Lifo(), reverb.selectors.Lifo(), 10,
                     reverb.rate_limiters.MinSize(1)),
    ]


def fill(server: reverb.Server) -> None:
    client = server.localhost_client()
    writer = client.trajectory_writer(4)
    for i in range(30):
        writer.append({"frame": np.full((20, 20), i, np.uint8), "step": i,
                       "reward": float(i) / 2})
        if writer.episode_steps >= 3:
            h = writer.history
            writer.create_item("data", 1.0 + i, {"frame": h["frame"][-3:],
                                                 "step": h["step"][-1]})
        if i % 5 == 0:
            writer.create_item("fifo", 1.0, {"step": h["step"][-1:]} if i else
                               {"step": writer.history["step"][-1:]})
            writer.create_item("lifo", 1.0, {"reward": writer.history["reward"][-1]})
        if i == 14:
            writer.end_episode()
    writer.flush()
    server.tables["lifo"].insert(10**12, 7.0)  # an item without data
    list(client.sample("data", 5, emit_timesteps=False))
    list(client.sample("fifo", 2, emit_timesteps=False))


def snapshot(server: reverb.Server) -> dict[str, object]:
    out: dict[str, object] = {}
    for name, table in server.tables.items():
        items = table.items()
        info = table.info
        out[name] = (
            items[["key", "priority", "times_sampled"]].tolist(),
            info.rate_limiter_info.insert_stats.completed,
            info.rate_limiter_info.sample_stats.completed,
            info.rate_limiter_info.deletes,
            info.num_unique_samples,
        )
    return out


def test_round_trip_restores_items_order_and_data(tmp_path) -> None:
    server = reverb.Server(make_tables(),
                           checkpointer=DefaultCheckpointer(str(tmp_path)))
    fill(server)
    before = snapshot(server)
    path = server.localhost_client().checkpoint()
    assert os.path.isdir(path) and os.path.dirname(path) == str(tmp_path)
    server.stop()

    restored = reverb.Server(make_tables(),
                             checkpointer=DefaultCheckpointer(str(tmp_path)))
    assert snapshot(restored) == before  # keys in order, priorities, counts
    client = restored.localhost_client()
    # Fifo order: the oldest item first; Lifo: the newest (the dataless one).
    fifo_first = next(client.sample("fifo", 1, emit_timesteps=False))
    assert fifo_first.info.key == before["fifo"][0][0][0]
    assert restored.tables["lifo"].sample(1).key[0] == 10**12
    # Item data: step s holds frames of steps s-2, s-1, s.
    for s in restored.tables["data"].sample_items(20, timeout=1):
        frame, step = s.data
        assert [int(f[0, 0]) for f in frame] == [int(step) - 2, int(step) - 1,
                                                 int(step)]


def test_counters_of_the_checkpoint_are_restored(tmp_path) -> None:
    server = reverb.Server(make_tables(),
                           checkpointer=DefaultCheckpointer(str(tmp_path)))
    fill(server)
    before = snapshot(server)
    server.localhost_client().checkpoint()
    server.stop()
    restored = reverb.Server(make_tables(),
                             checkpointer=DefaultCheckpointer(str(tmp_path)))
    assert snapshot(restored) == before


def test_only_the_latest_complete_checkpoint_is_kept(tmp_path) -> None:
    server = reverb.Server(make_tables(),
                           checkpointer=DefaultCheckpointer(str(tmp_path)))
    fill(server)
    client = server.localhost_client()
    first = client.checkpoint()
    second = client.checkpoint()
    assert first != second and not os.path.exists(first)
    assert os.listdir(tmp_path) == [os.path.basename(second)]


def test_checkpoint_without_checkpointer_uses_a_temporary_directory() -> None:
    server = reverb.Server(make_tables())
    fill(server)
    path = server.localhost_client().checkpoint()
    assert os.path.isfile(os.path.join(path, "manifest.json"))
    assert os.path.isfile(os.path.join(path, "manifest.crc"))


def _saved(tmp_path) -> str:
    server = reverb.Server(make_tables(),
                           checkpointer=DefaultCheckpointer(str(tmp_path)))
    fill(server)
    path = server.localhost_client().checkpoint()
    server.stop()
    return path


def _assert_loads_nothing(tmp_path, exc: type[Exception], match: str,
                          tables: list[reverb.Table] | None = None) -> None:
    tables = tables or make_tables()
    with pytest.raises(exc, match=match):
        reverb.Server(tables, checkpointer=DefaultCheckpointer(str(tmp_path)))
    assert all(len(t) == 0 for t in tables)


@pytest.mark.parametrize("name", ["chunks.bin", "items-0.bin", "items-2.bin"])
def test_truncated_file_is_rejected(tmp_path, name) -> None:
    path = os.path.join(_saved(tmp_path), name)
    with open(path, "r+b") as f:
        f.truncate(max(os.path.getsize(path) - 7, 0))
    _assert_loads_nothing(tmp_path, errors.DataLossError, "corrupt or truncated")


@pytest.mark.parametrize("name", ["chunks.bin", "items-0.bin", "items-1.bin"])
def test_flipped_byte_is_rejected(tmp_path, name) -> None:
    path = pathlib.Path(_saved(tmp_path), name)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))
    _assert_loads_nothing(tmp_path, errors.DataLossError, "corrupt or truncated")


def test_foreign_or_future_format_is_rejected(tmp_path) -> None:
    path = _saved(tmp_path)
    manifest = pathlib.Path(path, "manifest.json")
    doc = json.loads(manifest.read_text())
    doc["version"] = 99
    save_manifest(path, doc)  # with a matching checksum
    _assert_loads_nothing(tmp_path, errors.DataLossError, "version 99")
    doc["format"] = "something-else"
    save_manifest(path, doc)
    _assert_loads_nothing(tmp_path, errors.DataLossError, "not a fastreplay")
    envelope = pathlib.Path(path, "manifest.crc")
    envelope.write_text(envelope.read_text().replace("fastreplay-checkpoint",
                                                     "other-format"))
    _assert_loads_nothing(tmp_path, errors.DataLossError, "not a fastreplay")


def test_mismatched_configuration_is_rejected_not_overridden(tmp_path) -> None:
    _saved(tmp_path)
    tables = make_tables(sampler="uniform")  # checkpoint has Prioritized(0.5)
    _assert_loads_nothing(tmp_path, ValueError, "differs from its checkpoint", tables)


def test_unknown_checkpoint_table_is_rejected(tmp_path) -> None:
    _saved(tmp_path)
    tables = make_tables()[:2]
    _assert_loads_nothing(tmp_path, ValueError, "no matching server table", tables)


def test_restore_needs_empty_tables(tmp_path) -> None:
    path = _saved(tmp_path)
    tables = make_tables()
    tables[1].insert(1, 1.0)
    checkpointer = DefaultCheckpointer(str(tmp_path))
    with pytest.raises(ValueError, match="must be empty"):
        checkpointer.restore({t.name: t for t in tables}, reverb.ChunkStore())
    assert len(tables[0]) == 0 and len(tables[1]) == 1
    assert os.path.isdir(path)


def test_no_checkpoint_starts_empty(tmp_path) -> None:
    server = reverb.Server(make_tables(),
                           checkpointer=DefaultCheckpointer(str(tmp_path)))
    assert all(len(t) == 0 for t in server.tables.values())


def test_fallback_checkpoint_is_used_when_root_is_empty(tmp_path) -> None:
    path = _saved(tmp_path / "a")
    server = reverb.Server(make_tables(), checkpointer=DefaultCheckpointer(
        str(tmp_path / "b"), fallback_checkpoint_path=path))
    assert len(server.tables["fifo"]) > 0
