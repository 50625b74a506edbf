"""Resume and the journal, as users run them: nothing measured is lost, nothing stale is trusted.

pytester projects against the embedded engine (see test_bench_flow.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from test_bench_flow import journal_figures, journal_lines, no_leftover_engines, project, run  # noqa: F401

pytest.importorskip("torch")


def run_here(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """`run` in this process, for the tests that record figures without a server and change no
    module's state: a fresh interpreter proves nothing more there, and costs its start each run
    (tests that boot an engine, or patch the plugin's modules, keep `run`)."""
    return pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "-rA", *args)


def test_resume_measures_again_what_changed_and_says_so(pytester, no_leftover_engines):
    project(pytester, max_new_tokens=12)
    run(pytester).assert_outcomes(passed=1)
    records = journal_lines(pytester)
    assert all(r["fingerprint"] for r in records)
    assert records[0]["data"]["fingerprint"]["digest"] == records[0]["fingerprint"]

    project(pytester, max_new_tokens=12)  # the same setup: resumed
    run(pytester, "--specdec-resume").assert_outcomes(skipped=1)

    project(pytester, max_new_tokens=16)  # the workload changed
    result = run(pytester, "--specdec-resume")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*specdec: resume: measured test_generation[[]ddtree-tp1-b8-chat[]] again: what it "
        "measures changed since the journal's record (workload)*"])
    latest = {}
    for record in journal_figures(pytester):
        latest[record["config_id"]] = record
    assert {r["data"]["details"]["measurement"]["completion_tokens"] for r in latest.values()} == {3 * 16}


def test_a_resumed_run_checks_losslessness_against_no_stale_record(pytester, no_leftover_engines):
    project(pytester, methods=("ar", "ddtree"), max_new_tokens=12)
    run(pytester).assert_outcomes(passed=2)
    # the workload changed: ar, measured first, must not be held to ddtree's journaled outputs
    # of the old workload, which this run measures again
    project(pytester, methods=("ar", "ddtree"), max_new_tokens=16)
    result = run(pytester, "--specdec-resume")
    result.assert_outcomes(passed=2)
    result.stdout.no_fnmatch_line("*is not lossless*")


def test_resume_measures_again_a_record_whose_figures_are_damaged(pytester):
    """Reading a record's figures back is the same for any recording test: one that records
    without a server boots no engine in any of its 4 runs."""
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embedded"\n')
    pytester.makepyfile(test_widgets=RECORDING_TEST)
    run_here(pytester).assert_outcomes(passed=1)
    [good] = journal_figures(pytester)
    path = pytester.path / ".specdec" / "journal.jsonl"
    for damage in ({}, {"metrics": "x"}, {"outputs": {"tokens": 5}}):
        data = {} if not damage else {**good["data"], **damage}
        path.write_text(json.dumps({**good, "status": "done", "data": data}) + "\n")
        result = run_here(pytester, "--specdec-resume")
        result.assert_outcomes(passed=1)  # measured again, not skipped on figures unreadable
        result.stdout.fnmatch_lines(["*JournalWarning: *journal.jsonl: the record of *test_widgets (*) is "
                                     "damaged (*); measuring it again*"])
        result.stdout.no_fnmatch_line("*INTERNALERROR*")


def test_a_damaged_record_of_another_workload_fails_no_losslessness_check(pytester, no_leftover_engines):
    """The losslessness check parsed every journaled record: one damaged record of any workload
    failed every speculative test after its measurement was journaled."""
    project(pytester, methods=("ar", "ddtree"), max_new_tokens=12)
    run(pytester, "-k", "ar-tp1").assert_outcomes(passed=1, deselected=1)
    [good] = journal_figures(pytester)
    path = pytester.path / ".specdec" / "journal.jsonl"
    damaged = {**good, "config_id": good["config_id"].replace("chat", "long"), "workload": "long",
               "status": "done", "data": {"workload": "long"}}
    path.write_text(path.read_text() + json.dumps(damaged) + "\n")
    result = run(pytester, "--specdec-resume")
    result.assert_outcomes(passed=1, skipped=1)


def test_resume_with_save_baseline_saves_what_was_measured_before(pytester,
                                                                  no_leftover_engines):
    project(pytester, budgets=(8, 16), max_new_tokens=12)
    run(pytester, "-k", "b8").assert_outcomes(passed=1)  # the run that was interrupted
    result = run(pytester, "--specdec-resume", "--specdec-save-baseline")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*specdec: saved 2 result(s) into*cpu.json*"])
    entries = json.loads((pytester.path / "baselines" / "cpu.json").read_text())["entries"]
    assert sorted(entries) == ["test_generation[ddtree-tp1-b16-chat]",
                               "test_generation[ddtree-tp1-b8-chat]"]
    assert entries["test_generation[ddtree-tp1-b8-chat]"]["accept_length"]["value"] > 1.0
    journaled = {r["config_id"].split("::")[-1]: r["fingerprint"] for r in journal_figures(pytester)}
    for test_id, metrics in entries.items():
        assert {m["fingerprint"] for m in metrics.values()} == {journaled[test_id]}

    project(pytester, budgets=(8, 16), max_new_tokens=16)  # another workload than the baseline's
    result = run(pytester, "-k", "b8", "--specdec-compare-fail", "output_tok_s:99%")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_generation[[]ddtree-tp1-b8-chat[]]: the baseline of "
                                 "accept_length, * measured another setup*"])


