"""The speculation and losslessness guards end to end, against the embedded engine's faults.

Projects as in test_bench_flow.py (a matrix, one small workload, the shipped test_generation),
run in a subprocess so that servers, journal and verdicts are all real.
"""

from __future__ import annotations

import json

import pytest

from test_bench_flow import journal_figures, no_leftover_engines, project, run  # noqa: F401

pytest.importorskip("torch")


def test_a_noise_drafter_is_red_at_the_smallest_and_largest_ddtree_budget(pytester, no_leftover_engines):
    """draft_agreement = 0: every draft is noise. Its accept length (1.0-1.2 here, growing with
    the budget) passed a fixed 1.05; against what a random draft reaches at each budget it is red.
    The smallest budget has the lowest chance bound, the largest the longest accept length."""
    project(pytester, methods=("ddtree",), budgets=(8, 64), agreement=0.0, prompts=4, max_new_tokens=48)
    result = run(pytester)
    result.assert_outcomes(failed=2)
    for budget in (8, 64):
        result.stdout.re_match_lines([
            rf".*ddtree-tp1-b{budget}.*the drafts do no better than chance.*",
        ])
    result.stdout.fnmatch_lines(["*a random draft of 64 nodes over a 259-token vocabulary accepts up to 0.247 "
                                 "per step by chance*"])


def test_the_default_drafter_stays_green_at_the_smallest_and_largest_budget(pytester, no_leftover_engines):
    project(pytester, methods=("ddtree",), budgets=(8, 64), prompts=4, max_new_tokens=48)
    run(pytester).assert_outcomes(passed=2)


@pytest.mark.parametrize("order", [("ar", "ddtree"), ("ddtree", "ar")])
def test_a_lossy_configuration_fails_its_own_test_whichever_the_matrix_lists_first(
        pytester, no_leftover_engines, order):
    """--fault-lossy 0.3 accepts wrong drafts; ar, which drafts nothing, stays the reference.
    Listed first, ddtree ran first: its own test passed (and so did --junitxml) and only ar's
    failed, naming it. The reference now runs first, so ddtree's own test fails."""
    project(pytester, methods=order, budgets=(8,), engine_args=("--fault-lossy", "0.3"))
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*_ test_generation[[]ddtree-tp1-b8-chat[]] _*",
        "ddtree-tp1-b8 is not lossless: prompt * differs from ar-tp1 at token *; "
        "ar-tp1 continues [[]*[]], ddtree-tp1-b8 continues [[]*[]]",
        "FAILED *test_generation[[]ddtree-tp1-b8-chat[]]*",
    ])
    result.stdout.fnmatch_lines(["PASSED *test_generation[[]ar-tp1-chat[]]*"])


AFTER_DDTREE = """
import os
import time
from pathlib import Path

import pytest

REPORTED = "ddtree-reported"  # in the run's folder, where the controller and its workers run


def pytest_runtest_logreport(report):
    # where the summary is written (the workers carry PYTEST_XDIST_WORKER): ddtree's test has ended
    # there, judged; its journaled figures alone left ar free to measure while ddtree's worker had
    # yet to judge them, so ddtree met ar's outputs and failed on its own
    if report.when == "call" and "ddtree-tp1-b8" in report.nodeid and "PYTEST_XDIST_WORKER" not in os.environ:
        open(REPORTED, "w").close()


def pytest_runtest_setup(item):
    # ar's test starts once ddtree's test has ended: ddtree ends before its reference
    if "ar-tp1" in item.nodeid:
        reported = Path(REPORTED)
        deadline = time.monotonic() + 120
        while not reported.exists():
            if time.monotonic() > deadline:
                pytest.fail(f"ddtree-tp1-b8's report did not reach the controller within 120 s: the order "
                            f"this test needs did not hold")
            time.sleep(0.1)
"""


