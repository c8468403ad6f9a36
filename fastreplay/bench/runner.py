"""``fastreplay bench``: the standard workloads of DESIGN.md section 6 on
fastreplay and, in the same process, on every installed peer.

Most workloads have one fastreplay *baseline* row; a peer row's ratio is the
peer's median divided by the baseline's (for times: how many times longer the
peer takes).  A peer row with the variant of a fastreplay row (threads: as
many writers) is divided by that row instead, and rates (steps/s) are
inverted, fastreplay's over the peer's, so they read the same way.  Medians
are over ``rounds`` timed rounds after one warm-up round; a round of a
microsecond-scale call runs it ``inner`` times.  Peers that are not
installed, or fail to build, are recorded as skipped with the reason, never
as an error.
"""

from __future__ import annotations

import dataclasses
import gc
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Literal, TextIO, TypeVar

from fastreplay.bench import env, hwlimit, peers, workloads

__all__ = ["FULL", "QUICK", "WORKLOADS", "Config", "Result", "Run", "Skipped", "run"]

_T = TypeVar("_T")


@dataclasses.dataclass(frozen=True)
class Config:
    """Sizes and repetitions of one run."""

    capacity: int  # items of the prioritized and uniform tables
    rounds: int  # timed rounds of the table workloads
    inner: int  # calls per round of the table workloads
    writer_steps: int
    writer_rounds: int
    sample_table: int  # items of the sample_batch table
    sample_batches: int  # batches of 256 per round
    memory_steps: int
    thread_steps: int  # steps per writer thread
    thread_rounds: int
    threads: tuple[int, ...]
    structured_steps: int = 5000  # steps per round of the structured workloads
    structured_rounds: int = 9
    process_items: int = 1_000_000  # items of the table a learner process samples
    process_rounds: int = 5  # rounds of the processes workload
    process_seconds: float = 1.0  # one round of the processes workload


FULL = Config(capacity=1_000_000, rounds=15, inner=50, writer_steps=1000,
              writer_rounds=5, sample_table=100_000, sample_batches=20,
              memory_steps=2000, thread_steps=10000, thread_rounds=5,
              threads=(1, 2, 4))
QUICK = Config(capacity=10_000, rounds=3, inner=5, writer_steps=200, writer_rounds=2,
               sample_table=2_000, sample_batches=2, memory_steps=300,
               thread_steps=300, thread_rounds=1, threads=(1, 2),
               structured_steps=300, structured_rounds=2, process_items=2_000,
               process_rounds=2, process_seconds=0.2)


@dataclasses.dataclass
class Result:
    """One measured row.  ``median`` is in ``unit`` per ``per`` (e.g. seconds
    per 1000 steps); ``kind`` is "fastreplay", "variant" (another fastreplay
    API doing the baseline's work; it gets a ratio), "peer" or "reference"."""

    workload: str
    library: str
    variant: str
    median: float
    unit: str
    per: str
    rounds: int
    kind: str = "fastreplay"
    baseline: bool = False
    ratio: float | None = None


@dataclasses.dataclass
class Skipped:
    workload: str
    library: str
    reason: str


@dataclasses.dataclass
class Run:
    """Results of one ``run`` call, with the machine they were measured on."""

    config: Config
    quick: bool
    results: list[Result] = dataclasses.field(default_factory=list)
    skipped: list[Skipped] = dataclasses.field(default_factory=list)
    workloads: list[Workload] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    #: machine, versions, build and commit (``env``) of the measuring process
    context: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "quick": self.quick,
            "config": dataclasses.asdict(self.config),
            **self.context,
            "seconds": round(self.seconds, 3),
            "workloads": [{"name": w.name, "title": w.title, "peers": list(w.peers)}
                          for w in self.workloads],
            "results": [dataclasses.asdict(r) for r in self.results],
            "skipped": [dataclasses.asdict(s) for s in self.skipped],
        }


    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Run:
        """A run written by ``to_json`` (``fastreplay bench --json``)."""
        if doc.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} document (format "
                             f"{doc.get('format')!r})")
        config = Config(**{**doc["config"], "threads": tuple(doc["config"]["threads"])})
        by_name = {w.name: w for w in WORKLOADS}
        return cls(config, bool(doc["quick"]),
                   [Result(**r) for r in doc["results"]],
                   [Skipped(**s) for s in doc["skipped"]],
                   [by_name[w["name"]] for w in doc["workloads"]],
                   float(doc["seconds"]),
                   {k: doc.get(k) for k in ("machine", "versions", "build", "commit")})


FORMAT = "fastreplay-bench/1"


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
        self.add(Result(workload, library, variant, statistics.median(times), "s", per,
                        rounds, kind, baseline))

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
    name: str
    title: str
    peers: tuple[str, ...]
    measure: Callable[[Config, _Recorder], None]


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
            rec.add(Result("threads", "fastreplay", f"{label}: steps",
                           statistics.median(r[0] for r in runs[n]), "steps/s", "",
                           cfg.thread_rounds))
            if sampler:
                rec.add(Result("threads", "fastreplay", f"{label}: sampled items",
                               statistics.median(r[1] for r in runs[n]), "items/s",
                               "", cfg.thread_rounds))
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
        rec.add(Result("threads", "dm-reverb", f"{_writers(n)}: steps",
                       statistics.median(steps[n]), "steps/s", "", cfg.thread_rounds,
                       kind="peer"))
    if p.suppressed_lines:  # "pending items is alarmingly high"
        rec.log.write(f"  {'':<10} ({p.suppressed_lines} lines of reverb stderr"
                      f" hidden: {p.last_suppressed[:90]})\n")


