"""Reports of a run: terminal table, results.json, report.md, GitHub summary, and (from
`plots.py` and `latex.py`) PNG/PDF plots, report.tex and report-standalone.tex.

Input is a list of `ReportRow`s, one per (configuration, workload) test, built from the `Result`
each test records (`row_from_result`). Every writer is a pure function of the rows, so the
controller can produce the same report from live results or from the journal after a resume.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from .gate import verdict_of
from .result import Result

#: Progress of a long drawing of plots: (pages drawn, pages in all), as `plots.Progress`.
PlotProgress = Callable[[int, int], None]

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
    family: str | None = None  # the matrix the configuration came from
    method: str | None = None
    tp: int | None = None
    budget: int | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    spreads: Mapping[str, float] = field(default_factory=dict)  # standard errors, by metric
    verdict: str = ""  # Result.verdict: "ok", "regression", "noisy", "improved", "new", "not gated", "shared", ""
    verdicts: Mapping[str, str] = field(default_factory=dict)  # each compared figure's, as JUnit shows it
    comparisons: tuple[str, ...] = ()
    outcome: str = "passed"  # pytest's outcome: passed, failed, error, skipped, xfailed, xpassed
    reason: str | None = None
    gpus: str | None = None  # where its server ran (`Hardware.placement`): None on a CPU or attached
    #: `Shared.mark` where another client shared its server while it measured (verdict "shared")
    shared: str | None = None
    #: untimed requests sent before it was measured (warmup.py); None where not measured or journaled before
    warmup_requests: int | None = None

    @property
    def failed(self) -> bool:
        return self.outcome in ("failed", "error")

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["metrics"] = dict(self.metrics)
        out["spreads"] = dict(self.spreads)
        out["verdicts"] = dict(self.verdicts)
        out["comparisons"] = list(self.comparisons)
        return out


def row_from_result(result: Result, *, outcome: str = "passed", reason: str | None = None) -> ReportRow:
    """A row from a test's recorded `Result` and pytest's outcome for it."""
    case = result.case
    return ReportRow(
        test_id=result.test_id,
        config=result.config,
        workload=result.workload,
        family=case.family if case is not None else None,
        method=case.method if case is not None else None,
        tp=case.tp if case is not None else None,
        budget=case.budget if case is not None else None,
        metrics=result.values(),
        spreads={m.name: m.spread for m in result.metrics},
        verdict=result.verdict,
        verdicts=result.figure_verdicts(),
        comparisons=tuple(c.line() for c in result.comparisons if c.noteworthy),
        outcome=outcome,
        reason=reason,
        gpus=result.details.get("gpus") or None,
        shared=result.shared.mark() if result.shared is not None else None,
        warmup_requests=_warmup_requests(result.details),
    )


def warmup_said(rows: Sequence[ReportRow]) -> str | None:
    """How the figures were measured, for a report's header: the untimed requests sent before
    each workload (warmup.py), or None where no row recorded a count."""
    counts = {r.workload or "-": r.warmup_requests for r in _sorted(rows) if r.warmup_requests is not None}
    if not counts:
        return None
    unrecorded = sum(1 for r in rows if r.metrics and r.warmup_requests is None)
    cold = f"; none recorded for {unrecorded} result(s) measured before the warm-up existed" if unrecorded else ""
    if len(set(counts.values())) == 1:
        count = next(iter(counts.values()))
        told = "none: each workload measured cold" if count == 0 else \
            f"{count} untimed request{'s' if count != 1 else ''} before each workload, then a cache flush"
    else:
        told = "untimed requests before each workload, then a cache flush: " + \
            ", ".join(f"{name} {count}" for name, count in counts.items())
    return told + cold


def _warmup_requests(details: Mapping[str, Any]) -> int | None:
    """The warm-up count a measurement records, as a number; None for none (an older record's)."""
    measurement = details.get("measurement")
    count = measurement.get("warmup_requests") if isinstance(measurement, Mapping) else None
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def _cell(row: ReportRow, metric: str, fmt: str) -> str:
    value = row.metrics.get(metric)
    if value is None or not math.isfinite(value):
        return "-"
    return fmt.format(value)


#: A test's verdict (`gate.TEST_VERDICTS`, as JUnit and results.json carry it) as the table words
#: it; the README's table of verdicts lists both.
VERDICT_TEXT = {"regression": "REGRESSION", "noisy": "noisy", "improved": "improved",
                "new": "new baseline", "ok": "ok", "not gated": "not gated"}
SET_ASIDE = ("skipped", "xfailed", "xpassed")  # outcomes whose reason is not a failure's
#: Outcomes of a test whose figures are a result: a known issue that passes (xpassed, where its
#: xfail is not strict) measured as any passing test did, and its figures are saved as a baseline.
MEASURED = ("passed", "xpassed")


def measured(rows: Iterable[ReportRow]) -> list[ReportRow]:
    """The rows report.tex and the plots show: results of a configuration (`MEASURED`)."""
    return [r for r in rows if r.outcome in MEASURED and r.method is not None]
#: The reason of a passed row whose figures an earlier run of the journal measured (this run judged them).
RESUMED = "resumed from the journal"
REASON_CELL = 60  # characters of such a reason the table's verdict cell shows


def _verdict_text(row: ReportRow) -> str:
    if row.failed:  # the headline, with what it announces; report.md has the whole reason
        lines = [line for line in (row.reason or "").splitlines() if line.strip()] or [row.outcome]
        cause = lines[0] + (" " + lines[1] if lines[0].endswith(":") and len(lines) > 1 else "")
        label = "ERROR" if row.outcome == "error" else "FAILED"  # as pytest says it: setup or call
        return f"{label}: {_one_line(cause.split(' (log: ', 1)[0], 100)}"
    if row.outcome in SET_ASIDE:
        return f"{row.outcome}" + (f": {_one_line(row.reason, REASON_CELL)}" if row.reason else "")
    if not row.verdict and row.reason == RESUMED:  # the journal keeps figures, not the verdict
        return "resumed"
    if row.verdict == "shared":  # no gate's word: its counts say how much of the load was this run's
        return row.shared or "shared"
    return VERDICT_TEXT.get(row.verdict, "-")


def _workload_part(row: ReportRow) -> str:
    return f" [{row.workload}]" if row.workload else ""  # a test with no workload: no "[None]"


def _one_line(text: str | None, limit: int) -> str:
    """`text` on one line in at most `limit` characters, shortened in the middle: a message
    opens with what failed and often ends with the detail that says why, so both ends stay."""
    text = " ".join((text or "").split())
    if len(text) <= limit:
        return text
    head = (limit - 3) // 2
    return text[:head] + "..." + text[len(text) - (limit - 3 - head):]


def _sorted(rows: Iterable[ReportRow]) -> list[ReportRow]:
    return sorted(rows, key=lambda r: (r.workload or "", r.method or "", r.tp or 0, r.family or "cpu",
                                       r.budget or -1, r.config))


def test_function(row: ReportRow) -> str:
    """The test function a row's test is a case of (`test_generation` of
    `test_generation[ar-tp1-chat]`); "" for a row that is its own name (a configuration a merge
    has no result for, a test of no configuration), which no test function column needs."""
    return "" if row.test_id == row.config else row.test_id.split("[", 1)[0]


def several_test_functions(rows: Iterable[ReportRow]) -> bool:
    """Whether rows come from more than one test function, so each must say whose it is."""
    return len({test_function(r) for r in rows} - {""}) > 1


def other_parameters(row: ReportRow) -> str:
    """The parameters of a row's test besides its configuration and workload (the test's own
    parametrization, pytest-repeat's `1-3`), or ""."""
    name = row.test_id
    if not name.endswith("]") or "[" not in name:
        return ""
    params = name[name.index("[") + 1:-1]
    for known in (row.config, row.workload):
        if known:
            params = params.replace(known, "", 1)
    return "-".join(part for part in params.split("-") if part)


def _labels(rows: Sequence[ReportRow]) -> dict[int, str]:
    """The config cell of each row (by id): the configuration, with the test function where
    several measure it, and the other parameters where rows would otherwise read alike."""
    several = several_test_functions(rows)
    whose = {id(r): test_function(r) if several else "" for r in rows}
    alike = Counter((r.config, whose[id(r)], r.workload) for r in rows)
    labels = {}
    for r in rows:
        parts = [whose[id(r)]]
        if alike[(r.config, whose[id(r)], r.workload)] > 1:
            parts.append(other_parameters(r))
        label = " ".join(part for part in parts if part)
        labels[id(r)] = f"{r.config} ({label})" if label else r.config
    return labels


def _table(rows: Sequence[ReportRow], shown: Sequence[ReportRow] | None = None) -> tuple[list[str], list[list[str]]]:
    """The header and a line per row of `shown` (default: every row), sorted; labels are of all
    `rows`, so a folded table names a row as the whole one does."""
    labels = _labels(rows)
    header = ["config", "workload", *(title for _, title, _ in COLUMNS), "verdict"]
    body = [[labels[id(r)], r.workload or "-", *(_cell(r, m, f) for m, _, f in COLUMNS), _verdict_text(r)]
            for r in _sorted(rows if shown is None else shown)]
    return header, body


def format_table(rows: Sequence[ReportRow], *, limit: int = 0, every_row: str = "") -> str:
    """The session-end terminal table (plain text; numbers right-aligned). Past `limit` rows
    (0: none), the rows of plain passes beyond it fold into one line (`table_fold`), which ends
    with `every_row`: where the reader finds them all."""
    from .table_fold import fold

    folded = fold(_sorted(rows), limit)
    header, body = _table(rows, folded.shown)
    if not body:
        return "pytest-specdec: no results"
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    numeric = set(range(2, 2 + len(COLUMNS)))

    def fmt(line: list[str]) -> str:
        cells = [c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths))]
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * w for w in widths)
    lines = [fmt(header), rule, *(fmt(line) for line in body)]
    if folded.folded:
        lines.append(f"... {len(folded.folded)} more row(s) of tests that passed not shown "
                     f"({folded.counted(_verdict_text)}){f': {every_row}' if every_row else ''}")
    labels = _labels(rows)
    notes = [f"  {labels[id(r)]}{_workload_part(r)}: {c}" for r in _sorted(rows) for c in r.comparisons]
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


