"""The losslessness guard: greedy speculative decoding must reproduce the target's own output.

A verify step that keeps one draft token the target would not have chosen still produces
plausible text and a fine acceptance length; only a comparison with the target's own greedy
output shows it. The reference configuration (a matrix method, `ar` by default) runs the same
prompts; every speculative configuration's outputs are compared with it token by token, through
the HTTP API alone (SGLang's `output_ids`, the text where a server streams only deltas).

Collection runs each reference configuration before the configurations held to it, so in one
process a speculative configuration's own test is checked as it runs. Under xdist configurations
run side by side on different workers, and a resumed run may measure the reference after the
configurations it resumes, so outputs also travel in each test's `Result` through the shared
journal: a speculative configuration measured after its reference is checked at once; one
measured before is checked when the reference arrives, and that test fails naming it. `compare` works for any pair of configurations (e.g. a hybrid
model's speculative preset against its own autoregressive one).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .configuration import MatrixCase
from .options import OPTIONS_BY_NAME
from .token_ids import TokenIds

if TYPE_CHECKING:
    from .state import RunState

MODES = ('"exact"', '"prefix:N"', '"off"')
CONTEXT_TOKENS = 6  # tokens of each continuation a failure message shows
#: A reference margin (its top two tokens' log-probability difference) below this is a near-tie:
#: bf16 logits in [8, 16) sit on a 0.0625 grid, so a batch size or kernel change moves a
#: difference of two of them by about that much and can flip the greedy choice.
NEAR_TIE = 0.1
REPLACEMENT = "\ufffd"  # what a text decoder makes of bytes that complete no character


@dataclass(frozen=True)
class Exactness:
    """How much of each output must match: all of it, its first `prefix` tokens, or nothing."""

    mode: str  # "exact" | "prefix" | "off"
    prefix: int | None = None

    def __str__(self) -> str:
        return f"prefix:{self.prefix}" if self.mode == "prefix" else self.mode

    @property
    def on(self) -> bool:
        return self.mode != "off"


def parse_exactness(text: str) -> Exactness:
    """`exact`, `prefix:N` (N >= 1) or `off`; a ValueError names the accepted forms."""
    value = text.strip().lower()
    if value in ("exact", "off"):
        return Exactness(value)
    match = re.fullmatch(r"prefix:(\d+)", value)
    if match and int(match.group(1)) >= 1:
        return Exactness("prefix", int(match.group(1)))
    if value.startswith("prefix:"):  # the form is right, its N is not
        raise ValueError(f"{text!r}: N of prefix:N counts the leading tokens that must match, a whole "
                         f"number 1 or more (e.g. prefix:32); use {', '.join(MODES)}")
    from .suggest import closest

    word, colon, count = value.partition(":")
    meant = closest(word, ("exact", "prefix", "off"))  # prefx:32 as well as exat
    if meant == "prefix":
        meant += f":{count}" if colon and count else ":N"  # prefix alone lacks its N
    fix = f"did you mean \"{meant}\"?" if meant else f"use {', '.join(MODES)}"
    raise ValueError(f"{text!r} is not a losslessness mode; {fix}")


@dataclass(frozen=True)
class Outputs:
    """What a configuration generated for each prompt of a workload, in prompt order.

    `tokens[i]` is None where the server did not send prompt i's token ids (then its text is
    compared, character by character). `spans` = (N, characters of each text's first N tokens,
    None where not counted) is where `prefix:N` cuts such a text: counted at measurement by the
    server's tokenizer, as the text holds no token boundaries (None: not counted). `margins[i][j]`
    is how far the server's top choice at output token j of prompt i led its second one in
    log-probability (SGLang's `output_top_logprobs`, asked of the reference only; None where not
    asked or not sent; None at a token whose second choice had no finite log-probability): at a
    divergence it tells a near-tie a kernel can flip from a real one.
    `prompt_tokens[i]` is prompt i's length as its server
    counted it (None where it did not say; the whole field None in records of earlier
    releases): a workload with `truncate = true` cuts a prompt to each server's context length,
    so two configurations may have continued different prompts, whose outputs prove nothing.

    `tokens` may be given as any sequences; they are held as `TokenIds` (one flat array), as
    every greedy test's outputs stay in memory to the run's end.
    """

    tokens: TokenIds
    texts: tuple[str, ...]
    prompt_tokens: tuple[int | None, ...] | None = None
    spans: tuple[int, tuple[int | None, ...]] | None = None
    margins: tuple[tuple[float | None, ...] | None, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokens", TokenIds.of(self.tokens))  # frozen: set once, here

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"tokens": self.tokens.to_json(),
                               "texts": list(self.texts)}
        if self.prompt_tokens is not None:
            obj["prompt_tokens"] = list(self.prompt_tokens)
        if self.spans is not None:
            obj["spans"] = {"tokens": self.spans[0], "chars": list(self.spans[1])}
        if self.margins is not None and any(m is not None for m in self.margins):
            obj["margins"] = [None if m is None else [_stored(x) for x in m] for m in self.margins]
        return obj

    def margin(self, index: int, position: int) -> float | None:
        """Prompt `index`'s margin at output token `position` (from 0), where the server sent it."""
        if self.margins is None or index >= len(self.margins):
            return None
        held = self.margins[index]
        return None if held is None or position >= len(held) else held[position]

    def span(self, index: int, prefix: int) -> int | None:
        """Characters of text `index`'s first `prefix` tokens, where counted for that N."""
        if self.spans is None or self.spans[0] != prefix or index >= len(self.spans[1]):
            return None
        return self.spans[1][index]

    @classmethod
    def from_json(cls, obj: Mapping[str, Any] | None) -> Outputs | None:
        if not obj:
            return None
        sizes, spans, margins = obj.get("prompt_tokens"), obj.get("spans"), obj.get("margins")
        return cls(TokenIds.of(None if t is None else (int(i) for i in t) for t in obj["tokens"]),
                   tuple(str(s) for s in obj["texts"]),
                   None if sizes is None else tuple(None if n is None else int(n) for n in sizes),
                   None if not spans else (int(spans["tokens"]),
                                           tuple(None if c is None else int(c) for c in spans["chars"])),
                   None if not margins else tuple(None if m is None else tuple(None if x is None else float(x)
                                                                               for x in m)
                                                  for m in margins))


