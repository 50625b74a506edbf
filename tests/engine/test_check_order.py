"""A request with two faults is answered with the one SGLang's own order of checks meets first.

SGLang's order on /generate: FastAPI's validation and its API contract, then its tokenizer
manager's normalization of the request (a prompt given, the flat raw logprob options, a single
request's empty input_ids, session_id beside session_params, a batch's rids), then what a server
launched as the engine is refuses (max_thinking_tokens, a routed_dp_rank but 0), the rids in
flight (_init_req_state), a LoRA adapter, and last each prompt's tokenized checks (the context,
then SamplingParams.verify). An empty prompt SGLang does not refuse (one in a batch, or beside a
text) the engine refuses last, as a value it cannot honour. Its OpenAI-compatible routes put
their serving class's own checks first (no prompt, no messages) and then go the same way. A value the engine cannot honour is one SGLang
serves, so the engine refuses it only once all of SGLang's checks passed.

Each case pairs two faults; the expected answer is SGLang's first, as its source orders them.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_specdec.engine import openai_api
from pytest_specdec.engine.batch import DUPLICATE_RIDS, RID_LENGTH, is_batch, parse_batch
from pytest_specdec.engine.inflight import DUPLICATE_RID, InFlight
from pytest_specdec.engine.parallel import LIST_WITH_N, SAME_N
from pytest_specdec.engine.protocol import (DP_RANK_RANGE, EMPTY_INPUT_IDS, FLAT_RAW_B64, FLAT_RAW_MULTI_ITEM,
                                            FLAT_RAW_STREAM, SESSION_PAIR, STRICT_THINKING, RequestError,
                                            parse_generate)
from pytest_specdec.engine.tokenizer import ByteTokenizer

TOKENIZER = ByteTokenizer()
CONTEXT = 256
SERVED = "tiny"
LONG = "a" * 300  # past CONTEXT
CHAT = [{"role": "user", "content": "hi"}]
LORA = ("LoRA adapter '{}' was requested, but LoRA is not enabled. Please launch the server with --enable-lora "
        "flag and preload adapters using --lora-paths or /load_lora_adapter endpoint.")
TOO_LONG = f"The input (301 tokens) is longer than the model's context length ({CONTEXT} tokens)."
OVER_CONTEXT = "Requested token count exceeds the model's maximum context length"
NO_PROMPT = "Either text, input_ids or input_embeds should be provided."
BUSY = DUPLICATE_RID.format("busy")
UNSUPPORTED = "The embedded engine cannot honour"
NEEDS_META = "return_flat_raw_output_top_logprobs requires return_meta_info=true."
SAMPLING_MASK_NEEDS_META = "return_sampling_mask requires return_meta_info=true."
REQUEST_TEMPLATE = "Request-supplied chat_template is not allowed."
BAD_HEADER = "Invalid X-Data-Parallel-Rank header: must be an integer, got '{}'"


def parse(route: str, body: dict, rids_free=None, dp_rank_header: str | None = None):
    kwargs = {"encode": TOKENIZER.encode, "vocab_size": TOKENIZER.vocab_size, "context_length": CONTEXT}
    if rids_free is not None:
        kwargs["rids_free"] = rids_free
    if dp_rank_header is not None:
        kwargs["dp_rank_header"] = dp_rank_header
    if route == "/generate":
        return (parse_batch if is_batch(body) else parse_generate)(body, **kwargs)
    parse_openai = openai_api.parse_completion if route == "/v1/completions" else openai_api.parse_chat
    return parse_openai(body, served_model_name=SERVED, **kwargs)


CASES = [
    # /generate: a rid in flight comes before the tokenized checks and the adapter...
    ("/generate", {"text": LONG, "rid": "busy"}, BUSY),
    ("/generate", {"text": "hi", "rid": "busy", "sampling_params": {"max_new_tokens": 300}}, BUSY),
    ("/generate", {"text": "hi", "rid": "busy", "sampling_params": {"top_p": 5}}, BUSY),
    ("/generate", {"text": "hi", "rid": "busy", "lora_path": "adapter"}, BUSY),
    ("/generate", {"text": "hi", "rid": "busy", "sampling_params": {"top_p": 0.5}}, BUSY),
    ("/generate", {"text": "hi", "rid": "busy", "return_logprob": True}, BUSY),
    # ...and after the normalization's check that a prompt is given
    ("/generate", {"rid": "busy"}, NO_PROMPT),
    # the engine's refusal of a value SGLang serves comes after every refusal of SGLang's
    ("/generate", {"sampling_params": {"top_p": 0.5}}, NO_PROMPT),
    ("/generate", {"text": "hi", "lora_path": "adapter", "return_logprob": True}, LORA.format("adapter")),
    ("/generate", {"text": LONG, "sampling_params": {"n": 2}}, TOO_LONG),
    ("/generate", {"text": "hi", "sampling_params": {"top_p": 0.5, "top_k": 0}},
     "top_k must be -1 (disable) or at least 1, got 0."),
    # a batch: its rids' refusals, then the rids in flight, then each prompt's, the engine's last
    ("/generate", {"text": ["a", "b"], "rid": ["x"], "sampling_params": {"top_p": 0.5}}, RID_LENGTH),
    ("/generate", {"text": ["a", "b"], "rid": ["x", "x"], "return_logprob": True}, DUPLICATE_RIDS.format(["x"])),
    ("/generate", {"text": ["a", LONG], "rid": ["x", "busy"]}, BUSY),
    ("/generate", {"text": ["a", LONG], "sampling_params": [{"top_p": 0.5}, {}]}, TOO_LONG),
    # the flat raw logprob options: after the prompt given, before an empty input_ids and the rids
    ("/generate", {"rid": "busy", "return_flat_raw_top_logprobs_b64": True}, NO_PROMPT),
    ("/generate", {"text": "hi", "stream": True, "rid": "busy", "return_flat_raw_output_top_logprobs": True,
                   "return_flat_raw_top_logprobs_b64": True}, FLAT_RAW_STREAM),
    ("/generate", {"input_ids": [], "return_flat_raw_top_logprobs_b64": True}, FLAT_RAW_B64),
    ("/generate", {"text": ["a", "b"], "rid": ["x", "x"], "return_flat_raw_top_logprobs_b64": True}, FLAT_RAW_B64),
    ("/generate", {"text": "hi", "return_flat_raw_top_logprobs": True, "multi_item_delimiter_indices": [1]},
     FLAT_RAW_MULTI_ITEM),
    # session_id beside session_params: after a single request's empty input_ids, before the rids
    ("/generate", {"input_ids": [], "session_id": "s", "session_params": {}}, EMPTY_INPUT_IDS),
    ("/generate", {"input_ids": [], "session_id": "s", "session_params": {"id": "s"}}, SESSION_PAIR),
    ("/generate", {"text": ["a", "b"], "rid": ["x"], "session_id": "s", "session_params": {}}, SESSION_PAIR),
    ("/generate", {"text": "hi", "rid": "busy", "session_id": "s", "session_params": {"id": "s"}}, SESSION_PAIR),
    # max_thinking_tokens, then a routed_dp_rank but 0: after the normalization, before the rids in flight
    ("/generate", {"text": "hi", "rid": "busy", "max_thinking_tokens": 8}, STRICT_THINKING),
    ("/generate", {"text": LONG, "max_thinking_tokens": 8, "routed_dp_rank": 1}, STRICT_THINKING),
    ("/generate", {"text": ["a", "b"], "rid": ["x", "x"], "max_thinking_tokens": 8}, DUPLICATE_RIDS.format(["x"])),
    ("/generate", {"text": "hi", "rid": "busy", "routed_dp_rank": 1}, DP_RANK_RANGE.format(1)),
    ("/generate", {"text": "hi", "lora_path": "adapter", "data_parallel_rank": 2}, DP_RANK_RANGE.format(2)),
    ("/generate", {"text": "hi", "routed_dp_rank": 0, "data_parallel_rank": 3, "lora_path": "a"}, LORA.format("a")),
    ("/generate", {"text": ["a", "b"], "rid": ["x"], "routed_dp_rank": -1}, RID_LENGTH),
    # an empty prompt SGLang hands to its scheduler: the engine's refusal comes after all of SGLang's
    ("/generate", {"input_ids": [[1], []], "rid": ["x", "busy"]}, BUSY),
    ("/generate", {"input_ids": [[], [1]], "lora_path": "adapter"}, LORA.format("adapter")),
    ("/generate", {"input_ids": [[], [65] * 300]}, "The input (300 tokens) is longer"),
    ("/generate", {"input_ids": [[1], []], "sampling_params": [{}, {"top_p": 5}]}, "top_p must be in (0, 1], got 5."),
    ("/generate", {"text": "hi", "input_ids": [], "rid": "busy"}, BUSY),
    ("/generate", {"text": "hi", "input_ids": [], "sampling_params": {"top_k": 0}}, "top_k must be -1"),
    # n: its list's agreement before the rids, its per-prompt lists after them
    ("/generate", {"text": ["a", "b"], "rid": ["x"], "sampling_params": [{"n": 2}, {"n": 3}]}, SAME_N),
    ("/generate", {"text": ["a", "b"], "rid": ["x"], "sampling_params": {"n": 2}, "return_logprob": [True, True]},
     RID_LENGTH),
    ("/generate", {"text": ["a", "b"], "rid": "busy", "sampling_params": {"n": 2}, "return_logprob": [True, True]},
     LIST_WITH_N.format("return_logprob")),
    ("/generate", {"text": ["a", "b"], "sampling_params": {"n": 2}, "top_logprobs_num": [1, 1]},
     LIST_WITH_N.format("top_logprobs_num")),
    # /v1/completions
    ("/v1/completions", {"prompt": ["a", "b"], "rid": ["x"], "n": 2}, RID_LENGTH),
    ("/v1/completions", {"prompt": ["a", "b"], "rid": ["x", "x"], "top_p": 0.5}, DUPLICATE_RIDS.format(["x"])),
    ("/v1/completions", {"prompt": "hi", "rid": "busy", "max_tokens": 300}, BUSY),
    ("/v1/completions", {"prompt": "hi", "rid": "busy", "model": "tiny:adapter"}, BUSY),
    ("/v1/completions", {"prompt": ["a", "b"], "rid": ["x", "busy"], "top_p": 0.5}, BUSY),
    ("/v1/completions", {"prompt": "hi", "top_p": 0.5, "model": "tiny:adapter"}, LORA.format("adapter")),
    ("/v1/completions", {"prompt": LONG, "echo": True}, TOO_LONG),
    ("/v1/completions", {"prompt": "hi", "rid": "busy", "routed_dp_rank": 1}, DP_RANK_RANGE.format(1)),
    ("/v1/completions", {"prompt": ["a", "b"], "rid": ["x"], "data_parallel_rank": 1}, RID_LENGTH),
    ("/v1/completions", {"prompt": LONG, "data_parallel_rank": 2, "top_p": 0.5}, DP_RANK_RANGE.format(2)),
    # /v1/chat/completions: its serving class's checks first
    ("/v1/chat/completions", {"messages": [], "rid": "busy"}, "Messages cannot be empty."),
    ("/v1/chat/completions", {"messages": [], "n": 2}, "Messages cannot be empty."),
    ("/v1/chat/completions", {"messages": CHAT, "rid": "busy", "max_completion_tokens": 300},
     "max_completion_tokens is too large: 300."),
    ("/v1/chat/completions", {"messages": CHAT, "rid": "busy", "top_p": 0.5}, BUSY),
    # n above 1 makes a chat SGLang's batch of one: its rid names the samples, busy_0 and busy_1
    ("/v1/chat/completions", {"messages": CHAT, "rid": "busy", "n": 2, "model": "tiny:adapter"}, LORA.format("adapter")),
    ("/v1/chat/completions", {"messages": CHAT, "rid": "busy", "model": "tiny:adapter"}, BUSY),
    ("/v1/chat/completions", {"messages": CHAT, "rid": "busy", "max_tokens": 250}, BUSY),
    ("/v1/chat/completions", {"messages": CHAT, "top_p": 0.5, "model": "tiny:adapter"}, LORA.format("adapter")),
    ("/v1/chat/completions", {"messages": CHAT, "n": 2, "max_tokens": 250}, OVER_CONTEXT),
    ("/v1/chat/completions", {"messages": [], "routed_dp_rank": 1}, "Messages cannot be empty."),
    ("/v1/chat/completions", {"messages": CHAT, "rid": "busy", "routed_dp_rank": -1}, DP_RANK_RANGE.format(-1)),
    ("/v1/chat/completions", {"messages": CHAT, "routed_dp_rank": 0, "model": "tiny:adapter"}, LORA.format("adapter")),
    # the chat's flat raw logprob option without return_meta_info: after no messages, before the context
    ("/v1/chat/completions", {"messages": [], "return_flat_raw_output_top_logprobs": True}, "Messages cannot be empty."),
    ("/v1/chat/completions", {"messages": CHAT, "return_flat_raw_output_top_logprobs": True, "rid": "busy",
                              "max_completion_tokens": 300}, NEEDS_META),
    ("/v1/chat/completions", {"messages": CHAT, "return_flat_raw_output_top_logprobs": True,
                              "return_meta_info": True, "rid": "busy"}, BUSY),
    # a request's chat_template, then a sampling mask without return_meta_info, before the flat raw option
    ("/v1/chat/completions", {"messages": CHAT, "chat_template_kwargs": {"chat_template": "x"},
                              "return_sampling_mask": True}, REQUEST_TEMPLATE),
    ("/v1/chat/completions", {"messages": CHAT, "return_sampling_mask": True,
                              "return_flat_raw_output_top_logprobs": True}, SAMPLING_MASK_NEEDS_META),
    ("/v1/chat/completions", {"messages": CHAT, "return_sampling_mask": True, "return_meta_info": True,
                              "rid": "busy"}, BUSY),
    # a stream's options its chat cannot stream: after its own checks, before the prompt's and the rids'
    ("/v1/chat/completions", {"messages": CHAT, "stream": True, "return_token_ids": True,
                              "max_tokens": 300}, "max_completion_tokens is too large: 300."),
    ("/v1/chat/completions", {"messages": CHAT, "stream": True, "return_token_ids": True, "return_meta_info": True,
                              "rid": "busy"}, "return_token_ids is not supported with streaming"),
    ("/v1/chat/completions", {"messages": CHAT, "stream": True, "return_prompt_token_ids": True,
                              "return_meta_info": True}, "return_prompt_token_ids is not supported with streaming"),
    ("/v1/chat/completions", {"messages": CHAT, "stream": True, "return_meta_info": True, "rid": "busy"},
     "return_meta_info is not supported with streaming. Please set stream=false"),
    ("/v1/chat/completions", {"messages": CHAT, "return_meta_info": True, "rid": "busy"}, BUSY),
]


@pytest.mark.parametrize("route, body, first", CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(CASES)])
def test_a_request_with_two_faults_gets_sglangs_first(route, body, first):
    """The engine checked a rid in flight only once every other check had passed, and refused a
    value it cannot honour before SGLang's own refusals, so such requests got the other answer."""
    in_flight = InFlight()
    in_flight.claim([SimpleNamespace(rid="busy")])
    with pytest.raises(RequestError) as info:
        parse(route, body, in_flight.check if "busy" in repr(body) else None)
    assert str(info.value).startswith(first), str(info.value)