RECORDING_TEST = """
def test_widgets(specdec_record):
    specdec_record.metric("widgets", 3.0, "higher")
    specdec_record.samples([0.1, 0.2])
"""


def test_a_failing_comparison_or_benchmark_bridge_loses_no_measurement(pytester):
    """Journal first, verdict second: what broke is the test's failure, the figure is on disk."""
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embedded"\n')
    pytester.makepyfile(test_widgets=RECORDING_TEST)
    (pytester.path / "baselines").mkdir()
    (pytester.path / "baselines" / "cpu.json").write_text(json.dumps({
        "format": "pytest-specdec-baselines", "version": 1, "hardware_key": "cpu",
        "entries": {"test_widgets": {"widgets": {"value": 2.0, "direction": "lower"}}}}))
    result = run_here(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*SpecdecUsageError after the measurement was journaled*"
                                 "baseline file *cpu.json: test_widgets widgets: the entry says 'lower' is better*"])
    assert [r["data"]["metrics"]["widgets"]["value"] for r in journal_figures(pytester)] == [3.0, 3.0]

    (pytester.path / "baselines" / "cpu.json").unlink()
    pytester.makeconftest("""
import pytest

class BrokenBridge:
    extra_info = {}

    def pedantic(self, *args, **kwargs):
        raise RuntimeError("the bridge broke")

@pytest.fixture
def benchmark():
    return BrokenBridge()
""")
    result = run_here(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*RuntimeError after the measurement was journaled*"
                                 "the bridge broke*"])
    assert [r["status"] for r in journal_lines(pytester)] == ["measured", "failed-checks"]


def test_a_regression_against_a_baseline_of_another_setup_says_so(pytester):
    """The gate still compares (the user may mean the change), but its red names the stale entry."""
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embedded"\n')
    pytester.makepyfile(test_widgets=RECORDING_TEST)
    (pytester.path / "baselines").mkdir()
    entry = {"value": 5.0, "direction": "higher"}
    baseline = {"format": "pytest-specdec-baselines", "version": 1, "hardware_key": "cpu",
                "entries": {"test_widgets": {"widgets": entry}}}
    (pytester.path / "baselines" / "cpu.json").write_text(json.dumps(baseline))
    result = run_here(pytester, "--specdec-compare-fail", "*:0%")  # an entry of no known setup
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*regression against cpu.json:"])

    entry["fingerprint"] = "0123456789abcdef"  # measured another setup than this one
    (pytester.path / "baselines" / "cpu.json").write_text(json.dumps(baseline))
    result = run_here(pytester, "--specdec-compare-fail", "*:0%")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*regression against cpu.json (its entries of widgets measured another "
                                 "setup: workload, server settings or model: the baseline file does "
                                 "not record which; if the change is meant, delete them and save again "
                                 "with --specdec-save-baseline):"])
    result.stdout.fnmatch_lines(["*UserWarning: test_widgets: the baseline of widgets measured another setup*"])
    # saving alone cannot replace them where the gate is in force: the test fails again, saving nothing
    run_here(pytester, "--specdec-compare-fail", "*:0%", "--specdec-save-baseline").assert_outcomes(failed=1)

    result = run_here(pytester, "--specdec-save-baseline")  # re-creating them: no advice to do so
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*measured another setup*")


def test_a_record_of_an_older_fingerprint_version_is_named_so_by_resume_and_gate(pytester):
    """After a fingerprint VERSION bump every part is equal but the digest is not: resume said the
    record had no fingerprint, the gate that the baseline file does not record which part changed."""
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embedded"\n')
    pytester.makepyfile(test_widgets=RECORDING_TEST)
    run(pytester, "--specdec-save-baseline").assert_outcomes(passed=1)
    pytester.makeconftest("import pytest_specdec.fingerprint as f\nf.VERSION += 1\n")
    result = run(pytester, "--specdec-resume", "--specdec-compare-fail", "*:0%")
    result.assert_outcomes(passed=1)
    older = "measured by an older fingerprint version: no part of the setup differs"
    result.stdout.fnmatch_lines([f"*test_widgets: the baseline of widgets measured another setup ({older}); "
                                 f"re-create it with --specdec-save-baseline*"])
    result.stdout.fnmatch_lines([f"specdec: resume: measured test_widgets again: what it measures changed "
                                 f"since the journal's record ({older})"])


