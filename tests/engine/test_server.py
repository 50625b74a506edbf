"""The engine's HTTP API, checked field by field against SGLang's, on live engine processes."""

from __future__ import annotations

import gzip
import http.client
import importlib
import json
import re
import threading
import time
import urllib.request
from types import SimpleNamespace

import pytest

from pytest_specdec.engine import server
from pytest_specdec.engine.logs import READY_LINE
from pytest_specdec.engine.openai_api import Chunks, lora_adapter, render_chat
from pytest_specdec.engine.tokenizer import ByteTokenizer

CONTEXT = 512
PROMPT = "The capital city of France is"
SPEC_KEYS = {"spec_verify_ct", "spec_accept_length", "spec_accept_rate", "spec_num_correct_drafts",
             "spec_num_proposed_drafts", "spec_correct_drafts_histogram"}
TIMESTAMP = r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"


@pytest.fixture(scope="module")
def ddtree(module_engines):
    return module_engines("--method", "ddtree", "--budget", "16", "--decode-log-interval", "5",
                          "--context-length", str(CONTEXT))


@pytest.fixture(scope="module")
def ar(module_engines):
    return module_engines("--method", "ar", "--decode-log-interval", "5", "--context-length", str(CONTEXT))


def sse_events(body: bytes) -> list[str]:
    text = body.decode()
    assert text.endswith("data: [DONE]\n\n"), text[-200:]
    events = [e for e in text.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    return [e[len("data: "):] for e in events]


def test_readiness_line_and_health_endpoints(ddtree):
    assert re.search(TIMESTAMP + r"\] " + re.escape(READY_LINE), ddtree.log)
    for path in ("/health", "/health_generate", "/ready"):
        assert ddtree.get(path).status == 200, path


def test_generate_meta_info_with_speculation(ddtree):
    out = ddtree.generate(PROMPT, max_new_tokens=64)
    meta = out["meta_info"]
    assert len(out["output_ids"]) == meta["completion_tokens"] == 64
    assert out["text"] == bytes(out["output_ids"]).decode()
    assert meta["prompt_tokens"] == len(PROMPT.encode()) + 1  # BOS
    assert meta["finish_reason"] == {"type": "length", "length": 64}
    assert meta["e2e_latency"] > 0 and isinstance(meta["id"], str) and meta["id"]
    assert SPEC_KEYS <= set(meta)
    assert meta["spec_accept_length"] == pytest.approx(64 / meta["spec_verify_ct"])
    assert meta["spec_num_proposed_drafts"] == 16 * meta["spec_verify_ct"]
    assert meta["spec_accept_rate"] == pytest.approx(meta["spec_num_correct_drafts"] / meta["spec_num_proposed_drafts"])
    assert meta["spec_accept_length"] > 1.5


def test_speculative_meta_info_is_sglangs_in_its_order_with_the_histogram(ddtree):
    """SGLang writes a finished speculative request's figures in its own order and adds how many
    verify steps accepted each number of drafts; the engine had another order and no histogram."""
    meta = ddtree.generate(PROMPT, max_new_tokens=64)["meta_info"]
    assert [k for k in meta if k.startswith("spec_")] == [
        "spec_accept_rate", "spec_accept_length", "spec_num_correct_drafts", "spec_num_proposed_drafts",
        "spec_verify_ct", "spec_correct_drafts_histogram"]
    histogram = meta["spec_correct_drafts_histogram"]
    assert sum(histogram) == meta["spec_verify_ct"] and histogram[-1] > 0
    assert sum(k * steps for k, steps in enumerate(histogram)) == meta["spec_num_correct_drafts"]


def test_drafts_accepted_past_the_length_limit_count_as_sglangs_do(ddtree):
    """SGLang adds a step's accepted drafts to spec_num_correct_drafts whole, while the output
    stops at max_new_tokens: a request of 2 tokens (one from prefill, one verify step) reports
    every draft its step accepted."""
    metas = [ddtree.generate(f"{PROMPT} {i}", max_new_tokens=2)["meta_info"] for i in range(4)]
    assert all(m["completion_tokens"] == 2 and m["spec_verify_ct"] == 1 for m in metas)
    assert max(m["spec_num_correct_drafts"] for m in metas) > 1, metas


def test_speculative_and_autoregressive_servers_agree_token_for_token(ddtree, ar):
    spec = ddtree.generate(PROMPT, max_new_tokens=80)
    plain = ar.generate(PROMPT, max_new_tokens=80)
    assert spec["output_ids"] == plain["output_ids"]
    assert not SPEC_KEYS & set(plain["meta_info"]), "spec keys must be absent, not zero, without speculation"


def test_input_ids_and_rid(ddtree):
    by_text = ddtree.generate(PROMPT, max_new_tokens=16)
    ids = [256, *PROMPT.encode()]
    res = ddtree.post("/generate", {"input_ids": ids, "rid": "my-request",
                                    "sampling_params": {"max_new_tokens": 16, "ignore_eos": True}})
    assert res.status == 200
    assert res.json()["output_ids"] == by_text["output_ids"]
    assert res.json()["meta_info"]["id"] == "my-request"


def _stream_chunks(engine, max_new_tokens: int = 48) -> list[dict]:
    res = engine.post("/generate", {"text": PROMPT, "stream": True,
                                    "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": True}})
    assert res.status == 200 and res.headers["Content-Type"].startswith("text/event-stream")
    events = sse_events(res.body)
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_streaming_sends_cumulative_text_then_done(ddtree):
    """A reader slower than the steps gets the latest state, so the chunk count depends on the
    machine's load; their content does not."""
    full = ddtree.generate(PROMPT, max_new_tokens=48)
    chunks = _stream_chunks(ddtree)
    assert chunks
    texts = [c["text"] for c in chunks]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:])), "text must be cumulative"
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    last = chunks[-1]
    assert last["text"] == full["text"] and last["meta_info"]["finish_reason"]["type"] == "length"
    assert last["meta_info"]["completion_tokens"] == 48 and "e2e_latency" in last["meta_info"]
    assert SPEC_KEYS <= set(last["meta_info"])


def test_meta_info_carries_sglangs_time_stats_as_with_enable_metrics(ddtree):
    """SGLang with --enable-metrics (as the plugin launches it; the engine reports it on) puts its
    scheduler's time stats in every answer after num_retractions, and its tokenizer manager's in the
    last after the speculative keys; the engine had none of them (a test reading queue_time or
    first_token_latency failed on the engine only)."""
    scheduler, request = list(server.SCHEDULER_TIME_KEYS), list(server.REQUEST_TIME_KEYS)
    sent = request.index("response_sent_to_client_ts")
    before = time.time()
    meta = ddtree.generate(PROMPT, max_new_tokens=32)["meta_info"]
    keys = list(meta)
    at = keys.index("num_retractions") + 1
    assert keys[at:at + len(scheduler)] == scheduler, keys
    # a whole answer says when it was sent last, as SGLang stamps it once the answer is made
    assert keys[-len(request):] == request[:sent] + request[sent + 1:] + [request[sent]], keys
    assert keys.index("spec_correct_drafts_histogram") < keys.index(request[0])
    assert before - 1 < meta["request_received_ts"] <= meta["api_server_dispatch_finish_ts"] \
        <= meta["forward_entry_time"] <= meta["prefill_finished_time"] <= meta["request_finished_ts"] < time.time() + 1
    assert meta["queue_time"] >= 0 and meta["first_token_latency"] > 0 and meta["decode_throughput"] > 0
    assert meta["storage_prefetch_wait"] == meta["storage_staging_wait"] == 0.0
    chunks = _stream_chunks(ddtree)
    assert all(list(c["meta_info"])[at:at + len(scheduler)] == scheduler for c in chunks), chunks[0]
    assert not any((set(request) - {"response_sent_to_client_ts"}) & set(c["meta_info"]) for c in chunks[:-1])
    last = chunks[-1]["meta_info"]
    assert list(last)[-len(request):] == request, list(last)
    if len(chunks) > 1:  # the time the first chunk went out, as SGLang's last chunk repeats it
        assert last["response_sent_to_client_ts"] == chunks[0]["meta_info"]["response_sent_to_client_ts"]


def test_a_request_of_no_new_tokens_has_its_prefill_and_first_token_times_as_sglangs(ddtree):
    """max_new_tokens=0: the engine finished it without a prefill, so its answer lacked
    prefill_finished_time and first_token_latency; SGLang runs the prefill (it stamps
    prefill_finished_time, the tokenizer manager takes it for the first token's time) and drops
    the token at the length cap. decode_throughput, of tokens after the first, stays out as there."""
    meta = ddtree.post("/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 0}}).json()["meta_info"]
    assert meta["completion_tokens"] == 0 and meta["finish_reason"] == {"type": "length", "length": 0}
    keys = list(meta)
    at = keys.index("num_retractions") + 1
    assert keys[at:at + len(server.SCHEDULER_TIME_KEYS)] == list(server.SCHEDULER_TIME_KEYS), keys
    assert {"first_token_latency", "request_received_ts"} <= set(meta) and "decode_throughput" not in meta
    assert meta["forward_entry_time"] <= meta["prefill_finished_time"] <= meta["request_finished_ts"]
    # wall-clock stamps near 1.7e9 s keep about 1e-7 s in a double
    assert meta["first_token_latency"] == pytest.approx(meta["prefill_finished_time"] - meta["request_received_ts"], abs=1e-5)
    assert meta["first_token_latency"] > 0


def test_an_answers_time_stats_keep_one_clock_after_the_wall_clock_steps(monkeypatch):
    """SGLang stamps every stage with perf_counter and turns each into wall clock with one offset,
    recalibrated as each request arrives, response_sent_to_client_ts included. The engine took the
    offset once at import and the send time from time.time(), so after a wall-clock step since the
    engine started (an NTP step on a fresh machine) an answer's keys disagreed by the step: sent an
    hour before it finished, received an hour before the clock says."""
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600.0)  # the wall clock stepped since the import
    req = server.Request([1, 2], 2)
    req.dispatched_at = req.queued_at = req.forward_entry_at = req.prefill_finished_at = time.perf_counter()
    req.append([5, 6])  # finishes (length)
    view = SimpleNamespace(server_args={"enable_metrics": True},
                           scheduler=SimpleNamespace(decoder=SimpleNamespace(budget=0)))
    meta = server.EngineServer._meta_info(view, req, req.progress())
    assert abs(meta["request_received_ts"] - time.time()) < 60, meta
    assert meta["request_received_ts"] <= meta["forward_entry_time"] <= meta["request_finished_ts"] \
        <= meta["response_sent_to_client_ts"] < meta["request_received_ts"] + 60, meta
    never = SimpleNamespace(never_scheduled=True, finish_reason={"type": "abort"}, e2e_latency=0.0)
    sent = server.EngineServer._meta_info(view, req, never)["response_sent_to_client_ts"]
    assert 0 <= sent - meta["request_received_ts"] < 60


def test_streaming_sends_a_chunk_a_step_to_a_reader_that_keeps_up(engines):
    """Steps stretched 20x (``--fault-slow-factor``) leave the reader time to take each one."""
    slow = engines("--method", "ddtree", "--budget", "16", "--fault-slow-factor", "20")
    chunks = _stream_chunks(slow)
    assert len(chunks) > 2, [c["meta_info"]["completion_tokens"] for c in chunks]
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    assert counts == sorted(set(counts)) and counts[-1] == 48
    # as SGLang's: the speculative counters and the latency come with the finished request only
    assert not any((SPEC_KEYS | {"e2e_latency"}) & set(c["meta_info"]) for c in chunks[:-1]), chunks[0]
    assert SPEC_KEYS <= set(chunks[-1]["meta_info"])


