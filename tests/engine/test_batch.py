"""A batched /generate (``text`` or ``input_ids`` a list of prompts) answered as SGLang answers it:
one output a prompt, in the prompt order, each as that prompt alone gets it; SGLang's rid
expansion and its refusals in its words; streamed, each output with its prompt's index."""

from __future__ import annotations

import json
import socket
import time

import pytest

from pytest_specdec.engine import batch
from pytest_specdec.engine.protocol import Refused, SchemaViolation, Unsupported
from pytest_specdec.engine.tokenizer import ByteTokenizer

TOKENIZER = ByteTokenizer()
CONTEXT = 1024
PROMPTS = ["The capital city of France is", "Once upon a time", "1, 2, 3,"]


def parse(body: dict):
    return batch.parse_batch(body, encode=TOKENIZER.encode, vocab_size=TOKENIZER.vocab_size,
                             context_length=CONTEXT)


# -- parsing ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("body, expected", [
    ({"text": ["a"]}, True), ({"text": []}, True), ({"input_ids": [[1, 2]]}, True),
    ({"text": "a"}, False), ({"input_ids": [1, 2]}, False), ({"input_ids": []}, False),
    ({"text": "a", "input_ids": [[1, 2]]}, False),  # text decides, as in SGLang
])
def test_a_body_is_a_batch_where_sglang_reads_one(body, expected):
    assert batch.is_batch(body) is expected


def test_each_prompt_gets_its_own_rid_sampling_and_prompt_in_order():
    reqs = parse({"text": PROMPTS, "rid": "job", "sampling_params": [{"max_new_tokens": n} for n in (3, 5, 7)]})
    assert [r.rid for r in reqs] == ["job_0", "job_1", "job_2"]
    assert [r.sampling.max_new_tokens for r in reqs] == [3, 5, 7]
    assert [r.input_ids for r in reqs] == [tuple(TOKENIZER.encode(p)) for p in PROMPTS]


def test_one_sampling_object_and_a_list_of_rids_serve_every_prompt():
    reqs = parse({"input_ids": [[65, 66], [67]], "rid": ["a", "b"], "sampling_params": {"max_new_tokens": 4}})
    assert [(r.rid, r.input_ids, r.sampling.max_new_tokens) for r in reqs] == [("a", (65, 66), 4), ("b", (67,), 4)]


def test_with_both_given_the_ids_are_each_prompt():
    reqs = parse({"text": ["x", "y"], "input_ids": [[65], [66, 67]]})
    assert [r.input_ids for r in reqs] == [(65,), (66, 67)]


@pytest.mark.parametrize("body, words", [
    ({"text": ["a", "b"], "rid": ["x"]}, batch.RID_LENGTH),
    ({"text": ["a", "b", "c"], "rid": ["x", "y", "x"]}, batch.DUPLICATE_RIDS.format(["x"])),
    ({"text": ["a", "b"], "sampling_params": [{}]}, "sampling_params has 1 items for a batch of 2 prompts"),
    ({"text": ["a"], "sampling_params": [{}, {}]}, "sampling_params has 2 items for a batch of 1 prompts"),
    ({"text": ["a", "b"], "input_ids": [1, 2]}, "input_ids should be a list of lists for batch processing"),
    ({"text": ["a", "b"], "input_ids": [[1]]}, "input_ids has 1 prompts but text has 2"),
    ({"input_ids": [[65], []]}, "input_ids cannot be empty."),
    ({"text": ["a", "b" * CONTEXT]}, "is longer than the model's context length"),
])
def test_a_batch_sglang_refuses_is_refused_in_its_words(body, words):
    with pytest.raises(Refused) as info:
        parse(body)
    assert words in str(info.value)


def test_the_fields_all_prompts_share_are_checked_once_for_all():
    with pytest.raises(SchemaViolation, match="unknown field"):
        parse({"text": [], "top_logprobs": 2})  # even where no prompt is there to check
    with pytest.raises(Refused, match="LoRA adapter 'x' was requested"):
        parse({"text": ["a", "b"], "lora_path": "x"})
    with pytest.raises(Unsupported, match="return_hidden_states=true"):
        parse({"text": ["a", "b"], "return_hidden_states": [False, True]})  # one a prompt, as SGLang takes it
    assert len(parse({"text": ["a", "b"], "return_hidden_states": [False, False]})) == 2


