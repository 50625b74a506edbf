"""Parallel sampling (``n`` above 1) answered as SGLang answers it (engine/parallel.py): a sample
an output, prompt by prompt, each under a fresh rid; on the OpenAI routes a choice a sample with
its index, each prompt's tokens counted once; streamed, each sample's outputs with its index.
The engine refused every ``n`` but 1. Its samples are greedy, so they are asked for at
temperature 0, where SGLang's are identical too; elsewhere the engine refuses them."""

from __future__ import annotations

import importlib
import json
import re
from types import SimpleNamespace

import pytest

from pytest_specdec.engine.parallel import LIST_WITH_N, SAME_N
from pytest_specdec.engine.protocol import Refused
from pytest_specdec.engine.tokenizer import ByteTokenizer
from pytest_specdec.live import LiveServer
from pytest_specdec.servers.spec import ServerSpec

PROMPTS = ["The capital city of France is", "Once upon a time"]
CHAT = [{"role": "user", "content": "Count to five."}]
UUID = re.compile(r"[0-9a-f]{32}")
GREEDY = {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True}


@pytest.fixture(scope="module")
def engine(module_engines):
    return module_engines("--method", "ar", "--max-batch", "4", "--context-length", "512")


@pytest.fixture(scope="module")
def sg(sglang_reference):
    package = "sglang.srt.entrypoints.openai."
    return SimpleNamespace(protocol=importlib.import_module(package + "protocol"),
                           sse=importlib.import_module(package + "sse_utils"),
                           usage=importlib.import_module(package + "usage_processor").UsageProcessor)


def events(body: bytes) -> list[dict]:
    text = body.decode()
    assert text.endswith("data: [DONE]\n\n"), text[-200:]
    return [json.loads(e[len("data: "):]) for e in text.split("\n\n") if e and e != "data: [DONE]"]


def alone(engine, prompt: str) -> str:
    res = engine.post("/generate", {"text": prompt, "sampling_params": GREEDY})
    assert res.status == 200, res.text
    return res.json()["text"]


def test_one_prompt_with_n_is_a_list_of_n_samples_under_fresh_rids(engine):
    res = engine.post("/generate", {"text": PROMPTS[0], "rid": "mine", "sampling_params": {**GREEDY, "n": 3}})
    assert res.status == 200, res.text
    outs = res.json()
    assert isinstance(outs, list) and len(outs) == 3
    assert [o["text"] for o in outs] == [alone(engine, PROMPTS[0])] * 3  # greedy: identical, as SGLang's
    ids = [o["meta_info"]["id"] for o in outs]
    assert len(set(ids)) == 3 and all(UUID.fullmatch(i) for i in ids)  # not the client's rid


def test_the_fixtures_generate_with_n_returns_a_body_a_sample(engine):
    """specdec_server.generate() with n 2 returned one sample's body (the stream's last event),
    where SGLang's /generate answers a list; now each sample's body, in index order."""
    server = LiveServer(spec=ServerSpec("embedded", "ar"), url=engine.url, log_path=None, check=lambda: None,
                        stall_timeout=30.0)
    bodies = server.generate(PROMPTS[0], **GREEDY, n=2)
    assert isinstance(bodies, list) and len(bodies) == 2
    assert [b["text"] for b in bodies] == [alone(engine, PROMPTS[0])] * 2
    assert [b["meta_info"]["completion_tokens"] for b in bodies] == [6, 6]
    assert [len(b["output_ids"]) for b in bodies] == [6, 6]
    assert len({b["meta_info"]["id"] for b in bodies}) == 2  # each sample its own rid
    assert isinstance(server.generate(PROMPTS[0], **GREEDY), dict)  # n 1: the body alone, as before


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_batch_with_n_answers_prompt_by_prompt_the_samples_in_a_row(engine, stream):
    body = {"text": PROMPTS, "sampling_params": {**GREEDY, "n": 2}, "stream": stream}
    res = engine.post("/generate", body)
    assert res.status == 200, res.text
    expected = [alone(engine, p) for p in PROMPTS for _ in range(2)]
    if not stream:
        assert [o["text"] for o in res.json()] == expected
        return
    last = {}
    for out in events(res.body):
        last[out["index"]] = out
    assert sorted(last) == [0, 1, 2, 3]
    assert [last[i]["text"] for i in range(4)] == expected
    assert len({last[i]["meta_info"]["id"] for i in range(4)}) == 4


