"""Each call the plugin makes to a ready server around a workload, on a server that takes the
connection and never answers: the test goes red within the run's stall timeout (a short one, as
a user sets it), not after the call's own longer wait, naming the server, the call and the option."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from typing import Iterator

import pytest

from http_stub import QuietHandler, serving

from pytest_specdec import client, workloads
from pytest_specdec.live import LiveServer
from pytest_specdec.metrics import RequestRecord, WorkloadResult
from pytest_specdec.servers.attach import AttachedServer
from pytest_specdec.servers.diagnosis import ServerError
from pytest_specdec.servers.spec import ServerSpec
from pytest_specdec.sharing import SharingCheck
from pytest_specdec.token_count import ServerTokenCounter
from pytest_specdec.workloads import Prompt, Workload

STALL_S = 1.0
HOLD_S = 15.0  # longer than the stall timeout, shorter than the old waits: they fail the bound
ANSWERS = {"/server_info": {"model_path": "m", "tp_size": 1, "speculative_algorithm": None}, "/health": {},
           "/v1/models": {"data": [{"id": "m", "max_model_len": 4096}]}}


@contextlib.contextmanager
def silent(paths: tuple[str, ...] | set[str] | None = None) -> Iterator[str]:
    """A server that accepts every connection; the requests for `paths` (all where None; a set
    may change as it serves) it never answers (for HOLD_S), the others it answers as an ar server:
    /server_info and /health, else 404. Its URL."""

    class Handler(QuietHandler):
        def _any(self) -> None:
            path = self.path.split("?")[0]
            if paths is None or path in paths:
                time.sleep(HOLD_S)
            try:
                if path not in ANSWERS:
                    self.send_error(404)
                    return
                body = json.dumps(ANSWERS[path]).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up on the silent server, as it should

        do_GET = do_POST = _any

    with serving(Handler, threaded=True) as url:  # each held request in a thread of its own
        yield url


def answered(url: str, workload: Workload, **kwargs) -> WorkloadResult:
    """run_workload's result for a workload whose every request streamed its tokens."""
    records = tuple(RequestRecord(index=i, status=200, finish_reason="length", prompt_tokens=4,
                                  completion_tokens=workload.max_new_tokens, ttft_ms=1.0, e2e_ms=2.0, chunks=4)
                    for i in range(len(workload.prompts)))
    return WorkloadResult(workload.name, url, workload.concurrency, records, wall_s=0.01)


WORKLOAD = Workload(name="chat", prompts=(Prompt("hi"),), max_new_tokens=4, concurrency=1)


def test_a_flush_the_server_never_answers_is_a_stall_after_the_stall_timeout(monkeypatch):
    """/flush_cache after the warm-up waited its own 30 s, then only warned, once per workload,
    before the workload itself stalled: it is now bound by the stall timeout and fails as a stall."""
    monkeypatch.setattr("pytest_specdec.live.client.run_workload", answered)
    reported = []
    with silent(("/flush_cache",)) as url:
        server = LiveServer(spec=ServerSpec("embedded", "ar"), url=url, log_path=None, check=lambda: None,
                            token_counter=None, stall_timeout=STALL_S, stall_setting="--specdec-stall-timeout",
                            report_failure=reported.append)
        began = time.monotonic()
        with pytest.raises(pytest.fail.Exception) as info:
            server.run(WORKLOAD)
        took = time.monotonic() - began
    assert str(info.value) == ("server ar-tp1 stalled: workload 'chat', during its warm-up (1 untimed request "
                               "before it is measured): /flush_cache did not answer within 1s; raise "
                               "--specdec-stall-timeout if the server is just slow")
    assert took < STALL_S + 3, took
    assert [error.reason for error in reported] == ["stalled"]


@pytest.mark.parametrize("path, said", [
    ("/health", "/health did not answer within 1s"),
    ("/server_info", "it accepted the connection but did not answer /server_info within 1s"),
])
def test_an_attached_servers_liveness_check_is_bound_by_the_stall_timeout(path, said):
    """An attached server's check (before each test, after each workload) waited the 25 s /health
    limit, then 10 s for its identity's re-read, whatever the stall timeout, where a launched
    server's waits at most the stall timeout, as the README's Options table says of both."""
    hung: set[str] = set()
    with silent(hung) as url:
        server = AttachedServer(url, stall_timeout=STALL_S, stall_setting="ini specdec_stall_timeout")
        hung.add(path)
        began = time.monotonic()
        with pytest.raises(ServerError) as info:
            server.check_alive()
        took = time.monotonic() - began
    assert str(info.value) == (f"attached server ar-tp1 at {url} is not healthy: {said}; raise ini "
                               f"specdec_stall_timeout if the server is just slow")
    assert took < STALL_S + 3, took


