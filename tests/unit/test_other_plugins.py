"""pytest-specdec beside plugins that run a test again or reorder the run.

pytest-rerunfailures is not among this suite's dependencies: `RERUN_PLUGIN` runs a failed test's
protocol once more on the same item, logging the failed attempt's reports with the outcome
"rerun", as that plugin does (each failed phase, the teardown too, since its 16.7);
`RERUN_PLUGIN_BEFORE_16_6_1` logs the failed attempt only up to its first failed phase, as it
did before 16.6.1 (no teardown report of that attempt).
"""

from __future__ import annotations

import json
import re
from xml.etree import ElementTree as ET

import pytest

from test_bench_flow import journal_lines, no_leftover_engines, project, run  # noqa: F401

RERUN_PLUGIN = """
import pytest
from _pytest.runner import runtestprotocol


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for attempt in (1, 2):
        reports = runtestprotocol(item, nextitem=nextitem, log=False)
        again = attempt == 1 and any(r.failed for r in reports)
        for report in reports:
            if again and report.failed:
                report.outcome = "rerun"
            item.ihook.pytest_runtest_logreport(report=report)
        if not again:
            break
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def pytest_report_teststatus(report):
    if report.outcome == "rerun":
        return "rerun", "R", "RERUN"
"""

RERUN_PLUGIN_BEFORE_16_6_1 = RERUN_PLUGIN.replace("""
            item.ihook.pytest_runtest_logreport(report=report)
        if not again:""", """
            item.ihook.pytest_runtest_logreport(report=report)
            if again and report.outcome == "rerun":
                break
        if not again:""")
assert RERUN_PLUGIN_BEFORE_16_6_1 != RERUN_PLUGIN

SCORE_PROJECT = """
[tool.specdec]
backend = "embedded"

[tool.specdec.metrics]
score = "higher"

[tool.specdec.tolerances]
score = "0"
"""

# Each attempt records the next score of SCORES (a file of one number a line) and fails while
# the file says FAIL after it.
SCORE_TEST = """
from pathlib import Path


def test_score(specdec_record):
    lines = Path("SCORES").read_text().split()
    Path("SCORES").write_text("\\n".join(lines[1:]))
    score, fails = lines[0].split(",")
    specdec_record.metric("score", float(score))
    assert fails == "ok", "this attempt fails"
"""


def score_run(pytester: pytest.Pytester, *attempts: str, rerun: bool = True, args=(),
              plugin: str = RERUN_PLUGIN, subprocess: bool = False):
    """In-process unless `subprocess`: an attempt that raises KeyboardInterrupt would end this run."""
    (pytester.path / "SCORES").write_text("\n".join(attempts))
    if rerun:
        pytester.makeconftest(plugin)
    flags = ("-p", "no:cacheprovider", "-p", "no:randomly", *args)
    return pytester.runpytest_subprocess(*flags, timeout=120) if subprocess else pytester.runpytest(*flags)


def test_a_rerun_is_gated_and_a_regression_stays_red(pytester: pytest.Pytester):
    pytester.makepyprojecttoml(SCORE_PROJECT)
    pytester.makepyfile(test_score=SCORE_TEST)
    score_run(pytester, "10,ok", rerun=False, args=["--specdec-save-baseline"]).assert_outcomes(passed=1)

    result = score_run(pytester, "1,ok", "1,ok")  # regressed both times: red however often it runs
    assert result.parseoutcomes() == {"failed": 1, "rerun": 1}
    result.stdout.fnmatch_lines(["*score 1.00 < baseline 10.00*"])
    assert [r["status"] for r in journal_lines(pytester)] == ["measured", "failed-checks"] * 2