def measured_before_its_reference(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """A lossy ddtree measured before ar, on another xdist worker: only ar's test can find
    ddtree out (a resumed run stands ddtree in instead: test_resume.py)."""
    project(pytester, methods=("ar", "ddtree"), budgets=(8,), engine_args=("--fault-lossy", "0.3"),
            prompts=2, max_new_tokens=16)
    pytester.makeconftest(AFTER_DDTREE)
    return run(pytester, "-n", "2", *args)


def test_a_lossy_configuration_measured_before_its_reference_reads_failed_in_every_report(
        pytester, no_leftover_engines):
    """Its own test passed (the reference's failed, naming it): the summary, results.json,
    report.md and shard.json showed it as passed with no verdict, beside the failed reference, and
    --specdec-save-baseline saved the lossy figures as the reference for later runs."""
    result = measured_before_its_reference(pytester, "--specdec-shard=1/1", "--specdec-report=shard-1",
                                           "--specdec-save-baseline")
    result.assert_outcomes(passed=1, failed=1)  # pytest's own outcomes: the reference's test failed
    result.stdout.re_match_lines([r"ddtree-tp1-b8 +chat .* FAILED: ddtree-tp1-b8 is not lossless: .*"])
    folder = pytester.path / "shard-1"
    rows = {r["config"]: r for r in json.loads((folder / "results.json").read_text())["results"]}
    tests = {t["config"]: t for t in json.loads((folder / "shard.json").read_text())["tests"]}
    for found in (rows["ddtree-tp1-b8"], tests["ddtree-tp1-b8"]):
        assert found["outcome"] == "failed"
        assert found["reason"].startswith("ddtree-tp1-b8 is not lossless: prompt ")
        assert found["reason"].endswith("(found by the test of ar-tp1, measured after it)")
    assert "### ddtree-tp1-b8 [chat]" in (folder / "report.md").read_text()
    result.stdout.fnmatch_lines(["specdec: nothing saved into *cpu.json: its 1 result(s) are of failed tests, "
                                 "which are no reference (test_generation[[]ar-tp1-chat[]]); 1 result(s) are "
                                 "of configurations that are not lossless (test_generation[[]ddtree-tp1-b8-chat[]])"])
    assert not (pytester.path / "baselines" / "cpu.json").exists()


def test_a_lossy_configuration_measured_before_its_reference_is_measured_again_on_resume(
        pytester, no_leftover_engines):
    """The reference's test found it lossy, but its journal record stayed `done`: a resumed run
    skipped it as passed and held the reference to its old outputs, red until a run without
    resume, however the server was fixed."""
    measured_before_its_reference(pytester).assert_outcomes(passed=1, failed=1)
    latest = {r["config_id"].split("::")[-1]: r["status"] for r in journal_figures(pytester)}
    assert latest["test_generation[ddtree-tp1-b8-chat]"] == "failed-checks"
    result = run(pytester, "--specdec-resume")
    result.assert_outcomes(passed=1, failed=1)  # both measured again, not ddtree resumed as passed
    result.stdout.fnmatch_lines(["ddtree-tp1-b8 is not lossless: prompt * differs from ar-tp1 at token *",
                                 "FAILED *test_generation[[]ddtree-tp1-b8-chat[]]*"])


def test_outputs_are_compared_with_the_reference_of_the_same_test_function(pytester, no_leftover_engines):
    """A second test function ran 8 tokens of the chat prompts under the workload name `chat`:
    each test's ddtree was compared with the other test's ar as well, and a healthy engine
    failed as not lossless (at token 9, where the shorter output ends)."""
    project(pytester, methods=("ddtree", "ar"), budgets=(8,), prompts=2, max_new_tokens=16)
    pytester.makepyfile(test_generation="""
from pytest_specdec.workloads import load_workload


def test_generation(specdec_server, specdec_workload, specdec_record):
    assert specdec_record.run(specdec_server, specdec_workload).completion_tokens > 0


def test_short(specdec_server, specdec_record):
    workload = load_workload("chat").resized(2).replace(max_new_tokens=8)
    assert specdec_record.run(specdec_server, workload).completion_tokens > 0
""")
    result = run(pytester)
    result.assert_outcomes(passed=4)
    result.stdout.no_fnmatch_line("*is not lossless*")
    result.stdout.no_fnmatch_line("*lossless: not checked*")


KNOWN_LOSSY = """
[[tool.specdec.known_issues]]
method = "ddtree"
budget = [8]
reason = "accepts wrong drafts: outputs differ from ar"
"""


def test_a_known_issue_listed_before_its_reference_is_an_expected_failure(pytester, no_leftover_engines):
    """Listed first, the known issue ran before ar: nothing compared its outputs, so its test
    passed and read [XPASS(strict)], as if the issue were fixed (and, before that, the reference's
    test failed naming it)."""
    project(pytester, methods=("ddtree", "ar"), budgets=(8,), engine_args=("--fault-lossy", "0.3"),
            prompts=2, max_new_tokens=16, extra=KNOWN_LOSSY)
    result = run(pytester)
    result.assert_outcomes(passed=1, xfailed=1)
    result.stdout.fnmatch_lines(["PASSED test_generation.py::test_generation[[]ar-tp1-chat[]]",
                                 "XFAIL test_generation.py::test_generation[[]ddtree-tp1-b8-chat[]]*"])
    result.stdout.no_fnmatch_line("*XPASS*")


def test_a_known_issue_whose_reference_is_left_out_is_not_called_fixed(pytester, no_leftover_engines):
    """Without ar in the run its lossy outputs met nothing to differ from: [XPASS(strict)] said
    the issue was fixed. Nothing compared them, so it is not known: the test skips saying so."""
    project(pytester, methods=("ar", "ddtree"), budgets=(8,), engine_args=("--fault-lossy", "0.3"),
            prompts=2, max_new_tokens=16, extra=KNOWN_LOSSY)
    result = run(pytester, "--deselect", "test_generation.py::test_generation[ar-tp1-chat]")
    result.assert_outcomes(skipped=1, deselected=1)
    result.stdout.fnmatch_lines([
        "SKIPPED * known issue: accepts wrong drafts: outputs differ from ar: its test passed, but its "
        "outputs could not be compared with ar-tp1's, which had recorded none yet *so whether it is "
        "fixed is not known here"])
    result.stdout.no_fnmatch_line("*XPASS*")


# ar measures only once ddtree's test has ended where the summary is written: journaled, its verdict
# (`failed-checks`) is still on its way from the other worker, and ar's report could come first
WAITING_TEST = """
import time
from pathlib import Path


def test_generation(specdec_server, specdec_workload, specdec_record):
    if specdec_server.spec.method == "ar":
        for _ in range(1200):
            if Path("ddtree-reported").exists():
                break
            time.sleep(0.1)
        else:
            raise AssertionError("ddtree's report never reached the controller")
    assert specdec_record.run(specdec_server, specdec_workload).completion_tokens > 0
"""

# The controller's word that ddtree's test result reached it (the workers carry PYTEST_XDIST_WORKER)
REPORTED_CONFTEST = """
import os
from pathlib import Path


def pytest_runtest_logreport(report):
    if report.when == "call" and "ddtree" in report.nodeid and "PYTEST_XDIST_WORKER" not in os.environ:
        Path("ddtree-reported").write_text("")
"""


@pytest.mark.parametrize("lossy", [True, False])
def test_a_known_issue_checked_after_its_test_under_xdist_gets_the_reference_s_verdict(
        pytester, no_leftover_engines, lossy):
    """Two workers, one configuration each; ddtree's test ends before ar measures. It read
    [XPASS(strict)] whether or not its outputs left ar's. Now it skips as not compared, and the
    summary gives the verdict ar's outputs allow: an expected failure where they differ, an
    XPASS(strict) that fails the run where they match (the issue may be fixed)."""
    pytest.importorskip("xdist")
    project(pytester, methods=("ar", "ddtree"), budgets=(8,),
            engine_args=("--fault-lossy", "0.3") if lossy else (), prompts=2, max_new_tokens=16,
            extra=KNOWN_LOSSY)
    pytester.makepyfile(test_generation=WAITING_TEST)
    pytester.makeconftest(REPORTED_CONFTEST)
    result = run(pytester, "-n", "2")
    result.assert_outcomes(passed=1, skipped=1)
    # xdist's status letters are no file name that write_line ends: ar's line began after ddtree's `s`
    result.stdout.re_match_lines([r"specdec \[2/2\] ar-tp1 chat: output_tok_s=.*"])
    if lossy:
        assert result.ret == 0
        result.stdout.re_match_lines([r"ddtree-tp1-b8 +chat .* xfailed: known issue: accepts wrong d.*of ar-tp1, measured after it\)"])
        result.stdout.no_fnmatch_line("*XPASS*")
    else:
        assert result.ret == 1
        result.stdout.re_match_lines([r"ddtree-tp1-b8 +chat .* FAILED: \[XPASS\(strict\)\] known issue: .*"])
        result.stdout.fnmatch_lines(["specdec: known issue(s) whose outputs match their reference's, compared "
                                     "after their test ran: test_generation[[]ddtree-tp1-b8-chat[]] "
                                     "([[]XPASS(strict)[]]); remove the known issue if it is fixed"])


def test_a_run_that_leaves_out_the_reference_says_what_it_did_not_check(pytester, no_leftover_engines):
    """-k, -m, --deselect or --lf can leave the reference out of a run: a lossy configuration
    then meets no reference and passes; the summary says it was not checked, against what, and
    which of the options given left the reference out (it named all four whatever was given)."""
    project(pytester, methods=("ar", "dflash", "ddtree"), budgets=(8,),
            engine_args=("--fault-lossy", "0.3"), prompts=2, max_new_tokens=16)
    result = run(pytester, "--deselect", "test_generation.py::test_generation[ar-tp1-chat]",
                 "--specdec-report", "report")
    result.assert_outcomes(passed=2, deselected=1)
    result.stdout.fnmatch_lines(["specdec: report written to *report (* files)"])
    assert "no report written" not in result.stdout.str()
    result.stdout.fnmatch_lines([
        "specdec: lossless: not checked: dflash-tp1 [[]chat[]], ddtree-tp1-b8 [[]chat[]] (their reference "
        "ar-tp1 recorded no outputs in this run: left out by --deselect, skipped, or failed before it "
        "measured); run the reference with them"])


def test_the_unchecked_tests_of_two_test_functions_of_one_configuration_are_told_apart(
        pytester, no_leftover_engines):
    """Two test functions measuring one configuration and workload read `dflash-tp1 [chat],
    dflash-tp1 [chat]`: which test was left unchecked could not be told; each is named."""
    project(pytester, methods=("ar", "dflash"), prompts=2, max_new_tokens=8)
    pytester.makepyfile(test_again="""
def test_again(specdec_server, specdec_workload, specdec_record):
    specdec_record.run(specdec_server, specdec_workload)
""")
    result = run(pytester, "-p", "no:randomly", "-k", "dflash")
    result.assert_outcomes(passed=2, deselected=2)
    result.stdout.fnmatch_lines([
        "specdec: lossless: not checked: test_again[[]dflash-tp1-chat[]], test_generation[[]dflash-tp1-chat[]] "
        "(their reference ar-tp1 recorded no outputs in this run: left out by -k 'dflash', skipped, *"])


def test_a_reference_the_command_line_did_not_name_is_said_so_not_blamed_on_options(
        pytester, no_leftover_engines):
    """A run of one test by its node id leaves the reference out with no -k, -m, --deselect or
    --lf given: the line named those four, none of which the user had passed."""
    project(pytester, methods=("ar", "dflash"), prompts=2, max_new_tokens=8)
    result = run(pytester, "test_generation.py::test_generation[dflash-tp1-chat]")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "specdec: lossless: not checked: dflash-tp1 [[]chat[]] (their reference ar-tp1 recorded no outputs "
        "in this run: not among the tests the command line named, skipped, or failed before it measured)*"])


