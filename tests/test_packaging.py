"""Every subpackage ships in the wheel (pyproject lists packages by hand)."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_every_subpackage_is_listed() -> None:
    pyproject = ROOT / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("not a source checkout")
    listed = set(re.findall(r'"(fastreplay[\w.]*)"',
                            re.search(r"^packages = \[(.*?)\]", pyproject.read_text(),
                                      re.M | re.S).group(1)))
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for p in (ROOT / "fastreplay").rglob("__init__.py")}
    assert found - listed == set(), "add these to [tool.setuptools] packages"
