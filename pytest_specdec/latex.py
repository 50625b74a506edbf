"""LaTeX of a run's results, for papers: `report.tex`, a fragment to `\\input`, and
`report-standalone.tex`, the same body in a document that compiles by itself with pdflatex.

Both need only booktabs and graphicx. One table per workload: its caption names the hardware and
the backend; a family column appears where the rows come from matrices of several families; the
speedup column is tokens/s over the reference method's (AR) at the same family and TP, the figure
spec-decoding papers report (left out where no AR row was measured); the best value of each column
is bold. The figures are the plots' PDFs (vector). A table longer than ROWS_PER_TABLE goes on in
further floats ("(continued)"), and one wider than the text is scaled down to its width.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .configuration import REFERENCE_METHOD
from .metrics import METRIC_DIRECTIONS
from .report import measured, other_parameters, several_test_functions, test_function

if TYPE_CHECKING:
    from .report import ReportRow

PACKAGES = ("booktabs", "graphicx")

#: The most floats report.tex leaves pending between two `\clearpage`: LaTeX places a [t] float
#: only at a page break, which tables and figures with no text between them never reach, and it
#: stops at 18 pending ("Too many unprocessed floats"); 10 leaves room for those of the paper
#: around the fragment. A report of up to this many floats (a few workloads) has no `\clearpage`.
FLUSH_EVERY = 10

#: The most rows a table float holds: a [t] float may fill at most 0.7 of a page (LaTeX's
#: \topfraction), in article 385pt, and \small rows are 11pt high; 24 rows and a caption of five
#: lines fit it, in one column or two. A workload of more rows (several families: 72) ran past
#: the page's bottom, its last rows cut off, or waited unplaced until the document's end.
ROWS_PER_TABLE = 24

_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
            "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
            # OT1, LaTeX's default font encoding, prints these three as an em dash, ¡ and ¿
            "|": r"\textbar{}", "<": r"\textless{}", ">": r"\textgreater{}"}


def tex_escape(text: str) -> str:
    return "".join(_SPECIAL.get(ch, ch) for ch in text)


@dataclass(frozen=True)
class Column:
    """A numeric column: its title, how a row's value is found, its format, and which way is best."""

    title: str
    value: Callable[[ReportRow], float | None]
    fmt: str
    higher_is_better: bool


def _metric_column(title: str, metric: str, fmt: str) -> Column:
    return Column(title, lambda row: row.metrics.get(metric), fmt,
                  METRIC_DIRECTIONS[metric] == "higher")


def columns(speedups: Mapping[str, float]) -> tuple[Column, ...]:
    """The table's numeric columns; `speedups` by row test id (see `speedups`). Without any (no
    row has its reference measured) there is no speedup column, rather than one of dashes."""
    speedup = Column(f"speedup vs {REFERENCE_METHOD.upper()}", lambda row: speedups.get(row.test_id),
                     "{:.2f}$\\times$", True)
    return (
        _metric_column("tokens/s", "output_tok_s", "{:.1f}"),
        *([speedup] if speedups else []),
        _metric_column("accept len", "accept_length", "{:.2f}"),
        _metric_column("TTFT ms", "ttft_ms", "{:.1f}"),
        _metric_column("TPOT ms", "tpot_ms", "{:.2f}"),
    )


def speedups(rows: Sequence[ReportRow]) -> dict[str, float]:
    """tokens/s of each row over the reference method's at the same workload, family and TP,
    measured by the same test function with the same other parameters (two tests of one
    configuration, or pytest-repeat's repeats, are as many references)."""
    reference = {(test_function(r), other_parameters(r), r.workload, r.family, r.tp): r.metrics["output_tok_s"]
                 for r in rows if r.method == REFERENCE_METHOD and r.metrics.get("output_tok_s")}
    out = {}
    for r in rows:
        base = reference.get((test_function(r), other_parameters(r), r.workload, r.family, r.tp))
        if base and "output_tok_s" in r.metrics:
            out[r.test_id] = r.metrics["output_tok_s"] / base
    return out


