"""The reference's margins, end to end on the SGLang stand-in: opt-in, because asking SGLang for
top logprobs changes the reference's own figures (each streamed event repeats them all). By
default its requests are what they were before margins existed, and a divergence says how to see
whether the reference's choice there was a near-tie; with `--specdec-lossless-margins` the
reference alone asks for them."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("torch")

from test_bench_flow import journal_figures, no_leftover_engines, project  # noqa: E402,F401
from test_bench_flow import run as run_embedded  # noqa: E402
from test_sglang_backend import run, sglang_project  # noqa: E402,F401

from pytest_specdec.lossless import NEAR_TIE  # noqa: E402

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
    reference's requests ask for its top two, ddtree's do not, the header says it is on, and the
    message names ar's margin at the divergent token (the engine under the stand-in serves them)."""
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
        result.stdout.fnmatch_lines(["*hopper-ddtree-tp1-b8 is not lossless: *; hopper-ar-tp1's top two tokens "
                                     "at token * differ by * in log-probability (*"])
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


def test_on_the_embedded_engine_the_divergence_names_the_references_own_margin(pytester, no_leftover_engines):
    """The engine serves return_logprob on ar, so with the switch the reference's requests ask it
    and a lossy ddtree's divergence says how far ar's choice led there: the number is the
    target's own top-two log-probability gap at that token, computed here from the model."""
    project(pytester, methods=("ar", "ddtree"), budgets=(8,), engine_args=("--fault-lossy", "1"))
    result = run_embedded(pytester, "--specdec-lossless-margins")
    result.assert_outcomes(passed=1, failed=1)
    line = next(line for line in result.outlines if "ddtree-tp1-b8 is not lossless" in line)
    found = re.search(r"prompt (\d+) differs from ar-tp1 at token (\d+).*; ar-tp1's top two tokens at token \2 "
                      r"differ by (\S+) in log-probability \((near-tie|a clear choice)", line)
    assert found, line
    prompt, token, shown = int(found[1]) - 1, int(found[2]) - 1, float(found[3])
    (ar,) = [r for r in journal_figures(pytester) if "ar-tp1" in r["config_id"]]
    outputs = ar["data"]["outputs"]
    import torch

    from pytest_specdec.engine.model import PRESETS, TargetModel
    from pytest_specdec.engine.tokenizer import ByteTokenizer
    from pytest_specdec.workloads import builtin_workload

    text = builtin_workload("chat").prompts[prompt].text
    ids = ByteTokenizer().encode(text) + outputs["tokens"][prompt][:token]
    model = TargetModel.from_seed(PRESETS["tiny"], 0, torch.device("cpu"), torch.float32, 4096)
    with torch.inference_mode():
        top = torch.log_softmax(model.prefill(torch.tensor([ids]))[0, -1].float(), -1).topk(2).values.tolist()
    assert top[0] - top[1] == pytest.approx(outputs["margins"][prompt][token], abs=1e-4)
    assert f"{top[0] - top[1]:.2g}" == found[3] and shown == pytest.approx(top[0] - top[1], rel=0.05)
    assert (found[4] == "near-tie") == (top[0] - top[1] < NEAR_TIE)
