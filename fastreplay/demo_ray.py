"""``fastreplay demo --ray``: the demo's main job on Ray.

The same actors and learner as ``fastreplay demo`` (``fastreplay.demo``),
against a ``fastreplay.ray.ShardedServer`` (``--shards`` shards, spread over
the cluster's nodes): each actor is a Ray actor holding a pickled
``fastreplay.ray.Client`` and running the demo's actor thread; actor *i*
writes into shard ``i % shards`` and is placed on that shard's node, so it
takes the same-node path (shared memory) when Ray can put it there.  The
learner runs the demo's learner thread in this process (the driver):
globally exact ``sample_batch`` over the shards and ``update_priorities``
routed by key.  The summary is ``fastreplay demo``'s, from the shards' metrics summed
(``Client.metrics``), plus the shard count and every shard's size.

Ray: an initialized Ray (``ray.init`` done by the caller) is used as it is;
otherwise the demo starts a local one bound to 127.0.0.1 with usage stats
off, and shuts it down at the end.  Every wait is bounded: an actor or
learner that fails, dies or does not start or stop in time stops the demo
with ``DemoError``; the actors are killed (by their handles) and the shards
closed however the demo ends.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from fastreplay.bench.workloads import atari_frames
from fastreplay.demo import (
    ITEM_LENGTH,
    TABLE,
    DemoConfig,
    _Actor,
    _Learner,
    _peak_rss_bytes,
    _progress,
    make_table,
    summarize,
)
from fastreplay.demo_processes import DemoError

if TYPE_CHECKING:
    import fastreplay.ray
    from fastreplay.demo import DemoClient, DemoWriter

__all__ = ["INSTALL_HINT", "RayMissingError", "import_ray", "run_demo_ray"]

INSTALL_HINT = "pip install 'fastreplay[ray]'"
#: Seconds the shards and the actors get to start (Ray starts a worker
#: process per actor, which imports fastreplay and makes its frames).
START_TIMEOUT = 120.0
#: Seconds any other call to an actor gets to answer.
CALL_TIMEOUT = 30.0
#: Seconds an actor's or the learner's thread gets to stop (their calls wait
#: at most 0.1 s at a time; an actor's last flush waits for its shard).
STOP_TIMEOUT = 15.0
#: Seconds between checks of the actors (errors, counts).
POLL_EVERY = 0.2


class RayMissingError(ImportError):
    """``fastreplay demo --ray`` without Ray installed."""


def import_ray() -> Any:
    """The ``ray`` module, or ``RayMissingError`` saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise RayMissingError(
            f"--ray needs Ray, which is not installed ({exc}); install it with: "
            f"{INSTALL_HINT}") from exc
    return ray


def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)).rstrip()


class _ShardActor(_Actor):
    """The demo's actor thread with its writer bound to shard ``shard``."""

    def __init__(self, shard: int, *args: Any) -> None:
        self.shard = shard
        super().__init__(*args)

    def _open_writer(self, client: DemoClient) -> DemoWriter:
        from fastreplay.ray import Client

        assert isinstance(client, Client)
        return client.trajectory_writer(ITEM_LENGTH, shard=self.shard)


class _ActorHost:
    """The body of one demo actor (wrapped by ``ray.remote``): the demo's
    actor thread, writing through a pickled ``fastreplay.ray.Client`` into
    shard ``shard`` (placed on that shard's node: the same-node path)."""

    def __init__(self, index: int, shard: int, client: fastreplay.ray.Client,
                 cfg: DemoConfig) -> None:
        self.client = client
        self.shard = shard
        self.stop = threading.Event()
        frames = atari_frames(256, seed=cfg.seed, shape=cfg.obs_shape)
        self.actor = _ShardActor(shard, index, client, cfg, frames, self.stop)

    def hello(self) -> dict[str, Any]:
        """Where this actor runs, its shard and how it reaches it."""
        import ray

        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id(),
                "shard": self.shard, "transport": self.client.transport(self.shard)}

    def start(self) -> None:
        self.actor.start()

    def report(self) -> dict[str, Any]:
        a = self.actor
        return {"steps": a.steps, "items": a.items, "wait_seconds": a.wait_seconds,
                "error": None if a.error is None else _describe(a.error)}

    def finish(self, timeout: float) -> dict[str, Any]:
        """Stop the thread (its writer flushes and closes); the final counts."""
        self.stop.set()
        self.actor.join(timeout)
        report = self.report()
        if self.actor.is_alive():
            report["error"] = f"its thread did not stop within {timeout:g} s"
        report["peak_rss_bytes"] = _peak_rss_bytes()
        return report


