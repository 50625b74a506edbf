"""A server another client used while a workload measured is said to be shared, from SGLang's
generation-token counter read around the workload (sharing.py): its test fails naming both counts,
rather than passing or failing as a regression of the code; a clean run says nothing of sharing,
and a server without /metrics is said once to be unchecked."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request
from contextlib import contextmanager

import pytest

from http_stub import QuietHandler, serving
from pytest_specdec import sglang_api as api
from pytest_specdec.sharing import SharingCheck, shared
from pytest_specdec.workloads import load_workload

pytest.importorskip("torch")

from test_bench_flow import attached_engine, project, run  # noqa: E402  (needs torch)


def other_client(url: str, stop: threading.Event) -> None:
    """Another user of the server: requests one after another until told to stop."""
    body = json.dumps({"text": "another user's prompt", "sampling_params": {"max_new_tokens": 16, "ignore_eos": True}})
    while not stop.is_set():
        request = urllib.request.Request(url + api.GENERATE, body.encode(), {"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(request, timeout=60).read()
        except OSError:
            stop.wait(0.1)


def test_another_client_during_the_workload_fails_it_as_shared_and_a_clean_run_says_nothing(pytester):
    with attached_engine("--method", "ddtree", "--budget", "8") as (url, _):
        project(pytester, budgets=(8,), backend="auto")
        clean = run(pytester, f"--specdec-server-url={url}")
        clean.assert_outcomes(passed=1)
        clean.stdout.no_fnmatch_line("*was shared while*")
        clean.stdout.no_fnmatch_line("*cannot be checked*")

        stop = threading.Event()
        sender = threading.Thread(target=other_client, args=(url, stop), daemon=True)
        sender.start()
        try:
            result = run(pytester, f"--specdec-server-url={url}", "--specdec-save-baseline")
        finally:
            stop.set()
            sender.join(timeout=60)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*server ddtree-tp1-b8 was shared while it measured: the server generated * tokens during this "
        "workload, 72 of them this run's*: another client shared it; its figures are not comparable, so its gate "
        "says nothing about the code either way*or, where the server is always shared, run with "
        "--specdec-allow-shared to record its figures marked shared, never gated nor saved*"])
    baseline = pytester.path / "baselines" / "cpu.json"
    assert not baseline.exists() or "test_generation[ddtree-tp1-b8-chat]" not in baseline.read_text()


@contextmanager
def shared_with_another_client(url: str):
    """Another client sends requests to the server at `url` throughout the block."""
    stop = threading.Event()
    sender = threading.Thread(target=other_client, args=(url, stop), daemon=True)
    sender.start()
    try:
        yield
    finally:
        stop.set()
        sender.join(timeout=60)


def test_allow_shared_records_the_figures_marked_shared_never_gated_nor_saved_and_resume_and_merge_keep_it(
        pytester):
    """A server that is always shared (a team's staging server) ran nothing: each workload failed as
    shared. --specdec-allow-shared passes it with its figures marked shared in the table, results.json
    and report.md, compared with no baseline and left out of the save (said in its line), and the run's
    end counts it; a resumed run keeps it only with the switch; a merge of its shard keeps the mark."""
    test = "test_generation[ddtree-tp1-b8-chat]"
    escaped = "test_generation[[]ddtree-tp1-b8-chat[]]"  # as fnmatch reads brackets
    with attached_engine("--method", "ddtree", "--budget", "8") as (url, _):
        project(pytester, budgets=(8,), backend="auto",
                extra='compare_fail = "output_tok_s:0%,accept_length:0%,ttft_ms:0%,tpot_ms:0%"')
        clean = run(pytester, f"--specdec-server-url={url}", "--specdec-save-baseline")
        clean.assert_outcomes(passed=1)
        baseline = pytester.path / "baselines" / "cpu.json"
        saved = baseline.read_text()
        assert test in saved

        with shared_with_another_client(url):
            result = run(pytester, f"--specdec-server-url={url}", "--specdec-allow-shared", "--specdec-save-baseline",
                         "--specdec-shard=1/1", "--specdec-report=shard1")
        result.assert_outcomes(passed=1)
        result.stdout.no_fnmatch_line("*was shared while*")
        result.stdout.no_fnmatch_line("*against baseline:*")  # 0% tolerances, yet nothing compared
        result.stdout.fnmatch_lines([
            "*specdec [[]1/1[]] ddtree-tp1-b8 chat:* | shared: 72 of * tokens this run's*",
            "*ddtree-tp1-b8  chat *shared: 72 of * tokens this run's*",
            f"specdec: nothing saved into *cpu.json: its 1 result(s) are of workloads measured on a shared "
            f"server, whose figures another client's load makes no reference ({escaped})",
            "specdec: 1 workload(s) measured on a shared server (ddtree-tp1-b8 [[]chat[]]): their figures are "
            "shown marked shared, not gated and not saved into the baseline (--specdec-allow-shared)"])
        assert baseline.read_text() == saved  # the clean run's entry, not pooled with the shared figures
        row, = json.loads((pytester.path / "shard1" / "results.json").read_text())["results"]
        assert (row["verdict"], row["comparisons"], row["verdicts"]) == ("shared", [], {})
        # its other client's requests also in flight as it started or ended, as they ran throughout
        assert row["shared"].startswith("shared: 72 of ") and " tokens this run's" in row["shared"]
        assert row["shared"] in (pytester.path / "shard1" / "report.md").read_text()

        merged = subprocess.run([sys.executable, "-m", "pytest_specdec", "merge", "--no-plots", "shard1", "--out",
                                 "merged", "--save-baseline"], cwd=pytester.path, capture_output=True, text=True)
        assert merged.returncode == 0, merged.stdout + merged.stderr
        assert row["shared"] in merged.stdout
        assert "left out of the baseline 1 result(s) of workloads measured on a shared server" in merged.stdout
        assert "1 workload(s) measured on a shared server" in merged.stdout
        merged_row, = json.loads((pytester.path / "merged" / "results.json").read_text())["results"]
        assert (merged_row["verdict"], merged_row["shared"]) == ("shared", row["shared"])
        assert baseline.read_text() == saved

        kept = run(pytester, f"--specdec-server-url={url}", "--specdec-allow-shared", "--specdec-resume",
                   "--specdec-save-baseline", "--specdec-shard=1/1", "--specdec-report=shard1")
        kept.assert_outcomes(skipped=1)  # measured, so resumed: still marked, still unsaved
        kept.stdout.fnmatch_lines(["*ddtree-tp1-b8  chat *shared: 72 of * tokens this run's*",
                                   "specdec: nothing saved into *: its 1 result(s) are of workloads measured on a "
                                   "shared server*"])
        assert baseline.read_text() == saved

        # the shard folder's journal; gated on the deterministic accept length alone: this 2-core VM's
        # tok/s halves under other load, which 0% timing tolerances would fail as a regression
        again = run(pytester, f"--specdec-server-url={url}", "--specdec-resume", "--specdec-shard=1/1",
                    "--specdec-report=shard1", "--specdec-compare-fail=*:off,accept_length:0%")
    again.assert_outcomes(passed=1)  # no other client now: measured again, not failed on the old figures
    again.stdout.fnmatch_lines([f"specdec: resume: measured {escaped} again: its record was measured on a shared "
                                f"server, which this run does not allow (--specdec-allow-shared)"])
    again.stdout.no_fnmatch_line("*shared: 72 of*")


class NoMetrics(QuietHandler):
    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()


def test_figures_allowed_as_shared_are_not_handed_to_pytest_benchmark(pytester):
    """--specdec-allow-shared keeps shared figures out of the gate and the baseline, yet fed their
    samples to pytest-benchmark, whose --benchmark-compare-fail gated them and --benchmark-autosave
    kept them as the next comparison's reference."""
    test = "test_generation[ddtree-tp1-b8-chat]"
    with attached_engine("--method", "ddtree", "--budget", "8") as (url, _):
        project(pytester, budgets=(8,), backend="auto")
        run(pytester, f"--specdec-server-url={url}", "--benchmark-json=clean.json").assert_outcomes(passed=1)
        with shared_with_another_client(url):
            result = run(pytester, f"--specdec-server-url={url}", "--specdec-allow-shared",
                         "--benchmark-json=shared.json")
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(["*ddtree-tp1-b8  chat *shared: *"])

    def timed(name: str) -> list[str]:  # pytest-benchmark writes no file where nothing was timed
        path = pytester.path / name
        return [bench["name"] for bench in json.loads(path.read_text())["benchmarks"]] if path.exists() else []

    assert timed("clean.json") == [test]
    assert timed("shared.json") == []


def test_a_server_without_metrics_is_said_once_to_be_unchecked():
    said: list[str] = []
    check = SharingCheck(warn=said.append)
    with serving(NoMetrics) as url:
        assert check.read(url) is None
        assert check.read(url) is None
    assert said == [f"pytest-specdec: the server at {url} does not serve /metrics (SGLang serves it only when "
                    f"started with --enable-metrics: start it with that flag to have sharing checked), so whether "
                    f"another client shared it while a workload measured cannot be checked this run"]


def test_only_tokens_beyond_the_workloads_and_its_slack_are_another_clients():
    assert shared(1000, 1072, 72) is None
    assert shared(1000, 1072 + 16, 72) is None  # a few tokens straddling a scrape
    assert shared(1000, 1200, 72).describe() == (
        "the server generated 200 tokens during this workload, 72 of them this run's: another client shared it; "
        "its figures are not comparable")
    assert shared(5000, 10, 72) is None  # restarted in between: its liveness check says so


def test_a_workload_of_several_samples_per_request_counts_every_sample_and_is_not_taken_for_shared(tmp_path):
    """A request of `n` 2 streams two sequences, both in the server's counter: its record counted
    one sample's tokens, so tok/s was half the truth and the second samples looked like another
    client's. Greedy samples are identical, so n 2 doubles n 1's tokens and verify steps exactly,
    keeps its accept length, and each stream's time per token is one sequence's."""
    from test_warmup import engine, live

    with engine(tmp_path / "engine.log", "--method", "ddtree", "--budget", "8") as url:
        server, check, _ = live(url, warmup_requests=0)
        one = server.run(load_workload("chat", concurrency=2, max_new_tokens=8).resized(3))
        assert server.last_shared is None
        workload = load_workload("chat", concurrency=2, max_new_tokens=8, extra_sampling={"n": 2}).resized(3)
        two = server.run(workload)
        assert check.served[-2:] == [3, 9]  # SGLang counts each sample as a finished request
        assert server.last_shared is None
    assert (one.completion_tokens, two.completion_tokens) == (3 * 8, 2 * 3 * 8)
    assert [r.completion_tokens for r in server.last_result.records] == [16] * 3
    assert [r.sequence_tokens for r in server.last_result.records] == [8] * 3
    assert two.spec_verify_ct == 2 * one.spec_verify_ct and two.accept_length == one.accept_length
    assert two.output_tok_s == two.completion_tokens / two.wall_s
    print(f"n=1: {one.output_tok_s:.1f} tok/s, n=2: {two.output_tok_s:.1f} tok/s, "
          f"ratio {two.output_tok_s / one.output_tok_s:.2f}; tpot p50 {one.tpot_ms and one.tpot_ms.p50} "
          f"vs {two.tpot_ms and two.tpot_ms.p50} ms")
