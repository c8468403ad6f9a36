"""Child-process entry points for ``test_net_processes.py``.

Run as ``python net_children.py <role> <json args>``:

- ``serve``: a ``Server`` with the tables of ``make_tables`` on the given
  port (0: any), optional token and checkpoint root.  Prints ``PORT <n>``,
  then serves until its stdin closes (so it never outlives the test that
  started it) or it is killed.
- ``actor``: a ``Client`` of ``address`` writing ``count`` items with
  ``trajectory_writer(1)``, one per step, into each of ``tables``; every
  item's payload is ``payload(actor, i)``.  Flushes at the end and prints
  ``DONE``.
- ``endless``: writes length-2 items forever, flushing every 10 steps;
  prints ``READY <n>`` after the first ``n`` items were flushed (the test
  kills it mid-episode).

Also holds ``pickled_client_child``, a ``multiprocessing`` (spawn) target.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

import fastreplay
from fastreplay import Table
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel

#: Items of one actor are numbered below this (payload values never collide).
STRIDE = 100_000


def make_tables() -> list[Table]:
    """Every table a test server holds (fixed seeds)."""
    return [
        Table.queue("queue", 100_000),
        Table("uniform", sel.Uniform(), sel.Fifo(), 100_000, rl.MinSize(1), seed=1),
        Table("prio", sel.Prioritized(0.8), sel.Fifo(), 1000, rl.MinSize(1), seed=2),
        Table("min10", sel.Uniform(), sel.Fifo(), 1000, rl.MinSize(10), seed=3),
        Table.queue("tiny", 5),
    ]


def payload(actor: int, i: int) -> dict[str, np.ndarray]:
    """Step ``i`` of ``actor``: obs float32[8] (value v + column index / 16,
    exact in float32 for v < 2**19) and action int64 v."""
    v = actor * STRIDE + i
    return {"obs": np.float32(v) + np.arange(8, dtype=np.float32) / 16,
            "a": np.int64(v)}


def serve(args: dict[str, Any]) -> None:
    checkpointer = None
    if args.get("checkpoint_root"):
        from fastreplay.checkpointers import DefaultCheckpointer

        checkpointer = DefaultCheckpointer(args["checkpoint_root"])
    server = fastreplay.Server(make_tables(), port=args.get("port") or None,
                               checkpointer=checkpointer, token=args.get("token"))
    print(f"PORT {server.port}", flush=True)
    try:
        sys.stdin.read()  # until the test closes our stdin (or kills us)
    finally:
        server.stop()


def actor(args: dict[str, Any]) -> None:
    client = fastreplay.Client(args["address"], reconnect_window=30.0)
    tables = args["tables"]
    with client.trajectory_writer(1) as writer:
        for i in range(args["count"]):
            writer.append(payload(args["actor"], i))
            item = {"obs": writer.history["obs"][-1], "a": writer.history["a"][-1]}
            for table in tables:
                writer.create_item(table, 1.0, item)
        writer.flush()
    print("DONE", flush=True)


def endless(args: dict[str, Any]) -> None:
    client = fastreplay.Client(args["address"], reconnect_window=30.0)
    writer = client.trajectory_writer(2)
    i = 0
    while True:
        writer.append(payload(args["actor"], i))
        if i >= 1:
            writer.create_item("queue", 1.0, {"obs": writer.history["obs"][-2:],
                                              "a": writer.history["a"][-2:]})
        i += 1
        if i % 10 == 0:
            writer.flush()
            if i == 100:
                print(f"READY {i - 1}", flush=True)


def pickled_client_child(client: fastreplay.Client, out: Any) -> None:
    """multiprocessing target: use an unpickled client, report through ``out``."""
    try:
        client.insert(payload(7, 0), {"queue": 1.0})
        info = client.server_info(timeout=30)
        out.put(("ok", info["queue"].num_inserts))
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        out.put(("error", f"{type(exc).__name__}: {exc}"))


if __name__ == "__main__":
    role, text = sys.argv[1], sys.argv[2]
    {"serve": serve, "actor": actor, "endless": endless}[role](json.loads(text))