def _stored(margin: float | None) -> float | None:
    """`margin` as a record holds it: to 5 decimals, unless rounding would carry it across
    NEAR_TIE (0.0999996 is a near-tie, 0.1 is not), so every path that reads it back (a late
    verdict, a resume, a merge) says what the run that measured it said."""
    if margin is None:
        return None
    rounded = round(margin, 5)
    return rounded if (rounded < NEAR_TIE) == (margin < NEAR_TIE) else margin


@dataclass(frozen=True)
class Divergence:
    """The first place a configuration's output leaves the reference's.

    `prompt` and `position` are indices from 0; the message counts both from 1 (prompt 1, its
    token 1), as every message does, so `prefix:N`'s last compared token is token N."""

    config: str
    reference: str
    prompt: int
    position: int
    unit: str  # "token", "character", or "prompt" where the numbers of outputs differ
    expected: Sequence[Any]  # the reference's continuation from there
    got: Sequence[Any]  # the configuration's
    prompts_differing: int
    prompts: int
    #: (the configuration's, the reference's) number of outputs where they differ: then the
    #: prompts past the shorter list could not be compared, and nothing else is said
    counts: tuple[int, int] | None = None
    #: (the configuration's, the reference's) prompt tokens of prompt `prompt` where they differ:
    #: they continued different prompts, so the outputs could not be compared
    prompt_sizes: tuple[int, int] | None = None
    #: how `prefix:N` cut a text compared by characters (no token ids), for the message
    span: str | None = None
    #: the reference's top-two log-probability difference at the divergent token (None: not asked)
    margin: float | None = None
    #: the switch that would have asked for `margin`, where the backend serves it but the run did
    #: not ask (`margins_switch`): the message says a rerun with it tells a near-tie
    margins_switch: str | None = None

    def message(self) -> str:
        """`ddtree-tp1-b8 is not lossless: prompt 4 differs from ar-tp1 at token 18 ...`."""
        if self.counts is not None:
            return (f"{self.config} cannot be checked for losslessness: it has outputs of "
                    f"{self.counts[0]} prompts, {self.reference} of {self.counts[1]}; run the same "
                    f"prompts in both")
        if self.prompt_sizes is not None:
            return (f"{self.config} cannot be checked for losslessness: its prompt {self.prompt + 1} was "
                    f"{self.prompt_sizes[0]} tokens long, {self.reference}'s {self.prompt_sizes[1]}, so they "
                    f"continued different prompts (a workload with truncate = true cuts each prompt to its "
                    f"server's context length); give both servers the same context length")
        more = "" if self.prompts_differing == 1 else \
            f" ({self.prompts_differing} of {self.prompts} prompts differ)"
        if self.span is not None:
            more += f" ({self.span})"
        return (f"{self.config} is not lossless: prompt {self.prompt + 1} differs from "
                f"{self.reference} at {self.unit} {self.position + 1}{more}; {self.reference} continues "
                f"{_show(self.expected, self.unit)}, {self.config} continues "
                f"{_show(self.got, self.unit)}"
                f"{margin_note(self.reference, self.position, self.margin, self.margins_switch)}")