def test_a_sampled_workload_says_at_the_end_that_nothing_checked_it(pytester, no_leftover_engines):
    """Only the header said so, which -q hides: a lossy engine passed with no word on the guard."""
    project(pytester, methods=("ar", "ddtree"), budgets=(8,), engine_args=("--fault-lossy", "0.3"),
            prompts=2, max_new_tokens=16)
    pyproject = pytester.path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("max_new_tokens = 16", "max_new_tokens = 16\ntemperature = 0.7"))
    result = run(pytester, "-q")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "specdec: lossless: not checked: ddtree-tp1-b8 [[]chat[]] (sampled: chat at temperature 0.7; "
        "only greedy outputs must equal the reference's); a workload with temperature = 0 checks them"])


def test_a_sampled_workload_the_test_builds_says_at_the_end_that_nothing_checked_it(
        pytester, no_leftover_engines):
    """The note read the configured workload's temperature (0 here), not the one the test ran:
    a lossy engine passed a workload the test built at temperature 0.7 with no word on the guard."""
    project(pytester, methods=("ar", "ddtree"), budgets=(8,), engine_args=("--fault-lossy", "0.3"),
            prompts=2, max_new_tokens=16)
    pytester.makepyfile(test_generation="""
from pytest_specdec.workloads import load_workload

def test_generation(specdec_server, specdec_workload, specdec_record):
    sampled = load_workload("chat", max_new_tokens=16, temperature=0.7).resized(2).replace(name="chat")
    specdec_record.run(specdec_server, sampled)
""")
    result = run(pytester, "-q")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "specdec: lossless: not checked: ddtree-tp1-b8 [[]chat[]] (sampled: chat at temperature 0.7; "
        "only greedy outputs must equal the reference's); a workload with temperature = 0 checks them"])


