"""Output paths (baseline folder, report folder, CI summary) that cannot be written: a usage
error before the run when known up front, one line after it when they break during the run,
never a traceback, never half a report.

The tests record figures by hand (`specdec_record.metric`), so no server starts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from report_support import row

from pytest_specdec import outputs, staging, summary
from pytest_specdec.durations import Durations
from pytest_specdec.session import Results
from pytest_specdec.errors import SpecdecUsageError
from pytest_specdec.report import write_report

RECORDING_TEST = """
def test_figures(specdec_record):
    specdec_record.metric("output_tok_s", 100.0)
"""

#: A test that, while the run goes on, puts folders where the baseline and report files go.
SPOILER_TEST = """
import os

def test_spoil():
    os.makedirs("baselines/cpu.json")
    os.makedirs("rep/report.md")
"""

NO_PROC = pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_figures=RECORDING_TEST)
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def assert_usage_error(result: pytest.RunResult, message: str) -> None:
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: pytest-specdec: {message}"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    result.stdout.no_fnmatch_line("*passed*")  # stopped before the benchmark ran


@pytest.mark.parametrize("where, message", [
    ("pyproject.toml", "baseline folder */pyproject.toml cannot be created: it is a file, not a "
                       "folder; choose another --specdec-baseline-dir"),
    ("pyproject.toml/sub", "baseline folder */pyproject.toml/sub cannot be created: */pyproject.toml "
                           "is a file, not a folder; *"),
    pytest.param("/proc/specdec-baselines", "baseline folder /proc/specdec-baselines cannot be "
                 "created: making a folder in /proc fails (*); *", marks=NO_PROC),
])
def test_a_baseline_folder_that_cannot_be_made_stops_a_save_before_the_run(pytester, where, message):
    pytester.makepyprojecttoml("[tool.specdec]\n")
    result = run(pytester, f"--specdec-baseline-dir={where}", "--specdec-save-baseline")
    assert_usage_error(result, message)


def test_a_baseline_file_that_is_a_folder_stops_a_save_before_the_run(pytester):
    (pytester.path / "baselines" / "cpu.json").mkdir(parents=True)
    result = run(pytester, "--specdec-save-baseline")
    assert_usage_error(result, "baseline file */baselines/cpu.json is not a file; remove it or choose "
                               "another --specdec-baseline-dir")
    assert not (pytester.path / "baselines" / "durations.json").exists()


def test_a_baseline_file_that_is_a_folder_stops_a_gated_run_too(pytester):
    """It read as no baseline yet: every gated figure passed as new."""
    (pytester.path / "baselines" / "cpu.json").mkdir(parents=True)
    result = run(pytester, "--specdec-compare-fail=output_tok_s:5%")
    assert_usage_error(result, "baseline file */baselines/cpu.json is not a file; remove it or choose "
                               "another --specdec-baseline-dir")


def test_a_baseline_file_that_is_a_folder_stops_a_run_gated_by_the_tolerances_table(pytester):
    """Only a gate given as --specdec-compare-fail (or its ini and compare_fail twins) was checked:
    one from [tool.specdec.tolerances] read the folder as no baseline yet and passed every figure
    as new, the summary suggesting 'cpu.json' for cpu.json."""
    pytester.makepyprojecttoml('[tool.specdec]\n[tool.specdec.tolerances]\noutput_tok_s = "5%"\n')
    (pytester.path / "baselines" / "cpu.json").mkdir(parents=True)
    assert_usage_error(run(pytester), "baseline file */baselines/cpu.json is not a file; remove it or choose "
                                      "another --specdec-baseline-dir")


@pytest.mark.parametrize("folder, what", [("baselines", "is a file"), ("baselines/gpu", "is inside */baselines, a file")])
def test_a_baseline_folder_that_is_a_file_stops_a_gated_run(pytester, folder, what):
    """It read as no baseline yet: every gated figure passed as new, and the summary advised saving
    one with --specdec-save-baseline, which refuses that folder."""
    (pytester.path / "baselines").write_text("not a folder\n")
    assert_usage_error(run(pytester, "--specdec-compare-fail=output_tok_s:5%", f"--specdec-baseline-dir={folder}"),
                       f"baseline folder */{folder} {what}, so no baseline can be read from it or saved "
                       f"into it; point --specdec-baseline-dir at a folder")


def test_a_baseline_file_linking_into_a_folder_that_cannot_be_made_stops_a_save(pytester):
    """A save writes where the link points: that folder must take the file, not the link's."""
    (pytester.path / "baselines").mkdir()
    (pytester.path / "baselines" / "cpu.json").symlink_to(pytester.path / "pyproject.toml" / "cpu.json")
    pytester.makepyprojecttoml("[tool.specdec]\n")
    result = run(pytester, "--specdec-save-baseline")
    assert_usage_error(result, "folder of the file */baselines/cpu.json links to */pyproject.toml cannot be "
                               "created: it is a file, not a folder; choose another --specdec-baseline-dir")


@pytest.mark.parametrize("broken, message", [
    ("{bad", "durations file */baselines/durations.json is not valid JSON (line 1: *); fix or delete "
             "it (the next run with --specdec-save-baseline writes it again)"),
    (None, "durations file */baselines/durations.json cannot be read: Is a directory; fix or delete "
           "it (the next run with --specdec-save-baseline writes it again)"),
])
def test_a_broken_durations_file_stops_an_unsharded_save_before_the_run(pytester, broken, message):
    path = pytester.path / "baselines" / "durations.json"
    if broken is None:
        path.mkdir(parents=True)
    else:
        path.parent.mkdir()
        path.write_text(broken)
    assert_usage_error(run(pytester, "--specdec-save-baseline"), message)


@pytest.mark.parametrize("folder, loop, args, message", [
    ("baselines", "durations.json", ["--specdec-save-baseline"],
     "durations file */baselines/durations.json cannot be read: it is a symbolic link loop (Too many levels of "
     "symbolic links); remove or repoint the link (the next run with --specdec-save-baseline writes it again)"),
    ("baselines/cpu", "cpu", ["--specdec-shard", "1/2"],
     "durations file */baselines/cpu/durations.json cannot be read: a folder on its path is a symbolic link loop "
     "(Too many levels of symbolic links); remove or repoint the link (a run with --specdec-save-baseline, or a "
     "merge with --save-baseline, writes it again)"),
], ids=["file", "folder"])
def test_a_durations_file_in_a_link_loop_says_so_and_that_the_link_is_the_fix(pytester, folder, loop, args, message):
    """A loop read 'cannot be read: Too many levels of symbolic links; fix or delete it': nothing
    said a link was in the way, and no content fixes it."""
    pytester.makepyprojecttoml(f'[tool.specdec]\nbaseline_dir = "{folder}"\n')
    (pytester.path / "baselines").mkdir()
    (pytester.path / "baselines" / loop).symlink_to(loop)
    assert_usage_error(run(pytester, *args), message)


