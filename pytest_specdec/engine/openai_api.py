"""SGLang's OpenAI-compatible endpoints, /v1/completions and /v1/chat/completions: their request
fields mapped onto the engine's generation, and their response and stream chunk shapes; and
/v1/tokenize, which counts a prompt as the engine's tokenizer encodes it.

Request fields follow protocol.py's rules (honoured, hints, neutral-only; unknown names refused)
over the names SGLang's CompletionRequest and ChatCompletionRequest declare, after what FastAPI's
validation of those classes does first (COMPLETION_MODEL, CHAT_MODEL): a field's value read in
pydantic's lax mode ("4" for an int is 4, see lax.py), a value it cannot read or a null for a field
typed without None refused, a missing prompt refused; a chat's messages, tools and tool_choice
by SGLang's own classes of them (MESSAGE), down to each of a message's content parts (chat_parts.py). A LoRA adapter, named
as ``"model": "base:adapter"`` or in ``lora_path``, is refused as SGLang refuses it on a server
started without --enable-lora (see lora_adapter). A chat is rendered with CHAT_TEMPLATE, the same
template the exported tokenizer carries (tokenizer.py), so a client that applies the tokenizer's
template counts the same prompt tokens the engine sees.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from functools import cache
from http import HTTPStatus
from typing import Any, Mapping

from . import lax
from .chat_parts import PARTS, thinking_only_in
from .batch import batch_rids
from .parallel import BATCH_WITHOUT_SAMPLES, expand, requested
from .protocol import (
    TOP_K_ALL,
    Neutral,
    RequestError,
    RequestModel,
    RidsCheck,
    Sampling,
    Unsupported,
    abort_error,
    bad_bias_key,
    check_dp_rank,
    check_no_lora,
    expect,
    known_fields,
    lora_path_field,
    neutral_refusal,
    out_of_range,
    parse_sampling,
    prompt_ids,
    scheduled,
    unsupported_after,
)

#: Roles and contents as plain text; the assistant's turn opens at the end.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


class OpenAIError(RequestError):
    """A request these endpoints refuse; every RequestError is answered with error_body's shape here."""

    err_type = "BadRequestError"


class HeaderError(OpenAIError):
    """A header SGLang's serving class refuses with an HTTPException, which its handle_request
    answers with the status as the error's type."""

    err_type = "400"


class ConversionError(OpenAIError):
    """A ValueError SGLang's serving class raises as it builds the request, which its
    handle_request answers with the type BadRequest."""

    err_type = "BadRequest"


def error_body(exc: RequestError) -> dict:
    """SGLang's OpenAI error body (its serving_base.create_error_response)."""
    err_type = exc.err_type if isinstance(exc, OpenAIError) else OpenAIError.err_type
    return {"object": "error", "message": str(exc), "type": err_type, "param": None, "code": exc.status}


#: The header both OpenAI routes read a data-parallel rank from, ahead of the body's routed_dp_rank.
DP_RANK_HEADER = "X-Data-Parallel-Rank"
#: SGLang's words (serving_base) for a DP_RANK_HEADER that is no integer.
DP_RANK_HEADER_INVALID = "Invalid X-Data-Parallel-Rank header: must be an integer, got '{}'"


def header_dp_rank(b: dict, header: str | None) -> dict:
    """The body with the data-parallel rank SGLang's OpenAI routes pass on: the header's, read as
    Python's int() reads it, where one is sent (it wins over the body's routed_dp_rank and the
    old data_parallel_rank), else the body's. /generate reads no such header."""
    if header is None:
        return b
    try:
        rank = int(header)
    except ValueError:
        raise HeaderError(DP_RANK_HEADER_INVALID.format(header)) from None
    return {**b, "routed_dp_rank": rank}


# -- fields ----------------------------------------------------------------------------------------

_ROUTING_HINTS = frozenset({"bootstrap_host", "bootstrap_port", "bootstrap_room", "routed_dp_rank",
                            "disagg_prefill_dp_rank", "data_parallel_rank", "extra_key", "cache_salt", "priority",
                            "rid", "session_id", "user", "seed", "custom_params", "images_config",
                            "mm_processor_kwargs", "routed_experts_start_len",
                            "session_params",  # SGLang's OpenAI routes never pass it on
                            # SGLang reports no breakdown of 0 cached tokens, all the engine ever has
                            "return_cached_tokens_details"})
_SHARED_NEUTRAL: Mapping[str, Neutral] = {
    "frequency_penalty": Neutral(0.0, also=(0,)),
    "presence_penalty": Neutral(0.0, also=(0,)),
    "logit_bias": Neutral(None, zero_items=True),
    "top_p": Neutral(1.0, also=(1,)),
    "top_k": Neutral(-1, also=(1, TOP_K_ALL)),
    "min_p": Neutral(0.0, also=(0,)),
    "min_tokens": Neutral(0),
    "repetition_penalty": Neutral(1.0, also=(1,)),
    "regex": Neutral(None),
    "ebnf": Neutral(None),
    "stop_regex": Neutral(None),
    "no_stop_trim": Neutral(False),
    "skip_special_tokens": Neutral(True),
    "response_format": Neutral(None),
    "custom_logit_processor": Neutral(None),
    "watermark": Neutral(None),
    "return_hidden_states": Neutral(False),
    "return_routed_experts": Neutral(False),
    "return_spec_tokens_details": Neutral(False),
    "return_token_ids": Neutral(False),
}
_SHARED_HONOURED = frozenset({"max_tokens", "temperature", "stop", "stop_token_ids", "ignore_eos", "stream",
                              "stream_options", "model", "lora_path", "n"})
DEFAULT_MODEL = "default"  # SGLang's model when a request names none

COMPLETION_HONOURED = _SHARED_HONOURED | {"prompt"}
COMPLETION_HINTS = _ROUTING_HINTS | {"custom_labels"}
COMPLETION_NEUTRAL: Mapping[str, Neutral] = {
    **_SHARED_NEUTRAL,
    "best_of": Neutral(None, also=(1,)),
    "echo": Neutral(False),
    "logprobs": Neutral(None),
    "suffix": Neutral(None),
    "json_schema": Neutral(None),
}
COMPLETION_FIELDS = COMPLETION_HONOURED | COMPLETION_HINTS | frozenset(COMPLETION_NEUTRAL)

