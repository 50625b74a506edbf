"""/generate's request checking: every name SGLang accepts, SGLang's error shapes, and a server
that hostile or slow clients cannot make answer 500 or hold a connection."""

from __future__ import annotations

import json
import math
import re
import socket
import time

import pytest

from pytest_specdec.engine import contract, openai_api, protocol
from pytest_specdec.engine.protocol import (
    GENERATE_FIELDS,
    HINT_FIELDS,
    HINT_SAMPLING,
    NEUTRAL_FIELDS,
    NEUTRAL_SAMPLING,
    SAMPLING_FIELDS,
    InvalidBody,
    Refused,
    RequestError,
    SchemaViolation,
    UnparsableBody,
    Unsupported,
    parse_generate,
    parse_json,
)
from pytest_specdec.engine.tokenizer import ByteTokenizer, EOS_ID

TOKENIZER = ByteTokenizer()
PROMPT = "The capital city of France is"
IDLE_TIMEOUT = 1.0


def parse(body: dict, context_length: int = 4096):
    return parse_generate(body, encode=TOKENIZER.encode, vocab_size=TOKENIZER.vocab_size,
                          context_length=context_length)


# -- what is accepted --------------------------------------------------------------------------

def test_every_field_and_sampling_parameter_sglang_types_optional_accepts_null():
    # the others' nulls FastAPI refuses before SGLang's code runs: read_body (GENERATE_MODEL)
    body = {name: None for name in GENERATE_FIELDS if name not in protocol.GENERATE_MODEL.non_null}
    # but n, whose null SGLang's normalization compares with 1 (a TypeError): parallel.NULL_N
    body |= {"text": "hi", "sampling_params": {name: None for name in SAMPLING_FIELDS if name != "n"}}
    req = parse(body)
    # null means SGLang's default, but a null max_new_tokens, which its scheduler cuts to the context only
    served = 4096 - 1 - len(req.input_ids) - 1
    assert req.sampling == protocol.Sampling(max_new_tokens=served, context_checked=False)
    assert (req.stream, req.rid) == (False, None)


@pytest.mark.parametrize("sampling_params, served", [
    (None, 31), ({}, 31), ({"max_new_tokens": None}, 31),  # SGLang's 128 or no limit, cut to the context
    ({"max_new_tokens": 20}, 20),
], ids=["no-sampling-params", "absent", "null", "named"])
def test_a_request_that_names_no_max_new_tokens_is_cut_to_the_context_not_refused(sampling_params, served):
    """SGLang's tokenizer manager refuses a prompt plus max_new_tokens past the context only where
    the request names max_new_tokens; its default (128) or a null (no limit) its scheduler cuts to
    max_req_len - prompt - 1. The engine refused the first with a 400 naming 128 tokens it was never
    asked for, and served a null as 128."""
    req = parse({"text": "a" * 30, "sampling_params": sampling_params}, context_length=64)  # 31 tokens
    assert (len(req.input_ids), req.sampling.max_new_tokens) == (31, served)
    with pytest.raises(Refused, match=r"You requested a total of 71 tokens: 31 tokens from the input messages and "
                                      r"40 tokens"):
        parse({"text": "a" * 30, "sampling_params": {"max_new_tokens": 40}}, context_length=64)


def test_a_null_max_new_tokens_serves_the_rest_of_the_context():
    req = parse({"text": "a" * 30, "sampling_params": {"max_new_tokens": None}}, context_length=512)
    assert req.sampling.max_new_tokens == 512 - 1 - 31 - 1
    assert parse({"text": "a" * 30, "sampling_params": {}}, context_length=512).sampling.max_new_tokens == 128


def other_value(rule: protocol.Neutral, name: str = "") -> object:
    """A value of the type SGLang's contract takes for a neutral-only name, not its off value."""
    if name == "watermark":  # a struct of its own names
        return {"enabled": True}
    kinds = rule.kinds or (str,)
    if bool in kinds:
        return not rule.off
    for kind, value in ((str, "something-else"), (int, 5), (float, 0.5), (dict, {"1": 1.0})):
        if kind in kinds:
            return value
    return ["something-else"]


@pytest.mark.parametrize("name", sorted(NEUTRAL_FIELDS))
def test_a_neutral_field_at_its_off_value_is_accepted_and_any_other_value_is_named(name):
    parse({"text": "hi", name: NEUTRAL_FIELDS[name].off})
    with pytest.raises(Unsupported, match=rf"\b{name}="):
        parse({"text": "hi", name: other_value(NEUTRAL_FIELDS[name])})


@pytest.mark.parametrize("name", sorted(NEUTRAL_SAMPLING))
def test_a_neutral_sampling_parameter_at_its_off_value_is_accepted_and_any_other_value_is_named(name):
    parse({"text": "hi", "sampling_params": {name: NEUTRAL_SAMPLING[name].off}})
    within = protocol.SAMPLING_RANGES.get(name)
    other = other_value(NEUTRAL_SAMPLING[name], name)
    if within is not None and within.refuses(other):
        other = 0.5  # a value SGLang would serve
    with pytest.raises(Unsupported, match=rf"\b{name}="):
        parse({"text": "hi", "sampling_params": {name: other}})


