"""The gate as users meet it: unknown figures refused, tolerances from every layer applied, the
gate in force in the header, noisy verdicts, and tests compared but not gated said so.

These tests record figures by hand (`specdec_record.metric`), so no server starts; the engine's
own figures are covered in test_bench_flow.py.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import re
from pathlib import Path

import pytest

from lock_support import held_by_another_process
from pytest_specdec.baselines import VERSION

MEASURED = """from pytest_specdec.metrics import RequestRecord, WorkloadResult, summarize


def measured(name):
    records = tuple(RequestRecord(index=i, status=200, finish_reason="length", prompt_tokens=10,
                                  completion_tokens=8, ttft_ms=5.0, e2e_ms=20.0, chunks=8)
                    for i in range(2))
    return summarize(WorkloadResult(name, "http://127.0.0.1:1", 1, records, wall_s=0.1))
"""

RECORDING_TEST = """
import os

def test_figures(specdec_record):
    value = float(os.environ.get("TOK_S", "100"))
    spread = float(os.environ.get("SPREAD", "0"))
    specdec_record.metric("output_tok_s", value, spread=spread)
    specdec_record.metric("tpot_ms", float(os.environ.get("TPOT_MS", "2.0")))
"""


def save_then_run(pytester: pytest.Pytester, monkeypatch, *args: str, tok_s: float = 100.0,
                  spread: float = 0.0, tpot_ms: float = 2.0) -> pytest.RunResult:
    """Save a baseline of 100 tok/s and 2 ms/token, then run with the figures given."""
    pytester.makepyfile(test_figures=RECORDING_TEST)
    monkeypatch.setenv("SPREAD", str(spread))
    pytester.runpytest("-p", "no:cacheprovider", "--specdec-save-baseline").assert_outcomes(passed=1)
    monkeypatch.setenv("TOK_S", str(tok_s))
    monkeypatch.setenv("TPOT_MS", str(tpot_ms))
    return pytester.runpytest("-p", "no:cacheprovider", "-rA", *args)


def test_a_spread_or_sample_count_no_figure_can_have_fails_where_it_is_recorded(pytester):
    pytester.makepyfile(test_figures="""
def test_spread(specdec_record):
    specdec_record.metric("my_fig", 1.0, "higher", spread=-1)

def test_samples(specdec_record):
    specdec_record.metric("my_fig", 1.0, "higher", samples=0)
""")
    result = pytester.runpytest("-p", "no:cacheprovider", "--specdec-save-baseline")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*ValueError: metric 'my_fig': spread -1 must be a finite number >= 0*",
                                 "*ValueError: metric 'my_fig': samples 0 must be an integer >= 1*"],
                                consecutive=False)
    assert not (pytester.path / "baselines" / "cpu.json").exists()


def test_a_figure_no_tolerance_could_name_fails_where_it_is_recorded(pytester):
    """A name with a space or none at all, and a value of True or a string, were recorded and
    saved: no --specdec-compare-fail or tolerances key can spell such a name, so it was never
    gated, and its JUnit property read `specdec.` or `specdec.hit rate`."""
    pytester.makepyfile(test_figures="""
import pytest

@pytest.mark.parametrize("name", ["hit rate", "", "2x", "a:b"])
def test_name(specdec_record, name):
    specdec_record.metric(name, 1.0, "higher")

@pytest.mark.parametrize("value", [True, "1e3"])
def test_value(specdec_record, value):
    specdec_record.metric("my_fig", value, "higher")
""")
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "--specdec-save-baseline")
    result.assert_outcomes(failed=6)
    result.stdout.fnmatch_lines(["*ValueError: metric 'hit rate' is not a metric name: letters, digits, _ and ., "
                                 "not starting with a digit*",
                                 "*ValueError: metric '' is not a metric name*",
                                 "*ValueError: metric '2x' is not a metric name*",
                                 "*ValueError: metric 'a:b' is not a metric name*",
                                 "*ValueError: metric 'my_fig': value True is not a number*",
                                 "*ValueError: metric 'my_fig': value '1e3' is not a number*"],
                                consecutive=False)
    assert not (pytester.path / "baselines" / "cpu.json").exists()


def test_a_second_workload_measurement_in_one_test_fails_where_it_is_recorded(pytester):
    """A test that recorded two workloads kept only the second's figures (the first's replaced
    without a word) and then failed on pytest-benchmark's "FixtureAlreadyUsed ... Fixture can only
    be used once", which named neither the recorder nor the fix."""
    pytester.makepyfile(test_figures=f"""
{MEASURED}

def test_two(specdec_record):
    specdec_record.result(measured("chat"))
    specdec_record.result(measured("code"))
""")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ValueError: specdec_record holds one workload measurement per test, and "
                                 "test_two has recorded one already (workload chat); a second would replace its "
                                 "figures: measure one workload per test*"])


@pytest.mark.parametrize("where", ["cli", "table"])
def test_an_unknown_figure_is_a_usage_error_listing_the_valid_names(pytester, where):
    pytester.makepyfile("def test_x(): pass")
    if where == "cli":
        result = pytester.runpytest("--specdec-compare-fail", "tok_s:5%")
        prefix = "--specdec-compare-fail"
    else:
        pytester.makepyprojecttoml('[tool.specdec.tolerances]\ntok_s = "5%"\n')
        result = pytester.runpytest()
        prefix = "pyproject.toml [[]tool.specdec.tolerances[]]"
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: pytest-specdec: {prefix}*unknown metric 'tok_s'; valid names: "
                                 "accept_length, accept_rate, e2e_ms, output_tok_s, tpot_ms, ttft_ms, "
                                 "verify_us (or * for all); declare a metric of your own, with the way it improves "
                                 "(higher or lower), in [[]tool.specdec.metrics[]]"])


CUSTOM_TEST = """
import os

def test_custom(specdec_record):
    specdec_record.metric("kv_hit_rate", float(os.environ.get("HIT", "0.9")))
"""


def test_a_declared_metric_is_gated_by_name_and_records_without_a_direction(pytester, monkeypatch):
    """A figure of the user's own could be gated only through `*`: naming it was an unknown metric."""
    pytester.makepyprojecttoml('[tool.specdec.metrics]\nkv_hit_rate = "higher"\n'
                               '[tool.specdec.tolerances]\nkv_hit_rate = "5%"\n')
    pytester.makepyfile(test_custom=CUSTOM_TEST)
    pytester.runpytest("-p", "no:cacheprovider", "--specdec-save-baseline").assert_outcomes(passed=1)
    monkeypatch.setenv("HIT", "0.5")
    result = pytester.runpytest("-p", "no:cacheprovider", "-rA")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*specdec: gate *kv_hit_rate -5% (pyproject.toml [[]tool.specdec[]])*",
                                 "*kv_hit_rate 0.5 < baseline 0.9 -5% (-44.4%)*"], consecutive=False)
    # a misspelt name is still refused, its message naming the declared one
    result = pytester.runpytest("-p", "no:cacheprovider", "--specdec-compare-fail", "kv_hitrate:5%")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown metric 'kv_hitrate'; did you mean 'kv_hit_rate'? (else declare *"])


@pytest.mark.parametrize("table, problem", [
    ('kv_hit_rate = "up"', "[[]tool.specdec.metrics[]] key 'kv_hit_rate': 'up' is not a direction; write "
                           '"higher" (bigger is better) or "lower"'),
    ('ttft_ms = "lower"', "[[]tool.specdec.metrics[]] key 'ttft_ms': ttft_ms is a built-in metric (lower is "
                          "better), whose direction is known; remove it from this table"),
    ('"9lives" = "higher"', "[[]tool.specdec.metrics[]] key '9lives': '9lives' is not a metric name*"),
])
def test_a_bad_metrics_table_is_a_usage_error(pytester, table, problem):
    pytester.makepyprojecttoml(f"[tool.specdec.metrics]\n{table}\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: pytest-specdec: pyproject.toml {problem}"])


CASE_TWIN = ("metric 'Output_tok_s' differs from the built-in 'output_tok_s' only in case, so the two would be "
             "misread for each other in every table and gate rule; write 'output_tok_s' for that figure, or "
             "give yours a name of its own (e.g. my_output_tok_s)")