def test_a_gated_runs_baseline_file_in_a_link_loop_stops_the_run_not_reads_as_none_yet(pytester):
    """A loop at the baseline file read as "(none yet)": every gated figure passed as new, exit 0
    (a save already stops at its folder check)."""
    pytester.makepyprojecttoml('[tool.specdec]\n[tool.specdec.tolerances]\noutput_tok_s = "5%"\n')
    (pytester.path / "baselines").mkdir()
    (pytester.path / "baselines" / "cpu.json").symlink_to("cpu.json")
    assert_usage_error(run(pytester), "baseline file */baselines/cpu.json cannot be read: it is a symbolic "
                                             "link loop (Too many levels of symbolic links), so nothing would be "
                                             "compared; remove or repoint the link, or choose another "
                                             "--specdec-baseline-dir")


def test_a_gated_runs_baseline_folder_in_a_link_loop_stops_the_run_not_reads_as_none_yet(pytester):
    """A loop at the baseline folder read as "(none yet)", the folder as one that "does not exist":
    every gated figure passed as new, exit 0."""
    pytester.makepyprojecttoml('[tool.specdec]\n[tool.specdec.tolerances]\noutput_tok_s = "5%"\n')
    (pytester.path / "baselines").symlink_to("baselines")
    assert_usage_error(run(pytester), "baseline file */baselines/cpu.json cannot be read: a folder on its path "
                                             "is a symbolic link loop (Too many levels of symbolic links), so "
                                             "nothing would be compared; remove or repoint the link, or choose "
                                             "another --specdec-baseline-dir")


def test_a_broken_durations_file_stops_a_sharded_run_saying_what_writes_it_again(pytester):
    """A sharded run only reads it (to balance its shards); a save, or a merge's save, writes it."""
    pytester.makepyprojecttoml("[tool.specdec]\n")
    path = pytester.path / "baselines" / "durations.json"
    path.parent.mkdir()
    path.write_text("{bad")
    assert_usage_error(run(pytester, "--specdec-shard", "1/2"),
                       "durations file */baselines/durations.json is not valid JSON (line 1: *); fix "
                       "or delete it (a run with --specdec-save-baseline, or a merge with "
                       "--save-baseline, writes it again)")


@pytest.mark.parametrize("where, message", [
    ("pyproject.toml", "report folder */pyproject.toml cannot be created: it is a file, not a folder; "
                       "choose another --specdec-report"),
    pytest.param("/proc/nope", "report folder /proc/nope cannot be created: making a folder in /proc "
                 "fails (*); choose another --specdec-report", marks=NO_PROC),
    ("rep", "report folder */rep: report.md is not a file; remove it or choose another "
            "--specdec-report"),
])
def test_a_report_folder_that_cannot_be_written_stops_the_run_before_it(pytester, where, message):
    pytester.makepyprojecttoml("[tool.specdec]\n")
    (pytester.path / "rep" / "report.md").mkdir(parents=True)
    assert_usage_error(run(pytester, f"--specdec-report={where}"), message)
    assert [p.name for p in (pytester.path / "rep").iterdir()] == ["report.md"]


POOL_TEST = "def test_pool(specdec_pool):\n    pass\n"


@NO_PROC
@pytest.mark.parametrize("option, test, message", [
    pytest.param("--specdec-journal=/proc/specdec/journal.jsonl", RECORDING_TEST, "journal folder /proc/specdec "
                 "cannot be created: making a folder in /proc fails (*); choose another --specdec-journal",
                 id="journal"),
    pytest.param("--specdec-artifacts=/proc/specdec-artifacts", POOL_TEST, "artifacts folder "
                 "/proc/specdec-artifacts cannot be created: making a folder in /proc fails (*); choose another "
                 "--specdec-artifacts", id="artifacts"),
])
@pytest.mark.parametrize("xdist", [False, True], ids=["plain", "xdist"])
def test_a_journal_or_artifacts_folder_that_cannot_be_written_stops_the_run_before_it(pytester, option, test,
                                                                                       message, xdist):
    """Both were first written during the run: a traceback in every test, the journal's after each
    measurement, whose figures were lost. Now a usage error before the run, under xdist too."""
    pytester.makepyprojecttoml("[tool.specdec]\n")
    pytester.makepyfile(test_figures=test)
    result = pytester.runpytest("-p", "no:cacheprovider", option, *(["-n", "1"] if xdist else []))
    assert_usage_error(result, message)  # under xdist too: its worker collects, and stops the run as one process does


@NO_PROC
def test_a_test_that_fetches_the_recorder_fails_in_one_line_before_it_measures(pytester):
    """request.getfixturevalue("specdec_record") claimed no journal: the test measured, then
    failed with an OSError traceback from the journal's folder."""
    pytester.makepyprojecttoml("[tool.specdec]\n")
    pytester.makepyfile(test_fetched="""
from pathlib import Path


def test_fetched(request):
    recorder = request.getfixturevalue("specdec_record")
    Path("measured").write_text("")
    recorder.metric("output_tok_s", 100.0)
""")
    result = pytester.runpytest("-p", "no:cacheprovider", "--specdec-journal=/proc/specdec/journal.jsonl")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["pytest-specdec: journal folder /proc/specdec cannot be created: making a folder "
                                 "in /proc fails (*); choose another --specdec-journal"])
    assert "Traceback" not in result.stdout.str() and "OSError" not in result.stdout.str()
    assert not (pytester.path / "measured").exists()

@NO_PROC
def test_a_folder_set_in_the_ini_is_named_as_set(pytester):
    """The folder errors named --specdec-journal for a journal the ini had set."""
    pytester.makeini("[pytest]\nspecdec_journal = /proc/specdec/journal.jsonl\n")
    pytester.makepyfile(test_figures=RECORDING_TEST)
    assert_usage_error(pytester.runpytest("-p", "no:cacheprovider"),
                       "journal folder /proc/specdec cannot be created: making a folder in /proc fails (*); "
                       "choose another ini specdec_journal")


TOOL_SPECDEC = "pyproject.toml [[]tool.specdec[]] key"


@pytest.mark.parametrize("where", ["tool.specdec", "ini"])
@pytest.mark.parametrize("option, value, message", [
    ("report", "rep", "report folder */rep: report.md is not a file; remove it or choose another {setting}"),
    ("report", "pyproject.toml", "report folder */pyproject.toml cannot be created: it is a file, not a folder; "
                                 "choose another {setting}"),
    ("baseline_dir", "spoilt", "baseline file */spoilt/cpu.json is not a file; remove it or choose another "
                              "{setting}"),
], ids=["report-file", "report-folder", "baseline-file"])
def test_a_report_or_baseline_folder_set_in_a_file_is_named_as_set(pytester, where, option, value, message):
    """The report and baseline errors said --specdec-report and --specdec-baseline-dir however the
    folder was set, while every other folder error names the ini key or [tool.specdec] key."""
    (pytester.path / "rep" / "report.md").mkdir(parents=True)
    (pytester.path / "spoilt" / "cpu.json").mkdir(parents=True)
    if where == "ini":
        pytester.makepyprojecttoml(f"[tool.specdec]\n\n[tool.pytest.ini_options]\nspecdec_{option} = \"{value}\"\n")
        setting = f"ini specdec_{option}"
    else:
        pytester.makepyprojecttoml(f"[tool.specdec]\n{option} = \"{value}\"\n")
        setting = f"{TOOL_SPECDEC} '{option}'"
    args = ("--specdec-save-baseline",) if option == "baseline_dir" else ()
    assert_usage_error(run(pytester, *args), message.format(setting=setting))


