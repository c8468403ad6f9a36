"""Child process of tests/test_checkpoint_fuzz.py: applies mutations
``first..last`` (deterministic from the seed) to copies of a real checkpoint
and restores each under a memory cap, printing one JSON line per mutation
(flushed before the restore starts, so the parent can name the mutation
that crashed or hung the process).

usage: python checkpoint_fuzz_child.py PRISTINE WORKDIR SEED FIRST LAST MEM_MB
"""

from __future__ import annotations

import json
import os
import random
import resource
import shutil
import struct
import sys
import zlib
from typing import Any

CHUNK = struct.Struct("<QQQqqqiiq")
NASTY_INTS = [0, 1, -1, 2, 7, 255, 2**31 - 1, 2**31, -2**31, 2**32, 2**40, 2**62,
              2**63 - 1, -2**63, 2**64 - 1]
NASTY_JSON: list[Any] = [
    2**40, -1, 0, 2**64, 2**80, 1.5, 1e308, "O", "U", "S", "V", "", "x" * 300, None,
    True, [], {}, [None], [2**40, 2**40], "../chunks.bin", "/dev/zero", "items-9.bin",
    {"list": [None, None]}, {"dict": [["a", None]]},
    {"namedtuple": ["collections", "OrderedDict", ["a"], [None]]},
]


def _files(path: str) -> list[str]:
    return sorted(os.listdir(path))


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, prefix + (i,))
    return out


def _save_manifest(path: str, doc: Any = None, raw: bytes | None = None,
                   fix: bool = True) -> None:
    data = raw if raw is not None else json.dumps(doc).encode()
    with open(os.path.join(path, "manifest.json"), "wb") as f:
        f.write(data)
    if fix:
        with open(os.path.join(path, "manifest.crc"), "w") as f:
            f.write(f"fastreplay-checkpoint 2 {len(data)} {zlib.crc32(data)}\n")


def _rewrite(path: str, name: str, data: bytes, fix: bool) -> None:
    with open(os.path.join(path, name), "wb") as f:
        f.write(data)
    if fix and name not in ("manifest.json", "manifest.crc"):
        doc = json.load(open(os.path.join(path, "manifest.json")))
        if name in doc.get("files", {}):
            doc["files"][name] = {"bytes": len(data), "crc32": zlib.crc32(data)}
        _save_manifest(path, doc)
    elif fix and name == "manifest.json":
        _save_manifest(path, raw=data)


