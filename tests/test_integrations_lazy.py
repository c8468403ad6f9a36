"""``import fastreplay`` (and ``fastreplay.integrations``) stays free of
torch and tensordict: the adapters are imported only on request.  Checked in
a fresh interpreter, whether or not torch is installed."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "tensordict", "rlightning", "alf")


@pytest.mark.parametrize("stmt", ["import fastreplay",
                                  "import fastreplay.integrations",
                                  "import fastreplay.integrations._slots",
                                  "from fastreplay import client, table"])
def test_import_does_not_import_torch(stmt):
    code = (f"{stmt}\nimport sys\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout
