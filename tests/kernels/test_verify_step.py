"""A whole verify step: build → verify → accept → commit → next decode step, which must see the
same attention as a cache built from scratch with only the accepted tokens."""

from __future__ import annotations

import math

import pytest
import torch

from kernel_cases import DEVICE, ROW_TOLERANCE, needs_triton, row_errors
from specdec_kernels import (build_ddtree, commit_accepted_kv, tree_accept_greedy,
                             tree_verify_attention)
from specdec_kernels.tree_verify import tree_verify_attention_reference

IMPLS = [("torch", torch.float32), pytest.param("triton", torch.bfloat16, marks=needs_triton)]


def dense_attention(q, keys, values):
    """q [Hq, D], keys/values [n, Hkv, D], float64, no mask."""
    group = q.shape[0] // keys.shape[1]
    keys = keys.double().repeat_interleave(group, dim=1)
    values = values.double().repeat_interleave(group, dim=1)
    scores = torch.einsum("hd,nhd->hn", q.double(), keys) / math.sqrt(q.shape[-1])
    return torch.einsum("hn,nhd->hd", scores.softmax(-1), values)


@pytest.mark.parametrize("impl,dtype", IMPLS)
def test_verify_accept_commit_then_decode_equals_cache_from_scratch(impl, dtype):
    gen = torch.Generator().manual_seed(2024)
    layers, kv_heads, group, head_dim = 2, 2, 4, 64
    budget, depth, vocab = 12, 6, 20
    lens = torch.tensor([0, 9, 40], dtype=torch.int32)
    batch, num_nodes = len(lens), budget + 1
    rows = int(lens.max()) + num_nodes + 1
    dev = dict(device=DEVICE)

    draft = (torch.randn(batch, depth, vocab, generator=gen) * 2).log_softmax(-1)
    roots = torch.randint(0, vocab, (batch,), generator=gen)
    tree = build_ddtree(draft.to(**dev), roots.to(**dev), budget, impl=impl)

    k_cache = torch.randn(layers, batch, rows, kv_heads, head_dim, generator=gen).to(dtype=dtype, **dev)
    v_cache = torch.randn(layers, batch, rows, kv_heads, head_dim, generator=gen).to(dtype=dtype, **dev)
    before_k, before_v = k_cache.clone(), v_cache.clone()
    q = torch.randn(layers, batch, num_nodes, kv_heads * group, head_dim, generator=gen).to(dtype=dtype, **dev)
    lens_d = lens.to(**dev)
    for layer in range(layers):
        out = tree_verify_attention(q[layer], k_cache[layer], v_cache[layer], lens_d, tree.ancestor_mask,
                                    impl=impl)
        ref = tree_verify_attention_reference(q[layer].double(), k_cache[layer].double(),
                                              v_cache[layer].double(), lens_d, tree.ancestor_mask,
                                              compute_dtype=torch.float64)
        assert float(row_errors(out.cpu(), ref.cpu()).max()) <= ROW_TOLERANCE[dtype]

    # the target's argmax: request 0 rejects every draft, the others follow a random branch
    tokens, parents = tree.tokens.cpu(), tree.parents.cpu()
    argmax = torch.full((batch, num_nodes), vocab + 1)  # a token no draft node carries
    for b in range(1, batch):
        node = 0
        while True:
            kids = (parents[b] == node).nonzero().flatten()
            if not len(kids):
                break
            node = int(kids[int(torch.randint(0, len(kids), (1,), generator=gen))])
            argmax[b, int(parents[b, node])] = tokens[b, node]
    accepted = tree_accept_greedy(tree.tokens, tree.parents, argmax.to(**dev), impl=impl)
    assert int(accepted.path_len[0]) == 1 and int(accepted.bonus[0]) == vocab + 1
    assert all(int(n) > 1 for n in accepted.path_len[1:].cpu())

    commit_accepted_kv(k_cache, v_cache, lens_d, accepted.path, accepted.path_len, impl=impl)
    new_lens = lens_d + accepted.path_len

    # next decode step: the bonus token's query and K/V row at position new_len (T = 1)
    q_next = torch.randn(layers, batch, 1, kv_heads * group, head_dim, generator=gen).to(dtype=dtype, **dev)
    new_k = torch.randn(layers, batch, kv_heads, head_dim, generator=gen).to(dtype=dtype, **dev)
    new_v = torch.randn(layers, batch, kv_heads, head_dim, generator=gen).to(dtype=dtype, **dev)
    batch_idx = torch.arange(batch, device=DEVICE)
    k_cache[:, batch_idx, new_lens.long()] = new_k
    v_cache[:, batch_idx, new_lens.long()] = new_v
    self_only = torch.ones(batch, 1, 1, dtype=torch.int32, device=DEVICE)

    path = accepted.path.cpu()
    for layer in range(layers):
        out = tree_verify_attention(q_next[layer], k_cache[layer], v_cache[layer], new_lens, self_only,
                                    impl=impl).cpu()
        for b in range(batch):
            base, n = int(lens[b]), int(accepted.path_len[b])
            src = list(range(base)) + [base + int(p) for p in path[b, :n]]
            scratch_k = torch.cat([before_k[layer, b, src].cpu(), new_k[layer, b, None].cpu()])
            scratch_v = torch.cat([before_v[layer, b, src].cpu(), new_v[layer, b, None].cpu()])
            committed = slice(0, base + n)
            assert torch.equal(k_cache[layer, b, committed].cpu(), scratch_k[:-1])
            assert torch.equal(v_cache[layer, b, committed].cpu(), scratch_v[:-1])
            ref = dense_attention(q_next[layer, b, 0].cpu(), scratch_k, scratch_v)
            err = float(row_errors(out[b, 0], ref).max())
            assert err <= ROW_TOLERANCE[dtype], f"layer {layer} request {b}: {err:.3g}"