def test_a_rerun_that_passes_is_journaled_reported_and_saved_with_its_own_figures(
        pytester: pytest.Pytester):
    pytester.makepyprojecttoml(SCORE_PROJECT.replace('score = "0"', 'score = "off"'))
    pytester.makepyfile(test_score=SCORE_TEST)
    result = score_run(pytester, "3,FAIL", "7,ok",
                       args=["--specdec-save-baseline", "--specdec-report", "report", "--junitxml=j.xml"])
    assert result.parseoutcomes() == {"passed": 1, "rerun": 1}
    result.stdout.fnmatch_lines(["specdec: run again after failing: test_score (1 failed attempt); the table, "
                                 "the report and a saved baseline hold each one's last attempt*"])
    records = journal_lines(pytester)
    assert [(r["status"], r["data"].get("metrics", {}).get("score", {}).get("value")) for r in records] == \
        [("failed", 3.0), ("measured", 7.0), ("done", None)]  # the figures, then their checks' mark
    results = json.loads((pytester.path / "report" / "results.json").read_text())["results"]
    assert [(r["metrics"]["score"], r["outcome"]) for r in results] == [(7.0, "passed")]
    entries = json.loads((pytester.path / "baselines" / "cpu.json").read_text())["entries"]
    assert entries["test_score"]["score"]["value"] == 7.0
    # JUnit writes each attempt as a test case, the failed one with no failure in it: only the
    # attempt that counts carries figures
    cases = ET.parse(pytester.path / "j.xml").getroot().iter("testcase")
    assert [{p.get("name"): p.get("value") for p in case.iter("property")} for case in cases] == \
        [{}, {"specdec.score": "7.0"}]


def test_a_rerun_under_an_older_rerunfailures_keeps_the_figures_of_the_attempt_that_counts_in_junit(
        pytester: pytest.Pytester):
    """Before pytest-rerunfailures 16.6.1 the failed attempt's teardown was never reported: the
    controller dropped the figures from the next teardown it saw, the passing attempt's, and the
    JUnit file carried no figures of the test at all."""
    pytester.makepyprojecttoml(SCORE_PROJECT.replace('score = "0"', 'score = "off"'))
    pytester.makepyfile(test_score=SCORE_TEST)
    result = score_run(pytester, "3,FAIL", "7,ok", args=["--junitxml=j.xml"], plugin=RERUN_PLUGIN_BEFORE_16_6_1)
    assert result.parseoutcomes() == {"passed": 1, "rerun": 1}
    cases = list(ET.parse(pytester.path / "j.xml").getroot().iter("testcase"))
    assert {p.get("name"): p.get("value") for p in cases[-1].iter("property")} == {"specdec.score": "7.0"}


def test_a_rerun_counts_an_attempt_whose_call_and_teardown_failed_once(pytester: pytest.Pytester):
    """pytest-rerunfailures reports each failed phase of an attempt it runs again as "rerun" (the
    call's and the teardown's): the summary counted 2 failed attempts where one had failed."""
    pytester.makepyprojecttoml(SCORE_PROJECT.replace('score = "0"', 'score = "off"'))
    pytester.makepyfile(test_score=SCORE_TEST.replace("def test_score(specdec_record):", """import pytest


@pytest.fixture
def sticky():
    yield
    if not Path("torn-down").exists():
        Path("torn-down").write_text("")
        raise RuntimeError("the first attempt's teardown fails")


def test_score(sticky, specdec_record):"""))
    result = score_run(pytester, "3,FAIL", "7,ok")
    assert result.parseoutcomes() == {"passed": 1, "rerun": 2}  # pytest counts reports
    result.stdout.fnmatch_lines(["specdec: run again after failing: test_score (1 failed attempt);*"])