#: Values of each JSON shape, for a hint: the first one SGLang's API contract takes for its name.
HINT_VALUES = ({"anything": [1, "x"]}, {"protocol_version": "1", "message_id": "m"}, {"a": "b"}, ["x"],
               ["x", None], [7], [7, None], "x", 7, True)


def hint_value(name: str, where: str | None = None) -> object:
    wrap = (lambda v: {where: {name: v}}) if where else (lambda v: {name: v})
    return next(v for v in HINT_VALUES if contract.generate_contract_error(wrap(v)) is None)


#: Hints some of whose values SGLang itself refuses (test_check_order.py): a value it serves.
SERVED_HINTS = {"routed_dp_rank": 0, "data_parallel_rank": 0}


def test_hints_take_any_value_sglangs_contract_takes():
    """A hint changes nothing, whatever its value; a value of another type than SGLang's contract
    decodes its name as is that contract's refusal (see test_a_hint_of_a_type_sglang_refuses...)."""
    body = {"text": "hi", **{name: hint_value(name) for name in HINT_FIELDS}, **SERVED_HINTS,
            "sampling_params": {name: hint_value(name, "sampling_params") for name in HINT_SAMPLING}}
    assert {"anything": [1, "x"]} in body.values()  # the names SGLang's schema leaves untyped take anything
    assert parse(body).input_ids == tuple(TOKENIZER.encode("hi"))


@pytest.mark.parametrize("body, words", [
    ({"priority": "high"}, 'invalid type: string "high", expected i64'),
    ({"custom_labels": {"team": 1}}, "invalid type: integer `1`, expected a string"),
    ({"sampling_params": {"stream_interval": 1.5}}, "invalid type: floating point `1.5`, expected i64"),
    ({"sampling_params": {"spaces_between_special_tokens": 7}}, "invalid type: integer `7`, expected a boolean"),
])
def test_a_hint_of_a_type_sglangs_contract_refuses_is_its_400(body, words):
    """The engine took any value for a hint; SGLang's contract check refuses one of another type."""
    with pytest.raises(SchemaViolation) as info:
        parse({"text": "hi", **body})
    assert info.value.body() == {"error": words}


def test_what_sglang_frontend_sends_is_accepted():
    """sgl.gen's RuntimeEndpoint at its defaults (SglSamplingParams.to_srt_kwargs + globals)."""
    req = parse({"text": "Q: 1+1?\nA:", "sampling_params": {
        "skip_special_tokens": True, "spaces_between_special_tokens": True, "max_new_tokens": 16,
        "min_new_tokens": 0, "n": 1, "stop": [], "stop_token_ids": [], "stop_regex": [], "temperature": 1.0,
        "top_p": 1.0, "top_k": -1, "min_p": 0.0, "frequency_penalty": 0.0, "presence_penalty": 0.0,
        "ignore_eos": False, "regex": None, "json_schema": None}})
    assert req.sampling == protocol.Sampling(max_new_tokens=16)


def test_unhonourable_values_are_all_named_in_one_message():
    with pytest.raises(Unsupported) as info:
        parse({"text": "hi", "sampling_params": {"top_p": 0.9, "min_p": 0.5, "regex": "a+"}})
    for part in ("top_p=0.9", "min_p=0.5", 'regex="a+"'):
        assert part in str(info.value)
    with pytest.raises(Unsupported, match="return_hidden_states=true"):
        parse({"text": "hi", "return_hidden_states": True})


def test_return_logprob_asks_the_output_tokens_top_logprobs_and_its_other_forms_are_named():
    """The engine serves output tokens' logprobs (logprob_start_len -1, SGLang's default) as rows of
    [logprob, id, null]; a form it does not serve is refused last, naming it. Without
    return_logprob its options are ignored, as SGLang ignores them."""
    assert parse({"text": "hi", "return_logprob": True, "top_logprobs_num": 2}).top_logprobs == 2
    assert parse({"text": "hi", "return_logprob": True, "logprob_start_len": -1}).top_logprobs == 0
    assert parse({"text": "hi", "top_logprobs_num": 2, "logprob_start_len": 0}).top_logprobs is None
    for extra, words in [({"logprob_start_len": 0}, "logprob_start_len=0: it serves the output tokens' logprobs only"),
                         ({"return_text_in_logprobs": True}, "return_text_in_logprobs=true"),
                         ({"token_ids_logprob": [1, 2]}, "token_ids_logprob=[1, 2]"),
                         ({"top_logprobs_num": TOKENIZER.vocab_size + 1}, "the vocabulary has"),
                         ({"top_logprobs_num": [2]}, "a list goes with a batch of prompts")]:
        with pytest.raises(Unsupported, match=re.escape(words)):
            parse({"text": "hi", "return_logprob": True, **extra})


# -- what is refused, and how -------------------------------------------------------------------

