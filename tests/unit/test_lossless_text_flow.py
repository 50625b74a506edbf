"""prefix:N over outputs without token ids, end to end on the SGLang stand-in: a server that
serves /v1/tokenize counts each text's first N tokens while it is up, one that does not leaves
them uncounted, and the run's summary (also a resumed run's, from the journal) and a merge of
shards name the results whose check compared only N characters."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from test_sglang_backend import GENERATION_TEST, run, sglang_project  # noqa: E402,F401

BLIND = ("*lossless: compared as text, which could not see some characters: {names} (a server sent no token "
         "ids, and texts that match hold U+FFFD, *); a server that sends output_ids, as SGLang's /generate "
         "does, compares the tokens")
UNCOUNTED = "*lossless: prefix:8 compared only the first 8 characters of some outputs, not 8 tokens: {names} (*"
MATRIX = 'methods = ["ar", "ddtree"]\ntp = [1]\nbudget = [8]'
TOKENIZE = pytest.mark.parametrize("tokenize", [False, True], ids=["no-tokenize", "tokenize"])


def text_only_server(monkeypatch, tokenize: bool) -> None:
    """The stand-in streams no output_ids; without `tokenize` it has no /v1/tokenize either."""
    monkeypatch.setenv("FAKE_SGLANG_NO_OUTPUT_IDS", "1")
    if not tokenize:
        monkeypatch.setenv("FAKE_SGLANG_NO_TOKENIZE", "1")


def says_uncounted(result, tokenize: bool, names: str) -> None:
    if tokenize:
        result.stdout.no_fnmatch_line("*compared only the first*")
    else:
        result.stdout.fnmatch_lines([UNCOUNTED.format(names=names)])


@TOKENIZE
def test_the_summary_names_results_compared_on_characters_also_when_resumed(
        pytester, sglang_project, monkeypatch, tokenize):
    """The resumed run compares the journaled outputs: its spans, journaled, still count."""
    text_only_server(monkeypatch, tokenize)
    sglang_project(MATRIX)
    result = run(pytester, "--specdec-lossless=prefix:8")
    result.assert_outcomes(passed=2)
    says_uncounted(result, tokenize, "hopper-ddtree-tp1-b8 [[]chat[]]")
    result.stdout.no_fnmatch_line("*could not see*")  # texts without U+FFFD: every character seen
    resumed = run(pytester, "--specdec-lossless=prefix:8", "--specdec-resume")
    resumed.assert_outcomes(skipped=2)  # both resumed from the journal: no server counts again
    says_uncounted(resumed, tokenize, "hopper-ddtree-tp1-b8 [[]chat[]]")


@TOKENIZE
def test_a_merge_names_comparisons_across_shards_on_characters(pytester, sglang_project, monkeypatch,
                                                               tokenize):
    """Each shard measured one of ar and ddtree, so only the merge compared them: it compared N
    characters under prefix:N and said nothing."""
    text_only_server(monkeypatch, tokenize)
    sglang_project(MATRIX)
    for k in (1, 2):
        shard = run(pytester, "--specdec-lossless=prefix:8", f"--specdec-shard={k}/2", f"--specdec-report=shard{k}")
        shard.assert_outcomes(passed=1)
        shard.stdout.no_fnmatch_line("*compared only the first*")  # no shard compared the two
    merged = subprocess.run([sys.executable, "-m", "pytest_specdec", "merge", "shard1", "shard2", "--out", "merged"],
                            cwd=pytester.path, capture_output=True, text=True)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    says_uncounted(pytest.RunResult(merged.returncode, merged.stdout.splitlines(), merged.stderr.splitlines(), 0),
                   tokenize, "test_generation[[]hopper-ddtree-tp1-b8-chat[]]")


def test_two_test_functions_of_one_configuration_and_workload_are_each_named(pytester, sglang_project,
                                                                             monkeypatch):
    """The summary keys results by (configuration, workload, test): two test functions measuring
    the same pair are two entries, each named by its test, neither hiding the other."""
    text_only_server(monkeypatch, tokenize=False)
    sglang_project(MATRIX)
    pytester.makepyfile(test_again=GENERATION_TEST.replace("test_generation", "test_again"))
    result = run(pytester, "--specdec-lossless=prefix:8", "-p", "xdist", "-n", "1")
    result.assert_outcomes(passed=4)
    line = next(line for line in result.stdout.lines if "compared only the first" in line)
    assert "test_generation[hopper-ddtree-tp1-b8-chat]" in line and "test_again[hopper-ddtree-tp1-b8-chat]" in line


@pytest.mark.parametrize("ids", [False, True], ids=["text-only", "output-ids"])
def test_a_lossy_pick_among_bytes_that_complete_no_character_is_said_unseen_in_text(
        pytester, sglang_project, monkeypatch, ids):
    """Every output token a byte that completes no character: each reads U+FFFD, whichever it
    was, so compared as text a lossy engine passed with no word. Now the run says the comparison
    could not see them; with token ids the same engine fails."""
    monkeypatch.setenv("FAKE_SGLANG_UNDECODABLE", "1")
    # every step lossy: at 0.3 a short run drew no lossy acceptance now and then, and passed
    monkeypatch.setenv("FAKE_SGLANG_FAULTS", json.dumps({"ddtree": ["--fault-lossy", "1"]}))
    if not ids:
        text_only_server(monkeypatch, tokenize=True)
    sglang_project(MATRIX)
    result = run(pytester, "--specdec-lossless=exact")
    if ids:
        result.assert_outcomes(passed=1, failed=1)
        result.stdout.fnmatch_lines(["*hopper-ddtree-tp1-b8 is not lossless: prompt * differs from hopper-ar-tp1*"])
        result.stdout.no_fnmatch_line("*could not see*")
    else:
        result.assert_outcomes(passed=2)
        result.stdout.fnmatch_lines([BLIND.format(names="hopper-ddtree-tp1-b8 [[]chat[]]")])


def test_a_merge_names_comparisons_across_shards_that_could_not_see_u_fffd(pytester, sglang_project, monkeypatch):
    """Each shard measured one of ar and ddtree, so only the merge compared their texts."""
    monkeypatch.setenv("FAKE_SGLANG_UNDECODABLE", "1")
    text_only_server(monkeypatch, tokenize=True)
    sglang_project(MATRIX)
    for k in (1, 2):
        shard = run(pytester, "--specdec-lossless=exact", f"--specdec-shard={k}/2", f"--specdec-report=shard{k}")
        shard.assert_outcomes(passed=1)
        shard.stdout.no_fnmatch_line("*could not see*")  # no shard compared the two
    merged = subprocess.run([sys.executable, "-m", "pytest_specdec", "merge", "shard1", "shard2", "--out", "merged"],
                            cwd=pytester.path, capture_output=True, text=True)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    pytest.RunResult(merged.returncode, merged.stdout.splitlines(), merged.stderr.splitlines(), 0).stdout.fnmatch_lines(
        [BLIND.format(names="test_generation[[]hopper-ddtree-tp1-b8-chat[]]")])
