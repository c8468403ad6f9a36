"""Shared pieces of ``ray_bench.py`` (issue 15): sizes, the local 2-node
cluster, data of the workloads, pinned actors, rounds and results.

Not a test module (no ``test_`` prefix): ``ray_bench.py`` runs it, and
``test_bench_ray.py`` calls it with tiny sizes.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

#: Transition fields of the small workloads (float32[8] obs/next_obs).
OBS_DIM = 8
#: Atari-like frames.
FRAME = (84, 84)
TABLE = "replay"
ALPHA = 0.6
BETA = 0.4


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How long and how big one run is."""

    rounds: int  # rounds of each throughput figure (median and spread over them)
    duration: float  # seconds each actor runs per round
    batch: int  # rows per writer call (anchors) and per sample
    prefill: int  # rows in the buffer before the learner figures
    atari_prefill: int  # frames over the K=4 shards before the Atari figure
    atari_batch: int
    startup_rounds: int
    restart_rounds: int
    capacity: int  # max_size of the small-transition tables (all shards)
    atari_capacity: int
    timeout: float  # bound of every single wait


FULL = Sizes(rounds=5, duration=2.0, batch=256, prefill=100_000, atari_prefill=20_000,
             atari_batch=256, startup_rounds=5, restart_rounds=3, capacity=1_000_000,
             atari_capacity=40_000, timeout=300.0)
QUICK = Sizes(rounds=3, duration=0.5, batch=256, prefill=20_000, atari_prefill=4_000,
              atari_batch=256, startup_rounds=2, restart_rounds=1, capacity=200_000,
              atari_capacity=8_000, timeout=120.0)
TINY = Sizes(rounds=1, duration=0.05, batch=32, prefill=512, atari_prefill=128,
             atari_batch=32, startup_rounds=1, restart_rounds=1, capacity=4_096,
             atari_capacity=512, timeout=60.0)


# ----- results -----

@dataclasses.dataclass
class Row:
    """One measured variant of a figure: a value per round.

    ``naive``/``torchrl`` name the rows of the same figure it is compared
    with (its anchors); ``higher`` says whether bigger is better (rows/s)
    or smaller (seconds)."""

    name: str
    values: list[float]
    unit: str = "rows/s"
    higher: bool = True
    naive: str | None = None
    torchrl: str | None = None
    note: str = ""

    @property
    def median(self) -> float:
        return float(statistics.median(self.values)) if self.values else float("nan")

    def ratio(self, other: Row) -> float:
        if not self.values or not other.values:
            return float("nan")
        a, b = self.median, other.median
        return a / b if self.higher else b / a

    def to_json(self) -> dict[str, Any]:
        v = self.values
        return {"name": self.name, "unit": self.unit, "higher_is_better": self.higher,
                "rounds": v, "median": self.median if v else None,
                "min": min(v) if v else None, "max": max(v) if v else None,
                "vs_naive": self.naive, "vs_torchrl": self.torchrl, "note": self.note}


@dataclasses.dataclass
class Figure:
    """One table of the output: the rows measured, the bar of the contract,
    and why rows are missing."""

    key: str
    title: str
    bar: str
    rows: list[Row] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    def row(self, name: str) -> Row | None:
        return next((r for r in self.rows if r.name == name), None)


def rate(results: list[tuple[int, float]]) -> float:
    """Rows/s of actors that ran at the same time: the sum of their rates."""
    return sum(rows / elapsed for rows, elapsed in results)


def together(writers: list[Any], learner: Any, n: int, duration: float,
             timeout: float, **run: Any) -> tuple[list[float], list[float]]:
    """Writers and the learner at once, ``n`` rounds: ``(writes, sampled)``
    rows/s per round (each actor's ``run(duration)`` returns ``(rows, s)``;
    ``run`` are more keyword arguments of the writers' ``run``)."""
    import ray

    writes: list[float] = []

    def one(d: float) -> float:
        refs = [w.run.remote(d, **run) for w in writers]
        lref = learner.run.remote(d)
        writes.append(rate(ray.get(refs, timeout=timeout)))
        return rate([ray.get(lref, timeout=timeout)])

    sampled = rounds(one, n, duration)
    return writes[1:], sampled  # not the warm-up round


def rounds(fn: Callable[[float], float], n: int, duration: float) -> list[float]:
    """``fn(duration)`` ``n`` times, one value per round, after a shorter
    round not kept (first calls connect, warm caches and import)."""
    fn(min(duration, 0.2))
    return [float(fn(duration)) for _ in range(n)]


# ----- the cluster -----

