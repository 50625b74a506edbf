"""What /generate accepts: every request field and sampling parameter SGLang declares, and what the
engine does with each, so SGLang's own clients (its frontend, bench_serving) work unchanged.

Each name is of one kind:

- honoured: the engine does what SGLang does with it (``text``, ``max_new_tokens``, ``stop``, ...);
- a hint: routing, caching, logging and tracing hints, and options that only shape an output the
  engine never produces (logprob formats without ``return_logprob``); any value of the type
  SGLang's API contract decodes it as is accepted and changes nothing, but for the values
  SGLang itself refuses (check_inputs, check_session_pair, check_dp_rank), refused as there;
- neutral-only: a feature the engine does not have (media inputs, constrained
  decoding, sampling shape). ``null`` or the value that turns it off (SGLang's default) is
  accepted; any other value is refused with a 400 naming it, because serving it silently would
  measure something other than what the client asked for. A value of another type than SGLang's
  API contract decodes the name as is refused first, as the contract refuses it (contract.py on
  /generate; ``Neutral.kinds`` where a route has no contract check).

A LoRA adapter (``lora_path``) is refused as SGLang refuses it on a server started without
``--enable-lora``, in its words and at its point (see ``check_no_lora``): the engine has no LoRA,
and SGLang's answer to that request is defined, so the engine gives that answer. So is a
``max_thinking_tokens`` (no ``--enable-strict-thinking``) and a ``routed_dp_rank`` but 0 (one
data-parallel rank): see ``check_served_as_launched``.

A name SGLang does not declare is refused too (SGLang's own server ignores unknown top-level
names; the engine does not, so a typo cannot pass unnoticed). ``null`` means the default, but for
``max_new_tokens``, whose null SGLang's scheduler reads as no limit but the context's, and for a
field GenerateReqInput types without None, whose null FastAPI refuses (GENERATE_MODEL: FastAPI
validates every field in pydantic's lax mode first, see lax.py; then SGLang's contract check reads
the JSON as sent, strictly, so "yes" for a boolean passes the first and is refused by the second).
The name sets are checked against SGLang's source by tests/unit/test_sglang_contract.py.

``return_logprob`` is honoured for the output tokens (``logprob_start_len`` -1, SGLang's default),
with ``top_logprobs_num``: the log_softmax of the target's logits at each emitted token, in
SGLang's meta_info keys (see logprob_ask; the server refuses it on a speculative method, whose
tokens come of a verify over a tree). Its other forms (texts, token_ids_logprob, flat raw,
prompt tokens) are refused with a 400 naming them.

Decoding is greedy whatever the temperature: the speculative methods here verify greedily, and
one rule for all methods keeps their outputs comparable. ``n`` above 1 is served (parallel.py)
only where SGLang decodes greedily too, its samples then identical (greedy_refusal).

Errors take SGLang's shapes (see the error classes): a malformed body, a schema violation, and a
request SGLang's tokenizer manager refuses each look as they do from SGLang.
"""

from __future__ import annotations

import array
import dataclasses
import email.message
import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .. import context_rule
from ..sampling_rule import decodes_greedily
from . import contract, lax

DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's default
#: What SGLang's scheduler takes a null max_new_tokens for: no limit but the context's.
UNLIMITED_NEW_TOKENS = 1 << 30
TOP_K_ALL = 1 << 30  # SGLang's "whole vocabulary"
MAX_STOP_COUNT = 32  # SGLang's cap on a request's stop strings


@dataclass(frozen=True)
class Neutral:
    """A feature the engine lacks: ``off`` (SGLang's default or the value that disables it), the
    values in ``also`` and null are accepted, and so is an empty string, list or object.

    ``kinds`` is the JSON type SGLang's API contract decodes the name as on /generate (None where
    its contract does not check it), ``each`` that of a list's or an object's items, and
    ``expected`` says it: a value of another type is the contract's 400 (check_type), not a
    value the engine cannot honour. ``zero_items``: an object whose values are all zero is
    accepted too (a logit_bias of 0 changes no logit)."""

    off: Any
    also: tuple = ()
    kinds: tuple[type, ...] | None = None
    expected: str = ""
    each: tuple[type, ...] | None = None
    zero_items: bool = False

    def accepts(self, value: Any) -> bool:
        if value is None or value in ("", [], {}):
            return True
        if self.zero_items and isinstance(value, dict) and all(
                type(v) in (int, float) and v == 0 for v in value.values()):
            return True
        return any(type(value) is type(ok) and value == ok for ok in (self.off, *self.also))

    def check_type(self, name: str, value: Any) -> None:
        if self.kinds is None or value is None:
            return
        expect(name, value, self.kinds, self.expected)
        if self.each is not None and isinstance(value, (list, dict)):
            for item in value.values() if isinstance(value, dict) else value:
                expect(name, item, self.each, self.expected)


_BOOL = dict(kinds=(bool,), expected="a boolean")
_BOOLS = dict(kinds=(bool, list), each=(bool,), expected="a boolean or a list of booleans")
_NUMBER = dict(kinds=(int, float), expected="a number")
_INT = dict(kinds=(int,), expected="an integer")
_TEXT = dict(kinds=(str,), expected="a string")


# -- what FastAPI's validation of a request class refuses ------------------------------------------

@dataclass(frozen=True)
class RequestModel:
    """What FastAPI's validation of a route's request class does before SGLang's code sees the
    body, as far as the engine mirrors it: a required field left out is refused, and each field's
    value is read as pydantic's lax mode reads its type (lax.py: "4" for an int is 4, "yes" for a
    bool is true, a null is refused unless the type is nullable), or refused in pydantic's words.
    ``fields`` maps each field the engine types, in the class's order (pydantic's order of
    errors), to its type as pydantic names it in an error's loc. ``before`` is the class's own
    before-validator, as far as it changes the input a ``missing`` error echoes. ``checks`` are
    the class's own field validators, by field: each takes the value pydantic read and the one
    given, and returns pydantic's error for it (or a list of them), or None. ``after`` is the class's own validator of
    the whole body as read, which pydantic runs only once every field passed: its error, or None.
    ``raw``: the route reads the body as sent once it passed, not as pydantic read it."""

    fields: Mapping[str, str]
    required: frozenset[str] = frozenset()
    before: Callable[[dict], dict] | None = None
    checks: Mapping[str, Callable[[Any, Any], dict | None]] = dataclasses.field(default_factory=dict)
    after: Callable[[dict], dict | None] | None = None
    raw: bool = False

    @property
    def non_null(self) -> dict[str, str]:
        """The fields whose null pydantic refuses (their type is not nullable), in order."""
        return {name: spec for name, spec in self.fields.items() if not spec.startswith(("nullable[", "any"))}

    def validated(self, body: dict) -> tuple[dict, list[dict]]:
        """The body with each typed field's value as pydantic reads it, and pydantic's errors.
        pydantic validates the body as the class's before-validators left it (a deprecated name's
        value copied to the new one is validated there too); only the body's own fields are read."""
        seen = self.before(dict(body)) if self.before is not None else body
        out, errors = dict(body), []
        for name, spec in self.fields.items():
            if name not in seen:
                if name in self.required:
                    errors.append({"type": "missing", "loc": ("body", name), "msg": "Field required", "input": seen})
                continue
            value, refused = lax.errors(spec, seen[name], ("body", name))
            if refused:
                errors += refused
            elif name in self.checks and (error := self.checks[name](value, seen[name])):
                errors += error if isinstance(error, list) else [error]
            elif name in body:
                out[name] = value
        if not errors and self.after is not None and (error := self.after(out)) is not None:
            errors.append(error)
        return out, errors

    def errors(self, body: dict) -> list[dict]:
        return self.validated(body)[1]


