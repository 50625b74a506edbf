"""Reports of a run: terminal table, results.json, report.md, PNG plots, report.tex, GitHub summary.

Input is a list of `ReportRow`s, one per (configuration, workload) test, built from the `Result`
each test records (`row_from_result`). Every writer is a pure function of the rows, so the
controller can produce the same report from live results or from the journal after a resume.
matplotlib is imported only when plots are drawn, and only its object-oriented API is used
(no pyplot global state, no backend switching inside someone else's process).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .baselines import verdict_of
from .result import Result

RESULTS_FORMAT = "pytest-specdec-results"
RESULTS_VERSION = 1

#: (metric, column title, format) of the summary table, in order.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("output_tok_s", "tok/s", "{:.1f}"),
    ("accept_length", "accept len", "{:.2f}"),
    ("ttft_ms", "TTFT ms", "{:.1f}"),
    ("tpot_ms", "TPOT ms", "{:.2f}"),
)


@dataclass(frozen=True)
class ReportRow:
    """One test's outcome: identity, figures, baseline verdict, and why it failed if it did."""

    test_id: str
    config: str
    workload: str | None = None
    method: str | None = None
    tp: int | None = None
    budget: int | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    verdict: str = ""  # "ok" | "regression" | "improved" | "new" | "" (not compared)
    comparisons: tuple[str, ...] = ()
    outcome: str = "passed"  # pytest's outcome: passed, failed, error, skipped, xfailed
    reason: str | None = None

    @property
    def failed(self) -> bool:
        return self.outcome in ("failed", "error")

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["metrics"] = dict(self.metrics)
        out["comparisons"] = list(self.comparisons)
        return out


def row_from_result(result: Result, *, outcome: str = "passed", reason: str | None = None) -> ReportRow:
    """A row from a test's recorded `Result` and pytest's outcome for it."""
    case = result.case
    return ReportRow(
        test_id=result.test_id,
        config=result.config,
        workload=result.workload,
        method=case.method if case is not None else None,
        tp=case.tp if case is not None else None,
        budget=case.budget if case is not None else None,
        metrics=result.values(),
        verdict=result.verdict,
        comparisons=tuple(c.line() for c in result.comparisons if c.noteworthy),
        outcome=outcome,
        reason=reason,
    )


def _cell(row: ReportRow, metric: str, fmt: str) -> str:
    value = row.metrics.get(metric)
    if value is None or not math.isfinite(value):
        return "-"
    return fmt.format(value)


def _verdict_text(row: ReportRow) -> str:
    if row.failed:  # the headline, with what it announces; report.md has the whole reason
        lines = [line for line in (row.reason or "").splitlines() if line.strip()] or [row.outcome]
        cause = lines[0] + (" " + lines[1] if lines[0].endswith(":") and len(lines) > 1 else "")
        return f"FAILED: {_one_line(cause.split(' (log: ', 1)[0], 100)}"
    if row.outcome in ("skipped", "xfailed", "xpassed"):
        return f"{row.outcome}" + (f": {_one_line(row.reason, 60)}" if row.reason else "")
    return {"regression": "REGRESSION", "improved": "improved", "new": "new baseline", "ok": "ok"}.get(
        row.verdict, "-")


def _one_line(text: str | None, limit: int) -> str:
    """`text` on one line in at most `limit` characters, shortened in the middle: a message
    opens with what failed and often ends with the detail that says why, so both ends stay."""
    text = " ".join((text or "").split())
    if len(text) <= limit:
        return text
    head = (limit - 3) // 2
    return text[:head] + "..." + text[len(text) - (limit - 3 - head):]


def _sorted(rows: Iterable[ReportRow]) -> list[ReportRow]:
    return sorted(rows, key=lambda r: (r.workload or "", r.method or "", r.tp or 0, r.budget or -1, r.config))


def _table(rows: Sequence[ReportRow]) -> tuple[list[str], list[list[str]]]:
    header = ["config", "workload", *(title for _, title, _ in COLUMNS), "verdict"]
    body = [[r.config, r.workload or "-", *(_cell(r, m, f) for m, _, f in COLUMNS), _verdict_text(r)]
            for r in _sorted(rows)]
    return header, body


def format_table(rows: Sequence[ReportRow]) -> str:
    """The session-end terminal table (plain text; numbers right-aligned)."""
    header, body = _table(rows)
    if not body:
        return "pytest-specdec: no results"
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    numeric = set(range(2, 2 + len(COLUMNS)))

    def fmt(line: list[str]) -> str:
        cells = [c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths))]
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * w for w in widths)
    lines = [fmt(header), rule, *(fmt(line) for line in body)]
    notes = [f"  {r.config} [{r.workload}]: {c}" for r in _sorted(rows) for c in r.comparisons]
    if notes:
        lines += ["", "against baseline:", *notes]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Files