def test_a_rerun_interrupted_reports_the_attempt_that_failed_as_failed(pytester: pytest.Pytester):
    """A run interrupted (Ctrl-C, SIGTERM) in the attempt after a failed one reported the failed
    attempt's figures as passed in the table and results.json, and a save kept them."""
    pytester.makepyprojecttoml(SCORE_PROJECT.replace('score = "0"', 'score = "off"'))
    pytester.makepyfile(test_score=SCORE_TEST.replace(
        '    specdec_record.metric("score", float(score))',
        '    if fails == "INT":\n        raise KeyboardInterrupt\n    specdec_record.metric("score", float(score))'))
    result = score_run(pytester, "3,FAIL", "7,INT",
                       args=["--specdec-save-baseline", "--specdec-report", "report"], subprocess=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    results = json.loads((pytester.path / "report" / "results.json").read_text())["results"]
    assert [(r["metrics"]["score"], r["outcome"]) for r in results] == [(3.0, "failed")]
    assert not (pytester.path / "baselines" / "cpu.json").exists()


def test_a_rerun_that_passes_without_recording_keeps_no_figures_of_the_failed_attempt(pytester):
    """The controller kept the failed attempt's figures as the test's result: the summary showed
    them as passed and --specdec-save-baseline saved them."""
    pytester.makepyprojecttoml(SCORE_PROJECT.replace('score = "0"', 'score = "off"'))
    pytester.makepyfile(test_score="""
from pathlib import Path


def test_score(specdec_record):
    if not Path("attempted").exists():
        Path("attempted").write_text("")
        specdec_record.metric("score", 3.0)
        raise AssertionError("this attempt fails")
""")
    result = score_run(pytester, args=["--specdec-save-baseline", "--specdec-report", "report"])
    assert result.parseoutcomes() == {"passed": 1, "rerun": 1}
    assert [(r["status"], r["data"]["metrics"]["score"]["value"]) for r in journal_lines(pytester)] == \
        [("failed", 3.0)]
    result.stdout.fnmatch_lines(["specdec: no report written to *: no test recorded figures or failed*"])
    assert "specdec summary" not in result.stdout.str()
    assert not (pytester.path / "baselines" / "cpu.json").exists()

def test_a_rerun_of_a_test_that_fetches_the_recorder_raises_the_progress_total_once(pytester):
    """A test that fetched specdec_record with request.getfixturevalue was not counted at
    collection: it read [2/1] on each attempt, and must raise the total once, not per attempt."""
    pytester.makeconftest(RERUN_PLUGIN)
    pytester.makepyfile(test_flaky="""
from pathlib import Path


def test_counted(specdec_record):
    specdec_record.metric("output_tok_s", 1.0)


def test_fetched(request):
    request.getfixturevalue("specdec_record").metric("output_tok_s", 2.0)
    flag = Path("failed-once")
    if not flag.exists():
        flag.write_text("")
        raise AssertionError("flaky once")
""")
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly")
    assert result.parseoutcomes() == {"passed": 2, "rerun": 1}
    assert re.findall(r"specdec \[(\d+/\d+)\]", result.stdout.str()) == ["1/1", "2/2", "2/2"]


FLAKY_ONCE = """
from pathlib import Path


def test_generation(specdec_server, specdec_workload, specdec_record):
    specdec_record.run(specdec_server, specdec_workload)
    flag = Path(f"failed-once-{specdec_server.spec.id}")
    if specdec_server.spec.method == "ar" and not flag.exists():
        flag.write_text("")
        raise AssertionError("flaky once")
"""


def served_outcomes(result: pytest.RunResult) -> dict[str, int]:
    """A run's outcomes but its warnings: on a loaded machine a workload's request may get its whole
    output in one network read, which the run warns of (live.py) without changing any outcome."""
    return {name: count for name, count in result.parseoutcomes().items() if name not in ("warning", "warnings")}


def test_a_rerun_uses_its_configuration_server_without_booting_it_again(pytester, no_leftover_engines):
    pytest.importorskip("torch")
    project(pytester, methods=("ar", "dflash"), prompts=2, max_new_tokens=8)
    pytester.makepyfile(test_generation=FLAKY_ONCE)
    pytester.makeconftest(RERUN_PLUGIN)
    result = run(pytester)
    assert served_outcomes(result) == {"passed": 2, "rerun": 1}
    logs = sorted(p.name for p in pytester.path.glob(".specdec/artifacts/run-*/logs/*.log"))
    assert logs == ["ar-tp1.log", "dflash-tp1.log"]  # no ar-tp1.2.log


KILLED_ONCE = """
import os
import signal
from pathlib import Path


def test_generation(specdec_server, specdec_workload, specdec_record):
    if not Path("killed").exists():
        Path("killed").write_text("")
        os.killpg(os.getpgid(specdec_server.pids()[0]), signal.SIGKILL)
    specdec_record.run(specdec_server, specdec_workload)


def test_next(specdec_server):  # keeps the session's servers up between the attempts
    pass
"""


@pytest.mark.parametrize("restarts", [0, 1])
def test_a_rerun_after_its_server_died_says_how_to_boot_it_again(pytester, no_leftover_engines, restarts):
    """The attempt run again failed with the first attempt's 'server died' and nothing more, as
    if rerunning could never help: a server whose restarts are spent stays failed."""
    pytest.importorskip("torch")
    project(pytester, methods=("ar",), prompts=2, max_new_tokens=8)
    pytester.makepyfile(test_generation=KILLED_ONCE)
    pytester.makeconftest(RERUN_PLUGIN)
    result = run(pytester, "-p", "no:randomly", f"--specdec-restart-on-crash={restarts}")
    if restarts:  # the attempt run again boots a new server and measures
        assert served_outcomes(result) == {"passed": 2, "rerun": 1}
        return
    # test_next finds it failed too, and passes once run again on a new session's server
    assert served_outcomes(result) == {"errors": 1, "passed": 1, "rerun": 2}
    hint = ("(this test is run again after the attempt that left its server failed: raise "
            "--specdec-restart-on-crash (now 0) to boot the server again for it)")
    result.stdout.fnmatch_lines(["*server ar-tp1 died: the process was killed by SIGKILL*", hint])
    # once, not for test_next's first attempt (the short summary repeats it in full where CI is set)
    assert result.stdout.str().split("short test summary info")[0].count(hint) == 1


ORDER_PROJECT = """
[tool.specdec]
backend = "embedded"

[tool.specdec.matrix.cpu]
methods = ["ar", "dflash", "ddtree"]
tp = [1]
budget = [8]
"""

ORDER_TESTS = """
def test_one(specdec_spec):
    assert specdec_spec.method != "dflash"


def test_two(specdec_spec):
    pass
"""


@pytest.mark.parametrize("flag", ["--ff", "--nf"])
def test_failed_first_and_new_first_keep_each_configuration_together(pytester: pytest.Pytester, flag):
    """pytest's cache plugin reorders after every other plugin's item hook: the configurations
    it split would each boot twice."""
    pytester.makepyprojecttoml(ORDER_PROJECT)
    pytester.makepyfile(test_order=ORDER_TESTS)
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=5, failed=1)
    if flag == "--nf":
        pytester.makepyfile(test_new="def test_new(specdec_spec):\n    pass\n")
    result = pytester.runpytest("-p", "no:randomly", flag, "--co", "-q")
    configurations = [line.split("[")[1].rstrip("]") for line in result.stdout.lines if "::" in line]
    runs = [c for i, c in enumerate(configurations) if i == 0 or configurations[i - 1] != c]
    assert len(runs) == len(set(runs)) == 3, configurations


