"""Shards run one after another and merged, against one unsharded run: the embedded engine.

One small project (three configurations a 4-GPU host runs, three TP8 ones it cannot) is
measured once unsharded and once as 3 shards (shard 2 under xdist); the tests then merge those
shard folders, and copies of them made wrong on purpose.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from xml.etree import ElementTree as ET

import pytest

pytest.importorskip("torch")

from servers_support import started_environ  # noqa: E402

GENERATION_TEST = (Path(__file__).resolve().parents[1] / "bench" / "test_generation.py").read_text()

PROJECT = """
[tool.specdec]
backend = "embedded"
gpus = 4
startup_timeout = 60

[tool.specdec.matrix.cpu]
methods = ["ar", "dflash", "ddtree"]
tp = [1, 8]
budget = [8]

[[tool.specdec.workloads]]
name = "chat"
prompts = "chat"
num_prompts = 2
max_new_tokens = 8
"""

GATE = ("--specdec-compare-fail", "accept_length:1%")


def pytest_run(root: Path, *args: str) -> subprocess.CompletedProcess:
    # no plots in the reports: the tests read results.json, report.md and shard.json, and the merges
    # draw none either (--no-plots)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "--specdec-no-plots",
                           *args],
                          cwd=root, env=started_environ(), capture_output=True, text=True, timeout=300)


def merge(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_specdec", "merge", "--no-plots", *args],
                          cwd=root, capture_output=True, text=True, timeout=120)


def figures(report_dir: Path) -> dict[tuple[str, str], tuple[float | None, str]]:
    """(config, workload) -> (accept length, verdict) of every measured row of a results.json
    (ar has no accept length)."""
    rows = json.loads((report_dir / "results.json").read_text())["results"]
    return {(r["config"], r["workload"]): (r["metrics"].get("accept_length"), r["verdict"])
            for r in rows if r["metrics"]}


def assignment(root: Path) -> dict[str, int]:
    matrix = json.loads((root / "shard-1" / "shard.json").read_text())["matrix"]
    ids = [("-".join([c["method"], f"tp{c['tp']}"] + ([f"b{c['budget']}"] if c["budget"] else [])))
           for c in matrix["configurations"]]
    return dict(zip(ids, matrix["assignment"]))


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> SimpleNamespace:
    root = tmp_path_factory.mktemp("sharded")
    (root / "pyproject.toml").write_text(PROJECT)
    (root / "test_generation.py").write_text(GENERATION_TEST)
    done = [pytest_run(root, "--specdec-save-baseline"),  # the baseline both runs are gated on
            pytest_run(root, *GATE, "--specdec-report", "whole", "--junitxml", "whole.xml")]
    for k in (1, 2, 3):
        xdist = ("-n", "2", "--dist", "loadgroup") if k == 2 else ()
        done.append(pytest_run(root, *GATE, *xdist, f"--specdec-shard={k}/3",
                               "--specdec-report", f"shard-{k}"))
    for process in done:
        assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-2000:]
    merged = merge(root, "--out", "merged", "shard-1", "shard-2", "shard-3")
    return SimpleNamespace(root=root, runs=done, merged=merged)


def test_three_shards_merged_equal_one_unsharded_run(run):
    assert run.merged.returncode == 0, run.merged.stdout + run.merged.stderr
    whole, merged = figures(run.root / "whole"), figures(run.root / "merged")
    assert set(merged) == set(whole) == {("ar-tp1", "chat"), ("dflash-tp1", "chat"),
                                         ("ddtree-tp1-b8", "chat")}
    assert merged == whole  # greedy accept lengths are deterministic; the verdicts carried
    # the gate names accept_length only: ar-tp1, which has none, is compared but not gated
    assert {key: verdict for key, (_, verdict) in merged.items()} == {
        ("ar-tp1", "chat"): "not gated", ("dflash-tp1", "chat"): "ok", ("ddtree-tp1-b8", "chat"): "ok"}
    shard_runs = run.runs[2:]
    for k, process in enumerate(shard_runs, start=1):
        assert f"specdec: shard {k}/3: 2 of 6 configurations, balanced by the durations in" \
            in process.stdout  # the baseline run recorded them
    assert "2 workers" in shard_runs[1].stdout  # shard 2 ran under xdist
    junit = ET.parse(run.root / "merged" / "junit.xml").getroot().find("testsuite")
    assert (junit.get("tests"), junit.get("failures"), junit.get("skipped")) == ("6", "0", "3")


def test_the_merged_junit_names_each_test_as_the_unsharded_runs_junitxml_does(run):
    """The merge's junit.xml gave each test its configuration for class name (`ar-tp1`) where
    pytest's --junitxml of one unsharded run gives its module (`test_generation`), so a CI history
    saw other tests once the run was sharded."""
    def names(path: Path) -> list[tuple[str, str]]:
        return sorted((c.get("classname"), c.get("name")) for c in ET.parse(path).iter("testcase"))

    whole = names(run.root / "whole.xml")
    assert len(whole) == 6 and {classname for classname, _ in whole} == {"test_generation"}
    assert names(run.root / "merged" / "junit.xml") == whole


def test_a_tp8_configuration_on_a_4_gpu_shard_is_skipped_and_reported_as_not_measured(run):
    for config in ("ar-tp8", "dflash-tp8", "ddtree-tp8-b8"):
        assert f"specdec merge: not measured: {config}: skipped: needs 8 GPUs; found: " \
               f"4 simulated GPUs without an arch" in run.merged.stdout
    rows = json.loads((run.root / "merged" / "results.json").read_text())["results"]
    skipped = {r["config"]: r["reason"] for r in rows if r["outcome"] == "skipped"}
    assert sorted(skipped) == ["ar-tp8", "ddtree-tp8-b8", "dflash-tp8"]


def test_the_unsharded_report_says_why_a_configuration_was_not_measured_as_the_merged_does(run):
    """The merge reported the TP8 configurations as skipped, with the reason; the unsharded
    run's report (table, report.md, results.json) had no row for them, as if they were not in
    the matrix."""
    def skipped(report_dir: Path) -> dict:
        rows = json.loads((report_dir / "results.json").read_text())["results"]
        return {(r["config"], r["workload"], r["family"], r["method"], r["tp"]): r["reason"]
                for r in rows if r["outcome"] == "skipped"}

    whole = skipped(run.root / "whole")
    assert sorted(config for config, *_ in whole) == ["ar-tp8", "ddtree-tp8-b8", "dflash-tp8"]
    assert whole == skipped(run.root / "merged")
    assert "needs 8 GPUs" in (run.root / "whole" / "report.md").read_text()
    assert "ar-tp8         chat" in run.runs[1].stdout  # the terminal table has the row too

def test_the_merged_table_folds_its_plain_rows_as_a_runs_does(run, monkeypatch, capsys):
    """The merge printed every row where a run's table folds its plain passes past
    --specdec-summary-rows: `merge --summary-rows` folds them the same way (default 50), its fold
    line naming the merged report. (Every row here shows: each has a note against the baseline.)"""
    from pytest_specdec import __main__ as cli, report

    asked = []
    monkeypatch.setattr(report, "format_table", lambda rows, **how: asked.append(how) or "")
    monkeypatch.chdir(run.root)
    for rows in ((), ("--summary-rows", "4")):
        assert cli.main(["merge", "--no-plots", "--out", "folded", *rows, "shard-1", "shard-2", "shard-3"]) == 0
    every_row = f"every row is in {Path('folded') / 'report.md'} and {Path('folded') / 'results.json'}"
    assert asked == [{"limit": 50, "every_row": every_row}, {"limit": 4, "every_row": every_row}]
    with pytest.raises(SystemExit):
        cli.main(["merge", "--out", "folded", "--summary-rows", "-1", "shard-1"])
    assert "argument --summary-rows: '-1' must be 0 or more" in capsys.readouterr().err



@pytest.mark.parametrize("file, text", [
    ("pytest.ini", "[pytest]\nspecdec_summary_rows = 7\n"),
    ("pyproject.toml", "[tool.pytest.ini_options]\nspecdec_summary_rows = 7\n"),
    ("setup.cfg", "[tool:pytest]\nspecdec_summary_rows = 7\n"),
    ("tox.ini", "[pytest]\nspecdec_summary_rows = 7\n"),
    ("pyproject.toml", "[tool.specdec]\nsummary_rows = 7\n"),
    ("specdec.toml", "summary_rows = 7\n"),
])
def test_the_merge_folds_past_the_projects_summary_rows_as_its_runs_do(run, tmp_path, monkeypatch, file, text):
    """A project's specdec_summary_rows (or [tool.specdec] summary_rows) held for its runs, while
    the merge run in the project folded past its own default of 50; `--summary-rows` still wins."""
    from pytest_specdec import __main__ as cli, report

    (tmp_path / file).write_text(text)
    asked = []
    monkeypatch.setattr(report, "format_table", lambda rows, **how: asked.append(how["limit"]) or "")
    monkeypatch.chdir(tmp_path)
    shards = [str(run.root / f"shard-{k}") for k in (1, 2, 3)]
    for rows in ((), ("--summary-rows", "4"), ("--summary-rows", "50")):
        assert cli.main(["merge", "--no-plots", "--out", "folded", *rows, *shards]) == 0
    assert asked == [7, 4, 50]


@pytest.mark.parametrize("file, text, said", [
    ("pytest.ini", "[pytest]\nspecdec_summary_rows = many\n",
     "pytest.ini: ini specdec_summary_rows: 'many' is not a whole number; --specdec-summary-rows takes: "),
    ("pyproject.toml", "[tool.pytest.ini_options]\nspecdec_summary_rows = -3\n",
     "pyproject.toml: ini specdec_summary_rows: '-3' must be 0 or more; --specdec-summary-rows takes: "),
    ("pyproject.toml", "[tool.specdec]\nsummary_rows = -1\n",
     "pyproject.toml [tool.specdec] key 'summary_rows': -1 must be 0 or more; --specdec-summary-rows takes: "),
])
def test_a_malformed_project_summary_rows_stops_the_merge_as_it_stops_a_run(run, tmp_path, monkeypatch, capsys,
                                                                             file, text, said):
    """The merge's error is the run's, naming the file it is in, and nothing is written; a flag
    given does not hide it, as it does not in a run (every place that sets an option is checked)."""
    from pytest_specdec import __main__ as cli

    (tmp_path / file).write_text(text)
    monkeypatch.chdir(tmp_path)
    shards = [str(run.root / f"shard-{k}") for k in (1, 2, 3)]
    for rows in ((), ("--summary-rows", "4")):
        assert cli.main(["merge", "--no-plots", "--out", "folded", *rows, *shards]) == 2
        error = capsys.readouterr().err
        assert error.startswith(f"python -m pytest_specdec merge: error: {said}"), error
        assert len(error.splitlines()) == 1
    assert not (tmp_path / "folded").exists()
    ran = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--co", "-q"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 4 and said.removeprefix(f"{file}: ") in ran.stdout + ran.stderr, ran.stdout + ran.stderr


def test_a_missing_shard_says_which_configurations_have_no_result(run):
    result = merge(run.root, "--out", "partial", "shard-1", "shard-3")
    assert result.returncode == 1
    lacking = sorted(c for c, k in assignment(run.root).items() if k == 2)
    assert f"specdec merge: FAILED: missing shard(s) 2/3: 2 configuration(s) have no result: " \
           f"{', '.join(c for c in assignment(run.root) if c in lacking)}" in result.stdout
    report = (run.root / "partial" / "report.md").read_text()
    assert all("no result: shard 2/3 is missing from the merge" in report for _ in lacking)


def test_a_configuration_a_finished_shard_never_ran_fails_the_merge(run):
    """Shard 2 run again with -k leaving out its TP1 configuration: pytest passes, the merge
    does not, since that configuration has no result."""
    root = run.root
    shard = pytest_run(root, *GATE, "--specdec-shard=2/3", "-k", "tp8",
                       "--specdec-report", "shard-2-partial")
    assert shard.returncode == 0
    result = merge(root, "--out", "incomplete", "shard-1", "shard-2-partial", "shard-3")
    assert result.returncode == 1
    lacking = next(c for c, k in assignment(root).items() if k == 2 and "tp1" in c)
    assert f"not measured: {lacking}: error: no result: shard 2/3 left its tests out (-k 'tp8'); run that " \
        f"shard again without it" in result.stdout


def test_a_shard_given_twice_or_a_configuration_measured_twice_is_an_error(run):
    root = run.root
    shutil.copytree(root / "shard-2", root / "shard-2-again")
    result = merge(root, "--out", "dup", "shard-1", "shard-2", "shard-2-again", "shard-3")
    assert result.returncode == 2
    assert "error: shard 2/3 is given twice: shard-2 and shard-2-again" in result.stderr
    assert not (root / "dup").exists()  # checked before anything is written

    shutil.copytree(root / "shard-1", root / "shard-1-plus")
    with open(root / "shard-1-plus" / "journal.jsonl", "a") as journal:
        journal.write((root / "shard-2" / "journal.jsonl").read_text())
    result = merge(root, "--out", "dup", "shard-1-plus", "shard-2", "shard-3")
    assert result.returncode == 2
    assert "was measured by shard 1/3 (shard-1-plus) and by shard 2/3 (shard-2)" in result.stderr


def test_a_shard_of_another_matrix_or_version_is_an_error(run):
    root = run.root
    for name, edit, message in (
            ("other-version", lambda m: m.update(plugin_version="0.0.1"),
             "shard 3/3 (other-version) was measured with pytest-specdec 0.0.1"),
            ("other-matrix", lambda m: m["matrix"].update(digest="0" * 16),
             "shard 3/3 (other-matrix) divided another matrix than shard 1/3 (shard-1)"),
            # run with another workload: the merge once mixed both setups in one report, rc 0
            ("other-setup", lambda m: m["setup"]["parts"]["workloads"]["chat"].update(num_prompts=99)
             or m["setup"].update(digest="0" * 16),
             "shard 3/3 (other-setup) measured another setup than shard 1/3 (shard-1) (its workloads "
             "differ); a report of both would mix them")):
        shutil.copytree(root / "shard-3", root / name)
        manifest = json.loads((root / name / "shard.json").read_text())
        edit(manifest)
        (root / name / "shard.json").write_text(json.dumps(manifest))
        result = merge(root, "--out", "bad", "shard-1", "shard-2", name)
        assert result.returncode == 2 and message in result.stderr, result.stderr
    result = merge(root, "--out", "bad", "shard-1", "whole")  # a whole run's report, no shard.json
    assert result.returncode == 2
    assert "whole is not a shard folder: it has no shard.json" in result.stderr, result.stderr


def test_a_shard_whose_gate_failed_fails_the_merge(run):
    """Shard 3 again, against a baseline whose throughput is out of reach."""
    root = run.root
    shutil.copytree(root / "baselines", root / "strict")
    baseline = json.loads((root / "strict" / "cpu.json").read_text())
    for metrics in baseline["entries"].values():
        figure = metrics["output_tok_s"]  # the value, and the samples the gate decides on
        figure["value"] *= 100
        # all at that value: samples scaled x100 kept their scatter x100, and on a loaded machine
        # two requests' scatter made even -99 % too noisy to call
        figure["distribution"] = [figure["value"]] * len(figure["distribution"])
    (root / "strict" / "cpu.json").write_text(json.dumps(baseline))
    shard = pytest_run(root, "--specdec-compare-fail", "output_tok_s:5%", "--specdec-shard=3/3",
                       "--specdec-baseline-dir", "strict", "--specdec-report", "shard-3-regressed")
    assert shard.returncode == 1
    result = merge(root, "--out", "regressed", "shard-1", "shard-2", "shard-3-regressed")
    assert result.returncode == 1
    mine = [c for c, k in assignment(root).items() if k == 3 and "tp1" in c]
    assert f"FAILED: shard 3/3 (shard-3-regressed) failed (pytest exit status 1): " \
           f"{', '.join(mine)}" in result.stdout
    assert "FAILED: regression against cpu.json: output_tok_s" in result.stdout


def test_a_resumed_shard_merges_like_any_other_and_merge_saves_the_baseline(run):
    root = run.root
    shutil.copytree(root / "shard-1", root / "shard-1-resumed")
    resumed = pytest_run(root, *GATE, "--specdec-shard=1/3", "--specdec-resume",
                         "--specdec-report", "shard-1-resumed")
    assert resumed.returncode == 0 and "already measured" in resumed.stdout
    result = merge(root, "--out", "again", "--save-baseline", "--baseline-dir", "merged-baselines",
                   "shard-1-resumed", "shard-2", "shard-3")
    assert result.returncode == 0, result.stdout
    assert figures(root / "again") == figures(root / "whole")
    saved = json.loads((root / "merged-baselines" / "cpu.json").read_text())["entries"]
    original = json.loads((root / "baselines" / "cpu.json").read_text())["entries"]
    assert sorted(saved) == sorted(original)
    for test_id, metrics in saved.items():
        if "accept_length" in metrics:
            assert metrics["accept_length"]["value"] == \
                original[test_id]["accept_length"]["value"]
    durations = json.loads((root / "merged-baselines" / "durations.json").read_text())
    assert sorted(durations["configurations"]) == ["ar-tp1", "ddtree-tp1-b8", "dflash-tp1"]


def test_a_lossy_configuration_whose_reference_ran_in_another_shard_fails_the_merge(
        tmp_path):
    """ar in shard 1, dflash (accepting wrong drafts: --fault-lossy) in shard 2: neither shard
    sees the pair, so each passes; the merge compares them, as an unsharded run would have."""
    (tmp_path / "pyproject.toml").write_text(PROJECT.replace(
        'methods = ["ar", "dflash", "ddtree"]\ntp = [1, 8]\nbudget = [8]',
        'methods = ["ar", "dflash"]\ntp = [1]') + """