@pytest.mark.parametrize("body, error, fragment", [
    ({"text": "hi", "top_logprobs": 2}, SchemaViolation, "unknown field(s) `top_logprobs`"),
    ({"text": "hi", "sampling_params": {"top_q": 1}}, SchemaViolation,
     "unknown field `top_q`, expected one of `max_new_tokens`, `stop`,"),
    ({"text": "hi", "sampling_params": [{"max_new_tokens": 1}]}, SchemaViolation, "expected an object"),
    ({"text": "hi", "sampling_params": "fast"}, SchemaViolation,
     'invalid type: string "fast", expected a value or an array of values for SamplingParamsOrList'),
    ({"text": "hi", "sampling_params": {"max_new_tokens": "8"}}, SchemaViolation,
     'invalid type: string "8", expected i64'),
    ({"text": "hi", "sampling_params": {"temperature": "hot"}}, SchemaViolation,
     'invalid type: string "hot", expected f64'),
    ({"text": "hi", "sampling_params": {"ignore_eos": 1}}, SchemaViolation,
     "invalid type: integer `1`, expected a boolean"),
    ({"text": "hi", "sampling_params": {"stop": [1]}}, SchemaViolation, "invalid type: integer `1`, expected a string"),
    ({"text": "hi", "sampling_params": {"stop": ""}}, Refused, "stop strings must be non-empty"),
    ({"text": "hi", "sampling_params": {"stop": ["ok", ""]}}, Refused, "stop strings must be non-empty"),
    ({"text": "hi", "sampling_params": {"temperature": float("inf")}}, Refused, "non-negative finite"),
    ({"text": "hi", "sampling_params": {"temperature": -0.5}}, Refused, "non-negative finite"),
    ({"text": "hi", "sampling_params": {"stop_token_ids": [259]}}, Refused, "stop_token_ids"),
    ({"text": "a", "input_ids": [[1, 2]]}, SchemaViolation, "give text as a list of prompts too"),
    ({"text": "a", "rid": ["x"]}, SchemaViolation, "a list of rids goes with a batch of prompts"),
    ({"text": "a", "sampling_params": [{}]}, SchemaViolation, "a list of sampling_params goes with a batch"),
    ({"input_ids": []}, Refused, "input_ids cannot be empty."),
    ({"text": "hi", "lora_path": 5}, SchemaViolation,
     "invalid type: integer `5`, expected a value or an array of values for OptionalStringOrList"),
    ({"text": "hi", "lora_path": ["a", 3]}, SchemaViolation, "invalid type: integer `3`, expected a string"),
    ([{"text": "hi"}], InvalidBody, "JSON object"),
])
def test_bad_requests_are_refused_with_the_reason(body, error, fragment):
    with pytest.raises(error) as info:
        parse(body)
    assert fragment in str(info.value)


#: SGLang's refusal of an adapter on a server started without --enable-lora, for adapter {}
LORA_REFUSAL = ("LoRA adapter '{}' was requested, but LoRA is not enabled. Please launch the server with --enable-lora "
                "flag and preload adapters using --lora-paths or /load_lora_adapter endpoint.")


@pytest.mark.parametrize("lora_path, adapter", [("my-adapter", "my-adapter"), ([None, "", "second"], "second"),
                                                ([None], "None")])
def test_a_lora_adapter_is_refused_in_sglangs_words(lora_path, adapter):
    """The engine has no LoRA: SGLang started without --enable-lora refuses any adapter, naming the
    first one given (a list of nulls names None, as SGLang's does), once the request's own checks
    passed and before the prompt is measured against the context."""
    with pytest.raises(Refused) as info:
        parse({"text": "a" * 300, "lora_path": lora_path}, context_length=256)
    assert str(info.value) == LORA_REFUSAL.format(adapter)
    with pytest.raises(Refused, match="Either text, input_ids or input_embeds should be provided."):
        parse({"lora_path": lora_path})


BAD_RANGES = [{"temperature": -0.5}, {"temperature": float("nan")}, {"max_new_tokens": -1}, {"stop": [""]},
              {"stop_token_ids": [259]}]


@pytest.mark.parametrize("bad", BAD_RANGES, ids=lambda bad: next(iter(bad)))
def test_sampling_ranges_are_checked_where_sglang_checks_them(bad):
    """SGLang checks the sampling ranges (SamplingParams.verify) after the prompt is given once,
    after a LoRA adapter is refused and after its tokenizer manager's context checks, and before
    its scheduler's limit; the engine checked them first, so a request with two faults was
    refused for the other one."""
    with pytest.raises(Refused, match="Either text, input_ids or input_embeds should be provided."):
        parse({"sampling_params": bad})
    with pytest.raises(Refused) as info:
        parse({"text": "hi", "lora_path": "my-adapter", "sampling_params": bad})
    assert str(info.value) == LORA_REFUSAL.format("my-adapter")
    with pytest.raises(Refused, match="longer than the model's context length"):
        parse({"text": "a" * 300, "sampling_params": bad}, context_length=256)
    if "max_new_tokens" not in bad:
        with pytest.raises(Refused, match="Requested token count exceeds"):
            parse({"text": "hi", "sampling_params": {"max_new_tokens": 300, **bad}}, context_length=256)
    with pytest.raises(Refused) as info:  # the scheduler's limit comes after the ranges
        parse({"text": "a" * 250, "sampling_params": {"max_new_tokens": 1, **bad}}, context_length=256)
    assert next(iter(bad)) in str(info.value)


