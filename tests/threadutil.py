"""Threads for tests: a worker that keeps its result or exception, and a
join that turns a hang into a test failure instead of a stuck suite."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest


class Worker(threading.Thread):
    """A daemon thread that keeps its result or exception."""

    def __init__(self, target: Callable[[], Any], name: str = "") -> None:
        super().__init__(daemon=True, name=name or None)
        self._fn = target
        self.result: Any = None
        self.error: BaseException | None = None
        self.started_call = threading.Event()

    def run(self) -> None:
        try:
            self.result = self._fn()
        except BaseException as exc:  # re-raised by join_workers()
            self.error = exc


def join_workers(workers: Sequence[Worker], unblock: Callable[[], None],
                 timeout: float) -> None:
    """Join every worker within ``timeout`` seconds in total; if some hang,
    call ``unblock`` (close the table or stop the server), then fail.  A
    worker's exception is re-raised."""
    deadline = time.monotonic() + timeout
    for w in workers:
        w.join(max(0.0, deadline - time.monotonic()))
    hung = [w.name for w in workers if w.is_alive()]
    if hung:
        unblock()
        for w in workers:
            w.join(2.0)
        pytest.fail(f"threads still running after {timeout} s (deadlock?): {hung}")
    for w in workers:
        if w.error is not None:
            raise w.error
