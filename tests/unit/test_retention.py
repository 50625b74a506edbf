"""`.specdec/` stays bounded: the last N runs' journals and artifact folders are kept."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pytest_specdec.retention import prune


@contextlib.contextmanager
def first_run(pytester: pytest.Pytester, test_file: str, started: Callable[[], bool],
              *args: str) -> Iterator[None]:
    """A run of `test_file` (with `args`) in the background, past `started()`, while the body
    runs; its tests wait for a file `go`, written when the body ends. The run must pass."""
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", test_file, *args],
                           cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not started():
            assert run.poll() is None and time.monotonic() < deadline, "the first run did not get going"
            time.sleep(0.05)
        yield
    finally:
        (pytester.path / "go").write_text("")
        out = run.communicate(timeout=120)[0]
    assert run.returncode == 0, out


def waiting_test(fixture: str, then: str = "pass") -> str:
    """A test using `fixture` that writes `started`, waits for `go`, then runs `then`."""
    return (f"import pathlib, time\n\ndef test_waits({fixture}):\n    pathlib.Path('started').write_text('')\n"
            f"    while not pathlib.Path('go').exists():\n        time.sleep(0.05)\n    {then}\n")


def test_prune_keeps_the_most_recent(tmp_path):
    paths = []
    for age, name in enumerate(["newest", "middle", "oldest"]):
        path = tmp_path / name
        path.mkdir() if name != "middle" else path.write_text("x")
        os.utime(path, (1000 - age, 1000 - age))
        paths.append(path)
    assert prune(paths, 1) == [tmp_path / "middle", tmp_path / "oldest"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["newest"]
    assert prune([tmp_path / "newest", tmp_path / "gone"], 1) == []


def test_runs_keep_the_last_n_journals_and_artifact_folders(pytester: pytest.Pytester):
    pytester.makepyprojecttoml("[tool.specdec]\nkeep_runs = 2\n")
    pytester.makepyfile("""
def test_measures(specdec_pool, specdec_record):
    specdec_record.metric("verify_us", 1.0)
""")
    for _ in range(4):
        pytester.runpytest().assert_outcomes(passed=1)
    state = pytester.path / ".specdec"
    journals = sorted(p.name for p in state.glob("journal*.jsonl"))
    assert len(journals) == 2 and "journal.jsonl" in journals, journals
    assert len(list((state / "artifacts").glob("run-*"))) == 2


def test_pruning_spares_what_the_plugin_did_not_write(pytester: pytest.Pytester):
    """Journals and artifacts pointed at a user's folder: the prune deleted `run-*` entries and
    `<stem>.*-*<suffix>` siblings of any kind. Now only `run-<12 hex>` folders and journals rotated
    with a time stamp are pruned."""
    pytester.makepyprojecttoml("[tool.specdec]\nkeep_runs = 1\njournal = \"log.jsonl\"\nartifacts = \"scripts\"\n")
    pytester.makepyfile("""
def test_measures(specdec_pool, specdec_record):
    specdec_record.metric("verify_us", 1.0)