def test_an_expected_failure_that_recorded_is_no_reference(pytester):
    """A known issue's xfail that measured and then failed (its gate, its own assertions) failed
    like any other test: its figures are journaled as failed, so a merge of shards left them out
    of the baseline while an unsharded run's --specdec-save-baseline saved them."""
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embedded"\n')
    pytester.makepyfile(test_widgets="""
import pytest

@pytest.mark.xfail(reason="known issue: widgets break")
def test_widgets(specdec_record):
    specdec_record.metric("widgets", 3.0, "higher")
    specdec_record.samples([0.1, 0.2])
    assert False, "broken widgets"
""")
    result = run_here(pytester, "--specdec-save-baseline")
    result.assert_outcomes(xfailed=1)
    result.stdout.fnmatch_lines(["specdec: nothing saved into *cpu.json: its 1 result(s) are of failed tests, "
                                 "which are no reference (test_widgets)"])
    assert not (pytester.path / "baselines" / "cpu.json").exists()
    assert journal_lines(pytester)[-1]["status"] == "failed"  # what a merge reads


def test_a_baseline_of_another_setup_names_the_part_that_changed(pytester):
    """As resume does: the warning and the regression's red say which part of the setup the
    baseline measured otherwise, not only that one of three may have."""
    pytester.makepyfile(test_widgets=RECORDING_TEST)
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embedded"\n[tool.specdec.engine]\nmodel_preset = "tiny"\n')
    run_here(pytester, "--specdec-save-baseline").assert_outcomes(passed=1)
    saved = json.loads((pytester.path / "baselines" / "cpu.json").read_text())
    digest = saved["entries"]["test_widgets"]["widgets"]["fingerprint"]
    assert saved["setups"][digest]["model"] == {"preset": "tiny"}
    saved["entries"]["test_widgets"]["widgets"].update(value=5.0, distribution=[])  # a regression
    (pytester.path / "baselines" / "cpu.json").write_text(json.dumps(saved))

    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embedded"\n[tool.specdec.engine]\n'
                               'model_preset = "tiny-hybrid"\n')
    result = run_here(pytester)
    result.stdout.fnmatch_lines(["*UserWarning: test_widgets: the baseline of widgets measured another "
                                 "setup (its model differs)*"])
    result = run_here(pytester, "--specdec-compare-fail", "*:0%", "-W", "ignore::UserWarning")
    result.stdout.fnmatch_lines(["*regression against cpu.json (its entries of widgets measured another "
                                 "setup: its model differs; *"])

    del saved["setups"]  # a file saved before baselines kept the parts: said, not guessed
    (pytester.path / "baselines" / "cpu.json").write_text(json.dumps(saved))
    result = run_here(pytester)
    result.stdout.fnmatch_lines(["*UserWarning: test_widgets: the baseline of widgets measured another "
                                 "setup (workload, server settings or model: the baseline file does "
                                 "not record which)*"])


def test_model_ids_the_embedded_engine_does_not_serve_change_nothing_it_measured(pytester):
    """The engine serves its preset and never reads model or draft_model: setting them warned that
    the baseline measured another setup (its model differs), and resume measured again."""
    pytester.makepyfile(test_widgets=RECORDING_TEST)
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embedded"\n')
    run_here(pytester, "--specdec-save-baseline").assert_outcomes(passed=1)
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embedded"\nmodel = "Qwen/NoSuch-1B"\n'
                               'draft_model = "org/NoSuch-draft"\n')
    result = run_here(pytester, "--specdec-resume", "-W", "error::UserWarning")
    result.assert_outcomes(skipped=1)  # resumed from the journal: the same setup, measured
    assert "another setup" not in result.stdout.str()
    assert "measured test_widgets again" not in result.stdout.str()


def regressing_project(pytester):
    """RECORDING_TEST against a baseline entry its figure regresses from, and the gate that fails
    it: (the baseline file, its text, the gate's flags)."""
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embedded"\n')
    pytester.makepyfile(test_widgets=RECORDING_TEST)
    baseline = pytester.path / "baselines" / "cpu.json"
    baseline.parent.mkdir()
    baseline.write_text(json.dumps({
        "format": "pytest-specdec-baselines", "version": 1, "hardware_key": "cpu",
        "entries": {"test_widgets": {"widgets": {"value": 5.0, "direction": "higher"}}}}))
    before = baseline.read_text()
    gate = ("--specdec-compare-fail", "*:10%")
    return baseline, before, gate


def test_a_test_that_failed_its_checks_is_measured_again_on_resume_and_saved_nowhere(pytester):
    """Its figures were journaled as done before the gate failed it: resume once skipped it as
    measured, and a red run retried with --specdec-resume went green; --specdec-save-baseline
    made its regressed figure the reference."""
    baseline, before, gate = regressing_project(pytester)
    result = run_here(pytester, *gate, "--specdec-save-baseline")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["regression against cpu.json:", "widgets 3.00 < baseline 5.00 -10% (-40.0%)",
                                 "specdec: nothing saved into *cpu.json: its 1 result(s) are of failed tests, "
                                 "which are no reference (test_widgets)"])
    assert baseline.read_text() == before
    assert [r["status"] for r in journal_lines(pytester)] == ["measured", "failed-checks"]

    result = run_here(pytester, "--specdec-resume", *gate)
    result.assert_outcomes(failed=1)  # measured and gated again, not skipped as done
    result.stdout.fnmatch_lines(["*regression against cpu.json*"])
    result.stdout.no_fnmatch_line("*already measured*")

    baseline.unlink()  # the gate has nothing to fail on now: a pass, then resumed as done
    run_here(pytester, "--specdec-resume", *gate).assert_outcomes(passed=1)
    run_here(pytester, "--specdec-resume", *gate).assert_outcomes(skipped=1)


