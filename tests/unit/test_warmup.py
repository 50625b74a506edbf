"""Before a workload is measured, the server gets untimed warm-up requests and a cache flush
(warmup.py): the first workload on a fresh server paid its first-shape costs (Triton JIT compiles)
inside its figures, and that cold run was saved as the baseline. Counted server-side, on the
embedded engine: the warm-up reaches it before the measured requests and the sharing check's
first read, is not in the figures, is followed by a flush; 0 sends none; a crash during it says so."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from pytest_specdec import client
from pytest_specdec import sglang_api as api
from pytest_specdec.config import WorkloadSpec
from pytest_specdec.errors import SpecdecUsageError
from pytest_specdec.live import LiveServer
from pytest_specdec.servers.spec import ServerSpec
from pytest_specdec.sharing import SharingCheck
from pytest_specdec.warmup import CacheFlush, warmup_count
from pytest_specdec.workloads import load_workload

pytest.importorskip("torch")

from test_bench_flow import journal_figures, no_leftover_engines, project, run  # noqa: E402,F401
from test_server_faults import ONE_WORKLOAD, faulty_project  # noqa: E402

FLUSHED = "Cache flushed successfully!"


@contextlib.contextmanager
def engine(log: Path, *flags: str) -> Iterator[str]:
    """An engine started by hand, its log in `log` (where its flushes are said): its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with log.open("w") as out:
        server = subprocess.Popen([sys.executable, "-m", "pytest_specdec.engine", "--port", str(port), *flags],
                                  stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd="/")
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(url + api.HEALTH_GENERATE, timeout=5).read()
                break
            except OSError:
                time.sleep(0.2)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def requests_served(url: str) -> int:
    """The engine's own count of the requests it finished (SGLang's sglang:num_requests_total)."""
    samples = client.scrape_metrics(url)
    return round(sum(v for _, v in samples.get("sglang:num_requests_total", [])))


def requests_running(url: str) -> int:
    """The engine's own running count (/server_info), live, where SGLang's gauge is per interval."""
    return client.fetch_server_info(url)["internal_states"][0]["num_running_reqs"]


class CountingCheck(SharingCheck):
    """The sharing check, noting how many requests the server had finished at each of its reads."""

    def __init__(self) -> None:
        super().__init__(warn=lambda text: None)
        self.served: list[int] = []

    def read(self, url: str, stall_timeout: float | None = None) -> float | None:
        self.served.append(requests_served(url))
        return super().read(url, stall_timeout)


def live(url: str, **fields) -> tuple[LiveServer, CountingCheck, list[str]]:
    said: list[str] = []
    check = CountingCheck()
    server = LiveServer(spec=ServerSpec("embedded", "ddtree", budget=8), url=url, log_path=None,
                        check=lambda **_: None, stall_timeout=30.0, sharing=check, announce=said.append,
                        cache_flush=CacheFlush(warn=said.append), **fields)
    return server, check, said


def test_the_warmup_reaches_the_server_before_the_measured_requests_and_is_not_in_the_figures(tmp_path):
    log = tmp_path / "engine.log"
    with engine(log, "--method", "ddtree", "--budget", "8") as url:
        server, check, said = live(url)
        workload = load_workload("chat", concurrency=4, max_new_tokens=16).resized(6)
        measurement = server.run(workload)
        total = requests_served(url)
    # one round at its concurrency, served before the sharing check's first read; the 64 warm-up
    # tokens (past the check's slack of 16) are not taken for another client's
    assert check.served == [4, 10] and total == 10
    assert server.last_shared is None
    assert measurement.num_requests == 6 and measurement.completion_tokens == 6 * 16
    assert len(server.last_result.records) == 6
    assert (measurement.warmup_requests, measurement.cache_flushed) == (4, True)
    assert measurement.to_dict()["warmup_requests"] == 4
    assert log.read_text().count(FLUSHED) == 1
    assert said == ["server ddtree-tp1-b8: workload 'chat': warming up, 4 untimed requests at concurrency 4 "
                    "before it is measured"]


def test_zero_warmup_requests_send_none_and_a_workloads_own_key_wins(tmp_path):
    log = tmp_path / "engine.log"
    with engine(log, "--method", "ddtree", "--budget", "8") as url:
        server, check, said = live(url, warmup_requests=0)
        measurement = server.run(load_workload("chat", concurrency=2, max_new_tokens=8).resized(3))
        assert check.served == [0, 3] and said == []
        assert (measurement.warmup_requests, measurement.cache_flushed) == (0, None)
        assert FLUSHED not in log.read_text()

        own = WorkloadSpec("chat", num_prompts=3, max_new_tokens=8, concurrency=2, warmup_requests=5)
        server, check, said = live(url, warmup_requests=0, root=tmp_path)
        measurement = server.run(own)
        assert check.served == [3 + 5, 3 + 5 + 3]
        assert measurement.warmup_requests == 5 and measurement.num_requests == 3
        assert said == ["server ddtree-tp1-b8: workload 'chat': warming up, 5 untimed requests at concurrency 2 "
                        "before it is measured"]