def test_the_openai_routes_check_sampling_ranges_where_sglang_does():
    """The same order on /v1/completions and /v1/chat/completions: their adapter and context
    refusals come before a bad temperature (a chat's max_tokens within the context: one past it
    SGLang's chat refuses before all of these)."""
    kwargs = {"encode": TOKENIZER.encode, "vocab_size": TOKENIZER.vocab_size, "context_length": 256,
              "served_model_name": "tiny"}
    for parse_openai, prompt in ((openai_api.parse_completion, {"prompt": "hi"}),
                                 (openai_api.parse_chat, {"messages": [{"role": "user", "content": "hi"}]})):
        with pytest.raises(RequestError) as info:
            parse_openai({**prompt, "model": "tiny:my-adapter", "temperature": -1}, **kwargs)
        assert str(info.value) == LORA_REFUSAL.format("my-adapter")
        with pytest.raises(RequestError, match="Requested token count exceeds"):
            parse_openai({**prompt, "max_tokens": 255, "temperature": -1}, **kwargs)
        with pytest.raises(RequestError, match="temperature must be a non-negative finite number"):
            parse_openai({**prompt, "max_tokens": 3, "temperature": -1}, **kwargs)


@pytest.mark.parametrize("lora_path", [None, "", []])
def test_no_lora_adapter_is_no_refusal(lora_path):
    assert parse({"text": "hi", "lora_path": lora_path}).input_ids == tuple(TOKENIZER.encode("hi"))


@pytest.mark.parametrize("raw, fragment", [
    (b'{"text": "\\ud800"}', "not valid Unicode"),
    (b'{"text": "ok", "rid": "\\udfff\\ud800"}', "not valid Unicode"),
    (b'{"text": "ok", "custom_labels": {"\\ud83d": "x"}}', "not valid Unicode"),
])
def test_hostile_bodies_are_invalid(raw, fragment):
    with pytest.raises(InvalidBody, match=fragment):
        parse_json(raw)


@pytest.mark.parametrize("raw", [
    b'[' * 100_000 + b']' * 100_000,  # deeper than Python's parser goes
    b'{"text": "\xff"}',  # not UTF-8, nor UTF-16 or -32
    b'{"text": "ok", "sampling_params": {"max_new_tokens": ' + b'9' * 5000 + b'}}',  # too long for an int
])
def test_a_body_fastapi_cannot_parse_gets_its_answer(raw):
    """FastAPI answers any failure to parse but bad JSON with HTTPException(400, its words), which
    SGLang's handler turns into its ErrorResponse with the status as the type."""
    with pytest.raises(UnparsableBody) as info:
        parse_json(raw)
    assert info.value.body() == {"object": "error", "message": "There was an error parsing the body", "type": "400",
                                 "param": None, "code": 400}


def deep(levels: int, inner: bytes = b"1") -> bytes:
    return b'{"a": ' * levels + inner + b"}" * levels


@pytest.mark.parametrize("levels", [600, 900])
def test_a_body_nested_as_deep_as_pythons_parser_takes_is_taken(levels):
    """FastAPI takes whatever json.loads takes, so SGLang serves a hint nested 600 or 900 deep;
    the engine refused anything deeper than 500 levels as a body it could not parse."""
    body = parse_json(b'{"text": "ok", "sampling_params": {"custom_params": ' + deep(levels) + b'}}')
    assert parse(body).input_ids == tuple(TOKENIZER.encode("ok"))
    with pytest.raises(Unsupported, match=r'session_params=\{"a": \{"a"'):
        parse(parse_json(b'{"text": "ok", "session_params": ' + deep(levels) + b'}'))
    with pytest.raises(SchemaViolation, match="unknown field"):
        parse(parse_json(b'{"text": "ok", "deep": ' + deep(levels) + b'}'))


def test_an_echo_of_a_value_too_deep_to_render_is_cut_not_a_crash():
    """A value json.loads took may be too deep to render further down the stack: its echo in a
    message is cut to its head rather than raising RecursionError (a 500)."""
    value = json.loads(b"[" * 20 + b"]" * 20)
    inner = value
    for _ in range(5000):  # deeper than any recursion limit, built without parsing
        inner.append([])
        inner = inner[-1]
    assert protocol._shown(value, 60) == "[[[..."
    message = protocol.validation_message([protocol.not_an_object(value, json_guard=False)], "POST /generate")
    assert "'input': [[[..., 'ctx'" in message and message.endswith("'input': [[[..., 'ctx': {'class_name': 'GenerateReqInput'}}]")
    with pytest.raises(SchemaViolation, match=r"^invalid type: sequence, expected a string$"):
        parse({"text": value})


