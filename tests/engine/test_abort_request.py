"""/abort_request as SGLang answers it, and what the plugin's client makes of the aborts it causes.

The engine runs one request at a time, its steps slowed (--fault-slow-factor) so that a request
is still running, and another still queued, when the abort arrives.
"""

from __future__ import annotations

import asyncio
import json
import threading

import aiohttp
import pytest

from pytest_specdec import client

#: SGLang's finish reasons: a running request's (its scheduler's FINISH_ABORT()), a queued one's (its
#: tokenizer manager's, for an abort with no reason of its own)
ABORT_RUNNING = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
ABORT_WAITING = {"type": "abort", "message": "Abort in waiting queue"}

PROMPT = "The capital city of France is"
LONG = {"max_new_tokens": 1500, "ignore_eos": True}


@pytest.fixture(scope="module")
def engine(module_engines):
    return module_engines("--method", "ar", "--max-batch", "1", "--context-length", "2048",
                          "--fault-slow-factor", "20")


def in_thread(target) -> tuple[threading.Thread, dict]:
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(value=target()), daemon=True)
    thread.start()
    return thread, box


def stream_with_the_client(engine, rid: str):
    """The plugin's own client, as a workload sends a request."""
    async def one():
        payload = {"text": PROMPT, "sampling_params": LONG, "stream": True, "rid": rid}
        async with aiohttp.ClientSession() as session:
            return await client.generate_one(session, engine.url, payload, timeout_s=60)

    return asyncio.run(one())


def test_abort_request_ends_a_running_and_a_queued_request_as_sglang_does(engine):
    """The engine had no /abort_request (a 404). SGLang's ends a running request after one more
    token with FINISH_ABORT() (no status: a stream's last event, or an unstreamed 200), and
    answers one it takes from the waiting queue at once with its tokenizer manager's few keys."""
    running, streamed = in_thread(lambda: stream_with_the_client(engine, "run-1"))
    engine.wait_for_load(1, 0)
    queued, answer = in_thread(lambda: engine.post("/generate", {"text": PROMPT, "sampling_params": LONG,
                                                                 "rid": "queued-1"}))
    engine.wait_for_load(1, 1)

    res = engine.post("/abort_request", {"rid": "queued-1"})
    assert (res.status, res.body) == (200, b"")
    queued.join(30)
    assert answer["value"].status == 200, answer["value"].text
    body = answer["value"].json()
    meta = body.pop("meta_info")
    assert body == {"text": "", "output_ids": []}
    assert list(meta) == ["id", "finish_reason", "weight_version", "e2e_latency", "weight_versions",
                          "completion_tokens", "response_sent_to_client_ts"]
    assert (meta["id"], meta["finish_reason"], meta["completion_tokens"]) == ("queued-1", ABORT_WAITING, 0)
    assert meta["weight_versions"] == [{"version": "default", "start": 0, "end": 0}]

    assert engine.post("/abort_request", {"rid": "run-1"}).status == 200
    running.join(30)
    record = streamed["value"]
    assert record.status == 200 and record.finish_reason == "abort"
    assert 0 < record.completion_tokens < LONG["max_new_tokens"]
    # a red result naming SGLang's words, never a short green one
    assert record.error == f"request aborted by the server: {ABORT_RUNNING['message']}" and not record.ok
    engine.wait_for_load(0, 0)


def test_an_unstreamed_running_request_aborted_is_answered_200_with_the_abort(engine):
    running, answer = in_thread(lambda: engine.post("/generate", {"text": PROMPT, "sampling_params": LONG,
                                                                  "rid": "plain-1"}))
    engine.wait_for_load(1, 0)
    assert engine.post("/abort_request", {"abort_all": True}).status == 200
    running.join(30)
    assert answer["value"].status == 200, answer["value"].text
    meta = answer["value"].json()["meta_info"]
    assert meta["finish_reason"] == ABORT_RUNNING and 0 < meta["completion_tokens"] < LONG["max_new_tokens"]


def test_an_abort_that_matches_nothing_is_a_200_that_changes_nothing(engine):
    mark = len(engine.lines)
    for body in ({"rid": "nobody"}, {}, {"rid": "", "abort_all": False}):
        res = engine.post("/abort_request", body)
        assert (res.status, res.body) == (200, b"")
    engine.wait_for_line(r"Ignore abort_request with empty rid and abort_all=False$", after=mark)
    assert engine.generate(PROMPT, max_new_tokens=4)["meta_info"]["finish_reason"] == {"type": "length", "length": 4}


@pytest.mark.parametrize("raw, said", [
    (b'{"rid": 5}', "{'type': 'string_type', 'loc': ('body', 'rid'), 'msg': 'Input should be a valid string', "
                    "'input': 5}"),
    (b'{"abort_all": "maybe"}', "{'type': 'bool_parsing', 'loc': ('body', 'abort_all'), 'msg': 'Input should be a "
                                "valid boolean, unable to interpret input', 'input': 'maybe'}"),
    (b'{"abort_all": null}', "{'type': 'bool_type', 'loc': ('body', 'abort_all'), 'msg': 'Input should be a "
                             "valid boolean', 'input': None}"),
    (b"[1]", "{'type': 'dict_type', 'loc': ('body',), 'msg': 'Input should be a valid dictionary', 'input': [1]}"),
    (b"{", "JSON decode error"),
])
def test_a_malformed_abort_request_is_fastapis_400(engine, raw, said):
    res = engine.request("POST", "/abort_request", raw=raw)
    body = res.json()
    assert res.status == 400 and (body["object"], body["type"], body["code"]) == ("error", "Bad Request", 400)
    assert said in body["message"] and "Endpoint: POST /abort_request" in body["message"]


def test_abort_all_is_read_as_pydantic_reads_a_boolean(engine):
    assert engine.post("/abort_request", {"abort_all": "no"}).status == 200
    assert engine.post("/abort_request", {"abort_all": 0, "rid": None}).status == 200
