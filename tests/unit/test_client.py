"""client: streaming /generate against an in-test fake SGLang server on loopback.

The fake follows SGLang's wire format: `data: {json}` events with cumulative text and
meta_info in every event, `data: [DONE]` at the end, spec_* keys only when something was
verified, and mid-stream errors as `data: {"error": {"message": ...}}` under HTTP 200.
The prompt text selects a behaviour ("mode:<name>"), so one server covers every case.
No wall-clock assertions: timings are only checked for order and presence.
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
import threading

import aiohttp
import pytest
from aiohttp import web

from pytest_specdec.client import (
    ServerQueryError,
    WorkloadStalled,
    context_length_from,
    fetch_context_length,
    fetch_server_info,
    generate_one,
    run_workload,
    run_workload_async,
    scrape_metrics,
)
from pytest_specdec.live import LiveServer
from pytest_specdec.metrics import MeasurementError, measure
from pytest_specdec.servers.spec import ServerSpec
from pytest_specdec.workloads import Prompt, Workload

TOKENS_PER_STEP = 3  # the fake "accepts" 3 tokens per verify step


class FakeSGLang:
    """A tiny SGLang-alike. `state` records requests and the peak number in flight."""

    def __init__(self, *, models=None, server_info=None, metrics_text=None):
        self.payloads: list[dict] = []
        self.content_types: list[str | None] = []
        self.in_flight = 0
        self.peak_in_flight = 0
        self.models = models
        self.server_info = server_info
        self.metrics_text = metrics_text

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/generate", self.generate)
        app.router.add_get("/v1/models", self.get_json("models"))
        app.router.add_get("/server_info", self.get_json("server_info"))
        app.router.add_get("/get_server_info", self.get_json("server_info"))
        app.router.add_get("/metrics", self.metrics)
        return app

    def get_json(self, attr):
        async def handler(request):
            value = getattr(self, attr)
            if value is None:
                return web.Response(status=404, text="Not Found")
            return web.json_response(value)
        return handler

    async def metrics(self, request):
        if self.metrics_text is None:
            return web.Response(status=404, text="Not Found")
        return web.Response(text=self.metrics_text)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        payload = await request.json()
        self.payloads.append(payload)
        self.content_types.append(request.headers.get("Content-Type"))
        text = payload["text"]
        mode = text.split("mode:", 1)[1].split()[0] if "mode:" in text else "ok"
        n = payload["sampling_params"]["max_new_tokens"]
        if mode == "http400":
            return web.json_response({"object": "error", "message": "Unknown field: 'bogus'", "type": "Bad Request",
                                      "code": 400}, status=400)
        if mode == "http500":
            return web.Response(status=500, text="Internal Server Error")
        if mode == "busy":  # a router or proxy in front of the server, busy
            return web.Response(status=503, text="Service Unavailable", headers={"Retry-After": "2"})
        if mode == "ratelimit":
            return web.json_response({"error": {"message": "rate limit exceeded"}}, status=429,
                                     headers={"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"})
        if mode == "not_streamed":  # a server that ignores stream: true
            return web.json_response({"text": "xx", "meta_info": {"completion_tokens": 2}})
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            if mode == "slow":
                await asyncio.sleep(5)
            if mode == "linger":  # a long prefill before the first token
                await asyncio.sleep(1.5)
            emitted = 0
            verify = 0
            last = 100 * n if mode == "overrun" else n  # overrun: a server that ignores max_new_tokens
            while emitted < last:
                step = 1 if emitted == 0 else min(TOKENS_PER_STEP, last - emitted)  # prefill gives one token
                if mode == "overshoot":  # an older SGLang's last verify step: its whole block is sent
                    step = 1 if emitted == 0 else TOKENS_PER_STEP
                if emitted > 0:
                    verify += 1
                emitted += step
                meta = {"id": "r", "prompt_tokens": len(text), "completion_tokens": emitted, "cached_tokens": 0,
                        "finish_reason": None}
                if emitted >= last:
                    meta["finish_reason"] = {"type": "abort", "message": "too long"} if mode == "abort" \
                        else {"type": "length", "length": n}
                    meta["e2e_latency"] = 0.01
                if verify and mode != "nospec" and emitted >= last:  # SGLang: on the last answer only
                    meta.update(spec_verify_ct=verify, spec_accept_length=emitted / verify,
                                spec_accept_rate=0.5, spec_num_correct_drafts=verify * (TOKENS_PER_STEP - 1),
                                spec_num_proposed_drafts=verify * 15)
                if payload.get("return_logprob"):  # SGLang's shape: token i's first choice leads by 0.5 + i
                    meta["output_top_logprobs"] = [[[-0.25, i, None], [-0.75 - i, i + 1, None]]
                                                   for i in range(emitted - step if mode == "incremental" else 0,
                                                                  emitted)]
                event = {"text": "x" * emitted, "output_ids": list(range(emitted)), "meta_info": meta}
                if mode == "incremental":  # SGLang's --incremental-streaming-output: the step's part alone
                    start = emitted - step
                    event.update(text="".join(chr(97 + i % 26) for i in range(start, emitted)),
                                 output_ids=list(range(start, emitted)))
                await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                if mode == "cut" and emitted > 1:
                    request.transport.close()
                    return resp
                if mode == "freeze" and emitted > 1:
                    await asyncio.sleep(60)  # a frozen scheduler: the stream stays open, silent
                if mode == "keepalive" and emitted > 1:
                    for _ in range(600):  # a frozen scheduler behind a proxy that keeps the stream warm
                        await resp.write(b": keep-alive\n\n")
                        await asyncio.sleep(0.1)
                if mode == "repeat" and emitted > 1:
                    for _ in range(600):  # a frozen scheduler whose last event is sent again and again
                        await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                        await asyncio.sleep(0.1)
                if mode == "midstream_error" and emitted > 1:
                    await resp.write(b'data: {"error": {"message": "CUDA out of memory"}}\n\n')
                    break
                await asyncio.sleep(0.1 if mode == "trickle" else 0.05 if mode == "overrun" else 0)
            if mode == "linger":  # and a stream that ends 1.5 s after its last token, with no [DONE]
                await asyncio.sleep(1.5)
            if mode not in ("no_done", "linger"):
                await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        finally:
            self.in_flight -= 1


class ServerThread:
    """Runs an aiohttp app on 127.0.0.1:<free port> in a background event loop."""

    def __init__(self, app: web.Application):
        self.loop = asyncio.new_event_loop()
        self.app = app
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.url = ""

    def _run(self):
        asyncio.set_event_loop(self.loop)
        # handler_cancellation: a handler whose client gave up (timeout test) stops at once
        runner = web.AppRunner(self.app, shutdown_timeout=0.2, handler_cancellation=True)
        self.loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        port = site._server.sockets[0].getsockname()[1]  # noqa: SLF001 - aiohttp has no public accessor
        self.url = f"http://127.0.0.1:{port}"
        self.runner = runner
        self.ready.set()
        self.loop.run_forever()
        self.loop.close()

    def __enter__(self):
        self.thread.start()
        assert self.ready.wait(10)
        return self

    def __exit__(self, *exc):
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def fake():
    server = FakeSGLang(
        models={"object": "list", "data": [{"id": "tiny", "object": "model", "max_model_len": 4096}]},
        server_info={"context_length": None, "max_req_input_len": 2047, "max_total_num_tokens": 100000},
        metrics_text='sglang:spec_accept_length{model_name="tiny"} 3.0\n',
    )
    with ServerThread(server.app()) as thread:
        server.url = thread.url
        yield server


def workload(*texts, n=10, concurrency=2) -> Workload:
    return Workload(name="t", prompts=tuple(Prompt(t) for t in texts), max_new_tokens=n, concurrency=concurrency)


# ------------------------------------------------------------------ generation


def test_streaming_records_tokens_timings_and_spec_fields(fake):
    res = run_workload(fake.url, workload("hello", "world", n=10))
    assert fake.content_types == ["application/json"] * 2  # SGLang's FastAPI parses nothing else as JSON
    assert res.workload == "t" and res.concurrency == 2 and res.wall_s > 0
    assert [r.index for r in res.records] == [0, 1]
    for r in res.records:
        assert r.ok and r.status == 200 and r.error is None
        assert r.completion_tokens == 10 and r.prompt_tokens == 5
        assert r.finish_reason == "length"
        assert r.ttft_ms is not None and 0 < r.ttft_ms <= r.e2e_ms
        # the fake writes its events back to back: they may reach the client in one read
        assert (r.tpot_ms is None) == r.whole_at_once and (r.tpot_ms is None or r.tpot_ms >= 0)
        assert r.chunks == 4  # 1 + 3 + 3 + 3
        assert r.spec_verify_ct == 3 and r.spec_accept_length == pytest.approx(10 / 3)
        assert r.spec_num_correct_drafts == 6 and r.spec_num_proposed_drafts == 45
        assert r.server_e2e_latency_s == 0.01
        assert r.text == "x" * 10
    m = measure(res, method="ddtree")
    assert m.accept_length == pytest.approx(20 / 6)
    assert m.completion_tokens == 20


def test_request_payload_is_sglang_native(fake):
    w = Workload(name="t", prompts=(Prompt("a"), Prompt("b", max_new_tokens=4)), max_new_tokens=6,
                 temperature=0.0, extra_sampling={"top_k": 1})
    run_workload(fake.url, w)
    by_text = {p["text"]: p for p in fake.payloads}
    assert set(by_text["a"]) == {"text", "sampling_params", "stream"}
    assert by_text["a"]["stream"] is True
    assert by_text["a"]["sampling_params"] == {"max_new_tokens": 6, "temperature": 0.0, "ignore_eos": True, "top_k": 1}
    assert by_text["b"]["sampling_params"]["max_new_tokens"] == 4


def test_concurrency_is_respected(fake):
    run_workload(fake.url, workload(*[f"p{i}" for i in range(12)], n=30, concurrency=3))
    assert len(fake.payloads) == 12
    assert 1 <= fake.peak_in_flight <= 3


def test_a_stream_of_deltas_is_joined_into_the_whole_output(fake):
    """SGLang's --incremental-streaming-output: each event holds its step's text and ids alone,
    while meta_info's counts stay cumulative."""
    r = run_workload(fake.url, workload("mode:incremental", n=10)).records[0]
    assert r.ok and r.completion_tokens == 10 and r.chunks == 4
    assert r.output_ids == tuple(range(10)) and r.text == "abcdefghij"
    assert r.spec_verify_ct == 3
    whole = run_workload(fake.url, workload("cumulative", n=10)).records[0]
    assert whole.output_ids == tuple(range(10)) and whole.text == "x" * 10


