"""Bounded form of ``net_processes.py`` (issue 12): fastreplay's server in
one process, actors and a learner in others, tiny tables and rounds of
0.1 s, so ``pytest benchmarks --benchmark-disable`` runs it in seconds.
dm-reverb's side runs too when ``FASTREPLAY_REVERB_PYTHON`` names an
interpreter that imports reverb (it adds about a minute: TensorFlow imports).
Skipped, with the reason, while ``Client('host:port')`` cannot reach a
server of another process.

Run: pytest benchmarks/test_bench_net.py --benchmark-disable -q
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import fastreplay

HERE = Path(__file__).resolve().parent


def _load_script() -> Any:
    spec = importlib.util.spec_from_file_location("net_processes",
                                                  HERE / "net_processes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _remote_unavailable() -> str | None:
    """Why a client in another process cannot reach a Server, or None."""
    table = fastreplay.Table("probe", fastreplay.selectors.Uniform(),
                             fastreplay.selectors.Fifo(), 10,
                             fastreplay.rate_limiters.MinSize(1))
    server = fastreplay.Server([table], port=None)
    try:
        code = (f"import fastreplay; fastreplay.Client('127.0.0.1:{server.port}')"
                ".server_info(timeout=3)")
        try:
            r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                               text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return "a client in another process got no answer within 60 s"
        if r.returncode != 0:
            lines = r.stderr.strip().splitlines()
            return f"a client in another process failed: {lines[-1] if lines else ''}"
        return None
    finally:
        server.stop()


@pytest.mark.benchmark(group="net processes")
def test_net_processes_bounded(benchmark) -> None:
    why = _remote_unavailable()
    if why is not None:
        pytest.skip(f"fastreplay remote transport: {why}")
    script = _load_script()
    args = argparse.Namespace(
        reverb_python=os.environ.get("FASTREPLAY_REVERB_PYTHON"),
        only=None if os.environ.get("FASTREPLAY_REVERB_PYTHON") else "fastreplay",
        actors=[1, 2], small_size=2_000, atari_steps=300, rounds=1, seconds=0.1,
        timeout=30.0, fill_timeout=120.0, max_seconds=300.0, fr_dataset=True)
    results = benchmark.pedantic(script.run_all, args=(args,), rounds=1, iterations=1)
    fr = results["fastreplay"]
    expected = {"actors x1 aggregate steps/s", "actors x2 aggregate steps/s",
                "small sample(256) batches/s", "small dataset(256) batches/s",
                "atari sample(256) batches/s", "atari dataset(256) batches/s",
                "update_priorities(256) calls/s", "mutate_priorities(256) calls/s",
                "small in-process sample_batch/s", "atari in-process sample_batch/s"}
    assert expected <= set(fr), sorted(expected - set(fr))
    assert all(v > 0 for v in fr.values())
    benchmark.extra_info.update({f"fastreplay {k}": v for k, v in fr.items()})