def test_the_default_is_one_round_and_a_setting_is_a_count():
    workload = load_workload("chat", concurrency=4).resized(2)
    assert warmup_count(workload, None) == 2  # min(concurrency, num_prompts)
    assert warmup_count(load_workload("chat", concurrency=4).resized(8), None) == 4
    assert warmup_count(workload, 0) == 0 and warmup_count(workload, 7) == 7


def test_a_refused_flush_is_said_once_and_does_not_fail(tmp_path):
    """SGLang flushes only while idle: a flush asked while another client's request runs is its 400."""
    log = tmp_path / "engine.log"
    said: list[str] = []
    flush = CacheFlush(warn=said.append)
    with engine(log, "--method", "ar", "--fault-slow-factor", "200") as url:
        other = threading.Thread(target=client.run_workload,
                                 args=(url, load_workload("chat", max_new_tokens=64).resized(1)), daemon=True)
        other.start()
        deadline = time.monotonic() + 30
        while requests_running(url) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert flush.flush(url) is False and flush.flush(url) is False
    other.join(timeout=30)
    assert len(said) == 1, said
    assert said[0] == (f"pytest-specdec: the server at {url} did not flush its cache after a workload's warm-up: "
                       f"/flush_cache refused it (HTTP 400: Flush cache failed.), as SGLang does while a request "
                       f"is queued or running; the measured requests may find the warm-up's prompt prefixes "
                       f"cached (said once per server this run)")


def test_a_run_warms_up_records_the_count_and_the_sharing_check_stays_quiet(pytester, no_leftover_engines):
    """On a launched engine (sharing checked, two scrapes a workload): 6 warm-up requests of 24
    tokens each are far past the sharing check's slack, and the test passes unshared."""
    project(pytester, budgets=(8,), prompts=3, max_new_tokens=24)
    text = (pytester.path / "pyproject.toml").read_text()
    (pytester.path / "pyproject.toml").write_text(text.replace("max_new_tokens = 24\n",
                                                               "max_new_tokens = 24\nwarmup_requests = 6\n"))
    result = run(pytester, "--specdec-warmup-requests=0", "--specdec-report=rep")
    result.assert_outcomes(passed=1)
    out = result.stdout.str() + result.stderr.str()
    assert "warmup_requests=0 (command line)" in out  # the header's effective settings
    assert "workload 'chat': warming up, 6 untimed requests at concurrency 1 before it is measured" in out
    assert "was shared while" not in out and "did not flush" not in out
    record, = journal_figures(pytester)
    measurement = record["data"]["details"]["measurement"]
    assert (measurement["warmup_requests"], measurement["cache_flushed"]) == (6, True)
    assert measurement["num_requests"] == 3 and measurement["completion_tokens"] == 72
    assert "warmup" not in json.dumps(record["data"]["fingerprint"])  # older journals and baselines stay matched
    results = json.loads((pytester.path / "rep" / "results.json").read_text())
    assert results["results"][0]["warmup_requests"] == 6


def test_a_crash_during_the_warmup_is_named_as_such(pytester, no_leftover_engines):
    faulty_project(pytester, ("--fault-crash-after", "0"), workloads=ONE_WORKLOAD)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*workload 'w1', during its warm-up (1 untimed request before it is measured): "
                                 "server ddtree-tp1-b8 died: CUDA error: an illegal instruction was encountered*"])


def test_zero_tokens_during_the_warmup_are_named_as_such(pytester, no_leftover_engines):
    faulty_project(pytester, ("--fault-zero-tokens",), workloads=ONE_WORKLOAD)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*server ddtree-tp1-b8: workload 'w1', during its warm-up (1 untimed request "
                                 "before it is measured): the server produced zero completion tokens for all 1 "
                                 "requests*"])


@pytest.mark.parametrize("value, problem", [(-1, "-1 must be 0 (no warm-up) or more"),
                                            ('"two"', "'two' must be a whole number"), (2.5, "2.5 must be a whole number")])
def test_a_bad_warmup_key_names_it(tmp_path, value, problem):
    from pytest_specdec.config import load

    (tmp_path / "pyproject.toml").write_text(f"[tool.specdec]\n[[tool.specdec.workloads]]\nname = \"chat\"\n"
                                             f"warmup_requests = {value}\n")
    with pytest.raises(SpecdecUsageError) as info:
        load(tmp_path)
    assert "warmup_requests" in str(info.value) and problem in str(info.value), str(info.value)