#: What a markdown renderer reads as markup in a table cell or a heading, escaped so names and
#: messages read as written: GitHub drops `<x>` as an HTML tag and reads `*a*` as emphasis, `$d$`
#: as math, `&lt;` as `<`; `_` only where it can open or close emphasis (`test_gen` is text).
_MD_MARKUP = re.compile(r"[\\`*<>$~|]|&(?=#?\w+;)|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def _md_escape(text: str) -> str:
    return _MD_MARKUP.sub(lambda m: "\\" + m[0], text)


def _md_code(text: str) -> str:
    """`text` as a markdown code span read as written (CommonMark): a backtick inside (a workload
    `a`b`) closed a span of one, so its fence is a run of backticks longer than any inside, and
    a space pads content that starts or ends with a backtick (or a space on both sides), since
    the renderer strips one space from each side."""
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text[:1] == "`" or text[-1:] == "`" or (text[:1] == text[-1:] == " " and text.strip(" ")) else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def render_markdown(rows: Sequence[ReportRow], *, title: str = "pytest-specdec results",
                    meta: Mapping[str, Any] | None = None, plots: Sequence[str | Path] = ()) -> str:
    """report.md, and the GitHub step summary (same text)."""
    header, body = _table(rows)
    out = [f"# {title}", ""]
    warmup = warmup_said(rows)
    meta = {**(meta or {}), **({"warm-up": warmup} if warmup else {})}
    for key, value in meta.items():
        out.append(f"- **{key}**: {_md_escape(str(value))}")  # a hardware name's `<x>` or `*` as written
    if meta:
        out.append("")
    if not body:
        out.append("No results.")
        return "\n".join(out) + "\n"
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "|".join("---:" if 2 <= i < 2 + len(COLUMNS) else "---" for i in range(len(header))) + "|")
    out += ["| " + " | ".join(_md_escape(c) for c in line) + " |" for line in body]
    labels = _labels(rows)  # as the table names them: two tests of one configuration read apart
    notes = [(r, c) for r in _sorted(rows) for c in r.comparisons]
    if notes:
        out += ["", "## Against the baseline", ""]
        out += [f"- {_md_code(labels[id(r)])}{_md_escape(_workload_part(r))}: {_md_code(c)}" for r, c in notes]
    failures = [r for r in _sorted(rows) if r.failed]
    if failures:
        out += ["", "## Failures", ""]
        for r in failures:
            text = (r.reason or r.outcome).rstrip()
            longest = max((len(run) for run in re.findall("`+", text)), default=0)
            fence = "`" * max(3, longest + 1)  # a ``` in the message must not close it
            out += [f"### {_md_escape(labels[id(r)] + _workload_part(r))}", "", fence, text, fence, ""]
    out += _set_aside(rows, labels)
    if plots:
        out += ["", "## Plots", ""]
        out += [f"![{_plot_title(Path(p).stem, plots)}]({Path(p).as_posix()})" for p in plots]
    return "\n".join(out).rstrip() + "\n"


