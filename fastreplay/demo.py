"""``fastreplay demo``: the main job on the embedded default.

Actor threads write Atari-like episodes through ``TrajectoryWriter`` into a
Prioritized table guarded by a ``SampleToInsertRatio`` rate limiter, while a
learner thread samples batches with ``client.sample_batch``, weighs them with
importance weights and writes new priorities back.  A progress line runs on
stderr; ``run_demo`` returns the summary (steps/s, samples/s, stored bytes
per step, compression, rate-limiter stalls, peak memory).  ``fastreplay demo
--processes`` runs the same actors and learner as processes
(``fastreplay.demo_processes``), ``fastreplay demo --ray`` as Ray actors
against a ``fastreplay.ray.ShardedServer`` (``fastreplay.demo_ray``): both
reuse the actor and learner threads below.
"""

from __future__ import annotations

import dataclasses
import resource
import sys
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

import fastreplay
from fastreplay import errors, rate_limiters, selectors
from fastreplay.bench.workloads import atari_frames

if TYPE_CHECKING:
    import fastreplay.ray

    # What the actor and learner threads run on: this process's server, or
    # the shards of a ``ShardedServer`` (``fastreplay demo --ray``).
    DemoClient = fastreplay.Client | fastreplay.ray.Client
    DemoWriter = fastreplay.TrajectoryWriter | fastreplay.ray.ShardWriter

__all__ = ["DemoConfig", "run_demo"]

TABLE = "replay"
ITEM_LENGTH = 5  # steps per item (an n-step transition window)


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    duration: float = 20.0
    actors: int = 2
    obs_shape: tuple[int, ...] = (84, 84, 4)
    batch_size: int = 64
    samples_per_insert: float = 1.0
    max_size: int = 100_000
    episode_length: int = 500
    seed: int = 0


class _Actor(threading.Thread):
    """Writes episodes until ``stop`` is set, then closes its writer."""

    def __init__(self, index: int, client: DemoClient, cfg: DemoConfig,
                 frames: list[np.ndarray], stop: threading.Event) -> None:
        super().__init__(name=f"fastreplay-demo-actor-{index}", daemon=True)
        self.writer = self._open_writer(client)
        self.cfg, self.frames, self.stop = cfg, frames, stop
        self.rng = np.random.default_rng(cfg.seed + 1 + index)
        self.offset = index * 17  # actors see different frames
        self.steps = 0
        self.items = 0  # items created (steps with ITEM_LENGTH of history)
        self.wait_seconds = 0.0  # time blocked in flush / end_episode
        self.error: BaseException | None = None

    def _open_writer(self, client: DemoClient) -> DemoWriter:
        """The actor's writer (``fastreplay demo --ray`` binds it to a shard)."""
        return client.trajectory_writer(num_keep_alive_refs=ITEM_LENGTH)

    def run(self) -> None:
        try:
            self._write()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            if not (isinstance(exc, errors.TableClosedError) and self.stop.is_set()):
                self.error = exc
        finally:
            try:
                self.writer.close()  # drops items the table can no longer take
            except BaseException as exc:  # noqa: BLE001 - e.g. a shard gone
                if self.error is None:
                    self.error = exc

    def _write(self) -> None:
        w, frames, rng, stop = self.writer, self.frames, self.rng, self.stop
        while not stop.is_set():
            length = int(rng.integers(self.cfg.episode_length // 2,
                                      self.cfg.episode_length + 1))
            for t in range(length):
                if stop.is_set():
                    return
                frame = frames[(self.offset + self.steps) % len(frames)]
                w.append({"observation": frame,
                          "action": np.int32(rng.integers(18)),
                          "reward": np.float32(rng.random() < 0.05),
                          "discount": np.float32(t < length - 1)})
                self.steps += 1
                if w.episode_steps >= ITEM_LENGTH:
                    h = w.history
                    w.create_item(TABLE, 1.0, {k: h[k][-ITEM_LENGTH:] for k in
                                               ("observation", "action", "reward",
                                                "discount")})
                    self.items += 1
                    self._wait_for_room()
            self._until_sent(lambda: w.end_episode(timeout_ms=100))

    def _wait_for_room(self) -> None:
        """Back-pressure as Acme's adders apply it: at most a few items in
        flight, so a blocked rate limiter slows the actor down."""
        self._until_sent(lambda: self.writer.flush(4, timeout_ms=100))

    def _until_sent(self, call: Any) -> None:
        t0 = time.perf_counter()
        try:
            while not self.stop.is_set():
                try:
                    call()
                    return
                except errors.DeadlineExceededError:
                    continue
        finally:
            self.wait_seconds += time.perf_counter() - t0