[tool.specdec.engine]
extra_args = ["--fault-lossy", "0.5"]
""")
    (tmp_path / "test_generation.py").write_text(GENERATION_TEST)
    for k in (1, 2):
        shard = pytest_run(tmp_path, f"--specdec-shard={k}/2", "--specdec-report", f"shard-{k}")
        assert shard.returncode == 0, shard.stdout[-3000:]
    result = merge(tmp_path, "--out", "merged", "--save-baseline", "--baseline-dir", "merged-baselines",
                   "shard-1", "shard-2")
    assert result.returncode == 1, result.stdout
    assert "FAILED: across shards: dflash-tp1 is not lossless: prompt " in result.stdout
    assert "differs from ar-tp1 at token" in result.stdout
    # the reference's shard says it asked for no margins, and that its engine names no switch for
    # them (bit-stable, as one run's message names none), so the merge names none either
    recorded = json.loads((tmp_path / "shard-1" / "shard.json").read_text())["lossless"]
    assert (recorded["margins"], recorded["margins_switch"]) == (False, None)
    assert "--specdec-lossless-margins" not in result.stdout
    # its figures are no reference: --save-baseline saved them as dflash's all the same
    saved = json.loads((tmp_path / "merged-baselines" / "cpu.json").read_text())["entries"]
    assert sorted(saved) == ["test_generation[ar-tp1-chat]"]
    # as an unsharded run says it, whose dflash test fails
    assert ("specdec merge: left out of the baseline 1 result(s) of failed tests, which are no reference "
            "(test_generation[dflash-tp1-chat])") in result.stdout


KNOWN_ISSUE = """
[tool.specdec.engine]
extra_args = EXTRA_ARGS