def test_a_body_is_parsed_as_fastapi_parses_it():
    """Python's json.loads of the bytes, as FastAPI's: UTF-16 and -32 and a UTF-8 BOM are read,
    NaN and Infinity are numbers, and a body nested 100 levels deep is taken."""
    for encoding in ("utf-16", "utf-32", "utf-8-sig", "utf-16-le"):
        assert parse_json('{"text": "é"}'.encode(encoding)) == {"text": "é"}, encoding
    body = parse_json(b'{"temperature": NaN, "top_p": Infinity, "min_p": -Infinity}')
    assert math.isnan(body["temperature"]) and body["top_p"] == math.inf and body["min_p"] == -math.inf
    deep = b'{"text": "ok", "sampling_params": {"custom_params": ' + b'{"a": ' * 100 + b'1' + b'}' * 100 + b'}}'
    assert parse(parse_json(deep)).input_ids == tuple(TOKENIZER.encode("ok"))


@pytest.mark.parametrize("sampling, fragment", [
    ('{"temperature": NaN}', "temperature must be a non-negative finite number, got nan."),
    ('{"temperature": Infinity}', "temperature must be a non-negative finite number, got inf."),
    ('{"max_new_tokens": NaN}', "invalid type: floating point `nan`, expected i64"),
    ('{"top_p": NaN}', "top_p must be in (0, 1], got nan."),
    ('{"repetition_penalty": Infinity}', "repetition_penalty must be in (0, 2] (1.0 = no penalty), got inf."),
])
def test_nan_and_infinity_meet_sglangs_validation(sampling, fragment):
    with pytest.raises(RequestError) as info:
        parse(parse_json(b'{"text": "hi", "sampling_params": ' + sampling.encode() + b'}'))
    assert fragment in str(info.value)


@pytest.mark.parametrize("params, words", [
    ({"top_p": 5}, "top_p must be in (0, 1], got 5."),
    ({"top_p": 0}, "top_p must be in (0, 1], got 0."),
    ({"min_p": -0.5}, "min_p must be in [0, 1], got -0.5."),
    ({"top_k": 0}, "top_k must be -1 (disable) or at least 1, got 0."),
    ({"frequency_penalty": 3}, "frequency_penalty must be in [-2, 2], got 3."),
    ({"presence_penalty": -3.5}, "presence_penalty must be in [-2, 2], got -3.5."),
    ({"min_new_tokens": -1}, "min_new_tokens must be in [0, max_new_tokens], got -1."),
    ({"beam_width": 0, "temperature": -1}, "beam_width must be at least 1, got 0."),
    ({"top_p": 5, "temperature": -1}, "temperature must be a non-negative finite number, got -1."),
    ({"top_p": 5, "top_k": 0}, "top_p must be in (0, 1], got 5."),
    ({"min_new_tokens": -1, "max_new_tokens": -1}, "min_new_tokens must be in [0, max_new_tokens], got -1."),
])
def test_a_neutral_sampling_value_sglang_refuses_gets_its_refusal(params, words):
    """A value SamplingParams.verify refuses is refused in its words, in its order and at its
    point (after the context checks), not as one the engine cannot honour; beside an honourable
    value the engine lacks (which SGLang serves) too."""
    with pytest.raises(Refused) as info:
        parse({"text": "hi", "sampling_params": params})
    assert str(info.value) == words
    with pytest.raises(Refused, match="longer than the model's context length"):
        parse({"text": "a" * 300, "sampling_params": params}, context_length=256)
    with pytest.raises(Refused) as info:
        parse({"text": "hi", "sampling_params": {"top_p": 0.5, **params}})
    assert str(info.value) == words


@pytest.mark.parametrize("stop", [[f"s{i}" for i in range(33)], ["s"] * 40])
def test_more_stop_strings_than_sglang_allows_get_its_refusal(stop):
    """The engine served any number of stop strings; SGLang's SamplingParams.normalize refuses more
    than 32 (duplicates counted), just before its ranges are checked."""
    words = f"at most 32 stop strings are allowed, got {len(stop)}"
    with pytest.raises(Refused) as info:
        parse({"text": "hi", "sampling_params": {"stop": stop, "top_p": 5}})
    assert str(info.value) == words
    with pytest.raises(Refused, match="longer than the model's context length"):
        parse({"text": "a" * 300, "sampling_params": {"stop": stop}}, context_length=256)
    kwargs = {"encode": TOKENIZER.encode, "vocab_size": TOKENIZER.vocab_size, "context_length": 256,
              "served_model_name": "tiny"}
    with pytest.raises(Refused, match=words):
        openai_api.parse_completion({"prompt": "hi", "stop": stop}, **kwargs)
    assert len(parse({"text": "hi", "sampling_params": {"stop": stop[:32]}}).sampling.stop) == 32


@pytest.mark.parametrize("params, words", [
    ({"min_new_tokens": 9, "max_new_tokens": 8}, "min_new_tokens must be in [0, max_new_tokens(8)], got 9."),
    ({"min_new_tokens": 129}, "min_new_tokens must be in [0, max_new_tokens(128)], got 129."),  # SGLang's default
    ({"min_new_tokens": 9, "max_new_tokens": -1}, "max_new_tokens must be at least 0, got -1."),
])
def test_min_new_tokens_above_max_new_tokens_gets_sglangs_refusal(params, words):
    """SamplingParams.verify refuses it in these words after its max_new_tokens check; the engine
    said it could not honour min_new_tokens (a 400 of another shape). Where max_new_tokens is null
    SGLang checks nothing, and the engine still cannot honour the minimum."""
    with pytest.raises(Refused) as info:
        parse({"text": "hi", "sampling_params": params})
    assert str(info.value) == words
    with pytest.raises(Unsupported, match="min_new_tokens=9"):
        parse({"text": "hi", "sampling_params": {"min_new_tokens": 9, "max_new_tokens": None}})


