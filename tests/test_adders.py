"""Acme-style adders (``fastreplay.adders``) against small oracles.

Cases mirror Acme's adder tests (episodes shorter than n, exactly n, long;
structured rewards and discounts; extras; padding; truncation; continuing
sequences); the expected items come from ``_transitions_oracle`` and
``_sequences_oracle``, plain loops over the episode.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastreplay as fr
from fastreplay import _nest, adders
from fastreplay.adders import EndBehavior

TABLE = adders.DEFAULT_PRIORITY_TABLE


def _server(*names: str, size: int = 1000) -> fr.Server:
    return fr.Server([fr.Table.queue(n, size) for n in (names or (TABLE,))])


def _drain(client: fr.Client, table: str = TABLE) -> list[Any]:
    """Every item of a queue table, oldest first, as per-item nests."""
    items = []
    for _ in range(client.server_info()[table].current_size):
        _, data = client.sample_batch(table, 1, timeout=5)  # lengths may differ
        items.append(_nest.map_structure(lambda x: x[0], data))
    return items


def _episode(first: Any, steps: list[tuple[Any, ...]],
             adder: adders.ReverbAdder) -> None:
    adder.add_first(adders.restart(first))
    for step in steps:
        adder.add(*step)


def _close(got: Any, want: Any) -> None:
    g, w = _nest.flatten(got), _nest.flatten(want)
    assert len(g) == len(w), (got, want)
    for a, b in zip(g, w, strict=True):
        np.testing.assert_allclose(np.asarray(a, dtype=np.float64),
                                   np.asarray(b, dtype=np.float64), rtol=1e-6)


# ----- NStepTransitionAdder -----

def _window(rewards: list[Any], discounts: list[Any], g: float) -> tuple[Any, Any]:
    """R = sum_i g^i (d_0 .. d_(i-1)) r_i, D = g^(k-1) d_0 .. d_(k-1), leafwise
    (a scalar discount applies to every reward leaf)."""
    def leaf(rs: list[Any], ds: list[Any]) -> tuple[Any, Any]:
        ret, prod = 0.0, 1.0
        for i, (r, d) in enumerate(zip(rs, ds, strict=True)):
            ret = ret + g ** i * prod * np.asarray(r, dtype=np.float64)
            prod = prod * np.asarray(d, dtype=np.float64)
        total = g ** (len(rs) - 1) * prod
        return ret + 0 * total, total  # the return has both shapes, D d's

    if _nest.is_nest(rewards[0]) or _nest.is_nest(discounts[0]):
        like = rewards[0] if _nest.is_nest(rewards[0]) else discounts[0]
        n = len(_nest.flatten(like))
        rl = [_nest.flatten(r) if _nest.is_nest(r) else [r] * n for r in rewards]
        dl = [_nest.flatten(d) if _nest.is_nest(d) else [d] * n for d in discounts]
        pairs = [leaf([r[j] for r in rl], [d[j] for d in dl]) for j in range(n)]
        return (_nest.unflatten_as(like, [p[0] for p in pairs]),
                _nest.unflatten_as(like, [p[1] for p in pairs]))
    return leaf(rewards, discounts)


def _transitions_oracle(first: Any, steps: list[tuple[Any, ...]], n: int, g: float
                        ) -> list[adders.Transition]:
    """Acme's layout: s_0->s_1 .. s_0->s_n, then s_t->s_(t+n), then the
    shorter ones ending at s_T."""
    obs = [first] + [s[1].observation for s in steps]
    acts = [s[0] for s in steps]
    rews = [s[1].reward for s in steps]
    discs = [s[1].discount for s in steps]
    extras = [s[2] if len(s) > 2 else () for s in steps]
    T = len(steps)
    spans = [(max(0, k - n), k) for k in range(1, T + 1)]
    spans += [(f, T) for f in range(max(0, T - n) + 1, T)]
    out = []
    for f, e in spans:
        ret, disc = _window(rews[f:e], discs[f:e], g)
        out.append(adders.Transition(obs[f], acts[f], ret, disc, obs[e], extras[f]))
    return out


tr, term = adders.transition, adders.termination

TRANSITION_CASES = {
    # name: (n, discount, first, steps)
    "one_step": (1, 1.0, 1, [(0, tr(0.0, 2)), (0, tr(0.0, 3)), (0, term(1.0, 4))]),
    "one_step_dict_obs": (1, 1.0, {"foo": 1},
                          [(0, tr(0.0, {"foo": 2})), (0, term(1.0, {"foo": 3}))]),
    "one_step_extras": (1, 1.0, 1, [(0, tr(0.0, 2), {"state": 0}),
                                    (0, term(1.0, 3), {"state": 1})]),
    "one_step_array_extras": (1, 1.0, 1, [(0, tr(0.0, 2), np.zeros(1)),
                                          (0, term(1.0, 3), np.zeros(1))]),
    "two_step": (2, 1.0, 1, [(0, tr(1.0, 2, 0.5)), (0, tr(1.0, 3, 0.5)),
                             (0, term(1.0, 4))]),
    "two_step_tuple_reward": (2, 1.0, 1, [(0, tr((1.0, 2.0), 2, 0.5)),
                                          (0, tr((1.0, 2.0), 3, 0.5)),
                                          (0, term((1.0, 2.0), 4))]),
    "two_step_array_reward": (2, 1.0, 1, [(0, tr(np.array([1.0, 2.0]), 2, 0.5)),
                                          (0, tr(np.array([1.0, 2.0]), 3, 0.5)),
                                          (0, term(np.array([1.0, 2.0]), 4))]),
    "two_step_dict_discount": (2, 1.0, 1, [
        (0, tr(1.0, 2, {"a": 0.5, "b": 0.1})), (0, tr(1.0, 3, {"a": 0.5, "b": 0.1})),
        (0, term(1.0, 4)._replace(discount={"a": 0.0, "b": 0.0}))]),
    "two_step_broadcast": (2, 1.0, 1, [
        (0, tr(np.array([[1.0, 2.0]]), 2, np.array([[0.5], [0.1]]))),
        (0, tr(np.array([[1.0, 2.0]]), 3, np.array([[0.5], [0.1]]))),
        (0, term(np.array([[1.0, 2.0]]), 4)._replace(discount=np.zeros((2, 1))))]),
    "two_step_extras": (2, 1.0, 1, [(0, tr(1.0, 2, 0.5), {"state": 0}),
                                    (0, tr(1.0, 3, 0.5), {"state": 1}),
                                    (0, term(1.0, 4), {"state": 2})]),
    "three_step_discounted": (3, 0.4, 1, [(0, tr(1.0, 2, 0.5)), (0, tr(1.0, 3, 0.5)),
                                          (0, term(1.0, 4))]),
    "three_step_varying_reward": (3, 0.5, 1, [(0, tr(2.0, 2)), (0, tr(3.0, 3)),
                                              (0, tr(5.0, 4)), (0, term(7.0, 5))]),
    "single_transition_episode": (4, 1.0, 1, [(0, term(1.0, 2))]),
    "episode_shorter_than_n": (4, 1.0, 1, [(0, tr(1.0, 2)), (0, term(1.0, 3))]),
    "episode_equal_to_n": (3, 1.0, 1, [(0, tr(1.0, 2)), (0, tr(1.0, 3)),
                                       (0, term(1.0, 4))]),
    "long_episode": (3, 0.9, 0, [(i, tr(float(i), i + 1, 0.9)) for i in range(9)]
                     + [(9, adders.truncation(9.0, 10))]),
}


@pytest.mark.parametrize("name", sorted(TRANSITION_CASES))
def test_n_step_transition_adder(name: str) -> None:
    n, g, first, steps = TRANSITION_CASES[name]
    with _server() as server:
        client = server.localhost_client()
        adder = adders.NStepTransitionAdder(client, n, g)
        for _ in range(2):  # two episodes: the adder resets after the first
            _episode(first, steps, adder)
        want = _transitions_oracle(first, steps, n, g) * 2
        got = _drain(client)
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            assert isinstance(a, adders.Transition)
            _close(a, b)
        adder.close()


def test_n_step_worked_values() -> None:
    """Acme's ThreeStepVaryingReward by hand: g=0.5, rewards 2, 3, 5, 7."""
    n, g, first, steps = TRANSITION_CASES["three_step_varying_reward"]
    with _server() as server:
        client = server.localhost_client()
        _episode(first, steps, adders.NStepTransitionAdder(client, n, g))
        got = _drain(client)
    assert [float(t.reward) for t in got] == [2, 3.5, 4.75, 7.25, 8.5, 7]
    assert [float(t.discount) for t in got] == [1, 0.5, 0.25, 0, 0, 0]
    assert [int(t.next_observation) for t in got] == [2, 3, 4, 5, 5, 5]


