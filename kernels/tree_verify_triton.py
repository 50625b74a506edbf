"""Triton kernels and the launcher of :func:`specdec_kernels.tree_verify_attention` (imported
lazily).

The launcher is check -> plan -> launch: it checks the layout once per distinct call, asks
:func:`specdec_kernels.verify_plan.plan_verify` for the call's plan (cached per call signature),
and launches the split kernel the plan names (this module's Triton kernel, or on Hopper a Gluon one
of ``tree_verify_gluon`` / ``tree_verify_gluon_pingpong``) and, with several splits, the merge
(on eager calls folded into the split kernel where the plan allows it: ``MergePlan.fused``, in its
last program of a query tile or, on the ping-pong kernel, in ``MergePlan.waiters`` programs a tile
appended to its grid).

The Triton split kernel: one program owns ``BLOCK_M`` packed query rows of one (request, KV head)
on one split of its keys; rows past a whole number of query tiles may ride in a 16-row tail tile
(``TAIL_M``) so the cache is streamed once. Prefix tiles are mask-free except the split's partial
last one (and load through tensor descriptors where the entry asks and the layout allows); the
split holding the prefix's last row (split 0 when L_b = 0), or with ``TREE_SPLIT`` the split after
it (``VerifyPlan.own_tree_split``), streams the T tree rows under the ancestor bitmask. With one
split the program writes the normalised output, with several an fp32 partial and its
log2-sum-exp that the merge combines. Scores use ``exp2`` with ``sm_scale *
log2(e)`` folded in; all accumulation is fp32.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import threading
import warnings

import torch
import triton
import triton.language as tl

try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # Triton before 3.4: no grid dependency control, the merge follows the splits
    gdc_launch_dependents = gdc_wait = None

from .configs import HEAD_DIMS, arch_name
from .triton_launch import direct_launch_unusable, launch_hooks_set, tensor_map
from .verify_plan import DEFAULT_POLICY, VerifyPlan, VerifyPolicy, VerifyShape, VerifyTarget, plan_verify

LOG2E = 1.4426950408889634


@triton.jit
def _online_update(acc, m_i, l_i, raw, qk_scale, visible, v_tile, MASKED: tl.constexpr,
                   DOT_PRECISION: tl.constexpr):
    """One online-softmax step over a tile of raw scores ``raw`` = q.k [BM, BN] (``visible``
    selects the keys a row may see where MASKED); the running max ``m_i`` is log2-scaled."""
    scores = raw * qk_scale
    if MASKED:
        scores = tl.where(visible, scores, float("-inf"))
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
    out = acc * (1.0 / l_safe)[:, None]  # a reciprocal a row, not a divide an element
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
    q_ptr, k_ptr, v_ptr, k_desc, v_desc, lens_ptr, mask_ptr, out_ptr, part_o_ptr, part_lse_ptr, counts_ptr,
    stride_qb, stride_qt, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_mb, stride_mt,
    stride_ob, stride_ot, stride_oh,
    qk_scale, num_nodes, num_kv_heads, num_m_tiles, num_splits, chunk, cache_rows,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    TAIL_M: tl.constexpr,
    SINGLE_SPLIT: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr, USE_TMA: tl.constexpr,
    LAUNCH_MERGE_EARLY: tl.constexpr = False,
    KV_SHARE: tl.constexpr = 1,
    FUSED_MERGE: tl.constexpr = False, MERGE_ROWS: tl.constexpr = 2, SPLIT_BLOCK: tl.constexpr = 2,
    TREE_SPLIT: tl.constexpr = 0,
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
        acc, m_i, l_i = _online_update(acc, m_i, l_i, raw, qk_scale, 0, v_tile, False, DOT_PRECISION)
        if TAIL_M > 0:
            acc_t, m_t, l_t = _online_update(acc_t, m_t, l_t, raw_t, qk_scale, 0, v_tile, False, DOT_PRECISION)
    # the partial last prefix tile of this split
    if full_end < hi:
        in_range = full_end + cols < hi
        k_tile = tl.load(k_tile_ptrs + full_end * stride_ks, mask=in_range[:, None], other=0.0)
        v_tile = tl.load(v_tile_ptrs + full_end * stride_vs, mask=in_range[:, None], other=0.0)
        if UPCAST:
            k_tile = k_tile.to(tl.float32)
            v_tile = v_tile.to(tl.float32)
        raw = tl.dot(q, tl.trans(k_tile), input_precision=DOT_PRECISION)
        acc, m_i, l_i = _online_update(acc, m_i, l_i, raw, qk_scale, in_range[None, :], v_tile, True, DOT_PRECISION)
        if TAIL_M > 0:
            raw_t = tl.dot(q_t, tl.trans(k_tile), input_precision=DOT_PRECISION)
            acc_t, m_t, l_t = _online_update(acc_t, m_t, l_t, raw_t, qk_scale, in_range[None, :], v_tile, True,
                                             DOT_PRECISION)
    # the tree rows, ancestor-masked, streamed by the split that holds the prefix's last row or
    # (TREE_SPLIT 1) the split after it, which holds no prefix row
    tree_split = tl.maximum(tl.cdiv(prefix_len, chunk) - 1 + TREE_SPLIT, 0)
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
            acc, m_i, l_i = _online_update(acc, m_i, l_i, raw, qk_scale, visible, v_tile, True, DOT_PRECISION)
            if TAIL_M > 0:
                words_t = tl.load(mask_ptrs_t + (tree_node // 32)[None, :],
                                  mask=row_valid_t[:, None] & in_tree[None, :], other=0)
                visible_t = ((words_t >> (tree_node % 32)[None, :]) & 1) != 0
                raw_t = tl.dot(q_t, tl.trans(k_tile), input_precision=DOT_PRECISION)
                acc_t, m_t, l_t = _online_update(acc_t, m_t, l_t, raw_t, qk_scale, visible_t, v_tile, True,
                                                 DOT_PRECISION)

    _store_rows(acc, m_i, l_i, rows, row_valid, b, head_b, split, kv_head, out_ptr, part_o_ptr, part_lse_ptr,
                stride_ob, stride_ot, stride_oh, num_splits, rows_pad, GROUP, HEAD_DIM, SINGLE_SPLIT)
    if TAIL_M > 0:
        _store_rows(acc_t, m_t, l_t, rows_t, row_valid_t, b, head_b, split, kv_head, out_ptr, part_o_ptr,
                    part_lse_ptr, stride_ob, stride_ot, stride_oh, num_splits, rows_pad, GROUP, HEAD_DIM,
                    SINGLE_SPLIT)
    if FUSED_MERGE:
        tl.debug_barrier()  # every thread's partial rows stored before the count says so
        _merge_if_last(counts_ptr + pid, part_o_ptr, part_lse_ptr, out_ptr, b, head_b, kv_head,
                       m_tile * BLOCK_M, tl.minimum(tl.where(m_tile == num_m_tiles - 1, rows_pad, m_tile * BLOCK_M + BLOCK_M),
                                                    num_rows),
                       rows_pad, num_splits, stride_ob, stride_ot, stride_oh, GROUP, HEAD_DIM, MERGE_ROWS, SPLIT_BLOCK)


@triton.jit
def _merge_split_block(acc, l_i, s0, lse_base, o_base, rows, row_valid, dims, m_shift, num_splits, rows_pad,
                       HEAD_DIM: tl.constexpr, SPLIT_BLOCK: tl.constexpr, CACHE: tl.constexpr):
    """acc += the weighted partials of splits [s0, s0 + SPLIT_BLOCK), l_i += their weights: the
    splits unrolled, their [rows, D] loads independent of each other (all in flight at once)."""
    for j in tl.static_range(SPLIT_BLOCK):
        ok = row_valid & (tl.zeros_like(rows) + (s0 + j) < num_splits)
        part_row = (s0 + j) * rows_pad + rows
        lse = tl.load(lse_base + part_row, mask=ok, other=float("-inf"), cache_modifier=CACHE)
        part = tl.load(o_base + part_row[:, None] * HEAD_DIM + dims[None, :], mask=ok[:, None], other=0.0,
                       cache_modifier=CACHE)
        # an empty split holds lse = -inf (weight 0); select, so that whatever its partial holds
        # (even NaN) never reaches the sum
        live = lse > float("-inf")
        weight = tl.where(live, tl.exp2(lse - m_shift), 0.0)
        acc += tl.where(live[:, None], part * weight[:, None], 0.0)
        l_i += weight
    return acc, l_i


@triton.jit
def _merge_rows_one_block(lse_base, o_base, out_ptr, b, kv_head, rows, row_valid, num_splits, rows_pad,
                          stride_ob, stride_ot, stride_oh, d0, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
                          SLICE_D: tl.constexpr, MERGE_ROWS: tl.constexpr, SPLIT_BLOCK: tl.constexpr,
                          CACHE: tl.constexpr):
    """The merged output of packed ``rows`` of one (request, KV head), columns [d0, d0 + SLICE_D),
    whose splits all fit one block: the largest log2-sum-exp of each row, then each split's
    weight, as straight-line code (one round trip to L2). CACHE: the partials' cache modifier."""
    m_i = tl.full([MERGE_ROWS], float("-inf"), dtype=tl.float32)
    for j in tl.static_range(SPLIT_BLOCK):
        ok = row_valid & (tl.zeros_like(rows) + j < num_splits)
        m_i = tl.maximum(m_i, tl.load(lse_base + j * rows_pad + rows, mask=ok, other=float("-inf"),
                                      cache_modifier=CACHE))
    # rows no split saw a key for keep m = -inf: shift by 0 (their weights are all 0)
    m_shift = tl.where(m_i == float("-inf"), 0.0, m_i)
    dims = d0 + tl.arange(0, SLICE_D)
    acc = tl.zeros([MERGE_ROWS, SLICE_D], dtype=tl.float32)
    l_i = tl.zeros([MERGE_ROWS], dtype=tl.float32)
    acc, l_i = _merge_split_block(acc, l_i, 0, lse_base, o_base, rows, row_valid, dims, m_shift, num_splits,
                                  rows_pad, HEAD_DIM, SPLIT_BLOCK, CACHE)
    _store_merged(acc, l_i, out_ptr, b, kv_head, rows, row_valid, dims, stride_ob, stride_ot, stride_oh, GROUP)


