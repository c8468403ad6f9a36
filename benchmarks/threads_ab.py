"""Writer-thread scaling, A/B between builds, each run in a fresh process.

The measurements behind issue 3's goal (c). Every run is a new interpreter
with ``PYTHONPATH`` set to one build, so builds and thread counts interleave
and drift on a shared machine hits them alike:

    # two builds side by side (a checkout built in place, and this one)
    python benchmarks/threads_ab.py /tmp/old-checkout,. --runs 7
    # the ceiling: the same writers in separate processes instead of threads
    python benchmarks/threads_ab.py . --processes
    # a pure-Python model of a GIL share: about PY_US of Python, then about
    # FREE_US of sha256 (which drops the GIL), per iteration
    python benchmarks/threads_ab.py --model 1.4 6.2

A run is ``fastreplay.bench.workloads.concurrent_throughput`` without the
sampler: N threads, each its own TrajectoryWriter of Atari steps into one
Prioritized table, one length-5 item per step.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import threading
import time

COUNTS = (1, 2, 4)


def _timed(threads: list[threading.Thread]) -> float:
    """Start and join every thread (a local copy of workloads.run_threads,
    which builds of earlier commits lack); seconds."""
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def one_run(writers: int, steps: int) -> float:
    """Aggregate steps/s of ``writers`` threads (written against the public
    API and WriterWorkload, so builds of earlier commits run it too)."""
    import fastreplay
    from fastreplay.bench import workloads

    table = fastreplay.Table("bench", fastreplay.selectors.Prioritized(0.6),
                             fastreplay.selectors.Fifo(), 1_000_000,
                             fastreplay.rate_limiters.MinSize(1))
    works = [workloads.WriterWorkload(workloads.ATARI_OBS, table=table)
             for _ in range(writers)]
    threads = [threading.Thread(target=w.run, args=(steps,)) for w in works]
    return writers * steps / _timed(threads)


def _process_worker(steps: int, barrier: object, out: object) -> None:
    from fastreplay.bench import workloads

    work = workloads.WriterWorkload(workloads.ATARI_OBS)
    work.run(200)
    barrier.wait()  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    work.run(steps)
    out.put((t0, time.perf_counter()))  # type: ignore[attr-defined]


def processes_run(n: int, steps: int) -> float:
    """n processes, each with its own writer and table: the ceiling."""
    ctx = mp.get_context("fork")
    out, barrier = ctx.Queue(), ctx.Barrier(n)
    procs = [ctx.Process(target=_process_worker, args=(steps, barrier, out))
             for _ in range(n)]
    for p in procs:
        p.start()
    spans = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return n * steps / (max(e for _, e in spans) - min(s for s, _ in spans))


def model_run(n: int, python_us: float, free_us: float, iters: int = 60000) -> float:
    """Threads alternating ~python_us of Python with ~free_us of sha256."""
    data = b"x" * max(2048, int(free_us * 1500))  # sha256 drops the GIL >= 2 KiB
    spin = max(1, int(python_us * 12))

    def work(k: int) -> None:
        d: dict[str, int] = {}
        for i in range(k):
            for j in range(spin):
                d["a"] = i + j
            hashlib.sha256(data).digest()

    threads = [threading.Thread(target=work, args=(iters // n,)) for _ in range(n)]
    return iters / _timed(threads)


def report(label: str, runs: dict[int, list[float]]) -> None:
    med = {n: statistics.median(v) for n, v in runs.items()}
    cells = "  ".join(f"{n}: {med[n] / 1e3:6.1f}k" for n in COUNTS)
    ratios = "  ".join(f"{n}/1 {med[n] / med[1]:.2f}" for n in COUNTS[1:])
    spread = " ".join(str(sorted(round(x / 1e3) for x in runs[n])) for n in COUNTS)
    print(f"{label:<24} {cells}   {ratios}   {spread}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("builds", nargs="?", default=".",
                    help="comma-separated PYTHONPATHs of builds to compare")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10000, help="steps per writer")
    ap.add_argument("--processes", action="store_true")
    ap.add_argument("--model", nargs=2, type=float, metavar=("PY_US", "FREE_US"))
    ap.add_argument("--one", nargs=2, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:  # a child: one measurement
        print(one_run(*args.one))
        return
    if args.model:
        runs = {n: [model_run(n, *args.model) for _ in range(args.runs)]
                for n in COUNTS}
        report("model", runs)
        return
    if args.processes:
        runs = {n: [processes_run(n, args.steps) for _ in range(args.runs)]
                for n in COUNTS}
        report("processes", runs)
        return
    builds = args.builds.split(",")
    results = {(b, n): [] for b in builds for n in COUNTS}
    for _ in range(args.runs):
        for n in COUNTS:
            for b in builds:
                env = dict(os.environ, PYTHONPATH=os.path.abspath(b),
                           OPENBLAS_NUM_THREADS="1")
                out = subprocess.run(
                    [sys.executable, __file__, "--one", str(n), str(args.steps)],
                    env=env, capture_output=True, text=True, check=True)
                results[(b, n)].append(float(out.stdout.split()[-1]))
    for b in builds:
        report(b, {n: results[(b, n)] for n in COUNTS})


if __name__ == "__main__":
    main()