@pytest.mark.parametrize("body, words", [
    ({"sampling_params": {"top_p": "0.9"}}, 'invalid type: string "0.9", expected f64'),
    ({"sampling_params": {"top_p": True}}, "invalid type: boolean `true`, expected f64"),
    ({"sampling_params": {"n": 1.0}}, "invalid type: floating point `1.0`, expected i64"),
    ({"sampling_params": {"regex": 5}}, "invalid type: integer `5`, expected a string"),
    ({"sampling_params": {"skip_special_tokens": "false"}}, 'invalid type: string "false", expected a boolean'),
    ({"sampling_params": {"logit_bias": {"1": "x"}}}, 'invalid type: string "x", expected f64'),
    ({"sampling_params": {"logit_bias": [1]}}, "invalid type: sequence, expected a map"),
    ({"sampling_params": {"choice": ["a", 1]}}, "invalid type: integer `1`, expected a string"),
    ({"sampling_params": {"top_p": ""}}, 'invalid type: string "", expected f64'),
    ({"sampling_params": {"watermark": {"salt": 1}}},
     "unknown field `salt`, expected one of `enabled`, `key`, `context_window`"),
    ({"return_logprob": "yes"}, 'invalid type: string "yes", expected a value or an array of values for BoolOrList'),
    ({"require_reasoning": 0}, "invalid type: integer `0`, expected a boolean"),
    ({"max_thinking_tokens": "8"}, 'invalid type: string "8", expected u64'),
    ({"max_thinking_tokens": -1}, "invalid value: integer `-1`, expected u64"),
])
def test_a_wrongly_typed_neutral_only_value_is_sglangs_contract_error(body, words):
    """SGLang's API contract decodes these names with their types and answers another type with
    its 400 {"error": text}, before anything else; the engine said it could not honour the value
    ({"error": {"message": ...}}), or took an empty string as the default."""
    with pytest.raises(SchemaViolation) as info:
        parse({"text": "hi", "top_logprobs_num": None, **body, "return_hidden_states": True})
    assert str(info.value) == words
    assert info.value.body() == {"error": words}


@pytest.mark.parametrize("fields, words", [
    ({"top_p": 5}, "top_p must be in (0, 1], got 5.0."),
    ({"top_k": -2}, "top_k must be -1 (disable) or at least 1, got -2."),
    ({"min_tokens": -1}, "min_new_tokens must be in [0, max_new_tokens], got -1."),
    ({"min_tokens": 9}, "min_new_tokens must be in [0, max_new_tokens(3)], got 9."),
    ({"repetition_penalty": 0}, "repetition_penalty must be in (0, 2] (1.0 = no penalty), got 0.0."),
    ({"temperature": -1}, "temperature must be a non-negative finite number, got -1.0."),
])
def test_the_openai_routes_refuse_an_out_of_range_value_as_sglang(fields, words):
    """The same on /v1/completions and /v1/chat/completions, with SGLang's sampling parameter
    names and pydantic's floats (an integer given for a float field is worded as one)."""
    kwargs = {"encode": TOKENIZER.encode, "vocab_size": TOKENIZER.vocab_size, "context_length": 256,
              "served_model_name": "m"}
    for parse_openai, prompt in ((openai_api.parse_completion, {"prompt": "hi"}),
                                 (openai_api.parse_chat, {"messages": [{"role": "user", "content": "hi"}]})):
        with pytest.raises(RequestError) as info:
            parse_openai({**prompt, "max_tokens": 3, **fields}, **kwargs)
        assert str(info.value) == words


def test_a_paired_surrogate_escape_is_text():
    assert parse_json(b'{"text": "\\ud83d\\ude00"}') == {"text": "\U0001F600"}


def test_error_bodies_take_sglangs_shapes():
    assert SchemaViolation("m").body() == {"error": "m"}
    assert Refused("m").body() == {"error": {"message": "m"}}
    assert Unsupported("m").body() == {"error": {"message": "m"}}
    assert InvalidBody("m").body() == {"object": "error", "message": "m", "type": "Bad Request", "param": None,
                                       "code": 400}
    assert Refused("m").stream_event() == {"error": {"message": "m", "type": "invalid_request_error", "code": 400,
                                                     "retryable": False}}


# -- over HTTP ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def engine(module_engines):
    return module_engines("--method", "dflash", "--context-length", "256",
                          "--http-idle-timeout", str(IDLE_TIMEOUT))


@pytest.mark.parametrize("raw", [
    b'{"text": "\\ud800", "sampling_params": {"max_new_tokens": 2}}',
    b'{"text": "hi", "sampling_params": {"stop": ["\\udc00"]}}',
    b'[' * 50_000 + b']' * 50_000,
    b'{"text": "hi", "sampling_params": {"temperature": 1e999}}',
    b'{"text": "hi", "sampling_params": {"stop": [""]}}',
    b'{"text": "hi", "sampling_params": "max_new_tokens=2"}',
])
def test_hostile_requests_get_400_not_500(engine, raw):
    res = engine.request("POST", "/generate", raw=raw)
    assert res.status == 400, res.text
    assert engine.generate(PROMPT, max_new_tokens=2)["meta_info"]["completion_tokens"] == 2


