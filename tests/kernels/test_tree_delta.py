"""tree_gated_delta_rule against a float64 oracle that runs each node's path as a plain sequence.

The interpreter grid covers every listed T (1 to 65), tree shape (each batch ragged: its requests
have different shapes), GQA ratio 1 and 3, dtype and a non-default scale at small head dims; on a
GPU the model's head dim 128 (two value slices per head) joins it at T 9, 17, 33 and 65, and
SPECDEC_FULL_KERNEL_TESTS=1 runs the product of T, shape and ratio.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import zlib

import pytest
import torch

from hybrid_cases import SHAPES, delta_inputs, mask_of, path_oracle, ragged_parents, step64
from kernel_cases import DEVICE, HAS_CUDA, assert_wrong_device_named, needs_triton, row_errors
from specdec_kernels import tree_gated_delta_rule, tree_verify_attention, unpack_ancestor_mask

IMPLS = ["torch", pytest.param("triton", marks=needs_triton)]
NODE_COUNTS = (1, 2, 9, 16, 17, 33, 64, 65)
# Row error ||out - oracle|| / ||oracle||: fp32 is exact arithmetic up to rounding; bf16 inputs
# feed 16-bit MMAs (the committed state and the pseudo-values rounded to bf16, as in
# flash-linear-attention's chunked kernels) and a bf16 output.
TOLERANCE = {torch.float32: 2e-4, torch.bfloat16: 3e-2}


def delta_cases():
    """(T, first shape, Hk, GQA ratio, dtype, Dk, Dv, scale, batch)."""
    if os.environ.get("SPECDEC_FULL_KERNEL_TESTS", "0") not in ("", "0"):
        return [(t, shape, 2, group, (torch.float32, torch.bfloat16)[i % 2], (128, 32)[i // 2 % 2],
                 (128, 64)[i // 2 % 2], (None, 0.3)[i % 3 == 0], 3)
                for i, (t, shape, group) in enumerate(itertools.product(NODE_COUNTS, SHAPES, (1, 3)))]
    cases = []
    for i, t in enumerate(NODE_COUNTS + (65,)):
        cases.append((t, SHAPES[i % 4], 1 + i % 2, (1, 3)[i % 2 == 0], (torch.float32, torch.bfloat16)[i % 3 == 2],
                      (16, 32)[i % 4 == 1], (16, 32)[i % 4 == 3], (None, 0.37, 1.9)[i % 3], 1 + i % 4 + (i == 0) if t < 64 else 2))
    if HAS_CUDA:
        cases += [(t, SHAPES[i], 2, 3, (torch.bfloat16, torch.float32)[i == 3], 128, 128, None, 3)
                  for i, t in enumerate((9, 17, 33, 65))]
    return cases


def case_name(case):
    t, shape, hk, group, dtype, dk, dv, scale, batch = case
    return f"T{t}-{shape}-Hk{hk}x{group}-{str(dtype)[6:]}-Dk{dk}-Dv{dv}-s{scale}-B{batch}"


@functools.lru_cache(maxsize=None)
def case_with_oracle(case):
    """(inputs, parents, oracle outputs) of a case, shared by its torch and Triton tests."""
    t, shape, key_heads, group, dtype, key_dim, value_dim, scale, batch = case
    gen = torch.Generator().manual_seed(zlib.crc32(case_name(case).encode()))
    x = delta_inputs(batch, t, key_heads, group, key_dim, value_dim, dtype, gen)
    parents = ragged_parents(batch, t, shape, gen)
    return x, parents, path_oracle(**x, parents=parents, scale=key_dim ** -0.5 if scale is None else scale)


@pytest.mark.parametrize("case", delta_cases(), ids=case_name)
@pytest.mark.parametrize("impl", IMPLS)
def test_every_node_equals_its_path_run_as_a_sequence(impl, case):
    dtype, scale = case[4], case[7]
    x, parents, want = case_with_oracle(case)
    got = tree_gated_delta_rule(**{n: a.to(DEVICE) for n, a in x.items()}, ancestor_mask=mask_of(parents).to(DEVICE),
                                scale=scale, impl=impl)
    assert got.dtype == dtype and got.shape == want.shape
    err = row_errors(got.cpu(), want)
    worst = err.flatten().argmax()
    assert float(err.max()) <= TOLERANCE[dtype], (
        f"worst row error {float(err.max()):.3g} at (b, node, head) {torch.unravel_index(worst, err.shape)}")


def sequential_pass(q, k, v, g, beta, state, scale):
    """The ordinary gated delta rule over the tokens in order, float64."""
    group = v.shape[2] // q.shape[2]
    out = []
    for b in range(q.shape[0]):
        s = state[b].double()
        rows = []
        for i in range(q.shape[1]):
            s = step64(s, k[b, i].double().repeat_interleave(group, 0), v[b, i].double(), g[b, i].double(),
                       beta[b, i].double())
            rows.append(scale * torch.einsum("hkv,hk->hv", s, q[b, i].double().repeat_interleave(group, 0)))
        out.append(torch.stack(rows))
    return torch.stack(out)


@pytest.mark.parametrize("impl", IMPLS)
def test_chain_shaped_tree_is_the_ordinary_sequential_rule(impl):
    gen = torch.Generator().manual_seed(5)
    x = delta_inputs(2, 40, 1, 3, 16, 16, torch.float32, gen)
    chain = torch.arange(-1, 39, dtype=torch.int32).expand(2, 40)
    got = tree_gated_delta_rule(**{n: a.to(DEVICE) for n, a in x.items()}, ancestor_mask=mask_of(chain).to(DEVICE),
                                impl=impl)
    want = sequential_pass(**x, scale=16 ** -0.5)
    assert float(row_errors(got.cpu(), want).max()) <= TOLERANCE[torch.float32]


@needs_triton
def test_sequential_baseline_kernel_is_the_ordinary_rule():
    """The benchmark's chain-shaped baseline (one program stepping through the tokens) is right."""
    from specdec_kernels.recurrent_commit_triton import sequential_gated_delta_rule_triton

    gen = torch.Generator().manual_seed(6)
    x = delta_inputs(2, 17, 2, 3, 16, 32, torch.float32, gen)
    got = sequential_gated_delta_rule_triton(**{n: a.to(DEVICE) for n, a in x.items()}, scale=0.7)
    assert float(row_errors(got.cpu(), sequential_pass(**x, scale=0.7)).max()) <= TOLERANCE[torch.float32]


