"""``fastreplay bench`` output that reads right (issue 16, part 7): ratios
only against peers, spreads beside medians, a chart with a legend and an
uncut axis label, a commit that is never "None", ``--quick`` sizes in the
titles, ``--help`` listing the workloads, ``--from-json`` refusing to merge
runs of different sizes."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from fastreplay import cli
from fastreplay.bench import env, report, results, runner
from fastreplay.bench.results import FULL, QUICK, Result, Run, WorkloadInfo

PEER_NAMES = {p.name for p in env.PEERS}
CONTEXT = {"machine": {"cpu": "test cpu", "cores": 2, "memory_bytes": 2 ** 30,
                       "system": "Linux test"},
           "versions": {"fastreplay": "0.1.0", "python": "3.11"},
           "build": {}, "commit": "abc1234"}


def synthetic_run(config: results.Config = FULL, quick: bool = False,
                  commit: Any = "abc1234") -> Run:
    """A run with every kind of row: baseline, another fastreplay row, a
    variant, references, peers (one compared by variant), rates."""
    rows = [
        results.from_values("prioritized", "fastreplay", "ReplayBuffer",
                            [2.0, 1.0, 3.0], "s", "call", baseline=True),
        results.from_values("prioritized", "fastreplay", "Table", [0.5, 0.6, 0.4],
                            "s", "call"),
        results.from_values("prioritized", "cpprb", "PrioritizedReplayBuffer",
                            [9.0, 8.0, 10.0], "s", "call", kind="peer"),
        results.from_values("memory", "fastreplay", "stored", [100.0], "B", "step",
                            baseline=True),
        results.from_values("memory", "uncompressed", "payload", [11350.0], "B",
                            "step", kind="reference"),
        results.from_values("structured", "fastreplay", "StructuredWriter",
                            [1.0, 1.2], "s", "1000 steps", baseline=True),
        results.from_values("structured", "fastreplay", "TrajectoryWriter",
                            [1.5, 1.5], "s", "1000 steps", kind="variant"),
        results.from_values("structured", "dm-reverb", "StructuredWriter",
                            [20.0, 30.0], "s", "1000 steps", kind="peer"),
        results.from_values("threads", "fastreplay", "1 writer: steps",
                            [100.0, 90.0, 110.0], "steps/s", ""),
        results.from_values("threads", "fastreplay", "1 writer + 1 sampler: steps",
                            [80.0, 70.0, 90.0], "steps/s", ""),
        results.from_values("threads", "dm-reverb", "1 writer: steps",
                            [10.0, 9.0, 11.0], "steps/s", "", kind="peer"),
    ]
    results.compute_ratios(rows)
    workloads = [WorkloadInfo(n, f"{n} title", ()) for n in
                 ("prioritized", "memory", "structured", "threads")]
    return Run(config, quick, rows, [results.Skipped("prioritized", "sb3",
                                                     "not installed")],
               workloads, 12.3, {**CONTEXT, "commit": commit})


def table_rows(text: str, header_start: str) -> list[dict[str, str]]:
    """The rows of the Markdown table whose title line starts with
    ``header_start`` (workload cells carried down)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    end = next((i for i, ln in enumerate(lines[start + 2:]) if not ln.startswith("|")),
               len(lines))
    table = lines[start + 2:start + 2 + end]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    rows, last = [], ""
    for line in table[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        row = dict(zip(header, cells, strict=True))
        row["workload"] = last = row["workload"] or last
        rows.append(row)
    return rows


# ----- ratios only against peers -----

def test_ratios_go_to_peer_rows_only_and_own_variants_get_vs_baseline() -> None:
    run = synthetic_run()
    by = {(r.workload, r.library, r.variant): r for r in run.results}
    for r in run.results:
        if r.ratio is not None:
            assert r.is_peer and r.library in PEER_NAMES, r
    assert by["prioritized", "cpprb", "PrioritizedReplayBuffer"].ratio == 4.5
    assert by["prioritized", "cpprb", "PrioritizedReplayBuffer"].ratio_to == \
        "ReplayBuffer"
    assert by["memory", "uncompressed", "payload"].ratio is None
    assert by["memory", "uncompressed", "payload"].vs_baseline == 113.5
    assert by["structured", "fastreplay", "TrajectoryWriter"].ratio is None
    assert by["structured", "fastreplay", "TrajectoryWriter"].vs_baseline == \
        pytest.approx(1.5 / 1.1)
    # a rate: the fastreplay row with as many writers, inverted
    reverb = by["threads", "dm-reverb", "1 writer: steps"]
    assert reverb.ratio == 10.0 and reverb.ratio_to == "1 writer: steps"
    # a "peer" row of a library that is not a peer gets no ratio
    rows = [Result("w", "fastreplay", "a", 1.0, "s", "call", 1, baseline=True),
            Result("w", "mine", "b", 3.0, "s", "call", 1, kind="peer")]
    results.compute_ratios(rows)
    assert rows[1].ratio is None and not rows[1].is_peer


def test_the_peer_column_holds_peers_only_and_own_rows_have_their_own_table() -> None:
    text = report.format_table(synthetic_run(), markdown=True)
    against = table_rows(text, "Against peers")
    own = table_rows(text, "fastreplay's own variants")
    for row in against:
        cell = row[report.PEER_HEADER]
        if row["library"] in PEER_NAMES:
            assert cell.endswith(")") and "x" in cell, row
        else:  # the fastreplay rows the peers are divided by, at 1.0
            assert row["library"] == "fastreplay" and cell.startswith("1.0 ("), row
    assert {r["library"] for r in against} <= PEER_NAMES | {"fastreplay"}
    assert "uncompressed" not in {r["library"] for r in against}
    assert ("structured", "TrajectoryWriter") not in {
        (r["workload"], r["variant"]) for r in against}
    assert not {r["library"] for r in own} & PEER_NAMES
    own_by = {(r["workload"], r["variant"]): r for r in own}
    assert own_by["memory", "payload"][report.OWN_HEADER] == "113.5x"
    assert own_by["memory", "stored"][report.OWN_HEADER] == "1.0 (baseline)"
    assert own_by["structured", "TrajectoryWriter"][report.OWN_HEADER] == "1.4x"
    assert ("threads", "1 writer + 1 sampler: steps") in own_by
    assert ("threads", "1 writer: steps") not in own_by  # a peer's reference
    # the baseline with peers: in the peer table, and again beside its own
    # variant (Table) for context
    assert ("prioritized", "ReplayBuffer") in own_by
    assert "- sb3 (prioritized): not installed" in text


def test_without_peers_the_output_says_none_was_measured() -> None:
    run = synthetic_run()
    run.results = [r for r in run.results if not r.is_peer]
    run.workloads = [WorkloadInfo("threads", "threads title", ("dm-reverb",))]
    text = report.format_table(run)
    assert "no peer was measured" in text and "fastreplay[bench]" in text
    assert "writer: steps" in text  # every row is still shown, in the own table
    run.workloads = [WorkloadInfo("memory", "memory title", ())]
    assert "none of these workloads has a peer" in report.format_table(run)


# ----- spreads -----

def test_json_has_the_spread_next_to_every_median_and_of_every_ratio() -> None:
    doc = synthetic_run().to_json()
    assert doc["format"] == "fastreplay-bench/2"
    for r in doc["results"]:
        keys = list(r)
        i = keys.index("median")
        assert keys[i + 1:i + 5] == ["min", "max", "q1", "q3"]
        assert r["min"] <= r["q1"] <= r["median"] <= r["q3"] <= r["max"], r
        if r["ratio"] is not None:
            assert r["ratio_min"] <= r["ratio"] <= r["ratio_max"], r
    cpprb = next(r for r in doc["results"] if r["library"] == "cpprb")
    assert (cpprb["min"], cpprb["q1"], cpprb["median"], cpprb["q3"], cpprb["max"]) \
        == (8.0, 8.5, 9.0, 9.5, 10.0)
    # interquartile: the peer's first quartile over fastreplay's third, ...
    assert cpprb["ratio_min"] == pytest.approx(8.5 / 2.5)
    assert cpprb["ratio_max"] == pytest.approx(9.5 / 1.5)
    reverb = next(r for r in doc["results"] if r["workload"] == "threads"
                  and r["library"] == "dm-reverb")  # a rate: inverted
    assert reverb["ratio_min"] == pytest.approx(95.0 / 10.5)
    assert reverb["ratio_max"] == pytest.approx(105.0 / 9.5)
    json.dumps(doc)  # plain JSON


def test_tables_show_the_min_max_of_the_rounds() -> None:
    text = report.format_table(synthetic_run(), markdown=True)
    against = {(r["workload"], r["library"]): r for r in table_rows(text, "Against")}
    assert against["prioritized", "cpprb"]["min–max"] == "8.00–10.00 s"
    assert against["prioritized", "cpprb"]["rounds"] == "3"
    assert against["prioritized", "cpprb"][report.PEER_HEADER] == "4.5x (3.4–6.3x)"
    assert against["threads", "dm-reverb"]["min–max"] == "9.0–11.0 steps/s"
    own = {(r["workload"], r["variant"]): r for r in table_rows(text, "fastreplay's")}
    assert own["memory", "payload"]["min–max"] == "-"  # one measurement
    assert report.spread_text(Result("w", "l", "v", 2e-6, "s", "call", 3,
                                     min=900e-9, max=3e-3)) == "900.0 ns–3.0 ms"


def test_a_measured_run_records_spreads_for_every_row() -> None:
    run = runner.run(QUICK, quick=True, only=["memory", "writer-step", "uniform"],
                     log=io.StringIO())
    assert run.results
    for r in run.results:
        assert r.min is not None and r.max is not None, r
        assert r.min <= r.median <= r.max, r
        assert r.rounds >= 1


# ----- --quick sizes and the total time -----

def test_quick_titles_and_headers_name_the_quick_sizes() -> None:
    titles = {w.name: w.title_at(QUICK) for w in runner.WORKLOADS}
    assert "capacity 10k" in titles["prioritized"]
    assert "from 10k" in titles["uniform"]
    assert "2k-item" in titles["sample_batch"]
    assert "1, 2 writer threads" in titles["threads"]
    assert "10k x uint8" in titles["per-images"]
    for title in titles.values():
        assert "1e6" not in title and "1M" not in title, title
        assert "{" not in title.replace("{observation", ""), title
    full = {w.name: w.title_at(FULL) for w in runner.WORKLOADS}
    assert "capacity 1M" in full["prioritized"] and "100k" in full["per-images"]
    quick = synthetic_run(QUICK, quick=True)
    context = report.format_context(quick)
    assert "Quick sizes (capacity 10,000" in context and "not for comparing" in context
    assert report.format_table(quick).startswith("Against peers (quick sizes")
    assert "quick sizes (capacity 10k" in report.chart_title([quick])
    assert report.format_workloads(quick).startswith("Workloads (quick sizes)")


def test_the_total_time_is_printed_with_a_readable_precision() -> None:
    assert report.duration_text(0.4) == "0.4 s"
    assert report.duration_text(12.3) == "12 s"
    assert report.duration_text(185) == "3 min 5 s"
    run = synthetic_run()
    run.seconds = 0.42
    assert "0.4 s in all" in report.format_context(run)


def test_a_run_measures_its_time_from_start_to_end() -> None:
    run = runner.run(QUICK, quick=True, only=["memory"], log=io.StringIO())
    assert run.seconds > 0
    # A zero total would print "0 s in all" ("1.0 s in all" is fine).
    assert not re.search(r"(?<![\d.])0 s in all", report.format_context(run))
    assert run.workloads[0].title.endswith(f"({QUICK.memory_steps} steps)")


# ----- the commit -----

def test_the_commit_is_a_string_from_git_metadata_or_says_unknown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    commit = env.commit()
    assert isinstance(commit, str) and commit and commit != "None"
    monkeypatch.setattr(env, "_git_commit", lambda: None)
    monkeypatch.setattr(env, "_installed_commit", lambda: "1a2b3c4")
    assert env.commit() == "1a2b3c4"
    monkeypatch.setattr(env, "_installed_commit", lambda: None)
    assert env.commit() == "unknown (not a git checkout)"


def test_an_installed_commit_comes_from_direct_url_or_the_version(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class Dist:
        version = "0.1.0"
        direct_url: str | None = None

        def read_text(self, name: str) -> str | None:
            return self.direct_url if name == "direct_url.json" else None

    dist = Dist()
    monkeypatch.setattr(env.importlib.metadata, "distribution", lambda name: dist)
    assert env._installed_commit() is None
    dist.version = "0.1.0.dev3+g1a2b3c4d5"
    assert env._installed_commit() == "1a2b3c4"
    dist.direct_url = json.dumps({"url": "https://example.invalid/fastreplay.git",
                                  "vcs_info": {"vcs": "git",
                                               "commit_id": "feedbeef" * 5}})
    assert env._installed_commit() == "feedbee"


@pytest.mark.parametrize("commit", [None, "None", ""])
def test_a_run_saved_without_a_commit_never_prints_none(commit: Any) -> None:
    run = Run.from_json(synthetic_run(commit=commit).to_json())
    for text in (report.format_context(run), report.chart_title([run])):
        assert "None" not in text
        assert "unknown (not recorded)" in text


# ----- --help -----

def test_help_lists_every_workload_with_a_description(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "DESIGN.md" not in out
    lines = out.splitlines()
    for w in runner.WORKLOADS:
        line = next((ln for ln in lines if ln.split()[:1] == [w.name]), None)
        assert line is not None, w.name
        assert w.summary in line, line
        for peer in w.peers:
            assert peer in line, line
    assert "same sizes" in out  # --from-json


# ----- --from-json -----

def write(path: Path, run: Run) -> str:
    path.write_text(json.dumps(run.to_json()))
    return str(path)


def test_from_json_refuses_to_merge_quick_and_full_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    full = write(tmp_path / "full.json", synthetic_run())
    quick = write(tmp_path / "quick.json", synthetic_run(QUICK, quick=True))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench", "--from-json", full, quick])
    assert exit_.value.code == 1
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing printed, nothing merged
    err = captured.err
    assert "cannot merge runs of different sizes" in err
    assert "full sizes (capacity 1M" in err and "quick sizes (capacity 10k" in err
    assert "capacity 1000000 vs 10000" in err and "quick.json" in err
    # the same sizes merge, one section per run
    other = write(tmp_path / "other.json", synthetic_run())
    assert cli.main(["bench", "--from-json", full, other, "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "Run 1 (" in out and "Run 2 (" in out


def test_from_json_reads_format_1_and_keeps_non_peers_out_of_the_ratios() -> None:
    doc = synthetic_run().to_json()
    doc["format"] = "fastreplay-bench/1"
    for r in doc["results"]:  # format 1: no spreads; non-peers had a ratio
        for key in ("min", "max", "q1", "q3", "ratio_min", "ratio_max",
                    "ratio_to", "vs_baseline"):
            del r[key]
        if r["library"] == "uncompressed":
            r["ratio"] = 113.5
    run = Run.from_json(doc)
    payload = next(r for r in run.results if r.library == "uncompressed")
    assert payload.ratio is None and payload.vs_baseline == 113.5
    assert all(r.min is None for r in run.results if r.rounds > 1)
    text = report.format_table(run)
    assert "4.5x" in text and "4.5x (" not in text  # no range without spreads
    with pytest.raises(ValueError, match="not a fastreplay bench --json document"):
        Run.from_json({**doc, "format": "something/9"})


# ----- the chart -----

def test_the_chart_has_peer_rows_only_each_once() -> None:
    a, b = synthetic_run(), synthetic_run()
    rows = report.chart_rows([a, b])
    assert rows and all(r.is_peer for _, r in rows)
    labels = [label for label, _ in rows]
    assert len(set(labels)) == len(labels)  # the same peer in two runs: numbered
    assert "prioritized: cpprb PrioritizedReplayBuffer [run 2]" in labels
    assert [label for label, _ in report.chart_rows([a])] == [
        "prioritized: cpprb PrioritizedReplayBuffer",
        "structured: dm-reverb StructuredWriter", "threads: dm-reverb 1 writer: steps"]


def test_the_chart_has_a_legend_an_uncut_axis_label_and_the_commit(
        tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    runs = [synthetic_run(), dataclasses.replace(synthetic_run(), context={
        **CONTEXT, "commit": None})]
    fig = report.figure(runs)
    try:
        (ax,) = fig.axes
        legend = ax.get_legend()
        assert legend is not None
        texts = [t.get_text() for t in legend.get_texts()]
        assert {"cpprb", "dm-reverb"} <= set(texts)
        assert "1 = as fast as fastreplay" in texts
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert labels and not any("uncompressed" in t or "fastreplay " in t
                                  for t in labels)
        title = ax.get_title()
        assert "None" not in title and "abc1234" in title
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        box, page = ax.xaxis.label.get_window_extent(renderer), fig.bbox
        assert page.x0 <= box.x0 and box.x1 <= page.x1, (box, page)
        assert page.y0 <= box.y0, (box, page)
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
    report.plot(runs, str(tmp_path / "b.png"))
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"
