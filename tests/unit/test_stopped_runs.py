"""Runs cut short by -x, --maxfail or --sw, listings, and -qq, as users run them: the end of
the run says the same with xdist or without, and says only what is so.

pytester projects of recording tests on the embedded engine (no server boots).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

#: Twelve recording tests, the second of which fails: -x stops the run with ten not measured.
FAILING_SECOND = """
import pytest

@pytest.mark.parametrize("n", range(12))
def test_fig(specdec_record, n):
    assert n != 1, "broken"
    specdec_record.metric("my_fig", float(n), "higher")
"""

PROJECT = '[tool.specdec]\nbackend = "embedded"\n'


def _project(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(PROJECT)
    pytester.makepyfile(test_figures=FAILING_SECOND)


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:randomly", "-q", *args)


@pytest.mark.parametrize("dist", [(), ("-n", "2")], ids=["alone", "xdist"])
@pytest.mark.parametrize("stop", ["-x", "--maxfail=1"])
def test_a_run_stopped_by_x_says_how_to_measure_the_rest_with_xdist_or_without(pytester, stop, dist):
    """Without xdist, -x ended the run with no word of the configurations left unmeasured (pytest
    calls it failed); under xdist (which calls it interrupted) the summary said `run interrupted`
    and named --specdec-resume, after an `interrupted: waiting for the xdist workers` line. Both
    now say the run was stopped by -x, and how to go on."""
    _project(pytester)
    result = _run(pytester, "-p", "no:cacheprovider", stop, *dist)
    result.stdout.fnmatch_lines(["specdec: run stopped by -x with * of 12 measurement(s) done, kept in the "
                                 "journal .specdec/journal.jsonl: run it again with --specdec-resume to "
                                 "measure only the rest"])
    result.stdout.no_fnmatch_line("*run interrupted*")
    if dist:  # the wait for the workers as xdist stops: not an interrupt no one gave
        result.stderr.fnmatch_lines(["specdec: stopped by -x: waiting for the xdist workers to end their tests*"])
    result.stderr.no_fnmatch_line("*interrupted: waiting*")


def test_a_maxfail_the_run_did_not_reach_says_nothing_of_a_stop(pytester):
    _project(pytester)
    result = _run(pytester, "-p", "no:cacheprovider", "--maxfail=2")
    result.assert_outcomes(passed=11, failed=1)
    result.stdout.no_fnmatch_line("*run stopped*")
    result.stdout.no_fnmatch_line("*--specdec-resume*")


def test_a_run_stopped_by_stepwise_names_it(pytester):
    """--sw stops at the first failure as -x does (pytest calls it interrupted): the line named
    an interrupt no one gave."""
    _project(pytester)
    result = _run(pytester, "--sw")
    result.stdout.fnmatch_lines(["specdec: run stopped by --sw with 1 of 12 measurement(s) done, *"])
    result.stdout.no_fnmatch_line("*run interrupted*")


#: Twelve recording tests, the second of which records its figure and then fails its own assertion.
RECORDED_THEN_FAILED = """
import pytest

@pytest.mark.parametrize("n", range(12))
def test_fig(specdec_record, n):
    specdec_record.metric("my_fig", float(n), "higher")
    assert n != 1, "broken"
"""


def test_a_stop_counts_as_done_only_the_measurements_a_resume_keeps(pytester):
    """The test -x stops at recorded its figures and then failed: the line counted it done (`2 of
    12`) and said a resume would measure only the rest, though a resume measures a failed test
    again, and a resume stopped there again said the same forever."""
    pytester.makepyprojecttoml(PROJECT)
    pytester.makepyfile(test_figures=RECORDED_THEN_FAILED)
    first = _run(pytester, "-p", "no:cacheprovider", "-x")
    first.stdout.fnmatch_lines(["specdec: run stopped by -x with 1 of 12 measurement(s) done, *"])
    # the resumed test is none of this run's measurements; the one that failed again is not done
    again = _run(pytester, "-p", "no:cacheprovider", "-x", "--specdec-resume")
    again.stdout.fnmatch_lines(["specdec: run stopped by -x with 0 of 11 measurement(s) done, *"])
    # stopped at the first test, which failed after recording: nothing is done, as a fresh run sees it
    pytester.makepyfile(test_figures=RECORDED_THEN_FAILED.replace("n != 1", "n != 0"))
    fresh = _run(pytester, "-p", "no:cacheprovider", "-x")
    fresh.stdout.fnmatch_lines(["specdec: run stopped by -x with none of its 12 measurement(s) done (those "
                                "that finished failed, which a resume measures again), so a run again "
                                "measures them all"])


@pytest.mark.parametrize("flag", [("--specdec-report", "blocker/report"),
                                  ("--specdec-save-baseline", "--specdec-baseline-dir", "blocker/baselines")],
                         ids=["report", "save-baseline"])
@pytest.mark.parametrize("listing", ["--co", "--setup-plan"])
def test_a_listing_lists_where_its_outputs_could_not_be_written(pytester, flag, listing):
    """A listing writes no report and no baseline, but the check that their folders can be
    written stopped it (as in a read-only checkout); a run that measures still stops there.
    `blocker` is a file where a folder is expected: root may write anywhere else."""
    _project(pytester)
    (pytester.path / "blocker").write_text("")
    listed = _run(pytester, "-p", "no:cacheprovider", listing, *flag)
    assert listed.ret == pytest.ExitCode.OK, listed.stdout.str()
    listed.stdout.no_fnmatch_line("*cannot be created*")
    measured = _run(pytester, "-p", "no:cacheprovider", *flag)
    assert measured.ret == pytest.ExitCode.USAGE_ERROR
    measured.stderr.fnmatch_lines(["*blocker* is a file, not a folder*"])


def test_qq_leaves_out_the_progress_lines_and_keeps_the_summary(pytester):
    """pytest's -qq asks for the least output: its letters and the final tally. A `specdec [k/N]`
    line per test is the opposite of that; the summary's table at the end still holds each
    test's figures and verdict, so nothing is lost that -qq did not ask to lose."""
    pytester.makepyprojecttoml(PROJECT)
    pytester.makepyfile(test_figures=FAILING_SECOND.replace('assert n != 1, "broken"', "pass"))
    quiet = _run(pytester, "-p", "no:cacheprovider")
    quiet.stdout.fnmatch_lines(["specdec [[]12/12[]] test_fig[[]11[]]:*"])
    quieter = _run(pytester, "-p", "no:cacheprovider", "-q")  # -q twice: -qq
    assert "specdec [" not in quieter.stdout.str(), quieter.stdout.str()
    quieter.stdout.fnmatch_lines(["*specdec summary*", "config *", "*", "test_fig[[]0[]] *"])
