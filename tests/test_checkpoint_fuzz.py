"""Fuzzing checkpoint restore (issue 11, part 1): mutations of a real small
checkpoint (byte flips, truncations, manifest field edits, forged sizes,
kinds, names and structures, symlinks, FIFOs, directories), most with every
checksum recomputed, each restored in a child process under a memory cap
(RLIMIT_AS).  No mutation may kill the child (signal), hang it (timeout),
blow its memory up, raise anything but DataLossError/ValueError or load
part of a checkpoint; a restore that succeeds must sample without crashing.
Mutations are batched per child to keep CI short."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from checkpoint_forge import write_small

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                     "checkpoint_fuzz_child.py")
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="RLIMIT_AS, /proc and FIFOs semantics")


def _run(tmp_path, seed: int, first: int, last: int, mem_mb: int = 512,
         timeout: float = 300.0) -> list[dict[str, object]]:
    pristine = write_small(str(tmp_path / "pristine"))
    work = tmp_path / f"work-{first}"
    work.mkdir()
    try:
        proc = subprocess.run(
            [sys.executable, CHILD, pristine, str(work), str(seed), str(first),
             str(last), str(mem_mb)],
            capture_output=True, text=True, timeout=timeout,
            env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout
        last_line = (out or "").strip().splitlines()[-1:]
        pytest.fail(f"restore hung (timeout {timeout}s); last: {last_line}")
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line]
    if proc.returncode != 0:
        pytest.fail(f"child died with {proc.returncode} during {lines[-1:]}\n"
                    f"{proc.stderr[-3000:]}")
    results = [r for r in lines if "outcome" in r]
    assert len(results) == last - first
    return results


def _check(results: list[dict[str, object]]) -> None:
    bad = [r for r in results
           if r["outcome"] not in ("ok", "DataLossError", "ValueError")]
    assert not bad, bad[:10]
    refused = sum(r["outcome"] != "ok" for r in results)
    assert refused > len(results) // 2  # the mutations mostly break it


def test_fuzzed_checkpoints_never_crash_hang_or_blow_up(tmp_path) -> None:
    _check(_run(tmp_path, seed=11, first=0, last=1000))


@pytest.mark.slow
def test_fuzzed_checkpoints_never_crash_hang_or_blow_up_long(tmp_path) -> None:
    """More mutations of other seeds; FASTREPLAY_FUZZ_MUTATIONS sets how many
    (bounded by default, as CI runs slow tests)."""
    n = int(os.environ.get("FASTREPLAY_FUZZ_MUTATIONS", "2500"))
    _check(_run(tmp_path, seed=12, first=0, last=n, timeout=max(600.0, n * 0.5)))