@triton.jit
def _store_merged(acc, l_i, out_ptr, b, kv_head, rows, row_valid, dims, stride_ob, stride_ot, stride_oh,
                  GROUP: tl.constexpr):
    out = acc * (1.0 / tl.where(l_i == 0.0, 1.0, l_i))[:, None]
    node = rows // GROUP
    q_head = kv_head * GROUP + rows % GROUP
    tl.store(out_ptr + b.to(tl.int64) * stride_ob + node[:, None] * stride_ot
             + q_head[:, None] * stride_oh + dims[None, :],
             out.to(out_ptr.dtype.element_ty), mask=row_valid[:, None])


@triton.jit
def _merge_if_last(count_ptr, part_o_ptr, part_lse_ptr, out_ptr, b, head_b, kv_head, row_lo, row_hi, rows_pad,
                   num_splits, stride_ob, stride_ot, stride_oh, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
                   MERGE_ROWS: tl.constexpr, SPLIT_BLOCK: tl.constexpr):
    """The merge folded into the split kernel: the last of an item's num_splits programs to count
    itself at ``count_ptr`` (its partials and every other split's are then in memory) merges the
    item's packed rows [row_lo, row_hi) and sets the count back to 0 for the next launch. The
    partials come from L2 (``.cg``): other programs wrote them."""
    count = tl.atomic_add(count_ptr, 1, sem="acq_rel", scope="gpu")
    if count == num_splits - 1:
        tl.store(count_ptr, 0)
        lse_base = part_lse_ptr + head_b.to(tl.int64) * num_splits * rows_pad
        o_base = part_o_ptr + head_b.to(tl.int64) * num_splits * rows_pad * HEAD_DIM
        for r0 in range(row_lo, row_hi, MERGE_ROWS):
            rows = r0 + tl.arange(0, MERGE_ROWS)
            _merge_rows_one_block(lse_base, o_base, out_ptr, b, kv_head, rows, rows < row_hi, num_splits, rows_pad,
                                  stride_ob, stride_ot, stride_oh, 0, GROUP, HEAD_DIM, HEAD_DIM, MERGE_ROWS,
                                  SPLIT_BLOCK, ".cg")