@pytest.mark.parametrize("table, twin", [
    ('Output_tok_s = "higher"', "key 'Output_tok_s': " + CASE_TWIN),
    ('kv_hit = "higher"\nKV_hit = "lower"', "key 'KV_hit': metric 'KV_hit' differs from the declared 'kv_hit' "
                                            "only in case*e.g. my_kv_hit)"),
], ids=["built-in", "declared"])
def test_a_declared_metric_named_as_another_but_for_case_is_a_usage_error(pytester, table, twin):
    """`Output_tok_s` beside the built-in `output_tok_s` was accepted without a word: two figures
    whose names differ only in case, misread for each other in every table and gate rule."""
    pytester.makepyprojecttoml(f"[tool.specdec.metrics]\n{table}\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: pytest-specdec: pyproject.toml [[]tool.specdec.metrics[]] {twin}"])


def test_a_figure_recorded_as_another_but_for_case_fails_where_it_is_recorded(pytester):
    """`metric("Output_tok_s", ..., "higher")` was saved beside the built-in `output_tok_s`; a
    tolerance spelt so still says which figure was meant."""
    pytester.makeini("[pytest]\nspecdec_compare_fail = output_tok_s:5%\n")
    pytester.makepyfile(test_figures="""
def test_twin(specdec_record):
    specdec_record.metric("Output_tok_s", 1.0, "higher")

def test_undirected_twin(specdec_record):
    specdec_record.metric("Output_tok_s", 1.0)
""")
    result = pytester.runpytest("-p", "no:cacheprovider", "--specdec-save-baseline")
    result.assert_outcomes(failed=2)
    # each traceback's `E` line (the short summary repeats it whole where CI is set: no truncation)
    assert sum(line.startswith("E ") and f"ValueError: {CASE_TWIN}" in line for line in result.stdout.lines) == 2
    assert not (pytester.path / "baselines" / "cpu.json").exists()
    result = pytester.runpytest("-p", "no:cacheprovider", "--specdec-compare-fail", "Output_tok_s:5%")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown metric 'Output_tok_s'; did you mean 'output_tok_s'? (else declare *"])


def test_a_direction_against_the_known_one_fails_where_it_is_recorded(pytester):
    pytester.makepyprojecttoml('[tool.specdec.metrics]\nkv_hit_rate = "higher"\n')
    pytester.makepyfile(test_figures="""
def test_declared(specdec_record):
    specdec_record.metric("kv_hit_rate", 0.9, "lower")

def test_built_in(specdec_record):
    specdec_record.metric("ttft_ms", 10.0, "higher")
""")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*ValueError: metric 'kv_hit_rate': direction 'lower', but 'higher' is "
                                 "better for kv_hit_rate; leave the direction out*",
                                 "*ValueError: metric 'ttft_ms': direction 'higher', but 'lower' is better*"],
                                consecutive=False)


def test_the_tolerances_table_gates_without_any_option(pytester, monkeypatch):
    pytester.makepyprojecttoml('[tool.specdec.tolerances]\noutput_tok_s = "10%"\n')
    result = save_then_run(pytester, monkeypatch, tok_s=2.0)  # -98 %
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*regression against cpu.json:", "*output_tok_s 2.00 < baseline 100.0 -10% (-98.0%)"])


def test_the_command_line_beats_the_table_per_figure(pytester, monkeypatch):
    pytester.makepyprojecttoml('[tool.specdec.tolerances]\noutput_tok_s = "10%"\ntpot_ms = "10%"\n')
    result = save_then_run(pytester, monkeypatch, "--specdec-compare-fail", "output_tok_s:off",
                           tok_s=2.0, tpot_ms=3.0)
    result.assert_outcomes(failed=1)  # tpot_ms still gated by the table; output_tok_s turned off
    out = result.stdout.str()
    assert "tpot_ms 3.00 > baseline 2.00 +10% (+50.0%)" in out
    assert "output_tok_s 2.00 < baseline 100.0 (-98.0%, not gated)" in out


def test_a_wildcard_off_on_the_command_line_ungates_what_the_table_names(pytester, monkeypatch):
    pytester.makepyprojecttoml('[tool.specdec.tolerances]\noutput_tok_s = "10%"\ntpot_ms = "10%"\n')
    result = save_then_run(pytester, monkeypatch, "--specdec-compare-fail", "*:off", tok_s=2.0, tpot_ms=3.0)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "specdec: gate not gated: output_tok_s, accept_length, *",
        "*specdec: 1 test(s) compared with cpu.json but not gated: no tolerance applies to any of their "
        "figures (gate off: [*]:off (command line))"], consecutive=False)


def test_figures_turned_off_on_purpose_are_not_advised_to_be_gated(pytester, monkeypatch):
    """With output_tok_s:off and tpot_ms:off beside a gate in force, the summary advised "add
    theirs, or * for all": gating the very figures the user had just turned off."""
    result = save_then_run(pytester, monkeypatch, "--specdec-compare-fail",
                           "accept_length:0,output_tok_s:off,tpot_ms:off", tok_s=2.0)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "specdec: 1 test(s) compared with cpu.json but not gated: no tolerance applies to any of their "
        "figures (gate off: output_tok_s:off, tpot_ms:off (command line))"])
    assert "add theirs" not in result.stdout.str()
    # one turned off, the other named nowhere: the advice is for that one alone
    result = pytester.runpytest("-p", "no:cacheprovider", "--specdec-compare-fail", "accept_length:0,output_tok_s:off")
    result.stdout.fnmatch_lines([
        "specdec: 1 test(s) compared with cpu.json but not gated: no tolerance applies to any of their "
        "figures (the gate in force does not name tpot_ms; add it, or [*] for all)"])


def test_a_figure_of_ones_own_recorded_the_other_way_names_a_fix_that_works(pytester):
    """The advice was to re-create the baseline with --specdec-save-baseline, but a saving run
    compares first, fails the test and saves no failed test's figures: the advice looped."""
    pytester.makepyfile(test_x="def test_fig(specdec_record):\n    specdec_record.metric('my_fig', 1.0, 'higher')\n")
    pytester.runpytest("-p", "no:cacheprovider", "--specdec-save-baseline").assert_outcomes(passed=1)
    pytester.makepyfile(test_x="def test_fig(specdec_record):\n    specdec_record.metric('my_fig', 1.0, 'lower')\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--specdec-save-baseline")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*baseline file */baselines/cpu.json: test_fig my_fig: the entry says 'higher' is "
                                 "better, but the test records it as 'lower'-is-better; if the change is meant, "
                                 "delete that entry and save the figure again with --specdec-save-baseline, else "
                                 "record it as 'higher'"])
    baseline = pytester.path / "baselines" / "cpu.json"
    doc = json.loads(baseline.read_text())
    del doc["entries"]["test_fig"]["my_fig"]
    baseline.write_text(json.dumps(doc))
    pytester.runpytest("-p", "no:cacheprovider", "--specdec-save-baseline").assert_outcomes(passed=1)
    assert json.loads(baseline.read_text())["entries"]["test_fig"]["my_fig"]["direction"] == "lower"


def test_the_header_prints_the_gate_in_force_for_each_figure(pytester):
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\nspecdec_compare_fail = "tpot_ms:20%"\n'
                               '[tool.specdec.tolerances]\noutput_tok_s = "10%"\naccept_length = 0\n')
    pytester.makepyfile("def test_x(specdec_record): pass")  # the header's details follow collection
    result = pytester.runpytest("--specdec-compare-fail", "ttft_ms:30%")
    result.stdout.fnmatch_lines([
        "specdec: gate output_tok_s -10% (pyproject.toml [[]tool.specdec[]]); accept_length -0 "
        "(pyproject.toml [[]tool.specdec[]]); ttft_ms +30% (command line); tpot_ms +20% (ini); "
        "not gated: accept_rate, e2e_ms, verify_us; timing figures per second the server had a CPU; "
        "noisy passes"])


def test_compared_but_not_gated_is_said_in_the_summary(pytester, monkeypatch):
    result = save_then_run(pytester, monkeypatch, tok_s=2.0)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "test_figures*not gated",
        "specdec: 1 test(s) compared with cpu.json but not gated: no tolerance applies to any of their "
        "figures (set --specdec-compare-fail or [[]tool.specdec.tolerances[]])"])
    # with a gate in force that names none of its figures, the advice is not to set one
    result = pytester.runpytest("-p", "no:cacheprovider", "--specdec-compare-fail", "accept_length:0")
    result.stdout.fnmatch_lines([
        "specdec: 1 test(s) compared with cpu.json but not gated: no tolerance applies to any of their "
        "figures (the gate in force names none of their figures; add theirs, or * for all)"])