# -- /generate's top-level fields (SGLang's GenerateReqInput) --------------------------------------

HONOURED_FIELDS = frozenset({"text", "input_ids", "sampling_params", "stream", "rid", "lora_path",
                             "max_thinking_tokens", "return_logprob", "top_logprobs_num", "logprob_start_len"})
#: Hints, but for the values SGLang itself refuses, as it does (check_inputs, check_session_pair,
#: check_served_as_launched): a routed_dp_rank but 0, flat raw logprob options it cannot serve as
#: asked, session_id beside session_params.
HINT_FIELDS = frozenset({
    # routing, scheduling, caching, sessions, accounting
    "session_id", "log_metrics", "priority", "routing_key", "conversation_id", "extra_key", "cache_salt",
    "kv_hints", "custom_labels", "no_logs", "external_trace_header", "received_time", "http_worker_ipc",
    "routed_dp_rank", "data_parallel_rank", "disagg_prefill_dp_rank", "bootstrap_host", "bootstrap_port",
    "bootstrap_room", "bootstrap_pair_key", "decode_tp_size", "encoder_urls", "num_items_assigned",
    # options of outputs the engine never produces unless asked by a neutral-only field
    "token_ids_logprob", "return_text_in_logprobs",
    "sampling_logprobs_mode", "return_flat_raw_top_logprobs", "return_flat_raw_output_top_logprobs",
    "return_flat_raw_top_logprobs_b64", "routed_experts_start_len",
    # media processing options, which need media inputs (neutral-only) to mean anything
    "modalities", "mm_hashes", "mm_content_hashes", "use_audio_in_video", "video_config", "images_config",
    "mm_processor_kwargs", "max_dynamic_patch", "min_dynamic_patch", "image_max_dynamic_patch",
    "video_max_dynamic_patch",
})
NEUTRAL_FIELDS: Mapping[str, Neutral] = {
    "input_embeds": Neutral(None),
    "image_data": Neutral(None),
    "video_data": Neutral(None),
    "audio_data": Neutral(None),
    "watermark": Neutral(None),
    "return_sampling_mask": Neutral(False, **_BOOLS),
    "return_hidden_states": Neutral(False, **_BOOLS),
    "return_routed_experts": Neutral(False),
    "return_indexer_topk": Neutral(False),
    "return_bytes": Neutral(False),
    "return_entropy": Neutral(False),
    "return_prompt_token_ids": Neutral(False, **_BOOL),
    "session_params": Neutral(None),
    "lora_id": Neutral(None),
    "custom_logit_processor": Neutral(None, kinds=(str, list), each=(str, type(None)),
                                      expected="a string or a list of strings"),
    "positional_embed_overrides": Neutral(None),
    "background": Neutral(False),
    "require_reasoning": Neutral(False, **_BOOL),
    "need_wait_for_mm_inputs": Neutral(False),
    "multi_item_delimiter_indices": Neutral(None),
    "token_indices_to_pool": Neutral(None),
}
GENERATE_FIELDS = HONOURED_FIELDS | HINT_FIELDS | frozenset(NEUTRAL_FIELDS)
def _i64_ids(ids: Any, given: Any) -> dict | None:
    """GenerateReqInput's own validator of input_ids, which replaces pydantic's reading of its
    type: null, or a list of int64s or of lists of them, judged by the first item and taken as
    given (a boolean is an int to it; SGLang's contract check refuses one later)."""
    def refused(words: str) -> dict:
        return {"type": "value_error", "loc": ("body", "input_ids"), "msg": f"Value error, {words}",
                "input": given, "ctx": {"error": ValueError(words)}}

    def row(items: Any) -> str | None:
        if not isinstance(items, list):
            return f"must be list; got {type(items).__name__}"
        if items and not isinstance(items[0], int):
            return f"elements must be int; got {type(items[0]).__name__}"
        try:
            array.array("q", items)
        except (TypeError, OverflowError) as exc:
            return f"contains non-int64 element: {exc}"
        return None

    if ids is None or ids == []:
        return None
    if not isinstance(ids, list):
        return refused(f"must be list or null; got {type(ids).__name__}")
    if isinstance(ids[0], int):
        return refused(words) if (words := row(ids)) else None
    if not isinstance(ids[0], list):
        return refused(f"elements must be int or list; got {type(ids[0]).__name__}")
    for i, items in enumerate(ids):
        if items is None:
            return refused(f"row {i}: must not be None")
        if words := row(items):
            return refused(f"row {i}: {words}")
    return None


#: Optional[Union[List[str], str]] as pydantic meets it in SGLang's process: typing caches an Optional
#: of a Union by the Union's members as a set, so it is an equal one made before, whose order is this.
_TEXTS = "nullable[union[str,list[str]]]"
_OPT_STRS = "nullable[union[list[nullable[str]],str]]"
_OPT_INTS = "nullable[union[list[nullable[int]],int]]"
_IDS = "nullable[union[list[list[int]],list[int]]]"
#: GenerateReqInput's fields of the types lax.py reads, in its order (not its media inputs, kv_hints,
#: num_items_assigned or its Any fields), as FastAPI validates them before SGLang's route runs:
#: a null where the type has no None, or a value pydantic cannot read, is its validation 400. The
#: route then hands its contract check the JSON as sent, which reads it strictly (parse_generate):
#: a value only pydantic's lax mode takes ("stream": "yes") is that check's refusal (``raw``).
GENERATE_MODEL = RequestModel({
    "rid": _TEXTS, "session_id": "nullable[str]",
    "text": _TEXTS, "input_ids": "any",
    "input_embeds": "nullable[union[list[list[list[float]]],list[list[float]]]]",
    "mm_hashes": "nullable[union[list[str],list[list[str]]]]",
    "mm_content_hashes": "nullable[union[list[nullable[str]],list[list[nullable[str]]]]]",
    "use_audio_in_video": "bool", "video_config": "nullable[dict[str,any]]",
    "sampling_params": "nullable[union[list[dict[str,any]],dict[str,any]]]",
    "return_logprob": "nullable[union[list[bool],bool]]", "logprob_start_len": "nullable[union[list[int],int]]",
    "top_logprobs_num": "nullable[union[list[int],int]]", "token_ids_logprob": _IDS,
    "return_sampling_mask": "nullable[union[list[bool],bool]]",
    "sampling_logprobs_mode": "nullable[union[list[nullable[literal['selected','support']]],"
                              "literal['selected','support']]]",
    **dict.fromkeys(("return_text_in_logprobs", "return_flat_raw_top_logprobs",
                     "return_flat_raw_output_top_logprobs", "return_flat_raw_top_logprobs_b64", "stream",
                     "log_metrics"), "bool"),
    "return_hidden_states": "union[list[union[bool,literal['last']]],bool,literal['last']]",
    "return_routed_experts": "bool", "routed_experts_start_len": "int", "return_indexer_topk": "bool",
    "modalities": "nullable[list[str]]", "session_params": "nullable[dict[str,any]]",
    "lora_path": _OPT_STRS, "lora_id": _OPT_STRS, "custom_logit_processor": _OPT_STRS,
    "bootstrap_host": _OPT_STRS, "bootstrap_port": _OPT_INTS, "bootstrap_room": _OPT_INTS,
    "bootstrap_pair_key": _OPT_STRS, "decode_tp_size": _OPT_INTS,
    **dict.fromkeys(("routed_dp_rank", "data_parallel_rank", "disagg_prefill_dp_rank"), "nullable[int]"),
    **dict.fromkeys(("routing_key", "conversation_id", "http_worker_ipc"), "nullable[str]"),
    "background": "bool", "require_reasoning": "bool", "max_thinking_tokens": "nullable[int]",
    "priority": "nullable[int]", "extra_key": _TEXTS, "no_logs": "bool",
    "custom_labels": "nullable[dict[str,str]]",
    **dict.fromkeys(("return_bytes", "return_entropy", "return_prompt_token_ids"), "bool"),
    "external_trace_header": "nullable[dict[str,any]]", "received_time": "nullable[float]",
    "need_wait_for_mm_inputs": "nullable[bool]", "encoder_urls": "nullable[list[str]]",
    **dict.fromkeys(("max_dynamic_patch", "min_dynamic_patch", "image_max_dynamic_patch",
                     "video_max_dynamic_patch"), "nullable[int]"),
    "images_config": "nullable[dict[any,any]]", "mm_processor_kwargs": "nullable[dict[any,any]]",
    "multi_item_delimiter_indices": _IDS, "token_indices_to_pool": _IDS,
    "cache_salt": _TEXTS,
}, checks={"input_ids": _i64_ids}, raw=True)

