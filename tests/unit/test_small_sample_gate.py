"""A gate decided from small samples: with one to three requests a workload, or against a baseline
entry of one save, a run goes red with nothing changed at 5-10 % and more, not the gate's 2.5 %
(docs/PERF.md), and only the README said so; a user learnt it from a red CI. The summary says it
in one line, naming the fewest samples and the fix, and a red or noisy figure decided from so few
requests says so in its reason; nothing is said of figures gated exactly or of samples enough.

The tests measure a workload by hand (`specdec_record.result`), so no server starts.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from pytest_specdec.baselines import BaselineEntry
from pytest_specdec.gate import Tolerance, compare_metric
from pytest_specdec.metrics import MetricValue
from pytest_specdec.result import Result

TESTS = """
import os
from pytest_specdec.metrics import RequestRecord, WorkloadResult, summarize


def test_workload(specdec_record):
    scale = float(os.environ.get("SCALE", "1"))
    records = tuple(RequestRecord(index=i, status=200, finish_reason="length", prompt_tokens=10,
                                  completion_tokens=8, ttft_ms=(5.0 + i) * scale, e2e_ms=(20.0 + i) * scale,
                                  chunks=8, whole_at_once=i >= int(os.environ.get("STREAMED", "99")))
                    for i in range(int(os.environ["REQUESTS"])))
    specdec_record.result(summarize(WorkloadResult("chat", "http://127.0.0.1:1", 1, records, wall_s=0.1)))


def test_exact(specdec_record):
    specdec_record.metric("my_fig", 1.0, "higher", deterministic=True)
"""

PROJECT = '[tool.specdec.metrics]\nmy_fig = "higher"\n'
GATE = ("--specdec-compare-fail", "ttft_ms:30%,my_fig:0")


def _saved(pytester: pytest.Pytester, monkeypatch, requests: int, saves: int) -> None:
    """A baseline of `saves` saves (each measured a little differently, so they pool)."""
    pytester.makepyprojecttoml(PROJECT)
    pytester.makepyfile(test_workload=TESTS)
    monkeypatch.setenv("REQUESTS", str(requests))
    for k in range(saves):
        monkeypatch.setenv("SCALE", str(1 + k / 100))
        pytester.runpytest("-p", "no:cacheprovider", "--specdec-save-baseline").assert_outcomes(passed=2)
    monkeypatch.setenv("SCALE", "1.005")


def _run(pytester: pytest.Pytester, *args: str) -> str:
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", *args)
    return result.stdout.str()


def test_two_requests_a_workload_are_said_with_the_fewest_and_the_fix(pytester, monkeypatch):
    _saved(pytester, monkeypatch, requests=2, saves=2)
    out = _run(pytester, *GATE)
    assert ("specdec: gate: 1 figure(s) decided from small samples (1 from as few as 2 samples) go red "
            "with nothing changed more often than the gate's 2.5 % (5-10 % and more: the README's gate "
            "section); raise num_prompts to 4 or more (workload chat)") in out
    assert "single save" not in out  # the baseline pools two


def test_tpot_sampled_from_few_of_many_requests_counts_its_samples_not_more_prompts(pytester, monkeypatch):
    """8 requests, 6 of them whole at once: TPOT is decided from 2 samples, and its line said "as
    few as 2 requests" and advised more prompts, which would not have given it more samples."""
    monkeypatch.setenv("STREAMED", "2")
    _saved(pytester, monkeypatch, requests=8, saves=2)
    out = _run(pytester, "--specdec-compare-fail", "tpot_ms:15%,ttft_ms:30%")
    assert ("specdec: gate: 1 figure(s) decided from small samples (1 from as few as 2 samples) go red "
            "with nothing changed more often than the gate's 2.5 % (5-10 % and more: the README's gate "
            "section); see why tpot_ms of workload chat (2 samples of 8 requests) had samples from so few "
            "of the requests") in out, out
    assert "num_prompts" not in out


def test_four_requests_against_a_pooled_baseline_are_not_said(pytester, monkeypatch):
    _saved(pytester, monkeypatch, requests=4, saves=2)
    assert "small samples" not in _run(pytester, *GATE)


def test_a_baseline_of_one_save_is_said_with_the_option_that_saves_it(pytester, monkeypatch):
    _saved(pytester, monkeypatch, requests=4, saves=1)
    out = _run(pytester, *GATE)
    assert ("specdec: gate: 1 figure(s) decided from small samples (1 against a baseline entry of a single "
            "save) go red with nothing changed more often than the gate's 2.5 % (5-10 % and more: the "
            "README's gate section); save the baseline again with --specdec-save-baseline to pool up to 3 "
            "runs") in out


