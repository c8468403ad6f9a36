"""Each frame once: ``ReplayBuffer(next_of=..., stack_compress=...)``.

Every sampled ``obs`` / ``next_obs`` must equal what was added for that key
(across episode boundaries, after evictions, for every compression choice),
while a stack sliding by one frame stores one frame and ``obs_{t+1} ==
next_obs_t`` stores nothing.  A Hypothesis state machine drives random
episodes against a pure-Python oracle (a dict of what each key holds).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from threadutil import Worker, join_workers

from fastreplay import ReplayBuffer, _core
from fastreplay.errors import InvalidPriorityError

ATARI = (84, 84)


class Episodes:
    """Noise-like frames, stacked k on the last axis (k=0: no stack, the
    frame itself is the observation), for transitions of episodes."""

    def __init__(self, shape: tuple[int, ...], k: int, dtype: Any = np.uint8,
                 seed: int = 0, levels: int = 256) -> None:
        self.rng = np.random.default_rng(seed)
        self.shape, self.k, self.dtype, self.levels = shape, k, dtype, levels
        self.stack: list[np.ndarray] = []

    def frame(self) -> np.ndarray:
        return self.rng.integers(0, self.levels, self.shape).astype(self.dtype)

    def obs(self) -> np.ndarray:
        return np.stack(self.stack, -1) if self.k else self.stack[-1].copy()

    def reset(self) -> None:
        """An episode start: the first frame repeated (as Atari wrappers do)."""
        self.stack = [self.frame()] * max(self.k, 1)

    def step(self, repeat: bool = False) -> tuple[np.ndarray, np.ndarray]:
        if not self.stack:
            self.reset()
        obs = self.obs()
        new = self.stack[-1] if repeat else self.frame()
        self.stack = self.stack[1:] + [new]
        return obs, self.obs()


def check(buf: ReplayBuffer, added: dict[int, dict[str, np.ndarray]],
          n: int = 64) -> np.ndarray:
    """Sample n and compare every field with what its key holds."""
    out = buf.sample(n)
    for b, key in enumerate(out["indexes"]):
        want = added[int(key)]
        for name, value in want.items():
            got = out[name][b]
            assert got.dtype == np.asarray(value).dtype, name
            np.testing.assert_array_equal(got, value, err_msg=f"{name} of key {key}")
    return out["indexes"]


def fill(buf: ReplayBuffer, eps: Episodes, episodes: int, length: int,
         batch: bool = False) -> dict[int, dict[str, np.ndarray]]:
    added: dict[int, dict[str, np.ndarray]] = {}
    key = 0
    for _ in range(episodes):
        eps.reset()
        steps = [eps.step() for _ in range(length)]
        rows = [{"obs": o, "next_obs": x, "act": np.int64(i)}
                for i, (o, x) in enumerate(steps)]
        if batch:
            buf.add_batch(**{k: np.stack([r[k] for r in rows]) for k in rows[0]})
        else:
            for r in rows:
                buf.add(**r)
        for r in rows:
            added[key] = r
            key += 1
    return added


def stored_bytes(buf: ReplayBuffer) -> int:
    return int(buf._store.stats()["stored_bytes"])


class TestSampleEqualsAdded:
    @pytest.mark.parametrize("compression", ["auto", "lz4", None])
    @pytest.mark.parametrize("batch", [False, True])
    def test_stacked_next_of(self, compression: str | None, batch: bool) -> None:
        buf = ReplayBuffer(1000, seed=1, next_of="obs", stack_compress="obs",
                           compression=compression)
        # few levels: frames LZ4 compresses, so 'lz4'/'auto' decode them
        added = fill(buf, Episodes((6, 5), 4, seed=2, levels=3), 6, 15, batch)
        out = buf.sample(8)
        assert out["obs"].shape == (8, 6, 5, 4) and out["obs"].flags.c_contiguous
        assert set(out) == {"obs", "next_obs", "act", "indexes", "probabilities",
                            "weights"}
        for _ in range(5):
            check(buf, added)

    def test_next_of_without_stack(self) -> None:
        buf = ReplayBuffer(100, seed=1, next_of="obs")
        eps = Episodes((3,), 0, dtype=np.float32, seed=3)
        added = fill(buf, eps, 4, 10)
        check(buf, added)
        # 4 episodes of 10 steps: 11 observations each, each stored once
        assert stored_bytes(buf) == 4 * 11 * 12 + 40 * 8

    def test_stack_without_next_of(self) -> None:
        buf = ReplayBuffer(100, seed=1, stack_compress="obs")
        eps = Episodes((4, 4), 3, dtype=np.float32, seed=4)
        added = fill(buf, eps, 3, 10)
        check(buf, added)
        # obs: 3 frames per episode start (the repeated one stored once),
        # then one per step; next_obs stored whole
        frame = 4 * 4 * 4
        assert stored_bytes(buf) == 3 * (1 + 9) * frame + 30 * 3 * frame + 30 * 8

    def test_several_fields_and_sequences(self) -> None:
        buf = ReplayBuffer(100, seed=1, next_of=["obs", "pos"],
                           stack_compress=("obs",))
        eps, pos = Episodes((5, 5), 2, seed=5), Episodes((2,), 0, np.int32, seed=6)
        added: dict[int, dict[str, np.ndarray]] = {}
        for key in range(30):
            if key % 7 == 0:
                eps.reset(), pos.reset()
            (o, x), (p, q) = eps.step(), pos.step()
            row = {"obs": o, "next_obs": x, "pos": p, "next_pos": q}
            buf.add(**row)
            added[key] = row
        check(buf, added)

    def test_values_that_do_not_follow_are_stored(self) -> None:
        """obs_{t+1} != next_obs_t without any call in between: both kept."""
        buf = ReplayBuffer(100, seed=1, next_of="obs", stack_compress="obs")
        rng = np.random.default_rng(7)
        added = {}
        for key in range(20):
            o, x = (rng.integers(0, 256, (4, 4, 4)).astype(np.uint8) for _ in "ox")
            buf.add(obs=o, next_obs=x)
            added[key] = {"obs": o, "next_obs": x}
        check(buf, added)

    def test_eviction_keeps_shared_frames(self) -> None:
        buf = ReplayBuffer(7, seed=1, next_of="obs", stack_compress="obs")
        added = fill(buf, Episodes((3, 3), 4, seed=8), 5, 9)
        assert len(buf) == 7
        keys = check(buf, added, 256)
        assert keys.min() >= 45 - 7
        live = buf._store.stats()["live_chunks"]
        assert live <= 7 * 3 + 4  # evicted frames are freed

    def test_prioritized_and_update(self) -> None:
        buf = ReplayBuffer(50, alpha=0.6, seed=1, next_of="obs", stack_compress="obs")
        added = fill(buf, Episodes((4, 4), 4, seed=9), 3, 10)
        keys = check(buf, added)
        buf.update_priorities(keys, np.full(len(keys), 3.0))
        check(buf, added)

    def test_on_episode_end_is_accepted(self) -> None:
        buf = ReplayBuffer(50, seed=1, next_of="obs", stack_compress="obs")
        eps = Episodes((4, 4), 4, seed=10)
        added = {}
        for key in range(12):
            if key % 4 == 0:
                eps.reset()
            o, x = eps.step()
            buf.add(obs=o, next_obs=x)
            added[key] = {"obs": o, "next_obs": x}
            if key % 4 == 3:
                buf.on_episode_end()
        check(buf, added)

    def test_table_sample_rebuilds_stacks(self) -> None:
        buf = ReplayBuffer(50, seed=1, next_of="obs", stack_compress="obs")
        added = fill(buf, Episodes((3, 2), 4, seed=11), 2, 5)
        keys, *_, data = buf.table._core.sample(6, with_data=True)
        cols = dict(zip(buf._fields or [], zip(*(d.columns() for d in data),
                                                strict=True), strict=True))
        for b, key in enumerate(keys):
            for name in ("obs", "next_obs"):
                np.testing.assert_array_equal(cols[name][b], added[int(key)][name])


class TestCheckpoint:
    def test_restore_keeps_stacks(self, tmp_path: Any) -> None:
        import fastreplay
        from fastreplay import checkpointers, rate_limiters, selectors

        buf = ReplayBuffer(20, seed=1, next_of="obs", stack_compress="obs")
        added = fill(buf, Episodes((3, 2), 4, seed=15), 2, 6)
        ckpt = checkpointers.DefaultCheckpointer(str(tmp_path))
        first = fastreplay.Server([buf.table], checkpointer=ckpt)
        first.localhost_client().checkpoint()
        table = fastreplay.Table("replay_buffer", selectors.Uniform(), selectors.Fifo(),
                                 20, rate_limiters.MinSize(1))
        server = fastreplay.Server([table], checkpointer=ckpt)
        info, data = server.localhost_client().sample_batch("replay_buffer", 32)
        names = buf._fields or []
        for b, key in enumerate(info.key):
            for name in ("obs", "next_obs"):
                got = data[names.index(name)][b]
                np.testing.assert_array_equal(got, added[int(key)][name])


class TestThreads:
    def test_writers_interleaving_episodes(self) -> None:
        """Threads adding their own episodes interleave in one stream:
        every value is still read back exactly (matches are by bytes)."""
        buf = ReplayBuffer(10_000, seed=1, next_of="obs", stack_compress="obs")

        def writer(w: int) -> None:
            eps = Episodes((4, 4), 4, seed=100 + w)
            for e in range(5):
                eps.reset()
                rows = [eps.step() for _ in range(8)]
                for i, (o, x) in enumerate(rows):
                    buf.add(obs=o, next_obs=x, wid=w, t=e * 8 + i)
        workers = [Worker(lambda w=w: writer(w), f"writer-{w}") for w in range(3)]
        for w in workers:
            w.start()
        join_workers(workers, buf.table.close, 30.0)
        want = {}
        for w in range(3):
            eps = Episodes((4, 4), 4, seed=100 + w)
            for e in range(5):
                eps.reset()
                for i in range(8):
                    want[w, e * 8 + i] = eps.step()
        assert len(buf) == 3 * 40
        out = buf.sample(500)
        for b in range(500):
            o, x = want[int(out["wid"][b]), int(out["t"][b])]
            np.testing.assert_array_equal(out["obs"][b], o)
            np.testing.assert_array_equal(out["next_obs"][b], x)


class TestBytes:
    def test_atari_stack_and_next_obs_under_03_of_payload(self) -> None:
        """4-stacked noise frames with next_obs: ~1 frame per step."""
        buf = ReplayBuffer(10_000, seed=0, next_of="obs", stack_compress="obs")
        steps = 0
        eps = Episodes(ATARI, 4, seed=12)
        for _ in range(3):
            eps.reset()
            for _ in range(100):
                o, x = eps.step()
                buf.add(obs=o, next_obs=x, act=1, rew=0.5, done=False)
                steps += 1
        payload = 2 * 84 * 84 * 4  # obs + next_obs as stacks
        per_step = stored_bytes(buf) / steps
        assert per_step <= 0.3 * payload
        assert per_step < 84 * 84 * 1.05  # about one frame

    def test_batches_store_the_same(self) -> None:
        a = ReplayBuffer(1000, seed=0, next_of="obs", stack_compress="obs")
        b = ReplayBuffer(1000, seed=0, next_of="obs", stack_compress="obs")
        fill(a, Episodes((8, 8), 4, seed=13), 3, 20)
        fill(b, Episodes((8, 8), 4, seed=13), 3, 20, batch=True)
        frames = 3 * (1 + 20) * 64  # the reset frame once, then one per step
        assert stored_bytes(a) == stored_bytes(b) == frames + 60 * 8


class TestErrors:
    def test_missing_next_field(self) -> None:
        buf = ReplayBuffer(10, next_of="obs")
        with pytest.raises(ValueError, match="next_obs"):
            buf.add(obs=np.zeros(3))
        buf.add(obs=np.zeros(3), next_obs=np.ones(3))  # nothing was fixed
        assert len(buf) == 1

    def test_stack_needs_a_last_axis(self) -> None:
        buf = ReplayBuffer(10, stack_compress="obs")
        with pytest.raises(ValueError, match="'obs'.*last axis"):
            buf.add(obs=1.0, next_obs=2.0)

    def test_bad_names(self) -> None:
        with pytest.raises(TypeError, match="next_of"):
            ReplayBuffer(10, next_of=3)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="twice"):
            ReplayBuffer(10, stack_compress=["obs", "obs"])
        buf = ReplayBuffer(10, stack_compress="img")
        with pytest.raises(ValueError, match="'img'"):
            buf.add(obs=np.zeros((2, 2)))

    def test_wrong_shape_later_leaves_buffer_intact(self) -> None:
        buf = ReplayBuffer(10, seed=0, next_of="obs", stack_compress="obs")
        eps = Episodes((4, 4), 4, seed=14)
        eps.reset()
        o, x = eps.step()
        buf.add(obs=o, next_obs=x, t=0)
        with pytest.raises(ValueError, match="'obs'.*shape"):
            buf.add(obs=np.zeros((4, 4, 3), np.uint8), next_obs=x[..., :3], t=9)
        with pytest.raises(ValueError, match="differ"):
            buf.add(obs=o, next_obs=x, t=9, extra=1)
        o2, x2 = eps.step()
        buf.add(obs=o2, next_obs=x2, t=1)
        assert len(buf) == 2
        out = buf.sample(32)
        want = [(o, x), (o2, x2)]
        for b, t in enumerate(out["t"]):
            np.testing.assert_array_equal(out["obs"][b], want[t][0])
            np.testing.assert_array_equal(out["next_obs"][b], want[t][1])

    def test_invalid_priority_leaves_streams_intact(self) -> None:
        buf = ReplayBuffer(50, alpha=0.6, seed=0, next_of="obs", stack_compress="obs")
        eps = Episodes((3, 3), 4, seed=16)
        eps.reset()
        rows = [eps.step() for _ in range(6)]
        buf.add_batch(obs=np.stack([o for o, _ in rows[:3]]),
                      next_obs=np.stack([x for _, x in rows[:3]]), t=np.arange(3))
        with pytest.raises(InvalidPriorityError):
            buf.add_batch(obs=np.stack([o for o, _ in rows[3:]]),
                          next_obs=np.stack([x for _, x in rows[3:]]),
                          t=np.arange(3, 6), priorities=[1.0, float("nan"), 1.0])
        assert len(buf) == 3
        before = stored_bytes(buf)
        buf.add_batch(obs=np.stack([o for o, _ in rows[3:]]),
                      next_obs=np.stack([x for _, x in rows[3:]]), t=np.arange(3, 6))
        assert stored_bytes(buf) - before == 3 * (9 + 8)  # one frame per step
        out = buf.sample(64)
        for b, t in enumerate(out["t"]):
            np.testing.assert_array_equal(out["obs"][b], rows[t][0])
            np.testing.assert_array_equal(out["next_obs"][b], rows[t][1])

    def test_deep_stacks_of_wide_items(self) -> None:
        """k beyond the gather's inline planes, 8-byte items, compressed."""
        buf = ReplayBuffer(50, seed=0, next_of="obs", stack_compress="obs",
                           compression="lz4")
        added = fill(buf, Episodes((2, 3), 20, np.float64, seed=17, levels=2), 2, 7)
        check(buf, added)

    def test_frame_stream_checks(self) -> None:
        with pytest.raises(ValueError, match="last axis"):
            _core.FrameStream(np.float32(1.0), True)
        s = _core.FrameStream(np.zeros((2, 3), np.uint8), True)
        assert (s.frames, s.shape, s.stacked) == (3, (2, 3), True)