CHAT_HONOURED = _SHARED_HONOURED | {"messages", "max_completion_tokens"}
CHAT_HINTS = _ROUTING_HINTS | {
    "tool_choice", "parallel_tool_calls",  # without tools (neutral-only) they choose nothing
    "separate_reasoning", "stream_reasoning",  # the engine has no reasoning parser
    "top_logprobs", "sampling_logprobs_mode", "return_flat_raw_output_top_logprobs",
    "return_flat_raw_top_logprobs_b64",  # options of logprobs (neutral-only)
    "video_config", "max_dynamic_patch", "min_dynamic_patch", "use_audio_in_video",  # of media (refused)
}
CHAT_NEUTRAL: Mapping[str, Neutral] = {
    **_SHARED_NEUTRAL,
    "logprobs": Neutral(False),
    "tools": Neutral(None),
    "reasoning_effort": Neutral(None),
    "thinking": Neutral(None),
    "task": Neutral(None),
    "chat_template_kwargs": Neutral(None),
    "continue_final_message": Neutral(False),
    "input_ids": Neutral(None),
    "return_prompt_token_ids": Neutral(False),
    "return_meta_info": Neutral(False),
    "return_input_ids_in_sglext": Neutral(False),
    "return_output_ids_in_sglext": Neutral(False),
    "return_sampling_mask": Neutral(False),
}
CHAT_FIELDS = CHAT_HONOURED | CHAT_HINTS | frozenset(CHAT_NEUTRAL)


_FLOAT, _INT, _BOOL = "float", "int", "bool"
_HIDDEN_STATES = "union[bool,literal['last']]"

def _migrate_dp_rank(body: dict) -> dict:
    """Both request classes' before-validator for the old name data_parallel_rank: its value
    becomes routed_dp_rank's where that is unset."""
    if body.get("data_parallel_rank") is not None and body.get("routed_dp_rank") is None:
        body["routed_dp_rank"] = body["data_parallel_rank"]
    return body


def _positive_max_tokens(number: int, value: Any) -> dict | None:
    """CompletionRequest's validator of max_tokens, run on the integer pydantic read from ``value``."""
    if number > 0:
        return None
    return {"type": "value_error", "loc": ("body", "max_tokens"), "msg": "Value error, max_tokens must be positive",
            "input": value, "ctx": {"error": ValueError("max_tokens must be positive")}}


#: The classes of SGLang's chat message union, in its order, as pydantic names each in an error's
#: loc (each class's after-validator wraps it).
MESSAGE_CLASSES = ("ChatCompletionMessageGenericParam", "ChatCompletionMessageUserParam")
#: The roles of SGLang's generic message class (its user class takes "user", as written).
GENERIC_ROLES = ("system", "assistant", "tool", "function", "developer", "latest_reminder", "root")


def _generic_role(value: Any) -> str:
    """The generic message class's validator of role, which replaces the literal's reading: a
    string naming a generic role in any case, read in lower case."""
    if not isinstance(value, str):
        raise ValueError("'role' must be a string")
    if value.lower() not in GENERIC_ROLES:
        raise ValueError(f"'role' must be one of {', '.join(map(repr, GENERIC_ROLES))} (case-insensitive).")
    return value.lower()


def _key_order(function: dict) -> dict:
    """Function's before-validator: the names given, in their order, become its key_order."""
    return {**function, "key_order": list(function)}


#: SGLang's Tool and its Function.
_TOOL = lax.model("Tool", {
    "type": "str",
    "function": lax.model("Function", {"description": "nullable[str]", "name": "str", "parameters": "any",
                                       "strict": "nullable[bool]", "defer_loading": "nullable[bool]",
                                       "key_order": "list[str]"}, required=("name",), before=_key_order),
    "defer_loading": "nullable[bool]"}, required=("function",))
_TOOLS = f"nullable[list[{_TOOL}]]"
#: ChatCompletionRequest's tool_choice (its null the class's before-validator replaces).
_TOOL_CHOICE = ("union[" + lax.model("ToolChoice", {
    "function": lax.model("ToolChoiceFuncName", {"name": "nullable[str]"}), "type": "literal['function']"},
    required=("function",)) + ",literal['auto','required','none']]")
_WRAPPER = "function-after[validate_thinking_parts_role(), {}]"
#: SGLang's chat message union: its generic class (any role but the user's) and its user class.
MESSAGE = "union[" + lax.model(MESSAGE_CLASSES[0], {
    "role": lax.checked("generic_role", _generic_role), "content": f"nullable[union[str,{PARTS}]]",
    "tool_call_id": "nullable[str]", "name": "nullable[str]",
    "phase": "nullable[literal['commentary','final_answer']]", "reasoning_content": "nullable[str]",
    "tool_calls": "nullable[list[" + lax.model("ToolCall", {
        "id": "nullable[str]", "index": "nullable[int]", "type": "literal['function']",
        "function": lax.model("FunctionResponse", {"name": "nullable[str]",
                                                   "arguments": "nullable[union[str,dict[str,any]]]"})},
        required=("function",)) + "]]",
    "tools": _TOOLS, "prefix": "nullable[bool]",
}, required=("role",), wrapped=_WRAPPER.format(MESSAGE_CLASSES[0]),
    after=thinking_only_in(("assistant",))) + "," + lax.model(MESSAGE_CLASSES[1], {
    "role": "literal['user']", "content": f"union[str,{PARTS}]",
}, required=("role", "content"), wrapped=_WRAPPER.format(MESSAGE_CLASSES[1]), after=thinking_only_in(())) + "]"


_PD_ROUTING = {"bootstrap_host": "nullable[union[list[str],str]]",
               "bootstrap_port": "nullable[union[list[nullable[int]],int]]",
               "bootstrap_room": "nullable[union[list[int],int]]", "routed_dp_rank": "nullable[int]",
               "disagg_prefill_dp_rank": "nullable[int]"}  # both classes' base, PDRoutingFields
