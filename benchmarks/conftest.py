"""Shared setup of the pytest-benchmark suites: the workloads live in the
installed package (``fastreplay.bench``, also run by ``fastreplay bench``),
and every result records the machine, versions and commit it was measured
on."""

from __future__ import annotations

import os

import pytest

from fastreplay.bench import env

#: Table capacity of the standard workloads (DESIGN.md section 6).
CAPACITY = int(os.environ.get("FASTREPLAY_BENCH_CAPACITY", "1000000"))


@pytest.fixture(autouse=True)
def _context(benchmark) -> None:
    benchmark.extra_info.update(
        python=env.versions()["python"], machine=env.machine(), commit=env.commit(),
        capacity=CAPACITY,
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The test suite turns warnings into errors; peers (TensorFlow, torch)
    # warn on import, which must not fail a benchmark run.
    for item in items:
        item.add_marker(pytest.mark.filterwarnings("ignore"))
