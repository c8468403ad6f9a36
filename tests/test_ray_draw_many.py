"""Several batches from one request per shard (``Draw.draw_many``, what
``fastreplay.ray``'s dataset uses), against fake shards in process (no
Ray): each batch is exact for the masses the replies carried, shard counts
follow those masses, a shard that gives too few is topped up once, and the
batches are whole or end early."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fastreplay.ray._draw import Draw
from fastreplay.replay_sample import SampleInfoBatch

ALPHA = 0.6
META = {"overfetch": True, "exponent": ALPHA, "kind": "prioritized"}


class FakeShards:
    """Shards sampling i.i.d. by ``priority**ALPHA`` in process; ``cap[s]``
    bounds what one request to shard ``s`` gives (a throttled shard)."""

    def __init__(self, priorities: list[list[float]], seed: int = 0) -> None:
        self.prios = [np.asarray(p, np.float64) for p in priorities]
        self.cap = [None] * len(priorities)
        self.dead: set[int] = set()
        self.rng = np.random.default_rng(seed)
        self.asked: list[tuple[int, int]] = []  # (shard, n) per request

    def __len__(self) -> int:
        return len(self.prios)

    def live(self) -> list[int]:
        return [s for s in range(len(self)) if s not in self.dead]

    def revive(self) -> None:
        pass

    def restarts(self, s: int) -> int:
        return 0

    def fetch(self, s: int, table: str, n: int, timeout: float | None) -> Any:
        return self.fetched(s, self.begin(s, table, n, timeout))

    def begin(self, s: int, table: str, n: int, timeout: float | None) -> Any:
        self.asked.append((s, n))
        cap = self.cap[s]
        return s, n if cap is None else min(n, cap)

    def fetched(self, s: int, begun: Any) -> Any:
        s, n = begun
        p = self.prios[s]
        w = p**ALPHA
        local = w / w.sum()
        idx = self.rng.choice(len(p), size=n, p=local)
        keys = (np.uint64(s) << np.uint64(56)) | idx.astype(np.uint64)
        info = SampleInfoBatch(keys, local[idx], np.full(n, len(p), np.int64), p[idx],
                               np.ones(n, np.int64))
        ids = (s * 1000 + idx).astype(np.int64)
        return info, [ids, ids.astype(np.float32) * 2], {"id": 0, "twice": 1}


def _warm(draw: Draw, meta: dict[str, Any] = META) -> None:
    """A first call: a draw asks for one batch until it knows how large the
    table's items are."""
    assert len(draw.draw_many("t", 8, 8, meta, False)) <= 1


def _global(shards: FakeShards) -> dict[int, float]:
    mass = sum(float((p**ALPHA).sum()) for p in shards.prios)
    return {s * 1000 + i: float(v**ALPHA / mass)
            for s, p in enumerate(shards.prios) for i, v in enumerate(p)}