def test_float32_stays_float32() -> None:
    with _server() as server:
        client = server.localhost_client()
        adder = adders.NStepTransitionAdder(client, 3, 0.99)
        _episode(np.zeros(2, np.float32),
                 [(1, tr(np.float32(1), np.ones(2, np.float32), np.float32(1))),
                  (1, term(np.float32(1), np.ones(2, np.float32))._replace(
                      discount=np.float32(0)))], adder)
        _, data = client.sample_batch(TABLE, 3, timeout=5)
    assert data.reward.dtype == np.float32 and data.discount.dtype == np.float32
    assert data.observation.shape == (3, 2)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(n=st.integers(1, 5), g=st.sampled_from([0.5, 0.9, 1.0]),
       rewards=st.lists(st.integers(-3, 3), min_size=1, max_size=9),
       cut=st.booleans())
def test_n_step_matches_oracle(n: int, g: float, rewards: list[int], cut: bool) -> None:
    T = len(rewards)
    steps = [(i, tr(float(r), i + 1, 0.5 if i % 3 == 1 else 1.0))
             for i, r in enumerate(rewards[:-1])]
    last = adders.truncation if cut else (lambda r, o: term(r, o))
    steps.append((T - 1, last(float(rewards[-1]), T)))
    with _server() as server:
        client = server.localhost_client()
        _episode(0, steps, adders.NStepTransitionAdder(client, n, g))
        got = _drain(client)
    want = _transitions_oracle(0, steps, n, g)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        _close(a, b)


