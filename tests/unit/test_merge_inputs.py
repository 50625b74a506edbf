"""`python -m pytest_specdec merge` on shard folders damaged or incomplete: a clean error or a
FAILED line naming the file and the fix, never a traceback or a configuration silently missing.

Two shard folders written in-process (no engine): shard 1 measured ar-tp1, shard 2 dflash-tp1.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from lock_support import held_by_another_process
from pytest_specdec import __version__, baselines
from pytest_specdec.configuration import MatrixCase
from pytest_specdec.journal import Journal
from pytest_specdec.metrics import MetricValue
from pytest_specdec.result import Result
from pytest_specdec.shard import Shard
from pytest_specdec.shard_dir import JOURNAL, MANIFEST, ShardManifest
from pytest_specdec.shard_dir import TestOutcome as Outcome

CASES = (MatrixCase("cpu", "ar", 1, None), MatrixCase("cpu", "dflash", 1, None))


def nodeid(case: MatrixCase) -> str:
    return f"test_gen.py::test_generation[{case.param_id}-w]"


@pytest.fixture
def shards(tmp_path) -> Path:
    return write_shards(tmp_path, MetricValue("output_tok_s", 100.0, "higher"))


def write_shards(tmp_path: Path, metric: MetricValue) -> Path:
    """The two shard folders under `tmp_path`, each test's figure `metric`."""
    for index, case in enumerate(CASES, start=1):
        folder = tmp_path / f"shard-{index}"
        manifest = ShardManifest(
            plugin_version=__version__, shard=Shard(index, 2), configurations=CASES,
            assignment=(1, 2), matrix_digest="d", balanced_by="", hardware_key="cpu",
            hardware="no GPU", backend="embedded", finished="now", exitstatus=0,
            tests=(Outcome(nodeid(case), "passed", config=case.param_id),),
            durations={case.param_id: 1.0})
        folder.mkdir()
        (folder / MANIFEST).write_text(json.dumps({"format": "pytest-specdec-shard", "version": 1,
                                                   **manifest.to_json()}))
        result = Result(test_id=nodeid(case).split("::")[-1], nodeid=nodeid(case), case=case,
                        workload="w", metrics=(metric,))
        Journal(folder / JOURNAL).append(nodeid(case), "w", result.to_json())
    return tmp_path


def merge(root: Path) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "pytest_specdec", "merge", "--no-plots", "--out",
                           str(root / "merged"), str(root / "shard-1"), str(root / "shard-2")],
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stdout + done.stderr
    return done.returncode, done.stdout + done.stderr