@pytest.mark.parametrize("crash", ["before its verdict", "tearing its verdict"])
def test_a_test_whose_checks_never_finished_is_measured_again_on_resume(pytester, crash):
    """Its figures were journaled as done before its checks ran: a process killed during them, or
    one whose failed-checks line the crash tore, left done as its last readable record, so
    --specdec-resume skipped the red test as measured and --specdec-save-baseline saved its
    regressed figure as the reference."""
    baseline, before, gate = regressing_project(pytester)
    run_here(pytester, *gate).assert_outcomes(failed=1)
    path = pytester.path / ".specdec" / "journal.jsonl"
    figures, verdict = path.read_text().splitlines(keepends=True)
    path.write_text(figures + ("" if crash == "before its verdict" else verdict[:len(verdict) // 2]))

    result = run_here(pytester, "--specdec-resume", "--specdec-save-baseline", *gate)
    result.assert_outcomes(failed=1)  # measured and gated again, not skipped as done
    result.stdout.fnmatch_lines(["*regression against cpu.json*"])
    result.stdout.no_fnmatch_line("*already measured*")
    assert baseline.read_text() == before


def test_a_passing_test_is_resumed_once_its_verdict_is_journaled(pytester):
    """Its figures go to the journal before its checks, its `done` mark after them: a torn mark
    leaves it to be measured again, a whole one resumes it."""
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embedded"\n')
    pytester.makepyfile(test_widgets=RECORDING_TEST)
    run_here(pytester).assert_outcomes(passed=1)
    path = pytester.path / ".specdec" / "journal.jsonl"
    figures, mark = path.read_text().splitlines(keepends=True)
    path.write_text(figures + mark[:len(mark) // 2])
    result = run_here(pytester, "--specdec-resume")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*journal.jsonl:2: skipped an incomplete last line*"])
    result = run_here(pytester, "--specdec-resume", "--specdec-report", "rep")
    result.assert_outcomes(skipped=1)
    [row] = json.loads((pytester.path / "rep" / "results.json").read_text())["results"]
    assert row["metrics"]["widgets"] == 3.0 and row["outcome"] == "passed"


@pytest.mark.parametrize("how", ["a summary that raises", "no terminal"])
def test_the_baseline_and_the_report_are_written_when_no_terminal_summary_follows(pytester, how):
    """pytest-benchmark's --benchmark-compare-fail raises in its terminal summary, and -p
    no:terminal has none: the baseline and the report were written there, last, and were lost."""
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embedded"\n')
    pytester.makepyfile(test_widgets=RECORDING_TEST)
    args = ["--specdec-save-baseline", "--specdec-report", "rep"]
    if how == "no terminal":
        args += ["-p", "no:terminal"]
    else:
        pytester.makeconftest("""
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_terminal_summary(terminalreporter):
    raise RuntimeError("Performance has regressed")
""")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=240)  # -rA needs a terminal
    assert (result.ret == 0) is (how == "no terminal"), result.stderr.str()
    entries = json.loads((pytester.path / "baselines" / "cpu.json").read_text())["entries"]
    assert entries["test_widgets"]["widgets"]["value"] == 3.0
    assert (pytester.path / "rep" / "results.json").is_file()


def test_a_known_issue_that_now_passes_is_measured_again_on_resume(pytester):
    """XPASS(strict) fails the run, but its figures were journaled as done: resume skipped it (a red
    run went green) and a merge saved its figures as a reference."""
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embedded"\n')
    pytester.makepyfile(test_widgets="import pytest\n\n@pytest.mark.xfail(strict=True, reason='known issue')\n"
                                     + RECORDING_TEST.strip() + "\n")
    run_here(pytester).assert_outcomes(failed=1)
    assert [r["status"] for r in journal_lines(pytester)] == ["measured", "failed-checks"]
    result = run_here(pytester, "--specdec-resume")
    result.assert_outcomes(failed=1)  # measured again, and failed again
    result.stdout.fnmatch_lines(["*XPASS(strict)*known issue*"])


def test_a_test_that_fails_after_recording_shows_its_figures(pytester):
    """The unsharded summary showed `-` where a merge of the same run's shards showed the figures."""
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embedded"\n')
    pytester.makepyfile(test_widgets="def test_widgets(specdec_record):\n"
                                     "    specdec_record.metric('output_tok_s', 123.0, 'higher')\n"
                                     "    assert False, 'too slow for me'\n")
    result = run_here(pytester, "--specdec-report", "rep")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["test_widgets *  123.0 * FAILED: AssertionError: too slow for me"])
    [row] = json.loads((pytester.path / "rep" / "results.json").read_text())["results"]
    assert row["metrics"]["output_tok_s"] == 123.0 and row["outcome"] == "failed"


@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["one-process", "xdist"])
def test_a_resumed_test_is_judged_again_under_this_runs_gate(pytester, workers):
    """The journal's figures were trusted with the verdict of the run that measured them: a resumed
    run with a gate, a baseline or --specdec-require-baseline that fails them skipped the test as
    passed (`resumed`, exit 0), and its summary's notes left resumed results out. Under xdist one
    worker holds its one test, as a second would idle: the verdict still crosses to the controller."""
    baseline, before, gate = regressing_project(pytester)
    entries = json.loads(before)
    run_here(pytester, *workers).assert_outcomes(passed=1)  # compared with the baseline, but not gated

    result = run_here(pytester, "--specdec-resume", *gate, "--specdec-report", "rep", "--junitxml", "junit.xml",
                 *workers)
    result.assert_outcomes(failed=1)  # as a measuring run with this gate, on the journaled figures
    result.stdout.fnmatch_lines(["regression against cpu.json:", "widgets 3.00 < baseline 5.00 -10% (-40.0%)",
                                 "(judged on its figures resumed from *journal.jsonl, measured *)"])
    result.stdout.re_match_lines([r"test_widgets +- .* FAILED: regression against cpu.json: widgets 3.00 < .*"])
    result.stdout.no_fnmatch_line("*already measured*")
    [row] = json.loads((pytester.path / "rep" / "results.json").read_text())["results"]
    assert (row["outcome"], row["verdict"]) == ("failed", "regression")
    assert row["reason"].startswith("regression against cpu.json:\nwidgets 3.00 < baseline 5.00")
    assert "## Failures" in (pytester.path / "rep" / "report.md").read_text()
    junit = (pytester.path / "junit.xml").read_text()
    assert '<failure message="Failed: regression against cpu.json:' in junit
    assert 'name="specdec.widgets.verdict" value="regression"' in junit
    assert [r["status"] for r in journal_lines(pytester)] == ["measured", "done"]  # not measured again

    entries["entries"]["test_widgets"]["widgets"]["value"] = 3.0  # the baseline edited since
    baseline.write_text(json.dumps(entries))
    result = run_here(pytester, "--specdec-resume", *gate, *workers)
    result.assert_outcomes(skipped=1)
    result.stdout.re_match_lines([r"test_widgets +- .* ok$"])

    baseline.unlink()
    result = run_here(pytester, "--specdec-resume", *gate, *workers)
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["specdec: gate: no baseline file at *cpu.json: *, so none of the 1 gated "
                                 "figure(s) was compared*"])
    result = run_here(pytester, "--specdec-resume", *gate, "--specdec-require-baseline", *workers)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["no baseline to compare with in *cpu.json (required by "
                                 "--specdec-require-baseline): the baseline folder * holds no cpu.json, *"])
    assert len(journal_lines(pytester)) == 2


