"""Printing and charting ``fastreplay bench`` runs.

A run prints as: one paragraph of context (machine, versions, commit, sizes,
time), the workloads with their titles at the run's sizes, then two tables:

* **against peers**: each peer row (cpprb, TorchRL, Tianshou, SB3,
  dm-reverb) with "peer / fastreplay", the peer's median over fastreplay's
  (3.0x: the peer takes three times as long), and beside each workload's
  peers the fastreplay row they are divided by;
* **fastreplay's own variants and references**: other fastreplay APIs for
  the same work, the uncompressed payload, workloads without a peer; their
  "/ baseline" column compares them with fastreplay's baseline only.

Every row shows its median and its smallest and largest round (min–max); a
ratio, its interquartile range (``results``).  The chart (``--plot``,
matplotlib: the ``plot`` extra) shows the peer ratios only, one colour per
peer, with the interquartile ranges as whiskers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fastreplay.bench.results import Result, Run, commit_text

__all__ = ["chart_rows", "chart_title", "duration_text", "figure", "format_context",
           "format_run", "format_table", "format_value", "format_workloads",
           "median_text", "plot", "ratio_text", "split_rows", "spread_text"]

PEER_HEADER = "peer / fastreplay"
OWN_HEADER = "/ baseline"


def format_value(value: float, unit: str) -> str:
    """A value with a readable unit: seconds as ns/µs/ms/s, others grouped."""
    if unit == "s":
        for scale, name in ((1e-6, "ns"), (1e-3, "µs"), (1.0, "ms")):
            if value < scale:
                return f"{value * 1e3 / scale:.1f} {name}"
        return f"{value:.2f} s"
    if value >= 100:
        return f"{value:,.0f} {unit}"
    return f"{value:.1f} {unit}"


def median_text(r: Result) -> str:
    """The median with its unit and what it is per: "72.9 µs / call"."""
    value = format_value(r.median, r.unit)
    return f"{value} / {r.per}" if r.per else value


def spread_text(r: Result) -> str:
    """The smallest and largest round, "70.1–75.3 µs"; "-" for a single
    measurement (or a run saved without spreads)."""
    if r.min is None or r.max is None or r.rounds < 2:
        return "-"
    lo, hi = format_value(r.min, r.unit), format_value(r.max, r.unit)
    lo_num, _, lo_unit = lo.partition(" ")
    if lo_unit == hi.partition(" ")[2]:
        return f"{lo_num}–{hi}"
    return f"{lo}–{hi}"


def _x(ratio: float) -> str:
    return f"{ratio:.2f}x" if ratio < 1 else f"{ratio:.1f}x"  # 0.12x, not 0.1x


def ratio_text(r: Result) -> str:
    """A peer row's ratio with its interquartile range: "4.5x (4.1–4.9x)"."""
    if r.ratio is None:
        return ""
    if r.ratio_min is None or r.ratio_max is None:
        return _x(r.ratio)
    return f"{_x(r.ratio)} ({_x(r.ratio_min)[:-1]}–{_x(r.ratio_max)})"


def _peer_cell(r: Result) -> str:
    if r.is_peer:
        return ratio_text(r)
    return "1.0 (baseline)" if r.baseline else "1.0 (fastreplay)"


def _vs_baseline_text(r: Result) -> str:
    if r.baseline:
        return "1.0 (baseline)"
    return "" if r.vs_baseline is None else _x(r.vs_baseline)


def split_rows(run: Run) -> tuple[list[Result], list[Result]]:
    """(rows against peers, fastreplay's own rows), each in run order.

    The peer table holds every peer row and the fastreplay rows they are
    divided by; the other table every other row, and for context the
    baseline of each workload it shows."""
    peer_rows = [r for r in run.results if r.is_peer]
    with_peers = {r.workload for r in peer_rows}
    refs = {(r.workload, r.ratio_to) for r in peer_rows if r.ratio_to is not None}
    against = [r for r in run.results if r.is_peer or (
        (r.workload, r.variant) in refs or (r.baseline and r.workload in with_peers))]
    shown = {id(r) for r in against}
    rest = {r.workload for r in run.results if id(r) not in shown}
    others = [r for r in run.results
              if id(r) not in shown or (r.baseline and r.workload in rest)]
    return against, others