@pytest.mark.parametrize("impl", IMPLS)
def test_siblings_do_not_leak_into_each_other(impl):
    """On a star, each leaf's output depends on the root and itself only: the same rule run over
    the nodes as one sequence (a chain mask) gives other outputs, and changing one leaf's inputs
    leaves every other leaf's output unchanged."""
    gen = torch.Generator().manual_seed(7)
    x = {n: a.to(DEVICE) for n, a in delta_inputs(1, 9, 1, 1, 16, 16, torch.float32, gen).items()}
    star = torch.tensor([[-1] + [0] * 8], dtype=torch.int32)
    chain = torch.arange(-1, 8, dtype=torch.int32)[None]
    tree = tree_gated_delta_rule(**x, ancestor_mask=mask_of(star).to(DEVICE), impl=impl)
    leaky = tree_gated_delta_rule(**x, ancestor_mask=mask_of(chain).to(DEVICE), impl=impl)
    assert not torch.allclose(tree[:, 2:], leaky[:, 2:], atol=1e-3)
    changed = dict(x, v=x["v"].clone(), k=x["k"].clone())
    changed["v"][:, 3] += 1.0
    changed["k"][:, 3] = changed["k"][:, 4]
    again = tree_gated_delta_rule(**changed, ancestor_mask=mask_of(star).to(DEVICE), impl=impl)
    others = [i for i in range(9) if i != 3]
    assert torch.allclose(again[:, others], tree[:, others], atol=1e-6)
    assert not torch.allclose(again[:, 3], tree[:, 3], atol=1e-3)