def test_a_resumed_test_is_held_to_this_runs_strict_noise(pytester):
    """A figure beyond its tolerance but not clearly so passes as `noisy`, and fails only under
    --specdec-strict-noise: a resumed run with it passed the journaled figure as before."""
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embedded"\n')
    pytester.makepyfile(test_widgets="def test_widgets(specdec_record):\n"
                                     "    specdec_record.metric('widgets', 4.4, 'higher', spread=1.0)\n")
    (pytester.path / "baselines").mkdir()
    (pytester.path / "baselines" / "cpu.json").write_text(json.dumps({
        "format": "pytest-specdec-baselines", "version": 1, "hardware_key": "cpu",
        "entries": {"test_widgets": {"widgets": {"value": 5.0, "direction": "higher", "spread": 1.0}}}}))
    gate = ("--specdec-compare-fail", "*:10%")
    result = run_here(pytester, *gate)
    result.assert_outcomes(passed=1)
    result.stdout.re_match_lines([r"test_widgets +- .* noisy"])
    result = run_here(pytester, "--specdec-resume", *gate, "--specdec-strict-noise")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["regression against cpu.json:", "*widgets*noisy*"])


def test_a_resumed_known_issue_is_decided_by_pytest_as_a_measured_one(pytester):
    """A test that passed and is now marked a strict known issue fails as XPASS(strict) when
    measured; resumed, the skip hid that."""
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embedded"\n')
    pytester.makepyfile(test_widgets=RECORDING_TEST)
    run_here(pytester).assert_outcomes(passed=1)
    pytester.makepyfile(test_widgets="import pytest\n\n@pytest.mark.xfail(strict=True, reason='known issue')\n"
                                     + RECORDING_TEST.strip() + "\n")
    result = run_here(pytester, "--specdec-resume")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*XPASS(strict)*known issue*"])


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_resumed_shard_is_judged_again_under_this_runs_losslessness_and_merged_so(
        pytester, no_leftover_engines, workers):
    """Outputs journaled under `--specdec-lossless off` were resumed as passed by a run that checks
    them, and the merge of that shard kept the verdict of the run that measured them. The test that
    fails now measures nothing: its configuration's duration stays the one measured."""
    project(pytester, methods=("ar", "ddtree"), budgets=(8,), engine_args=("--fault-lossy", "0.3"),
            prompts=2, max_new_tokens=16)
    shard = ("--specdec-shard=1/1", "--specdec-report=shard-1", *workers)
    run(pytester, *shard, "--specdec-lossless", "off").assert_outcomes(passed=2)
    durations = json.loads((pytester.path / "shard-1" / "shard.json").read_text())["durations"]
    result = run(pytester, *shard, "--specdec-resume")
    result.assert_outcomes(failed=1, skipped=1)  # ar's figures pass; ddtree's leave them
    result.stdout.fnmatch_lines(["ddtree-tp1-b8 is not lossless: prompt * differs from ar-tp1 at token *",
                                 "(judged on its figures resumed from *journal.jsonl, measured *)"])
    records = [json.loads(line) for line in (pytester.path / "shard-1" / "journal.jsonl").read_text().splitlines()]
    per_config: dict[str, list[str]] = {}
    for record in records:  # two workers' records interleave; each configuration's are in order
        per_config.setdefault(record["config_id"], []).append(record["status"])
    assert sorted(per_config.values()) == [["measured", "done"]] * 2, records  # none measured again
    # judging took no time of the configuration's: the shard's durations are those it measured in
    assert json.loads((pytester.path / "shard-1" / "shard.json").read_text())["durations"] == durations

    merged = subprocess.run([sys.executable, "-m", "pytest_specdec", "merge", "--no-plots", "--out",
                             "merged", "shard-1"], cwd=pytester.path, capture_output=True, text=True,
                            timeout=120)
    assert merged.returncode != 0, merged.stdout + merged.stderr
    rows = {r["config"]: r for r in json.loads((pytester.path / "merged" / "results.json").read_text())["results"]}
    assert rows["ddtree-tp1-b8"]["outcome"] == "failed"
    assert rows["ddtree-tp1-b8"]["reason"].startswith("ddtree-tp1-b8 is not lossless: prompt ")
    assert rows["ar-tp1"]["outcome"] == "passed"


