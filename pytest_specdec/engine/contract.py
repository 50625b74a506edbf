"""SGLang's API contract check of a /generate body, in its words.

SGLang's /generate route, once FastAPI has validated the body as GenerateReqInput (pydantic's lax
mode), decodes the JSON as sent with the decoder generated from its API schema
(GenerateRequest.from_json_value) and answers the first violation with a 400 ``{"error": text}``.
That decoder is strict (``"yes"`` is no boolean, ``1`` no boolean, ``1.0`` no integer), walks an
object's keys in the order sent, ignores unknown top-level names, rejects unknown names inside
sampling_params (and a few nested objects), and words every refusal as serde does, without naming
the field: ``invalid type: string "x", expected f64``. A client that reads those texts (or a test
comparing the engine with SGLang) sees the same text here.

The schema is mirrored as data (decoders built from a few shapes below): the JSON types each name
is decoded as, and the ``expected`` words of each shape. tests/unit/test_sglang_contract.py feeds
the same bodies to SGLang's decoder and to ``generate_contract_error`` and requires the same text.
Values the schema types as any JSON (custom_params, session_params, a kv hint's payload) are not
walked, so a body nested however deep is checked without recursion into it.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

Decoder = Callable[[Any], None]


class ContractError(ValueError):
    """A violation of SGLang's API contract; its text is the decoder's."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def unexpected(v: Any) -> str:
    """serde's ``Unexpected`` display of a JSON value, as SGLang's decoder renders it."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean `{'true' if v else 'false'}`"
    if isinstance(v, int):
        return f"integer `{v}`"
    if isinstance(v, float):
        return f"floating point `{v}`"
    if isinstance(v, str):
        return f'string "{v}"'
    return {list: "sequence", dict: "map"}.get(type(v), type(v).__name__)


def invalid_type(v: Any, expected: str) -> ContractError:
    return ContractError(f"invalid type: {unexpected(v)}, expected {expected}")


def unknown_field(key: str, fields: tuple[str, ...]) -> ContractError:
    """serde's text for a name an object that rejects unknown names does not declare."""
    if not fields:
        return ContractError(f"unknown field `{key}`, there are no fields")
    if len(fields) == 1:
        return ContractError(f"unknown field `{key}`, expected `{fields[0]}`")
    if len(fields) == 2:
        return ContractError(f"unknown field `{key}`, expected `{fields[0]}` or `{fields[1]}`")
    return ContractError(f"unknown field `{key}`, expected one of {', '.join(f'`{f}`' for f in fields)}")


# -- shapes ----------------------------------------------------------------------------------------

def scalar(accepts: Callable[[Any], bool], expected: str) -> Decoder:
    def decode(v: Any) -> None:
        if not accepts(v):
            raise invalid_type(v, expected)
    return decode


def unsigned(expected: str) -> Decoder:
    """An integer that must not be negative (u32, u64): a negative one is an invalid value."""
    def decode(v: Any) -> None:
        if not _is_int(v):
            raise invalid_type(v, expected)
        if v < 0:
            raise ContractError(f"invalid value: integer `{v}`, expected {expected}")
    return decode


def nullable(item: Decoder) -> Decoder:
    def decode(v: Any) -> None:
        if v is not None:
            item(v)
    return decode


def seq(item: Decoder) -> Decoder:
    def decode(v: Any) -> None:
        if not isinstance(v, list):
            raise invalid_type(v, "a sequence")
        for e in v:
            item(e)
    return decode


def mapping(item: Decoder) -> Decoder:
    def decode(v: Any) -> None:
        if not isinstance(v, dict):
            raise invalid_type(v, "a map")
        for e in v.values():
            item(e)
    return decode


def one_or_list(one: Decoder, many: Decoder) -> Decoder:
    """One value (``one``, which checks its own type) or a list (``many``)."""
    def decode(v: Any) -> None:
        (many if isinstance(v, list) else one)(v)
    return decode


def flat_or_batch(name: str, is_flat_head: Callable[[Any], bool], flat: Decoder, batch: Decoder) -> Decoder:
    """``name``: a list, flat when empty or its first item passes ``is_flat_head``, else a batch."""
    def decode(v: Any) -> None:
        if not isinstance(v, list):
            raise invalid_type(v, f"a value or an array of values for {name}")
        (flat if not v or is_flat_head(v[0]) else batch)(v)
    return decode


def anything(v: Any) -> None:
    """A name the schema types as any JSON value."""