# ----- state machine against an oracle -----


class FramesMachine(RuleBasedStateMachine):
    """Random episodes of random lengths through ReplayBuffer with frame
    streams, interleaved with samples (and evictions by capacity): every
    sampled field equals what the oracle says its key holds."""

    @initialize(k=st.sampled_from([0, 1, 2, 4]), next_of=st.booleans(),
                compression=st.sampled_from(["auto", "lz4", None]),
                capacity=st.integers(1, 12), levels=st.sampled_from([2, 256]),
                seed=st.integers(0, 2**16), float_frames=st.booleans())
    def setup(self, k: int, next_of: bool, compression: str | None, capacity: int,
              levels: int, seed: int, float_frames: bool) -> None:
        if k == 0:
            next_of = True  # something to compress
        self.buf = ReplayBuffer(capacity, seed=seed,
                                next_of="obs" if next_of else None,
                                stack_compress="obs" if k else None,
                                compression=compression)
        dtype = np.float32 if float_frames else np.uint8
        self.eps = Episodes((3, 4), k, dtype, seed=seed, levels=levels)
        self.added: dict[int, dict[str, np.ndarray]] = {}
        self.capacity, self.n = capacity, 0

    def _rows(self, n: int, restart_at: int | None,
              repeat: bool) -> list[dict[str, np.ndarray]]:
        rows = []
        for i in range(n):
            if i == restart_at or not self.eps.stack:
                self.eps.reset()
            o, x = self.eps.step(repeat)
            rows.append({"obs": o, "next_obs": x, "t": np.int64(self.n + i)})
        return rows

    def _record(self, rows: list[dict[str, np.ndarray]]) -> None:
        for r in rows:
            self.added[self.n] = r
            self.n += 1
        for key in [k for k in self.added if k < self.n - self.capacity]:
            del self.added[key]

    @rule(repeat=st.booleans(), restart=st.booleans())
    def add_one(self, repeat: bool, restart: bool) -> None:
        rows = self._rows(1, 0 if restart else None, repeat)
        self.buf.add(**rows[0])
        self._record(rows)

    @rule(n=st.integers(1, 9), restart_at=st.none() | st.integers(0, 8),
          repeat=st.booleans())
    def add_batch(self, n: int, restart_at: int | None, repeat: bool) -> None:
        rows = self._rows(n, restart_at, repeat)
        self.buf.add_batch(**{k: np.stack([r[k] for r in rows]) for k in rows[0]})
        self._record(rows)

    @rule()
    def unrelated(self) -> None:
        """A transition that continues nothing (obs unlike the last next_obs)."""
        self.eps.stack = []
        rows = self._rows(1, None, False)
        self.eps.stack = []
        self.buf.add(**rows[0])
        self._record(rows)

    @precondition(lambda self: self.n > 0)
    @rule(n=st.integers(1, 20))
    def sample(self, n: int) -> None:
        out = self.buf.sample(n)
        for b, key in enumerate(out["indexes"]):
            assert int(key) in self.added, f"key {key} should be evicted"
            want = self.added[int(key)]
            assert int(out["t"][b]) == int(key)
            for name in ("obs", "next_obs"):
                np.testing.assert_array_equal(out[name][b], want[name],
                                              err_msg=f"{name} of key {key}")

    @invariant()
    def size(self) -> None:
        if hasattr(self, "buf"):
            assert len(self.buf) == min(self.n, self.capacity)


def test_frames_state_machine() -> None:
    run_state_machine_as_test(
        FramesMachine,
        settings=settings(stateful_step_count=30, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow]),
    )