@pytest.mark.parametrize("mode", ["cumulative", "mode:incremental"])
def test_a_reference_reads_each_tokens_margin_from_its_top_logprobs(fake, mode):
    """Asked for top logprobs, each output token's lead of the first choice over the second is
    kept (joined from the deltas too); a request that asked none keeps none."""
    asked = run_workload(fake.url, workload(mode, n=10), top_logprobs=2)
    assert fake.payloads[-1]["return_logprob"] is True and fake.payloads[-1]["top_logprobs_num"] == 2
    assert asked.records[0].margins == pytest.approx(tuple(0.5 + i for i in range(10)))
    plain = run_workload(fake.url, workload(mode, n=10))
    assert "return_logprob" not in fake.payloads[-1] and plain.records[0].margins is None


def test_keep_text_false_drops_output_text(fake):
    res = run_workload(fake.url, workload("a", n=5), keep_text=False)
    assert res.records[0].text == "" and res.records[0].completion_tokens == 5


def test_spec_fields_absent_stay_none(fake):
    res = run_workload(fake.url, workload("mode:nospec", n=8))
    r = res.records[0]
    assert r.ok and r.completion_tokens == 8
    assert (r.spec_verify_ct, r.spec_accept_length, r.spec_num_correct_drafts) == (None, None, None)
    with pytest.raises(MeasurementError, match="speculative decoding is not active"):
        measure(res, method="dflash")
    assert measure(res, method="ar").accept_length is None