def test_state_is_not_modified_and_bad_shapes_are_named():
    gen = torch.Generator().manual_seed(8)
    x = delta_inputs(1, 4, 1, 3, 16, 16, torch.float32, gen)
    mask = mask_of(torch.tensor([[-1, 0, 0, 1]], dtype=torch.int32))
    before = x["state"].clone()
    tree_gated_delta_rule(**x, ancestor_mask=mask, impl="torch")
    assert torch.equal(x["state"], before)
    with pytest.raises(ValueError, match=r"state must be \[B, Hv, Dk, Dv\]"):
        tree_gated_delta_rule(**dict(x, state=x["state"][:, :1]), ancestor_mask=mask, impl="torch")
    with pytest.raises(ValueError, match="not a multiple of Hk"):
        tree_gated_delta_rule(**dict(x, q=x["q"].expand(-1, -1, 2, -1), k=x["k"].expand(-1, -1, 2, -1)),
                              ancestor_mask=mask, impl="torch")
    with pytest.raises(ValueError, match=r"ancestor_mask must be int32 \[B, T, ceil\(T / 32\)\] = \(1, 4, 1\), "
                                         r"got torch.int64 \(1, 4, 1\); pass ancestor_mask_from_parents\(parents\)"):
        tree_gated_delta_rule(**x, ancestor_mask=mask.long(), impl="torch")
    # the torch path once took what the Triton path refuses, against the docstring
    with pytest.raises(ValueError, match=r"k and v must be q's dtype \(torch.float16\), "
                                         r"got torch.float32, torch.float32; pass them \.to\(q\.dtype\)"):
        tree_gated_delta_rule(**dict(x, q=x["q"].half()), ancestor_mask=mask, impl="torch")
    with pytest.raises(ValueError, match=r"state must be the float32 recurrent state, got torch.bfloat16; "
                                         r"pass state\.float\(\)"):
        tree_gated_delta_rule(**dict(x, state=x["state"].bfloat16()), ancestor_mask=mask, impl="torch")


def _flip(mask, node, bit):
    flipped = mask.clone()
    flipped[0, node, 0] ^= 1 << bit
    return flipped


TREE = torch.tensor([[-1, 0, 0, 1, 1, 2]], dtype=torch.int32)


@pytest.mark.parametrize("impl", ["torch", "triton"])
@pytest.mark.parametrize("mask,where", [
    ("transposed", r"ancestor_mask\[0, 0\] holds nodes \[0, 1, 2, 3, 4, 5\]"),  # descendants, not ancestors
    ("no own bit", r"ancestor_mask\[0, 3\] holds nodes \[0, 1\]"),
    ("a later node", r"ancestor_mask\[0, 2\] holds nodes \[0, 2, 4\]"),
    ("a second root", r"ancestor_mask\[0, 4\] holds nodes \[4\]"),
    ("not its parent's row", r"ancestor_mask\[0, 5\] holds nodes \[0, 1, 2, 5\]"),
])
def test_masks_that_are_no_trees_ancestors_are_named(mask, where, impl):
    """The chunked rule's solve is only the delta rule along each path for a tree's ancestor
    mask: any other mask gave silently some other numbers on both paths (a transposed one, of
    descendants, is the likely mistake). Named by (request, node), before either path runs."""
    good = mask_of(TREE)
    anc = unpack_ancestor_mask(good, 6)
    bad = {"transposed": (anc.transpose(1, 2).int() << torch.arange(6, dtype=torch.int32)).sum(-1, keepdim=True)
           .to(torch.int32),
           "no own bit": _flip(good, 3, 3), "a later node": _flip(good, 2, 4),
           "a second root": good.clone().index_fill_(1, torch.tensor([4]), 1 << 4),
           "not its parent's row": _flip(good, 5, 1)}[mask]
    x = delta_inputs(1, 6, 1, 2, 16, 16, torch.float32, torch.Generator().manual_seed(2))
    tree_gated_delta_rule(**x, ancestor_mask=good, impl="torch")
    with pytest.raises(ValueError, match=where):
        tree_gated_delta_rule(**x, ancestor_mask=bad, impl=impl)
    with pytest.raises(ValueError, match=where):
        tree_verify_attention(torch.zeros(1, 6, 2, 16), torch.zeros(1, 8, 1, 16), torch.zeros(1, 8, 1, 16),
                              torch.tensor([2], dtype=torch.int32), bad, impl=impl)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name,dtype", [("beta", torch.int64), ("beta", torch.bool), ("g", torch.int32)])