@triton.jit
def _tree_verify_merge_kernel(
    part_o_ptr, part_lse_ptr, out_ptr,
    stride_ob, stride_ot, stride_oh,
    num_rows, num_kv_heads, rows_pad, num_splits, row_blocks,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, SLICE_D: tl.constexpr, MERGE_ROWS: tl.constexpr,
    SPLIT_BLOCK: tl.constexpr, WAIT_FOR_SPLITS: tl.constexpr = False, ONE_BLOCK: tl.constexpr = False,
    VECTOR_LOADS: tl.constexpr = False,
):
    """Merge the splits of MERGE_ROWS packed rows of one (request, KV head), in SLICE_D of its
    HEAD_DIM columns: with many splits and few rows, head-dim slices multiply the programs that
    share the latency (each reads every split's log2-sum-exps of its rows, and its slice of their
    partials).

    The work is a few MB that the split kernel has just left in L2, so this kernel is all
    latency. Two passes: the largest log2-sum-exp of each row first, then each split's weight
    is known up front and the weighted sum is a chain of multiply-adds, not of online
    rescalings. A block of SPLIT_BLOCK splits is unrolled, their [MERGE_ROWS, D] partials
    independent loads summed in each thread's registers; with VECTOR_LOADS (blocks of 64 splits or
    more, whose unrolled loads compiled to one after another) it is one [splits, rows, columns]
    load, summed across threads. int32 offsets from one
    per-head base keep the addresses cheap. With ONE_BLOCK (all splits in one block) both passes
    are straight-line code, so the partials' loads need not wait for the first pass's: one
    round trip to L2 instead of two. With WAIT_FOR_SPLITS it was launched as a programmatic
    dependent of the split kernel, and may have started before the splits ended: it waits for
    them before its first load.
    """
    pid = tl.program_id(0)
    # a row block's slices are neighbours: they read the same log2-sum-exps
    d0 = (pid % (HEAD_DIM // SLICE_D)) * SLICE_D
    row_block = pid // (HEAD_DIM // SLICE_D)
    head_b = row_block // row_blocks
    kv_head = head_b % num_kv_heads
    b = head_b // num_kv_heads
    rows = (row_block % row_blocks) * MERGE_ROWS + tl.arange(0, MERGE_ROWS)
    row_valid = rows < num_rows
    dims = d0 + tl.arange(0, SLICE_D)
    split_ids = tl.arange(0, SPLIT_BLOCK)
    lse_base = part_lse_ptr + head_b.to(tl.int64) * num_splits * rows_pad
    o_base = part_o_ptr + head_b.to(tl.int64) * num_splits * rows_pad * HEAD_DIM

    if WAIT_FOR_SPLITS:
        gdc_wait()
    if ONE_BLOCK and not VECTOR_LOADS:
        _merge_rows_one_block(lse_base, o_base, out_ptr, b, kv_head, rows, row_valid, num_splits, rows_pad,
                              stride_ob, stride_ot, stride_oh, d0, GROUP, HEAD_DIM, SLICE_D, MERGE_ROWS,
                              SPLIT_BLOCK, "")
    elif ONE_BLOCK:
        # every split's log2-sum-exps and partials loaded at once (one round trip to L2), then the
        # rows' largest log2-sum-exp and each split's weight
        lse, part = _split_block_partials(lse_base, o_base, split_ids, rows, row_valid, dims, num_splits, rows_pad,
                                          HEAD_DIM)
        m_i = tl.max(lse, 0)
        # rows no split saw a key for keep m = -inf: shift by 0 (their weights are all 0)
        acc, l_i = _add_weighted(tl.zeros([MERGE_ROWS, SLICE_D], dtype=tl.float32),
                                 tl.zeros([MERGE_ROWS], dtype=tl.float32), lse, part,
                                 tl.where(m_i == float("-inf"), 0.0, m_i))
        _store_merged(acc, l_i, out_ptr, b, kv_head, rows, row_valid, dims, stride_ob, stride_ot, stride_oh, GROUP)
    else:
        m_i = tl.full([MERGE_ROWS], float("-inf"), dtype=tl.float32)
        for s0 in range(0, num_splits, SPLIT_BLOCK):
            ok = ((s0 + split_ids) < num_splits)[:, None] & row_valid[None, :]
            lse = tl.load(lse_base + (s0 + split_ids)[:, None] * rows_pad + rows[None, :], mask=ok,
                          other=float("-inf"))
            m_i = tl.maximum(m_i, tl.max(lse, 0))
        m_shift = tl.where(m_i == float("-inf"), 0.0, m_i)
        acc = tl.zeros([MERGE_ROWS, SLICE_D], dtype=tl.float32)
        l_i = tl.zeros([MERGE_ROWS], dtype=tl.float32)
        for s0 in range(0, num_splits, SPLIT_BLOCK):
            if VECTOR_LOADS:
                lse, part = _split_block_partials(lse_base, o_base, s0 + split_ids, rows, row_valid, dims,
                                                  num_splits, rows_pad, HEAD_DIM)
                acc, l_i = _add_weighted(acc, l_i, lse, part, m_shift)
            else:
                acc, l_i = _merge_split_block(acc, l_i, s0, lse_base, o_base, rows, row_valid, dims, m_shift,
                                              num_splits, rows_pad, HEAD_DIM, SPLIT_BLOCK, "")
        _store_merged(acc, l_i, out_ptr, b, kv_head, rows, row_valid, dims, stride_ob, stride_ot, stride_oh, GROUP)


@triton.jit
def _split_block_partials(lse_base, o_base, splits, rows, row_valid, dims, num_splits, rows_pad,
                          HEAD_DIM: tl.constexpr):
    """The log2-sum-exps [splits, rows] and partials [splits, rows, columns] of a block of splits,
    each one load with all of it in flight (a block unrolled in a loop compiled to loads issued one
    after another)."""
    ok = (splits < num_splits)[:, None] & row_valid[None, :]
    part_row = splits[:, None] * rows_pad + rows[None, :]
    lse = tl.load(lse_base + part_row, mask=ok, other=float("-inf"))
    part = tl.load(o_base + part_row[:, :, None] * HEAD_DIM + dims[None, None, :], mask=ok[:, :, None], other=0.0)
    return lse, part


@triton.jit
def _add_weighted(acc, l_i, lse, part, m_shift):
    """acc += the block's partials weighted against the rows' largest log2-sum-exp, l_i += the
    weights; an empty split holds lse = -inf (weight 0), selected out whatever its partial holds."""
    live = lse > float("-inf")
    weight = tl.where(live, tl.exp2(lse - m_shift[None, :]), 0.0)
    acc += tl.sum(tl.where(live[:, :, None], part * weight[:, :, None], 0.0), 0)
    return acc, l_i + tl.sum(weight, 0)



def log2_softmax_scale(head_dim: int, sm_scale: float | None = None) -> float:
    """The softmax scale the kernels take: ``sm_scale`` (default 1 / sqrt(D)) times log2(e)."""
    return (1.0 / math.sqrt(head_dim) if sm_scale is None else sm_scale) * LOG2E


# The Gluon names the kernels use, by module; a Triton lacking any cannot build them. Gluon is
# experimental and renames things between releases (tree_verify_gluon bridges 3.6 and 3.9).
_GLUON_NAMES = {
    "triton.experimental.gluon.language": ("warp_specialize", "NVMMADistributedLayout", "NVMMASharedLayout",
                                           "DotOperandLayout", "allocate_shared_memory", "inline_asm_elementwise"),
    "triton.experimental.gluon.language.nvidia.hopper": ("fence_async_shared", "mbarrier", "tma", "warpgroup_mma",
                                                         "warpgroup_mma_init", "warpgroup_mma_wait"),
    "triton.experimental.gluon.nvidia.hopper": ("TensorDescriptor",),
}


@functools.cache
def gluon_unusable() -> str | None:
    """Why this process cannot build the Gluon kernels (None: it can), decided once per process:
    a Triton without Gluon for Hopper, or whose Gluon lacks a name the kernels use, costs one
    warning and the Triton kernel on every call, not a failed call."""
    import importlib

    reason = None
    for module_name, names in _GLUON_NAMES.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            reason = f"this Triton ({triton.__version__}) has no {module_name} ({exc})"
            break
        missing = [name for name in names if not hasattr(module, name)]
        if missing:
            reason = f"this Triton's ({triton.__version__}) {module_name} has no {', '.join(missing)}"
            break
    if reason is not None:
        warnings.warn(f"{reason}: the tree-verify attention takes its Triton kernel, slower on Hopper",
                      RuntimeWarning, stacklevel=2)
    return reason


@functools.cache
def eager_launch_through_dispatch() -> str | None:
    """Why repeated calls on a GPU go through Triton's dispatch (None: they launch directly),
    decided once per process: a Triton whose C launcher layout :mod:`triton_launch` does not know
    costs one warning and tens of microseconds of host time a call, not a failed call."""
    reason = direct_launch_unusable()
    if reason is not None:
        warnings.warn(f"{reason}: each eager tree-verify call goes through Triton's dispatch, with tens of "
                      "microseconds more host time (CUDA graph replays are unaffected; Triton 3.5 to 3.9 "
                      "launch directly)", RuntimeWarning, stacklevel=3)
    return reason


@functools.cache
def target_of(device: torch.device) -> VerifyTarget:
    """The plan's view of ``device``, once per device and process: arch, SMs, whether the Gluon
    kernels build (sm_90 only) and the merge can be a programmatic dependent launch."""
    arch = arch_name(device)
    if arch == "interpreter":
        return VerifyTarget(arch, 4)
    major = torch.cuda.get_device_capability(device)[0]
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return VerifyTarget(arch, sms, gluon=major == 9 and gluon_unusable() is None,
                        dependent_launch=major >= 9 and gdc_wait is not None)


def descriptor_ok(cache) -> bool:
    """Whether ``cache`` [B, S, Hkv, D] reads as one 2-D [B * S, Hkv * D] tensor with unit stride
    in its second dim and 16-byte aligned rows, which a tensor descriptor needs: heads adjacent,
    requests S rows apart. Other layouts keep per-element loads."""
    batch, rows, heads, head_dim = cache.shape
    row_stride = cache.stride(1)
    return (cache.stride(3) == 1 and cache.stride(2) == head_dim and row_stride >= heads * head_dim
            and (batch == 1 or cache.stride(0) == rows * row_stride)
            and (row_stride * cache.element_size()) % 16 == 0 and cache.data_ptr() % 16 == 0)


# the dtypes the kernels are planned and compiled for (the CPU compile check covers each)
KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def call_shape(q, k_cache, v_cache, sm_scale=None) -> VerifyShape:
    """The :class:`VerifyShape` of a call (checks its dtype and layout: unit stride in the head dim,
    one request's cache within 2**31 elements)."""
    batch, num_nodes, q_heads, head_dim = q.shape
    kv_heads = k_cache.shape[2]
    if q.dtype not in KERNEL_DTYPES:
        raise ValueError(f"q's dtype {q.dtype} has no Triton kernel; use one of "
                         f"{', '.join(str(d) for d in KERNEL_DTYPES)}, or impl='torch'")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name} needs unit stride in the head dim; pass {name}.contiguous()")
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"head dim {head_dim} has no Triton kernel; use one of "
                         f"{', '.join(map(str, HEAD_DIMS))}, or impl='torch'")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if (t.shape[1] - 1) * t.stride(1) + (kv_heads - 1) * t.stride(2) + head_dim > 2**31 - 1:
            raise ValueError(f"{name}: one request's cache spans more than 2**31 elements; "
                             "split the batch's storage per request")
    return VerifyShape(batch, num_nodes, q_heads, kv_heads, head_dim, k_cache.shape[1], q.element_size(),
                       descriptor_ok(k_cache) and descriptor_ok(v_cache), sm_scale is None or sm_scale > 0)


