"""Smoke test of ``ray_bench.py`` (issue 15): its figures run end to end
with tiny sizes on a single-node Ray (skipped without ray); the numbers are
not checked, only that every row is measured and reported."""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ray_bench  # noqa: E402
import ray_bench_anchors as anchors  # noqa: E402
import ray_bench_common as rc  # noqa: E402
import ray_bench_frray as fr  # noqa: E402


@pytest.fixture(scope="module")
def cluster():  # type: ignore[no-untyped-def]
    """A single-node loopback Ray (the one of the session if there is one)."""
    pytest.importorskip("ray")
    c = rc.start_cluster(1, num_cpus=2, timeout=60)
    try:
        yield c
    finally:
        c.stop()


def _measured(rows: list[rc.Row]) -> None:
    assert rows
    for row in rows:
        assert row.values and all(v > 0 for v in row.values), row


def test_table_formats_ratios_spread_and_skips() -> None:
    fig = rc.Figure("writes", "writes", "bar")
    fig.rows = [rc.Row(ray_bench.NAIVE, [100.0, 300.0, 200.0]),
                rc.Row("fastreplay.ray", [500.0], naive=ray_bench.NAIVE)]
    fig.skipped.append("TorchRL: skipped: not installed")
    text = ray_bench.table(fig)
    assert "200" in text and "2.50x" in text and "100% " in text
    assert "TorchRL: skipped" in text
    start = rc.Row("a", [2.0], unit="s", higher=False)
    assert start.ratio(rc.Row("b", [1.0], unit="s", higher=False)) == 0.5
    json.dumps(fig.rows[0].to_json())


def test_naive_anchor_rows(cluster) -> None:  # type: ignore[no-untyped-def]
    out = anchors.naive_throughput(cluster, rc.TINY)
    assert set(out) == {"writes", "learner", "together"}
    for rows in out.values():
        _measured(rows)
    _measured([anchors.naive_startup(cluster, rc.TINY)])


def test_fastreplay_ray_rows(cluster) -> None:  # type: ignore[no-untyped-def]
    try:
        fr.module()
    except fr.Unavailable as exc:
        pytest.skip(str(exc))
    out = fr.throughput(cluster, rc.TINY)
    assert set(out) == {"writes", "learner", "dataset", "together"}
    for rows in out.values():
        _measured(rows)