def render_fragment(rows: Sequence[ReportRow], plots: Sequence[str | Path] = (), *,
                    meta: Mapping[str, Any] | None = None,
                    caption: str = "Speculative decoding results") -> str:
    """report.tex: booktabs tables per workload and the plots as figures, for `\\input`.
    Plot paths are relative to the report folder (set `\\graphicspath` to it)."""
    meta = meta or {}
    preamble = " and ".join("\\usepackage{" + p + "}" for p in PACKAGES)
    out = [f"% pytest-specdec report; needs {preamble}",
           "% plot paths are relative to this folder: \\graphicspath{{<this folder>/}}", ""]
    results = measured(rows)
    workloads = sorted({r.workload or "-" for r in results})
    tables = labels(workloads)
    floats = [table for workload in workloads
              for table in _tables([r for r in results if (r.workload or "-") == workload], workload,
                                   tables[workload], meta, caption)]
    from .plots import PLOTTED, page_of  # the captions say what the plots show

    captions = {stem: text for _, _, stem, text in PLOTTED}
    figures = labels(Path(plot).stem for plot in plots)
    for plot in plots:
        path = Path(plot)
        page = page_of(path.stem)
        # a further page of a plot says which, under the plot's caption
        text = captions.get(path.stem) or (f"{captions[page[0]]} (Page {page[1]}.)" if page else
                                           path.stem.replace('_', ' '))
        floats.append([
            "\\begin{figure}[t]", "\\centering",
            f"\\includegraphics[width=\\linewidth]{{{path.as_posix()}}}",
            f"\\caption{{{tex_escape(text)}}}",
            f"\\label{{fig:specdec-{figures[path.stem]}}}",
            "\\end{figure}", "",
        ])
    return "\n".join(out + flushed(floats))


def flushed(floats: Sequence[list[str]]) -> list[str]:
    """The floats' lines, with a `\\clearpage` (which places every pending float) after each
    FLUSH_EVERY of them and after the last, where there are more than FLUSH_EVERY: a run of a
    hundred workloads otherwise stops LaTeX."""
    out: list[str] = []
    for number, lines in enumerate(floats, start=1):
        out += lines
        if len(floats) > FLUSH_EVERY and (number % FLUSH_EVERY == 0 or number == len(floats)):
            out += ["\\clearpage", ""]
    return out


#: The standalone document's text where the run measured nothing to tabulate or plot.
NO_RESULTS = "This run measured no results; report.md says what ran."


def render_standalone(fragment: str) -> str:
    """report-standalone.tex: the fragment in an article that pdflatex compiles by itself. A
    fragment of comments alone (a run that measured nothing) gets a line saying so: LaTeX sets
    such a body on no page and pdflatex writes no PDF ("No pages of output")."""
    empty = all(not line.strip() or line.lstrip().startswith("%") for line in fragment.splitlines())
    return "\n".join([
        "\\documentclass{article}",
        *(f"\\usepackage{{{p}}}" for p in PACKAGES),
        "\\begin{document}",
        fragment,
        *([NO_RESULTS] if empty else []),
        "\\end{document}",
        "",
    ])


def _tables(rows: Sequence[ReportRow], workload: str, label: str, meta: Mapping[str, Any],
            caption: str) -> list[list[str]]:
    """A workload's table: one float, or where its rows are more than a page holds, one float per
    `pages` piece, the later ones captioned "(continued)" (speedups and bold over all its rows)."""
    rows = sorted(rows, key=lambda r: (test_function(r), r.family or "", r.tp or 0, r.method or "",
                                       r.budget or 0, other_parameters(r)))
    ratios = speedups(rows)
    cols = columns(ratios)
    with_test = several_test_functions(rows)
    with_family = len({r.family for r in rows}) > 1
    # rows of one configuration apart only in other parameters (pytest-repeat's 1-3) would read alike
    with_variant = len({_identity(r) for r in rows}) < len(rows)
    titles = [*(["Test"] if with_test else []), *(["Family"] if with_family else []), "Method", "TP", "Budget",
              *(["Variant"] if with_variant else []), *(c.title for c in cols)]
    values = [[c.value(r) for c in cols] for r in rows]
    cells = [[c.fmt.format(v) if v is not None else "--" for c, v in zip(cols, line)]
             for line in values]
    best = [_best(c, [line[i] for line in values]) for i, c in enumerate(cols)]
    where = [f"on {_hardware_phrase(meta['hardware'])}" if meta.get("hardware") else "",
             f"{meta['backend']} backend" if meta.get("backend") else ""]
    text = (f"{caption}, workload {workload}" + (f" ({', '.join(w for w in where if w)})"
                                                  if any(where) else "")
            + (f". Speedup: tokens/s over {REFERENCE_METHOD.upper()} at the same family and TP" if ratios else "")
            + ". Bold: the best value of each column.")
    lines = []
    for r, numbers in zip(rows, cells):
        ident = [*([test_function(r) or "--"] if with_test else []), *([r.family or "-"] if with_family else []),
                 (r.method or r.config) + (" (shared)" if r.verdict == "shared" else ""),  # never gated nor saved
                 str(r.tp) if r.tp is not None else "--",
                 str(r.budget) if r.budget is not None else "--",
                 *([other_parameters(r) or "--"] if with_variant else [])]
        shown = [f"\\textbf{{{text}}}" if text == best[i] else text
                 for i, text in enumerate(numbers)]
        lines.append(" & ".join([*(tex_escape(c) for c in ident), *shown]) + " \\\\")
    spec = "l" * (with_test + with_family + 1) + "rr" + "l" * with_variant + "r" * len(cols)
    header = " & ".join(tex_escape(t) for t in titles) + " \\\\"
    out, start = [], 0
    for part, piece in enumerate(pages(rows), start=1):
        first, body, start = part == 1, lines[start:start + len(piece)], start + len(piece)
        out.append([
            "\\begin{table}[t]", "\\centering", "\\small",
            f"\\caption{{{tex_escape(text if first else f'{caption}, workload {workload} (continued).')}}}",
            # a later part's label has a colon, which no workload's label has
            f"\\label{{tab:specdec-{label}{'' if first else f':{part}'}}}",
            # box 0 measures the table: only one wider than the column is scaled, to its width
            "\\sbox0{\\begin{tabular}{" + spec + "}",
            "\\toprule",
            header,
            "\\midrule",
            *body,
            "\\bottomrule", "\\end{tabular}}%",
            "\\ifdim\\wd0>\\linewidth\\resizebox{\\linewidth}{!}{\\usebox0}\\else\\usebox0\\fi",
            "\\end{table}", "",
        ])
    return out