def saving_merge(root: Path, baseline_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    """`merge --save-baseline` of the two shards under `root` into `baseline_dir`."""
    return subprocess.run([sys.executable, "-m", "pytest_specdec", "merge", "--no-plots", "--out",
                           str(root / "merged"), str(root / "shard-1"), str(root / "shard-2"),
                           "--save-baseline", "--baseline-dir", str(baseline_dir), *extra],
                          capture_output=True, text=True, timeout=120)


def test_intact_shards_merge(shards):
    rc, text = merge(shards)
    assert rc == 0, text
    assert "2 row(s) written" in text


def test_a_shard_folder_that_does_not_exist_is_named_so(shards, monkeypatch):
    """A mistyped folder, or `shard-*` left as it is by a shell that matched nothing, was called
    "not a shard folder: it has no shard.json", as if it were there; it now says it does not exist."""
    monkeypatch.chdir(shards)
    done = subprocess.run([sys.executable, "-m", "pytest_specdec", "merge", "--no-plots", "--out", "merged",
                           "shard-1", "shard-*"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("python -m pytest_specdec merge: error: shard-* does not exist; give each "
                                  "shard's --specdec-report folder (run pytest with --specdec-shard=K/N"), done.stderr
    assert not (shards / "merged").exists()


@pytest.mark.parametrize("given, said", [
    ("shard-2/shard.json", "shard-2/shard.json is a shard's manifest, not its folder; give the folder, shard-2"),
    ("notes.txt", "notes.txt is a file, not a shard folder; give each shard's --specdec-report folder (run pytest "
                  "with --specdec-shard=K/N --specdec-report=DIR and merge DIR)"),
])
def test_a_file_given_for_a_shard_folder_is_named_so(shards, monkeypatch, given, said):
    """`shard-*/shard.json` (a glob of the manifests) was called "not a shard folder: it has no
    shard.json", of the shard.json itself."""
    monkeypatch.chdir(shards)
    (shards / "notes.txt").write_text("")
    done = subprocess.run([sys.executable, "-m", "pytest_specdec", "merge", "--no-plots", "--out", "merged",
                           "shard-1", given], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr == f"python -m pytest_specdec merge: error: {said}\n"
    assert not (shards / "merged").exists()


def test_the_merged_reports_title_nests_no_parentheses(shards):
    """It read `pytest-specdec results (2 of 2 merged (1/2, 2/2))`."""
    rc, text = merge(shards)
    assert rc == 0, text
    title = "pytest-specdec results: 2 of 2 shards merged (1/2, 2/2)"
    assert (shards / "merged" / "report.md").read_text().splitlines()[0] == f"# {title}"


@pytest.mark.parametrize("journal", [None, "garbage\n"])
def test_a_passed_test_without_a_journaled_result_fails_the_merge(shards, journal):
    """A shard folder copied without its journal (an upload that took only shard.json) got a line
    per passed test, each saying the missing file "has no record of it": now one line, with the fix."""
    path = shards / "shard-1" / JOURNAL
    path.unlink() if journal is None else path.write_text(journal)
    rc, text = merge(shards)
    assert rc == 1
    if journal is None:
        assert (f"specdec merge: FAILED: shard 1/2 ({shards / 'shard-1'}): {path} is missing, so its 1 passed "
                f"test(s) have no result: copy the shard's whole folder (its journal.jsonl beside shard.json), or "
                f"run that shard again with --specdec-resume and merge again") in text
        assert f"no result for {nodeid(CASES[0])}" not in text
    else:
        assert (f"specdec merge: FAILED: shard 1/2 ({shards / 'shard-1'}): no result for "
                f"{nodeid(CASES[0])}: it passed, but {path} has no record of it; run that shard "
                f"again with --specdec-resume and merge again") in text
    assert "ar-tp1" in (shards / "merged" / "report.md").read_text()
    cases = {c.get("name"): c for c in ET.parse(shards / "merged" / "junit.xml").iter("testcase")}
    assert sorted(cases) == ["test_generation[ar-tp1-w]", "test_generation[dflash-tp1-w]"]
    assert [e.tag for e in cases["test_generation[ar-tp1-w]"] if e.tag in ("error", "failure")] == ["error"]


@pytest.mark.parametrize("name, error", [
    ("cpu.json", "baseline file {file} is not valid JSON (line 1, column 2: Expecting property name enclosed in "
                 "double quotes); fix it, or move it aside (or delete it) and save a new one with merge "
                 "--save-baseline"),
    ("durations.json", "durations file {file} is not valid JSON (line 1: Expecting property name enclosed in "
                       "double quotes); fix or delete it (the next merge with --save-baseline writes it again)"),
])
def test_a_broken_baseline_folder_file_stops_a_saving_merge_before_it_writes_anything(shards, name, error):
    """Each was read only when the merge came to save into it, after the report was written; its
    advice (delete it, merge again) must hold: a merge that stopped after saving a baseline would
    pool the same samples twice when run again. (The report folder's own durations.json is an
    output: replaced, not read.)"""
    where = shards / "baselines"
    where.mkdir()
    (where / name).write_text("{bad")
    done = subprocess.run([sys.executable, "-m", "pytest_specdec", "merge", "--no-plots", "--out",
                           str(shards / "merged"), str(shards / "shard-1"), str(shards / "shard-2"),
                           "--save-baseline", f"--baseline-dir={where}"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: " + error.format(file=where / name) in done.stderr
    assert sorted(p.name for p in where.iterdir()) == [name]
    assert not (shards / "merged" / "report.md").exists()


def test_a_baseline_file_of_other_hardware_stops_a_saving_merge_naming_its_option(shards):
    """Its advice named a run's --specdec-baseline-dir (and "this machine"), which the merge has not."""
    where = shards / "baselines"
    where.mkdir()
    (where / "cpu.json").write_text(json.dumps({"format": "pytest-specdec-baselines", "version": 1,
                                                "hardware_key": "nvidia-h100-sm_90-x1", "entries": {}}))
    before = (where / "cpu.json").read_text()
    done = saving_merge(shards, where)
    assert done.returncode == 2, done.stdout + done.stderr
    assert (f"error: baseline file {where / 'cpu.json'} belongs to hardware 'nvidia-h100-sm_90-x1', but "
            f"the figures of shard(s) 1/2, 2/2, measured on 'cpu', go there; baselines do not transfer "
            f"between machines: move it aside, or point --baseline-dir elsewhere") in done.stderr
    assert "--specdec-" not in done.stderr
    assert (where / "cpu.json").read_text() == before and not (shards / "merged").exists()


def test_a_saving_merge_records_node_ids_and_stops_on_another_tests_entry(shards):
    """Entries keep the node id of the test that saved them; one of another file under the same
    name and parameters stops the merge before it writes anything, naming both tests."""
    where = shards / "baselines"

    done = saving_merge(shards, where)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads((where / "cpu.json").read_text())
    assert {t: m["output_tok_s"]["nodeid"] for t, m in doc["entries"].items()} == \
        {nodeid(c).split("::")[-1]: nodeid(c) for c in CASES}
    test_id = nodeid(CASES[0]).split("::")[-1]
    doc["entries"][test_id]["output_tok_s"]["nodeid"] = f"other/test_bench.py::{test_id}"
    (where / "cpu.json").write_text(json.dumps(doc))
    before = (where / "cpu.json").read_text()
    shutil.rmtree(shards / "merged")
    done = saving_merge(shards, where)
    assert done.returncode == 2, done.stdout + done.stderr
    assert (f"error: baseline file {where / 'cpu.json'}: the entries of {test_id} belong to "
            f"other/test_bench.py::{test_id}, not to {nodeid(CASES[0])}: ") in done.stderr
    assert "save them again with merge --save-baseline" in done.stderr
    assert (where / "cpu.json").read_text() == before and not (shards / "merged").exists()


def test_another_tests_entry_of_a_failed_test_does_not_stop_a_saving_merge(shards):
    """The check before the save refused every shard's figures for another test's entry under the
    key of a test whose figures the save leaves out anyway (it failed), where a run saves the rest."""
    where = shards / "baselines"
    where.mkdir()
    failed_case = CASES[1]
    manifest = json.loads((shards / "shard-2" / MANIFEST).read_text())
    manifest["tests"][0]["outcome"] = "failed"
    (shards / "shard-2" / MANIFEST).write_text(json.dumps(manifest))
    test_id = nodeid(failed_case).split("::")[-1]
    entry = {"value": 90.0, "direction": "higher", "spread": 0.0, "samples": 1, "deterministic": False,
             "nodeid": f"other/test_bench.py::{test_id}"}
    (where / "cpu.json").write_text(json.dumps({"format": "pytest-specdec-baselines", "version": 3,
                                                "hardware_key": "cpu",
                                                "entries": {test_id: {"output_tok_s": entry}}}))
    done = saving_merge(shards, where)
    assert "belong to" not in done.stderr, done.stderr
    assert f"specdec merge: saved into {where / 'cpu.json'}" in done.stdout, done.stdout + done.stderr
    entries = json.loads((where / "cpu.json").read_text())["entries"]
    assert entries[nodeid(CASES[0]).split("::")[-1]]["output_tok_s"]["nodeid"] == nodeid(CASES[0])
    kept = entries[test_id]["output_tok_s"]  # the failed test's figures left out, the other test's entry kept
    assert (kept["value"], kept["nodeid"]) == (90.0, entry["nodeid"])


@pytest.mark.parametrize("samples", [(99.0, 101.0), (99.0, 100.0, 101.0)], ids=["equal", "unequal"])
def test_a_saving_merge_run_again_after_another_runs_save_pools_its_figures_once(tmp_path, samples):
    """A saving merge interrupted (its figures saved) and run again after another run saved one
    of its tests: the check compared the newest save only, so the merge's samples counted twice.
    Where the other run saved fewer samples (unequal), the pool kept only as many of the merge's
    as the other run's, so the rerun found no save of its samples and pooled them again."""
    write_shards(tmp_path, MetricValue("output_tok_s", 100.0, "higher", distribution=samples))
    where = tmp_path / "baselines"
    assert saving_merge(tmp_path, where).returncode == 0
    test_id = nodeid(CASES[0]).split("::")[-1]
    baselines.save_baselines(where / "cpu.json", "cpu", {test_id: [MetricValue(
        "output_tok_s", 90.0, "higher", distribution=(89.0, 91.0))]}, versions={},
        nodeids={test_id: nodeid(CASES[0])})
    done = saving_merge(tmp_path, where)
    assert done.returncode == 0, done.stdout + done.stderr
    entries = json.loads((where / "cpu.json").read_text())["entries"]
    kept = entries[test_id]["output_tok_s"]
    assert (kept["distribution"], kept["value"]) == ([*samples, 89.0, 91.0], 90.0)
    assert kept["save_sizes"] == [len(samples), 2]
    other = entries[nodeid(CASES[1]).split("::")[-1]]["output_tok_s"]
    assert (other["save_sizes"], other["distribution"]) == ([len(samples)], list(samples))


def test_a_saving_merge_waits_for_a_held_lock_only_so_long(shards):
    """merge --save-baseline waited on a baseline folder file's lock without a bound and in
    silence while a hung run held it."""
    where = shards / "baselines"
    where.mkdir()
    lock_file = where / ".cpu.json.lock"
    with held_by_another_process(lock_file) as holder:
        done = saving_merge(shards, where, "--lock-timeout", "1")
    assert done.returncode == 2, done.stdout + done.stderr
    assert (f"specdec merge: baseline save: {lock_file} is held by pid {holder.pid} (") in done.stderr
    assert "waiting up to 0.5s more before the save fails (bound: --lock-timeout)" in done.stderr
    assert f"error: {lock_file} stayed held by pid {holder.pid} (" in done.stderr
    assert ("; the figures stay in the shard folders: once the lock is free, merge again with "
            "--save-baseline (a figure saved already is not pooled twice)") in done.stderr
    assert not (where / "cpu.json").exists()


@pytest.mark.parametrize("damage, why", [
    (lambda path: path.mkdir(), "Is a directory"),
    (lambda path: path.symlink_to(path.name), "Too many levels of symbolic links"),
])
def test_a_shard_journal_that_cannot_be_opened_stops_the_merge_naming_it(shards, damage, why):
    """A shard's journal.jsonl that is a folder or a link loop was a traceback."""
    path = shards / "shard-1" / JOURNAL
    path.unlink()
    damage(path)
    rc, text = merge(shards)
    assert rc != 0
    assert f"{path} cannot be read ({why}); fix it, or re-run that shard" in text
    assert not (shards / "merged").exists()


def test_a_damaged_journal_line_is_skipped_loudly_naming_shard_file_and_line(shards):
    """As a resumed run skips a damaged line of its journal and measures again what it lacks:
    the merge says where the line is and what it did, in its output and in the report; a line
    that held a record the merge needs fails it (below)."""
    path = shards / "shard-1" / JOURNAL
    with path.open("a") as fh:
        fh.write("garbage\n")
    rc, text = merge(shards)
    assert rc == 0, text
    line = (f"shard 1/2 ({shards / 'shard-1'}): {path}:2: skipped an unreadable line (Expecting "
            f"value: line 1 column 1 (char 0)); every test of that shard has its record")
    assert f"specdec merge: {line}" in text
    assert "JournalWarning" not in text  # said once, by the merge, not as a Python warning
    assert line in (shards / "merged" / "report.md").read_text()
    assert line in json.loads((shards / "merged" / "results.json").read_text())["meta"]["journal"]


def test_a_damaged_line_that_held_a_later_record_fails_the_merge_and_saves_nothing(shards):
    """The damaged line may have been the record that overrides the one before it (a test's
    failed checks after its figures, a passing attempt after a failed one): the merge trusts no
    stale record as the shard's result, and no figure of a failed test goes into a baseline."""
    path = shards / "shard-1" / JOURNAL
    manifest = json.loads((shards / "shard-1" / MANIFEST).read_text())
    manifest["tests"][0].update(outcome="failed", reason="regression")  # its failed-checks record lost
    (shards / "shard-1" / MANIFEST).write_text(json.dumps(manifest))
    with path.open("a") as fh:
        fh.write('{"v": 1, "config_id": "test_gen.py::test_gen\n')
    done = saving_merge(shards, shards / "baselines")
    assert done.returncode == 1, done.stdout
    assert f"{path}:2: skipped an unreadable line" in done.stdout
    saved = json.loads((shards / "baselines" / "cpu.json").read_text())["entries"]
    assert sorted(saved) == ["test_generation[dflash-tp1-w]"]

    record = json.loads(path.read_text().splitlines()[0])
    manifest["tests"][0].update(outcome="passed", reason=None)  # it passed on its second attempt
    (shards / "shard-1" / MANIFEST).write_text(json.dumps(manifest))
    path.write_text(json.dumps({**record, "status": "failed"}) + "\ngarbage\n")
    rc, text = merge(shards)
    assert rc == 1
    assert (f"no result for {nodeid(CASES[0])}: it passed, but its latest record in {path} is "
            f"'failed' (a damaged line may have held a later one); run that shard again with "
            f"--specdec-resume and merge again") in text


@pytest.mark.parametrize("outcome", ["passed", "skipped"])
def test_figures_whose_checks_never_finished_are_no_result_of_the_merge(shards, outcome):
    """A shard's journal whose last record of a test is its figures without their `done` mark (the
    process died during the checks, or the mark was torn): the merge showed the test as passed,
    and a test skipped for its own reason passed on an older run's unchecked figures."""
    path = shards / "shard-1" / JOURNAL
    record = Journal(path).records()[0]
    path.unlink()
    Journal(path).append(record.config_id, record.workload, record.data, status="measured")
    manifest = json.loads((shards / "shard-1" / MANIFEST).read_text())
    manifest["tests"][0].update(outcome=outcome, reason="not on this host" if outcome == "skipped" else None)
    (shards / "shard-1" / MANIFEST).write_text(json.dumps(manifest))
    done = saving_merge(shards, shards / "baselines")
    saved = json.loads((shards / "baselines" / "cpu.json").read_text())["entries"]
    assert sorted(saved) == ["test_generation[dflash-tp1-w]"]
    rows = {r["test_id"]: r for r in json.loads((shards / "merged" / "results.json").read_text())["results"]}
    row = rows["test_generation[ar-tp1-w]"]
    if outcome == "skipped":
        assert done.returncode == 0, done.stdout
        assert (row["outcome"], row["reason"], row["metrics"]) == ("skipped", "not on this host", {})
    else:
        assert done.returncode == 1
        why = (f"it passed, but its latest record in {path} is 'measured' (figures whose checks "
               f"never finished)")
        assert f"no result for {nodeid(CASES[0])}: {why}; run that shard again" in done.stdout
        assert (row["outcome"], row["reason"]) == ("error", f"no result: {why}")


def test_a_journal_record_of_the_wrong_shape_fails_the_merge_naming_it(shards):
    path = shards / "shard-1" / JOURNAL
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "data": {"nodeid": "x"}}) + "\n")
    rc, text = merge(shards)
    assert rc == 1
    assert (f"no result for {nodeid(CASES[0])}: its record in {path} is damaged (KeyError: "
            f"'test_id'); run that shard again with --specdec-resume") in text


@pytest.mark.parametrize("change, why", [
    # a whole number of 1e999 (JSON reads it as infinity, which int() refuses with OverflowError)
    ({"tp": float("inf")}, "OverflowError: cannot convert float infinity to integer"),
    ({"workload": -1}, "TypeError: workload -1 is not a workload's name"),  # its report cell failed
    ({"workload": []}, "TypeError: workload [] is not a workload's name"),  # its key was unhashable
])
def test_a_journal_record_whose_fields_have_the_wrong_value_fails_the_merge_naming_it(shards, change, why):
    path = shards / "shard-1" / JOURNAL
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "data": {**record["data"], **change}}) + "\n")
    rc, text = merge(shards)
    assert rc == 1
    assert (f"no result for {nodeid(CASES[0])}: its record in {path} is damaged ({why}); run that shard "
            f"again with --specdec-resume") in text