_STRINGS = "nullable[union[list[str],str]]"
_OBJECT, _BIAS = "nullable[dict[any,any]]", "nullable[dict[str,float]]"
_STREAM_OPTIONS = "nullable[" + lax.model("StreamOptions", {"include_usage": "nullable[bool]",
                                                             "continuous_usage_stats": "nullable[bool]"}) + "]"
_ADAPTERS = "nullable[union[list[nullable[str]],str]]"

#: CompletionRequest's fields of the types lax.py reads, in its order, and its max_tokens validator:
#: objects too (logit_bias's floats, StreamOptions' booleans); not response_format, a union with Any
#: that pydantic refuses nothing for.
COMPLETION_MODEL = RequestModel({
    **_PD_ROUTING, "model": "str", "prompt": "union[list[int],list[list[int]],str,list[str]]",
    "best_of": "nullable[int]", "echo": _BOOL, "frequency_penalty": _FLOAT, "logit_bias": _BIAS,
    "logprobs": "nullable[int]", "max_tokens": _INT, "n": _INT, "presence_penalty": _FLOAT, "seed": "nullable[int]",
    "stop": _STRINGS, "stream": _BOOL, "stream_options": _STREAM_OPTIONS, "suffix": "nullable[str]",
    "temperature": _FLOAT, "top_p": _FLOAT, "user": "nullable[str]",
    "return_hidden_states": _HIDDEN_STATES, "return_routed_experts": _BOOL, "routed_experts_start_len": _INT,
    "return_cached_tokens_details": _BOOL, "return_spec_tokens_details": _BOOL, "return_token_ids": _BOOL,
    "top_k": _INT, "min_p": _FLOAT, "min_tokens": _INT, "json_schema": "nullable[str]", "regex": "nullable[str]",
    "ebnf": "nullable[str]", "repetition_penalty": _FLOAT, "stop_token_ids": "nullable[list[int]]",
    "stop_regex": _STRINGS, "no_stop_trim": _BOOL, "ignore_eos": _BOOL, "skip_special_tokens": _BOOL,
    "lora_path": _ADAPTERS, "session_id": "nullable[str]", "session_params": _OBJECT, "custom_params": _OBJECT,
    "custom_logit_processor": "nullable[str]", "watermark": "nullable[dict[str,any]]", "images_config": _OBJECT,
    "mm_processor_kwargs": _OBJECT, "data_parallel_rank": "nullable[int]", "rid": _STRINGS, "extra_key": _STRINGS,
    "cache_salt": _STRINGS, "priority": "nullable[int]", "custom_labels": "nullable[dict[str,str]]",
}, required=frozenset({"prompt"}), before=_migrate_dp_rank, checks={"max_tokens": _positive_max_tokens})


def _chat_before(body: dict) -> dict:
    """ChatCompletionRequest's before-validators in the order pydantic runs them (the last defined
    first), as far as they change a body: a tool_choice left out or null becomes "auto" where the
    request or a system message names tools, else "none"; then the old dp rank's name."""
    if body.get("tool_choice") is None:
        messages = body.get("messages")
        system_tools = isinstance(messages, list) and any(
            isinstance(m, dict) and isinstance(m.get("role"), str)
            and m["role"].lower() in ("root", "system", "developer") and bool(m.get("tools")) for m in messages)
        body["tool_choice"] = "auto" if body.get("tools") is not None or system_tools else "none"
    return _migrate_dp_rank(body)


#: ChatCompletionRequest's fields of the types lax.py reads, in its order (its messages by SGLang's
#: message classes and content parts: MESSAGE; not response_format, whose
#: structural-tag member is a class of the grammar backend's, nor reasoning_effort or thinking).
CHAT_MODEL = RequestModel({
    **_PD_ROUTING, "messages": f"list[{MESSAGE}]", "model": "str", "frequency_penalty": _FLOAT, "logit_bias": _BIAS,
    "logprobs": _BOOL, "top_logprobs": "nullable[int]", "max_tokens": "nullable[int]",
    "max_completion_tokens": "nullable[int]", "n": _INT, "presence_penalty": _FLOAT, "seed": "nullable[int]",
    "stop": _STRINGS, "stream": _BOOL, "stream_options": _STREAM_OPTIONS, "temperature": "nullable[float]",
    "top_p": "nullable[float]", "user": "nullable[str]", "tools": _TOOLS, "tool_choice": _TOOL_CHOICE,
    "parallel_tool_calls": _BOOL, "return_hidden_states": _HIDDEN_STATES,
    "return_routed_experts": _BOOL, "routed_experts_start_len": _INT,
    **dict.fromkeys(("return_cached_tokens_details", "return_spec_tokens_details", "return_prompt_token_ids",
                     "return_token_ids", "return_meta_info", "return_input_ids_in_sglext",
                     "return_output_ids_in_sglext", "return_sampling_mask"), _BOOL),
    "sampling_logprobs_mode": "nullable[literal['selected','support']]",
    "return_flat_raw_output_top_logprobs": _BOOL, "return_flat_raw_top_logprobs_b64": _BOOL,
    "task": "nullable[literal['action','query','authority','domain','title','read_url']]",
    "top_k": "nullable[int]", "min_p": "nullable[float]", "min_tokens": _INT, "regex": "nullable[str]",
    "ebnf": "nullable[str]", "repetition_penalty": "nullable[float]", "stop_token_ids": "nullable[list[int]]",
    "stop_regex": _STRINGS, "no_stop_trim": _BOOL, "ignore_eos": _BOOL, "continue_final_message": _BOOL,
    "skip_special_tokens": _BOOL, "lora_path": _ADAPTERS, "session_id": "nullable[str]", "session_params": _OBJECT,
    "separate_reasoning": _BOOL, "stream_reasoning": _BOOL, "chat_template_kwargs": _OBJECT,
    "max_dynamic_patch": "nullable[int]", "min_dynamic_patch": "nullable[int]", "use_audio_in_video": _BOOL,
    "images_config": _OBJECT, "video_config": _OBJECT, "mm_processor_kwargs": _OBJECT,
    "custom_logit_processor": _ADAPTERS, "custom_params": _OBJECT, "watermark": "nullable[dict[str,any]]",
    "input_ids": "nullable[list[int]]", "rid": _STRINGS, "extra_key": _STRINGS, "cache_salt": _STRINGS,
    "priority": "nullable[int]", "data_parallel_rank": "nullable[int]",
}, required=frozenset({"messages"}), before=_chat_before)