[[tool.specdec.known_issues]]
method = "ddtree"
budget = [8]
reason = "accepts wrong drafts: outputs differ from ar"
"""


def outcomes(report_dir: Path) -> dict[str, tuple[str, bool]]:
    """config -> (outcome, whether its row has figures) of a results.json."""
    rows = json.loads((report_dir / "results.json").read_text())["results"]
    return {r["config"]: (r["outcome"], bool(r["metrics"])) for r in rows}


def junit_outcomes(path: Path) -> dict[str, str]:
    """test name -> failure, skipped or passed, of a JUnit file."""
    found = {}
    for case in ET.parse(path).iter("testcase"):
        tags = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        found[case.get("name")] = tags[0] if tags else "passed"
    return found


@pytest.mark.parametrize("lossy", [True, False])
def test_a_known_issue_whose_reference_ran_in_another_shard_ends_as_in_one_run(tmp_path, lossy):
    """ar in one shard, ddtree (a known issue) in the other: its shard could not compare its
    outputs, so its test skipped. The merge failed a lossy one as `not lossless` (exit 1, no
    figures) where one run reads XFAIL, and left a fixed one skipped (exit 0) where one run
    fails it as XPASS(strict). Now both end as one unsharded run ends them."""
    (tmp_path / "pyproject.toml").write_text(PROJECT.replace(
        'methods = ["ar", "dflash", "ddtree"]\ntp = [1, 8]', 'methods = ["ar", "ddtree"]\ntp = [1]')
        .replace("max_new_tokens = 8", "max_new_tokens = 16")
        + KNOWN_ISSUE.replace("EXTRA_ARGS", '["--fault-lossy", "0.3"]' if lossy else "[]"))
    (tmp_path / "test_generation.py").write_text(GENERATION_TEST)
    # saved aside, so the shards run without a baseline as before
    whole = pytest_run(tmp_path, "--specdec-report", "whole", "--junitxml", "whole.xml", "--specdec-save-baseline",
                       "--specdec-baseline-dir", "whole-baselines")
    assert whole.returncode == (0 if lossy else 1), whole.stdout[-3000:]
    for k in (1, 2):
        shard = pytest_run(tmp_path, f"--specdec-shard={k}/2", "--specdec-report", f"shard-{k}")
        assert shard.returncode == 0, shard.stdout[-3000:]
    assert sorted(assignment(tmp_path).values()) == [1, 2]  # ar and ddtree in different shards
    summary = tmp_path / "step-summary.md"
    result = subprocess.run([sys.executable, "-m", "pytest_specdec", "merge", "--no-plots", "--out", "merged",
                             "--save-baseline", "--baseline-dir", "merged-baselines", "shard-1", "shard-2"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "GITHUB_STEP_SUMMARY": str(summary)})
    assert result.returncode == whole.returncode, result.stdout + result.stderr
    expected = "xfailed" if lossy else "failed"
    assert outcomes(tmp_path / "merged") == outcomes(tmp_path / "whole") == {
        "ar-tp1": ("passed", True), "ddtree-tp1-b8": (expected, True)}
    assert junit_outcomes(tmp_path / "merged" / "junit.xml") == junit_outcomes(tmp_path / "whole.xml") == {
        "test_generation[ar-tp1-chat]": "passed",
        "test_generation[ddtree-tp1-b8-chat]": "skipped" if lossy else "failure"}
    report, step = (tmp_path / "merged" / "report.md").read_text(), summary.read_text()
    if lossy:
        assert "is not lossless" not in result.stdout and "FAILED" not in result.stdout
        why = ("xfailed: known issue: accepts wrong drafts: outputs differ from ar: ddtree-tp1-b8 is not "
               "lossless: prompt ")
        assert why in report and why in step
        assert "(found by the merge, against ar-tp1 of shard " in report
        # no reference for a baseline: the merge leaves it out as the run does (it said `not lossless`)
        left_out = "1 result(s) of failed tests, which are no reference (test_generation[ddtree-tp1-b8-chat])"
        assert f"; left out {left_out}" in whole.stdout
        assert f"specdec merge: left out of the baseline {left_out}" in result.stdout
        saved = json.loads((tmp_path / "whole-baselines" / "cpu.json").read_text())["entries"]
        assert sorted(json.loads((tmp_path / "merged-baselines" / "cpu.json").read_text())["entries"]) \
            == sorted(saved) == ["test_generation[ar-tp1-chat]"]
    else:
        why = ("[XPASS(strict)] known issue: accepts wrong drafts: outputs differ from ar: its outputs "
               "match ar-tp1's (compared by the merge, against ar-tp1 of shard ")
        assert f"specdec merge: FAILED: across shards: test_generation[ddtree-tp1-b8-chat]: {why}" in result.stdout
        assert why in report and why in step


def test_merge_save_baseline_leaves_a_lossy_known_issue_out_as_one_run_says(tmp_path):
    """A lossy known issue (xfailed) is no reference: one run with --specdec-save-baseline leaves it
    out as a failed test's, the merge said `not lossless` (and named no failed test it left out).
    One shard here, which is also the one run that saves (a shard of one runs the whole matrix);
    across shards, test_a_known_issue_whose_reference_ran_in_another_shard_ends_as_in_one_run."""
    (tmp_path / "pyproject.toml").write_text(PROJECT.replace(
        'methods = ["ar", "dflash", "ddtree"]\ntp = [1, 8]', 'methods = ["ar", "ddtree"]\ntp = [1]')
        .replace("max_new_tokens = 8", "max_new_tokens = 16")
        + KNOWN_ISSUE.replace("EXTRA_ARGS", '["--fault-lossy", "0.3"]'))
    (tmp_path / "test_generation.py").write_text(GENERATION_TEST)
    whole = pytest_run(tmp_path, "--specdec-save-baseline", "--specdec-shard=1/1", "--specdec-report", "shard-1")
    assert whole.returncode == 0, whole.stdout[-3000:]
    left_out = "1 result(s) of failed tests, which are no reference (test_generation[ddtree-tp1-b8-chat])"
    assert f"; left out {left_out}" in whole.stdout
    saved = json.loads((tmp_path / "baselines" / "cpu.json").read_text())["entries"]
    result = merge(tmp_path, "--out", "merged", "--save-baseline", "--baseline-dir", "merged-baselines", "shard-1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"specdec merge: left out of the baseline {left_out}" in result.stdout
    assert "not lossless" not in result.stdout
    assert sorted(json.loads((tmp_path / "merged-baselines" / "cpu.json").read_text())["entries"]) \
        == sorted(saved) == ["test_generation[ar-tp1-chat]"]


#: Two recording tests of each configuration, so -k can run a configuration in part.
TWO_TESTS = """
def test_generation(specdec_spec, specdec_record):
    specdec_record.metric("output_tok_s", 100.0)


