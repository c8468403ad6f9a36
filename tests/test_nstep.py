"""n-step transitions: ``ReplayBuffer(n_step=, gamma=)`` / cpprb's ``Nstep``.

Expected values come from ``_oracle``, a plain loop over each episode
segment (the steps between two ``on_episode_end`` calls).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastreplay import ReplayBuffer
from fastreplay._nstep import NStepAccumulator


def _oracle(segments: list[list[dict[str, Any]]], n: int, gamma: float,
            rew: str = "rew", nexts: tuple[str, ...] = ("next_obs",),
            done: str = "done", discount: str | None = None
            ) -> list[dict[str, Any]]:
    """Transition t spans steps t..e: e stops at n steps, a done, or the
    segment's end; rewards summed with gamma, next fields and done of e."""
    out = []
    for seg in segments:
        for t in range(len(seg)):
            e, ret = t, float(seg[t][rew])
            while e - t < n - 1 and e + 1 < len(seg) and not seg[e].get(done, False):
                e += 1
                ret += gamma ** (e - t) * float(seg[e][rew])
            tr = dict(seg[t])
            tr[rew] = ret
            for k in nexts:
                tr[k] = seg[e][k]
            if done in seg[t]:
                tr[done] = seg[e][done]
            if discount is not None:  # the bootstrap factor
                tr[discount] = 0.0 if seg[e].get(done) else gamma ** (e - t + 1)
            out.append(tr)
    return out


def _episode(start: int, length: int, terminal: bool = True) -> list[dict[str, Any]]:
    return [dict(obs=start + i, act=10 * (start + i), rew=float(start + i + 1),
                 next_obs=start + i + 1, done=float(terminal and i == length - 1))
            for i in range(length)]