def test_a_report_folder_set_in_a_file_and_spoiled_during_the_run_is_named_as_set(pytester):
    pytester.makepyprojecttoml('[tool.specdec]\nreport = "rep"\n')
    pytester.makepyfile(test_spoil=SPOILER_TEST)
    result = run(pytester)
    result.stdout.fnmatch_lines([f"specdec: ERROR: report not written: report folder */rep: report.md is not a "
                                 f"file; remove it or choose another {TOOL_SPECDEC} 'report'"])
    # a report that cannot be written loses no measurement: the figures are journaled before it
    records = [json.loads(line) for line in (pytester.path / ".specdec" / "journal.jsonl").read_text().splitlines()]
    assert [r["status"] for r in records if "test_figures" in r["config_id"]] == ["measured", "done"], records


def test_a_journal_that_cannot_take_a_record_fails_its_test_in_one_line(pytester):
    """A full disk under the journal failed the test with an OSError traceback from deep in the
    journal. Now one line says the figures were not journaled, why, and what to do."""
    pytester.makepyprojecttoml("[tool.specdec]\n")
    pytester.makeconftest("""
import errno
import pytest_specdec.journal

def _full(fd, data):
    raise OSError(errno.ENOSPC, "No space left on device")

pytest_specdec.journal._write_all = _full
""")
    pytester.makepyfile(test_figures=RECORDING_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*pytest-specdec: the results journal */.specdec/journal.jsonl cannot take this "
                                 "test's figures (No space left on device), so they were not kept; free space "
                                 "there or choose another --specdec-journal"])
    assert "Traceback" not in result.stdout.str() and "journal.py" not in result.stdout.str()
    # the OSError it was raised while handling is no part of the line
    assert "During handling" not in result.stdout.str() and "[Errno" not in result.stdout.str()


def test_a_journal_that_cannot_take_a_verdict_fails_its_test_in_one_line(pytester):
    """The figures are journaled, but the disk fills before the mark of their passed checks: without
    it resume measures the test again and a merge finds no result, so the test must not pass."""
    pytester.makepyprojecttoml("[tool.specdec]\n")
    pytester.makeconftest("""
import errno
import pytest_specdec.journal

def _full(self, measured):
    raise OSError(errno.ENOSPC, "No space left on device")

pytest_specdec.journal.Journal.mark_done = _full
""")
    pytester.makepyfile(test_figures=RECORDING_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*pytest-specdec: the results journal */.specdec/journal.jsonl cannot take this "
                                 "test's verdict (No space left on device), so a resumed run would measure it "
                                 "again and a merge of shards would find no result of it; free space there or "
                                 "choose another --specdec-journal"])
    assert "Traceback" not in result.stdout.str() and "journal.py" not in result.stdout.str()
    # the OSError it was raised while handling is no part of the line
    assert "During handling" not in result.stdout.str() and "[Errno" not in result.stdout.str()


def test_outputs_spoiled_during_the_run_are_one_line_each_and_the_run_result_stays(pytester):
    pytester.makepyfile(test_spoil=SPOILER_TEST)
    result = run(pytester, "--specdec-save-baseline", "--specdec-report=rep")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # asked-for outputs are missing
    result.stdout.fnmatch_lines([
        "specdec: ERROR: baseline not saved: baseline file */baselines/cpu.json cannot be read*",
        "specdec: ERROR: report not written: report folder */rep: report.md is not a file*",
        "*2 passed*",
    ])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert [p.name for p in (pytester.path / "rep").iterdir()] == ["report.md"]  # nothing half-written


def test_a_github_step_summary_pointing_nowhere_is_a_warning(pytester, monkeypatch):
    # the CI runner sets it, not the user: the benchmark's result must not turn red over it
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "nonexistent" / "summary.md"))
    result = run(pytester)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["specdec: warning: GITHUB_STEP_SUMMARY not written: "
                                 "*/nonexistent/summary.md: No such file or directory", "*1 passed*"])
    assert "Traceback" not in result.stdout.str()


def test_durations_that_cannot_be_saved_at_the_end_are_a_problem_not_a_traceback(tmp_path):
    (tmp_path / "spoiled").write_text("")  # the baseline folder became a file during the run
    settings = SimpleNamespace(save_baseline=True, report=None, baseline_lock_timeout=120.0,
                               setter=lambda name: f"--specdec-{name}")
    state = SimpleNamespace(settings=settings, baseline_path=tmp_path / "spoiled" / "cpu.json")
    problems: list[str] = []
    results = Results(state=state)  # a real one: a stand-in lagged behind each new late verdict
    durations = Durations(param_ids=("ar-tp1",))
    durations.add("ar-tp1", 1.0)
    status = summary.finish(results, durations, None, None, pytest.ExitCode.OK, [], problems)
    assert status == pytest.ExitCode.OK  # the plugin fails the run over `problems`
    assert problems == [f"durations not saved: {tmp_path / 'spoiled'}: File exists; a file stands where a "
                        f"folder belongs: move it aside, or choose another --specdec-baseline_dir"]


MATRIX_PROJECT = """
[tool.specdec]
backend = "embedded"

[tool.specdec.matrix.cpu]
methods = ["ar", "dflash"]
tp = [1]
"""

#: Two recording tests of each configuration; test_one fails where FAIL names the method.
TWO_TESTS = """
import os


def test_one(specdec_spec, specdec_record):
    specdec_record.metric("output_tok_s", 100.0)
    assert specdec_spec.method not in os.environ.get("FAIL", "")


def test_two(specdec_spec, specdec_record):
    specdec_record.metric("output_tok_s", 100.0)
"""