@pytest.mark.parametrize("body", [{"input_ids": [[1], []]}, {"text": "hi", "input_ids": []},
                                  {"input_ids": [[], [1]], "routed_dp_rank": 0}])
def test_an_empty_prompt_sglang_passes_is_still_refused_last(body):
    with pytest.raises(RequestError, match=EMPTY_INPUT_IDS):
        parse("/generate", body)


@pytest.mark.parametrize("route, body", [
    ("/generate", {"text": "hi", "sampling_params": {"top_p": 0.5}}),
    ("/v1/completions", {"prompt": ["a", "b"], "n": 2}),
    ("/v1/chat/completions", {"messages": CHAT, "top_p": 0.5}),
])
def test_a_value_the_engine_cannot_honour_alone_is_still_refused(route, body):
    with pytest.raises(RequestError, match=UNSUPPORTED):
        parse(route, body)


#: (route, body, X-Data-Parallel-Rank header, SGLang's first refusal): the header is read as its
#: serving class builds the request (after its own checks, before the tokenizer manager's) and
#: wins over the body's routed_dp_rank.
HEADER_CASES = [
    ("/v1/completions", {"prompt": "", "rid": "busy"}, "x", "Prompt cannot be empty"),
    ("/v1/completions", {"prompt": ["a", "b"], "rid": ["x"]}, "x", BAD_HEADER.format("x")),
    ("/v1/completions", {"prompt": "hi", "rid": "busy"}, "1.0", BAD_HEADER.format("1.0")),
    ("/v1/completions", {"prompt": "hi", "rid": "busy", "routed_dp_rank": 1}, "", BAD_HEADER.format("")),
    ("/v1/completions", {"prompt": "hi", "rid": "busy", "routed_dp_rank": 0}, "2", DP_RANK_RANGE.format(2)),
    ("/v1/completions", {"prompt": "hi", "routed_dp_rank": 3, "model": "tiny:a"}, "0", LORA.format("a")),
    ("/v1/completions", {"prompt": "hi", "data_parallel_rank": 3, "model": "tiny:a"}, " +0 ", LORA.format("a")),
    ("/v1/completions", {"prompt": ["a", "b"], "rid": ["x"]}, "-1", RID_LENGTH),
    ("/v1/chat/completions", {"messages": [], "rid": "busy"}, "x", "Messages cannot be empty."),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 300}, "x", "max_completion_tokens is too large: 300."),
    ("/v1/chat/completions", {"messages": CHAT, "rid": "busy"}, "x", BAD_HEADER.format("x")),
    ("/v1/chat/completions", {"messages": CHAT, "rid": "busy", "routed_dp_rank": 0}, "1", DP_RANK_RANGE.format(1)),
    ("/v1/chat/completions", {"messages": CHAT, "routed_dp_rank": 1, "model": "tiny:a"}, "0", LORA.format("a")),
]


