"""Workloads: which prompts are sent, how many at once, and with which sampling settings.

A `Workload` is plain data so that it can be parametrized, journaled and compared across runs.
Built-in sets (chat, code, math) ship as JSONL beside this module; user sets use the same
format, one `{"prompt": ..., "max_new_tokens": ...}` object per line. The context-length guard
runs before anything is sent: a prompt the server would reject or silently truncate would
otherwise show up as an aborted request or a misleadingly fast run.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from . import context_rule, json_text
from .errors import SpecdecUsageError
from .file_kind import link_fault_said, refuse_special
from .fingerprint import text_digest
from .relpaths import relative_path
from .sampling_rule import decodes_greedily
from .suggest import hint

BUILTIN_WORKLOADS = ("chat", "code", "math")

#: Default generation length per built-in set: long enough for several verify steps per request.
_BUILTIN_MAX_NEW_TOKENS = {"chat": 128, "code": 192, "math": 160}

_PROMPT_KEYS = frozenset({"prompt", "max_new_tokens"})


@dataclass(frozen=True)
class Prompt:
    """One prompt; `max_new_tokens` overrides the workload's for this prompt only."""

    text: str
    max_new_tokens: int | None = None


@dataclass(frozen=True)
class Workload:
    """N prompts sent at concurrency C with fixed sampling settings.

    `ignore_eos` defaults to True so every request generates exactly its max_new_tokens:
    throughput then compares like with like across methods and runs. `extra_sampling` holds
    further SGLang sampling_params (e.g. `("top_k", 1)`); SGLang rejects unknown keys, so only
    the ones given are sent.
    """

    name: str
    prompts: tuple[Prompt, ...]
    max_new_tokens: int = 128
    concurrency: int = 1
    temperature: float = 0.0
    ignore_eos: bool = True
    extra_sampling: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        prompts = tuple(p if isinstance(p, Prompt) else Prompt(str(p)) for p in self.prompts)
        object.__setattr__(self, "prompts", prompts)
        if isinstance(self.extra_sampling, Mapping):
            object.__setattr__(self, "extra_sampling", tuple(sorted(self.extra_sampling.items())))
        where = f"workload {self.name!r}"
        if not self.name:
            raise SpecdecUsageError("a workload needs a non-empty name")
        if not prompts:
            raise SpecdecUsageError(f"{where} has no prompts")
        _check_positive_int(self.max_new_tokens, f"{where}: max_new_tokens")
        _check_positive_int(self.concurrency, f"{where}: concurrency")
        for i, p in enumerate(prompts):
            if p.max_new_tokens is not None:
                _check_positive_int(p.max_new_tokens, f"{where}: prompt {i + 1} max_new_tokens")
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)) \
                or not math.isfinite(self.temperature) or self.temperature < 0:
            raise SpecdecUsageError(f"{where}: temperature must be a number >= 0, got {self.temperature!r}")
        reserved = {"max_new_tokens", "temperature", "ignore_eos"} & {k for k, _ in self.extra_sampling}
        if reserved:
            raise SpecdecUsageError(f"{where}: set {sorted(reserved)} as workload fields, not in extra_sampling")

    @property
    def greedy(self) -> bool:
        """Greedy decoding as SGLang decides it (a temperature below its epsilon, or top_k 1):
        acceptance figures are deterministic and gated tightly, and outputs are checked."""
        return decodes_greedily(self.temperature, dict(self.extra_sampling).get("top_k"))

    def max_new_tokens_for(self, index: int) -> int:
        override = self.prompts[index].max_new_tokens
        return self.max_new_tokens if override is None else override

    def sampling_params(self, index: int) -> dict[str, Any]:
        """SGLang `sampling_params` for prompt `index`."""
        params: dict[str, Any] = {
            "max_new_tokens": self.max_new_tokens_for(index),
            "temperature": self.temperature,
            "ignore_eos": self.ignore_eos,
        }
        params.update(self.extra_sampling)
        return params

    def replace(self, **changes: Any) -> "Workload":
        return dataclasses.replace(self, **changes)

    def resized(self, num_requests: int) -> "Workload":
        """The first `num_requests` prompts, cycling through the set when it is shorter."""
        _check_positive_int(num_requests, f"workload {self.name!r}: num_requests")
        n = len(self.prompts)
        return self.replace(prompts=tuple(self.prompts[i % n] for i in range(num_requests)))

    def fingerprint_part(self) -> dict[str, Any]:
        """What a fingerprint keeps of this workload: every field, the prompts as a digest."""
        return {**self.to_dict(), "prompts": text_digest(p.text for p in self.prompts),
                "prompt_max_new_tokens": [self.max_new_tokens_for(i) for i in range(len(self.prompts))]}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able description (for journals and reports), prompts counted, not copied."""
        return {
            "name": self.name,
            "num_prompts": len(self.prompts),
            "max_new_tokens": self.max_new_tokens,
            "concurrency": self.concurrency,
            "temperature": self.temperature,
            "ignore_eos": self.ignore_eos,
            "extra_sampling": dict(self.extra_sampling),
        }


def _check_positive_int(value: Any, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecdecUsageError(f"{what} must be a positive integer, got {value!r}")


# --------------------------------------------------------------------------------------------
# Loading


def _json_kind(value: Any) -> str:
    """A decoded JSON value's kind as JSON names it: the file holds an array, not a Python list."""
    if isinstance(value, bool) or value is None:
        return _json_shown(value)
    kinds = {list: "an array", str: "a string", int: "a number", float: "a number"}
    return kinds.get(type(value), type(value).__name__)