# -- sampling_params (SGLang's SamplingParams) -----------------------------------------------------

HONOURED_SAMPLING = frozenset({"max_new_tokens", "temperature", "ignore_eos", "stop", "stop_token_ids", "n"})
HINT_SAMPLING = frozenset({
    "spaces_between_special_tokens",  # the byte vocabulary has no special-token text to space
    "stream_interval",  # the engine streams every step
    "sampling_seed",  # greedy decoding draws nothing
    "custom_params",  # read only by a custom logit processor (neutral-only)
})
NEUTRAL_SAMPLING: Mapping[str, Neutral] = {
    "stop_regex": Neutral(None, kinds=(str, list), each=(str,), expected="a string or a list of strings"),
    "top_p": Neutral(1.0, also=(1,), **_NUMBER),
    "top_k": Neutral(TOP_K_ALL, also=(-1, 1), **_INT),  # all, all, and greedy's own top-1
    "min_p": Neutral(0.0, also=(0,), **_NUMBER),
    "frequency_penalty": Neutral(0.0, also=(0,), **_NUMBER),
    "presence_penalty": Neutral(0.0, also=(0,), **_NUMBER),
    "repetition_penalty": Neutral(1.0, also=(1,), **_NUMBER),
    "min_new_tokens": Neutral(0, **_INT),
    "beam_width": Neutral(None, also=(1,), **_INT),
    "json_schema": Neutral(None, **_TEXT),
    "regex": Neutral(None, **_TEXT),
    "ebnf": Neutral(None, **_TEXT),
    "structural_tag": Neutral(None, **_TEXT),
    "choice": Neutral([], kinds=(list,), each=(str,), expected="a list of strings"),
    "skip_special_tokens": Neutral(True, **_BOOL),
    "no_stop_trim": Neutral(False, **_BOOL),
    "logit_bias": Neutral({}, kinds=(dict,), each=(int, float), expected="an object of numbers", zero_items=True),
    "watermark": Neutral(None, kinds=(dict,), expected="an object"),
}
SAMPLING_FIELDS = HONOURED_SAMPLING | HINT_SAMPLING | frozenset(NEUTRAL_SAMPLING)


# -- errors, each in the shape SGLang answers it with ----------------------------------------------

class RequestError(ValueError):
    """A request the engine refuses with HTTP 400; ``body()`` is SGLang's JSON for it."""

    status = 400
    stream = False  # set on a Refused request that asked to stream

    def body(self) -> dict:
        return {"error": {"message": str(self)}}


class InvalidBody(RequestError):
    """Not a JSON object (or a hostile one): SGLang's request-validation handler answers these."""

    def body(self) -> dict:
        return {"object": "error", "message": str(self), "type": "Bad Request", "param": None, "code": 400}


class UnparsableBody(InvalidBody):
    """A body of a JSON media type that FastAPI fails to parse other than as bad JSON (see
    parse_json): its HTTPException, which SGLang's handler answers with the status as the type."""

    def body(self) -> dict:
        return {"object": "error", "message": str(self), "type": str(self.status), "param": None,
                "code": self.status}


#: FastAPI's words for an UnparsableBody.
PARSE_ERROR = "There was an error parsing the body"


class UnsupportedMediaType(InvalidBody):
    """A body whose Content-Type SGLang (or FastAPI under it) does not read as JSON, or a missing
    header: SGLang's request-validation handler answers it, as here."""


def validation_message(errors: list[dict], endpoint: str | None = None) -> str:
    """How SGLang's validation handler words a FastAPI RequestValidationError: the errors counted
    and listed, the endpoint where FastAPI names one, then the list again. FastAPI names the
    endpoint by its source file and line where it can read them; the engine has no such file of
    SGLang's to name, so it says ``Endpoint: METHOD /path``, as FastAPI does without one."""
    errors = [_renderable(e) for e in errors]
    listed = "".join(f"  {e}\n" for e in errors)
    where = f"\n  Endpoint: {endpoint}" if endpoint else ""
    return f"{len(errors)} validation error{'s' if len(errors) != 1 else ''}:\n{listed}{where}".rstrip() + f" {errors}"


def flush_timeout(raw: str | None, endpoint: str) -> float:
    """/flush_cache's ``timeout`` query parameter as SGLang's route declares it (a float >= 0,
    default 0: how long a flush may wait for the server to go idle), its refusals as FastAPI's."""
    if raw is None:
        return 0.0
    error = {"loc": ("query", "timeout"), "input": raw}
    try:
        value = float(raw)
    except ValueError:
        raise InvalidBody(validation_message([{"type": "float_parsing", **error, "msg": (
            "Input should be a valid number, unable to parse string as a number")}], endpoint)) from None
    if not value >= 0:  # NaN too
        raise InvalidBody(validation_message([{"type": "greater_than_equal", **error, "msg": (
            "Input should be greater than or equal to 0"), "ctx": {"ge": 0.0}}], endpoint))
    return value


#: The error SGLang's validate_json_request raises (it names no endpoint).
MEDIA_TYPE_ERROR = {"loc": ["header", "content-type"],
                    "msg": "Unsupported Media Type: Only 'application/json' is allowed", "type": "value_error"}