class _Learner(threading.Thread):
    """Samples batches, computes IS weights and updates priorities."""

    def __init__(self, client: DemoClient, cfg: DemoConfig,
                 stop: threading.Event) -> None:
        super().__init__(name="fastreplay-demo-learner", daemon=True)
        self.client, self.cfg, self.stop = client, cfg, stop
        self.rng = np.random.default_rng(cfg.seed)
        self.batches = self.samples = self.updates = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._learn()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            if not (isinstance(exc, errors.TableClosedError) and self.stop.is_set()):
                self.error = exc

    def _learn(self) -> None:
        client, batch, rng = self.client, self.cfg.batch_size, self.rng
        while not self.stop.is_set():
            try:
                info, data = client.sample_batch(TABLE, batch, timeout=0.1)
            except errors.DeadlineExceededError:
                continue
            weights = info.weights(0.4)
            # A stand-in for |TD error|: discounted n-step return plus noise,
            # scaled by the IS weight, touching the observations as a
            # network's input would.
            ret = (data["reward"] * np.cumprod(data["discount"] * 0.99, axis=1)).sum(1)
            frame_mean = data["observation"][:, -1].mean(
                axis=tuple(range(1, data["observation"].ndim - 1)))
            td = np.abs(ret + 1e-3 * frame_mean + rng.normal(0, 0.1, len(ret)))
            client.update_priorities(TABLE, info.key, td * weights + 1e-3)
            self.batches += 1
            self.samples += len(info.key)
            self.updates += len(info.key)


def _peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _progress(out: TextIO, elapsed: float, cfg: DemoConfig, steps: int, samples: int,
              size: int, end: str) -> None:
    frac = min(elapsed / cfg.duration, 1.0)
    bar = "#" * int(frac * 20) + "-" * (20 - int(frac * 20))
    rate = elapsed if elapsed > 0 else 1.0
    out.write(f"\r[{bar}] {elapsed:5.1f}/{cfg.duration:.0f} s  steps {steps:,} "
              f"({steps / rate:,.0f}/s)  samples {samples:,} ({samples / rate:,.0f}/s)"
              f"  table {size:,}   {end}")
    out.flush()


def make_table(cfg: DemoConfig) -> fastreplay.Table:
    """The demo's table: Prioritized(0.6) sampling, FIFO removal and a
    SampleToInsertRatio rate limiter."""
    return fastreplay.Table(
        TABLE, selectors.Prioritized(0.6), selectors.Fifo(), cfg.max_size,
        rate_limiters.SampleToInsertRatio(
            cfg.samples_per_insert, min_size_to_sample=1000,
            error_buffer=max(1000.0, 4 * cfg.batch_size * cfg.samples_per_insert)))


def run_demo(cfg: DemoConfig, progress: TextIO | None = sys.stderr) -> dict[str, Any]:
    """Run the demo for ``cfg.duration`` seconds; return its summary.

    Raises the first error of an actor or the learner after every thread
    has stopped.
    """
    table = make_table(cfg)
    server = fastreplay.Server([table])
    client = server.localhost_client()
    frames = atari_frames(256, seed=cfg.seed, shape=cfg.obs_shape)
    stop = threading.Event()
    actors = [_Actor(i, client, cfg, frames, stop) for i in range(cfg.actors)]
    learner = _Learner(client, cfg, stop)
    threads: list[_Actor | _Learner] = [*actors, learner]
    tty = progress is not None and progress.isatty()
    t0 = time.perf_counter()
    last_line = t0
    try:
        for t in threads:
            t.start()
        while (elapsed := time.perf_counter() - t0) < cfg.duration:
            if any(t.error is not None for t in threads):
                break
            time.sleep(min(0.2, cfg.duration - elapsed))
            now = time.perf_counter()
            if progress is not None and (tty or now - last_line >= 5):
                last_line = now
                _progress(progress, now - t0, cfg, sum(a.steps for a in actors),
                          learner.samples, len(table), "" if tty else "\n")
    finally:
        stop.set()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        metrics = server.metrics()
        server.stop()
    if progress is not None:
        _progress(progress, elapsed, cfg, sum(a.steps for a in actors),
                  learner.samples, int(metrics[f"table/{TABLE}/size"]), "\n")
    for t in threads:
        if t.error is not None:
            raise t.error
    return summarize(cfg, elapsed, metrics,
                     steps=sum(a.steps for a in actors),
                     items_created=sum(a.items for a in actors),
                     actor_wait_s=sum(a.wait_seconds for a in actors),
                     batches=learner.batches, samples=learner.samples,
                     priority_updates=learner.updates,
                     peak_rss_bytes=_peak_rss_bytes())