def _plot_title(stem: str, plots: Sequence[str | Path]) -> str:
    """A plot's alt text: its name, and where it has further pages (`plots.page_name`), which
    page of how many, so a reader finds the workload wanted among them."""
    from .plots import page_of

    mine = page_of(stem)
    if mine is None:
        return stem
    pages = sum(1 for p in plots if (page_of(Path(p).stem) or ("", 0))[0] == mine[0])
    return stem if pages == 1 else f"{mine[0]} (page {mine[1]} of {pages})"


def _set_aside(rows: Sequence[ReportRow], labels: Mapping[int, str]) -> list[str]:
    """Skip and xfail reasons the verdict cell shortened, whole: one line per reason with the
    rows it covers (named by `labels`, as the table names them), since a family's skip often
    covers many."""
    covered: dict[tuple[str, str], list[str]] = {}
    for r in _sorted(rows):
        reason = " ".join((r.reason or "").split())
        if r.outcome in SET_ASIDE and len(reason) > REASON_CELL:
            covered.setdefault((r.outcome, reason), []).append(_md_code(labels[id(r)] + _workload_part(r)))
    if not covered:
        return []
    out = ["", "## Skipped and expected failures", ""]
    out += [f"- {outcome}: {_md_escape(reason)} ({', '.join(names)})"
            for (outcome, reason), names in covered.items()]
    return out


