"""`LiveServer`: its cross-check of the client's accept length against the server's decode log, and the
context-length guard's count by a server's own /v1/tokenize."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import aiohttp
import pytest

from pytest_specdec import client
from pytest_specdec.backends import AttachBackend, SGLangBackend
from pytest_specdec.live import LiveServer
from pytest_specdec.metrics import RequestRecord, WorkloadResult, summarize
from pytest_specdec.servers.diagnosis import ServerError
from pytest_specdec.servers.spec import ServerSpec
from pytest_specdec.workloads import Prompt, Workload, fit_to_context

WARMUP = [
    "[2026-12-02 13:34:52 TP0] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, "
    "token usage: 0.00, #running-req: 0, #queue-req: 0, ",
    "[2026-12-02 13:34:52] The server is fired up and ready to roll!",
]


def prefill(running: int = 0) -> str:
    return ("[2026-12-02 13:34:53 TP0] Prefill batch, #new-seq: 1, #new-token: 100, #cached-token: 0, "
            f"token usage: 0.00, #running-req: {running}, #queue-req: 0, ")


def decode(accept_len: float, running: int = 1) -> str:
    return (f"[2026-12-02 13:34:53 TP0] Decode batch, #running-req: {running}, #token: 120, "
            f"token usage: 0.00, accept len: {accept_len:.2f}, accept rate: 0.15, cuda graph: False, "
            "gen throughput (token/s): 1359.28, #queue-req: 0")


def code_c4():
    """A code-c4 run on dflash-tp1: 8 x 64 tokens in 131 verify steps, so a client accept length
    of 3.908 (prefill tokens included)."""
    records = tuple(
        RequestRecord(index=i, status=200, finish_reason="length", prompt_tokens=100,
                      completion_tokens=64, ttft_ms=6.5, e2e_ms=20.0, chunks=64, spec_verify_ct=verify)
        for i, verify in enumerate((16, 17, 21, 19, 14, 17, 13, 14)))
    return summarize(WorkloadResult("code-c4", "http://127.0.0.1:1", 4, records, wall_s=0.15))


def cross_check(tmp_path, before: list[str], during: list[str]) -> LiveServer:
    """Run the cross-check on a log that held `before` when the workload began."""
    log = tmp_path / "dflash-tp1.log"
    log.write_text("".join(line + "\n" for line in before))
    offset = log.stat().st_size
    with open(log, "a") as fh:
        fh.write("".join(line + "\n" for line in during))
    server = LiveServer(spec=ServerSpec("embedded", "dflash"), url="http://127.0.0.1:1",
                        log_path=log, check=lambda: None)
    server._cross_check(code_c4(), offset)
    return server


# The previous workload (chat, one request at a time, accept length about 3.5): its last steps
# after its last decode line are logged in the next workload's first line.
CHAT = WARMUP + [prefill(), prefill(), decode(3.92), prefill(), decode(3.33), prefill(), decode(3.65)]


def test_a_first_interval_begun_in_the_previous_workload_is_not_this_ones(tmp_path):
    """The interval counters run on across workloads, as SGLang's do: code-c4's only decode
    line was mostly chat's tail. It is no figure of code-c4's, so nothing disagrees."""
    during = [prefill(0), prefill(1), prefill(2), prefill(3), decode(3.62, running=4),
              prefill(3), prefill(3)]
    server = cross_check(tmp_path, CHAT, during)
    assert server.disagreements == []
    assert server.last_server_figures.accept_length is None
    assert server.last_server_figures.lines == 0


def test_whole_intervals_inside_the_workload_are_compared(tmp_path):
    """The straddling first line is left out, the whole intervals after it are averaged."""
    during = [prefill(0), prefill(1), prefill(2), prefill(3), decode(2.90, running=4),
              decode(3.85, running=4), prefill(3), decode(3.83, running=4)]
    server = cross_check(tmp_path, CHAT, during)
    assert server.disagreements == []
    assert server.last_server_figures.accept_length == pytest.approx(3.84)
    assert server.last_server_figures.lines == 2


def test_whole_intervals_that_genuinely_disagree_still_warn(tmp_path):
    during = [prefill(0), prefill(1), prefill(2), prefill(3), decode(3.85, running=4),
              decode(3.05, running=4), prefill(3), decode(3.15, running=4)]
    with pytest.warns(UserWarning, match=r"dflash-tp1: accept_length disagrees: client 3\.908 vs "
                                         r".*dflash-tp1\.log 3\.100"):
        server = cross_check(tmp_path, CHAT, during)
    assert len(server.disagreements) == 1


def test_one_whole_interval_is_kept_but_not_compared(tmp_path):
    """A single interval is one sample of the workload's steps: far from the client's figure is
    no disagreement yet."""
    during = [prefill(0), prefill(1), prefill(2), prefill(3), decode(3.85, running=4),
              decode(3.05, running=4), prefill(3)]
    server = cross_check(tmp_path, CHAT, during)
    assert server.disagreements == []
    assert server.last_server_figures.accept_length == pytest.approx(3.05)
    assert server.last_server_figures.intervals == 1


def test_an_interval_logged_twice_counts_once(tmp_path):
    """A DDTree server logs its own line beside each decode line: still one interval."""
    ddtree = ("[2026-12-02 13:34:53 TP0] DDTree verify: avg_accepted_drafts=2.05 avg_commit_len=3.05 "
              "avg_accepted_depth=2.05")
    during = [prefill(0), prefill(1), prefill(2), prefill(3), decode(3.85, running=4),
              ddtree.replace("3.05", "3.85"), decode(3.05, running=4), ddtree, prefill(3)]
    server = cross_check(tmp_path, CHAT, during)
    assert server.disagreements == []
    assert (server.last_server_figures.lines, server.last_server_figures.intervals) == (2, 1)


@pytest.mark.parametrize("status, body, said", [
    (400, b'{"error": {"message": "The embedded engine cannot honour the sampling parameter(s) top_p=0.5"}}',
     "/generate failed: HTTP 400 Bad Request: The embedded engine cannot honour the sampling parameter(s) top_p=0.5"),
    (500, b"Internal Server Error\n", "/generate failed: HTTP 500 Internal Server Error: Internal Server Error"),
    (200, b"<html>ok</html>", "/generate answered with something that is not JSON: <html>ok</html>"),
])
def test_generate_fails_with_the_servers_own_words(status, body, said):
    """An HTTP error said only "HTTP Error 400: Bad Request", the reason in its body thrown away;
    a 200 that was not JSON escaped as a JSONDecodeError traceback."""
    from http_stub import QuietHandler, serving

    class Handler(QuietHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with serving(Handler) as url:
        server = LiveServer(spec=ServerSpec("embedded", "ar"), url=url, log_path=None, check=lambda: None)
        with pytest.raises(pytest.fail.Exception, match="server ar-tp1: " + re.escape(said)):
            server.generate("Hello", max_new_tokens=4, top_p=0.5)


@pytest.mark.parametrize("given", ["chat", None, {"prompts": "chat"}])
def test_run_given_something_that_is_no_workload_says_what_it_takes(given):
    """`specdec_server.run("chat")` (a workload's name) failed with "AttributeError: 'str' object
    has no attribute 'name'" from the plugin's insides."""
    server = LiveServer(spec=ServerSpec("embedded", "ar"), url="http://127.0.0.1:1", log_path=None,
                        check=lambda: None)
    with pytest.raises(pytest.fail.Exception) as info:
        server.run(given)
    assert str(info.value) == (
        f"server ar-tp1: run() takes a workload: the specdec_workload fixture's value, or a "
        f"pytest_specdec.workloads.Workload (load_workload('chat') builds one), not the "
        f"{type(given).__name__} {given!r}")


class TokenizerStub:
    """An attached server's HTTP side, as far as the context guard asks it: /v1/models states the
    context, /v1/tokenize counts a BOS plus one token per word (a subword model, to the guard), or
    answers 404 as a release without it does, or `status` with SGLang's error body saying `message`
    for every request; `asked` holds the lists it counted. A body not sent as application/json gets
    SGLang's 400."""

    def __init__(self, context: int = 128, tokenize: bool = True, status: int = 200,
                 message: str = "tokenizer exploded"):
        import http.server
        import json
        import threading

        stub = self
        self.asked: list[list[str]] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def answer(self, code, body):
                raw = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):
                self.answer(200, {"data": [{"id": "m", "max_model_len": context}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if not tokenize or self.path != "/v1/tokenize":
                    return self.answer(404, {"detail": "Not Found"})
                if status != 200:
                    return self.answer(status, {"object": "error", "message": message, "param": None,
                                                "type": "InternalServerError" if status == 500 else "BadRequestError",
                                                "code": status})
                if self.headers.get("Content-Type", "").lower().split(";")[0] != "application/json":
                    return self.answer(400, {"object": "error", "message": "Unsupported Media Type"})
                stub.asked.append(body["prompt"])
                assert body["add_special_tokens"] is True
                self.answer(200, {"count": [len(t.split()) + 1 for t in body["prompt"]], "max_model_len": context})

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def stub():
    made = []

    def make(**kw) -> TokenizerStub:
        made.append(TokenizerStub(**kw))
        return made[-1]

    yield make
    for s in made:
        s.close()


def live(url: str, backend) -> LiveServer:
    return LiveServer(spec=ServerSpec(backend.name, "ar"), url=url, log_path=None, check=lambda: None,
                      token_counter=backend.token_counter(url))


WORDS = Workload("words", prompts=(Prompt("word " * 100),), max_new_tokens=16)  # 101 tokens, 501 bytes


def test_an_attached_server_counts_its_own_prompts(stub):
    """The byte bound (501 + 16 > 128) refused a prompt of 101 subword tokens, which fits."""
    server = stub()
    assert live(server.url, AttachBackend("attached")).workload(WORDS) is WORDS
    assert server.asked == [[WORDS.prompts[0].text]]


def test_a_prompt_is_refused_by_the_servers_count_and_says_so(stub):
    server = stub(context=64)
    with pytest.raises(pytest.fail.Exception) as info:
        live(server.url, AttachBackend("attached")).workload(WORDS)
    assert str(info.value).startswith("server ar-tp1: workload 'words', prompt 1: 101 prompt tokens + 16 "
                                      "max_new_tokens = 117, but the server (context length 64) serves a "
                                      "request in full only up to 62 tokens, with a prompt of at most 57;")
    assert str(info.value).endswith("(prompt tokens counted by the server's tokenizer (/v1/tokenize))")


def test_truncation_asks_the_server_a_round_of_prefixes_at_once(stub):
    """The search over prefixes asks for 16 at a time, and each text once: a handful of
    requests for a 10 000-character prompt, where a binary search would send 14."""
    server = stub()
    counter = AttachBackend("attached").token_counter(server.url)
    long = Workload("long", prompts=(Prompt("word " * 2000), Prompt("word " * 2000)), max_new_tokens=16)
    fitted = fit_to_context(long, 128, counter, truncate=True)
    assert [p.text for p in fitted.prompts] == ["word " * 109] * 2  # 109 words + BOS + 16 = 128 - 2
    assert len(server.asked) <= 5 and all(len(set(a)) == len(a) for a in server.asked)
    asked = [t for a in server.asked for t in a]
    assert len(asked) == len(set(asked))


def test_a_truncations_prefixes_are_not_kept_by_the_counter(stub):
    """The counter outlives the test (one per server for the session): what it keeps of a long
    prompt's search is its counts, not the prefixes it measured (about 9 copies of the prompt)."""
    import gc
    import tracemalloc

    server = stub()
    counter = AttachBackend("attached").token_counter(server.url)
    long = Workload("long", prompts=(Prompt("word " * 40000),), max_new_tokens=16)  # 200 000 characters
    fit_to_context(Workload("warm", prompts=(Prompt("word"),), max_new_tokens=16), 128, counter)
    tracemalloc.start()
    try:
        fitted = fit_to_context(long, 128, counter, truncate=True)
        assert fitted.prompts[0].text == "word " * 109
        del fitted
        server.asked.clear()  # the stub's record of the requests, not the counter's
        gc.collect()
        kept, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert kept < len(long.prompts[0].text)


#: SGLang's /v1/tokenize answer on a server started with --skip-tokenizer-init (no tokenizer loaded)
NO_TOKENIZER = "Internal server error during tokenization: 'NoneType' object has no attribute 'encode'"


@pytest.mark.parametrize("status, message", [
    (500, "tokenizer exploded"),
    (500, "Internal server error during tokenization: CUDA error: an illegal memory access was encountered"),
    (503, NO_TOKENIZER),  # a proxy's or a dying server's status: not SGLang's answer
])
@pytest.mark.parametrize("backend", [SGLangBackend("requested"), AttachBackend("attached")], ids=str)
def test_a_tokenize_error_fails_with_the_servers_words(stub, backend, status, message):
    server = stub(status=status, message=message)
    with pytest.raises(pytest.fail.Exception, match=re.escape(
            f"server ar-tp1: could not count its prompt tokens: POST {server.url}/v1/tokenize: HTTP {status}: "
            f"{message}")):
        live(server.url, backend).workload(WORDS)


#: how a server that cannot count is faked, and the reason the plugin gives: no /v1/tokenize (404), or
#: SGLang's 500 from a server started with --skip-tokenizer-init, which failed the test as a broken server
CANNOT_COUNT = [
    (dict(tokenize=False), "has no /v1/tokenize (SGLang before 0.5.3.post1)"),
    (dict(status=500, message=NO_TOKENIZER), "has no tokenizer (started with --skip-tokenizer-init)"),
]


@pytest.mark.parametrize("fake, reason", CANNOT_COUNT, ids=["no-endpoint", "no-tokenizer"])
def test_an_attached_server_that_cannot_count_is_counted_by_the_byte_bound(stub, fake, reason):
    server = stub(**fake)
    with pytest.raises(pytest.fail.Exception) as info:
        live(server.url, AttachBackend("attached")).workload(WORDS)
    assert "501 prompt tokens + 16 max_new_tokens" in str(info.value)
    assert str(info.value).endswith(
        "(prompt tokens counted as the embedded engine counts (BOS + one per UTF-8 byte), an upper bound, as "
        f"the server {reason})")


@pytest.mark.parametrize("fake, reason", CANNOT_COUNT, ids=["no-endpoint", "no-tokenizer"])
def test_an_sglang_server_that_cannot_count_runs_the_workload_as_it_stands(stub, fake, reason):
    server = stub(context=64, **fake)
    with pytest.warns(UserWarning, match=re.escape(f"server ar-tp1 {reason}, so workload 'words' was not checked "
                                                   "against its context length: ")):
        assert live(server.url, SGLangBackend("requested")).workload(WORDS) is WORDS


@pytest.mark.parametrize("tokenize, said", [
    (True, "by the server's tokenizer (/v1/tokenize)"),
    (False, "as the embedded engine counts (BOS + one per UTF-8 byte), an upper bound, as the server has no "
            "/v1/tokenize (SGLang before 0.5.3.post1); a prompt that fits may be refused, and truncate cuts "
            "more than it needs to"),
    (NO_TOKENIZER, "as the embedded engine counts (BOS + one per UTF-8 byte), an upper bound, as the server has no "
                   "tokenizer (started with --skip-tokenizer-init); a prompt that fits may be refused, and truncate "
                   "cuts more than it needs to"),
])
def test_the_header_says_which_count_an_attached_server_gets(stub, tokenize, said):
    from types import SimpleNamespace

    server = stub(status=500, message=tokenize) if isinstance(tokenize, str) else stub(tokenize=tokenize)
    attach = AttachBackend("attached")
    assert attach.counting(SimpleNamespace(settings=SimpleNamespace(server_url=server.url + "/"), listing=False)) == said
    attach.token_counter(server.url)("word")  # the fixture's counter is the one the header asked
    assert len(server.asked) == (2 if tokenize is True else 0)


def test_the_header_of_an_attached_server_that_does_not_answer_says_both():
    from types import SimpleNamespace

    nowhere = SimpleNamespace(settings=SimpleNamespace(server_url="http://127.0.0.1:9"), listing=False)
    said = AttachBackend("attached").counting(nowhere)
    assert said == ("by the server's /v1/tokenize where it serves it, else as the embedded engine counts "
                    "(BOS + one per UTF-8 byte), an upper bound")


class Flushed:
    """A cache flush that succeeds: the workloads of these tests are stubbed, no server runs."""

    def flush(self, url: str, stall_timeout: float | None = None) -> bool:
        return True


def test_a_long_but_moving_workload_meets_no_per_request_cap(monkeypatch):
    """With a stall timeout, a request that keeps receiving tokens is not cut at the client's
    600 s per-request cap (a long generation on a large model outlasts it): the stall watchdog
    bounds a silent one."""
    import pytest_specdec.client as client_module

    seen = {}

    def run_workload(url, workload, **kwargs):
        seen.update(kwargs)
        record = RequestRecord(index=0, status=200, finish_reason="length", prompt_tokens=4,
                               completion_tokens=4, ttft_ms=1.0, e2e_ms=2.0, chunks=4)
        return WorkloadResult(workload.name, url, 1, (record,), wall_s=0.01)

    monkeypatch.setattr(client_module, "run_workload", run_workload)
    server = LiveServer(spec=ServerSpec("embedded", "ar"), url="http://127.0.0.1:1", log_path=None,
                        check=lambda: None, token_counter=None, stall_timeout=5.0, cache_flush=Flushed())
    server.run(Workload(name="w", prompts=(Prompt("hi"),), max_new_tokens=4, concurrency=1))
    assert seen["stall_timeout"] == 5.0
    assert seen.get("timeout_s", "the client's default") is None


def test_a_measured_workload_says_how_far_it_is_after_its_warm_up_line(monkeypatch):
    """After "warming up, ... before it is measured" nothing was said while the measured requests
    ran, so the last line on screen said "warming up" for minutes. The measured run now says its
    progress through the same printer (the warm-up's own lines: the next test)."""
    import pytest_specdec.client as client_module

    runs = []

    def run_workload(url, workload, **kwargs):
        runs.append(kwargs)
        if kwargs.get("keep_text", True):  # the measured run: the warm-up keeps no text
            kwargs["on_progress"](37, 160, 9472, 30.4)
            kwargs["on_progress"](1, 160, 1, 10.0)
        record = RequestRecord(index=0, status=200, finish_reason="length", prompt_tokens=4,
                               completion_tokens=4, ttft_ms=1.0, e2e_ms=2.0, chunks=4)
        return WorkloadResult(workload.name, url, 1, (record,), wall_s=0.01)

    monkeypatch.setattr(client_module, "run_workload", run_workload)
    said: list[str] = []
    server = LiveServer(spec=ServerSpec("embedded", "ar"), url="http://127.0.0.1:1", log_path=None,
                        check=lambda: None, token_counter=None, cache_flush=Flushed(), announce=said.append)
    server.run(Workload(name="chat", prompts=(Prompt("hi"),) * 160, max_new_tokens=256, concurrency=4))
    assert [run.get("keep_text", True) for run in runs] == [False, True]  # the warm-up, then the workload
    assert said == [
        "server ar-tp1: workload 'chat': warming up, 4 untimed requests at concurrency 4 before it is measured",
        "server ar-tp1: workload 'chat': measuring, 37 of 160 requests done, 9,472 tokens so far in 30 s",
        "server ar-tp1: workload 'chat': measuring, 1 of 160 requests done, 1 token so far in 10 s",
    ]


def test_a_long_warm_up_says_how_far_it_is_and_keeps_its_figures_to_itself(monkeypatch):
    """A large `warmup_requests` (64 untimed requests, minutes on a GPU) said nothing after its
    "warming up, ... before it is measured" line until the measured requests' first progress
    line. Its own run now says its progress, worded for the warm-up, through the same printer;
    its requests and tokens are in none of the measured run's lines or figures."""
    import pytest_specdec.client as client_module

    def run_workload(url, workload, **kwargs):
        warm = not kwargs.get("keep_text", True)  # the warm-up keeps no text
        tokens = 48 if warm else 8
        if kwargs.get("on_progress") is not None:
            kwargs["on_progress"](12, len(workload.prompts), 12 * tokens, 10.2)
        records = tuple(RequestRecord(index=i, status=200, finish_reason="length", prompt_tokens=4,
                                      completion_tokens=tokens, ttft_ms=1.0, e2e_ms=2.0, chunks=tokens)
                        for i in range(len(workload.prompts)))
        return WorkloadResult(workload.name, url, workload.concurrency, records, wall_s=0.01)

    monkeypatch.setattr(client_module, "run_workload", run_workload)
    said: list[str] = []
    server = LiveServer(spec=ServerSpec("embedded", "ar"), url="http://127.0.0.1:1", log_path=None,
                        check=lambda: None, token_counter=None, cache_flush=Flushed(), announce=said.append,
                        warmup_requests=64)
    measurement = server.run(Workload(name="chat", prompts=(Prompt("hi"),) * 20, max_new_tokens=8, concurrency=4))
    assert said == [
        "server ar-tp1: workload 'chat': warming up, 64 untimed requests at concurrency 4 before it is measured",
        "server ar-tp1: workload 'chat': warming up, 12 of 64 untimed requests done, 576 tokens so far in 10 s",
        "server ar-tp1: workload 'chat': measuring, 12 of 20 requests done, 96 tokens so far in 10 s",
    ]
    assert (measurement.num_requests, measurement.completion_tokens, measurement.warmup_requests) == (20, 160, 64)


class StreamStub:
    """A /generate that sends `events` (bytes of SSE lines, a keep-alive comment among them
    where given), then holds the connection silent for `hold` s (a frozen server) or ends it."""

    def __init__(self, events: list[bytes], *, hold: float = 0.0, keepalive: float | None = None):
        import http.server
        import threading
        import time

        self.bodies: list[dict] = []
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_POST(self):
                import json

                stub.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                try:
                    for event in events:
                        self.wfile.write(event)
                        self.wfile.flush()
                    until = time.monotonic() + hold
                    while time.monotonic() < until:
                        time.sleep(keepalive or 0.05)
                        if keepalive:  # what a proxy in front of a frozen server sends
                            self.wfile.write(b": keep-alive\n\n")
                            self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up on the frozen server

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def sse(obj) -> bytes:
    import json

    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def event(text: str, ids: list[int], tokens: int) -> bytes:
    return sse({"text": text, "output_ids": ids, "meta_info": {"completion_tokens": tokens}})


@pytest.mark.parametrize("sent, keepalive", [
    ([], None),
    ([event("Hel", [1], 1)], None),
    ([event("Hel", [1], 1)], 0.1),
], ids=["before-any-token", "mid-stream", "keep-alives"])
def test_generate_on_a_frozen_server_fails_after_the_stall_timeout(sent, keepalive):
    """generate() waited its own 120 s timeout on a frozen server, then a /health probe, while a
    workload's requests fail after the stall timeout: it now stalls as a workload does, with the
    same message, and its configuration is reported failed. The stub holds 10 s: longer than the
    stall timeout, shorter than the old wait, so the old code fails this test otherwise."""
    stub = StreamStub(sent, hold=10.0, keepalive=keepalive)
    reported = []
    try:
        server = LiveServer(spec=ServerSpec("embedded", "ar"), url=stub.url, log_path=None,
                            check=lambda: None, stall_timeout=0.5, stall_setting="ini specdec_stall_timeout",
                            report_failure=reported.append)
        with pytest.raises(pytest.fail.Exception) as info:
            server.generate("Hello", max_new_tokens=4)
    finally:
        stub.close()
    said = re.fullmatch(r"server ar-tp1 stalled: no token for (\d+\.\d)s while 1 request was in flight \(0 of 1 "
                        r"requests done\); raise ini specdec_stall_timeout if the server is just slow",
                        str(info.value))
    assert said, str(info.value)
    # the silence as measured: at least the stall timeout, more where the watchdog woke late (a loaded machine)
    assert float(said.group(1)) >= 0.5, str(info.value)
    assert [error.reason for error in reported] == ["stalled"]
    assert server.failure is reported[0]


@pytest.mark.parametrize("reason, cause, said", [
    ("unresponsive", "/health did not answer within 3s (process alive, pid 7)", "froze"),
    ("died", "CUDA error: an illegal instruction was encountered", "died"),
])
def test_a_server_found_failed_after_its_test_is_stopped_and_warned_of_not_failed(reason, cause, said):
    """The fixture's teardown used to report such a server failed in silence: the user saw a
    slow teardown and a green run. It is now reported as failed (stopped, its later tests
    erroring) and named in a warning with its log, and the test that measured before stands."""
    error = ServerError("ar-tp1", reason, cause, log_path=Path("logs/ar-tp1.log"))

    def check():
        raise error

    reported = []
    server = LiveServer(spec=ServerSpec("embedded", "ar"), url="http://127.0.0.1:9", log_path=None,
                        check=check, report_failure=reported.append)
    with pytest.warns(UserWarning) as seen:
        server.check_after_test()  # no pytest.fail: the test's verdict stands
    assert [str(w.message) for w in seen] == [
        f"pytest-specdec: server ar-tp1 {said} after its test finished: {cause}; it was stopped and "
        f"counts as crashed (log: logs/ar-tp1.log). The test's verdict stands: it measured while the "
        f"server answered"]
    assert reported == [error] and server.failure is error


def test_a_server_alive_after_its_test_is_left_as_it_is():
    reported = []
    server = LiveServer(spec=ServerSpec("embedded", "ar"), url="http://127.0.0.1:9", log_path=None,
                        check=lambda: None, report_failure=reported.append)
    server.check_after_test()
    assert reported == [] and server.failure is None


@pytest.mark.parametrize("sent, text, ids", [
    ([event("He", [1], 1), event("Hello", [1, 2], 2)], "Hello", [1, 2]),  # cumulative, SGLang's default
    ([event("He", [1], 1), event("llo", [2], 2)], "Hello", [1, 2]),  # deltas, joined
], ids=["cumulative", "deltas"])
def test_generate_returns_the_whole_answer(sent, text, ids):
    stub = StreamStub([*sent, sse(b"[DONE]")])
    try:
        server = LiveServer(spec=ServerSpec("embedded", "ar"), url=stub.url, log_path=None,
                            check=lambda: None, stall_timeout=5.0)
        body = server.generate("Hello", max_new_tokens=2, temperature=0.0)
    finally:
        stub.close()
    assert (body["text"], body["output_ids"], body["meta_info"]) == (text, ids, {"completion_tokens": 2})
    assert stub.bodies == [{"text": "Hello", "sampling_params": {"max_new_tokens": 2, "temperature": 0.0},
                            "stream": True}]


def test_generate_says_the_servers_error_event():
    stub = StreamStub([sse({"error": {"message": "The engine refused it"}}), sse(b"[DONE]")])
    try:
        server = LiveServer(spec=ServerSpec("embedded", "ar"), url=stub.url, log_path=None, check=lambda: None)
        with pytest.raises(pytest.fail.Exception, match=r"^server ar-tp1: /generate failed: The engine refused it$"):
            server.generate("Hello")
    finally:
        stub.close()


ABORT_STATUS = {"type": "abort", "status_code": 400, "err_type": "BadRequestError",
                "message": "Input length (61 tokens) exceeds the maximum allowed length (58 tokens). "
                           "Use a shorter input or enable --allow-auto-truncate."}


@pytest.mark.parametrize("reason", [ABORT_STATUS, {"type": "abort", "message": "Aborted", "status_code": None,
                                                   "err_type": None}], ids=["scheduler-refusal", "abort-request"])
def test_generate_fails_a_stream_that_finished_with_an_abort(reason):
    """A prompt SGLang's scheduler refuses streams one event whose finish_reason is an abort (HTTP
    200), where the same request unstreamed is its HTTP 400: generate() returned that event's body
    as an answer, one token long. It now fails with SGLang's message, as it fails an abort without
    a status (/abort_request), whose output was cut short."""
    meta = {"finish_reason": reason, "prompt_tokens": 1, "completion_tokens": 1}
    stub = StreamStub([sse({"text": ":", "output_ids": [58], "meta_info": meta}), sse(b"[DONE]")])
    try:
        server = LiveServer(spec=ServerSpec("embedded", "ar"), url=stub.url, log_path=None, check=lambda: None)
        with pytest.raises(pytest.fail.Exception) as info:
            server.generate("a" * 60)
    finally:
        stub.close()
    assert str(info.value) == f"server ar-tp1: /generate failed: request aborted by the server: {reason['message']}"


def test_outputs_that_arrived_whole_at_once_are_said(monkeypatch):
    """A request whose output came in one read has its TTFT span the whole generation and no
    TPOT: the run says so where the user reads it, rather than showing the figures as they are."""
    records = tuple(
        RequestRecord(index=i, status=200, finish_reason="length", prompt_tokens=10, completion_tokens=64,
                      ttft_ms=31.0, e2e_ms=31.5, chunks=64, whole_at_once=i < 3)
        for i in range(8))
    result = WorkloadResult("chat", "http://127.0.0.1:1", 1, records, wall_s=0.3)
    monkeypatch.setattr("pytest_specdec.live.client.run_workload", lambda *args, **kwargs: result)
    server = LiveServer(spec=ServerSpec("embedded", "ar"), url="http://127.0.0.1:1", log_path=None,
                        check=lambda: None, token_counter=None, cache_flush=Flushed())
    with pytest.warns(UserWarning, match=r"ar-tp1: workload 'chat': 3 of 8 requests received their whole "
                                         r"output in the network read that brought their first token, so their TTFT "
                                         r"spans the whole generation and TPOT is measured over the others: the client or the "
                                         r"server was starved of CPU"):
        measurement = server.run(Workload(name="chat", prompts=(Prompt("p"),) * 8, max_new_tokens=64))
    assert measurement.whole_at_once == 3 and len(measurement.tpot_samples) == 5


def test_a_measurement_records_the_gpus_its_server_ran_on():
    """results.json said nothing of where a slow configuration ran: a worker's Result now carries
    its server's GPUs (by index and name) in its details, to the controller's results.json."""
    from types import SimpleNamespace

    from pytest_specdec.recording import Recorder

    class Measured:  # what server.run returns, its figures aside
        workload = "chat"

        def metrics(self, deterministic_accept=False):
            return []

        def to_dict(self):
            return {}

    server = SimpleNamespace(run=lambda workload: Measured(), last_result=None,
                             placement="GPUs 4,5,6,7 (NVIDIA H200)")
    recorder = Recorder(item=None)
    recorder.run(server, SimpleNamespace(temperature=0.0))
    assert recorder.info["gpus"] == "GPUs 4,5,6,7 (NVIDIA H200)"
    server.placement = ""  # a CPU host: nothing to say
    recorder = Recorder(item=None)
    recorder.run(server, SimpleNamespace(temperature=0.0))
    assert "gpus" not in recorder.info


# ------------------------------------------------------------------ the guards around a workload

DIED = ServerError("ar-tp1", "died", "CUDA error: an illegal instruction was encountered",
                   log_path=Path("logs/ar-tp1.log"))


def guarded(monkeypatch, records, *, check=None, **fields) -> tuple[LiveServer, list[ServerError]]:
    """A server whose workload run returns `records` (no server runs) and whose liveness check
    is `check`; the failures it reports."""
    result = WorkloadResult("chat", "http://127.0.0.1:1", 1, tuple(records), wall_s=0.1)
    monkeypatch.setattr("pytest_specdec.live.client.run_workload", lambda *args, **kwargs: result)
    reported: list[ServerError] = []
    fields.setdefault("warmup_requests", 0)
    server = LiveServer(spec=ServerSpec("embedded", "ar"), url="http://127.0.0.1:1", log_path=None,
                        check=check or (lambda: None), token_counter=None, cache_flush=Flushed(),
                        report_failure=reported.append, **fields)
    return server, reported


def died():
    raise DIED


def answer(i: int = 0, tokens: int = 8, **kw) -> RequestRecord:
    kw.setdefault("status", 200)
    return RequestRecord(index=i, finish_reason="length", prompt_tokens=10, completion_tokens=tokens,
                         ttft_ms=5.0 if tokens else None, e2e_ms=20.0, chunks=tokens, **kw)


ONE = Workload(name="chat", prompts=(Prompt("p"),), max_new_tokens=8)


def test_zero_tokens_from_a_server_that_died_say_its_death(monkeypatch):
    """A run that fails its guards is followed by a liveness check: a server that died under it
    is the cause, said from its log, and reported failed, not "zero completion tokens"."""
    server, reported = guarded(monkeypatch, [answer(tokens=0)], check=died)
    with pytest.raises(pytest.fail.Exception) as info:
        server.run(ONE)
    assert str(info.value) == str(DIED) and reported == [DIED]


def test_a_server_that_died_as_its_workload_ended_fails_the_test(monkeypatch):
    """A complete run is checked once more after it: a server gone by then is no green test."""
    server, reported = guarded(monkeypatch, [answer()], check=died)
    with pytest.raises(pytest.fail.Exception) as info:
        server.run(ONE)
    assert str(info.value) == str(DIED) and reported == [DIED]


def test_a_failed_warm_up_request_on_a_live_server_says_it_failed(monkeypatch):
    """Its HTTP error is the failure, not the zero tokens that came with it."""
    server, _ = guarded(monkeypatch, [answer(tokens=0, status=500, error="HTTP 500: boom")], warmup_requests=1)
    with pytest.raises(pytest.fail.Exception) as info:
        server.run(ONE)
    assert str(info.value).startswith("server ar-tp1: workload 'chat', during its warm-up (1 untimed request "
                                      "before it is measured): 1 of 1 requests failed against"), str(info.value)


def test_a_stall_is_diagnosed_by_the_servers_own_probe(monkeypatch):
    """The probe's verdict (here: the server hangs) is the failure and what is reported."""
    def stalled(*args, **kwargs):
        raise client.WorkloadStalled(2.0, 1, 0, 1)

    monkeypatch.setattr("pytest_specdec.live.client.run_workload", stalled)
    hang = ServerError("ar-tp1", "hang", "watchdog timeout")
    asked: list[str] = []
    reported: list[ServerError] = []
    server = LiveServer(spec=ServerSpec("embedded", "ar"), url="http://127.0.0.1:1", log_path=None,
                        check=lambda: None, token_counter=None, warmup_requests=0, stall_timeout=1.0,
                        probe_stall=lambda stall: asked.append(stall) or hang, report_failure=reported.append)
    with pytest.raises(pytest.fail.Exception) as info:
        server.run(ONE)
    assert str(info.value) == str(hang) and reported == [hang] and server.failure is hang
    assert asked == ["no token for 2.0s while 1 request was in flight (0 of 1 requests done); raise "
                     "--specdec-stall-timeout if the server is just slow"]


@pytest.mark.parametrize("raised", [
    client.GenerateFailed("failed: stream cut off mid-response", answered=False),
    asyncio.TimeoutError(),
    aiohttp.ClientConnectionError("connection reset"),
    ConnectionRefusedError("refused"),
], ids=["cut-off", "timeout", "client-error", "os-error"])
def test_generate_that_got_no_answer_says_the_servers_death(monkeypatch, raised):
    def fails(*args, **kwargs):
        raise raised

    monkeypatch.setattr("pytest_specdec.live.client.generate_body", fails)
    server, reported = guarded(monkeypatch, [], check=died)
    with pytest.raises(pytest.fail.Exception) as info:
        server.generate("Hello")
    assert str(info.value) == str(DIED) and reported == [DIED]


def test_generate_refused_by_a_live_answer_is_not_a_liveness_question(monkeypatch):
    def refused(*args, **kwargs):
        raise client.GenerateFailed("failed: HTTP 400 Bad Request: no")

    monkeypatch.setattr("pytest_specdec.live.client.generate_body", refused)
    server, reported = guarded(monkeypatch, [], check=died)
    with pytest.raises(pytest.fail.Exception, match=r"^server ar-tp1: /generate failed: HTTP 400 Bad Request: no$"):
        server.generate("Hello")
    assert reported == []


@pytest.mark.parametrize("stall_timeout, cap", [(None, 120.0), (5.0, None)])
def test_generate_is_capped_only_where_no_stall_timeout_bounds_it(monkeypatch, stall_timeout, cap):
    asked = {}

    def body(url, payload, **kwargs):
        asked.update(kwargs)
        return {"text": "x"}

    monkeypatch.setattr("pytest_specdec.live.client.generate_body", body)
    server, _ = guarded(monkeypatch, [], stall_timeout=stall_timeout)
    assert server.generate("Hello") == {"text": "x"}
    assert asked["timeout_s"] == cap


def test_a_context_length_that_cannot_be_read_from_a_dead_server_says_its_death(monkeypatch):
    def unreadable(*args, **kwargs):
        raise RuntimeError("connection refused")

    monkeypatch.setattr("pytest_specdec.live.client.fetch_context_length", unreadable)
    server, reported = guarded(monkeypatch, [], check=died)
    server.token_counter = lambda text: 1
    with pytest.raises(pytest.fail.Exception) as info:
        server.workload(ONE)
    assert str(info.value) == str(DIED) and reported == [DIED]
