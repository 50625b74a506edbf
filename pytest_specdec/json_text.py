"""`json.loads` for the files a user or a crash can damage: every failure on bad text is a
`json.JSONDecodeError`, which each reader turns into a message naming its file.

The standard decoder raises other errors on text that no writer of ours produces but a hand edit
or damage can: RecursionError on arrays or objects nested some thousand deep, and ValueError on
an integer past Python's limit on digits (4300). Those would reach the user as tracebacks.
`problem` words a decode error for a message: the decoder's own ends some in "at", meant to be
followed by its position, and names no raw control character, the most common hand-edit fault.
"""

from __future__ import annotations

import json
from typing import Any

_INT_DIGITS = 300  # a float holds up to about 1.8e308
#: UTF-8 bytes with each ASCII digit made b"1" and every other byte b"0" (no byte of a multi-byte
#: character is an ASCII digit), in which a run of digits too long for a float is found in C
_DIGIT_MASK = bytes(0x31 if 0x30 <= b <= 0x39 else 0x30 for b in range(256))
_LONG_RUN = b"1" * (_INT_DIGITS + 1)


def parse_int(digits: str) -> int | float:
    """A JSON integer; one too long for a float reads as one (infinite, so each reader's check of
    its number refuses it) rather than raising past Python's digit limit."""
    return int(digits) if len(digits) <= _INT_DIGITS else float(digits)


def loads(text: str | bytes, **kwargs: Any) -> Any:
    """`json.loads(text, **kwargs)`, raising only JSONDecodeError for text that is no readable JSON
    (and what an `object_pairs_hook` raises).

    `parse_int` is given only to text with a run of digits too long for a float: a Python hook
    called for every integer (a journal's token ids, millions of them) halves the decoder's speed."""
    raw = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    if _LONG_RUN in raw.translate(_DIGIT_MASK):
        kwargs.setdefault("parse_int", parse_int)
    if isinstance(text, bytes):
        text = _utf8(text)
    try:
        return json.loads(text, **kwargs)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply to read", text, 0) from None


class RepeatedKey(ValueError):
    """A key an object of the text gives twice (`unique_keys`); `key` names it."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An `object_pairs_hook` refusing a key given twice in one object: JSON keeps the last without a
    word, so a hand-edited file would lose the first entry (another prompt, budget, figure)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise RepeatedKey(key)
        out[key] = value
    return out


#: The escape JSON has for each control character with one of its own (others are written \u00XX)
_ESCAPES = {"\t": ("tab", "\\t"), "\n": ("line feed", "\\n"), "\r": ("carriage return", "\\r"),
            "\b": ("backspace", "\\b"), "\f": ("form feed", "\\f"), "\0": ("NUL", "\\u0000")}


def problem(exc: json.JSONDecodeError) -> str:
    """What is wrong at `exc`'s position, without the position: each caller places that itself."""
    return raw_control(exc) or exc.msg.removesuffix(" at")  # "Unterminated string starting at", then where


def raw_control(exc: json.JSONDecodeError) -> str | None:
    """'a raw tab (U+0009) inside a string, ...: write it as \\t' where `exc` is a control character
    written as it is in a string (a tab typed into a hand-written prompt), else None."""
    char = exc.doc[exc.pos] if 0 <= exc.pos < len(exc.doc) else ""
    if not exc.msg.startswith("Invalid control character") or not char or ord(char) >= 0x20:
        return None
    name, escape = _ESCAPES.get(char, ("control character", f"\\u{ord(char):04x}"))
    return f"a raw {name} (U+{ord(char):04X}) inside a string, which JSON does not allow: write it as {escape}"


def _utf8(raw: bytes) -> str:
    """The text of bytes our writers wrote as UTF-8. `json.loads` would guess UTF-16 or UTF-32 from
    NUL bytes, and name that codec in its error for what is damage to a UTF-8 file."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        doc = exc.object.decode("utf-8", "replace")  # exc.object: the bytes after any BOM
        at = len(exc.object[:exc.start].decode("utf-8", "replace"))  # where the byte falls in `doc`
        raise json.JSONDecodeError(f"not UTF-8 text (byte {exc.object[exc.start]:#04x})", doc, at) from None