def test_the_sharing_checks_scrape_of_a_silent_server_waits_no_longer_than_the_stall_timeout():
    """The /metrics read before a workload waited its own 10 s on a server that never answers (then
    the workload stalled): a red after 10 s plus the stall timeout, two such reads a workload where
    only /metrics is silent. Each now waits the stall timeout at most."""
    reported = []
    with silent() as url:
        server = LiveServer(spec=ServerSpec("embedded", "ar"), url=url, log_path=None, check=lambda: None,
                            token_counter=None, stall_timeout=STALL_S, warmup_requests=0,
                            sharing=SharingCheck(warn=reported.append), report_failure=reported.append)
        began = time.monotonic()
        with pytest.raises(pytest.fail.Exception) as info:
            server.run(WORKLOAD)
        took = time.monotonic() - began
    assert str(info.value).startswith("server ar-tp1 stalled: no token for "), str(info.value)
    assert took < 2 * STALL_S + 3, took
    assert [error.reason for error in reported] == ["stalled"]


def live(url: str, reported: list, spec: ServerSpec = ServerSpec("embedded", "ar"), **kwargs) -> LiveServer:
    """A LiveServer at `url` with the short stall timeout, its failures appended to `reported`."""
    return LiveServer(spec=spec, url=url, log_path=None, check=lambda: None, stall_timeout=STALL_S,
                      stall_setting="--specdec-stall-timeout", report_failure=reported.append,
                      warmup_requests=0, **kwargs)


@pytest.mark.parametrize("path, counter, during", [
    ("/v1/models", lambda url: workloads.embedded_token_count, "reading the server's context length"),
    ("/v1/tokenize", ServerTokenCounter, "counting its prompt tokens"),
])
def test_the_context_length_guards_reads_are_bound_by_the_stall_timeout(monkeypatch, path, counter, during):
    """Where the server counts tokens, run() reads its context length (10 s each of three paths:
    red after 30 s) and has it count the prompts (30 s a batch, a round of batches per truncation
    step) before the workload: each now waits the stall timeout at most, and fails as a stall."""
    monkeypatch.setattr("pytest_specdec.live.client.run_workload", answered)
    reported: list = []
    with silent((path,)) as url:
        server = live(url, reported, token_counter=counter(url))
        began = time.monotonic()
        with pytest.raises(pytest.fail.Exception) as info:
            server.run(WORKLOAD)
        took = time.monotonic() - began
    assert str(info.value) == (f"server ar-tp1 stalled: workload 'chat', {during}: {path} did not answer "
                               f"within 1s; raise --specdec-stall-timeout if the server is just slow")
    assert took < STALL_S + 3, took
    assert [error.reason for error in reported] == ["stalled"]


def test_a_silent_vocabulary_read_is_said_once_and_skipped():
    """/model_info (a speculative server's vocabulary, only for the random-draft guard, which takes
    an unknown one as large) waited its own 10 s, silently: now the stall timeout at most, said,
    and not asked again; the workload's own watchdog fails a server that is frozen."""
    reported: list = []
    with silent(("/model_info",)) as url:
        server = live(url, reported, spec=ServerSpec("embedded", "ddtree", budget=8), token_counter=None)
        began = time.monotonic()
        with pytest.warns(UserWarning) as said:
            assert server.vocab_size() is None
        took = time.monotonic() - began
        began = time.monotonic()
        assert server.vocab_size() is None
        again = time.monotonic() - began
    assert [str(w.message) for w in said] == [
        "server ddtree-tp1-b8: /model_info did not answer within 1s, so the random-draft check takes its "
        "vocabulary as large (not asked again for this test; said once per server this run)"]
    assert took < STALL_S + 3, took
    assert again < 0.5, again
    assert reported == []


def test_a_silent_vocabulary_read_is_said_once_per_server_this_run_not_per_test():
    """A LiveServer is made per test: two of one URL (the fixture passes both the run's set) say a
    silent /model_info once, as the run's other optional reads do; another URL is another server."""
    import warnings

    reported: list = []
    said_in_run: set[str] = set()
    spec = ServerSpec("embedded", "ddtree", budget=8)
    with silent(("/model_info",)) as url, warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        for each_test in (url, url + "/"):
            assert live(each_test, reported, spec=spec, token_counter=None, vocab_said=said_in_run).vocab_size() is None
        with silent(("/model_info",)) as other:
            assert live(other, reported, spec=spec, token_counter=None, vocab_said=said_in_run).vocab_size() is None
    messages = [str(w.message) for w in said if "/model_info" in str(w.message)]
    assert len(messages) == 2, messages
    assert reported == []


def test_a_call_made_inside_a_running_loop_does_not_hold_up_exit():
    """From inside a running event loop a call runs in a helper thread: a non-daemon one would keep
    the process alive after Ctrl-C until the call's own timeout."""
    async def where() -> bool:
        return threading.current_thread().daemon

    async def caller() -> bool:
        return client._run_sync(where)

    assert asyncio.run(caller()) is True