KNOWN_LOSSY = """
[[tool.specdec.known_issues]]
method = "ddtree"
budget = [8]
reason = "accepts wrong drafts: outputs differ from ar"
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_resumed_known_issue_is_compared_with_the_reference_this_run_measured_before_it(
        pytester, no_leftover_engines, workers):
    """A lossy ddtree journaled by a run without ar, then filed as a known issue: the resumed run
    measures ar first and stands ddtree in. Judged only at collection, before ar's outputs existed,
    it read [XPASS(strict)] (its outputs compared with nothing), where one uninterrupted run finds
    the divergence that is its expected failure. Under xdist its stand-in may end before ar
    measures: it then skips as not compared, and its row gets ar's verdict."""
    args = dict(methods=("ar", "ddtree"), budgets=(8,), engine_args=("--fault-lossy", "0.3"), prompts=2,
                max_new_tokens=16)
    project(pytester, **args)
    run(pytester, "--deselect", "test_generation.py::test_generation[ar-tp1-chat]").assert_outcomes(
        passed=1, deselected=1)
    project(pytester, **args, extra=KNOWN_LOSSY)
    result = run(pytester, "--specdec-resume", *workers)
    assert result.ret == 0
    if not workers:
        result.assert_outcomes(passed=1, xfailed=1)
        result.stdout.fnmatch_lines(["PASSED test_generation.py::test_generation[[]ar-tp1-chat[]]",
                                     "XFAIL test_generation.py::test_generation[[]ddtree-tp1-b8-chat[]]*"])
    result.stdout.re_match_lines([r"ddtree-tp1-b8 +chat .* xfailed: known issue: accepts wrong d.*"])
    result.stdout.no_fnmatch_line("*XPASS*")
    statuses = [(r["config_id"].split("[")[-1], r["status"]) for r in journal_figures(pytester)]
    assert statuses == [("ddtree-tp1-b8-chat]", "measured"), ("ar-tp1-chat]", "measured")]  # ddtree not measured again