def test_gated_figures_with_nothing_to_compare_with_are_said_not_passed_as_ok(pytester, monkeypatch):
    """A misspelt figure or test in the baseline file, or a misspelt baseline folder, left a gated
    run comparing nothing and saying "ok" or nothing at all."""
    save_then_run(pytester, monkeypatch).assert_outcomes(passed=1)
    baseline = pytester.path / "baselines" / "cpu.json"
    doc = json.loads(baseline.read_text())
    figures = doc["entries"]["test_figures"]
    figures["output_tok_sec"] = figures.pop("output_tok_s")
    baseline.write_text(json.dumps(doc))
    result = pytester.runpytest("-p", "no:cacheprovider", "-rA", "--specdec-compare-fail", "output_tok_s:5%")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "test_figures*new baseline",
        "specdec: gate: 1 gated figure(s) have no entry in cpu.json, so nothing gated them: test_figures "
        "output_tok_s (its entry has no output_tok_s; did you mean 'output_tok_sec'?); save them with "
        "--specdec-save-baseline, or fix a misspelt name in the file"])
    junit = pytester.path / "j.xml"
    result = pytester.runpytest("-p", "no:cacheprovider", "-rA", "--specdec-compare-fail", "output_tok_s:5%",
                                "--specdec-baseline-dir=baseline", f"--junitxml={junit}")
    result.stdout.fnmatch_lines([
        "specdec: gate: no baseline file at *baseline/cpu.json: the baseline folder *baseline does not exist "
        "(set by --specdec-baseline-dir), so none of the 1 gated figure(s) was compared; save one with "
        "--specdec-save-baseline (or point --specdec-baseline-dir at yours)"])
    assert 'name="specdec.output_tok_s.verdict" value="new"' in junit.read_text()


def rename_in_baseline(pytester: pytest.Pytester, test_id: str | None = None, figure: str | None = None) -> None:
    """Misspell a test id (to `test_id`) or the output_tok_s figure (to `figure`) in the saved file."""
    baseline = pytester.path / "baselines" / "cpu.json"
    doc = json.loads(baseline.read_text())
    if figure is not None:
        doc["entries"]["test_figures"][figure] = doc["entries"]["test_figures"].pop("output_tok_s")
    if test_id is not None:
        doc["entries"][test_id] = doc["entries"].pop("test_figures")
    baseline.write_text(json.dumps(doc))


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
@pytest.mark.parametrize("misspelt, meant", [
    ({"figure": "output_tok_sec"}, "test_figures output_tok_s: its entry has no output_tok_s; did you mean "
                                   "'output_tok_sec'?"),
    ({"test_id": "test_figure"}, "test_figures output_tok_s: no entry for this test; did you mean 'test_figure'?"),
])
def test_require_baseline_fails_a_gated_figure_with_no_entry_naming_the_likely_one(
        pytester, monkeypatch, workers, misspelt, meant):
    """A misspelt name in the baseline file made its test `new baseline`: green. With
    --specdec-require-baseline it fails, in each xdist worker as in one process."""
    save_then_run(pytester, monkeypatch).assert_outcomes(passed=1)
    rename_in_baseline(pytester, **misspelt)
    gate = ["--specdec-compare-fail", "output_tok_s:5%"]
    result = pytester.runpytest("-p", "no:cacheprovider", "-rA", *gate, *workers)
    result.assert_outcomes(passed=1)  # without the option: green, the summary names the likely entry
    result.stdout.fnmatch_lines([f"specdec: gate: 1 gated figure(s) have no entry in cpu.json, so nothing gated "
                                 f"them: test_figures output_tok_s ({meant.split(': ', 1)[1]}); save them*"])
    result = pytester.runpytest("-p", "no:cacheprovider", "-rA", *gate, "--specdec-require-baseline", *workers)
    result.assert_outcomes(failed=1)
    # under xdist the header's details come only for tests of the matrix
    header = [] if workers else ["*settings *require_baseline=true (command line)*",
                                 "*specdec: gate *; a figure without a baseline entry fails"]
    result.stdout.fnmatch_lines([
        *header,
        "*no baseline to compare with in */baselines/cpu.json (required by --specdec-require-baseline); "
        "fix a misspelt name in the file, or save the figures with --specdec-save-baseline:",
        f"*{meant}"], consecutive=False)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_deselected_tests_entry_is_never_suggested_for_another(pytester, workers):
    """test_figures[alpha] and [beta] were deselected by -k, so their entries are theirs, not misspellings
    of test_figures[gamma]'s; an entry no collected test stands for ([gamma2]) is still suggested, but not
    one that holds no output_tok_s ([gamma_]): renaming it would give the figure nothing to compare with."""
    pytester.makepyfile(test_figures="""
import pytest

@pytest.mark.parametrize("case", ["alpha", "beta", "gamma"])
def test_figures(specdec_record, case):
    specdec_record.metric("output_tok_s", 100.0)
""")
    pytester.runpytest("-p", "no:cacheprovider", "--specdec-save-baseline", "-k", "alpha or beta").assert_outcomes(passed=2)
    baseline = pytester.path / "baselines" / "cpu.json"
    doc = json.loads(baseline.read_text())
    doc["entries"]["test_figures[gamma2]"] = doc["entries"]["test_figures[alpha]"]
    doc["entries"]["test_figures[gamma_]"] = {"my_fig": doc["entries"]["test_figures[alpha]"]["output_tok_s"]}
    baseline.write_text(json.dumps(doc))
    gate = ["--specdec-compare-fail", "output_tok_s:5%", "-k", "gamma", *workers]
    result = pytester.runpytest("-p", "no:cacheprovider", "-rA", *gate)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["specdec: gate: 1 gated figure(s) have no entry in cpu.json, so nothing "
                                 "gated them: test_figures[[]gamma[]] output_tok_s (no entry for this test; "
                                 "did you mean 'test_figures[[]gamma2[]]'?); save them*"])
    result = pytester.runpytest("-p", "no:cacheprovider", "-rA", *gate, "--specdec-require-baseline")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_figures[[]gamma[]] output_tok_s: no entry for this test; did you mean "
                                 "'test_figures[[]gamma2[]]'?"])


def test_a_renamed_workload_names_each_tests_own_old_entry_once(pytester):
    """A workload renamed since the save (chat -> chats) leaves every test without its entry: each
    test's figures are named together, with its own old entry alone, not the other
    configurations' it also resembles (the summary offered all three for each of its figures)."""
    test = """
import pytest

@pytest.mark.parametrize("case", ["ar-{w}", "dflash-{w}", "ddtree-{w}"])
def test_figures(specdec_record, case):
    specdec_record.metric("output_tok_s", 100.0)
    specdec_record.metric("tpot_ms", 2.0)
"""
    pytester.makepyfile(test_figures=test.format(w="chat"))
    pytester.runpytest("-p", "no:cacheprovider", "--specdec-save-baseline").assert_outcomes(passed=3)
    pytester.makepyfile(test_figures=test.format(w="chats"))
    gate = ["--specdec-compare-fail", "output_tok_s:5%,tpot_ms:5%"]
    result = pytester.runpytest("-p", "no:cacheprovider", *gate)
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([
        "specdec: gate: 6 gated figure(s) have no entry in cpu.json, so nothing gated them: "
        "test_figures[[]ar-chats[]] output_tok_s, tpot_ms (no entry for this test; did you mean "
        "'test_figures[[]ar-chat[]]'?); test_figures[[]dflash-chats[]] output_tok_s, tpot_ms (no entry for "
        "this test; did you mean 'test_figures[[]dflash-chat[]]'?); test_figures[[]ddtree-chats[]] "
        "output_tok_s, tpot_ms (no entry for this test; did you mean 'test_figures[[]ddtree-chat[]]'?); "
        "save them*"])
    # a deselected test without an entry still keeps its own old entry to itself
    result = pytester.runpytest("-p", "no:cacheprovider", *gate, "-k", "ar-", "--specdec-require-baseline")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["test_figures[[]ar-chats[]] output_tok_s: no entry for this test; "
                                 "did you mean 'test_figures[[]ar-chat[]]'?"])


LEFTOVER = ("specdec: baseline: cpu.json holds the entries of {n} test(s) this run did not collect, though it "
            "collected their files whole: {shown} (a configuration or workload removed from the matrix, or a "
            "test renamed); nothing compares with them: if they are gone for good, delete their keys from "
            "\"entries\" in baselines/cpu.json (a save keeps the entries it does not write)")


