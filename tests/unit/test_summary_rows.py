"""--specdec-summary-rows: a long summary table folds its plain passes into one line in the
terminal, never a row a user must see, and the report's files keep every row."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from report_support import row

from pytest_specdec.report import RESUMED, ReportRow, format_table
from pytest_specdec.table_fold import fold, must_show


def plain_rows(count: int) -> list[ReportRow]:
    """`count` rows of tests that passed ok, each its own configuration (budgets 1..count)."""
    return [replace(row("ddtree", 1, budget, 100.0 + budget), verdict="ok") for budget in range(1, count + 1)]


def test_a_long_table_shows_every_row_that_matters_fills_to_the_limit_and_folds_the_rest():
    """120 rows, 3 a user must see (a failure, a regression, a skip): those 3 and 47 plain rows
    show, in the table's order, and one line counts the other 70 and says where they all are."""
    rows = plain_rows(120)
    rows[10] = replace(rows[10], outcome="failed", reason="server crashed")
    rows[60] = replace(rows[60], verdict="regression", comparisons=("output_tok_s 50.0 < baseline 100.0",))
    rows[110] = replace(rows[110], outcome="skipped", reason="needs 8 GPUs")
    lines = format_table(rows, limit=50, every_row="every row is in rep/report.md").splitlines()
    body = [line for line in lines[2:] if line.startswith("ddtree-")]
    assert len(body) == 50
    every = [line for line in format_table(rows).splitlines() if line.startswith("ddtree-")]
    assert [line for line in every if line in body] == body  # the full table's order
    shown = {line.split()[0] for line in body}
    assert {"ddtree-tp1-b11", "ddtree-tp1-b61", "ddtree-tp1-b111"} <= shown
    assert lines[2 + 50] == ("... 70 more row(s) of tests that passed not shown (70 ok): "
                             "every row is in rep/report.md")
    assert sum(line.startswith("...") for line in lines) == 1
    assert "against baseline:" in lines and "output_tok_s 50.0 < baseline 100.0" in lines[-1]


def test_the_plain_rows_shown_are_the_first_in_the_tables_order():
    rows = plain_rows(30)
    rows[25] = replace(rows[25], verdict="noisy")
    shown = fold(rows, 10).shown
    assert shown == (*rows[:9], rows[25])


def test_rows_that_must_show_are_shown_past_the_limit():
    rows = [replace(r, verdict="not gated") for r in plain_rows(8)] + plain_rows(4)
    folded = fold(rows, 5)
    assert folded.shown == tuple(rows[:8]) and folded.folded == tuple(rows[8:])


@pytest.mark.parametrize("changed, shows", [
    ({}, False), ({"verdict": "new"}, False), ({"verdict": ""}, False), ({"reason": RESUMED}, False),
    ({"outcome": "failed"}, True), ({"outcome": "error"}, True), ({"outcome": "skipped", "reason": "x"}, True),
    ({"outcome": "xfailed", "reason": "known"}, True), ({"outcome": "xpassed"}, True),
    ({"verdict": "regression"}, True), ({"verdict": "improved"}, True), ({"verdict": "noisy"}, True),
    ({"verdict": "not gated"}, True), ({"verdict": "shared", "shared": "shared: 3 of 9 tokens"}, True),
    ({"comparisons": ("accept_length 2.0 > baseline 1.0",)}, True),
])
def test_which_rows_a_user_must_see(changed, shows):
    assert must_show(replace(plain_rows(1)[0], **changed)) is shows


def test_a_limit_of_0_or_a_table_within_it_is_the_table_of_every_row():
    rows = plain_rows(120)
    assert format_table(rows, limit=0, every_row="x") == format_table(rows)
    assert len([line for line in format_table(rows).splitlines() if line.startswith("ddtree-")]) == 120
    small = plain_rows(50)
    assert format_table(small, limit=50, every_row="x") == format_table(small)


def test_one_row_past_the_limit_is_shown_not_folded_into_a_line_as_long():
    rows = plain_rows(51)
    assert format_table(rows, limit=50, every_row="x") == format_table(rows)
    failures = [replace(r, outcome="failed", reason="x") for r in plain_rows(5)]
    assert fold([*failures, *plain_rows(1)], 5).folded == ()  # no room left, and still one row
    assert len(fold(plain_rows(52), 50).folded) == 2


