"""``fastreplay bench``: the standard workloads on fastreplay and, in the
same process, on every installed peer (cpprb, TorchRL, Tianshou, SB3,
dm-reverb).

Most workloads have one fastreplay *baseline* row.  A peer row's ``ratio``
is the peer's median over the baseline's (for times: how many times longer
the peer takes); a peer row with the variant of a fastreplay row (threads:
as many writers) is divided by that row instead, and rates (steps/s) are
inverted, fastreplay's over the peer's, so they read the same way.
fastreplay's own variants (another API doing the same work) and references
(the uncompressed payload) get ``vs_baseline`` instead: they are not peers
(:mod:`fastreplay.bench.results`).  Medians, with the smallest and largest
round, are over ``rounds`` timed rounds after one warm-up round; a round of
a microsecond-scale call runs it ``inner`` times.  Peers that are not
installed, or fail to build, are recorded as skipped with the reason, never
as an error.
"""

from __future__ import annotations

import dataclasses
import gc
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Literal, TextIO, TypeVar

from fastreplay.bench import env, hwlimit, peers, workloads
from fastreplay.bench.report import median_text
from fastreplay.bench.results import (
    FULL,
    QUICK,
    Config,
    Result,
    Run,
    Skipped,
    WorkloadInfo,
    compute_ratios,
    count_text,
    from_values,
)

__all__ = ["FULL", "QUICK", "WORKLOADS", "WORKLOAD_NAMES", "Config", "Result", "Run",
           "Skipped", "Workload", "run", "workload_help"]

_T = TypeVar("_T")


class _Recorder:
    def __init__(self, run: Run, log: TextIO) -> None:
        self.run, self.log = run, log

    def add(self, result: Result) -> None:
        self.run.results.append(result)
        self.log.write(f"  {result.library:<10} {result.variant:<36} "
                       f"{median_text(result)}\n")
        self.log.flush()

    def time(self, workload: str, library: str, variant: str, fn: Callable[[], Any],
             rounds: int, *, inner: int = 1, scale: float = 1.0, per: str = "call",
             kind: str = "fastreplay", baseline: bool = False) -> None:
        """Median over ``rounds`` of (round time / ``inner``) * ``scale``."""
        gc.collect()
        fn()  # warm-up
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            times.append((time.perf_counter() - t0) / inner * scale)
        self.add(from_values(workload, library, variant, times, "s", per, kind,
                             baseline))

    def skip(self, workload: str, library: str, reason: str) -> None:
        self.run.skipped.append(Skipped(workload, library, reason))
        self.log.write(f"  {library:<10} skipped: {reason}\n")

    def peer(self, workload: str, library: str, build: Callable[[], Any],
             unavailable_key: str) -> Any:
        """Build a peer's workload, or record why it is skipped (None)."""
        if not env.peer_status()[library]["installed"]:
            if not any(s.workload == workload and s.library == library
                       for s in self.run.skipped):
                self.skip(workload, library, "not installed")
            return None
        self.log.write(f"  {library:<10} building...\n")
        self.log.flush()
        work = build()
        if work is None:
            self.skip(workload, library, peers.UNAVAILABLE.get(unavailable_key,
                                                               "unavailable"))
        return work


@dataclasses.dataclass(frozen=True)
class Workload:
    """A standard workload: ``summary`` is its line in ``fastreplay bench
    --help``; ``title`` is a template filled in with a run's sizes
    (``sizes``), so that ``--quick`` titles say what was measured."""

    name: str
    summary: str
    title: str
    peers: tuple[str, ...]
    measure: Callable[[Config, _Recorder], None]

    def title_at(self, cfg: Config) -> str:
        return self.title.format(**sizes(cfg))

    def info(self, cfg: Config) -> WorkloadInfo:
        return WorkloadInfo(self.name, self.title_at(cfg), self.peers)


def sizes(cfg: Config) -> dict[str, str]:
    """The sizes workload titles name, as text (1M, 100k, "1, 2, 4")."""
    return {"capacity": count_text(cfg.capacity),
            "sample_table": count_text(cfg.sample_table),
            "writer_steps": count_text(cfg.writer_steps),
            "structured_steps": count_text(cfg.structured_steps),
            "memory_steps": count_text(cfg.memory_steps),
            "threads": ", ".join(str(n) for n in cfg.threads),
            "thread_steps": count_text(cfg.thread_steps),
            "process_items": count_text(cfg.process_items),
            "images": count_text(min(hwlimit.IMAGES, cfg.capacity)),
            "frames": count_text(min(hwlimit.FRAME_STEPS, cfg.capacity))}


# ----- the workloads -----

_PRIORITIZED_PEERS = (("cpprb", "cpprb_prioritized", "PrioritizedReplayBuffer"),
                      ("torchrl", "torchrl_prioritized", "PrioritizedReplayBuffer"),
                      ("tianshou", "tianshou_prioritized", "PrioritizedReplayBuffer"))
