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
