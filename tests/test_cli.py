"""The ``fastreplay`` command, run as a user runs it: ``python -m fastreplay``
in a subprocess (``demo``, ``bench --quick``, ``info``, argument errors)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fastreplay.bench import report, results, runner
from fastreplay.bench.env import PEERS
from fastreplay.bench.workloads import atari_frames

PEER_NAMES = {p.name for p in PEERS}


def fastreplay_cmd(*args: str, cwd: Path, timeout: float = 120
                   ) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    # Make the subprocess import this very package (a checkout on
    # PYTHONPATH or an installed one), whatever the working directory.
    root = str(Path(__file__).resolve().parent.parent)
    if Path(root, "fastreplay", "__init__.py").exists():
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (root, env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "fastreplay", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=timeout)


def positive(x: object) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


# ----- demo -----

def test_demo_runs_and_reports_a_consistent_summary(tmp_path: Path) -> None:
    out = fastreplay_cmd("demo", "--duration", "3", "--json", "demo.json",
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for field in ("steps:", "samples:", "stored bytes/step:", "compression:",
                  "rate-limiter stall:", "peak memory:"):
        assert field in out.stdout
    assert "[####" in out.stderr  # the progress bar
    s = json.loads((tmp_path / "demo.json").read_text())
    for key in ("steps", "steps_per_s", "samples", "samples_per_s", "batches",
                "items_inserted", "stored_bytes", "raw_bytes",
                "stored_bytes_per_step", "compression_ratio", "peak_rss_bytes"):
        assert positive(s[key]), (key, s[key])
    assert 3 <= s["duration_s"] < 30
    assert s["insert_stall_s"] >= 0 and s["sample_stall_s"] >= 0
    assert s["actor_wait_s"] >= 0
    # Every sampled item got its priority updated, in whole batches.
    assert s["priority_updates"] == s["samples"] <= s["batches"] * s["batch_size"]
    # SampleToInsertRatio(1.0, min_size_to_sample=1000, error_buffer=1000)
    # allows samples <= inserts <= samples + 2000 at every moment.
    assert s["samples"] <= s["items_inserted"] <= s["samples"] + 2000
    assert s["items_inserted"] <= s["steps"]
    # Atari-like frames compress, and overlapping items share their steps.
    assert s["compression_ratio"] > 4
    assert s["stored_bytes_per_step"] < s["step_payload_bytes"] / 4


def test_demo_takes_other_observation_shapes(tmp_path: Path) -> None:
    out = fastreplay_cmd("demo", "--duration", "1", "--actors", "1", "--obs-shape",
                         "16,16", "--batch-size", "8", "--quiet", "--json", "d.json",
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "[" not in out.stderr  # --quiet: no progress line
    s = json.loads((tmp_path / "d.json").read_text())
    assert s["obs_shape"] == [16, 16] and s["actors"] == 1
    assert s["step_payload_bytes"] == 16 * 16 + 12
    assert positive(s["steps"]) and positive(s["samples"])


# ----- bench -----

def test_bench_quick_measures_every_workload_and_accounts_for_every_peer(
        tmp_path: Path) -> None:
    out = fastreplay_cmd("bench", "--quick", "--json", "out.json", cwd=tmp_path,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "peer / fastreplay" in out.stdout and "Machine:" in out.stdout
    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["format"] == "fastreplay-bench/2" and doc["quick"] is True
    assert doc["versions"]["fastreplay"] and doc["versions"]["numpy"]
    assert doc["machine"]["cores"] >= 1 and doc["build"]["extension"]
    assert "commit" in doc
    assert [w["name"] for w in doc["workloads"]] == runner.WORKLOAD_NAMES
    results, skipped = doc["results"], doc["skipped"]
    for r in results:
        assert set(r) >= {"workload", "library", "variant", "median", "unit", "ratio",
                          "rounds"}
        assert positive(r["median"]) or r["unit"] == "items/s", r
        assert r["rounds"] >= 1 and r["unit"] in {"s", "B", "steps/s", "items/s",
                                                  "batches/s", "calls/s"}
        assert r["ratio"] is None or positive(r["ratio"])
        assert r["library"] in PEER_NAMES | {"fastreplay", "uncompressed"}
        assert r["min"] <= r["median"] <= r["max"], r
        if r["ratio"] is not None:  # peers only; fastreplay's own: vs_baseline
            assert r["kind"] == "peer" and r["library"] in PEER_NAMES, r
            assert r["ratio_min"] <= r["ratio"] <= r["ratio_max"], r
    for s in skipped:
        assert s["library"] in PEER_NAMES and s["reason"]
    for w in doc["workloads"]:
        mine = [r for r in results if r["workload"] == w["name"]]
        baseline = [r for r in mine if r["baseline"]]
        assert mine and len(baseline) <= 1, w["name"]
        same = {r["variant"]: r for r in mine if r["kind"] == "fastreplay"}
        for r in mine:  # ratio = peer median / fastreplay median: the row with
            if r["ratio"] is not None:  # the same variant, else the baseline
                ref = same.get(r["variant"]) or baseline[0]
                assert r["ratio_to"] == ref["variant"]
                ratio = r["median"] / ref["median"]
                if r["unit"].endswith("/s"):  # rates: fastreplay's / the peer's
                    ratio = 1 / ratio
                assert r["ratio"] == pytest.approx(ratio), r
            if r["vs_baseline"] is not None:  # own variants: to the baseline
                assert r["kind"] in ("variant", "reference"), r
                ratio = r["median"] / baseline[0]["median"]
                if r["unit"].endswith("/s"):
                    ratio = 1 / ratio
                assert r["vs_baseline"] == pytest.approx(ratio), r
        for peer in w["peers"]:  # every peer measured or skipped with a reason
            measured = any(r["library"] == peer and positive(r["ratio"]) for r in mine)
            noted = any(s["library"] == peer and s["workload"] == w["name"]
                        for s in skipped)
            assert measured or noted, (w["name"], peer)
            if noted and not measured:
                assert f"- {peer} ({w['name']})" in out.stdout
    memory = {r["variant"]: r["median"] for r in results if r["workload"] == "memory"}
    assert memory["one step's payload"] == 84 * 84 * 4 + 8
    assert memory["stored (LZ4 chunks)"] < memory["one step's payload"] / 4


def test_bench_processes_runs_actors_and_a_learner_in_other_processes(
        tmp_path: Path) -> None:
    out = fastreplay_cmd("bench", "--quick", "--only", "processes", "--json", "p.json",
                         cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads((tmp_path / "p.json").read_text())
    assert [w["name"] for w in doc["workloads"]] == ["processes"]
    fr = {r["variant"]: r for r in doc["results"] if r["library"] == "fastreplay"}
    assert set(fr) == {"1 actor process: steps", "2 actor processes: aggregate steps",
                       "learner process: sample_batch(256)",
                       "learner process: priorities of 256 keys",
                       "in the server process: sample_batch(256)"}
    assert all(positive(r["median"]) and r["rounds"] == 2 for r in fr.values())
    remote = fr["learner process: sample_batch(256)"]
    local = fr["in the server process: sample_batch(256)"]
    assert remote["baseline"] and remote["unit"] == local["unit"] == "batches/s"
    # The in-process row, a variant (not a peer): the remote rate as a
    # fraction of it.
    assert local["kind"] == "variant" and local["ratio"] is None
    assert local["vs_baseline"] == pytest.approx(remote["median"] / local["median"])
    rv = [r for r in doc["results"] if r["library"] == "dm-reverb"]
    skipped = [s for s in doc["skipped"] if s["library"] == "dm-reverb"]
    assert rv or skipped  # measured, or skipped with the reason shown
    assert all(positive(r["ratio"]) for r in rv)
    for s in skipped:
        assert f"- dm-reverb (processes): {s['reason'].splitlines()[0]}"[:100] \
            in out.stdout
    # Every worker process it started (their pids are in the log) is gone.
    pids = [int(w) for line in out.stderr.splitlines() if " pid" in line
            for w in line.replace(",", " ").split() if w.isdigit()]
    assert len(pids) >= 4, out.stderr  # fastreplay's server, 2 actors, learner
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue  # gone (or no /proc)
        assert b"process_worker" not in cmdline, pid


def test_a_silent_worker_is_killed_within_its_bounds(tmp_path: Path) -> None:
    from fastreplay.bench import processes

    silent = tmp_path / "silent"  # an "interpreter" that never answers
    silent.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(120)\n")
    silent.chmod(0o755)
    session = processes.Session("fastreplay", str(silent), processes.Plan(
        timeout=0.5, fill_timeout=0.5), str(tmp_path), log=lambda _: None)
    try:
        with pytest.raises(RuntimeError, match="server: no answer within 0.5 s"):
            session.run()
        (proc,) = session.procs
        assert proc.popen.poll() is None
        proc.close(grace=0.5)  # it does not read "quit": killed, this pid only
        assert proc.popen.returncode == -9
    finally:
        session.close()


def test_a_failing_worker_answers_with_its_traceback_and_exits(
        tmp_path: Path) -> None:
    from fastreplay.bench import processes

    proc = processes.Proc(sys.executable, "actor", {
        "lib": "fastreplay", "address": "127.0.0.1:no-port", "seed": 0, "connect": 1},
        str(tmp_path), 60, "actor0")
    try:
        with pytest.raises(RuntimeError, match=r"actor0: \w+Error: .*\nTraceback"):
            proc.recv(60)
        assert proc.popen.wait(30) == 1
    finally:
        proc.close()


def test_bench_plot_needs_matplotlib_or_writes_a_png(tmp_path: Path) -> None:
    out = fastreplay_cmd("bench", "--quick", "--only", "memory", "--plot", "b.png",
                         cwd=tmp_path)
    if importlib.util.find_spec("matplotlib") is None:
        assert out.returncode == 2
        assert "matplotlib" in out.stderr and "pip install" in out.stderr
        assert out.stdout == ""  # refused before measuring anything
    else:
        assert out.returncode == 0, out.stderr
        assert (tmp_path / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ratios_divide_by_the_workload_baseline() -> None:
    rs = [runner.Result("w", "fastreplay", "a", 2.0, "s", "call", 3, baseline=True),
          runner.Result("w", "fastreplay", "b", 1.0, "s", "call", 3),
          runner.Result("w", "cpprb", "c", 5.0, "s", "call", 3, kind="peer"),
          runner.Result("w", "cpprb", "d", 5.0, "s", "batch", 3, kind="peer"),
          runner.Result("v", "sb3", "e", 5.0, "s", "call", 3, kind="peer")]
    results.compute_ratios(rs)
    assert [r.ratio for r in rs] == [None, None, 2.5, None, None]
    assert report.format_value(58.7e-6, "s") == "58.7 µs"
    assert report.format_value(1.5, "s") == "1.50 s"
    assert report.format_value(28232, "B") == "28,232 B"


def test_rate_ratios_divide_by_the_fastreplay_row_of_the_same_variant() -> None:
    rs = [runner.Result("t", "fastreplay", "1 writer: steps", 100.0, "steps/s", "", 5),
          runner.Result("t", "fastreplay", "2 writers: steps", 160.0, "steps/s", "",
                        5),
          runner.Result("t", "dm-reverb", "1 writer: steps", 10.0, "steps/s", "", 5,
                        kind="peer"),
          runner.Result("t", "dm-reverb", "2 writers: steps", 40.0, "steps/s", "", 5,
                        kind="peer"),
          runner.Result("t", "dm-reverb", "4 writers: steps", 40.0, "steps/s", "", 5,
                        kind="peer")]  # no fastreplay row and no baseline: no ratio
    results.compute_ratios(rs)
    assert [r.ratio for r in rs] == [None, None, 10.0, 4.0, None]


def test_atari_frames_take_any_shape_and_share_frames() -> None:
    for shape in [(84, 84, 4), (16, 16), (10,), (32, 20, 3), (1, 1, 1)]:
        frames = atari_frames(3, shape=shape)
        assert [f.shape for f in frames] == [shape] * 3
        assert all(f.dtype == np.uint8 for f in frames)
    a, b = atari_frames(2)
    np.testing.assert_array_equal(a[..., 1:], b[..., :-1])  # stacked like DQN
    with pytest.raises(ValueError):
        atari_frames(1, shape=(2, 2, 2, 2))


# ----- info and usage -----

def test_info_reports_versions_build_and_peers(tmp_path: Path) -> None:
    out = fastreplay_cmd("info", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    import fastreplay

    assert f"fastreplay {fastreplay.__version__}" in out.stdout
    assert "numpy" in out.stdout and "lz4 in the core:" in out.stdout
    for name in PEER_NAMES:
        assert name in out.stdout
    doc = json.loads(fastreplay_cmd("info", "--json", cwd=tmp_path).stdout)
    assert set(doc["peers"]) == PEER_NAMES
    assert isinstance(doc["build"]["lz4_available"], bool)
    for p in doc["peers"].values():
        assert isinstance(p["installed"], bool)


@pytest.mark.parametrize(("args", "message"), [
    ([], "required: COMMAND"),
    (["nope"], "invalid choice: 'nope'"),
    (["demo", "--duration", "0"], "--duration must be > 0"),
    (["demo", "--duration", "soon"], "--duration must be a float"),
    (["demo", "--duration", "nan"], "--duration must be > 0"),
    (["demo", "--actors", "1.5"], "--actors must be a int"),
    (["demo", "--obs-shape", "84,x"], "comma-separated integers"),
    (["demo", "--obs-shape", "84,0"], "1 to 3 positive sizes"),
    (["demo", "--obs-shape", "1,2,3,4"], "1 to 3 positive sizes"),
    (["demo", "--obs-shape", "9000,9000"], "at most 64 MiB"),
    (["bench", "--only", "nope"], "unknown workload nope"),
    (["demo", "--unknown-flag"], "unrecognized arguments"),
])
def test_argument_errors_print_usage_and_exit_2(tmp_path: Path, args: list[str],
                                                message: str) -> None:
    out = fastreplay_cmd(*args, cwd=tmp_path)
    assert out.returncode == 2
    assert "usage: fastreplay" in out.stderr
    assert message in out.stderr
    assert out.stdout == ""


def test_console_script_is_declared() -> None:
    scripts = {e.name: e.value for e in importlib.metadata.entry_points(
        group="console_scripts")}
    if "fastreplay" not in scripts:
        pytest.skip("fastreplay is not installed (run from a checkout on PYTHONPATH)")
    assert scripts["fastreplay"] == "fastreplay.cli:main"
