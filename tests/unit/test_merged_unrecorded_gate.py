"""A figure a shard's gate names but no test of any shard recorded: one run's summary names it
(test_unrecorded_gate.py), and the merge of its shards said nothing, since no shard alone can
know that another did not record it. A complete merge says it, naming the shards that claimed it
where their gates differ; a merge a left-out test may have been missing from does not.

The tests record figures by hand (`specdec_record.metric`), so no server starts; the project has
two configurations, one per shard.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

PROJECT = """
[tool.specdec]
backend = "embedded"

[tool.specdec.matrix.cpu]
methods = ["ar", "dflash"]
tp = [1]
"""

TESTS = """
import os
import pytest

@pytest.mark.parametrize("case", ["alpha", "beta"])
def test_figures(specdec_spec, specdec_record, case):
    specdec_record.metric("output_tok_s", 100.0)
    assert not (os.environ.get("FAIL_BETA") and case == "beta")  # before the figures after it
"""

GATE = ("--specdec-compare-fail", "output_tok_s:5%,e2e_ms:5%")


def _shard(pytester: pytest.Pytester, k: int, *args: str) -> pytest.RunResult:
    # no plots: the merge reads results.json and shard.json only (and draws none either); in-process:
    # no server starts and no module is patched, so a fresh interpreter would prove nothing more
    return pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", f"--specdec-shard={k}/2",
                              f"--specdec-report=shard-{k}", "--specdec-no-plots", *args)


def _merge(pytester: pytest.Pytester) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "pytest_specdec", "merge", "--no-plots", "--out", "merged",
                           "shard-1", "shard-2"], cwd=pytester.path, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stdout + done.stderr
    return done


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyprojecttoml(PROJECT)
    pytester.makepyfile(test_figures=TESTS)
    return pytester


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_complete_merge_names_a_figure_no_shard_recorded(project, workers):
    for k in (1, 2):
        _shard(project, k, *GATE, *workers).assert_outcomes(passed=2)
    done = _merge(project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert ("specdec merge: gate: 1 figure(s) the shards' gates name were recorded by no test of any "
            "shard, so nothing gated them: e2e_ms +5% (command line); record each with "
            "specdec_record.metric(NAME, value) in the test meant to measure it, or drop it from "
            "--specdec-compare-fail") in done.stdout, done.stdout


def test_shards_under_different_gates_name_the_shards_that_claimed_it(project):
    _shard(project, 1, *GATE).assert_outcomes(passed=2)
    _shard(project, 2, "--specdec-compare-fail", "output_tok_s:5%").assert_outcomes(passed=2)
    done = _merge(project)
    assert "nothing gated them: e2e_ms +5% (command line) in shard(s) 1/2; record each" in done.stdout, done.stdout


def test_shards_under_different_gates_fail_the_merge_naming_the_figures(project):
    """Shard 2 ran with no gate at all (a CI job's command without the tolerance): it passed on
    figures nothing gated, and the merge passed as if the whole run had been gated."""
    _shard(project, 1, "--specdec-compare-fail", "output_tok_s:5%").assert_outcomes(passed=2)
    _shard(project, 2, "--specdec-compare-fail", "*:off").assert_outcomes(passed=2)
    done = _merge(project)
    assert done.returncode == 1, done.stdout + done.stderr
    assert ("specdec merge: FAILED: the shards ran under different gates (output_tok_s -5% in shard(s) 1/2, "
            "not gated in shard(s) 2/2): each row's verdict is its own shard's; run every shard with the same "
            "tolerances (--specdec-compare-fail, ini specdec_compare_fail or [tool.specdec.tolerances]) and "
            "merge again") in done.stdout, done.stdout


def test_one_gate_set_in_different_layers_is_one_gate(project):
    _shard(project, 1, "--specdec-compare-fail", "output_tok_s:5%").assert_outcomes(passed=2)
    _shard(project, 2, "-o", "specdec_compare_fail=output_tok_s:5%").assert_outcomes(passed=2)
    done = _merge(project)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("narrowed", [["-k", "alpha"], []], ids=["k", "failed"])
def test_a_merge_a_left_out_test_may_be_missing_from_does_not_say_it(project, narrowed, monkeypatch):
    """Shard 2 left beta out (-k), or beta failed after its first figure: beta may be the test
    that records e2e_ms."""
    _shard(project, 1, *GATE).assert_outcomes(passed=2)
    if not narrowed:
        monkeypatch.setenv("FAIL_BETA", "1")
    _shard(project, 2, *GATE, *narrowed).assert_outcomes(passed=1, **({"deselected": 3} if narrowed else {"failed": 1}))
    done = _merge(project)
    assert "recorded by no test" not in done.stdout, done.stdout


def test_a_missing_or_unfinished_shard_does_not_say_it(project):
    _shard(project, 1, *GATE).assert_outcomes(passed=2)
    done = subprocess.run([sys.executable, "-m", "pytest_specdec", "merge", "--no-plots", "--out", "merged",
                           "shard-1"], cwd=project.path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "missing shard(s) 2/2" in done.stdout, done.stdout + done.stderr
    assert "recorded by no test" not in done.stdout, done.stdout


def test_a_recorded_figure_is_not_said(project):
    for k in (1, 2):
        _shard(project, k, "--specdec-compare-fail", "output_tok_s:5%").assert_outcomes(passed=2)
    done = _merge(project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "recorded by no test" not in done.stdout, done.stdout


def test_shards_compared_with_different_baseline_files_are_warned_of(project):
    """Shard 1 started with no baseline file, shard 2 after a run saved one: their verdicts are
    against different baselines, and the merge said nothing of it."""
    _shard(project, 1).assert_outcomes(passed=2)
    project.runpytest("-p", "no:cacheprovider", "--specdec-save-baseline").assert_outcomes(passed=4)
    (project.path / "baselines" / "durations.json").unlink()  # the partition stays as shard 1's
    _shard(project, 2).assert_outcomes(passed=2)
    done = _merge(project)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if "warning:" in line]
    assert len(lines) == 1, done.stdout
    assert lines[0].startswith("specdec merge: warning: the shards of cpu compared with different baseline "
                               "files baselines/cpu.json (shard(s) 1/2: none there; shard(s) 2/2: digest ")
    assert lines[0].endswith("): their verdicts are against different baselines; run every shard from one "
                             "commit of the baseline folder")
    # one file, or shards that save into it as they go: nothing to say
    for k in (1, 2):
        _shard(project, k).assert_outcomes(passed=2)
    assert "warning:" not in _merge(project).stdout


def test_a_shard_that_left_its_tests_out_is_named_with_the_option(project):
    """Shard 2 ran with a -k that matched none of its tests: the merge guessed '(deselected?)'."""
    _shard(project, 1).assert_outcomes(passed=2)
    _shard(project, 2, "-k", "gamma")
    done = _merge(project)
    assert done.returncode == 1, done.stdout + done.stderr
    assert ("not measured: dflash-tp1: error: no result: shard 2/2 left its tests out (-k 'gamma'); run that "
            "shard again without it (--specdec-resume keeps what it measured) and merge again") in done.stdout
    assert ("specdec merge: FAILED: shard 2/2 (shard-2) ran no test (pytest exit status 5: -k 'gamma' left "
            "them all out); run that shard again selecting its tests and merge again") in done.stdout


def test_a_shard_that_reported_nothing_does_not_call_its_own_manifest_an_earlier_runs(project):
    """Its end line said '(what is there is an earlier run's)' of a fresh shard folder holding only
    the shard.json this run wrote as it started."""
    result = _shard(project, 2, "-k", "gamma")
    assert f"specdec: no report written to {project.path / 'shard-2'}: no test recorded figures or failed" \
        in result.stdout.str()
    assert "earlier run" not in result.stdout.str()
    (project.path / "shard-2" / "results.json").write_text("{}")  # an earlier run's report: said
    assert "(what is there is an earlier run's)" in _shard(project, 2, "-k", "gamma").stdout.str()


def test_a_shard_that_reported_nothing_does_not_call_a_killed_writes_leftover_an_earlier_runs(project):
    """A shard killed while it rewrote shard.json left the hidden temporary copy beside it; the
    next run of that shard that reported nothing said '(what is there is an earlier run's)' of
    it, as of a report a reader could take for its own."""
    _shard(project, 2, "-k", "gamma")
    (project.path / "shard-2" / ".shard.json.k1ll3d.tmp").write_text('{"format": "pytest-specdec-sh')
    result = _shard(project, 2, "-k", "gamma")
    assert f"specdec: no report written to {project.path / 'shard-2'}: no test recorded figures or failed" \
        in result.stdout.str()
    assert "earlier run" not in result.stdout.str()