@pytest.mark.parametrize("key, value, why", [
    ("durations", "x", "durations 'x' is not an object of seconds per configuration"),
    ("exitstatus", "x", "exitstatus 'x' is not pytest's exit status (an integer)"),
    ("tests", [{"nodeid": "n"}], "KeyError: 'outcome'"),
    # a TypeError traceback where the merge matched the reason, or keyed on the configuration
    ("tests", [{"nodeid": "n", "outcome": "skipped", "reason": 1}], "the reason 1 of test 'n' is not text"),
    ("tests", [{"nodeid": "n", "outcome": "passed", "config": ["ar-tp1"]}],
     "the config ['ar-tp1'] of test 'n' is not text"),
    ("shard", {"index": float("inf"), "count": 2}, "OverflowError: cannot convert float infinity to integer"),
    ("lossless", {"mode": "exact", "margins": "no"}, "lossless.margins 'no' is not true or false"),
    ("lossless", {"mode": "exact", "margins": False, "margins_switch": 1},
     "lossless.margins_switch 1 is not a string or null"),
])
def test_a_damaged_manifest_is_an_error_naming_it(shards, key, value, why):
    path = shards / "shard-1" / MANIFEST
    path.write_text(json.dumps({**json.loads(path.read_text()), key: value}))
    rc, text = merge(shards)
    assert rc == 2
    assert f"error: {path} is damaged (" in text and why in text and "re-run that shard" in text


def test_out_naming_a_file_is_an_error(shards):
    (shards / "merged").write_text("")
    rc, text = merge(shards)
    assert rc == 2
    assert f"error: --out {shards / 'merged'} is a file; name a folder" in text