def results_document(rows: Sequence[ReportRow], meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {
        "format": RESULTS_FORMAT,
        "version": RESULTS_VERSION,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "meta": dict(meta or {}),
        "results": [r.to_json() for r in _sorted(rows)],
    }


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(rows: Sequence[ReportRow], *, title: str = "pytest-specdec results",
                    meta: Mapping[str, Any] | None = None, plots: Sequence[str | Path] = ()) -> str:
    """report.md, and the GitHub step summary (same text)."""
    header, body = _table(rows)
    out = [f"# {title}", ""]
    for key, value in (meta or {}).items():
        out.append(f"- **{key}**: {value}")
    if meta:
        out.append("")
    if not body:
        out.append("No results.")
        return "\n".join(out) + "\n"
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "|".join("---:" if 2 <= i < 2 + len(COLUMNS) else "---" for i in range(len(header))) + "|")
    out += ["| " + " | ".join(_md_escape(c) for c in line) + " |" for line in body]
    notes = [(r, c) for r in _sorted(rows) for c in r.comparisons]
    if notes:
        out += ["", "## Against the baseline", ""]
        out += [f"- `{r.config}` [{r.workload}]: `{c}`" for r, c in notes]
    failures = [r for r in _sorted(rows) if r.failed]
    if failures:
        out += ["", "## Failures", ""]
        for r in failures:
            out += [f"### {r.config} [{r.workload}]", "", "```", (r.reason or r.outcome).rstrip(), "```", ""]
    if plots:
        out += ["", "## Plots", ""]
        out += [f"![{Path(p).stem}]({Path(p).as_posix()})" for p in plots]
    return "\n".join(out).rstrip() + "\n"


_TEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def tex_escape(text: str) -> str:
    return "".join(_TEX_SPECIAL.get(ch, ch) for ch in text)


def render_latex(rows: Sequence[ReportRow], plots: Sequence[str | Path] = (), *,
                 caption: str = "Speculative decoding results") -> str:
    """A report.tex fragment for `\\input`: booktabs tables per workload and the plots as
    figures. Needs `\\usepackage{booktabs}` and `\\usepackage{graphicx}` in the preamble."""
    out = ["% pytest-specdec report; needs \\usepackage{booktabs} and \\usepackage{graphicx}", ""]
    by_workload: dict[str, list[ReportRow]] = {}
    for r in _sorted(rows):
        if not r.failed and r.outcome == "passed":
            by_workload.setdefault(r.workload or "-", []).append(r)
    titles = ["Method", "TP", "Budget", *(title.replace("tok/s", "tokens/s") for _, title, _ in COLUMNS)]
    for workload, group in by_workload.items():
        out += [
            "\\begin{table}[t]", "\\centering",
            f"\\caption{{{tex_escape(caption)} ({tex_escape(workload)})}}",
            f"\\label{{tab:specdec-{_label(workload)}}}",
            "\\begin{tabular}{ll" + "r" * (1 + len(COLUMNS)) + "}", "\\toprule",
            " & ".join(tex_escape(t) for t in titles) + " \\\\", "\\midrule",
        ]
        for r in group:
            cells = [r.method or r.config, "-" if r.tp is None else str(r.tp),
                     "-" if r.budget is None else str(r.budget),
                     *(_cell(r, m, f) for m, _, f in COLUMNS)]
            out.append(" & ".join(tex_escape(c) for c in cells) + " \\\\")
        out += ["\\bottomrule", "\\end{tabular}", "\\end{table}", ""]
    for plot in plots:
        stem = Path(plot).stem
        out += [
            "\\begin{figure}[t]", "\\centering",
            f"\\includegraphics[width=\\linewidth]{{{Path(plot).as_posix()}}}",
            f"\\caption{{{tex_escape(stem.replace('_', ' '))}}}",
            f"\\label{{fig:specdec-{_label(stem)}}}",
            "\\end{figure}", "",
        ]
    return "\n".join(out)


