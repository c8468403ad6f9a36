"""Printing and charting ``fastreplay bench`` runs: text and Markdown
tables with readable units, the machine/versions line, and the ratio chart
(matplotlib, the ``plot`` extra)."""

from __future__ import annotations

from collections.abc import Sequence

from fastreplay.bench.runner import Result, Run, format_value, median_text

__all__ = ["format_context", "format_table", "format_value", "plot"]



def _ratio_text(r: Result) -> str:
    if r.baseline:
        return "1.0 (baseline)"
    if r.ratio is None:
        return ""
    return f"{r.ratio:.2f}x" if r.ratio < 1 else f"{r.ratio:.1f}x"  # 0.12x, not 0.1x


def format_table(run: Run, markdown: bool = False) -> str:
    """The results as a text (or Markdown) table, then the skipped peers."""
    header = ["workload", "library", "variant", "median", "peer / fastreplay"]
    rows = [[r.workload, r.library, r.variant,
             median_text(r), _ratio_text(r)]
            for r in run.results]
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
    if run.skipped:
        lines.append("")
        lines.append("Skipped:")
        for s in run.skipped:
            reason = s.reason.splitlines()[0] if s.reason else ""
            if len(reason) > 120:  # e.g. a mangled C++ symbol; --json has it all
                reason = reason[:117] + "..."
            lines.append(f"- {s.library} ({s.workload}): {reason}")
    return "\n".join(lines)


def format_context(run: Run) -> str:
    """One paragraph: machine, versions, commit and sizes of a run."""
    m, v = run.context["machine"], run.context["versions"]
    memory = f", {m['memory_bytes'] / 2**30:.0f} GiB" if m["memory_bytes"] else ""
    libs = ", ".join(f"{k} {val}" for k, val in v.items())
    sizes = "quick sizes" if run.quick else "full sizes"
    return (f"Machine: {m['cpu']}, {m['cores']} logical cores{memory}, {m['system']}. "
            f"Versions: {libs}. Commit: {run.context['commit'] or 'unknown'}. "
            f"{sizes.capitalize()} (capacity {run.config.capacity:,}); "
            f"{run.seconds:.0f} s in all.")


def plot(runs: Sequence[Run], path: str) -> None:
    """A PNG bar chart of every ratio of ``runs`` (log scale; 1 = as fast as
    fastreplay; each ratio is to fastreplay measured in its own run)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows: list[Result] = []
    for r in (r for run in runs for r in run.results if r.ratio is not None):
        if r.kind == "reference" and any(  # the same in every run: once
                (q.workload, q.variant) == (r.workload, r.variant) for q in rows):
            continue
        rows.append(r)
    labels = [f"{r.workload}: {r.library} {r.variant}" for r in rows]
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(rows) + 1.4), dpi=90)
    colors = ["#4c72b0" if r.kind == "peer" else "#999999" for r in rows]
    ax.barh(range(len(rows)), [r.ratio or 0 for r in rows], color=colors)
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ratios = [r.ratio or 1.0 for r in rows]
    ax.set_xlim(min(0.5, min(ratios) / 1.5), max(ratios) * 2.5)
    for i, r in enumerate(rows):
        ax.text(r.ratio or 0, i, f" {r.ratio:.1f}x", va="center", fontsize=7)
    ax.set_xlabel("peer median / fastreplay median (higher: fastreplay faster or "
                  "smaller; grey: other fastreplay APIs, uncompressed payload)",
                  fontsize=8)
    commits = sorted({str(run.context.get("commit")) for run in runs})
    sizes = "quick" if any(run.quick for run in runs) else "full"
    ax.set_title(f"fastreplay bench ({sizes} sizes, commit {', '.join(commits)})",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