def margin_note(reference: str, position: int, margin: float | None, switch: str | None = None) -> str:
    """What the reference's margin at the divergent token says: a near-tie that numerical
    nondeterminism can flip, or a clear choice that only a lossy method explains ("" unknown, or
    where `switch` would have asked for it, how to). The verdict stands either way: a near-tie is
    named, not excused."""
    if margin is None:
        return "" if switch is None else (
            f"; rerun with {switch} to see whether {reference}'s choice at token {position + 1} was a near-tie "
            f"(off by default: it perturbs {reference}'s own figures)")
    where = f"; {reference}'s top two tokens at token {position + 1} differ by {margin:.2g} in log-probability"
    if margin < NEAR_TIE:
        return (f"{where} (near-tie, under {NEAR_TIE}: numerical nondeterminism (batch size, kernel choice) "
                f"can flip it, so this divergence alone does not show a lossy method)")
    return f"{where} (a clear choice, {NEAR_TIE} or more: not a near-tie)"


def _show(items: Sequence[Any], unit: str) -> str:
    head = list(items[:CONTEXT_TOKENS])
    text = "".join(head) if unit == "character" else ", ".join(str(i) for i in head)
    tail = ", ..." if len(items) > CONTEXT_TOKENS and unit != "character" else \
        "..." if len(items) > CONTEXT_TOKENS else ""
    return f"{text!r}{tail}" if unit == "character" else f"[{text}{tail}]"


def reference_of(case: MatrixCase, method: str, tps: Sequence[int]) -> MatrixCase | None:
    """The configuration whose outputs `case`'s must reproduce: `method` in the same family, at
    the same TP where the family's matrix has it (`tps`, in its order), else at its first."""
    if not tps:
        return None
    return MatrixCase(case.family, method, case.tp if case.tp in tps else tps[0], None)


def known_issue_verdict(reason: str, reference: str, divergence: Divergence | None,
                        checked_by: str, *, strict: bool = True) -> tuple[str, str]:
    """(outcome, why) of a known issue whose outputs met its reference's only after its test
    ended (`checked_by` says what compared them: `the test of ar-tp1, measured after it`), as its
    test would have ended had the reference come first: "xfailed" with the divergence that is its
    expected failure, or "failed" as [XPASS(strict)] where they match (the issue may be fixed);
    "xpassed" there where the known issue is not `strict` (a dry run's, `collection.known_issues_strict`)."""
    if divergence is not None:
        return "xfailed", f"known issue: {reason}: {divergence.message()} (found by {checked_by})"
    if not strict:
        return "xpassed", f"known issue: {reason}: its outputs match {reference}'s (compared by {checked_by})"
    return "failed", (f"[XPASS(strict)] known issue: {reason}: its outputs match {reference}'s "
                      f"(compared by {checked_by}); remove the known issue if it is fixed")