@dataclass(frozen=True)
class Prompt:
    """One prompt of an OpenAI-style request, as the engine schedules it."""

    input_ids: tuple[int, ...]
    sampling: Sampling
    rid: str | None
    abort: dict | None = None  # the scheduler's refusal, which the request finishes with (protocol.scheduled)


@dataclass(frozen=True)
class OpenAIRequest:
    """What an OpenAI-style request asks the engine to generate, and how to answer: its prompts
    (a chat's one; a completion's one, or those of a list of prompts, SGLang's batch)."""

    prompts: tuple[Prompt, ...]
    stream: bool
    include_usage: bool  # a last chunk, with no choices, carries the whole request's usage
    #: chunks with content carry the usage so far (see Chunks); SGLang reads it apart from
    #: include_usage, so either comes without the other
    continuous_usage: bool
    model: str  # answered as the request named it, as SGLang does, whatever the served name
    #: samples a prompt (parallel.py): ``prompts`` holds each prompt's in a row, its usage counted once
    n: int = 1
    #: the ``n`` the request gave, which SGLang's usage strides by (counted_prompt_tokens): below 1 it
    #: serves one sample, and its usage then counts no prompt (below 0) or fails (0)
    n_given: int = 1


def lora_adapter(model: str, served_model_name: str) -> str | None:
    """The LoRA adapter a request's model names, by SGLang's reading of ``base:adapter``: none
    without a colon or for the served name itself (which may hold colons, a URI say); after the
    served name and a colon when the model starts so, else after the first colon; none if blank."""
    if ":" not in model or model == served_model_name:
        return None
    prefix = served_model_name + ":"
    adapter = model[len(prefix):] if model.startswith(prefix) else model.split(":", 1)[1]
    return adapter.strip() or None


def _check_adapter(b: dict, model: str, served_model_name: str) -> None:
    """Refuse a LoRA adapter as SGLang without --enable-lora does; the model's adapter wins over lora_path."""
    check_no_lora(lora_adapter(model, served_model_name) or b.get("lora_path"), OpenAIError)


#: The OpenAI fields that are SGLang sampling parameters with a range (protocol.SAMPLING_RANGES),
#: by their sampling parameter's name.
SAMPLING_NAMES = {"top_p": "top_p", "min_p": "min_p", "top_k": "top_k", "frequency_penalty": "frequency_penalty",
                  "presence_penalty": "presence_penalty", "repetition_penalty": "repetition_penalty",
                  "min_tokens": "min_new_tokens"}
#: The OpenAI fields SGLang's request models type as floats.
FLOAT_FIELDS = frozenset({"temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty",
                          "repetition_penalty"})


def _as_float(value: Any) -> Any:
    """A float field's value as pydantic hands it to SGLang: an integer becomes a float."""
    return float(value) if type(value) is int else value


def _common(body: Any, fields: frozenset[str], neutral: Mapping[str, Neutral],
            default_max_tokens: int | None, vocab_size: int) -> tuple[dict, Sampling, dict]:
    """The fields both endpoints share: the body, its sampling, and how to answer (stream, usage, model)."""
    b = known_fields(body, fields)
    stream = expect("stream", b.get("stream", False), (bool,), "a boolean")
    options = expect("stream_options", b.get("stream_options", {}), (dict,), "an object")
    model = b.get("model")
    answer = {"stream": stream, "model": DEFAULT_MODEL if model is None else expect("model", model, (str,), "a string")}
    for name, key in (("include_usage", "include_usage"), ("continuous_usage", "continuous_usage_stats")):
        answer[name] = expect(f"stream_options.{key}", options.get(key) or False, (bool,), "a boolean")
    # SGLang's chat reads `max_completion_tokens or max_tokens`: a 0 of the first defers to the second
    max_tokens = b.get("max_completion_tokens") or b.get("max_tokens", default_max_tokens)
    least = b.get("min_tokens")
    # above max_tokens, SGLang's SamplingParams.verify refuses min_tokens (Sampling.min_over_max)
    over = type(least) is int and type(max_tokens) is int and least > max_tokens
    deferred = {"min_tokens"} if over else set()
    if bad_bias_key(tuple(b.get("logit_bias") or ()), vocab_size) is not None:
        deferred.add("logit_bias")  # SGLang's SamplingParams.verify refuses it, whatever its values
    # raised once SGLang's own checks passed (unsupported_after): SGLang serves these values
    unsupported = neutral_refusal("field(s)", {k: v for k, v in b.items() if k not in deferred}, neutral,
                                  SAMPLING_NAMES)
    lora_path_field(b.get("lora_path"))  # its type only: an adapter is refused later, where SGLang refuses it
    if max_tokens is not None:  # a completion's max_tokens of 0 or less its class refuses (COMPLETION_MODEL)
        expect("max_tokens", max_tokens, (int,), "an integer")
    answer["n"] = expect("n", b.get("n", 1), (int,), "an integer")
    params = {"temperature": _as_float(b.get("temperature")), "stop": b.get("stop"),
              "stop_token_ids": b.get("stop_token_ids"), "ignore_eos": b.get("ignore_eos"),
              "logit_bias": b.get("logit_bias"), "n": answer["n"]}
    if b.get("top_k") == 1:  # greedy whatever the temperature: n copies are SGLang's samples there
        params["top_k"] = 1
    # a neutral-only field outside SGLang's range goes on to its refusal there (Sampling.verify)
    params |= out_of_range({SAMPLING_NAMES[k]: _as_float(v) if k in FLOAT_FIELDS else v
                            for k, v in b.items() if k in SAMPLING_NAMES})
    params["max_new_tokens"] = max_tokens  # null where none is given: SGLang then checks no min_tokens against it
    if over:
        params["min_new_tokens"] = least
    sampling = parse_sampling(params, vocab_size)  # its own refusal: n above 1 where SGLang would sample
    return b, dataclasses.replace(sampling, unsupported=unsupported or sampling.unsupported), answer