def test_gates_that_are_not_floats_are_named(name, dtype, impl):
    """g and beta may be any float dtype; an integer one (a sigmoid's beta truncated to 0, a rounded
    log decay) gave other outputs and states on both paths without a word. Both operations that
    take them say so."""
    from specdec_kernels import commit_recurrent_state

    x = delta_inputs(1, 4, 1, 2, 16, 16, torch.float32, torch.Generator().manual_seed(5))
    x = {key: t.to(DEVICE) for key, t in x.items()}
    x[name] = x[name].mul(3).to(dtype)
    mask = mask_of(torch.tensor([[-1, 0, 0, 1]], dtype=torch.int32)).to(DEVICE)
    with pytest.raises(ValueError, match=rf"{name} must be a float tensor \(any float dtype\), got {dtype}; "
                                         rf"pass {name}\.float\(\)"):
        tree_gated_delta_rule(**x, ancestor_mask=mask, impl=impl)
    path = torch.tensor([[0, 1, 3, -1]], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match=rf"{name} must be a float tensor"):
        commit_recurrent_state(x["state"].clone(), torch.zeros(1, 8, 3, device=DEVICE),
                               torch.zeros(1, 4, 8, device=DEVICE), x["k"], x["v"], x["g"], x["beta"], path,
                               torch.tensor([3], dtype=torch.int32, device=DEVICE), impl=impl)


def test_a_decay_passed_for_its_log_is_named():
    """g is the log decay (<= 0): a decay alpha in (0, 1] passed instead made the state grow by
    e^alpha a step, silently. Both operations that take g say so."""
    from specdec_kernels import commit_recurrent_state

    x = delta_inputs(1, 4, 1, 2, 16, 16, torch.float32, torch.Generator().manual_seed(5))
    mask = mask_of(torch.tensor([[-1, 0, 0, 1]], dtype=torch.int32))
    alpha = x["g"].exp()
    with pytest.raises(ValueError, match=r"g is the log decay, <= 0, but holds 1; pass log\(alpha\)"):
        tree_gated_delta_rule(**dict(x, g=torch.ones_like(alpha)), ancestor_mask=mask, impl="torch")
    with pytest.raises(ValueError, match="g is the log decay"):
        tree_gated_delta_rule(**dict(x, g=alpha), ancestor_mask=mask, impl="torch")
    path, path_len = torch.tensor([[0, 1, 3, -1]], dtype=torch.int32), torch.tensor([3], dtype=torch.int32)
    with pytest.raises(ValueError, match="g is the log decay"):
        commit_recurrent_state(x["state"].clone(), torch.zeros(1, 8, 3), torch.zeros(1, 4, 8), x["k"], x["v"], alpha,
                               x["beta"], path, path_len, impl="torch")


@pytest.mark.parametrize("impl", ["torch", pytest.param("triton", marks=needs_triton)])
@pytest.mark.parametrize("scale", [float("nan"), float("inf")])
def test_a_scale_that_is_not_finite_is_refused(scale, impl):
    """It would make every output NaN on either path, without a word."""
    x = {n: a.to(DEVICE) for n, a in delta_inputs(1, 3, 1, 1, 16, 16, torch.float32,
                                                   torch.Generator().manual_seed(4)).items()}
    mask = mask_of(torch.tensor([[-1, 0, 1]], dtype=torch.int32)).to(DEVICE)
    with pytest.raises(ValueError, match=r"scale must be a finite number.*None for Dk \*\* -0.5"):
        tree_gated_delta_rule(**x, ancestor_mask=mask, scale=scale, impl=impl)


@needs_triton
def test_triton_names_head_dims_it_cannot_take():
    gen = torch.Generator().manual_seed(9)
    x = {n: a.to(DEVICE) for n, a in delta_inputs(1, 3, 1, 1, 24, 16, torch.float32, gen).items()}
    mask = mask_of(torch.tensor([[-1, 0, 1]], dtype=torch.int32)).to(DEVICE)
    with pytest.raises(ValueError, match="Dk a power of two >= 16; got 24"):
        tree_gated_delta_rule(**x, ancestor_mask=mask, impl="triton")