@pytest.mark.parametrize(
    "mode, status, match",
    [
        ("http400", 400, "HTTP 400: Unknown field: 'bogus'"),
        ("http500", 500, "HTTP 500: Internal Server Error$"),
        ("busy", 503, "^HTTP 503: Service Unavailable; it asked to be retried after 2 s \\(Retry-After\\), which "
                      "the run does not do, as the wait would count in the measured times: a router or proxy "
                      "in front of the server limits requests"),
        ("ratelimit", 429, "^HTTP 429: rate limit exceeded; it asked to be retried at Wed, 21 Oct 2026 07:28:00 "
                           "GMT \\(Retry-After\\), which the run does not do"),
        ("midstream_error", 200, "CUDA out of memory"),
        ("no_done", 200, "stream ended without 'data: \\[DONE\\]'"),
        ("not_streamed", 200, "answered with a body that is no event stream \\(no 'data:' lines; was the "
                              "request's stream: true ignored\\?\\): \\{\"text\": \"xx\""),
        ("abort", 200, "request aborted by the server: too long"),
    ],
)
def test_failures_become_records_with_status_and_message(fake, mode, status, match):
    res = run_workload(fake.url, workload("fine", f"mode:{mode}", n=7))
    good, bad = res.records
    assert good.ok
    assert not bad.ok and bad.status == status
    assert bad.error is not None
    assert re.search(match, bad.error), bad.error
    with pytest.raises(MeasurementError, match="1 of 2 requests failed"):
        measure(res)


