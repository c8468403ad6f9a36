"""The global draw of fastreplay.ray (pure numpy; no Ray): counts, the
over-fetch bound, masses read from replies, global probabilities."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastreplay.ray import _sampling
from fastreplay.replay_sample import SampleInfoBatch


def _info(priorities: list[float], alpha: float | None) -> SampleInfoBatch:
    p = np.asarray(priorities, np.float64)
    w = np.ones_like(p) if alpha is None else p**alpha
    prob = w / w.sum()
    n = len(p)
    return SampleInfoBatch(
        np.arange(n, dtype=np.uint64),
        prob,
        np.full(n, n, np.int64),
        p,
        np.ones(n, np.int64),
    )


@given(st.lists(st.floats(0.01, 100.0), min_size=1, max_size=20), st.floats(0.0, 1.5))
def test_mass_of_a_prioritized_reply_is_the_sum_of_p_alpha(prios, alpha) -> None:
    info = _info(prios, alpha)
    expect = float(np.sum(np.asarray(prios) ** alpha))
    assert _sampling.mass_of(info, alpha) == pytest.approx(expect, rel=1e-9)


def test_mass_of_a_uniform_reply_is_its_size_and_empty_is_zero() -> None:
    assert _sampling.mass_of(_info([1.0] * 7, None), None) == pytest.approx(7)
    assert _sampling.mass_of(_info([], None), None) == 0.0


@given(st.integers(1, 4096), st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8))
def test_overfetch_is_within_one_and_the_batch(batch, raw) -> None:
    f = np.asarray(raw) + 1e-9
    k = _sampling.overfetch(batch, f / f.sum())
    assert np.all(k >= 1) and np.all(k <= batch)
    assert np.all(k >= np.minimum(np.ceil(batch * f / f.sum()), batch))


def test_overfetch_rarely_falls_short() -> None:
    rng = np.random.default_rng(0)
    m = np.array([1.0, 5.0, 20.0, 0.5])
    k = _sampling.overfetch(256, m / m.sum())
    short = sum(np.any(_sampling.draw_counts(rng, 256, m) > k) for _ in range(20_000))
    assert short < 20  # four standard deviations per shard


def test_draw_counts_follow_the_masses() -> None:
    rng = np.random.default_rng(1)
    m = np.array([1.0, 3.0, 0.0, 6.0])
    total = sum(_sampling.draw_counts(rng, 100, m) for _ in range(2_000))
    assert total[2] == 0
    share = total / total.sum()
    assert np.allclose(share, m / m.sum(), atol=0.01)
    assert _sampling.draw_counts(rng, 5, [0.0, 0.0]).tolist() == [0, 0]


def test_merge_info_scales_local_probabilities_by_the_shard_share() -> None:
    a, b = _info([1.0, 3.0], 1.0), _info([2.0, 2.0, 4.0], 1.0)
    masses = [4.0, 8.0]
    out = _sampling.merge_info([(0, a), (1, b)], masses, 5, [2])
    expect = np.array([1, 3, 2, 2, 4]) / 12.0
    assert np.allclose(out.probability, expect)
    assert out.shard.tolist() == [0, 0, 1, 1, 1]
    assert out.table_size.tolist() == [5] * 5
    assert out.unavailable_shards == (2,)
    w = out.weights(1.0)
    assert w.max() == 1.0 and np.allclose(
        w, (5 * expect) ** -1 / ((5 * expect) ** -1).max()
    )


def test_merge_info_of_nothing_is_empty() -> None:
    out = _sampling.merge_info([], [0.0], 0, [])
    assert len(out) == 0 and out.key.dtype == np.uint64


def test_import_fastreplay_never_imports_ray() -> None:
    import subprocess
    import sys

    code = "import sys, fastreplay; print('ray' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