""")
    scripts = pytester.mkdir("scripts")
    (scripts / "run-bench.sh").write_text("echo\n")
    (scripts / "run-data").mkdir()
    (scripts / "run-0123456789ab.txt").write_text("a file, not a run folder\n")
    (pytester.path / "log.my-notes.jsonl").write_text('{"mine": 1}\n')
    for _ in range(3):
        pytester.runpytest().assert_outcomes(passed=1)
    assert {"run-bench.sh", "run-data", "run-0123456789ab.txt"} <= {p.name for p in scripts.iterdir()}
    assert len([p for p in scripts.iterdir() if p.is_dir() and p.name != "run-data"]) == 1
    assert (pytester.path / "log.my-notes.jsonl").read_text() == '{"mine": 1}\n'
    assert sorted(p.name for p in pytester.path.glob("log*.jsonl")) == ["log.jsonl", "log.my-notes.jsonl"]


@pytest.mark.parametrize("option,message", [
    ("--specdec-journal=", r"--specdec-journal: '' is empty \(an unset variable\?\); give PATH, or leave "
                           r"--specdec-journal out"),
    ("--specdec-journal=.", r"is .*, a folder"),
    ("--specdec-journal=results", r"results, a folder"),
    ("--specdec-journal=notes.md", r"notes.md, an existing file that is not a pytest-specdec journal; .*point the"),
    ("--specdec-journal=pyproject.toml/j.jsonl", r"pyproject.toml is a file, not a folder"),
    ("--specdec-artifacts=pyproject.toml", r"the artifacts folder \(--specdec-artifacts\) is .*pyproject.toml, a file"),
])
def test_journal_and_artifacts_paths_that_name_other_things_stop_the_run_at_start(pytester: pytest.Pytester,
                                                                                 option, message):
    """Such a journal path had the project folder, a folder of results or a user's file renamed
    (and, past --specdec-keep-runs, deleted), or records appended to a user's notes; an artifacts
    path naming a file failed every test. Now the run stops before anything, naming the path."""
    pytester.makepyprojecttoml("[tool.specdec]\n")
    pytester.makepyfile("def test_x(specdec_record):\n    specdec_record.metric('verify_us', 1.0)\n")
    (pytester.mkdir("results") / "important.txt").write_text("x\n")
    (pytester.path / "notes.md").write_text("my notes\n")
    before = sorted(str(p.relative_to(pytester.path)) for p in pytester.path.rglob("*"))
    result = pytester.runpytest(option, "--specdec-keep-runs=1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.re_match_lines([f".*{message}"])
    assert sorted(str(p.relative_to(pytester.path)) for p in pytester.path.rglob("*")) == before
    assert (pytester.path / "notes.md").read_text() == "my notes\n"


def test_a_journal_is_known_by_its_first_line_even_torn(tmp_path):
    from pytest_specdec.run_paths import is_journal

    cases = {"empty": "", "record": '{"config_id": "a::b", "data": {}}\n', "torn": '{"config_id": "a::',
             "notes": "# notes\n", "other json": '{"mine": 1}\n'}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    assert [name for name in cases if is_journal(tmp_path / name)] == ["empty", "record", "torn"]


@pytest.mark.parametrize("xdist", [False, True])
def test_a_second_run_leaves_the_journal_of_a_running_one_alone(pytester: pytest.Pytester, xdist):
    """Two runs in one project each rotated the journal when they first recorded, so it went back
    and forth between them and --specdec-keep-runs pruned the rotated parts: of two runs' 16
    measurements 2 were left, both runs green. Now a run that finds another live run writing the
    journal stops before any test (under xdist too), naming it, and the other's records stay where they were."""
    pytester.makepyprojecttoml("[tool.specdec]\n")
    pytester.makepyfile(test_slow="""
import pathlib, time

def test_first(specdec_record):
    specdec_record.metric("verify_us", 1.0)

def test_second(specdec_record):
    while not pathlib.Path("go").exists():
        time.sleep(0.05)
    specdec_record.metric("verify_us", 2.0)
""", test_other="def test_other(specdec_record):\n    specdec_record.metric('verify_us', 3.0)\n",
        test_skipif="import pytest\n\n@pytest.mark.skipif(True, reason='not here')\n"
                    "def test_skipped(specdec_record):\n    specdec_record.metric('verify_us', 4.0)\n")
    journal = pytester.path / ".specdec" / "journal.jsonl"
    with first_run(pytester, "test_slow.py", lambda: journal.is_file() and journal.read_text().endswith("\n")):
        second = pytester.runpytest("-p", "no:cacheprovider", "test_other.py", "--specdec-keep-runs=1",
                                    *(["-n", "1"] if xdist else []))
        # runs that measure nothing are not refused; they run without xdist in either case: checked once
        quiet = [] if xdist else [pytester.runpytest("-p", "no:cacheprovider", *args) for args in
                                  (["--co"], ["test_other.py", "--benchmark-skip"], ["test_skipif.py"])]
    message = "*the results journal * is being written by another pytest run (pid *)*--specdec-journal*"
    # under xdist too: a worker's check at collection ends the run as one process's does
    assert second.ret == pytest.ExitCode.USAGE_ERROR
    second.stderr.fnmatch_lines([message])
    if quiet:
        listed, skipped, skipif = quiet
        assert listed.ret == pytest.ExitCode.OK
        skipped.assert_outcomes(skipped=1)
        skipif.assert_outcomes(skipped=1)
    values = [r["data"]["metrics"]["verify_us"]["value"] for r in figures(journal)]
    assert values == [1.0, 2.0]


def test_pruning_spares_the_artifact_folder_of_a_live_run(pytester: pytest.Pytester):
    """A second run with --specdec-keep-runs=1 (and a journal of its own) deleted the server logs
    and lease book of a run still going."""
    pytester.makepyprojecttoml("[tool.specdec]\n")
    pytester.makepyfile(test_slow=waiting_test("specdec_pool"), test_other="def test_other(specdec_pool):\n    pass\n")
    artifacts = pytester.path / ".specdec" / "artifacts"
    with first_run(pytester, "test_slow.py", (pytester.path / "started").exists):
        (live,) = artifacts.glob("run-*")
        for _ in range(2):
            pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_other.py", "--specdec-keep-runs=1",
                                          "--specdec-journal=other.jsonl").assert_outcomes(passed=1)
        assert live.is_dir()
        assert len(list(artifacts.glob("run-*"))) == 2  # the live one, and the newest of the other two
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_other.py", "--specdec-keep-runs=1",
                                  "--specdec-journal=other.jsonl").assert_outcomes(passed=1)
    assert not live.is_dir()  # no longer live: pruned as any other


