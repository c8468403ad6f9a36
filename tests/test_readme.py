"""The README's python examples run as-is, each as its own program."""

import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def _blocks() -> list[tuple[str, str]]:
    """(id, code) of every python block, the id naming its section."""
    if not README.exists():
        return []
    out, heading = [], "top"
    for part in re.split(r"(^#{2,3} [^\n]*$|```python\n.*?```)", README.read_text(),
                         flags=re.S | re.M):
        if part.startswith("#"):
            heading = re.sub(r"\W+", "-", part.strip("# ").lower()).strip("-")
        elif part.startswith("```python"):
            out.append((f"{heading}-{len(out)}", part[len("```python\n"):-3]))
    return out


BLOCKS = _blocks()


def test_readme_has_examples() -> None:
    if not README.exists():
        pytest.skip("README.md is not next to the tests")
    assert len(BLOCKS) >= 6, [b[0] for b in BLOCKS]


@pytest.mark.parametrize("code", [b[1] for b in BLOCKS], ids=[b[0] for b in BLOCKS])
def test_block_runs(code: str, tmp_path: pathlib.Path) -> None:
    """Saved to a file and run with this interpreter, as a reader would."""
    for module in ("torch", "tensordict"):
        if re.search(rf"^(import|from) {module}\b", code, re.M) and \
                importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed")
    script = tmp_path / "example.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "an example should print what it shows"


def test_quickstart_output(capsys: pytest.CaptureFixture[str]) -> None:
    if not BLOCKS:
        pytest.skip("README.md is not next to the tests")
    exec(compile(BLOCKS[0][1], "README.md quickstart", "exec"), {})
    out = capsys.readouterr().out
    assert out.split() == ["98", "(256,", "3,", "4)", "int64", "2"]