# Plans by call signature (shapes, strides, dtype, device, alignment of the caches, scale sign,
# policy): a repeated call finds its plan with one dictionary lookup, no dataclass built or hashed.
_PLANS: dict = {}
_MAX_PLANS = 4096


def plan_call(q, k_cache, v_cache, sm_scale=None, policy: VerifyPolicy = DEFAULT_POLICY) -> VerifyPlan:
    """The plan of this call (cached per call signature)."""
    key = (q.shape, q.stride(), q.dtype, q.device, k_cache.shape, k_cache.stride(), v_cache.shape, v_cache.stride(),
           (k_cache.data_ptr() | v_cache.data_ptr()) & 15, sm_scale is None or sm_scale > 0, policy)
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        plan = _PLANS[key] = plan_verify(call_shape(q, k_cache, v_cache, sm_scale), target_of(q.device), policy)
    return plan


@functools.cache
def _nvmma_layout(block_n: int, head_dim: int, dtype: torch.dtype):
    from triton.experimental.gluon import language as gl

    element = gl.bfloat16 if dtype == torch.bfloat16 else gl.float16
    return gl.NVMMASharedLayout.get_default_for([block_n, head_dim], element)


def kv_descriptor(cache, block_n: int, gluon: bool = False):
    """A tensor descriptor of a K or V cache [B, S, Hkv, D] seen as [B * S, Hkv * D], one
    [block_n, D] box a key tile: Triton's, or Gluon's, which also names the swizzled shared
    layout its MMA reads. The first of a layout is built (and validated) by its constructor; later
    ones copy its fields but the tensor (a cache of whole descriptors would keep freed KV caches
    alive)."""
    key = (cache.shape, cache.stride(), cache.dtype, block_n, gluon)
    template = _DESCRIPTORS.get(key)
    if template is not None:
        cls, fields = template
        desc = object.__new__(cls)
        desc.__dict__.update(fields)
        desc.base = cache
        return desc
    batch, rows, heads, head_dim = cache.shape
    view = dict(shape=[batch * rows, heads * head_dim], strides=[cache.stride(1), 1], block_shape=[block_n, head_dim])
    if gluon:
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

        desc = TensorDescriptor(cache, **view, layout=_nvmma_layout(block_n, head_dim, cache.dtype))
    else:
        from triton.tools.tensor_descriptor import TensorDescriptor

        desc = TensorDescriptor(cache, **view)
    if len(_DESCRIPTORS) >= _MAX_PLANS:
        _DESCRIPTORS.clear()
    _DESCRIPTORS[key] = (type(desc), dict(vars(desc), base=None))
    return desc


