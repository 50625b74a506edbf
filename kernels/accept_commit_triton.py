"""Triton kernel for :func:`specdec_kernels.tree_accept_and_commit` (imported lazily).

Grid ``(layers, B, row blocks of COMMIT_BLOCK elements)``; each program first walks its
request's tree (the accept kernel's walk, in registers), then moves its slice of every accepted
row at once: the sources of up to STEP_BLOCK steps are loaded as one [steps, COMMIT_BLOCK] block
(masked past the path and where a row is already in place), then all stored, so a program waits
for memory once per STEP_BLOCK steps. Loading before storing is safe: a store at step k writes
row k, and every source of a later step j is ``path[j] >= j > k``. The program of layer 0, row
block 0 also writes the path, its length and the bonus token. Every program of a request
computes the same walk from the same inputs, so they agree.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .kv_commit_triton import check_commit_layout
from .tree_accept_triton import _greedy_walk, accept_block_t, prepare_accept_inputs

# Row elements per program, its warps, and the most steps one block of loads takes (H200, PERF.md
# round 7).
COMMIT_BLOCK = 256
COMMIT_WARPS = 4
STEP_BLOCK = 32


@triton.jit
def _accept_commit_kernel(tokens_ptr, parents_ptr, argmax_ptr, path_ptr, path_len_ptr, bonus_ptr,
                          k_ptr, v_ptr, lens_ptr,
                          stride_tb, stride_pb, stride_ab, stride_pathb,
                          stride_kl, stride_kb, stride_ks, stride_vl, stride_vb, stride_vs,
                          num_nodes, row_elems, BLOCK_T: tl.constexpr, STEPS: tl.constexpr, BLOCK: tl.constexpr):
    layer = tl.program_id(0).to(tl.int64)
    b = tl.program_id(1).to(tl.int64)
    row_block = tl.program_id(2)
    prefix_len = tl.load(lens_ptr + b).to(tl.int64)
    lane, path, length, want = _greedy_walk(tokens_ptr, parents_ptr, argmax_ptr, b, stride_tb, stride_pb,
                                            stride_ab, num_nodes, BLOCK_T)
    if (layer == 0) & (row_block == 0):
        tl.store(path_ptr + b * stride_pathb + lane, path.to(tl.int32), mask=lane < num_nodes)
        tl.store(path_len_ptr + b, length.to(tl.int32))
        tl.store(bonus_ptr + b, want.to(tl.int64))
    offs = row_block * BLOCK + tl.arange(0, BLOCK)
    in_row = (offs < row_elems)[None, :]
    k_base = k_ptr + layer * stride_kl + b * stride_kb + prefix_len * stride_ks + offs[None, :]
    v_base = v_ptr + layer * stride_vl + b * stride_vb + prefix_len * stride_vs + offs[None, :]
    for first in range(1, length, STEPS):  # path[0] == 0: the root is already in place
        step = first + tl.arange(0, STEPS)
        # path[step], gathered from the walk's lanes
        source = tl.sum(tl.where(lane[None, :] == step[:, None], path[None, :], 0), axis=1).to(tl.int64)
        move = ((step < length) & (source != step))[:, None] & in_row
        k_rows = tl.load(k_base + source[:, None] * stride_ks, mask=move)
        v_rows = tl.load(v_base + source[:, None] * stride_vs, mask=move)
        tl.store(k_base + step[:, None].to(tl.int64) * stride_ks, k_rows, mask=move)
        tl.store(v_base + step[:, None].to(tl.int64) * stride_vs, v_rows, mask=move)


def commit_tiles(num_nodes: int, row_elems: int, block: int = 0, warps: int = 0) -> tuple[int, int, int]:
    """(steps per block of loads, row elements per program, warps): every step of a T-node tree
    in one block up to STEP_BLOCK steps."""
    steps = min(STEP_BLOCK, triton.next_power_of_2(max(num_nodes - 1, 1)))
    block = min(block or COMMIT_BLOCK, triton.next_power_of_2(row_elems))
    return steps, block, warps or COMMIT_WARPS


def tree_accept_and_commit_triton(tokens, parents, target_argmax, k_cache, v_cache, cache_lens, out=None,
                                  block=0, warps=0):
    """Launcher: one launch. ``out`` (optional): preallocated ``(path, path_len, bonus)``;
    ``block`` / ``warps``: row elements per program and its warps (0: the tuned defaults)."""
    from .tree_accept import AcceptResult

    check_commit_layout(k_cache, v_cache)
    batch, num_nodes = tokens.shape
    (tokens, parents, target_argmax), out = prepare_accept_inputs(tokens, parents, target_argmax, out)
    layers, _, _, kv_heads, head_dim = k_cache.shape
    if batch == 0:
        return AcceptResult(*out)
    if layers == 0:  # nothing to move: the walk alone
        from .tree_accept_triton import tree_accept_greedy_triton

        return tree_accept_greedy_triton(tokens, parents, target_argmax, out=out)
    row_elems = kv_heads * head_dim
    steps, block, warps = commit_tiles(num_nodes, row_elems, block, warps)
    _accept_commit_kernel[(layers, batch, triton.cdiv(row_elems, block))](
        tokens, parents, target_argmax, out.path, out.path_len, out.bonus,
        k_cache, v_cache, cache_lens.contiguous(),
        tokens.stride(0), parents.stride(0), target_argmax.stride(0), out.path.stride(0),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        num_nodes, row_elems, BLOCK_T=accept_block_t(num_nodes), STEPS=steps, BLOCK=block, num_warps=warps,
    )
    return AcceptResult(*out)
