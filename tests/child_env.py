"""The environment for ``python -m fastreplay`` child processes of tests."""

from __future__ import annotations

import os
from pathlib import Path


def child_env(*drop: str) -> dict[str, str]:
    """This process's environment with the checkout first on PYTHONPATH
    (when the tests run from one), less the variables named in ``drop``."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    if Path(root, "fastreplay", "__init__.py").exists():
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (root, env.get("PYTHONPATH")) if p)
    for key in drop:
        env.pop(key, None)
    return env
