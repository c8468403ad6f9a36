"""The README's python examples, for the tests that run them."""

from __future__ import annotations

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def block(heading: str) -> str:
    """The first python block after ``heading`` (skips the test when the
    README is not next to the tests, as in an installed sdist)."""
    if not README.exists():
        pytest.skip("README.md is not next to the tests")
    text = README.read_text()
    return re.findall(r"```python\n(.*?)```", text[text.index(heading):], re.S)[0]
