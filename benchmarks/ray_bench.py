"""Issue 15's benchmark: ``fastreplay.ray`` against its anchors, in one run
on a local 2-node Ray cluster (loopback).

    python benchmarks/ray_bench.py            # full: 5 rounds of 2 s per figure
    python benchmarks/ray_bench.py --quick    # 3 rounds of 0.5 s, smaller tables
    python benchmarks/ray_bench.py --json out.json --only writes,learner

Figures (the contract's "What must be measured", ``ray-api.md``): writes
(2 writer actors), learner (sample 256 + update_priorities), dataset
(prefetch=2), atari (uint8[84,84] frames over K=4 shards), together
(writers and learner at once), startup, same_node (shm vs Ray calls),
restart (shard killed -> answering).  Anchors: a naive Ray actor around one
``fastreplay.ReplayBuffer`` (PER) and TorchRL's ``RayReplayBuffer``
(uniform).  Each table gives the median over rounds, the spread (min-max)
and the ratios against the anchors.  TorchRL rows need torchrl and
tensordict installed, the fastreplay.ray rows ``fastreplay.ray``: a missing
one is skipped with the reason under its table.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ray_bench_anchors as anchors  # noqa: E402
import ray_bench_common as rc  # noqa: E402
import ray_bench_frray as fr  # noqa: E402
from ray_bench_common import Figure, Row, Sizes  # noqa: E402

NAIVE, TORCHRL = "naive actor", "TorchRL RayReplayBuffer"

FIGURES = {
    "writes": ("writes, rows/s: 2 writer actors, float32[8] transitions",
               "fastreplay.ray >= 2x naive, >= 4x TorchRL"),
    "learner": ("learner, sampled rows/s: sync sample 256 + update_priorities",
                "fastreplay.ray >= 1.5x naive, >= 4x TorchRL"),
    "dataset": ("learner through dataset(prefetch=2), sampled rows/s",
                ">= 3x naive (report)"),
    "atari": ("Atari, sampled rows/s across nodes: uint8[84,84] frames, K=4",
              ">= 1x naive K=4 on noise frames; report the compressed-frame gain"),
    "together": ("together: 2 writers + learner at once, rows/s",
                 ">= 1.5x naive on both (report)"),
    "startup": ("start-up, seconds after ray.init (lower is better)",
                "ShardedServer with 3 shards ready <= 3 s"),
    "same_node": ("same-node writes, rows/s: 1 writer actor, its shard on its node",
                  "shm >= 3x forced Ray calls"),
    "restart": ("shard restart, seconds from kill to answering (lower is better)",
                "report; <= 10 s plus restore time"),
}


def torchrl_missing() -> str | None:
    """Why the TorchRL anchor cannot run here, or None."""
    try:
        import tensordict  # noqa: F401
        from torchrl.data import RayReplayBuffer  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure skips it
        return f"TorchRL RayReplayBuffer unavailable ({type(exc).__name__}: {exc})"
    return None


def _attempt(figs: list[Figure], label: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, or None with the reason recorded under each of ``figs``."""
    try:
        return fn()
    except fr.Unavailable as exc:
        why = f"{label}: skipped: {exc}"
    except Exception as exc:  # noqa: BLE001 - one broken row must not end the run
        first = str(exc).strip().splitlines()[-1:] or [""]  # the traceback is above
        why = f"{label}: FAILED: {type(exc).__name__}: {first[0][:300]}"
        traceback.print_exc()
    for fig in figs:
        fig.skipped.append(why)
    return None


def _merge(figs: dict[str, Figure], rows: dict[str, list[Row]] | None) -> None:
    for key, rs in (rows or {}).items():
        figs[key].rows.extend(rs)