def test_priority_fns_and_tables() -> None:
    with _server("a", "b") as server:
        client = server.localhost_client()
        fns = {"a": lambda t: float(t.reward) + 10.0, "b": None}
        adder = adders.NStepTransitionAdder(client, 2, 1.0, priority_fns=fns)
        _episode(1, TRANSITION_CASES["two_step"][3], adder)
        info_a, data_a = client.sample_batch("a", 4, timeout=5)
        info_b, _ = client.sample_batch("b", 4, timeout=5)
    np.testing.assert_allclose(info_a.priority, data_a.reward + 10.0)
    np.testing.assert_allclose(info_b.priority, 1.0)
    with pytest.raises(ValueError, match="'a'"):
        adder.add_priority_table("a", None)


def test_protocol_errors() -> None:
    with _server() as server:
        client = server.localhost_client()
        adder = adders.NStepTransitionAdder(client, 2, 1.0)
        with pytest.raises(ValueError, match="add_first must be called"):
            adder.add(0, tr(1.0, 2))
        with pytest.raises(ValueError, match="step_type FIRST"):
            adder.add_first(tr(1.0, 2))
        adder.add_first(adders.restart(1))
        with pytest.raises(ValueError, match="add_first"):
            adder.add(0, adders.restart(2))
        adder.add(0, tr(1.0, 2))
        adder.reset()  # drops the episode: the next one starts clean
        _episode(1, [(0, term(1.0, 2))], adder)
        assert client.server_info()[TABLE].current_size == 2
    with pytest.raises(ValueError, match="n_step"):
        adders.NStepTransitionAdder(None, 0, 1.0)


@pytest.mark.parametrize("kind", ["n_step", "sequence"])
def test_bad_step_drops_the_episode_only(kind: str) -> None:
    with _server() as server:
        client = server.localhost_client()
        adder: adders.ReverbAdder = (
            adders.NStepTransitionAdder(client, 1, 1.0) if kind == "n_step"
            else adders.SequenceAdder(client, 1, 1))
        adder.add_first(adders.restart(np.zeros(2)))
        adder.add(0, tr(1.0, np.zeros(2)))
        with pytest.raises(ValueError, match="observation"):
            adder.add(0, tr(1.0, np.zeros(3)))  # another shape
        with pytest.raises(ValueError, match="add_first must be called"):
            adder.add(0, tr(1.0, np.zeros(2)))
        _episode(np.zeros(2), [(0, term(1.0, np.zeros(2)))], adder)
        assert client.server_info()[TABLE].current_size == (2 if kind == "n_step"
                                                            else 3)


