"""ReplayBuffer.sample(256) after 100k Atari transitions added by add_batch
of 65,536 rows against add, and against cpprb and Tianshou in one process.

Transitions are laid out as the cpprb workloads of fastreplay.bench:
obs and next_obs uint8[84, 84] (Atari-like frames that compress as real ones
do), act int64, rew float32, done float32.  Each buffer is filled, then
sampled ``--rounds`` times ``--batches`` batches of 256; the median time of
one batch is printed per buffer (uniform, and prioritized with alpha 0.6
unless ``--uniform-only``).  The issue 11 measurement:

    python benchmarks/add_batch_atari.py            # peers skipped if absent
    python benchmarks/add_batch_atari.py --size 20000 --uniform-only  # quick
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import fastreplay
from fastreplay.bench import workloads

SHAPE = (84, 84)


def batches(size: int, rows: int, frames: np.ndarray) -> Iterator[dict[str, Any]]:
    """The ``size`` transitions in batches of at most ``rows``."""
    for lo in range(0, size, rows):
        idx = np.arange(lo, min(size, lo + rows))
        yield {"obs": frames[idx % len(frames)],
               "next_obs": frames[(idx + 1) % len(frames)],
               "act": idx % 6, "rew": (idx % 3).astype(np.float32),
               "done": (idx % 500 == 499).astype(np.float32)}


def fill_fastreplay(size: int, frames: np.ndarray, rows: int,
                    alpha: float | None) -> Callable[[], Any]:
    buf = fastreplay.ReplayBuffer(size, alpha=alpha, seed=0)
    for b in batches(size, rows, frames):
        if rows == 1:
            buf.add(**{k: v[0] for k, v in b.items()})
        else:
            buf.add_batch(**b)
    return lambda: buf.sample(256)


def fill_cpprb(size: int, frames: np.ndarray, alpha: float | None
               ) -> Callable[[], Any]:
    import cpprb

    env = {"obs": {"shape": SHAPE, "dtype": np.uint8},
           "next_obs": {"shape": SHAPE, "dtype": np.uint8},
           "act": {"dtype": np.int64}, "rew": {"dtype": np.float32},
           "done": {"dtype": np.float32}}
    np.random.seed(0)
    rb = (cpprb.ReplayBuffer(size, env) if alpha is None
          else cpprb.PrioritizedReplayBuffer(size, env, alpha=alpha))
    for b in batches(size, 65_536, frames):
        rb.add(**b)
    return lambda: rb.sample(256)


def fill_tianshou(size: int, frames: np.ndarray, alpha: float | None
                  ) -> Callable[[], Any]:
    from tianshou.data import Batch, PrioritizedReplayBuffer, ReplayBuffer

    np.random.seed(0)
    rb = (ReplayBuffer(size) if alpha is None
          else PrioritizedReplayBuffer(size, alpha=alpha, beta=0.4))
    (b,) = batches(size, size, frames)
    no = np.zeros(size, bool)
    rb.set_batch(Batch(obs=b["obs"], obs_next=b["next_obs"], act=b["act"],
                       rew=b["rew"], terminated=b["done"] > 0, truncated=no,
                       done=b["done"] > 0))
    rb._size = size  # as tianshou's ReplayBuffer.from_data does
    rb.last_index[0] = size - 1
    if alpha is not None:
        rb.update_weight(np.arange(size), np.ones(size))
    return lambda: rb.sample(256)


def median_ms(sample: Callable[[], Any], rounds: int, n: int) -> float:
    sample()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            sample()
        times.append((time.perf_counter() - t0) / n)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--rows", type=int, default=65_536, help="add_batch rows")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--uniform-only", action="store_true")
    args = ap.parse_args()
    frames = np.stack(workloads.atari_frames(512, shape=SHAPE))
    cases: list[tuple[str, Callable[[float | None], Callable[[], Any]]]] = [
        ("fastreplay add_batch", lambda a: fill_fastreplay(args.size, frames,
                                                          args.rows, a)),
        ("fastreplay add", lambda a: fill_fastreplay(args.size, frames, 1, a)),
        ("cpprb", lambda a: fill_cpprb(args.size, frames, a)),
        ("tianshou", lambda a: fill_tianshou(args.size, frames, a)),
    ]
    alphas: list[float | None] = [None] if args.uniform_only else [None, 0.6]
    print(f"{args.size:,} transitions of obs/next_obs uint8{list(SHAPE)}; "
          f"median of {args.rounds} rounds x {args.batches} sample(256)")
    for alpha in alphas:
        kind = "uniform" if alpha is None else f"prioritized alpha={alpha}"
        for name, build in cases:
            try:
                t0 = time.perf_counter()
                sample = build(alpha)
                fill = time.perf_counter() - t0
            except ImportError as e:
                print(f"  {kind:24} {name:22} skipped ({e})")
                continue
            ms = median_ms(sample, args.rounds, args.batches)
            print(f"  {kind:24} {name:22} fill {fill:6.1f} s   "
                  f"sample(256) {ms:8.3f} ms")
            del sample


if __name__ == "__main__":
    main()