_UNIFORM_PEERS = (("cpprb", "cpprb_uniform", "ReplayBuffer"),
                  ("torchrl", "torchrl_uniform", "ReplayBuffer + LazyTensorStorage"),
                  ("sb3", "sb3_uniform", "ReplayBuffer"))


def _prioritized(cfg: Config, rec: _Recorder) -> None:
    name = "prioritized"
    rounds, inner = cfg.rounds, cfg.inner
    for variant, factory, baseline in (
            ("ReplayBuffer(alpha=0.6)", workloads.fastreplay_replay_buffer, True),
            ("Table (metadata only)", workloads.fastreplay_prioritized, False)):
        w = factory(cfg.capacity)
        rec.time(name, "fastreplay", variant, partial(w.sample_update, 256, 0.4),
                 rounds, inner=inner, baseline=baseline)
        del w
    for library, key, variant in _PRIORITIZED_PEERS:
        p = rec.peer(name, library, partial(peers.PRIORITIZED[key], cfg.capacity),
                     key)
        if p is not None:
            rec.time(name, library, variant, partial(p.sample_update, 256, 0.4),
                     rounds, inner=inner, kind="peer")
        del p


def _uniform(cfg: Config, rec: _Recorder) -> None:
    name = "uniform"
    rounds, inner = cfg.rounds, cfg.inner
    for variant, factory, baseline in (
            ("ReplayBuffer (5 fields)", workloads.fastreplay_replay_buffer_uniform,
             True),
            ("Table (metadata only)", workloads.fastreplay_uniform, False)):
        w = factory(cfg.capacity)
        rec.time(name, "fastreplay", variant, partial(w.sample, 256), rounds,
                 inner=inner, baseline=baseline)
        del w
    for library, key, variant in _UNIFORM_PEERS:
        p = rec.peer(name, library, partial(peers.UNIFORM[key], cfg.capacity), key)
        if p is not None:
            rec.time(name, library, variant, partial(p.sample, 256), rounds,
                     inner=inner, kind="peer")
        del p


def _writer(atari: bool, flush: bool) -> Callable[[Config, _Recorder], None]:
    def measure(cfg: Config, rec: _Recorder) -> None:
        name = _writer_name(atari, flush)
        obs = workloads.ATARI_OBS if atari else workloads.SMALL_OBS
        in_flight = 5 if flush else None
        steps, scale = cfg.writer_steps, 1000 / cfg.writer_steps
        w = workloads.WriterWorkload(obs, max_in_flight=in_flight)
        rec.time(name, "fastreplay", "TrajectoryWriter", lambda: w.run(steps),
                 cfg.writer_rounds, scale=scale, per="1000 steps", baseline=True)
        w.writer.close()
        from fastreplay.bench import reverb_peer

        frames = workloads.atari_frames(64) if atari else None
        p = rec.peer(name, "dm-reverb", lambda: reverb_peer.reverb_writer(
            obs[0], obs[1], steps=max(steps, 64), frames=frames,
            max_in_flight=in_flight), "reverb_writer")
        if p is not None:
            try:
                rec.time(name, "dm-reverb", "TrajectoryWriter", lambda: p.run(steps),
                         cfg.writer_rounds, scale=scale, per="1000 steps", kind="peer")
            finally:
                p.close()

    return measure


def _writer_name(atari: bool, flush: bool) -> str:
    return "writer-" + ("atari" if atari else "small") + ("-flush5" if flush else "")


def _structured(atari: bool) -> Callable[[Config, _Recorder], None]:
    def measure(cfg: Config, rec: _Recorder) -> None:
        name = _structured_name(atari)
        obs = workloads.ATARI_OBS if atari else workloads.SMALL_OBS
        steps, rounds = cfg.structured_steps, cfg.structured_rounds
        scale, per = 1000 / steps, "1000 steps"
        for via, variant, baseline in (
                ("structured", "StructuredWriter", True),
                ("trajectory", "TrajectoryWriter (same items)", False)):
            w = workloads.StructuredWorkload(obs, via)
            try:
                rec.time(name, "fastreplay", variant, partial(w.run, steps), rounds,
                         scale=scale, per=per, baseline=baseline,
                         kind="fastreplay" if baseline else "variant")
            finally:
                w.close()
        from fastreplay.bench import reverb_peer

        frames = [d["observation"] for d in workloads.step_data(obs)]
        vias: tuple[tuple[Literal["structured", "trajectory"], str], ...] = (
            ("structured", "StructuredWriter"),
            ("trajectory", "TrajectoryWriter (same items)"))
        for via, variant in vias:
            p = rec.peer(name, "dm-reverb", partial(
                reverb_peer.reverb_structured, obs[0], obs[1], via, frames=frames),
                f"reverb_structured_{via}")
            if p is not None:
                try:
                    rec.time(name, "dm-reverb", variant, partial(p.run, steps), rounds,
                             scale=scale, per=per, kind="peer")
                finally:
                    p.close()
                if p.suppressed_lines:  # "pending items is alarmingly high"
                    rec.log.write(f"  {'':<10} ({p.suppressed_lines} lines of reverb"
                                  f" stderr hidden: {p.last_suppressed[:90]})\n")
            del p

    return measure