def test_a_temperature_below_sglangs_epsilon_is_greedy_and_checked(pytester, no_leftover_engines):
    """SGLang decodes a temperature below its epsilon greedily; the guard took it for sampled and
    left a lossy engine's outputs unchecked, though the engine decodes it greedily too."""
    project(pytester, methods=("ar", "ddtree"), budgets=(8,), engine_args=("--fault-lossy", "0.3"),
            prompts=2, max_new_tokens=16)
    pyproject = pytester.path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("max_new_tokens = 16", "max_new_tokens = 16\ntemperature = 1e-7"))
    result = run(pytester, "-q")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["ddtree-tp1-b8 is not lossless: prompt * differs from ar-tp1 at token *"])
    result.stdout.no_fnmatch_line("*sampled: chat*")


def test_top_k_1_is_greedy_whatever_the_temperature_and_checked(pytester, no_leftover_engines):
    """SGLang decodes top_k = 1 by argmax at any temperature; the guard took a workload at
    temperature 0.7 with top_k 1 for sampled and left a lossy engine's outputs unchecked."""
    project(pytester, methods=("ar", "ddtree"), budgets=(8,), engine_args=("--fault-lossy", "0.3"),
            prompts=2, max_new_tokens=16)
    pytester.makepyfile(test_generation="""
from pytest_specdec.workloads import load_workload

def test_generation(specdec_server, specdec_workload, specdec_record):
    top1 = load_workload("chat", max_new_tokens=16, temperature=0.7).resized(2).replace(
        name="chat", extra_sampling=(("top_k", 1),))
    specdec_record.run(specdec_server, top1)
""")
    result = run(pytester, "-q")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["ddtree-tp1-b8 is not lossless: prompt * differs from ar-tp1 at token *"])
    result.stdout.no_fnmatch_line("*sampled: chat*")