def pages(rows: Sequence[ReportRow], most: int = ROWS_PER_TABLE) -> list[list[ReportRow]]:
    """Sorted rows in pieces of at most `most`, in order: a test function's family starts a new
    piece unless all its rows fit the one before; one of more rows than `most` is cut between
    TPs where it can, and a TP of more rows than `most` into even parts."""
    out: list[list[ReportRow]] = []
    for group in _runs(rows, lambda r: (test_function(r), r.family)):
        if out and len(out[-1]) + len(group) <= most:
            out[-1] = out[-1] + group
            continue
        blocks = [part for tp in _runs(group, lambda r: r.tp) for part in _even(tp, most)]
        start = len(out)
        for block in blocks:
            if len(out) > start and len(out[-1]) + len(block) <= most:
                out[-1] = out[-1] + block
            else:
                out.append(list(block))
    return out


def _runs(rows: Sequence[ReportRow], key: Callable[[ReportRow], Any]) -> list[list[ReportRow]]:
    """Consecutive rows of one key."""
    out: list[list[ReportRow]] = []
    for r in rows:
        if out and key(out[-1][0]) == key(r):
            out[-1].append(r)
        else:
            out.append([r])
    return out


def _even(rows: list[ReportRow], most: int) -> list[list[ReportRow]]:
    """`rows` in the fewest parts of at most `most`, as even as can be."""
    count = -(-len(rows) // most)
    size, extra = divmod(len(rows), count)
    bounds = [0]
    for number in range(count):
        bounds.append(bounds[-1] + size + (number < extra))
    return [rows[a:b] for a, b in zip(bounds, bounds[1:])]


def _hardware_phrase(hardware: str) -> str:
    """What the caption says the rows ran on: a host without a GPU ran them on its CPU (a
    merge's hardware lists each shard's, `; ` between them)."""
    from .hardware import NO_GPU

    return "; ".join("the CPU" if part == NO_GPU else part for part in str(hardware).split("; "))


def _identity(row: ReportRow) -> tuple:
    return test_function(row), row.family, row.method, row.tp, row.budget


def _best(column: Column, values: Sequence[float | None]) -> str | None:
    """The best value's text; None where it singles nothing out (fewer than two values, or all
    the same as printed)."""
    shown = {column.fmt.format(v): v for v in values if v is not None}
    if len(shown) < 2:
        return None
    pick = max if column.higher_is_better else min
    return next(text for text, v in shown.items() if v == pick(shown.values()))


def labels(names: Iterable[str]) -> dict[str, str]:
    """{name: its label} for one document's names (workloads, plot stems), unique among them and of
    ASCII letters, digits and `-` alone, which any LaTeX package reads safely (hyperref, cleveref and
    babel's shorthands trip on others). A name's label is its slug (`a b` is `a-b`) where that spells
    it (separators aside) and no other name's slug is the same; else the slug and a short hash of
    the name (`a-b-1f3c...`), so `a b` and `a-b`, or `ü` and `é`, get labels apart."""
    slugs = {name: _slug(name) for name in names}
    taken = Counter(slugs.values())
    return {name: slug if _spelt(name) and (taken[slug] == 1 or name == slug)
            else f"{slug}-{hashlib.sha256(name.encode('utf-8')).hexdigest()[:8]}"
            for name, slug in slugs.items()}


def _slug(name: str) -> str:
    return "".join(ch if ch.isascii() and ch.isalnum() else "-" for ch in name.lower()).strip("-") or "x"


def _spelt(name: str) -> bool:
    """Whether a name's slug spells it: nothing but ASCII letters, digits and separators dropped."""
    return all(ch.isascii() and (ch.isalnum() or ch in " -_") for ch in name)