def test_connection_cut_midstream_is_an_error(fake):
    """A stream cut off mid-body says so first, aiohttp's parser words ('Response payload is not
    completed: <TransferEncodingError ...>') only after."""
    res = run_workload(fake.url, workload("mode:cut", n=20))
    r = res.records[0]
    assert not r.ok and r.error.startswith("stream cut off mid-response (server closed the connection "
                                           "before the body ended: "), r.error


def test_generate_cut_off_mid_stream_says_so_as_a_workload_does(fake):
    """LiveServer.generate() said aiohttp's parser words alone ('/generate failed: Response payload
    is not completed: <TransferEncodingError ...>'), where a workload's request says what the
    server did: both now say it in one wording."""
    server = LiveServer(spec=ServerSpec("embedded", "ar"), url=fake.url, log_path=None, check=lambda: None,
                        stall_timeout=5.0)
    with pytest.raises(pytest.fail.Exception) as info:
        server.generate("mode:cut", max_new_tokens=20)
    assert str(info.value).startswith("server ar-tp1: /generate failed: stream cut off mid-response (server "
                                      "closed the connection before the body ended: "), str(info.value)
    record = run_workload(fake.url, workload("mode:cut", n=20)).records[0]
    assert str(info.value).split("/generate failed: ")[1].split(": ")[0] == record.error.split(": ")[0]


def test_a_stream_past_max_new_tokens_is_an_error(fake):
    """A server that ignores max_new_tokens and keeps streaming was never red: the stall watchdog
    hears tokens, and a moving stream has no time cap. SGLang finishes a request at the step that
    reaches max_new_tokens, so tokens after an event at the limit fail the request, and the stream
    is left there."""
    res = run_workload(fake.url, workload("fine", "mode:overrun", n=4), stall_timeout=5.0, timeout_s=30)
    good, bad = res.records
    assert good.ok
    assert bad.error == ("stream went past max_new_tokens: an event states 7 completion tokens where the "
                         "request asked for at most 4, after one that stated 4 (SGLang finishes a request "
                         "at the step that reaches max_new_tokens): the server ignores the limit; check that "
                         "nothing between the run and the server rewrites sampling_params")
    assert bad.e2e_ms < 3000  # left at the first event past the limit, not at the stream's end (7 s)
    server = LiveServer(spec=ServerSpec("embedded", "ar"), url=fake.url, log_path=None, check=lambda: None,
                        stall_timeout=5.0)
    with pytest.raises(pytest.fail.Exception) as info:
        server.generate("mode:overrun", max_new_tokens=4)
    assert str(info.value) == f"server ar-tp1: /generate failed: {bad.error}"


def test_generate_refused_with_retry_after_says_what_it_asked_and_why_it_does_not_wait(fake):
    server = LiveServer(spec=ServerSpec("embedded", "ar"), url=fake.url, log_path=None, check=lambda: None)
    with pytest.raises(pytest.fail.Exception) as info:
        server.generate("mode:busy", max_new_tokens=4)
    assert str(info.value).startswith(
        "server ar-tp1: /generate failed: HTTP 503 Service Unavailable: Service Unavailable; it asked to be "
        "retried after 2 s (Retry-After), which the run does not do"), str(info.value)


def test_a_last_verify_step_past_max_new_tokens_is_no_error(fake):
    """SGLang releases before finished_len sent the whole verified block of the step that reached
    max_new_tokens (its length check runs after the block): that one step may pass the limit."""
    res = run_workload(fake.url, workload("mode:overshoot", n=6))
    assert res.records[0].ok and res.records[0].completion_tokens == 7, res.records[0]


def test_timeout_is_an_error_not_a_hang(fake):
    res = run_workload(fake.url, workload("mode:slow", n=3), timeout_s=0.3)
    assert res.records[0].error == "timed out after 0.3 s"


def test_a_frozen_stream_stops_the_workload_after_the_stall_timeout(fake):
    with pytest.raises(WorkloadStalled) as info:
        run_workload(fake.url, workload("a", "mode:freeze", "c", n=10, concurrency=1),
                     timeout_s=30, stall_timeout=0.5)
    stall = info.value
    assert (stall.in_flight, stall.done, stall.total) == (1, 1, 3)
    assert stall.stalled_s > 0.5
    assert str(stall).startswith("no token for ") and "while 1 request was in flight" in str(stall)


