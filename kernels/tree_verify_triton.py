"""Triton kernels for :func:`specdec_kernels.tree_verify_attention` (imported lazily).

Work decomposition (flash-decoding with grouped queries):
- The G query heads of one KV head and the T tree nodes are packed into the M dimension:
  packed row ``m`` is node ``m // G``, query head ``hkv * G + m % G``. One program owns
  ``BLOCK_M`` packed rows of one (request, KV head), so each K/V tile it loads serves G heads.
- Packed rows past a whole number of query tiles (T = 2^k + 1) either take one more tile or,
  where the planner finds it pays (one full tile, batch too large for splits to help), ride in
  a 16-row tail tile of the same program (``TAIL_M``), so the cache is streamed once.
- The key axis is split into ``num_splits`` chunks of ``chunk`` rows (a multiple of BLOCK_N),
  sized from the cache capacity S by a wave model (``_pick_splits``; the launcher never reads
  the ragged lengths back, so no host synchronisation). Split s covers prefix rows
  ``[s * chunk, min((s + 1) * chunk, L_b))``.
- Prefix tiles are mask-free except the last, partial one. Where the config asks (the sm_90
  128-row tile) and the cache layout allows, the mask-free tiles load through tensor
  descriptors (bulk tensor copies) instead of per-element pointers. The T tree rows ``[L_b, L_b + T)``
  are streamed by the split holding the prefix's last row (split 0 when L_b = 0); only there is
  the ancestor bitmask applied.
- With one split the program normalises and writes the output directly; with several it writes
  a normalised fp32 partial and its log2-sum-exp for its real rows, and a second kernel merges
  the splits, loading a block of splits at once. After the 64-row and Triton split kernels the
  merge is a programmatic dependent launch (sm_90 and later): it starts once every split program
  has, and waits on the device for their results.
- On sm_90, where the configuration asks for it (``VerifyConfig.gluon``) and the call allows it
  (:func:`plan_split_kernel`), the split kernel is the Gluon one of ``tree_verify_gluon`` (same
  decomposition, partials and merge), which overlaps each tile's softmax with the next q.k MMA;
  with ``VerifyConfig.gluon_pingpong``, on 128- and 192-row tiles (and 64-row ones with
  ``gluon_pingpong_64``), the warp-specialised one of ``tree_verify_gluon_pingpong`` (warpgroups
  taking turns at the tensor cores, fed by a TMA warp, an 8-row tail warpgroup). A call the
  Gluon kernel cannot take is planned again with the entry's ``triton_fallback``
  (:func:`plan_call`).
Scores use ``exp2`` with ``sm_scale * log2(e)`` folded in; all accumulation is fp32.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings

import torch
import triton
import triton.language as tl

try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # Triton before 3.4: no grid dependency control, the merge follows the splits
    gdc_launch_dependents = gdc_wait = None

from .configs import MIN_SPLIT_KEYS, arch_name, verify_config

LOG2E = 1.4426950408889634

# Tests set this to True to fill the split partials with NaN before each launch, so a partial
# that the merge reads but no program wrote shows up as a wrong output.
POISON_WORKSPACE = False


# Lazy rescaling: the running max a row's exponentials are taken against is only moved (and the
# accumulator rescaled) once some row of the tile has outgrown it by more than this many powers
# of two; until then p = exp2(score - stale max) <= 2**RESCALE_LOG2, safe in fp32 sums and in the
# bf16 / fp16 P.V operand. Exact: the stale max cancels in acc / l and in m + log2(l).
RESCALE_LOG2 = tl.constexpr(8.0)


@triton.jit
def _online_update(acc, m_i, l_i, raw, qk_scale, visible, v_tile, MASKED: tl.constexpr,
                   DOT_PRECISION: tl.constexpr, LAZY: tl.constexpr, FOLD: tl.constexpr):
    """One online-softmax step over a tile of raw scores ``raw`` = q.k [BM, BN] (``visible``
    selects the keys a row may see where MASKED); the running max ``m_i`` is log2-scaled.

    With FOLD (only for a positive ``qk_scale``), the row max is taken on the raw scores and
    the scale folded into the exponent's argument, ``exp2(raw * qk_scale - m)``: one fused
    multiply-add a score instead of a multiply and a subtract.

    With LAZY, the [BM, D] accumulator is rescaled only in the tiles where the running max
    moves by more than 2**RESCALE_LOG2 (on random or real scores: the first few tiles), instead
    of in every tile. It saves a multiply per accumulator element per key tile, but on an H200
    it measured 5-40 % slower (PERF.md, round 4): the decision is block-wide, a cross-warp
    reduction and a barrier per tile, and the branch keeps the MMA from overlapping the softmax.
    Every table entry has it off; it stays for other GPUs and compilers to be measured on."""
    if FOLD:
        if MASKED:
            raw = tl.where(visible, raw, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(raw, 1) * qk_scale)
        scores = raw
        scale = qk_scale
    else:
        scores = raw * qk_scale
        if MASKED:
            scores = tl.where(visible, scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, 1))
        scale = 1.0
    if LAZY:
        # rows that had no visible key yet (m = -inf) and now have one grow by +inf
        growth = tl.where(m_new > m_i, m_new - m_i, 0.0)
        if tl.max(growth, 0) > RESCALE_LOG2:
            m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp2(m_i - m_shift)
            l_i = l_i * alpha
            acc = acc * alpha[:, None]
            m_i = m_new
        m_shift = tl.where(m_i == float("-inf"), 0.0, m_i)
        p = tl.exp2(scores * scale - m_shift[:, None])
        l_i += tl.sum(p, 1)
        acc = tl.dot(p.to(v_tile.dtype), v_tile, acc, input_precision=DOT_PRECISION)
        return acc, m_i, l_i
    else:
        # rows that have seen no visible key yet keep m = -inf; shift by 0 to avoid inf - inf
        m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_shift)
        p = tl.exp2(scores * scale - m_shift[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v_tile.dtype), v_tile, acc, input_precision=DOT_PRECISION)
        return acc, m_new, l_i


@triton.jit
def _load_q(q_ptr, b, stride_qb, stride_qt, stride_qh, rows, row_valid, kv_heads_base,
            GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, UPCAST: tl.constexpr):
    node = rows // GROUP
    q_head = kv_heads_base + rows % GROUP
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + b.to(tl.int64) * stride_qb + node[:, None] * stride_qt
                + q_head[:, None] * stride_qh + dims[None, :], mask=row_valid[:, None], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    return q


@triton.jit
def _load_key_tile(desc, tile_ptrs, stride_s, desc_row, start, kv_head, HEAD_DIM: tl.constexpr,
                   USE_TMA: tl.constexpr, UPCAST: tl.constexpr):
    """A mask-free [BLOCK_N, D] tile of K or V at cache row ``start``."""
    if USE_TMA:
        # bulk tensor copies: no per-element address registers, no per-thread load issue
        tile = desc.load([desc_row + start, kv_head * HEAD_DIM])
    else:
        tile = tl.load(tile_ptrs + start * stride_s)
    if UPCAST:
        tile = tile.to(tl.float32)
    return tile


@triton.jit
def _store_rows(acc, m_i, l_i, rows, row_valid, b, head_b, split, kv_head, out_ptr, part_o_ptr, part_lse_ptr,
                stride_ob, stride_ot, stride_oh, num_splits, rows_pad,
                GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, SINGLE_SPLIT: tl.constexpr):
    """Normalised output (one split) or fp32 partial + log2-sum-exp, valid rows only."""
    dims = tl.arange(0, HEAD_DIM)
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_safe[:, None]
    if SINGLE_SPLIT:
        node = rows // GROUP
        q_head = kv_head * GROUP + rows % GROUP
        tl.store(out_ptr + b.to(tl.int64) * stride_ob + node[:, None] * stride_ot
                 + q_head[:, None] * stride_oh + dims[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=row_valid[:, None])
    else:
        # partials: [B * Hkv, num_splits, rows_pad, D] and [B * Hkv, num_splits, rows_pad];
        # padded rows are never written (and never read by the merge)
        part_row = (head_b.to(tl.int64) * num_splits + split) * rows_pad + rows
        tl.store(part_o_ptr + part_row[:, None] * HEAD_DIM + dims[None, :], out, mask=row_valid[:, None])
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe))
        tl.store(part_lse_ptr + part_row, lse, mask=row_valid)


@triton.jit
def _tree_verify_partial_kernel(
    q_ptr, k_ptr, v_ptr, k_desc, v_desc, lens_ptr, mask_ptr, out_ptr, part_o_ptr, part_lse_ptr,
    stride_qb, stride_qt, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_mb, stride_mt,
    stride_ob, stride_ot, stride_oh,
    qk_scale, num_nodes, num_kv_heads, num_m_tiles, num_splits, chunk, cache_rows,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    TAIL_M: tl.constexpr,
    SINGLE_SPLIT: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr, USE_TMA: tl.constexpr,
    LAZY_RESCALE: tl.constexpr, FOLD_SCALE: tl.constexpr, LAUNCH_MERGE_EARLY: tl.constexpr = False,
    KV_SHARE: tl.constexpr = 1,
):
    # KV_SHARE consecutive programs' query heads share one KV head (``VerifyConfig.split_query_heads``):
    # the grid's "KV heads" are then KV_SHARE times the cache's, each with GROUP query heads
    if LAUNCH_MERGE_EARLY:
        # the merge (a programmatic dependent launch) may start once every program has started
        gdc_launch_dependents()
    pid = tl.program_id(0)
    split = tl.program_id(1)
    m_tile = pid % num_m_tiles
    head_b = pid // num_m_tiles
    kv_head = head_b % num_kv_heads
    b = head_b // num_kv_heads
    prefix_len = tl.load(lens_ptr + b).to(tl.int32)
    num_rows = num_nodes * GROUP
    rows_pad = num_m_tiles * BLOCK_M + TAIL_M

    rows = m_tile * BLOCK_M + tl.arange(0, BLOCK_M)
    row_valid = rows < num_rows
    node = rows // GROUP
    dims = tl.arange(0, HEAD_DIM)
    cols = tl.arange(0, BLOCK_N)
    q = _load_q(q_ptr, b, stride_qb, stride_qt, stride_qh, rows, row_valid, kv_head * GROUP,
                GROUP, HEAD_DIM, UPCAST)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    if TAIL_M > 0:
        # The packed rows past the last full BLOCK_M tile (e.g. node 16's G rows at T = 17) ride
        # along in a small extra tile of the last m-tile's program, on the K/V tiles it loads
        # anyway, instead of a second program streaming the whole cache again. Other m-tiles
        # carry the same (fully masked) tile: its dots are wasted, its loads are not repeated.
        rows_t = num_m_tiles * BLOCK_M + tl.arange(0, TAIL_M)
        row_valid_t = rows_t < tl.where(m_tile == num_m_tiles - 1, num_rows, 0)
        node_t = rows_t // GROUP
        q_t = _load_q(q_ptr, b, stride_qb, stride_qt, stride_qh, rows_t, row_valid_t, kv_head * GROUP,
                      GROUP, HEAD_DIM, UPCAST)
        acc_t = tl.zeros([TAIL_M, HEAD_DIM], dtype=tl.float32)
        m_t = tl.full([TAIL_M], float("-inf"), dtype=tl.float32)
        l_t = tl.zeros([TAIL_M], dtype=tl.float32)

    kv_src = kv_head // KV_SHARE
    k_base = k_ptr + b.to(tl.int64) * stride_kb + kv_src * stride_kh
    v_base = v_ptr + b.to(tl.int64) * stride_vb + kv_src * stride_vh
    # int32 offsets inside one request's cache (the launcher checks they fit); a tile's pointers
    # are these plus one scalar, which keeps register use down.
    k_tile_ptrs = k_base + cols[:, None] * stride_ks + dims[None, :]
    v_tile_ptrs = v_base + cols[:, None] * stride_vs + dims[None, :]

    lo = split * chunk
    hi = tl.minimum(lo + chunk, prefix_len)
    full_end = lo + tl.maximum(hi - lo, 0) // BLOCK_N * BLOCK_N
    # mask-free prefix tiles
    # rows of this request in the [B * S, Hkv * D] views the descriptors cover
    desc_row = b * cache_rows
    for start in range(lo, full_end, BLOCK_N):
        k_tile = _load_key_tile(k_desc, k_tile_ptrs, stride_ks, desc_row, start, kv_src, HEAD_DIM, USE_TMA, UPCAST)
        v_tile = _load_key_tile(v_desc, v_tile_ptrs, stride_vs, desc_row, start, kv_src, HEAD_DIM, USE_TMA, UPCAST)
        raw = tl.dot(q, tl.trans(k_tile), input_precision=DOT_PRECISION)
        if TAIL_M > 0:
            # both tiles' q.k first: the main tile's P.V (an asynchronous MMA) then runs while the
            # warps compute the tail tile's softmax
            raw_t = tl.dot(q_t, tl.trans(k_tile), input_precision=DOT_PRECISION)
        acc, m_i, l_i = _online_update(acc, m_i, l_i, raw, qk_scale, 0, v_tile, False, DOT_PRECISION,
                                       LAZY_RESCALE, FOLD_SCALE)
        if TAIL_M > 0:
            acc_t, m_t, l_t = _online_update(acc_t, m_t, l_t, raw_t, qk_scale, 0, v_tile, False, DOT_PRECISION,
                                             LAZY_RESCALE, FOLD_SCALE)
    # the partial last prefix tile of this split
    if full_end < hi:
        in_range = full_end + cols < hi
        k_tile = tl.load(k_tile_ptrs + full_end * stride_ks, mask=in_range[:, None], other=0.0)
        v_tile = tl.load(v_tile_ptrs + full_end * stride_vs, mask=in_range[:, None], other=0.0)
        if UPCAST:
            k_tile = k_tile.to(tl.float32)
            v_tile = v_tile.to(tl.float32)
        raw = tl.dot(q, tl.trans(k_tile), input_precision=DOT_PRECISION)
        acc, m_i, l_i = _online_update(acc, m_i, l_i, raw, qk_scale, in_range[None, :], v_tile, True, DOT_PRECISION,
                                       LAZY_RESCALE, FOLD_SCALE)
        if TAIL_M > 0:
            raw_t = tl.dot(q_t, tl.trans(k_tile), input_precision=DOT_PRECISION)
            acc_t, m_t, l_t = _online_update(acc_t, m_t, l_t, raw_t, qk_scale, in_range[None, :], v_tile, True,
                                             DOT_PRECISION, LAZY_RESCALE, FOLD_SCALE)
    # the tree rows, ancestor-masked, streamed by the split that holds the prefix's last row
    tree_split = tl.maximum(tl.cdiv(prefix_len, chunk) - 1, 0)
    if split == tree_split:
        mask_ptrs = mask_ptr + b.to(tl.int64) * stride_mb + node[:, None] * stride_mt
        if TAIL_M > 0:
            mask_ptrs_t = mask_ptr + b.to(tl.int64) * stride_mb + node_t[:, None] * stride_mt
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
            raw = tl.dot(q, tl.trans(k_tile), input_precision=DOT_PRECISION)
            acc, m_i, l_i = _online_update(acc, m_i, l_i, raw, qk_scale, visible, v_tile, True, DOT_PRECISION,
                                           LAZY_RESCALE, FOLD_SCALE)
            if TAIL_M > 0:
                words_t = tl.load(mask_ptrs_t + (tree_node // 32)[None, :],
                                  mask=row_valid_t[:, None] & in_tree[None, :], other=0)
                visible_t = ((words_t >> (tree_node % 32)[None, :]) & 1) != 0
                raw_t = tl.dot(q_t, tl.trans(k_tile), input_precision=DOT_PRECISION)
                acc_t, m_t, l_t = _online_update(acc_t, m_t, l_t, raw_t, qk_scale, visible_t, v_tile, True,
                                                 DOT_PRECISION, LAZY_RESCALE, FOLD_SCALE)

    _store_rows(acc, m_i, l_i, rows, row_valid, b, head_b, split, kv_head, out_ptr, part_o_ptr, part_lse_ptr,
                stride_ob, stride_ot, stride_oh, num_splits, rows_pad, GROUP, HEAD_DIM, SINGLE_SPLIT)
    if TAIL_M > 0:
        _store_rows(acc_t, m_t, l_t, rows_t, row_valid_t, b, head_b, split, kv_head, out_ptr, part_o_ptr,
                    part_lse_ptr, stride_ob, stride_ot, stride_oh, num_splits, rows_pad, GROUP, HEAD_DIM,
                    SINGLE_SPLIT)


@triton.jit
def _merge_split_block(acc, l_i, s0, lse_base, o_base, rows, row_valid, dims, m_shift, num_splits, rows_pad,
                       HEAD_DIM: tl.constexpr, SPLIT_BLOCK: tl.constexpr):
    """acc += the weighted partials of splits [s0, s0 + SPLIT_BLOCK), l_i += their weights: the
    splits unrolled, their [rows, D] loads independent of each other (all in flight at once)."""
    for j in tl.static_range(SPLIT_BLOCK):
        ok = row_valid & (tl.zeros_like(rows) + (s0 + j) < num_splits)
        part_row = (s0 + j) * rows_pad + rows
        lse = tl.load(lse_base + part_row, mask=ok, other=float("-inf"))
        part = tl.load(o_base + part_row[:, None] * HEAD_DIM + dims[None, :], mask=ok[:, None], other=0.0)
        # an empty split holds lse = -inf (weight 0); select, so that whatever its partial holds
        # (even NaN) never reaches the sum
        live = lse > float("-inf")
        weight = tl.where(live, tl.exp2(lse - m_shift), 0.0)
        acc += tl.where(live[:, None], part * weight[:, None], 0.0)
        l_i += weight
    return acc, l_i


@triton.jit
def _tree_verify_merge_kernel(
    part_o_ptr, part_lse_ptr, out_ptr,
    stride_ob, stride_ot, stride_oh,
    num_rows, num_kv_heads, rows_pad, num_splits, row_blocks,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, MERGE_ROWS: tl.constexpr, SPLIT_BLOCK: tl.constexpr,
    WAIT_FOR_SPLITS: tl.constexpr = False, ONE_BLOCK: tl.constexpr = False,
):
    """Merge the splits of MERGE_ROWS packed rows of one (request, KV head).

    The work is a few MB that the split kernel has just left in L2, so this kernel is all
    latency. Two passes: the largest log2-sum-exp of each row first, then each split's weight
    is known up front and the weighted sum is a chain of multiply-adds, not of online
    rescalings; its SPLIT_BLOCK splits are unrolled, their [MERGE_ROWS, D] partials independent
    loads all in flight at once, with no reduction across threads. int32 offsets from one
    per-head base keep the addresses cheap. With ONE_BLOCK (all splits in one block) both passes
    are straight-line code, so the partials' loads need not wait for the first pass's: one
    round trip to L2 instead of two. With WAIT_FOR_SPLITS it was launched as a programmatic
    dependent of the split kernel, and may have started before the splits ended: it waits for
    them before its first load.
    """
    pid = tl.program_id(0)
    head_b = pid // row_blocks
    kv_head = head_b % num_kv_heads
    b = head_b // num_kv_heads
    rows = (pid % row_blocks) * MERGE_ROWS + tl.arange(0, MERGE_ROWS)
    row_valid = rows < num_rows
    dims = tl.arange(0, HEAD_DIM)
    split_ids = tl.arange(0, SPLIT_BLOCK)
    lse_base = part_lse_ptr + head_b.to(tl.int64) * num_splits * rows_pad
    o_base = part_o_ptr + head_b.to(tl.int64) * num_splits * rows_pad * HEAD_DIM

    m_i = tl.full([MERGE_ROWS], float("-inf"), dtype=tl.float32)
    if WAIT_FOR_SPLITS:
        gdc_wait()
    if ONE_BLOCK:
        for j in tl.static_range(SPLIT_BLOCK):
            ok = row_valid & (tl.zeros_like(rows) + j < num_splits)
            m_i = tl.maximum(m_i, tl.load(lse_base + j * rows_pad + rows, mask=ok, other=float("-inf")))
    else:
        for s0 in range(0, num_splits, SPLIT_BLOCK):
            ok = ((s0 + split_ids) < num_splits)[:, None] & row_valid[None, :]
            lse = tl.load(lse_base + (s0 + split_ids)[:, None] * rows_pad + rows[None, :], mask=ok,
                          other=float("-inf"))
            m_i = tl.maximum(m_i, tl.max(lse, 0))
    # rows no split saw a key for keep m = -inf: shift by 0 (their weights are all 0)
    m_shift = tl.where(m_i == float("-inf"), 0.0, m_i)

    acc = tl.zeros([MERGE_ROWS, HEAD_DIM], dtype=tl.float32)
    l_i = tl.zeros([MERGE_ROWS], dtype=tl.float32)
    if ONE_BLOCK:
        acc, l_i = _merge_split_block(acc, l_i, 0, lse_base, o_base, rows, row_valid, dims, m_shift, num_splits,
                                      rows_pad, HEAD_DIM, SPLIT_BLOCK)
    else:
        for s0 in range(0, num_splits, SPLIT_BLOCK):
            acc, l_i = _merge_split_block(acc, l_i, s0, lse_base, o_base, rows, row_valid, dims, m_shift,
                                          num_splits, rows_pad, HEAD_DIM, SPLIT_BLOCK)
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    node = rows // GROUP
    q_head = kv_head * GROUP + rows % GROUP
    tl.store(out_ptr + b.to(tl.int64) * stride_ob + node[:, None] * stride_ot
             + q_head[:, None] * stride_oh + dims[None, :],
             out.to(out_ptr.dtype.element_ty), mask=row_valid[:, None])


# A query tile's fixed cost (its K/V stream and loop overhead) counted as this many padded rows.
TILE_COST_ROWS = 32

# Split-count model (see _pick_splits): a program's fixed cost (prologue, pipeline fill, tree
# tile, epilogue) and the merge launch's, both in key rows of one program's stream, and what
# each split adds to the merge (its partials written and read back, its share of the merge's
# chain of loads). The last was fitted on an H200 (PERF.md, round 4): at batch 1, 16 splits
# against 32 took 54.8 / 50.5 us at L32k and 23.4 / 26.3 us at L8k, i.e. ~9.4 ns a key row and
# ~5.3 us more merge for the 16 extra splits: ~35 key rows a split.
PROGRAM_COST_KEYS = 256
MERGE_COST_KEYS = 192
MERGE_COST_KEYS_PER_SPLIT = 35


def _pick_block_m(packed_rows: int, max_block_m: int, min_block_m: int = 16, extra_sizes: tuple = ()) -> int:
    """Query-tile rows: the power of two in [min_block_m, cap] (or one of ``extra_sizes``)
    minimising padded rows + TILE_COST_ROWS per tile (ties to the larger tile).

    T = 2^k + 1 is why: 33 nodes x G=4 = 132 rows take two 128-row tiles (256 rows, half
    wasted) but three 64-row tiles (192 rows), or one 192-row tile of the ping-pong kernel.
    """
    sizes = []
    size = min(max(16, min_block_m), max(16, max_block_m))
    while size <= max(16, max_block_m):
        sizes.append(size)
        size *= 2
    best = None
    for size in sorted(set(sizes) | set(extra_sizes)):
        tiles = triton.cdiv(packed_rows, size)
        cost = tiles * (size + TILE_COST_ROWS)
        if best is None or cost <= best[0]:
            best = (cost, size)
    return best[1]


def pick_query_tiles(packed_rows: int, max_block_m: int, max_tail_m: int,
                     min_block_m: int = 16, extra_sizes: tuple = ()) -> tuple[int, int, int]:
    """(block_m, num_m_tiles, tail_m) for ``packed_rows`` = T * G rows of one KV head.

    When the rows overrun a whole number of max_block_m tiles by at most ``max_tail_m`` (the
    T = 2^k + 1 case: 68 = 64 + 4 rows at T = 17, G = 4), the overrun rides along as a
    ``tail_m``-row tile (a power of two >= 16) in the programs of the full tiles, which stream
    the cache once, instead of one more program per KV head streaming it again.
    """
    cap = max(16, max_block_m)
    full, rem = divmod(packed_rows, cap)
    if full >= 1 and 0 < rem <= max_tail_m:
        return cap, full, max(16, triton.next_power_of_2(rem))
    block_m = _pick_block_m(packed_rows, max_block_m, min_block_m, extra_sizes)
    return block_m, triton.cdiv(packed_rows, block_m), 0


def split_chunks(prefix_rows: int, wanted: int, block_n: int) -> tuple[int, int]:
    """(chunk, splits): about ``wanted`` chunks of whole key tiles covering ``prefix_rows``."""
    chunk = triton.cdiv(triton.cdiv(prefix_rows, wanted), block_n) * block_n
    return chunk, triton.cdiv(prefix_rows, chunk)


# With two splits the one holding the tree (the last, where the cache ends with the tree) ends
# last: after its stream come the masked tree tiles (in round 11, when this was measured, by
# pointer loads, about 2 us at B8-L8k, and beside the ping-pong kernel's tail warpgroup the tail's
# own; since round 13 the ping-pong kernel's come by TMA behind the stream, and the relief was not
# measured again).
# So its chunk is this many key tiles shorter (one more beside a tail), the first split's as much
# longer. H200, round 11's balance probe, interleaved twice: B8-T33-L8k 90.4 -> 88.5 us (two
# tiles, tail), B8-T17-H64-L8k 90.5 -> 88.8 (two, tail), B8-T16-H64-L8k 79.0 -> 78.1 (one),
# B8-T9-L1k 19.9 -> 19.1 (one), B8-T9-L8k 70.9 -> 70.8. Only at two splits: with s splits, one
# tile more a chunk takes s - 1 tiles from the last.
TREE_SPLIT_RELIEF_TILES = 1


def relieve_tree_split(chunk: int, num_splits: int, prefix_rows: int, block_n: int, tail_m: int) -> int:
    """The chunk that leaves the last of two splits TREE_SPLIT_RELIEF_TILES key tiles short (one
    more beside a tail tile), where the splits stay two; else ``chunk``."""
    if num_splits != 2 or not TREE_SPLIT_RELIEF_TILES:
        return chunk
    longer = chunk + (TREE_SPLIT_RELIEF_TILES + (tail_m > 0)) * block_n
    return longer if triton.cdiv(prefix_rows, longer) == 2 else chunk


def _pick_splits(base_programs: int, prefix_rows: int, block_n: int, slots: int, heads: int,
                 rows: int) -> tuple[int, int]:
    """(chunk, num_splits) minimising a wave model of the split kernel plus the merge.

    ``slots`` programs run at once (resident programs per SM x SMs); programs of one wave take
    as long as the longest, so the time is about waves x (chunk + PROGRAM_COST_KEYS), plus the
    merge (its launch, and writing + reading the fp32 partials, ~2 x splits x rows key rows of
    traffic per head, spread over the slots, plus a fixed cost per split). Candidate split counts
    are those that fill a whole number of waves, the powers of two within one wave, and 1. Pure
    integer work, done once per shape (cached).
    """
    prefix_rows = max(prefix_rows, 1)
    max_splits = max(1, prefix_rows // MIN_SPLIT_KEYS)
    # whole waves, and the powers of two under one wave (half a wave of programs that each stream
    # twice as far can beat a full one once the merge's per-split cost is counted: batch 1, L8k)
    candidates = {1} | {min(max_splits, max(1, k * slots // base_programs)) for k in range(1, 9)}
    candidates |= {1 << j for j in range(max_splits.bit_length()) if (1 << j) * base_programs <= slots}
    best = None
    for wanted in sorted(candidates):
        chunk, splits = split_chunks(prefix_rows, wanted, block_n)
        waves = triton.cdiv(base_programs * splits, slots)
        cost = waves * (chunk + PROGRAM_COST_KEYS)
        if splits > 1:
            cost += MERGE_COST_KEYS + triton.cdiv(2 * splits * rows * heads, slots) + MERGE_COST_KEYS_PER_SPLIT * splits
        if best is None or cost < best[0]:
            best = (cost, chunk, splits)
    return best[1], best[2]


def _sm_count(device) -> int:
    if device.type != "cuda":
        return 4
    return torch.cuda.get_device_properties(device).multi_processor_count


# The tail tile costs more than its 16 rows suggest (a second online softmax and a 16-row MMA
# per key tile, beside the 64-row one). Measured on an H200 (PERF.md, 2026-11-30) it paid only
# (a) with a single full query tile (with two, both programs carry the tail and one wastes it:
# B32-T33-H32-L8k 777 us, against 641 us for three 64-row tiles in the previous version) and (b) where the extra tile's
# programs would not fit in one wave, so no split can pay for them (B32-T17-L32k: 1524 us vs
# 1830 us for two tiles); where splits fill the GPU anyway, two tiles were faster
# (B8-T17-L8k: 116 vs 131 us). Tests turn this policy off to force the tail path.
TAIL_ONLY_WHEN_FULL = True


# A 192-row tile (three warpgroups) takes about 1.6x a 128-row tile's time per key: it pays where
# each program streams far or the grid is full anyway, and loses where it leaves SMs idle on short
# streams (H200, round 6, third sweep: B1-T33-L32k 61.0 us against 70.8 with 128-row tiles (2048
# keys a program), B32-T33-L1k 73.4 against 91.5 (256 programs); B1-T33-L8k 31.7 against 27.7
# (512 keys a program), B8-T33-L1k 32.5 against 24.8 (64 programs)). A 128-row tile with the
# 8-row tail warpgroup, in one program where 128-row tiles alone need two, the same (fourth
# sweep: B8-T33-L1k 31.7 against 24.8, B1-T33-L8k 29.2 against 27.6).
WIDE_TILE_MIN_CHUNK = 2048
WIDE_TILE_MIN_WAVES = 1.5
# rows of the ping-pong kernel's tail warpgroup (the N of its key-major MMAs); the Triton tail
# tile has 16 or more
PINGPONG_TAIL_ROWS = 8


# ``VerifyConfig.gluon_pingpong_64_block_n`` (head dim 64: 128-key tiles for the ping-pong kernel's
# single warpgroup) where a split streams at least this many keys. Measured at head dim 64 (H200,
# PERF.md round 16, against 64-key tiles): 3-19 % faster at 2048 keys a split and more
# (B1-T9-L32k 28.6 -> 27.4 us, B8-T17-L32k 175.1 -> 142.3), 3-9 % slower at 256-1024 (B1-T9-L1k
# 11.8 -> 12.9, B1-T17-L8k 18.2 -> 19.8), and 2-8 % slower as persistent programs (B32-T17-L1k
# 33.3 -> 36.0), which it is not taken for either.
PINGPONG_64_WIDE_KEYS_MIN_CHUNK = 2048


# Whether the planner may take ``VerifyConfig.split_query_heads`` where a config asks for it (the
# sweeps turn it off to measure it).
SPLIT_QUERY_HEADS = True
# the rows one program of a split KV head takes at most: a 64-row warpgroup and the 8-row tail
SPLIT_HEAD_MAX_ROWS = 64 + 8


@functools.lru_cache(maxsize=4096)
def _plan(batch, num_nodes, group, kv_heads, cache_rows, sms, cfg, tail_only_when_full=True) -> dict:
    packed = num_nodes * group
    if SPLIT_QUERY_HEADS and cfg.split_query_heads and group % 2 == 0 and 128 < packed <= 2 * SPLIT_HEAD_MAX_ROWS:
        whole = _plan(batch, num_nodes, group, kv_heads, cache_rows, sms,
                      dataclasses.replace(cfg, split_query_heads=False), tail_only_when_full)
        if whole["num_m_tiles"] > 1:
            # two programs per KV head anyway (2 x 128 rows on a short stream): half its query
            # heads each, the plan of a call with twice the KV heads at half the group
            half = _plan(batch, num_nodes, group // 2, kv_heads * 2, cache_rows, sms,
                         dataclasses.replace(cfg, split_query_heads=False), tail_only_when_full)
            return dict(half, head_split=2)
        return whole
    slots = cfg.resident_per_sm * sms
    # 192-row tiles (three warpgroups) and 8-row tails exist in the ping-pong kernel only
    extra = (192,) if cfg.gluon_pingpong_192 else ()
    whole, over = divmod(packed, 128)
    # the tail warpgroup unless 192-row tiles need fewer programs (520 rows: 3 x 192 against
    # 4 x 128 + 8, 12 % faster at B32-T65-H64-L8k in round 6's fourth sweep)
    if (cfg.gluon_pingpong_tail and whole >= 1 and 0 < over <= PINGPONG_TAIL_ROWS
            and not (extra and triton.cdiv(packed, 192) < whole)):
        block_m, num_m_tiles, tail_m = 128, whole, PINGPONG_TAIL_ROWS
    elif cfg.gluon_pingpong_64 and cfg.gluon_pingpong_tail and 64 < packed <= 64 + PINGPONG_TAIL_ROWS:
        block_m, num_m_tiles, tail_m = 64, 1, PINGPONG_TAIL_ROWS
    else:
        block_m, num_m_tiles, tail_m = pick_query_tiles(packed, cfg.max_block_m, cfg.max_tail_m, cfg.min_block_m,
                                                        extra)
    if tail_m and tail_only_when_full and tail_m != PINGPONG_TAIL_ROWS and (
            num_m_tiles > 1 or batch * kv_heads * (num_m_tiles + 1) < slots):
        block_m, num_m_tiles, tail_m = pick_query_tiles(packed, cfg.max_block_m, 0, cfg.min_block_m, extra)
    if cfg.gluon_pingpong_64_block_n and block_m == 64 and runs_pingpong(cfg, block_m):
        # the ping-pong kernel's single warpgroup takes its own key tiles, and the splits follow,
        # where they are long and its programs not persistent
        tiles = cfg.gluon_pingpong_64_block_n
        plan = _plan(batch, num_nodes, group, kv_heads, cache_rows, sms,
                     dataclasses.replace(cfg, block_n=tiles, gluon_block_n=tiles, gluon_pingpong_64_block_n=0),
                     tail_only_when_full)
        if (plan["chunk"] >= PINGPONG_64_WIDE_KEYS_MIN_CHUNK
                and pingpong_grid(plan["grid"], sms, block_m, plan["chunk"]) == plan["grid"]):
            return plan
        cfg = dataclasses.replace(cfg, gluon_pingpong_64_block_n=0)
    base_programs = batch * kv_heads * num_m_tiles
    prefix_rows = max(cache_rows - num_nodes, 1)
    chunk, num_splits = _pick_splits(base_programs, prefix_rows, cfg.block_n, slots, batch * kv_heads, packed)
    # (not the 64-row warpgroup with the tail, lighter than the 128-row tile it replaces: faster on
    # the four short-stream shapes of round 8's fifth sweep, B8-T17-L1k 19.9 -> 18.3 us)
    wide = block_m == 192 or (block_m == 128 and tail_m == PINGPONG_TAIL_ROWS)
    if wide and chunk < WIDE_TILE_MIN_CHUNK and base_programs * num_splits < WIDE_TILE_MIN_WAVES * slots:
        # short streams on a part-filled GPU: more, narrower programs
        return _plan(batch, num_nodes, group, kv_heads, cache_rows, sms,
                     dataclasses.replace(cfg, gluon_pingpong_192=False, gluon_pingpong_tail=False),
                     tail_only_when_full)
    chunk = relieve_tree_split(chunk, num_splits, prefix_rows, cfg.block_n, tail_m)
    return dict(config=cfg, block_m=block_m, num_m_tiles=num_m_tiles, tail_m=tail_m, chunk=chunk,
                num_splits=num_splits, grid=(base_programs, num_splits), head_split=1)


def plan_verify_launch(batch: int, num_nodes: int, q_heads: int, kv_heads: int, head_dim: int,
                       cache_rows: int, device, config=None) -> dict:
    """Tile sizes, split count and grid for one call (pure function of shapes and device)."""
    group = q_heads // kv_heads
    cfg = config or verify_config(arch_name(device), head_dim, num_nodes * group, batch * kv_heads, cache_rows)
    return dict(_plan(batch, num_nodes, group, kv_heads, cache_rows, _sm_count(device), cfg,
                      TAIL_ONLY_WHEN_FULL))


# One merge program combines MERGE_ROWS rows x D of up to SPLIT_BLOCK splits with all their loads
# in flight at once (MERGE_ELEMENTS fp32 in registers: 64 a thread at 4 warps). Measured on an
# H200 (PERF.md, round 3, ncu): the round-2 merge, one [splits, rows, D] block with a reduction
# across the split axis, int64 addresses and the partial load waiting on the lse load, took 15 us
# for 4.7 MB at B8-T9-L8k (255 registers, L1 busy with the reduction's shared-memory traffic),
# a sixth of the call; as one 3-D block without the wait, 12 us.
MERGE_ELEMENTS = 8192
MERGE_ROWS = 8


# Where all splits fit one block, the merge's two passes are straight-line code (one round trip
# to L2; ``_tree_verify_merge_kernel``'s ONE_BLOCK). The sweeps turn it off to measure it.
MERGE_ONE_PASS = True


def merge_tiles(num_splits: int, head_dim: int) -> tuple[int, int]:
    """(split_block, merge_rows) for the merge kernel: splits unrolled per block, rows per program.

    All splits in one block where MERGE_ELEMENTS allows it at two rows, then as many rows as fit
    (at most MERGE_ROWS): with many splits (batch 1, long prefix) a program takes few rows, so
    that there are many programs to share the latency. (Round 3 first fixed the rows at 8: at
    B1-T9-L32k the 32 splits then ran as 4 blocks one after another in only 40 programs, and the
    call took 51.5 us against 47 before.)
    """
    split_block = max(2, min(triton.next_power_of_2(num_splits), MERGE_ELEMENTS // (2 * head_dim)))
    merge_rows = max(2, min(MERGE_ROWS, MERGE_ELEMENTS // (split_block * head_dim)))
    return split_block, merge_rows


def _tma_view_ok(cache) -> bool:
    """Whether ``cache`` [B, S, Hkv, D] reads as one 2-D [B * S, Hkv * D] tensor with unit
    stride in its second dim and 16-byte aligned rows, which is what a tensor descriptor needs:
    heads adjacent (stride D), requests S rows apart. Other layouts keep per-element loads."""
    batch, rows, heads, head_dim = cache.shape
    row_stride = cache.stride(1)
    return (cache.stride(3) == 1 and cache.stride(2) == head_dim and row_stride >= heads * head_dim
            and (batch == 1 or cache.stride(0) == rows * row_stride)
            and (row_stride * cache.element_size()) % 16 == 0 and cache.data_ptr() % 16 == 0)


def _kv_descriptor(cache, block_n, gluon=False):
    """A tensor descriptor of a K or V cache [B, S, Hkv, D] seen as [B * S, Hkv * D], one
    [block_n, D] box per key tile: Triton's, or Gluon's, which also names the swizzled shared
    layout its MMA reads. The caller has checked the layout (:func:`_tma_view_ok`)."""
    batch, rows, heads, head_dim = cache.shape
    view = dict(shape=[batch * rows, heads * head_dim], strides=[cache.stride(1), 1], block_shape=[block_n, head_dim])
    if not gluon:
        from triton.tools.tensor_descriptor import TensorDescriptor

        return TensorDescriptor(cache, **view)
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    element = gl.bfloat16 if cache.dtype == torch.bfloat16 else gl.float16
    return TensorDescriptor(cache, **view, layout=gl.NVMMASharedLayout.get_default_for([block_n, head_dim], element))


def _tma_descriptors(k_cache, v_cache, block_n):
    """Triton descriptors of the K and V caches; (None, None) when either layout does not allow one."""
    if not (_tma_view_ok(k_cache) and _tma_view_ok(v_cache)):
        return None, None
    return _kv_descriptor(k_cache, block_n), _kv_descriptor(v_cache, block_n)


def _launch_triton_split(plan, cfg, q, k_cache, v_cache, trailing_args, scale, group, head_dim, block_m, tail_m,
                         single, precision, upcast, merge_early):
    k_desc, v_desc = _tma_descriptors(k_cache, v_cache, cfg.block_n) if cfg.tma else (None, None)
    use_tma = k_desc is not None
    _tree_verify_partial_kernel[plan["grid"]](
        q, k_cache, v_cache, k_desc if use_tma else k_cache, v_desc if use_tma else v_cache, *trailing_args,
        GROUP=group, HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=cfg.block_n, TAIL_M=tail_m,
        SINGLE_SPLIT=single, DOT_PRECISION=precision, UPCAST=upcast, USE_TMA=use_tma,
        LAZY_RESCALE=cfg.lazy_rescale, FOLD_SCALE=cfg.fold_scale and scale > 0, LAUNCH_MERGE_EARLY=merge_early,
        KV_SHARE=plan["head_split"], num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        **({"maxnreg": cfg.max_registers} if cfg.max_registers and q.device.type == "cuda" else {}),
    )


def _gluon_descriptors(k_cache, v_cache, block_n):
    """Gluon descriptors of the K and V caches, for calls :func:`plan_split_kernel` sends to the
    Gluon kernel (their layouts allow one descriptor, this Triton has Gluon)."""
    return _kv_descriptor(k_cache, block_n, gluon=True), _kv_descriptor(v_cache, block_n, gluon=True)


# Why the Gluon kernel cannot run in this process, once known: Gluon is experimental and its API
# moves between Triton releases (``tree_verify_gluon`` bridges 3.6 and 3.9). A Triton without
# Gluon for Hopper, or one whose Gluon no longer builds the kernel, costs a warning and the Triton
# kernel, not a failed call.
GLUON_UNUSABLE: str | None = None


def _gluon_unusable() -> str | None:
    global GLUON_UNUSABLE
    if GLUON_UNUSABLE is None:
        try:
            import triton.experimental.gluon.language.nvidia.hopper  # noqa: F401
        except ImportError as exc:
            GLUON_UNUSABLE = f"this Triton ({triton.__version__}) has no Gluon for Hopper ({exc})"
            warnings.warn(f"{GLUON_UNUSABLE}: the tree-verify attention takes its Triton kernel, slower on Hopper "
                          "(kernels/PERF.md)", RuntimeWarning, stacklevel=4)
    return GLUON_UNUSABLE


def _run_split_kernel(launch_gluon, launch_triton) -> str:
    """Launch the Gluon split kernel if given, else (or if it does not build with this Triton:
    warned once, then never tried again in this process) the Triton one; returns which ran."""
    global GLUON_UNUSABLE
    if launch_gluon is not None:
        from triton.compiler.errors import CompilationError

        try:
            launch_gluon()
            return "gluon"
        except CompilationError as exc:
            GLUON_UNUSABLE = (f"the Gluon tree-verify kernel does not build with Triton {triton.__version__}: "
                              f"{str(exc).strip().splitlines()[-1][:300]}")
            warnings.warn(f"{GLUON_UNUSABLE}; using the Triton kernel from now on", RuntimeWarning, stacklevel=3)
    launch_triton()
    return "triton"


# Launch the merge as a programmatic dependent of the split kernel (sm_90 and later): the split
# kernels let it start once all their programs have started, and it waits on the device for their
# results (``griddepcontrol``), so its launch and prologue overlap the splits' last wave instead of
# following the split grid's end. The sweeps turn it off to measure it.
PROGRAMMATIC_MERGE = True


def merge_starts_early(device, num_splits: int, pingpong: bool) -> bool:
    """Whether this call's merge is launched as the split kernel's programmatic dependent: a
    merge at all, a GPU and a Triton with grid dependency control, not after the ping-pong kernel
    (there it measured up to 2.4 us slower when let start early, B1-T17-L32k 46.2 -> 48.6 us, and
    within 0.5 us either way when started at that kernel's end; PERF.md round 7)."""
    return (PROGRAMMATIC_MERGE and num_splits > 1 and not pingpong and gdc_wait is not None
            and device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9)


def log2_softmax_scale(head_dim: int, sm_scale: float | None = None) -> float:
    """The softmax scale the kernels take: ``sm_scale`` (default 1 / sqrt(D)) times log2(e),
    for ``exp2``."""
    return (1.0 / math.sqrt(head_dim) if sm_scale is None else sm_scale) * LOG2E


# The ping-pong kernel runs a grid of one split and at least one and a half waves of short work
# items as one persistent program an SM, each taking every SM-count-th item: its load warp streams
# the next item's first key tiles while its warpgroups finish the one before (round 14, H200:
# B32-T33-H64-L1k 113.2 -> 108.1 us, B32-T65-H32-L1k 118.3 -> 114.2, B32-T17-L1k 49.4 -> 47.8;
# at 1.45 waves B8-T65-H32-L1k 51.7 -> 52.4; at 32k keys an item B32-T17-H64 1157 -> 1248).
# Not on 192-row tiles, whose three warpgroups keep q in shared memory (+0.6 % at B32-T65-H64-L1k
# with the loop in every partition).
PERSISTENT_PINGPONG = True
PERSISTENT_MIN_WAVES = 1.5
PERSISTENT_MAX_KEYS = 2048


def pingpong_grid(grid: tuple[int, int], sms: int, block_m: int, chunk: int) -> tuple[int, int]:
    """The ping-pong kernel's launch grid for a plan's (programs a split, splits) and keys a split:
    one program a work item, or, with PERSISTENT_PINGPONG, one split, at least
    PERSISTENT_MIN_WAVES waves of ``sms``, at most PERSISTENT_MAX_KEYS keys an item and at most
    two warpgroups, ``sms`` persistent programs (the kernel takes one program an SM)."""
    programs, splits = grid
    if (PERSISTENT_PINGPONG and splits == 1 and programs >= PERSISTENT_MIN_WAVES * sms and block_m <= 128
            and chunk <= PERSISTENT_MAX_KEYS):
        return (sms, 1)
    return grid


def runs_persistent(plan: dict, kernel: str, device) -> bool:
    """Whether the call planned so runs the ping-pong kernel's persistent programs."""
    return (kernel == "gluon" and runs_pingpong(plan["config"], plan["block_m"])
            and pingpong_grid(plan["grid"], _sm_count(device), plan["block_m"], plan["chunk"]) != plan["grid"])


def runs_pingpong(cfg, block_m: int) -> bool:
    """Whether the Gluon kernel for this tile is the ping-pong one (where ``cfg`` asks for it):
    128- and 192-row tiles, and 64-row ones (with or without the tail) where it asks for those."""
    return cfg.gluon_pingpong and (block_m in (128, 192) or (block_m == 64 and cfg.gluon_pingpong_64))


def plan_split_kernel(plan: dict, q, k_cache, v_cache, scale: float) -> tuple[str, int, int]:
    """Which split kernel a launch with this plan runs, with its key rows per tile and stages:
    ("gluon", ...) where the config asks for it and the call allows it (a Hopper GPU, 16-bit
    inputs, a positive scale, head dim <= 128, no tail tile but the ping-pong kernel's, >= 16
    query rows a warp or a ping-pong tile, a cache layout one tensor descriptor describes, a
    Triton whose Gluon builds the kernel), else ("triton", ...)."""
    cfg = plan["config"]
    if (cfg.gluon and q.device.type == "cuda" and torch.cuda.get_device_capability(q.device)[0] == 9
            and q.dtype in (torch.float16, torch.bfloat16) and k_cache.dtype == q.dtype
            and v_cache.dtype == q.dtype and scale > 0 and q.shape[-1] <= 128
            and (plan["tail_m"] == 0 or (cfg.gluon_pingpong and plan["tail_m"] == PINGPONG_TAIL_ROWS))
            and (plan["block_m"] >= 16 * cfg.num_warps or runs_pingpong(cfg, plan["block_m"]))
            and (plan["head_split"] == 1 or runs_pingpong(cfg, plan["block_m"]))
            and _tma_view_ok(k_cache) and _tma_view_ok(v_cache)
            and _gluon_unusable() is None):
        return "gluon", cfg.gluon_block_n or cfg.block_n, cfg.gluon_stages or cfg.num_stages
    return "triton", cfg.block_n, cfg.num_stages


def triton_fallback(cfg):
    """The configuration for a call that ``cfg``'s Gluon kernel cannot take, where the Triton
    kernel wants other tiles (``VerifyConfig.triton_fallback``; 192-row tiles and 8-row tails,
    which only the ping-pong kernel has, fall back to power-of-two tiles); None: the same one."""
    if cfg.triton_fallback is not None:
        return cfg.triton_fallback
    if cfg.gluon_pingpong_192 or cfg.gluon_pingpong_tail or cfg.gluon_pingpong_64:
        return dataclasses.replace(cfg, gluon_pingpong_192=False, gluon_pingpong_tail=False,
                                   gluon_pingpong_64=False)
    return None


def plan_call(q, k_cache, v_cache, scale: float, config=None) -> tuple[dict, str, int, int]:
    """(plan, kernel, key rows per tile, stages) of one call: the table's (or ``config``'s)
    plan, or, where its Gluon kernel cannot run this call, its Triton fallback's."""
    batch, num_nodes, q_heads, head_dim = q.shape
    args = (batch, num_nodes, q_heads, k_cache.shape[2], head_dim, k_cache.shape[1], q.device)
    plan = plan_verify_launch(*args, config)
    kernel = plan_split_kernel(plan, q, k_cache, v_cache, scale)
    if kernel[0] != "gluon" and triton_fallback(plan["config"]) is not None:
        plan = plan_verify_launch(*args, triton_fallback(plan["config"]))
        kernel = plan_split_kernel(plan, q, k_cache, v_cache, scale)
    return (plan, *kernel)


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
    scale = log2_softmax_scale(head_dim, sm_scale)
    plan, kernel, kernel_block_n, kernel_stages = plan_call(q, k_cache, v_cache, scale, config)
    if num_splits is not None:
        chunk, forced = split_chunks(max(k_cache.shape[1] - num_nodes, 1), num_splits, plan["config"].block_n)
        plan.update(chunk=chunk, num_splits=forced, grid=(plan["grid"][0], forced))
    cfg, block_m, num_m_tiles = plan["config"], plan["block_m"], plan["num_m_tiles"]
    tail_m, splits = plan["tail_m"], plan["num_splits"]
    # with split query heads the kernels see head_split times the KV heads, each with as many
    # fewer query heads, and read K/V of KV head (their KV head) // head_split
    head_split = plan["head_split"]
    kv_heads *= head_split
    group = q_heads // kv_heads
    # Triton's CPU interpreter computes bf16 tl.dot wrongly (seen with triton 3.9: errors of
    # 1e10 on a 16x16 product); there the tiles are upcast to fp32 before the dots.
    upcast = q.device.type != "cuda" and q.dtype == torch.bfloat16
    precision = "ieee" if q.dtype == torch.float32 or upcast else "tf32"
    single = splits == 1
    pingpong = kernel == "gluon" and runs_pingpong(cfg, block_m)
    merge_early = merge_starts_early(q.device, splits, pingpong)
    rows_pad = num_m_tiles * block_m + tail_m
    if single:
        part_o = part_lse = out  # unused
    else:
        part_o = torch.empty(batch * kv_heads, splits, rows_pad, head_dim, device=q.device,
                             dtype=torch.float32)
        part_lse = torch.empty(batch * kv_heads, splits, rows_pad, device=q.device, dtype=torch.float32)
        if POISON_WORKSPACE:
            part_o.fill_(float("nan"))
            part_lse.fill_(float("nan"))
    # every argument after the K / V descriptors, the same for both split kernels
    trailing_args = (cache_lens, ancestor_mask, out, part_o, part_lse, *q.stride()[:3], *k_cache.stride()[:3],
                     *v_cache.stride()[:3], *ancestor_mask.stride()[:2], *out.stride()[:3],
                     scale, num_nodes, kv_heads, num_m_tiles, splits, plan["chunk"], k_cache.shape[1])
    launch_gluon = None
    if kernel == "gluon":
        gluon_descs = _gluon_descriptors(k_cache, v_cache, kernel_block_n)

        def launch_gluon():
            if pingpong:
                from .tree_verify_gluon_pingpong import _tree_verify_partial_kernel_gluon_pingpong as kernel_fn
            else:
                from .tree_verify_gluon import _tree_verify_partial_kernel_gluon as kernel_fn

            # the ping-pong kernel launches its first warpgroup; its partitions add the rest (one
            # more warpgroup, two on 192-row tiles, and a load warp)
            grid = plan["grid"]
            if pingpong:
                grid = pingpong_grid(plan["grid"], _sm_count(q.device), block_m, plan["chunk"])
                extra = dict(base_programs=plan["grid"][0], TAIL_M=tail_m, KV_SHARE=head_split,
                             PERSISTENT=grid != plan["grid"])
            else:
                extra = dict(MASKED_BY_TMA=cfg.gluon_masked_tma)
            kernel_fn[grid](
                q, k_cache, v_cache, *gluon_descs, *trailing_args,
                GROUP=group, HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=kernel_block_n, STAGES=kernel_stages,
                SINGLE_SPLIT=single, Q_IN_REGS=cfg.gluon_q_in_registers or pingpong,
                num_warps=4 if pingpong else cfg.num_warps, **extra,
            )

    if launch_gluon is not None and triton_fallback(cfg) is not None:
        if _run_split_kernel(launch_gluon, lambda: None) != "gluon":
            # this Triton's Gluon does not build the kernel (warned once): again, planned for the
            # Triton kernel
            return tree_verify_attention_triton(q, k_cache, v_cache, cache_lens, ancestor_mask, sm_scale, out,
                                                num_splits, triton_fallback(cfg))
    else:
        _run_split_kernel(launch_gluon, lambda: _launch_triton_split(
            plan, cfg, q, k_cache, v_cache, trailing_args, scale, group, head_dim, block_m, tail_m, single,
            precision, upcast, merge_early))
    if not single:
        split_block, merge_rows = merge_tiles(splits, head_dim)
        row_blocks = triton.cdiv(num_nodes * group, merge_rows)
        _tree_verify_merge_kernel[(batch * kv_heads * row_blocks,)](
            part_o, part_lse, out,
            out.stride(0), out.stride(1), out.stride(2),
            num_nodes * group, kv_heads, rows_pad, splits, row_blocks,
            GROUP=group, HEAD_DIM=head_dim, MERGE_ROWS=merge_rows, SPLIT_BLOCK=split_block,
            WAIT_FOR_SPLITS=merge_early, ONE_BLOCK=MERGE_ONE_PASS and splits <= split_block, num_warps=4,
            **({"launch_pdl": True} if merge_early else {}),
        )
    return out
