"""What a benchmark or demo ran on: machine, versions, build, commit, peers.

Nothing here imports a peer: presence is found with ``importlib.util.find_spec``
and versions are read from the installed distributions' metadata, so
``fastreplay info`` stays fast even where TensorFlow or torch is installed.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import os
import platform
import subprocess
import sys
import sysconfig
from typing import Any

__all__ = ["NO_COMMIT", "PEERS", "Peer", "build_info", "commit", "machine",
           "peer_status", "versions"]


@dataclasses.dataclass(frozen=True)
class Peer:
    """A library measured beside fastreplay: its short name in tables, the
    module it is imported as and the distribution that installs it."""

    name: str
    module: str
    distribution: str


PEERS = (
    Peer("cpprb", "cpprb", "cpprb"),
    Peer("torchrl", "torchrl", "torchrl"),
    Peer("tianshou", "tianshou", "tianshou"),
    Peer("sb3", "stable_baselines3", "stable-baselines3"),
    Peer("dm-reverb", "reverb", "dm-reverb"),
)
PEER_BY_NAME = {p.name: p for p in PEERS}


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _present(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def peer_status() -> dict[str, dict[str, Any]]:
    """Peer name -> {"installed": bool, "version": str | None, "module": ...}."""
    return {
        p.name: {"installed": _present(p.module), "module": p.module,
                 "version": _version(p.distribution)}
        for p in PEERS
    }


def versions() -> dict[str, str | None]:
    """Versions of fastreplay, Python and the libraries a run depends on."""
    from fastreplay import __version__

    out: dict[str, str | None] = {"fastreplay": __version__,
                                  "python": platform.python_version()}
    for dist in ("numpy", "lz4", "Cython", "torch", "tensorflow", "tensorflow-cpu",
                 "matplotlib"):
        out[dist] = _version(dist)
    for p in PEERS:
        out[p.name] = _version(p.distribution)
    return {k: v for k, v in out.items() if v is not None}


def machine() -> dict[str, Any]:
    """CPU model, logical cores, memory and OS of this machine."""
    cpu = platform.processor() or platform.machine()
    memory = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    memory = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_bytes": memory,
            "system": f"{platform.system()} {platform.release()}",
            "architecture": platform.machine(),
            "python_implementation": platform.python_implementation()}


NO_COMMIT = "unknown (not a git checkout)"


def commit() -> str:
    """The fastreplay commit in use, never None: the short git commit of the
    checkout it is imported from ('+dirty' marks local changes to tracked
    files); else the commit pip recorded for a VCS install
    (``direct_url.json``) or one in the version (``0.1.0+g1a2b3c4``); else
    ``NO_COMMIT``."""
    return _git_commit() or _installed_commit() or NO_COMMIT


def _git_commit() -> str | None:
    # realpath: a venv may reach the checkout through a symlink.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    if not os.path.exists(os.path.join(root, ".git")):
        return None
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                              capture_output=True, text=True, check=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, check=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("+dirty" if dirty else "")) or None


def _installed_commit(distribution: str = "fastreplay") -> str | None:
    """The commit an installed distribution records, if any."""
    import json
    import re

    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    try:
        vcs = json.loads(dist.read_text("direct_url.json") or "{}").get("vcs_info")
    except (ValueError, AttributeError):
        vcs = None
    if isinstance(vcs, dict) and isinstance(vcs.get("commit_id"), str):
        return str(vcs["commit_id"])[:7]
    match = re.search(r"\+g([0-9a-f]{7,40})", dist.version or "")
    return match.group(1)[:7] if match else None


def build_info() -> dict[str, Any]:
    """What the compiled core reports, plus the interpreter's build settings
    (the extension adds its own flags in setup.py: -O3 unless built with
    FASTREPLAY_DEBUG=1)."""
    from fastreplay import _core

    return {
        "extension": _core.__file__,
        "lz4_available": bool(_core.LZ4_AVAILABLE),
        "selectors": sorted(_core.SELECTOR_KINDS),
        "compiler": sysconfig.get_config_var("CC"),
        "python_cflags": sysconfig.get_config_var("CFLAGS"),
        "byteorder": sys.byteorder,
    }