@dataclasses.dataclass
class Cluster:
    """A local Ray cluster on loopback: the driver's head node plus extra
    raylets started in this process (``ray.cluster_utils.Cluster`` hangs on
    this machine).  ``nodes[0]`` is the head (the driver's node)."""

    nodes: list[str]
    extra: list[Any]
    owned: bool  # this process called ray.init (so it shuts it down)

    def stop(self) -> None:
        import ray

        for node in self.extra:
            try:
                node.kill_all_processes(check_alive=False, allow_graceful=True)
            except Exception:  # noqa: BLE001 - best effort at shutdown
                pass
        if self.owned:
            ray.shutdown()


def _ship_by_value() -> None:
    """Workers may not have benchmarks/ on their path: Ray pickles the actor
    classes of these modules by value."""
    import ray.cloudpickle as cp

    for name in ("ray_bench_common", "ray_bench_anchors", "ray_bench_frray"):
        mod = sys.modules.get(name)
        if mod is not None:
            cp.register_pickle_by_value(mod)


def start_cluster(num_nodes: int = 2, num_cpus: int = 4, timeout: float = 120.0
                  ) -> Cluster:
    """Start (or join, when this process already called ``ray.init``) a
    loopback cluster of ``num_nodes`` nodes, usage stats off."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([here, *paths]))
    import ray

    owned = not ray.is_initialized()
    gcs = None
    if owned:
        ctx = ray.init(_node_ip_address="127.0.0.1", num_cpus=num_cpus,
                 include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
        gcs = ctx.address_info["gcs_address"]
    _ship_by_value()
    extra = []
    if owned and num_nodes > 1:
        from ray._private.node import Node
        from ray._private.parameter import RayParams

        for _ in range(num_nodes - 1):
            params = RayParams(gcs_address=gcs, node_ip_address="127.0.0.1",
                               num_cpus=num_cpus, include_log_monitor=False,
                               node_manager_port=0, object_store_memory=200 << 20,
                               min_worker_port=0, max_worker_port=0)
            params.dashboard_agent_listen_port = None
            extra.append(Node(params, head=False, shutdown_at_exit=True,
                              spawn_reaper=True))
    head = ray.get_runtime_context().get_node_id()
    deadline = time.monotonic() + timeout
    while True:
        alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        if len(alive) >= min(num_nodes, 1 + len(extra)) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    others = sorted(n for n in alive if n != head)
    return Cluster(nodes=[head, *others], extra=extra, owned=owned)


def on_node(node: str) -> dict[str, Any]:
    """Actor options pinning it to ``node`` (no CPU reserved: the figures
    place actors, Ray's CPU count does not)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"num_cpus": 0,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)}


_CLASSES: dict[type, Any] = {}


def remote_class(cls: type) -> Any:
    """``ray.remote(cls)``, made once per class (each call would export the
    class again)."""
    import ray

    if cls not in _CLASSES:
        _CLASSES[cls] = ray.remote(cls)
    return _CLASSES[cls]


def kill(*actors: Any) -> None:
    import ray

    for a in actors:
        try:
            ray.kill(a, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


# ----- data -----

def small_batch(n: int, seed: int) -> dict[str, np.ndarray]:
    """``n`` small transitions: float32[8] obs/next_obs, act, rew, done."""
    rng = np.random.default_rng(seed)
    return {"obs": rng.standard_normal((n, OBS_DIM), dtype=np.float32),
            "next_obs": rng.standard_normal((n, OBS_DIM), dtype=np.float32),
            "act": rng.integers(0, 18, n, dtype=np.int32),
            "rew": rng.standard_normal(n, dtype=np.float32),
            "done": rng.random(n) < 0.01}


def frame_batch(n: int, seed: int, compressible: bool) -> dict[str, np.ndarray]:
    """``n`` Atari-like transitions: uint8[84,84] frames (uniform noise, or
    frames that compress like game screens: flat background, a few sprites
    and a noisy score strip), act, rew, done."""
    rng = np.random.default_rng(seed)
    if compressible:
        obs = np.zeros((n, *FRAME), np.uint8)
        obs[:, 20:, :] = 40
        for i in range(n):
            for _ in range(3):
                y, x = rng.integers(20, 76), rng.integers(0, 76)
                obs[i, y:y + 8, x:x + 8] = rng.integers(100, 255)
            obs[i, :8, :32] = rng.integers(0, 255, (8, 32), dtype=np.uint8)
    else:
        obs = rng.integers(0, 256, (n, *FRAME), dtype=np.uint8)
    return {"obs": obs, "act": rng.integers(0, 18, n, dtype=np.int32),
            "rew": rng.standard_normal(n, dtype=np.float32),
            "done": rng.random(n) < 0.01}


def new_priorities(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.1, 2.0, n)


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