def test_out_naming_a_shard_folder_is_an_error(shards):
    """The merged report replaced that shard's own, rc 0."""
    before = sorted(p.name for p in (shards / "shard-1").iterdir())
    done = subprocess.run([sys.executable, "-m", "pytest_specdec", "merge", "--no-plots", "--out",
                           str(shards / "shard-1"), str(shards / "shard-1"), str(shards / "shard-2")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert f"error: --out {shards / 'shard-1'} is the shard folder {shards / 'shard-1'}: the merged report " \
           f"would overwrite that shard's own" in done.stderr
    assert sorted(p.name for p in (shards / "shard-1").iterdir()) == before


@pytest.mark.parametrize("damage, args, why", [
    ("merged/junit.xml/", (), "report folder {root}/merged: junit.xml is not a file; remove it or "
                              "choose another --out"),
    ("merged/durations.json/", (), "report folder {root}/merged: durations.json is not a file; "
                                   "remove it or choose another --out"),
    ("baselines/cpu.json", ("--save-baseline",), "baseline file {root}/baselines/cpu.json is not valid JSON"),
    ("baselines/durations.json", ("--save-baseline",),
     "durations file {root}/baselines/durations.json is not valid JSON"),
])
def test_a_target_the_merge_cannot_write_stops_it_before_anything_is_written(shards, damage, args, why):
    """The report was written first and junit.xml, durations.json or the baseline failed after
    it: a traceback or an error with half the merged outputs on disk, the baseline unsaved."""
    path = shards / damage
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir() if damage.endswith("/") else path.write_text("garbage")
    done = subprocess.run([sys.executable, "-m", "pytest_specdec", "merge", "--no-plots", *args,
                           "--baseline-dir", str(shards / "baselines"), "--out", str(shards / "merged"),
                           str(shards / "shard-1"), str(shards / "shard-2")],
                          capture_output=True, text=True, timeout=120, cwd=shards)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2
    assert why.format(root=shards) in done.stderr
    left = [path.name] if path.parent.name == "merged" else []  # the damage, and nothing beside it
    assert sorted(p.name for p in (shards / "merged").glob("*")) == left

def test_the_merged_report_names_files_in_the_project_relative_to_it(shards):
    """A failure's message in a shard's shard.json, and the merge's own (a journal with no
    record), named files by absolute path in report.md, results.json and junit.xml; inside the
    project the merge runs in they are relative to it, outside it they stay as they are."""
    path = shards / "shard-1" / MANIFEST
    doc = json.loads(path.read_text())
    doc["tests"][0].update(outcome="failed", reason=f"server ar-tp1 died (log: {shards}/.specdec/"
                                                     f"ar-tp1.log; prompts /elsewhere/p.txt)")
    doc["exitstatus"] = 1
    path.write_text(json.dumps(doc))
    (shards / "shard-2" / JOURNAL).unlink()
    done = subprocess.run([sys.executable, "-m", "pytest_specdec", "merge", "--no-plots", "--out",
                           str(shards / "merged"), str(shards / "shard-1"), str(shards / "shard-2")],
                          capture_output=True, text=True, timeout=120, cwd=shards)
    assert done.returncode == 1, done.stdout + done.stderr
    published = [(shards / "merged" / name).read_text() for name in ("report.md", "results.json",
                                                                      "junit.xml")]
    for text in published:
        assert str(shards) not in text
        assert "(log: .specdec/ar-tp1.log; prompts /elsewhere/p.txt)" in text
        assert "it passed, but shard-2/journal.jsonl is missing" in text


def test_the_merged_durations_are_this_merges_alone_and_leave_no_lock_file(shards):
    """The merge added its durations to the durations.json an earlier merge left in --out, so
    configurations of that merge stayed in this one's, and left .durations.json.lock beside it."""
    out = shards / "merged"
    out.mkdir()
    (out / "durations.json").write_text(json.dumps({
        "format": "pytest-specdec-durations", "version": 1,
        "configurations": {"ddtree-tp1-b8": 9.0, "ar-tp1": 5.0}}))
    rc, text = merge(shards)
    assert rc == 0, text
    written = json.loads((out / "durations.json").read_text())["configurations"]
    assert written == {"ar-tp1": 1.0, "dflash-tp1": 1.0}
    assert not list(out.glob(".*")), list(out.glob(".*"))
    # a broken one there is replaced too: it is this merge's output, not an input
    (out / "durations.json").write_text("garbage")
    rc, text = merge(shards)
    assert rc == 0, text
    assert json.loads((out / "durations.json").read_text())["configurations"] == written


def test_merged_junit_carries_each_figures_verdict_as_a_runs_junit_does(shards):
    """A run's --junitxml gives each compared figure `specdec.<metric>.verdict`; the merge's
    junit.xml gave only the test's verdict, so a dashboard reading the figures' lost them once
    the run was sharded."""
    from types import SimpleNamespace

    from pytest_specdec.gate import Comparison, Tolerance
    from pytest_specdec.recording import attach_to_report

    case = CASES[0]
    comparisons = (
        Comparison(nodeid(case), "output_tok_s", 100.0, "higher", 101.0, Tolerance("output_tok_s", 0.1, True),
                   "unchanged"),
        Comparison(nodeid(case), "tpot_ms", 2.0, "lower", 1.0, None, "regression"))  # no tolerance gates it
    path = shards / "shard-1" / MANIFEST
    doc = json.loads(path.read_text())
    doc["tests"][0]["comparisons"] = [c.to_json() for c in comparisons]
    path.write_text(json.dumps(doc))
    rc, text = merge(shards)
    assert rc == 0, text
    case_xml = next(c for c in ET.parse(shards / "merged" / "junit.xml").iter("testcase")
                    if c.get("name") == nodeid(case).split("::")[-1])
    shown = {p.get("name"): p.get("value") for p in case_xml.iter("property")}
    item = SimpleNamespace(user_properties=[])
    attach_to_report(item, Result(test_id="t", nodeid="t", metrics=(), comparisons=comparisons))
    expected = {name: value for name, value in item.user_properties if name.endswith(".verdict")}
    assert expected == {"specdec.output_tok_s.verdict": "unchanged", "specdec.tpot_ms.verdict": "not gated",
                        "specdec.verdict": "ok"}
    assert {name: value for name, value in shown.items() if name in expected} == expected
    row = next(r for r in json.loads((shards / "merged" / "results.json").read_text())["results"]
               if r["config"] == case.param_id)
    assert row["verdicts"] == {"output_tok_s": "unchanged", "tpot_ms": "not gated"}

def test_a_report_drops_the_plots_an_earlier_one_drew_and_it_does_not(tmp_path):
    """A report folder reused for rows without acceptance kept the earlier accept-length plot."""
    pytest.importorskip("matplotlib")
    from report_support import row

    from pytest_specdec.report import write_report

    write_report(tmp_path, [row("ddtree", 1, 8, 100.0, accept=3.0), row("ar", 1, None, 50.0, accept=1.0)])
    assert (tmp_path / "plots" / "accept_length.png").is_file()
    files = write_report(tmp_path, [row("ar", 1, None, 50.0)])
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == sorted(p.name for p in files.plots)
    assert not (tmp_path / "plots" / "accept_length.png").exists()


def test_merged_junit_class_names_are_pytests_and_a_configuration_without_a_test_keeps_its_own(shards):
    """The class name was the configuration (`ar-tp1`) where pytest's --junitxml gives the test's
    module (`test_gen`); a configuration with no test (its shard missing) has no module to give."""
    rc, text = merge(shards)
    assert rc == 0, text
    cases = {c.get("name"): c.get("classname") for c in ET.parse(shards / "merged" / "junit.xml").iter("testcase")}
    assert cases == {"test_generation[ar-tp1-w]": "test_gen", "test_generation[dflash-tp1-w]": "test_gen"}
    done = subprocess.run([sys.executable, "-m", "pytest_specdec", "merge", "--no-plots", "--out",
                           str(shards / "partial"), str(shards / "shard-1")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    cases = {c.get("name"): c.get("classname") for c in ET.parse(shards / "partial" / "junit.xml").iter("testcase")}
    assert cases == {"test_generation[ar-tp1-w]": "test_gen", "dflash-tp1": "dflash-tp1"}
    from pytest_specdec.junit import classname_of  # a class's tests, and parameters that look like a path

    assert classname_of("tests/bench/test_x.py::TestA::test_b[a::b/c.py]") == "tests.bench.test_x.TestA"


def known_issue_shards(root: Path, outcome: str, *, awaits: str | None, reference_outputs: bool,
                       lossy: bool = True, strict: bool = True) -> Path:
    """ar-tp1 in shard 1; dflash-tp1, a known issue whose outputs leave ar's (match them: not
    `lossy`), in shard 2, ended `outcome` there (`awaits`: the reference its verdict waited on, as
    a shard skips it; `strict`: whether the shard marked its known issues strict)."""
    from pytest_specdec.journal import FAILED_CHECKS
    from pytest_specdec.lossless import Outputs

    outputs = {"ar": Outputs(((1, 2, 3),), ("abc",)),
               "dflash": Outputs(((1, 9, 3),), ("a?c",)) if lossy else Outputs(((1, 2, 3),), ("abc",))}
    for index, case in enumerate(CASES, start=1):
        folder = root / f"shard-{index}"
        issue = {"known_issue": "drafts wrongly", "awaits": awaits, "known_issue_strict": strict} \
            if case.method == "dflash" else {}
        test = Outcome(nodeid(case), outcome if issue else "passed", "known issue: drafts wrongly" if issue else None,
                       case.param_id)
        manifest = ShardManifest(
            plugin_version=__version__, shard=Shard(index, 2), configurations=CASES,
            assignment=(1, 2), matrix_digest="d", balanced_by="", hardware_key="cpu",
            hardware="no GPU", backend="embedded", lossless="exact", finished="now", exitstatus=0,
            tests=(test,), durations={case.param_id: 1.0})
        folder.mkdir()
        written = manifest.to_json()
        written["tests"][0].update(issue)  # as a shard of this version writes them
        (folder / MANIFEST).write_text(json.dumps({"format": "pytest-specdec-shard", "version": 1, **written}))
        result = Result(test_id=nodeid(case).split("::")[-1], nodeid=nodeid(case), case=case, workload="w",
                        metrics=(MetricValue("output_tok_s", 100.0, "higher"),),
                        outputs=outputs[case.method] if issue or reference_outputs else None)
        status = FAILED_CHECKS if issue and outcome == "skipped" else "done"
        Journal(folder / JOURNAL).append(nodeid(case), "w", result.to_json(), status=status)
    return root


def merged_rows(root: Path) -> dict[str, tuple[str, bool, str | None]]:
    rows = json.loads((root / "merged" / "results.json").read_text())["results"]
    return {r["config"]: (r["outcome"], bool(r["metrics"]), r["reason"]) for r in rows}


def test_a_known_issue_that_passed_not_strictly_and_diverges_across_shards_is_an_expected_failure(tmp_path):
    """A dry run on a backend that does not reproduce known issues marks them xfail, not strict:
    the test passed (XPASS). Its outputs leave ar's, which another shard measured: the merge failed
    it as not lossless, where in one run its own test fails on that divergence, an expected failure."""
    rc, text = merge(known_issue_shards(tmp_path, "xpassed", awaits=None, reference_outputs=True))
    assert rc == 0, text
    outcome, figures, reason = merged_rows(tmp_path)["dflash-tp1"]
    assert (outcome, figures) == ("xfailed", True)
    assert reason.startswith("known issue: drafts wrongly: dflash-tp1 is not lossless: prompt 1 differs "
                             "from ar-tp1 at token 2")


def test_a_non_strict_known_issue_whose_outputs_match_across_shards_is_xpassed_not_xpass_strict(tmp_path):
    """A dry run's known issue is not strict; its shard skipped it, not compared (its reference in
    another shard). Where the merge finds the outputs match, one run would read XPASS (xpassed, the
    run green), not [XPASS(strict)] failing the merge."""
    rc, text = merge(known_issue_shards(tmp_path, "skipped", awaits="ar-tp1", reference_outputs=True,
                                        lossy=False, strict=False))
    assert rc == 0, text
    outcome, figures, reason = merged_rows(tmp_path)["dflash-tp1"]
    assert (outcome, figures) == ("xpassed", True)
    assert reason.startswith("known issue: drafts wrongly: its outputs match ar-tp1's (compared by the merge")
    assert "XPASS(strict)" not in text


def test_a_known_issue_whose_reference_recorded_no_outputs_in_any_shard_stays_skipped_with_its_figures(
        tmp_path):
    """Nothing compared its outputs, so the merge says so as its shard did (as one run that left
    the reference out does), keeping the figures that run keeps; the merge had dropped them."""
    rc, text = merge(known_issue_shards(tmp_path, "skipped", awaits="ar-tp1", reference_outputs=False))
    assert rc == 0, text
    assert merged_rows(tmp_path)["dflash-tp1"] == ("skipped", True, "known issue: drafts wrongly")
    assert "not measured: dflash-tp1" not in text


def lossy_shards(root: Path, margins: bool | None) -> Path:
    """ar-tp1 in shard 1, measured on SGLang without its margins; dflash-tp1 in shard 2, whose
    outputs leave ar's at token 2. `margins`: whether the shards asked for them, as their
    shard.json says (None: shards older than that record, which do not say)."""
    from pytest_specdec.lossless import Outputs

    outputs = {"ar": Outputs(((1, 2, 3),), ("abc",)), "dflash": Outputs(((1, 9, 3),), ("a?c",))}
    for index, case in enumerate(CASES, start=1):
        folder = root / f"shard-{index}"
        manifest = ShardManifest(
            plugin_version=__version__, shard=Shard(index, 2), configurations=CASES,
            assignment=(1, 2), matrix_digest="d", balanced_by="", hardware_key="cpu",
            hardware="no GPU", backend="sglang", lossless="exact", lossless_margins=margins,
            margins_switch="--specdec-lossless-margins" if margins is False else None,
            finished="now", exitstatus=0, tests=(Outcome(nodeid(case), "passed", config=case.param_id),),
            durations={case.param_id: 1.0})
        folder.mkdir()
        (folder / MANIFEST).write_text(json.dumps({"format": "pytest-specdec-shard", "version": 1,
                                                   **manifest.to_json()}))
        result = Result(test_id=nodeid(case).split("::")[-1], nodeid=nodeid(case), case=case, workload="w",
                        metrics=(MetricValue("output_tok_s", 100.0, "higher"),), outputs=outputs[case.method])
        Journal(folder / JOURNAL).append(nodeid(case), "w", result.to_json())
    return root


@pytest.mark.parametrize("margins, hint", [
    (False, "; rerun with --specdec-lossless-margins to see whether ar-tp1's choice at token 2 was a near-tie"),
    (None, "; rerun with --specdec-lossless-margins (if the shards did not ask for margins) to see whether "
           "ar-tp1's choice at token 2 was a near-tie"),
    (True, None)])
def test_a_divergence_across_shards_names_the_margins_switch_as_a_single_run_does(tmp_path, margins, hint):
    """A single run whose server sent no margins names the switch that would tell a near-tie; the
    merge's comparison across shards did not, as it could not tell whether the shards asked. Where
    they asked (the server sent none all the same) a rerun with it tells nothing, so none is named;
    shards older than that record still merge, the hint saying on what it holds."""
    rc, text = merge(lossy_shards(tmp_path, margins))
    assert rc == 1, text
    outcome, figures, reason = merged_rows(tmp_path)["dflash-tp1"]
    assert (outcome, figures) == ("failed", True)
    assert reason.startswith("dflash-tp1 is not lossless: prompt 1 differs from ar-tp1 at token 2")
    if hint is None:
        assert "--specdec-lossless-margins" not in text + reason
    else:
        assert hint in reason and hint in text


def test_a_divergence_within_one_shard_is_that_shards_verdict_not_one_across_shards(tmp_path):
    """Shard 1 measured ar-tp1 and dflash-tp1 and failed dflash's test on its divergence; shard 2
    none of them. The merge compares only pairs no shard compared: it keeps shard 1's verdict and
    says nothing was found "across shards", which would report the one failure twice."""
    from pytest_specdec.journal import FAILED_CHECKS
    from pytest_specdec.lossless import Outputs

    outputs = {"ar": Outputs(((1, 2, 3),), ("abc",)), "dflash": Outputs(((1, 9, 3),), ("a?c",))}
    why = "dflash-tp1 is not lossless: prompt 1 differs from ar-tp1 at token 2"
    for index in (1, 2):
        folder = tmp_path / f"shard-{index}"
        tests = tuple(Outcome(nodeid(case), "failed" if case.method == "dflash" else "passed",
                              why if case.method == "dflash" else None, case.param_id)
                      for case in CASES) if index == 1 else ()
        manifest = ShardManifest(
            plugin_version=__version__, shard=Shard(index, 2), configurations=CASES,
            assignment=(1, 1), matrix_digest="d", balanced_by="", hardware_key="cpu",
            hardware="no GPU", backend="embedded", lossless="exact", finished="now", exitstatus=int(index == 1),
            tests=tests, durations={case.param_id: 1.0 for case in CASES} if index == 1 else {})
        folder.mkdir()
        (folder / MANIFEST).write_text(json.dumps({"format": "pytest-specdec-shard", "version": 1,
                                                   **manifest.to_json()}))
        journal = Journal(folder / JOURNAL)
        for case in CASES if index == 1 else ():
            result = Result(test_id=nodeid(case).split("::")[-1], nodeid=nodeid(case), case=case, workload="w",
                            metrics=(MetricValue("output_tok_s", 100.0, "higher"),), outputs=outputs[case.method])
            journal.append(nodeid(case), "w", result.to_json(),
                           status=FAILED_CHECKS if case.method == "dflash" else "done")
    rc, text = merge(tmp_path)
    assert rc == 1, text
    assert merged_rows(tmp_path)["dflash-tp1"] == ("failed", True, why)
    assert "across shards" not in text


def test_a_shard_manifest_keeps_whether_margins_were_asked_and_reads_an_older_one_as_unknown():
    written = ShardManifest(
        plugin_version=__version__, shard=Shard(1, 2), configurations=CASES, assignment=(1, 2),
        matrix_digest="d", balanced_by="", hardware_key="cpu", hardware="", backend="sglang",
        lossless_margins=False, margins_switch="--specdec-lossless-margins").to_json()
    assert written["lossless"] == {"reference": "ar", "mode": "off", "margins": False,
                                   "margins_switch": "--specdec-lossless-margins"}
    read = ShardManifest.from_json(written)
    assert (read.lossless_margins, read.margins_switch) == (False, "--specdec-lossless-margins")
    written["lossless"] = {"reference": "ar", "mode": "exact"}  # as a shard older than the record wrote it
    assert ShardManifest.from_json(written).lossless_margins is None


def test_an_interrupted_merge_says_so_in_one_line(shards, monkeypatch, capsys):
    """Ctrl-C during a merge (its plots, a slow shared file system) printed a traceback of
    wherever it happened to be."""
    from pytest_specdec import __main__ as cli
    from pytest_specdec import merge as merge_mod

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(merge_mod, "merge", interrupted)
    out = shards / "merged"
    try:
        code = cli.main(["merge", "--out", str(out), str(shards / "shard-1"), str(shards / "shard-2")])
    except KeyboardInterrupt:
        pytest.fail("the interrupt escaped the merge as a traceback")
    assert code == 130
    assert capsys.readouterr().err == (f"python -m pytest_specdec merge: interrupted; --out {out} may hold "
                                       f"an incomplete merge: run the merge again\n")


#: A merge whose baseline save a signal reaches mid-write: the first os.replace of a file of the
#: baseline folder signals the merge itself, as a CI runner's cancel would, and waits for it.
SIGNALLED_MERGE = """
import os, signal, sys, time
from pytest_specdec import __main__ as cli
number = getattr(signal, sys.argv[1])
replace = os.replace
def signalled(src, dst, *args, **kwargs):
    if os.path.basename(dst) == "cpu.json":
        os.kill(os.getpid(), number)
        time.sleep(30)
    return replace(src, dst, *args, **kwargs)
os.replace = signalled
code = cli.main(sys.argv[2:])
print("handler restored:", signal.getsignal(number) is signal.SIG_DFL)
sys.exit(code)
"""


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_a_sigterm_or_sighup_ends_a_merge_as_ctrl_c_does(shards, name):
    """A CI runner's cancel (SIGTERM) or a hangup killed a merge without a word, mid-save, its
    baseline file's temporary copy left in the baseline folder. It now ends the merge as Ctrl-C
    does: one line naming the signal and what the folders hold, nothing left half-written, exit
    status 128 + the signal's number."""
    import signal

    folder = shards / "baselines"
    result = subprocess.run([sys.executable, "-c", SIGNALLED_MERGE, name, "merge", "--out", str(shards / "merged"),
                             "--no-plots", "--save-baseline", "--baseline-dir", str(folder),
                             str(shards / "shard-1"), str(shards / "shard-2")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 128 + getattr(signal, name), (result.returncode, result.stderr)
    assert result.stderr.startswith(f"python -m pytest_specdec merge: interrupted by {name}; --out "), result.stderr
    assert result.stderr.endswith("counts no figure twice): run the merge again\n")
    assert "handler restored: True" in result.stdout
    assert sorted(p.name for p in folder.iterdir()) == [".cpu.json.lock"]  # no temporary copy, no half file


def test_an_interrupted_saving_merge_says_what_the_baseline_folder_holds_and_merging_again_pools_nothing_twice(
        tmp_path, monkeypatch, capsys):
    """Ctrl-C during merge --save-baseline spoke of --out alone, not of the baseline folder it
    was merging into. Interrupted between the baseline file and durations.json, the merge says
    what each file holds; merged again, the baseline file is what one uninterrupted merge
    writes: the samples saved before the interrupt are not pooled a second time."""
    from pytest_specdec import __main__ as cli
    from pytest_specdec import durations

    shards = write_shards(tmp_path, MetricValue("output_tok_s", 100.0, "higher", spread=1.0, samples=3,
                                                distribution=(99.0, 100.0, 101.0)))
    args = [str(shards / "shard-1"), str(shards / "shard-2"), "--no-plots", "--save-baseline"]
    once, twice = shards / "once", shards / "twice"
    assert cli.main(["merge", "--out", str(once / "out"), "--baseline-dir", str(once), *args]) == 0
    save = durations.save

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(durations, "save", interrupted)
    capsys.readouterr()
    assert cli.main(["merge", "--out", str(twice / "out"), "--baseline-dir", str(twice), *args]) == 130
    assert capsys.readouterr().err == (
        f"python -m pytest_specdec merge: interrupted; --out {twice / 'out'} may hold an incomplete merge, and each "
        f"baseline file and durations.json of --baseline-dir {twice} either holds this merge's figures or "
        f"is as it was, never half-written (a merge again with --save-baseline saves what is missing and "
        f"counts no figure twice): run the merge again\n")
    assert (twice / "cpu.json").exists() and not (twice / "durations.json").exists()
    monkeypatch.setattr(durations, "save", save)
    assert cli.main(["merge", "--out", str(twice / "out"), "--baseline-dir", str(twice), *args]) == 0

    def entries(folder: Path) -> dict:
        saved = json.loads((folder / "cpu.json").read_text())["entries"]
        return {test_id: {name: {k: v for k, v in entry.items() if k != "date"} for name, entry in metrics.items()}
                for test_id, metrics in saved.items()}

    assert entries(twice) == entries(once)
    assert (twice / "durations.json").read_text() == (once / "durations.json").read_text()


def test_a_merge_killed_while_writing_junit_leaves_the_earlier_junit_whole(shards, monkeypatch):
    """The merge wrote junit.xml in place where the rest of its report is staged and renamed, so
    a kill midway left half a file; now the earlier junit.xml stays until the new one is whole."""
    import os

    from pytest_specdec import __main__ as cli

    out = shards / "merged"
    out.mkdir()
    (out / "junit.xml").write_text("<testsuites/>\n")

    def killed(fd):  # the new file's bytes are written, its rename has not happened
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", killed)
    code = cli.main(["merge", "--no-plots", "--out", str(out), str(shards / "shard-1"), str(shards / "shard-2")])
    assert code == 130
    assert (out / "junit.xml").read_text() == "<testsuites/>\n"
    assert not list(out.glob(".junit.xml.*")), list(out.glob(".*"))


def merged_set(folder: Path) -> dict[str, str]:
    """{path relative to `folder`: text} of every file in it, hidden ones too."""
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def _interrupt_on_call(calls: int):
    """A stand-in that raises KeyboardInterrupt on its `calls`-th call and passes the others to `real`."""
    def wrap(real):
        count = [0]

        def step(*args, **kwargs):
            count[0] += 1
            if count[0] == calls:
                raise KeyboardInterrupt
            return real(*args, **kwargs)
        return step
    return wrap


@pytest.mark.parametrize("where, calls", [
    ("pytest_specdec.report.results_document", 1),  # the report is being written
    ("pytest_specdec.junit.render", 1),  # the report written, junit.xml being written
    ("pytest_specdec.durations._document", 1),  # report and junit.xml written, durations.json being written
    ("pathlib.Path.unlink", 2),  # the earlier merge's files being removed
    ("os.replace", 3),  # this merge's files being moved in
])
def test_an_interrupted_merge_leaves_out_with_the_files_of_one_merge(shards, monkeypatch, where, calls):
    """The merge wrote its report, then junit.xml, then durations.json into --out: interrupted
    between them, it left a new report beside the earlier merge's junit.xml and durations.json.
    Now every output is staged and the set moved in together: --out holds files of one merge."""
    import importlib
    import io

    from pytest_specdec import __main__ as cli

    def main(argv: list[str]) -> int:
        try:
            return cli.merge_command(cli._parser().parse_args(argv), out=io.StringIO())
        except KeyboardInterrupt:
            return 130

    out = shards / "merged"
    assert main(["merge", "--no-plots", "--out", str(out), str(shards / "shard-1"),
                     str(shards / "shard-2")]) == 0
    earlier = merged_set(out)
    assert {"junit.xml", "durations.json", "results.json", "report.md"} <= set(earlier)
    # the next merge, of shard 1 alone, differs in every file it writes
    assert main(["merge", "--no-plots", "--out", str(shards / "alone"), str(shards / "shard-1")]) == 1
    later = merged_set(shards / "alone")
    assert all(later[name] != earlier[name] for name in ("junit.xml", "durations.json", "results.json", "report.md"))

    module, _, name = where.rpartition(".")
    owner = Path if module == "pathlib.Path" else importlib.import_module(module)
    monkeypatch.setattr(owner, name, _interrupt_on_call(calls)(getattr(owner, name)))
    code = main(["merge", "--no-plots", "--out", str(out), str(shards / "shard-1")])
    monkeypatch.undo()
    assert code == 130
    found = merged_set(out)
    assert not any(part.startswith(".") for path in found for part in Path(path).parts), found
    one_merge = [files for files in (earlier, later)
                 if all(files.get(path) == text for path, text in found.items())]
    assert one_merge, f"--out holds files of two merges: {sorted(found)}"
    if where.startswith("pytest_specdec."):
        assert found == earlier  # interrupted before anything moved: the earlier set, whole


def set_hardware(shards: Path, keys: dict[int, str]) -> None:
    """Shard k's hardware key set to keys[k], as a host of that hardware writes it."""
    for k, key in keys.items():
        path = shards / f"shard-{k}" / MANIFEST
        manifest = json.loads(path.read_text())
        manifest["hardware"] = {"key": key, "description": f"{key} (one GPU)"}
        path.write_text(json.dumps(manifest))


def test_shards_of_different_hardware_are_refused_naming_each_shards_key(shards):
    """An H100 shard and an H200 shard merged into one table, rc 0, and --save-baseline saved
    half of the matrix into each key's file: only the report's metadata named both machines."""
    set_hardware(shards, {1: "nvidia-h100-sm_90-x1", 2: "nvidia-h200-sm_90-x1"})
    done = saving_merge(shards, shards / "baselines")
    assert done.returncode == 2, done.stdout + done.stderr
    assert (f"error: the shards ran on different hardware (shard 1/2 ({shards / 'shard-1'}) on "
            f"'nvidia-h100-sm_90-x1'; shard 2/2 ({shards / 'shard-2'}) on 'nvidia-h200-sm_90-x1'): "
            f"baselines are per hardware key, so one report (and --save-baseline) would mix the figures of "
            f"different machines; run each hardware's shards as a sharded run of its own") in done.stderr
    assert not (shards / "merged").exists() and not (shards / "baselines").exists()
    set_hardware(shards, {1: "nvidia-h200-sm_90-x1"})  # one key: merged as before
    done = saving_merge(shards, shards / "baselines")
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in (shards / "baselines").iterdir() if not p.name.startswith(".")) \
        == ["durations.json", "nvidia-h200-sm_90-x1.json"]


def test_a_figure_no_baseline_can_hold_stops_a_saving_merge_before_anything_is_saved(shards):
    """The file refused such a figure only as it was saved (when a merge could hold two hardware
    keys, the key saved before it kept this merge's figures, and merging again once fixed would
    pool them twice): every figure is checked before anything is written."""
    journal = shards / "shard-2" / JOURNAL
    assert journal.read_text().count('"spread": 0.0') == 1
    journal.write_text(journal.read_text().replace('"spread": 0.0', '"spread": NaN'))  # a hand edit
    where = shards / "baselines"
    done = saving_merge(shards, where)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "output_tok_s: spread is nan, which a baseline cannot hold" in done.stderr
    assert not (where / "cpu.json").exists() and not (shards / "merged").exists()


def test_a_baseline_file_linking_into_a_folder_that_cannot_be_made_stops_a_saving_merge(shards):
    """A save writes where the link points: the merge checked the link's folder only, and said of
    this link "cannot be read: Not a directory", naming neither the folder nor the fix. (A link
    into a read-only folder failed only after the report was written; root, which runs these
    tests, may write anywhere, so that case is not staged here.)"""
    where = shards / "baselines"
    where.mkdir()
    (shards / "a-file").write_text("")
    (where / "cpu.json").symlink_to(shards / "a-file" / "cpu.json")
    done = saving_merge(shards, where)
    assert done.returncode == 2, done.stdout + done.stderr
    assert (f"folder of the file {where / 'cpu.json'} links to {shards / 'a-file'} cannot be created: it is "
            f"a file, not a folder; choose another --baseline-dir") in done.stderr
    assert not (shards / "merged").exists()


@pytest.mark.parametrize("argv, said", [
    (["merg", "--out", "x", "a"], "no command 'merg': did you mean 'merge'?"),
    (["merge", "--save-basline", "--out", "x", "a"], "no option --save-basline: did you mean '--save-baseline'?"),
    # argparse reported the missing --out and never the misspelt one beside it
    (["merge", "--ot", "x", "a"], "no option --ot: did you mean '--out'?"),
    (["merge", "--lock-timout=5", "--out", "x", "a"], "no option --lock-timout: did you mean '--lock-timeout'?"),
    # a short one argparse called only `unrecognized arguments: -x`, under the command's parent
    (["merge", "-x", "--out", "x", "a"], "no option -x: use one of --help, --out, --save-baseline, --baseline-dir, "
                                         "--lock-timeout, --no-plots, --summary-rows"),
])
def test_a_misspelt_command_or_option_names_the_one_meant(argv, said, capsys):
    """argparse on 3.11 said only `invalid choice` or `unrecognized arguments`, where the
    plugin's own flags, families and keys name the likely one."""
    from pytest_specdec import __main__ as cli

    with pytest.raises(SystemExit) as exit:
        cli.main(argv)
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"error: {said}")


@pytest.mark.parametrize("flag", [["-c", "pytest.ini"], ["-cpytest.ini"], ["--rootdir=."], ["--config-file", "x"],
                                  ["-o", "specdec_summary_rows=3"]])
def test_pytests_settings_choosing_options_say_how_the_merge_finds_its_settings(flag, capsys):
    """`-c FILE`, as a run's passed-over-settings error advises, was `unrecognized arguments: -c`:
    the merge reads the project's settings as a run started in its folder (merge_settings.py)."""
    from pytest_specdec import __main__ as cli

    with pytest.raises(SystemExit) as exit:
        cli.main(["merge", "--out", "x", *flag, "a"])
    assert exit.value.code == 2
    name = flag[0].split("=")[0] if flag[0].startswith("--") else flag[0][:2]
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        f"error: no option {name}: the merge is no pytest run; it reads the project's settings as a run started "
        "in its folder does, so run it in the folder its runs were started in, or give --summary-rows")


@pytest.mark.parametrize("argv", [["merge", "--out", "x", "--summary-rows", "-1", "a"], ["merge", "-h"]])
def test_a_negative_number_or_minus_h_is_no_unknown_short_option(argv, capsys):
    from pytest_specdec import __main__ as cli

    with pytest.raises(SystemExit):
        cli.main(argv)
    assert "no option" not in capsys.readouterr().err


@pytest.mark.parametrize("argv, said", [
    (["merge", "--out", "a", "--out", "b", "s"], "--out is given twice on the command line, as 'a' and 'b', and "
                                                 "only the last would count; give it once"),
    (["merge", "--o=a", "--lock-timeout", "5", "--out", "b", "s", "--lock-t=6"],
     "--out is given twice on the command line, as 'a' and 'b', and only the last would count; give it once"),
    (["merge", "--out", "a", "--lock-timeout", "5", "s", "--lock-timeout=6"],
     "--lock-timeout is given twice on the command line, as '5' and '6', and only the last would count; give it once"),
])
def test_an_option_given_twice_with_different_values_is_refused(argv, said, capsys):
    """argparse kept the last: `--out a ... --out b` merged into b alone, without a word."""
    from pytest_specdec import __main__ as cli

    with pytest.raises(SystemExit) as exit:
        cli.main(argv)
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"error: {said}")


def test_an_option_repeated_with_one_value_still_parses():
    """The same value twice means one thing."""
    from pytest_specdec import __main__ as cli

    cli._misspelt(cli._parser(), ["merge", "--out", "x", "--out=x", "--no-plots", "--no-plots", "s"])


def test_an_abbreviated_option_and_a_dashed_shard_folder_after_double_dash_still_parse(tmp_path):
    """argparse takes an unambiguous prefix of an option, and `--` ends the options: the
    did-you-mean check refuses neither."""
    from pytest_specdec import __main__ as cli

    cli._misspelt(cli._parser(), ["merge", "--o", "x", "--no-pl", "--", "--odd-folder"])


def test_a_switch_named_like_a_valued_option_is_read_as_argparse_reads_it():
    """The repeated-option check resolved a name among the value-taking options alone: beside a
    switch `--lock` it read `--lock s1 s2 --lock --out o` as --lock-timeout given twice, and `--ou` as
    --out where argparse finds it ambiguous with a switch `--outline`."""
    import argparse

    from pytest_specdec import __main__ as cli

    parser = cli._parser()
    merge = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["merge"]
    merge.add_argument("--lock", action="store_true")
    merge.add_argument("--outline", action="store_true")
    argv = ["merge", "--lock", "s1", "s2", "--lock", "--out", "o"]
    cli._misspelt(parser, argv)
    assert parser.parse_args(argv).shard_dirs == ["s1", "s2"]
    cli._misspelt(parser, ["merge", "--ou", "a", "--ou", "b", "s"])  # argparse's ambiguity to report
    with pytest.raises(SystemExit):
        cli._misspelt(parser, ["merge", "--lock-t", "5", "--lock-timeout=6", "--out", "o", "s"])


@pytest.mark.parametrize("argv", [["merge", "--out", "a", "--out", "b", "--help"],
                                  ["merge", "--ot", "x", "-h", "s"],
                                  ["merge", "--out=a", "--out=b", "--he"]])
def test_help_wins_over_the_merges_own_checks(argv, capsys):
    """argparse prints the help whatever else the line holds: `--out a --out b --help` printed the
    repeated-option error instead, and a misspelt option beside `-h` the did-you-mean one."""
    from pytest_specdec import __main__ as cli

    with pytest.raises(SystemExit) as exit:
        cli.main(argv)
    assert exit.value.code == 0
    said = capsys.readouterr()
    assert said.out.startswith("usage: python -m pytest_specdec merge"), said
    assert not said.err


def test_a_shard_cut_short_says_by_what_and_how_to_finish_it(shards):
    """Shard 2 was interrupted (Ctrl-C, a CI job's SIGTERM) before its test: the merge said it
    'failed (pytest exit status 2)' and that it 'ran none of its tests (deselected?)'."""
    path = shards / "shard-2" / MANIFEST
    manifest = json.loads(path.read_text())
    manifest.update(tests=[], exitstatus=2, stopped_by="an interrupt", durations={})
    path.write_text(json.dumps(manifest))
    (shards / "shard-2" / JOURNAL).unlink()
    rc, text = merge(shards)
    assert rc == 1, text
    assert (f"specdec merge: FAILED: shard 2/2 ({shards / 'shard-2'}) was stopped by an interrupt (pytest exit "
            f"status 2); run it again with --specdec-shard=2/2 --specdec-report={shards / 'shard-2'} "
            f"--specdec-resume to measure the rest, and merge again") in text
    assert "dflash-tp1: error: no result: shard 2/2 was stopped by an interrupt before it ran it" in text
    assert "deselected?" not in text


def test_a_shard_that_crashed_mid_run_names_the_command_that_resumes_it(shards):
    """It said 'resume it (--specdec-resume)', which alone resumes an unsharded run's journal,
    not the shard's own folder."""
    path = shards / "shard-2" / MANIFEST
    manifest = json.loads(path.read_text())
    manifest.update(tests=[], exitstatus=None, finished=None, durations={})
    path.write_text(json.dumps(manifest))
    rc, text = merge(shards)
    assert rc == 1, text
    assert (f"specdec merge: FAILED: shard 2/2 ({shards / 'shard-2'}) did not finish (killed, or still running): "
            f"its outcomes and baseline comparisons are unknown; run it again with --specdec-shard=2/2 "
            f"--specdec-report={shards / 'shard-2'} --specdec-resume and merge again") in text


def test_shards_run_from_different_commits_are_warned_of(shards):
    """A push between a CI matrix's jobs: the merge said nothing of it."""
    for k, commit in ((1, "a" * 40), (2, "b" * 40 + "-dirty")):
        path = shards / f"shard-{k}" / MANIFEST
        manifest = json.loads(path.read_text())
        manifest["commit"] = commit
        path.write_text(json.dumps(manifest))
    rc, text = merge(shards)
    assert rc == 0, text
    assert ("specdec merge: warning: the shards ran from different commits (shard(s) 1/2: aaaaaaaaaaaa; "
            "shard(s) 2/2: bbbbbbbbbbbb-dirty); run every shard from one commit") in text


def _refused(err: int, text: str):
    """A stand-in for a writer that the OS refuses (a full disk, a read-only folder)."""
    def refuse(*args, **kwargs):
        raise OSError(err, text)
    return refuse


@pytest.mark.parametrize("where, err, text, fix", [
    ("pytest_specdec.report.results_document", 28, "No space left on device", "free space there, or choose another --out"),
    ("pytest_specdec.junit.render", 13, "Permission denied", "make it writable, or choose another --out"),
])
def test_a_merged_report_the_os_refuses_is_one_line_exit_2_and_the_earlier_report_stays(
        shards, monkeypatch, capsys, where, err, text, fix):
    """A full disk or a read-only --out during the merge's writes escaped as a traceback."""
    from pytest_specdec import __main__ as cli

    out = shards / "merged"
    args = ["merge", "--no-plots", "--out", str(out), str(shards / "shard-1"), str(shards / "shard-2")]
    assert cli.main(args) == 0
    before = merged_set(out)
    monkeypatch.setattr(where, _refused(err, text))
    capsys.readouterr()
    assert cli.main(args) == 2
    assert capsys.readouterr().err == (
        f"python -m pytest_specdec merge: error: merged report not written: {out}: {text}; {fix}; the shard "
        f"folders are only read: merge again once --out can be written\n")
    assert merged_set(out) == before


def test_a_baseline_file_the_os_refuses_is_one_line_exit_2_and_keeps_the_earlier_entries(shards, monkeypatch, capsys):
    """A full disk under --baseline-dir during merge --save-baseline escaped as a traceback."""
    from pytest_specdec import __main__ as cli
    from pytest_specdec import baselines as baselines_mod

    folder = shards / "baselines"
    args = ["merge", "--no-plots", "--out", str(shards / "merged"), str(shards / "shard-1"),
            str(shards / "shard-2"), "--save-baseline", "--baseline-dir", str(folder)]
    assert cli.main(args) == 0
    saved = (folder / "cpu.json").read_text()
    write = baselines_mod.replace_text

    def full(path, text, **how):  # the baseline folder's disk is full; --out's is another
        if Path(path).parent == folder:
            raise OSError(28, "No space left on device")
        write(path, text, **how)

    monkeypatch.setattr(baselines_mod, "replace_text", full)
    capsys.readouterr()
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m pytest_specdec merge: error: baseline not saved: {folder}: No space left "
                          f"on device; free space there, or choose another --baseline-dir; the merged report "
                          f"is written to --out {shards / 'merged'}, and each baseline file"), err
    assert err.endswith("merge again with --save-baseline once it can be written\n") and "Traceback" not in err
    assert (folder / "cpu.json").read_text() == saved


def test_a_github_step_summary_the_merge_cannot_append_to_is_a_warning(shards, monkeypatch, capsys):
    """The CI runner's variable pointing nowhere escaped the merge as a traceback; a run warns of it."""
    from pytest_specdec import __main__ as cli

    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(shards / "nowhere" / "summary.md"))
    assert cli.main(["merge", "--no-plots", "--out", str(shards / "merged"), str(shards / "shard-1"),
                     str(shards / "shard-2")]) == 0
    assert capsys.readouterr().err == (f"specdec merge: warning: GITHUB_STEP_SUMMARY not written: "
                                       f"{shards / 'nowhere' / 'summary.md'}: No such file or directory\n")