@pytest.mark.parametrize("route, body, header, first", HEADER_CASES,
                         ids=[f"{i}-{c[0]}" for i, c in enumerate(HEADER_CASES)])
def test_the_openai_routes_read_the_dp_rank_header_first_as_sglang_does(route, body, header, first):
    """The engine ignored X-Data-Parallel-Rank: SGLang's OpenAI routes refuse one that is no
    integer and route by it ahead of the body's routed_dp_rank."""
    in_flight = InFlight()
    in_flight.claim([SimpleNamespace(rid="busy")])
    with pytest.raises(RequestError) as info:
        parse(route, body, in_flight.check if "busy" in repr(body) else None, dp_rank_header=header)
    assert str(info.value).startswith(first), str(info.value)


@pytest.mark.parametrize("route, body", [("/v1/completions", {"prompt": "hi"}),
                                         ("/v1/chat/completions", {"messages": CHAT})])
def test_a_header_of_rank_0_is_served_whatever_the_body_says(route, body):
    assert parse(route, {**body, "routed_dp_rank": 5}, dp_rank_header="0").prompts


def test_a_header_that_is_no_integer_is_answered_as_sglangs_http_exception():
    """SGLang's handle_request answers the HTTPException with its status as the error's type."""
    with pytest.raises(RequestError) as info:
        parse("/v1/completions", {"prompt": "hi"}, dp_rank_header="one")
    assert openai_api.error_body(info.value) == {"object": "error", "message": BAD_HEADER.format("one"),
                                                 "type": "400", "param": None, "code": 400}


@pytest.mark.parametrize("route, body", [
    ("/v1/completions", {"prompt": "hi", "session_params": {"id": "s", "offset": 1}}),
    ("/v1/chat/completions", {"messages": CHAT, "session_id": "s", "session_params": {"id": "s"}}),
    ("/v1/chat/completions", {"messages": CHAT, "session_params": {}}),
])
def test_session_params_are_ignored_by_the_openai_routes_as_sglang_ignores_them(route, body):
    """The engine refused a non-null session_params as a value it cannot honour; SGLang's OpenAI
    routes never pass it on (so no session_id beside it is refused either)."""
    assert parse(route, body).prompts


def test_an_option_a_chat_cannot_stream_is_answered_as_sglangs_value_error():
    """SGLang's handle_request answers its chat's ValueError with the type BadRequest."""
    with pytest.raises(RequestError) as info:
        parse("/v1/chat/completions", {"messages": CHAT, "stream": True, "return_meta_info": True})
    assert openai_api.error_body(info.value)["type"] == "BadRequest"