@pytest.mark.parametrize("narrowing, left_out, measured", [
    (["-k", "test_one"], "ar-tp1, dflash-tp1", []),
    (["--deselect", "test_two.py::test_two[dflash-tp1]"], "dflash-tp1", ["ar-tp1"]),
    (["-x"], "ar-tp1", []),  # test_one[ar-tp1] fails: the rest never runs
])
def test_a_narrowed_save_keeps_the_recorded_durations_of_configurations_it_ran_in_part(
        pytester, monkeypatch, narrowing, left_out, measured):
    """A run narrowed by -k, --deselect or -x saved the seconds of the tests it ran as the whole
    configuration's, which the shards of the next sharded run are balanced on."""
    pytester.makepyprojecttoml(MATRIX_PROJECT)
    pytester.makepyfile(test_two=TWO_TESTS)
    recorded = {"ar-tp1": 500.0, "dflash-tp1": 700.0}
    (pytester.path / "baselines").mkdir()
    (pytester.path / "baselines" / "durations.json").write_text(json.dumps(
        {"format": "pytest-specdec-durations", "version": 1, "configurations": recorded}))
    if narrowing == ["-x"]:
        monkeypatch.setenv("FAIL", "ar")
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "--specdec-save-baseline",
                                *narrowing)
    saved = json.loads((pytester.path / "baselines" / "durations.json").read_text())["configurations"]
    assert {config for config, seconds in saved.items() if seconds != recorded[config]} == set(measured)
    result.stdout.fnmatch_lines([f"specdec: durations not saved for {left_out}: this run measured only "
                                 f"some of the tests of each (-k, -m, --deselect, --lf, -x, a resume)*"])


#: A configuration's test that records nothing (its seconds count all the same) beside one that records.
WITH_A_CHECK = """
def test_ready(specdec_spec, specdec_pool):
    pass


def test_measures(specdec_spec, specdec_record):
    specdec_record.metric("output_tok_s", 100.0)
"""


@pytest.mark.parametrize("xdist", [False, True])
@pytest.mark.parametrize("narrowing", [["-k", "test_measures"], ["--deselect", "test_also.py"]])
def test_a_save_that_left_out_a_test_that_records_nothing_keeps_the_recorded_durations(pytester, xdist, narrowing):
    """Only recording tests counted towards a configuration's completeness: a run that -k left
    the configuration's other tests out of (they use its server, record nothing, and their seconds
    count) saved what it measured as the configuration's whole cost. Such tests may share a name
    across files: one that ran does not stand for another file's that did not."""
    pytester.makepyprojecttoml(MATRIX_PROJECT)
    pytester.makepyfile(test_check=WITH_A_CHECK, test_also=WITH_A_CHECK.split("\n\n\n")[0])
    recorded = {"ar-tp1": 500.0, "dflash-tp1": 700.0}
    (pytester.path / "baselines").mkdir()
    (pytester.path / "baselines" / "durations.json").write_text(json.dumps(
        {"format": "pytest-specdec-durations", "version": 1, "configurations": recorded}))
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "--specdec-save-baseline",
                                *narrowing, *(["-n", "1"] if xdist else []))
    result.assert_outcomes(passed=2 if narrowing[0] == "-k" else 4)
    saved = json.loads((pytester.path / "baselines" / "durations.json").read_text())["configurations"]
    assert saved == recorded
    result.stdout.fnmatch_lines(["specdec: durations not saved for ar-tp1, dflash-tp1: this run measured only *"])


def test_a_save_after_last_failed_keeps_the_recorded_durations(pytester, monkeypatch):
    """--lf collects only the files where a test failed: a configuration's tests in other files
    are not even deselected, so its seconds there are not the whole configuration's."""
    pytester.makepyprojecttoml(MATRIX_PROJECT)
    first, second = TWO_TESTS.split("\n\n\n")[1:]  # a file for each test
    pytester.makepyfile(test_one="import os\n\n\n" + first, test_two=second)
    pytester.runpytest("-p", "no:randomly", "--specdec-save-baseline").assert_outcomes(passed=4)
    saved = (pytester.path / "baselines" / "durations.json").read_text()
    monkeypatch.setenv("FAIL", "ar,dflash")
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=2, failed=2)
    result = pytester.runpytest("-p", "no:randomly", "--specdec-save-baseline", "--lf")
    result.assert_outcomes(failed=2)  # test_one.py's two tests: test_two.py is not collected
    assert (pytester.path / "baselines" / "durations.json").read_text() == saved
    result.stdout.fnmatch_lines(["specdec: durations not saved for ar-tp1, dflash-tp1: *"])


def test_write_report_refuses_a_target_of_the_wrong_kind_before_writing_anything(tmp_path):
    (tmp_path / "rep" / "report.tex").mkdir(parents=True)
    with pytest.raises(SpecdecUsageError, match="report.tex is not a file"):
        write_report(tmp_path / "rep", [row("ar", 1, None, 10.0)], plots=False)
    assert [p.name for p in (tmp_path / "rep").iterdir()] == ["report.tex"]


def test_write_report_that_fails_midway_leaves_nothing_behind(tmp_path, monkeypatch):
    from pytest_specdec import latex

    def full_disk(fragment):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(latex, "render_standalone", full_disk)
    with pytest.raises(OSError):
        write_report(tmp_path / "rep", [row("ar", 1, None, 10.0)], plots=False)
    assert list((tmp_path / "rep").iterdir()) == []


def test_write_report_still_writes_every_file_in_place(tmp_path):
    files = write_report(tmp_path / "rep", [row("ar", 1, None, 10.0)], plots=False)
    assert sorted(p.name for p in (tmp_path / "rep").iterdir()) == sorted(outputs.REPORT_FILES)
    assert files.results_json == tmp_path / "rep" / "results.json"
    assert json.loads(files.results_json.read_text())["results"][0]["method"] == "ar"


def test_a_test_that_failed_before_recording_has_its_configuration_and_workload_in_the_table(pytester):
    """Its row read `ar-tp1-chat` under config and `-` under workload."""
    pytester.makepyprojecttoml("[tool.specdec]\nbackend = 'embedded'\n[tool.specdec.matrix.cpu]\n"
                               "methods = ['ar', 'ddtree']\nbudget = [8]\n")
    pytester.makepyfile(test_gen="def test_gen(specdec_spec, specdec_workload):\n"
                                 "    assert False, 'broke before recording'\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--specdec-report", "rep")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["ar-tp1 * chat * FAILED: AssertionError: broke before recording",
                                 "ddtree-tp1-b8 * chat * FAILED: AssertionError: broke before recording"])
    rows = json.loads((pytester.path / "rep" / "results.json").read_text())["results"]
    assert sorted((r["config"], r["workload"], r["method"], r["budget"]) for r in rows) == [
        ("ar-tp1", "chat", "ar", None), ("ddtree-tp1-b8", "chat", "ddtree", 8)]


def test_a_failed_tests_workload_keeps_its_configured_name(pytester):
    """pytest escapes non-ASCII in test ids: the row of a test that failed before recording read
    `my chat \\xfc`, beside the other rows' `my chat ü`."""
    pytester.makepyprojecttoml("[tool.specdec]\nbackend = 'embedded'\n[tool.specdec.matrix.cpu]\n"
                               "methods = ['ar']\n[[tool.specdec.workloads]]\nname = 'my chat ü'\n"
                               "prompts = 'chat'\n")
    pytester.makepyfile(test_gen="def test_gen(specdec_spec, specdec_workload):\n    assert False\n")
    pytester.runpytest("-p", "no:cacheprovider", "--specdec-report", "rep").assert_outcomes(failed=1)
    [row] = json.loads((pytester.path / "rep" / "results.json").read_text(encoding="utf-8"))["results"]
    assert (row["config"], row["workload"]) == ("ar-tp1", "my chat ü")