def struct(name: str, fields: Mapping[str, Decoder], deny_unknown: bool) -> Decoder:
    """A JSON object of ``fields``, read in the order sent; a name it does not declare is refused
    where ``deny_unknown``, ignored otherwise."""
    declared = tuple(fields)

    def decode(v: Any) -> None:
        if not isinstance(v, dict):
            raise invalid_type(v, f"struct {name}")
        for key, x in v.items():
            if key in fields:
                fields[key](x)
            elif deny_unknown:
                raise unknown_field(key, declared)
    return decode


def _typed(accepts: Callable[[Any], bool], name: str) -> Decoder:
    return scalar(accepts, f"a value or an array of values for {name}")


BOOL = scalar(lambda v: isinstance(v, bool), "a boolean")
I64 = scalar(_is_int, "i64")
F64 = scalar(_is_number, "f64")
STR = scalar(lambda v: isinstance(v, str), "a string")

STRINGS = seq(STR)
BOOLS = seq(BOOL)
I64S = seq(I64)
OPT_STRINGS = seq(nullable(STR))
OPT_I64S = seq(nullable(I64))
STRING_OR_LIST = one_or_list(_typed(lambda v: isinstance(v, str), "StringOrList"), STRINGS)
BOOL_OR_LIST = one_or_list(_typed(lambda v: isinstance(v, bool), "BoolOrList"), BOOLS)
I64_OR_LIST = one_or_list(_typed(_is_int, "Int64OrList"), I64S)
OPT_STRING_OR_LIST = one_or_list(_typed(lambda v: isinstance(v, str), "OptionalStringOrList"), OPT_STRINGS)
OPT_I64_OR_LIST = one_or_list(_typed(_is_int, "OptionalInt64OrList"), OPT_I64S)
TOKEN_IDS_OR_LIST = flat_or_batch("TokenIdsOrList", _is_number, I64S, seq(I64S))
STRING_LIST_OR_LIST = flat_or_batch("StringListOrList", lambda v: isinstance(v, str), STRINGS, seq(STRINGS))

WATERMARK = struct("WatermarkRequestConfig", {
    "enabled": nullable(BOOL), "key": nullable(STR), "context_window": nullable(I64),
}, deny_unknown=True)

#: SGLang's SamplingParams, in its declared order (the order its unknown-field text lists).
_SAMPLING: Mapping[str, Decoder] = {
    "max_new_tokens": nullable(I64), "stop": nullable(STRING_OR_LIST), "stop_token_ids": nullable(I64S),
    "stop_regex": nullable(STRING_OR_LIST), "temperature": nullable(F64), "top_p": nullable(F64),
    "top_k": nullable(I64), "min_p": nullable(F64), "frequency_penalty": nullable(F64),
    "presence_penalty": nullable(F64), "repetition_penalty": nullable(F64), "min_new_tokens": nullable(I64),
    "n": nullable(I64), "json_schema": nullable(STR), "regex": nullable(STR), "ebnf": nullable(STR),
    "structural_tag": nullable(STR), "ignore_eos": nullable(BOOL), "skip_special_tokens": nullable(BOOL),
    "spaces_between_special_tokens": nullable(BOOL), "no_stop_trim": nullable(BOOL),
    "stream_interval": nullable(I64), "logit_bias": nullable(mapping(F64)), "sampling_seed": nullable(I64),
    "custom_params": anything, "beam_width": nullable(I64), "watermark": nullable(WATERMARK),
    "choice": nullable(STRINGS),
}
SAMPLING_FIELD_NAMES = tuple(_SAMPLING)
SAMPLING_PARAMS = struct("SamplingParams", _SAMPLING, deny_unknown=True)


def _sampling_params_or_list(v: Any) -> None:
    if isinstance(v, list):
        seq(SAMPLING_PARAMS)(v)
    elif not isinstance(v, dict):
        raise invalid_type(v, "a value or an array of values for SamplingParamsOrList")
    else:
        SAMPLING_PARAMS(v)


MEDIA_REF = struct("MediaRef", {
    "url": STR, "detail": nullable(STR), "max_dynamic_patch": nullable(I64), "content_hash": nullable(STR),
    "min_pixels": nullable(I64), "max_pixels": nullable(I64), "total_max_pixels": nullable(I64),
    "fps": nullable(F64), "num_frames": nullable(I64), "min_frames": nullable(I64), "max_frames": nullable(I64),
    "max_tokens_per_frame": nullable(I64), "max_image_tokens": nullable(I64), "use_audio": nullable(BOOL),
    "image_grid_thw": nullable(seq(I64S)),
}, deny_unknown=True)