#: FastAPI's error for a route's body that is empty.
MISSING_BODY_ERROR = {"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}


def check_json_media_type(content_type: str | None) -> None:
    """UnsupportedMediaType unless the media type is application/json (any case, any parameters
    after ';'), by SGLang's validate_json_request: a missing header is refused too, and so is
    application/*+json."""
    if (content_type or "").lower().split(";", maxsplit=1)[0] != "application/json":
        raise UnsupportedMediaType(validation_message([MEDIA_TYPE_ERROR]))


def _fastapi_reads_json(content_type: str | None) -> bool:
    """FastAPI's rule for parsing a body as JSON (strict content type, its default): an
    application/json or application/*+json media type; no header means not JSON."""
    if not content_type:
        return False
    header = email.message.Message()
    header["content-type"] = content_type
    subtype = header.get_content_subtype()
    return header.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


def read_body(raw: bytes, content_type: str | None, endpoint: str, *, json_guard: bool,
              not_object: Callable[[Any], dict] | None = None, model: RequestModel | None = None) -> dict:
    """The body as SGLang's FastAPI app takes it, or the InvalidBody it answers, in FastAPI's order.
    FastAPI parses a body of a JSON media type first (parse_json: json_invalid). A route guarded
    with validate_json_request (``json_guard``: the OpenAI-compatible ones and /tokenize) then checks
    the media type (check_json_media_type). Then the body is validated against the route's class:
    an empty body or a JSON null is missing, and anything but an object is refused, in pydantic's
    words for that class (not_an_object, or the route's own ``not_object``). /generate has no guard,
    so a body of another media type reaches its class as bytes and is refused there, echoed in the
    message. Last, an object's fields are validated as the class declares them (``model``)."""
    reads_json = _fastapi_reads_json(content_type)
    value: Any = parse_json(raw, endpoint) if raw and reads_json else raw
    if json_guard:
        check_json_media_type(content_type)
    if not raw or value is None:
        raise InvalidBody(validation_message([MISSING_BODY_ERROR], endpoint))
    if not isinstance(value, dict):
        error = not_object(value) if not_object is not None else not_an_object(value, json_guard=json_guard)
        raise InvalidBody(validation_message([error], endpoint))
    read, errors = model.validated(value) if model is not None else (value, [])
    if errors:
        raise InvalidBody(validation_message(errors, endpoint))
    return value if model is None or model.raw else read


def not_an_object(value: Any, *, json_guard: bool) -> dict:
    """pydantic's error for a body that is no object: /generate's GenerateReqInput is a dataclass;
    the guarded routes take pydantic models, which FastAPI validates with from_attributes. SGLang's
    chat route answers 500 instead (its model's own before-validator reads the body as an object);
    the engine answers it as the other guarded routes, since a bad request must never be a 500."""
    if json_guard:
        return {"type": "model_attributes_type", "loc": ("body",),
                "msg": "Input should be a valid dictionary or object to extract fields from", "input": value}
    return {"type": "dataclass_type", "loc": ("body",),
            "msg": "Input should be a dictionary or an instance of GenerateReqInput", "input": value,
            "ctx": {"class_name": "GenerateReqInput"}}


def json_invalid(exc: json.JSONDecodeError) -> dict:
    """FastAPI's error for a body of a JSON media type that does not parse."""
    return {"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error", "input": {},
            "ctx": {"error": exc.msg}}


class SchemaViolation(RequestError):
    """A wrong type or an unknown name: SGLang's API contract check answers these, before any
    streaming starts, with the message as a plain string: on /generate the contract's own text
    (contract.py); the engine's refusals of what SGLang takes (an unknown top-level name, a
    list of rids or sampling_params beside one prompt) come in the same shape, in the engine's words."""

    def body(self) -> dict:
        return {"error": str(self)}


class Unsupported(RequestError):
    """A value SGLang would honour and the engine cannot; refused before any streaming starts."""


class Refused(RequestError):
    """A request SGLang's tokenizer manager refuses (context too long, a value out of range). On a
    streaming request SGLang answers 200 and sends it as an error event; see ``stream_event``.
    ``rids``: the request's rids where SGLang had them normalized and not yet claimed when it
    refused (its abort task of a refused /generate stream aborts those another request holds)."""

    rids: list[str] | None = None

    def stream_event(self) -> dict:
        return {"error": {"message": str(self), "type": "invalid_request_error", "code": self.status,
                          "retryable": False}}


class InputTooLong(Refused):
    """SGLang's scheduler's refusal of a prompt too long for it. It is no error of the request's
    parsing there: the scheduler puts one token (ABORT_STUB) in place of the prompt, prefills it,
    keeps the one token that yields and finishes the request with this abort reason (see
    ``scheduled``), so a stream carries the reason in an output, and a whole response is a 400."""

    def finish_reason(self) -> dict:
        return {"type": "abort", "message": str(self), "status_code": self.status, "err_type": "BadRequestError"}


def abort_error(reason: dict | None) -> Refused | None:
    """The error a finish reason answers a whole (not streamed) request with: an abort that names
    a status (the engine's are 400), as SGLang's tokenizer manager raises it; None for any other."""
    if reason is None or reason.get("type") != "abort" or reason.get("status_code") is None:
        return None
    return Refused(reason.get("message", "Aborted"))


# -- parsing ---------------------------------------------------------------------------------------

def parse_json(raw: bytes, endpoint: str | None = None) -> Any:
    """The request body as JSON, parsed as FastAPI parses it (Python's json.loads of the bytes,
    which reads UTF-8, -16 and -32 and takes NaN and Infinity), or InvalidBody: bad JSON (FastAPI's
    json_invalid error, from ``endpoint``); UnparsableBody for whatever else fails (bytes that are
    not text in those encodings, a nesting deeper than Python's parser goes, a number too long
    to convert): a body that parser takes is taken, however deep, as SGLang's FastAPI takes it
    (the engine's walks are iterative and its echoes of a value cut, see _shown); an InvalidBody
    for a string that is not Unicode text (a lone surrogate such as "\\ud800", which no tokenizer
    can encode: SGLang's own fast tokenizer raises a TypeError there, which its server answers
    with a 500, and a bad request is never a 500 here)."""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidBody(validation_message([json_invalid(exc)], endpoint)) from None
    except Exception:  # FastAPI answers every other failure to parse the same way
        raise UnparsableBody(PARSE_ERROR) from None
    stack = [value]
    while stack:  # iterative: a deep document must not exhaust this process's stack either
        item = stack.pop()
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, dict):
            for key in item:
                _check_text(key)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return value


def _shown(value: Any, limit: int) -> str:
    """The first ``limit`` characters of ``value`` as JSON, for an error message; a value nested
    too deep to render (json.loads took it with less of the stack in use) is shown by its head."""
    try:
        return json.dumps(value)[:limit]
    except RecursionError:
        return repr(_Head(value))


class _Head:
    """Stands for a value too deep to render in a message: its repr is the value's head."""

    def __init__(self, value: Any):
        self.text = ("[" if isinstance(value, list) else "{") * 3 + "..."

    def __repr__(self) -> str:
        return self.text


def _renderable(error: dict) -> dict:
    """A validation error whose echoed input can be rendered (see _shown)."""
    try:
        repr(error.get("input"))
    except RecursionError:
        return {**error, "input": _Head(error["input"])}
    return error