def test_a_failed_tests_workload_is_found_where_pytest_leaves_ids_unescaped(pytester):
    """pytest's ini option disable_test_id_escaping_and_forfeit_all_rights_to_community_support
    leaves `ü` as written in test ids: the workloads were matched only as escaped (`\\xfc`), so
    the row of a test that failed before recording had no workload."""
    pytester.makepyprojecttoml("[tool.pytest.ini_options]\n"
                               "disable_test_id_escaping_and_forfeit_all_rights_to_community_support = true\n"
                               "[tool.specdec]\nbackend = 'embedded'\n[tool.specdec.matrix.cpu]\n"
                               "methods = ['ar']\n[[tool.specdec.workloads]]\nname = 'my chat ü'\n"
                               "prompts = 'chat'\n")
    pytester.makepyfile(test_gen="def test_gen(specdec_spec, specdec_workload):\n    assert False\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--specdec-report", "rep")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_gen[[]ar-tp1-my chat ü[]]*"])  # pytest left the id unescaped
    [row] = json.loads((pytester.path / "rep" / "results.json").read_text(encoding="utf-8"))["results"]
    assert (row["config"], row["workload"]) == ("ar-tp1", "my chat ü")


@pytest.mark.parametrize("params", ["-chat-\\xfc", "-chat-ü", "-chat-ü-slow"])
def test_the_longest_workload_wins_in_escaped_and_unescaped_ids_alike(params):
    """Names as written were matched only after every escaped id, so in an unescaped id the
    shorter `chat` (the same escaped or not) won over `chat-ü`, which an escaped id reads."""
    assert summary.workload_in(params, summary.escaped_workloads(["chat", "chat-ü"])) == "chat-ü"


def test_a_failed_tests_other_parameters_are_not_taken_for_a_workload(pytester):
    """A test of no workload failed before recording with its own parameter `nan`: its row read
    `nan` under workload; one of a workload and its own parameter read `chat-slow`."""
    pytester.makepyprojecttoml("[tool.specdec]\nbackend = 'embedded'\n[tool.specdec.matrix.cpu]\n"
                               "methods = ['ar']\n")
    pytester.makepyfile(test_gen="import pytest\n\n"
                                 "@pytest.mark.parametrize('speed', ['nan'])\n"
                                 "def test_bare(speed, specdec_spec):\n    assert False\n\n"
                                 "@pytest.mark.parametrize('speed', ['slow'])\n"
                                 "def test_gen(speed, specdec_spec, specdec_workload):\n    assert False\n")
    pytester.runpytest("-p", "no:cacheprovider", "--specdec-report", "rep").assert_outcomes(failed=2)
    rows = json.loads((pytester.path / "rep" / "results.json").read_text(encoding="utf-8"))["results"]
    assert sorted((r["test_id"], r["config"], r["workload"]) for r in rows) == [
        ("test_bare[ar-tp1-nan]", "ar-tp1", None), ("test_gen[ar-tp1-chat-slow]", "ar-tp1", "chat")]


def test_a_run_with_nothing_to_report_says_no_report_was_written(pytester):
    """`-k nothing` wrote nothing and said nothing, so an earlier results.json read as this run's."""
    pytester.makepyfile(test_figures=RECORDING_TEST)
    (pytester.path / "rep").mkdir()
    (pytester.path / "rep" / "results.json").write_text("{}")  # an earlier run's
    result = pytester.runpytest("-p", "no:cacheprovider", "--specdec-report", "rep", "-k", "nothing")
    result.stdout.fnmatch_lines(["specdec: no report written to *rep: no test recorded figures or failed "
                                 "(what is there is an earlier run's)"])


@pytest.mark.parametrize("folder", ["absent", "empty"])
def test_no_report_written_speaks_of_an_earlier_report_only_where_there_is_one(pytester, folder):
    """The line said `(what is there is an earlier run's)` of a report folder that did not exist
    or held nothing, sending the user to look for files that are not there."""
    pytester.makepyfile(test_figures=RECORDING_TEST)
    if folder == "empty":
        (pytester.path / "rep").mkdir()
    result = pytester.runpytest("-p", "no:cacheprovider", "--specdec-report", "rep", "-k", "nothing")
    result.stdout.fnmatch_lines(["specdec: no report written to *rep: no test recorded figures or failed"])
    result.stdout.no_fnmatch_line("*earlier run's*")


@pytest.mark.parametrize("listing", [("--co", "-q"), ("--setup-plan", "-q"), ("--setup-only", "-q")])
@pytest.mark.parametrize("shard", [(), ("--specdec-shard=3/3",)], ids=["whole", "empty-shard"])
def test_a_listing_says_nothing_at_the_end_of_the_report_it_never_writes(pytester, listing, shard):
    """--co, --setup-plan or --setup-only with --specdec-report said `no report written ... (what is
    there is an earlier run's)`: a run that calls no test writes no report, so the line was noise
    there; no end-of-run note fires in one, and a shard given no configuration still succeeds."""
    pytester.makepyprojecttoml(MATRIX_PROJECT)
    pytester.makepyfile(test_two=TWO_TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", *listing, *shard,
                                "--specdec-report", "rep", "--specdec-save-baseline", "-k", "test_one")
    assert result.ret == pytest.ExitCode.OK
    # -q leaves out the header's lines: any of ours is an end-of-run note
    assert [line for line in result.stdout.lines if line.startswith("specdec:")] == []
    assert not (pytester.path / "rep").exists() and not (pytester.path / "baselines").exists()


#: A Ctrl-C that lands while the report is written (a second one, as pytest tears down).
REPORT_INTERRUPTER = """
import pytest_specdec.report


def _interrupted(*args, **kwargs):
    raise KeyboardInterrupt


pytest_specdec.report.write_report = _interrupted
"""


def test_a_report_interrupted_by_ctrl_c_is_one_line_naming_the_run_that_writes_it(pytester):
    """Ctrl-C while the report was written (pressed twice, the second landing in matplotlib's
    import) ended pytest with a raw traceback and no word of the report that was not written."""
    pytester.makeconftest(REPORT_INTERRUPTER)
    pytester.makepyfile(test_figures=RECORDING_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--specdec-report=rep")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([
        "specdec: ERROR: report not written: interrupted while writing it into */rep; no file there is "
        "half-written; the journal keeps this run's figures: a run with --specdec-resume and "
        "--specdec-report writes it without measuring again the tests that passed",
    ])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


#: Ctrl-C in the first test's setup (a server's boot), before any test of ours reported.
INTERRUPTED_FIRST_SETUP_TEST = """
import pytest


@pytest.fixture
def booting():
    raise KeyboardInterrupt


def test_figures(booting, specdec_record):
    specdec_record.metric("output_tok_s", 100.0)
"""


