"""SGLang's chat message content parts as lax.py types, so a malformed part gets the validation 400
SGLang's FastAPI gives it (its errors, in their order, under their locs), before the engine reads
the parts: it reads a text part and refuses every other well-formed one (openai_api._message_text).

A content list is a list of SGLang's part union: text, thinking (exactly one of ``thinking`` and
``text``), image_url, video_url, audio (by URL, or inline, which its validator turns into an
audio_url part) and tool_reference, each a class with its own fields, constraints and validators,
mirrored below. tests/unit/test_sglang_contract.py checks them against SGLang's own classes.
"""

from __future__ import annotations

import math
from typing import Any

from . import lax

_TEXT = "ChatCompletionMessageContentTextPart"
_THINKING = "ChatCompletionMessageContentThinkingPart"
_AUDIO_URL, _AUDIO_INLINE = "ChatCompletionMessageContentAudioURLPart", "ChatCompletionMessageContentAudioInlinePart"
#: The thinking part's types, which SGLang's message classes take in assistant messages only.
THINKING_TYPES = ("thinking", "reasoning")
#: SGLang's content_hash form: this prefix and 64 hex digits.
CONTENT_HASH_PREFIX = "sha256:"
#: The MIME type SGLang's inline audio becomes in its data URI, by format.
AUDIO_MIME_TYPES = {"wav": "audio/wav", "mp3": "audio/mpeg"}


def _one_payload(part: dict) -> None:
    """The thinking part's validator: exactly one of thinking and text."""
    if (part.get("thinking") is None) == (part.get("text") is None):
        raise ValueError("thinking parts require exactly one of 'thinking' or 'text'")


def _detail(value: Any) -> Any:
    """The image URL's detail: its before-validator reads "default" as "auto"."""
    return lax.validate("nullable[literal['auto','low','high']]", "auto" if value == "default" else value)


def _content_hash(value: Any) -> Any:
    """The image URL's content_hash, read as a string, then checked as SGLang's validator does."""
    value = lax.validate("nullable[str]", value)
    if value is None:
        return None
    if not value.startswith(CONTENT_HASH_PREFIX):
        raise ValueError("content_hash must use the form 'sha256:<64 hex digits>'")
    digest = value[len(CONTENT_HASH_PREFIX):]
    if len(digest) != 64:
        raise ValueError("content_hash must contain exactly 64 SHA-256 hex digits")
    try:
        bytes.fromhex(digest)
    except ValueError:
        raise ValueError("content_hash contains non-hexadecimal characters") from None
    return CONTENT_HASH_PREFIX + digest.lower()


def _positive(spec: str, finite: bool = False):
    """An optional number with pydantic's ``gt=0`` (a float's, where ``finite``, with
    ``allow_inf_nan=False``; its bound a float then, as pydantic's error shows it)."""
    def check(value: Any) -> Any:
        number = lax.validate(spec, value)
        if number is None:
            return None
        if finite and not math.isfinite(number):
            raise lax.refusal("finite_number", "Input should be a finite number", value)
        if not number > 0:
            raise lax.refusal("greater_than", "Input should be greater than 0", value, gt=0.0 if finite else 0)
        return number
    return check


def _audio_url(part: dict) -> dict:
    """The audio union's validator: an inline part becomes the audio_url part of its data URI."""
    if part["type"] == "audio_url":
        return part
    audio = part["input_audio"]
    return {"type": "audio_url",
            "audio_url": {"url": f"data:{AUDIO_MIME_TYPES[audio['format']]};base64,{audio['data']}"}}


_OPT_INT = "nullable[int]"
_IMAGE_URL = lax.model("ChatCompletionMessageContentImageURL", {
    "url": "str", "detail": lax.checked("image_detail", _detail), "max_dynamic_patch": _OPT_INT,
    "min_dynamic_patch": _OPT_INT, "max_long_side_pixel": _OPT_INT,
    "content_hash": lax.checked("content_hash", _content_hash)}, required=("url",))
_VIDEO_URL = lax.model("ChatCompletionMessageContentVideoURL", {
    "url": "str", "max_dynamic_patch": _OPT_INT, "min_dynamic_patch": _OPT_INT,
    "fps": lax.checked("fps", _positive("nullable[float]", finite=True)),
    **{name: lax.checked(name, _positive(_OPT_INT)) for name in ("max_frames", "max_tokens_per_frame",
                                                                 "max_image_tokens")},
    "max_long_side_pixel": _OPT_INT}, required=("url",))
_AUDIO = lax.named("audio_part", f"function-after[_to_audio_url_part(), union[{_AUDIO_URL},{_AUDIO_INLINE}]]",
                   "union[" + lax.model(_AUDIO_URL, {
                       "type": "literal['audio_url']",
                       "audio_url": lax.model("ChatCompletionMessageContentAudioURL", {"url": "str"},
                                              required=("url",))}, required=("type", "audio_url"))
                   + "," + lax.model(_AUDIO_INLINE, {
                       "type": "literal['input_audio']",
                       "input_audio": lax.model("ChatCompletionMessageContentInputAudio", {
                           "data": "str", "format": "literal['wav','mp3']"}, required=("data", "format"))},
                       required=("type", "input_audio")) + "]", after=_audio_url)

#: SGLang's content part union, in its order.
PART = "union[" + ",".join([
    lax.model(_TEXT, {"type": "literal['text']", "text": "str"}, required=("type", "text")),
    lax.model(_THINKING, {"type": "literal['thinking','reasoning']", "thinking": "nullable[str]",
                          "text": "nullable[str]"}, required=("type",),
              wrapped=f"function-after[validate_payload(), {_THINKING}]", after=_one_payload),
    lax.model("ChatCompletionMessageContentImagePart", {
        "type": "literal['image_url']", "image_url": _IMAGE_URL,
        "modalities": "nullable[literal['image','multi-images','video']]"}, required=("type", "image_url")),
    lax.model("ChatCompletionMessageContentVideoPart", {"type": "literal['video_url']", "video_url": _VIDEO_URL},
              required=("type", "video_url")),
    _AUDIO,
    lax.model("ChatCompletionMessageContentToolReferenceBlock", {"type": "literal['tool_reference']", "name": "str"},
              required=("type", "name")),
]) + "]"
#: A message's content parts: a list of PART, as pydantic names that list in a loc.
PARTS = lax.named("parts", "list[union[" + ",".join(lax.loc_name(member) for member in lax.members(PART)) + "]]",
                  f"list[{PART}]")


def thinking_only_in(roles: tuple[str, ...]):
    """A message class's validator of its parts: a thinking part in a message whose role is not
    one of ``roles`` is refused."""
    def check(message: dict) -> None:
        content = message.get("content")
        if message.get("role") not in roles and isinstance(content, list) and any(
                part.get("type") in THINKING_TYPES for part in content):
            raise ValueError("thinking content parts are only valid in assistant messages")
    return check