def test_the_fold_line_counts_each_verdict_as_the_table_words_it():
    verdicts = ["ok", "new", "ok", "", "new", "new"]  # the most first; a tie in the table's order
    rows = [replace(r, verdict=verdict) for r, verdict in zip(plain_rows(6), verdicts)]
    assert format_table(rows, limit=1).splitlines()[-1] == \
        "... 5 more row(s) of tests that passed not shown (3 new baseline, 1 ok, 1 no verdict)"


FIGURES = """
import os
import pytest

@pytest.mark.parametrize("i", range(120))
def test_figures(specdec_record, i):
    changed = {int(k): float(v) for k, v in (p.split("=") for p in os.environ.get("CHANGED", "").split(",") if p)}
    specdec_record.metric("output_tok_s", changed.get(i, 100.0))
    assert i != int(os.environ.get("FAILS", "-1")), "broken on purpose"
"""


def table_lines(result: pytest.RunResult) -> list[str]:
    """The summary table's rows and its fold line, as the terminal shows them."""
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if "specdec summary" in line) + 3
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith(("test_figures", "...")))
    return lines[start:end]


def test_a_run_of_120_tests_folds_its_plain_rows_and_its_report_keeps_them_all(pytester, monkeypatch):
    """A matrix's CI log had a table line per test, the failed and regressed among a hundred "ok":
    the terminal now shows the 3 that matter and 47 others, and one line naming the report."""
    pytester.makepyfile(test_figures=FIGURES)
    pytester.runpytest("-p", "no:cacheprovider", "--specdec-save-baseline").assert_outcomes(passed=120)
    monkeypatch.setenv("CHANGED", "10=50,100=200")  # a regression and an improvement
    monkeypatch.setenv("FAILS", "60")
    gate = "--specdec-compare-fail=output_tok_s:5%"
    every = table_lines(pytester.runpytest("-p", "no:cacheprovider", gate, "--specdec-summary-rows=0"))
    assert len(every) == 120 and not any(line.startswith("...") for line in every)

    result = pytester.runpytest("-p", "no:cacheprovider", gate, "--specdec-report=rep")
    result.assert_outcomes(passed=118, failed=2)
    folded = table_lines(result)
    assert len(folded) == 51 and folded[-1] == ("... 70 more row(s) of tests that passed not shown (70 ok): "
                                                "every row is in rep/report.md and rep/results.json")
    assert [line for line in every if line in folded[:-1]] == folded[:-1]  # the full table's order
    named = {line.split()[0] for line in folded[:-1]}
    assert {"test_figures[10]", "test_figures[60]", "test_figures[100]"} <= named
    assert json.loads((pytester.path / "rep" / "results.json").read_text())["results"].__len__() == 120
    assert (pytester.path / "rep" / "report.md").read_text().count("| test_figures[") == 120

    without_report = table_lines(pytester.runpytest("-p", "no:cacheprovider", gate, "-o", "specdec_summary_rows=20"))
    assert len(without_report) == 21
    assert without_report[-1] == ("... 100 more row(s) of tests that passed not shown (100 ok): "
                                  "--specdec-summary-rows=0 shows every row")


def test_a_small_run_shows_every_row_as_before(pytester):
    pytester.makepyfile(test_figures=FIGURES.replace("range(120)", "range(3)"))
    lines = table_lines(pytester.runpytest("-p", "no:cacheprovider", "--specdec-summary-rows=2"))
    assert len(lines) == 3 and not lines[-1].startswith("...")  # 1 row folded would be 1 line too
    lines = table_lines(pytester.runpytest("-p", "no:cacheprovider", "--specdec-summary-rows=1"))
    assert len(lines) == 2 and lines[-1].startswith("... 2 more row(s)")  # 1 row and the fold line
    lines = table_lines(pytester.runpytest("-p", "no:cacheprovider"))
    assert [line.split()[0] for line in lines] == ["test_figures[0]", "test_figures[1]", "test_figures[2]"]