def test_dm_env_style_timestep() -> None:
    """Any object with step_type/reward/discount/observation works (here a
    namedtuple with an int step type, as dm_env's StepType is an IntEnum)."""
    TS = namedtuple("TS", ["step_type", "reward", "discount", "observation"])
    with _server() as server:
        client = server.localhost_client()
        adder = adders.NStepTransitionAdder(client, 1, 1.0)
        adder.add_first(TS(0, None, None, 1))
        adder.add(0, TS(2, 1.0, 0.0, 2))
        assert len(_drain(client)) == 1


# ----- SequenceAdder -----

def _rows(first: Any, steps: list[tuple[Any, ...]]) -> list[adders.Step]:
    """The episode's rows: (s_i, a_i, r_i, d_i, i == 0, e_i), then the final
    observation with zeros."""
    obs = [first] + [s[1].observation for s in steps]
    rows = [adders.Step(obs[i], a, ts.reward, ts.discount, i == 0,
                        rest[0] if rest else ())
            for i, (a, ts, *rest) in enumerate(steps)]
    z = rows[-1]
    rows.append(adders.Step(obs[-1], 0 * np.asarray(z.action), 0.0, 0.0, False,
                            _nest.map_structure(lambda x: 0 * np.asarray(x), z.extras)))
    return rows


def _zero(row: adders.Step) -> adders.Step:
    return adders.Step(*[_nest.map_structure(lambda x: 0 * np.asarray(x), f)
                         for f in row])


def _sequences_oracle(first: Any, steps: list[tuple[Any, ...]], length: int,
                      period: int, end: EndBehavior, episodes: int = 1
                      ) -> list[list[adders.Step]]:
    """Sequences start every ``period`` rows; those whose rows all precede
    the final observation are written as the episode runs, then one more
    depending on ``end``."""
    rows = _rows(first, steps)
    if end is EndBehavior.CONTINUE:  # one stream of rows over all episodes
        stream = rows * episodes
        return [stream[s:s + length]
                for s in range(0, len(stream) - length + 1, period)]
    out: list[list[adders.Step]] = []
    last = len(rows) - 1
    s = 0
    while s + length <= last:
        out.append(rows[s:s + length])
        s += period
    if end is EndBehavior.WRITE:
        if len(rows) >= length:
            out.append(rows[-length:])
    elif s > last:  # a period past the length: no step left for another
        pass
    elif end is EndBehavior.TRUNCATE:
        out.append(rows[s:s + length])
    else:  # ZERO_PAD
        seq = rows[s:s + length]
        out.append(seq + [_zero(rows[-1])] * (length - len(seq)))
    return out * episodes


_ep7 = [(0, tr(float(r), i + 2)) for i, r in enumerate([2, 3, 5, 7, 9, 11])]
_ep7.append((0, term(13.0, 8)))