#: SGLang's words (its completion serving's _validate_request) for a prompt with no text or ids.
EMPTY_PROMPT = "Prompt cannot be empty"


def parse_completion(body: Any, *, encode, vocab_size: int, context_length: int,
                     served_model_name: str, rids_free: RidsCheck | None = None,
                     dp_rank_header: str | None = None) -> OpenAIRequest:
    """A completion of one prompt (a string, or a list of token ids), or of each of a list of
    them (strings, or lists of token ids): SGLang's batch, each prompt with its rid as /generate
    gives a batch's (batch.batch_rids), checked in the prompt order, the first refusal answering
    the whole: SGLang's refusals first (an X-Data-Parallel-Rank header that is no integer, its
    rids', a routed_dp_rank but 0 (the header's first: header_dp_rank), then a rid in flight,
    ``rids_free``, then a LoRA adapter, then each prompt's), the engine's of a value it cannot
    honour last."""
    prompt = body.get("prompt") if isinstance(body, dict) else None
    if not prompt or (isinstance(prompt, list) and all(not p for p in prompt)):
        raise OpenAIError(EMPTY_PROMPT)  # before any other check of SGLang's serving class
    b, sampling, answer = _common(body, COMPLETION_FIELDS, COMPLETION_NEUTRAL, 16, vocab_size)
    b = header_dp_rank(b, dp_rank_header)
    single = isinstance(prompt, str) or type(prompt[0]) is int  # as SGLang's GenerateReqInput reads it
    prompts = [prompt] if single else prompt
    samples = requested({"n": answer["n"]})
    # a single prompt's rid with n above 1 is its batch of one's, named a sample (batch_rids)
    rids = [single_rid(b.get("rid"))] if single else batch_rids(b.get("rid"), len(prompts), samples)
    if single and samples > 1 and rids[0] is not None:
        rids = batch_rids(rids[0], 1, samples)
    check_dp_rank(b)
    if not single and answer["n"] < 1:  # where SGLang's batch handling fails (parallel.check_batch_samples)
        raise OpenAIError(BATCH_WITHOUT_SAMPLES.format(answer["n"]))
    if rids_free is not None:
        rids_free([rid for rid in rids if rid is not None])
    _check_adapter(b, answer["model"], served_model_name)
    scheduled_prompts = []
    for one, rid in zip(prompts, rids):
        ids = encode(one) if isinstance(one, str) else prompt_ids(one, vocab_size)
        ids, one_sampling, abort = scheduled(ids, sampling, vocab_size=vocab_size, context_length=context_length)
        scheduled_prompts.append(Prompt(ids, one_sampling, rid, abort))
    unsupported_after(scheduled_prompts)
    return OpenAIRequest(tuple(expand(scheduled_prompts, samples)), **{**answer, "n": samples, "n_given": answer["n"]})


def single_rid(rid: Any) -> str | None:
    """The rid of a request of one prompt. SGLang's types allow a list, which its tokenizer manager
    then fails on (a 500); the engine refuses it, naming the fix."""
    if rid is not None:
        expect("rid", rid, (str,), "a string (a list of rids goes with a list of prompts)")
    return rid


def _message_text(message: Any, index: int) -> dict:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise OpenAIError(f"messages[{index}] must be an object with a role.")
    content = message.get("content")
    if isinstance(content, list):
        parts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise Unsupported(f"messages[{index}] has a {kind!r} part; the embedded engine reads text only.")
            parts.append(part["text"])
        content = "".join(parts)
    elif content is None:
        content = ""
    elif not isinstance(content, str):
        raise OpenAIError(f"messages[{index}].content must be a string or a list of text parts.")
    return {"role": message["role"], "content": content}


@cache
def _chat_template():
    import jinja2  # torch's dependency, so the engine has it; loaded only for the first chat

    return jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(CHAT_TEMPLATE)


def render_chat(messages: list[dict]) -> str:
    return _chat_template().render(messages=messages, add_generation_prompt=True)


def parse_chat(body: Any, *, encode, vocab_size: int, context_length: int,
               served_model_name: str, rids_free: RidsCheck | None = None,
               dp_rank_header: str | None = None) -> OpenAIRequest:
    """A chat, checked in SGLang's order: its serving class's checks (check_chat), the rendered
    prompt, an X-Data-Parallel-Rank header that is no integer, a routed_dp_rank but 0 (the
    header's first: header_dp_rank), a rid in flight (``rids_free``), a LoRA adapter, the context
    and the sampling ranges; the engine's refusal of a value it cannot honour last."""
    b, sampling, answer = _common(body, CHAT_FIELDS, CHAT_NEUTRAL, None, vocab_size)
    messages = b.get("messages")
    if not isinstance(messages, list):
        raise OpenAIError("messages must be a list of messages.")
    check_chat(b, context_length)
    check_chat_stream(b)
    ids = encode(render_chat([_message_text(m, i) for i, m in enumerate(messages)]))
    b = header_dp_rank(b, dp_rank_header)
    if (b.get("max_completion_tokens") or b.get("max_tokens")) is None:  # SGLang: the rest of the context
        sampling = dataclasses.replace(sampling, max_new_tokens=max(context_length - len(ids) - 1, 0))
    rid = single_rid(b.get("rid"))
    samples = requested({"n": answer["n"]})
    check_dp_rank(b)
    if rids_free is not None and rid is not None:
        rids_free(batch_rids(rid, 1, samples) if samples > 1 else [rid])
    _check_adapter(b, answer["model"], served_model_name)
    ids, sampling, abort = scheduled(ids, sampling, vocab_size=vocab_size, context_length=context_length)
    prompts = (Prompt(ids, sampling, rid, abort),)
    unsupported_after(prompts)
    return OpenAIRequest(tuple(expand(prompts, samples)), **{**answer, "n": samples, "n_given": answer["n"]})