def test_a_run_that_saves_says_what_its_save_pooled_not_to_save_again(pytester, monkeypatch):
    """Its save pools a second run into the entry of one save: "save the baseline again" would
    read as if this run had not saved it."""
    _saved(pytester, monkeypatch, requests=4, saves=1)
    out = _run(pytester, *GATE, "--specdec-save-baseline")
    assert ("(1 against a baseline entry of a single save) go red with nothing changed more often than "
            "the gate's 2.5 % (5-10 % and more: the README's gate section); the save this run made pools "
            "2 of 3 runs into its entry") in out, out
    assert "save the baseline again" not in out


def test_a_merge_that_saves_says_what_its_save_pooled(pytester, monkeypatch):
    import subprocess
    import sys

    _saved(pytester, monkeypatch, requests=4, saves=1)
    pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", *GATE, "--specdec-shard=1/1",
                       "--specdec-report=shard-1", "--specdec-no-plots").assert_outcomes(passed=2)

    def merge(*save: str) -> str:
        done = subprocess.run([sys.executable, "-m", "pytest_specdec", "merge", "--no-plots", "--out", "merged",
                               "shard-1", *save], cwd=pytester.path, capture_output=True, text=True, timeout=120)
        # its code is 1: the default matrix's configurations have no test here, which it says apart
        assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
        return done.stdout

    assert "save the baseline again with --save-baseline to pool up to 3 runs" in merge()
    out = merge("--save-baseline")
    assert "README's gate section); the save this run made pools 2 of 3 runs into its entry" in out, out
    assert "save the baseline again" not in out


def test_figures_gated_exactly_or_not_gated_are_not_said(pytester, monkeypatch):
    _saved(pytester, monkeypatch, requests=2, saves=1)
    assert "small samples" not in _run(pytester, "--specdec-compare-fail", "my_fig:0")  # exact only
    assert "small samples" not in _run(pytester, "--specdec-compare-fail", "*:off")


# ------------------------------------------------------------------ verdicts and the line itself

TOL = Tolerance("ttft_ms", 0.30, True)


def _compare(now, then, runs=3):
    return compare_metric("t", MetricValue("ttft_ms", now[0], "lower", 0.0, len(now), distribution=tuple(now)),
                          BaselineEntry(value=then[0], direction="lower", spread=0.0, samples=len(then),
                                        deterministic=False, distribution=tuple(then),
                                        save_sizes=(len(then) - runs + 1,) + (1,) * (runs - 1)), TOL)


def test_a_red_or_noisy_verdict_from_few_requests_says_so_in_its_reason():
    red = _compare([50.0, 51.0], [5.0, 5.1, 5.2, 5.0, 5.1, 5.2])  # a collapse: red however few
    assert red.verdict == "regression" and red.line().endswith("[2 requests: a small sample]")
    noisy = _compare([7.0, 9.0], [5.0, 5.1, 5.2, 5.0, 5.1, 5.2])
    assert noisy.verdict == "noisy" and noisy.line().endswith("too noisy to decide [2 requests: a small sample]")
    enough = _compare([50.0, 51.0, 52.0, 50.5], [5.0, 5.1, 5.2, 5.0, 5.1, 5.2])
    assert enough.verdict == "regression" and "small sample" not in enough.line()
    fine = _compare([5.0, 5.1], [5.0, 5.1, 5.2, 5.0, 5.1, 5.2])
    assert fine.verdict == "unchanged" and fine.small_sample and "small sample" not in fine.line()


def test_a_red_from_few_samples_of_many_requests_says_both_counts():
    few_of_many = compare_metric(
        "t", MetricValue("tpot_ms", 50.0, "lower", 0.0, 8, distribution=(50.0, 51.0)),
        BaselineEntry(value=5.0, direction="lower", spread=0.0, samples=6, deterministic=False,
                      distribution=(5.0, 5.1, 5.2, 5.0, 5.1, 5.2), save_sizes=(4, 1, 1)),
        Tolerance("tpot_ms", 0.15, True))
    assert (few_of_many.sampled, few_of_many.requests) == (2, 8) and few_of_many.small_sample
    assert few_of_many.line().endswith("[2 samples of 8 requests: a small sample]")
    from pytest_specdec.gate import Comparison

    assert Comparison.from_json("t", few_of_many.to_json()) == few_of_many
    # a journal from before "sampled" kept the samples under "requests"
    old = {k: v for k, v in few_of_many.to_json().items() if k != "sampled"} | {"requests": 2}
    assert Comparison.from_json("t", old).sampled == 2


