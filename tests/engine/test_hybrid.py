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
from pytest_specdec.engine.decoding import SpeculativeDecoder
from pytest_specdec.engine.drafter import BlockDrafter
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


def _ar_run(model, ids: list[int], steps: int):
    """The plain sequential run: autoregressive steps after the prompt. Its tokens (the prefill's
    first, then one per step), each step's logits at the root, and the states after each step."""
    dec = SpeculativeDecoder(model, "ar", 0, None, max_batch=1, max_seq_len=64)
    tokens, logits, states = [dec.prefill(0, ids)], [], []
    verify = model.verify
    for _ in range(steps):
        out = []
        model.verify = lambda *a, **kw: out.append(verify(*a, **kw)) or out[-1]
        try:
            tokens += dec.step(1).tokens[0]
        finally:
            del model.verify
        logits.append(out[0][0, 0])
        states.append((dec.state[:, 0].clone(), dec.conv_state[:, 0].clone()))
    return tokens, logits, states


def _tree_step(model, monkeypatch, ids: list[int], tokens: list[int], parents: list[int], mode: str):
    """One ddtree step from the prompt over the given tree (not the drafter's): the verify's
    arguments and logits, the accepted tokens and the committed states."""
    from specdec_kernels import DDTree, ancestor_mask_from_parents

    import pytest_specdec.engine.decoding as decoding

    par = torch.tensor([parents], dtype=torch.int32)
    depths = [0] * len(parents)
    for i, p in enumerate(parents[1:], 1):
        depths[i] = depths[p] + 1
    tree = DDTree(torch.tensor([tokens]), par, torch.tensor([depths], dtype=torch.int32),
                  ancestor_mask_from_parents(par), torch.zeros(1, len(tokens)))
    monkeypatch.setattr(decoding, "build_ddtree", lambda *a, **kw: tree)
    drafter = BlockDrafter(model, 15, 0.9, seed=0)
    dec = SpeculativeDecoder(model, "ddtree", len(tokens) - 1, drafter, max_batch=1, max_seq_len=64,
                             recurrent_tree=mode)
    assert dec.prefill(0, ids) == tokens[0]
    seen = {}
    verify = model.verify

    def spy(tokens, depths, cache_lens, ancestor_mask, *a, recurrent=None, **kw):
        seen.update(mask=ancestor_mask.clone(), parents=recurrent.parents.clone(),
                    recurrent_mask=recurrent.ancestor_mask.clone())
        seen["logits"] = verify(tokens, depths, cache_lens, ancestor_mask, *a, recurrent=recurrent, **kw)
        return seen["logits"]

    monkeypatch.setattr(model, "verify", spy)
    step = dec.step(1)
    monkeypatch.delattr(model, "verify")
    return tree, seen, step.tokens[0], (dec.state[:, 0], dec.conv_state[:, 0])


def _same_states(a, b) -> bool:
    return all(torch.allclose(x, y, atol=1e-5, rtol=1e-4) for x, y in zip(a, b))


@pytest.mark.parametrize("mode", ["chain", "exact"])
def test_recurrent_tree_modes_feed_the_layers_as_documented(model, monkeypatch, mode):
    """docs/HYBRID.md: ``chain`` gives the linear layers chain parents (node i's is i - 1) and the
    attention layers the tree's own mask, and where the accepted path is a prefix of node order its
    outputs and committed states are the sequential run's up to the last accepted node; ``exact``
    gives the linear layers the tree's parents. Nodes 3-5 branch off after the path, so in
    ``chain`` they are what the leak would add to a state committed past node 2."""
    ids = ByteTokenizer().encode("The capital city of France is")
    ar_tokens, ar_logits, ar_states = _ar_run(model, ids, 3)
    g0, g1, g2, g3 = ar_tokens[:4]
    wrong = (g1 + 1) % 256
    parents = [-1, 0, 1, 0, 3, 3]
    with torch.inference_mode():
        tree, seen, committed, states = _tree_step(model, monkeypatch, ids, [g0, g1, g2, wrong, g1, g2],
                                                   parents, mode)
    assert torch.equal(seen["mask"], tree.ancestor_mask), "the attention layers did not get the tree's mask"
    want_parents = list(range(-1, len(parents) - 1)) if mode == "chain" else parents
    assert seen["parents"][0].tolist() == want_parents, f"{mode}: the linear layers' parents"
    assert committed == [g1, g2, g3], "the accepted path is nodes 0, 1, 2 and the bonus g3"
    for node in range(3):
        assert torch.allclose(seen["logits"][0, node], ar_logits[node], atol=1e-4, rtol=1e-4), f"node {node}"
    assert _same_states(states, ar_states[2]), f"{mode}: committed states differ from the sequential run's"


def test_exact_commits_along_an_accepted_path_off_node_order(model, monkeypatch):
    """``exact`` commits along the accepted path 0 -> 2 -> 3 (node 1, a rejected sibling, before it
    in node order): the sequential run's states; ``chain`` on the same tree leaks node 1 into them."""
    ids = ByteTokenizer().encode("The capital city of France is")
    ar_tokens, ar_logits, ar_states = _ar_run(model, ids, 3)
    g0, g1, g2, g3 = ar_tokens[:4]
    tokens, parents = [g0, (g1 + 1) % 256, g1, g2, g2], [-1, 0, 0, 2, 1]
    with torch.inference_mode():
        _, seen, committed, exact = _tree_step(model, monkeypatch, ids, tokens, parents, "exact")
        _, _, leaky_committed, leaky = _tree_step(model, monkeypatch, ids, tokens, parents, "chain")
    assert committed == [g1, g2, g3]
    for node, ar in zip((0, 2, 3), ar_logits):
        assert torch.allclose(seen["logits"][0, node], ar, atol=1e-4, rtol=1e-4), f"node {node}"
    assert _same_states(exact, ar_states[2]), "exact: committed states differ from the sequential run's"
    assert not _same_states(leaky, ar_states[2]), "chain: the rejected sibling did not leak into the state"