_DESCRIPTORS: dict = {}


@functools.cache
def _parameter_defaults(fn) -> dict:
    params = inspect.signature(getattr(fn, "fn", fn)).parameters
    return {name: p.default for name, p in params.items() if p.default is not p.empty}


def _launch(fn, grid, args: tuple, constexprs: dict, options: dict, views: dict | None = None):
    """``fn[grid](*args, **constexprs, **options)``; with ``views`` (position -> (shape, strides) of
    each tensor descriptor argument) also the compiled kernel as a
    :class:`~specdec_kernels.triton_launch.DirectLaunch` (None where it cannot be one)."""
    compiled = fn[grid](*args, **constexprs, **options)
    if views is None:
        return None
    from .triton_launch import DirectLaunch

    defaults = _parameter_defaults(fn)
    tail = tuple(constexprs[name] if name in constexprs else defaults[name] for name in fn.arg_names[len(args):])
    return DirectLaunch.build(compiled, grid, len(args), tail, views)


# Direct launches by call signature (shapes, strides and dtypes, q's device and the current one, the
# scale's sign, the policy, out's layout), for calls whose pointers are all 16-byte aligned:
# everything Triton specialises the kernels on. None: a kernel of that call that Triton must launch.
_DIRECT: dict = {}

# Split partials and the folded merge's item counts by (device, stream, thread), reused call after
# call: calls on one stream by one thread run in order, so one call's merge has read the partials
# before the next call's splits write, and each call leaves every count at 0 (its last programs
# reset them).
_WORKSPACES: dict = {}


class _Workspace:
    """Split partials (fp32) and the folded merge's item counts (int32, zeroed when new), with their
    addresses and sizes kept beside them for the hot path."""

    __slots__ = ("partials", "counts", "partials_ptr", "counts_ptr", "numel", "items")

    def __init__(self, device: int, numel: int, items: int):
        where = torch.device("cuda", device)
        self.partials = torch.empty(numel, device=where, dtype=torch.float32)
        self.counts = torch.zeros(items, device=where, dtype=torch.int32)
        self.partials_ptr, self.counts_ptr = self.partials.data_ptr(), self.counts.data_ptr()
        self.numel, self.items = numel, items


def _reused_workspace(device: int, stream: int, numel: int, items: int) -> _Workspace:
    """The workspace of this stream and thread, at least ``numel`` partials and ``items`` counts."""
    key = (device, stream, threading.get_ident())
    found = _WORKSPACES.get(key)
    if found is None or found.numel < numel or found.items < items:
        if len(_WORKSPACES) >= 64:
            _WORKSPACES.clear()  # the allocator frees them in stream order
        if found is not None:
            numel, items = max(numel, found.numel), max(items, found.items)
        found = _WORKSPACES[key] = _Workspace(device, numel, items)
    return found


@dataclasses.dataclass(frozen=True)
class _LaunchSpec:
    """What a plan launches, worked out once per (plan, dtype, device kind): the split kernel, its
    constexprs and options, the merge's, and the split kernel's constexprs with the merge folded in
    (None where the plan does not fold it)."""

    split_fn: object
    split_constexprs: dict
    split_options: dict
    merge_constexprs: dict | None
    merge_options: dict | None
    fused_constexprs: dict | None