def test_a_baseline_file_broken_after_the_merge_checked_it_names_the_merges_save(shards, monkeypatch, capsys):
    """Broken between `check_targets` and the save (another save, a hand edit while the report was
    written), its error advised a run's --specdec-save-baseline, which does not save these figures."""
    from pytest_specdec import __main__ as cli
    from pytest_specdec import junit

    folder = shards / "baselines"
    write = junit.write

    def breaking(*args, **kwargs):  # the report is written after the check, before the save
        folder.mkdir(exist_ok=True)
        (folder / "cpu.json").write_text("{bad")
        return write(*args, **kwargs)

    monkeypatch.setattr(junit, "write", breaking)
    args = ["merge", "--no-plots", "--out", str(shards / "merged"), str(shards / "shard-1"),
            str(shards / "shard-2"), "--save-baseline", "--baseline-dir", str(folder)]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m pytest_specdec merge: error: baseline file {folder / 'cpu.json'} is not "
                          f"valid JSON (line 1, column 2: "), err
    assert err.endswith("save a new one with merge --save-baseline\n") and "--specdec-" not in err, err


def test_a_baseline_file_linking_to_itself_stops_the_merge_before_it_writes(shards):
    """Path.resolve's RuntimeError (before Python 3.13) escaped the merge's check as a traceback."""
    folder = shards / "baselines"
    folder.mkdir()
    (folder / "cpu.json").symlink_to("cpu.json")
    done = saving_merge(shards, folder)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (f"python -m pytest_specdec merge: error: baseline file {folder / 'cpu.json'} cannot be "
                           f"saved into: {folder / 'cpu.json'}: Too many levels of symbolic links; a symbolic link "
                           f"there leads back to itself: remove it, or choose another --baseline-dir\n")
    assert not (shards / "merged").exists()


