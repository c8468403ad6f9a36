"""dm-reverb workloads for benchmarks, run in-process (reverb's API only).

Each builder starts a ``reverb.Server`` (port picked by reverb) with one table
named ``"bench"``, connects a ``reverb.Client`` to ``localhost:<port>`` and
returns a workload whose ``.run(n)`` is the part to time; ``.close()`` stops
the server.  ``reverb`` (and TensorFlow, which it imports; ~8 s the first time
in a process) is imported lazily, so this module imports anywhere.  A builder
returns None when reverb is missing or broken and records the reason in
``UNAVAILABLE[name]``.  Tested with dm-reverb 0.14.0, tensorflow-cpu 2.15.1,
numpy 1.26.4 (reverb 0.14 needs TF 2.15 and numpy 1.x).

* ``reverb_writer``: steps ``{observation, action: int32, reward: float32}``
  appended through ``client.trajectory_writer(num_keep_alive_refs=item_length)``;
  once ``writer.episode_steps >= item_length`` every step creates one item over
  the last ``item_length`` steps in a ``Prioritized(0.6)`` table (max_size
  1,000,000, ``Fifo`` remover, ``MinSize(1)``), priority 1.0.  The episode ends
  every 1,000 steps (counted across runs) and ``run`` ends with ``flush()``.
  Observations (``steps`` distinct random arrays, reused cyclically), actions
  and rewards are made up front, so data generation is not timed.  Random data
  does not compress, so reverb's chunk compression does work for nothing; real
  frames would compress better.
* ``reverb_structured``: the StructuredWriter workload of
  ``workloads.StructuredWorkload`` on dm-reverb: the same steps, table and
  loop (a length-10 item per step once 10 steps of the episode exist,
  ``flush()`` every 100 steps, ``end_episode()`` every 1,000), the items made
  by ``client.structured_writer([config])`` with the config
  ``{k: ref[k][-10:]}`` (``via="structured"``) or by a TrajectoryWriter's
  ``create_item`` over ``history[k][-10:]`` (``via="trajectory"``).  With a
  flush only every 100 steps reverb's C++ writer logs "The number of pending
  items is alarmingly high" to stderr about every 10 items (absl raw
  logging, which no environment variable silences); ``run`` sends file
  descriptor 2 to a temporary file meanwhile and keeps the count and the
  last line in ``suppressed_lines`` and ``last_suppressed``.
* ``reverb_sample``: a ``Uniform`` table (``Fifo`` remover, ``MinSize(1)``) of
  ``table_size`` length-``item_length`` items over float32[8] observations,
  filled by the same writer loop (``fill_seconds``).  The table has a
  ``tf.TensorSpec`` signature.  ``run(n)`` draws ``n`` batches of ``batch``
  items and returns ``n * batch``.  ``via="client"``: each batch is one
  ``client.sample(table, num_samples=batch, emit_timesteps=False,
  unpack_as_table_signature=True)`` generator, iterated to the end (one
  ``ReplaySample`` of NumPy arrays per item; ``emit_timesteps=True`` splits each
  item into per-step samples, slower).  ``via="dataset"``:
  ``reverb.TrajectoryDataset.from_table_signature(...).batch(batch)``, one
  ``next()`` on its iterator per batch; the dataset's workers keep up to
  ``max_in_flight`` samples in flight in background threads between calls.
* ``reverb_threads``: the ``reverb_writer`` table and loop in writer threads,
  beside ``workloads.concurrent_throughput`` (without its sampler).  One
  server serves every run; ``run(writers, n_steps)`` empties the table
  (``client.reset``, as fastreplay's side starts from a new table), makes
  ``writers`` TrajectoryWriters (``num_keep_alive_refs=item_length``) on the
  one client and has each, in its own ``threading.Thread``, append
  ``n_steps`` steps of the caller's ``frames`` (each thread counts its own
  steps from 0 for ``end_episode``) and ``flush()``.  ``run`` times itself:
  it returns aggregate steps/s over the writers' wall time (making and
  closing the writers is not timed) and raises a writer thread's exception,
  if any.  As in
  ``reverb_writer`` (which leaves it on stderr) reverb logs "The number of
  pending items is alarmingly high" every few dozen items; ``run``
  hides it as ``reverb_structured`` does (``suppressed_lines``).
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any, Literal

import numpy as np

from fastreplay.bench.peers import (  # noqa: F401 (UNAVAILABLE re-exported)
    UNAVAILABLE,
    guard,
)
from fastreplay.bench.workloads import run_threads

TABLE = "bench"
EPISODE_STEPS = 1_000


class _Steps:
    """Precomputed steps and the writer loop shared by the writer and the fill."""

    def __init__(self, obs_shape: tuple[int, ...], obs_dtype: Any, steps: int,
                 item_length: int, seed: int, frames: list[np.ndarray] | None = None,
                 max_in_flight: int | None = None) -> None:
        rng = np.random.default_rng(seed)
        dtype = np.dtype(obs_dtype)
        if frames is not None:  # the caller's observations, reused cyclically
            obs = np.stack([frames[i % len(frames)] for i in range(steps)])
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            shape = (steps, *obs_shape)
            obs = rng.integers(info.min, info.max, shape, dtype, endpoint=True)
        else:
            obs = rng.standard_normal((steps, *obs_shape)).astype(dtype)
        actions = rng.integers(0, 18, steps, dtype=np.int32)
        rewards = rng.standard_normal(steps).astype(np.float32)
        # One dict per step, built now: the timed loop only appends.
        self.data = [{"observation": obs[i], "action": actions[i], "reward": rewards[i]}
                     for i in range(steps)]
        self.keys = tuple(self.data[0])
        self.item_length = item_length
        self.max_in_flight = max_in_flight
        self.total = 0  # steps appended so far, across runs

    def write(self, writer: Any, n_steps: int, until_items: int | None = None) -> int:
        """Append ``n_steps`` steps (or up to ``until_items`` items); return items."""
        data, keys, length = self.data, self.keys, self.item_length
        items = 0
        for _ in range(n_steps if until_items is None else 1 << 62):
            if until_items is not None and items >= until_items:
                break
            writer.append(data[self.total % len(data)])
            self.total += 1
            if writer.episode_steps >= length:
                history = writer.history
                writer.create_item(TABLE, 1.0, {k: history[k][-length:] for k in keys})
                items += 1
                if self.max_in_flight is not None:  # as Acme's adders do
                    writer.flush(self.max_in_flight)
            if self.total % EPISODE_STEPS == 0:
                writer.end_episode()
        writer.flush()
        return items

    def restarted(self) -> _Steps:
        """A copy sharing the precomputed steps, its step count back at 0."""
        steps = copy.copy(self)
        steps.total = 0
        return steps


@contextlib.contextmanager
def _native_stderr_to(path: str) -> Iterator[None]:
    """Send file descriptor 2 (where C++ code logs) to ``path`` meanwhile."""
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def _prioritized_table(reverb: Any) -> Any:
    """The writer workloads' table: Prioritized(0.6), Fifo, 1e6, MinSize(1)."""
    return reverb.Table(TABLE, reverb.selectors.Prioritized(0.6),
                        reverb.selectors.Fifo(), 1_000_000,
                        reverb.rate_limiters.MinSize(1))


