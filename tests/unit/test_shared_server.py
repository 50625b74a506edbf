"""A server another client used while a workload measured is said to be shared, from SGLang's
generation-token counter read around the workload (sharing.py): its test fails naming both counts,
rather than passing or failing as a regression of the code; a clean run says nothing of sharing,
and a server without /metrics is said once to be unchecked."""

from __future__ import annotations

import json
import threading
import urllib.request

import pytest

from http_stub import QuietHandler, serving
from pytest_specdec import sglang_api as api
from pytest_specdec.sharing import SharingCheck, shared

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
        "workload, 72 of them this run's: another client shared it; its figures are not comparable, so its gate "
        "says nothing about the code either way*"])
    baseline = pytester.path / "baselines" / "cpu.json"
    assert not baseline.exists() or "test_generation[ddtree-tp1-b8-chat]" not in baseline.read_text()


class NoMetrics(QuietHandler):
    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()


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
