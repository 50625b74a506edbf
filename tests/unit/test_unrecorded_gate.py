"""A figure a tolerance names but no test records: the header said `e2e_ms +5%` and nothing ever
compared e2e_ms, so a run read as latency-gated that was not. The summary names such a figure,
not one `*` covers, one recorded, nor one a run that left tests out may have missed.

These tests record figures by hand (`specdec_record.metric`), so no server starts.
"""

from __future__ import annotations

import pytest

TESTS = """
import pytest

@pytest.mark.parametrize("case", ["alpha", "beta"])
def test_figures(specdec_record, case):
    specdec_record.metric("output_tok_s", 100.0)
    if case == "beta":
        specdec_record.metric("e2e_ms", 20.0)
"""

LINE = ("specdec: gate: 1 figure(s) the gate names were recorded by no test of this run, so nothing gated "
        "them: e2e_ms +5% (command line); record each with specdec_record.metric(NAME, value) in the test "
        "meant to measure it, or drop it from --specdec-compare-fail")


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_figures=TESTS.replace('"e2e_ms"', '"tpot_ms"'))
    return pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", *args)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_named_figure_no_test_recorded_is_said_in_the_summary(pytester, workers):
    result = _run(pytester, "--specdec-compare-fail", "output_tok_s:5%,e2e_ms:5%", *workers)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([LINE])


def test_the_layer_a_figure_is_named_in_is_the_one_to_drop_it_from(pytester):
    pytester.makepyprojecttoml('[tool.specdec.tolerances]\nverify_us = "10%"\n'
                               '[tool.pytest.ini_options]\nspecdec_compare_fail = "e2e_ms:5%"\n')
    result = _run(pytester)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "specdec: gate: 2 figure(s) the gate names were recorded by no test of this run, so nothing gated "
        "them: e2e_ms +5% (ini), verify_us +10% (pyproject.toml [[]tool.specdec[]]); record each with "
        "specdec_record.metric(NAME, value) in the test meant to measure it, or drop it from "
        "ini specdec_compare_fail and pyproject.toml [[]tool.specdec[]]'s tolerances"])


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_figure_one_test_records_is_not_said(pytester, workers):
    """beta records e2e_ms and alpha does not: a figure recorded by any test of the run is gated."""
    pytester.makepyfile(test_figures=TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "--specdec-compare-fail", "output_tok_s:5%,e2e_ms:5%",
                                *workers)
    result.assert_outcomes(passed=2)
    assert "recorded by no test" not in result.stdout.str()


def test_a_wildcard_names_no_figure(pytester):
    result = _run(pytester, "--specdec-compare-fail", "*:5%")
    result.assert_outcomes(passed=2)
    assert "recorded by no test" not in result.stdout.str()
    # a name ungated by a higher layer's `*:off` is no claim either
    pytester.makepyprojecttoml('[tool.specdec.tolerances]\ne2e_ms = "5%"\n')
    result = _run(pytester, "--specdec-compare-fail", "*:off")
    assert "recorded by no test" not in result.stdout.str()


@pytest.mark.parametrize("narrowed", [["-k", "alpha"], ["--deselect", "test_figures.py::test_figures[beta]"]],
                         ids=["k", "deselect"])
def test_a_run_that_left_out_tests_does_not_say_it(pytester, narrowed):
    """The left-out test may be the one that records it: beta records e2e_ms, and a run of alpha alone
    must not say nothing does."""
    pytester.makepyfile(test_figures=TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "--specdec-compare-fail",
                                "output_tok_s:5%,e2e_ms:5%", *narrowed)
    result.assert_outcomes(passed=1, deselected=1)
    assert "recorded by no test" not in result.stdout.str()


@pytest.mark.parametrize("stop", [[], ["-x"]], ids=["failed-after-recording", "stopped-by-x"])
def test_a_run_whose_test_failed_before_recording_it_does_not_say_it(pytester, stop):
    """beta failed after its first figure, before e2e_ms (and -x ran no test after it): it may record it."""
    pytester.makepyfile(test_figures="""
import pytest

@pytest.mark.parametrize("case", ["alpha", "beta", "gamma"])
def test_figures(specdec_record, case):
    specdec_record.metric("output_tok_s", 100.0)
    assert case != "beta"
    if case == "beta":
        specdec_record.metric("e2e_ms", 20.0)
""")
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "--specdec-compare-fail",
                                "output_tok_s:5%,e2e_ms:5%", *stop)
    result.assert_outcomes(passed=1 if stop else 2, failed=1)
    assert "recorded by no test" not in result.stdout.str()