def run(cluster: rc.Cluster, sizes: Sizes, only: set[str] | None = None,
        log: Callable[[str], None] = print) -> dict[str, Figure]:
    """Measure every figure in ``only`` (all when None) on ``cluster``."""
    figs = {k: Figure(k, *FIGURES[k]) for k in FIGURES}
    want = set(FIGURES) if only is None else only
    no_torchrl = torchrl_missing()

    def step(keys: set[str], label: str, fn: Callable[[], Any]) -> Any:
        if not keys & want:
            return None
        log(f"[{time.strftime('%H:%M:%S')}] {label}")
        chosen = [figs[k] for k in sorted(keys & want)]
        if label.startswith("TorchRL") and no_torchrl:
            for fig in chosen:
                fig.skipped.append(no_torchrl)
            return None
        return _attempt(chosen, label, fn)

    start = {"startup"}
    r = step(start, "naive start-up", lambda: anchors.naive_startup(cluster, sizes))
    figs["startup"].rows += [r] if r else []
    r = step(start, "TorchRL start-up", lambda: anchors.torchrl_startup(cluster, sizes))
    figs["startup"].rows += [r] if r else []
    r = step(start, "fastreplay.ray start-up", lambda: fr.startup(cluster, sizes))
    figs["startup"].rows += [r] if r else []

    thr = {"writes", "learner", "dataset", "together"}
    _merge(figs, step(thr, "naive writes/learner/together",
                      lambda: anchors.naive_throughput(cluster, sizes)))
    _merge(figs, step(thr, "TorchRL writes/learner/together",
                      lambda: anchors.torchrl_throughput(cluster, sizes)))
    _merge(figs, step(thr, "fastreplay.ray writes/learner/dataset/together",
                      lambda: fr.throughput(cluster, sizes)))
    # the dataset table repeats the learner anchors
    copies = [dataclasses.replace(r, note="(learner figure)")
              for r in map(figs["learner"].row, (NAIVE, TORCHRL)) if r is not None]
    figs["dataset"].rows[:0] = copies

    for compressible in (False, True):
        kind = "compressible" if compressible else "noise"
        for label, fn in ((f"naive K=4 atari {kind}", anchors.naive_atari),
                          (f"fastreplay.ray K=4 atari {kind}", fr.atari)):
            r = step({"atari"}, label,
                     lambda fn=fn, c=compressible: fn(cluster, sizes, c))
            figs["atari"].rows += [r] if r else []

    _merge(figs, {"same_node": step({"same_node"}, "fastreplay.ray same-node writes",
                                    lambda: fr.same_node(cluster, sizes)) or []})
    r = step({"restart"}, "fastreplay.ray shard restart",
             lambda: fr.restart(cluster, sizes))
    figs["restart"].rows += [r] if r else []
    _default_refs(figs)
    _notes(figs)
    return {k: f for k, f in figs.items() if k in want}


def _notes(figs: dict[str, Figure]) -> None:
    """Derived lines under the tables."""
    atari = figs["atari"]
    for system in ("naive K=4", "fastreplay.ray K=4"):
        noise = atari.row(f"{system} (noise)")
        comp = atari.row(f"{system} (compressible)")
        if noise is not None and comp is not None:
            atari.notes.append(f"compressed-frame gain of {system}: "
                               f"{comp.ratio(noise):.2f}x (compressible / noise)")
    figs["same_node"].notes.append("x naive here: against transport=ray (forced)")


def _default_refs(figs: dict[str, Figure]) -> None:
    """Anchor rows compare with the anchors of their own figure too."""
    for fig in figs.values():
        for row in fig.rows:
            if fig.key == "together":
                kind = row.name.rsplit(": ", 1)[-1]
                row.naive = row.naive or f"{NAIVE}: {kind}"
                row.torchrl = row.torchrl or f"{TORCHRL}: {kind}"
            elif fig.key == "atari":
                row.naive = row.naive or row.name
            elif fig.key == "same_node":
                row.naive = row.naive or row.name
            else:
                row.naive = row.naive or NAIVE
                row.torchrl = row.torchrl or TORCHRL


# ----- output -----

def _fmt(value: float, unit: str) -> str:
    if value != value:  # nan
        return "-"
    if unit == "s":
        return f"{value:.2f} s"
    return f"{value / 1e3:,.1f}k" if value >= 1e3 else f"{value:,.0f}"


def _ratio(fig: Figure, row: Row, ref: str | None) -> str:
    other = fig.row(ref) if ref else None
    if other is None:
        return "-"
    r = row.ratio(other)
    return "-" if r != r else f"{r:.2f}x"


