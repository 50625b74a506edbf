"""The hybrid presets: Gated DeltaNet layers with the tree-aware verify are lossless, the leaky
chain mode is not.

In-process (no HTTP), on the tiny-hybrid preset: greedy speculative output against greedy
autoregressive output token for token, with the recurrent layers seeing the tree exactly
(``exact``) or as one sequence in node order (``chain``, the state leak).
"""

from __future__ import annotations

import functools

import pytest
import torch

from pytest_specdec.engine.cli import HYBRID_PRESETS, MODEL_PRESETS, parse_args
from greedy import greedy_decode
from pytest_specdec.engine.model import PRESETS, TargetModel
from pytest_specdec.engine.tokenizer import ByteTokenizer

PROMPTS = ["The capital city of France is", "def add(a, b):\n    return a + b\n\n" * 2,
           "Write a friendly reminder email asking colleagues to submit their travel expense reports by Friday."]
NEW_TOKENS = 96
CONTEXT = 384
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)
    return TargetModel.from_seed(PRESETS["tiny-hybrid"], 0, CPU, torch.float32, CONTEXT + 80)


@functools.lru_cache(maxsize=None)
def _greedy(model, method: str, budget: int, recurrent_tree: str = "exact") -> tuple[tuple, float]:
    """All prompts decoded as one batch (once per configuration): outputs and accept length."""
    out, accept_length = greedy_decode(model, method, budget, PROMPTS, NEW_TOKENS, CONTEXT,
                                       recurrent_tree=recurrent_tree)
    return tuple(map(tuple, out)), accept_length


@pytest.mark.parametrize("budget", [8, 16, 32, 64])
def test_exact_tree_is_lossless_against_autoregressive(model, budget):
    reference, _ = _greedy(model, "ar", 0)
    out, accept_length = _greedy(model, "ddtree", budget)
    for prompt, got, want in zip(PROMPTS, out, reference):
        first_diff = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
        assert got == want, f"ddtree b{budget} diverges from AR at token {first_diff} for {prompt[:20]!r}"
    assert accept_length > 2.0, "speculation accepted little: the comparison would be weak"


def test_dflash_chain_is_lossless_too(model):
    assert _greedy(model, "dflash", 15)[0] == _greedy(model, "ar", 0)[0]


@pytest.mark.parametrize("budget", [32, 64])
def test_chain_mode_leaks_state_between_branches(model, budget):
    """The recurrent layers fed the tree as one sequence: outputs leave AR's, and fewer drafts
    are accepted than with the tree-aware verify."""
    reference, _ = _greedy(model, "ar", 0)
    exact, exact_length = _greedy(model, "ddtree", budget, "exact")
    leaky, leaky_length = _greedy(model, "ddtree", budget, "chain")
    assert leaky != reference, "chain mode gave AR's output: the leak it exists to show did not happen"
    assert leaky_length < exact_length, f"accept length chain {leaky_length:.2f} >= exact {exact_length:.2f}"


def test_autoregressive_matches_recomputing_the_whole_sequence(model):
    """Decoding through verify + commit gives what one prefill over prompt + output gives
    (the prefill runs the prompt through the same kernels in chains of PREFILL_CHUNK)."""
    reference, _ = _greedy(model, "ar", 0)
    tok = ByteTokenizer()
    with torch.inference_mode():
        for prompt, out in zip(PROMPTS, reference):
            ids = tok.encode(prompt)
            seq = torch.tensor([ids + list(out[:-1])])
            assert model.prefill(seq)[0].argmax(-1)[len(ids) - 1:].tolist() == list(out)


def test_recurrent_layers_carry_the_context(model):
    """One flipped early prompt byte changes the continuation even with attention layers' output
    removed, so the recurrent states matter to the output (the lossless tests rely on it)."""
    ids = ByteTokenizer().encode("Once upon a time there was a")
    changed = list(ids)
    changed[2] ^= 1
    with torch.inference_mode():
        attention = [layer for layer in model.layers if "cache_index" in layer]
        saved = [layer["o_t"] for layer in attention]
        try:
            for layer in attention:
                layer["o_t"] = torch.zeros_like(layer["o_t"])
            logits = [model.prefill(torch.tensor([x]))[0, -1] for x in (ids, changed)]
        finally:
            for layer, o_t in zip(attention, saved):
                layer["o_t"] = o_t
    assert not torch.allclose(logits[0], logits[1], atol=1e-3)


def test_presets_follow_the_qwen35_pattern():
    for name in HYBRID_PRESETS:
        cfg = PRESETS[name]
        assert cfg.linear.conv_kernel == 4
        assert [cfg.is_linear(i) for i in range(cfg.num_layers)] == [True, True, True, False] * (cfg.num_layers // 4)
    big = PRESETS["27b-hybrid-layers"].linear
    assert (big.num_key_heads, big.num_value_heads, big.key_head_dim, big.value_head_dim) == (16, 48, 128, 128)
    assert set(PRESETS) == set(MODEL_PRESETS)


def test_safetensors_round_trip(model, tmp_path):
    model.save_safetensors(tmp_path / "hybrid.safetensors")
    loaded = TargetModel.from_safetensors(tmp_path / "hybrid.safetensors", CPU, torch.float32, 256)
    assert loaded.config == model.config
    tokens = torch.tensor([ByteTokenizer().encode("round trip")])
    with torch.inference_mode():
        assert torch.equal(loaded.prefill(tokens), model.prefill(tokens))


def test_chain_mode_needs_a_hybrid_model(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--method", "ddtree", "--recurrent-tree", "chain"])
    assert "--recurrent-tree chain needs a hybrid model" in capsys.readouterr().err
    assert parse_args(["--method", "ddtree", "--model-preset", "tiny-hybrid", "--recurrent-tree",
                       "chain"]).recurrent_tree == "chain"
