"""Compare fastreplay with the replay buffers you use today, on your machine.

Persona: a researcher choosing a replay buffer. ``fastreplay bench`` runs
the standard workloads on fastreplay and on every installed peer (cpprb,
Tianshou, TorchRL, Stable-Baselines3, dm-reverb; ``pip install
"fastreplay[bench]"``) in one process and saves the results as JSON. This
script runs it, then reads the JSON the way an analysis notebook would:
each peer's median and spread, and how many times longer than fastreplay
it takes ("peer / fastreplay", so 2.0x means the peer takes twice as long).

Run: ``python examples/compare_with_peers.py`` (about a minute), or
``--quick`` (small sizes, a few seconds; fine for trying it, not for
quoting). The same from a shell:
``fastreplay bench --only uniform,prioritized --json bench.json``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

from fastreplay.bench.report import format_value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--only", default="uniform,prioritized",
                        help="workloads (fastreplay bench --help lists them)")
    args = parser.parse_args()

    out = pathlib.Path(tempfile.mkdtemp()) / "bench.json"
    command = [sys.executable, "-m", "fastreplay", "bench", "--only", args.only,
               "--json", str(out)] + (["--quick"] if args.quick else [])
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)   # the progress lines
    run = json.loads(out.read_text())

    note = ": a smoke run, not for comparing" if run["quick"] else ""
    print(f"{run['sizes']}{note}; commit {run['commit']}")
    for result in run["results"]:
        if result["kind"] == "peer":
            ratio = result["ratio"]
            verdict = "" if ratio is None else (
                f"{ratio:.1f}x fastreplay's time" if ratio >= 1 else
                f"{1 / ratio:.1f}x faster than fastreplay")
        elif result["baseline"]:
            verdict = "baseline"
        else:
            continue  # fastreplay's other APIs: see the run's own table
        unit = result["unit"]
        print(f"{result['workload']:>12}  {result['library']:<10} "
              f"{result['variant']:<34} "
              f"median {format_value(result['median'], unit)} / {result['per']} "
              f"(min {format_value(result['min'], unit)}, "
              f"max {format_value(result['max'], unit)})  {verdict}")
    skipped = sorted({s["library"] for s in run["skipped"]})
    if skipped:
        print("not measured (not installed or failed to load):", ", ".join(skipped))


if __name__ == "__main__":
    main()