def test_continuous_usage_stats_puts_the_usage_so_far_on_the_chunks_sglang_does(ddtree):
    """SGLang reads continuous_usage_stats apart from include_usage: alone it puts the usage so
    far on every /v1/completions chunk and on each /v1/chat/completions chunk with content, and
    sends no final usage chunk. Its value is read as pydantic reads a boolean, as include_usage's is."""
    requests = (("/v1/completions", {"prompt": PROMPT}, lambda c: True),
                ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]},
                 lambda c: bool(c["choices"][0]["delta"].get("content"))))
    for path, body, has_content in requests:
        res = ddtree.post(path, {**body, "max_tokens": 24, "ignore_eos": True, "stream": True,
                                 "stream_options": {"continuous_usage_stats": True}})
        chunks = [json.loads(e) for e in sse_events(res.body)[:-1]]
        assert chunks and all(c["choices"] for c in chunks), path  # no usage chunk without include_usage
        assert [c.get("usage") is not None for c in chunks] == [has_content(c) for c in chunks], path
        usages = [c["usage"] for c in chunks if c.get("usage")]
        assert all(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] for u in usages)
        assert [u["completion_tokens"] for u in usages] == sorted(u["completion_tokens"] for u in usages)
        assert usages[-1]["completion_tokens"] <= 24 and chunks[-1]["choices"][0]["finish_reason"] == "length"
    res = ddtree.post("/v1/completions", {"prompt": PROMPT, "stream": True, "max_tokens": 2,
                                          "stream_options": {"continuous_usage_stats": "yes"}})
    assert res.status == 200 and json.loads(sse_events(res.body)[0]).get("usage"), res.text


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_nested_objects_are_read_as_sglangs_request_classes_read_them(ddtree, path):
    """stream_options is SGLang's StreamOptions class and logit_bias an object of floats: pydantic
    reads "yes" for true and "0" for 0.0 in them, and refuses a value it cannot read with its
    validation 400, its loc inside the object. The engine said "invalid type" for both, in its words.
    A bias of 0 changes no logit, so it is served; another is one the engine cannot honour."""
    body = {**{"/v1/completions": {"prompt": PROMPT}}.get(path, {"messages": [{"role": "user", "content": "hi"}]}),
            "max_tokens": 2, "stream": True}
    res = ddtree.post(path, {**body, "stream_options": {"include_usage": "yes", "other": 1}})
    assert res.status == 200 and json.loads(sse_events(res.body)[-2])["usage"]["completion_tokens"] == 2, res.text
    res = ddtree.post(path, {**body, "stream_options": {"include_usage": "maybe"}})
    assert res.status == 400 and res.json() == field_errors(path, type_error(
        "stream_options", "bool_parsing", "boolean, unable to interpret input", "maybe", "include_usage")), res.text
    res = ddtree.post(path, {**body, "stream_options": 5})
    assert res.status == 400 and "'type': 'model_type', 'loc': ('body', 'stream_options'), 'msg': 'Input should " \
        "be a valid dictionary or instance of StreamOptions'" in res.json()["message"], res.text
    res = ddtree.post(path, {**body, "logit_bias": {"1": "x"}})
    assert res.status == 400 and res.json() == field_errors(path, type_error(
        "logit_bias", "float_parsing", "number, unable to parse string as a number", "x", "1")), res.text
    res = ddtree.post(path, {**body, "logit_bias": {"1": "0"}})
    assert res.status == 200, res.text
    res = ddtree.post(path, {**body, "logit_bias": {"1": "0.5"}})
    assert res.status == 400 and 'logit_bias={"1": 0.5}' in error_message(res), res.text


@pytest.fixture(scope="module")
def sglang_openai(sglang_reference):
    """SGLang's own response models, usage and chat chunk builder: what its server would send,
    serialised by its code (no server, no GPU)."""
    package = "sglang.srt.entrypoints.openai."
    return SimpleNamespace(protocol=importlib.import_module(package + "protocol"),
                           sse=importlib.import_module(package + "sse_utils"),
                           usage=importlib.import_module(package + "usage_processor").UsageProcessor)


OPENAI_REQUESTS = {"/v1/completions": {"prompt": PROMPT},
                   "/v1/chat/completions": {"messages": [{"role": "user", "content": "Count to five."}]}}


def prompt_tokens(path: str) -> int:
    body = OPENAI_REQUESTS[path]
    return len(ByteTokenizer().encode(body["prompt"] if "prompt" in body else render_chat(body["messages"])))


def as_sglang_streams(sg, path: str, chunks: list[dict], finish: tuple[str, str | None], *, include_usage: bool,
                      continuous: bool) -> list[dict]:
    """The stream SGLang's serving_completions / serving_chat build for the texts and token counts
    the engine's chunks carry, one step of output per engine chunk with text."""
    ident = {"id": chunks[0]["id"], "created": chunks[0]["created"], "model": chunks[0]["model"]}

    def usage(chunk: dict):  # the token counts the engine's chunk states, in SGLang's UsageInfo
        counted = (chunk.get("usage") or {}).get("completion_tokens", -1)
        return sg.usage.calculate_token_usage(prompt_tokens=prompt_tokens(path), completion_tokens=counted)

    def sse(**fields) -> str:
        return sg.sse.build_sse_content(ident["id"], ident["created"], ident["model"], 0, **fields)

    streamed = [c for c in chunks if c["choices"]]
    reason, matched = finish
    out = []
    if path == "/v1/completions":
        for i, c in enumerate(streamed):
            last = i == len(streamed) - 1
            choice = sg.protocol.CompletionResponseStreamChoice(
                index=0, text=c["choices"][0]["text"], finish_reason=reason if last else None,
                matched_stop=matched if last else None)
            out.append(sg.protocol.CompletionStreamResponse(
                **ident, choices=[choice], usage=usage(c) if continuous else None).model_dump_json())
        if include_usage:
            out.append(sg.protocol.CompletionStreamResponse(**ident, choices=[], usage=usage(chunks[-1]))
                       .model_dump_json(exclude_none=True))
    else:
        out.append(sse(role="assistant", content=""))
        for c in streamed[1:-1]:
            out.append(sse(content=c["choices"][0]["delta"].get("content"),
                           usage=usage(c).model_dump() if continuous else None))
        out.append(sse(finish_reason=reason, matched_stop=matched))
        if include_usage:
            out.append(sg.protocol.ChatCompletionStreamResponse(**ident, choices=[], usage=usage(chunks[-1]))
                       .model_dump_json())
    return [json.loads(o.removeprefix("data: ")) for o in out]


@pytest.mark.parametrize("path", sorted(OPENAI_REQUESTS))
@pytest.mark.parametrize("options", [{}, {"continuous_usage_stats": True}, {"include_usage": True},
                                     {"include_usage": True, "continuous_usage_stats": True}],
                         ids=["plain", "continuous", "include", "both"])
@pytest.mark.parametrize("finish", ["length", "stop"])
def test_openai_streams_are_laid_out_as_sglangs(ddtree, sglang_openai, path, options, finish):
    """Chunk for chunk what SGLang's own code builds: chat opens with a chunk holding only the
    role and ends with one holding only the finish reason and matched_stop, where completions
    put the finish on the last text chunk; usage is SGLang's whole UsageInfo."""
    body = {**OPENAI_REQUESTS[path], "max_tokens": 24, "ignore_eos": True}
    stop = None
    if finish == "stop":
        plain = ddtree.post(path, body).json()["choices"][0]
        stop = (plain["text"] if "text" in plain else plain["message"]["content"])[10:13]
        body["stop"] = [stop]
    res = ddtree.post(path, {**body, "stream": True, "stream_options": options})
    chunks = [json.loads(e) for e in sse_events(res.body)[:-1]]
    assert len({(c["id"], c["created"]) for c in chunks}) == 1
    if options.get("include_usage") and finish == "length":
        assert chunks[-1]["usage"]["completion_tokens"] == 24
    assert chunks == as_sglang_streams(sglang_openai, path, chunks, (finish, stop),
                                       include_usage=bool(options.get("include_usage")),
                                       continuous=bool(options.get("continuous_usage_stats")))


@pytest.mark.parametrize("path", sorted(OPENAI_REQUESTS))
def test_openai_responses_are_sglangs(ddtree, sglang_openai, path):
    """Field for field what SGLang's own models serialise: its whole UsageInfo, a chat message
    without tool_calls, and the weights' version as metadata (SGLang's default, "default") with
    the spans of the tokens it made (one: the engine's weights never change)."""
    out = ddtree.post(path, {**OPENAI_REQUESTS[path], "max_tokens": 24, "ignore_eos": True}).json()
    sg = sglang_openai.protocol
    usage = sglang_openai.usage.calculate_token_usage(prompt_tokens=prompt_tokens(path), completion_tokens=24)
    if path == "/v1/completions":
        choice = sg.CompletionResponseChoice(index=0, text=out["choices"][0]["text"], finish_reason="length")
        model = sg.CompletionResponse
    else:
        message = sg.ChatMessage(role="assistant", content=out["choices"][0]["message"]["content"])
        choice = sg.ChatCompletionResponseChoice(index=0, message=message, finish_reason="length")
        model = sg.ChatCompletionResponse
    expected = model(id=out["id"], created=out["created"], model=out["model"], choices=[choice], usage=usage,
                     metadata={"weight_version": "default",
                               "weight_versions": [{"version": "default", "start": 0, "end": 24}]})
    assert out == json.loads(expected.model_dump_json(by_alias=True))


@pytest.mark.parametrize("path", sorted(OPENAI_REQUESTS))
def test_openai_ids_are_the_request_rid(ddtree, path):
    """SGLang answers with its request's rid as the id, unprefixed: the client's, else a uuid's hex."""
    body = {**OPENAI_REQUESTS[path], "max_tokens": 4}
    assert ddtree.post(path, {**body, "rid": "my-request"}).json()["id"] == "my-request"
    assert re.fullmatch(r"[0-9a-f]{32}", ddtree.post(path, body).json()["id"])
    streamed = ddtree.post(path, {**body, "rid": "my-stream", "stream": True,
                                  "stream_options": {"include_usage": True}})
    assert {json.loads(e)["id"] for e in sse_events(streamed.body)[:-1]} == {"my-stream"}


