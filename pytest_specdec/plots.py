"""Plots of a run: tokens/s and accept length against the DDTree budget, as PNG and as PDF.

One series per (family, method, TP), one panel per workload, one legend entry per series. A
method with a budget is a line over the budgets with error bars; one without (AR, DFlash) is a
dashed line across the budget axis with a band. The reference method (AR) is a line in both
plots: in the accept-length plot at 1 (one token per step, by definition). Bars and bands are
±1.96 standard errors of the figure over the workload's requests, the within-run spread (run-to-run
noise on a busy machine can be larger). Both axes start at 0, so a small difference looks small.

A figure holds at most PANELS_PER_PAGE panels, COLUMNS to a row: a run of many workloads gets
further pages of each plot (`tokens_per_s-2.png`, ..., the workloads in sorted order), so each
page stays readable and drawing them grows linearly with the workloads (matplotlib's constrained
layout of one figure grows faster than its panels).

matplotlib is imported only here and in the processes that draw further pages (`plot_pool`),
and only its object-oriented API is used (no pyplot global state, no backend switching inside
someone else's process). Each file takes one draw (`save_page`); a plot of further pages takes
seconds a page, so it is drawn in worker processes and tells its progress (`plot_rows`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .configuration import REFERENCE_METHOD

if TYPE_CHECKING:
    from .report import ReportRow

#: (metric, axis label, file stem, caption) of each plot.
PLOTTED = (
    ("output_tok_s", "tokens/s", "tokens_per_s",
     "Output tokens/s against the DDTree budget; methods without a budget are dashed lines. "
     "Bars and bands: 95 % intervals over the workload's requests."),
    ("accept_length", "accept length (tokens per verify step)", "accept_length",
     "Accept length (tokens committed per verify step, bonus included) against the DDTree "
     "budget; AR commits one token per step. Bars and bands: 95 % intervals over the requests."),
)
#: the half-width of a bar or band in standard errors (a 95 % interval)
Z95 = 1.96

SeriesKey = tuple[str, str, int]  # (family, method, tp)

#: The most workload panels one figure holds; further workloads go on further pages.
PANELS_PER_PAGE = 12
#: The most panels in one row of a figure: a run of up to this many workloads draws one row.
COLUMNS = 4
#: The most budget labels side by side on a panel's axis (4.8 inches wide) without touching.
LABELS_PER_AXIS = 14
#: The resolution of the PNGs (dots per inch).
DPI = 150


@dataclass(frozen=True)
class Page:
    """One page of one plot: the figure of `metric` for `workloads`, saved as `<name>.png` and `.pdf`."""

    metric: str
    label: str
    name: str  # page_name(stem, number)
    workloads: tuple[str, ...]

    def paths(self, out_dir: Path) -> tuple[Path, Path]:
        return out_dir / f"{self.name}.png", out_dir / f"{self.name}.pdf"


#: Progress of a long drawing: (pages drawn, pages in all), first (0, all), then after each page.
Progress = Callable[[int, int], None]


def told(folder: str | Path, show: Callable[[str], None] | None) -> Progress | None:
    """The words of a long drawing of plots (`plot_rows`), shown by `show`: the run seems
    to hang after its last test otherwise, for minutes where there are many workloads."""
    if show is None:
        return None

    def said(done: int, total: int) -> None:
        show(f"report: drawing {total} plot pages into {folder}" if done == 0
             else f"report: {done} of {total} plot pages drawn")

    return said


def pages_of(rows: Sequence[ReportRow]) -> list[Page]:
    """The pages `plot_rows` draws, in the order it lists their files."""
    good = _measured(rows)
    workloads = sorted({r.workload or "-" for r in good})
    groups = [tuple(workloads[i:i + PANELS_PER_PAGE]) for i in range(0, len(workloads), PANELS_PER_PAGE)]
    return [Page(metric, label, page_name(stem, number), group)
            for metric, label, stem, _ in PLOTTED if any(metric in r.metrics for r in good)
            for number, group in enumerate(groups, start=1)]


def plot_rows(rows: Sequence[ReportRow], out_dir: str | Path, progress: Progress | None = None) -> list[Path]:
    """Each plot as `<stem>.png` and `<stem>.pdf` in `out_dir`, and its further pages as
    `<stem>-<page>.png` and `.pdf` (`page_name`), the same bytes for the same rows; none when
    nothing was measured. A plot of further pages takes a while (seconds a page): `progress`
    hears how far it is, and the pages are drawn in worker processes (`plot_pool`) where the
    host has cores to spare; a report of one page a plot is drawn here, as it always was. A
    worker hung on a page raises `plot_pool.PagesNotDrawn` once the other pages are drawn."""
    out_dir = Path(out_dir)
    pages = pages_of(rows)
    if not pages:
        return []
    import matplotlib.figure  # noqa: F401  # lazy; a missing matplotlib raises here, not in a worker

    out_dir.mkdir(parents=True, exist_ok=True)
    long = len({page.workloads for page in pages}) > 1  # further pages: seconds each
    report = progress if long and progress is not None else (lambda done, total: None)
    report(0, len(pages))
    if long:
        from . import plot_pool

        workers = plot_pool.workers(len(pages))
        if workers > 1:
            return plot_pool.save_pages(rows, pages, out_dir, workers, report)
    written: list[Path] = []
    for done, page in enumerate(pages, start=1):
        written += save_page(rows, page, out_dir)
        report(done, len(pages))
    return written


def save_page(rows: Sequence[ReportRow], page: Page, out_dir: Path) -> list[Path]:
    """`page` drawn and written as PNG and PDF: one draw for each file, where `savefig` draws
    twice (once for the constrained layout, once for the file), the same bytes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.backends.backend_pdf import FigureCanvasPdf

    fig = draw(rows, page.metric, page.label, page.workloads)
    fig.dpi = DPI  # as savefig(dpi=DPI) sets it; the PDF canvas draws at 72 and rasterizes at this
    png, pdf = page.paths(out_dir)
    FigureCanvasAgg(fig).print_png(png)
    # no creation date: the same rows draw the same bytes (a merge run again, a report in git)
    FigureCanvasPdf(fig).print_pdf(pdf, metadata={"CreationDate": None})
    return [png, pdf]