def test_entries_of_configurations_removed_from_the_matrix_are_named_after_a_whole_run(pytester, monkeypatch):
    """A configuration removed from the matrix left its entries in the baseline file without a word,
    compared with nothing. A run that collected the files of their tests whole names them; under
    any selection it cannot know the tests are gone, and says nothing."""
    pytester.makepyfile(test_figures="""
import os
import pytest

@pytest.mark.parametrize("case", os.environ["CASES"].split(","))
def test_figures(specdec_record, case):
    specdec_record.metric("output_tok_s", 100.0)
""", test_other="def test_other(specdec_record):\n    specdec_record.metric('output_tok_s', 1.0)\n")
    budgets = ("ddtree-b16", "ddtree-b2", "ddtree-b32", "ddtree-b4", "ddtree-b64", "ddtree-b8")  # as sorted
    monkeypatch.setenv("CASES", ",".join(("ar", "dflash", *budgets)))
    pytester.runpytest("-p", "no:cacheprovider", "--specdec-save-baseline").assert_outcomes(passed=9)
    monkeypatch.setenv("CASES", "ar,dflash")
    shown = ", ".join(f"test_figures[[]{case}[]]" for case in budgets)
    for args in ((), ("test_figures.py",), ("--specdec-save-baseline",)):  # a save keeps them: said too
        result = pytester.runpytest("-p", "no:cacheprovider", *args)
        assert result.ret == pytest.ExitCode.OK
        result.stdout.fnmatch_lines([LEFTOVER.format(n=6, shown=shown)])  # one past 5: listed whole
    monkeypatch.setenv("CASES", "ar")
    result = pytester.runpytest("-p", "no:cacheprovider")
    # the first 5, as every end-of-run line that names tests lists them (table_fold.named)
    shown = ", ".join(f"test_figures[[]{case}[]]" for case in budgets[:5])  # dflash sorts last
    result.stdout.fnmatch_lines([LEFTOVER.format(n=7, shown=shown + " and 2 more")])
    for args in (("-k", "ar"), ("-m", "not slow"), ("--deselect", "test_other.py::test_other"),
                 ("test_figures.py::test_figures",), ("test_other.py",)):
        result = pytester.runpytest("-p", "no:cacheprovider", *args)
        assert result.ret == pytest.ExitCode.OK, args
        assert "this run did not collect" not in result.stdout.str(), args


def test_require_baseline_names_a_baseline_folder_that_is_not_there_and_where_it_was_set(pytester, monkeypatch):
    save_then_run(pytester, monkeypatch).assert_outcomes(passed=1)
    pytester.makepyprojecttoml('[tool.specdec]\nbaseline_dir = "baseline"\ncompare_fail = "output_tok_s:5%"\n'
                               '[tool.pytest.ini_options]\nspecdec_require_baseline = true\n')
    result = pytester.runpytest("-p", "no:cacheprovider", "-rA")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*no baseline to compare with in */baseline/cpu.json (required by ini specdec_require_baseline): the "
        "baseline folder */baseline does not exist (set by pyproject.toml [[]tool.specdec[]] key 'baseline_dir'), "
        "so nothing gated test_figures output_tok_s; save a baseline with --specdec-save-baseline"])
    (pytester.path / "baseline").write_text("")  # nothing can be compared nor saved: the gated run stops
    result = pytester.runpytest("-p", "no:cacheprovider", "-rA")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*: baseline folder */baseline is a file, so no baseline can be read from it or "
                                 "saved into it; point pyproject.toml [[]tool.specdec[]] key 'baseline_dir' at a folder"])
    (pytester.path / "baseline").unlink()
    (pytester.path / "baseline").mkdir()
    (pytester.path / "baselines" / "cpu.json").rename(pytester.path / "baseline" / "cpus.json")
    result = pytester.runpytest("-p", "no:cacheprovider", "-rA")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*the baseline folder */baseline (set by pyproject.toml [[]tool.specdec[]] key 'baseline_dir') holds "
        "no cpu.json (did you mean 'cpus.json'?), so nothing gated*"])


def test_another_hardwares_baseline_file_is_not_offered_as_the_one_meant(pytester, monkeypatch):
    """A run on one GPU beside a baseline saved on two read 'holds no simulated-sm_90-x1.json (did you
    mean 'simulated-sm_90-x2.json'?)': a file whose figures do not transfer, which a load refuses."""
    pytester.makepyfile(test_figures=RECORDING_TEST)
    monkeypatch.setenv("SPREAD", "0")
    two = ["--specdec-arch=sm_90", "--specdec-gpus=2"]
    pytester.runpytest("-p", "no:cacheprovider", "--specdec-save-baseline", *two).assert_outcomes(passed=1)
    gate = ["-p", "no:cacheprovider", "--specdec-compare-fail", "output_tok_s:5%", "--specdec-arch=sm_90"]
    result = pytester.runpytest(*gate, "--specdec-gpus=1")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "specdec: gate: no baseline file at */simulated-sm_90-x1.json: * holds no simulated-sm_90-x1.json "
        "(simulated-sm_90-x2.json is another hardware's, whose figures do not transfer to simulated-sm_90-x1), "
        "so none of the 1 gated figure(s) was compared*"])
    assert "did you mean" not in result.stdout.str()


def test_require_baseline_suggests_no_entry_that_a_test_of_this_run_records(pytester, monkeypatch):
    """Every new configuration of a matrix is a close match of the others: an entry its own test
    records is not the one a new test meant."""
    pytester.makepyfile(test_figures=RECORDING_TEST + "\n\ntest_figures_2 = test_figures\n")
    pytester.runpytest("-p", "no:cacheprovider", "--specdec-save-baseline", "-k", "not test_figures_2"
                       ).assert_outcomes(passed=1)
    result = pytester.runpytest("-p", "no:cacheprovider", "-rA", "--specdec-compare-fail", "output_tok_s:5%",
                                "--specdec-require-baseline")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_figures_2 output_tok_s: no entry for this test"])
    assert "did you mean" not in result.stdout.str()


def test_require_baseline_does_not_fail_the_figures_a_saving_run_saves(pytester):
    pytester.makepyfile(test_figures=RECORDING_TEST)
    args = ("-p", "no:cacheprovider", "--specdec-compare-fail", "output_tok_s:5%", "--specdec-require-baseline")
    result = pytester.runpytest(*args, "--specdec-save-baseline")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*specdec: gate *; a figure without a baseline entry would fail, but this run "
                                 "saves them"])
    pytester.runpytest(*args).assert_outcomes(passed=1)  # and the next run has them


def test_a_figure_no_tolerance_gates_says_so_in_junit(pytester, monkeypatch):
    """Its verdict once read "regression" there, on a green test."""
    junit = pytester.path / "j.xml"
    save_then_run(pytester, monkeypatch, "--specdec-compare-fail", "tpot_ms:10%", f"--junitxml={junit}",
                  tok_s=2.0).assert_outcomes(passed=1)
    xml = junit.read_text()
    assert 'name="specdec.output_tok_s.verdict" value="not gated"' in xml
    assert 'name="specdec.tpot_ms.verdict" value="unchanged"' in xml


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_junit_carries_figures_and_verdicts_but_not_the_whole_result(pytester, monkeypatch, workers):
    """The property carrying a whole result to the controller, outputs included, went into JUnit
    too: kilobytes a test."""
    junit = pytester.path / "j.xml"
    result = save_then_run(pytester, monkeypatch, "--specdec-compare-fail", "tpot_ms:10%",
                           f"--junitxml={junit}", *workers)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["test_figures  -  *100.0  *2.00  ok"])  # the summary still had the result
    xml = junit.read_text()
    assert 'name="specdec.tpot_ms.verdict" value="unchanged"' in xml and 'name="specdec.output_tok_s"' in xml
    assert 'name="specdec.verdict" value="ok"' in xml  # the test's, as the README and a merge's junit.xml give it
    assert "specdec_result" not in xml


