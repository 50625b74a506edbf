"""return_logprob on /generate, served by an ar engine in SGLang's meta_info shape (the losslessness
reference's margins read it), and refused by a speculative one, naming why."""

from __future__ import annotations

import json
import math

import pytest

from pytest_specdec.client import _margins

GREEDY = {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}
ASK = {"return_logprob": True, "top_logprobs_num": 2}


@pytest.fixture(scope="module")
def ar(module_engines):
    return module_engines("--method", "ar")


def test_each_output_token_has_its_logprob_and_top_two_best_first(ar):
    out = ar.post("/generate", {"text": "Hello", "sampling_params": GREEDY, **ASK}).json()
    meta = out["meta_info"]
    ids = out["output_ids"]
    assert meta["input_token_logprobs"] == [] and meta["input_top_logprobs"] == []  # logprob_start_len -1
    assert [row[1:] for row in meta["output_token_logprobs"]] == [[i, None] for i in ids]
    assert meta["output_token_logprobs_length"] == len(ids) == 6
    for (logprob, token, _), top in zip(meta["output_token_logprobs"], meta["output_top_logprobs"]):
        assert [row[1:] for row in top][0] == [token, None] and top[0][0] == logprob  # greedy: its own first
        assert top[0][0] >= top[1][0] and top[1][2] is None and logprob <= 0
    assert _margins(meta) == tuple(top[0][0] - top[1][0] for top in meta["output_top_logprobs"])
    assert list(meta).index("output_top_logprobs") < list(meta).index("completion_tokens")  # SGLang's order


def test_a_stream_repeats_all_logprobs_so_far_in_each_event_as_sglangs_default(ar):
    res = ar.post("/generate", {"text": "Hello", "sampling_params": GREEDY, "stream": True, **ASK})
    events = [json.loads(line[6:]) for line in res.text.splitlines() if line.startswith("data: {")]
    whole = ar.post("/generate", {"text": "Hello", "sampling_params": GREEDY, **ASK}).json()["meta_info"]
    for event in events:
        meta = event["meta_info"]
        n = len(event["output_ids"])
        assert meta["output_top_logprobs"] == whole["output_top_logprobs"][:n]
        assert meta["output_token_logprobs"] == whole["output_token_logprobs"][:n]
    assert len(events[-1]["output_ids"]) == 6


def test_without_top_logprobs_num_only_the_tokens_own_logprobs_come(ar):
    meta = ar.post("/generate", {"text": "Hi", "sampling_params": GREEDY, "return_logprob": True}).json()["meta_info"]
    assert len(meta["output_token_logprobs"]) == 6 and "output_top_logprobs" not in meta
    assert all(math.isfinite(row[0]) for row in meta["output_token_logprobs"])
    plain = ar.post("/generate", {"text": "Hi", "sampling_params": GREEDY}).json()["meta_info"]
    assert not {"output_token_logprobs", "output_top_logprobs", "input_token_logprobs"} & set(plain)


def test_logprobs_do_not_depend_on_the_batch(ar):
    """A request asking beside one that does not gets the logprobs it gets alone (rows by slot)."""
    both = ar.post("/generate", {"text": ["Hi", "Hello"], "sampling_params": GREEDY,
                                 "return_logprob": [False, True], "top_logprobs_num": 2}).json()
    alone = ar.post("/generate", {"text": "Hello", "sampling_params": GREEDY, **ASK}).json()
    assert "output_top_logprobs" not in both[0]["meta_info"]
    got, want = both[1]["meta_info"]["output_top_logprobs"], alone["meta_info"]["output_top_logprobs"]
    assert [[t for _, t, _ in top] for top in got] == [[t for _, t, _ in top] for top in want]
    assert [v for top in got for v, _, _ in top] == pytest.approx([v for top in want for v, _, _ in top], abs=1e-5)


def test_a_speculative_engine_refuses_return_logprob_naming_why(module_engines):
    ddtree = module_engines("--method", "ddtree", "--budget", "4")
    res = ddtree.post("/generate", {"text": "Hello", "sampling_params": GREEDY, **ASK})
    assert res.status == 400
    assert "serves logprobs for ar decoding only" in res.json()["error"]["message"]
    assert ddtree.post("/generate", {"text": "Hello", "sampling_params": GREEDY}).status == 200
