"""Lines at the end of a run that name tests name the first few of a long list, count the rest
and say where they all are (`table_fold.named`): a first gated run of a 2,000-test matrix named
every test on one line of kilobytes."""

from __future__ import annotations

from test_bench_flow import no_leftover_engines, project, run  # noqa: F401

from pytest_specdec.baselines import left_out
from pytest_specdec.durations import not_saved
from pytest_specdec.lossless import blind_note
from pytest_specdec.sharing import shared_note
from pytest_specdec.summary import rerun_note
from pytest_specdec.table_fold import named

NAMES = [f"test_figures[{i}]" for i in range(120)]
FIVE = ", ".join(NAMES[:5])


def test_a_long_list_names_5_counts_the_rest_and_says_where_they_all_are():
    assert named(NAMES, "rep/report.md and rep/results.json") == \
        f"{FIVE} and 115 more (all in rep/report.md and rep/results.json)"
    assert named(NAMES) == f"{FIVE} and 115 more"  # no report written: nothing to point at
    assert named(NAMES, sep="; ") == "; ".join(NAMES[:5]) + " and 115 more"


def test_a_short_list_is_named_whole():
    assert named(NAMES[:3], "rep/report.md") == ", ".join(NAMES[:3])
    assert named(NAMES[:6], "rep/report.md") == ", ".join(NAMES[:6])  # "and 1 more" is no shorter
    assert named(NAMES[:7]) == f"{FIVE} and 2 more"
    assert named([]) == ""


def test_the_notes_of_many_tests_name_5():
    where = "rep/report.md and rep/results.json"
    assert f"({FIVE} and 115 more (all in {where})): their figures" in shared_note(NAMES, "--x", where)
    assert shared_note(NAMES[:2], "--x") == shared_note(NAMES[:2], "--x", where)  # a short list as before
    # no report records which tests were rerun or left unchecked: the line names no report for them
    assert f"could not see some characters: {FIVE} and 115 more (a server" in blind_note(NAMES)
    reruns = rerun_note({f"t.py::{name}": 1 for name in NAMES})
    assert reruns.startswith("run again after failing: test_figures[0] (1 failed attempt), ")
    assert " and 115 more; the table" in reruns
    assert left_out(NAMES, NAMES[:2], "", (), where) == (
        f"120 result(s) of failed tests, which are no reference ({FIVE} and 115 more (all in {where})); "
        f"2 result(s) of configurations that are not lossless ({NAMES[0]}, {NAMES[1]})")
    assert not_saved(NAMES).startswith(f"durations not saved for {FIVE} and 115 more: this run measured")


FIGURES = """
import pytest

@pytest.mark.parametrize("i", range({count}))
def test_figures(specdec_record, i):
    specdec_record.metric("output_tok_s", 100.0)
"""


def test_a_first_gated_run_of_120_tests_names_5_of_the_119_figures_without_an_entry(pytester):
    """A baseline file of one test, then 120 tests gated: 119 figures have no entry, and the
    line named all 119 of them."""
    pytester.makepyfile(test_figures=FIGURES.format(count=1))
    pytester.runpytest("-p", "no:cacheprovider", "--specdec-save-baseline").assert_outcomes(passed=1)
    pytester.makepyfile(test_figures=FIGURES.format(count=120))
    gate = "--specdec-compare-fail=output_tok_s:5%"
    result = pytester.runpytest("-p", "no:cacheprovider", gate, "--specdec-report=rep")
    result.assert_outcomes(passed=120)
    lines = [line for line in result.stdout.lines if "have no entry" in line]
    assert len(lines) == 1
    five = "; ".join(f"test_figures[{i}] output_tok_s" for i in range(1, 6))
    assert f"so nothing gated them: {five} and 114 more (all in rep/report.md and rep/results.json); " \
           f"save them with" in lines[0]
    assert len(lines[0]) < 600
    unreported = pytester.runpytest("-p", "no:cacheprovider", gate)
    assert f"so nothing gated them: {five} and 114 more; save them with" in unreported.stdout.str()


def test_a_list_no_report_records_names_no_report(pytester, no_leftover_engines):
    """7 speculative tests whose reference -k left out: the lossless line said "(all in
    rep/report.md and rep/results.json)", files that do not say which tests went unchecked."""
    project(pytester, methods=("ar", "ddtree"), budgets=(1, 2, 3, 4, 5, 6, 7), prompts=2, max_new_tokens=8)
    result = run(pytester, "-p", "no:randomly", "-k", "ddtree", "--specdec-report=rep")
    result.assert_outcomes(passed=7, deselected=1)
    lines = [line for line in result.stdout.lines if line.startswith("specdec: lossless: not checked:")]
    assert len(lines) == 1 and " and 2 more (their reference ar-tp1 recorded no outputs" in lines[0]
    assert "all in" not in lines[0]