def _get_each(ray: Any, refs: Sequence[Any], names: Sequence[str], timeout: float,
              what: str) -> list[Any]:
    """``ray.get`` of each ref within ``timeout`` s in all; ``DemoError``
    naming the actor that failed, died or did not answer."""
    deadline = time.monotonic() + timeout
    out = []
    for name, ref in zip(names, refs, strict=True):
        try:
            out.append(ray.get(ref, timeout=max(0.0, deadline - time.monotonic())))
        except ray.exceptions.GetTimeoutError:
            raise DemoError(f"{name} did not {what} within {timeout:g} s") from None
        except ray.exceptions.RayError as exc:
            raise DemoError(f"{name} failed to {what}:\n{exc}") from None
    return out


def _check(reports: Sequence[dict[str, Any]], names: Sequence[str]) -> None:
    problems = [f"{name} failed:\n{r['error']}" for name, r in
                zip(names, reports, strict=True) if r.get("error") is not None]
    if problems:
        raise DemoError("\n".join(problems))


def _start_local_ray(ray: Any) -> None:
    """A local Ray of this machine alone: loopback, usage stats off, no
    dashboard, workers' logs kept out of the demo's output."""
    previous = os.environ.get("RAY_USAGE_STATS_ENABLED")
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    try:
        ray.init(address="local", _node_ip_address="127.0.0.1",
                 include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    finally:
        if previous is None:
            del os.environ["RAY_USAGE_STATS_ENABLED"]
        else:
            os.environ["RAY_USAGE_STATS_ENABLED"] = previous


def run_demo_ray(cfg: DemoConfig, shards: int = 2,
                 progress: TextIO | None = sys.stderr) -> dict[str, Any]:
    """Run the demo for ``cfg.duration`` seconds with ``cfg.actors`` Ray
    actors writing into a ``ShardedServer`` of ``shards`` shards and the
    learner in this process; return the summary of ``run_demo`` plus the
    shards (``shards``, ``shard_sizes``, ``shard_nodes``), where the actors
    ran (``actor_placement``) and the processes' peak memories
    (``peak_rss_bytes`` sums the driver's and the actors', not the
    shards').

    The clock starts when the shards and every actor are ready, so the
    rates measure the job and not the start-up.

    Raises
    ------
    RayMissingError
        Ray is not installed.
    DemoError
        An actor or the learner failed (its traceback is in the message),
        died, or did not start or stop in time.  The actors and the shards
        are stopped first.
    """
    ray = import_ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from fastreplay.ray import ShardedServer

    started_ray = not ray.is_initialized()
    if started_ray:
        _start_local_ray(ray)
    server: ShardedServer | None = None
    client: fastreplay.ray.Client | None = None
    handles: list[Any] = []
    stop = threading.Event()
    learner: _Learner | None = None
    names = [f"actor-{i}" for i in range(cfg.actors)]
    try:
        server = ShardedServer([make_table(cfg)], num_shards=shards,
                               placement="spread")
        server.wait_ready(timeout=START_TIMEOUT)
        client = server.client(seed=cfg.seed)
        host = ray.remote(_ActorHost)
        # Actor i writes into shard i % shards from that shard's node (alive:
        # its shard just answered).  num_cpus=0: the actors are I/O-bound
        # threads, and Ray's CPU count must not cap --actors.
        nodes = server.shard_nodes
        handles = [host.options(num_cpus=0, max_restarts=0,
                                scheduling_strategy=NodeAffinitySchedulingStrategy(
                                    nodes[i % shards], soft=False)
                                ).remote(i, i % shards, client, cfg)
                   for i in range(cfg.actors)]
        hellos = _get_each(ray, [h.hello.remote() for h in handles], names,
                           START_TIMEOUT, "start")
        if progress is not None:
            progress.write(
                f"ray {ray.get_runtime_context().gcs_address}: {shards} shards, "
                + ", ".join(f"{n} pid {h['pid']} -> shard {h['shard']} "
                            f"({h['transport']})" for n, h in zip(names, hellos,
                                                                 strict=True))
                + f", learner in this process (pid {os.getpid()})\n")
            progress.flush()
        learner = _Learner(client, cfg, stop)
        _get_each(ray, [h.start.remote() for h in handles], names, CALL_TIMEOUT,
                  "start writing")
        learner.start()
        tty = progress is not None and progress.isatty()
        t0 = time.perf_counter()
        last_line = t0
        while (elapsed := time.perf_counter() - t0) < cfg.duration:
            if learner.error is not None:
                break
            time.sleep(min(POLL_EVERY, cfg.duration - elapsed))
            reports = _get_each(ray, [h.report.remote() for h in handles], names,
                                CALL_TIMEOUT, "report")
            _check(reports, names)
            now = time.perf_counter()
            if progress is not None and (tty or now - last_line >= 5):
                last_line = now
                size = client.server_info(timeout=CALL_TIMEOUT)[TABLE].current_size
                _progress(progress, now - t0, cfg, sum(r["steps"] for r in reports),
                          learner.samples, size, "" if tty else "\n")
        elapsed = time.perf_counter() - t0
        # The actors stop first, while the learner still samples: their
        # last flush may wait for the rate limiter, which samples release.
        finals = _get_each(ray, [h.finish.remote(STOP_TIMEOUT) for h in handles],
                           names, STOP_TIMEOUT + CALL_TIMEOUT, "stop and report")
        stop.set()
        learner.join(STOP_TIMEOUT)
        if learner.is_alive():
            raise DemoError(f"the learner did not stop within {STOP_TIMEOUT:g} s")
        if learner.error is not None:
            raise DemoError(f"the learner failed:\n{_describe(learner.error)}")
        _check(finals, names)
        client.sync()  # every priority update applied before the counts
        metrics = client.metrics()
        shard_infos = client.shard_info(timeout=CALL_TIMEOUT)
        ray_nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        client_stats = client.stats()
    except BaseException as exc:
        if progress is not None and isinstance(exc, (KeyboardInterrupt, SystemExit)):
            progress.write(f"\ninterrupted: stopping {len(handles)} Ray actors and "
                           f"{shards} shards\n")
            progress.flush()
        raise
    finally:
        stop.set()
        for h in handles:
            with contextlib.suppress(Exception):
                ray.kill(h, no_restart=True)
        if server is not None:
            server.close()  # pending shard calls fail: the learner can stop
        if learner is not None and learner.is_alive():
            learner.join(STOP_TIMEOUT)
        if client is not None:
            client.close()
        if started_ray:
            ray.shutdown()
    if progress is not None:
        _progress(progress, elapsed, cfg, sum(r["steps"] for r in finals),
                  learner.samples, int(metrics[f"table/{TABLE}/size"]), "\n")
    peaks = {"driver": _peak_rss_bytes(),
             **{n: int(r["peak_rss_bytes"])
                for n, r in zip(names, finals, strict=True)}}
    summary = summarize(cfg, elapsed, metrics,
                        steps=sum(r["steps"] for r in finals),
                        items_created=sum(r["items"] for r in finals),
                        actor_wait_s=sum(r["wait_seconds"] for r in finals),
                        batches=learner.batches, samples=learner.samples,
                        priority_updates=learner.updates,
                        peak_rss_bytes=sum(peaks.values()))
    summary.update(
        ray=True, shards=shards, ray_nodes=ray_nodes,
        shard_sizes=[int(i.tables[TABLE].current_size) if TABLE in i.tables else 0
                     for i in shard_infos],
        shard_nodes=[i.node_id for i in shard_infos],
        shards_alive=[bool(i.alive) for i in shard_infos],
        actor_placement=[{"name": n, **h} for n, h in zip(names, hellos, strict=True)],
        server_counts={k: int(metrics[f"table/{TABLE}/{k}"])
                       for k in ("inserts", "samples", "updates")},
        client_stats=client_stats, peak_rss_by_process=peaks)
    return summary