@functools.lru_cache(maxsize=4096)
def _launch_spec(plan: VerifyPlan, head_dim: int, dtype: torch.dtype, on_gpu: bool) -> _LaunchSpec:
    common = dict(GROUP=plan.group, HEAD_DIM=head_dim, BLOCK_M=plan.block_m, BLOCK_N=plan.block_n,
                  SINGLE_SPLIT=plan.single_split)
    if plan.kernel == "triton":
        # Triton's CPU interpreter computes bf16 dots wrongly (errors of 1e10 on a 16x16 product
        # with 3.9): there the tiles are upcast to fp32 first
        upcast = not on_gpu and dtype == torch.bfloat16
        fn = _tree_verify_partial_kernel
        constexprs = dict(common, TAIL_M=plan.tail_m,
                          DOT_PRECISION="ieee" if dtype == torch.float32 or upcast else "tf32", UPCAST=upcast,
                          USE_TMA=plan.tma, LAUNCH_MERGE_EARLY=plan.merge is not None and plan.merge.starts_early,
                          KV_SHARE=plan.head_split)
        options = dict(num_warps=plan.num_warps, num_stages=plan.stages)
    elif plan.kernel == "pingpong":
        from .tree_verify_gluon_pingpong import _tree_verify_partial_kernel_gluon_pingpong as fn

        constexprs = dict(common, STAGES=plan.stages, num_warps=plan.num_warps, TAIL_M=plan.tail_m,
                          KV_SHARE=plan.head_split, PERSISTENT=plan.persistent, Q_IN_REGS=True)
        options = {}
    else:
        from .tree_verify_gluon import _tree_verify_partial_kernel_gluon as fn

        constexprs = dict(common, STAGES=plan.stages, num_warps=plan.num_warps,
                          Q_IN_REGS=plan.config.gluon_q_in_registers)
        options = {}
    if plan.own_tree_split:
        constexprs["TREE_SPLIT"] = 1
    merge = plan.merge
    if merge is None:
        return _LaunchSpec(fn, constexprs, options, None, None, None)
    fused = None
    if merge.fused:
        fused = dict(constexprs, **merge.folded_constexprs())
        if "LAUNCH_MERGE_EARLY" in fused:
            fused["LAUNCH_MERGE_EARLY"] = False
    return _LaunchSpec(fn, constexprs, options,
                       dict(GROUP=plan.group, HEAD_DIM=head_dim, SLICE_D=head_dim // merge.head_slices,
                            MERGE_ROWS=merge.merge_rows, SPLIT_BLOCK=merge.split_block,
                            WAIT_FOR_SPLITS=merge.starts_early, ONE_BLOCK=merge.one_block,
                            VECTOR_LOADS=merge.vector_loads),
                       dict(num_warps=4, **({"launch_pdl": True} if merge.starts_early else {})), fused)


def _aligned_pointers(q, k_cache, v_cache, cache_lens, ancestor_mask, out) -> tuple | None:
    """The addresses of q, K, V, cache_lens, ancestor_mask and out where a direct launch of their
    signature may take them, else None: the kernels assume 16-byte aligned pointers (Triton
    specialised them so), and a profiler's hook must see the launch."""
    ptrs = (q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), cache_lens.data_ptr(), ancestor_mask.data_ptr(),
            out.data_ptr())
    if (ptrs[0] | ptrs[1] | ptrs[2] | ptrs[3] | ptrs[4] | ptrs[5]) & 15 == 0 and not launch_hooks_set():
        return ptrs
    return None


def _direct_pointers(q, k_cache, v_cache, cache_lens, ancestor_mask, out) -> tuple | None:
    """:func:`_aligned_pointers` where the tensors are also what the call's key does not say: device
    tensors (a host address read as a device one ends the CUDA context), packed lens and masks
    (their strides are not passed). Each check stays on every call because its failure on a cached
    signature would be a wrong launch."""
    if (k_cache.is_cuda and v_cache.is_cuda and cache_lens.is_cuda and ancestor_mask.is_cuda and out.is_cuda
            and ancestor_mask.is_contiguous() and cache_lens.is_contiguous()):
        return _aligned_pointers(q, k_cache, v_cache, cache_lens, ancestor_mask, out)
    return None


