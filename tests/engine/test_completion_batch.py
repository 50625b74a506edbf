"""/v1/completions with a list of prompts (strings, or lists of token ids), answered as SGLang's
completion serving answers its batch: a choice a prompt with its index, in the prompt order, the
usage summed, the first prompt's rid as the id; streamed, each prompt's chunks with its index and
its own rid; an empty prompt refused in SGLang's words. The engine answered only a list of one
(as a single prompt, under the rid as given) and refused any longer list."""

from __future__ import annotations

import json

import pytest

from pytest_specdec.engine import batch, openai_api
from pytest_specdec.engine.openai_api import EMPTY_PROMPT, OpenAIError, error_body
from pytest_specdec.engine.tokenizer import ByteTokenizer

TOKENIZER = ByteTokenizer()
CONTEXT = 1024
PROMPTS = ["The capital city of France is", "Once upon a time", "1, 2, 3,"]
IDS = [[65, 66, 67], [68, 69]]


@pytest.fixture(scope="module")
def engine(module_engines):
    return module_engines("--method", "ar", "--max-batch", "2", "--context-length", str(CONTEXT))


def complete(engine, prompt, **extra) -> dict:
    res = engine.post("/v1/completions", {"prompt": prompt, "max_tokens": 5, "ignore_eos": True, **extra})
    assert res.status == 200, res.text
    return res.json()


@pytest.mark.parametrize("prompts", [PROMPTS, IDS], ids=["texts", "token-lists"])
def test_a_list_of_prompts_gets_a_choice_each_in_order_as_each_alone(engine, prompts):
    whole = complete(engine, prompts, rid="c")
    assert whole["id"] == "c_0"  # SGLang's batch: the first prompt's rid
    alone = [complete(engine, p) for p in prompts]
    assert [c["index"] for c in whole["choices"]] == list(range(len(prompts)))
    assert [c["text"] for c in whole["choices"]] == [a["choices"][0]["text"] for a in alone]
    assert all(c["finish_reason"] == "length" for c in whole["choices"])
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert whole["usage"][key] == sum(a["usage"][key] for a in alone), key
    assert whole["usage"]["completion_tokens"] == 5 * len(prompts)