def test_figures_recorded_through_result_say_at_the_end_that_nothing_checked_their_outputs(
        pytester, no_leftover_engines):
    """specdec_record.result(measurement) takes figures, not outputs: a lossy engine measured so
    passed with no word on the guard, where run(server, workload) fails it."""
    project(pytester, methods=("ar", "ddtree"), budgets=(8,), engine_args=("--fault-lossy", "0.3"),
            prompts=2, max_new_tokens=16)
    pytester.makepyfile(test_generation="""
def test_generation(specdec_server, specdec_workload, specdec_record):
    specdec_record.result(specdec_server.run(specdec_workload))
""")
    result = run(pytester, "-q")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "specdec: lossless: not checked: ar-tp1 [[]chat[]], ddtree-tp1-b8 [[]chat[]] (measured through "
        "specdec_record.result(measurement), which records figures, not outputs); "
        "specdec_record.run(specdec_server, workload) records the outputs the guard compares"])


def test_a_reference_that_recorded_figures_alone_is_named_as_the_cause(pytester, no_leftover_engines):
    """ar measured through specdec_record.result(measurement), ddtree through run(): ddtree's note
    blamed its reference on being "left out by ..., skipped, or failed", which it was not; it ran and
    recorded figures without outputs, so there was nothing to compare ddtree's outputs with."""
    project(pytester, methods=("ar", "ddtree"), budgets=(8,), engine_args=("--fault-lossy", "0.3"),
            prompts=2, max_new_tokens=16)
    pytester.makepyfile(test_generation="""
def test_generation(specdec_spec, specdec_server, specdec_workload, specdec_record):
    if specdec_spec.method == "ar":
        specdec_record.result(specdec_server.run(specdec_workload))
    else:
        specdec_record.run(specdec_server, specdec_workload)
""")
    result = run(pytester, "-q")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "specdec: lossless: not checked: ddtree-tp1-b8 [[]chat[]] (their reference ar-tp1 recorded figures "
        "without outputs, through specdec_record.result(measurement), so there was nothing to compare them "
        "with); record the reference through specdec_record.run(specdec_server, workload)",
        "specdec: lossless: not checked: ar-tp1 [[]chat[]] (measured through specdec_record.result(measurement), "
        "which records figures, not outputs)*"])
    assert "skipped, or failed" not in result.stdout.str()


