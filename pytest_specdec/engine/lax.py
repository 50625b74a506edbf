"""pydantic's lax-mode validation of the JSON types SGLang's request classes give their fields, so
the engine reads a body as SGLang's FastAPI does before SGLang's code sees it: ``"max_tokens": "4"``,
``2.0`` or ``true`` is the integer it reads, ``"stream": "yes"`` is true, and a value pydantic
refuses is its error, as its validation handler lists it (protocol.RequestModel).

A type is written as pydantic names it in an error's loc: ``int``, ``float``, ``bool``, ``str``,
``list`` (items unchecked), ``list[T]``, ``dict[str,T]`` (a JSON object, its values of type T),
``nullable[T]`` (Optional), ``union[A,B]`` (one error per member, the member's name in the loc),
``literal['a','b']``, ``any`` (Any: whatever the JSON holds), ``model[Name]`` (a nested class,
whose fields ``model`` registers: an object, its fields read, a required one left out refused,
its other names dropped), ``named[key]`` (a type pydantic names otherwise in a loc, see ``named``)
and ``checked[key]`` (a field validator of pydantic's "before" mode that replaces the type's
reading, see ``checked``). pydantic is not a dependency of the engine, so these few rules are
written out here; tests/unit/test_sglang_contract.py checks them against SGLang's own classes.
"""

from __future__ import annotations

import math
import re
from functools import cache
from typing import Any, Callable

#: The strings pydantic's lax mode reads as a boolean (any case, no blanks around them).
TRUE_WORDS = frozenset({"1", "on", "t", "true", "y", "yes"})
FALSE_WORDS = frozenset({"0", "off", "f", "false", "n", "no"})
#: An integer's text as pydantic reads it besides Python's int(): a fraction of zeros.
_INTEGRAL_TEXT = re.compile(r"([+-]?\d[\d_]*)\.0*")
#: pydantic reads a float as an integer only inside a 64-bit one (and an integer as a boolean's number).
_I64 = 2.0**63


#: The nested classes a type may name (``model[Name]``): each field's type, in the class's order.
MODELS: dict[str, dict[str, str]] = {}
#: Each class's fields without a default, which pydantic refuses to leave out.
REQUIRED: dict[str, frozenset[str]] = {}
#: A class's name in a union's loc where a validator wraps it (function-after[...]).
WRAPPED: dict[str, str] = {}
#: A class's own before-validator of an object, as far as it changes what an error echoes.
BEFORE: dict[str, Callable[[dict], dict]] = {}
#: ``named[key]``: (the type's name in a loc, the type read).
NAMED: dict[str, tuple[str, str]] = {}
#: ``checked[key]``: the validator that reads the value in the type's place.
CHECKED: dict[str, Callable[[Any], Any]] = {}
#: A class's (by name) or a ``named`` type's (by key) own after-validator of the value it read.
AFTER: dict[str, Callable[[Any], Any]] = {}


def model(name: str, fields: dict[str, str], *, required: tuple[str, ...] = (), wrapped: str | None = None,
          before: Callable[[dict], dict] | None = None, after: Callable[[dict], Any] | None = None) -> str:
    """Register a nested class and return its type as written: ``required`` are its fields
    without a default, ``wrapped`` its name in a union's loc where a validator wraps it,
    ``before`` its own before-validator of an object, ``after`` its own after-validator of the
    fields it read (see _after)."""
    MODELS[name], REQUIRED[name] = dict(fields), frozenset(required)
    if wrapped is not None:
        WRAPPED[name] = wrapped
    if before is not None:
        BEFORE[name] = before
    if after is not None:
        AFTER[name] = after
    return f"model[{name}]"


def named(key: str, loc_name: str, spec: str, *, after: Callable[[Any], Any] | None = None) -> str:
    """A type read as ``spec`` that pydantic names ``loc_name`` in a union's loc (a list of a
    union the engine does not read item by item, or a type an after-validator wraps: ``after``,
    see _after)."""
    NAMED[key] = (loc_name, spec)
    if after is not None:
        AFTER[key] = after
    return f"named[{key}]"


def refusal(kind: str, msg: str, value: Any, **ctx: Any) -> Exception:
    """pydantic's error of a constraint, for a ``checked`` validator to raise in its own words
    (``greater_than``, say) rather than as a value_error."""
    return _Refused([_error(kind, msg, value, **ctx)])