def test_each_prompt_of_a_batch_asks_its_own_logprobs():
    """return_logprob and top_logprobs_num, one value for all or a list of one a prompt, reach
    every prompt (the others than the first carried only their own fields before)."""
    assert [g.top_logprobs for g in parse({"text": ["a", "b"], "return_logprob": True, "top_logprobs_num": 2})] == [2, 2]
    asked = parse({"text": ["a", "b", "c"], "return_logprob": [False, True, True], "top_logprobs_num": [5, 0, 3]})
    assert [g.top_logprobs for g in asked] == [None, 0, 3]
    with pytest.raises(Unsupported, match="logprob_start_len=0"):
        parse({"text": ["a", "b"], "return_logprob": [False, True], "logprob_start_len": 0})


def test_a_batch_breaking_the_contract_is_its_400():
    with pytest.raises(SchemaViolation, match="expected a string"):
        parse({"text": ["a", 5]})


def test_the_rid_refusals_are_sglangs_own_words(sglang_reference):
    source = (sglang_reference / "sglang" / "srt" / "managers" / "io_struct.py").read_text()
    assert f'"{batch.RID_LENGTH}"' in source
    assert f'f"{batch.DUPLICATE_RIDS.format("{duplicates}")}"' in source


# -- over HTTP -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def engine(module_engines):
    return module_engines("--method", "ar", "--max-batch", "2", "--context-length", str(CONTEXT))


def alone(engine, prompt: str, new_tokens: int) -> dict:
    res = engine.post("/generate", {"text": prompt, "sampling_params": {"max_new_tokens": new_tokens,
                                                                         "ignore_eos": True}})
    assert res.status == 200, res.text
    return res.json()


def test_a_batch_answers_a_list_in_the_prompt_order_each_as_alone(engine):
    """The first prompt asks for the most tokens, so it finishes last; a queue of three on two
    slots. Its answer still comes first, and every answer is that of the prompt alone."""
    lengths = [12, 3, 6]
    res = engine.post("/generate", {"text": PROMPTS, "rid": "b",
                                    "sampling_params": [{"max_new_tokens": n, "ignore_eos": True} for n in lengths]})
    assert res.status == 200, res.text
    out = res.json()
    assert isinstance(out, list) and len(out) == len(PROMPTS)
    for i, (item, prompt, n) in enumerate(zip(out, PROMPTS, lengths)):
        single = alone(engine, prompt, n)
        assert (item["text"], item["output_ids"]) == (single["text"], single["output_ids"])
        assert item["meta_info"]["id"] == f"b_{i}"
        assert item["meta_info"]["prompt_tokens"] == len(TOKENIZER.encode(prompt))
        assert item["meta_info"]["completion_tokens"] == n