def test_a_noisy_figure_passes_unless_strict_noise(pytester, monkeypatch):
    # -20 % against a 5 % tolerance, but both runs' spreads (20) hide it: 2 * hypot(20, 20) = 57
    result = save_then_run(pytester, monkeypatch, "--specdec-compare-fail", "output_tok_s:5%",
                           "--junitxml=out.xml", tok_s=80.0, spread=20.0)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["test_figures*noisy", "*output_tok_s 80.00 < baseline 100.0 -5% (-20.0%): "
                                 "too noisy to decide"])
    assert 'name="specdec.output_tok_s.verdict" value="noisy"' in (pytester.path / "out.xml").read_text()
    strict = pytester.runpytest("-p", "no:cacheprovider", "--specdec-compare-fail", "output_tok_s:5%",
                                "--specdec-strict-noise")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(["*output_tok_s 80.00 < baseline 100.0 -5% (-20.0%): too noisy to decide"])


def gate_power_script():
    """scripts/gate_power.py as a module: it is run by path, not installed."""
    path = Path(__file__).resolve().parents[2] / "scripts" / "gate_power.py"
    spec = importlib.util.spec_from_file_location("gate_power", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gate_power_reads_the_red_and_noisy_verdicts_a_run_writes(pytester, monkeypatch):
    """gate_power.py counts detections from the JUnit failure messages and noisy figures from the
    JUnit properties: had either format moved, it would print detected=0/N (or no noisy figure)
    for a gate that works, and nothing else checks its readers against the plugin's output."""
    script = gate_power_script()
    red = save_then_run(pytester, monkeypatch, "--specdec-compare-fail", "output_tok_s:10%,tpot_ms:10%",
                        "--junitxml=red.xml", tok_s=2.0, tpot_ms=3.0)
    red.assert_outcomes(failed=1)
    messages, counts = script.verdicts(pytester.path / "red.xml")
    assert sorted(script.regressed_figures(messages)) == ["output_tok_s", "tpot_ms"], messages
    monkeypatch.setenv("TOK_S", "80")
    monkeypatch.setenv("SPREAD", "20")
    monkeypatch.setenv("TPOT_MS", "2.0")
    noisy = pytester.runpytest("-p", "no:cacheprovider", "--specdec-compare-fail", "output_tok_s:5%",
                               "--junitxml=noisy.xml")
    noisy.assert_outcomes(passed=1)
    messages, counts = script.verdicts(pytester.path / "noisy.xml")
    assert messages == [] and script.regressed_figures(messages) == []
    assert counts["noisy"] == 1, counts


#: Twelve figures whose regression report runs past the 500 characters pytest keeps of a JUnit message.
MANY_FIGURES = [f"figure_{i:02d}_of_a_long_report" for i in range(12)]
MANY_FIGURES_TEST = f"""
import os

def test_figures(specdec_record):
    for name in {MANY_FIGURES!r}:
        specdec_record.metric(name, float(os.environ.get("VALUE", "100")), "higher")
"""


def test_gate_power_names_every_figure_of_a_long_regression(pytester, monkeypatch):
    """pytest (9.2 on) cuts a failure's JUnit message attribute to 500 characters and ends it with
    `[+N more lines; full report in element text]`: gate_power.py read the attribute, so a slowed
    run named a figure `[+1` and missed the figures past the cut (`tpot_msx2` where ten were red)."""
    script = gate_power_script()
    pytester.makepyfile(test_figures=MANY_FIGURES_TEST)
    pytester.runpytest("-p", "no:cacheprovider", "--specdec-save-baseline").assert_outcomes(passed=1)
    monkeypatch.setenv("VALUE", "10")
    junit = pytester.path / "long.xml"
    pytester.runpytest("-p", "no:cacheprovider", "--specdec-compare-fail=*:10%",
                       f"--junitxml={junit}").assert_outcomes(failed=1)
    messages, _ = script.verdicts(junit)
    assert sorted(script.regressed_figures(messages)) == MANY_FIGURES, messages


def test_the_journal_and_the_baseline_keep_the_figures_samples(pytester, monkeypatch):
    save_then_run(pytester, monkeypatch, tok_s=100.0)
    doc = json.loads((pytester.path / "baselines" / "cpu.json").read_text())
    assert doc["version"] == VERSION
    entry = doc["entries"]["test_figures"]["output_tok_s"]
    assert set(entry) >= {"value", "distribution", "cpu_share", "save_sizes"}
    assert sum(entry["save_sizes"]) == len(entry["distribution"])
    assert entry["nodeid"] == "test_figures.py::test_figures"


def test_benchmark_skip_and_only_treat_recorded_tests_as_benchmarks(pytester, monkeypatch):
    """pytest-benchmark sorts tests by its fixture's name, which ours request only once measured:
    --benchmark-skip measured them and then skipped them, --benchmark-only skipped them all."""
    pytester.makepyfile(test_figures=RECORDING_TEST, test_plain="def test_plain(): pass")
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs", "--benchmark-skip")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_figures.py: Skipping benchmark (--benchmark-skip active)."])
    assert not (pytester.path / ".specdec" / "journal.jsonl").exists()  # nothing was measured
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs", "--benchmark-only")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_plain.py: Skipping non-benchmark (--benchmark-only active)."])


FETCHING_TEST = """
def test_fetched(request):
    recorder = request.getfixturevalue("specdec_record")
    print("MEASURING")
    recorder.metric("output_tok_s", 4.0)
"""


def test_benchmark_skip_skips_a_test_that_fetches_the_recorder_before_it_measures(pytester):
    """A test that fetches specdec_record with request.getfixturevalue is no benchmark to
    pytest-benchmark at collection: --benchmark-skip ran it, journaled its figures and only then
    skipped it. It is skipped as it fetches the recorder, saying how to skip it before setup."""
    pytester.makepyfile(test_fetched=FETCHING_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs", "-s", "--benchmark-skip")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_fetched.py:*: --benchmark-skip: this test records (it "
                                 "fetched specdec_record with request.getfixturevalue)*; name specdec_record "
                                 "in its signature to skip it before any server boots"])
    result.stdout.no_fnmatch_line("*MEASURING*")
    assert not (pytester.path / ".specdec" / "journal.jsonl").exists()
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)  # without it, it records
    # --benchmark-only decides before the test runs, by its signature: the README says to name the fixture
    only = pytester.runpytest("-p", "no:cacheprovider", "-rs", "--benchmark-only")
    only.assert_outcomes(skipped=1)
    only.stdout.fnmatch_lines(["*Skipping non-benchmark (--benchmark-only active)."])


