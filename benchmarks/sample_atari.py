"""sample_batch of 256 length-5 items of Atari frames (36 MB a batch).

The learner-side measurement behind partial LZ4 decoding and the output
pool (issue 3 note, session 3). Run it against two builds to compare:

    PYTHONPATH=/tmp/old-checkout python benchmarks/sample_atari.py
    PYTHONPATH=. python benchmarks/sample_atari.py
    # chunks of 20 rows (ConstantChunkerOptions(20, 40)) instead of the
    # auto-tuned ones, where decoding only the rows an item uses pays off
    PYTHONPATH=. python benchmarks/sample_atari.py --chunk-length 20
"""

from __future__ import annotations

import argparse
import statistics
import time

import fastreplay
from fastreplay.bench import workloads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunk-length", type=int, default=0,
                    help="constant chunks of this many rows (default: auto-tuned)")
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--batches", type=int, default=30)
    args = ap.parse_args()
    table = fastreplay.Table("bench", fastreplay.selectors.Uniform(),
                             fastreplay.selectors.Fifo(), 1_000_000,
                             fastreplay.rate_limiters.MinSize(1))
    server = fastreplay.Server([table])
    client = server.localhost_client()
    options = ({"chunker_options": fastreplay.ConstantChunkerOptions(
        args.chunk_length, 2 * args.chunk_length)} if args.chunk_length else {})
    frames = workloads.atari_frames(64)
    with fastreplay.TrajectoryWriter(table, max(5, 2 * args.chunk_length),
                                     **options) as w:
        for t in range(args.steps):
            w.append({"observation": frames[t % len(frames)]})
            if w.episode_steps >= 5:
                w.create_item("bench", 1.0,
                              {"observation": w.history["observation"][-5:]})
    times = []
    for _ in range(args.batches):
        t0 = time.perf_counter()
        client.sample_batch("bench", 256, timeout=5.0)
        times.append(time.perf_counter() - t0)
    print(f"sample_batch(256): median {statistics.median(times) * 1e3:.2f} ms")
    server.stop()


if __name__ == "__main__":
    main()