def test_keep_alives_without_events_are_a_stall(fake):
    """SSE comments (a proxy's keep-alives) carry no token: they must not reset the stall clock,
    or a frozen server behind such a proxy holds the workload until each request's own timeout."""
    with pytest.raises(WorkloadStalled) as info:
        run_workload(fake.url, workload("mode:keepalive", n=10, concurrency=1),
                     timeout_s=30, stall_timeout=0.5)
    assert (info.value.in_flight, info.value.done) == (1, 0)


def test_an_event_repeated_without_new_tokens_is_a_stall(fake):
    """A data event that states no more completion tokens than the last (a server or proxy that
    keeps the stream warm by sending its last event again) carries no token: the watchdog's 'no
    token for' must hold, or a frozen scheduler behind it holds the run for good."""
    with pytest.raises(WorkloadStalled) as info:
        run_workload(fake.url, workload("mode:repeat", n=10, concurrency=1), timeout_s=5, stall_timeout=0.5)
    assert (info.value.in_flight, info.value.done) == (1, 0)


def test_a_slow_but_moving_stream_is_no_stall(fake):
    # events every 0.1 s for about two seconds a request: each one resets the 1 s watchdog (which
    # leaves a loaded machine 0.9 s of slack between events)
    res = run_workload(fake.url, workload("mode:trickle", "mode:trickle", n=60, concurrency=1),
                       stall_timeout=1.0)
    assert all(r.ok and r.completion_tokens == 60 for r in res.records)



def test_a_finished_request_is_heard_so_the_next_ones_prefill_has_its_own_stall_timeout(fake):
    """One at a time, each request silent 1.5 s before its first token and 1.5 s after its last,
    its stream then cut with no [DONE] (which would be heard): a request's end is heard, however it
    ended, so no silence reaches the 2.5 s stall timeout (the two together would; a loaded machine
    only lengthens them) and each request's own failure is what the run reports, not a stall that
    stops the server."""
    res = run_workload(fake.url, workload("mode:linger", "mode:linger", n=4, concurrency=1), stall_timeout=2.5)
    assert [(r.completion_tokens, "[DONE]" in (r.error or "")) for r in res.records] == [(4, True), (4, True)]


def test_a_silence_is_said_once_and_only_once_it_has_lasted():
    """`on_quiet` is a progress line: once per silence, never for a pause shorter than STALL_QUIET_S."""
    import pytest_specdec.client as client_module

    async def heard_of(silent_for: float) -> list[tuple]:
        watch = client_module._StreamWatch()
        watch.in_flight = 2
        watch.last_event -= silent_for
        said: list[tuple] = []
        with pytest.raises(asyncio.TimeoutError):  # a stall timeout far off: the watchdog polls on
            await asyncio.wait_for(watch.watch(60.0, 4, lambda *told: said.append(told)), 0.8)
        return said

    assert asyncio.run(heard_of(0.0)) == []
    said = asyncio.run(heard_of(client_module.STALL_QUIET_S + 1))
    assert len(said) == 1 and said[0][2] == 2 and said[0][0] >= client_module.STALL_QUIET_S + 1


@pytest.mark.parametrize("stall_timeout", [None, 5.0], ids=["no-stall-timeout", "stall-timeout"])
def test_a_running_workload_says_how_far_it_is_and_never_after_it_ends(fake, monkeypatch, stall_timeout):
    """Nothing was said while the measured requests ran (minutes on a GPU): `on_progress` now
    hears, from a timer, the requests done, the tokens streamed so far and the time, first after
    PROGRESS_FIRST_S, then each PROGRESS_EVERY_S, and not once the workload has ended, though
    the event loop runs on (a caller's own, pytest-asyncio's)."""
    import pytest_specdec.client as client_module

    monkeypatch.setattr(client_module, "PROGRESS_FIRST_S", 0.2)
    monkeypatch.setattr(client_module, "PROGRESS_EVERY_S", 0.3)
    calls: list[tuple[int, int, int, float]] = []
    # each request at least 0.4 s (four events 0.1 s apart), four one at a time: 1.6 s or more
    work = workload(*["mode:trickle"] * 4, n=9, concurrency=1)

    async def measured_then_idle():
        result = await run_workload_async(fake.url, work, stall_timeout=stall_timeout,
                                          on_progress=lambda *args: calls.append(args))
        said = len(calls)
        assert asyncio.all_tasks() == {asyncio.current_task()}  # its timer is gone, not only silent
        await asyncio.sleep(0.7)  # two more intervals of the same loop
        return result, said

    result, said = asyncio.run(measured_then_idle())
    assert all(r.ok for r in result.records)
    assert len(calls) >= 2 and len(calls) == said, calls
    # one request at a time: the done ones' 9 tokens each, and the one in flight's so far
    assert all(total == 4 and done < total and 9 * done <= tokens <= 9 * (done + 1)
               for done, total, tokens, _ in calls), calls
    elapsed = [call[3] for call in calls]
    assert elapsed[0] >= 0.2 - 0.05 and elapsed[-1] <= result.wall_s, (elapsed, result.wall_s)
    assert all(later - earlier >= 0.3 - 0.05 for earlier, later in zip(elapsed, elapsed[1:])), elapsed