def test_a_deep_body_is_served_or_refused_never_a_500(engine):
    """Nested 600 deep, a hint is served, as SGLang serves it; at any depth up to where the
    parser gives up (and past it) every route answers 200 or 400, never 500."""
    hinted = b'{"text": "hi", "sampling_params": {"max_new_tokens": 2, "custom_params": ' + deep(600) + b'}}'
    res = engine.request("POST", "/generate", raw=hinted)
    assert res.status == 200, res.text
    for levels in (600, 900, 980, 5000):
        nested = b"[" * levels + b"]" * levels
        for path, raw in (("/generate", nested), ("/generate", b'{"text": "hi", "session_params": ' + deep(levels) + b"}"),
                          ("/generate", b'{"text": ' + nested + b"}"), ("/v1/completions", nested),
                          ("/v1/chat/completions", b'{"messages": ' + nested + b', "max_tokens": 2}'),
                          ("/v1/completions", b'{"prompt": "hi", "stop": ' + nested + b', "max_tokens": 2}')):
            res = engine.request("POST", path, raw=raw)
            assert res.status == 400, (levels, path, res.status, res.text[:300])
    assert engine.generate(PROMPT, max_new_tokens=2)["meta_info"]["completion_tokens"] == 2


@pytest.mark.parametrize("path", ["/generate", "/v1/completions", "/v1/tokenize"])
def test_a_body_fastapi_cannot_parse_gets_its_answer_over_http(engine, path):
    res = engine.request("POST", path, raw=b'{"text": "\xff", "prompt": "\xff"}')
    assert res.status == 400 and res.json() == {"object": "error", "message": "There was an error parsing the body",
                                                "type": "400", "param": None, "code": 400}


def test_a_nan_temperature_gets_sglangs_refusal_over_http(engine):
    raw = b'{"text": "hi", "sampling_params": {"temperature": NaN, "max_new_tokens": 2}}'
    res = engine.request("POST", "/generate", raw=raw)
    assert res.status == 400 and res.json() == {
        "error": {"message": "temperature must be a non-negative finite number, got nan."}}
    res = engine.request("POST", "/v1/completions", raw=b'{"prompt": "hi", "temperature": NaN}')
    assert res.status == 400 and res.json()["message"] == "temperature must be a non-negative finite number, got nan."
    assert engine.generate(PROMPT, max_new_tokens=2)["meta_info"]["completion_tokens"] == 2


def test_a_request_sglang_refuses_while_streaming_is_an_error_event(engine):
    res = engine.post("/generate", {"text": "a" * 300, "stream": True})
    assert res.status == 200  # SGLang has sent its headers by the time its tokenizer manager refuses
    events = [e for e in res.text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]" and len(events) == 2
    error = json.loads(events[0][len("data: "):])["error"]
    assert "longer than the model's context length" in error["message"]
    assert (error["type"], error["code"], error["retryable"]) == ("invalid_request_error", 400, False)


def test_a_lora_adapter_is_refused_over_http_as_sglang_refuses_it(engine):
    """A 400 with SGLang's error body; streaming, a 200 with its error event, as from SGLang, whose
    tokenizer manager refuses the adapter after the stream has started."""
    res = engine.post("/generate", {"text": "hi", "lora_path": "my-adapter"})
    assert res.status == 400 and res.json() == {"error": {"message": LORA_REFUSAL.format("my-adapter")}}
    res = engine.post("/generate", {"text": "hi", "lora_path": "my-adapter", "stream": True})
    event = json.dumps(Refused(LORA_REFUSAL.format("my-adapter")).stream_event(), separators=(",", ":"))
    assert res.status == 200 and res.text == "data: " + event + "\n\ndata: [DONE]\n\n"


def test_unhonourable_streaming_request_is_a_400_before_streaming(engine):
    res = engine.post("/generate", {"text": "hi", "stream": True, "sampling_params": {"n": 2}})
    assert res.status == 400 and "n=2" in res.json()["error"]["message"]


def test_stop_token_ids_end_generation(engine):
    free = engine.generate(PROMPT, max_new_tokens=24)
    stop_id = free["output_ids"][10]
    first = free["output_ids"].index(stop_id)
    out = engine.post("/generate", {"text": PROMPT, "sampling_params": {
        "max_new_tokens": 24, "stop_token_ids": [stop_id]}}).json()
    assert out["output_ids"] == free["output_ids"][: first + 1]
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop_id}
    ignored = engine.post("/generate", {"text": PROMPT, "sampling_params": {
        "max_new_tokens": 24, "stop_token_ids": [stop_id, EOS_ID], "ignore_eos": True}}).json()
    assert ignored["output_ids"] == free["output_ids"]  # ignore_eos turns stop token ids off, as in SGLang