def test_a_batch_of_one_is_a_list_of_one(engine):
    res = engine.post("/generate", {"input_ids": [[65, 66, 67]], "rid": "one",
                                    "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}})
    assert res.status == 200, res.text
    out = res.json()
    assert len(out) == 1 and out[0]["meta_info"]["id"] == "one_0" and len(out[0]["output_ids"]) == 4


def test_an_empty_batch_is_an_empty_list(engine):
    res = engine.post("/generate", {"text": []})
    assert (res.status, res.json()) == (200, [])


@pytest.mark.parametrize("body, words", [
    ({"text": ["a", "b"], "rid": ["x"]}, batch.RID_LENGTH),
    ({"text": ["a", "b" * CONTEXT], "sampling_params": {"max_new_tokens": 2}},
     "is longer than the model's context length"),
    ({"text": ["a", "b"], "sampling_params": [{"max_new_tokens": 2}]}, "sampling_params has 1 items"),
])
def test_a_refused_batch_is_one_400_in_sglangs_shape(engine, body, words):
    res = engine.post("/generate", body)
    assert res.status == 400 and words in res.json()["error"]["message"], res.text


def stream_events(body: bytes) -> list[dict]:
    text = body.decode()
    assert text.endswith("data: [DONE]\n\n") and text.count("[DONE]") == 1, text[-200:]
    return [json.loads(e[len("data: "):]) for e in text.split("\n\n") if e and e != "data: [DONE]"]


def test_a_streamed_batch_sends_each_prompts_outputs_with_its_index(engine):
    lengths = [10, 4]
    res = engine.post("/generate", {"text": PROMPTS[:2], "stream": True,
                                    "sampling_params": [{"max_new_tokens": n, "ignore_eos": True} for n in lengths]})
    assert res.status == 200 and res.headers["Content-Type"].startswith("text/event-stream")
    events = stream_events(res.body)
    assert {e["index"] for e in events} == {0, 1}
    for i, (prompt, n) in enumerate(zip(PROMPTS, lengths)):
        mine = [e for e in events if e["index"] == i]
        assert all(e["meta_info"]["finish_reason"] is None for e in mine[:-1])
        assert mine[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": n}
        assert mine[-1]["text"] == alone(engine, prompt, n)["text"]  # cumulative, as a single stream's


def test_a_streamed_batch_sglang_refuses_is_an_error_event(engine):
    res = engine.post("/generate", {"text": ["a", "b" * CONTEXT], "stream": True})
    assert res.status == 200
    (event,) = stream_events(res.body)
    assert "is longer than the model's context length" in event["error"]["message"]


def aborted_count(engine) -> float:
    series = [line for line in engine.get("/metrics").text.splitlines()
              if line.startswith("sglang:num_aborted_requests_total")]
    return sum(float(line.rsplit(" ", 1)[1]) for line in series)


def wait_idle(engine) -> None:
    deadline = time.monotonic() + 20
    while True:
        state = engine.get("/server_info").json()["internal_states"][0]
        if state["num_running_reqs"] == 0 and state["num_queue_reqs"] == 0:
            return
        assert time.monotonic() < deadline, f"the batch left behind still occupies the scheduler: {state}"
        time.sleep(0.05)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_client_that_leaves_a_batch_aborts_every_prompt_of_it(engine, stream):
    """Three prompts on two slots (one queued): a client that walks away leaves none running."""
    before = aborted_count(engine)
    data = json.dumps({"text": PROMPTS, "stream": stream,
                       "sampling_params": {"max_new_tokens": 900, "ignore_eos": True}}).encode()
    with socket.create_connection(("127.0.0.1", engine.port), timeout=30) as sock:
        sock.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        deadline = time.monotonic() + 20
        while engine.get("/server_info").json()["internal_states"][0]["num_running_reqs"] == 0:
            assert time.monotonic() < deadline, "the batch never ran"
            time.sleep(0.02)
    wait_idle(engine)
    assert aborted_count(engine) == before + len(PROMPTS)


def test_a_prompt_the_scheduler_refuses_fails_the_batch_and_aborts_the_rest(engine):
    """SGLang's scheduler refuses a prompt within a few tokens of the context (one token, then an
    abort): the whole batch is that 400, and the prompt still running is aborted, not served."""
    before = aborted_count(engine)
    near = "x" * (CONTEXT - 3)
    res = engine.post("/generate", {"text": [PROMPTS[0], near],
                                    "sampling_params": [{"max_new_tokens": 900, "ignore_eos": True}, {}]})
    assert res.status == 400, res.text
    assert "exceeds the maximum allowed length" in res.json()["error"]["message"], res.text
    wait_idle(engine)
    assert aborted_count(engine) == before + 1


def test_a_merged_stream_raises_the_error_of_one_of_its_streams():
    """A stream of a batch (or any streamed completion) that raised ended its pump without a word,
    and the merged stream waited for it forever: the client hung. Its error is now raised where
    the merged items are read, as a single stream's is."""
    import asyncio

    from pytest_specdec.engine.server import EngineServer

    async def fine():
        for item in ("a", "b"):
            yield item
        await asyncio.Event().wait()  # still running when the other fails

    async def broken():
        yield "x"
        raise RuntimeError("the scheduler went away")

    async def read():
        got = []
        with pytest.raises(RuntimeError, match="the scheduler went away"):
            async for event in EngineServer._merged([fine(), broken()]):
                got.append(event)
        return got

    got = asyncio.run(asyncio.wait_for(read(), timeout=30))  # the old code never returned
    assert sorted(got) == [(0, "a"), (0, "b"), (1, "x")]