@pytest.mark.parametrize("path", sorted(OPENAI_REQUESTS))
def test_openai_answers_name_the_model_the_request_named(ddtree, path):
    """SGLang echoes the request's model (its default "default" when none), not its served name."""
    body = {**OPENAI_REQUESTS[path], "max_tokens": 4}
    assert ddtree.post(path, {**body, "model": "my-model"}).json()["model"] == "my-model"
    streamed = ddtree.post(path, {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert {json.loads(e)["model"] for e in sse_events(streamed.body)[:-1]} == {"default"}
    res = ddtree.post(path, {**body, "model": 7})
    assert res.status == 400 and res.json() == field_errors(path, type_error("model", "string_type", "string", 7))


def test_a_completion_step_that_adds_no_text_still_sends_its_chunk():
    """SGLang's completion stream sends a chunk for every output, text "" where a step added none
    (a byte of an unfinished character, a stop string cut back); its chat stream sends content
    only where there is some."""
    steps = [("ab", 2, None), ("ab", 3, None), ("abc", 4, None), ("ab", 5, {"type": "stop", "matched": "c"})]
    completion = Chunks("text_completion", "r", "m", 7, include_usage=False, continuous_usage=True)
    sent = [completion.step(*step) for step in steps]
    assert [[(c["choices"][0]["text"], c["usage"]["completion_tokens"]) for c in chunks] for chunks in sent] == [
        [("ab", 2)], [("", 3)], [("c", 4)], [("", 5)]]
    assert sent[-1][0]["choices"][0]["finish_reason"] == "stop"
    chat = Chunks("chat.completion", "r", "m", 7, include_usage=False, continuous_usage=True)
    contents = [[c["choices"][0]["delta"].get("content") for c in chat.step(*step)] for step in steps]
    assert contents == [["", "ab"], [], ["c"], [None]]


LORA_REFUSAL = ("LoRA adapter '{}' was requested, but LoRA is not enabled. Please launch the server with --enable-lora "
                "flag and preload adapters using --lora-paths or /load_lora_adapter endpoint.")


@pytest.mark.parametrize("path", sorted(OPENAI_REQUESTS))
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("fields, adapter", [
    ({"model": "base:my-adapter"}, "my-adapter"),
    ({"model": "base: my-adapter "}, "my-adapter"),
    ({"lora_path": "other"}, "other"),
    ({"model": "base:my-adapter", "lora_path": "other"}, "my-adapter"),  # the model's adapter first
    ({"lora_path": [None, "listed"]}, "listed"),
], ids=["model", "spaced", "lora_path", "both", "list"])
def test_a_lora_adapter_is_refused_as_sglang_without_lora_refuses_it(ddtree, path, stream, fields, adapter):
    """The engine has no LoRA; SGLang started without --enable-lora answers a request for an
    adapter with this 400, before any streaming, even for a prompt longer than the context."""
    body = {**OPENAI_REQUESTS[path], "max_tokens": 4, "stream": stream, **fields}
    for request in (body, {**body, "max_tokens": CONTEXT}):
        res = ddtree.post(path, request)
        assert res.status == 400 and res.json() == {"object": "error", "message": LORA_REFUSAL.format(adapter),
                                                    "type": "BadRequestError", "param": None, "code": 400}, res.text


@pytest.mark.parametrize("path", sorted(OPENAI_REQUESTS))
def test_a_model_without_an_adapter_is_answered(ddtree, path):
    """No colon, or nothing after it, names no adapter; the model is echoed as named."""
    for model in ("base", "base:", "base: "):
        res = ddtree.post(path, {**OPENAI_REQUESTS[path], "max_tokens": 2, "model": model, "lora_path": ""})
        assert res.status == 200 and res.json()["model"] == model, res.text
    res = ddtree.post(path, {**OPENAI_REQUESTS[path], "max_tokens": 2, "lora_path": 5})
    assert res.status == 400 and res.json() == field_errors(
        path, type_error("lora_path", "list_type", "list", 5, "list[nullable[str]]"),
        type_error("lora_path", "string_type", "string", 5, "str")), res.text


@pytest.mark.parametrize("model, served, adapter", [
    ("s3://bucket/model", "s3://bucket/model", None),  # the served name, colons and all
    ("s3://bucket/model:tuned", "s3://bucket/model", "tuned"),  # after the served name, not its first colon
    ("other:tuned", "s3://bucket/model", "tuned"),
    ("a:b:c", "served", "b:c"),
    ("plain", "served", None),
])
def test_the_adapter_a_model_names_is_read_as_sglang_reads_it(model, served, adapter):
    assert lora_adapter(model, served) == adapter


def test_stop_string_ends_generation_and_is_cut(ddtree):
    full = ddtree.generate(PROMPT, max_new_tokens=64)["text"]
    stop = full[20:23]
    first = full.find(stop)
    out = ddtree.post("/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 64, "stop": [stop]}}).json()
    assert out["text"] == full[:first]
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert out["meta_info"]["completion_tokens"] == first + len(stop)


def test_temperature_is_accepted_and_decoding_stays_greedy(ddtree):
    greedy = ddtree.generate(PROMPT, max_new_tokens=16)
    hot = ddtree.post("/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 16, "temperature": 0.8}})
    assert hot.status == 200 and hot.json()["output_ids"] == greedy["output_ids"]


def error_message(res) -> str:
    """The message of any of SGLang's error bodies: {"error": str}, {"error": {"message"}}, {"message"}."""
    body = res.json()
    error = body.get("error", body)
    return error if isinstance(error, str) else error["message"]


@pytest.mark.parametrize("body, fragment", [
    ({"text": "hi", "sampling_params": {"max_new_tokens": 4}, "top_logprobs": 2}, "unknown field(s) `top_logprobs`"),
    ({"text": "hi", "sampling_params": {"max_new_tokens": 4, "top_q": 1}}, "unknown field `top_q`, expected one of"),
    ({"sampling_params": {"max_new_tokens": 4}}, "Either text, input_ids or input_embeds should be provided."),
    ({"input_ids": []}, "input_ids cannot be empty."),
    ({"text": "hi", "input_ids": []}, "input_ids cannot be empty."),
    ({"text": ["a", "b"], "rid": ["x"]}, "The specified rids length mismatch with the batch_size"),
    ({"text": "hi", "sampling_params": {"max_new_tokens": -1}}, "max_new_tokens"),
    ({"text": "hi", "stream": "maybe"}, "stream"),
])
def test_bad_requests_get_400_with_a_message(ddtree, body, fragment):
    res = ddtree.post("/generate", body)
    assert res.status == 400
    assert fragment in error_message(res)


def test_input_ids_win_over_text_as_in_sglang(ddtree):
    """SGLang takes text and input_ids together and tokenizes the text only without ids."""
    ids = {"input_ids": [1, 65, 66, 67], "sampling_params": {"max_new_tokens": 6, "ignore_eos": True}}
    alone = ddtree.post("/generate", ids)
    both = ddtree.post("/generate", {**ids, "text": "something else entirely"})
    assert alone.status == both.status == 200
    assert both.json()["meta_info"]["prompt_tokens"] == 4 and both.json()["output_ids"] == alone.json()["output_ids"]


@pytest.mark.parametrize("bad_id", [259, 999, -1, 2**62, 2**70])
def test_an_id_outside_the_vocabulary_is_served_as_sglang_serves_it(ddtree, bad_id):
    """SGLang refuses no prompt id (its vocab-parallel embedding embeds one outside the vocabulary
    as zeros); the engine serves it so, on both routes that take ids, and stays up. /generate's
    own validator refuses an id past int64 first (see the input_ids test below)."""
    res = ddtree.post("/generate", {"input_ids": [1, bad_id, 65], "sampling_params": {"max_new_tokens": 3,
                                                                                     "ignore_eos": True}})
    if bad_id < 2**63:
        assert res.status == 200 and res.json()["meta_info"]["prompt_tokens"] == 3, res.text
        assert len(res.json()["output_ids"]) == 3
    else:
        assert res.status == 400 and "contains non-int64 element" in res.json()["message"], res.text
    res = ddtree.post("/v1/completions", {"prompt": [1, bad_id], "max_tokens": 2, "ignore_eos": True})
    assert res.status == 200 and res.json()["usage"]["prompt_tokens"] == 2, res.text
    assert ddtree.get("/health").status == 200


def test_invalid_json_gets_400(ddtree):
    res = ddtree.request("POST", "/generate", raw=b"{not json")
    assert res.status == 400 and "JSON" in error_message(res)


def test_context_length_errors_match_sglang(ddtree):
    res = ddtree.post("/generate", {"text": "a" * CONTEXT})
    assert res.status == 400
    assert error_message(res) == (
        f"The input ({CONTEXT + 1} tokens) is longer than the model's context length ({CONTEXT} tokens).")
    res = ddtree.post("/generate", {"text": "a" * 100, "sampling_params": {"max_new_tokens": CONTEXT - 100}})
    assert res.status == 400
    assert error_message(res).startswith(
        f"Requested token count exceeds the model's maximum context length of {CONTEXT} tokens. "
        f"You requested a total of {CONTEXT + 1} tokens: 101 tokens from the input messages")
    res = ddtree.post("/generate", {"text": "a" * (CONTEXT - 7), "sampling_params": {"max_new_tokens": 1}})
    assert res.status == 400
    assert error_message(res) == (f"Input length ({CONTEXT - 6} tokens) exceeds the maximum allowed length "
                                  f"({CONTEXT - 6} tokens). Use a shorter input or enable --allow-auto-truncate.")


def test_a_request_up_to_the_context_is_served_cut_as_sglang_cuts_it(ddtree):
    """SGLang's tokenizer manager takes prompt + max_new_tokens equal to the context length (the
    engine refused it), then its scheduler cuts max_new_tokens to context - 2 - prompt; a request
    within that gets all it asked for."""
    for max_new_tokens, served in ((CONTEXT - 101, CONTEXT - 103), (CONTEXT - 102, CONTEXT - 103),
                                   (CONTEXT - 103, CONTEXT - 103), (CONTEXT - 104, CONTEXT - 104)):
        ok = ddtree.post("/generate", {"text": "a" * 100, "sampling_params": {"max_new_tokens": max_new_tokens,
                                                                              "ignore_eos": True}})
        assert ok.status == 200 and ok.json()["meta_info"]["completion_tokens"] == served, max_new_tokens
    longest = ddtree.post("/generate", {"text": "a" * (CONTEXT - 8), "sampling_params": {"max_new_tokens": 7,
                                                                                        "ignore_eos": True}})
    assert longest.status == 200 and longest.json()["meta_info"]["completion_tokens"] == 5
    chat = ddtree.post("/v1/completions", {"prompt": "a" * 100, "max_tokens": CONTEXT - 101, "ignore_eos": True})
    assert chat.status == 200 and chat.json()["usage"]["completion_tokens"] == CONTEXT - 103


SCHEDULER_REFUSAL = (f"Input length ({CONTEXT - 6} tokens) exceeds the maximum allowed length ({CONTEXT - 6} "
                     f"tokens). Use a shorter input or enable --allow-auto-truncate.")


def test_a_prompt_sglangs_scheduler_refuses_while_streaming_ends_the_stream_aborted(ddtree):
    """SGLang's scheduler puts one token in place of such a prompt, keeps the one token its prefill
    yields and finishes the request as aborted: a stream's one chunk is that output, with SGLang's
    meta_info (not the error event of a tokenizer-manager refusal), then [DONE]."""
    res = ddtree.post("/generate", {"text": "a" * (CONTEXT - 7), "sampling_params": {"max_new_tokens": 1},
                                    "stream": True, "rid": "too-long"})
    assert res.status == 200
    (event,) = sse_events(res.body)[:-1]
    chunk = json.loads(event)
    stub = ddtree.post("/generate", {"input_ids": [0], "sampling_params": {"max_new_tokens": 1}}).json()
    assert chunk["text"] == stub["text"] and chunk["output_ids"] == stub["output_ids"]
    meta = chunk["meta_info"]
    assert meta["finish_reason"] == {"type": "abort", "status_code": 400, "err_type": "BadRequestError",
                                     "message": SCHEDULER_REFUSAL}
    assert list(meta)[:14] == ["id", "finish_reason", "prompt_tokens", "weight_version", "num_retractions",
                               *server.SCHEDULER_TIME_KEYS, "reasoning_tokens", "completion_tokens", "cached_tokens",
                               "weight_versions"]
    assert (meta["id"], meta["prompt_tokens"], meta["completion_tokens"], meta["weight_version"]) == (
        "too-long", 1, 1, "default")
    assert meta["e2e_latency"] > 0 and meta["response_sent_to_client_ts"] > 0
    ddtree.wait_for_line(TIMESTAMP + r" TP0\] " + re.escape(f"{SCHEDULER_REFUSAL}, self.rid='too-long'"))
    whole = ddtree.post("/generate", {"text": "a" * (CONTEXT - 7), "sampling_params": {"max_new_tokens": 1}})
    assert whole.status == 400 and whole.json() == {"error": {"message": SCHEDULER_REFUSAL}}


@pytest.mark.parametrize("path, body", [
    ("/v1/completions", {"prompt": "a" * (CONTEXT - 7), "max_tokens": 1}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a" * (CONTEXT - 31)}], "max_tokens": 1}),
])
def test_an_openai_stream_sglangs_scheduler_refuses_is_an_error_chunk(ddtree, path, body):
    """SGLang's OpenAI stream answers 200 with one error chunk typed by the status's name (and
    include_usage's chunk, counting the one-token stand-in), then [DONE]; a whole request a 400."""
    error = {"error": {"object": "error", "message": SCHEDULER_REFUSAL, "type": "BAD_REQUEST", "param": None,
                       "code": 400}}
    res = ddtree.post(path, {**body, "stream": True})
    assert res.status == 200 and [json.loads(e) for e in sse_events(res.body)[:-1]] == [error]
    res = ddtree.post(path, {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert res.status == 200
    first, last = [json.loads(e) for e in sse_events(res.body)[:-1]]
    assert first == error and last["choices"] == [] and last["usage"]["prompt_tokens"] == 1
    assert last["usage"]["completion_tokens"] == 1 and last["usage"]["total_tokens"] == 2
    res = ddtree.post(path, body)
    assert res.status == 400 and res.json() == {"object": "error", "message": SCHEDULER_REFUSAL,
                                                "type": "BadRequestError", "param": None, "code": 400}


def test_tokenize_counts_what_generate_gets(ddtree):
    """/v1/tokenize (and /tokenize) as SGLang serves it: the count is the prompt_tokens of a request."""
    prompt_tokens = ddtree.generate(PROMPT, max_new_tokens=1)["meta_info"]["prompt_tokens"]
    for path in ("/v1/tokenize", "/tokenize"):
        one = ddtree.post(path, {"prompt": PROMPT, "model": "anything"}).json()  # SGLang ignores the model
        assert one["count"] == prompt_tokens == len(one["tokens"]) and one["max_model_len"] == CONTEXT
    many = ddtree.post("/v1/tokenize", {"prompt": [PROMPT, "é", ""], "add_special_tokens": False}).json()
    assert many["count"] == [prompt_tokens - 1, 2, 0] and many["tokens"][1] == list("é".encode())


def test_tokenize_refuses_a_chat(ddtree):
    res = ddtree.post("/v1/tokenize", {"messages": [{"role": "user", "content": "hi"}]})
    assert res.status == 400 and "counts prompts, not messages" in res.json()["message"], res.text


# SGLang's validation handler's words for its validate_json_request's error (FastAPI's own format)
MEDIA_TYPE_ERROR = ("1 validation error:\n  {'loc': ['header', 'content-type'], 'msg': \"Unsupported Media Type: "
                    "Only 'application/json' is allowed\", 'type': 'value_error'} [{'loc': ['header', "
                    "'content-type'], 'msg': \"Unsupported Media Type: Only 'application/json' is allowed\", "
                    "'type': 'value_error'}]")


def _post(engine, path: str, body: bytes, content_type: str | None, method: str = "POST"):
    """A POST (or `method`) with exactly this Content-Type, or none (urllib would add its form type)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", engine.port, timeout=60)
    try:
        conn.request(method, path, body, {} if content_type is None else {"Content-Type": content_type})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.mark.parametrize("path, body", [*OPENAI_REQUESTS.items(), ("/v1/tokenize", {"prompt": PROMPT}),
                                        ("/tokenize", {"prompt": PROMPT})])
@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "application/vnd.api+json"])
def test_the_json_routes_refuse_a_body_not_sent_as_json_as_sglang_does(ddtree, path, body, content_type):
    """SGLang guards its OpenAI-compatible routes and /tokenize with validate_json_request: a client
    that leaves the header out (or sends a form) gets a 400 there, so it must here too."""
    status, answer = _post(ddtree, path, json.dumps({**body, "max_tokens": 2}).encode(), content_type)
    assert status == 400 and json.loads(answer) == {"object": "error", "message": MEDIA_TYPE_ERROR,
                                                    "type": "Bad Request", "param": None, "code": 400}, answer
    status, answer = _post(ddtree, path, json.dumps({**body, "max_tokens": 2}).encode(),
                           "Application/JSON; charset=utf-8")
    assert status == 200, answer


def validation_error(message: str) -> dict:
    return {"object": "error", "message": message, "type": "Bad Request", "param": None, "code": 400}


GENERATE_RAW = b'{"text": "hi", "sampling_params": {"max_new_tokens": 2}, "stream": true}'


@pytest.mark.parametrize("method", ["POST", "PUT"])
@pytest.mark.parametrize("content_type", [None, "", "text/plain", "application/x-www-form-urlencoded", "json"])
def test_generate_refuses_a_body_not_sent_as_a_json_type_as_sglang_does(ddtree, method, content_type):
    """SGLang's /generate has no content-type guard of its own, but FastAPI, under it, reads a body
    of another type (or of none) as bytes, which its GenerateReqInput dataclass refuses: a 400 from
    SGLang's validation handler, echoing the body, before any streaming."""
    status, answer = _post(ddtree, "/generate", GENERATE_RAW, content_type, method)
    error = ("{'type': 'dataclass_type', 'loc': ('body',), 'msg': 'Input should be a dictionary or an instance of "
             "GenerateReqInput', 'input': b'{\"text\": \"hi\", \"sampling_params\": {\"max_new_tokens\": 2}, "
             "\"stream\": true}', 'ctx': {'class_name': 'GenerateReqInput'}}")
    assert status == 400 and json.loads(answer) == validation_error(
        f"1 validation error:\n  {error}\n\n  Endpoint: {method} /generate [{error}]"), answer


@pytest.mark.parametrize("content_type", ["application/json", "Application/JSON; charset=utf-8",
                                          "application/json ; charset=utf-8", "application/vnd.api+json"])
def test_generate_takes_a_json_type_as_sglang_does(ddtree, content_type):
    """FastAPI's rule, not validate_json_request's: any case, parameters, and application/*+json."""
    status, answer = _post(ddtree, "/generate", GENERATE_RAW, content_type)
    assert status == 200 and sse_events(answer)[-1] == "[DONE]", answer


MISSING_BODY = "{'type': 'missing', 'loc': ('body',), 'msg': 'Field required', 'input': None}"


@pytest.mark.parametrize("path", ["/generate", *sorted(OPENAI_REQUESTS), "/v1/tokenize"])
def test_an_empty_body_is_missing_as_sglang_says(ddtree, path):
    """FastAPI finds an empty body missing; on a route SGLang guards, only once its type passed."""
    status, answer = _post(ddtree, path, b"", "application/json")
    assert status == 400 and json.loads(answer) == validation_error(
        f"1 validation error:\n  {MISSING_BODY}\n\n  Endpoint: POST {path} [{MISSING_BODY}]"), answer
    status, answer = _post(ddtree, path, b"", None)
    if path == "/generate":
        assert status == 400 and "'type': 'missing'" in json.loads(answer)["message"], answer
    else:
        assert status == 400 and json.loads(answer) == validation_error(MEDIA_TYPE_ERROR), answer


JSON_ROUTES = ["/generate", *sorted(OPENAI_REQUESTS), "/v1/tokenize", "/tokenize"]


@pytest.mark.parametrize("path", JSON_ROUTES)
@pytest.mark.parametrize("raw, at, why", [(b"{not json", 1, "Expecting property name enclosed in double quotes"),
                                          (b'{"text" "hi"}', 8, "Expecting ':' delimiter"),
                                          (b"  ", 2, "Expecting value")])
def test_a_body_that_is_not_json_gets_fastapis_json_invalid(ddtree, path, raw, at, why):
    """The engine answered "The request body is not valid JSON: ..."; SGLang's FastAPI raises its
    json_invalid validation error, at the character where parsing stopped, and SGLang's
    validation handler words it. FastAPI parses before a route's media-type guard runs, so a
    JSON type the guard refuses still gets json_invalid."""
    error = (f"{{'type': 'json_invalid', 'loc': ('body', {at}), 'msg': 'JSON decode error', 'input': {{}}, "
             f"'ctx': {{'error': {why!r}}}}}")
    expected = validation_error(f"1 validation error:\n  {error}\n\n  Endpoint: POST {path} [{error}]")
    for content_type in ("application/json", "application/vnd.api+json"):
        status, answer = _post(ddtree, path, raw, content_type)
        assert status == 400 and json.loads(answer) == expected, answer


@pytest.mark.parametrize("path", JSON_ROUTES)
@pytest.mark.parametrize("raw, shown", [(b"[1]", "[1]"), (b'"hi"', "'hi'"), (b"7", "7"), (b"true", "True")])
def test_a_body_that_is_no_object_gets_pydantics_error_for_the_routes_class(ddtree, path, raw, shown):
    """The engine said "The request body must be a JSON object, got list."; SGLang's FastAPI
    validates the body against the route's class: /generate's GenerateReqInput is a dataclass,
    the OpenAI-compatible routes and /tokenize take pydantic models (read with from_attributes),
    and each kind words the refusal its own way, echoing the value."""
    if path == "/generate":
        error = (f"{{'type': 'dataclass_type', 'loc': ('body',), 'msg': 'Input should be a dictionary or an "
                 f"instance of GenerateReqInput', 'input': {shown}, 'ctx': {{'class_name': 'GenerateReqInput'}}}}")
    else:
        error = (f"{{'type': 'model_attributes_type', 'loc': ('body',), 'msg': 'Input should be a valid dictionary "
                 f"or object to extract fields from', 'input': {shown}}}")
    status, answer = _post(ddtree, path, raw, "application/json")
    assert status == 400 and json.loads(answer) == validation_error(
        f"1 validation error:\n  {error}\n\n  Endpoint: POST {path} [{error}]"), answer


@pytest.mark.parametrize("path", JSON_ROUTES)
def test_a_json_null_body_is_missing_as_fastapi_says(ddtree, path):
    """FastAPI takes a null body for an absent one: the required body is missing."""
    status, answer = _post(ddtree, path, b"null", "application/json")
    assert status == 400 and json.loads(answer) == validation_error(
        f"1 validation error:\n  {MISSING_BODY}\n\n  Endpoint: POST {path} [{MISSING_BODY}]"), answer


def field_errors(path: str, *errors: str) -> dict:
    """SGLang's validation handler's body for errors pydantic found in a request's fields."""
    listed = "".join(f"  {e}\n" for e in errors)
    many = "s" if len(errors) != 1 else ""
    return validation_error(f"{len(errors)} validation error{many}:\n{listed}\n  Endpoint: POST {path} "
                            f"[{', '.join(errors)}]")


def null_error(name: str, error_type: str, words: str, *suffix: str) -> str:
    return type_error(name, error_type, words, None, *suffix)


def type_error(name: str, error_type: str, words: str, value, *suffix: str) -> str:
    loc = ", ".join(repr(part) for part in ("body", name, *suffix))
    return f"{{'type': '{error_type}', 'loc': ({loc}), 'msg': 'Input should be a valid {words}', 'input': {value!r}}}"


@pytest.mark.parametrize("path, field, errors", [
    ("/generate", "stream", [("bool_type", "boolean")]),
    ("/generate", "routed_experts_start_len", [("int_type", "integer")]),
    ("/v1/completions", "stream", [("bool_type", "boolean")]),
    ("/v1/completions", "max_tokens", [("int_type", "integer")]),
    ("/v1/completions", "temperature", [("float_type", "number")]),
    ("/v1/completions", "model", [("string_type", "string")]),
    ("/v1/completions", "prompt", [("list_type", "list", "list[int]"), ("list_type", "list", "list[list[int]]"),
                                   ("string_type", "string", "str"), ("list_type", "list", "list[str]")]),
    ("/v1/chat/completions", "stream", [("bool_type", "boolean")]),
    ("/v1/chat/completions", "n", [("int_type", "integer")]),
    ("/v1/chat/completions", "messages", [("list_type", "list")]),
])
def test_a_null_for_a_field_sglang_types_without_none_is_fastapis_400(ddtree, path, field, errors):
    """The engine took such a null for the field's default and served the request; SGLang's
    FastAPI validates the body against the route's class first, where null is no bool, int,
    float, string or list, and its validation handler answers 400 naming each error (a union's
    once a member)."""
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": 2}} if path == "/generate" else {
        **OPENAI_REQUESTS[path], "max_tokens": 2}
    res = ddtree.post(path, {**body, field: None})
    assert res.status == 400 and res.json() == field_errors(
        path, *(null_error(field, *error) for error in errors)), res.text


MESSAGE_LOC = "'messages', 0, 'function-after[validate_thinking_parts_role(), ChatCompletionMessage{}Param]'"
GENERIC_ROLE = ("'role' must be one of 'system', 'assistant', 'tool', 'function', 'developer', 'latest_reminder', "
                "'root' (case-insensitive).")


def message_error(kind: str, cls: str, loc: str, msg: str, value, ctx: str = "") -> str:
    """pydantic's error for a chat message as one class of SGLang's message union reads it."""
    return (f"{{'type': '{kind}', 'loc': ('body', {MESSAGE_LOC.format(cls)}, {loc}), 'msg': {msg!r}, "
            f"'input': {value!r}{ctx}}}")


def role_error(value, words: str = GENERIC_ROLE) -> str:
    """The generic class's own validator of role refusing ``value``."""
    return message_error("value_error", "Generic", "'role'", f"Value error, {words}", value,
                         f", 'ctx': {{'error': ValueError({words!r})}}")


def user_role_error(value) -> str:
    return message_error("literal_error", "User", "'role'", "Input should be 'user'", value,
                         ", 'ctx': {'expected': \"'user'\"}")


@pytest.mark.parametrize("message, errors", [
    ({"role": "bot", "content": "hi"}, [role_error("bot"), user_role_error("bot")]),
    ({"role": "USER", "content": "hi"}, [role_error("USER"), user_role_error("USER")]),
    ({"role": None, "content": "hi"}, [role_error(None, "'role' must be a string"), user_role_error(None)]),
    ({"role": "user"}, [role_error("user"), message_error("missing", "User", "'content'", "Field required",
                                                          {"role": "user"})]),
    ({"role": "assistant", "content": "hi", "tool_calls": [{"function": None}]}, [
        message_error("model_type", "Generic", "'tool_calls', 0, 'function'", "Input should be a valid dictionary "
                      "or instance of FunctionResponse", None, ", 'ctx': {'class_name': 'FunctionResponse'}"),
        user_role_error("assistant")]),
], ids=["unknown-role", "user-role-in-capitals", "null-role", "user-without-content", "null-tool-call-function"])
def test_a_chat_message_sglangs_message_classes_refuse_is_their_validation_400(ddtree, message, errors):
    """The engine took any string for a role, a user message without content for an empty one
    and ignored tool calls; SGLang's FastAPI validates each message against both classes of its
    message union and its validation handler answers 400 with each class's errors."""
    path = "/v1/chat/completions"
    res = ddtree.post(path, {"messages": [message], "max_tokens": 2})
    assert res.status == 400 and res.json() == field_errors(path, *errors), res.text


#: The loc of a user message's content parts, as pydantic names their list.
PARTS_LOC = ("'content', 'list[union[ChatCompletionMessageContentTextPart,function-after[validate_payload(), "
             "ChatCompletionMessageContentThinkingPart],ChatCompletionMessageContentImagePart,"
             "ChatCompletionMessageContentVideoPart,function-after[_to_audio_url_part(), union["
             "ChatCompletionMessageContentAudioURLPart,ChatCompletionMessageContentAudioInlinePart]],"
             "ChatCompletionMessageContentToolReferenceBlock]]', 0")
THINKING = "thinking content parts are only valid in assistant messages"


@pytest.mark.parametrize("part, error", [
    ({"type": "text"}, message_error("missing", "User", f"{PARTS_LOC}, 'ChatCompletionMessageContentTextPart', 'text'",
                                     "Field required", {"type": "text"})),
    ({"type": "text", "text": 5}, message_error("string_type", "User",
                                                f"{PARTS_LOC}, 'ChatCompletionMessageContentTextPart', 'text'",
                                                "Input should be a valid string", 5)),
    ({"type": "picture", "text": "a"}, message_error(
        "literal_error", "User", f"{PARTS_LOC}, 'ChatCompletionMessageContentTextPart', 'type'",
        "Input should be 'text'", "picture", ", 'ctx': {'expected': \"'text'\"}")),
    ({"type": "thinking", "thinking": "t"}, (  # the user class's own validator, once its fields passed
        f"{{'type': 'value_error', 'loc': ('body', {MESSAGE_LOC.format('User')}), 'msg': 'Value error, {THINKING}', "
        f"'input': {{'role': 'user', 'content': [{{'type': 'thinking', 'thinking': 't'}}]}}, "
        f"'ctx': {{'error': ValueError('{THINKING}')}}}}")),
], ids=["missing-text", "text-of-another-type", "unknown-type", "thinking-in-a-user-message"])
def test_a_malformed_content_part_is_sglangs_validation_400(ddtree, part, error):
    """The engine checked a message's content only as a list, so such a part got its own refusal
    (a 400 of another shape and words); SGLang's FastAPI validates each part against its part
    classes. The first of its errors is checked here (all of them: tests/unit/test_sglang_contract.py)."""
    res = ddtree.post("/v1/chat/completions", {"messages": [{"role": "user", "content": [part]}], "max_tokens": 2})
    body = res.json()
    assert res.status == 400 and body["type"] == "Bad Request", res.text
    assert f"\n  {error}\n" in body["message"], body["message"]


@pytest.mark.parametrize("role, part", [
    ("user", {"type": "image_url", "image_url": {"url": "http://example.com/a.png"}}),
    ("user", {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}),
    ("assistant", {"type": "thinking", "thinking": "hmm"}),
])
def test_a_well_formed_part_other_than_text_is_refused_naming_it(ddtree, role, part):
    res = ddtree.post("/v1/chat/completions", {"messages": [{"role": role, "content": [part]}], "max_tokens": 2})
    kind = "audio_url" if part["type"] == "input_audio" else part["type"]  # SGLang's class makes it a URL
    assert res.status == 400 and f"has a '{kind}' part; the embedded engine reads text only" in res.json()["message"]


def test_a_generic_role_in_capitals_and_unknown_message_names_are_served(ddtree):
    path = "/v1/chat/completions"
    res = ddtree.post(path, {"messages": [{"role": "System", "content": "Be brief.", "x": 1},
                                          {"role": "user", "content": "hi", "name": None}], "max_tokens": 2})
    assert res.status == 200, res.text


def test_nulls_for_fields_sglang_types_without_none_are_all_named_in_its_order(ddtree):
    path = "/v1/chat/completions"
    res = ddtree.post(path, {**OPENAI_REQUESTS[path], "ignore_eos": None, "stream": None,
                             "return_hidden_states": None})
    hidden = ("{'type': 'literal_error', 'loc': ('body', 'return_hidden_states', \"literal['last']\"), "
              "'msg': \"Input should be 'last'\", 'input': None, 'ctx': {'expected': \"'last'\"}}")
    assert res.status == 400 and res.json() == field_errors(
        path, null_error("stream", "bool_type", "boolean"),
        null_error("return_hidden_states", "bool_type", "boolean", "bool"), hidden,
        null_error("ignore_eos", "bool_type", "boolean")), res.text


@pytest.mark.parametrize("path", sorted(OPENAI_REQUESTS))
def test_an_openai_request_without_its_prompt_is_missing_it_as_fastapi_says(ddtree, path):
    """pydantic's missing error echoes the body as the class's before-validators left it: a chat's
    tool_choice set to "none" where it names no tools."""
    name = "prompt" if path == "/v1/completions" else "messages"
    echoed = {"max_tokens": 2, **({"tool_choice": "none"} if name == "messages" else {})}
    res = ddtree.post(path, {"max_tokens": 2})
    error = f"{{'type': 'missing', 'loc': ('body', '{name}'), 'msg': 'Field required', 'input': {echoed!r}}}"
    assert res.status == 400 and res.json() == field_errors(path, error), res.text


@pytest.mark.parametrize("path", sorted(OPENAI_REQUESTS))
def test_nulls_for_fields_sglang_types_optional_are_their_defaults(ddtree, path):
    body = {**OPENAI_REQUESTS[path], "max_tokens": 2, "stop": None, "stop_token_ids": None, "seed": None,
            "stream_options": None, "user": None, "logit_bias": None, "lora_path": None, "rid": None}
    if path == "/v1/chat/completions":
        body |= {"temperature": None, "top_p": None, "top_k": None, "max_completion_tokens": None,
                 "tool_choice": None, "tools": None, "reasoning_effort": None}
    res = ddtree.post(path, body)
    assert res.status == 200, res.text
    res = ddtree.post("/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 2, "stop": None},
                                    "rid": None, "return_logprob": None, "custom_labels": None})
    assert res.status == 200, res.text


@pytest.mark.parametrize("max_tokens", [0, -3])
def test_a_completion_of_no_tokens_is_refused_by_sglangs_validator(ddtree, max_tokens):
    """The engine said "max_tokens must be a positive integer" as a BadRequestError; SGLang's
    CompletionRequest refuses it in its own field validator, so FastAPI's validation 400 says it."""
    path = "/v1/completions"
    res = ddtree.post(path, {"prompt": PROMPT, "max_tokens": max_tokens})
    error = (f"{{'type': 'value_error', 'loc': ('body', 'max_tokens'), 'msg': 'Value error, max_tokens must be "
             f"positive', 'input': {max_tokens}, 'ctx': {{'error': ValueError('max_tokens must be positive')}}}}")
    assert res.status == 400 and res.json() == field_errors(path, error), res.text


def test_a_chat_reads_max_completion_tokens_or_max_tokens_as_sglang_does(ddtree):
    """SGLang's chat has no validator of its own for them: it serves `max_completion_tokens or
    max_tokens` (a 0 of the first defers to the second, 0 alone is no token), and a negative one
    meets its sampling check. The engine refused all three as "not a positive integer"."""
    path = "/v1/chat/completions"
    body = OPENAI_REQUESTS[path]

    def served(**fields) -> int:
        res = ddtree.post(path, {**body, "ignore_eos": True, **fields})
        assert res.status == 200, res.text
        return res.json()["usage"]["completion_tokens"]

    assert served(max_tokens=0) == 0
    assert served(max_tokens=3, max_completion_tokens=0) == 3
    assert served(max_tokens=5, max_completion_tokens=2) == 2
    res = ddtree.post(path, {**body, "max_completion_tokens": -1})
    assert res.status == 400 and res.json() == {"object": "error", "message": "max_new_tokens must be at least 0, "
                                                "got -1.", "type": "BadRequestError", "param": None, "code": 400}


@pytest.mark.parametrize("fields, words", [
    ({"messages": []}, "Messages cannot be empty."),
    ({"max_tokens": CONTEXT + 1}, f"max_completion_tokens is too large: {CONTEXT + 1}.This model supports at most "
                                  f"{CONTEXT} completion tokens."),
], ids=["no-messages", "past-the-context"])
def test_a_chat_is_refused_in_the_words_of_sglangs_chat_validation(ddtree, fields, words):
    path = "/v1/chat/completions"
    res = ddtree.post(path, {**OPENAI_REQUESTS[path], **fields})
    assert res.status == 400 and res.json() == {"object": "error", "message": words, "type": "BadRequestError",
                                                "param": None, "code": 400}, res.text


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_the_dp_rank_header_is_read_on_the_openai_routes_as_sglang_reads_it(ddtree, path):
    """The engine ignored X-Data-Parallel-Rank; SGLang's OpenAI routes route by it ahead of the
    body's routed_dp_rank and answer one that is no integer with its HTTPException's 400."""
    body = {**OPENAI_REQUESTS[path], "routed_dp_rank": 0}
    bad = ddtree.post(path, body, headers={"x-data-parallel-rank": "first"})
    assert bad.status == 400 and bad.json() == {
        "object": "error", "message": "Invalid X-Data-Parallel-Rank header: must be an integer, got 'first'",
        "type": "400", "param": None, "code": 400}, bad.text
    other = ddtree.post(path, body, headers={"X-Data-Parallel-Rank": "1"})
    assert other.status == 400 and error_message(other) == "routed_dp_rank=1 out of range [0, 1)", other.text
    assert ddtree.post(path, {**body, "routed_dp_rank": 1}, headers={"X-Data-Parallel-Rank": "0"}).status == 200


def test_generate_reads_no_dp_rank_header_as_sglangs_does(ddtree):
    res = ddtree.post("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2}},
                      headers={"X-Data-Parallel-Rank": "x"})
    assert res.status == 200, res.text


@pytest.mark.parametrize("method, path, status, detail, allow", [
    ("GET", "/no/such/route", 404, "Not Found", None),
    ("POST", "/v1/embeddings/nope", 404, "Not Found", None),
    ("GET", "/generate", 405, "Method Not Allowed", {"POST", "PUT"}),
    ("DELETE", "/v1/chat/completions", 405, "Method Not Allowed", {"POST"}),
])
def test_an_unrouted_request_gets_fastapis_json_answer(ddtree, method, path, status, detail, allow):
    """aiohttp answered these in plain text ("404: Not Found"); SGLang's FastAPI answers JSON
    {"detail": ...}, and names the methods a route takes."""
    conn = http.client.HTTPConnection("127.0.0.1", ddtree.port, timeout=30)
    try:
        conn.request(method, path)
        res = conn.getresponse()
        body = res.read()
        assert res.status == status and json.loads(body) == {"detail": detail}, body
        assert res.getheader("Content-Type").startswith("application/json")
        if allow is not None:
            assert set(res.getheader("Allow").split(", ")) == allow
    finally:
        conn.close()


PROMPT_OR_MESSAGES = "Exactly one of 'prompt' or 'messages' must be provided."


@pytest.mark.parametrize("body, errors", [
    ({"prompt": "a", "add_special_tokens": None}, [type_error("add_special_tokens", "bool_type", "boolean", None)]),
    ({"prompt": "a", "continue_final_message": None},
     [type_error("continue_final_message", "bool_type", "boolean", None)]),
    ({"prompt": "a", "model": None}, [type_error("model", "string_type", "string", None)]),
    ({"prompt": "a", "add_special_tokens": "maybe"},
     [type_error("add_special_tokens", "bool_parsing", "boolean, unable to interpret input", "maybe")]),
    ({"prompt": 7}, [type_error("prompt", "list_type", "list", 7, "list[str]"),
                     type_error("prompt", "string_type", "string", 7, "str")]),
    ({"prompt": ["a", 1]}, [type_error("prompt", "string_type", "string", 1, "list[str]", 1),
                            type_error("prompt", "string_type", "string", ["a", 1], "str")]),
    ({}, [f"{{'type': 'value_error', 'loc': ('body',), 'msg': \"Value error, {PROMPT_OR_MESSAGES}\", 'input': {{}}, "
          f"'ctx': {{'error': ValueError(\"{PROMPT_OR_MESSAGES}\")}}}}"]),
    ({"prompt": None, "add_generation_prompt": None},
     [f"{{'type': 'value_error', 'loc': ('body',), 'msg': \"Value error, {PROMPT_OR_MESSAGES}\", 'input': "
      f"{{'prompt': None, 'add_generation_prompt': None}}, 'ctx': {{'error': ValueError(\"{PROMPT_OR_MESSAGES}\")}}}}"]),
])
def test_tokenize_validates_its_body_as_sglangs_tokenize_request(ddtree, body, errors):
    """A null for a field TokenizeRequest types without None ("add_special_tokens": null) was read
    as the default or answered in the engine's words, as were a prompt of another type and a body
    with neither prompt nor messages; SGLang's FastAPI refuses them all first, in its validation 400."""
    res = ddtree.post("/v1/tokenize", body)
    assert res.status == 400 and res.json() == field_errors("/v1/tokenize", *errors), res.text


def test_tokenize_reads_its_fields_as_pydantics_lax_mode(ddtree):
    """"no" is false for add_special_tokens there (the engine refused it)."""
    res = ddtree.post("/v1/tokenize", {"prompt": "ab", "add_special_tokens": "no", "continue_final_message": 0})
    assert res.status == 200 and res.json()["tokens"] == list(b"ab"), res.text


@pytest.mark.parametrize("path", sorted(OPENAI_REQUESTS))
@pytest.mark.parametrize("max_tokens", ["3", " 3 ", 3.0, "3.0"])
def test_a_value_pydantic_reads_as_the_fields_type_is_served_as_sglang_serves_it(ddtree, path, max_tokens):
    """SGLang's FastAPI validates a body in pydantic's lax mode: integer text or an integral number
    is an int, "yes" and 1 are true, a number is a float. The engine refused them as 'invalid type'."""
    res = ddtree.post(path, {**OPENAI_REQUESTS[path], "max_tokens": max_tokens, "ignore_eos": "yes",
                             "temperature": "0", "n": 1.0, "echo" if path == "/v1/completions" else "logprobs": 0})
    assert res.status == 200 and res.json()["usage"]["completion_tokens"] == 3, res.text
    streamed = ddtree.post(path, {**OPENAI_REQUESTS[path], "max_tokens": 2, "stream": "true"})
    assert streamed.status == 200 and sse_events(streamed.body)[-1] == "[DONE]", streamed.text


@pytest.mark.parametrize("path, field, value, errors", [
    ("/generate", "stream", 5, [("bool_parsing", "boolean, unable to interpret input")]),
    ("/generate", "stream", [], [("bool_type", "boolean")]),
    ("/v1/completions", "stream", "maybe", [("bool_parsing", "boolean, unable to interpret input")]),
    ("/v1/completions", "max_tokens", "four", [("int_parsing", "integer, unable to parse string as an integer")]),
    ("/v1/completions", "temperature", [1], [("float_type", "number")]),
    ("/v1/completions", "stop", 5, [("list_type", "list", "list[str]"), ("string_type", "string", "str")]),
    ("/v1/chat/completions", "n", "x", [("int_parsing", "integer, unable to parse string as an integer")]),
    ("/v1/chat/completions", "top_p", "high", [("float_parsing", "number, unable to parse string as a number")]),
    ("/v1/chat/completions", "model", 7, [("string_type", "string")]),
])
def test_a_value_pydantic_refuses_for_the_fields_type_is_fastapis_400(ddtree, path, field, value, errors):
    """The engine answered a wrong type in its own words ('invalid type: ...'); SGLang's FastAPI
    refuses it first, its validation handler listing pydantic's errors (a union's once a member)."""
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": 2}} if path == "/generate" else {
        **OPENAI_REQUESTS[path], "max_tokens": 2}
    res = ddtree.post(path, {**body, field: value})
    assert res.status == 400 and res.json() == field_errors(
        path, *(type_error(field, kind, words, value, *suffix) for kind, words, *suffix in errors)), res.text


@pytest.mark.parametrize("field, value, errors", [
    ("text", 5, [("string_type", "string", "str"), ("list_type", "list", "list[str]")]),
    ("rid", 5, [("string_type", "string", "str"), ("list_type", "list", "list[str]")]),
    ("return_logprob", [], None),
    ("return_logprob", "maybe", [("list_type", "list", "list[bool]"),
                                 ("bool_parsing", "boolean, unable to interpret input", "bool")]),
    ("sampling_params", "x", [("list_type", "list", "list[dict[str,any]]"),
                              ("dict_type", "dictionary", "dict[str,any]")]),
])
def test_a_generate_field_pydantic_refuses_is_fastapis_400(ddtree, field, value, errors):
    """GenerateReqInput's Optional fields are validated by FastAPI too: a value pydantic cannot read
    as the field's type is its validation 400 (a union's error once a member), not the engine's words."""
    res = ddtree.post("/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 2}, field: value})
    if errors is None:
        assert res.status == 200, res.text
        return
    assert res.status == 400 and res.json() == field_errors(
        "/generate", *(type_error(field, kind, words, value, *suffix) for kind, words, *suffix in errors)), res.text


@pytest.mark.parametrize("input_ids, words", [
    (5, "must be list or null; got int"), ([1.0], "elements must be int or list; got float"),
    ([[1], None], "row 1: must not be None"), ([1, 2**70], "contains non-int64 element"),
])
def test_generates_input_ids_are_refused_by_sglangs_own_validator_first(ddtree, input_ids, words):
    """GenerateReqInput reads input_ids with a validator of its own, whose refusal is FastAPI's 400."""
    res = ddtree.post("/generate", {"input_ids": input_ids, "sampling_params": {"max_new_tokens": 2}})
    assert res.status == 400 and res.json()["message"].startswith(
        f"1 validation error:\n  {{'type': 'value_error', 'loc': ('body', 'input_ids'), 'msg': 'Value error, {words}"), res.text


@pytest.mark.parametrize("field, value, words", [
    ("stream", "on", 'invalid type: string "on", expected a boolean'),
    ("return_logprob", "no", 'invalid type: string "no", expected a value or an array of values for BoolOrList'),
    ("priority", "1", 'invalid type: string "1", expected i64'),
    ("sampling_params", {"max_new_tokens": 2, "logit_bias": {"1": "x"}}, 'invalid type: string "x", expected f64'),
])
def test_a_generate_value_only_pydantics_lax_mode_reads_is_the_contracts_refusal(ddtree, field, value, words):
    """pydantic reads "on" as true, but SGLang's /generate then checks the JSON as sent against its API
    contract, strictly: a value of another JSON type is that check's 400, not served."""
    res = ddtree.post("/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 2}, field: value})
    assert res.status == 400 and res.json() == {"error": words}, res.text


def test_a_chat_message_that_is_no_object_is_fastapis_400(ddtree):
    """SGLang's FastAPI refuses it as each class of its message union does; the engine answered in its words."""
    res = ddtree.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}, 1]})
    errors = [f"{{'type': 'model_type', 'loc': ('body', 'messages', 1, 'function-after[validate_thinking_parts_role(), "
              f"{name}]'), 'msg': 'Input should be a valid dictionary or instance of {name}', 'input': 1, "
              f"'ctx': {{'class_name': '{name}'}}}}"
              for name in ("ChatCompletionMessageGenericParam", "ChatCompletionMessageUserParam")]
    assert res.status == 400 and res.json() == field_errors("/v1/chat/completions", *errors), res.text


@pytest.mark.parametrize("path", sorted(OPENAI_REQUESTS))
def test_a_malformed_openai_request_gets_the_validation_handlers_body(ddtree, path):
    """As SGLang's FastAPI answers a body it cannot parse: its validation handler's shape."""
    res = ddtree.request("POST", path, raw=b"{not json")
    assert res.status == 400 and res.json()["type"] == "Bad Request" and "JSON" in res.json()["message"], res.text


def test_server_info_reports_args_and_acceptance(ddtree):
    ddtree.generate(PROMPT, max_new_tokens=200)  # steps enough for a decode-log line
    for path in ("/server_info", "/get_server_info"):
        info = ddtree.get(path).json()
        assert info["method"] == "ddtree" and info["budget"] == 16
        assert info["speculative_algorithm"] == "DDTREE" and info["speculative_num_draft_tokens"] == 17
        assert info["context_length"] == CONTEXT and info["max_req_input_len"] == CONTEXT - 6
        assert info["internal_states"][0]["avg_spec_accept_length"] > 1.0
        assert "version" in info


def test_server_info_internal_state_carries_sglangs_keys(ddtree):
    """SGLang's internal state is its scheduler's resolved server arguments plus the world size,
    its startup figures and its running-request limit; the engine's held only live counts, so a
    client reading `internal_states[0]["max_running_requests"]` or its `world_size` found nothing."""
    for path in ("/server_info", "/get_server_info"):
        info = ddtree.get(path).json()
        state = info["internal_states"][0]
        args = {k: v for k, v in info.items() if k not in (
            "internal_states", "max_total_num_tokens", "max_req_input_len", "startup_time", "version",
            "frontend", "cuda_visible_devices", "cuda_device_count", "cuda_device_uuids")}
        assert {k: state.get(k) for k in args} == args
        assert state["world_size"] == 1 and info["tp_size"] == info["dp_size"] == info["pp_size"] == 1
        assert state["effective_max_running_requests_per_dp"] == info["max_running_requests"]
        startup = state["startup_time"]
        assert set(startup) == {"load_weight", "kv_cache_allocation", "scheduler_e2e", "cuda_graph"}
        assert set(startup["cuda_graph"]) == {"prefill", "decode", "target_verify", "draft_prefill",
                                              "draft_decode", "draft_extend"}
        assert not any(startup["cuda_graph"].values())  # the engine captures no CUDA graph
        assert 0 < startup["load_weight"] <= startup["scheduler_e2e"]
        assert 0 < startup["kv_cache_allocation"] <= startup["scheduler_e2e"]
        # the handler's own: the engine-wide figures, the scheduler's plus the launch's whole time
        assert info["startup_time"] == {**startup, "tokenizer_e2e": info["startup_time"]["tokenizer_e2e"]}
        assert info["startup_time"]["tokenizer_e2e"] >= startup["scheduler_e2e"]
        assert info["frontend"] == "python"
        assert {"last_gen_throughput", "memory_usage"} <= set(state)


def test_no_prefix_is_reused_and_server_info_says_so_as_sglang_would(ddtree):
    """The engine prefills every prompt whole, as SGLang does with --disable-radix-cache; its
    /server_info claimed a radix cache by leaving that flag out (SGLang's default is on), which
    contradicted the cached_tokens of 0 on a prompt served twice."""
    info = ddtree.get("/server_info").json()
    assert info["disable_radix_cache"] is True
    mark = len(ddtree.lines)
    metas = [ddtree.generate(PROMPT + " again", max_new_tokens=4)["meta_info"] for _ in range(2)]
    assert [m["cached_tokens"] for m in metas] == [0, 0]
    prefills = [line for line in ddtree.lines[mark:] if "Prefill batch" in line]
    assert len(prefills) == 2 and all("#cached-token: 0," in line for line in prefills), prefills
    assert read_metric(ddtree, "sglang:cache_hit_rate") == 0


@pytest.mark.parametrize("old, new", [("/get_server_info", "/server_info"), ("/get_model_info", "/model_info")])
def test_an_old_endpoint_name_is_served_with_sglangs_deprecation_warning(ddtree, old, new):
    """SGLang still serves the names before the rename, and warns on each call; the engine
    served them in silence."""
    warning = (TIMESTAMP + rf"\] Endpoint '{old}' is deprecated and will be removed in a future version\. "
               rf"Please use '{new}' instead\.$")
    mark = len(ddtree.lines)
    assert set(ddtree.get(new).json()) == set(ddtree.get(old).json())
    ddtree.wait_for_line(warning, timeout=5, after=mark)
    assert len([line for line in ddtree.lines[mark:] if "is deprecated" in line]) == 1


def test_server_info_without_speculation_has_no_acceptance(ar):
    ar.generate(PROMPT, max_new_tokens=8)
    info = ar.get("/server_info").json()
    assert info["speculative_algorithm"] is None
    assert "avg_spec_accept_length" not in info["internal_states"][0]


def test_model_info_and_models_list(ddtree):
    for path in ("/model_info", "/get_model_info"):
        info = ddtree.get(path).json()
        assert info["is_generation"] is True and info["model_path"] == "specdec-embedded/tiny"
    models = ddtree.get("/v1/models").json()
    assert models["object"] == "list"
    assert models["data"][0]["id"] == "specdec-embedded/tiny"
    assert models["data"][0]["max_model_len"] == CONTEXT


def test_model_info_has_every_key_sglangs_has(ddtree, sglang_reference):
    """Clients read /model_info as SGLang answers it (its `served_model_name` names the model the
    server answers under): the engine left out five of SGLang's keys, `served_model_name` among them."""
    import ast
    tree = ast.parse((sglang_reference / "sglang" / "srt" / "entrypoints" / "http_server.py").read_text())
    handler = next(n for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef) and n.name == "model_info")
    sglang_keys = [k.value for n in ast.walk(handler) if isinstance(n, ast.Dict)
                   for k in n.keys if isinstance(k, ast.Constant)]
    assert "served_model_name" in sglang_keys, sglang_keys
    info = ddtree.get("/model_info").json()
    assert [k for k in sglang_keys if k not in info] == []
    assert list(info)[: len(sglang_keys)] == sglang_keys  # SGLang's order, the engine's own keys after
    assert info["served_model_name"] == info["model_path"] == "specdec-embedded/tiny"
    assert (info["load_format"], info["reasoning_parser"], info["disaggregation_mode"]) == ("auto", None, "null")


def raw_request(engine, method: str, path: str, body: bytes = b"") -> tuple[int, dict, bytes]:
    """One request, no redirect followed: its status, headers and body."""
    conn = http.client.HTTPConnection("127.0.0.1", engine.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


@pytest.mark.parametrize("method, path, target", [
    ("POST", "/generate/", "/generate"),
    ("GET", "/health/?x=1", "/health?x=1"),
    ("POST", "/v1/completions//", "/v1/completions"),
    ("DELETE", "/generate/", "/generate"),  # a route of another method: Starlette redirects too
])
def test_a_trailing_slash_is_redirected_as_starlette_does(ddtree, method, path, target):
    """SGLang's app (Starlette's redirect_slashes) answers a routed path with a trailing slash with
    a 307 to the path without it, so a client that follows it is served; the engine gave a 404."""
    status, headers, _ = raw_request(ddtree, method, path)
    assert (status, headers.get("Location")) == (307, ddtree.url + target)


def test_an_unrouted_path_with_a_trailing_slash_stays_not_found(ddtree):
    status, _, body = raw_request(ddtree, "GET", "/no_such_route/")
    assert (status, json.loads(body)) == (404, {"detail": "Not Found"})


def test_an_empty_model_id_is_sglangs_model_not_found(ddtree):
    """SGLang's `/v1/models/{model:path}` matches an empty id too: its 404 naming the model; the
    engine's route took none and gave the bare 404 of an unrouted path."""
    res = ddtree.get("/v1/models/")
    assert res.status == 404
    assert res.json()["error"]["code"] == "model_not_found" and "'' does not exist" in res.json()["error"]["message"]


@pytest.mark.parametrize("path", ["/health", "/health_generate", "/ready", "/server_info", "/model_info",
                                  "/v1/models", "/v1/models/x"])
def test_a_get_route_answers_head_with_fastapis_405(ddtree, path):
    """FastAPI's GET routes take no HEAD: SGLang answers it 405, its Allow naming GET alone. The
    engine's aiohttp routes served HEAD (a /health check ran) and named HEAD in every Allow."""
    status, headers, body = raw_request(ddtree, "HEAD", path)
    assert (status, headers.get("Allow"), body) == (405, "GET", b"")
    status, headers, body = raw_request(ddtree, "POST", path)
    assert (status, headers.get("Allow"), json.loads(body)) == (405, "GET", {"detail": "Method Not Allowed"})


def test_the_root_answers_as_sglangs(ddtree):
    """SGLang's GET and HEAD / answer "SGLang is running" (a root probe's); the engine's a 404."""
    status, headers, body = raw_request(ddtree, "GET", "/")
    assert (status, headers["Content-Type"], json.loads(body)) == (200, "application/json", "SGLang is running")
    status, headers, body = raw_request(ddtree, "HEAD", "/")
    assert (status, headers["Content-Length"], body) == (200, str(len(b'"SGLang is running"')), b"")


@pytest.mark.parametrize("method, path", [("GET", "/metrics"), ("POST", "/metrics"), ("HEAD", "/metrics"),
                                          ("GET", "/metrics/"), ("DELETE", "/metrics/anything")])
def test_metrics_answer_every_method_and_path_under_metrics_as_sglangs_mount(ddtree, method, path):
    """SGLang mounts Prometheus' app on every path starting with /metrics, for every method; the
    engine took GET /metrics alone (POST a 405, /metrics/ a 307)."""
    status, headers, body = raw_request(ddtree, method, path)
    assert status == 200 and headers["Content-Type"].startswith("text/plain"), (status, headers)
    assert (body == b"") if method == "HEAD" else (b"sglang:num_requests_total" in body), body[:200]


def test_metrics_are_served_as_a_scraper_asks_as_prometheus_app_does(ddtree):
    """Prometheus' ASGI app (SGLang's /metrics) gzips for a client that takes gzip, answers
    OpenMetrics to one that asks for it, and only the ``name[]`` metrics where named; the engine
    sent every metric as plain, uncompressed text."""
    conn = http.client.HTTPConnection("127.0.0.1", ddtree.port, timeout=30)
    try:
        conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
        res = conn.getresponse()
        assert res.getheader("Content-Encoding") == "gzip"
        assert b"sglang:num_requests_total" in gzip.decompress(res.read())
        conn.request("GET", "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        res = conn.getresponse()
        assert res.getheader("Content-Type").startswith("application/openmetrics-text")
        assert res.read().endswith(b"# EOF\n")
    finally:
        conn.close()
    only = ddtree.get("/metrics?name[]=sglang:num_requests_total").text
    assert set(re.findall(r"^(sglang:\w+)", only, re.M)) == {"sglang:num_requests_total"}, only


@pytest.mark.parametrize("method, path, status", [("GET", "/no/such/route", 404), ("DELETE", "/generate", 405),
                                                  ("GET", "/v1/models", 200), ("GET", "/model_info", 200),
                                                  ("POST", "/generate", 400)])
def test_json_answers_are_typed_and_written_as_fastapis(ddtree, method, path, status):
    """Starlette's JSONResponse and orjson: ``application/json`` without aiohttp's charset, and
    compact JSON, so a client that compares the type, or the bytes, sees SGLang's."""
    got, headers, body = raw_request(ddtree, method, path, body=b"{" if method == "POST" else None)
    assert (got, headers["Content-Type"]) == (status, "application/json")
    assert body == json.dumps(json.loads(body), separators=(",", ":"), ensure_ascii=False).encode()


@pytest.mark.parametrize("path, body", [
    ("/generate", {"text": "hi é", "stream": True, "sampling_params": {"max_new_tokens": 3}}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi é"}], "max_tokens": 3, "stream": True}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}}),
])
def test_a_stream_is_typed_and_written_as_sglangs(ddtree, path, body):
    """SGLang's StreamingResponse: ``text/event-stream; charset=utf-8`` (Starlette adds the charset
    to a text type), no Cache-Control, events in compact JSON (orjson, pydantic); the engine sent
    no charset, a Cache-Control and spaced JSON."""
    status, headers, raw = raw_request(ddtree, "POST", path, body=json.dumps(body).encode())
    assert status == 200 and headers["Content-Type"] == "text/event-stream; charset=utf-8", headers
    assert "Cache-Control" not in headers, headers
    events = sse_events(raw)[:-1]
    assert events and all(e == json.dumps(json.loads(e), separators=(",", ":"), ensure_ascii=False) for e in events)


def metric_series(engine, name: str) -> dict[frozenset, float]:
    """Each series of `name` in /metrics, by its labels (a set of name-value pairs)."""
    text = engine.get("/metrics").text
    found = re.findall(rf"^{re.escape(name)}(?:{{([^}}]*)}})? (\S+)$", text, re.M)
    assert found, f"{name} not in /metrics:\n{text[:2000]}"
    return {frozenset(re.findall(r'(\w+)="([^"]*)"', labels)): float(value) for labels, value in found}


def read_metric(engine, name: str) -> float:
    """`name` summed over its series (a counter SGLang splits by is_streaming has two)."""
    return sum(metric_series(engine, name).values())


def test_metrics_use_sglang_names_and_count(ddtree):
    before = read_metric(ddtree, "sglang:generation_tokens_total")
    verify_before = read_metric(ddtree, "sglang:spec_verify_calls_total")
    meta = ddtree.generate(PROMPT, max_new_tokens=40)["meta_info"]
    assert read_metric(ddtree, "sglang:generation_tokens_total") == before + 40
    # per request verify steps; the first token comes from prefill, as in SGLang
    assert read_metric(ddtree, "sglang:spec_verify_calls_total") == verify_before + meta["spec_verify_ct"]
    assert read_metric(ddtree, "sglang:spec_accept_length") > 1.0
    assert read_metric(ddtree, "sglang:spec_num_draft_tokens") == 17
    for name in ("sglang:prompt_tokens_total", "sglang:num_requests_total", "sglang:num_running_reqs",
                 "sglang:num_queue_reqs", "sglang:token_usage", "sglang:spec_accept_rate", "sglang:gen_throughput",
                 "sglang:time_to_first_token_seconds_count", "sglang:e2e_request_latency_seconds_count",
                 "sglang:inter_token_latency_seconds_count"):
        read_metric(ddtree, name)


def test_metrics_carry_sglangs_labels_and_count_a_request_when_it_finishes(engines):
    """The token, request and verify counters rose every decode step and carried only the model's
    label, where SGLang's tokenizer counts a request once it finishes, split by is_streaming, and
    labels every series with the engine type (its scheduler's gauges with the ranks too): a scrape
    mid-request saw counts SGLang shows only at its end, and a query by SGLang's labels found
    nothing."""
    engine = engines("--method", "ddtree", "--budget", "8", "--context-length", str(CONTEXT))
    names = ("sglang:prompt_tokens_total", "sglang:generation_tokens_total", "sglang:num_requests_total",
             "sglang:spec_verify_calls_total")
    before = {name: read_metric(engine, name) for name in names}
    body = json.dumps({"text": PROMPT, "stream": True,
                       "sampling_params": {"max_new_tokens": 300, "ignore_eos": True, "temperature": 0}}).encode()
    req = urllib.request.Request(engine.url + "/generate", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        first = resp.readline()  # the request runs: its first chunk is out
        assert first.startswith(b"data: "), first
        mid = {name: read_metric(engine, name) for name in names}
        rest = resp.read().decode()
    assert mid == before, (before, mid)
    last = json.loads([e for e in sse_events(first + rest.encode()) if e != "[DONE]"][-1])["meta_info"]
    tokenizer = frozenset({("model_name", "specdec-embedded/tiny"), ("engine_type", "unified")})
    streamed = tokenizer | {("is_streaming", "true")}
    assert metric_series(engine, "sglang:generation_tokens_total")[streamed] == before[names[1]] + 300
    assert metric_series(engine, "sglang:prompt_tokens_total")[streamed] == before[names[0]] + last["prompt_tokens"]
    assert metric_series(engine, "sglang:num_requests_total")[streamed] == before[names[2]] + 1
    assert metric_series(engine, "sglang:spec_verify_calls_total")[tokenizer] == \
        before[names[3]] + last["spec_verify_ct"]
    assert set(metric_series(engine, "sglang:num_running_reqs")) == {
        tokenizer | {("tp_rank", "0"), ("pp_rank", "0"), ("moe_ep_rank", "0")}}
    assert streamed in metric_series(engine, "sglang:time_to_first_token_seconds_count")


def test_load_gauges_read_zero_once_idle(ar):
    """They were set every decode-log interval only, so the last one of a request (1 running)
    stood once the engine went idle; SGLang publishes the idle values."""
    ar.generate(PROMPT, max_new_tokens=23)  # 22 decode steps: the last log (step 20) saw 1 running
    deadline = time.monotonic() + 5
    while read_metric(ar, "sglang:num_running_reqs") != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert read_metric(ar, "sglang:num_running_reqs") == 0
    assert read_metric(ar, "sglang:token_usage") == 0
    assert read_metric(ar, "sglang:gen_throughput") == 0  # SGLang's idle publish zeroes it too


def test_flush_cache_resets_lifetime_acceptance(ddtree):
    ddtree.generate(PROMPT, max_new_tokens=200)  # steps enough for a decode-log line
    assert "avg_spec_accept_length" in ddtree.get("/server_info").json()["internal_states"][0]
    assert ddtree.get("/health").status == 200  # a health check in flight must not block the flush
    res = ddtree.post("/flush_cache")
    assert res.status == 200 and res.text.startswith("Cache flushed.")
    assert "avg_spec_accept_length" not in ddtree.get("/server_info").json()["internal_states"][0]
    ddtree.generate(PROMPT, max_new_tokens=200)
    assert ddtree.get("/server_info").json()["internal_states"][0]["avg_spec_accept_length"] > 1.0


def test_server_info_acceptance_moves_at_decode_log_lines_as_sglangs_does(ddtree):
    """It took every decode step in at once, where SGLang folds a decode-log interval into its
    lifetime totals when it logs that interval: a client polling /server_info mid-workload saw
    figures SGLang never shows, and before the first decode-log line a figure SGLang leaves out."""
    assert ddtree.post("/flush_cache").status == 200
    mark = len(ddtree.lines)
    meta = ddtree.generate(PROMPT, max_new_tokens=200)["meta_info"]
    steps = meta["spec_verify_ct"]  # after a flush, this request's decode steps are all there are
    logged = [float(m.group(1)) for line in ddtree.lines[mark:]
              if (m := re.search(r"Decode batch, .*accept len: (\d+\.\d+)", line))]
    assert len(logged) == steps // 5 >= 1 and steps % 5, (steps, logged)
    state = ddtree.get("/server_info").json()["internal_states"][0]
    # one request, 5 steps a line: the lifetime figure is the mean of the lines' figures
    assert state["avg_spec_accept_length"] == pytest.approx(sum(logged) / len(logged), abs=0.006)
    assert state["avg_spec_accept_length"] != pytest.approx(meta["completion_tokens"] / steps, abs=0.006)
    assert ddtree.post("/flush_cache").status == 200
    ddtree.generate(PROMPT, max_new_tokens=8)  # fewer steps than an interval: no line, no figure
    assert "avg_spec_accept_length" not in ddtree.get("/server_info").json()["internal_states"][0]


def _stream_in_background(engine, max_new_tokens: int, **fields) -> threading.Thread:
    """A streaming request (with ``fields``, a rid say) that has started running (its first chunk
    is out) when this returns; the thread reads the rest."""
    body = json.dumps({"text": PROMPT, "stream": True, "sampling_params": {
        "max_new_tokens": max_new_tokens, "ignore_eos": True, "temperature": 0}, **fields}).encode()
    resp = urllib.request.urlopen(urllib.request.Request(
        engine.url + "/generate", data=body, headers={"Content-Type": "application/json"}), timeout=60)
    assert resp.readline().startswith(b"data: ")
    thread = threading.Thread(target=lambda: (resp.read(), resp.close()), daemon=True)
    thread.start()
    return thread


def test_flush_cache_answers_and_waits_as_sglangs_does(engines):
    """A flush refused for pending requests answered SGLang's success text (with a 400), logged
    other words, and `timeout` (SGLang waits up to that long for the server to go idle) was
    ignored: a script's `/flush_cache?timeout=30` between runs failed at once on the engine.
    The request running meanwhile is one the test ends (aborts) once the deferred flush waits."""
    engine = engines("--method", "ar", "--fault-slow-factor", "40", "--context-length", str(CONTEXT))
    running = _stream_in_background(engine, 400, rid="running")
    mark = len(engine.lines)
    res = engine.post("/flush_cache")
    assert (res.status, res.text) == (400, "Flush cache failed.\n")
    engine.wait_for_line(TIMESTAMP + r" TP0\] Cache not flushed because there are pending requests\. "
                         r"#queue-req: 0, #running-req: 1$", timeout=5, after=mark)
    res = engine.post("/flush_cache?timeout=0.1")
    assert (res.status, res.text) == (400, "Timed out waiting for idle state.")
    engine.wait_for_line(r"TP0\] Deferred flush_cache timed out while waiting for idle state\.$", timeout=5,
                         after=mark)
    waiting: list = []
    flusher = threading.Thread(target=lambda: waiting.append(engine.post("/flush_cache?timeout=60")))
    flusher.start()
    while True:  # a second flush meets the deferred one once it is pending
        other = engine.post("/flush_cache")
        if other.text != "Flush cache failed.\n" or not flusher.is_alive():
            break
    assert (other.status, other.text) == (400, "Another flush_cache is already in progress.")
    assert flusher.is_alive()  # still waiting for idle
    engine.post("/abort_request", {"rid": "running"})
    flusher.join(60)
    running.join(60)
    assert waiting[0].status == 200 and waiting[0].text.startswith("Cache flushed.")
    engine.wait_for_line(TIMESTAMP + r" TP0\] Cache flushed successfully!$", timeout=5, after=mark)
    for query, words in (("-1", "Input should be greater than or equal to 0"),
                         ("soon", "Input should be a valid number")):
        res = engine.post(f"/flush_cache?timeout={query}")
        assert res.status == 400 and res.json()["type"] == "Bad Request", res.text
        assert words in res.json()["message"] and "'query', 'timeout'" in res.json()["message"], res.text


def _decode_figures_until_flush(engine, prompt: str, max_new_tokens: int) -> list[str]:
    """The decode-log figures (time-dependent throughput cut) of one request, then a flush
    whose log line marks where its lines end."""
    mark = len(engine.lines)
    engine.generate(prompt, max_new_tokens=max_new_tokens)
    assert engine.post("/flush_cache").status == 200
    engine.wait_for_line(r"Cache flushed successfully!", timeout=5, after=mark)
    lines = engine.lines[mark:]
    lines = lines[:next(i for i, line in enumerate(lines) if "Cache flushed successfully!" in line)]
    return [re.sub(r"gen throughput \(token/s\): \S+", "", line.split("] ", 1)[1])
            for line in lines if "Decode batch" in line or "DDTree verify" in line]


def test_a_flush_clears_the_decode_log_interval_as_sglangs_does(ddtree):
    """The interval's step count and acceptance counts outlived a flush, so the first decode-log
    line after one came early and mixed in the steps before it: the same request logged other
    figures depending on what ran before the flush."""
    assert ddtree.post("/flush_cache").status == 200
    _decode_figures_until_flush(ddtree, "Something else entirely, and longer.", 37)
    after_other = _decode_figures_until_flush(ddtree, PROMPT, 48)
    after_itself = _decode_figures_until_flush(ddtree, PROMPT, 48)
    assert after_other and after_other == after_itself


def test_concurrent_requests_are_batched_and_unchanged(ddtree):
    prompts = [f"Request number {i}: tell me a story." for i in range(4)]
    alone = [ddtree.generate(p, max_new_tokens=120)["output_ids"] for p in prompts]
    mark = len(ddtree.lines)
    results: list = [None] * len(prompts)

    def run(i: int) -> None:
        results[i] = ddtree.generate(prompts[i], max_new_tokens=120)["output_ids"]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == alone, "a request's output must not depend on what shares its batch"
    running = [int(m.group(1)) for line in ddtree.lines[mark:]
               if (m := re.search(r"Decode batch, #running-req: (\d+)", line))]
    assert max(running) >= 2, "concurrent requests were not decoded together"


def test_decode_log_lines_follow_sglang_format(ddtree):
    ddtree.generate(PROMPT, max_new_tokens=64)
    ddtree.wait_for_line(
        TIMESTAMP + r" TP0\] Decode batch, #running-req: \d+, #token: \d+, token usage: \d+\.\d\d, "
        r"accept len: \d+\.\d\d, accept rate: \d+\.\d\d, cuda graph: False, "
        r"gen throughput \(token/s\): \d+\.\d\d, #queue-req: \d+$", timeout=5)
    m = ddtree.wait_for_line(r"avg_accepted_drafts=(\d+\.\d+) avg_commit_len=(\d+\.\d+) "
                             r"avg_accepted_depth=(\d+\.\d+)", timeout=5)
    drafts, commit, depth = map(float, m.groups())
    assert commit == pytest.approx(drafts + 1, abs=0.011) and depth == drafts


def test_prefill_log_lines_follow_sglang_format(ddtree):
    """The engine's prefill line stopped at `#queue-req: N, `; SGLang's goes on with the pending
    prompt tokens, the graph flag and the input throughput."""
    mark = len(ddtree.lines)
    ddtree.generate(PROMPT, max_new_tokens=4)
    ddtree.wait_for_line(
        TIMESTAMP + r" TP0\] Prefill batch, #new-seq: 1, #new-token: 30, #cached-token: 0, token usage: \d+\.\d\d, "
        r"#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, "
        r"input throughput \(token/s\): \d+\.\d\d$", timeout=5, after=mark)


def test_autoregressive_decode_log_has_no_acceptance(ar):
    ar.generate(PROMPT, max_new_tokens=32)
    m = ar.wait_for_line(r"TP0\] Decode batch, .*", timeout=5)
    assert "accept len" not in m.group(0) and "gen throughput (token/s)" in m.group(0)


@pytest.fixture(scope="module")
def loaded_small_batch(module_engines, tmp_path_factory):
    """The same seeded weights, saved and loaded from safetensors, served two at a time."""
    import torch

    from pytest_specdec.engine.model import PRESETS, TargetModel

    file = tmp_path_factory.mktemp("weights") / "tiny.safetensors"
    TargetModel.from_seed(PRESETS["tiny"], 0, torch.device("cpu"), torch.float32, 64).save_safetensors(file)
    return module_engines("--method", "ddtree", "--budget", "16", "--model-path", str(file), "--max-batch", "2",
                          "--decode-log-interval", "2", "--context-length", str(CONTEXT))


def test_queued_requests_finishing_at_different_times_keep_their_outputs(ddtree, loaded_small_batch):
    """Four requests on two slots: they queue, finish at different steps, and the survivors'
    KV caches are moved into freed slots; every output must still be the seeded model's."""
    engine = loaded_small_batch
    jobs = [(f"Job {i} says:", n) for i, n in enumerate((30, 120, 60, 90))]
    expected = [ddtree.generate(p, max_new_tokens=n)["output_ids"] for p, n in jobs]
    mark = len(engine.lines)
    results: list = [None] * len(jobs)

    def run(i: int) -> None:
        results[i] = engine.generate(jobs[i][0], max_new_tokens=jobs[i][1])["output_ids"]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == expected
    queued = [int(m.group(1)) for line in engine.lines[mark:] if (m := re.search(r"#queue-req: (\d+)$", line))]
    running = [int(m.group(1)) for line in engine.lines[mark:]
               if (m := re.search(r"Decode batch, #running-req: (\d+)", line))]
    assert max(running) == 2 and max(queued) >= 1


def test_client_disconnect_mid_stream_frees_the_slot(loaded_small_batch):
    import http.client

    engine = loaded_small_batch
    mark = len(engine.lines)
    aborted = read_metric(engine, "sglang:num_aborted_requests_total")
    conn = http.client.HTTPConnection("127.0.0.1", engine.port, timeout=30)
    body = json.dumps({"text": PROMPT, "stream": True, "sampling_params": {"max_new_tokens": 450, "ignore_eos": True}})
    conn.request("POST", "/generate", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.readline().startswith(b"data: ")
    conn.close()  # walk away mid-generation
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        state = engine.get("/server_info").json()["internal_states"][0]
        if state["num_running_reqs"] == 0 and state["num_queue_reqs"] == 0:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"aborted stream still occupies the scheduler: {state}")
    assert read_metric(engine, "sglang:num_aborted_requests_total") == aborted + 1
    assert engine.generate(PROMPT, max_new_tokens=8)["meta_info"]["completion_tokens"] == 8
    assert not any("Traceback" in line for line in engine.lines[mark:])  # one line, as SGLang logs an abort


@pytest.mark.parametrize("path, body", [
    ("/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 450, "ignore_eos": True}}),
    ("/v1/completions", {"model": "specdec-embedded/tiny", "prompt": PROMPT, "max_tokens": 450,
                         "ignore_eos": True}),
], ids=["generate", "openai"])
def test_a_client_that_leaves_a_plain_request_aborts_it(loaded_small_batch, path, body):
    """A non-streaming request ran to its end after its client left, holding a slot; SGLang
    aborts it."""
    import socket

    engine = loaded_small_batch
    mark = len(engine.lines)
    aborted = read_metric(engine, "sglang:num_aborted_requests_total")
    data = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", engine.port), timeout=30) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        deadline = time.monotonic() + 20
        while engine.get("/server_info").json()["internal_states"][0]["num_running_reqs"] == 0:
            assert time.monotonic() < deadline, "the request never ran"
            time.sleep(0.02)
    deadline = time.monotonic() + 20  # walked away: the slot must free long before 450 tokens
    while read_metric(engine, "sglang:num_aborted_requests_total") != aborted + 1:
        assert time.monotonic() < deadline, "the request left behind was not aborted"
        time.sleep(0.05)
    assert not any("Traceback" in line for line in engine.lines[mark:])


def test_sigterm_stops_the_engine_cleanly(engines):
    import signal

    engine = engines("--method", "ar")
    engine.proc.send_signal(signal.SIGTERM)
    assert engine.wait_exit(timeout=15) == 0


@pytest.mark.parametrize("method", ["ar", "ddtree"])
def test_a_context_shorter_than_the_warmup_request_still_becomes_ready(engines, method):
    """The warm-up request (a 30-token prompt and 8 new tokens) ignored --context-length: below 38
    tokens the scheduler died of an IndexError before the server was ever ready."""
    engine = engines("--method", method, "--budget", "4", "--context-length", "16")
    assert engine.generate("Hi", max_new_tokens=8)["meta_info"]["completion_tokens"] == 8


def test_a_context_too_short_for_any_request_still_becomes_ready(engines):
    """The same at the far end: a context too short for SGLang to serve any request. One engine
    for both methods above: the server shortens the warm-up request, whatever the method."""
    tiny = engines("--method", "ar", "--context-length", "2")
    assert tiny.get("/health_generate").status == 200
    refused = tiny.post("/generate", {"text": "", "sampling_params": {"max_new_tokens": 0}})
    assert refused.status == 400 and "Input length (1 tokens) exceeds" in error_message(refused)
