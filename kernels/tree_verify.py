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

from .cache_lens import check_cache_lens
from .impl import resolve_impl
from .tensor_checks import check_float, check_same_device
from .tree_layout import check_mask_layout, unpack_ancestor_mask


def check_verify_args(q: Tensor, k_cache: Tensor, v_cache: Tensor, cache_lens: Tensor,
                      ancestor_mask: Tensor, sm_scale: float | None = None) -> None:
    """Raise ValueError naming the offending input when devices, shapes, dtypes or the scale do not fit."""
    check_same_device(("q", "k_cache", "v_cache", "cache_lens", "ancestor_mask"),
                      q, k_cache, v_cache, cache_lens, ancestor_mask)
    if sm_scale is not None and not math.isfinite(sm_scale):
        # a NaN or infinite scale would make every output row NaN without a word
        raise ValueError(f"sm_scale must be a finite number, got {sm_scale}; pass None for 1 / sqrt(D)")
    q_shape, k_shape = q.shape, k_cache.shape
    if len(q_shape) != 4:
        raise ValueError(f"q must be [B, T, Hq, D], got shape {tuple(q_shape)}")
    batch, num_nodes, q_heads, head_dim = q_shape
    if len(k_shape) != 4 or k_shape[0] != batch or k_shape[3] != head_dim:
        raise ValueError(f"k_cache must be [B={batch}, S, Hkv, D={head_dim}], got {tuple(k_shape)}")
    if v_cache.shape != k_shape:
        raise ValueError(f"v_cache shape {tuple(v_cache.shape)} differs from k_cache {tuple(k_shape)}")
    kv_heads = k_shape[2]
    if q_heads % kv_heads:
        # a cache stored [B, Hkv, S, D] lands here with its S read as Hkv
        raise ValueError(f"k_cache must be [B, S, Hkv, D] with q's Hq={q_heads} heads a multiple of Hkv, got Hkv = "
                         f"k_cache.shape[2] = {kv_heads} of {tuple(k_shape)}; pass k_cache.transpose(1, 2) and "
                         "v_cache.transpose(1, 2) for caches stored [B, Hkv, S, D]")
    dtype = q.dtype
    if k_cache.dtype != dtype or v_cache.dtype != dtype:
        raise ValueError(f"k_cache and v_cache must be q's dtype ({dtype}), got {k_cache.dtype}, {v_cache.dtype}; "
                         "pass them .to(q.dtype)")
    # torch's path cast its float32 output to the integers silently
    check_float("q, k_cache and v_cache", q, "q.float(), k_cache.float(), v_cache.float()",
                "float tensors (fp16 / bf16 / fp32; float64 with impl='torch')")
    if cache_lens.shape != (batch,):
        raise ValueError(f"cache_lens must be [B={batch}], got {tuple(cache_lens.shape)}")
    check_mask_layout(ancestor_mask, batch, num_nodes)
    check_cache_lens(cache_lens, num_nodes, k_shape[1])


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
    """Masked softmax attention in ``compute_dtype``, query heads grouped by KV head.

    The same function as SDPA with the boolean :func:`tree_attention_mask` and
    ``enable_gqa=True`` (the tests check the two agree), written as two batched matmuls because
    PyTorch's CPU SDPA kernel is an order of magnitude slower at these shapes and the embedded
    engine decodes with this path. ``num_keys`` bounds the cache rows looked at (default all S).
    Returns ``[B, T, Hq, D]`` in q's dtype.
    """
    batch, num_nodes, q_heads, head_dim = q.shape
    kv_heads = k_cache.shape[2]
    group = q_heads // kv_heads
    num_keys = k_cache.shape[1] if num_keys is None else num_keys
    scale = 1.0 / math.sqrt(head_dim) if sm_scale is None else sm_scale
    visible = tree_attention_mask(cache_lens, ancestor_mask, num_keys)  # [B, T, N]
    bias = torch.zeros(visible.shape, dtype=compute_dtype, device=q.device)
    bias = bias.masked_fill_(~visible, float("-inf")).view(batch, 1, num_nodes, 1, num_keys)
    # rows of one KV head: (t, g) pairs, t-major, so the bias broadcasts over g
    qg = q.to(compute_dtype).view(batch, num_nodes, kv_heads, group, head_dim)
    qg = qg.permute(0, 2, 1, 3, 4).reshape(batch, kv_heads, num_nodes * group, head_dim)
    # each request's rows past L_b + T (another request's length, free cache) may hold anything,
    # even NaN, which a -inf bias would not cancel (0 * NaN): they are replaced by zeros
    owned = (torch.arange(num_keys, device=q.device).view(1, num_keys)
             < (cache_lens.to(device=q.device, dtype=torch.int64) + num_nodes).view(batch, 1)).view(batch, num_keys, 1, 1)
    keys = torch.where(owned, k_cache[:, :num_keys].to(compute_dtype), 0.0).permute(0, 2, 3, 1)  # [B, Hkv, D, N]
    values = torch.where(owned, v_cache[:, :num_keys].to(compute_dtype), 0.0).transpose(1, 2)  # [B, Hkv, N, D]
    scores = torch.matmul(qg, keys).mul_(scale).view(batch, kv_heads, num_nodes, group, num_keys)
    probs = torch.softmax(scores + bias, dim=-1).view(batch, kv_heads, num_nodes * group, num_keys)
    out = torch.matmul(probs, values).view(batch, kv_heads, num_nodes, group, head_dim)
    return out.permute(0, 2, 1, 3, 4).reshape(batch, num_nodes, q_heads, head_dim).to(q.dtype)