def forced(split: bool) -> dict:
    """Configuration fields that send every call down one path: two launches, or the fused kernel."""
    heads = 0 if split else 10 ** 9
    return {"delta_split_heads": heads, "delta_split_heads_deep": heads}


@needs_triton
@pytest.mark.parametrize("split,rows", [(False, None), (True, 16), (True, 128)],
                         ids=["fused", "split-row-blocks", "split-whole-tree"])
@pytest.mark.parametrize("case", [c for c in delta_cases() if c[0] in (9, 33)][:2], ids=case_name)
def test_every_triton_path_equals_the_oracle(case, split, rows):
    """The fused kernel (small grids) and the two launches (mixing matrix, then apply) whatever
    the grid size the configuration table would pick; the apply in blocks of 16 rows (the GPU
    rows of the table) and on the whole tree at once (the interpreter's)."""
    from specdec_kernels.hybrid_configs import hybrid_config
    from specdec_kernels.tree_delta_triton import tree_gated_delta_rule_triton

    t, dtype, scale = case[0], case[4], case[7]
    x, parents, want = case_with_oracle(case)
    x = {n: a.to(DEVICE) for n, a in x.items()}
    config = hybrid_config(x["q"].device)
    config = dataclasses.replace(config, delta_rows=rows or config.delta_rows, **forced(split))
    got = tree_gated_delta_rule_triton(**x, ancestor_mask=mask_of(parents).to(DEVICE),
                                       scale=case[5] ** -0.5 if scale is None else scale, config=config)
    assert float(row_errors(got.cpu(), want).max()) <= TOLERANCE[dtype]


@pytest.mark.parametrize("bad", [-float("inf"), float("nan")])
def test_a_log_decay_that_is_not_finite_is_named(bad):
    """A decay of 0 (g = -inf) met "<= 0" but the chunked form differences path sums: NaN spread to
    the node's siblings on the torch path, and the two paths disagreed."""
    x = delta_inputs(1, 3, 1, 2, 16, 16, torch.float32, torch.Generator().manual_seed(24))
    x["g"][0, 2, 0] = bad
    mask = mask_of(torch.tensor([[-1, 0, 0]], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"g must be finite, but holds (-inf|nan); a decay of 0 is "
                                         r"g.clamp_min\(-30\)"):
        tree_gated_delta_rule(**x, ancestor_mask=mask, impl="torch")
    x["g"][0, 2, 0] = -30.0  # what the message offers: finite, and node 2's siblings untouched
    out = tree_gated_delta_rule(**x, ancestor_mask=mask, impl="torch")
    assert torch.isfinite(out).all()


def _tf32(data):
    """Finite float32 values rounded to TF32's 10 mantissa bits (to nearest even), as tensor cores read them."""
    import numpy as np

    bits = np.ascontiguousarray(data, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0xFFF) + ((bits >> np.uint32(13)) & np.uint32(1))) & np.uint32(0xFFFFE000)
    return rounded.view(np.float32)


