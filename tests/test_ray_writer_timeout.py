"""Regression: a writer's own timeout (DeadlineExceededError is a
TimeoutError, so an OSError) is not a lost shard: it propagates and the
writer stays open and bound (``fastreplay demo --ray`` stopped after ten
steps when a flush waiting for the rate limiter closed its writer)."""

from __future__ import annotations

from typing import Any

import pytest

from fastreplay import errors
from fastreplay.ray import ShardWriter


class _Slow:
    calls = 0

    def flush(self, block_until_num_items: int = 0, timeout_ms: Any = None) -> None:
        self.calls += 1
        if self.calls == 1:
            raise errors.DeadlineExceededError("Timeout exceeded (items still sent)")

    def end_episode(self, clear_buffers: bool = True, timeout_ms: Any = None) -> None:
        raise errors.DeadlineExceededError("Timeout exceeded")

    def append(self, data: Any, partial_step: bool = False) -> None:
        if data == "slow":
            raise errors.DeadlineExceededError("Timeout exceeded")

    def create_item(self, table: str, priority: float, trajectory: Any) -> None:
        return None

    def close(self) -> None:
        pass


class _Client:
    failed = 0

    def writer_failed(self, s: int) -> errors.ShardUnavailableError:
        self.failed += 1
        return errors.ShardUnavailableError("lost", shard=s, restarts=0)

    def writer_closed(self, s: int) -> None:
        pass


def test_a_writer_timeout_is_not_a_lost_shard() -> None:
    client = _Client()
    w = ShardWriter(_Slow(), 0, client)  # type: ignore[arg-type]
    with pytest.raises(errors.DeadlineExceededError) as exc:
        w.flush(4, timeout_ms=100)
    assert not isinstance(exc.value, errors.ShardUnavailableError)
    with pytest.raises(errors.DeadlineExceededError):
        w.end_episode(timeout_ms=100)
    with pytest.raises(errors.DeadlineExceededError):
        w.append("slow")
    assert client.failed == 0
    w.flush(4, timeout_ms=100)  # still open, still bound to shard 0
    w.append({"x": 1})
    w.create_item("t", 1.0, {})
    assert w.shard == 0


def test_a_broken_connection_is_a_lost_shard() -> None:
    class _Broken(_Slow):
        def append(self, data: Any, partial_step: bool = False) -> None:
            raise ConnectionResetError("peer gone")

    client = _Client()
    w = ShardWriter(_Broken(), 3, client)  # type: ignore[arg-type]
    w.create_item("t", 1.0, {})
    with pytest.raises(errors.ShardUnavailableError) as exc:
        w.append({"x": 1})
    assert exc.value.shard == 3 and exc.value.unacknowledged_items == 1
    assert client.failed == 1
    with pytest.raises(RuntimeError, match="closed"):
        w.append({"x": 1})