#: SGLang's words (its chat serving's _validate_request) for a template a request brings, on a
#: server launched without --trust-request-chat-template, as the engine is.
REQUEST_TEMPLATE = ("Request-supplied chat_template is not allowed. Start the server with "
                    "--trust-request-chat-template to permit it.")
#: SGLang's words (the same checks) for options whose answer only meta_info carries.
SAMPLING_MASK_NEEDS_META = "return_sampling_mask requires return_meta_info=true."
FLAT_RAW_NEEDS_META = "return_flat_raw_output_top_logprobs requires return_meta_info=true."


#: SGLang's words (its chat serving's _convert_to_internal_request), in its order, for options
#: a streamed chat cannot answer.
STREAM_REFUSALS = (
    ("return_prompt_token_ids", "return_prompt_token_ids is not supported with streaming. Please set stream=false "
                                "when using return_prompt_token_ids=true."),
    ("return_token_ids", "return_token_ids is not supported with streaming on /v1/chat/completions. Please set "
                         "stream=false when using return_token_ids=true."),
    ("return_meta_info", "return_meta_info is not supported with streaming. Please set stream=false when using "
                         "return_meta_info=true."),
)


def check_chat_stream(b: Mapping[str, Any]) -> None:
    """SGLang's refusals, as its chat builds the request (before it renders the messages), of
    options a stream cannot answer."""
    if b.get("stream"):
        for name, words in STREAM_REFUSALS:
            if b.get(name):
                raise ConversionError(words)


def check_chat(b: Mapping[str, Any], context_length: int) -> None:
    """SGLang's chat serving's own checks of a request (its _validate_request), those a text-only
    request without tools can fail, in its words and order: no messages, a chat_template in
    chat_template_kwargs, a sampling mask or a flat raw logprob option without
    return_meta_info, and a completion longer than the context however short the prompt (the
    engine has no --allow-auto-truncate)."""
    if not b.get("messages"):
        raise OpenAIError("Messages cannot be empty.")
    kwargs = b.get("chat_template_kwargs")
    if isinstance(kwargs, dict) and "chat_template" in kwargs:
        raise OpenAIError(REQUEST_TEMPLATE)
    if b.get("return_sampling_mask") and not b.get("return_meta_info"):
        raise OpenAIError(SAMPLING_MASK_NEEDS_META)
    if b.get("return_flat_raw_output_top_logprobs") and not b.get("return_meta_info"):
        raise OpenAIError(FLAT_RAW_NEEDS_META)
    max_tokens = b.get("max_completion_tokens") or b.get("max_tokens")
    if max_tokens and max_tokens > context_length:
        raise OpenAIError(f"max_completion_tokens is too large: {max_tokens}.This model supports at most "
                          f"{context_length} completion tokens.")


# -- /v1/tokenize ----------------------------------------------------------------------------------

def _prompt_or_messages(body: dict) -> dict | None:
    """TokenizeRequest's own validator of the whole request: exactly one of prompt and messages."""
    if (body.get("prompt") is None) == (body.get("messages") is None):
        words = "Exactly one of 'prompt' or 'messages' must be provided."
        return {"type": "value_error", "loc": ("body",), "msg": f"Value error, {words}", "input": body,
                "ctx": {"error": ValueError(words)}}
    return None


#: TokenizeRequest's fields of the types lax.py reads, in its order (messages as the chat's, though
#: the engine counts no chat), and its check that a request names a prompt or messages.
TOKENIZE_MODEL = RequestModel({
    "model": "str", "prompt": "nullable[union[list[str],str]]", "messages": f"nullable[list[{MESSAGE}]]",
    "tools": _TOOLS, "tool_choice": f"nullable[{_TOOL_CHOICE}]", "continue_final_message": _BOOL,
    "add_special_tokens": _BOOL, "add_generation_prompt": "nullable[bool]",
}, after=_prompt_or_messages)


def tokenize(body: dict, *, encode, context_length: int) -> dict:
    """SGLang's /v1/tokenize answer to a body its TokenizeRequest took (TOKENIZE_MODEL): the ids
    of `prompt` (a string, or a list of strings answered with a list each), special tokens
    included unless `add_special_tokens` is false, their count, and the context length as
    `max_model_len`. A chat (`messages`) is refused; the other fields (the model's name, a chat's
    options) are ignored, as SGLang ignores them beside a prompt."""
    prompt, add = body.get("prompt"), body.get("add_special_tokens", True)
    if prompt is None:
        raise Unsupported("The embedded engine's /v1/tokenize counts prompts, not messages: send the "
                          "rendered chat as \"prompt\".")
    if isinstance(prompt, str):
        ids: list = encode(prompt, add_special_tokens=add)
        return {"tokens": ids, "count": len(ids), "max_model_len": context_length}
    ids = [encode(p, add_special_tokens=add) for p in prompt]
    return {"tokens": ids, "count": [len(i) for i in ids], "max_model_len": context_length}


# -- responses -------------------------------------------------------------------------------------

def finish(reason: dict | None) -> tuple[str | None, Any]:
    """OpenAI's finish_reason and SGLang's matched_stop for an engine finish reason."""
    if reason is None:
        return None, None
    return reason["type"], reason.get("matched") if reason["type"] == "stop" else None


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    """SGLang's UsageInfo as it reports a text request on a server without --enable-cache-report
    (prompt_tokens_details null) and without a reasoning parser (reasoning_tokens 0, hence
    completion_tokens_details null)."""
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens, "prompt_tokens_details": None, "reasoning_tokens": 0,
            "completion_tokens_details": None}


#: Python's words for a range() of step 0: SGLang's usage of a whole answer sums each prompt's
#: tokens over range(0, outputs, n), so an n of 0 fails it, once the request was served, with this
#: ValueError, which its serving class answers as a 400 (ConversionError's type).
NO_RANGE_STEP = "range() arg 3 must not be zero"
#: Python's words for a modulo by 0: SGLang's usage of a stream counts the outputs whose index % n
#: is 0, so include_usage with an n of 0 fails it after the last chunk (stream_refusal).
MODULO_BY_ZERO = "integer modulo by zero"