def test_the_line_counts_each_kind_and_names_the_fewest_of_several_workloads():
    """As a merge of shards says it: from the results' comparisons, whichever process made them."""
    from pytest_specdec.summary import small_sample_gate

    def result(workload, requests, runs):
        c = _compare([5.0 + i / 10 for i in range(requests)], [5.0, 5.1, 5.2, 5.0], runs)
        return Result(f"test[{workload}]", f"t.py::test[{workload}]", workload=workload, comparisons=(c,))

    line = small_sample_gate([result("code", 3, 1), result("chat", 1, 2), result("math", 8, 3)],
                             "--save-baseline")
    assert line.startswith("gate: 2 figure(s) decided from small samples (2 from as few as 1 sample, 1 "
                           "against a baseline entry of a single save)")
    assert line.endswith("raise num_prompts to 4 or more (workload chat, code) and save the baseline again "
                         "with --save-baseline to pool up to 3 runs")
    assert small_sample_gate([result("math", 8, 3)], "--save-baseline") is None


def test_a_save_that_pooled_some_entries_advises_saving_again_for_the_others_only():
    from pytest_specdec.summary import small_sample_gate

    def result(workload):
        c = _compare([5.0 + i / 10 for i in range(8)], [5.0, 5.1, 5.2, 5.0], 1)
        return Result(f"test[{workload}]", f"t.py::test[{workload}]", workload=workload, comparisons=(c,))

    pooled = {"test[code]": 2, "test[chat]": 3, "test[math]": 1}  # math: a changed setup, saved anew
    line = small_sample_gate([result("code"), result("chat"), result("math"), result("text")], "--save-baseline",
                             lambda r, metric: pooled.get(r.test_id))
    assert line.endswith("section); save the baseline again with --save-baseline to pool up to 3 runs for "
                         "the other 2; the save this run made pools 2-3 of 3 runs into 2 of their entries")
    line = small_sample_gate([result("code")], "--save-baseline", lambda r, metric: 2)
    assert line.endswith("section); the save this run made pools 2 of 3 runs into its entry")


def test_a_merge_of_shard_folders_from_before_sampled_with_later_ones_counts_each_right():
    """A shard folder written before `sampled` holds its comparisons' samples under "requests";
    read alone they said a TPOT of 2 samples of 8 requests came from 2 requests and advised
    raising num_prompts, the advice `sampled` was made to stop. Its journal record's figure says
    how many requests there were, so the merge reads the older folder as it reads a later one."""
    from pytest_specdec.summary import small_sample_gate

    figure = MetricValue("tpot_ms", 50.0, "lower", 0.0, 8, distribution=(50.0, 51.0))
    later = compare_metric("t", figure, BaselineEntry(value=5.0, direction="lower", spread=0.0, samples=6,
                                                      deterministic=False, distribution=(5.0, 5.1, 5.2, 5.0, 5.1, 5.2),
                                                      save_sizes=(4, 1, 1)), Tolerance("tpot_ms", 0.15, True))
    earlier = {k: v for k, v in later.to_json().items() if k != "sampled"} | {"requests": 2}

    def merged(workload, comparison):  # as merge._journaled reads a shard: record, then comparisons
        return Result.from_json({"test_id": f"t[{workload}]", "workload": workload,
                                 "metrics": {"tpot_ms": figure.to_json()}, "comparisons": [comparison]})

    old, new = merged("chat", earlier), merged("code", later.to_json())
    assert old.comparisons[0] == replace(later, test_id="t[chat]")
    assert old.comparisons[0].line().endswith("[2 samples of 8 requests: a small sample]")
    line = small_sample_gate([old, new], "--save-baseline")
    assert "2 from as few as 2 samples" in line and "num_prompts" not in line, line
    assert "tpot_ms of workload chat (2 samples of 8 requests)" in line, line
    # an older record whose figure is gone, or a figure without its count, keeps what the comparison held
    alone = Result.from_json({"test_id": "t", "comparisons": [earlier]}).comparisons[0]
    assert (alone.sampled, alone.requests) == (2, 2)