def table(fig: Figure) -> str:
    """One figure as text: median, spread and ratios per row."""
    head = (f"{'variant':<44} {'median':>10} {'min - max':>21} {'spread':>7} "
            f"{'x naive':>8} {'x TorchRL':>9}  note")
    lines = [f"== {fig.title} ==", f"   bar: {fig.bar}", head, "-" * len(head)]
    for row in fig.rows:
        v = row.values
        rng = f"{_fmt(min(v), row.unit)} - {_fmt(max(v), row.unit)}" if v else "-"
        spread = (f"{(max(v) - min(v)) / row.median:.0%}" if v and row.median
                  else "-")
        lines.append(f"{row.name:<44} {_fmt(row.median, row.unit):>10} {rng:>21} "
                     f"{spread:>7} {_ratio(fig, row, row.naive):>8} "
                     f"{_ratio(fig, row, row.torchrl):>9}  {row.note}")
    lines += [f"   {s}" for s in fig.notes + fig.skipped]
    return "\n".join(lines)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def meta(cluster: rc.Cluster | None, sizes: Sizes, init_s: float | None
         ) -> dict[str, Any]:
    """Machine, versions, commit and sizes of this run."""
    from fastreplay.bench import env

    versions = dict(env.versions())
    for dist in ("ray", "torchrl", "tensordict"):
        versions[dist] = _version(dist)
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"),
            "machine": env.machine(), "versions": versions, "commit": env.commit(),
            "python": sys.executable, "argv": sys.argv[1:],
            "nodes": len(cluster.nodes) if cluster else None,
            "ray_init_s": init_s, "sizes": dataclasses.asdict(sizes),
            "load_average": _load()}


def _load() -> list[float] | None:
    """1, 5 and 15-minute load averages (other work on the machine slows
    every row; the ratios within one run are what compare)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="3 rounds of 0.5 s, small tables")
    p.add_argument("--json", metavar="PATH", help="also save the results as JSON")
    p.add_argument("--only", metavar="FIGS",
                   help=f"comma-separated figures among {', '.join(FIGURES)}")
    p.add_argument("--rounds", type=int, help="rounds per throughput figure")
    p.add_argument("--duration", type=float, help="seconds per round")
    p.add_argument("--nodes", type=int, default=2, help="Ray nodes (default 2)")
    args = p.parse_args(argv)
    sizes = rc.QUICK if args.quick else rc.FULL
    if args.rounds:
        sizes = dataclasses.replace(sizes, rounds=args.rounds)
    if args.duration:
        sizes = dataclasses.replace(sizes, duration=args.duration)
    only = None
    if args.only:
        only = {s.strip() for s in args.only.split(",") if s.strip()}
        if only - set(FIGURES):
            p.error(f"unknown figures {sorted(only - set(FIGURES))}")

    os.environ.setdefault("RL_LOGGING_LEVEL", "WARNING")  # torchrl's INFO lines
    t0 = time.perf_counter()
    cluster = rc.start_cluster(args.nodes, timeout=sizes.timeout)
    init_s = time.perf_counter() - t0
    try:
        info = meta(cluster, sizes, init_s)
        v = info["versions"]
        print(f"fastreplay {v.get('fastreplay')} at {info['commit']}, ray "
              f"{v.get('ray')}, torchrl {v.get('torchrl')}, torch {v.get('torch')}, "
              f"python {v.get('python')} ({sys.executable})")
        print(f"machine: {info['machine']}, load average {info['load_average']}")
        kind = "quick" if args.quick else "full"
        print(f"cluster: {len(cluster.nodes)} nodes on 127.0.0.1, up in {init_s:.1f} s;"
              f" sizes: {kind} {dataclasses.asdict(sizes)}")
        figs = run(cluster, sizes, only)
    finally:
        cluster.stop()
    info["load_average_after"] = _load()
    print(f"\nload average at the end: {info['load_average_after']}")
    for fig in figs.values():
        print(table(fig))
        print()
    if args.json:
        out = {"meta": info, "figures": {k: {"title": f.title, "bar": f.bar,
                                              "rows": [r.to_json() for r in f.rows],
                                              "notes": f.notes, "skipped": f.skipped}
                                          for k, f in figs.items()}}
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=1)
        print(f"saved {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