def _after(key: str, read: Any, given: Any) -> Any:
    """The after-validator of ``key`` run on the value read: the value it returns (None keeps
    it), or its ValueError as pydantic words it, echoing the value given."""
    try:
        out = AFTER[key](read)
    except ValueError as exc:
        raise _Refused([_error("value_error", f"Value error, {exc}", given, error=exc)]) from None
    return read if out is None else out


def checked(key: str, check: Callable[[Any], Any]) -> str:
    """A field whose own before-validator reads the value in its type's place: ``check`` returns
    the value read or raises ValueError, which pydantic words as a value_error."""
    CHECKED[key] = check
    return f"checked[{key}]"


def loc_name(spec: str) -> str:
    """How pydantic names the type ``spec`` in a union's loc."""
    return _parse(spec)[1]


def members(spec: str) -> tuple[str, ...]:
    """The members of a union type as written."""
    kind, _, arg = _parse(spec)
    if kind != "union":
        raise ValueError(f"not a union: {spec!r}")
    return arg


def _integral(value: Any) -> bool:
    """A float pydantic reads as an integer (see _int)."""
    return isinstance(value, float) and value.is_integer() and abs(value) < _I64


class _Refused(Exception):
    """The pydantic errors of a value (their locs relative to it)."""

    def __init__(self, errors: list[dict]):
        super().__init__(errors)
        self.errors = errors


def _error(kind: str, msg: str, value: Any, loc: tuple = (), **ctx: Any) -> dict:
    error = {"type": kind, "loc": loc, "msg": msg, "input": value}
    return {**error, "ctx": ctx} if ctx else error


def _split(inner: str) -> list[str]:
    """The comma-separated members of ``inner``, brackets and quotes respected."""
    parts, depth, quote, start = [], 0, None, 0
    for i, c in enumerate(inner):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    return [*parts, inner[start:]]


@cache
def _parse(spec: str) -> tuple[str, str, Any]:
    """(kind, the type's name, its argument) of a type as written (see the module docstring)."""
    head, _, rest = spec.partition("[")
    arg = rest[:-1]
    if head in ("int", "float", "bool", "str", "any") or spec == "list":
        return head, spec, None
    if head == "model":
        return head, WRAPPED.get(arg, arg), arg  # pydantic names a class by its own name, or its wrapper's
    if head == "named":
        return head, NAMED[arg][0], NAMED[arg][1]
    if head == "checked":
        return head, spec, arg
    if head == "dict":
        return head, spec, _split(arg)[1]  # a JSON object's keys are strings: only its values are read
    if head in ("list", "nullable"):
        return head, spec, arg
    if head == "union":
        return head, spec, tuple(_split(arg))
    if head == "literal":
        return head, spec, tuple(_literal(a) for a in _split(arg))
    raise ValueError(f"no lax rule for the type {spec!r}")


def _literal(text: str) -> Any:
    """A literal's member as written (a quoted string)."""
    return text.strip()[1:-1] if text.strip()[:1] in "'\"" else int(text)


def validate(spec: str, value: Any) -> Any:
    """The value pydantic's lax mode makes of ``value`` for the type ``spec``, or _Refused."""
    return _validate(spec, value, strict=False)


def errors(spec: str, value: Any, loc: tuple) -> tuple[Any, list[dict]]:
    """(the value as read, []) or (None, pydantic's errors for it, under ``loc``)."""
    try:
        return validate(spec, value), []
    except _Refused as exc:
        return None, [{**e, "loc": (*loc, *e["loc"])} for e in exc.errors]


def _validate(spec: str, value: Any, *, strict: bool) -> Any:
    kind, name, arg = _parse(spec)
    if kind == "nullable":
        return None if value is None else _validate(arg, value, strict=strict)
    if kind == "union":
        return _union(arg, value, strict=strict)
    if kind == "literal":
        if any(type(value) is type(a) and value == a for a in arg):
            return value
        expected = " or ".join(repr(a) for a in arg) if len(arg) < 3 else (
            ", ".join(repr(a) for a in arg[:-1]) + f" or {arg[-1]!r}")
        raise _Refused([_error("literal_error", f"Input should be {expected}", value, expected=expected)])
    if kind == "any":
        return value
    if kind == "named":
        read = _validate(arg, value, strict=strict)
        key = spec[len("named["):-1]
        return _after(key, read, value) if key in AFTER else read
    if kind == "checked":
        try:
            return CHECKED[arg](value)
        except ValueError as exc:
            raise _Refused([_error("value_error", f"Value error, {exc}", value, error=exc)]) from None
    if kind == "model":
        if not isinstance(value, dict):
            raise _Refused([_error("model_type", f"Input should be a valid dictionary or instance of {arg}", value,
                                   class_name=arg)])
        read = _fields(arg, BEFORE[arg](dict(value)) if arg in BEFORE else value, strict=strict)
        return _after(arg, read, value) if arg in AFTER else read
    if kind == "dict":
        if not isinstance(value, dict):
            raise _Refused([_error("dict_type", "Input should be a valid dictionary", value)])
        return dict(zip(value, _each([(key, arg, item) for key, item in value.items()], strict=strict)))
    if kind == "list":
        if not isinstance(value, list):
            raise _Refused([_error("list_type", "Input should be a valid list", value)])
        if arg is None:
            return value
        return _each([(i, arg, item) for i, item in enumerate(value)], strict=strict)
    return _SCALARS[kind](value, strict)