@pytest.mark.parametrize("body, words", [
    ({"text": PROMPTS, "sampling_params": [{**GREEDY, "n": 2}, {**GREEDY, "n": 3}]}, SAME_N),
    ({"text": PROMPTS, "sampling_params": {**GREEDY, "n": 2}, "return_logprob": [False, False]},
     LIST_WITH_N.format("return_logprob")),
    ({"text": PROMPTS[0], "sampling_params": {**GREEDY, "n": 2}, "top_logprobs_num": [0]},
     LIST_WITH_N.format("top_logprobs_num")),
], ids=["n-differs", "logprob-list", "single-logprob-list"])
def test_sglangs_refusals_of_n_in_its_words(engine, body, words):
    res = engine.post("/generate", body)
    assert (res.status, res.json()) == (400, {"error": {"message": words}})
    streamed = engine.post("/generate", {**body, "stream": True})
    assert streamed.status == 200 and events(streamed.body) == [Refused(words).stream_event()]


@pytest.mark.parametrize("path, body", [
    ("/generate", {"text": PROMPTS[0], "sampling_params": {"n": 2}}),
    ("/generate", {"text": PROMPTS[0], "sampling_params": {"n": 2, "temperature": 0.7}}),
    ("/v1/completions", {"prompt": PROMPTS[0], "n": 2}),
    ("/v1/chat/completions", {"messages": CHAT, "n": 2, "temperature": 0.5}),
])
def test_n_where_sglang_would_sample_is_refused(engine, path, body):
    """SGLang's samples there are independent draws; the engine's greedy copies would pass for them."""
    res = engine.post(path, body)
    message = res.json()["error"]["message"] if path == "/generate" else res.json()["message"]
    assert res.status == 400 and "cannot honour n=2" in message, res.text


@pytest.mark.parametrize("extra", [{"top_k": 1}, {"temperature": 0}], ids=["top_k-1", "temperature-0"])
def test_n_is_served_where_sglang_decodes_greedily(engine, extra):
    res = engine.post("/v1/completions", {"prompt": PROMPTS[0], "n": 2, "max_tokens": 3, **extra})
    assert res.status == 200 and len(res.json()["choices"]) == 2, res.text


def completion(engine, path: str, prompt, n: int, **extra) -> dict:
    key = {"prompt": prompt} if path == "/v1/completions" else {"messages": prompt}
    res = engine.post(path, {**key, "n": n, "temperature": 0, "max_tokens": 5, "ignore_eos": True, **extra})
    assert res.status == 200, res.text
    return res if extra.get("stream") else res.json()


def prompt_tokens(path: str, prompt) -> int:
    from pytest_specdec.engine.openai_api import render_chat

    return len(ByteTokenizer().encode(prompt if path == "/v1/completions" else render_chat(prompt)))


@pytest.mark.parametrize("path, prompts", [("/v1/completions", [PROMPTS[0]]), ("/v1/completions", PROMPTS),
                                           ("/v1/chat/completions", [CHAT])], ids=["one", "batch", "chat"])
