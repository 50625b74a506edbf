"""Triton kernel for :func:`specdec_kernels.tree_accept_and_commit` (imported lazily).

The commit kernel's grid ``(layers, B, row blocks)``; each program first walks its request's
tree (the accept kernel's walk, in registers), then moves that request's rows four steps at a
time exactly as the commit kernel does, taking each chunk's four sources from the path in
registers (one reduction a chunk).
The program of layer 0, row block 0 also writes the path, its length and the bonus token.
Every program of a request computes the same walk from the same inputs, so they agree.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .kv_commit_triton import BLOCK, _move_four, check_commit_layout, commit_grid, rows_fit
from .tree_accept_triton import (DEFAULT_ACCEPT_POLICY, AcceptPolicy, _accepted_path, prepare_accept_inputs,
                                 walk_constexprs)


@triton.jit
def _chunk_sources(path, lane, i, length):
    """path[i .. i + 3] as four scalars (i + j itself, no move, past the path's end), out of one
    reduction across the program's warps instead of four: each node index (< 2^16) in its own
    16-bit field of one int64."""
    field = (lane - i).to(tl.int64)
    in_chunk = (field >= 0) & (field < 4)
    packed = tl.sum(tl.where(in_chunk, (path.to(tl.int64) & 0xFFFF) << (16 * field), 0))
    s0 = tl.where(i < length, packed & 0xFFFF, i)
    s1 = tl.where(i + 1 < length, (packed >> 16) & 0xFFFF, i + 1)
    s2 = tl.where(i + 2 < length, (packed >> 32) & 0xFFFF, i + 2)
    s3 = tl.where(i + 3 < length, (packed >> 48) & 0xFFFF, i + 3)
    return s0.to(tl.int64), s1.to(tl.int64), s2.to(tl.int64), s3.to(tl.int64)


@triton.jit
def _accept_commit_kernel(tokens_ptr, parents_ptr, argmax_ptr, path_ptr, path_len_ptr, bonus_ptr,
                          k_ptr, v_ptr, lens_ptr,
                          stride_tb, stride_pb, stride_ab, stride_pathb,
                          stride_kl, stride_kb, stride_ks, stride_vl, stride_vb, stride_vs,
                          num_nodes, row_elems, cache_rows, BLOCK_T: tl.constexpr, LOG_T: tl.constexpr,
                          DOUBLING: tl.constexpr, BLOCK: tl.constexpr):
    layer = tl.program_id(0).to(tl.int64)
    b = tl.program_id(1).to(tl.int64)
    row_block = tl.program_id(2)
    prefix_len = tl.load(lens_ptr + b).to(tl.int64)
    lane, path, length, want = _accepted_path(tokens_ptr, parents_ptr, argmax_ptr, b, stride_tb, stride_pb,
                                              stride_ab, num_nodes, BLOCK_T, LOG_T, DOUBLING)
    if (layer == 0) & (row_block == 0):
        tl.store(path_ptr + b * stride_pathb + lane, path.to(tl.int32), mask=lane < num_nodes)
        tl.store(path_len_ptr + b, length.to(tl.int32))
        tl.store(bonus_ptr + b, want.to(tl.int64))
    offs = row_block * BLOCK + tl.arange(0, BLOCK)
    in_row = offs < row_elems
    k_base = k_ptr + layer * stride_kl + b * stride_kb + prefix_len * stride_ks + offs
    v_base = v_ptr + layer * stride_vl + b * stride_vb + prefix_len * stride_vs + offs
    moves = tl.where(rows_fit(prefix_len, num_nodes, cache_rows), length, 1)
    for i in range(1, moves, 4):  # path[0] == 0: the root is already in place
        s0, s1, s2, s3 = _chunk_sources(path, lane, i, length)
        _move_four(k_base, v_base, i, s0, s1, s2, s3, in_row, stride_ks, stride_vs)


def tree_accept_and_commit_triton(tokens, parents, target_argmax, k_cache, v_cache, cache_lens, out=None, *,
                                  policy: AcceptPolicy = DEFAULT_ACCEPT_POLICY):
    """Launcher: one launch. ``out`` (optional): preallocated ``(path, path_len, bonus)``;
    ``policy``: which walk (:class:`~specdec_kernels.tree_accept_triton.AcceptPolicy`)."""
    from .tree_accept import AcceptResult

    check_commit_layout(k_cache, v_cache)
    batch, num_nodes = tokens.shape
    (tokens, parents, target_argmax), out = prepare_accept_inputs(tokens, parents, target_argmax, out)
    layers, _, _, kv_heads, head_dim = k_cache.shape
    if batch == 0:
        return AcceptResult(*out)
    if layers == 0:  # nothing to move: the walk alone
        from .tree_accept_triton import tree_accept_greedy_triton

        return tree_accept_greedy_triton(tokens, parents, target_argmax, out=out, policy=policy)
    _accept_commit_kernel[commit_grid(k_cache)](
        tokens, parents, target_argmax, out.path, out.path_len, out.bonus,
        k_cache, v_cache, cache_lens.contiguous(),
        tokens.stride(0), parents.stride(0), target_argmax.stride(0), out.path.stride(0),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        num_nodes, kv_heads * head_dim, k_cache.shape[2],
        **walk_constexprs(num_nodes, policy=policy), BLOCK=BLOCK, num_warps=4,
    )
    return AcceptResult(*out)
