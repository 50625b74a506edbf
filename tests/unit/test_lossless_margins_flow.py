"""The reference's margins, end to end on the SGLang stand-in: opt-in, because asking SGLang for
top logprobs changes the reference's own figures (each streamed event repeats them all). By
default its requests are what they were before margins existed, and a divergence says how to see
whether the reference's choice there was a near-tie; with `--specdec-lossless-margins` the
reference alone asks for them."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from test_sglang_backend import run, sglang_project  # noqa: E402,F401

MATRIX = 'methods = ["ar", "ddtree"]\ntp = [1]\nbudget = [8]'
LOGPROB_FIELDS = {"return_logprob", "top_logprobs_num"}
HINT = ("*hopper-ddtree-tp1-b8 is not lossless: *; rerun with --specdec-lossless-margins to see whether "
        "hopper-ar-tp1's choice at token * was a near-tie (off by default: it perturbs hopper-ar-tp1's own figures)")


def bodies(pytester) -> dict[str | None, list[set[str]]]:
    """{speculative algorithm (None: ar): the field names of each /generate request it served}."""
    out: dict[str | None, list[set[str]]] = {}
    for line in (pytester.path / "bodies.jsonl").read_text().splitlines():
        entry = json.loads(line)
        out.setdefault(entry["algorithm"], []).append(set(entry["fields"]))
    return out


@pytest.mark.parametrize("margins", [False, True], ids=["default", "margins"])
def test_the_reference_asks_for_logprobs_only_with_the_switch(pytester, sglang_project, monkeypatch, margins):
    """A lossy ddtree diverges either way. By default no request asks for logprobs (the
    reference's figures are measured as before) and the divergence names the switch; with it the
    reference's requests ask for its top two, ddtree's do not, and the header says it is on (the
    stand-in serves no logprobs, so the message then names no margin and no switch)."""
    monkeypatch.setenv("FAKE_SGLANG_FAULTS", json.dumps({"ddtree": ["--fault-lossy", "1"]}))
    monkeypatch.setenv("FAKE_SGLANG_BODIES", str(pytester.path / "bodies.jsonl"))
    sglang_project(MATRIX)
    result = run(pytester, "--specdec-lossless=exact", *(["--specdec-lossless-margins"] if margins else []))
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*hopper-ddtree-tp1-b8 is not lossless: prompt * differs from hopper-ar-tp1*"])
    sent = bodies(pytester)
    assert sent[None] and sent["DDTREE"]
    assert all(not fields & LOGPROB_FIELDS for fields in sent["DDTREE"])
    if margins:
        assert all(fields >= LOGPROB_FIELDS for fields in sent[None])
        result.stdout.fnmatch_lines(["*specdec: settings *lossless_margins=true (command line)*"])
        result.stdout.no_fnmatch_line("*rerun with --specdec-lossless-margins*")
    else:
        assert all(not fields & LOGPROB_FIELDS for fields in sent[None])
        result.stdout.fnmatch_lines([HINT])
        result.stdout.no_fnmatch_line("*lossless_margins*")


def test_a_resumed_run_measures_the_reference_again_when_the_switch_changes(pytester, sglang_project, monkeypatch):
    """The reference's figures with logprobs streamed are not those without: its fingerprint has a
    `requests` part while the switch is on, so a resumed run with the switch measures it again
    (with its margins) rather than reuse figures and outputs measured without, and one without the
    switch measures it again in turn. ddtree's requests are the same either way: resumed."""
    monkeypatch.setenv("FAKE_SGLANG_BODIES", str(pytester.path / "bodies.jsonl"))
    sglang_project(MATRIX)
    run(pytester, "--specdec-lossless=exact").assert_outcomes(passed=2)
    for switch in (["--specdec-lossless-margins"], []):
        (pytester.path / "bodies.jsonl").unlink()
        resumed = run(pytester, "--specdec-lossless=exact", "--specdec-resume", *switch)
        resumed.assert_outcomes(passed=2)
        assert set(bodies(pytester)) == {None}  # only ar was measured
        resumed.stdout.fnmatch_lines(["*hopper-ddtree-tp1-b8 chat:*(resumed from *",
                                      "*measured test_generation[[]hopper-ar-tp1-chat[]] again: *(requests)"])
