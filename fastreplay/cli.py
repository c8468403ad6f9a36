"""The ``fastreplay`` command: ``demo``, ``bench``, ``info``, ``serve`` and
``stats``.

``fastreplay demo`` runs actors and a learner on the embedded default,
``fastreplay bench`` measures the standard workloads on fastreplay and every
installed peer, ``fastreplay info`` reports versions, build and peers,
``fastreplay serve`` runs a server for clients in other processes and
``fastreplay stats`` shows a running server's tables
(``fastreplay.serve_cli``).
``python -m fastreplay`` is the same command.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from fastreplay import serve_cli

__all__ = ["main"]


def _positive(kind: type[int] | type[float], what: str) -> Any:
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{what} must be a {kind.__name__}, got {text!r}") from None
        if not value > 0 or value != value or value == float("inf"):
            raise argparse.ArgumentTypeError(f"{what} must be > 0, got {text!r}")
        return value

    return parse


def _shape(text: str) -> tuple[int, ...]:
    """'84,84,4' -> (84, 84, 4): 1 to 3 positive sizes, at most 64 MiB."""
    try:
        shape = tuple(int(x) for x in text.replace("x", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"observation shape must be comma-separated integers like 84,84,4, "
            f"got {text!r}") from None
    if not 1 <= len(shape) <= 3 or min(shape) < 1:
        raise argparse.ArgumentTypeError(
            f"observation shape must have 1 to 3 positive sizes, got {text!r}")
    size = 1
    for n in shape:
        size *= n
    if size > 64 << 20:
        raise argparse.ArgumentTypeError(
            f"observation shape {text!r} is {size:,} bytes; at most 64 MiB")
    return shape


def _workloads(text: str) -> list[str]:
    from fastreplay.bench.runner import WORKLOAD_NAMES

    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in WORKLOAD_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown workload {', '.join(unknown) or repr(text)}; choose from "
            f"{', '.join(WORKLOAD_NAMES)}")
    return names


def build_parser() -> argparse.ArgumentParser:
    from fastreplay import __version__

    parser = argparse.ArgumentParser(
        prog="fastreplay",
        description="Fast experience replay with Reverb's API: run the demo, "
                    "benchmark against peers, show the installation, run a "
                    "replay server or look at one.")
    parser.add_argument("--version", action="version",
                        version=f"fastreplay {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = sub.add_parser(
        "demo", help="actors and a learner on a prioritized, rate-limited table",
        description="Actor threads write Atari-like episodes through "
                    "TrajectoryWriter into a Prioritized table with a "
                    "SampleToInsertRatio rate limiter while a learner thread "
                    "samples batches and updates priorities; prints a summary. "
                    "With --processes the actors and the learner are processes "
                    "talking to the server over its port; with --ray the actors "
                    "are Ray actors writing into a sharded server "
                    "(fastreplay.ray) and the learner samples all its shards.")
    demo.add_argument("--duration", type=_positive(float, "--duration"), default=20.0,
                      metavar="SECONDS", help="how long to run (default: 20)")
    demo.add_argument("--actors", type=_positive(int, "--actors"), default=2,
                      help="actor threads, or processes (default: 2)")
    demo.add_argument("--obs-shape", type=_shape, default=(84, 84, 4),
                      metavar="H,W,C",
                      help="uint8 observation shape (default: 84,84,4)")
    demo.add_argument("--batch-size", type=_positive(int, "--batch-size"), default=64,
                      help="learner batch size (default: 64)")
    demo.add_argument("--samples-per-insert",
                      type=_positive(float, "--samples-per-insert"), default=1.0,
                      help="rate limiter's target samples per insert (default: 1)")
    demo.add_argument("--max-size", type=_positive(int, "--max-size"), default=100_000,
                      help="table capacity in items (default: 100000)")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--json", metavar="PATH", help="also write the summary as JSON")
    demo.add_argument("--quiet", action="store_true", help="no progress line")
    demo.add_argument("--processes", action="store_true",
                      help="run each actor and the learner in its own process, "
                           "connected over the server's port to the server in "
                           "this process")
    demo.add_argument("--ray", action="store_true",
                      help="run the actors as Ray actors against a sharded server "
                           "(fastreplay.ray) on a local Ray cluster, started on "
                           "127.0.0.1 unless Ray is initialized; the learner runs "
                           "in this process (needs: pip install 'fastreplay[ray]')")
    demo.add_argument("--shards", type=_positive(int, "--shards"), default=None,
                      help="shards of the sharded server, with --ray (default: 2)")

    from fastreplay.bench.runner import workload_help

    bench = sub.add_parser(
        "bench", help="standard workloads on fastreplay and installed peers",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill(
            "Runs the standard replay workloads on fastreplay and, in the same "
            "process, on every installed peer (cpprb, TorchRL, Tianshou, SB3, "
            "dm-reverb); prints medians with the min-max over the rounds, and "
            "ratios against peers only (peer median / fastreplay median: 3.0x = "
            "the peer takes 3 times as long). fastreplay's own variants (other "
            "APIs, the uncompressed payload) are in a table of their own.", 79),
        epilog="workloads (--only takes a comma-separated list):\n"
               + workload_help())
    bench.add_argument("--quick", action="store_true",
                       help="small sizes and few rounds (a smoke run of seconds)")
    bench.add_argument("--only", type=_workloads, metavar="WORKLOAD[,WORKLOAD]",
                       help="run only these workloads")
    bench.add_argument("--json", metavar="PATH", help="write machine-readable results")
    bench.add_argument("--plot", metavar="PATH",
                       help="write a PNG chart of the ratios (needs matplotlib)")
    bench.add_argument("--markdown", action="store_true",
                       help="print the table as Markdown")
    bench.add_argument("--from-json", nargs="+", metavar="PATH",
                       help="measure nothing: print (and --plot) the runs saved "
                            "by --json, e.g. one per environment; they must have "
                            "the same sizes (all --quick or none)")

    info = sub.add_parser("info", help="versions, build flags and installed peers")
    info.add_argument("--json", action="store_true", help="print JSON instead")
    serve_cli.add_parsers(sub)
    return parser


def _demo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from fastreplay.demo import DemoConfig, format_summary, run_demo

    if args.ray and args.processes:
        parser.error("demo: --ray and --processes cannot be combined")
    if args.shards is not None and not args.ray:
        parser.error("demo: --shards needs --ray")
    if args.shards is not None and args.shards > 256:  # fastreplay.ray.MAX_SHARDS
        parser.error(f"demo: --shards must be <= 256 (item keys carry their shard "
                     f"in 8 bits), got {args.shards}")

    cfg = DemoConfig(duration=args.duration, actors=args.actors,
                     obs_shape=args.obs_shape, batch_size=args.batch_size,
                     samples_per_insert=args.samples_per_insert,
                     max_size=args.max_size, seed=args.seed)
    progress = None if args.quiet else sys.stderr
    if args.processes:
        from fastreplay.demo_processes import DemoError, run_demo_processes

        try:
            summary = run_demo_processes(cfg, progress=progress)
        except DemoError as exc:
            print(f"fastreplay demo: error: {exc}\nevery child process has been "
                  "stopped", file=sys.stderr)
            return 1
    elif args.ray:
        from fastreplay.demo_processes import DemoError
        from fastreplay.demo_ray import RayMissingError, run_demo_ray

        try:
            summary = run_demo_ray(cfg, shards=args.shards or 2, progress=progress)
        except RayMissingError as exc:
            parser.exit(2, f"fastreplay demo: error: {exc}\n")
        except DemoError as exc:
            print(f"fastreplay demo: error: {exc}\nevery Ray actor and shard has "
                  "been stopped", file=sys.stderr)
            return 1
    else:
        summary = run_demo(cfg, progress=progress)
    print(format_summary(summary))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=2)
    return 0


def _bench(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        parser.exit(2, "fastreplay bench: error: --plot needs matplotlib, which is "
                       "not installed; install it with: pip install "
                       "'fastreplay[plot]' (or: pip install matplotlib)\n")
    from fastreplay.bench import report, results, runner

    if args.from_json:
        runs = []
        for path in args.from_json:
            try:
                with open(path, encoding="utf-8") as f:
                    runs.append(results.Run.from_json(json.load(f)))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                parser.exit(1, f"fastreplay bench: error: cannot read {path}: "
                               f"{type(exc).__name__}: {exc}\n")
        try:
            results.check_same_sizes(runs, args.from_json)
        except ValueError as exc:
            parser.exit(1, f"fastreplay bench: error: {exc}\n")
    else:
        config = runner.QUICK if args.quick else runner.FULL
        runs = [runner.run(config, quick=args.quick, only=args.only)]
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(runs[0].to_json(), f, indent=2)
    for i, result in enumerate(runs):
        if len(runs) > 1:
            print(("\n" if i else "") + f"Run {i + 1} ({args.from_json[i]}):")
        print(report.format_run(result, markdown=args.markdown))
    if args.plot:
        report.plot(runs, args.plot)
    return 0


def _info(args: argparse.Namespace) -> int:
    from fastreplay import __file__ as location
    from fastreplay.bench import env

    versions = env.versions()
    report: dict[str, Any] = {
        "fastreplay": versions["fastreplay"], "location": location,
        "versions": versions, "build": env.build_info(), "peers": env.peer_status(),
        "commit": env.commit(), "machine": env.machine(),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"fastreplay {report['fastreplay']} ({location})")
    if report["commit"]:
        print(f"commit:    {report['commit']}")
    v, b = report["versions"], report["build"]
    print(f"python:    {v['python']}, numpy {v.get('numpy')}, lz4 {v.get('lz4')}")
    print(f"build:     {b['extension']}")
    print(f"           lz4 in the core: {'yes' if b['lz4_available'] else 'no'}; "
          f"compiler {b['compiler']}; selectors {', '.join(b['selectors'])}")
    print(f"           python CFLAGS: {b['python_cflags']}")
    m = report["machine"]
    print(f"machine:   {m['cpu']}, {m['cores']} cores, {m['system']}")
    print("peers:")
    for name, p in report["peers"].items():
        state = (f"installed {p['version'] or ''}" if p["installed"]
                 else "not installed")
        print(f"  {name:<10} {state.strip()}")
    plot = v.get("matplotlib")
    print(f"plotting:  matplotlib {plot}" if plot else
          "plotting:  matplotlib not installed (pip install 'fastreplay[plot]')")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fastreplay`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            return _demo(args, parser)
        if args.command == "bench":
            return _bench(args, parser)
        if args.command == "serve":
            return serve_cli.run_serve(args, parser)
        if args.command == "stats":
            return serve_cli.run_stats(args)
        return _info(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. piped into head: stop quietly
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
