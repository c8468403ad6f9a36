"""csrc/ is plain C11: it compiles alone, warning-free, without Python.h."""

import pathlib
import re
import shutil
import subprocess

import pytest

CSRC = pathlib.Path(__file__).resolve().parent.parent / "csrc"
SOURCES = sorted(CSRC.glob("*.c"))


def test_sources_do_not_include_python_h() -> None:
    if not SOURCES:
        pytest.skip("csrc/ is not shipped next to the tests")
    pattern = re.compile(r"#\s*include\s*[<\"]Python\.h")
    for path in [*SOURCES, *CSRC.glob("*.h")]:
        assert not pattern.search(path.read_text()), path


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_source_compiles_standalone_without_warnings(source, tmp_path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    result = subprocess.run(
        [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-c", str(source),
         "-I", str(CSRC), "-o", str(tmp_path / "out.o")],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