def _processes(cfg: Config, rec: _Recorder) -> None:
    from fastreplay.bench import processes

    processes.measure(cfg, rec)


WORKLOADS = [
    Workload("prioritized", "Prioritized replay, capacity 1e6: sample 256 "
             "(alpha 0.6, IS weights beta 0.4) + update 256 priorities",
             ("cpprb", "torchrl", "tianshou"), _prioritized),
    Workload("uniform", "Uniform sample of 256 from 1e6 small transitions",
             ("cpprb", "torchrl", "sb3"), _uniform),
    *[Workload(_writer_name(a, f), "Writer: {observation: "
               + ("uint8[84,84,4] frames" if a else "float32[8]")
               + ", action, reward}, one length-5 item per step"
               + (", flush(5) after each item" if f else ""),
               ("dm-reverb",), _writer(a, f))
      for f in (False, True) for a in (False, True)],
    *[Workload(_structured_name(a), "StructuredWriter: {observation: "
               + ("uint8[84,84,4] frames" if a else "float32[8]")
               + ", action, reward}, one length-10 pattern item per step, "
               "flush() every 100 steps", ("dm-reverb",), _structured(a))
      for a in (False, True)],
    Workload("sample_batch", "Batches of 256 length-5 items of small steps from "
             "a 100k-item Uniform table", ("dm-reverb",), _sample_batch),
    Workload("memory", "Bytes per stored step, overlapping length-5 items of "
             "Atari-like frames", (), _memory),
    Workload("threads", "Aggregate throughput: 1, 2, 4 writer threads (Atari "
             "steps), alone and with one sample_batch thread", ("dm-reverb",),
             _threads),
    Workload("processes", "Across processes: actor, learner and priority updates "
             "against a server process (float32[8] steps, one item per step; "
             "sample_batch(256) and priorities from a 1e6-item Prioritized table)",
             ("dm-reverb",), _processes),
    Workload("per-images", "Prioritized, 100k x uint8[84,84] obs + next_obs: sample "
             "256 (IS weights)", ("tianshou", "cpprb"), hwlimit.per_images),
    Workload("frames", "Each frame once: 4-stacked noise uint8[84,84] obs + next_obs "
             "(stored bytes, sample 256)", ("cpprb",), hwlimit.frames),
    Workload("add-batch", "add 256 small transitions per call into a full 1e6 "
             "buffer", ("cpprb",), hwlimit.add_batch),
    Workload("add-one", "add one small transition into a full 1e6 prioritized "
             "buffer", ("cpprb",), hwlimit.add_one),
    Workload("writer-step", "A Reverb user's step (append + a length-5 item of "
             "three history slices) over a do-nothing writer", (), hwlimit.writer_step),
]
WORKLOAD_NAMES = [w.name for w in WORKLOADS]


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
            result.workloads.append(w)
            log.write(f"{w.name}: {w.title}\n")
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
    result.seconds = time.perf_counter() - t0
    result.context = {"machine": env.machine(), "versions": env.versions(),
                      "build": env.build_info(), "commit": env.commit()}
    _ratios(result.results)
    return result


def _ratios(results: list[Result]) -> None:
    """A non-fastreplay row's ratio is to the fastreplay row of its workload
    with the same variant (threads: as many writers), else to the baseline;
    for rates (unit ".../s") it is inverted, so that it too is how many times
    longer the row takes than fastreplay."""
    base = {r.workload: r for r in results if r.baseline}
    same = {(r.workload, r.variant): r for r in results if r.kind == "fastreplay"}
    for r in results:
        b = same.get((r.workload, r.variant), base.get(r.workload))
        if (b is not None and r.kind != "fastreplay" and r.unit == b.unit
                and r.per == b.per and b.median > 0 and r.median > 0):
            rate = r.unit.endswith("/s")
            r.ratio = b.median / r.median if rate else r.median / b.median


# ----- values as text (fastreplay.bench.report formats whole runs) -----

def format_value(value: float, unit: str) -> str:
    """A median with a readable unit: seconds as ns/µs/ms/s, others grouped."""
    if unit == "s":
        for scale, name in ((1e-6, "ns"), (1e-3, "µs"), (1.0, "ms")):
            if value < scale:
                return f"{value * 1e3 / scale:.1f} {name}"
        return f"{value:.2f} s"
    if value >= 100:
        return f"{value:,.0f} {unit}"
    return f"{value:.1f} {unit}"


def median_text(r: Result) -> str:
    value = format_value(r.median, r.unit)
    return f"{value} / {r.per}" if r.per else value