@needs_triton
@pytest.mark.parametrize("split", [False, True], ids=["fused", "split"])
def test_sixteen_bit_inputs_keep_the_block_inverse_in_float32(split, monkeypatch):
    """On a GPU 16-bit inputs ran every dot with input_precision "tf32", whose only float32
    operands are the block inverse's powers of the keys' coupling: their alternating sum cancels
    terms thousands of times the result, and TF32's 10-bit operands left a row error of 0.26 here
    (keys alike, cosine ~0.99, written at beta 0.9; 0.02 with the inverse in float32). The
    interpreter multiplies float32 exactly, so here its dots round float32 operands to TF32 where
    asked to, as tensor cores do. On the H200 the split path then still missed on these keys past
    the first block of nodes (row errors 0.6-1.4, fp16 and bf16 alike): its apply on the whole
    tree at once, on one warpgroup, which the sm_90 row no longer takes (delta_rows 16)."""
    from specdec_kernels import tree_delta_triton
    from specdec_kernels.hybrid_configs import hybrid_config

    if not HAS_CUDA:
        from triton.runtime import interpreter

        plain_dot = interpreter.InterpreterBuilder.create_dot

        def tf32_dot(self, a, b, d, input_precision, *rest):
            if str(input_precision).upper().endswith(".TF32"):
                a, b = (interpreter.TensorHandle(_tf32(t.data), t.dtype) if t.data.dtype == "float32" else t
                        for t in (a, b))
            return plain_dot(self, a, b, d, input_precision, *rest)

        monkeypatch.setattr(interpreter.InterpreterBuilder, "create_dot", tf32_dot)
        monkeypatch.setattr(tree_delta_triton, "dot_precision", lambda q: "tf32")  # the GPU's choice for 16 bits
    gen = torch.Generator().manual_seed(25)
    batch, t, dim = 4, 33, 64
    x = delta_inputs(batch, t, 1, 1, dim, 16, torch.bfloat16, gen)
    x["k"] = torch.nn.functional.normalize(torch.randn(batch, 1, 1, dim, generator=gen)
                                           + 0.1 * torch.randn(batch, t, 1, dim, generator=gen), dim=-1).bfloat16()
    x["beta"] = torch.full_like(x["beta"], 0.9)
    x["g"] = x["g"] / 10
    parents = ragged_parents(batch, t, "chain", gen)
    want = path_oracle(**x, parents=parents, scale=dim ** -0.5)
    x = {n: a.to(DEVICE) for n, a in x.items()}
    config = dataclasses.replace(hybrid_config(x["q"].device), **forced(split))
    got = tree_delta_triton.tree_gated_delta_rule_triton(**x, ancestor_mask=mask_of(parents).to(DEVICE),
                                                         scale=dim ** -0.5, config=config)
    assert float(row_errors(got.cpu(), want).max()) <= TOLERANCE[torch.bfloat16]


def test_deep_trees_take_two_launches_only_from_more_pairs():
    """On the H100 two launches cost 4-6 % more than the fused kernel at 65 nodes and 192-384
    pairs, and saved 13 % at 1,536; at 17-33 nodes they saved 7-27 % from 192 pairs."""
    from specdec_kernels.hybrid_configs import DEEP_TREE_NODES, HYBRID_CONFIGS
    from specdec_kernels.tree_delta_triton import split_mixing

    cfg = HYBRID_CONFIGS["sm_90"]
    assert cfg.delta_split_heads < cfg.delta_split_heads_deep
    for nodes, fewest in ((DEEP_TREE_NODES, cfg.delta_split_heads), (DEEP_TREE_NODES + 1, cfg.delta_split_heads_deep)):
        assert split_mixing(fewest, nodes, cfg) and not split_mixing(fewest - 1, nodes, cfg)
    assert split_mixing(384, 33, cfg) and not split_mixing(384, 65, cfg) and split_mixing(1536, 65, cfg)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", ["k", "v", "g", "beta", "state", "ancestor_mask"])
def test_an_argument_on_another_device_than_q_is_named(name, impl):
    """A state or mask left on another device than q reached torch's own error (a Triton crash on a
    GPU): named in one line with the fix, before g's values are read."""
    x = delta_inputs(1, 4, 1, 2, 16, 16, torch.float32, torch.Generator().manual_seed(5))
    x["ancestor_mask"] = mask_of(torch.tensor([[-1, 0, 0, 1]], dtype=torch.int32))
    assert_wrong_device_named(tree_gated_delta_rule, {n: t.to(DEVICE) for n, t in x.items()}, name, "q", impl=impl)


