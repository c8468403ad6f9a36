"""The hand-written stub fastreplay/_core.pyi must match the compiled module."""

import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("mypy")

HERE = pathlib.Path(__file__).parent


def test_core_stub_matches_extension() -> None:
    result = subprocess.run(
        [
            sys.executable, "-m", "mypy.stubtest", "fastreplay._core",
            "--allowlist", str(HERE / "stubtest_allowlist.txt"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
