"""``fastreplay demo --ray``: a short run on the session's two-node Ray
cluster (tests/conftest.py ``ray_session``) whose summary must add up, the
command's flags, and the message when Ray is not installed."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import pytest

from fastreplay import cli
from fastreplay.demo import DemoConfig, format_summary


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return True


# ----- a short run on Ray -----

def test_ray_demo_summary_adds_up(ray_session: Any) -> None:
    from fastreplay.demo_ray import run_demo_ray

    cfg = DemoConfig(duration=3.0, actors=2, obs_shape=(8, 8, 1), batch_size=32,
                     max_size=20_000, episode_length=100, seed=0)
    s = run_demo_ray(cfg, shards=2, progress=None)

    assert s["ray"] is True and s["shards"] == 2 and s["actors"] == 2
    assert s["steps"] > 0 and s["samples"] > 0
    assert 0 < s["items_inserted"] <= s["items_created"] <= s["steps"]
    assert s["samples"] == s["batches"] * cfg.batch_size == s["priority_updates"]
    # The shards' own counts (summed by Client.metrics) agree with the run's.
    assert s["server_counts"]["inserts"] == s["items_inserted"]
    assert s["server_counts"]["samples"] >= s["samples"]
    assert len(s["shard_sizes"]) == 2 and sum(s["shard_sizes"]) == s["table_size"]
    assert s["shards_alive"] == [True, True]
    assert len(set(s["shard_nodes"])) == 2  # spread over the two nodes
    assert s["ray_nodes"] == 2
    # Actor i writes into shard i from that shard's node: both shards fill.
    assert [a["shard"] for a in s["actor_placement"]] == [0, 1]
    assert [a["node_id"] for a in s["actor_placement"]] == s["shard_nodes"]
    assert min(s["shard_sizes"]) > 0
    assert s["peak_rss_bytes"] == sum(s["peak_rss_by_process"].values())
    assert set(s["peak_rss_by_process"]) == {"driver", "actor-0", "actor-1"}

    text = format_summary(s)
    assert "2 Ray actors" in text
    sizes = " + ".join(f"{n:,}" for n in s["shard_sizes"])
    lines = {k: v.strip() for k, v in (x.split(":", 1) for x in text.splitlines())}
    assert list(lines)[:7] == ["duration", "shards", "ray actors", "steps",
                               "items inserted", "samples", "shard samples"]
    assert lines["shards"] == f"2 on 2 Ray node(s), items per shard {sizes}"
    assert lines["shard samples"].startswith(
        f"{s['server_counts']['samples']:,} drawn by the shards for "
        f"{s['samples']:,} delivered")
    assert "actor-0 pid" in text and "shards not counted" in text

    # The session's Ray is used and left running; the demo's actors are
    # killed (their worker processes exit).
    assert ray_session.is_initialized()
    pids = [a["pid"] for a in s["actor_placement"]]
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if _alive(p)]


# ----- the command's flags -----

def test_ray_flags_parse() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["demo"])
    assert args.ray is False and args.shards is None
    args = parser.parse_args(["demo", "--ray", "--shards", "3"])
    assert args.ray is True and args.shards == 3


@pytest.mark.parametrize(("argv", "message"), [
    (["demo", "--ray", "--shards", "0"], "--shards must be > 0"),
    (["demo", "--ray", "--shards", "two"], "--shards must be a int"),
    (["demo", "--ray", "--shards", "257"], "--shards must be <= 256"),
    (["demo", "--shards", "3"], "--shards needs --ray"),
    (["demo", "--ray", "--processes"], "--ray and --processes cannot be combined"),
])
def test_bad_ray_flags_exit_2(argv: list[str], message: str,
                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "shards"), [(["--ray"], 2),
                                              (["--ray", "--shards", "4"], 4)])
def test_ray_flag_runs_the_ray_demo(argv: list[str], shards: int,
                                    monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    import fastreplay.demo
    import fastreplay.demo_ray

    calls: list[tuple[DemoConfig, int]] = []

    def fake(cfg: DemoConfig, shards: int = 2, progress: Any = None) -> dict[str, Any]:
        calls.append((cfg, shards))
        return {"fake": True}

    monkeypatch.setattr(fastreplay.demo_ray, "run_demo_ray", fake)
    monkeypatch.setattr(fastreplay.demo, "format_summary", lambda s: f"summary {s}")
    assert cli.main(["demo", *argv, "--duration", "2", "--actors", "3", "--quiet"]) == 0
    assert calls == [(DemoConfig(duration=2.0, actors=3), shards)]
    assert capsys.readouterr().out == "summary {'fake': True}\n"


def test_ray_demo_without_ray_says_how_to_install_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from fastreplay.demo_ray import RayMissingError, import_ray

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(RayMissingError, match=r"pip install 'fastreplay\[ray\]'"):
        import_ray()
    assert issubclass(RayMissingError, ImportError)
    with pytest.raises(SystemExit) as exc:
        cli.main(["demo", "--ray", "--duration", "1", "--quiet"])
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("fastreplay demo: error: --ray needs Ray, which "
                                   "is not installed (")
    assert captured.err.endswith("); install it with: pip install 'fastreplay[ray]'\n")