def test_without_pytest_benchmark_no_unknown_mark_is_warned_of(pytester, monkeypatch):
    """-p no:benchmark warned "Unknown pytest.mark.benchmark" once a recording test ran."""
    pytester.makepyfile(test_figures=RECORDING_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:benchmark")  # marks are per process
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*PytestUnknownMarkWarning*")


def test_the_progress_line_of_a_test_without_a_workload_has_no_stray_space(pytester, monkeypatch):
    pytester.makepyfile(test_figures=RECORDING_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["specdec [[]1/1[]] test_figures: output_tok_s=100 tok/s*"])


COUNTED_TESTS = """
import pytest


@pytest.mark.parametrize("n", [1, 2, 3])
def test_figures(specdec_record, n):
    specdec_record.metric("output_tok_s", 100.0 * n)


@pytest.mark.skip(reason="not today")
def test_skipped(specdec_record):
    specdec_record.metric("output_tok_s", 1.0)


@pytest.mark.parametrize("n", range(5))
def test_plain(n):
    pass
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_the_progress_total_counts_the_tests_that_can_record(pytester, workers):
    """The total counted every collected test: beside ordinary tests the run ended at [2/7]."""
    pytester.makepyfile(test_counted=COUNTED_TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly",
                                "--deselect", "test_counted.py::test_figures[3]", *workers)
    assert (result.parseoutcomes()["passed"], result.parseoutcomes()["skipped"]) == (7, 1)
    assert sorted(re.findall(r"specdec \[(\d+/\d+)\]", result.stdout.str())) == ["1/2", "2/2"]


def journal_lines(pytester: pytest.Pytester) -> list[dict]:
    path = pytester.path / ".specdec" / "journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] \
        if path.exists() else []

def test_a_test_that_asks_for_nothing_of_ours_but_fetches_the_recorder_is_journaled(pytester):
    """request.getfixturevalue("specdec_record") in a test that named no fixture of ours: its
    figures went nowhere (no journal record, no progress line, no row)."""
    pytester.makepyfile(test_fetched="""
def test_fetched(request):
    request.getfixturevalue("specdec_record").metric("output_tok_s", 4.0)


def test_fetched_then_failed(request):
    request.getfixturevalue("specdec_record").metric("output_tok_s", 5.0)
    assert False, "after recording"
""")
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=1)
    assert [(r["config_id"], r["status"], r["data"].get("metrics", {}).get("output_tok_s", {}).get("value"))
            for r in journal_lines(pytester)] == [("test_fetched.py::test_fetched", "measured", 4.0),
                                                  ("test_fetched.py::test_fetched", "done", None),
                                                  ("test_fetched.py::test_fetched_then_failed", "failed", 5.0)]
    result.stdout.fnmatch_lines(["specdec [[]*[]] test_fetched: output_tok_s=4 tok/s",
                                 "test_fetched * 4.0 *"], consecutive=False)


FETCHED_TESTS = """
import pytest


@pytest.mark.parametrize("n", [1, 2])
def test_counted(specdec_record, n):
    specdec_record.metric("output_tok_s", 100.0 * n)


def test_fetched(request, specdec_hardware):
    request.getfixturevalue("specdec_record").metric("output_tok_s", 3.0)
    request.getfixturevalue("specdec_record").metric("tpot_ms", 1.0)  # the same recorder


def test_fetched_alone(request):
    request.getfixturevalue("specdec_record").metric("output_tok_s", 4.0)


@pytest.fixture
def recorder(request):
    return request.getfixturevalue("specdec_record")


def test_fetched_in_setup(recorder):
    recorder.metric("output_tok_s", 5.0)
"""


def progress_counts(result: pytest.RunResult) -> list[tuple[int, int]]:
    """(done, total) of each progress line, in the order printed."""
    return [(int(done), int(total))
            for done, total in re.findall(r"specdec \[(\d+)/(\d+)\]", result.stdout.str())]


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_test_that_fetches_the_recorder_raises_the_progress_total(pytester, workers):
    """A test that fetched specdec_record with request.getfixturevalue recorded uncounted: the
    lines read [3/2], [4/2]; one that asked for no other fixture of ours lost its figures."""
    pytester.makepyfile(test_fetched=FETCHED_TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", *workers)
    result.assert_outcomes(passed=5)
    counts = progress_counts(result)
    assert sorted(done for done, _ in counts) == [1, 2, 3, 4, 5]
    assert all(done <= total for done, total in counts), counts
    totals = [total for _, total in counts]
    assert totals == sorted(totals) and totals[0] >= 2 and totals[-1] == 5, counts
    if not workers:
        assert counts == [(1, 2), (2, 2), (3, 3), (4, 4), (5, 5)]
    records = [r for r in journal_lines(pytester) if r["status"] == "measured"]  # not their checks' marks
    assert sorted(r["data"]["metrics"]["output_tok_s"]["value"] for r in records) == [3, 4, 5, 100, 200]
    result.stdout.fnmatch_lines(["test_fetched_alone * 4.0 *"])  # its row in the summary


def test_a_test_that_runs_though_marked_to_skip_raises_the_progress_total(pytester):
    """Without pytest's skipping plugin a test marked to skip runs: it read [2/1]."""
    pytester.makepyfile(test_marked="""
import pytest


def test_counted(specdec_record):
    specdec_record.metric("output_tok_s", 1.0)


@pytest.mark.skip(reason="not today")
def test_marked(specdec_record):
    specdec_record.metric("output_tok_s", 2.0)
""")
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:skipping")
    result.assert_outcomes(passed=2)
    assert progress_counts(result) == [(1, 1), (2, 2)]


def test_a_fetched_recorder_gives_pytest_benchmark_its_samples(pytester):
    """A test that fetched specdec_record as it ran was not given the replay clock at collection:
    pytest-benchmark timed its no-op rounds (nanoseconds) instead of the samples."""
    pytester.makepyfile(test_fetched="""
def test_fetched(request):
    recorder = request.getfixturevalue("specdec_record")
    recorder.metric("output_tok_s", 4.0)
    recorder.samples([0.5, 0.25])
""")
    result = pytester.runpytest("-p", "no:cacheprovider", "--benchmark-json", "bench.json")
    result.assert_outcomes(passed=1)
    (bench,) = json.loads((pytester.path / "bench.json").read_text())["benchmarks"]
    assert (bench["stats"]["min"], bench["stats"]["max"], bench["stats"]["rounds"]) == (0.25, 0.5, 2)


def test_benchmark_cprofile_profiles_a_recorded_test_without_failing_it(pytester):
    """--benchmark-cprofile (and its --benchmark-cprofile-loops) calls the timed function again
    after the rounds, under the profiler: the replay ran past its samples and every recording test
    failed with a bare 'StopIteration after the measurement was journaled'."""
    pytester.makepyfile(test_sampled="""
def test_sampled(specdec_record):
    specdec_record.metric("output_tok_s", 4.0)
    specdec_record.samples([0.5, 0.25])
""")
    from pytest_benchmark import utils

    # --benchmark-cprofile-loops came with pytest-benchmark 5 (the lowest bound, 4.0, profiles once)
    loops = [[], ["--benchmark-cprofile-loops=3"]] if hasattr(utils, "parse_cprofile_loops") else [[]]
    for more in loops:
        result = pytester.runpytest("-p", "no:cacheprovider", "--benchmark-cprofile=cumtime", *more,
                                    "--benchmark-json", "bench.json")
        result.assert_outcomes(passed=1)
        (bench,) = json.loads((pytester.path / "bench.json").read_text())["benchmarks"]
        assert (bench["stats"]["min"], bench["stats"]["max"], bench["stats"]["rounds"]) == (0.25, 0.5, 2)


def test_a_recording_test_that_times_its_own_code_with_the_benchmark_fixture(pytester):
    """A test naming pytest-benchmark's `benchmark` beside specdec_record got the replay clock as
    its timer: its own benchmark(...) failed in pytest-benchmark's calibration ('<' between None and
    float), and a pedantic one timed nothing, then feeding the samples raised FixtureAlreadyUsed.
    Its own timing is now what pytest-benchmark keeps, with our figures in extra_info, and a
    warning says the samples went to the journal only; naming the fixture unused still feeds them."""
    pytester.makepyfile(test_own="""
import time

def test_called(specdec_record, benchmark):
    specdec_record.metric("output_tok_s", 4.0)
    specdec_record.samples([0.5, 0.25])
    benchmark(time.sleep, 0.001)

def test_pedantic(specdec_record, benchmark):
    benchmark.pedantic(time.sleep, args=(0.002,), rounds=3, iterations=1)
    specdec_record.metric("output_tok_s", 4.0)
    specdec_record.samples([0.5, 0.25])

def test_unused(specdec_record, benchmark):
    specdec_record.metric("output_tok_s", 4.0)
    specdec_record.samples([0.5, 0.25])
""")
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "--benchmark-json", "bench.json")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*SamplesNotFedWarning: test_called: it timed its own code with "
                                 "pytest-benchmark's benchmark fixture*"])
    benches = {b["name"]: b for b in json.loads((pytester.path / "bench.json").read_text())["benchmarks"]}
    assert 0.001 <= benches["test_called"]["stats"]["min"] < 0.25
    assert benches["test_pedantic"]["stats"]["rounds"] == 3
    assert 0.002 <= benches["test_pedantic"]["stats"]["min"] < 0.25
    assert all(benches[name]["extra_info"]["output_tok_s"] == 4.0 for name in benches)
    assert "specdec" in benches["test_called"]["extra_info"]
    unused = benches["test_unused"]["stats"]
    assert (unused["min"], unused["max"], unused["rounds"]) == (0.25, 0.5, 2)


def test_the_gate_advice_names_where_each_value_was_set(pytester, monkeypatch):
    """The summary's advice said --specdec-compare-fail and --specdec-baseline-dir where the run
    had them from the ini file; and "ini specdec_..." where it had them from `-o`, whose value
    hides the ini file's."""
    pytester.makeini("[pytest]\nspecdec_compare_fail = output_tok_s:off\nspecdec_baseline_dir = mine\n")
    result = save_then_run(pytester, monkeypatch, tok_s=2.0)
    result.stdout.fnmatch_lines([
        "specdec: 1 test(s) compared with cpu.json but not gated: no tolerance applies to any of their "
        "figures (set ini specdec_compare_fail or [[]tool.specdec.tolerances[]] for tpot_ms)"])
    result = pytester.runpytest("-p", "no:cacheprovider", "-o", "specdec_compare_fail=output_tok_s:off")
    result.stdout.fnmatch_lines([
        "specdec: 1 test(s) compared with cpu.json but not gated: no tolerance applies to any of their "
        "figures (set -o specdec_compare_fail or [[]tool.specdec.tolerances[]] for tpot_ms)"])
    result = pytester.runpytest("-p", "no:cacheprovider", "-o", "specdec_baseline_dir=elsewhere",
                                "--specdec-compare-fail", "output_tok_s:5%")
    result.stdout.fnmatch_lines([
        "specdec: gate: no baseline file at *elsewhere/cpu.json: the baseline folder *elsewhere does not exist "
        "(set by -o specdec_baseline_dir), so none of the 1 gated figure(s) was compared; save one with "
        "--specdec-save-baseline (or point -o specdec_baseline_dir at yours)"])