class _Peer:
    """A reverb.Server with one table plus a client connected over localhost."""

    def __init__(self, reverb: Any, table: Any) -> None:
        # reverb's default checkpointer leaves an empty /tmp/tmpXXXX per server.
        self._tmp = tempfile.TemporaryDirectory(prefix="reverb_peer_")
        self.server = reverb.Server(tables=[table], checkpointer=reverb.checkpointers
                                    .DefaultCheckpointer(path=self._tmp.name))
        self.address = f"localhost:{self.server.port}"
        self.client = reverb.Client(self.address)
        self.suppressed_lines, self.last_suppressed = 0, ""

    @contextlib.contextmanager
    def _stderr_hidden(self) -> Iterator[None]:
        """Send reverb's stderr logging to a temporary file meanwhile; count it
        in ``suppressed_lines`` and keep the last line in ``last_suppressed``."""
        log = os.path.join(self._tmp.name, "stderr.log")
        try:
            with _native_stderr_to(log):
                yield
        finally:
            lines: list[str] = []
            if os.path.exists(log):
                with open(log, "rb") as f:
                    lines = f.read().decode(errors="replace").splitlines()
                os.remove(log)
            self.suppressed_lines += len(lines)
            self.last_suppressed = lines[-1] if lines else self.last_suppressed

    def table_size(self) -> int:
        return int(self.client.server_info()[TABLE].current_size)

    def close(self) -> None:
        """Stop the server (further calls fail) and remove its checkpoint directory."""
        self.server.stop()
        self._tmp.cleanup()