def counted_prompt_tokens(prompt_tokens: list[int], n: int) -> int:
    """The prompt tokens SGLang's usage of a whole answer counts, from each output's (in order):
    every ``n``-th output's, each prompt's once; none for an ``n`` below 0 (its range is empty),
    and for 0 its ValueError (NO_RANGE_STEP)."""
    if n == 0:
        raise ConversionError(NO_RANGE_STEP)
    return sum(prompt_tokens[::n]) if n > 0 else 0


def stream_refusal(message: str) -> dict:
    """The chunk SGLang streams for an error raised once the stream started (its serving class's
    create_streaming_error_response with its defaults)."""
    return {"error": {"object": "error", "message": message, "type": OpenAIError.err_type, "param": None,
                      "code": HTTPStatus.BAD_REQUEST.value}}


def envelope(kind: str, rid: str, model: str, choices: list[dict], usage_: dict | None,
             created: int | None = None) -> dict:
    """A response or chunk: `kind` is text_completion, chat.completion or chat.completion.chunk.
    Its id is the request's rid as is (the client's, else a uuid), as SGLang's."""
    out = {"id": rid, "object": kind, "created": int(time.time()) if created is None else created,
           "model": model, "choices": choices}
    if usage_ is not None or kind != "chat.completion.chunk":
        out["usage"] = usage_
    return out


def response(kind: str, rid: str, model: str, choices: list[dict], usage_: dict, meta_info: dict) -> dict:
    """A whole (not streamed) response, its id the first prompt's rid: SGLang adds the version
    of the weights that answered, and its spans where the meta_info has them, from the first
    prompt's meta_info only (a batch's other prompts ran on the same weights here)."""
    metadata = {"weight_version": meta_info["weight_version"]}
    if "weight_versions" in meta_info:
        metadata["weight_versions"] = meta_info["weight_versions"]
    return {**envelope(kind, rid, model, choices, usage_), "metadata": metadata}


def completion_choice(text: str, reason: dict | None, index: int = 0) -> dict:
    finish_reason, matched = finish(reason)
    return {"index": index, "text": text, "logprobs": None, "finish_reason": finish_reason, "matched_stop": matched}


def chat_choice(text: str, reason: dict | None, index: int = 0) -> dict:
    finish_reason, matched = finish(reason)
    # without tool calls SGLang's message has no tool_calls key, not a null one
    return {"index": index, "message": {"role": "assistant", "content": text, "reasoning_content": None},
            "logprobs": None, "finish_reason": finish_reason, "matched_stop": matched}


def chat_delta(*, role: str | None = None, content: str | None = None, reason: dict | None = None,
               index: int = 0) -> dict:
    """A chat chunk's choice as SGLang builds it: the delta always names reasoning_content (null
    without a reasoning parser) and holds role and content only where they are set."""
    delta: dict[str, Any] = {"reasoning_content": None}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    finish_reason, matched = finish(reason)
    return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason, "matched_stop": matched}


class Chunks:
    """The chunks SGLang streams for one request, built step by step from the cumulative text.

    /v1/completions: one chunk a step with the new text, the finish reason on the last one; a step
    that adds no text (a byte of an unfinished UTF-8 character, a stop string cut back) still
    sends its chunk, with text "", as SGLang's does for every output it gets.
    /v1/chat/completions: a first chunk with the role alone (content ""), a chunk for each step
    that adds text, then one more holding only the finish reason and matched_stop.
    continuous_usage_stats puts the usage so far on every completion chunk and on each chat chunk
    with content, never on the role's or the finish's; include_usage adds a last chunk with no
    choices and the whole request's usage, whose null fields SGLang drops for /v1/completions
    (it serialises that chunk without None) and keeps for chat.
    An abort that names a status (the scheduler's refusal of a prompt: protocol.scheduled) sends
    only stream_error's chunk, then include_usage's: SGLang's answer with its default pickled IPC,
    which keeps the status an HTTPStatus on its way to the serving class.
    """

    def __init__(self, kind: str, rid: str, model: str, prompt_tokens: int, *, include_usage: bool,
                 continuous_usage: bool, index: int = 0, created: int | None = None, n_given: int = 1) -> None:
        self.kind = "chat.completion.chunk" if kind == "chat.completion" else kind
        self.rid, self.model, self.prompt_tokens, self.index = rid, model, prompt_tokens, index
        self.include_usage, self.continuous_usage = include_usage, continuous_usage
        # one timestamp for the whole stream, as SGLang's
        self.created = int(time.time()) if created is None else created
        self.sent = ""
        self.started = False
        self.n_given = n_given  # an n of 0 fails include_usage's chunk (usage_chunk)

    def step(self, text: str, completion_tokens: int, reason: dict | None) -> list[dict]:
        """The chunks for the request's state after a step: its text so far, its output tokens
        so far and its finish reason (None until the last step)."""
        so_far = usage(self.prompt_tokens, completion_tokens)
        if abort_error(reason) is not None:  # before any chunk of its own, as SGLang breaks off
            return [stream_error(reason), *self._usage_chunk(so_far)]
        delta = text[len(self.sent):] if text.startswith(self.sent) else ""  # a cut stop string cannot be unsent
        self.sent += delta
        out = []
        if self.kind == "text_completion":
            out.append(self._chunk([completion_choice(delta, reason, self.index)],
                                   so_far if self.continuous_usage else None))
        else:
            if not self.started:
                out.append(self._chunk([chat_delta(role="assistant", content="")], None))
            if delta:
                out.append(self._chunk([chat_delta(content=delta)], so_far if self.continuous_usage else None))
            if reason is not None:
                out.append(self._chunk([chat_delta(reason=reason)], None))
        self.started = True
        if reason is not None:
            out += self._usage_chunk(so_far)
        return out

    def _usage_chunk(self, total: dict) -> list[dict]:
        """The last chunk include_usage asks for, with the whole request's usage."""
        return [self.usage_chunk(total)] if self.include_usage else []

    def usage_chunk(self, total: dict) -> dict:
        """include_usage's chunk; for an n of 0 SGLang's error in its place (MODULO_BY_ZERO). Its
        chat does not catch that error and breaks the stream off without [DONE]; the engine ends
        the stream as its completions do, with the error chunk, since a bad request is never a
        broken connection here."""
        if self.n_given == 0:
            return stream_refusal(MODULO_BY_ZERO)
        return self._chunk([], total if self.kind != "text_completion" else
                           {k: v for k, v in total.items() if v is not None})

    def _chunk(self, choices: list[dict], usage_: dict | None) -> dict:
        return envelope(self.kind, self.rid, self.model, choices, usage_, self.created)


