"""Actors and learner in other processes than the replay server (issue 12):
fastreplay's ``Server(tables, port=...)`` and ``Client('127.0.0.1:PORT')``
against dm-reverb 0.14 with its server in another process (gRPC), same run.

The command-line front end of :mod:`fastreplay.bench.processes` (the
workloads, the worker processes and the bounds on every wait are described
there; ``fastreplay bench --only processes`` measures a subset of the same
rows).  Every library runs one server process, up to ``--actors`` actor
processes and one learner process.  The fastreplay processes run with this
interpreter; dm-reverb's (which needs TensorFlow 2.15 and numpy 1.x) with
``--reverb-python``, another venv's interpreter running
``fastreplay/bench/process_worker.py`` as a file, which then imports only
numpy and reverb.  Here the Atari table (``--atari-steps``), fastreplay's
``client.dataset`` and ``mutate_priorities`` are measured too, and actors
1, 2 and 4.

Run (the issue 12 measurement: about 8 minutes with ``--rounds 5`` on the
2-core machine, 2.5 of them dm-reverb's fill of 1M items)::

    python benchmarks/net_processes.py --reverb-python /path/rvenv/bin/python --rounds 5
    python benchmarks/net_processes.py --only fastreplay --small-size 100000
    python benchmarks/net_processes.py --quick    # seconds: tiny tables

The dm-reverb venv: ``python3 -m venv V; V/bin/pip install dm-reverb==0.14.0
tensorflow-cpu==2.15.1 "numpy<2"``.  Without ``--reverb-python`` (or when it
cannot import reverb) the dm-reverb side is skipped with a message.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np

from fastreplay.bench.process_worker import ATARI, SMALL
from fastreplay.bench.processes import Plan, Session, reverb_ok


def report(results: dict[str, dict[str, float]], args: argparse.Namespace) -> None:
    rv, fr = results.get("dm-reverb", {}), results.get("fastreplay", {})
    print(f"\nMedians of {args.rounds} rounds of {args.seconds} s; small table "
          f"{args.small_size:,} items, Atari table {args.atari_steps:,} items")
    print(f"{'workload':38} {'dm-reverb':>12} {'fastreplay':>12} {'fr/reverb':>10}")
    labels = list(dict.fromkeys([*rv, *fr]))
    for label in labels:
        if "in-process" in label:
            continue
        r, f = rv.get(label), fr.get(label)
        ratio = f"{f / r:9.1f}x" if r and f else ""
        print(f"{label:38} {_fmt(r):>12} {_fmt(f):>12} {ratio:>10}")
    for table, remote in ((SMALL, "sample"), (ATARI, "sample")):
        local = fr.get(f"{table} in-process sample_batch/s")
        got = fr.get(f"{table} {remote}(256) batches/s")
        if local and got:
            print(f"fastreplay {table}: remote sample_batch {got:,.1f}/s, in process "
                  f"{local:,.1f}/s: {100 * got / local:.0f}% of in-process")
    for n in args.actors[1:]:
        for name, res in (("dm-reverb", rv), ("fastreplay", fr)):
            one, many = res.get("actors x1 aggregate steps/s"), res.get(
                f"actors x{n} aggregate steps/s")
            if one and many:
                print(f"{name}: {n} actors aggregate / 1 actor = {many / one:.2f}")


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reverb-python", help="interpreter of a venv with dm-reverb 0.14")
    ap.add_argument("--only", choices=["fastreplay", "dm-reverb"])
    ap.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--small-size", type=int, default=1_000_000)
    ap.add_argument("--atari-steps", type=int, default=2_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.0, help="length of one round")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="bound on every answer of a worker (beyond --seconds)")
    ap.add_argument("--fill-timeout", type=float, default=400.0,
                    help="bound on a server's start and fill")
    ap.add_argument("--max-seconds", type=float, default=1200.0,
                    help="every worker exits by itself after this long")
    ap.add_argument("--no-fr-dataset", dest="fr_dataset", action="store_false",
                    help="skip fastreplay's client.dataset")
    ap.add_argument("--quick", action="store_true",
                    help="tiny tables, 1 round of 0.3 s, actors 1 and 2")
    ap.add_argument("--json", help="write the medians to this file")
    args = ap.parse_args()
    if args.quick:
        args.small_size, args.atari_steps, args.rounds, args.seconds = 2000, 300, 1, 0.3
        args.actors = [1, 2]
    results = run_all(args)
    report(results, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)


def run_all(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """dm-reverb first (when available), then fastreplay; medians per library."""
    from fastreplay.bench import workloads

    results: dict[str, dict[str, float]] = {}
    libs: list[tuple[str, str]] = []
    if args.only != "fastreplay":
        why = reverb_ok(args.reverb_python)
        if why is None:
            libs.append(("dm-reverb", args.reverb_python))
        else:
            print(f"dm-reverb skipped: {why}")
    if args.only != "dm-reverb":
        libs.append(("fastreplay", sys.executable))
    plan = Plan(small=args.small_size, atari=args.atari_steps,
                actors=tuple(args.actors), rounds=args.rounds, seconds=args.seconds,
                fr_dataset=args.fr_dataset, fr_mutate=True, timeout=args.timeout,
                fill_timeout=args.fill_timeout, max_seconds=args.max_seconds)
    with tempfile.TemporaryDirectory(prefix="net_processes_") as tmp:
        frames = None
        if args.atari_steps:
            frames = os.path.join(tmp, "frames.npy")
            np.save(frames, np.stack(workloads.atari_frames(64)))
        for lib, python in libs:
            with Session(lib, python, plan, tmp, frames) as session:
                try:
                    session.run()
                except RuntimeError as e:
                    print(f"  {lib}: stopped: {e}", flush=True)
            results[lib] = session.medians()
    return results


if __name__ == "__main__":
    main()