def test_a_reference_left_out_and_one_that_recorded_figures_alone_are_told_apart(pytester, no_leftover_engines):
    """Each cause names its own results and its own fix, on the one line."""
    project(pytester, methods=("ar", "ddtree"), budgets=(8,), prompts=2, max_new_tokens=8)
    pytester.makepyfile(test_generation="""
def test_generation(specdec_spec, specdec_server, specdec_workload, specdec_record):
    if specdec_spec.method == "ar":
        specdec_record.result(specdec_server.run(specdec_workload))
    else:
        specdec_record.run(specdec_server, specdec_workload)
""", test_again="""
import pytest

def test_again(specdec_spec, specdec_server, specdec_workload, specdec_record):
    if specdec_spec.method == "ar":
        pytest.skip("no reference here")
    specdec_record.run(specdec_server, specdec_workload)
""")
    result = run(pytester, "-q")
    result.assert_outcomes(passed=3, skipped=1)
    result.stdout.fnmatch_lines([
        "specdec: lossless: not checked: test_again[[]ddtree-tp1-b8-chat[]] (their reference ar-tp1 recorded no "
        "outputs in this run: not among the tests the command line named, skipped, or failed before it "
        "measured); run the reference with them; test_generation[[]ddtree-tp1-b8-chat[]] (their reference ar-tp1 "
        "recorded figures without outputs, *); record the reference through "
        "specdec_record.run(specdec_server, workload)"])


def test_the_guard_works_across_xdist_workers(pytester, no_leftover_engines):
    pytest.importorskip("xdist")
    project(pytester, methods=("ar", "dflash"), budgets=(8,), engine_args=("--fault-lossy", "0.3"))
    result = run(pytester, "-n", "2", "--dist", "loadgroup")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["dflash-tp1 is not lossless: prompt * differs from ar-tp1 at token *"])


def test_lossless_off_and_a_healthy_engine_pass(pytester, no_leftover_engines):
    project(pytester, methods=("ar", "ddtree"), budgets=(8,), engine_args=("--fault-lossy", "0.3"),
            extra='lossless = "off"')
    result = run(pytester)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["specdec: lossless off"])


@pytest.mark.parametrize("recurrent_tree", ["exact", "chain"])
def test_a_hybrid_model_is_lossless_only_with_the_tree_aware_recurrent_verify(pytester, no_leftover_engines,
                                                                             recurrent_tree):
    """tiny-hybrid (Gated DeltaNet + attention layers): with `exact` the recurrent layers see each
    node's own path and DDTree gives ar's tokens; with `chain` the tree's nodes leak into each
    other's recurrent state and the guard fails the run (docs/HYBRID.md has the full table)."""
    project(pytester, methods=("ar", "ddtree"), budgets=(32,), model_preset="tiny-hybrid",
            engine_args=("--recurrent-tree", recurrent_tree), prompts=1, max_new_tokens=32)
    result = run(pytester)
    if recurrent_tree == "exact":
        result.assert_outcomes(passed=2)
    else:
        result.assert_outcomes(passed=1, failed=1)
        result.stdout.fnmatch_lines(["ddtree-tp1-b32 is not lossless: prompt * differs from ar-tp1 at token *"])


def test_a_reference_that_failed_its_own_checks_still_holds_the_configurations_to_its_outputs(
        pytester, no_leftover_engines):
    """ar's figures regress (a baseline entry no figure reaches), so its test fails and its record
    is journaled failed-checks; its outputs are still the target's own, so ddtree, measured after
    it, must fail its own test on its lossy outputs, not wait for a late verdict."""
    project(pytester, methods=("ar", "ddtree"), budgets=(8,), engine_args=("--fault-lossy", "0.3"),
            prompts=2, max_new_tokens=16)
    unreachable = {"output_tok_s": {"value": 1e12, "direction": "higher"}}
    (pytester.path / "baselines").mkdir()
    (pytester.path / "baselines" / "cpu.json").write_text(json.dumps({
        "format": "pytest-specdec-baselines", "version": 1, "hardware_key": "cpu",
        "entries": {"test_generation[ar-tp1-chat]": unreachable}}))
    result = run(pytester, "--specdec-compare-fail", "output_tok_s:5%")
    result.assert_outcomes(failed=2)
    assert [line["status"] for line in journal_figures(pytester) if "ar-tp1" in line["config_id"]][-1] == "failed-checks"
    result.stdout.fnmatch_lines(["*_ test_generation[[]ddtree-tp1-b8-chat[]] _*",
                                 "ddtree-tp1-b8 is not lossless: prompt * differs from ar-tp1 at token *"])