def _read(sock: socket.socket, seconds: float) -> tuple[bytes, bool]:
    """What the server sent within ``seconds``, and whether it closed the connection by then."""
    deadline = time.monotonic() + seconds
    received = b""
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(4096)
        except socket.timeout:
            break
        if not chunk:
            return received, True
        received += chunk
    return received, False


@pytest.mark.parametrize("sent", [b"", b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Ty"])
def test_idle_or_slow_header_connections_are_closed(engine, sent):
    with socket.create_connection(("127.0.0.1", engine.port)) as sock:
        sock.sendall(sent)
        assert _read(sock, IDLE_TIMEOUT + 5) == (b"", True)
    assert engine.get("/health").status == 200


def test_a_trickling_body_gets_408(engine):
    with socket.create_connection(("127.0.0.1", engine.port)) as sock:
        sock.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"text\": ")
        answer, _ = _read(sock, IDLE_TIMEOUT + 5)
        assert answer.startswith(b"HTTP/1.1 408"), answer


@pytest.mark.parametrize("path", ["/generate", "/v1/completions", "/abort_request"])
def test_a_client_leaving_mid_body_is_no_traceback(engine, path):
    """A client that closes its connection before its body is all in: FastAPI answers SGLang's
    routes 400 (it could not read the body), nothing logged; aiohttp logged the read's
    ConnectionResetError with a traceback, as an error of the handler (a 500)."""
    before = len(engine.lines)
    with socket.create_connection(("127.0.0.1", engine.port)) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: 100\r\n\r\n{{\"text\": ".encode())
        assert engine.get("/health").status == 200  # the server has the partial request by then
    for _ in range(3):  # the server has handled the closed connection by then
        assert engine.get("/server_info").status == 200
    assert not [line for line in engine.lines[before:] if "Traceback" in line or "Error handling" in line], \
        "\n".join(engine.lines[before:])


@pytest.mark.parametrize("bias", [{"65": 0}, {"65": 0.0, "66": -0.0}, {"1_0": 0}])
def test_a_logit_bias_of_zero_is_served_as_sglang_serves_it(bias):
    """SGLang adds each bias to its token's logit: one of 0 changes nothing, so the engine serves
    it (it refused any logit_bias but an empty one, as a bias it cannot honour)."""
    plain = parse({"text": "hi", "sampling_params": {"max_new_tokens": 3}})
    req = parse({"text": "hi", "sampling_params": {"max_new_tokens": 3, "logit_bias": bias}})
    assert req.input_ids == plain.input_ids and req.sampling.max_new_tokens == 3
    kwargs = {"encode": TOKENIZER.encode, "vocab_size": TOKENIZER.vocab_size, "context_length": 256,
              "served_model_name": "m"}
    for parse_openai, prompt in ((openai_api.parse_completion, {"prompt": "hi"}),
                                 (openai_api.parse_chat, {"messages": [{"role": "user", "content": "hi"}]})):
        # the OpenAI routes get the biases as pydantic read them: floats
        assert parse_openai({**prompt, "max_tokens": 3, "logit_bias": {k: float(v) for k, v in bias.items()}},
                            **kwargs).prompts[0].sampling.max_new_tokens == 3


@pytest.mark.parametrize("bias", [{"999999": 0}, {"-1": 0}, {"65": 0, "x": 2}, {"999999": 2}])
def test_a_logit_bias_naming_no_token_is_refused_in_sglangs_words_at_its_point(bias):
    """SGLang's SamplingParams.verify reads each key with int() and refuses one outside the
    vocabulary, after the context checks and whatever the bias (Python's own words for a key
    that is no integer); the engine refused every non-empty logit_bias as one it cannot honour."""
    last = TOKENIZER.vocab_size - 1
    words = {"999999": f"logit_bias must has keys in [0, {last}], got 999999.",
             "-1": f"logit_bias must has keys in [0, {last}], got -1.",
             "x": "invalid literal for int() with base 10: 'x'"}[list(bias)[-1]]
    with pytest.raises(Refused) as info:
        parse({"text": "hi", "sampling_params": {"max_new_tokens": 3, "logit_bias": bias}})
    assert str(info.value) == words
    with pytest.raises(Refused, match="longer than the model's context"):  # the context checks come first
        parse({"text": "a" * 300, "sampling_params": {"max_new_tokens": 3, "logit_bias": bias}}, context_length=256)
    kwargs = {"encode": TOKENIZER.encode, "vocab_size": TOKENIZER.vocab_size, "context_length": 256,
              "served_model_name": "m"}
    for parse_openai, prompt in ((openai_api.parse_completion, {"prompt": "hi"}),
                                 (openai_api.parse_chat, {"messages": [{"role": "user", "content": "hi"}]})):
        with pytest.raises(RequestError) as info:
            parse_openai({**prompt, "max_tokens": 3, "logit_bias": {k: float(v) for k, v in bias.items()}}, **kwargs)
        assert str(info.value) == words


def test_a_logit_bias_other_than_zero_is_still_one_the_engine_cannot_honour():
    with pytest.raises(Unsupported, match='logit_bias={"65": 0.5}'):
        parse({"text": "hi", "sampling_params": {"logit_bias": {"65": 0.5}}})