def _check_text(s: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidBody(f"The request body holds a string that is not valid Unicode ({exc.reason} at "
                          f"position {exc.start}, e.g. a lone surrogate escape).") from None


def known_fields(body: Any, known: frozenset[str]) -> dict:
    """The body's fields set to something (null is the default), once it is an object of known names."""
    if not isinstance(body, dict):
        raise InvalidBody(f"The request body must be a JSON object, got {_type_name(body)}.")
    unknown = sorted(set(body) - known)
    if unknown:
        raise unknown_names("field(s)", unknown, known)
    return {k: v for k, v in body.items() if v is not None}


def unknown_names(kind: str, names: list[str], known: frozenset[str]) -> SchemaViolation:
    return SchemaViolation(f"unknown {kind} {', '.join(f'`{n}`' for n in names)}; the names SGLang "
                           f"accepts are {', '.join(sorted(known))}")


def _type_name(value: Any) -> str:
    return "null" if value is None else {bool: "boolean", int: "integer", float: "number", str: "string",
                                         list: "list", dict: "object"}.get(type(value), type(value).__name__)


def expect(name: str, value: Any, kinds: tuple[type, ...], expected: str) -> Any:
    if isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds):
        return value
    raise SchemaViolation(f"{name}: invalid type: {_type_name(value)} {_shown(value, 80)}, expected {expected}")


@dataclass(frozen=True)
class Range:
    """A sampling parameter's range as SGLang's SamplingParams.verify checks it, and its words
    (``{}``: the value) for a value of the parameter's type outside it."""

    kinds: tuple[type, ...]
    inside: Callable[[Any], bool]
    words: str

    def refuses(self, value: Any) -> bool:
        return isinstance(value, self.kinds) and not isinstance(value, bool) and not self.inside(value)


#: verify's ranges of the neutral-only sampling parameters, in its order (beam_width comes before
#: temperature, the rest after). SGLang refuses a value outside them there, so the engine does
#: too, in its words and at its point (Sampling.verify), not as a value it cannot honour.
SAMPLING_RANGES: Mapping[str, Range] = {
    "beam_width": Range((int,), lambda v: v >= 1, "beam_width must be at least 1, got {}."),
    "top_p": Range((int, float), lambda v: 0.0 < v <= 1.0, "top_p must be in (0, 1], got {}."),
    "min_p": Range((int, float), lambda v: 0.0 <= v <= 1.0, "min_p must be in [0, 1], got {}."),
    "top_k": Range((int,), lambda v: v >= 1 or v == -1, "top_k must be -1 (disable) or at least 1, got {}."),
    "frequency_penalty": Range((int, float), lambda v: -2.0 <= v <= 2.0,
                               "frequency_penalty must be in [-2, 2], got {}."),
    "presence_penalty": Range((int, float), lambda v: -2.0 <= v <= 2.0,
                              "presence_penalty must be in [-2, 2], got {}."),
    "repetition_penalty": Range((int, float), lambda v: 0.0 < v <= 2.0,
                                "repetition_penalty must be in (0, 2] (1.0 = no penalty), got {}."),
    "min_new_tokens": Range((int,), lambda v: v >= 0, "min_new_tokens must be in [0, max_new_tokens], got {}."),
}


