"""A request naming a rid in flight, refused as SGLang's tokenizer manager refuses it (a 400 in its
words), on every route that takes a rid; the rid is free again once its request ended.

One request at a time, its steps slowed (--fault-slow-factor), so the first one is still running
when the others arrive.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import threading
from pathlib import Path
from types import SimpleNamespace

import aiohttp
import pytest

from pytest_specdec.engine.batch import DUPLICATE_RIDS, RID_LENGTH
from pytest_specdec.engine.inflight import DUPLICATE_RID, STREAM_ABORT_DELAY_S
from pytest_specdec.engine.openai_api import error_body
from pytest_specdec.engine.protocol import DP_RANK_RANGE, SESSION_PAIR, STRICT_THINKING, Refused

PROMPT = "The capital city of France is"
LONG = {"max_new_tokens": 1500, "ignore_eos": True}
SHORT = {"max_new_tokens": 2, "ignore_eos": True}
# a refused stream's abort 0.2 s after it, not 2 s: each streamed case waits for that abort
SHORT_ABORT_DELAY = (str(Path(__file__).with_name("short_abort_delay.py")),)


@pytest.fixture(scope="module")
def engine(module_engines):
    return module_engines("--method", "ar", "--max-batch", "1", "--context-length", "2048",
                          "--fault-slow-factor", "20", entry=SHORT_ABORT_DELAY)


@pytest.fixture
def busy(engine):
    """A request with rid "busy" running until the test ends; then aborted, and gone."""
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(answer=engine.post(
        "/generate", {"text": PROMPT, "sampling_params": LONG, "rid": "busy"})), daemon=True)
    thread.start()
    engine.wait_for_load(1, 0)
    box["thread"] = thread
    yield box
    engine.post("/abort_request", {"rid": "busy"})
    thread.join(30)
    engine.wait_for_load(0, 0)


def refused(rid: str) -> dict:
    return {"error": {"message": DUPLICATE_RID.format(rid)}}


def test_generate_naming_a_rid_in_flight_is_refused_and_runs_nothing(engine, busy):
    """The engine served it (a second request with the same rid)."""
    res = engine.post("/generate", {"text": PROMPT, "sampling_params": SHORT, "rid": "busy"})
    assert (res.status, res.json()) == (400, refused("busy"))
    engine.wait_for_load(1, 0)  # nothing queued behind the running one


@pytest.mark.parametrize("body", [{"text": PROMPT, "rid": "busy"}, {"text": [PROMPT, PROMPT], "rid": ["x", "busy"]}])
def test_a_streamed_generate_naming_a_rid_in_flight_is_an_error_event_then_aborts_it(engine, busy, body):
    """SGLang has started its stream when its tokenizer manager refuses; the stream's abort task
    then aborts the rids of the refused request still in flight, which are the other request's."""
    streamed = engine.post("/generate", {**body, "sampling_params": SHORT, "stream": True})
    assert streamed.status == 200
    events = [line[len("data: "):] for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert events == [json.dumps(Refused(DUPLICATE_RID.format("busy")).stream_event(), separators=(",", ":")), "[DONE]"]
    busy["thread"].join(30)
    meta = busy["answer"].json()["meta_info"]
    assert meta["finish_reason"] == {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
    assert meta["completion_tokens"] < LONG["max_new_tokens"]


def test_a_batch_naming_a_rid_in_flight_is_refused_whole(engine, busy):
    """Every rid of a batch is checked before any prompt runs."""
    res = engine.post("/generate", {"text": [PROMPT, PROMPT], "sampling_params": SHORT, "rid": ["mine", "busy"]})
    assert (res.status, res.json()) == (400, refused("busy"))
    engine.wait_for_load(1, 0)
    # "mine" never ran, so it is free; a string rid gives the prompts busy_0 and busy_1, none in flight
    box: dict = {}
    batch = threading.Thread(target=lambda: box.update(answer=engine.post("/generate", {
        "text": [PROMPT, PROMPT], "sampling_params": {"max_new_tokens": 0}, "rid": "busy"})), daemon=True)
    batch.start()
    engine.wait_for_load(1, 2)  # queued, not refused
    engine.post("/abort_request", {"rid": "busy"})  # a prefix: the batch's prompts too
    batch.join(30)
    assert box["answer"].status == 200, box["answer"].text
    assert [out["meta_info"]["id"] for out in box["answer"].json()] == ["busy_0", "busy_1"]
    res = engine.post("/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 0}, "rid": "mine"})
    assert res.status == 200, res.text


@pytest.mark.parametrize("path, body", [
    ("/v1/completions", {"prompt": PROMPT, "max_tokens": 2}),
    ("/v1/completions", {"prompt": [PROMPT, PROMPT], "max_tokens": 2, "rid": ["mine", "busy"]}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
])
@pytest.mark.parametrize("stream", [False, True])
def test_an_openai_request_naming_a_rid_in_flight_is_refused(engine, busy, path, body, stream):
    """SGLang's serving classes answer the refusal as their 400, streamed or not: a stream is
    started only after its first output."""
    res = engine.post(path, {"rid": "busy", **body, "stream": stream})
    assert (res.status, res.json()) == (400, error_body(Refused(DUPLICATE_RID.format("busy"))))
    engine.wait_for_load(1, 0)


@pytest.mark.parametrize("path, body", [
    ("/generate", {"text": "x" * 3000}),
    ("/generate", {"text": PROMPT, "lora_path": "adapter", "sampling_params": {"top_p": 0.5}}),
    ("/v1/completions", {"prompt": PROMPT, "max_tokens": 5000}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "model": "m:adapter", "top_p": 0.5}),
])
def test_a_rid_in_flight_is_refused_before_the_prompts_own_faults(engine, busy, path, body):
    """SGLang checks the rids in flight before a LoRA adapter and the tokenized prompt (the
    context, the sampling ranges), and it serves what the engine cannot honour: the engine
    checked them all first, so these got another refusal."""
    res = engine.post(path, {**body, "rid": "busy"})
    words = DUPLICATE_RID.format("busy")
    assert (res.status, res.json()) == (400, refused("busy") if path == "/generate" else error_body(Refused(words)))
    engine.wait_for_load(1, 0)


def test_a_refused_stream_aborts_the_rid_in_flight_whatever_else_it_got_wrong(engine, busy):
    streamed = engine.post("/generate", {"text": "x" * 3000, "rid": "busy", "stream": True})
    events = [line[len("data: "):] for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert events == [json.dumps(Refused(DUPLICATE_RID.format("busy")).stream_event(), separators=(",", ":")), "[DONE]"]
    busy["thread"].join(30)
    assert busy["answer"].json()["meta_info"]["finish_reason"]["message"] == "Aborted"


@pytest.mark.parametrize("body, words", [
    ({"text": PROMPT, "rid": "busy", "max_thinking_tokens": 8}, STRICT_THINKING),
    ({"text": [PROMPT, PROMPT], "rid": ["x", "busy"], "routed_dp_rank": 1}, DP_RANK_RANGE.format(1)),
    ({"text": PROMPT, "rid": "busy", "session_id": "s", "session_params": {}}, SESSION_PAIR),
    ({"text": [PROMPT, PROMPT], "rid": ["busy"]}, RID_LENGTH),
    ({"text": [PROMPT, PROMPT], "rid": ["busy", "busy"]}, DUPLICATE_RIDS.format(["busy"])),
])
def test_a_stream_refused_before_the_rids_in_flight_still_aborts_the_one_holding_its_rid(engine, busy, body, words):
    """SGLang refuses these with the rids given (or normalized) and before checking them; its
    stream's abort task then aborts the request holding one. The engine aborted only on a refusal
    of a rid in flight."""
    streamed = engine.post("/generate", {**body, "sampling_params": SHORT, "stream": True})
    events = [line[len("data: "):] for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert events == [json.dumps(Refused(words).stream_event(), separators=(",", ":")), "[DONE]"]
    busy["thread"].join(30)
    assert busy["answer"].json()["meta_info"]["finish_reason"]["message"] == "Aborted"


@pytest.mark.parametrize("path, body", [
    ("/generate", {"text": PROMPT, "sampling_params": SHORT}),
    ("/v1/completions", {"prompt": PROMPT, "max_tokens": 2}),
])
def test_a_rid_is_free_again_once_its_request_ended(engine, path, body):
    for stream in (False, True, False):
        res = engine.post(path, {**body, "rid": "again", "stream": stream})
        assert res.status == 200 and "error" not in res.text, res.text


class QuietScheduler:
    """A scheduler that runs nothing and keeps the aborts it is sent."""

    frozen = False
    last_output_at = 0.0
    decoder = SimpleNamespace(budget=0)

    def __init__(self) -> None:
        self.aborts: list[str] = []

    def submit(self, req) -> None:
        req.submitted = True

    def abort(self, rid: str, abort_all: bool = False) -> None:
        self.aborts.append(rid)


def test_a_refused_streams_abort_still_pending_at_shutdown_is_cancelled(monkeypatch):
    """The abort a refused stream schedules (STREAM_ABORT_DELAY_S later) outlived the server's
    shutdown: it could abort the rid's holder mid-shutdown, its handle left on the loop. The
    shutdown now cancels it: no abort reaches the scheduler once the server stopped."""
    from pytest_specdec.engine.faults import FaultPlan
    from pytest_specdec.engine.scheduler import Request
    from pytest_specdec.engine.server import EngineServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    scheduler = QuietScheduler()
    server = EngineServer(host="127.0.0.1", port=port, scheduler=scheduler, metrics=None, faults=FaultPlan(),
                          context_length=2048, server_args={}, model_info={}, served_model_name="m", version="t")
    server.in_flight.claim([Request([1], 8, rid="busy")])
    handles: list[asyncio.TimerHandle] = []

    async def scenario() -> str:
        loop = asyncio.get_running_loop()
        call_later = loop.call_later
        def spied(delay, *args, **kwargs):
            handle = call_later(delay, *args, **kwargs)
            if delay == STREAM_ABORT_DELAY_S:  # the refused stream's abort
                handles.append(handle)
            return handle

        monkeypatch.setattr(loop, "call_later", spied, raising=False)
        serving = asyncio.ensure_future(server._serve())
        async with aiohttp.ClientSession() as session:
            for _ in range(200):  # until it listens
                try:
                    async with session.post(f"http://127.0.0.1:{port}/generate",
                                            json={"text": PROMPT, "rid": "busy", "stream": True}) as res:
                        text = await res.text()
                    break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)
        signal.raise_signal(signal.SIGINT)  # the server's own handler, installed as it started listening
        await serving
        return text

    text = asyncio.run(scenario())
    assert DUPLICATE_RID.format("busy") in text
    assert handles and all(handle.cancelled() for handle in handles)
    assert scheduler.aborts == []