def test_a_progress_line_counts_the_tokens_still_streaming_and_each_request_once(monkeypatch):
    """A GPU workload of 8 long requests at concurrency 8 said "0 of 8 requests done, 0 tokens"
    until its end, which read like a stall while tokens streamed: the line counted the finished
    requests' tokens alone. It now counts the tokens streamed so far: a request in flight by its
    latest event, one that ended by its record alone (its stream's count not kept beside it), a
    failed one included; never more than the records hold in the end."""
    import pytest_specdec.client as client_module

    monkeypatch.setattr(client_module, "PROGRESS_FIRST_S", 0.05)
    monkeypatch.setattr(client_module, "PROGRESS_EVERY_S", 0.05)
    release = threading.Event()  # the held request ends once a line has counted its 7 tokens
    calls: list[tuple[int, int, int, float]] = []

    def said(*args):
        calls.append(args)
        if args[:3] == (2, 3, 4 + 4 + 7):  # quick's and broken's 4 each, once; held's 7 so far
            release.set()

    async def handler(request):
        text = (await request.json())["text"]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if text == "quick":
            await resp.write(b"".join(_events(4)))
        elif text == "broken":  # 4 tokens, then SGLang's mid-stream error
            await resp.write(b"".join(_events(10)[:4]) + b'data: {"error": {"message": "CUDA out of memory"}}\n\n')
        else:
            events = _events(10)
            await resp.write(events[0] + events[3] + events[6])
            await asyncio.get_running_loop().run_in_executor(None, release.wait, 5)
            await resp.write(events[9])
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/generate", handler)
    with ServerThread(app) as thread:
        result = run_workload(thread.url, workload("quick", "broken", "held", n=10, concurrency=3), on_progress=said)
    assert [(r.ok, r.completion_tokens) for r in result.records] == [(True, 4), (False, 4), (True, 10)]
    assert (2, 3, 15) in [call[:3] for call in calls], calls
    tokens = [call[2] for call in calls]
    assert tokens == sorted(tokens) and tokens[-1] <= 18, calls  # never back, never past the records' 18


def test_a_workload_shorter_than_the_first_interval_says_nothing(fake):
    """Most CPU workloads end within PROGRESS_FIRST_S (10 s): they print no progress line."""
    calls = []
    run_workload(fake.url, workload("a", "b", "c", n=6), on_progress=lambda *args: calls.append(args))
    assert calls == []


def test_a_progress_callback_that_fails_fails_the_workload_with_its_error(fake, monkeypatch):
    """A callback's bug surfaces when the workload ends, not as progress lines that stop in silence."""
    import pytest_specdec.client as client_module

    monkeypatch.setattr(client_module, "PROGRESS_FIRST_S", 0.1)

    def broken(*args):
        raise RuntimeError("no terminal")

    with pytest.raises(RuntimeError, match="no terminal"):
        run_workload(fake.url, workload("mode:trickle", "mode:trickle", n=9, concurrency=1), on_progress=broken)


def test_connection_refused_is_an_error_with_status_zero():
    res = run_workload("http://127.0.0.1:9", workload("x", n=3))
    r = res.records[0]
    assert r.status == 0 and r.error and "Client" in r.error
    with pytest.raises(MeasurementError, match="HTTP no response"):
        measure(res)


def test_on_record_callback_sees_every_request(fake):
    seen = []
    run_workload(fake.url, workload("a", "b", "c", n=4), on_record=lambda r: seen.append(r.index))
    assert sorted(seen) == [0, 1, 2]


def test_run_workload_works_inside_a_running_event_loop(fake):
    async def inner():
        # a sync call from async code (pytest-asyncio users) must not fail with "loop is running"
        return run_workload(fake.url, workload("a", n=4))

    res = asyncio.run(inner())
    assert res.records[0].completion_tokens == 4