def test_each_batch_of_one_request_is_globally_exact() -> None:
    shards = FakeShards([[1.0] * 40, [50.0] * 10])
    draw = Draw(shards, 0.0, seed=5)  # type: ignore[arg-type]
    _warm(draw)
    want = _global(shards)
    seen: dict[int, int] = {}
    total = 0
    before = draw.stats["samples"]
    for r in range(60):
        shards.asked.clear()
        batches = draw.draw_many("t", 64, 8, META, False)
        assert len(batches) == 8
        if r:  # the first asks by even shares, and tops up the heavy shard
            assert sorted(s for s, _ in shards.asked) == [0, 1]  # one request each
        for info, data in batches:
            ids = data["id"]
            assert len(info) == 64 and len(ids) == 64
            np.testing.assert_array_equal(info.key >> np.uint64(56), info.shard)
            np.testing.assert_array_equal(ids // 1000, info.shard)
            np.testing.assert_array_equal(data["twice"], ids * 2)
            np.testing.assert_allclose(info.probability, [want[int(i)] for i in ids],
                                       rtol=1e-9)
            assert set(info.table_size.tolist()) == {50}
            for i in ids:
                seen[int(i)] = seen.get(int(i), 0) + 1
            total += len(ids)
    freq = np.array([seen.get(i, 0) / total for i in want])
    assert np.abs(freq - np.array(list(want.values()))).sum() / 2 < 0.03
    assert draw.stats["samples"] - before == total


def test_shard_counts_vary_batch_to_batch_like_a_multinomial() -> None:
    """Each batch draws its own counts (not one split of a big draw)."""
    shards = FakeShards([[1.0] * 10, [1.0] * 10])
    draw = Draw(shards, 0.0, seed=1)  # type: ignore[arg-type]
    ones = [int((info.shard == 1).sum()) for _ in range(50)
            for info, _ in draw.draw_many("t", 100, 8, META, False)]
    assert np.mean(ones) == pytest.approx(50, abs=1.0)
    assert np.var(ones) == pytest.approx(25, rel=0.3)  # Binomial(100, 1/2)


def test_a_short_shard_is_topped_up_once_then_one_short_batch() -> None:
    shards = FakeShards([[1.0] * 10, [1.0] * 10])
    draw = Draw(shards, 0.0, seed=2)  # type: ignore[arg-type]
    _warm(draw)
    shards.asked.clear()
    rounds = draw.stats["second_rounds"]
    shards.cap[1] = 100  # shard 1 gives at most 100 items a request
    batches = draw.draw_many("t", 64, 8, META, False)
    asked_one = [n for s, n in shards.asked if s == 1]
    assert len(asked_one) == 2  # the request and one top-up
    assert draw.stats["second_rounds"] == rounds + 1
    # ~32 of shard 1 a batch, 200 items: not all 8 fit, so the first alone.
    assert len(batches) == 1 and len(batches[0][0]) == 64


def test_a_shard_short_after_its_top_up_shortens_the_first_batch() -> None:
    shards = FakeShards([[1.0] * 10, [1.0] * 10])
    draw = Draw(shards, 0.0, seed=12)  # type: ignore[arg-type]
    _warm(draw)
    shards.cap[1] = 5
    (info, data), = draw.draw_many("t", 64, 8, META, False)
    assert int((info.shard == 1).sum()) == 10  # 5 and 5 topped up
    assert len(info) < 64
    np.testing.assert_array_equal(data["id"] // 1000, info.shard)


def test_batches_stay_whole_and_unbiased_with_a_top_up_and_a_dead_shard() -> None:
    """Four shards, one dead, one that always needs its top-up: every item
    lines up with its data and the live shards' global probability, and a
    shard's count per batch keeps its multinomial mean and variance."""
    shards = FakeShards([[1.0] * 10, [2.0] * 10, [1.0] * 10, [3.0] * 10])
    shards.dead.add(1)
    draw = Draw(shards, 0.0, seed=13)  # type: ignore[arg-type]
    _warm(draw)
    shards.cap[2] = 60  # about 48 of 3*64 asked of it over 4 batches
    live = {0: 1.0, 2: 1.0, 3: 3.0**ALPHA}
    mass = 10 * sum(live.values())
    threes = []
    for _ in range(300):
        for info, data in draw.draw_many("t", 64, 4, META, False):
            ids = data["id"]
            np.testing.assert_array_equal(ids // 1000, info.shard)
            np.testing.assert_array_equal(data["twice"], ids * 2)
            np.testing.assert_allclose(info.probability,
                                       [live[int(s)] / mass for s in info.shard])
            assert info.unavailable_shards == (1,)
            if len(info) == 64:
                threes.append(int((info.shard == 3).sum()))
    share = 10 * live[3] / mass
    assert np.mean(threes) == pytest.approx(64 * share, abs=0.3)
    assert np.var(threes) == pytest.approx(64 * share * (1 - share), rel=0.15)


def test_a_shard_that_gives_nothing_has_no_mass_in_the_draw() -> None:
    shards = FakeShards([[1.0] * 10, [1.0] * 10])
    shards.cap[0] = 0
    draw = Draw(shards, 0.0, seed=3)  # type: ignore[arg-type]
    _warm(draw)
    batches = draw.draw_many("t", 32, 4, META, False)
    assert len(batches) == 4
    for info, _ in batches:
        assert set(info.shard.tolist()) == {1}
        np.testing.assert_allclose(info.probability, 0.1)


def test_nothing_to_sample_gives_no_batch() -> None:
    shards = FakeShards([[1.0] * 4, [1.0] * 4])
    shards.cap = [0, 0]
    draw = Draw(shards, 0.0, seed=4)  # type: ignore[arg-type]
    assert draw.draw_many("t", 8, 4, META, False) == []


def test_dead_shards_are_reported_and_require_all_raises() -> None:
    from fastreplay import errors

    shards = FakeShards([[1.0] * 4, [1.0] * 4])
    shards.dead.add(0)
    draw = Draw(shards, 0.0, seed=6)  # type: ignore[arg-type]
    _warm(draw)
    batches = draw.draw_many("t", 8, 2, META, False)
    assert [info.unavailable_shards for info, _ in batches] == [(0,), (0,)]
    with pytest.raises(errors.ShardUnavailableError, match=r"\[0\]"):
        draw.draw_many("t", 8, 2, META, True)


def test_a_uniform_table_draws_by_size() -> None:
    """Uniform shards of 30 and 10 items: every item 1/40 globally, shard 0
    three times as often."""
    shards = FakeShards([[1.0] * 30, [1.0] * 10])
    uniform = {**META, "exponent": None, "kind": "uniform"}
    draw = Draw(shards, 0.0, seed=8)  # type: ignore[arg-type]
    zero = total = 0
    for _ in range(40):
        for info, _ in draw.draw_many("t", 100, 4, uniform, False):
            np.testing.assert_allclose(info.probability, 1 / 40)
            assert set(info.table_size.tolist()) == {40}
            zero += int((info.shard == 0).sum())
            total += len(info)
    assert zero / total == pytest.approx(0.75, abs=0.01)


def test_a_call_asks_for_at_most_many_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """One batch until the table's item size is known, then as many as fit
    MANY_BYTES (12 bytes an item here: an int64 and a float32 column)."""
    from fastreplay.ray import _draw

    shards = FakeShards([[1.0] * 10, [1.0] * 10])
    draw = Draw(shards, 0.0, seed=9)  # type: ignore[arg-type]
    monkeypatch.setattr(_draw, "MANY_BYTES", 12 * 64 * 3 + 5)
    assert len(draw.draw_many("t", 64, 8, META, False)) == 1  # size not known
    assert len(draw.draw_many("t", 64, 8, META, False)) == 3
    monkeypatch.setattr(_draw, "MANY_BYTES", 1)
    assert len(draw.draw_many("t", 64, 8, META, False)) == 1
    monkeypatch.setattr(_draw, "MANY_BYTES", 1 << 30)
    assert len(draw.draw_many("t", 64, 8, META, False)) == 8