def test_an_out_folder_linking_to_itself_is_one_line(shards):
    """Path.resolve's RuntimeError (before Python 3.13) escaped the merge as a traceback."""
    (shards / "merged").symlink_to("merged")
    rc, text = merge(shards)
    assert rc == 2
    assert text == (f"python -m pytest_specdec merge: error: report folder {shards / 'merged'} cannot be created: "
                    f"it is a symbolic link that cannot be followed (Too many levels of symbolic links); remove or "
                    f"repoint the link, or choose another --out\n")


@pytest.mark.parametrize("setup", [{"digest": "s", "parts": {"workloads": {"w": {}, "ü": {}}}}, None],
                         ids=["named-by-shard-json", "older-shard-named-by-its-journal"])
def test_a_failed_tests_other_parameters_are_not_taken_for_a_workload(shards, setup):
    """A test that failed before recording had for workload whatever of its id followed its
    configuration's: a test of no workload parametrized with `nan` read `nan`, one of workload `w`
    and its own `slow` read `w-slow`. Now only a configured workload counts, as in one run's summary:
    one its shard.json's setup names, or in a shard older than that, one its journal recorded."""
    from pytest_specdec.merge import merge as merged_shards

    path = shards / "shard-1" / MANIFEST
    manifest = json.loads(path.read_text())
    manifest["setup"] = setup
    manifest["tests"] += [Outcome(f"test_gen.py::{name}", "failed", "boom", config="ar-tp1").to_json()
                          for name in ("test_bare[ar-tp1-nan]", "test_generation[ar-tp1-w-slow]",
                                       "test_generation[ar-tp1-\\xfc]", "test_generation[ar-tp1-ü-fast]")]
    path.write_text(json.dumps(manifest))
    rows = merged_shards([shards / "shard-1", shards / "shard-2"]).rows
    assert {row.test_id: row.workload for row in rows if row.outcome == "failed"} == {
        "test_bare[ar-tp1-nan]": None, "test_generation[ar-tp1-w-slow]": "w",
        "test_generation[ar-tp1-\\xfc]": "ü" if setup else None,
        # a shard run with pytest's disable_test_id_escaping_... ini option: the id has the name as written
        "test_generation[ar-tp1-ü-fast]": "ü" if setup else None}