SEQUENCE_CASES = {
    # name: (length, period, end, steps, episodes)
    "period_one": (3, 1, EndBehavior.ZERO_PAD, _ep7[:3] + [(0, term(7.0, 5))], 1),
    "period_two": (3, 2, EndBehavior.ZERO_PAD, _ep7[:3] + [(0, term(7.0, 5))], 1),
    "early_termination_period_one": (3, 1, EndBehavior.ZERO_PAD,
                                     [(0, tr(2.0, 2)), (0, term(3.0, 3))], 1),
    "early_termination_padding": (4, 2, EndBehavior.ZERO_PAD,
                                  [(0, tr(2.0, 2)), (0, term(3.0, 3))], 1),
    "early_termination_no_padding": (4, 1, EndBehavior.TRUNCATE,
                                     [(0, tr(2.0, 2)), (0, term(3.0, 3))], 1),
    "long_episode_padding": (3, 3, EndBehavior.ZERO_PAD, _ep7, 1),
    "long_episode_no_padding": (3, 3, EndBehavior.TRUNCATE, _ep7, 1),
    "write": (3, 2, EndBehavior.WRITE, _ep7[:4] + [(0, term(8.0, 6))], 1),
    "write_short_episode": (5, 2, EndBehavior.WRITE, _ep7[:2] + [(0, term(8.0, 4))], 1),
    "continue": (3, 2, EndBehavior.CONTINUE, _ep7, 1),
    "continue_three_episodes": (3, 2, EndBehavior.CONTINUE,
                                _ep7[:5] + [(0, term(13.0, 7))], 3),
    "continue_truncated_episodes": (3, 2, EndBehavior.CONTINUE,
                                    _ep7[:5] + [(0, adders.truncation(13.0, 7))], 3),
    "extras": (2, 1, EndBehavior.ZERO_PAD,
               [(1, tr(1.0, 2), np.array([0.5, 1.5])),
                (2, term(2.0, 3), np.array([2.5, 3.5]))], 2),
}


def _written_sequences(length: int, period: int, end: EndBehavior, steps: Any,
                       episodes: int) -> list[Any]:
    """The items a SequenceAdder writes for ``episodes`` of ``steps``."""
    with _server() as server:
        client = server.localhost_client()
        adder = adders.SequenceAdder(client, length, period,
                                     end_of_episode_behavior=end)
        for _ in range(episodes):
            _episode(1, steps, adder)
        return _drain(client)


@pytest.mark.parametrize("name", sorted(SEQUENCE_CASES))
def test_sequence_adder(name: str) -> None:
    length, period, end, steps, episodes = SEQUENCE_CASES[name]
    got = _written_sequences(length, period, end, steps, episodes)
    want = _sequences_oracle(1, steps, length, period, end, episodes)
    assert len(got) == len(want)
    for item, seq in zip(got, want, strict=True):
        assert isinstance(item, adders.Step)
        stacked = adders.Step(*[np.stack([np.asarray(f) for f in col])
                                if not isinstance(col[0], tuple) or col[0]
                                else () for col in zip(*seq, strict=True)])
        _close(item, stacked)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(length=st.integers(1, 5), period=st.integers(1, 7), episode=st.integers(1, 9),
       end=st.sampled_from(list(EndBehavior)), episodes=st.integers(1, 2))
def test_sequence_matches_oracle(length: int, period: int, episode: int,
                                 end: EndBehavior, episodes: int) -> None:
    steps = [(i, tr(float(i), i + 2)) for i in range(episode - 1)]
    steps.append((episode - 1, term(float(episode), episode + 1)))
    got = _written_sequences(length, period, end, steps, episodes)
    want = _sequences_oracle(1, steps, length, period, end, episodes)
    assert [item.observation.tolist() for item in got] == [
        [int(np.asarray(r.observation)) for r in seq] for seq in want]
    assert [item.start_of_episode.tolist() for item in got] == [
        [bool(r.start_of_episode) for r in seq] for seq in want]


def test_legacy_flags() -> None:
    mk = adders.SequenceAdder
    assert mk(None, 3, 1).end_of_episode_behavior is EndBehavior.ZERO_PAD
    assert mk(None, 3, 1, pad_end_of_episode=False
              ).end_of_episode_behavior is EndBehavior.TRUNCATE
    assert mk(None, 3, 1, break_end_of_episode=False
              ).end_of_episode_behavior is EndBehavior.CONTINUE
    with pytest.raises(ValueError, match="not both"):
        mk(None, 3, 1, end_of_episode_behavior=EndBehavior.WRITE,
           pad_end_of_episode=True)
    with pytest.raises(ValueError, match="break_end_of_episode"):
        mk(None, 3, 1, pad_end_of_episode=True, break_end_of_episode=False)
    with pytest.raises(ValueError, match="EndBehavior"):
        mk(None, 3, 1, end_of_episode_behavior="zero")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="period"):
        mk(None, 3, 0)
    # Acme's callers may pass these; they change nothing here
    assert mk(None, 3, 1, delta_encoded=True, chunk_length=4)._sequence_length == 3


