"""``fastreplay demo --processes``, run as a user runs it (``python -m
fastreplay`` in a subprocess): actors and learner in their own processes
against the server in the demo's process.  Checks the summary's numbers
against each other and against the server's own counts, and that no child
process outlives the demo (normal end, a killed actor, Ctrl-C)."""

from __future__ import annotations

import json
import math
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from child_env import child_env

pytestmark = pytest.mark.skipif(sys.platform == "win32",
                                reason="signals and /proc of POSIX")

#: A small, quick job: 2 actors of 16x16x4 frames, short episodes.
ARGS = ("demo", "--processes", "--actors", "2", "--obs-shape", "16,16,4",
        "--batch-size", "32")
PIDS_LINE = re.compile(r"server 127\.0\.0\.1:\d+ \(pid (\d+)\), actor pids "
                       r"([\d, ]+), learner pid (\d+)")


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    """The pids still alive after waiting up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while (left := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


class _Demo:
    """``fastreplay demo`` in a subprocess of its own session, its stderr
    read line by line (progress lines end in newlines when not a tty)."""

    def __init__(self, *args: str, cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fastreplay", *args], cwd=cwd, env=child_env(),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: list[str] = []
        self.stdout: list[str] = []
        self.readers = [threading.Thread(target=self._read_stderr, daemon=True),
                        threading.Thread(target=self._read_stdout, daemon=True)]
        for r in self.readers:
            r.start()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        self.stdout.extend(self.proc.stdout)

    def pids(self, timeout: float = 60.0) -> tuple[int, list[int], int]:
        """(server pid, actor pids, learner pid) from the demo's first line."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            assert line is not None, "".join(self.stderr)
            if m := PIDS_LINE.search(line):
                actors = [int(p) for p in m.group(2).split(",")]
                return int(m.group(1)), actors, int(m.group(3))

    def finish(self, timeout: float = 60.0) -> tuple[int, str, str]:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            raise
        finally:
            for r in self.readers:  # until both pipes reached EOF
                r.join(timeout=10)
            for pipe in (self.proc.stdout, self.proc.stderr):
                assert pipe is not None
                pipe.close()
        return code, "".join(self.stdout), "".join(self.stderr)


def _positive(x: object) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_processes_demo_reports_a_consistent_summary(tmp_path: Path) -> None:
    demo = _Demo(*ARGS, "--duration", "2", "--json", "demo.json", cwd=tmp_path)
    server_pid, actor_pids, learner_pid = demo.pids()
    code, out, err = demo.finish()
    assert code == 0, err
    for field in ("processes:", "steps:", "samples:", "stored bytes/step:",
                  "compression:", "rate-limiter stall:", "peak memory:"):
        assert field in out
    assert "2 actor processes" in out and "summed over 4 processes" in out
    assert "[####################]" in err  # the final progress line
    s = json.loads((tmp_path / "demo.json").read_text())
    for key in ("steps", "steps_per_s", "items_created", "items_inserted",
                "samples", "samples_per_s", "batches", "stored_bytes", "raw_bytes",
                "stored_bytes_per_step", "compression_ratio", "peak_rss_bytes"):
        assert _positive(s[key]), (key, s[key])
    assert s["processes"] is True
    assert s["pids"] == {"server": server_pid, "actor-0": actor_pids[0],
                         "actor-1": actor_pids[1], "learner": learner_pid}
    assert len({server_pid, *actor_pids, learner_pid}) == 4
    # The clock starts when every child is ready and stops once all reported.
    assert 2 <= s["duration_s"] < 30
    # Peak memory is summed over the server's and the children's processes.
    peaks = s["peak_rss_by_process"]
    assert sorted(peaks) == ["actor-0", "actor-1", "learner", "server"]
    assert all(_positive(v) for v in peaks.values())
    assert s["peak_rss_bytes"] == sum(peaks.values())
    # The server's own counts (TableInfo, read in the server's process)
    # against what the children counted: every item the server inserted was
    # created by an actor from its steps; every sample the server handed out
    # reached the learner, which updated each sampled item's priority.
    server = s["server_counts"]
    assert server["inserts"] == s["items_inserted"]
    assert 0 < s["items_inserted"] <= s["items_created"] <= s["steps"]
    assert server["samples"] == s["samples"] == s["priority_updates"]
    assert s["samples"] <= s["batches"] * s["batch_size"]
    # Nothing was evicted (2 s of steps < 100,000 items), so every update
    # found its item; the learner read its updates' replies before reporting.
    assert s["evictions"] == 0
    assert server["updates"] == s["priority_updates"]
    # SampleToInsertRatio(1.0, min_size_to_sample=1000, error_buffer=1000)
    # allows samples <= inserts <= samples + 2000 at every moment.
    assert s["samples"] <= s["items_inserted"] <= s["samples"] + 2000
    assert s["table_size"] == s["items_inserted"] - s["evictions"]
    assert s["compression_ratio"] > 1
    assert not _gone([*actor_pids, learner_pid])


def test_a_killed_actor_stops_the_demo_and_every_child(tmp_path: Path) -> None:
    demo = _Demo(*ARGS, "--duration", "60", cwd=tmp_path)
    _, actor_pids, learner_pid = demo.pids()
    # Once it runs (the first progress line, or a short pause) kill an actor.
    time.sleep(1.0)
    os.kill(actor_pids[1], signal.SIGKILL)
    code, out, err = demo.finish()
    assert code == 1, err
    assert (f"fastreplay demo: error: actor-1 (pid {actor_pids[1]}) was killed by "
            "SIGKILL") in err, err
    assert "every child process has been stopped" in err
    assert "steps:" not in out  # no summary
    assert not _gone([*actor_pids, learner_pid])


def test_ctrl_c_stops_every_child_and_exits_non_zero(tmp_path: Path) -> None:
    demo = _Demo(*ARGS, "--duration", "60", cwd=tmp_path)
    _, actor_pids, learner_pid = demo.pids()
    # While the children start: they ignore SIGINT from birth (inherited).
    # A terminal's Ctrl-C: SIGINT to the whole foreground process group.
    os.killpg(demo.proc.pid, signal.SIGINT)
    code, out, err = demo.finish()
    assert code == 130, err
    assert "interrupted: stopping 3 child processes and the server" in err
    assert "Traceback" not in err  # the children ignore SIGINT: no noise
    assert "steps:" not in out
    assert not _gone([*actor_pids, learner_pid])


def test_children_exit_when_the_demo_process_is_killed(tmp_path: Path) -> None:
    # SIGKILL leaves the demo no chance to stop anyone: each child sees its
    # pipe to the demo close and exits by itself.
    demo = _Demo(*ARGS, "--duration", "60", cwd=tmp_path)
    _, actor_pids, learner_pid = demo.pids()
    demo.proc.kill()
    code, _, _ = demo.finish()
    assert code == -signal.SIGKILL
    assert not _gone([*actor_pids, learner_pid], timeout=20.0)