def _compared_with_a_baseline(root: Path) -> None:
    """Each shard's manifest says it compared with the project's baselines/cpu.json (a digest:
    the file was there), as a sharded run of a project with committed baselines writes it."""
    for index in (1, 2):
        path = root / f"shard-{index}" / MANIFEST
        obj = json.loads(path.read_text())
        obj["baseline"] = {"file": "baselines/cpu.json", "digest": "0123456789abcdef", "saves": False}
        path.write_text(json.dumps(obj))


def _default_saving_merge(root: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_specdec", "merge", "--no-plots", "--out",
                           str(root / "merged"), str(root / "shard-1"), str(root / "shard-2"),
                           "--save-baseline"], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_a_save_outside_the_project_is_refused(shards):
    """`merge --save-baseline` run from a folder other than the project root (a subfolder, a CI
    workspace) wrote a new baselines/cpu.json there, said `saved into baselines/cpu.json`, and left
    the project's file, the one the shards gated on, without the figures."""
    _compared_with_a_baseline(shards)
    elsewhere = shards / "elsewhere"
    elsewhere.mkdir()
    done = _default_saving_merge(shards, elsewhere)
    assert done.returncode == 2, done.stdout + done.stderr
    assert ("error: --save-baseline: no baselines/cpu.json here, but shard(s) 1/2, 2/2 compared their "
            "figures with baselines/cpu.json of their project") in done.stderr, done.stderr
    assert "run the merge in the project root" in done.stderr
    assert not (elsewhere / "baselines").exists() and not (shards / "merged").exists()
    project = shards / "project"  # in the project, where the file is: saved
    (project / "baselines").mkdir(parents=True)
    baselines.save_baselines(project / "baselines" / "cpu.json", "cpu", {})
    done = _default_saving_merge(shards, project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "saved into baselines/cpu.json" in done.stdout
    # a --baseline-dir given is taken as meant: a new file there
    done = saving_merge(shards, elsewhere / "fresh")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (elsewhere / "fresh" / "cpu.json").is_file()


def test_a_first_save_outside_any_baseline_is_kept(shards):
    """Shards that found no baseline file (a first run) save into the default folder, new there."""
    elsewhere = shards / "elsewhere"
    elsewhere.mkdir()
    done = _default_saving_merge(shards, elsewhere)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (elsewhere / "baselines" / "cpu.json").is_file()