def counterpart(nodeid: str, config: str) -> str:
    """What a configuration's test has in common with its reference's: its node id without the
    configuration's parameter (`test_generation.py::test_generation[chat]`). Only tests that
    share it are compared: another test function, or another parametrization of one, may run
    other prompts or lengths under the same workload name."""
    base, bracket, params = nodeid.partition("[")
    if not bracket or not params.endswith("]"):
        return nodeid
    rest = "-".join(part for part in params[:-1].replace(config, "", 1).split("-") if part)
    return f"{base}[{rest}]"


def compare(config: str, outputs: Outputs, reference: str, expected: Outputs,
            exactness: Exactness, margins_switch: str | None = None) -> Divergence | None:
    """The first divergence of `outputs` from the reference's `expected`, or None.

    Prompts are matched by index; a length difference within the compared span counts as a
    divergence at the shorter output's end, a different number of outputs as one that names
    both counts, and a prompt the two servers counted differently (`Outputs.prompt_tokens`) as
    one that names both sizes: outputs of different prompts differ whether or not decoding is
    lossless, and may agree where it is not. `margins_switch` (`margins_switch(state)`) is named
    in the message of a token divergence whose reference margin was not asked for.
    """
    if not exactness.on:
        return None
    counts = (len(outputs.texts), len(expected.texts))
    if counts[0] != counts[1]:  # prompts past the shorter list would go unchecked
        return Divergence(config, reference, min(counts), 0, "prompt", (), (), abs(counts[0] - counts[1]),
                          max(counts), counts)
    sizes = zip(outputs.prompt_tokens or (), expected.prompt_tokens or ())
    other = next(((i, pair) for i, pair in enumerate(sizes) if None not in pair and pair[0] != pair[1]), None)
    if other is not None:
        return Divergence(config, reference, other[0], 0, "prompt", (), (), 1, counts[0],
                          prompt_sizes=other[1])
    found: list[tuple[int, int, str, Sequence[Any], Sequence[Any], str | None]] = []
    for index, (want_ids, got_ids, want_text, got_text) in enumerate(
            zip(expected.tokens.arrays(), outputs.tokens.arrays(), expected.texts, outputs.texts)):
        want: Sequence[Any]
        got: Sequence[Any]
        if want_ids is not None and got_ids is not None:
            want, got, unit = want_ids, got_ids, "token"
        else:
            want, got, unit = want_text, got_text, "character"
        span = None
        if exactness.mode == "prefix":
            cut = exactness.prefix
            if unit == "character":
                cut, span = _text_cut(index, outputs, expected, cut)
            want, got = want[:cut], got[:cut]
        if want == got:  # compared whole, before any id or character is looked at one by one
            continue
        position = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
        found.append((index, position, unit, want, got, span))
    if not found:
        return None
    index, position, unit, want, got, span = found[0]
    margin = expected.margin(index, position) if unit == "token" else None  # margins count tokens
    switch = margins_switch if unit == "token" and margin is None else None
    return Divergence(config, reference, index, position, unit, list(want[position:]), list(got[position:]),
                      len(found), min(len(expected.texts), len(outputs.texts)), span=span, margin=margin,
                      margins_switch=switch)


def reference_top_logprobs(case: MatrixCase, state: RunState) -> int:
    """Top logprobs a configuration's requests ask for: the losslessness reference's, where the
    check is on, the run asked for margins (`--specdec-lossless-margins`: they perturb the
    reference's figures, so never by default) and the backend serves them."""
    if not state.settings.lossless_margins or not state.lossless.on or case.method != state.settings.reference:
        return 0
    return _served(state.backend, case.method)


def _served(backend: Any, method: str) -> int:
    """The top logprobs `backend`'s servers give a request of `method` (0: none)."""
    methods = backend.logprob_methods
    return backend.reference_top_logprobs if methods is None or method in methods else 0