def test_openai_answers_with_n_are_sglangs(engine, sg, path, prompts):
    """A choice a sample, prompt by prompt, indexed in that order; each prompt's tokens counted
    once, every sample's completion; the first sample's rid as the id: SGLang's models serialise it so."""
    n = 2
    out = completion(engine, path, prompts if len(prompts) > 1 else prompts[0], n)
    single = [completion(engine, path, p, 1)["choices"][0] for p in prompts]
    p = sg.protocol
    if path == "/v1/completions":
        choices = [p.CompletionResponseChoice(index=i, text=single[i // n]["text"], finish_reason="length")
                   for i in range(n * len(prompts))]
        model = p.CompletionResponse
    else:
        message = p.ChatMessage(role="assistant", content=single[0]["message"]["content"])
        choices = [p.ChatCompletionResponseChoice(index=i, message=message, finish_reason="length") for i in range(n)]
        model = p.ChatCompletionResponse
    usage = sg.usage.calculate_token_usage(prompt_tokens=sum(prompt_tokens(path, q) for q in prompts),
                                           completion_tokens=5 * n * len(prompts))
    expected = model(id=out["id"], created=out["created"], model=out["model"], choices=choices, usage=usage,
                     metadata={"weight_version": "default",  # the first sample's meta_info, as SGLang takes it
                               "weight_versions": [{"version": "default", "start": 0, "end": 5}]})
    assert out == json.loads(expected.model_dump_json(by_alias=True))
    assert UUID.fullmatch(out["id"])


@pytest.mark.parametrize("path, prompts", [("/v1/completions", PROMPTS), ("/v1/chat/completions", [CHAT])],
                         ids=["completions", "chat"])
def test_openai_streams_with_n_are_sglangs(engine, sg, path, prompts):
    """Each sample's chunks under its own rid with its index; a chat opens each sample with the
    role's chunk and sends every finish chunk at the end; the usage counts each prompt once."""
    n = 2
    res = completion(engine, path, prompts if len(prompts) > 1 else prompts[0], n, stream=True,
                     stream_options={"include_usage": True})
    chunks = events(res.body)
    streamed, usage_chunk = chunks[:-1], chunks[-1]
    p = sg.protocol
    kind = p.CompletionStreamResponse if path == "/v1/completions" else p.ChatCompletionStreamResponse
    for chunk in streamed:
        if path == "/v1/completions":
            theirs = kind(**chunk).model_dump_json()
        else:  # SGLang's chat builds its chunks with build_sse_content
            (choice,) = chunk["choices"]
            theirs = sg.sse.build_sse_content(
                chunk["id"], chunk["created"], chunk["model"], choice["index"], role=choice["delta"].get("role"),
                content=choice["delta"].get("content"), finish_reason=choice["finish_reason"],
                matched_stop=choice["matched_stop"]).removeprefix("data: ")
        assert chunk == json.loads(theirs), chunk
    by_index: dict[int, list[dict]] = {}
    for chunk in streamed:
        (choice,) = chunk["choices"]
        by_index.setdefault(choice["index"], []).append(chunk)
    assert sorted(by_index) == list(range(n * len(prompts)))
    single = [completion(engine, path, q, 1)["choices"][0] for q in prompts]
    for index, own in by_index.items():
        want = single[index // n]
        if path == "/v1/completions":
            assert len({c["id"] for c in own}) == 1 and UUID.fullmatch(own[0]["id"])
            assert "".join(c["choices"][0]["text"] for c in own) == want["text"]
            assert own[-1]["choices"][0]["finish_reason"] == "length"
        else:
            assert own[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "reasoning_content": None}
            text = "".join(c["choices"][0]["delta"].get("content") or "" for c in own)
            assert text == want["message"]["content"]
    if path == "/v1/chat/completions":
        # SGLang sends the finish chunks once every sample ended, all under the id heard last
        finishes = streamed[-n:]
        assert sorted(c["choices"][0]["index"] for c in finishes) == list(range(n))
        assert all(c["choices"][0]["finish_reason"] == "length" for c in finishes)
        assert len({c["id"] for c in finishes}) == 1
        assert all(c["choices"][0]["finish_reason"] is None for c in streamed[:-n])
    total = sg.usage.calculate_token_usage(prompt_tokens=sum(prompt_tokens(path, q) for q in prompts),
                                           completion_tokens=5 * n * len(prompts))
    dump = (kind(id=usage_chunk["id"], created=usage_chunk["created"], model=usage_chunk["model"], choices=[],
                 usage=total).model_dump_json(exclude_none=path == "/v1/completions"))
    assert usage_chunk == json.loads(dump)


# -- n below 1: SGLang fans out only above 1, and strides its usage by the n given ---------------

@pytest.mark.parametrize("n", [0, -1])
def test_n_below_one_on_one_generate_prompt_is_one_sample(engine, n):
    """SGLang turns a single prompt into a batch only for n above 1: one output, not a list."""
    res = engine.post("/generate", {"text": PROMPTS[0], "sampling_params": {**GREEDY, "n": n}})
    assert res.status == 200, res.text
    assert isinstance(res.json(), dict) and res.json()["text"] == alone(engine, PROMPTS[0])


def sglangs_usage_failure(call) -> str:
    """The words of the error SGLang's own usage arithmetic raises (call runs it)."""
    with pytest.raises((ValueError, ZeroDivisionError)) as caught:
        call()
    return str(caught.value)


@pytest.mark.parametrize("path, prompt", [("/v1/completions", PROMPTS[0]), ("/v1/chat/completions", CHAT)],
                         ids=["completions", "chat"])
def test_n_zero_is_sglangs_usage_failure(engine, sg, path, prompt):
    """SGLang serves one sample, then its usage's range(0, outputs, n) raises, which its serving
    class answers as a 400 of type BadRequest; the engine served it with a usage."""
    words = sglangs_usage_failure(lambda: sg.usage.calculate_response_usage(
        [{"meta_info": {"prompt_tokens": 3, "completion_tokens": 5}}], n_choices=0))
    key = {"prompt": prompt} if path == "/v1/completions" else {"messages": prompt}
    res = engine.post(path, {**key, "n": 0, "temperature": 0, "max_tokens": 5})
    assert (res.status, res.json()) == (400, {"object": "error", "message": words, "type": "BadRequest",
                                              "param": None, "code": 400})


@pytest.mark.parametrize("path, prompt", [("/v1/completions", PROMPTS[0]), ("/v1/chat/completions", CHAT)],
                         ids=["completions", "chat"])
def test_n_below_zero_is_one_sample_with_sglangs_usage(engine, sg, path, prompt):
    """SGLang's range(0, outputs, n) is empty for n below 0: one choice, no prompt tokens counted."""
    out = completion(engine, path, prompt, -1)
    assert len(out["choices"]) == 1 and out["choices"][0]["index"] == 0
    ret = [{"meta_info": {"prompt_tokens": prompt_tokens(path, prompt), "completion_tokens": 5}}]
    expected = sg.usage.calculate_response_usage(ret, n_choices=-1)
    assert out["usage"] == json.loads(expected.model_dump_json())
    assert out["usage"]["prompt_tokens"] == 0


@pytest.mark.parametrize("path, prompt", [("/v1/completions", PROMPTS[0]), ("/v1/chat/completions", CHAT)],
                         ids=["completions", "chat"])
def test_streamed_n_zero_with_usage_ends_with_sglangs_usage_failure(engine, sg, path, prompt):
    """The chunks as for n 1, then, in place of include_usage's chunk, the error SGLang's
    streaming usage (index % n) raises, as its completions stream it (its chat breaks the stream
    off instead: the engine ends it the same way for both)."""
    words = sglangs_usage_failure(lambda: sg.usage.calculate_streaming_usage({0: 3}, {0: 0}, {0: 5}, {0: 0},
                                                                            n_choices=0))
    res = completion(engine, path, prompt, 0, stream=True, stream_options={"include_usage": True})
    chunks = events(res.body)
    assert chunks[-1] == {"error": {"object": "error", "message": words, "type": "BadRequestError",
                                    "param": None, "code": 400}}
    assert all("error" not in c and c["choices"] for c in chunks[:-1])
    plain = events(completion(engine, path, prompt, 0, stream=True).body)  # no usage asked: nothing fails
    assert all("error" not in c for c in plain) and plain[-1]["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("n", [0, -2])
def test_a_batch_with_n_below_one_is_refused(engine, n):
    """SGLang expands such a batch to no samples and then indexes them (a 500); the engine
    served every prompt once."""
    from pytest_specdec.engine.parallel import BATCH_WITHOUT_SAMPLES

    words = BATCH_WITHOUT_SAMPLES.format(n)
    res = engine.post("/generate", {"text": PROMPTS, "sampling_params": {**GREEDY, "n": n}})
    assert (res.status, res.json()) == (400, {"error": {"message": words}})
    res = engine.post("/v1/completions", {"prompt": PROMPTS, "n": n, "temperature": 0, "max_tokens": 5})
    assert (res.status, res.json()) == (400, {"object": "error", "message": words, "type": "BadRequestError",
                                              "param": None, "code": 400})


def test_streamed_chat_with_n_and_continuous_usage_is_sglangs(engine, sg):
    """Each sample's content chunks carry that sample's usage so far (its prompt, its own
    completion tokens), the role's and the finish chunks none; the last chunk counts the prompt
    once and every sample's completion tokens."""
    n = 3
    res = completion(engine, "/v1/chat/completions", CHAT, n, stream=True,
                     stream_options={"include_usage": True, "continuous_usage_stats": True})
    chunks = events(res.body)
    streamed, usage_chunk = chunks[:-1], chunks[-1]
    prompt = prompt_tokens("/v1/chat/completions", CHAT)
    texts: dict[int, str] = {}
    for chunk in streamed:
        (choice,) = chunk["choices"]
        delta, index = choice["delta"], choice["index"]
        usage = None
        if delta.get("content"):
            texts[index] = texts.get(index, "") + delta["content"]
            # a byte a token (ByteTokenizer): the tokens so far are the bytes sent so far
            usage = sg.usage.calculate_token_usage(prompt_tokens=prompt,
                                                   completion_tokens=len(texts[index].encode())).model_dump()
        theirs = sg.sse.build_sse_content(
            chunk["id"], chunk["created"], chunk["model"], index, role=delta.get("role"),
            content=delta.get("content"), finish_reason=choice["finish_reason"],
            matched_stop=choice["matched_stop"], usage=usage).removeprefix("data: ")
        assert chunk == json.loads(theirs), chunk
    assert {i: len(t.encode()) for i, t in texts.items()} == {i: 5 for i in range(n)}
    total = sg.usage.calculate_token_usage(prompt_tokens=prompt, completion_tokens=5 * n)
    dump = sg.protocol.ChatCompletionStreamResponse(id=usage_chunk["id"], created=usage_chunk["created"],
                                                    model=usage_chunk["model"], choices=[], usage=total)
    assert usage_chunk == json.loads(dump.model_dump_json())


@pytest.mark.parametrize("body", [
    {"text": PROMPTS[0], "sampling_params": {**GREEDY, "n": None}},
    {"input_ids": [72, 105], "sampling_params": {**GREEDY, "n": None}},
    {"text": PROMPTS, "sampling_params": {**GREEDY, "n": None}},
    {"text": PROMPTS, "sampling_params": [{**GREEDY, "n": None}, {**GREEDY, "n": None}]},
], ids=["text", "ids", "batch", "batch-list"])
def test_a_null_n_is_refused(engine, body):
    """SGLang's normalization compares its parallel_sample_num, the n given, with 1: a null is a
    TypeError there (a 500); the engine served it as one sample."""
    from pytest_specdec.engine.parallel import NULL_N

    res = engine.post("/generate", body)
    assert (res.status, res.json()) == (400, {"error": {"message": NULL_N}})
    streamed = engine.post("/generate", {**body, "stream": True})
    assert streamed.status == 200 and events(streamed.body) == [Refused(NULL_N).stream_event()]
