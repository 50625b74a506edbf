"""Greedy speculative output equals greedy autoregressive output, token for token.

In-process (no HTTP) so that every method and budget is cheap to cover. The model's output
depends on its whole context (test_model.py checks that), so a wrong tree mask, position or KV
commit shows up as a different token here.
"""

from __future__ import annotations

import pytest
import torch

from greedy import greedy_decode
from pytest_specdec.engine.model import PRESETS, TargetModel
from pytest_specdec.engine.tokenizer import ByteTokenizer

PROMPTS = ["The capital city of France is", "x", "def add(a, b):\n    return a + b\n\n" * 3]
NEW_TOKENS = 120
CONTEXT = 512


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)
    return TargetModel.from_seed(PRESETS["tiny"], 0, torch.device("cpu"), torch.float32, CONTEXT + 80)


def greedy(model, method: str, budget: int, agreement: float = 0.9, block_size: int = 16,
           lossy: float = 0.0) -> tuple[list, float]:
    return greedy_decode(model, method, budget, PROMPTS, NEW_TOKENS, CONTEXT, agreement, block_size,
                         lossy=lossy)


@pytest.fixture(scope="module")
def reference(model):
    out, per_step = greedy(model, "ar", 0)
    assert per_step == 1.0
    return out


@pytest.mark.parametrize("budget", [1, 8, 16, 64])
@pytest.mark.parametrize("method", ["dflash", "ddtree"])
def test_speculative_output_equals_autoregressive(model, reference, method, budget):
    # a DFlash chain of 16 or 64 drafts needs a block that long
    block = max(16, budget + 1) if method == "dflash" else 16
    out, per_step = greedy(model, method, budget, block_size=block)
    for prompt, got, want in zip(PROMPTS, out, reference):
        first_diff = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
        assert got == want, f"{method} b{budget} diverges from AR at token {first_diff} for {prompt[:20]!r}"
    assert per_step > 1.0, "speculation accepted nothing: the comparison would be vacuous"


@pytest.mark.parametrize("agreement", [0.0, 1.0])
def test_lossless_whatever_the_drafter(model, reference, agreement):
    out, _ = greedy(model, "ddtree", 16, agreement=agreement)
    assert out == reference


@pytest.mark.parametrize("method", ["dflash", "ddtree"])
def test_fault_lossy_breaks_losslessness(model, reference, method):
    """--fault-lossy plants the bug the losslessness guard exists for: outputs leave the target's."""
    out, _ = greedy(model, method, 8, lossy=0.2)
    assert out != reference
    assert all(got[0] == want[0] for got, want in zip(out, reference))  # prefill is never touched


def test_fault_lossy_leaves_autoregressive_decoding_alone(model, reference):
    """Nothing is drafted, so nothing can be accepted wrongly: the reference stays the reference."""
    out, _ = greedy(model, "ar", 0, lossy=1.0)
    assert out == reference


def test_autoregressive_matches_recomputing_the_whole_sequence(model, reference):
    """The cached decode path gives what a full causal forward over prompt + output gives."""
    tok = ByteTokenizer()
    with torch.inference_mode():
        for prompt, out in zip(PROMPTS, reference):
            ids = tok.encode(prompt)
            seq = torch.tensor([ids + out[:-1]])
            argmax = model.prefill(seq)[0].argmax(-1)[len(ids) - 1:].tolist()
            assert argmax == out



@pytest.fixture(scope="module")
def real_layout():
    """The 8b-layer preset's attention (32 query / 8 KV heads of 128: a GQA group of 4, where tiny
    has groups of 2 heads of 64) at a hidden size and depth the CPU decodes in a second."""
    import dataclasses

    config = dataclasses.replace(PRESETS["8b-layer"], hidden_size=256, num_layers=2, intermediate_size=512)
    return TargetModel.from_seed(config, 0, torch.device("cpu"), torch.float32, CONTEXT + 80)


@pytest.mark.parametrize("method", ["ar", "dflash", "ddtree"])
def test_the_real_model_attention_layout_decodes_what_a_whole_forward_gives(real_layout, method):
    """What a GPU run times is the 8b-layer preset; no CPU test decoded its head layout. Each method
    (AR included: it runs the same verify pipeline with a chain of one) must give, token for token,
    the argmax of a full causal forward over prompt + output."""
    prompts = PROMPTS[:2]
    out, per_step = greedy_decode(real_layout, method, 0 if method == "ar" else 16, prompts, 48, CONTEXT,
                                  block_size=17)
    if method != "ar":
        assert per_step > 1.0, "speculation accepted nothing: the comparison would be vacuous"
    tok = ByteTokenizer()
    with torch.inference_mode():
        for prompt, tokens in zip(prompts, out):
            ids = tok.encode(prompt)
            argmax = real_layout.prefill(torch.tensor([ids + tokens[:-1]]))[0].argmax(-1)[len(ids) - 1:].tolist()
            assert tokens == argmax, f"{method} leaves the full forward at token " \
                f"{next(i for i, (a, b) in enumerate(zip(tokens, argmax)) if a != b)}"
