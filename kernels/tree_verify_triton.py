"""Triton kernels for :func:`specdec_kernels.tree_verify_attention` (imported lazily).

Work decomposition (flash-decoding with grouped queries):
- The G query heads of one KV head and the T tree nodes are packed into the M dimension:
  packed row ``m`` is node ``m // G``, query head ``hkv * G + m % G``. One program owns
  ``BLOCK_M`` packed rows of one (request, KV head), so each K/V tile it loads serves G heads.
- The key axis is split into ``num_splits`` chunks of ``chunk`` rows (a multiple of BLOCK_N),
  sized from the cache capacity S (the launcher never reads the ragged lengths back, so no host
  synchronisation). Split s covers prefix rows ``[s * chunk, min((s + 1) * chunk, L_b))``.
- Prefix tiles are mask-free except the last, partial one. The T tree rows ``[L_b, L_b + T)``
  are streamed by the split holding the prefix's last row (split 0 when L_b = 0); only there is
  the ancestor bitmask applied.
- With one split the program normalises and writes the output directly; with several it writes
  a normalised fp32 partial and its log2-sum-exp, and a second kernel merges the splits.
Scores use ``exp2`` with ``sm_scale * log2(e)`` folded in; all accumulation is fp32.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .configs import MIN_SPLIT_KEYS, arch_name, verify_config

LOG2E = 1.4426950408889634

# Tests set this to True to fill the split partials with NaN before each launch, so a partial
# that the merge reads but no program wrote shows up as a wrong output.
POISON_WORKSPACE = False


@triton.jit
def _online_update(acc, m_i, l_i, scores, v_tile, DOT_PRECISION: tl.constexpr):
    """One online-softmax step over a tile of log2-scaled ``scores`` [BM, BN]."""
    m_new = tl.maximum(m_i, tl.max(scores, 1))
    # rows that have seen no visible key yet keep m = -inf; shift by 0 to avoid inf - inf
    m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_shift)
    p = tl.exp2(scores - m_shift[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v_tile.dtype), v_tile, acc, input_precision=DOT_PRECISION)
    return acc, m_new, l_i


@triton.jit
def _tree_verify_partial_kernel(
    q_ptr, k_ptr, v_ptr, lens_ptr, mask_ptr, out_ptr, part_o_ptr, part_lse_ptr,
    stride_qb, stride_qt, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_mb, stride_mt,
    stride_ob, stride_ot, stride_oh,
    qk_scale, num_nodes, num_kv_heads, num_m_tiles, num_splits, chunk,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    SINGLE_SPLIT: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    pid = tl.program_id(0)
    split = tl.program_id(1)
    m_tile = pid % num_m_tiles
    head_b = pid // num_m_tiles
    kv_head = head_b % num_kv_heads
    b = head_b // num_kv_heads
    prefix_len = tl.load(lens_ptr + b).to(tl.int32)

    rows = m_tile * BLOCK_M + tl.arange(0, BLOCK_M)
    row_valid = rows < num_nodes * GROUP
    node = rows // GROUP
    q_head = kv_head * GROUP + rows % GROUP
    dims = tl.arange(0, HEAD_DIM)
    cols = tl.arange(0, BLOCK_N)

    q = tl.load(q_ptr + b.to(tl.int64) * stride_qb + node[:, None] * stride_qt
                + q_head[:, None] * stride_qh + dims[None, :], mask=row_valid[:, None], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    k_base = k_ptr + b.to(tl.int64) * stride_kb + kv_head * stride_kh
    v_base = v_ptr + b.to(tl.int64) * stride_vb + kv_head * stride_vh
    # int32 offsets inside one request's cache (the launcher checks they fit); a tile's pointers
    # are these plus one scalar, which keeps register use down.
    k_tile_ptrs = k_base + cols[:, None] * stride_ks + dims[None, :]
    v_tile_ptrs = v_base + cols[:, None] * stride_vs + dims[None, :]

    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)

    lo = split * chunk
    hi = tl.minimum(lo + chunk, prefix_len)
    full_end = lo + tl.maximum(hi - lo, 0) // BLOCK_N * BLOCK_N
    # mask-free prefix tiles
    for start in range(lo, full_end, BLOCK_N):
        k_tile = tl.load(k_tile_ptrs + start * stride_ks)
        v_tile = tl.load(v_tile_ptrs + start * stride_vs)
        if UPCAST:
            k_tile = k_tile.to(tl.float32)
            v_tile = v_tile.to(tl.float32)
        scores = tl.dot(q, tl.trans(k_tile), input_precision=DOT_PRECISION) * qk_scale
        acc, m_i, l_i = _online_update(acc, m_i, l_i, scores, v_tile, DOT_PRECISION)
    # the partial last prefix tile of this split
    if full_end < hi:
        in_range = full_end + cols < hi
        k_tile = tl.load(k_tile_ptrs + full_end * stride_ks, mask=in_range[:, None], other=0.0)
        v_tile = tl.load(v_tile_ptrs + full_end * stride_vs, mask=in_range[:, None], other=0.0)
        if UPCAST:
            k_tile = k_tile.to(tl.float32)
            v_tile = v_tile.to(tl.float32)
        scores = tl.dot(q, tl.trans(k_tile), input_precision=DOT_PRECISION) * qk_scale
        scores = tl.where(in_range[None, :], scores, float("-inf"))
        acc, m_i, l_i = _online_update(acc, m_i, l_i, scores, v_tile, DOT_PRECISION)
    # the tree rows, ancestor-masked, streamed by the split that holds the prefix's last row
    tree_split = tl.maximum(tl.cdiv(prefix_len, chunk) - 1, 0)
    if split == tree_split:
        mask_ptrs = mask_ptr + b.to(tl.int64) * stride_mb + node[:, None] * stride_mt
        for start in range(0, num_nodes, BLOCK_N):
            tree_node = start + cols
            in_tree = tree_node < num_nodes
            k_tile = tl.load(k_tile_ptrs + (prefix_len + start) * stride_ks, mask=in_tree[:, None], other=0.0)
            v_tile = tl.load(v_tile_ptrs + (prefix_len + start) * stride_vs, mask=in_tree[:, None], other=0.0)
            words = tl.load(mask_ptrs + (tree_node // 32)[None, :],
                            mask=row_valid[:, None] & in_tree[None, :], other=0)
            visible = ((words >> (tree_node % 32)[None, :]) & 1) != 0
            if UPCAST:
                k_tile = k_tile.to(tl.float32)
                v_tile = v_tile.to(tl.float32)
            scores = tl.dot(q, tl.trans(k_tile), input_precision=DOT_PRECISION) * qk_scale
            scores = tl.where(visible, scores, float("-inf"))
            acc, m_i, l_i = _online_update(acc, m_i, l_i, scores, v_tile, DOT_PRECISION)

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_safe[:, None]
    if SINGLE_SPLIT:
        tl.store(out_ptr + b.to(tl.int64) * stride_ob + node[:, None] * stride_ot
                 + q_head[:, None] * stride_oh + dims[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=row_valid[:, None])
    else:
        # partials: [B * Hkv, num_splits, M_pad, D] and [B * Hkv, num_splits, M_pad]
        m_pad = num_m_tiles * BLOCK_M
        part_row = (head_b.to(tl.int64) * num_splits + split) * m_pad + rows
        tl.store(part_o_ptr + part_row[:, None] * HEAD_DIM + dims[None, :], out)
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe))
        tl.store(part_lse_ptr + part_row, lse)


@triton.jit
def _tree_verify_merge_kernel(
    part_o_ptr, part_lse_ptr, out_ptr,
    stride_ob, stride_ot, stride_oh,
    num_nodes, num_kv_heads, rows_pad, num_splits,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, MERGE_M: tl.constexpr,
):
    """Merge the splits of MERGE_M packed rows of one (request, KV head)."""
    row_blocks = rows_pad // MERGE_M
    pid = tl.program_id(0)
    head_b = pid // row_blocks
    kv_head = head_b % num_kv_heads
    b = head_b // num_kv_heads
    rows = (pid % row_blocks) * MERGE_M + tl.arange(0, MERGE_M)
    row_valid = rows < num_nodes * GROUP
    dims = tl.arange(0, HEAD_DIM)

    acc = tl.zeros([MERGE_M, HEAD_DIM], dtype=tl.float32)
    m_i = tl.full([MERGE_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([MERGE_M], dtype=tl.float32)
    for split in range(0, num_splits):
        part_row = (head_b.to(tl.int64) * num_splits + split) * rows_pad + rows
        lse = tl.load(part_lse_ptr + part_row)
        m_new = tl.maximum(m_i, lse)
        m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_shift)
        weight = tl.exp2(lse - m_shift)
        part = tl.load(part_o_ptr + part_row[:, None] * HEAD_DIM + dims[None, :])
        # empty splits hold lse = -inf (weight 0); never let their stored values through
        part = tl.where(weight[:, None] > 0.0, part, 0.0)
        acc = acc * alpha[:, None] + part * weight[:, None]
        l_i = l_i * alpha + weight
        m_i = m_new
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    node = rows // GROUP
    q_head = kv_head * GROUP + rows % GROUP
    tl.store(out_ptr + b.to(tl.int64) * stride_ob + node[:, None] * stride_ot
             + q_head[:, None] * stride_oh + dims[None, :],
             out.to(out_ptr.dtype.element_ty), mask=row_valid[:, None])


# Packed rows one merge program handles (a divisor of every BLOCK_M, which is >= 16).
MERGE_M = 16


# A query tile's fixed cost (its K/V stream and loop overhead) counted as this many padded rows.
TILE_COST_ROWS = 32


def _pick_block_m(packed_rows: int, max_block_m: int) -> int:
    """Query-tile rows: the power of two in [16, cap] minimising padded rows + TILE_COST_ROWS
    per tile (ties to the larger tile).

    T = 2^k + 1 is why: 33 nodes x G=4 = 132 rows take two 128-row tiles (256 rows, half
    wasted) but three 64-row tiles (192 rows).
    """
    best = None
    size = 16
    while size <= max(16, max_block_m):
        tiles = triton.cdiv(packed_rows, size)
        cost = tiles * (size + TILE_COST_ROWS)
        if best is None or cost <= best[0]:
            best = (cost, size)
        size *= 2
    return best[1]


def _sm_count(device) -> int:
    if device.type != "cuda":
        return 4
    return torch.cuda.get_device_properties(device).multi_processor_count


def plan_verify_launch(batch: int, num_nodes: int, q_heads: int, kv_heads: int, head_dim: int,
                       cache_rows: int, device, config=None) -> dict:
    """Tile sizes, split count and grid for one call (pure function of shapes and device)."""
    group = q_heads // kv_heads
    cfg = config or verify_config(arch_name(device), head_dim, num_nodes * group)
    block_m = _pick_block_m(num_nodes * group, cfg.max_block_m)
    num_m_tiles = triton.cdiv(num_nodes * group, block_m)
    base_programs = batch * kv_heads * num_m_tiles
    wanted = max(1, triton.cdiv(cfg.programs_per_sm * _sm_count(device), base_programs))
    prefix_rows = max(cache_rows - num_nodes, 1)
    chunk = max(triton.cdiv(prefix_rows, wanted), MIN_SPLIT_KEYS, cfg.block_n)
    chunk = triton.cdiv(chunk, cfg.block_n) * cfg.block_n
    num_splits = triton.cdiv(prefix_rows, chunk)
    return dict(config=cfg, block_m=block_m, num_m_tiles=num_m_tiles, chunk=chunk,
                num_splits=num_splits, grid=(base_programs, num_splits))


def tree_verify_attention_triton(q, k_cache, v_cache, cache_lens, ancestor_mask, sm_scale=None,
                                 out=None, num_splits=None, config=None):
    """Launcher: checks layout, plans tiles and splits, launches one or two kernels.

    ``out`` (optional, ``[B, T, Hq, D]`` in q's dtype) is written in place and returned; the
    tests pass a NaN-poisoned one. ``num_splits`` overrides the split heuristic (tests and
    tuning), ``config`` the table's :class:`VerifyConfig` (tuning). Inputs need unit stride in D;
    other strides are free.
    """
    batch, num_nodes, q_heads, head_dim = q.shape
    kv_heads = k_cache.shape[2]
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name} needs unit stride in the head dim; pass {name}.contiguous()")
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if batch == 0 or num_nodes == 0:
        return out
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if (t.shape[1] - 1) * t.stride(1) + (kv_heads - 1) * t.stride(2) + head_dim > 2**31 - 1:
            raise ValueError(f"{name}: one request's cache spans more than 2**31 elements; "
                             "split the batch's storage per request")
    ancestor_mask = ancestor_mask.contiguous()
    cache_lens = cache_lens.contiguous()
    plan = plan_verify_launch(batch, num_nodes, q_heads, kv_heads, head_dim, k_cache.shape[1], q.device,
                              config)
    if num_splits is not None:
        prefix_rows = max(k_cache.shape[1] - num_nodes, 1)
        chunk = triton.cdiv(triton.cdiv(prefix_rows, num_splits), plan["config"].block_n) * plan["config"].block_n
        plan.update(chunk=chunk, num_splits=triton.cdiv(prefix_rows, chunk))
        plan["grid"] = (plan["grid"][0], plan["num_splits"])
    cfg, block_m, num_m_tiles = plan["config"], plan["block_m"], plan["num_m_tiles"]
    splits = plan["num_splits"]
    scale = (1.0 / math.sqrt(head_dim) if sm_scale is None else sm_scale) * LOG2E
    # Triton's CPU interpreter computes bf16 tl.dot wrongly (seen with triton 3.9: errors of
    # 1e10 on a 16x16 product); there the tiles are upcast to fp32 before the dots.
    upcast = q.device.type != "cuda" and q.dtype == torch.bfloat16
    precision = "ieee" if q.dtype == torch.float32 or upcast else "tf32"
    single = splits == 1
    if single:
        part_o = part_lse = out  # unused
    else:
        rows_pad = num_m_tiles * block_m
        part_o = torch.empty(batch * kv_heads, splits, rows_pad, head_dim, device=q.device,
                             dtype=torch.float32)
        part_lse = torch.empty(batch * kv_heads, splits, rows_pad, device=q.device, dtype=torch.float32)
        if POISON_WORKSPACE:
            part_o.fill_(float("nan"))
            part_lse.fill_(float("nan"))
    _tree_verify_partial_kernel[plan["grid"]](
        q, k_cache, v_cache, cache_lens, ancestor_mask, out, part_o, part_lse,
        q.stride(0), q.stride(1), q.stride(2),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        ancestor_mask.stride(0), ancestor_mask.stride(1),
        out.stride(0), out.stride(1), out.stride(2),
        scale, num_nodes, kv_heads, num_m_tiles, splits, plan["chunk"],
        GROUP=q_heads // kv_heads, HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=cfg.block_n,
        SINGLE_SPLIT=single, DOT_PRECISION=precision, UPCAST=upcast,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    if not single:
        rows_pad = num_m_tiles * block_m
        _tree_verify_merge_kernel[(batch * kv_heads * (rows_pad // MERGE_M),)](
            part_o, part_lse, out,
            out.stride(0), out.stride(1), out.stride(2),
            num_nodes, kv_heads, rows_pad, splits,
            GROUP=q_heads // kv_heads, HEAD_DIM=head_dim, MERGE_M=MERGE_M,
            num_warps=4,
        )
    return out