def test_run_workload_async_with_caller_session(fake):
    async def go():
        async with aiohttp.ClientSession() as session:
            res = await run_workload_async(fake.url, workload("a", n=4), session=session)
            assert not session.closed
            return res

    assert asyncio.run(go()).records[0].ok


def test_sse_parsing_survives_arbitrary_chunk_boundaries():
    """Events split across TCP reads (and several events per read) parse the same."""
    events = []
    for k in (1, 4, 7):
        meta = {"completion_tokens": k, "prompt_tokens": 2, "finish_reason": {"type": "length"} if k == 7 else None,
                "spec_verify_ct": 2}
        events.append(b"data: " + json.dumps({"text": "y" * k, "meta_info": meta}).encode() + b"\n\n")
    body = b": keep-alive comment\n\n" + b"".join(events) + b"data: [DONE]\n\n"

    async def handler(request):
        resp = web.StreamResponse()
        await resp.prepare(request)
        for i in range(0, len(body), 5):  # 5-byte writes
            await resp.write(body[i:i + 5])
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/generate", handler)
    with ServerThread(app) as thread:
        r = run_workload(thread.url, workload("z", n=7)).records[0]
    assert r.ok, r.error
    assert (r.completion_tokens, r.chunks, r.finish_reason, r.spec_verify_ct, r.text) == (7, 3, "length", 2, "y" * 7)


def _events(n: int) -> list[bytes]:
    """A cumulative stream of `n` tokens, one event a token, as SGLang sends it."""
    out = []
    for k in range(1, n + 1):
        meta = {"completion_tokens": k, "prompt_tokens": 2,
                "finish_reason": {"type": "length"} if k == n else None}
        out.append(b"data: " + json.dumps({"text": "y" * k, "meta_info": meta}).encode() + b"\n\n")
    return out