def test_a_run_interrupted_before_any_test_reported_says_no_report_was_written(pytester):
    """Ctrl-C in the first server's boot ended the run without a word about the report folder,
    which still held an earlier run's report, as if it were this run's."""
    pytester.makepyfile(test_figures=INTERRUPTED_FIRST_SETUP_TEST)
    (pytester.path / "rep").mkdir()
    (pytester.path / "rep" / "results.json").write_text("{}")  # an earlier run's
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--specdec-report=rep")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["specdec: no report written to */rep: no test recorded figures or failed "
                                 "(what is there is an earlier run's)"])


#: A report writer killed outright inside its staging folder (SIGKILL, os._exit, a second SIGTERM).
KILLED_WRITER = """
import os, sys
from pathlib import Path
from pytest_specdec import staging

with staging.staged(Path(sys.argv[1]), ".report-") as folder:
    (folder / "results.json").write_text("half")
    os._exit(1)
"""


def test_a_staging_folder_left_by_a_killed_writer_is_removed_by_the_next_one(tmp_path):
    """A run killed while it wrote its report left a hidden `.report-*` folder in the report
    folder, and each such run one more, inside the report a user publishes."""
    import subprocess
    import sys

    rep = tmp_path / "rep"
    subprocess.run([sys.executable, "-c", KILLED_WRITER, str(rep)], check=False)
    left = [p.name for p in rep.iterdir()]
    assert len(left) == 1 and left[0].startswith(".report-"), left  # what the killed writer left
    live = rep / f".report-{os.getpid()}@{staging._owner()}-live0000"  # a writer still running
    live.mkdir()
    write_report(rep, [row("ar", 1, None, 10.0)], plots=False)
    assert sorted(p.name for p in rep.iterdir()) == sorted([*outputs.REPORT_FILES, live.name])


def _new_pid_namespace() -> list[str] | None:
    """A command prefix that runs a process in a pid namespace of its own, with its own /proc (as
    a container does), on this host under this hostname; None where the system allows none."""
    import shutil
    import subprocess

    command = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]
    if not shutil.which("unshare") or subprocess.run([*command, "true"], capture_output=True).returncode:
        return None
    return command


def test_a_writer_in_another_pid_namespace_leaves_a_live_staging_folder_alone(tmp_path):
    """Two containers of one hostname, with pid namespaces of their own, sharing a report folder:
    a writer in one took the other's live staging folder for a dead writer's (its pid is no
    process there) and removed it while it was written."""
    import subprocess
    import sys

    command = _new_pid_namespace()
    if command is None:
        pytest.skip("no pid namespace of its own can be made here (unshare)")
    rep = tmp_path / "rep"
    remover = ("import sys; from pathlib import Path; from pytest_specdec import staging; "
               "print(len(staging.remove_abandoned(Path(sys.argv[1]), '.report-')))")
    with staging.staged(rep, ".report-") as folder:
        (folder / "results.json").write_text("half")
        done = subprocess.run([*command, sys.executable, "-c", remover, str(rep)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "0" and (folder / "results.json").is_file()
    subprocess.run([sys.executable, "-c", KILLED_WRITER, str(rep)], check=False)
    (left,) = rep.iterdir()
    done = subprocess.run([*command, sys.executable, "-c", remover, str(rep)], capture_output=True, text=True)
    assert done.stdout.strip() == "0" and left.is_dir()  # another namespace's: not its to judge
    assert staging.remove_abandoned(rep, ".report-") == [left]  # this namespace's writer is gone


# A configuration's figures, recorded by hand (no server starts): what the plots draw.
CONFIGURED_PROJECT = "[tool.specdec]\nbackend = 'embedded'\n[tool.specdec.matrix.cpu]\nmethods = ['ar']\ntp = [1]\n"
CONFIGURED_TEST = """
def test_figures(specdec_spec, specdec_record):
    specdec_record.metric("output_tok_s", 100.0)
"""


@pytest.mark.parametrize("where", ["--specdec-no-plots", "ini"])
def test_a_report_without_plots_is_written_whole_but_for_them(pytester, where):
    """A shard's report drew its plots, which its merge draws again from results.json: seconds
    of matplotlib a run could not skip. --specdec-no-plots (or its ini twin) leaves them out;
    the rest of the report is written as ever, and a run without it still draws them."""
    pytester.makepyprojecttoml(CONFIGURED_PROJECT + ("[tool.pytest.ini_options]\nspecdec_no_plots = true\n"
                                                     if where == "ini" else ""))
    pytester.makepyfile(test_figures=CONFIGURED_TEST)
    flags = [where] if where.startswith("--") else []
    result = pytester.runpytest("-p", "no:cacheprovider", "--specdec-report=bare", *flags)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["specdec: report written to *bare (4 files)"])
    assert sorted(p.name for p in (pytester.path / "bare").iterdir()) == sorted(outputs.REPORT_FILES)
    assert json.loads((pytester.path / "bare" / "results.json").read_text())["results"][0]["metrics"]
    if where == "ini":
        return
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "--specdec-report=whole").assert_outcomes(passed=1)
    assert (pytester.path / "whole" / "plots" / "tokens_per_s.png").is_file()


#: The conftest lines that make every file written whole into the baseline folder or the shard
#: folder (baselines, durations, shard.json, junit.xml) meet a read-only folder.
READ_ONLY_WHOLE_FILES = """
for _module in (pytest_specdec.baselines, pytest_specdec.durations, pytest_specdec.junit, pytest_specdec.shard_dir):
    _module.replace_text = _read_only
"""

#: A conftest whose report writer (or baseline writer) meets a full disk / a read-only folder.
REFUSED_WRITES = """
import errno
import pytest_specdec.baselines
import pytest_specdec.durations
import pytest_specdec.junit
import pytest_specdec.report
import pytest_specdec.shard_dir


def _full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def _read_only(*args, **kwargs):
    raise OSError(errno.EROFS, "Read-only file system")


pytest_specdec.report.results_document = _full
""" + READ_ONLY_WHOLE_FILES


def test_outputs_the_os_refuses_name_the_fix_and_the_run_that_writes_them_again(pytester):
    """A full disk under the report folder said only 'report not written: DIR: No space left on
    device': neither what frees the way nor that the journal keeps the figures to write it from.
    The earlier report stays whole, and the run the line names writes the report again."""
    pytester.makepyfile(test_figures=RECORDING_TEST)
    assert pytester.runpytest("-p", "no:cacheprovider", "--specdec-report=rep").ret == pytest.ExitCode.OK
    earlier = (pytester.path / "rep" / "report.md").read_text()
    pytester.makeconftest(REFUSED_WRITES)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--specdec-report=rep",
                                           "--specdec-save-baseline")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "specdec: ERROR: baseline not saved: */baselines/cpu.json: Read-only file system; make it writable, or "
        "choose another --specdec-baseline-dir; no file there is half-written; the journal keeps this run's "
        "figures: a run with --specdec-resume and --specdec-save-baseline writes it without measuring again "
        "the tests that passed",
        "specdec: ERROR: report not written: */rep: No space left on device; free space there, or choose "
        "another --specdec-report; no file there is half-written; the journal keeps this run's figures: a run "
        "with --specdec-resume and --specdec-report writes it without measuring again the tests that passed",
    ])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert (pytester.path / "rep" / "report.md").read_text() == earlier
    assert sorted(p.name for p in (pytester.path / "rep").iterdir()) == sorted(outputs.REPORT_FILES)
    (pytester.path / "conftest.py").unlink()
    again = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--specdec-report=rep", "--specdec-resume")
    assert again.ret == pytest.ExitCode.OK, again.stdout.str()
    assert "resumed" in again.stdout.str().lower(), again.stdout.str()
    assert json.loads((pytester.path / "rep" / "results.json").read_text())["results"][0]["metrics"]