def summarize(cfg: DemoConfig, elapsed: float, metrics: Mapping[str, float], *,
              steps: int, items_created: int, actor_wait_s: float, batches: int,
              samples: int, priority_updates: int,
              peak_rss_bytes: int) -> dict[str, Any]:
    """The summary of a run: the actors' and learner's counts with the
    server's ``metrics()`` at the end (the table's counters and the chunk
    store's bytes: the same dict a logger gets)."""
    # observation, action, reward, discount
    step_bytes = int(np.prod(cfg.obs_shape)) + 4 + 4 + 4
    t = f"table/{TABLE}/"
    stored, raw = int(metrics["chunk_store/stored_bytes"]), int(
        metrics["chunk_store/raw_bytes"])
    stored_steps = raw / step_bytes
    inserts = int(metrics[t + "inserts"])
    return {
        "duration_s": elapsed,
        "actors": cfg.actors,
        "obs_shape": list(cfg.obs_shape),
        "batch_size": cfg.batch_size,
        "samples_per_insert": cfg.samples_per_insert,
        "steps": steps,
        "steps_per_s": steps / elapsed,
        "items_created": items_created,
        "items_inserted": inserts,
        "items_per_s": inserts / elapsed,
        "batches": batches,
        "samples": samples,
        "samples_per_s": samples / elapsed,
        "priority_updates": priority_updates,
        "table_size": int(metrics[t + "size"]),
        "evictions": int(metrics[t + "evictions"]),
        "stored_bytes": stored,
        "raw_bytes": raw,
        "step_payload_bytes": step_bytes,
        "stored_bytes_per_step": stored / max(stored_steps, 1.0),
        "compression_ratio": metrics["chunk_store/compression_ratio"],
        "actor_wait_s": actor_wait_s,
        "insert_stall_s": metrics[t + "rate_limiter/insert_stall_s"],
        "insert_stalls": int(metrics[t + "rate_limiter/insert_stalls"]),
        "sample_stall_s": metrics[t + "rate_limiter/sample_stall_s"],
        "sample_stalls": int(metrics[t + "rate_limiter/sample_stalls"]),
        "peak_rss_bytes": peak_rss_bytes,
    }


def format_summary(s: dict[str, Any]) -> str:
    """The summary as aligned ``name: value`` lines."""
    shape = "x".join(map(str, s["obs_shape"]))
    processes = bool(s.get("processes"))
    on_ray = bool(s.get("ray"))
    actors = (f"{s['actors']} actor processes" if processes else
              f"{s['actors']} Ray actors" if on_ray else f"{s['actors']} actors")
    rows = [
        ("duration", f"{s['duration_s']:.1f} s, {actors}, learner batch "
                     f"{s['batch_size']}, observations uint8[{shape}]"),
        ("steps", f"{s['steps']:,} ({s['steps_per_s']:,.0f} steps/s)"),
        ("items inserted", f"{s['items_inserted']:,} ({s['items_per_s']:,.0f}/s) of "
                           f"{s['items_created']:,} created"),
        ("samples", f"{s['samples']:,} in {s['batches']:,} batches "
                    f"({s['samples_per_s']:,.0f} samples/s)"),
        ("priority updates", f"{s['priority_updates']:,}"),
        ("table", f"{s['table_size']:,} items, {s['evictions']:,} evicted"),
        ("stored bytes/step", f"{s['stored_bytes_per_step']:,.0f} B "
                              f"(payload {s['step_payload_bytes']:,} B)"),
        ("compression", f"{s['compression_ratio']:.1f}x ({s['stored_bytes']:,} B "
                        f"stored for {s['raw_bytes']:,} B raw)"),
        ("rate-limiter stall", f"table inserts {s['insert_stall_s']:.2f} s "
                               f"({s['insert_stalls']:,} waits), samples "
                               f"{s['sample_stall_s']:.2f} s "
                               f"({s['sample_stalls']:,} waits)"),
        ("actor flush wait", f"{s['actor_wait_s']:.2f} s over {s['actors']} actors "
                             "(writer back-pressure, rate limiter included)"),
        ("peak memory", f"{s['peak_rss_bytes'] / 2**20:,.0f} MiB"),
    ]
    if processes or on_ray:
        per = ", ".join(f"{name} {b / 2**20:,.0f}" for name, b in
                        s["peak_rss_by_process"].items())
        rows[-1] = ("peak memory", f"{s['peak_rss_bytes'] / 2**20:,.0f} MiB summed "
                                   f"over {len(s['peak_rss_by_process'])} processes "
                                   f"({per} MiB)"
                                   + (", shards not counted" if on_ray else ""))
    if processes:
        rows.insert(1, ("processes", f"server {s['server_address']} (pid "
                                     f"{s['pids']['server']}), "
                                     + ", ".join(f"{k} pid {v}" for k, v in
                                                 s["pids"].items() if k != "server")))
    if on_ray:
        sizes = " + ".join(f"{n:,}" for n in s["shard_sizes"])
        rows[1:1] = [
            ("shards", f"{s['shards']} on {s['ray_nodes']} Ray node(s), items per "
                       f"shard {sizes}"),
            ("ray actors", ", ".join(f"{a['name']} pid {a['pid']} -> shard "
                                     f"{a['shard']} ({a['transport']})"
                                     for a in s["actor_placement"])),
        ]
        # After "samples": what the shards drew for them (draws the client
        # dropped count against the shards' rate limiters too).
        rows.insert(6, ("shard samples",
                        f"{s['server_counts']['samples']:,} drawn by the shards "
                        f"for {s['samples']:,} delivered "
                        f"({s['client_stats'].get('second_rounds', 0):,} second "
                        "rounds)"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k + ':':<{width + 1}} {v}" for k, v in rows)
