"""Triton kernel for :func:`specdec_kernels.commit_accepted_kv` (imported lazily).

Grid ``(layers, B, ceil(Hkv * D / BLOCK))``: each program owns one slice of the (Hkv, D) row of
one request in one layer, for both K and V, and walks that request's path in order, moving row
``L_b + path[i]`` to ``L_b + i``. Programs never share an element, and within a program every
element stays with the same thread across the walk, so the in-place order argument of
:mod:`specdec_kernels.kv_commit` (``path[i] >= i``: a source row is never one already written)
holds without barriers. Rows already in place (``path[i] == i``) are skipped: a contiguous
path copies nothing.
"""

from __future__ import annotations

import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _commit_kernel(k_ptr, v_ptr, lens_ptr, path_ptr, path_len_ptr,
                   stride_kl, stride_kb, stride_ks, stride_vl, stride_vb, stride_vs, stride_pathb,
                   row_elems, BLOCK: tl.constexpr):
    layer = tl.program_id(0).to(tl.int64)
    b = tl.program_id(1).to(tl.int64)
    offs = tl.program_id(2) * BLOCK + tl.arange(0, BLOCK)
    in_row = offs < row_elems
    prefix_len = tl.load(lens_ptr + b).to(tl.int64)
    path_len = tl.load(path_len_ptr + b)
    k_base = k_ptr + layer * stride_kl + b * stride_kb + prefix_len * stride_ks + offs
    v_base = v_ptr + layer * stride_vl + b * stride_vb + prefix_len * stride_vs + offs
    for i in range(1, path_len):  # path[0] == 0: the root is already in place
        src = tl.load(path_ptr + b * stride_pathb + i).to(tl.int64)
        if src != i:
            k_row = tl.load(k_base + src * stride_ks, mask=in_row)
            v_row = tl.load(v_base + src * stride_vs, mask=in_row)
            tl.store(k_base + i * stride_ks, k_row, mask=in_row)
            tl.store(v_base + i * stride_vs, v_row, mask=in_row)


def commit_accepted_kv_triton(k_cache, v_cache, cache_lens, path, path_len):
    """Launcher: one launch for all layers, both caches. Each cache row's (Hkv, D) block must be
    contiguous (strides D and 1); layer, batch and row strides are free."""
    layers, batch, _, kv_heads, head_dim = k_cache.shape
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        if cache.stride(4) != 1 or cache.stride(3) != head_dim:
            raise ValueError(f"{name} needs contiguous (Hkv, D) rows; got strides {cache.stride()}")
    row_elems = kv_heads * head_dim
    if layers == 0 or batch == 0:
        return
    path = path.contiguous()
    grid = (layers, batch, triton.cdiv(row_elems, BLOCK))
    _commit_kernel[grid](
        k_cache, v_cache, cache_lens.contiguous(), path, path_len.contiguous(),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), path.stride(0),
        row_elems, BLOCK=BLOCK, num_warps=4,
    )