#: A conftest whose shard.json cannot be finished: the disk fills after the run started it.
SHARD_MANIFEST_REFUSED = """
import errno
import pytest_specdec.shard_dir as shard_dir

_write = shard_dir._write


def _full_once_started(directory, manifest):
    if manifest.finished:
        raise OSError(errno.ENOSPC, "No space left on device", str(directory / shard_dir.MANIFEST))
    _write(directory, manifest)


shard_dir._write = _full_once_started
"""


def test_a_shard_folder_the_os_refuses_to_finish_is_one_line_and_a_resume_finishes_it(pytester):
    """shard.json not finished for a full disk ended the run in an INTERNALERROR traceback."""
    from pytest_specdec import shard_dir

    pytester.makepyprojecttoml("[tool.specdec]\n")
    pytester.makepyfile(test_figures=RECORDING_TEST)
    pytester.makeconftest(SHARD_MANIFEST_REFUSED)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--specdec-shard=1/1", "--specdec-report=rep")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "specdec: ERROR: shard folder not finished: */rep/shard.json: No space left on device; free space there, "
        "or choose another --specdec-report; a merge reads this shard as unfinished; the journal keeps this run's "
        "figures: a run of the same --specdec-shard and --specdec-report with --specdec-resume finishes it without "
        "measuring again the tests that passed"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert not shard_dir.read(pytester.path / "rep").finished
    (pytester.path / "conftest.py").unlink()
    again = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--specdec-shard=1/1", "--specdec-report=rep",
                                          "--specdec-resume")
    assert again.ret == pytest.ExitCode.OK, again.stdout.str()
    assert shard_dir.read(pytester.path / "rep").finished


def test_a_journal_copy_cut_short_leaves_the_shard_folders_earlier_copy_whole(tmp_path, monkeypatch):
    """The explicit journal was copied into the shard folder in place: a full disk midway left a
    truncated journal there for the merge to read."""
    import shutil

    from pytest_specdec.whole_file import replace_with_copy

    source, target = tmp_path / "journal.jsonl", tmp_path / "shard" / "journal.jsonl"
    target.parent.mkdir()
    source.write_text("new line 1\nnew line 2\n")
    target.write_text("earlier line\n")

    def cut_short(src, dst):
        Path(dst).write_text("new li")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shutil, "copyfile", cut_short)
    with pytest.raises(OSError):
        replace_with_copy(target, source, durable=False)
    assert target.read_text() == "earlier line\n"
    assert [p.name for p in target.parent.iterdir()] == ["journal.jsonl"]
    monkeypatch.undo()
    replace_with_copy(target, source, durable=False)
    assert target.read_text() == source.read_text()


