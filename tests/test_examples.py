"""Every program in ``examples/`` runs to completion as a user would run it."""

import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
SCRIPTS = sorted(EXAMPLES.glob("*.py")) if EXAMPLES.exists() else []


def test_examples_exist() -> None:
    if not EXAMPLES.exists():
        pytest.skip("examples/ is not next to the tests")
    assert len(SCRIPTS) >= 3, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_example_runs(script: pathlib.Path, tmp_path: pathlib.Path) -> None:
    code = script.read_text()
    for module in ("torch", "tensordict", "ray"):
        if re.search(rf"^(import|from) {module}\b", code, re.M) and \
                importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed")
    done = subprocess.run([sys.executable, str(script), "--quick"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "an example should print what it shows"
