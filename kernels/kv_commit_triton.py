"""Triton kernel for :func:`specdec_kernels.commit_accepted_kv` (imported lazily).

Grid ``(layers, B, ceil(Hkv * D / BLOCK))``: each program owns one slice of the (Hkv, D) row of
one request in one layer, for both K and V, and walks that request's path in order, moving row
``L_b + path[i]`` to ``L_b + i``. Programs never share an element, and within a program every
element stays with the same thread across the walk (each row is the same 1-D block), so no
barrier is needed. Rows already in place (``path[i] == i``) are skipped: a contiguous path
copies nothing.

The walk goes four steps at a time: the four source rows are all loaded, then the four
destinations stored, so a program waits for memory once per four steps rather than once per
step (step by step, accept + commit took as long as a tenth of one layer's verify attention:
docs/kernels-performance.md, "Decisions"). Loading a chunk before storing it is safe: a store at
step k writes row k, and every source of a later step j is ``path[j] >= j > k``; within the
chunk, a source that is also a destination (``path[j] = k > j``) has been loaded before any store.
"""

from __future__ import annotations

import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def rows_fit(prefix_len, num_nodes, cache_rows):
    """Whether a request's tree rows ``[L_b, L_b + T)`` lie within its S cache rows: one that
    does not moves nothing, so a bad length on the GPU (unchecked: reading it is a host sync)
    never writes into another request's rows."""
    return (prefix_len >= 0) & (prefix_len + num_nodes <= cache_rows)


@triton.jit
def _step_source(path_row_ptr, i, path_len, num_nodes):
    """Row offset (within the tree) that step i moves to row i; i itself past the path, or where
    the path names no tree row (unchecked on a GPU), so that nothing moves."""
    source = tl.load(path_row_ptr + i, mask=i < path_len, other=i).to(tl.int64)
    return tl.where((source >= 0) & (source < num_nodes), source, i)


@triton.jit
def _move_four(k_base, v_base, i, s0, s1, s2, s3, in_row, stride_ks, stride_vs):
    """Steps i .. i + 3 of the walk: rows s0 .. s3 (tree offsets) to rows i .. i + 3; a step whose
    source is its own row (in place, or past the path) moves nothing. All loads, then all stores."""
    no_move = tl.zeros_like(in_row.to(tl.int64))
    m0 = in_row & (no_move + s0 != i)
    m1 = in_row & (no_move + s1 != i + 1)
    m2 = in_row & (no_move + s2 != i + 2)
    m3 = in_row & (no_move + s3 != i + 3)
    k0 = tl.load(k_base + s0 * stride_ks, mask=m0)
    k1 = tl.load(k_base + s1 * stride_ks, mask=m1)
    k2 = tl.load(k_base + s2 * stride_ks, mask=m2)
    k3 = tl.load(k_base + s3 * stride_ks, mask=m3)
    v0 = tl.load(v_base + s0 * stride_vs, mask=m0)
    v1 = tl.load(v_base + s1 * stride_vs, mask=m1)
    v2 = tl.load(v_base + s2 * stride_vs, mask=m2)
    v3 = tl.load(v_base + s3 * stride_vs, mask=m3)
    tl.store(k_base + i * stride_ks, k0, mask=m0)
    tl.store(k_base + (i + 1) * stride_ks, k1, mask=m1)
    tl.store(k_base + (i + 2) * stride_ks, k2, mask=m2)
    tl.store(k_base + (i + 3) * stride_ks, k3, mask=m3)
    tl.store(v_base + i * stride_vs, v0, mask=m0)
    tl.store(v_base + (i + 1) * stride_vs, v1, mask=m1)
    tl.store(v_base + (i + 2) * stride_vs, v2, mask=m2)
    tl.store(v_base + (i + 3) * stride_vs, v3, mask=m3)


@triton.jit
def _commit_kernel(k_ptr, v_ptr, lens_ptr, path_ptr, path_len_ptr,
                   stride_kl, stride_kb, stride_ks, stride_vl, stride_vb, stride_vs, stride_pathb,
                   row_elems, cache_rows, num_nodes, BLOCK: tl.constexpr):
    layer = tl.program_id(0).to(tl.int64)
    b = tl.program_id(1).to(tl.int64)
    offs = tl.program_id(2) * BLOCK + tl.arange(0, BLOCK)
    in_row = offs < row_elems
    prefix_len = tl.load(lens_ptr + b).to(tl.int64)
    # no step writes past the tree's rows: at most T steps, none for a request past its caches
    path_len = tl.minimum(tl.load(path_len_ptr + b), num_nodes)
    path_len = tl.where(rows_fit(prefix_len, num_nodes, cache_rows), path_len, 1)
    path_row = path_ptr + b * stride_pathb
    k_base = k_ptr + layer * stride_kl + b * stride_kb + prefix_len * stride_ks + offs
    v_base = v_ptr + layer * stride_vl + b * stride_vb + prefix_len * stride_vs + offs
    for i in range(1, path_len, 4):  # path[0] == 0: the root is already in place
        _move_four(k_base, v_base, i, _step_source(path_row, i, path_len, num_nodes),
                   _step_source(path_row, i + 1, path_len, num_nodes),
                   _step_source(path_row, i + 2, path_len, num_nodes),
                   _step_source(path_row, i + 3, path_len, num_nodes), in_row, stride_ks, stride_vs)


def commit_grid(k_cache):
    """(layers, B, row blocks): one program per BLOCK elements of one (layer, request) row."""
    layers, batch, _, kv_heads, head_dim = k_cache.shape
    return layers, batch, triton.cdiv(kv_heads * head_dim, BLOCK)


def check_commit_layout(k_cache, v_cache):
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        if cache.stride(4) != 1 or cache.stride(3) != cache.shape[4]:
            raise ValueError(f"{name} must have contiguous (Hkv, D) rows (strides D and 1) for impl='triton', got "
                             f"strides {cache.stride()}; pass {name}.contiguous() and keep that copy (it is "
                             "updated in place), or impl='torch'")


def commit_accepted_kv_triton(k_cache, v_cache, cache_lens, path, path_len):
    """Launcher: one launch for all layers, both caches. Each cache row's (Hkv, D) block must be
    contiguous (strides D and 1); layer, batch and row strides are free."""
    check_commit_layout(k_cache, v_cache)
    layers, batch, _, kv_heads, head_dim = k_cache.shape
    if layers == 0 or batch == 0:
        return
    path = path.contiguous()
    _commit_kernel[commit_grid(k_cache)](
        k_cache, v_cache, cache_lens.contiguous(), path, path_len.contiguous(),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), path.stride(0),
        kv_heads * head_dim, k_cache.shape[2], path.shape[1], BLOCK=BLOCK, num_warps=4,
    )