# --------------------------------------------------------------------------------------------
# Writers


@dataclass(frozen=True)
class ReportFiles:
    results_json: Path
    markdown: Path
    latex: Path  # report.tex, to \input
    standalone: Path  # report-standalone.tex, compiles by itself
    plots: tuple[Path, ...]  # PNG and PDF of each
    plot_error: str | None = None  # why plots are missing (matplotlib not installed, a page that hung, ...)


def write_report(out_dir: str | Path, rows: Sequence[ReportRow], *, meta: Mapping[str, Any] | None = None,
                 plots: bool = True, title: str = "pytest-specdec results",
                 option: str = "--specdec-report", progress: PlotProgress | None = None) -> ReportFiles:
    """Everything `--specdec-report DIR` promises. Plots are best-effort: a missing matplotlib
    is reported in `plot_error` and in report.md, never a crash at session end. report.md shows
    the PNGs, the LaTeX files include the PDFs. `option` is where `out_dir` was set, as an error
    names it. `progress` hears how far a long drawing of plots is (`plots.plot_rows`)."""
    from . import staging
    from .outputs import check_report_folder

    out_dir = Path(out_dir)
    check_report_folder(out_dir, option=option)  # a target of the wrong kind stops it before anything is written
    # Written into a hidden folder first, moved into place once all is written: never half a report.
    with staging.staged(out_dir, ".report-") as folder:
        files = write_files(folder, rows, meta=meta, plots=plots, title=title, progress=progress)
        return publish(files, folder, out_dir)


def previous_files() -> tuple[str, ...]:
    """The paths, relative to the report folder, of every file an earlier report may have left
    there: replaced or removed by the next, so that none reads as part of it (a plot of a metric
    no row has now)."""
    from .outputs import REPORT_FILES
    from .plots import PLOTTED

    return (*REPORT_FILES, *(f"plots/{stem}{suffix}" for _, _, stem, _ in PLOTTED for suffix in (".png", ".pdf")))