def mutate(path: str, rng: random.Random) -> str:
    """Apply one random mutation to the checkpoint at ``path``; its name."""
    kind = rng.choice(["flip", "flip", "truncate", "field", "field", "chunk",
                       "chunk", "item", "item", "spec", "special", "structure"])
    fix = rng.random() < 0.9
    names = _files(path)
    if kind in ("flip", "truncate"):
        name = rng.choice(names)
        data = bytearray(open(os.path.join(path, name), "rb").read())
        if kind == "flip" and data:
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        else:
            data = data[:rng.randrange(len(data) + 1)]
        _rewrite(path, name, bytes(data), fix)
        return f"{kind} {name} fix={fix}"
    doc = json.load(open(os.path.join(path, "manifest.json")))
    if kind == "field":
        where = rng.choice(_paths(doc)[1:])
        node = doc
        for k in where[:-1]:
            node = node[k]
        value = rng.choice(NASTY_JSON)
        if rng.random() < 0.1:
            value = [value] * 3
        node[where[-1]] = value
        if rng.random() < 0.2 and isinstance(node, dict):
            del node[where[-1]]
        _save_manifest(path, doc, fix=fix)
        return f"field {where} = {value!r:.40} fix={fix}"
    if kind == "spec":
        table = rng.choice(doc["tables"])
        if table["specs"]:
            spec = rng.choice(table["specs"])
            spec[rng.randrange(3)] = rng.choice(
                ["O", "U", "S", "V", "M", "b", "f", "i", "c", 1, 2, 3, 16, 2**40,
                 [2**40], [0], [-1], [3, 3], "16"])
        _save_manifest(path, doc, fix=fix)
        return f"spec fix={fix}"
    if kind == "structure":
        doc["structures"].append(rng.choice(NASTY_JSON))
        if len(doc["structures"]) > 1 and rng.random() < 0.5:
            doc["structures"][1] = rng.choice(NASTY_JSON)
        _save_manifest(path, doc, fix=fix)
        return f"structure fix={fix}"
    if kind == "chunk":
        data = bytearray(open(os.path.join(path, "chunks.bin"), "rb").read())
        at, starts = 0, []
        while at + CHUNK.size <= len(data):
            starts.append(at)
            at += CHUNK.size + CHUNK.unpack_from(data, at)[8]
        at = rng.choice(starts)
        header = list(CHUNK.unpack_from(data, at))
        field = rng.choice([0, 5, 6, 7, 8])
        value = rng.choice(NASTY_INTS)
        fmt = "QQQqqqiiq"[field]
        lo, hi = {"Q": (0, 2**64 - 1), "q": (-2**63, 2**63 - 1),
                  "i": (-2**31, 2**31 - 1)}[fmt]
        header[field] = min(max(value, lo), hi)
        CHUNK.pack_into(data, at, *header)
        _rewrite(path, "chunks.bin", bytes(data), fix)
        return f"chunk field {field} = {header[field]} fix={fix}"
    if kind == "item":
        name = rng.choice([n for n in names if n.startswith("items-")])
        data = bytearray(open(os.path.join(path, name), "rb").read())
        if len(data) >= 4:
            at = rng.randrange(len(data) - 3)
            struct.pack_into("<I", data, at, rng.choice(NASTY_INTS) & 0xFFFFFFFF)
        _rewrite(path, name, bytes(data), fix)
        return f"item {name} fix={fix}"
    # special files
    name = rng.choice(names)
    target = os.path.join(path, name)
    os.remove(target)
    choice = rng.choice(["fifo", "zero", "outside", "dir"])
    if choice == "fifo":
        os.mkfifo(target)
    elif choice == "zero":
        os.symlink("/dev/zero", target)
    elif choice == "outside":
        os.symlink(os.path.join(os.path.dirname(path), "..", "outside.bin"), target)
    else:
        os.mkdir(target)
    return f"special {name} -> {choice}"


def main() -> None:
    pristine, work, seed, first, last, mem_mb = sys.argv[1:7]
    import numpy  # noqa: F401  (loaded before the cap)

    import fastreplay as reverb
    from fastreplay import errors
    from fastreplay.checkpointers import DefaultCheckpointer

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from checkpoint_forge import small_tables

    with open("/proc/self/statm") as f:
        vm = int(f.read().split()[0]) * resource.getpagesize()
    cap = vm + int(mem_mb) * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    with open(os.path.join(work, "outside.bin"), "wb") as f:
        f.write(b"\0" * 64)
    for i in range(int(first), int(last)):
        rng = random.Random(f"{seed}-{i}")
        root = os.path.join(work, f"m{i}")
        dst = os.path.join(root, os.path.basename(pristine))
        shutil.copytree(pristine, dst)
        what = mutate(dst, rng)
        print(json.dumps({"i": i, "what": what, "phase": "start"}), flush=True)
        tables = small_tables()
        outcome = "ok"
        try:
            DefaultCheckpointer(root).restore({t.name: t for t in tables},
                                              reverb.ChunkStore())
        except (errors.DataLossError, ValueError) as exc:
            outcome = type(exc).__name__
            if any(len(t) for t in tables):
                outcome = "loaded-something"
        except BaseException as exc:  # reported to the parent
            outcome = f"unexpected {type(exc).__name__}: {exc}"
        sampled = ""
        if outcome == "ok":
            for t in tables:
                if not len(t):
                    continue
                try:
                    t._core.sample_batch(4, 1.0)
                    t.sample_items(2, timeout=1.0)
                except (errors.DataLossError, ValueError, RuntimeError) as exc:
                    sampled = type(exc).__name__
                except BaseException as exc:  # reported to the parent
                    outcome = f"sample raised {type(exc).__name__}: {exc}"
        print(json.dumps({"i": i, "what": what, "outcome": outcome,
                          "sampled": sampled}), flush=True)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