def tree_verify_attention_triton(q, k_cache, v_cache, cache_lens, ancestor_mask, sm_scale=None, out=None,
                                 policy: VerifyPolicy = DEFAULT_POLICY):
    """Launcher: check, plan (cached per call signature), launch one or two kernels.

    ``out`` (optional, ``[B, T, Hq, D]`` in q's dtype) is written in place and returned; ``policy``
    is what the tests and the benchmark vary (:class:`~specdec_kernels.verify_plan.VerifyPolicy`).
    Inputs need unit stride in D; other strides are free. A repeated call on a GPU is launched
    through the compiled kernels' C launchers (:mod:`specdec_kernels.triton_launch`), Triton's
    dispatch skipped (the last signature recognised by one C guard on its tensors, any other by its
    key), its split partials reused per (stream, thread) outside graph captures; there a plan that
    allows it merges its splits in the split kernel (one launch instead of two).
    """
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
        out_layout = None  # q's shape and dtype, contiguous: q's entries of the key say it
        last = _LAST_DIRECT
        if (last is not None and last.policy is policy
                and last.guard.check(q, k_cache, v_cache, cache_lens, ancestor_mask)
                and (sm_scale is None or sm_scale > 0) is last.positive_scale
                and torch._C._cuda_getDevice() == last.device):
            # the last direct call's signature, the five tensors' dtypes, devices, shapes and strides
            # checked in one C call (so they are device tensors, lens and mask packed as then)
            ptrs = _aligned_pointers(q, k_cache, v_cache, cache_lens, ancestor_mask, out)
            if ptrs is not None and last(ptrs, sm_scale, last.device):
                return out
    else:
        out_layout = (out.dtype, out.stride())
    key = None
    if q.is_cuda:
        # the call's signature: what its plan and its compiled kernels depend on (cache_lens and
        # ancestor_mask are [B] and [B, T, W] by the API; their layout is checked below)
        key = (q.shape, q.stride(), q.dtype, q.get_device(), torch._C._cuda_getDevice(), k_cache.shape,
               k_cache.stride(), v_cache.shape, v_cache.stride(), cache_lens.dtype, sm_scale is None or sm_scale > 0,
               policy, out_layout)
        direct = _DIRECT.get(key)
        if direct is not None:
            ptrs = _direct_pointers(q, k_cache, v_cache, cache_lens, ancestor_mask, out)
            if ptrs is not None and direct(ptrs, sm_scale, key[4]):
                if out_layout is None:
                    _remember_last(direct, (q, k_cache, v_cache, cache_lens, ancestor_mask), policy, key[10], key[4])
                return out
            # else a kernel this call needs (the merge folded in, or not) is not compiled yet
    if q.shape[0] == 0 or q.shape[1] == 0:
        return out
    if not ancestor_mask.is_contiguous():
        ancestor_mask = ancestor_mask.contiguous()
    if not cache_lens.is_contiguous():
        cache_lens = cache_lens.contiguous()
    if key is not None and (_DIRECT.get(key, 0) is None or not (
            policy.launch_cache and eager_launch_through_dispatch() is None
            and _direct_pointers(q, k_cache, v_cache, cache_lens, ancestor_mask, out) is not None)):
        # launched through Triton, no direct launch kept: Triton must launch this signature, or
        # this call cannot be launched directly
        key = None
    plan = plan_call(q, k_cache, v_cache, sm_scale, policy)
    workspace = counts = None
    fused = False
    if plan.merge is not None:
        workspace = torch.empty(plan.workspace_bytes // 4, device=q.device, dtype=torch.float32)
        if policy.poison_workspace:
            workspace.fill_(float("nan"))
        # a graph keeps the merge's own launch: its replays may run beside eager calls, and the
        # counts would need a memset in the graph
        fused = plan.merge.fused and not (q.is_cuda and torch._C._cuda_isCurrentStreamCapturing())
        if fused:
            counts = torch.zeros(plan.base_programs, device=q.device, dtype=torch.int32)
    _launch_through_triton(plan, policy, q, k_cache, v_cache, cache_lens, ancestor_mask, out, workspace, counts,
                           fused, sm_scale, key)
    return out


# The direct call of the last signature launched directly with an output allocated here: a call of
# the same signature (every layer of a model's step) is found by its guard, no key built or hashed.
_LAST_DIRECT = None


def _remember_last(direct, tensors: tuple, policy, positive_scale: bool, device: int) -> None:
    """Make ``direct`` (launched on ``tensors``, which passed every check of :func:`_direct_pointers`,
    under ``policy``, a scale of that sign, on the current ``device``) the last direct call, its
    guard built from them the first time."""
    global _LAST_DIRECT
    if direct.guard is None:
        direct.guard = _tensor_guard(tensors) or False
        direct.policy, direct.positive_scale, direct.device = policy, positive_scale, device
    if direct.guard:
        _LAST_DIRECT = direct


def _tensor_guard(tensors: tuple):
    """One C check that tensors have the dtypes, devices, dispatch keys, shapes and strides of
    ``tensors`` (torch's own guard of compiled graphs), or None where this torch has none."""
    try:
        from torch._C._dynamo.guards import TensorGuards

        guard = TensorGuards(*tensors, dynamic_dims_sizes=None, dynamic_dims_strides=None)
        return guard if guard.check(*tensors) else None
    except (ImportError, TypeError, RuntimeError, SystemError):
        return None


def _split_ints(plan: VerifyPlan, q, k_cache, v_cache, out, ancestor_mask, sm_scale) -> tuple:
    """The split kernel's integer and float arguments, after its tensors: 14 strides, the softmax
    scale, the sizes (and the ping-pong kernel's programs a split)."""
    qs, ks, vs, os_, ms = q.stride(), k_cache.stride(), v_cache.stride(), out.stride(), ancestor_mask.stride()
    ints = (qs[0], qs[1], qs[2], ks[0], ks[1], ks[2], vs[0], vs[1], vs[2], ms[0], ms[1], os_[0], os_[1], os_[2],
            log2_softmax_scale(q.shape[3], sm_scale), q.shape[1], plan.kv_heads, plan.num_m_tiles, plan.num_splits,
            plan.chunk, k_cache.shape[1])
    return ints + (plan.base_programs,) if plan.kernel == "pingpong" else ints


def args_of_merge(plan: VerifyPlan, q, out) -> tuple:
    """The merge's integer arguments, after its tensors."""
    os_ = out.stride()
    return (os_[0], os_[1], os_[2], plan.group * q.shape[1], plan.kv_heads, plan.rows_pad, plan.num_splits,
            plan.merge.grid // (q.shape[0] * plan.kv_heads * plan.merge.head_slices))


def _descriptor_views(plan: VerifyPlan, k_cache, v_cache) -> dict:
    """Position -> (shape, strides) of the split kernel's K and V descriptor arguments (none where
    it reads the caches by pointers)."""
    if plan.kernel == "triton" and not plan.tma:
        return {}
    batch, rows, heads, head_dim = k_cache.shape
    return {3: ((batch * rows, heads * head_dim), (k_cache.stride(1), 1)),
            4: ((batch * rows, heads * head_dim), (v_cache.stride(1), 1))}


def _launch_through_triton(plan, policy, q, k_cache, v_cache, cache_lens, ancestor_mask, out, workspace, counts,
                           fused: bool, sm_scale, key) -> None:
    """Launch through Triton's dispatch (compiling on a first call): the split kernel with the merge
    folded in (``fused``) or followed by the merge; with ``key``, keep the compiled kernels as
    direct launches under it."""
    head_dim = q.shape[3]
    spec = _launch_spec(plan, head_dim, q.dtype, q.is_cuda)
    if workspace is None:
        part_o = part_lse = out  # not read
    else:
        split_at = plan.workspace_bytes // 4 // (head_dim + 1) * head_dim
        part_o, part_lse = workspace[:split_at], workspace[split_at:]
    if plan.kernel == "triton" and not plan.tma:
        descs = (k_cache, v_cache)
    else:
        gluon = plan.kernel != "triton"
        descs = (kv_descriptor(k_cache, plan.block_n, gluon), kv_descriptor(v_cache, plan.block_n, gluon))
    ints = _split_ints(plan, q, k_cache, v_cache, out, ancestor_mask, sm_scale)
    args = (q, k_cache, v_cache, *descs, cache_lens, ancestor_mask, out, part_o, part_lse,
            out if counts is None else counts, *ints)  # the counts are read only where the merge is folded in
    views = None if key is None else _descriptor_views(plan, k_cache, v_cache)
    direct = _DIRECT.get(key) if key is not None else None
    if direct is None and key is not None:
        if len(_DIRECT) >= _MAX_PLANS:
            _DIRECT.clear()
        direct = _DIRECT[key] = _DirectCall(plan, policy, head_dim, ints)
    if not fused or (direct is not None and not direct.split_known):
        # a call that keeps its kernels also compiles the merge's own launch where it folds the
        # merge in: a graph captured later then compiles nothing while capturing
        split = _launch(spec.split_fn, plan.grid, args, spec.split_constexprs, spec.split_options, views)
        merge = None
        if plan.merge is not None:
            merge = _launch(_tree_verify_merge_kernel, (plan.merge.grid,),
                            (part_o, part_lse, out, *args_of_merge(plan, q, out)),
                            spec.merge_constexprs, spec.merge_options, None if key is None else {})
        if direct is not None:
            direct.split, direct.merge, direct.split_known = split, merge, True
            direct.merge_ints = None if merge is None else args_of_merge(plan, q, out)
    if fused:
        launch = _launch(spec.split_fn, plan.fused_grid, args, spec.fused_constexprs, spec.split_options, views)
        if direct is not None:
            direct.fused, direct.fused_known = launch, True
    if direct is not None and direct.unlaunchable():
        _DIRECT[key] = None  # a kernel Triton must launch


class _DirectCall:
    """What a repeated call launches directly: the split kernel and the merge, or the split kernel
    with the merge folded in, each compiled by the first call that needed it; every argument they
    take after the tensors (all fixed by the call's signature; only the softmax scale may change)
    and the K / V descriptors' encodings (their tensor maps cached by base address); once it is
    the last direct call (:func:`_remember_last`), the guard of its signature."""

    __slots__ = ("split", "merge", "fused", "split_known", "fused_known", "has_merge", "can_fuse", "head_dim",
                 "workspace_numel", "workspace_split", "items", "poison", "ints", "merge_ints",
                 "k_desc", "v_desc", "split_after", "fused_after", "merge_after",
                 "guard", "policy", "positive_scale", "device")

    def __init__(self, plan, policy, head_dim: int, split_ints: tuple):
        self.split = self.merge = self.fused = None
        self.split_known = self.fused_known = False
        self.has_merge = plan.merge is not None
        self.can_fuse = self.has_merge and plan.merge.fused
        self.head_dim = head_dim
        self.workspace_numel = plan.workspace_bytes // 4
        # the byte offset of the log2-sum-exps in the workspace (after the partials)
        self.workspace_split = plan.workspace_bytes // 4 // (head_dim + 1) * head_dim * 4
        self.items = plan.base_programs
        self.poison = policy.poison_workspace
        # the integers after the tensors (14 strides, the scale, the sizes), with the default scale
        # (a call with its own scale replaces it)
        self.ints = (*split_ints[:14], log2_softmax_scale(head_dim), *split_ints[15:])
        self.merge_ints = None
        self.k_desc = self.v_desc = self.split_after = self.fused_after = self.merge_after = None
        self.guard = self.policy = self.positive_scale = self.device = None

    def unlaunchable(self) -> bool:
        """Whether a kernel compiled for this signature cannot be launched directly (then none is);
        sets what the launches share (descriptor encodings, arguments after the tensors) otherwise."""
        launches = []
        if self.split_known:
            if self.split is None or (self.has_merge and self.merge is None):
                return True
            launches.append(self.split)
            self.split_after = (*self.ints, *self.split.tail)
            if self.merge is not None:
                self.merge_after = (*self.merge_ints, *self.merge.tail)
        if self.fused_known:
            if self.fused is None:
                return True
            launches.append(self.fused)
            self.fused_after = (*self.ints, *self.fused.tail)
        first = launches[0]
        self.k_desc, self.v_desc = first.descriptors.get(3), first.descriptors.get(4)
        return False

    def __call__(self, ptrs: tuple, sm_scale, device: int) -> bool:
        """Launch on the current stream of ``device``: ``ptrs`` the addresses of q, K, V,
        cache_lens, ancestor_mask and out. False (nothing launched) where the kernel this call
        needs is not compiled yet."""
        q_ptr, k_ptr, v_ptr, lens_ptr, mask_ptr, out_ptr = ptrs
        stream = torch._C._cuda_getCurrentRawStream(device)
        counts = out_ptr  # not read
        if not self.has_merge:
            split, after = self.split, self.split_after
            part_o = part_lse = out_ptr  # not read
        else:
            if torch._C._cuda_isCurrentStreamCapturing():
                split, after = self.split, self.split_after
                if split is None:
                    return False
                # a fresh buffer: a replay may run beside eager calls
                workspace = torch.empty(self.workspace_numel, device=torch.device("cuda", device), dtype=torch.float32)
                part_o = workspace.data_ptr()
            else:
                split, after = (self.fused, self.fused_after) if self.can_fuse else (self.split, self.split_after)
                if split is None:
                    return False
                found = _reused_workspace(device, stream, self.workspace_numel, self.items)
                workspace, part_o = found.partials, found.partials_ptr
                if self.can_fuse:
                    counts = found.counts_ptr
            if self.poison:
                workspace.fill_(float("nan"))
            part_lse = part_o + self.workspace_split
        if sm_scale is not None:
            after = (*after[:14], log2_softmax_scale(self.head_dim, sm_scale), *after[15:])
        k_desc = self.k_desc
        if k_desc is None:  # the kernel reads the caches by pointers
            args = (q_ptr, k_ptr, v_ptr, k_ptr, v_ptr, lens_ptr, mask_ptr, out_ptr, part_o, part_lse, counts, *after)
        else:
            v_desc = self.v_desc
            # tensor_map's own first step inline: a lookup of an address already encoded
            k_map, v_map = k_desc[0].maps.get(k_ptr), v_desc[0].maps.get(v_ptr)
            if k_map is None:
                k_map = tensor_map(k_ptr, k_desc[0])
            if v_map is None:
                v_map = tensor_map(v_ptr, v_desc[0])
            args = (q_ptr, k_ptr, v_ptr, k_map, *k_desc[1], v_map, *v_desc[1], lens_ptr, mask_ptr, out_ptr, part_o,
                    part_lse, counts, *after)
        if split.packed:
            split.launch(stream, *split.head, args)
        else:
            split.launch(stream, *split.head, *args)
        if split is not self.fused and self.merge is not None:
            merge = self.merge
            if merge.packed:
                merge.launch(stream, *merge.head, (part_o, part_lse, out_ptr, *self.merge_after))
            else:
                merge.launch(stream, *merge.head, part_o, part_lse, out_ptr, *self.merge_after)
        return True