def test_an_output_that_arrives_in_one_read_has_no_tpot():
    """A stream whose every event arrives in the read that brings the first token (a starved
    client or server, a server that sends its output in one step): the events' arrival times
    differ by parsing alone, so a TPOT of them would be near zero and its TTFT the whole
    generation. It has no TPOT, and the measurement counts it."""
    body = b"".join(_events(8)) + b"data: [DONE]\n\n"

    async def handler(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(body)  # one write: one read on the client
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/generate", handler)
    with ServerThread(app) as thread:
        res = run_workload(thread.url, workload("z", n=8))
    r = res.records[0]
    assert r.ok, r.error
    assert (r.completion_tokens, r.chunks) == (8, 8)
    assert r.whole_at_once and r.ttft_ms is not None and r.tpot_ms is None
    m = measure(res)
    assert m.whole_at_once == 1 and m.tpot_ms is None and m.tpot_samples == ()
    assert "tpot_ms" not in {v.name for v in m.metrics()}


def test_tokens_read_after_the_first_one_have_a_tpot():
    """The server sends the rest only once the client has read the first token's event, so the
    tokens came in reads of their own: a TPOT, and no burst counted."""
    first_read = threading.Event()
    events = _events(4)

    async def handler(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(events[0])
        await asyncio.get_running_loop().run_in_executor(None, first_read.wait, 10)
        await resp.write(b"".join(events[1:]) + b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def go(url):
        async with aiohttp.ClientSession() as session:
            return await generate_one(session, url, {"text": "z", "stream": True}, on_event=first_read.set)

    app = web.Application()
    app.router.add_post("/generate", handler)
    with ServerThread(app) as thread:
        r = asyncio.run(go(thread.url))
    assert r.ok, r.error
    assert not r.whole_at_once and r.tpot_ms is not None and r.tpot_ms >= 0
    assert r.completion_tokens == 4


# ------------------------------------------------------------------ server information


def test_context_length_from_models_then_server_info(fake):
    assert fetch_context_length(fake.url) == 4096
    fake.models = None
    assert fetch_context_length(fake.url) == 2053  # the context SGLang derives max_req_input_len 2047 from
    fake.server_info = {"context_length": 8192}
    assert fetch_context_length(fake.url) == 8192
    fake.server_info = {"unrelated": 1}
    with pytest.raises(ServerQueryError, match="cannot find the context length") as info:
        fetch_context_length(fake.url)
    assert "/v1/models: GET" in str(info.value) and "HTTP 404" in str(info.value)


def test_context_length_from_pure_function():
    assert context_length_from({"data": [{"id": "m"}, {"id": "n", "max_model_len": 10}]}) == 10
    assert context_length_from({"data": []}, {"context_length": 77}) == 77
    assert context_length_from(None, None) is None
    assert context_length_from("garbage", ["x"]) is None


def test_server_info_and_metrics(fake):
    assert fetch_server_info(fake.url)["max_total_num_tokens"] == 100000
    samples = scrape_metrics(fake.url)
    assert samples["sglang:spec_accept_length"] == [({"model_name": "tiny"}, 3.0)]
    fake.metrics_text = None
    with pytest.raises(ServerQueryError, match="HTTP 404"):
        scrape_metrics(fake.url)


def test_a_workload_cancelled_from_outside_leaves_no_unretrieved_futures(fake):
    # Ctrl-C cancels the task running the workload; a future of it left with an unread
    # CancelledError makes asyncio print a traceback at exit
    async def cancel_mid_stream():
        loop = asyncio.get_running_loop()
        reported = []
        loop.set_exception_handler(lambda _loop, context: reported.append(context["message"]))
        task = asyncio.ensure_future(run_workload_async(
            fake.url, workload("mode:freeze", "b", n=10, concurrency=2), stall_timeout=30))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)
        gc.collect()
        return reported

    assert asyncio.run(cancel_mid_stream()) == []


def test_parallel_samples_each_with_its_own_count_are_no_overrun():
    """n above 1 interleaves the samples' events, each stating its own completion_tokens: a sample
    whose last verify step passes max_new_tokens after another sample's event at the limit failed
    as a server that ignores the limit, and a lagging sample's events were no progress."""
    async def handler(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for index, count in ((0, 1), (1, 1), (0, 4), (1, 3), (1, 6)):  # sample 1's last block passes 4
            meta = {"id": f"r{index}", "prompt_tokens": 1, "completion_tokens": count,
                    "finish_reason": {"type": "length", "length": 4} if count >= 4 else None}
            event = {"index": index, "text": "x" * count, "output_ids": list(range(count)), "meta_info": meta}
            await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/generate", handler)
    with ServerThread(app) as thread:
        w = Workload(name="t", prompts=(Prompt("a"),), max_new_tokens=4, extra_sampling={"n": 2})
        record = run_workload(thread.url, w, stall_timeout=5.0, timeout_s=30).records[0]
        assert "max_new_tokens" not in (record.error or ""), record.error
        server = LiveServer(spec=ServerSpec("embedded", "ar"), url=thread.url, log_path=None, check=lambda: None,
                            stall_timeout=5.0)
        bodies = server.generate("a", max_new_tokens=4, n=2)  # a body a sample, as SGLang answers n above 1
        assert [(b["index"], b["meta_info"]["completion_tokens"], b["text"]) for b in bodies] \
            == [(0, 4, "xxxx"), (1, 6, "xxxxxx")]


def test_a_request_of_several_samples_counts_each_samples_tokens_and_verify_steps():
    """A request of n 2 was recorded with one sample's meta_info (the last event's), so its tokens
    per second and accept length counted half its output. Now every sample's counts are summed, the
    accept length is SGLang's (all tokens over all verify steps), and TPOT is one stream's."""
    async def handler(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for index, count, verify, correct in ((0, 2, 1, 1), (1, 3, 1, 2), (0, 6, 2, 4), (1, 4, 2, 2)):
            meta = {"id": f"r{index}", "prompt_tokens": 5, "completion_tokens": count, "spec_verify_ct": verify,
                    "spec_num_correct_drafts": correct, "spec_num_proposed_drafts": 4 * verify,
                    "spec_accept_length": count / verify, "finish_reason": None}
            event = {"text": "ab"[index] * count, "output_ids": [index] * count, "meta_info": meta, "index": index}
            await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            await asyncio.sleep(0.01)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/generate", handler)
    with ServerThread(app) as thread:
        w = Workload(name="t", prompts=(Prompt("a"),), max_new_tokens=6, extra_sampling={"n": 2})
        result = run_workload(thread.url, w, timeout_s=30)
    (record,) = result.records
    assert record.ok, record.error
    assert (record.completion_tokens, record.sequence_tokens, record.spec_verify_ct) == (10, 6, 4)
    assert (record.spec_num_correct_drafts, record.spec_num_proposed_drafts) == (6, 16)
    assert (record.spec_accept_length, record.spec_accept_rate, record.prompt_tokens) == (2.5, 6 / 16, 5)
    assert (record.text, record.output_ids) == ("aaaaaa", (0,) * 6)  # the first sample's output
    assert record.tpot_ms == pytest.approx((record.e2e_ms - record.ttft_ms) / 5)
    measurement = measure(result, method="ddtree")
    assert (measurement.completion_tokens, measurement.accept_length) == (10, 2.5)
