"""What ``fastreplay bench`` measures and saves: the sizes of a run
(:class:`Config`), its rows (:class:`Result`, a median with the smallest and
largest round beside it), whole runs (:class:`Run`, the ``--json`` document)
and the ratios between rows.

Two kinds of comparison, kept apart everywhere (tables, JSON, chart):

* ``ratio`` (peer rows only: cpprb, TorchRL, Tianshou, SB3, dm-reverb): the
  peer's median over the median of the fastreplay row it is compared with
  (``ratio_to``), so 3.0 means the peer takes three times as long; for rates
  (``.../s``) it is inverted so that it reads the same way.  ``ratio_min`` and
  ``ratio_max`` are its interquartile range: the peer's first quartile over
  fastreplay's third, and the peer's third over fastreplay's first (a
  shared machine's one slow round moves the min-max, not the quartiles).
* ``vs_baseline`` (fastreplay's own variants, e.g. another API doing the same
  work, and references such as the uncompressed payload): the row's median
  over its workload's fastreplay baseline.  These are not peers and never get
  a ``ratio``.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from fastreplay.bench.env import PEER_BY_NAME

__all__ = ["FORMAT", "FULL", "QUICK", "Config", "Result", "Run", "Skipped",
           "WorkloadInfo", "check_same_sizes", "commit_text", "compute_ratios",
           "count_text", "from_values"]

FORMAT = "fastreplay-bench/2"
#: formats ``Run.from_json`` reads (1: before spreads; its ratios are recomputed)
READABLE_FORMATS = ("fastreplay-bench/1", FORMAT)


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
    # Paired rounds of writer-step: its share is a difference of two ~1-2 us
    # loops, so a median of 5 moved with every noisy neighbour (one of four
    # runs off by 0.2-0.5 us here); 9 keep it within ~0.05 us.
    step_rounds: int = 9


FULL = Config(capacity=1_000_000, rounds=15, inner=50, writer_steps=1000,
              writer_rounds=5, sample_table=100_000, sample_batches=20,
              memory_steps=2000, thread_steps=10000, thread_rounds=5,
              threads=(1, 2, 4))
QUICK = Config(capacity=10_000, rounds=3, inner=5, writer_steps=200, writer_rounds=2,
               sample_table=2_000, sample_batches=2, memory_steps=300,
               thread_steps=300, thread_rounds=1, threads=(1, 2),
               structured_steps=300, structured_rounds=2, process_items=2_000,
               process_rounds=2, process_seconds=0.2, step_rounds=2)


def count_text(n: int) -> str:
    """A count as titles show it: 1M, 100k, 2.5k, 300."""
    for scale, suffix in ((1_000_000, "M"), (1_000, "k")):
        if n >= scale:
            return f"{n / scale:g}{suffix}"
    return str(n)


@dataclasses.dataclass
class Result:
    """One measured row.  ``median`` (with ``min`` and ``max``, the smallest
    and largest of its ``rounds``) is in ``unit`` per ``per`` (e.g. seconds
    per 1000 steps).  ``kind``: "fastreplay" (the workload's ``baseline`` or
    another fastreplay row), "variant" (another fastreplay API doing the
    baseline's work), "reference" (e.g. the uncompressed payload) or "peer".
    See the module docstring for ``ratio`` and ``vs_baseline``."""

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
    min: float | None = None
    max: float | None = None
    q1: float | None = None
    q3: float | None = None
    ratio_min: float | None = None
    ratio_max: float | None = None
    ratio_to: str | None = None
    vs_baseline: float | None = None

    def __post_init__(self) -> None:
        if self.rounds == 1 and self.min is None and self.max is None:
            # one measurement: its own range
            self.min = self.max = self.q1 = self.q3 = self.median

    @property
    def is_peer(self) -> bool:
        """A row of one of the peer libraries (never fastreplay itself)."""
        return self.kind == "peer" and self.library in PEER_BY_NAME


    def to_json(self) -> dict[str, Any]:
        """The row as ``--json`` writes it: the spread right after the median."""
        keys = ("workload", "library", "variant", "median", "min", "max", "q1", "q3",
                "unit",
                "per", "rounds", "kind", "baseline", "ratio", "ratio_min",
                "ratio_max", "ratio_to", "vs_baseline")
        return {k: getattr(self, k) for k in keys}


def from_values(workload: str, library: str, variant: str, values: Iterable[float],
                unit: str, per: str, kind: str = "fastreplay",
                baseline: bool = False) -> Result:
    """A row whose median, min, max and quartiles are those of ``values``
    (one a round)."""
    vals = sorted(values)
    if not vals:
        raise ValueError(f"{workload}: {library} {variant}: no rounds to summarize")
    q1, _, q3 = (statistics.quantiles(vals, n=4, method="inclusive")
                 if len(vals) > 1 else vals * 3)
    return Result(workload, library, variant, statistics.median(vals), unit, per,
                  len(vals), kind, baseline, min=vals[0], max=vals[-1], q1=q1, q3=q3)


@dataclasses.dataclass
class Skipped:
    """A peer that was not measured in a workload, and why."""

    workload: str
    library: str
    reason: str


@dataclasses.dataclass(frozen=True)
class WorkloadInfo:
    """A workload as a run saw it: its name, its title at the run's sizes and
    the peers it compares with."""

    name: str
    title: str
    peers: tuple[str, ...]


@dataclasses.dataclass
class Run:
    """Results of one measuring run, with the machine they were measured on."""

    config: Config
    quick: bool
    results: list[Result] = dataclasses.field(default_factory=list)
    skipped: list[Skipped] = dataclasses.field(default_factory=list)
    workloads: list[WorkloadInfo] = dataclasses.field(default_factory=list)
    seconds: float = 0.0  # wall time of the whole run
    #: machine, versions, build and commit (``env``) of the measuring process
    context: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def sizes(self) -> str:
        """"quick sizes" or "full sizes"."""
        return "quick sizes" if self.quick else "full sizes"

    def sizes_text(self) -> str:
        """The sizes in a few words, e.g. for titles: "quick sizes (capacity
        10k, 3 rounds)"."""
        c = self.config
        return f"{self.sizes} (capacity {count_text(c.capacity)}, {c.rounds} rounds)"

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "quick": self.quick,
            "sizes": self.sizes,
            "config": dataclasses.asdict(self.config),
            **self.context,
            "seconds": round(self.seconds, 3),
            "workloads": [dataclasses.asdict(w) for w in self.workloads],
            "results": [r.to_json() for r in self.results],
            "skipped": [dataclasses.asdict(s) for s in self.skipped],
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Run:
        """A run written by ``to_json`` (``fastreplay bench --json``); ratios
        are recomputed from the medians (format 1 had none for spreads)."""
        if doc.get("format") not in READABLE_FORMATS:
            raise ValueError(f"not a fastreplay bench --json document (format "
                             f"{doc.get('format')!r}, expected {FORMAT!r})")
        known = {f.name for f in dataclasses.fields(Config)}
        raw = {k: v for k, v in doc["config"].items() if k in known}
        config = Config(**{**raw, "threads": tuple(raw["threads"])})
        fields = {f.name for f in dataclasses.fields(Result)}
        results = [Result(**{k: v for k, v in r.items() if k in fields})
                   for r in doc["results"]]
        compute_ratios(results)
        return cls(config, bool(doc["quick"]), results,
                   [Skipped(**s) for s in doc["skipped"]],
                   [WorkloadInfo(w["name"], w["title"], tuple(w["peers"]))
                    for w in doc["workloads"]],
                   float(doc["seconds"]),
                   {k: doc.get(k) for k in ("machine", "versions", "build", "commit")})