def test_a_run_that_starts_while_another_measures_its_first_test_is_stopped(pytester: pytest.Pytester):
    """The journal was taken after a run's first measurement: a second run starting meanwhile
    passed its checks, and whichever finished its first test second lost that measurement."""
    pytester.makepyprojecttoml("[tool.specdec]\n")
    pytester.makepyfile(test_slow=waiting_test("specdec_record", then='specdec_record.metric("verify_us", 1.0)'),
                        test_other="def test_other(specdec_record):\n    specdec_record.metric('verify_us', 3.0)\n")
    with first_run(pytester, "test_slow.py", (pytester.path / "started").exists):
        second = pytester.runpytest("-p", "no:cacheprovider", "test_other.py")
    assert second.ret == pytest.ExitCode.USAGE_ERROR
    second.stderr.fnmatch_lines(["*the results journal * is being written by another pytest run*"])
    journal = pytester.path / ".specdec" / "journal.jsonl"
    assert [r["data"]["metrics"]["verify_us"]["value"] for r in figures(journal)] == [1.0]


def test_runs_given_testrunuids_alike_in_their_first_characters_are_two_runs(pytester: pytest.Pytester):
    """The run id was the first 12 characters of xdist's --testrunuid: runs given `nightly-build-a`
    and `nightly-build-b` were one run, which shared a run folder and both wrote the journal (the
    second was not stopped, and its records went into the first's journal)."""
    pytester.makepyprojecttoml("[tool.specdec]\n")
    pytester.makepyfile(test_slow=waiting_test("specdec_pool, specdec_record",
                                               then='specdec_record.metric("verify_us", 1.0)'),
                        test_other="def test_other(specdec_record):\n    specdec_record.metric('verify_us', 3.0)\n")
    artifacts = pytester.path / ".specdec" / "artifacts"
    with first_run(pytester, "test_slow.py", (pytester.path / "started").exists,
                   "-n", "1", "--testrunuid", "nightly-build-a"):
        second = pytester.runpytest("-p", "no:cacheprovider", "test_other.py", "-n", "1",
                                    "--testrunuid", "nightly-build-b")
        folders = [p.name for p in artifacts.glob("run-*")]
    assert second.ret == pytest.ExitCode.USAGE_ERROR  # a worker's check ends the run as one process's does
    second.stderr.fnmatch_lines(["*the results journal * is being written by another pytest run*"])
    journal = pytester.path / ".specdec" / "journal.jsonl"
    assert [r["data"]["metrics"]["verify_us"]["value"] for r in figures(journal)] == [1.0]
    assert folders == ["run-nightly-build-a"]


def test_distinct_testrunuids_give_distinct_run_ids_safe_in_a_path():
    """Cut to 12 characters, two values alike in their first 12 gave one run id; a value with a
    `/` or a space named a folder below the artifacts' or broke the journal's marker."""
    from pytest_specdec.state import id_of

    assert id_of("nightly-build-a") == "nightly-build-a"  # short and safe: kept as given
    long = "ci/" + "x" * 40
    ids = {id_of(value) for value in ("nightly-build-a", "nightly-build-b", long + "1", long + "2", "a b", "a_b")}
    assert len(ids) == 6
    assert all(len(i) <= 24 and re.fullmatch(r"[A-Za-z0-9._-]+", i) for i in ids), ids
    assert id_of(long + "1").startswith("ci_xxxx")  # readable before its hash


def figures(journal: Path) -> list[dict]:
    """The journal's records of figures, without the `done` marks that confirm them."""
    return [r for r in map(json.loads, journal.read_text().splitlines()) if "confirms" not in r]


def test_the_journal_in_use_error_names_where_the_journal_was_set(pytester: pytest.Pytester):
    """It said '(--specdec-journal)' for a journal set as `journal` in [tool.specdec]."""
    pytester.makepyprojecttoml('[tool.specdec]\njournal = "runs/j.jsonl"\n')
    pytester.makepyfile(test_slow=waiting_test("specdec_record", then='specdec_record.metric("verify_us", 1.0)'),
                        test_other="def test_other(specdec_record):\n    specdec_record.metric('verify_us', 3.0)\n")
    with first_run(pytester, "test_slow.py", (pytester.path / "started").exists):
        second = pytester.runpytest("-p", "no:cacheprovider", "test_other.py")
    assert second.ret == pytest.ExitCode.USAGE_ERROR
    second.stderr.fnmatch_lines(["*is being written by another pytest run (pid *)*; wait for it to end, or give "
                                 "this run a journal of its own (pyproject.toml [[]tool.specdec[]] key 'journal')"])