def _formula64(q, k, v, g, beta, state, parents, scale):
    """HYBRID.md's "The ops" in float64, from the parents alone (no ancestor mask unpacking):
    ``(W [B, Hv, T, T], O [B, T, Hv, Dv])`` with ``W = ((Q K^T) * D) (I + strict(diag(beta) (K K^T)
    * D))^-1 diag(beta)`` and ``O = scale (diag(exp G) Q S + W (V - diag(exp G) K S))``."""
    d = torch.float64
    batch, t = q.shape[:2]
    group = v.shape[2] // q.shape[2]
    on = torch.zeros(batch, t, t, dtype=torch.bool)
    for b in range(batch):
        for i in range(t):
            j = i
            while j >= 0:
                on[b, i, j] = True
                j = int(parents[b, j])
    qh, kh = (x.to(d).repeat_interleave(group, 2).transpose(1, 2) for x in (q, k))  # [B, Hv, T, Dk]
    vh, gh, bh = v.to(d).transpose(1, 2), g.to(d).transpose(1, 2), beta.to(d).transpose(1, 2)
    gates = torch.einsum("bij,bhj->bhi", on.to(d), gh)  # G: the gate summed along each node's path
    decay = torch.where(on[:, None], torch.exp(gates[..., :, None] - gates[..., None, :]), 0.0)
    strict = decay * ~torch.eye(t, dtype=torch.bool)
    system = torch.eye(t, dtype=d) + bh[..., None] * (kh @ kh.transpose(-1, -2)) * strict
    w = (qh @ kh.transpose(-1, -2)) * decay @ torch.linalg.inv(system) @ torch.diag_embed(bh)
    s, e = state.to(d), torch.exp(gates)[..., None]
    out = scale * (e * (qh @ s) + w @ (vh - e * (kh @ s)))
    return w, out.transpose(1, 2)


@pytest.mark.parametrize("impl", IMPLS)
def test_mixing_matrix_and_output_formula_against_float64(impl):
    """HYBRID.md's ``W`` and ``O`` on a branching tree under two initial states: the output against
    the formula in float64 (itself checked against the path oracle), and on the Triton path the
    mixing kernel's ``W`` against the formula's, the same for either state (it reads none), and the
    output of both the fused kernel and the two launches. The
    torch path computes no ``W`` (it solves for the pseudo-values), so there the output only."""
    from specdec_kernels.hybrid_configs import hybrid_config
    from specdec_kernels.tree_delta_triton import padded_nodes, tree_delta_mixing, tree_gated_delta_rule_triton

    gen = torch.Generator().manual_seed(241)
    x = delta_inputs(2, 20, 1, 3, 16, 16, torch.float32, gen)
    parents = torch.tensor([[-1, 0, 0, 1, 1, 2, 3, 3, 5, 0, 9, 4, 6, 6, 10, 7, 15, 16, 2, 18],
                            [-1, 0, 1, 2, 0, 4, 5, 3, 7, 1, 9, 10, 8, 12, 0, 14, 13, 16, 17, 11]], dtype=torch.int32)
    scale = 0.37
    states = (x.pop("state"), torch.randn(2, 3, 16, 16, generator=gen))
    mask = mask_of(parents).to(DEVICE)
    dev = {n: a.to(DEVICE) for n, a in x.items()}
    for state in states:
        want_w, want = _formula64(**x, state=state, parents=parents, scale=scale)
        assert float((want - path_oracle(**x, state=state, parents=parents, scale=scale)).abs().max()) < 1e-10
        got = tree_gated_delta_rule(**dev, state=state.to(DEVICE), ancestor_mask=mask, scale=scale, impl=impl)
        assert float(row_errors(got.cpu(), want).max()) <= TOLERANCE[torch.float32]
        if impl == "triton":  # the two launches too, whose apply reads the W checked below
            config = dataclasses.replace(hybrid_config(dev["q"].device), **forced(True))
            got = tree_gated_delta_rule_triton(**dev, state=state.to(DEVICE), ancestor_mask=mask, scale=scale,
                                               config=config)
            assert float(row_errors(got.cpu(), want).max()) <= TOLERANCE[torch.float32]
            mix, _ = tree_delta_mixing(dev["q"], dev["k"], dev["g"], dev["beta"], mask, value_heads=3)
            w = mix.cpu().view(2, 3, 20, padded_nodes(20))[..., :20].double()
            assert float((w - want_w).abs().max()) <= 1e-4, "the mixing kernel's W is not HYBRID.md's"