class ReverbWriter(_Peer):
    """Writer workload; see the module docstring."""

    def __init__(self, reverb: Any, steps: _Steps) -> None:
        super().__init__(reverb, _prioritized_table(reverb))
        self.steps = steps
        self.writer = self.client.trajectory_writer(
            num_keep_alive_refs=steps.item_length)

    def run(self, n_steps: int) -> int:
        """Append ``n_steps`` steps, creating items as described; return items made."""
        return self.steps.write(self.writer, n_steps)

    def close(self) -> None:
        self.writer.close()
        super().close()


class ReverbStructured(_Peer):
    """StructuredWriter workload; see the module docstring."""

    def __init__(self, reverb: Any, steps: _Steps, via: str, flush_every: int,
                 episode_steps: int) -> None:
        super().__init__(reverb, _prioritized_table(reverb))
        self.steps, self.via = steps, via
        self.flush_every, self.episode_steps = flush_every, episode_steps
        length = steps.item_length
        if via == "structured":
            sw = reverb.structured_writer
            ref = sw.create_reference_step(steps.data[0])
            config = sw.create_config({k: ref[k][-length:] for k in steps.keys},
                                      TABLE)
            self.writer = self.client.structured_writer([config])
        else:
            self.writer = self.client.trajectory_writer(num_keep_alive_refs=length)

    def run(self, n_steps: int) -> None:
        """Append ``n_steps`` steps, creating items as described (reverb's
        stderr logging goes to a temporary file meanwhile)."""
        with self._stderr_hidden():
            self._run(n_steps)

    def _run(self, n_steps: int) -> None:
        w, s = self.writer, self.steps
        data, keys, length = s.data, s.keys, s.item_length
        items = self.via == "trajectory"
        for _ in range(n_steps):
            w.append(data[s.total % len(data)])
            if items and w.episode_steps >= length:
                h = w.history
                w.create_item(TABLE, 1.0, {k: h[k][-length:] for k in keys})
            s.total += 1
            if s.total % self.episode_steps == 0:
                w.end_episode()
            elif s.total % self.flush_every == 0:
                w.flush()
        w.flush()

    def close(self) -> None:
        if self.via == "trajectory":
            self.writer.close()  # reverb's StructuredWriter has no close()
        self.writer = None
        super().close()


class ReverbSampler(_Peer):
    """Sampling workload over a filled Uniform table; see the module docstring."""

    def __init__(self, reverb: Any, steps: _Steps, table_size: int, batch: int,
                 via: Literal["client", "dataset"], max_in_flight: int) -> None:
        import tensorflow as tf

        length = steps.item_length
        obs = steps.data[0]["observation"]
        signature = {"observation": tf.TensorSpec((length, *obs.shape), obs.dtype),
                     "action": tf.TensorSpec((length,), tf.int32),
                     "reward": tf.TensorSpec((length,), tf.float32)}
        super().__init__(reverb, reverb.Table(
            TABLE, reverb.selectors.Uniform(), reverb.selectors.Fifo(), table_size,
            reverb.rate_limiters.MinSize(1), signature=signature))
        t0 = time.perf_counter()
        with self.client.trajectory_writer(num_keep_alive_refs=length) as writer:
            steps.write(writer, 0, until_items=table_size)
        self.fill_seconds = time.perf_counter() - t0
        self.batch = batch
        self.via = via
        self._iterator: Iterator[Any] | None = None
        if via == "dataset":
            dataset = reverb.TrajectoryDataset.from_table_signature(
                self.address, TABLE, max_in_flight_samples_per_worker=max_in_flight)
            self._iterator = iter(dataset.batch(batch))

    def run(self, n_batches: int) -> int:
        """Draw ``n_batches`` batches of ``batch`` items; return items drawn."""
        if self._iterator is not None:
            it = self._iterator
            for _ in range(n_batches):
                next(it)
        else:
            sample, batch = self.client.sample, self.batch
            for _ in range(n_batches):
                for _s in sample(TABLE, num_samples=batch, emit_timesteps=False,
                                 unpack_as_table_signature=True):
                    pass
        return n_batches * self.batch

    def close(self) -> None:
        self._iterator = None  # drop the dataset's streams before the server goes
        super().close()


