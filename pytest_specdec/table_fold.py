"""Which rows of a long summary table the terminal shows (`--specdec-summary-rows`), and how
many names a line at the end of a run lists (`named`).

A matrix of methods x TP x budgets x workloads runs hundreds or thousands of tests, and a CI log
with a table line for each buried the few that matter among the rows of plain passes. Past the
limit, the terminal keeps every row a user must see (`must_show`) and as many plain rows as fit,
in the table's order, and one line counts the rest and says where every row is. Only the
terminal folds: results.json, report.md, report.tex and the plots keep every row.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:
    from .report import ReportRow

#: Verdicts of a passed test that say nothing beyond "it passed": ok, a first (new) baseline, none
#: (no gate, or figures of no configuration).
PLAIN_VERDICTS = ("ok", "new", "")


def must_show(row: ReportRow) -> bool:
    """Whether `row` says more than "it passed": a failure or error, a skip or known issue
    (with its reason), a verdict of a change (regression, improved, noisy), not gated, shared,
    or a figure's note against the baseline. A resumed pass is plain: the journal measured it."""
    from .report import RESUMED

    return (row.outcome != "passed" or row.verdict not in PLAIN_VERDICTS or row.shared is not None
            or bool(row.comparisons) or row.reason not in (None, RESUMED))


@dataclass(frozen=True)
class Fold:
    """The rows the terminal shows, in the table's order, and the plain rows it leaves out."""

    shown: tuple[ReportRow, ...]
    folded: tuple[ReportRow, ...]

    def counted(self, verdict_text: Callable[[ReportRow], str]) -> str:
        """How many of each verdict the folded rows have (`65 ok, 5 new baseline`), worded by
        `verdict_text` as the table's verdict column words them."""
        counts = Counter(verdict_text(row) for row in self.folded)
        counts = Counter({"no verdict" if text == "-" else text: count for text, count in counts.items()})
        return ", ".join(f"{count} {text}" for text, count in counts.most_common())


def fold(rows: Sequence[ReportRow], limit: int) -> Fold:
    """`rows` (in the table's order) cut to `limit` rows where it has more: every row that
    `must_show`, then the first plain rows that fit beside them. A limit of 0 folds none; rows
    a user must see are shown past the limit, as hiding one would hide what the run found. A
    single plain row left out is shown: the line that would count it is no shorter than it."""
    if not limit or len(rows) <= limit:
        return Fold(tuple(rows), ())
    room = max(limit - sum(1 for row in rows if must_show(row)), 0)
    shown, folded = [], []
    for row in rows:
        if must_show(row):
            shown.append(row)
        elif room:
            room -= 1
            shown.append(row)
        else:
            folded.append(row)
    if len(folded) == 1:
        return Fold(tuple(rows), ())
    return Fold(tuple(shown), tuple(folded))


#: How many names a line at the end of a run lists before it counts the rest (`named`).
NAMES_SHOWN = 5


def named(names: Sequence[str], where: str = "", sep: str = ", ", shown: int = NAMES_SHOWN) -> str:
    """`names` joined by `sep`, or past `shown` + 1 of them the first `shown` and "and N more",
    then ` (all in WHERE)` where `where` says where the full list is (the report the run wrote):
    a line that named each of a 2,000-test matrix's tests ran to kilobytes. One more than `shown`
    is listed whole, as "and 1 more" would be no shorter."""
    if len(names) <= shown + 1:
        return sep.join(names)
    return (sep.join(names[:shown]) + f" and {len(names) - shown} more"
            + (f" (all in {where})" if where else ""))