def commit_text(context: dict[str, Any]) -> str:
    """The commit of a run's context, never "None": old runs saved without
    one read "unknown (not recorded)"."""
    commit = context.get("commit")
    if not commit or commit == "None":
        return "unknown (not recorded)"
    return str(commit)


def _comparable(r: Result, b: Result | None) -> bool:
    return (b is not None and r.unit == b.unit and r.per == b.per
            and b.median > 0 and r.median > 0)


def compute_ratios(results: list[Result]) -> None:
    """Set ``ratio`` (with its range and ``ratio_to``) on peer rows and
    ``vs_baseline`` on fastreplay's variant and reference rows.

    A peer row is compared with the fastreplay row of its workload with the
    same variant (threads: as many writers), else with the baseline; a
    variant or reference row with the baseline.  Rates (unit ".../s") are
    inverted, so that every ratio is how many times longer the row takes."""
    for r in results:
        r.ratio = r.ratio_min = r.ratio_max = r.ratio_to = r.vs_baseline = None
    base = {r.workload: r for r in results if r.baseline}
    same = {(r.workload, r.variant): r for r in results if r.kind == "fastreplay"}
    for r in results:
        if r.is_peer:
            b = same.get((r.workload, r.variant), base.get(r.workload))
        elif r.kind in ("variant", "reference"):
            b = base.get(r.workload)
        else:
            continue
        if b is None or not _comparable(r, b):
            continue
        rate = r.unit.endswith("/s")
        ratio = b.median / r.median if rate else r.median / b.median
        if not r.is_peer:
            r.vs_baseline = ratio
            continue
        r.ratio, r.ratio_to = ratio, b.variant
        if (r.q1 is not None and r.q3 is not None and b.q1 is not None
                and b.q3 is not None and min(r.q1, b.q1) > 0):
            r.ratio_min, r.ratio_max = ((b.q1 / r.q3, b.q3 / r.q1) if rate
                                        else (r.q1 / b.q3, r.q3 / b.q1))


def check_same_sizes(runs: Sequence[Run], names: Sequence[str]) -> None:
    """Raise ValueError unless every run was measured at the same sizes
    (ratios from a quick run and a full run do not compare)."""
    first, first_name = runs[0], names[0]
    for run, name in zip(runs[1:], names[1:], strict=True):
        if run.quick == first.quick and run.config == first.config:
            continue
        a, b = dataclasses.asdict(first.config), dataclasses.asdict(run.config)
        diff = "; ".join(f"{k} {a[k]} vs {b[k]}" for k in a if a[k] != b[k])
        raise ValueError(
            f"cannot merge runs of different sizes: {first_name} has "
            f"{first.sizes_text()} and {name} has {run.sizes_text()}"
            + (f" ({diff})" if diff else "")
            + ". Their medians and ratios do not compare. Show them one at a "
            f"time (fastreplay bench --from-json {name}), or measure again "
            "with the same sizes (all with --quick, or none).")