class ReverbThreads(_Peer):
    """Writer threads workload; see the module docstring."""

    def __init__(self, reverb: Any, steps: _Steps) -> None:
        super().__init__(reverb, _prioritized_table(reverb))
        self.steps = steps

    def run(self, writers: int, n_steps: int) -> float:
        """Empty the table, then ``writers`` threads append ``n_steps`` steps
        each; return aggregate steps/s."""
        self.client.reset(TABLE)
        length = self.steps.item_length
        failed: list[BaseException] = []

        def write(writer: Any, steps: _Steps) -> None:
            try:
                steps.write(writer, n_steps)
            except BaseException as exc:  # re-raised below, in the caller's thread
                failed.append(exc)

        handles: list[Any] = []
        try:
            for _ in range(writers):
                handles.append(self.client.trajectory_writer(num_keep_alive_refs=length))
            threads = [threading.Thread(target=write, args=(w, self.steps.restarted()))
                       for w in handles]
            with self._stderr_hidden():  # "pending items is alarmingly high"
                wall = run_threads(threads)
        finally:
            for w in handles:
                w.close()
        if failed:
            raise failed[0]
        return writers * n_steps / wall


def reverb_writer(obs_shape: tuple[int, ...] = (8,), obs_dtype: Any = np.float32,
                  steps: int = 5_000, item_length: int = 5, seed: int = 0,
                  frames: list[np.ndarray] | None = None,
                  max_in_flight: int | None = None) -> ReverbWriter | None:
    """Writer workload with ``steps`` precomputed observations (reused
    cyclically; ``frames`` supplies them instead of random data), calling
    ``flush(max_in_flight)`` after every item when that is given."""

    def build() -> ReverbWriter:
        import reverb

        data = _Steps(obs_shape, obs_dtype, steps, item_length, seed, frames,
                      max_in_flight)
        return ReverbWriter(reverb, data)

    return guard("reverb_writer", build)


def reverb_threads(frames: list[np.ndarray], item_length: int = 5, seed: int = 0
                   ) -> ReverbThreads | None:
    """Writer threads workload over ``frames`` (the observations, reused
    cyclically by every writer); see the module docstring."""

    def build() -> ReverbThreads:
        import reverb

        data = _Steps(frames[0].shape, frames[0].dtype, len(frames), item_length,
                      seed, frames)
        return ReverbThreads(reverb, data)

    return guard("reverb_threads", build)


def reverb_structured(obs_shape: tuple[int, ...] = (8,), obs_dtype: Any = np.float32,
                      via: Literal["structured", "trajectory"] = "structured",
                      steps: int = 64, item_length: int = 10, flush_every: int = 100,
                      episode_steps: int = EPISODE_STEPS, seed: int = 0,
                      frames: list[np.ndarray] | None = None
                      ) -> ReverbStructured | None:
    """StructuredWriter workload, ``via`` "structured" or "trajectory", over
    ``steps`` precomputed steps reused cyclically (``frames`` supplies the
    observations instead of random data); see the module docstring."""
    if via not in ("structured", "trajectory"):
        raise ValueError(f"via must be 'structured' or 'trajectory', not {via!r}")

    def build() -> ReverbStructured:
        import reverb

        data = _Steps(obs_shape, obs_dtype, steps, item_length, seed, frames)
        return ReverbStructured(reverb, data, via, flush_every, episode_steps)

    return guard(f"reverb_structured_{via}", build)


def reverb_sample(table_size: int = 100_000, batch: int = 256, item_length: int = 5,
                  via: Literal["client", "dataset"] = "client",
                  max_in_flight: int = 512, seed: int = 0) -> ReverbSampler | None:
    """Sampling workload, ``via`` "client" or "dataset"; see the module docstring."""
    if via not in ("client", "dataset"):
        raise ValueError(f"via must be 'client' or 'dataset', not {via!r}")

    def build() -> ReverbSampler:
        import reverb

        steps = _Steps((8,), np.float32, min(table_size, 10_000), item_length, seed)
        return ReverbSampler(reverb, steps, table_size, batch, via, max_in_flight)

    return guard(f"reverb_sample_{via}", build)


def reverb_sample_dataset(table_size: int = 100_000, batch: int = 256,
                          item_length: int = 5, max_in_flight: int = 512,
                          seed: int = 0) -> ReverbSampler | None:
    """``reverb_sample(..., via="dataset")``: TrajectoryDataset batched to ``batch``."""
    return reverb_sample(table_size, batch, item_length, "dataset", max_in_flight,
                         seed)