def test_sequences_sample_as_batches_with_masks() -> None:
    """R2D2-style: [B, T, ...] batches and the start-of-episode masks."""
    with _server(size=100) as server:
        client = server.localhost_client()
        adder = adders.SequenceAdder(client, 4, 2,
                                     end_of_episode_behavior=EndBehavior.CONTINUE)
        for _ in range(3):
            adder.add_first(adders.restart(np.zeros(3, np.float32)))
            for t in range(4):
                ts = (term if t == 3 else tr)(1.0, np.full(3, t + 1, np.float32))
                adder.add(np.int64(t), ts)
        n = client.server_info()[TABLE].current_size
        with client.dataset(TABLE, n, timeout=5) as ds:
            info, data = next(ds)
    assert data.observation.shape == (n, 4, 3)
    assert data.action.shape == data.start_of_episode.shape == (n, 4)
    reset, same = adders.episode_masks(data.start_of_episode)
    assert reset.dtype == bool and (reset == data.start_of_episode).all()
    # a sequence that reaches the next episode: True until its first step
    crossing = np.nonzero(reset[:, 1:].any(axis=1))[0]
    assert len(crossing)
    for b in crossing:
        k = 1 + int(np.argmax(reset[b, 1:]))
        assert same[b, :k].all() and not same[b, k:].any()
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        adders.episode_masks(np.zeros(3, bool))


EnvSpec = namedtuple("EnvSpec", ["observations", "actions", "rewards", "discounts"])


def _typed_episode(adder: adders.ReverbAdder, steps: int) -> None:
    f32 = np.float32
    adder.add_first(adders.restart({"x": np.zeros(3, f32)}))
    for t in range(steps):
        ts = adders.TimeStep(adders.StepType.LAST if t == steps - 1
                             else adders.StepType.MID, f32(t), f32(1.0),
                             {"x": np.full(3, t + 1, f32)})
        adder.add(np.int64(t), ts, extras=np.ones(2, f32))


@pytest.mark.parametrize("kind", ["n_step", "sequence"])
def test_signature(kind: str) -> None:
    f32 = np.float32
    spec = EnvSpec({"x": np.zeros(3, f32)}, np.zeros((), np.int64),
                   np.zeros((), f32), np.zeros((), f32))
    extras = np.zeros(2, f32)
    if kind == "n_step":
        sig: Any = adders.NStepTransitionAdder.signature(spec, extras)
        assert sig.next_observation["x"].shape == (3,)
        assert sig.next_observation["x"].name == "next_observation/x"
    else:
        sig = adders.SequenceAdder.signature(spec, extras, sequence_length=3)
        assert sig.start_of_episode.shape == (3,)
        assert sig.start_of_episode.dtype == np.dtype(bool)
        assert sig.observation["x"].shape == (3, 3)
    table = fr.Table(TABLE, fr.selectors.Fifo(), fr.selectors.Fifo(), 100,
                     fr.rate_limiters.MinSize(1), signature=sig)
    with fr.Server([table]) as server:
        client = server.localhost_client()
        adder = (adders.NStepTransitionAdder(client, 2, 0.9) if kind == "n_step"
                 else adders.SequenceAdder(client, 3, 1))
        _typed_episode(adder, 4)
        assert client.server_info()[TABLE].current_size > 0
        wrong = (adders.NStepTransitionAdder(client, 2, 0.9) if kind == "n_step"
                 else adders.SequenceAdder(client, 3, 1))
        wrong.add_first(adders.restart({"x": np.zeros(3, f32)}))
        with pytest.raises(ValueError, match="signature"):
            for _ in range(3):  # float64 rewards do not fit the float32 spec
                wrong.add(np.int64(0), tr(1.0, {"x": np.zeros(3, f32)}),
                          extras=np.ones(2, f32))


def test_n_step_signature_broadcasts_reward() -> None:
    spec = EnvSpec(np.zeros(2), np.zeros(()), np.zeros((1, 2), np.float32),
                   {"a": np.zeros((2, 1), np.float64)})
    sig = adders.NStepTransitionAdder.signature(spec)
    assert sig.reward["a"].shape == (2, 2) and sig.reward["a"].dtype == np.float64
    assert sig.discount["a"].shape == (2, 1)