def _stack(steps: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    return {k: np.array([s[k] for s in steps]) for k in steps[0]}


def _rows(batches: list[Any]) -> list[dict[str, Any]]:
    rows = []
    for ready in batches:
        if ready is None:
            continue
        data, _ = ready
        n = len(next(iter(data.values())))
        rows += [{k: v[i] for k, v in data.items()} for i in range(n)]
    return rows


def _assert_rows(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.keys() == w.keys()
        for k in w:
            np.testing.assert_allclose(g[k], w[k], rtol=1e-6, err_msg=k)


# ----- Acme's / cpprb's cases: episode shorter than n, exactly n, longer -----

@pytest.mark.parametrize("length", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("n", [1, 3])
def test_accumulator_single_steps(length: int, n: int) -> None:
    acc = NStepAccumulator(n, 0.5)
    ep = _episode(0, length)
    got = [acc.add(_stack([s])) for s in ep] + [acc.flush()]
    _assert_rows(_rows(got), _oracle([ep], n, 0.5))
    assert len(acc) == 0


def test_known_values() -> None:
    """n=3, gamma=0.5, rewards 1..5 with the episode ending at the 5th."""
    acc = NStepAccumulator(3, 0.5)
    rows = _rows([acc.add(_stack(_episode(0, 5))), acc.flush()])
    assert [r["rew"] for r in rows] == [2.75, 4.5, 6.25, 6.5, 5.0]
    assert [r["next_obs"] for r in rows] == [3, 4, 5, 5, 5]
    # cpprb says 0 for the third (its done looks at n - 1 steps only); the
    # window 2..4 reaches the terminal step, so the transition must not
    # bootstrap from next_obs.
    assert [r["done"] for r in rows] == [0, 0, 1, 1, 1]


def test_finished_at_done_without_episode_end() -> None:
    """A window ending at a done is final: it is returned at once, and the
    next episode's steps start fresh windows (no on_episode_end needed)."""
    acc = NStepAccumulator(4, 1.0)
    first = acc.add(_stack(_episode(0, 3)))
    assert first is not None and len(first[0]["obs"]) == 3 and len(acc) == 0
    acc.add(_stack(_episode(100, 2, terminal=False)))
    assert len(acc) == 2


def test_truncated_episode_keeps_real_next_obs() -> None:
    """on_episode_end without a done (time limit): the tail transitions end at
    the last step, with its next_obs (cpprb leaves stale values there)."""
    acc = NStepAccumulator(3, 0.9)
    ep = _episode(0, 4, terminal=False)
    rows = _rows([acc.add(_stack(ep)), acc.flush()])
    assert [r["next_obs"] for r in rows] == [3, 4, 4, 4]
    assert [r["done"] for r in rows] == [0, 0, 0, 0]


def test_discount_field_for_time_limits() -> None:
    """Nstep['discount']: gamma^k for a window of k steps, 0 at a done, so
    the tail of an episode cut by a time limit bootstraps correctly."""
    rb = ReplayBuffer(100, seed=0, Nstep={"size": 3, "gamma": 0.5, "rew": "rew",
                                          "next": "next_obs", "discount": "disc"})
    for ep, terminal in ((0, False), (10, True)):
        for s in _episode(ep, 4, terminal=terminal):
            rb.add(**s)
        rb.on_episode_end()
    got = _all(rb, ("obs", "disc", "next_obs"))
    assert {o: float(g["disc"]) for o, g in got.items()} == {
        0: 0.125, 1: 0.125, 2: 0.25, 3: 0.5, 10: 0.125, 11: 0.0, 12: 0.0, 13: 0.0}
    assert got[3]["disc"].dtype == np.float32
    with pytest.raises(ValueError, match="choose another name"):
        ReplayBuffer(8, Nstep={"size": 2, "rew": "rew", "discount": "obs"}).add(
            obs=0, rew=1.0, next_obs=1, done=0.0)


def test_vector_reward_and_int_reward() -> None:
    acc = NStepAccumulator(2, 0.5)
    out = acc.add({"rew": np.array([[1, 2], [3, 4]]), "next_obs": np.arange(2)})
    assert out is not None
    np.testing.assert_allclose(out[0]["rew"], [[2.5, 4.0]])
    assert out[0]["rew"].dtype == np.float32  # int rewards are summed as floats
    out = acc.add({"rew": np.array([[1.0, 1.0]]), "next_obs": np.arange(1)})
    assert out is not None
    np.testing.assert_allclose(out[0]["rew"], [[3.5, 4.5]])


def test_reward_dtype_is_fixed_by_the_first_rows() -> None:
    """int rewards after float ones (or the reverse) keep one column dtype."""
    for first, later in ((1, 0.5), (0.5, 1)):
        rb = ReplayBuffer(16, seed=0, n_step=2, gamma=0.5)
        for t, r in enumerate([first, first, later, later]):
            rb.add(obs=t, rew=r, next_obs=t + 1, done=0.0)
        rb.on_episode_end()
        assert len(rb) == 4


def test_priorities_follow_their_first_step() -> None:
    acc = NStepAccumulator(2, 1.0)
    assert acc.add(_stack(_episode(0, 1, terminal=False)), [5.0]) is None
    ready = acc.add(_stack(_episode(1, 2)))
    assert ready is not None
    np.testing.assert_array_equal(ready[1], [5.0, np.nan, np.nan])


def test_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match="'rew' or 'reward'"):
        NStepAccumulator(3, 0.9).add({"obs": np.zeros(2), "done": np.zeros(2)})
    acc = NStepAccumulator(3, 0.9)
    acc.add(_stack(_episode(0, 1, terminal=False)))
    with pytest.raises(ValueError, match=r"missing \['act'\]"):
        acc.add({k: v for k, v in _stack(_episode(1, 1)).items() if k != "act"})
    with pytest.raises(ValueError, match="field 'obs'"):
        acc.add({**_stack(_episode(1, 1)), "obs": np.zeros((1, 3))})
    with pytest.raises(ValueError, match="field 'obs'"):
        acc.add_one({**_episode(1, 1)[0], "obs": np.zeros(3)})
    with pytest.raises(ValueError, match=r"missing \['act'\]"):
        acc.add_one({k: v for k, v in _episode(1, 1)[0].items() if k != "act"})
    with pytest.raises(ValueError, match="'act': 2, 'done': 1"):
        acc.add({**_stack(_episode(1, 1)), "act": np.zeros(2)})
    assert len(acc) == 1  # nothing taken from the failed calls
    with pytest.raises(ValueError, match="n_step"):
        NStepAccumulator(0, 0.9)
    with pytest.raises(ValueError, match="gamma"):
        NStepAccumulator(2, float("nan"))
    with pytest.raises(ValueError, match="unknown keys"):
        ReplayBuffer(8, Nstep={"size": 2, "gama": 0.9})
    with pytest.raises(ValueError, match="not both"):
        ReplayBuffer(8, n_step=2, Nstep={"size": 2})
    with pytest.raises(ValueError, match=r"\['next_o'\]"):
        ReplayBuffer(8, Nstep={"size": 2, "rew": "rew", "next": "next_o"}).add(
            obs=0, rew=1.0, next_obs=1, done=0.0)


@st.composite
def _streams(draw: Any) -> tuple[list[list[dict[str, Any]]], list[int], int, float]:
    n = draw(st.integers(1, 6))
    gamma = draw(st.sampled_from([0.0, 0.5, 0.9, 1.0]))
    segments, start = [], 0
    for _ in range(draw(st.integers(1, 4))):
        length = draw(st.integers(1, 12))
        # dones anywhere (an episode may end without on_episode_end)
        dones = draw(st.lists(st.booleans(), min_size=length, max_size=length))
        seg = [dict(obs=start + i, rew=draw(st.integers(-3, 3)) / 2,
                    next_obs=start + i + 1, done=d) for i, d in enumerate(dones)]
        segments.append(seg)
        start += length
    cuts = draw(st.lists(st.integers(1, 5), min_size=1, max_size=30))
    return segments, cuts, n, gamma


@settings(max_examples=150, deadline=None, derandomize=True)
@given(_streams())
def test_accumulator_matches_oracle(case: Any) -> None:
    segments, cuts, n, gamma = case
    acc = NStepAccumulator(n, gamma, discount="disc")
    got = []
    cut = iter(cuts * 100)
    for seg in segments:
        i = 0
        while i < len(seg):  # the segment in batches of the drawn sizes
            k = next(cut)
            if k == 1:  # add_one and add share the waiting steps
                got.append(acc.add_one(seg[i]))
            else:
                got.append(acc.add(_stack(seg[i:i + k])))
            i += k
        got.append(acc.flush())
    _assert_rows(_rows(got), _oracle(segments, n, gamma, discount="disc"))


# ----- ReplayBuffer(n_step=...) -----

def _all(rb: ReplayBuffer, fields: tuple[str, ...] = (
        "obs", "act", "rew", "next_obs", "done")) -> dict[int, dict[str, Any]]:
    """Every stored transition by obs (sampled often enough, fixed seed)."""
    seen: dict[int, dict[str, Any]] = {}
    for _ in range(50):
        s = rb.sample(64)
        for i, o in enumerate(s["obs"]):
            seen[int(o)] = {k: s[k][i] for k in fields}
        if len(seen) == len(rb):
            break
    return seen


@pytest.mark.parametrize("form", ["kwargs", "cpprb"])
def test_replay_buffer_n_step(form: str) -> None:
    kw: dict[str, Any] = (dict(n_step=3, gamma=0.5) if form == "kwargs" else
                          dict(Nstep={"size": 3, "gamma": 0.5, "rew": "rew",
                                      "next": "next_obs"}))
    rb = ReplayBuffer(100, seed=1, **kw)
    eps = [_episode(0, 5), _episode(5, 2), _episode(7, 4, terminal=False)]
    for ep in eps:
        for s in ep[:1]:
            rb.add(**s)
        rb.add_batch(**_stack(ep[1:])) if len(ep) > 1 else None
        rb.on_episode_end()
    want = _oracle(eps, 3, 0.5)
    assert len(rb) == len(want) == 11
    got = _all(rb)
    assert len(got) == len(want)
    for w in want:
        g = got[w["obs"]]
        for k in g:
            np.testing.assert_allclose(g[k], w[k], err_msg=k)
    rb.on_episode_end()  # nothing waiting: nothing added
    assert len(rb) == 11


def test_replay_buffer_n_step_waits_and_priorities() -> None:
    rb = ReplayBuffer(100, alpha=0.6, seed=0, n_step=4, gamma=0.9)
    rb.add(obs=0, act=0, rew=1.0, next_obs=1, done=0.0, priority=7.0)
    rb.add(obs=1, act=0, rew=1.0, next_obs=2, done=0.0)
    assert len(rb) == 0  # waiting for their windows
    rb.on_episode_end()
    assert len(rb) == 2
    s = rb.sample(32)
    assert s["rew"][s["obs"] == 0][0] == pytest.approx(1.9)
    keys = {int(o): int(k) for o, k in zip(s["obs"], s["indexes"], strict=True)}
    got = {int(o): rb.table.get(k) for o, k in keys.items()}
    assert got[0] is not None and got[0][1] == 7.0
    assert got[1] is not None and got[1][1] == 7.0  # the largest seen so far


def test_n_step_one_is_the_plain_buffer() -> None:
    rb = ReplayBuffer(8, n_step=1)
    rb.add(obs=0, rew=1.0, next_obs=1, done=0.0)
    assert len(rb) == 1 and rb._nstep is None


def test_n_step_with_next_of() -> None:
    """n-step rows go through the frame streams of next_of unchanged."""
    rb = ReplayBuffer(100, seed=0, n_step=3, gamma=0.5, next_of="obs")
    for ep in range(3):
        for t in range(5):
            rb.add(obs=np.full(4, 10 * ep + t, np.float32), act=t, rew=1.0,
                   next_obs=np.full(4, 10 * ep + t + 1, np.float32),
                   done=float(t == 4))
        rb.on_episode_end()
    assert len(rb) == 15
    s = rb.sample(64)
    for o, nxt, r, d in zip(s["obs"][:, 0], s["next_obs"][:, 0], s["rew"], s["done"],
                            strict=True):
        t = int(o) % 10
        e = min(t + 2, 4)
        assert nxt == int(o) - t + e + 1
        assert r == pytest.approx(sum(0.5 ** m for m in range(e - t + 1)))
        assert d == float(e == 4)