def _table(header: list[str], rows: list[list[str]], markdown: bool) -> list[str]:
    lines = []
    if markdown:
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        last = None
        for row in rows:
            shown = ["" if row[0] == last else row[0], *row[1:]]
            last = row[0]
            lines.append("| " + " | ".join(shown) + " |")
    else:
        widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=True)]
        for row in [header, ["-" * w for w in widths], *rows]:
            cells = (c.ljust(w) for c, w in zip(row, widths, strict=True))
            lines.append("  ".join(cells).rstrip())
    return lines


def _rows_table(rows: list[Result], last: str, cell: Callable[[Result], str],
                markdown: bool) -> list[str]:
    """A table of result rows whose last column is ``last`` (``cell`` of
    each row)."""
    return _table(["workload", "library", "variant", "rounds", "median", "min–max",
                   last],
                  [[r.workload, r.library, r.variant, str(r.rounds), median_text(r),
                    spread_text(r), cell(r)] for r in rows], markdown)


def format_table(run: Run, markdown: bool = False) -> str:
    """The run's two tables (against peers; fastreplay's own variants and
    references), then the skipped peers."""
    against, others = split_rows(run)
    lines: list[str] = []
    if against:
        lines.append(f"Against peers ({run.sizes}). {PEER_HEADER} = peer median "
                     "/ fastreplay median (> 1: fastreplay faster or smaller), "
                     "its interquartile range over the rounds in parentheses:")
        lines.append("")
        lines += _rows_table(against, PEER_HEADER, _peer_cell, markdown)
    elif not any(w.peers for w in run.workloads):
        lines.append("Against peers: none of these workloads has a peer.")
    else:
        lines.append(f"Against peers ({PEER_HEADER}): no peer was measured"
                     + (" (see Skipped below)" if run.skipped else "")
                     + "; install them with pip install 'fastreplay[bench]'.")
    if others:
        lines.append("")
        lines.append(f"fastreplay's own variants and references, not peers "
                     f"({run.sizes}). {OWN_HEADER} = median / the workload's "
                     "fastreplay baseline:")
        lines.append("")
        lines += _rows_table(others, OWN_HEADER, _vs_baseline_text, markdown)
    if run.skipped:
        lines.append("")
        lines.append("Skipped:")
        for s in run.skipped:
            reason = s.reason.splitlines()[0] if s.reason else ""
            if len(reason) > 120:  # e.g. a mangled C++ symbol; --json has it all
                reason = reason[:117] + "..."
            lines.append(f"- {s.library} ({s.workload}): {reason}")
    return "\n".join(lines)


def duration_text(seconds: float) -> str:
    """0.4 s, 12 s, 3 min 5 s."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s"


def format_context(run: Run) -> str:
    """One paragraph: machine, versions, commit, sizes and time of a run."""
    m, v = run.context["machine"], run.context["versions"]
    memory = f", {m['memory_bytes'] / 2**30:.0f} GiB" if m["memory_bytes"] else ""
    libs = ", ".join(f"{k} {val}" for k, val in v.items())
    c = run.config
    if run.quick:
        sizes = (f"Quick sizes (capacity {c.capacity:,}, {c.rounds} rounds of "
                 f"{c.inner} calls: a smoke run, not for comparing)")
    else:
        sizes = (f"Full sizes (capacity {c.capacity:,}, {c.rounds} rounds of "
                 f"{c.inner} calls)")
    return (f"Machine: {m['cpu']}, {m['cores']} logical cores{memory}, {m['system']}. "
            f"Versions: {libs}. Commit: {commit_text(run.context)}. "
            f"{sizes}; {duration_text(run.seconds)} in all.")


def format_workloads(run: Run) -> str:
    """The run's workloads, one line each, titled at the run's sizes."""
    lines = [f"Workloads ({run.sizes}):"]
    lines += [f"- {w.name}: {w.title}" for w in run.workloads]
    return "\n".join(lines)


def format_run(run: Run, markdown: bool = False) -> str:
    """Context, workloads and tables of one run, as ``fastreplay bench``
    prints them."""
    return "\n\n".join((format_context(run), format_workloads(run),
                        format_table(run, markdown=markdown)))


_COLORS = {"cpprb": "#4c72b0", "torchrl": "#dd8452", "tianshou": "#55a868",
           "sb3": "#c44e52", "dm-reverb": "#8172b3"}


def chart_rows(runs: Sequence[Run]) -> list[tuple[str, Result]]:
    """(label, row) of every peer ratio of ``runs``; a row measured in more
    than one run is labelled with its run's number (--from-json order)."""
    rows = [(i, r) for i, run in enumerate(runs, 1) for r in run.results
            if r.is_peer and r.ratio is not None]
    seen: dict[tuple[str, str, str], int] = {}
    for _, r in rows:
        key = (r.workload, r.library, r.variant)
        seen[key] = seen.get(key, 0) + 1
    out = []
    for i, r in rows:
        label = f"{r.workload}: {r.library} {r.variant}"
        if seen[(r.workload, r.library, r.variant)] > 1:
            label += f" [run {i}]"
        out.append((label, r))
    return out