def test_a_resumed_configuration_is_not_held_to_the_old_outputs_of_a_reference_measured_again(
        pytester, no_leftover_engines):
    """The reference's last record failed its checks, with other outputs (a server since fixed):
    this run measures it again, and a resumed ddtree judged against those old outputs failed,
    though it matches the reference this run measures."""
    project(pytester, methods=("ar", "ddtree"), budgets=(8,), prompts=2, max_new_tokens=16)
    run(pytester).assert_outcomes(passed=2)
    [ar] = [r for r in journal_figures(pytester) if "ar-tp1" in r["config_id"]]
    outputs = ar["data"]["outputs"]
    wrong = {**outputs, "tokens": [[(t + 1) % 200 for t in tokens] for tokens in outputs["tokens"]]}
    stale = {**ar, "status": "failed-checks", "data": {**ar["data"], "outputs": wrong}}
    with (pytester.path / ".specdec" / "journal.jsonl").open("a") as journal:
        journal.write(json.dumps(stale) + "\n")
    result = run(pytester, "--specdec-resume")
    result.assert_outcomes(passed=2)  # ar measured again, ddtree's stand-in compared with it
    result.stdout.no_fnmatch_line("*is not lossless*")
    result.stdout.fnmatch_lines(["PASSED test_generation.py::test_generation[[]ar-tp1-chat[]]",
                                 "PASSED test_generation.py::test_generation[[]ddtree-tp1-b8-chat[]]"])
    assert [r["status"] for r in journal_figures(pytester)][-1] == "measured"  # ddtree not measured again


def _junit_outcomes(path) -> dict[str, str]:
    import xml.etree.ElementTree as ET

    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        out[case.get("name")] = kinds[0] if kinds else "passed"
    return out


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_resumed_lossy_configuration_fails_its_own_test_not_the_references(
        pytester, no_leftover_engines, workers):
    """A lossy ddtree journaled by a run without ar, resumed by a run that measures ar: ar's test
    went red naming ddtree, which was skipped as passed, where one uninterrupted run fails
    ddtree's own test. Under xdist its stand-in may end before ar measures: it then skips, its
    row gets ar's verdict and the run fails."""
    args = dict(methods=("ar", "ddtree"), budgets=(8,), engine_args=("--fault-lossy", "0.3"), prompts=2,
                max_new_tokens=16)
    project(pytester, **args)
    run(pytester, "--deselect", "test_generation.py::test_generation[ar-tp1-chat]").assert_outcomes(
        passed=1, deselected=1)
    result = run(pytester, "--specdec-resume", "--junitxml=junit.xml", *workers)
    assert result.ret == 1
    junit = _junit_outcomes(pytester.path / "junit.xml")
    assert junit["test_generation[ar-tp1-chat]"] == "passed"
    stand_in = junit["test_generation[ddtree-tp1-b8-chat]"]
    assert stand_in == "failure" or workers and stand_in == "skipped"
    result.stdout.re_match_lines([r"ar-tp1 +chat .* -$",
                                  r"ddtree-tp1-b8 +chat .* FAILED: ddtree-tp1-b8 is not lossless: .*"])
    ar = [r for r in journal_lines(pytester) if "ar-tp1" in r["config_id"]]
    assert [r["status"] for r in ar] == ["measured", "done"]  # ar passed its checks


def test_a_reference_the_attached_server_skips_is_not_awaited_by_a_resumed_configuration(
        pytester, no_leftover_engines):
    """Resumed ddtree was held to ar as to a reference this run measures, though ar's test was
    to skip as another configuration than the attached server's (marked after resume decided):
    its stand-in skipped saying ar's outputs would come from another xdist worker, with none."""
    project(pytester, methods=("ar", "ddtree"), budgets=(8,))
    run(pytester, "--deselect", "test_generation.py::test_generation[ar-tp1-chat]").assert_outcomes(
        passed=1, deselected=1)
    # an attached ddtree server, as AttachBackend.other_configuration reads its /server_info
    pytester.makeconftest("""
from pytest_specdec import backends

def _other(self, case, state):
    return "attached server is ddtree-tp1-b8; this test needs ar-tp1" if case.method == "ar" else None

backends.Backend.other_configuration = _other
""")
    result = run(pytester, "--specdec-resume")
    result.assert_outcomes(skipped=2)
    result.stdout.no_fnmatch_line("*another xdist worker*")
    result.stdout.fnmatch_lines(["SKIPPED * already measured (resumed from *"])


def test_a_stand_ins_progress_line_says_its_figures_were_resumed(pytester):
    """A stand-in's progress line read as a fresh measurement: nothing told the figures came from
    the journal."""
    pytester.makepyprojecttoml('[tool.specdec]\nbackend = "embedded"\n')
    pytester.makepyfile(test_widgets=RECORDING_TEST)
    result = run_here(pytester)
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*resumed from*")
    pytester.makepyfile(test_widgets="import pytest\n\n@pytest.mark.xfail(strict=True, reason='known issue')\n"
                                     + RECORDING_TEST.strip() + "\n")
    result = run_here(pytester, "--specdec-resume")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["specdec [[]1/1[]] test_widgets: (resumed from .specdec/journal.jsonl, "
                                 "measured 2*; not measured now)"])


