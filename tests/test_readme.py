"""The README's quickstart runs as-is."""

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def test_quickstart_runs(capsys) -> None:
    if not README.exists():
        pytest.skip("README.md is not next to the tests")
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "README has no python quickstart"
    exec(compile(blocks[0], "README.md quickstart", "exec"), {})
    out = capsys.readouterr().out
    assert out.split() == ["98", "(256,", "3,", "4)", "int64", "2"]


def test_multi_process_quickstart_runs(tmp_path) -> None:
    """The "Across processes" example, saved and run as the README says."""
    import subprocess
    import sys

    if not README.exists():
        pytest.skip("README.md is not next to the tests")
    text = README.read_text()
    section = text[text.index("### Across processes"):]
    block = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    script = tmp_path / "multi_process.py"
    script.write_text(block)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2000", "(256,", "8)"]