@NO_PROC
def test_the_journal_copy_is_on_the_disk_before_shard_json_says_finished(pytester, monkeypatch):
    """The explicit journal's copy was written without fsync while the finished shard.json was
    fsync'd: a power cut could leave a finished manifest beside an older or empty journal copy,
    which the merge would trust. The copy and its rename are now synced before the manifest's."""
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.path.realpath(os.readlink(f"/proc/self/fd/{fd}"))))
        real_fsync(fd)

    def replace(src, dst, **kwargs):
        events.append(("replace", os.path.realpath(dst)))
        real_replace(src, dst, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    pytester.makepyprojecttoml("[tool.specdec]\n")
    result = run(pytester, "--specdec-shard=1/1", "--specdec-report=rep", "--specdec-journal=own.jsonl")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    folder = os.path.realpath(pytester.path / "rep")
    copy, manifest = os.path.join(folder, "journal.jsonl"), os.path.join(folder, "shard.json")
    assert (pytester.path / "rep" / "journal.jsonl").read_text() == (pytester.path / "own.jsonl").read_text()
    finished = max(i for i, e in enumerate(events) if e == ("replace", manifest))
    copied = events.index(("replace", copy))
    before = events[:copied]
    # the copy's own bytes (its temporary sibling's fsync), then its rename (the folder's fsync)
    assert any(kind == "fsync" and os.path.basename(path).startswith(".journal.jsonl.") for kind, path in before), events
    assert ("fsync", folder) in events[copied:finished], events


def test_a_journal_copied_into_the_shard_folder_has_the_mode_a_copy_gets_not_a_private_one(tmp_path):
    """The copy went through mkstemp's temporary file, whose mode is 0600: a shard folder shared
    with the group (the host that merges it, a CI artifact step) got a journal only its writer
    could read, where a plain copy has the umask's mode, or the mode of the copy it replaces."""
    import stat

    from pytest_specdec.whole_file import replace_with_copy

    source = tmp_path / "journal.jsonl"
    source.write_text("a line\n")
    fresh, kept = tmp_path / "fresh" / "journal.jsonl", tmp_path / "kept" / "journal.jsonl"
    fresh.parent.mkdir()
    kept.parent.mkdir()
    kept.write_text("earlier line\n")
    kept.chmod(0o640)
    mask = os.umask(0o022)
    try:
        replace_with_copy(fresh, source, durable=False)
        replace_with_copy(kept, source, durable=False)
    finally:
        os.umask(mask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o644
    assert stat.S_IMODE(kept.stat().st_mode) == 0o640
    assert fresh.read_text() == kept.read_text() == "a line\n"


@pytest.mark.parametrize("make, message", [
    (lambda base: (base.mkdir(), (base / "cpu.json").symlink_to("cpu.json")),
     "baseline file */baselines/cpu.json cannot be saved into: */baselines/cpu.json: Too many levels of "
     "symbolic links; a symbolic link there leads back to itself: remove it, or choose another "
     "--specdec-baseline-dir"),
    (lambda base: base.symlink_to("baselines"),
     "baseline folder */baselines cannot be created: it is a symbolic link that cannot be followed (Too many "
     "levels of symbolic links); remove or repoint the link, or choose another --specdec-baseline-dir"),
    (lambda base: base.symlink_to("nowhere"),
     "baseline folder */baselines cannot be created: it is a symbolic link that cannot be followed (its "
     "target is missing); remove or repoint the link, or choose another --specdec-baseline-dir"),
], ids=["file-loop", "folder-loop", "folder-to-nothing"])
def test_a_baseline_link_that_leads_nowhere_stops_a_save_before_the_run(pytester, make, message):
    """A baseline file linking to itself ended the configure in an INTERNALERROR traceback (Path.resolve's
    RuntimeError before Python 3.13); a folder linking to itself or to nothing read as a folder to make,
    and its durations file was blamed, or the save failed after the benchmark."""
    pytester.makepyprojecttoml("[tool.specdec]\n")
    make(pytester.path / "baselines")
    assert_usage_error(run(pytester, "--specdec-save-baseline"), message)


#: Tests run after the recording one that put something else where the save writes.
SPOILERS = {
    "file-loop": "def test_spoil():\n    os.remove('baselines/cpu.json')\n    os.symlink('cpu.json', 'baselines/cpu.json')\n",
    "folder-is-a-file": "def test_spoil():\n    shutil.rmtree('baselines')\n    open('baselines', 'w').close()\n",
    "lock-is-a-folder": ("def test_spoil():\n    os.remove('baselines/.cpu.json.lock')\n"
                         "    os.makedirs('baselines/.cpu.json.lock')\n"),
}


@pytest.mark.parametrize("spoiler, line", [
    ("file-loop", "*/baselines/cpu.json: Too many levels of symbolic links; a symbolic link there leads back to "
                  "itself: remove it, or choose another --specdec-baseline-dir; *"),
    ("folder-is-a-file", "*/baselines: File exists; a file stands where a folder belongs: move it aside, or "
                         "choose another --specdec-baseline-dir; *"),
    ("lock-is-a-folder", "*/baselines/.cpu.json.lock: Is a directory; a folder stands where a file belongs: "
                         "remove it, or choose another --specdec-baseline-dir; *"),
])
def test_a_baseline_folder_spoiled_during_the_run_says_what_stands_in_the_way(pytester, spoiler, line):
    """The line said 'File exists; choose another --specdec-baseline-dir' for a folder that became a
    file, 'Is a directory; choose another ...' for a lock that became a folder (naming neither what is
    there nor that moving it is the fix), and a file linking to itself ended in an INTERNALERROR traceback."""
    pytester.makepyprojecttoml("[tool.specdec]\n")
    pytester.makepyfile(test_figures=RECORDING_TEST)
    assert pytester.runpytest("-p", "no:cacheprovider", "--specdec-save-baseline").ret == pytest.ExitCode.OK
    pytester.makepyfile(test_spoil="import os\nimport shutil\n\n\n" + SPOILERS[spoiler])
    # the spoiler runs after the recording test
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "--specdec-save-baseline")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"specdec: ERROR: baseline not saved: {line}"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_shard_folders_journal_turned_link_loop_during_the_run_is_replaced_by_the_copy(pytester):
    """The explicit journal's copy compared the two paths with Path.resolve, whose RuntimeError on the
    link loop (before Python 3.13) ended the run in an INTERNALERROR traceback."""
    pytester.makepyprojecttoml("[tool.specdec]\n")
    pytester.makepyfile(test_figures=RECORDING_TEST,
                        test_spoil="import os\n\n\ndef test_spoil():\n"
                                   "    os.symlink('journal.jsonl', 'rep/journal.jsonl')\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "--specdec-shard=1/1",
                                "--specdec-report=rep", "--specdec-journal=own.jsonl")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    copy = pytester.path / "rep" / "journal.jsonl"
    assert not copy.is_symlink() and copy.read_text() == (pytester.path / "own.jsonl").read_text()


def test_a_folder_link_whose_target_is_made_while_it_is_checked_is_a_folder_not_a_dead_end(tmp_path, monkeypatch):
    """A link whose target appeared between `exists()` and the look at why it leads nowhere stopped
    the run saying it 'cannot be followed (it leads nowhere)': it leads to the folder just made."""
    link, target = tmp_path / "baselines", tmp_path / "elsewhere"
    link.symlink_to(target)
    is_symlink = Path.is_symlink

    def made_meanwhile(path):
        if path == link:
            target.mkdir(exist_ok=True)
        return is_symlink(path)

    monkeypatch.setattr(Path, "is_symlink", made_meanwhile)
    outputs.check_folder(link / "sub", "baseline folder", "--specdec-baseline-dir")
    assert target.is_dir()


def test_a_baseline_folder_turned_link_to_nothing_is_named_a_link_not_a_file(tmp_path):
    """mkdir's 'File exists' for a link to nowhere read as a file in the way, which moving aside fixes
    only by chance: the link is what to remove or repoint."""
    from pytest_specdec.write_failure import unwritable

    (tmp_path / "baselines").symlink_to("nowhere")
    with pytest.raises(OSError) as excinfo:
        (tmp_path / "baselines").mkdir(parents=True, exist_ok=True)
    assert unwritable(excinfo.value, tmp_path, "--specdec-baseline-dir") == (
        f"{tmp_path / 'baselines'}: File exists; a symbolic link to no folder stands where a folder belongs: "
        f"remove or repoint it, or choose another --specdec-baseline-dir")


def test_a_shards_refused_report_names_the_shard_run_that_writes_it_again(pytester):
    """A shard journals into its own folder, which only a run of the same shard resumes from: the
    refused report's advice left out --specdec-shard and --specdec-report, and a plain resume
    found nothing to write the report from."""
    pytester.makepyprojecttoml(CONFIGURED_PROJECT)
    pytester.makepyfile(test_figures=CONFIGURED_TEST)
    pytester.makeconftest(REFUSED_WRITES.replace(READ_ONLY_WHOLE_FILES, ""))
    shard = ("--specdec-shard=1/1", "--specdec-report=shard-1")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *shard)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "specdec: ERROR: report not written: *shard-1: No space left on device; * a run with --specdec-resume "
        "and --specdec-report (and this run's --specdec-shard and --specdec-report) writes it without measuring "
        "again the tests that passed"])
    (pytester.path / "conftest.py").unlink()
    again = pytester.runpytest_subprocess("-p", "no:cacheprovider", *shard, "--specdec-resume")
    assert again.ret == pytest.ExitCode.OK, again.stdout.str()
    assert json.loads((pytester.path / "shard-1" / "results.json").read_text())["results"][0]["metrics"]


def test_a_shard_folder_the_os_refuses_at_the_start_stops_the_run_in_one_line(pytester):
    """The shard's manifest, written before any test, met a read-only folder: an INTERNALERROR
    traceback. It is one usage error naming the file, the reason and the fix, before anything is
    measured."""
    pytester.makepyprojecttoml(CONFIGURED_PROJECT)
    pytester.makepyfile(test_figures=CONFIGURED_TEST)
    pytester.makeconftest(REFUSED_WRITES)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--specdec-shard=1/1",
                                           "--specdec-report=shard-1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "ERROR: pytest-specdec: the shard folder cannot be written, so this shard could not be merged: "
        "*shard-1/shard.json: Read-only file system; make it writable, or choose another --specdec-report"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