def test_a_torn_journal_line_is_said_once_at_its_place(pytester, no_leftover_engines):
    """A resumed run reads the journal more than once (what to resume, then each outputs check):
    each read warned of the same torn line again, located in the plugin's code. One engine: the
    resumed run boots none, and reads the journal for what to resume, then for the outputs check
    of the resumed ddtree's figures (held to ar's outputs, of which none are journaled)."""
    project(pytester, max_new_tokens=12)
    run(pytester).assert_outcomes(passed=1)
    path = pytester.path / ".specdec" / "journal.jsonl"
    with path.open("a") as journal:
        journal.write('{"v": 2, "config_id": "x')
    result = run(pytester, "--specdec-resume")
    result.assert_outcomes(skipped=1, warnings=1)  # the summary would merge repeats at one place: counted
    summary = result.stdout.str().split("warnings summary")[-1].split("-- Docs")[0]
    assert summary.count("skipped an incomplete last line") == 1, summary
    assert "pytest_specdec" not in summary, summary  # located at the journal's line


INTERRUPTED_TESTS = """
import os

def test_first(specdec_record):
    specdec_record.metric("my_fig", 1.0, "higher")

def test_second(specdec_record):
    if os.environ.get("INTERRUPT"):
        raise KeyboardInterrupt
    specdec_record.metric("my_fig", 2.0, "higher")

def test_third(specdec_record):
    specdec_record.metric("my_fig", 3.0, "higher")
"""


def test_an_interrupted_run_says_how_many_measurements_finished_and_how_to_resume(pytester, monkeypatch):
    """A run ended by Ctrl-C printed its table and nothing more: a user who ran it again without
    --specdec-resume measured everything anew. The summary now says what finished, where it is
    kept, and the flag that measures only the rest; a run that finishes says nothing of it."""
    pytester.makepyfile(test_figures=INTERRUPTED_TESTS)
    monkeypatch.setenv("INTERRUPT", "1")
    # in a process of its own: in this one the KeyboardInterrupt would end the outer run
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["specdec: run interrupted with 1 of 3 measurement(s) done, kept in the "
                                 "journal .specdec/journal.jsonl: run it again with --specdec-resume to "
                                 "measure only the rest"])

    monkeypatch.delenv("INTERRUPT")
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "--specdec-resume")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.no_fnmatch_line("*run interrupted*")


#: Ctrl-C in the first configuration's test, before it recorded (as during its server's boot).
INTERRUPTED_IN_FIRST_TEST = """
def test_figures(specdec_spec, specdec_record):
    raise KeyboardInterrupt
"""


def test_a_run_interrupted_before_any_measurement_does_not_send_the_user_to_resume(pytester):
    """Ctrl-C during the first server's boot said `0 of 3 measurement(s) done, kept in the journal
    .specdec/journal.jsonl: run it again with --specdec-resume`, of a journal that did not exist
    (the resumed run then said so); nothing finished, so it says that a run again measures all."""
    pytester.makepyprojecttoml("[tool.specdec]\nbackend = 'embedded'\n[tool.specdec.matrix.cpu]\n"
                               "methods = ['ar', 'dflash']\ntp = [1]\n")
    pytester.makepyfile(test_figures=INTERRUPTED_IN_FIRST_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["specdec: run interrupted before any of its 2 measurement(s) finished: "
                                 "none is journaled, so a run again measures them all"])
    result.stdout.no_fnmatch_line("*--specdec-resume*")
    assert not (pytester.path / ".specdec" / "journal.jsonl").exists()


def test_resume_without_a_journal_says_that_every_test_is_measured(pytester):
    """--specdec-resume with no journal where it looks (a mistyped --specdec-journal, another
    project folder) measured the whole matrix again without a word, as a first run does."""
    pytester.makepyfile(test_figures=INTERRUPTED_TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "--specdec-resume",
                                "--specdec-journal=elsewhere/journal.jsonl")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["specdec: resume: no journal at */elsewhere/journal.jsonl to resume from, so "
                                 "every test is measured; if the interrupted run journaled elsewhere, give "
                                 "that file with --specdec-journal=PATH"])
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "--specdec-resume",
                                "--specdec-journal=elsewhere/journal.jsonl")
    result.assert_outcomes(skipped=3)
    result.stdout.no_fnmatch_line("*no journal at*")


@pytest.mark.parametrize("quiet", [["-q"], ["-qq"], ["--no-header"]])
def test_resume_without_a_journal_says_so_where_the_header_is_hidden(pytester, quiet):
    """The warning lived in the report header alone, which -q, -qq and --no-header leave out:
    such a run measured everything again without a word. The header's other lines stay out."""
    pytester.makepyfile(test_figures=INTERRUPTED_TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "--specdec-resume",
                                "--specdec-journal=elsewhere/journal.jsonl", *quiet)
    assert result.ret == pytest.ExitCode.OK  # -qq prints no outcome line to parse
    result.stdout.fnmatch_lines(["specdec: resume: no journal at */elsewhere/journal.jsonl to resume from, so "
                                 "every test is measured*"])
    result.stdout.no_fnmatch_line("specdec: gate *")