def _json_shown(value: Any) -> str:
    """A decoded JSON value as the file spells it (`true`, not Python's `True`)."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):  # an int past Python's digit limit: repr says what it can
        return repr(value)


def parse_prompt_lines(lines: Iterable[str], source: str) -> tuple[Prompt, ...]:
    """Parse JSONL prompt lines; errors name `source:line` and say what a line must look like."""
    prompts: list[Prompt] = []
    shape = 'each line must be a JSON object like {"prompt": "...", "max_new_tokens": 128}'
    for lineno, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        where = f"{source}:{lineno}"
        try:
            obj = json_text.loads(line, object_pairs_hook=json_text.unique_keys)
        except json_text.RepeatedKey as exc:  # JSON keeps the last silently: the run would send another prompt or budget
            raise SpecdecUsageError(f"{where}: {_json_shown(exc.key)} is given twice in one object, and JSON "
                                    f"keeps only the last; keep the one you mean") from None
        except json.JSONDecodeError as exc:
            control = json_text.raw_control(exc)  # the line's shape is right: only the character is to fix
            raise SpecdecUsageError(f"{where}: not valid JSON at column {exc.colno}: {control}" if control else
                                    f"{where}: not valid JSON ({json_text.problem(exc)} at column {exc.colno}); "
                                    f"{shape}") from None
        if not isinstance(obj, dict):
            raise SpecdecUsageError(f"{where}: expected a JSON object, got {_json_kind(obj)}; {shape}")
        unknown = set(obj) - _PROMPT_KEYS
        if unknown:
            raise SpecdecUsageError(f"{where}: unknown key(s) {sorted(unknown)}; {shape}")
        text = obj.get("prompt")
        if not isinstance(text, str) or not text.strip():
            raise SpecdecUsageError(f"{where}: \"prompt\" must be a non-empty string; {shape}")
        try:  # JSON's \ud800-style escapes can spell lone surrogates, which no tokenizer encodes
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise SpecdecUsageError(
                f"{where}: \"prompt\" holds {text[exc.start]!r} at character {exc.start + 1}, a lone "
                f"surrogate that is not valid Unicode text; fix the \\u escape (pair it or remove it)"
            ) from None
        max_new = obj.get("max_new_tokens")
        if max_new is not None and (isinstance(max_new, bool) or not isinstance(max_new, int) or max_new < 1):
            raise SpecdecUsageError(f"{where}: \"max_new_tokens\" must be a positive integer, got "
                                    f"{_json_shown(max_new)}")
        prompts.append(Prompt(text, max_new))
    if not prompts:
        raise SpecdecUsageError(f"{source}: no prompts found; {shape}")
    return tuple(prompts)


def load_jsonl(path: str | Path, *, name: str | None = None, shown: str | None = None,
               **fields: Any) -> Workload:
    """A workload from a JSONL prompt file; `fields` set the other `Workload` fields. Errors name
    the file as `shown` (the project-relative path a configured file has), else as `path`."""
    _check_fields(fields)
    path = Path(path)
    shown = shown or str(path)
    refuse_special(path, "workload file", shown=shown)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        broken = link_fault_said(path)
        if broken is not None:  # else "does not exist": the link, not the path, is what to fix
            raise SpecdecUsageError(f"workload file {shown} leads to no file: {broken}; repoint or remove the "
                                    f"link, or fix the path") from None
        if isinstance(exc, FileNotFoundError):
            raise SpecdecUsageError(f"workload file {shown} does not exist") from None
        raise SpecdecUsageError(f"workload file {shown} cannot be read ({exc.strerror or exc}); fix its "
                                f"permissions or the path") from None
    try:  # -sig: the byte order mark some editors write is not part of the first prompt
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = exc.object.count(b"\n", 0, exc.start) + 1
        raise SpecdecUsageError(f"{shown}:{line}: not UTF-8 (byte {exc.object[exc.start]:#04x}); save the "
                                f"file as UTF-8") from None
    prompts = parse_prompt_lines(text.split("\n"), shown)  # JSON strings may hold U+2028 and U+0085
    return Workload(name=name or path.stem, prompts=prompts, **fields)


#: A keyword the builders take from their set or file, or a `[[tool.specdec.workloads]]` key no
#: `Workload` holds: where to set it instead.
_ENTRY_ONLY = {
    "warmup_requests": "a workload built in code takes the run-wide warm-up: set --specdec-warmup-requests "
                       "(ini specdec_warmup_requests, [tool.specdec] warmup_requests), or give the workload a "
                       "[[tool.specdec.workloads]] entry with its own warmup_requests",
    "num_prompts": "take that many prompts with .resized(N)",
    "name": "name the built workload with .replace(name=...)",
    "prompts": "the prompts are the set's or the file's; build a Workload(name, prompts) for others",
}


def _check_fields(fields: Mapping[str, Any]) -> None:
    """A keyword no `Workload` field takes, in one line naming the fields it takes (a TypeError
    from the dataclass would name its __init__, not the call the user wrote)."""
    known = [f.name for f in dataclasses.fields(Workload) if f.name not in ("name", "prompts")]
    for key in fields:
        if key not in known:
            fix = _ENTRY_ONLY.get(key) or hint(key, known)
            raise SpecdecUsageError(f"{key!r} is not a Workload field; {fix}")


def builtin_workload(name: str, **fields: Any) -> Workload:
    """One of the shipped prompt sets (`chat`, `code`, `math`)."""
    if name not in BUILTIN_WORKLOADS:
        raise SpecdecUsageError(
            f"unknown built-in workload {name!r}: choose one of {', '.join(BUILTIN_WORKLOADS)} or give a .jsonl path"
        )
    _check_fields(fields)
    resource = resources.files(__package__).joinpath("prompts", f"{name}.jsonl")
    prompts = parse_prompt_lines(resource.read_text(encoding="utf-8").split("\n"), f"<built-in {name}.jsonl>")
    fields.setdefault("max_new_tokens", _BUILTIN_MAX_NEW_TOKENS[name])
    return Workload(name=name, prompts=prompts, **fields)


def configured_workload(spec: Any, base_dir: str | Path | None = None) -> Workload:
    """The workload a `[[tool.specdec.workloads]]` entry (a `WorkloadSpec`) describes, its
    prompt file read and checked: built once at configure time, so a bad file stops the run
    before any server boots."""
    return load_workload(
        spec.prompts, base_dir=base_dir, max_new_tokens=spec.max_new_tokens,
        concurrency=spec.concurrency, temperature=spec.temperature,
    ).resized(spec.num_prompts).replace(name=spec.name)


def load_workload(spec: str, *, base_dir: str | Path | None = None, **fields: Any) -> Workload:
    """A built-in name or a path to a JSONL file (relative paths resolve against `base_dir`)."""
    if spec in BUILTIN_WORKLOADS:
        _check_fields(fields)  # before the call, where a name= would clash with its own
        return builtin_workload(spec, **fields)
    path = Path(spec)
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    if path.suffix != ".jsonl" and not path.exists() and link_fault_said(path) is None:  # load_jsonl names a link
        from .suggest import closest

        meant = closest(spec, BUILTIN_WORKLOADS) if "/" not in spec and not path.suffix else None
        raise SpecdecUsageError(
            f"workload {spec!r} is neither a built-in ({', '.join(BUILTIN_WORKLOADS)}) nor an existing .jsonl file"
            + (f"; did you mean the built-in {meant!r}?" if meant else "")
        )
    # named as the config errors name files: relative to the project where inside it
    shown = relative_path(path, base_dir) if base_dir is not None else None
    return load_jsonl(path, shown=shown, **fields)


# --------------------------------------------------------------------------------------------
# Context-length guard


class ContextLengthError(SpecdecUsageError):
    """A prompt plus its generation budget does not fit the server's context. `room`: whether a
    cut prompt would fit (so `truncate = true` is a fix); without it only the budget or the
    context can change. `index` is the prompt's position in the workload, from 0; the message
    counts from 1, as every message does (and a prompt file's line numbers)."""

    def __init__(self, workload: str, index: int, prompt_tokens: int, max_new_tokens: int, context_length: int,
                 *, room: bool = True):
        self.workload = workload
        self.index = index
        self.prompt_tokens = prompt_tokens
        self.max_new_tokens = max_new_tokens
        self.context_length = context_length
        total = prompt_tokens + max_new_tokens
        context = (f"raise the server's --context-length to at least "
                   f"{context_rule.context_needed(prompt_tokens, max_new_tokens)} (in extra_args of "
                   f"[tool.specdec.engine] or [tool.specdec.sglang])")
        fixes = (f"shorten the prompt, lower max_new_tokens, {context}, or set truncate = true in the "
                 f"workload's [[tool.specdec.workloads]] entry to cut its prompts to fit") if room else (
                 f"lower max_new_tokens ({max_new_tokens} of them leave no room for a prompt in a context "
                 f"of {context_length}), or {context}")
        super().__init__(
            f"workload {workload!r}, prompt {index + 1}: {prompt_tokens} prompt tokens + {max_new_tokens} "
            f"max_new_tokens = {total}, but the server (context length {context_length}) serves a request in "
            f"full only up to {context_length - 2} tokens, with a prompt of at most "
            f"{context_rule.max_req_input_len(context_length) - 1}; {fixes}"
        )


def embedded_token_count(text: str) -> int:
    """Tokens of `text` as the embedded engine counts them: its BOS plus one per UTF-8 byte."""
    from .engine.tokenizer import ByteTokenizer  # plain Python: no torch behind it

    return len(ByteTokenizer().encode(text))


#: Prefixes a truncation's search measures per round when the counter counts a list at once
#: (a server's endpoint, one request per round): the range shrinks 17-fold a round, not 2-fold.
BATCH_FANOUT = 16


def count_all(count_tokens: Callable[[str], int], texts: Sequence[str]) -> list[int]:
    """Each text's count: in one call where the counter has `count_many(texts)` (one request to a
    server for the list), else one call per text."""
    count_many = getattr(count_tokens, "count_many", None)
    return list(count_many(texts)) if count_many is not None else [count_tokens(t) for t in texts]


def fit_to_context(
    workload: Workload,
    context_length: int,
    count_tokens: Callable[[str], int] = embedded_token_count,
    *,
    truncate: bool = False,
) -> Workload:
    """Check every prompt + max_new_tokens against the server's context length.

    Every request must be one SGLang (and the embedded engine) serves in full: neither refused
    nor with its max_new_tokens cut (context_rule.fits), its prompt counted with the
    special tokens the server's tokenizer adds (`count_tokens` must be that tokenizer, or a
    faithful stand-in: a guess here only moves the failure to the server). A counter with a
    `count_many(texts)` method (a server's tokenize endpoint) is asked for the whole workload at
    once and for BATCH_FANOUT prefixes per round of a truncation's search.

    Raises `ContextLengthError` naming the first offending prompt, or, with `truncate=True`,
    returns a workload whose offending prompts are cut (keeping their beginning) to the longest
    prefix that fits.
    """
    _check_positive_int(context_length, "context_length")
    prompts = list(workload.prompts)
    counts = count_all(count_tokens, [p.text for p in prompts])
    changed = False
    for i, (prompt, n) in enumerate(zip(prompts, counts)):
        budget = workload.max_new_tokens_for(i)
        if context_rule.fits(n, budget, context_length):
            continue
        allowed = context_rule.max_prompt_tokens(budget, context_length)
        cut = _longest_prefix(prompt.text, allowed, count_tokens) if allowed > 0 else ""
        if not cut or not truncate:
            raise ContextLengthError(workload.name, i, n, budget, context_length, room=bool(cut))
        prompts[i] = Prompt(cut, prompt.max_new_tokens)
        changed = True
    return workload.replace(prompts=tuple(prompts)) if changed else workload


def _longest_prefix(text: str, max_tokens: int, count_tokens: Callable[[str], int]) -> str:
    """A search over character prefixes (token counts are monotone in the prefix length): binary,
    or BATCH_FANOUT-ary for a counter that counts a list at once. The prefix returned was counted
    to fit (or is empty)."""
    fanout = BATCH_FANOUT if getattr(count_tokens, "count_many", None) is not None else 1
    lo, hi = 0, len(text)
    while lo < hi:
        # fanout points splitting (lo, hi] evenly; with fanout 1, the binary search's midpoint
        cuts = sorted({lo + ((hi - lo) * j + fanout) // (fanout + 1) for j in range(1, fanout + 1)})
        counts = count_all(count_tokens, [text[:c] for c in cuts])
        fits = [c for c, n in zip(cuts, counts) if n <= max_tokens]
        over = [c for c, n in zip(cuts, counts) if n > max_tokens]
        lo = max(fits, default=lo)
        hi = min(over, default=hi + 1) - 1
    return text[:lo]


__all__ = [
    "BUILTIN_WORKLOADS",
    "ContextLengthError",
    "Prompt",
    "Workload",
    "builtin_workload",
    "embedded_token_count",
    "configured_workload",
    "count_all",
    "fit_to_context",
    "load_jsonl",
    "load_workload",
    "parse_prompt_lines",
]