def _structured_name(atari: bool) -> str:
    return "structured-" + ("atari" if atari else "small")


def _sample_batch(cfg: Config, rec: _Recorder) -> None:
    name, batches = "sample_batch", cfg.sample_batches
    w = workloads.SampleBatchWorkload(cfg.sample_table)
    try:
        rec.time(name, "fastreplay", "client.sample_batch", lambda: w.run(batches),
                 cfg.writer_rounds, scale=1 / batches, per="batch of 256",
                 baseline=True)
    finally:
        w.close()
    from fastreplay.bench import reverb_peer

    vias: tuple[tuple[Literal["client", "dataset"], str], ...] = (
        ("client", "client.sample"), ("dataset", "TrajectoryDataset"))
    for via, variant in vias:
        p = rec.peer(name, "dm-reverb", partial(reverb_peer.reverb_sample,
                                                cfg.sample_table, via=via),
                     f"reverb_sample_{via}")
        if p is not None:
            try:
                rec.time(name, "dm-reverb", variant, partial(p.run, batches),
                         cfg.writer_rounds, scale=1 / batches, per="batch of 256",
                         kind="peer")
            finally:
                p.close()
        del p


def _memory(cfg: Config, rec: _Recorder) -> None:
    m = workloads.stored_bytes_per_step(cfg.memory_steps)
    rec.add(Result("memory", "fastreplay", "stored (LZ4 chunks)",
                   m["stored_bytes_per_step"], "B", "step", 1, baseline=True))
    rec.add(Result("memory", "uncompressed", "one step's payload",
                   m["raw_bytes_per_step"], "B", "step", 1, kind="reference"))
    rec.add(Result("memory", "uncompressed", "one length-5 item's payload",
                   m["item_payload_bytes"], "B", "step", 1, kind="reference"))


def _thread_rounds(cfg: Config, run: Callable[[int], _T]) -> dict[int, list[_T]]:
    """``run(n)`` ``thread_rounds`` times for every thread count n, after one
    untimed warm-up round.  Rounds interleave the counts, so drift on a
    shared machine hits every count alike."""
    runs: dict[int, list[_T]] = {n: [] for n in cfg.threads}
    for n in cfg.threads:
        run(n)
    for _ in range(cfg.thread_rounds):
        for n in cfg.threads:
            runs[n].append(run(n))
    return runs


def _writers(n: int) -> str:
    return f"{n} writer{'s' if n > 1 else ''}"


def _threads(cfg: Config, rec: _Recorder) -> None:
    for sampler in (False, True):
        runs = _thread_rounds(cfg, partial(
            workloads.concurrent_throughput, steps=cfg.thread_steps, sampler=sampler))
        for n in cfg.threads:
            label = _writers(n) + (" + 1 sampler" if sampler else "")
            rec.add(from_values("threads", "fastreplay", f"{label}: steps",
                                (r[0] for r in runs[n]), "steps/s", ""))
            if sampler:
                rec.add(from_values("threads", "fastreplay", f"{label}: sampled items",
                                    (r[1] for r in runs[n]), "items/s", ""))
    from fastreplay.bench import reverb_peer

    p = rec.peer("threads", "dm-reverb", partial(
        reverb_peer.reverb_threads, workloads.atari_frames(64)), "reverb_threads")
    if p is None:
        return
    try:
        steps = _thread_rounds(cfg, lambda n: p.run(n, cfg.thread_steps))
    finally:
        p.close()
    for n in cfg.threads:  # ratio: to fastreplay's row with as many writers
        rec.add(from_values("threads", "dm-reverb", f"{_writers(n)}: steps",
                            steps[n], "steps/s", "", kind="peer"))
    if p.suppressed_lines:  # "pending items is alarmingly high"
        rec.log.write(f"  {'':<10} ({p.suppressed_lines} lines of reverb stderr"
                      f" hidden: {p.last_suppressed[:90]})\n")


def _processes(cfg: Config, rec: _Recorder) -> None:
    from fastreplay.bench import processes

    processes.measure(cfg, rec)


def _obs(atari: bool) -> str:
    return "uint8[84,84,4] frames" if atari else "float32[8]"