def test_a_baseline_file_of_other_hardware_names_where_the_folder_was_set(pytester):
    pytester.makepyprojecttoml('[tool.specdec]\nbaseline_dir = "mine"\n')
    pytester.makepyfile(test_figures=RECORDING_TEST)
    (pytester.path / "mine").mkdir()
    (pytester.path / "mine" / "cpu.json").write_text(json.dumps(
        {"format": "pytest-specdec-baselines", "version": 1, "hardware_key": "nvidia-h200-sm_90-x8", "entries": {}}))
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.stderr.fnmatch_lines(["*belongs to hardware 'nvidia-h200-sm_90-x8', but this machine is 'cpu'; baselines "
                                 "do not transfer between machines: use cpu.json (or --specdec-arch/--specdec-gpus "
                                 "to match), or point pyproject.toml [[]tool.specdec[]] key 'baseline_dir' elsewhere"])


def test_a_broken_baseline_file_names_where_saving_was_set(pytester):
    """Its fix said 'save a new one with --specdec-save-baseline' to a run saving through [tool.specdec]."""
    pytester.makepyprojecttoml("[tool.specdec]\nsave_baseline = true\n")
    pytester.makepyfile(test_figures=RECORDING_TEST)
    (pytester.path / "baselines").mkdir()
    (pytester.path / "baselines" / "cpu.json").write_text("{bad")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.stderr.fnmatch_lines(["*cpu.json is not valid JSON (line 1, column 2: *); fix it, or move it aside (or "
                                 "delete it) and save a new one with pyproject.toml [[]tool.specdec[]] key "
                                 "'save_baseline'"])


def test_benchmark_compare_with_a_run_of_other_hardware_or_another_setup_warns(pytester):
    """pytest-benchmark names a saved run's machine by its CPU and Python, and a test by its id:
    a run on other GPUs (here a dry run's), or of another workload, was compared row by row
    without a word."""
    pytester.makepyfile(test_figures="""
def test_figures(specdec_record):
    specdec_record.metric("output_tok_s", 4.0)
    specdec_record.samples([0.5, 0.25])
""")
    pytester.makepyprojecttoml('[tool.specdec.engine]\nmodel_preset = "tiny"\n')

    def run(*args: str) -> pytest.RunResult:
        # a fresh interpreter each run: in-process (pytester drops the modules a run imported, the
        # plugin's lazy ones too) the warning went missing from the second run on
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
        result.assert_outcomes(passed=1)
        return result

    run("--benchmark-autosave", "--specdec-arch=sm_120")
    (saved,) = (pytester.path / ".benchmarks").rglob("*.json")
    (bench,) = json.loads(saved.read_text())["benchmarks"]
    assert bench["extra_info"]["specdec"]["hardware"] == "simulated-sm_120-x1"
    result = run("--benchmark-compare")
    result.stdout.fnmatch_lines(["*BenchmarkCompareWarning: test_figures: --benchmark-compare puts it "
                                 "beside the run saved *, which measured it on hardware "
                                 "'simulated-sm_120-x1' (this run: 'cpu'): that row compares "
                                 "different things*"])
    run("--benchmark-autosave")
    run("--benchmark-compare").stdout.no_fnmatch_line("*BenchmarkCompareWarning*")  # like with like
    pytester.makepyprojecttoml('[tool.specdec]\nmodel = "b"\n')  # the embedded engine serves no model id
    run("--benchmark-compare").stdout.no_fnmatch_line("*BenchmarkCompareWarning*")
    pytester.makepyprojecttoml('[tool.specdec.engine]\nmodel_preset = "tiny-hybrid"\n')
    run("--benchmark-compare").stdout.fnmatch_lines(
        ["*BenchmarkCompareWarning: test_figures: *which measured it with another setup (model)*"])


def test_the_summary_is_written_when_another_plugins_summary_raises(pytester):
    """pytest-benchmark's --benchmark-compare-fail raises in its terminal summary: the table, the
    gate's lines and any problem of ours (a baseline not saved) went missing from the run's log
    exactly when something had regressed."""
    pytester.makepyfile(test_figures=RECORDING_TEST)
    pytester.makeconftest("""
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_terminal_summary(terminalreporter):
    raise RuntimeError("Performance has regressed")
""")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*specdec summary*", "config*verdict*", "test_figures * 100.0 *"])
    result.stderr.fnmatch_lines(["*RuntimeError: Performance has regressed*"])


@pytest.mark.parametrize("workers", [0, 2])
def test_two_recording_tests_of_one_name_in_two_files_are_refused(pytester, workers):
    """A baseline file keys a test by its name and parameters: tests/a/test_x.py::test_figures and
    tests/b/test_x.py::test_figures were compared with, and saved over, each other's figures."""
    for folder, value in (("a", 100.0), ("b", 1.0)):
        pytester.mkpydir(folder).joinpath("test_x.py").write_text(
            f"def test_figures(specdec_record):\n    specdec_record.metric('output_tok_s', {value})\n")
    args = ["-p", "no:cacheprovider", "--specdec-save-baseline"] + (["-n", str(workers)] if workers else [])
    result = pytester.runpytest(*args)
    # an xdist worker finds it at collection, as a single process does: the same one-line usage error
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    message = ("ERROR: pytest-specdec: a/test_x.py::test_figures, b/test_x.py::test_figures share the baseline key "
               "test_figures: a baseline file keys a test by its name and parameters, not its file "
               "or class*rename one of the test functions*")
    result.stderr.fnmatch_lines([message])
    assert result.stderr.str().count("ERROR: pytest-specdec:") == 1
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert not (pytester.path / "baselines" / "cpu.json").exists()


def test_a_test_of_the_same_name_in_another_file_is_not_compared_with_the_saved_one(pytester):
    """The file keys a test by its name and parameters: a baseline saved from a/test_x.py and a
    later run of b/test_x.py alone (which the run's own shared-name check cannot see) compared B's
    figures with A's without a word."""
    pytester.makepyprojecttoml('[tool.specdec.tolerances]\noutput_tok_s = "10%"\n')
    test = "def test_gen(specdec_record):\n    specdec_record.metric('output_tok_s', {})\n"
    for folder, value in (("a", 100.0), ("b", 50.0)):
        pytester.mkpydir(folder)
        (pytester.path / folder / "test_x.py").write_text(test.format(value))
    pytester.runpytest("-p", "no:cacheprovider", "a/test_x.py", "--specdec-save-baseline").assert_outcomes(passed=1)
    result = pytester.runpytest("-p", "no:cacheprovider", "b/test_x.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*baseline file */baselines/cpu.json: the entries of test_gen belong to a/test_x.py::test_gen, "
        "not to b/test_x.py::test_gen: the file keys a test by its name and parameters, *; rename one "
        "of the test functions, or, if the test moved there, delete the entries of test_gen and save "
        "them again with --specdec-save-baseline"])
    assert "regression" not in result.stdout.str()
    # a saving run of B stops the same way and leaves A's entry as it was
    before = (pytester.path / "baselines" / "cpu.json").read_text()
    pytester.runpytest("-p", "no:cacheprovider", "b/test_x.py", "--specdec-save-baseline").assert_outcomes(failed=1)
    assert (pytester.path / "baselines" / "cpu.json").read_text() == before
    pytester.runpytest("-p", "no:cacheprovider", "a/test_x.py").assert_outcomes(passed=1)