STEPWISE_TESTS = """
import os


def test_one(specdec_spec):
    pass


def test_two(specdec_spec):
    assert specdec_spec.method not in os.environ.get("FAIL_METHODS", ""), "told to fail"
"""


def test_stepwise_resumes_at_the_failed_test_without_skipping_tests_that_never_ran(pytester, monkeypatch):
    """--sw skips the tests before the one that failed in the order it sees, which was collection
    order: the run goes by configuration, so tests of later configurations that never ran (here
    test_one of dflash and ddtree, collected before test_two of ar) were deselected as passed."""
    pytester.makepyprojecttoml(ORDER_PROJECT)
    pytester.makepyfile(test_order=STEPWISE_TESTS)
    monkeypatch.setenv("FAIL_METHODS", "ar")
    first = pytester.runpytest("-p", "no:randomly", "--sw", "-v")
    first.assert_outcomes(passed=1, failed=1)
    ran = [line.split(" ")[0] for line in first.stdout.lines if line.endswith(("PASSED", "FAILED"))
           or " PASSED " in line or " FAILED " in line]
    monkeypatch.delenv("FAIL_METHODS")
    second = pytester.runpytest("-p", "no:randomly", "--sw", "-v")
    second.assert_outcomes(passed=5, deselected=1)  # all but the test that passed before the failure
    again = [line.split(" ")[0] for line in second.stdout.lines if " PASSED " in line]
    assert set(ran) | set(again) == {f"test_order.py::test_{name}[{case}]" for name in ("one", "two")
                                     for case in ("ar-tp1", "dflash-tp1", "ddtree-tp1-b8")}


def test_benchmark_files_name_the_configuration_and_workload_of_each_test(pytester):
    """pytest-benchmark saves a test's parameters as JSON: ours were written as
    'UNSERIALIZABLE[MatrixCase(...)]', which --benchmark-group-by=param:specdec_spec, `pytest-benchmark
    compare --group-by` and its CSV showed as group names."""
    pytester.makepyprojecttoml(ORDER_PROJECT)
    pytester.makepyfile(test_figures="""
import pytest


@pytest.mark.parametrize("size", [3])
def test_figures(specdec_spec, specdec_workload, specdec_record, size):
    specdec_record.metric("output_tok_s", 100.0 * size)
    specdec_record.samples([0.5, 0.25])
""")
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "--benchmark-json=b.json")
    result.assert_outcomes(passed=3)
    saved = json.loads((pytester.path / "b.json").read_text())["benchmarks"]
    assert [b["params"] for b in saved] == [
        {"specdec_spec": case, "specdec_workload": "chat", "size": 3} for case in ("ar-tp1", "dflash-tp1", "ddtree-tp1-b8")]