def test_other(specdec_spec, specdec_record):
    specdec_record.metric("output_tok_s", 100.0)
"""


def test_merge_save_baseline_names_the_configurations_a_narrowed_shard_ran_in_part(tmp_path):
    """A shard narrowed by -k leaves a configuration it ran in part out of its shard.json's
    durations, as a saving run does; the merge's --save-baseline then kept that configuration's
    entry without a word, where the run names it."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.specdec]\nbackend = "embedded"\n\n[tool.specdec.matrix.cpu]\nmethods = ["ar", "dflash"]\ntp = [1]\n')
    (tmp_path / "test_two.py").write_text(TWO_TESTS)
    for k, narrowing in ((1, ("-k", "generation")), (2, ())):
        shard = pytest_run(tmp_path, "-p", "no:randomly", f"--specdec-shard={k}/2",
                           "--specdec-report", f"shard-{k}", *narrowing)
        assert shard.returncode == 0, shard.stdout[-3000:]
    matrix = json.loads((tmp_path / "shard-1" / "shard.json").read_text())["matrix"]
    # shard 1 ran ar-tp1's test_generation alone
    assert [(c["method"], k) for c, k in zip(matrix["configurations"], matrix["assignment"])] \
        == [("ar", 1), ("dflash", 2)]
    result = merge(tmp_path, "--out", "merged", "--save-baseline", "shard-1", "shard-2")
    assert result.returncode == 0, result.stdout + result.stderr
    saved = json.loads((tmp_path / "baselines" / "durations.json").read_text())["configurations"]
    assert sorted(saved) == ["dflash-tp1"]
    assert "specdec merge: durations not saved for ar-tp1 (shard 1/2): its shard measured only some " \
           "of the tests of each (-k, -m, --deselect, --lf, -x, a resume)" in result.stdout