def tree_verify_attention_sdpa(q: Tensor, k_cache: Tensor, v_cache: Tensor, cache_lens: Tensor,
                               ancestor_mask: Tensor, sm_scale: float | None = None,
                               num_keys: int | None = None) -> Tensor:
    """What users would otherwise run: torch SDPA with a boolean ``[B, 1, T, N]`` tree mask and
    ``enable_gqa=True``, in the inputs' dtype (the benchmark's baseline; also the tests' check
    of :func:`tree_verify_attention_reference`)."""
    num_keys = k_cache.shape[1] if num_keys is None else num_keys
    mask = tree_attention_mask(cache_lens, ancestor_mask, num_keys)
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k_cache[:, :num_keys].transpose(1, 2), v_cache[:, :num_keys].transpose(1, 2),
        attn_mask=mask.unsqueeze(1), scale=sm_scale, enable_gqa=True)
    return out.transpose(1, 2)


def tree_verify_attention(q: Tensor, k_cache: Tensor, v_cache: Tensor, cache_lens: Tensor,
                          ancestor_mask: Tensor, sm_scale: float | None = None,
                          impl: str = "auto") -> Tensor:
    """Ancestor-masked attention of T tree queries over prefix + tree KV rows, per request.

    q:             [B, T, Hq, D] fp16 / bf16 / fp32 (other float dtypes: impl="torch"; integers
                   and bool are a ValueError); any strides with unit stride in D. The Triton path
                   has kernels for D = 64, 128 and 256 (another D: impl="torch").
    k_cache/v_cache: [B, S, Hkv, D], q's dtype, unit stride in D. Rows ``[0, L_b)`` are the
                   committed prefix, rows ``[L_b, L_b + T)`` the tree's own K/V rows (written by
                   the caller before the call); ``L_b + T <= S``. Rows past that never reach the output,
                   whatever they hold (NaN included).
    cache_lens:    [B] int32, L_b (tree rows excluded); ragged across the batch. Read on the
                   device only: no host synchronisation. Lengths on the host are checked
                   (``0 <= L_b <= S - T``, ValueError naming the request); on a GPU that is the
                   caller's contract.
    ancestor_mask: [B, T, W] int32 (see :mod:`specdec_kernels.tree_layout`).
    sm_scale:      softmax scale, a finite number; default ``1 / sqrt(D)``.
    Returns a new ``[B, T, Hq, D]`` tensor in q's dtype. Accumulation is fp32. Asynchronous on
    CUDA like any kernel launch.
    """
    check_verify_args(q, k_cache, v_cache, cache_lens, ancestor_mask, sm_scale)
    sm_scale = None if sm_scale is None else float(sm_scale)  # a 0-d tensor passes; the kernels take a float
    if resolve_impl(impl, q, k_cache, v_cache) == "torch":
        # Look only at the rows in use (one host read of max(L); free on the CPU, a sync on CUDA).
        num_keys = min(k_cache.shape[1], int(cache_lens.max()) + q.shape[1]) if q.shape[0] else 0
        return tree_verify_attention_reference(q, k_cache, v_cache, cache_lens, ancestor_mask,
                                               sm_scale, num_keys=num_keys)
    from .tree_verify_triton import tree_verify_attention_triton

    return tree_verify_attention_triton(q, k_cache, v_cache, cache_lens, ancestor_mask, sm_scale)