def out_of_range(params: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The sampling parameters of ``params`` set outside SGLang's ranges (SAMPLING_RANGES)."""
    return tuple((name, params[name]) for name in SAMPLING_RANGES
                 if name in params and SAMPLING_RANGES[name].refuses(params[name]))


def check_types(params: Mapping[str, Any], rules: Mapping[str, Neutral]) -> None:
    """SchemaViolation for the first name of ``params`` whose value SGLang's API contract decodes
    as another type (Neutral.kinds): the contract refuses it before anything is served."""
    for name, value in params.items():
        if name in rules:
            rules[name].check_type(name, value)


def neutral_refusal(kind: str, params: Mapping[str, Any], rules: Mapping[str, Neutral],
                    ranged: Mapping[str, str] | None = None) -> Unsupported | None:
    """Unsupported naming every field of ``params`` set to a value the engine cannot honour, but
    for one SGLang refuses later as out of range (``ranged`` maps names of ``params`` to those of
    SAMPLING_RANGES; sampling parameters map to themselves); or None. Raised where SGLang would
    have served the request (unsupported_after): SGLang takes these values, so any refusal of its
    own comes first."""
    ranged = {name: name for name in SAMPLING_RANGES} if ranged is None else ranged
    refused = [f"{name}={_shown(value, 60)}" for name, value in params.items()
               if name in rules and not rules[name].accepts(value)
               and not (name in ranged and SAMPLING_RANGES[ranged[name]].refuses(value))]
    if not refused:
        return None
    return Unsupported(f"The embedded engine cannot honour the {kind} {', '.join(refused)}: it decodes "
                       f"greedily, without logprobs, media inputs, LoRA adapters or "
                       f"constrained decoding. Leave them unset (null) or at SGLang's default.")


def greedy_refusal(samples: int, temperature: Any, top_k: Any) -> Unsupported | None:
    """The engine's refusal of ``n`` above 1 where SGLang would draw independent samples (any
    temperature but 0, unless top_k is 1): the engine's greedy copies would pass for them."""
    if samples <= 1 or decodes_greedily(temperature, top_k):
        return None
    return Unsupported(f"The embedded engine cannot honour n={samples} at temperature {temperature}: it decodes "
                       f"greedily, so its {samples} samples would be copies of one output, where SGLang draws "
                       f"independent samples. Set temperature 0 (greedy, the samples identical, as SGLang "
                       f"gives them) or n 1.")


def unsupported_after(prompts) -> None:
    """The engine's refusal of a value it cannot honour (Sampling.unsupported), once every check of
    SGLang's passed for every prompt (``prompts``: objects with ``sampling`` and ``abort``): SGLang
    would serve such a request, so a request that also has a fault SGLang refuses gets SGLang's
    answer. A prompt its scheduler refuses (``abort``) is served as SGLang serves it."""
    for prompt in prompts:
        if prompt.abort is None and prompt.sampling.unsupported is not None:
            raise prompt.sampling.unsupported


@dataclass(frozen=True)
class Sampling:
    """The sampling parameters the engine acts on or checks (the rest were checked and have no
    effect; decoding is greedy whatever the temperature)."""

    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()
    stop_token_ids: frozenset[int] = frozenset()
    temperature: float = 1.0
    out_of_range: tuple[tuple[str, Any], ...] = ()  # neutral-only parameters SGLang refuses (SAMPLING_RANGES)
    min_over_max: int | None = None  # a min_new_tokens above max_new_tokens, which verify refuses
    #: the request named max_new_tokens (not null): only then does SGLang's tokenizer manager refuse
    #: a prompt plus it past the context; else its scheduler cuts it to fit without a word
    context_checked: bool = True
    logit_bias_keys: tuple[str, ...] = ()  # the token ids a logit_bias names, which verify checks
    #: the engine's refusal of a value SGLang honours, raised once SGLang's checks passed (unsupported_after)
    unsupported: Unsupported | None = dataclasses.field(default=None, compare=False)

    def verify(self, vocab_size: int) -> None:
        """The ranges SGLang's SamplingParams.verify checks, in its order (and the engine's own
        stop checks), which come after its context checks: see admit. Its normalize, just before,
        caps the number of stop strings."""
        if len(self.stop) > MAX_STOP_COUNT:
            raise Refused(f"at most {MAX_STOP_COUNT} stop strings are allowed, got {len(self.stop)}")
        refused = dict(self.out_of_range)
        if "beam_width" in refused:
            raise Refused(SAMPLING_RANGES["beam_width"].words.format(refused["beam_width"]))
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise Refused(f"temperature must be a non-negative finite number, got {self.temperature}.")
        if refused:
            name, value = next(iter(refused.items()))
            raise Refused(SAMPLING_RANGES[name].words.format(value))
        if self.max_new_tokens < 0:
            raise Refused(f"max_new_tokens must be at least 0, got {self.max_new_tokens}.")
        if self.min_over_max is not None and self.min_over_max > self.max_new_tokens:
            raise Refused(f"min_new_tokens must be in [0, max_new_tokens({self.max_new_tokens})], got "
                          f"{self.min_over_max}.")
        if (key := bad_bias_key(self.logit_bias_keys, vocab_size)) is not None:
            raise Refused(key)
        if any(not s for s in self.stop):
            raise Refused("stop strings must be non-empty (an empty one would end every request at once).")
        if any(not 0 <= i < vocab_size for i in self.stop_token_ids):
            raise Refused(f"stop_token_ids must be token ids in [0, {vocab_size - 1}], got "
                          f"{sorted(self.stop_token_ids)}.")


def bad_bias_key(keys: tuple[str, ...], vocab_size: int) -> str | None:
    """SGLang's words for the first logit_bias key that names no token id (verify reads each with
    int(): Python's own error for one that is no integer), or None."""
    for key in keys:
        try:
            token_id = int(key)
        except ValueError as exc:
            return str(exc)
        if not 0 <= token_id < vocab_size:
            return f"logit_bias must has keys in [0, {vocab_size - 1}], got {key}."
    return None


def parse_sampling(params: Any, vocab_size: int) -> Sampling:
    """SGLang's sampling_params, checked for their schema, then for what the engine can honour;
    their ranges are checked later, where SGLang checks them (Sampling.verify, from admit). A
    logit_bias naming no token id is left to that check too, whatever its values."""
    if params is None:
        return Sampling(context_checked=False)
    if not isinstance(params, dict):
        raise SchemaViolation(f"sampling_params: invalid type: {_type_name(params)}, expected an object (a list "
                              f"of sampling_params goes with a batch of prompts: text or input_ids a list of them)")
    unknown = sorted(set(params) - SAMPLING_FIELDS)
    if unknown:
        raise unknown_names("sampling parameter(s)", unknown, SAMPLING_FIELDS)
    p = {k: v for k, v in params.items() if v is not None}
    default = UNLIMITED_NEW_TOKENS if "max_new_tokens" in params else DEFAULT_MAX_NEW_TOKENS  # named null: unlimited
    max_new_tokens = expect("max_new_tokens", p.get("max_new_tokens", default), (int,), "an integer")
    temperature = expect("temperature", p.get("temperature", 1.0), (int, float), "a number")
    ignore_eos = expect("ignore_eos", p.get("ignore_eos", False), (bool,), "a boolean")
    stop = p.get("stop", [])
    stop = [stop] if isinstance(stop, str) else expect("stop", stop, (list,), "a string or a list of strings")
    for s in stop:
        expect("stop", s, (str,), "a string or a list of strings")
    stop_ids = expect("stop_token_ids", p.get("stop_token_ids", []), (list,), "a list of integers")
    for i in stop_ids:
        expect("stop_token_ids", i, (int,), "a list of integers")
    check_types(p, NEUTRAL_SAMPLING)
    # SGLang checks min_new_tokens against max_new_tokens as given (default 128), not when it is null
    least = p.get("min_new_tokens", 0)
    over = least if least > max_new_tokens and params.get("max_new_tokens", 0) is not None else None
    bias_keys = tuple(p.get("logit_bias") or ())
    deferred = {"min_new_tokens"} if over else set()
    if bad_bias_key(bias_keys, vocab_size) is not None:
        deferred.add("logit_bias")
    samples = expect("n", p.get("n", 1), (int,), "an integer")
    unsupported = neutral_refusal("sampling parameter(s)", {k: v for k, v in p.items() if k not in deferred},
                                  NEUTRAL_SAMPLING) or greedy_refusal(samples, temperature, p.get("top_k"))
    return Sampling(max_new_tokens, ignore_eos, tuple(stop), frozenset(stop_ids), temperature, out_of_range(p),
                    over, "max_new_tokens" in p, bias_keys, unsupported)


@dataclass(frozen=True)
class GenerateRequest:
    """A /generate request the engine will serve."""

    input_ids: tuple[int, ...]
    sampling: Sampling
    stream: bool
    rid: str | None
    abort: dict | None = None  # the scheduler's refusal, which the request finishes with (see scheduled)
    top_logprobs: int | None = None  # return_logprob's top_logprobs_num; None: no logprobs asked


#: Called with a request's rids (those given; a null rid is drawn fresh) where SGLang's tokenizer
#: manager checks them against the rids in flight (_init_req_state): after its normalization of
#: the request, before a LoRA adapter and the tokenized prompt are checked. It raises the refusal.
RidsCheck = Callable[[list[str]], None]


def parse_generate(body: Any, *, encode, vocab_size: int, context_length: int,
                   rids_free: RidsCheck | None = None) -> GenerateRequest:
    """Check a /generate body as SGLang does (plus the engine's own limits) and say what to serve.

    ``encode`` turns text into token ids. Raises a RequestError subclass, in SGLang's order:
    the body's shape, then the schema, then SGLang's refusals: the prompt given, a rid in flight
    (``rids_free``), a LoRA adapter, then the context and the sampling ranges (admit); last, a
    value the engine cannot honour (unsupported_after), which SGLang would serve. The schema
    is SGLang's API contract check (contract.py), in its words; it comes before the engine's own
    refusal of names SGLang ignores, as SGLang refuses such a body for its contract violation.
    """
    request = parse_one_prompt(body, encode=encode, vocab_size=vocab_size, context_length=context_length,
                               rids_free=rids_free)
    unsupported_after([request])
    return request


def parse_one_prompt(body: Any, *, encode, vocab_size: int, context_length: int,
                     rids_free: RidsCheck | None = None, batched: bool = False) -> GenerateRequest:
    """parse_generate but for its last check: a value the engine cannot honour rides on the
    request's sampling (Sampling.unsupported), for a batch to raise once all its prompts passed.
    ``batched``: a prompt of a batch, whose empty input_ids SGLang does not refuse (it checks
    only a single request's), so the engine refuses it last, as a prompt it cannot prefill."""
    if isinstance(body, dict) and (violation := contract.generate_contract_error(body)) is not None:
        raise SchemaViolation(violation)
    b = known_fields(body, GENERATE_FIELDS)
    stream = expect("stream", b.get("stream", False), (bool,), "a boolean")
    rid = b.get("rid")
    if rid is not None:
        expect("rid", rid, (str,), "a string (a list of rids goes with a batch of prompts)")
    text, input_ids = b.get("text"), b.get("input_ids")
    if text is not None:
        expect("text", text, (str,), "a string, or a list of them for a batch")
    if input_ids is not None:
        expect("input_ids", input_ids, (list,), "a list of integers")
        for i in input_ids:
            # only here with one text prompt: a list of them (a batch) goes to batch.parse_batch
            expect("input_ids", i, (int,), "a list of integers (input_ids is a batch but text one prompt: "
                                           "give text as a list of prompts too, or leave it out)")
    lora_path = lora_path_field(b.get("lora_path"))
    check_types(b, NEUTRAL_FIELDS)
    sampling = parse_sampling(b.get("sampling_params"), vocab_size)  # its types are the contract's too: first
    top_logprobs, logprob_unsupported = logprob_ask(b, vocab_size)
    unsupported = sampling.unsupported or neutral_refusal("field(s)", b, NEUTRAL_FIELDS) or logprob_unsupported
    sampling = dataclasses.replace(sampling, unsupported=unsupported)
    if text is None and input_ids is None:
        raise Refused("Either text, input_ids or input_embeds should be provided.")
    check_inputs(b)
    if not batched and text is None and input_ids is not None and not input_ids and not session_named(b):
        raise Refused(EMPTY_INPUT_IDS)
    try:
        check_session_pair(b)
        from .parallel import check_null_n  # here: parallel.py imports this module

        check_null_n(b.get("sampling_params"))
        check_served_as_launched(b)
    except Refused as exc:
        exc.rids = [rid] if rid is not None else []
        raise
    if rids_free is not None and rid is not None:
        rids_free([rid])
    check_no_lora(lora_path)
    # SGLang tokenizes the text only when no input_ids are given: given both, the ids are the prompt
    input_ids = encode(text) if input_ids is None else prompt_ids(input_ids, vocab_size)
    input_ids, sampling, abort = scheduled(input_ids, sampling, vocab_size=vocab_size, context_length=context_length)
    if not input_ids:  # SGLang hands it to its scheduler; the engine cannot prefill nothing
        sampling = dataclasses.replace(sampling, unsupported=Refused(EMPTY_INPUT_IDS))
    return GenerateRequest(input_ids, sampling, stream, rid, abort, top_logprobs)


#: return_logprob's options the engine does not serve: each is refused beside return_logprob true.
UNSERVED_LOGPROB_OPTIONS = ("token_ids_logprob", "return_text_in_logprobs", "return_flat_raw_top_logprobs",
                            "return_flat_raw_output_top_logprobs")


def logprob_ask(b: Mapping[str, Any], vocab_size: int) -> tuple[int | None, Unsupported | None]:
    """What a prompt's ``return_logprob`` asks: its ``top_logprobs_num`` (0: the tokens' own
    logprobs only; a negative one is 0, as SGLang's ``> 0`` test reads it), None where it asks
    nothing (its options are then ignored, as SGLang ignores them); and the engine's refusal of a
    form it does not serve: another ``logprob_start_len`` than -1 (prompt tokens' logprobs), their
    texts, token_ids_logprob, flat raw rows, a list (one value a prompt goes with a batch), or more
    top logprobs than the vocabulary has."""
    ask = b.get("return_logprob")
    if isinstance(ask, list) and ask:  # batch.py hands each prompt of a batch its own value
        return None, _logprob_refusal(f"a list ({_shown(ask, 60)})", "a list goes with a batch of prompts; "
                                      "give one boolean")
    if ask is not True:
        return None, None
    top, start = b.get("top_logprobs_num"), b.get("logprob_start_len")
    if isinstance(top, list) or isinstance(start, list):
        return None, _logprob_refusal("a list of top_logprobs_num or logprob_start_len",
                                      "a list goes with a batch of prompts; give one integer")
    if start is not None and start != -1:
        return None, _logprob_refusal(f"logprob_start_len={start}", "it serves the output tokens' logprobs "
                                      "only: leave logprob_start_len unset (-1, SGLang's default)")
    unserved = [f"{name}={_shown(b[name], 60)}" for name in UNSERVED_LOGPROB_OPTIONS
                if b.get(name) not in (None, False, [])]
    if unserved:
        return None, _logprob_refusal(", ".join(unserved), "it serves logprobs as [logprob, token id, null] "
                                      "rows only: leave them unset")
    top = max(0, top or 0)
    if top > vocab_size:
        return None, _logprob_refusal(f"top_logprobs_num={top}", f"the vocabulary has {vocab_size} tokens")
    return top, None


def _logprob_refusal(what: str, why: str) -> Unsupported:
    return Unsupported(f"The embedded engine cannot honour return_logprob with {what}: {why}.")


#: SGLang's words (GenerateReqInput._validate_inputs) for flat raw logprob options it cannot serve.
FLAT_RAW_MULTI_ITEM = ("return_flat_raw_top_logprobs does not support multi-item scoring: delimiter-sparse top "
                       "logprob rows have no contiguous position mapping.")
FLAT_RAW_STREAM = ("return_flat_raw_output_top_logprobs is only set on the finished response and does not support "
                   "stream=True.")
FLAT_RAW_B64 = ("return_flat_raw_top_logprobs_b64 requires return_flat_raw_top_logprobs or "
                "return_flat_raw_output_top_logprobs.")
#: SGLang's words (normalize_batch_and_arguments) for a request naming a session both ways.
SESSION_PAIR = "session_id and session_params cannot both be set."
#: SGLang's words (its tokenizer manager's generate_request) on a server launched without
#: --enable-strict-thinking, which the engine is, for any max_thinking_tokens.
STRICT_THINKING = "max_thinking_tokens requires the server to be launched with --enable-strict-thinking"
#: SGLang's words (generate_request) for a routed_dp_rank past its data-parallel ranks; the
#: engine is one rank, so 0 is ignored and any other value refused.
DP_RANK_RANGE = "routed_dp_rank={} out of range [0, 1)"


def _as_read(spec: str, value: Any) -> Any:
    """``value`` as FastAPI's validation read it into GenerateReqInput (pydantic's lax mode), which
    SGLang's own checks see; the contract does not type every name."""
    read, refused = lax.errors(spec, value, ())
    return value if refused else read


def check_inputs(b: Mapping[str, Any]) -> None:
    """SGLang's refusals of flat raw logprob options (_validate_inputs), in its order, once a
    prompt is given: before the batch is sized, so before any prompt or rid is looked at."""
    def flag(name: str) -> bool:
        return bool(_as_read("bool", b.get(name, False)))

    if flag("return_flat_raw_top_logprobs") and b.get("multi_item_delimiter_indices") is not None:
        raise Refused(FLAT_RAW_MULTI_ITEM)
    if flag("return_flat_raw_output_top_logprobs") and b.get("stream"):
        raise Refused(FLAT_RAW_STREAM)
    if flag("return_flat_raw_top_logprobs_b64") and not (
            flag("return_flat_raw_top_logprobs") or flag("return_flat_raw_output_top_logprobs")):
        raise Refused(FLAT_RAW_B64)


def session_named(b: Mapping[str, Any]) -> bool:
    """Whether session_params names a session: SGLang then lets an empty input_ids pass, as the
    session's history may be the prompt (the engine refuses session_params later)."""
    params = b.get("session_params")
    return isinstance(params, dict) and bool(params.get("id"))


def check_session_pair(b: Mapping[str, Any]) -> None:
    """SGLang's refusal of session_id beside session_params, once the batch is sized."""
    if b.get("session_id") is not None and b.get("session_params") is not None:
        raise Refused(SESSION_PAIR)


def check_served_as_launched(b: Mapping[str, Any]) -> None:
    """SGLang's refusals, after its normalization of the request and before the rids in flight,
    of what a server launched as the engine is (no strict thinking, one data-parallel rank) does
    not serve: a max_thinking_tokens, a routed_dp_rank (or its old name data_parallel_rank) but 0."""
    if b.get("max_thinking_tokens") is not None:
        raise Refused(STRICT_THINKING)
    check_dp_rank(b)


def check_dp_rank(b: Mapping[str, Any]) -> None:
    """SGLang's refusal of a routed_dp_rank (data_parallel_rank, its old name, where it is unset)
    on one data-parallel rank: any but 0, which it ignores. Its OpenAI routes pass it on too."""
    rank = _as_read("nullable[int]", b.get("routed_dp_rank"))
    if rank is None:
        rank = _as_read("nullable[int]", b.get("data_parallel_rank"))
    if rank is not None and rank != 0:
        raise Refused(DP_RANK_RANGE.format(rank))


#: SGLang's words for an empty input_ids. It checks only a single request's, when no text is
#: given and session_params names no session; an empty prompt beside a text, or in a batch, it
#: hands to its scheduler. The engine, which cannot prefill nothing, refuses that too, in the
#: same words, once SGLang's checks all passed (as a value it cannot honour).
EMPTY_INPUT_IDS = "input_ids cannot be empty."
#: The id the engine gives every prompt id outside its vocabulary (see prompt_ids).
OUT_OF_VOCAB = -1


def prompt_ids(ids: list[int], vocab_size: int) -> list[int]:
    """A prompt given as token ids, as the engine prefills it. SGLang refuses no id: under tensor
    parallelism its vocab-parallel embedding embeds one outside the vocabulary as zeros; on one
    GPU it indexes the embedding out of bounds, a device error. The engine does the former
    (OUT_OF_VOCAB, which its model embeds as zeros): the request is served and counted, whatever
    the id, and nothing crashes."""
    return [i if 0 <= i < vocab_size else OUT_OF_VOCAB for i in ids]


def lora_path_field(value: Any) -> str | list | None:
    """The ``lora_path`` field once it has SGLang's type: a string, or a list of strings and nulls."""
    if value is None:
        return None
    expect("lora_path", value, (str, list), "a string or a list of strings")
    for adapter in value if isinstance(value, list) else ():
        if adapter is not None:
            expect("lora_path", adapter, (str,), "a string or a list of strings")
    return value


def check_no_lora(lora_path: str | list | None, error: type[RequestError] = Refused) -> None:
    """SGLang's refusal of any LoRA adapter on a server started without --enable-lora, which the
    engine is: it comes after the request's own checks and before its prompt is measured against
    the context. An empty name (or list) asks for none; a list names its first adapter."""
    if not lora_path:
        return
    first = lora_path if isinstance(lora_path, str) else next((a for a in lora_path if a), None)
    raise error(f"LoRA adapter '{first}' was requested, but LoRA is not enabled. Please launch the server with "
                "--enable-lora flag and preload adapters using --lora-paths or /load_lora_adapter endpoint.")


def admit(prompt_tokens: int, sampling: Sampling, *, vocab_size: int, context_length: int) -> Sampling:
    """What SGLang checks once a request's prompt is tokenized, in its order: its tokenizer
    manager's context refusals, then the sampling ranges (Sampling.verify), then its scheduler's
    limit. Returns the sampling with max_new_tokens as the scheduler cuts it."""
    check_context(prompt_tokens, sampling.max_new_tokens if sampling.context_checked else None, context_length)
    sampling.verify(vocab_size)
    return dataclasses.replace(sampling, max_new_tokens=schedule(prompt_tokens, sampling.max_new_tokens,
                                                                 context_length))


def check_context(prompt_tokens: int, max_new_tokens: int | None, context_length: int) -> None:
    """SGLang's tokenizer manager's two context-length refusals (see context_rule), in its words;
    the second only where the request named ``max_new_tokens`` (Sampling.context_checked)."""
    if prompt_tokens >= context_length:
        raise Refused(f"The input ({prompt_tokens} tokens) is longer than the model's context length "
                      f"({context_length} tokens).")
    if max_new_tokens is not None and prompt_tokens + max_new_tokens > context_length:
        raise Refused(
            f"Requested token count exceeds the model's maximum context length of {context_length} "
            f"tokens. You requested a total of {prompt_tokens + max_new_tokens} tokens: {prompt_tokens} tokens "
            f"from the input messages and {max_new_tokens} tokens for the completion. Please reduce the number "
            f"of tokens in the input messages or the completion to fit within the limit.")


def schedule(prompt_tokens: int, max_new_tokens: int, context_length: int) -> int:
    """SGLang's scheduler's limit (see context_rule): its refusal of a prompt too close to it, in
    its words, or max_new_tokens as it cuts it."""
    limit = context_rule.max_req_input_len(context_length)
    if prompt_tokens >= limit:
        raise InputTooLong(f"Input length ({prompt_tokens} tokens) exceeds the maximum allowed length ({limit} "
                           f"tokens). Use a shorter input or enable --allow-auto-truncate.")
    return context_rule.new_tokens_served(prompt_tokens, max_new_tokens, context_length)


#: The prompt SGLang's scheduler puts in place of one it refuses, which it prefills instead.
ABORT_STUB = (0,)


def scheduled(input_ids, sampling: Sampling, *, vocab_size: int, context_length: int
              ) -> tuple[tuple[int, ...], Sampling, dict | None]:
    """admit, then what SGLang's scheduler serves: the prompt, its sampling and no abort reason;
    or, for a prompt its scheduler refuses (InputTooLong), ABORT_STUB for one token and the abort
    reason the request finishes with once that token is out."""
    try:
        return tuple(input_ids), admit(len(input_ids), sampling, vocab_size=vocab_size,
                                       context_length=context_length), None
    except InputTooLong as exc:
        return ABORT_STUB, dataclasses.replace(sampling, max_new_tokens=1), exc.finish_reason()


# -- /abort_request --------------------------------------------------------------------------------

#: The finish reason SGLang's scheduler ends a running request with on /abort_request (FINISH_ABORT()):
#: no status, so an unstreamed request is answered 200 with it, as a stream's last event is.
ABORT_RUNNING = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
#: What SGLang's tokenizer manager answers for a request /abort_request took from the waiting queue.
ABORT_WAITING = {"type": "abort", "message": "Abort in waiting queue"}

def abort_not_an_object(value: Any) -> dict:
    """pydantic's error for an /abort_request body that is no object (SGLang validates AbortReq as a
    typed dict)."""
    return {"type": "dict_type", "loc": ("body",), "msg": "Input should be a valid dictionary", "input": value}


def parse_abort(body: dict, endpoint: str) -> tuple[str, bool]:
    """(rid, abort_all) of an /abort_request body, validated as FastAPI validates SGLang's AbortReq
    (pydantic's lax mode: abort_all may be 1 or "yes"; rid must be a string or null), its errors
    FastAPI's; the other names it declares are not read by the route, so they are not checked."""
    rid, errors = lax.errors("nullable[str]", body.get("rid"), ("body", "rid"))
    abort_all, refused = lax.errors("bool", body.get("abort_all", False), ("body", "abort_all"))
    errors += refused
    if errors:
        raise InvalidBody(validation_message(errors, endpoint))
    return rid or "", bool(abort_all)