def _media_item(expected: str) -> Decoder:
    def decode(v: Any) -> None:
        if isinstance(v, dict):
            MEDIA_REF(v)
        elif not isinstance(v, str):
            raise invalid_type(v, expected)
    return decode


MEDIA_ITEMS = seq(nullable(_media_item("one of the MediaItem shapes")))


def _media_input(v: Any) -> None:
    if isinstance(v, list):
        (seq(nullable(MEDIA_ITEMS)) if v and isinstance(v[0], list) else MEDIA_ITEMS)(v)
    else:
        _media_item("one of the MediaInput shapes")(v)


KV_HINT_ACTION = struct("KvHintAction", {
    "action_id": STR, "action_type": STR, "action_version": STR, "payload": anything,
}, deny_unknown=False)
KV_HINTS_ENVELOPE = struct("KvHintsEnvelope", {
    "protocol_version": STR, "message_id": STR, "actions": nullable(seq(KV_HINT_ACTION)),
}, deny_unknown=False)


def _kv_hints_or_list(v: Any) -> None:
    if isinstance(v, list):
        seq(nullable(KV_HINTS_ENVELOPE))(v)
    elif not isinstance(v, dict):
        raise invalid_type(v, "a value or an array of values for KvHintsEnvelopeOrList")
    else:
        KV_HINTS_ENVELOPE(v)


IMAGES_CONFIG = struct("ImagesConfig", {"image_mode": nullable(STR), "prefix": STR}, deny_unknown=False)

#: SGLang's GenerateRequest: the names its schema declares (GenerateReqInput has more, which the
#: contract ignores) and how each is decoded; a name without ``nullable`` refuses null.
_GENERATE: Mapping[str, Decoder] = {
    "rid": nullable(STRING_OR_LIST), "text": nullable(STRING_OR_LIST), "input_ids": nullable(TOKEN_IDS_OR_LIST),
    "stream": nullable(BOOL), "sampling_params": nullable(_sampling_params_or_list),
    "return_logprob": nullable(BOOL_OR_LIST), "logprob_start_len": nullable(I64_OR_LIST),
    "top_logprobs_num": nullable(I64_OR_LIST), "token_ids_logprob": nullable(TOKEN_IDS_OR_LIST),
    "return_hidden_states": nullable(BOOL_OR_LIST), "return_text_in_logprobs": nullable(BOOL),
    "bootstrap_host": nullable(OPT_STRING_OR_LIST), "bootstrap_port": nullable(OPT_I64_OR_LIST),
    "bootstrap_room": nullable(OPT_I64_OR_LIST), "bootstrap_pair_key": nullable(OPT_STRING_OR_LIST),
    "decode_tp_size": nullable(OPT_I64_OR_LIST), "routed_dp_rank": nullable(I64),
    "disagg_prefill_dp_rank": nullable(I64), "image_data": nullable(_media_input),
    "mm_hashes": nullable(STRING_LIST_OR_LIST), "video_data": nullable(_media_input),
    "audio_data": nullable(_media_input), "extra_key": nullable(STRING_OR_LIST), "priority": nullable(I64),
    "cache_salt": nullable(STRING_OR_LIST), "require_reasoning": nullable(BOOL),
    "lora_path": nullable(OPT_STRING_OR_LIST), "session_params": anything,
    "kv_hints": nullable(_kv_hints_or_list), "routing_key": nullable(STR),
    "max_thinking_tokens": nullable(unsigned("u64")), "session_id": nullable(STR),
    "custom_logit_processor": nullable(OPT_STRING_OR_LIST), "custom_labels": nullable(mapping(STR)),
    "images_config": nullable(IMAGES_CONFIG), "return_prompt_token_ids": BOOL, "routed_experts_start_len": I64,
    "return_sampling_mask": nullable(BOOL_OR_LIST), "modalities": nullable(OPT_STRINGS),
}
GENERATE_FIELD_NAMES = tuple(_GENERATE)
GENERATE_REQUEST = struct("GenerateRequest", _GENERATE, deny_unknown=False)


def generate_contract_error(body: Any) -> str | None:
    """SGLang's text for the first contract violation of a parsed /generate body, or None."""
    try:
        GENERATE_REQUEST(body)
    except ContractError as exc:
        return str(exc)
    return None