def margins_switch(state: RunState) -> str | None:
    """The switch that asks for the reference's margins, where this run's backend serves them and
    the run did not ask (a divergence's message then names it), else None. Not on a backend whose
    outputs are bit-stable (its default check `exact`: the embedded engine), where no kernel can
    flip a near-tie, so that a divergence there is the method's whatever the margin."""
    if (state.settings.lossless_margins or not _served(state.backend, state.settings.reference)
            or state.backend.default_lossless == "exact"):
        return None
    return OPTIONS_BY_NAME["lossless_margins"].cli


def _text_cut(index: int, outputs: Outputs, expected: Outputs, prefix: int) -> tuple[int, str]:
    """(characters, what they are, for messages) of prompt `index`'s text that `prefix:N` compares:
    the reference's first N tokens as a tokenizer counted them at measurement (the text holds no
    token boundaries), else the configuration's, else only the first N characters -- usually
    far fewer tokens, which the message must then say rather than pass for prefix:N."""
    counted = expected.span(index, prefix)
    if counted is None:
        counted = outputs.span(index, prefix)
    if counted is None:
        return prefix, (f"compared as text: the server sent no token ids and its tokenizer did not count "
                        f"them, so only the first {prefix} characters were compared, not {prefix} tokens")
    return counted, (f"compared as text: the server sent no token ids; the first {prefix} tokens are "
                     f"its first {counted} characters, as the server's tokenizer counts them")


def uncounted(outputs: Outputs, expected: Outputs, exactness: Exactness) -> int:
    """How many prompts `compare` checked on their first N characters rather than N tokens under
    `prefix:N` (token ids missing on either side, and no count of the text's tokens): a pass
    checked less than asked, which the run must say."""
    if exactness.mode != "prefix":
        return 0
    return sum(1 for index, (want_ids, got_ids) in enumerate(zip(expected.tokens.arrays(), outputs.tokens.arrays()))
               if (want_ids is None or got_ids is None) and expected.span(index, exactness.prefix) is None
               and outputs.span(index, exactness.prefix) is None)


def blind(outputs: Outputs, expected: Outputs, exactness: Exactness) -> int:
    """How many prompts `compare` passed on text (token ids missing on either side) whose compared
    characters hold U+FFFD: a decoder turns every byte that completes no character into it, so a
    different token of such bytes reads alike and a lossy pick passes unseen, which the run must say."""
    if not exactness.on or len(outputs.texts) != len(expected.texts):
        return 0
    count = 0
    for index, (want_ids, got_ids, want, got) in enumerate(
            zip(expected.tokens.arrays(), outputs.tokens.arrays(), expected.texts, outputs.texts)):
        if want_ids is not None and got_ids is not None:
            continue
        if exactness.mode == "prefix":
            cut = _text_cut(index, outputs, expected, exactness.prefix)[0]
            want, got = want[:cut], got[:cut]
        count += want == got and REPLACEMENT in want
    return count


def blind_note(names: Sequence[str]) -> str:
    """The line naming the results `blind` found: the run's summary and a merge of shards say it;
    the first few where there are many, and no report to see the rest in: none records it."""
    from .table_fold import named

    return (f"lossless: compared as text, which could not see some characters: {named(names)} (a server "
            f"sent no token ids, and texts that match hold U+FFFD, which every byte that completes no "
            f"character decodes to, so a different token of such bytes reads alike); a server that sends "
            f"output_ids, as SGLang's /generate does, compares the tokens")


def uncounted_note(exactness: Exactness, names: Sequence[str]) -> str:
    """The line naming the results `uncounted` found checked on N characters, not N tokens: the
    run's summary and a merge of shards (whose comparisons across shards no shard made) say it;
    the first few where there are many, and no report to see the rest in: none records it."""
    from .sglang_api import TOKENIZE
    from .table_fold import named

    return (f"lossless: {exactness} compared only the first {exactness.prefix} characters of some outputs, "
            f"not {exactness.prefix} tokens: {named(names)} (a server sent no token ids and its "
            f"tokenizer did not count them: no {TOKENIZE}, or a record of an earlier release or of "
            f"another prefix:N); a server that sends output_ids or serves {TOKENIZE} checks the tokens")
