"""Shared setup of the pytest-benchmark suites: benchmark modules import
``peers`` and ``workloads`` from this folder, and every result records the
machine, versions and commit it was measured on."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

#: Table capacity of the standard workloads (DESIGN.md section 6).
CAPACITY = int(os.environ.get("FASTREPLAY_BENCH_CAPACITY", "1000000"))


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
            cwd=os.path.dirname(__file__), check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


@pytest.fixture(autouse=True)
def _context(benchmark) -> None:
    benchmark.extra_info.update(
        python=platform.python_version(), machine=platform.machine(),
        processor=platform.processor(), commit=_commit(), capacity=CAPACITY,
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The test suite turns warnings into errors; peers (TensorFlow, torch)
    # warn on import, which must not fail a benchmark run.
    for item in items:
        item.add_marker(pytest.mark.filterwarnings("ignore"))
