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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--only", default="uniform,prioritized",
                        help="workloads (fastreplay bench --help lists them)")
    args = parser.parse_args()

    out = pathlib.Path(tempfile.mkdtemp()) / "bench.json"
    command = [sys.executable, "-m", "fastreplay", "bench", "--only", args.only,
               "--json", str(out)] + (["--quick"] if args.quick else [])
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    run = json.loads(out.read_text())

    print(f"{run['sizes']} on {run.get('machine', {}).get('cpu', 'this machine')}, "
          f"fastreplay {run.get('versions', {}).get('fastreplay', '?')}")
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
        print(f"{result['workload']:>12}  {result['library']:<10} "
              f"{result['variant']:<34} median {result['median']:.3g} {result['unit']} "
              f"(min {result['min']:.3g}, max {result['max']:.3g})  {verdict}")
    skipped = sorted({s["library"] for s in run["skipped"]})
    if skipped:
        print("not measured (not installed or failed to load):", ", ".join(skipped))


if __name__ == "__main__":
    main()