# Titles are str.format templates over ``sizes(cfg)``: "{{" is a brace.
WORKLOADS = [
    Workload("prioritized", "PER: sample 256 (IS weights), update 256 priorities",
             "Prioritized replay, capacity {capacity}: sample 256 "
             "(alpha 0.6, IS weights beta 0.4) + update 256 priorities",
             ("cpprb", "torchrl", "tianshou"), _prioritized),
    Workload("uniform", "uniform sample of 256 small transitions",
             "Uniform sample of 256 from {capacity} small transitions",
             ("cpprb", "torchrl", "sb3"), _uniform),
    *[Workload(_writer_name(a, f), "TrajectoryWriter, a length-5 item per "
               + ("Atari step" if a else "small step")
               + (", flush(5) after each" if f else ""),
               "Writer: {{observation: " + _obs(a) + ", action, reward}}, one "
               "length-5 item per step" + (", flush(5) after each item" if f else "")
               + "; {writer_steps} steps a round",
               ("dm-reverb",), _writer(a, f))
      for f in (False, True) for a in (False, True)],
    *[Workload(_structured_name(a), "StructuredWriter, a length-10 item per "
               + ("Atari step" if a else "small step"),
               "StructuredWriter: {{observation: " + _obs(a) + ", action, "
               "reward}}, one length-10 pattern item per step, flush() every 100 "
               "steps; {structured_steps} steps a round", ("dm-reverb",),
               _structured(a))
      for a in (False, True)],
    Workload("sample_batch", "client.sample_batch(256) of length-5 items",
             "Batches of 256 length-5 items of small steps from a "
             "{sample_table}-item Uniform table", ("dm-reverb",), _sample_batch),
    Workload("memory", "stored bytes per step of Atari frames",
             "Bytes per stored step, overlapping length-5 items of Atari-like "
             "frames ({memory_steps} steps)", (), _memory),
    Workload("threads", "writer threads, alone and with a sampler thread",
             "Aggregate throughput: {threads} writer threads ({thread_steps} Atari "
             "steps each), alone and with one sample_batch thread", ("dm-reverb",),
             _threads),
    Workload("processes", "actor and learner processes, a server process",
             "Across processes: actor, learner and priority updates against a "
             "server process (float32[8] steps, one item per step; "
             "sample_batch(256) and priorities from a {process_items}-item "
             "Prioritized table)", ("dm-reverb",), _processes),
    Workload("per-images", "PER: sample 256 of uint8[84,84] obs + next_obs",
             "Prioritized, {images} x uint8[84,84] obs + next_obs: sample 256 (IS "
             "weights)", ("tianshou", "cpprb"), hwlimit.per_images),
    Workload("frames", "4-stacked frames stored once: bytes, sample 256",
             "Each frame once: {frames} steps of 4-stacked noise uint8[84,84] obs "
             "+ next_obs (stored bytes, sample 256)", ("cpprb",), hwlimit.frames),
    Workload("add-batch", "add_batch of 256 small transitions, full buffer",
             "add 256 small transitions per call into a full {capacity} buffer",
             ("cpprb",), hwlimit.add_batch),
    Workload("add-one", "add one small transition, full PER buffer",
             "add one small transition into a full {capacity} prioritized buffer",
             ("cpprb",), hwlimit.add_one),
    Workload("writer-step", "a Reverb user's append + create_item step",
             "A Reverb user's step (append + a length-5 item of three "
             "history slices) over a do-nothing writer", (), hwlimit.writer_step),
]
WORKLOAD_NAMES = [w.name for w in WORKLOADS]


def workload_help() -> str:
    """The workloads as ``fastreplay bench --help`` lists them."""
    width = max(len(w.name) for w in WORKLOADS)
    lines = []
    for w in WORKLOADS:
        against = f" (vs {', '.join(w.peers)})" if w.peers else " (no peer)"
        lines.append(f"  {w.name:<{width}}  {w.summary}{against}")
    return "\n".join(lines)


def run(config: Config, *, quick: bool = False, only: Sequence[str] | None = None,
        log: TextIO = sys.stderr) -> Run:
    """Measure the selected workloads (all by default) and compute ratios."""
    result = Run(config, quick)
    rec = _Recorder(result, log)
    t0 = time.perf_counter()
    try:
        for w in WORKLOADS:
            if only and w.name not in only:
                continue
            result.workloads.append(w.info(config))
            log.write(f"{w.name}: {w.title_at(config)}\n")
            log.flush()
            # Objects left by earlier workloads and peers' imports (torch
            # alone: ~300k) go to the permanent generation, so a collection
            # in a timed round scans only the workload's own objects: a full
            # collection over ~500k objects took ~250 ms, 3x a threads round.
            gc.collect()
            gc.freeze()
            w.measure(config, rec)
    finally:
        gc.unfreeze()
    result.context = {"machine": env.machine(), "versions": env.versions(),
                      "build": env.build_info(), "commit": env.commit()}
    result.seconds = time.perf_counter() - t0
    compute_ratios(result.results)
    return result