class CompletionChunks:
    """The chunks SGLang streams for /v1/completions, of one prompt or of a list of them (its
    batch): each prompt's chunks (Chunks) as its outputs come, with its index, its own rid as the
    id. An abort that names a status sends its error chunk and ends the stream (`ended`), the
    other prompts aborted, as SGLang breaks off its loop over the batch's outputs. include_usage's
    last chunk (`close`) sums the usage of the prompts heard from, its id the rid of the prompt
    heard last, as SGLang's does."""

    def __init__(self, rids: list[str], model: str, prompt_tokens: list[int], *, include_usage: bool,
                 continuous_usage: bool, samples: int = 1) -> None:
        created = int(time.time())
        self.prompts = [Chunks("text_completion", rid, model, n, include_usage=False, continuous_usage=continuous_usage,
                               index=i, created=created) for i, (rid, n) in enumerate(zip(rids, prompt_tokens))]
        # ``samples`` is the n given (OpenAIRequest.n_given): SGLang's usage counts prompts by it
        self.include_usage, self.samples = include_usage, samples
        self.completion_tokens: dict[int, int] = {}  # by the index of each prompt heard from
        self.last = 0
        self.ended = False

    def step(self, index: int, text: str, completion_tokens: int, reason: dict | None) -> list[dict]:
        """The chunks for prompt ``index``'s state after a step (see Chunks.step)."""
        self.completion_tokens[index], self.last = completion_tokens, index
        self.ended = abort_error(reason) is not None
        return self.prompts[index].step(text, completion_tokens, reason)

    def close(self) -> list[dict]:
        """The chunks after the last step: include_usage's."""
        if not self.include_usage:
            return []
        heard = self.completion_tokens
        if self.samples == 0:
            return [stream_refusal(MODULO_BY_ZERO)]
        # a prompt's tokens once, at its first sample (parallel.py), as SGLang's streaming usage
        total = usage(sum(self.prompts[i].prompt_tokens for i in heard if i % self.samples == 0), sum(heard.values()))
        return [self.prompts[self.last].usage_chunk(total)]


class ChatChoicesChunks:
    """The chunks SGLang streams for a chat of ``n`` samples (parallel.py): each sample's as its
    outputs come, its own rid as the id, with its index: its first output opens with the role's
    chunk, then a chunk for each output that adds text; the finish chunks come only once every
    sample ended, one a finished sample in the order they finished, all with the id of the output
    heard last, then include_usage's (each prompt's tokens once). An abort that names a status
    sends its error chunk and ends the stream (``ended``), then the finish chunks of the samples
    that finished before it, as SGLang breaks off its loop."""

    def __init__(self, model: str, prompt_tokens: list[int], samples: int, *, include_usage: bool,
                 continuous_usage: bool) -> None:
        self.model, self.prompt_tokens, self.samples = model, prompt_tokens, samples
        self.include_usage, self.continuous_usage = include_usage, continuous_usage
        self.created = int(time.time())
        self.sent: dict[int, str] = {}  # the text sent, by index
        self.completion_tokens: dict[int, int] = {}
        self.finished: dict[int, dict] = {}  # the finish reasons, in the order the samples finished
        self.last_rid = ""
        self.ended = False

    def step(self, index: int, rid: str, text: str, completion_tokens: int, reason: dict | None) -> list[dict]:
        """The chunks for sample ``index``'s state after a step (see Chunks.step)."""
        self.last_rid = rid
        self.completion_tokens[index] = completion_tokens
        if abort_error(reason) is not None:
            self.ended = True
            return [stream_error(reason)]
        if reason is not None:
            self.finished[index] = reason
        out = []
        if index not in self.sent:
            self.sent[index] = ""
            out.append(self._chunk(rid, [chat_delta(role="assistant", content="", index=index)], None))
        sent = self.sent[index]
        delta = text[len(sent):] if text.startswith(sent) else ""
        self.sent[index] = sent + delta
        if delta:
            so_far = usage(self.prompt_tokens[index], completion_tokens) if self.continuous_usage else None
            out.append(self._chunk(rid, [chat_delta(content=delta, index=index)], so_far))
        return out

    def close(self) -> list[dict]:
        """The chunks after the last output: the finish chunks, then include_usage's."""
        out = [self._chunk(self.last_rid, [chat_delta(reason=reason, index=index)], None)
               for index, reason in self.finished.items()]
        if self.include_usage:
            heard = self.completion_tokens
            total = usage(sum(self.prompt_tokens[i] for i in heard if i % self.samples == 0), sum(heard.values()))
            out.append(self._chunk(self.last_rid, [], total))
        return out

    def _chunk(self, rid: str, choices: list[dict], usage_: dict | None) -> dict:
        return envelope("chat.completion.chunk", rid, self.model, choices, usage_, self.created)


def stream_error(reason: dict) -> dict:
    """The chunk SGLang streams for an abort that names a status (its serving classes'
    create_streaming_error_response): the status's name as the type, its number as the code."""
    status = HTTPStatus(reason["status_code"])
    return {"error": {"object": "error", "message": reason.get("message", "Generation aborted."), "type": status.name,
                      "param": None, "code": status.value}}


def model_card(name: str, context_length: int, created: int) -> dict:
    """SGLang's ModelCard; ``created``: the time of the request, as its field's default_factory makes it."""
    return {"id": name, "object": "model", "created": created, "owned_by": "sglang", "root": name, "parent": None,
            "max_model_len": context_length}


def model_not_found(name: str) -> dict:
    return {"error": {"message": f"The model '{name}' does not exist", "type": "invalid_request_error",
                      "param": "model", "code": "model_not_found"}}

