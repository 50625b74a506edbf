"""``tree_verify_attention``: the target model's attention for one verify step over a DDTree.

Each request b has T tree queries. Query i attends to the committed prefix (cache rows
``[0, L_b)``) and to the tree rows ``[L_b, L_b + T)`` of its own ancestors and itself (the
ancestor bitmask), never to siblings or other branches. GQA: query head h reads KV head
``h // G`` with ``G = Hq / Hkv``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .impl import resolve_impl
from .tree_layout import num_mask_words, unpack_ancestor_mask


def check_verify_args(q: Tensor, k_cache: Tensor, v_cache: Tensor, cache_lens: Tensor,
                      ancestor_mask: Tensor) -> None:
    """Raise ValueError naming the offending input when shapes or dtypes do not fit."""
    if q.dim() != 4:
        raise ValueError(f"q must be [B, T, Hq, D], got shape {tuple(q.shape)}")
    batch, num_nodes, q_heads, head_dim = q.shape
    if k_cache.dim() != 4 or k_cache.shape[0] != batch or k_cache.shape[3] != head_dim:
        raise ValueError(f"k_cache must be [B={batch}, S, Hkv, D={head_dim}], got {tuple(k_cache.shape)}")
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache shape {tuple(v_cache.shape)} differs from k_cache {tuple(k_cache.shape)}")
    kv_heads = k_cache.shape[2]
    if q_heads % kv_heads:
        raise ValueError(f"Hq={q_heads} is not a multiple of Hkv={kv_heads}")
    if k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise ValueError(f"q, k_cache, v_cache dtypes differ: {q.dtype}, {k_cache.dtype}, {v_cache.dtype}")
    if cache_lens.shape != (batch,):
        raise ValueError(f"cache_lens must be [B={batch}], got {tuple(cache_lens.shape)}")
    words = num_mask_words(num_nodes)
    if ancestor_mask.shape != (batch, num_nodes, words) or ancestor_mask.dtype != torch.int32:
        raise ValueError(
            f"ancestor_mask must be int32 [B={batch}, T={num_nodes}, W={words}], "
            f"got {ancestor_mask.dtype} {tuple(ancestor_mask.shape)}"
        )


def tree_attention_mask(cache_lens: Tensor, ancestor_mask: Tensor, num_keys: int) -> Tensor:
    """Boolean ``[B, T, num_keys]`` mask over cache rows: True where query i may attend.

    Row j is visible to node i iff ``j < L_b`` (prefix) or ``j - L_b`` is an ancestor of i
    (or i itself).
    """
    batch, num_nodes, _ = ancestor_mask.shape
    device = ancestor_mask.device
    lens = cache_lens.to(device=device, dtype=torch.int64).view(batch, 1, 1)
    key = torch.arange(num_keys, device=device).view(1, 1, num_keys)
    rel = key - lens  # [B, 1, S]
    in_tree = (rel >= 0) & (rel < num_nodes)
    rel_c = rel.clamp(0, num_nodes - 1).expand(batch, num_nodes, num_keys)
    anc = unpack_ancestor_mask(ancestor_mask, num_nodes)  # [B, T, T]
    tree_visible = torch.gather(anc, 2, rel_c) & in_tree
    return (key < lens) | tree_visible


def tree_verify_attention_reference(q: Tensor, k_cache: Tensor, v_cache: Tensor, cache_lens: Tensor,
                                    ancestor_mask: Tensor, sm_scale: float | None = None,
                                    compute_dtype: torch.dtype = torch.float32,
                                    num_keys: int | None = None) -> Tensor:
    """SDPA with a boolean tree mask and ``enable_gqa=True``, computed in ``compute_dtype``.

    ``num_keys`` bounds the cache rows looked at (default: all S rows; the engine passes
    ``max(L) + T`` to skip unused capacity). Returns ``[B, T, Hq, D]`` in q's dtype.
    """
    num_keys = k_cache.shape[1] if num_keys is None else num_keys
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    mask = tree_attention_mask(cache_lens, ancestor_mask, num_keys)
    qh = q.transpose(1, 2).to(compute_dtype)
    kh = k_cache[:, :num_keys].transpose(1, 2).to(compute_dtype)
    vh = v_cache[:, :num_keys].transpose(1, 2).to(compute_dtype)
    out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask.unsqueeze(1), scale=scale,
                                         enable_gqa=True)
    return out.transpose(1, 2).to(q.dtype)


def tree_verify_attention(q: Tensor, k_cache: Tensor, v_cache: Tensor, cache_lens: Tensor,
                          ancestor_mask: Tensor, sm_scale: float | None = None,
                          impl: str = "auto") -> Tensor:
    """Ancestor-masked attention of T tree queries over prefix + tree KV rows, per request.

    q:             [B, T, Hq, D] fp16 / bf16 / fp32; any strides with unit stride in D.
    k_cache/v_cache: [B, S, Hkv, D], q's dtype, unit stride in D. Rows ``[0, L_b)`` are the
                   committed prefix, rows ``[L_b, L_b + T)`` the tree's own K/V rows (written by
                   the caller before the call); ``L_b + T <= S``. Rows past that are never read.
    cache_lens:    [B] int32, L_b (tree rows excluded); ragged across the batch. Read on the
                   device only: no host synchronisation.
    ancestor_mask: [B, T, W] int32 (see :mod:`specdec_kernels.tree_layout`).
    sm_scale:      softmax scale, default ``1 / sqrt(D)``.
    Returns a new ``[B, T, Hq, D]`` tensor in q's dtype. Accumulation is fp32. Asynchronous on
    CUDA like any kernel launch.
    """
    check_verify_args(q, k_cache, v_cache, cache_lens, ancestor_mask)
    if resolve_impl(impl, q, k_cache, v_cache) == "torch":
        # Look only at the rows in use (one host read of max(L); free on the CPU, a sync on CUDA).
        num_keys = min(k_cache.shape[1], int(cache_lens.max()) + q.shape[1]) if q.shape[0] else 0
        return tree_verify_attention_reference(q, k_cache, v_cache, cache_lens, ancestor_mask,
                                               sm_scale, num_keys=num_keys)
    from .tree_verify_triton import tree_verify_attention_triton

    return tree_verify_attention_triton(q, k_cache, v_cache, cache_lens, ancestor_mask, sm_scale)