#: A host's NVML, faked: one GPU named by $FAKE_GPU (the shards below run on two kinds of host).
FAKE_NVML = """
import os

from pytest_specdec import hardware

hardware._detect_nvml = lambda: [hardware.GPU(0, os.environ["FAKE_GPU"], "sm_90", 81559, "GPU-0")]
"""


def test_shards_run_on_different_hardware_are_refused_by_the_merge(tmp_path):
    """Shard 1 on an H100 host and shard 2 on an H200 host (one matrix, one partition) merged into
    one table, rc 0, and --save-baseline saved each half of the matrix into its own key's file:
    only the report's metadata named both machines."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.specdec]\nbackend = "embedded"\n\n[tool.specdec.matrix.hopper]\nmethods = ["ar", "dflash"]\ntp = [1]\n')
    (tmp_path / "test_two.py").write_text(TWO_TESTS)
    (tmp_path / "conftest.py").write_text(FAKE_NVML)
    environ = {k: v for k, v in started_environ().items() if k != "CUDA_VISIBLE_DEVICES"}
    for k, gpu in ((1, "NVIDIA H100 80GB HBM3"), (2, "NVIDIA H200")):
        shard = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--specdec-shard={k}/2",
                                "--specdec-report", f"shard-{k}", "--specdec-no-plots"], cwd=tmp_path,
                               env={**environ, "FAKE_GPU": gpu}, capture_output=True, text=True, timeout=300)
        assert shard.returncode == 0, shard.stdout[-3000:]
    result = merge(tmp_path, "--out", "merged", "--save-baseline", "shard-1", "shard-2")
    assert result.returncode == 2, result.stdout + result.stderr
    assert ("error: the shards ran on different hardware (shard 1/2 (shard-1) on 'nvidia-h100-80gb-hbm3-sm_90-x1'; "
            "shard 2/2 (shard-2) on 'nvidia-h200-sm_90-x1'): baselines are per hardware key") in result.stderr
    assert not (tmp_path / "merged").exists() and not (tmp_path / "baselines").exists()