def page_name(stem: str, page: int) -> str:
    """The file stem of a plot's `page` (from 1): the first page is the plot's own name."""
    return stem if page == 1 else f"{stem}-{page}"


def page_of(name: str) -> tuple[str, int] | None:
    """(plot stem, page) of a file stem `page_name` made for one of the PLOTTED plots, else None."""
    for _, _, stem, _ in PLOTTED:
        if name == stem:
            return stem, 1
        page = name.removeprefix(f"{stem}-")
        if page != name and page.isdigit() and page[0] != "0" and int(page) > 1:
            return stem, int(page)
    return None


def draw(rows: Sequence[ReportRow], metric: str, label: str,
         workloads: Sequence[str] | None = None) -> Any:
    """The figure of one metric: a panel per workload (`workloads`, all by default), COLUMNS to a
    row, the legend (one entry per series of all the rows) beside."""
    from matplotlib.figure import Figure  # lazy: a heavy import the plugin does not need otherwise

    good = _measured(rows)
    if workloads is None:
        workloads = sorted({r.workload or "-" for r in good})
    keys = sorted(_series(good))
    several = len({family for family, _, _ in keys}) > 1
    # a series keeps its colour and its label in every panel and page, so the legend has one entry for it
    styles = {key: (f"C{i % 10}", as_written(series_label(key, several))) for i, key in enumerate(keys)}
    columns = min(len(workloads), COLUMNS)
    lines = -(-len(workloads) // columns)
    fig = Figure(figsize=(4.8 * columns + 2.2, 3.6 * lines), layout="constrained")
    grid = fig.subplots(lines, columns, squeeze=False)
    axes = [ax for line in grid for ax in line]
    for ax in axes[len(workloads):]:  # the last row's empty places
        ax.remove()
    axes = axes[:len(workloads)]
    by_workload: dict[str, list[ReportRow]] = {}
    for r in good:
        by_workload.setdefault(r.workload or "-", []).append(r)
    for ax, workload in zip(axes, workloads):
        _draw_panel(ax, by_workload.get(workload, []), metric, styles)
        ax.set_title(as_written(workload))
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    handles, labels = _unique_legend(axes)
    fig.legend(handles, labels, loc="outside right center", fontsize="small")
    return fig


def _measured(rows: Sequence[ReportRow]) -> list[ReportRow]:
    from .report import measured  # the rows report.tex shows too

    return measured(rows)


def as_written(text: str) -> str:
    """`text` as matplotlib draws it literally: between two `$` it reads mathtext, so a workload
    named `cost $\\frac{a}{b$` would stop the report with a parse error, and `$x$` read as an italic x."""
    return text.replace("$", r"\$")


def series_label(key: SeriesKey, several_families: bool) -> str:
    family, method, tp = key
    return (f"{family} " if several_families else "") + f"{method} TP{tp}"


def _series(rows: Sequence[ReportRow]) -> dict[SeriesKey, dict[int | None, ReportRow]]:
    """Rows by series and budget; a later row of the same point replaces an earlier one."""
    out: dict[SeriesKey, dict[int | None, ReportRow]] = {}
    for r in rows:
        out.setdefault((r.family or "cpu", r.method or "?", r.tp or 1), {})[r.budget] = r
    return out


def _mark_shared(ax: Any, row: ReportRow | None, xy: tuple[Any, float], color: str) -> None:
    """A point measured on a shared server (sharing.py) says so: another client's load is in it."""
    if row is not None and row.verdict == "shared":
        ax.annotate("shared", xy, textcoords="offset points", xytext=(4, 4), fontsize=7, color=color)


def _draw_panel(ax: Any, rows: Sequence[ReportRow], metric: str,
                styles: dict[SeriesKey, tuple[str, str]]) -> None:
    series = _series(rows)
    budgets = sorted({r.budget for r in rows if r.budget is not None})
    span = [budgets[0], budgets[-1]] if budgets else None
    for key in sorted(series):
        points = series[key]
        color, label = styles[key]
        measured = {b: r for b, r in points.items() if metric in r.metrics}
        if not measured and key[1] == REFERENCE_METHOD and metric == "accept_length":
            value, error = 1.0, 0.0  # no speculation: one token per step, by definition
            label += " (1 token per step)"
        elif None in measured:
            value, error = _value(measured[None], metric)
        else:
            value = None
        if value is not None:  # a method without a budget: a line across the budget axis
            if span is None:
                ax.bar(label, value, yerr=error or None, capsize=4, color=color, label=label)
                _mark_shared(ax, measured.get(None), (label, value), color)
                continue
            ax.plot(span, [value, value], linestyle="--", color=color, label=label)
            _mark_shared(ax, measured.get(None), (span[0], value), color)
            if error:
                ax.fill_between(span, value - error, value + error, color=color, alpha=0.15,
                                linewidth=0)
        with_budget = sorted(b for b in measured if b is not None)
        if with_budget:
            values, errors = zip(*(_value(measured[b], metric) for b in with_budget))
            ax.errorbar(with_budget, values, yerr=errors, marker="o", capsize=3, color=color,
                        label=label)
            for b, v in zip(with_budget, values):
                _mark_shared(ax, measured[b], (b, v), color)
    if budgets:
        ax.set_xlabel("budget (draft tree nodes)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(budgets, budget_labels(budgets))
        ax.minorticks_off()


def budget_labels(budgets: Sequence[int]) -> list[str]:
    """The tick labels of `budgets` (sorted) on the log axis: each budget keeps its tick, but only
    those at least 1/LABELS_PER_AXIS of the axis apart from the last labelled one are labelled, so
    close budgets (15 and 16, or 12, 14, 15, 16 of a fine sweep) never print over each other."""
    import math

    if not budgets:
        return []
    gap = max(math.log2(budgets[-1] / budgets[0]), 1.0) / LABELS_PER_AXIS
    labels, last = [], None
    for budget in budgets:
        if last is None or math.log2(budget / last) >= gap - 1e-9:
            labels.append(str(budget))
            last = budget
        else:
            labels.append("")
    return labels


def _value(row: ReportRow, metric: str) -> tuple[float, float]:
    return row.metrics[metric], Z95 * row.spreads.get(metric, 0.0)


def _unique_legend(axes: Sequence[Any]) -> tuple[list[Any], list[str]]:
    """One legend entry per series across the panels (each panel draws its own copy)."""
    seen: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    return list(seen.values()), list(seen)
