"""Helpers that forge checkpoints the way an attacker would: edit the
manifest or a data file and recompute every checksum, so the reader's
checks beyond the CRCs are what is tested."""

from __future__ import annotations

import json
import os
import pathlib
import zlib
from typing import Any

import numpy as np

import fastreplay as reverb
from fastreplay.checkpointers import DefaultCheckpointer


def small_tables() -> list[reverb.Table]:
    return [
        reverb.Table("a", reverb.selectors.Uniform(), reverb.selectors.Fifo(), 100,
                     reverb.rate_limiters.MinSize(1), seed=3),
        reverb.Table("b", reverb.selectors.Fifo(), reverb.selectors.Fifo(), 100,
                     reverb.rate_limiters.MinSize(1)),
    ]


def write_small(root: str) -> str:
    """A real small checkpoint (compressed and raw chunks, nested and flat
    item structures, an item without data) under ``root``; its path."""
    server = reverb.Server(small_tables(), checkpointer=DefaultCheckpointer(root))
    client = server.localhost_client()
    with client.trajectory_writer(3) as w:
        for i in range(12):
            w.append({"obs": np.zeros((16, 16), np.uint8) + i, "r": np.int32(i),
                      "x": {"y": float(i)}})
            if w.episode_steps >= 2:
                h = w.history
                w.create_item("a", 1.0, {"obs": h["obs"][-2:], "r": h["r"][-1]})
                w.create_item("b", 1.0, [h["x"]["y"][-2:], (h["r"][-1],)])
        w.flush()
    server.tables["b"].insert(77, 2.0)
    path = client.checkpoint()
    server.stop()
    return path


def load_manifest(path: str) -> dict[str, Any]:
    return json.loads(pathlib.Path(path, "manifest.json").read_text())


def save_manifest(path: str, doc: Any, raw: bytes | None = None) -> None:
    """Write ``doc`` (or ``raw`` bytes) as the manifest with a matching
    manifest.crc."""
    data = raw if raw is not None else json.dumps(doc).encode()
    pathlib.Path(path, "manifest.json").write_bytes(data)
    pathlib.Path(path, "manifest.crc").write_text(
        f"fastreplay-checkpoint 2 {len(data)} {zlib.crc32(data)}\n")


def rewrite_file(path: str, name: str, data: bytes) -> None:
    """Replace data file ``name`` and fix its size and CRC in the manifest."""
    pathlib.Path(path, name).write_bytes(data)
    doc = load_manifest(path)
    doc["files"][name] = {"bytes": len(data), "crc32": zlib.crc32(data)}
    save_manifest(path, doc)


def restore(root: str) -> list[reverb.Table]:
    """Restore the checkpoint under ``root`` into fresh tables (raises like
    the Server would)."""
    tables = small_tables()
    DefaultCheckpointer(root).restore({t.name: t for t in tables},
                                      reverb.ChunkStore())
    return tables


def checkpoint_dir(root: str) -> str:
    (name,) = [n for n in os.listdir(root) if not n.startswith(".")]
    return os.path.join(root, name)