def _label(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-") or "x"


# --------------------------------------------------------------------------------------------
# Plots

PLOTTED = (("output_tok_s", "tokens/s", "tokens_per_s"), ("accept_length", "accept length", "accept_length"))


def plot_rows(rows: Sequence[ReportRow], out_dir: str | Path) -> list[Path]:
    """PNG plots of tokens/s and accept length against budget, one line per (method, TP), one
    panel per workload. Methods without a budget (ar, dflash) are drawn as horizontal reference
    lines. Returns the files written; none when there is nothing to plot."""
    from matplotlib.figure import Figure  # lazy: a heavy import the plugin does not need otherwise

    out_dir = Path(out_dir)
    good = [r for r in rows if r.outcome == "passed" and not r.failed]
    written: list[Path] = []
    for metric, label, stem in PLOTTED:
        have = [r for r in good if r.metrics.get(metric) is not None]
        if not have:
            continue
        workloads = sorted({r.workload or "-" for r in have})
        fig = Figure(figsize=(5.0 * len(workloads), 3.6), layout="constrained")
        axes = fig.subplots(1, len(workloads), squeeze=False)[0]
        for ax, workload in zip(axes, workloads):
            _draw_panel(ax, [r for r in have if (r.workload or "-") == workload], metric)
            ax.set_title(workload)
            ax.set_ylabel(label)
            ax.grid(True, alpha=0.3)
        axes[-1].legend(fontsize="small", loc="center left", bbox_to_anchor=(1.02, 0.5))  # outside the data
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"{stem}.png"
        fig.savefig(path, dpi=120)
        written.append(path)
    return written


def _draw_panel(ax: Any, rows: Sequence[ReportRow], metric: str) -> None:
    series: dict[tuple[str, int | None], list[ReportRow]] = {}
    for r in rows:
        series.setdefault((r.method or r.config, r.tp), []).append(r)
    budgets = sorted({r.budget for r in rows if r.budget is not None})
    for (method, tp), group in sorted(series.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        name = f"{method} tp{tp}" if tp is not None else method
        with_budget = sorted((r for r in group if r.budget is not None), key=lambda r: r.budget or 0)
        if with_budget:
            ax.plot([r.budget for r in with_budget], [r.metrics[metric] for r in with_budget], marker="o", label=name)
        for r in (r for r in group if r.budget is None):
            if budgets:  # a reference line across the budget axis (plot, unlike axhline, takes the next colour)
                ax.plot([budgets[0], budgets[-1]], [r.metrics[metric]] * 2, linestyle="--", label=name)
            else:
                ax.bar(name, r.metrics[metric], label=name)
    if budgets:
        ax.set_xlabel("budget (draft tree nodes)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(budgets, [str(b) for b in budgets])


# --------------------------------------------------------------------------------------------
# Writers


@dataclass(frozen=True)
class ReportFiles:
    results_json: Path
    markdown: Path
    latex: Path
    plots: tuple[Path, ...]
    plot_error: str | None = None  # why plots are missing (matplotlib not installed, ...)


def write_report(out_dir: str | Path, rows: Sequence[ReportRow], *, meta: Mapping[str, Any] | None = None,
                 plots: bool = True, title: str = "pytest-specdec results") -> ReportFiles:
    """Everything `--specdec-report DIR` promises. Plots are best-effort: a missing matplotlib
    is reported in `plot_error` and in report.md, never a crash at session end."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = out_dir / "results.json"
    results.write_text(json.dumps(results_document(rows, meta), indent=2, sort_keys=False) + "\n", encoding="utf-8")
    images: list[Path] = []
    plot_error = None
    if plots:
        try:
            images = plot_rows(rows, out_dir / "plots")
        except ImportError as exc:
            plot_error = f"plots skipped: {exc} (pip install 'pytest-specdec[report]')"
    relative = [p.relative_to(out_dir) for p in images]
    md = render_markdown(rows, title=title, meta=meta, plots=relative)
    if plot_error:
        md += f"\n_{plot_error}_\n"
    markdown = out_dir / "report.md"
    markdown.write_text(md, encoding="utf-8")
    latex = out_dir / "report.tex"
    latex.write_text(render_latex(rows, relative), encoding="utf-8")
    return ReportFiles(results, markdown, latex, tuple(images), plot_error)


def write_github_summary(rows: Sequence[ReportRow], *, env: Mapping[str, str] | None = None,
                         title: str = "pytest-specdec results", meta: Mapping[str, Any] | None = None) -> Path | None:
    """Append the markdown table to $GITHUB_STEP_SUMMARY when set (GitHub Actions); else None."""
    env = os.environ if env is None else env
    target = env.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    path = Path(target)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(render_markdown(rows, title=title, meta=meta) + "\n")
    return path


__all__ = [
    "COLUMNS",
    "RESULTS_FORMAT",
    "RESULTS_VERSION",
    "ReportFiles",
    "ReportRow",
    "format_table",
    "plot_rows",
    "render_latex",
    "render_markdown",
    "results_document",
    "row_from_result",
    "tex_escape",
    "verdict_of",
    "write_github_summary",
    "write_report",
]