def test_a_save_that_another_run_blocks_says_so_and_fails_keeping_the_figures(pytester, monkeypatch):
    """A run that hung holding the baseline file's lock made every later save wait forever, in
    silence. The wait is said once and bounded; the save then fails, writing nothing, and says
    where the figures are kept."""
    pytester.makepyfile(test_figures=RECORDING_TEST)
    pytester.runpytest("-p", "no:cacheprovider", "--specdec-save-baseline").assert_outcomes(passed=1)
    baseline = pytester.path / "baselines" / "cpu.json"
    before = baseline.read_text()
    lock_file = pytester.path / "baselines" / ".cpu.json.lock"
    with held_by_another_process(lock_file) as holder:
        monkeypatch.setenv("TOK_S", "90")
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--specdec-save-baseline",
                                               "--specdec-baseline-lock-timeout=1", timeout=120)
    result.assert_outcomes(passed=1)
    assert result.ret != 0
    result.stderr.fnmatch_lines([f"specdec: baseline save: {lock_file} is held by pid {holder.pid} (*); waiting "
                                 f"up to 0.5s more before the save fails (bound: --specdec-baseline-lock-timeout)"])
    journal = pytester.path / ".specdec" / "journal.jsonl"
    result.stdout.fnmatch_lines([
        f"specdec: ERROR: baseline not saved: {lock_file} stayed held by pid {holder.pid} (*) for 1s "
        f"(--specdec-baseline-lock-timeout), so nothing was written into {baseline}; * the figures stay in "
        f"the journal {journal}: once the lock is free, a run with --specdec-resume --specdec-save-baseline "
        f"saves them without measuring again"])
    assert baseline.read_text() == before
    # as it says: the journaled figures are saved without measuring them again
    monkeypatch.setenv("TOK_S", "1")
    assert pytester.runpytest("-p", "no:cacheprovider", "--specdec-resume", "--specdec-save-baseline").ret == 0
    assert json.loads(baseline.read_text())["entries"]["test_figures"]["output_tok_s"]["value"] == 90.0


def test_a_shards_blocked_save_names_the_shards_own_journal(pytester, monkeypatch):
    """A shard journals into its folder, but the failed save named the project's journal, which an
    earlier unsharded run had left with other figures: resuming it as advised saved those."""
    pytester.makepyfile(test_figures=RECORDING_TEST)
    pytester.runpytest("-p", "no:cacheprovider", "--specdec-save-baseline").assert_outcomes(passed=1)
    baseline = pytester.path / "baselines" / "cpu.json"
    shard = ["--specdec-shard=1/1", "--specdec-report=out"]
    with held_by_another_process(pytester.path / "baselines" / ".cpu.json.lock"):
        monkeypatch.setenv("TOK_S", "90")
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--specdec-save-baseline", *shard,
                                               "--specdec-baseline-lock-timeout=1", timeout=120)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        f"specdec: ERROR: baseline not saved: * the figures stay in the journal {pytester.path / 'out' / 'journal.jsonl'}: "
        f"once the lock is free, a run with --specdec-resume --specdec-save-baseline (and this run's "
        f"--specdec-shard and --specdec-report) saves them without measuring again"])
    monkeypatch.setenv("TOK_S", "1")
    assert pytester.runpytest("-p", "no:cacheprovider", "--specdec-resume", "--specdec-save-baseline", *shard).ret == 0
    assert json.loads(baseline.read_text())["entries"]["test_figures"]["output_tok_s"]["value"] == 90.0


PARAMETRIZED_RECORDING_TEST = """
import pytest

@pytest.mark.parametrize("n", [1, 2, 3])
def test_figures(specdec_record, n):
    specdec_record.metric("output_tok_s", 100.0 * n)
"""


@pytest.mark.parametrize("mode", ["default", "-q", "-v"])
def test_progress_lines_leave_no_line_of_the_file_name_alone(pytester, mode):
    """Each progress line ended pytest's line of letters, which began again with the file's name
    and nothing after it (`test_figures.py ` on a line of its own) before the next test's line;
    under -v the test's own line stood empty before its progress line and came again with PASSED."""
    pytester.makepyfile(test_figures=PARAMETRIZED_RECORDING_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", *([mode] if mode != "default" else []))
    result.assert_outcomes(passed=3)
    lines = result.stdout.lines
    first = next(i for i, line in enumerate(lines) if line.startswith("specdec [1/3]"))
    last = next(i for i, line in enumerate(lines) if line.startswith("specdec [3/3]"))
    run = lines[first - 1:last + 1]
    assert all(line.strip() and line.strip() != "test_figures.py" for line in run), run
    test_line = {"default": "test_figures.py .", "-q": ".",
                 "-v": "test_figures.py::test_figures[[]{n}[]] PASSED *"}[mode]
    for n in (1, 2, 3):  # each test's own line, whole, then its progress line
        pattern = test_line.format(n=n) + (" *[[]100%[]]" if n == 3 and mode != "-v" else "")
        assert [line for line in run if fnmatch.fnmatch(line, pattern)], (pattern, run)
        index = next(i for i, line in enumerate(run) if line.startswith(f"specdec [{n}/3]"))
        assert fnmatch.fnmatch(run[index - 1], pattern), run
    assert len(run) == 6, run
    assert "[100%]" not in [line.strip() for line in lines], lines


@pytest.mark.parametrize("args", [["-q"], [], ["-n", "2", "-q"], ["-n", "2"]])
def test_pytests_last_percentage_ends_the_line_of_letters_not_one_of_its_own(pytester, args):
    """The last test's progress line came before pytest's `[100%]`, which the terminal writes once
    the loop ends: it stood alone on a line under that progress line (-q, default, xdist)."""
    pytester.makepyfile(test_figures=PARAMETRIZED_RECORDING_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", *args)
    result.assert_outcomes(passed=3)
    lines = [line.rstrip() for line in result.stdout.lines]
    assert "[100%]" not in [line.strip() for line in lines], lines
    end = next(i for i, line in enumerate(lines) if line.endswith("[100%]"))
    assert lines[end].startswith(("test_figures.py .", ".")), lines
    # the last progress line after the letters' line, then the summary: no line between them, but
    # under xdist, whose workers write as they end after the loop, the line is ended before them
    # (test_under_xdist_the_last_progress_line_ends_before_the_workers_write) and the terminal's
    # session end adds a blank line
    between = [""] if "-n" in args else []
    assert lines[end + 1].startswith("specdec [3/3]"), lines[end - 1:]
    assert lines[end + 2:end + 2 + len(between)] == between and lines[end + 2 + len(between)].startswith("="), \
        lines[end - 1:]


@pytest.mark.parametrize("call, problem", [
    ('metric("tpot_sm", 1.0)', "ValueError: unknown metric 'tpot_sm': did you mean 'tpot_ms'? give its direction "
                               "explicitly, or declare a metric of your own*"),
    ('metric("my_fig", 1.0, "up")', "ValueError: metric 'my_fig': direction 'up' is not a direction; write "
                                    '"higher" (bigger is better) or "lower"'),
    ('metric("my_fig", float("nan"), "higher")', "ValueError: metric 'my_fig': value nan is not a number (a finite one)"),
    ('metric("my_fig", None, "higher")', "ValueError: metric 'my_fig': value None is not a number"),
    ('metric("my_fig", 1.0, "higher", spread="x")', "ValueError: metric 'my_fig': spread 'x' must be a finite number*"),
    ('metric("ttft_ms", 1.0, "higher")', "ValueError: metric 'ttft_ms': direction 'higher', but 'lower' is better*"),
    ("result(measured('chat'))", "ValueError: specdec_record holds one workload measurement per test*"),
])
def test_a_misused_recorder_fails_at_the_tests_line_without_the_plugins_frames(pytester, call, problem):
    """A misuse failed with a traceback through the plugin's recording code, and an unknown
    metric as a KeyError, whose message pytest printed inside quotes."""
    pytester.makepyfile(test_figures=f"""
{MEASURED}

def test_misuse(specdec_record):
    specdec_record.result(measured("code"))
    specdec_record.{call}
""")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f">       specdec_record.{call}", f"E       {problem}"])
    assert "pytest_specdec" not in result.stdout.str().replace("from pytest_specdec.metrics", "")
    assert "KeyError" not in result.stdout.str()


def test_a_test_recording_only_metrics_names_its_workload_in_the_summary(pytester):
    """Its row showed "-" in the workload column (and its record carried no workload), though
    the test is parametrized with one."""
    pytester.makepyprojecttoml('[[tool.specdec.workloads]]\nname = "mine"\nprompts = "chat"\n')
    pytester.makepyfile(test_figures="""
def test_metric_only(specdec_spec, specdec_workload, specdec_record):
    specdec_record.metric("output_tok_s", 100.0)
""")
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "-k", "ar-tp1")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["config * workload *", "*", r"ar-tp1 * mine * 100.0 *"])