def previous_pages(out_dir: Path) -> list[str]:
    """The further pages of plots (`plots.page_name`) an earlier report left in `out_dir`: a run
    of fewer workloads draws fewer, and none may read as part of the new report."""
    from .plots import page_of

    folder = out_dir / "plots"
    if not folder.is_dir():
        return []
    return sorted(f"plots/{p.name}" for p in folder.iterdir()
                  if p.suffix in (".png", ".pdf") and (page_of(p.stem) or ("", 1))[1] > 1)


def publish(files: ReportFiles, staging: Path, out_dir: Path, extra: Sequence[Path] = (),
            previous: Sequence[str] = ()) -> ReportFiles:
    """The report `write_files` staged (and `extra` files staged beside it), moved into
    `out_dir` together once an earlier report's files (and `previous`) are removed."""
    from . import staging as staging_mod

    moved = staging_mod.publish(
        staging, out_dir, (files.results_json, files.markdown, files.latex, files.standalone, *files.plots, *extra),
        (*previous_files(), *previous_pages(out_dir), *previous))
    plots = tuple(moved[4:4 + len(files.plots)])
    return ReportFiles(*moved[:4], plots, files.plot_error)


def write_files(out_dir: Path, rows: Sequence[ReportRow], *, meta: Mapping[str, Any] | None,
                plots: bool, title: str, progress: PlotProgress | None = None) -> ReportFiles:
    """The report's files written into `out_dir`, a staging folder that `publish` empties."""
    from . import latex, plots as plots_mod

    results = out_dir / "results.json"
    results.write_text(json.dumps(results_document(rows, meta), indent=2, sort_keys=False) + "\n", encoding="utf-8")
    images: list[Path] = []
    plot_error = None
    if plots:
        from .plot_pool import PagesNotDrawn

        try:
            images = plots_mod.plot_rows(rows, out_dir / "plots", progress)
        except ImportError as exc:
            from .extras import install_command

            plot_error = f"plots skipped: {exc} ({install_command('report')})"
        except PagesNotDrawn as exc:  # a hung worker's page: the report goes on with the others
            images, plot_error = exc.written, str(exc)
    relative = [p.relative_to(out_dir) for p in images]
    md = render_markdown(rows, title=title, meta=meta, plots=[p for p in relative if p.suffix == ".png"])
    if plot_error:  # escaped as the table is, on one line: a blank line would end the emphasis
        md += f"\n_{_md_escape(' '.join(plot_error.split()))}_\n"
    markdown = out_dir / "report.md"
    markdown.write_text(md, encoding="utf-8")
    fragment = latex.render_fragment(rows, [p for p in relative if p.suffix == ".pdf"], meta=meta)
    tex = out_dir / "report.tex"
    tex.write_text(fragment, encoding="utf-8")
    standalone = out_dir / "report-standalone.tex"
    standalone.write_text(latex.render_standalone(fragment), encoding="utf-8")
    return ReportFiles(results, markdown, tex, standalone, tuple(images), plot_error)


def write_github_summary(rows: Sequence[ReportRow], *, env: Mapping[str, str] | None = None,
                         title: str = "pytest-specdec results", meta: Mapping[str, Any] | None = None) -> Path | None:
    """Append the markdown table to $GITHUB_STEP_SUMMARY when set (GitHub Actions); else None."""
    env = os.environ if env is None else env
    target = env.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    path = Path(target)
    _append_whole(path, (render_markdown(rows, title=title, meta=meta) + "\n").encode("utf-8"))
    return path


def _append_whole(path: Path, data: bytes) -> None:
    """Append `data` to `path` whole or not at all (`journal.append_whole`): a full disk mid-append
    would leave half a table at the end of the CI summary, which every later step appends after."""
    from .journal import append_whole

    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        append_whole(fd, data)
    except OSError as exc:
        if exc.filename is None:  # os.write names no file
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    finally:
        os.close(fd)


__all__ = [
    "COLUMNS",
    "MEASURED",
    "RESULTS_FORMAT",
    "RESULTS_VERSION",
    "VERDICT_TEXT",
    "ReportFiles",
    "ReportRow",
    "format_table",
    "measured",
    "previous_files",
    "previous_pages",
    "publish",
    "render_markdown",
    "results_document",
    "row_from_result",
    "verdict_of",
    "write_files",
    "write_github_summary",
    "write_report",
    "warmup_said",
]
