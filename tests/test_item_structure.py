"""Item structure travels with the item (issue 11, part 5): sample_batch
unpacks each item with the nest it was written with, whatever other writers
did to the table, and checkpoints keep it."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import fastreplay as reverb
from fastreplay import _structures
from fastreplay.checkpointers import DefaultCheckpointer

Step = collections.namedtuple("Step", ["obs", "reward"])


def _tables() -> list[reverb.Table]:
    return [reverb.Table("t", reverb.selectors.Fifo(), reverb.selectors.Fifo(), 100,
                         reverb.rate_limiters.MinSize(1))]


def _server(root) -> reverb.Server:
    return reverb.Server(_tables(), checkpointer=DefaultCheckpointer(str(root)))


def _write(client, make, n: int = 3) -> None:
    with client.trajectory_writer(2) as w:
        for i in range(n):
            w.append({"obs": np.full(3, i, np.float32), "r": np.int32(i)})
            make(w, w.history)
        w.flush()


def _nest_of(data):
    """The nest of ``data`` with leaves replaced by their shapes."""
    if isinstance(data, dict):
        return {k: _nest_of(v) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*[_nest_of(v) for v in data])
    if isinstance(data, (list, tuple)):
        return type(data)(_nest_of(v) for v in data)
    return data.shape


MAKERS = {
    "dict": lambda w, h: w.create_item("t", 1.0, {"o": h["obs"][-1:],
                                                  "r": h["r"][-1]}),
    "nested": lambda w, h: w.create_item("t", 1.0, {"a": {"b": [h["obs"][-1:]]},
                                                    "c": (h["r"][-1],)}),
    "namedtuple": lambda w, h: w.create_item("t", 1.0, Step(h["obs"][-1:],
                                                            h["r"][-1])),
    "list": lambda w, h: w.create_item("t", 1.0, [h["obs"][-1:], h["r"][-1]]),
}


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_structure_is_the_same_before_and_after_restore(tmp_path, kind) -> None:
    server = _server(tmp_path)
    client = server.localhost_client()
    _write(client, MAKERS[kind])
    _, before = client.sample_batch("t", 2)
    client.checkpoint()
    server.stop()
    restored = _server(tmp_path)
    _, after = restored.localhost_client().sample_batch("t", 2)
    assert _nest_of(after) == _nest_of(before)
    assert type(after) is type(before)
    if kind == "namedtuple":
        assert type(after) is Step  # the imported class, not a copy
    if kind == "dict":
        assert sorted(after) == ["o", "r"] and after["o"].shape == (2, 1, 3)
    if kind == "nested":  # each value a nest of one column keeps its nest
        assert _nest_of(before) == {"a": {"b": [(2, 1, 3)]}, "c": ((2,),)}


@pytest.mark.parametrize("remote", [False, True])
def test_a_dict_whose_value_nests_one_column_keeps_that_nest(remote: bool) -> None:
    """``{"b": {"y": col}, "a": col}`` has as many columns as keys, yet is
    not a flat dict: its item comes back nested (a regression: it came back
    as ``{"a": ..., "b": ...}``), in process and over a socket."""
    import socket

    server = reverb.Server(_tables(), port=0)
    port = server.port
    client = (reverb.Client(f"127.0.0.1:{port}", connector=lambda t:
                            socket.create_connection(("127.0.0.1", port), t))
              if remote else server.localhost_client())
    _write(client, lambda w, h: w.create_item(
        "t", 1.0, {"b": {"y": h["r"][-1]}, "a": h["obs"][-1]}))
    _, data = client.sample_batch("t", 3)
    assert _nest_of(data) == {"a": (3, 3), "b": {"y": (3,)}}
    np.testing.assert_array_equal(data["b"]["y"], data["a"][:, 0])  # r == obs
    server.stop()


def test_another_writer_does_not_change_how_items_unpack(tmp_path) -> None:
    server = _server(tmp_path)
    client = server.localhost_client()
    _write(client, MAKERS["dict"], n=2)
    # Before, a second writer's structure replaced the table's, so the dict
    # items were unpacked with it; now each batch has its items' nest.
    keys, data = client.sample_batch("t", 2)
    assert isinstance(data, dict)
    _write(client, MAKERS["list"], n=2)
    info, data = client.sample_batch("t", 2)  # Fifo: the dict items again
    assert isinstance(data, dict)


def test_mixed_structures_in_one_batch_raise_naming_both() -> None:
    server = reverb.Server([reverb.Table(
        "t", reverb.selectors.Uniform(), reverb.selectors.Fifo(), 100,
        reverb.rate_limiters.MinSize(1), seed=5)])
    client = server.localhost_client()
    _write(client, MAKERS["dict"], n=1)
    _write(client, MAKERS["nested"], n=1)
    with pytest.raises(ValueError, match=r"different structures: .*'o'.*'r'.* and "
                                         r".*'a'.*'c'"):
        client.sample_batch("t", 64)
    assert len(server.tables["t"]) == 2  # items stay


def test_sample_is_unchanged(tmp_path) -> None:
    """Client.sample returns flat data without a signature, as before."""
    server = _server(tmp_path)
    client = server.localhost_client()
    _write(client, lambda w, h: w.create_item("t", 1.0, {"o": h["obs"][-1:],
                                                         "r": h["r"][-1:]}), n=2)
    (steps,) = client.sample("t", 1)
    assert len(steps) == 1 and isinstance(steps[0].data, list)
    (sample,) = client.sample("t", 1, emit_timesteps=False)
    assert isinstance(sample.data, list) and len(sample.data) == 2


def test_structured_writer_items_keep_their_pattern_structure(tmp_path) -> None:
    server = _server(tmp_path)
    client = server.localhost_client()
    ref = reverb.structured_writer.create_reference_step(
        {"obs": np.zeros(3, np.float32), "r": np.int32(0)})
    config = reverb.structured_writer.create_config(
        {"x": ref["obs"][-2:], "y": [ref["r"][-1]]}, "t")
    with client.structured_writer([config]) as w:
        for i in range(4):
            w.append({"obs": np.full(3, i, np.float32), "r": np.int32(i)})
        w.flush()
    _, before = client.sample_batch("t", 2)
    client.checkpoint()
    server.stop()
    _, after = _server(tmp_path).localhost_client().sample_batch("t", 2)
    assert _nest_of(before) == _nest_of(after) == {"x": (2, 2, 3), "y": [(2,)]}


def test_equal_structures_share_one_id() -> None:
    a = _structures.intern({"b": None, "a": [None, (None,)]})
    b = _structures.intern({"a": [None, (None,)], "b": None})
    assert a == b != 0
    assert _structures.intern([None, None]) != _structures.intern((None, None))
    assert _structures.get(_structures.from_json(_structures.to_json(a))) == \
        _structures.get(a)