def chart_title(runs: Sequence[Run]) -> str:
    """What the chart's title says: sizes and commits, never "None"."""
    commits = list(dict.fromkeys(commit_text(run.context) for run in runs))
    sizes = list(dict.fromkeys(run.sizes_text() for run in runs))
    return (f"fastreplay bench against peers: {'; '.join(sizes)}\n"
            f"commit {', '.join(commits)}")


def plot(runs: Sequence[Run], path: str) -> None:
    """Write ``figure(runs)`` as a PNG to ``path``."""
    import matplotlib.pyplot as plt

    fig = figure(runs)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


def figure(runs: Sequence[Run]) -> Any:
    """A bar chart (a matplotlib Figure) of every peer ratio of ``runs`` (log
    scale; 1 = as fast as fastreplay; each ratio is to fastreplay measured in
    its own run; whiskers: the ratio's interquartile range), one colour per
    peer with a legend.  fastreplay's own variants and references are not
    drawn: they are not peers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.artist import Artist
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter, NullFormatter

    rows = chart_rows(runs)
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(rows) + 2.2), dpi=90)
    if rows:
        ratios = [r.ratio or 1.0 for _, r in rows]
        ax.barh(range(len(rows)), ratios,
                color=[_COLORS.get(r.library, "#4c72b0") for _, r in rows])
        ranged = [(i, r.ratio, r.ratio_min, r.ratio_max)
                  for i, (_, r) in enumerate(rows)
                  if r.ratio is not None and r.ratio_min is not None
                  and r.ratio_max is not None]
        if ranged:  # whiskers: the interquartile range of each ratio
            ax.errorbar([m for _, m, _, _ in ranged], [i for i, _, _, _ in ranged],
                        xerr=[[m - lo for _, m, lo, _ in ranged],
                              [hi - m for _, m, _, hi in ranged]],
                        fmt="none", ecolor="#333333", elinewidth=0.8, capsize=2)
        ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=8)
        ax.set_xscale("log")
        top = max((r.ratio_max or r.ratio or 1.0) for _, r in rows)
        bottom = min((r.ratio_min or r.ratio or 1.0) for _, r in rows)
        lo, hi = min(0.5, bottom / 1.5), max(2.0, top) * 3
        ax.set_xlim(lo, hi)
        ticks = [m * 10.0 ** e for e in range(-3, 5) for m in (1, 2, 5)]
        ax.set_xticks([t for t in ticks if lo <= t <= hi])
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}x"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        for i, (_, r) in enumerate(rows):
            end = r.ratio_max if r.ratio_max is not None else r.ratio or 0
            ax.text(end * 1.05, i, f" {_x(r.ratio or 0)}", va="center", fontsize=7)
    else:
        ax.text(0.5, 0.5, "no peer was measured (see the skipped peers)",
                ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
    ax.invert_yaxis()
    ax.axvline(1.0, color="black", linewidth=0.8)
    libraries = list(dict.fromkeys(r.library for _, r in rows))
    handles: list[Artist] = [Patch(color=_COLORS.get(lib, "#4c72b0"), label=lib)
                             for lib in libraries]
    handles.append(Line2D([], [], color="black", linewidth=0.8,
                          label="1 = as fast as fastreplay"))
    handles.append(Line2D([], [], color="#333333", linewidth=0.8, marker="|",
                          label="whiskers: interquartile range\nover the rounds"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              fontsize=7, title="peer", title_fontsize=7)
    ax.set_xlabel("peer median / fastreplay median, log scale\n(higher: fastreplay "
                  "faster or smaller; rates are inverted to read the same way)",
                  fontsize=8)
    ax.set_title(chart_title(runs), fontsize=9)
    fig.tight_layout()
    return fig