def test_a_lists_metadata_is_its_first_prompts(engine):
    """SGLang's answer to a batch takes its metadata (the weights' version, and the spans of the
    tokens each version made) from the first prompt's meta_info only, as it takes the id; each
    finished prompt's meta_info has its own spans."""
    whole = complete(engine, PROMPTS[:2], rid=["first", "second"], max_tokens=3)
    assert whole["metadata"] == {"weight_version": "default",
                                 "weight_versions": [{"version": "default", "start": 0, "end": 3}]}
    res = engine.post("/generate", {"text": PROMPTS[:2], "rid": ["g0", "g1"],
                                    "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}})
    assert [out["meta_info"]["weight_versions"] for out in res.json()] == [
        [{"version": "default", "start": 0, "end": 3}]] * 2


def test_a_list_of_one_is_sglangs_batch_of_one(engine):
    """SGLang reads ["..."] as a batch of one: its rid gets the batch suffix."""
    assert complete(engine, [PROMPTS[0]], rid="one")["id"] == "one_0"
    assert complete(engine, PROMPTS[0], rid="one")["id"] == "one"
    assert complete(engine, PROMPTS[:2], rid=["first", "second"])["id"] == "first"


def stream_events(body: bytes) -> list[dict]:
    text = body.decode()
    assert text.endswith("data: [DONE]\n\n") and text.count("[DONE]") == 1, text[-200:]
    return [json.loads(e[len("data: "):]) for e in text.split("\n\n") if e and e != "data: [DONE]"]


def test_a_streamed_list_sends_each_prompts_chunks_with_its_index_and_rid(engine):
    whole = complete(engine, PROMPTS[:2], max_tokens=9)
    res = engine.post("/v1/completions", {"prompt": PROMPTS[:2], "max_tokens": 9, "ignore_eos": True,
                                          "stream": True, "rid": ["a", "b"],
                                          "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    assert res.status == 200 and res.headers["Content-Type"].startswith("text/event-stream")
    events = stream_events(res.body)
    *chunks, last = events
    assert {c["choices"][0]["index"] for c in chunks} == {0, 1}
    assert len({c["created"] for c in events}) == 1
    for i, rid in enumerate(["a", "b"]):
        mine = [c for c in chunks if c["choices"][0]["index"] == i]
        assert {c["id"] for c in mine} == {rid}
        assert "".join(c["choices"][0]["text"] for c in mine) == whole["choices"][i]["text"]
        assert mine[-1]["choices"][0]["finish_reason"] == "length"
        assert mine[-1]["usage"]["completion_tokens"] == 9  # continuous usage: this prompt's own
        assert mine[-1]["usage"]["prompt_tokens"] == len(TOKENIZER.encode(PROMPTS[i]))
    assert last["choices"] == [] and last["id"] == chunks[-1]["id"]
    assert last["usage"]["completion_tokens"] == 18
    assert last["usage"]["prompt_tokens"] == sum(len(TOKENIZER.encode(p)) for p in PROMPTS[:2])


@pytest.mark.parametrize("prompt", ["", [], ["", ""], [[]], [[], []]])
def test_an_empty_prompt_is_refused_in_sglangs_words(engine, prompt):
    res = engine.post("/v1/completions", {"prompt": prompt, "max_tokens": 2})
    assert (res.status, res.json()) == (400, error_body(OpenAIError(EMPTY_PROMPT)))


@pytest.mark.parametrize("body, words", [
    ({"prompt": PROMPTS[:2], "rid": ["x"]}, batch.RID_LENGTH),
    ({"prompt": PROMPTS[:2], "rid": ["x", "x"]}, batch.DUPLICATE_RIDS.format(["x"])),
    ({"prompt": PROMPTS[0], "rid": ["x"]}, "a list of rids goes with a list of prompts"),
    ({"prompt": [PROMPTS[0], "b" * CONTEXT]}, "is longer than the model's context length"),
])
def test_a_list_sglang_refuses_is_one_400(engine, body, words):
    res = engine.post("/v1/completions", {"max_tokens": 2, **body})
    assert res.status == 400 and words in res.json()["message"], res.text


def test_a_prompt_the_scheduler_refuses_fails_the_list_streamed_or_not(engine):
    """A prompt within a few tokens of the context: SGLang's scheduler serves one token and aborts
    it with a 400, which fails the whole list; streamed, its error chunk ends the stream."""
    near = "x" * (CONTEXT - 3)
    body = {"prompt": [PROMPTS[0], near], "max_tokens": 2}
    res = engine.post("/v1/completions", body)
    assert res.status == 400 and "exceeds the maximum allowed length" in res.json()["message"], res.text
    res = engine.post("/v1/completions", {**body, "stream": True, "stream_options": {"include_usage": True}})
    events = stream_events(res.body)
    errors = [i for i, e in enumerate(events) if "error" in e]
    assert len(errors) == 1 and "exceeds the maximum allowed length" in events[errors[0]]["error"]["message"]
    assert events[errors[0] + 1:] == [events[-1]] and events[-1]["choices"] == []  # then the usage alone


def test_the_parsed_list_keeps_the_prompt_order_and_rids():
    o = openai_api.parse_completion({"prompt": IDS, "rid": "r", "max_tokens": 2}, encode=TOKENIZER.encode,
                                    vocab_size=TOKENIZER.vocab_size, context_length=CONTEXT,
                                    served_model_name="m")
    assert [(p.input_ids, p.rid) for p in o.prompts] == [(tuple(IDS[0]), "r_0"), (tuple(IDS[1]), "r_1")]