def _fields(name: str, value: dict, *, strict: bool) -> dict:
    """A class's fields given in ``value``, each read, and a required one left out refused, all in
    the class's order."""
    out, errs = {}, []
    for field, spec in MODELS[name].items():
        if field not in value:
            if field in REQUIRED[name]:
                errs.append(_error("missing", "Field required", value, (field,)))
            continue
        try:
            out[field] = _validate(spec, value[field], strict=strict)
        except _Refused as exc:
            errs += [{**e, "loc": (field, *e["loc"])} for e in exc.errors]
    if errs:
        raise _Refused(errs)
    return out


def _each(items: list[tuple[Any, Any, Any]], *, strict: bool) -> list[Any]:
    """Each (loc, spec, value) of an object, a dict or a list read as its spec reads it; refused,
    every item's errors, each under its loc."""
    out, errs = [], []
    for loc, spec, item in items:
        try:
            out.append(_validate(spec, item, strict=strict))
        except _Refused as exc:
            errs += [{**e, "loc": (loc, *e["loc"])} for e in exc.errors]
    if errs:
        raise _Refused(errs)
    return out


def _union(members: tuple[str, ...], value: Any, *, strict: bool) -> Any:
    """pydantic's smart union: the first member that takes the value strictly, else the first that
    takes it laxly; refused, each member's errors under its name."""
    for mode in ((True,) if strict else (True, False)):
        for member in members:
            try:
                return _validate(member, value, strict=mode)
            except _Refused:
                pass
    errs = []
    for member in members:
        try:
            _validate(member, value, strict=strict)
        except _Refused as exc:
            errs += [{**e, "loc": (_parse(member)[1], *e["loc"])} for e in exc.errors]
    raise _Refused(errs)


def _int(value: Any, strict: bool) -> int:
    if type(value) is int:
        return value
    if not strict:
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, float):
            if not math.isfinite(value):
                raise _Refused([_error("finite_number", "Input should be a finite number", value)])
            if value.is_integer() and abs(value) < _I64:
                return int(value)
            if value.is_integer():
                raise _Refused([_error("int_parsing_size", "Unable to parse input string as an integer, exceeded "
                                       "maximum size", value)])
            raise _Refused([_error("int_from_float", "Input should be a valid integer, got a number with a "
                                   "fractional part", value)])
        if isinstance(value, str):
            text = value.strip()
            match = _INTEGRAL_TEXT.fullmatch(text)
            try:
                return int(match.group(1) if match else text)
            except ValueError:
                raise _Refused([_error("int_parsing", "Input should be a valid integer, unable to parse string "
                                       "as an integer", value)]) from None
    raise _Refused([_error("int_type", "Input should be a valid integer", value)])


def _float(value: Any, strict: bool) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if not strict:
        if isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise _Refused([_error("float_parsing", "Input should be a valid number, unable to parse "
                                       "string as a number", value)]) from None
    raise _Refused([_error("float_type", "Input should be a valid number", value)])


def _bool(value: Any, strict: bool) -> bool:
    if isinstance(value, bool):
        return value
    if not strict:
        if isinstance(value, (int, float)) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.lower() in TRUE_WORDS | FALSE_WORDS:
            return value.lower() in TRUE_WORDS
        if isinstance(value, str) or (isinstance(value, int) and abs(value) < _I64) or _integral(value):
            raise _Refused([_error("bool_parsing", "Input should be a valid boolean, unable to interpret input",
                                   value)])
    raise _Refused([_error("bool_type", "Input should be a valid boolean", value)])


def _str(value: Any, strict: bool) -> str:
    if isinstance(value, str):
        return value
    raise _Refused([_error("string_type", "Input should be a valid string", value)])


_SCALARS = {"int": _int, "float": _float, "bool": _bool, "str": _str}
