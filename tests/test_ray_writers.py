"""ShardWriter (fastreplay/ray/_writers.py) without Ray: the wrapper a
fastreplay.ray client hands out around a writer of one shard."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest

import fastreplay
from fastreplay import errors
from fastreplay.ray._writers import ShardWriter


class _Client:
    """What ShardWriter asks of its fastreplay.ray client."""

    def __init__(self) -> None:
        self.closed: list[int] = []

    def writer_closed(self, s: int) -> None:
        self.closed.append(s)

    def writer_failed(self, s: int) -> errors.ShardUnavailableError:
        return errors.ShardUnavailableError(f"shard {s} is gone", shard=s, restarts=1)


@pytest.fixture()
def local() -> Any:
    table = fastreplay.Table("t", fastreplay.selectors.Uniform(),
                             fastreplay.selectors.Fifo(), 100,
                             fastreplay.rate_limiters.MinSize(1))
    server = fastreplay.Server([table])
    yield fastreplay.Client(f"localhost:{server.port}"), table
    server.stop()


def test_steps_pass_through_and_closing_closes(local: Any) -> None:
    client, table = local
    owner = _Client()
    writer = ShardWriter(client.trajectory_writer(2), 3, owner)  # type: ignore[arg-type]
    for i in range(3):
        writer.append({"x": np.float32(i)})
        writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})
    writer.append({"y": np.int64(7)}, partial_step=True)
    writer.append({"x": np.float32(9)})
    assert writer.history["y"][-1] is not None  # the partial step joined the next
    writer.close()
    assert table.size == 3 and owner.closed == [3]
    with pytest.raises(RuntimeError, match="closed"):
        writer.append({"x": np.float32(1)})
    with pytest.raises(RuntimeError, match="closed"):
        writer.create_item("t", 1.0, {"x": np.float32(1)})
    with pytest.raises(RuntimeError, match="closed"):
        writer.flush()
    writer.close()  # twice: nothing more
    assert owner.closed == [3]


def test_a_structured_writer_makes_no_items_by_hand(local: Any) -> None:
    client, _ = local
    from fastreplay import structured_writer as sw

    config = sw.create_config(sw.pattern_from_transform(
        {"x": np.zeros((), np.float32)}, lambda s: {"x": s["x"][-1]}), table="t")
    writer = ShardWriter(client.structured_writer([config]), 0, _Client())  # type: ignore[arg-type]
    writer.append({"x": np.float32(1)})
    with pytest.raises(AttributeError, match="configs"):
        writer.create_item("t", 1.0, {"x": np.float32(1)})
    writer.close()


class _Lost(Mapping[str, Any]):
    """Data whose reading raises what a writer raises for a lost shard."""

    def __getitem__(self, key: str) -> Any:
        raise errors.UnavailableError("the outbox lost its connection")

    def __iter__(self) -> Iterator[str]:
        raise errors.UnavailableError("the outbox lost its connection")

    def __len__(self) -> int:
        return 1


@pytest.mark.parametrize("where", ["append", "create_item", "extend"])
def test_a_lost_shard_raises_with_what_was_not_acknowledged(local: Any, where: str
                                                           ) -> None:
    """What append or create_item of a TrajectoryWriter raise for a lost
    shard reaches ShardWriter through the writer's failure hook (no wrapper
    on the step path): ShardUnavailableError with the items created since
    the last flush, and the writer is closed."""
    client, _ = local
    owner = _Client()
    inner = client.trajectory_writer(1)
    writer = ShardWriter(inner, 1, owner)  # type: ignore[arg-type]
    assert writer.append == inner.append  # no wrapper
    assert writer.extend == inner.extend
    for i in range(5):
        writer.append({"x": np.float32(i)})
        writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})
        if i == 2:
            writer.flush()
    with pytest.raises(errors.ShardUnavailableError) as err:
        if where == "append":
            writer.append(_Lost())
        elif where == "extend":
            writer.extend(_Lost())
        else:
            writer.create_item("t", 1.0, _Lost())
    assert err.value.shard == 1 and err.value.restarts == 1
    assert err.value.unacknowledged_items == 2  # created after the flush
    assert inner._closed and owner.closed == [1]
    with pytest.raises(RuntimeError, match="closed"):
        writer.create_item("t", 1.0, {})
    with pytest.raises(RuntimeError, match="closed"):
        writer.append({"x": np.float32(0)})
    with pytest.raises(RuntimeError, match="closed"):
        writer.extend({"x": np.zeros(2, np.float32)})


def test_extend_passes_through(local: Any) -> None:
    """extend of either writer reaches the shard's table (a StructuredWriter
    returns the items its configs made)."""
    from fastreplay import structured_writer as sw

    client, table = local
    writer = ShardWriter(client.trajectory_writer(3), 0, _Client())  # type: ignore[arg-type]
    writer.extend({"x": np.arange(4, dtype=np.float32)})
    writer.create_item("t", 1.0, {"x": writer.history["x"][-3:]})
    writer.close()
    config = sw.create_config(sw.pattern_from_transform(
        {"x": np.zeros((), np.float32)}, lambda s: {"x": s["x"][-1]}), table="t")
    structured = ShardWriter(client.structured_writer([config]), 0, _Client())  # type: ignore[arg-type]
    assert structured.extend({"x": np.arange(5, dtype=np.float32)}) == 5
    structured.close()
    assert table.size == 1 + 5


def test_other_errors_pass_through_and_keep_the_writer(local: Any) -> None:
    client, table = local
    writer = ShardWriter(client.trajectory_writer(1), 0, _Client())  # type: ignore[arg-type]
    writer.append({"x": np.float32(1)})
    with pytest.raises(ValueError):
        writer.append({"x": np.zeros(3, np.float32)})  # another shape
    writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})
    writer.close()
    assert table.size == 1


class _DeadStructured:
    """A StructuredWriter-like writer whose shard stopped answering."""

    num_pending_items = 4

    def __init__(self) -> None:
        self.calls = 0
        self.closed = False

    def append(self, data: Any, *, partial_step: bool = False) -> None:
        self.calls += 1
        if self.calls > 2:
            raise ConnectionResetError("gone")

    def extend(self, data: Any) -> int:
        self.append(data)
        return 1

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("how", ["append", "partial", "extend"])
def test_a_structured_writer_of_a_lost_shard(how: str) -> None:
    dead, owner = _DeadStructured(), _Client()
    writer = ShardWriter(dead, 1, owner)  # type: ignore[arg-type]

    def call() -> None:
        if how == "extend":
            writer.extend({"x": [1, 2]})
        else:
            writer.append({"x": 1}, partial_step=how == "partial")

    for _ in range(2):
        call()
    with pytest.raises(errors.ShardUnavailableError) as err:
        call()
    assert err.value.unacknowledged_items == 4  # its pending items
    assert dead.closed and owner.closed == [1]
    with pytest.raises(RuntimeError, match="closed"):
        writer.append({"x": 1})


def test_a_trajectory_writers_api_reads_through_without_getattr(local: Any) -> None:
    """A TrajectoryWriter's ShardWriter has no ``__getattr__`` (CPython then
    looks every attribute of the step loop up through a slower hook), yet
    the rest of Reverb's writer API reads the wrapped writer's."""
    client, table = local
    inner = client.trajectory_writer(3)
    writer = ShardWriter(inner, 0, _Client())  # type: ignore[arg-type]
    assert not hasattr(type(writer), "__getattr__")
    assert writer.max_num_keep_alive_refs == 3
    writer.append({"x": np.float32(1)})
    writer.append({"x": np.float32(2)})
    assert writer.episode_steps == 2 and writer.history is inner.history
    writer.configure(("x",), num_keep_alive_refs=2, max_chunk_length=1)
    writer.create_item("t", 1.0, {"x": writer.history["x"][-2:]})
    assert writer.num_pending_items == inner.num_pending_items
    writer.end_episode()
    assert writer.episode_steps == 0 and table.size == 1
    with pytest.raises(AttributeError):
        writer.no_such_attribute  # noqa: B018
    writer.close()


def test_another_writers_attributes_are_its_own() -> None:
    dead = _DeadStructured()
    writer = ShardWriter(dead, 1, _Client())  # type: ignore[arg-type]
    assert isinstance(writer, ShardWriter)
    assert writer.calls == 0 and writer.num_pending_items == 4
    with pytest.raises(AttributeError):
        writer.no_such_attribute  # noqa: B018
