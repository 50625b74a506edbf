"""Hopper (sm_90) split kernel of :func:`specdec_kernels.tree_verify_attention` in Gluon.

Why a second kernel: Triton waits for every q.k MMA right after issuing it (PTX:
``wgmma.wait_group 0`` before the softmax, whatever the source order), so on
the 128-row tile the tensor cores idle while the warps take the exponentials, and the tile runs
at about half the matmul rate. Gluon exposes the asynchronous warpgroup MMA and its wait, so this
kernel issues the next key tile's q.k before this tile's softmax and lets the P.V MMA run while
the next softmax starts (the intra-warpgroup overlap of FlashAttention 3):

    iteration j:  issue S(j+1) = q.K(j+1)        (tensor cores)
                  softmax of S(j) -> P(j)          (warps, overlapping S(j+1) and P.V(j-1))
                  wait for P.V(j-1); rescale acc
                  issue acc += P(j).V(j)
                  wait for S(j+1)

Same work decomposition, partial layout and merge as the Triton kernel
(``tree_verify_triton``): packed rows = (node, query head of one KV head), key axis split in
chunks, mask-free prefix tiles through TMA into a ring of ``STAGES`` shared-memory slots (at
least 3), the partial last prefix tile and the ancestor-masked tree tiles through masked pointer
loads into the ring's first slot. The planner sends it 16-bit calls of the entries that set
``VerifyConfig.gluon`` on 64-row tiles with at least 16 rows a warp (``verify_plan.plan_verify``).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_init,
    warpgroup_mma_wait,
)

# Names that Gluon changed between Triton releases (the GPU image has 3.6, PyPI newer ones):
# a CTA-wide barrier (``thread_barrier`` up to 3.6, ``barrier`` since) and the TMA load into
# shared memory (``async_copy_global_to_shared`` up to 3.6, ``async_load`` since).
_cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared


@gluon.jit
def _load_tile_pair(k_desc, v_desc, row, col, bar, k_dst, v_dst, ok, tile_bytes: gl.constexpr):
    """TMA loads of one key tile of K and of V into a ring slot, both signalling ``bar``
    (skipped where ``ok`` is false)."""
    mbarrier.expect(bar, tile_bytes, pred=ok)
    _tma_load(k_desc, [row, col], bar, k_dst, pred=ok)
    _tma_load(v_desc, [row, col], bar, v_dst, pred=ok)


@gluon.jit
def _load_q_rows(q_ptr, b, kv_head, row0, num_rows, stride_qb, stride_qt, stride_qh, GROUP: gl.constexpr,
                 HEAD_DIM: gl.constexpr, ROWS: gl.constexpr, ld_layout: gl.constexpr):
    """Packed query rows row0 .. row0 + ROWS of one (request, KV head): row r is node r // GROUP,
    query head kv_head * GROUP + r % GROUP; rows past the tree load as zeros."""
    rows_ld = row0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, ld_layout))
    dims_ld = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, ld_layout))
    q_rows = (b.to(gl.int64) * stride_qb + (rows_ld // GROUP) * stride_qt
              + (kv_head * GROUP + rows_ld % GROUP) * stride_qh)
    return gl.load(q_ptr + gl.expand_dims(q_rows, 1) + gl.expand_dims(dims_ld, 0),
                   mask=gl.expand_dims(rows_ld < num_rows, 1), other=0.0)


@gluon.jit
def _let_merge_launch():
    """Let the merge kernel, launched as a programmatic dependent of this grid, start once every
    program of this grid has started: its programs take the SMs this grid's last wave leaves
    idle and wait there (``griddepcontrol.wait``) for this grid's results, instead of being
    launched after it ends. A no-op for any other next launch."""
    gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=gl.int32, is_pure=False,
                              pack=1)


@gluon.jit
def _program_coords(lens_ptr, num_m_tiles, num_kv_heads, LET_MERGE_START: gl.constexpr):
    """(split, query tile, request x KV head, KV head, request, its prefix length) of this
    program: grid axis 0 runs over query tiles within (request, KV head), axis 1 over splits.
    With LET_MERGE_START, the merge may launch from here on."""
    if LET_MERGE_START:
        _let_merge_launch()
    m_tile, head_b, kv_head, b = _tile_coords(gl.program_id(0), num_m_tiles, num_kv_heads)
    prefix_len = gl.load(lens_ptr + b).to(gl.int32)
    return gl.program_id(1), m_tile, head_b, kv_head, b, prefix_len


@gluon.jit
def _tile_coords(pid, num_m_tiles, num_kv_heads):
    """(query tile, request x KV head, KV head, request) of program (or work item) ``pid`` of a
    split: query tiles run fastest, then KV heads, then requests."""
    head_b = pid // num_m_tiles
    return pid % num_m_tiles, head_b, head_b % num_kv_heads, head_b // num_kv_heads


@gluon.jit
def _split_keys(split, chunk, prefix_len, BLOCK_N: gl.constexpr):
    """(lo, hi, whole key tiles, end of the whole tiles) of this split's prefix keys."""
    lo = split * chunk
    hi = gl.minimum(lo + chunk, prefix_len)
    n_full = gl.maximum(hi - lo, 0) // BLOCK_N
    return lo, hi, n_full, lo + n_full * BLOCK_N


@gluon.jit
def _softmax_step(s, m_i, l_i, qk_scale, s_layout: gl.constexpr, o_layout: gl.constexpr):
    """exp2 scores of one tile against the new running max, and the accumulator's rescale."""
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    # rows that have seen no visible key yet keep m = -inf; shift by 0 to avoid inf - inf
    m_shift = gl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = gl.exp2(m_i - m_shift)
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_shift, 1))
    l_i = l_i * alpha + gl.sum(p, 1)
    alpha_o = gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))
    return p, alpha_o, m_new, l_i


@gluon.jit
def _masked_tile(acc, m_i, l_i, q_op, kx_smem, vx_smem, k_rows_ptr, v_rows_ptr, key_ok, visible, qk_scale,
                 s_layout: gl.constexpr, o_layout: gl.constexpr, p_layout: gl.constexpr,
                 BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """One key tile with a mask (the partial last prefix tile, a tree tile), synchronously:
    rows past the request's keys load as zeros (its V rows may hold anything, even NaN)."""
    k = gl.load(k_rows_ptr, mask=key_ok, other=0.0)
    v = gl.load(v_rows_ptr, mask=key_ok, other=0.0)
    _cta_barrier()  # every warpgroup is done with the previous masked tile's buffers
    kx_smem.store(k)
    vx_smem.store(v)
    fence_async_shared()
    _cta_barrier()
    return _masked_tile_mma(acc, m_i, l_i, q_op, kx_smem, vx_smem, visible, qk_scale, s_layout, o_layout, p_layout,
                            BLOCK_M, BLOCK_N)


@gluon.jit
def _masked_tile_mma(acc, m_i, l_i, q_op, kx_smem, vx_smem, visible, qk_scale, s_layout: gl.constexpr,
                     o_layout: gl.constexpr, p_layout: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """One masked key tile already in shared memory, synchronously: S, the mask, the softmax, P.V."""
    s = warpgroup_mma(q_op, kx_smem.permute((1, 0)), gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout),
                      use_acc=False)
    s = gl.where(visible, s, float("-inf"))
    p, alpha_o, m_i, l_i = _softmax_step(s, m_i, l_i, qk_scale, s_layout, o_layout)
    acc = acc * gl.expand_dims(alpha_o, 1)
    acc = warpgroup_mma(gl.convert_layout(p.to(kx_smem.dtype), p_layout), vx_smem, acc)
    return acc, m_i, l_i


@gluon.jit
def _zero_rows_from(x_smem, n_valid, PARTS: gl.constexpr, ld_layout: gl.constexpr):
    """Rows n_valid .. of a TMA-loaded V tile to zeros: they lie past the request's keys (the
    next split's, another request's, or unused cache rows that may hold anything, even NaN), and a
    zero weight times NaN would reach the sum. PARTS pieces at a time (a small register budget
    takes several); then a barrier, before an MMA reads the tile."""
    PART: gl.constexpr = x_smem.shape[0] // PARTS
    for part in gl.static_range(PARTS):
        rows = part * PART + gl.arange(0, PART, layout=gl.SliceLayout(1, ld_layout))
        piece = x_smem.slice(part * PART, PART)
        x = piece.load(ld_layout)
        piece.store(gl.where(gl.expand_dims(rows < n_valid, 1), x, gl.zeros_like(x)))
    fence_async_shared()
    _cta_barrier()


@gluon.jit
def _ancestor_word(mask_rows, row_ok, k, num_nodes):
    """Word k of each row's ancestor bitmask, its bits past the tree cleared (zeros past it)."""
    n_in = num_nodes - k * 32  # the word's nodes inside the tree
    keep = gl.where(n_in >= 32, -1, (1 << gl.minimum(gl.maximum(n_in, 0), 31)) - 1)
    return gl.load(mask_rows + k, mask=row_ok & (n_in > 0), other=0) & keep


@gluon.jit
def _tree_visibility(mask_rows, row_ok, start, num_nodes, keys, ROW_AXIS: gl.constexpr, BLOCK_N: gl.constexpr):
    """Which keys of the tree tile from node ``start`` each row sees (its ancestor bitmask), as a
    [rows, keys] (ROW_AXIS 0) or [keys, rows] (ROW_AXIS 1) mask. ``mask_rows``: each row's first
    word (a vector along the rows), ``keys``: 0 .. BLOCK_N - 1 along the keys.

    Each row's words of the tile are loaded once (one a 32 keys, bits past the tree cleared on the
    row vector), then an element costs a select, a shift and a bit test, instead of a gather of
    one word an element (32 loads a thread on a 64 x 64 tile)."""
    WORDS: gl.constexpr = (BLOCK_N + 31) // 32
    first = start // 32
    node = (start % 32) + keys  # from bit 0 of word ``first``
    word = gl.expand_dims(_ancestor_word(mask_rows, row_ok, first, num_nodes), 1 - ROW_AXIS)
    for w in gl.static_range(1, WORDS):
        bits = gl.expand_dims(_ancestor_word(mask_rows, row_ok, first + w, num_nodes), 1 - ROW_AXIS)
        word = gl.where(gl.expand_dims(node // 32, ROW_AXIS) == w, bits, word)
    return ((word >> gl.expand_dims(node % 32, ROW_AXIS)) & 1) != 0


@gluon.jit
def _masked_key_tiles(acc, m_i, l_i, q_op, kx_smem, vx_smem, k_ptr, v_ptr, mask_ptr, b, kv_head, split, prefix_len,
                      num_nodes, tree_split, full_end, hi, row0, num_rows, qk_scale, stride_kb, stride_ks, stride_kh,
                      stride_vb, stride_vs, stride_vh, stride_mb, stride_mt, s_layout: gl.constexpr,
                      o_layout: gl.constexpr, p_layout: gl.constexpr, ld_layout: gl.constexpr, GROUP: gl.constexpr,
                      HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """The key tiles with a mask, through the free ring slot kx_smem / vx_smem: the split's
    partial last prefix tile (full_end .. hi), then, in the split ``tree_split``, the
    ancestor-masked tree rows."""
    cols_ld = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, ld_layout))
    dims_ld = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, ld_layout))
    k_base = k_ptr + b.to(gl.int64) * stride_kb + kv_head * stride_kh
    v_base = v_ptr + b.to(gl.int64) * stride_vb + kv_head * stride_vh
    k_tile_ptrs = k_base + gl.expand_dims(cols_ld * stride_ks, 1) + gl.expand_dims(dims_ld, 0)
    v_tile_ptrs = v_base + gl.expand_dims(cols_ld * stride_vs, 1) + gl.expand_dims(dims_ld, 0)
    rows_s = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    cols_s = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    if full_end < hi:
        key_ok = gl.expand_dims(full_end + cols_ld < hi, 1)
        visible = gl.expand_dims(full_end + cols_s < hi, 0)
        acc, m_i, l_i = _masked_tile(acc, m_i, l_i, q_op, kx_smem, vx_smem, k_tile_ptrs + full_end * stride_ks,
                                     v_tile_ptrs + full_end * stride_vs, key_ok, visible, qk_scale,
                                     s_layout, o_layout, p_layout, BLOCK_M, BLOCK_N)
    if split == tree_split:
        mask_rows = mask_ptr + b.to(gl.int64) * stride_mb + (rows_s // GROUP) * stride_mt
        row_ok = rows_s < num_rows
        for start in range(0, num_nodes, BLOCK_N):
            key_ok = gl.expand_dims(start + cols_ld < num_nodes, 1)
            visible = _tree_visibility(mask_rows, row_ok, start, num_nodes, cols_s, 0, BLOCK_N)
            acc, m_i, l_i = _masked_tile(acc, m_i, l_i, q_op, kx_smem, vx_smem,
                                         k_tile_ptrs + (prefix_len + start) * stride_ks,
                                         v_tile_ptrs + (prefix_len + start) * stride_vs, key_ok, visible, qk_scale,
                                         s_layout, o_layout, p_layout, BLOCK_M, BLOCK_N)
    return acc, m_i, l_i


@gluon.jit
def _over_row_sums(acc, l_i, ROW_AXIS: gl.constexpr):
    """acc's rows (along ROW_AXIS) over their sums l_i, a reciprocal a row and a multiply an
    element (a divide an element is several instructions); a row that saw no key stays 0."""
    return acc * gl.expand_dims(1.0 / gl.where(l_i == 0.0, 1.0, l_i), 1 - ROW_AXIS)


@gluon.jit
def _store_rows(acc, m_i, l_i, b, kv_head, head_b, split, row0, num_rows, rows_pad, num_splits, out_ptr, part_o_ptr,
                part_lse_ptr, stride_ob, stride_ot, stride_oh, o_layout: gl.constexpr, ROW_AXIS: gl.constexpr,
                GROUP: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, SINGLE_SPLIT: gl.constexpr):
    """Normalised output (one split) or fp32 partial + log2-sum-exp of rows row0 .. row0 + BLOCK_M,
    valid rows only. The rows lie along ``ROW_AXIS`` of ``acc``: 0 for [rows, D], 1 for the
    ping-pong kernel's key-major tail ([D, rows])."""
    D_AXIS: gl.constexpr = 1 - ROW_AXIS
    rows_o = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(D_AXIS, o_layout))
    dims_o = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(ROW_AXIS, o_layout))
    row_valid = rows_o < num_rows
    l_o = gl.convert_layout(l_i, gl.SliceLayout(D_AXIS, o_layout))
    out = _over_row_sums(acc, l_o, ROW_AXIS)
    if SINGLE_SPLIT:
        out_rows = (b.to(gl.int64) * stride_ob + (rows_o // GROUP) * stride_ot
                    + (kv_head * GROUP + rows_o % GROUP) * stride_oh)
        gl.store(out_ptr + gl.expand_dims(out_rows, D_AXIS) + gl.expand_dims(dims_o, ROW_AXIS),
                 out.to(out_ptr.dtype.element_ty), mask=gl.expand_dims(row_valid, D_AXIS))
    else:
        # partials: [B * Hkv, num_splits, rows_pad, D] and [B * Hkv, num_splits, rows_pad]
        part_row = (head_b.to(gl.int64) * num_splits + split) * rows_pad + rows_o
        gl.store(part_o_ptr + gl.expand_dims(part_row * HEAD_DIM, D_AXIS) + gl.expand_dims(dims_o, ROW_AXIS), out,
                 mask=gl.expand_dims(row_valid, D_AXIS))
        m_o = gl.convert_layout(m_i, gl.SliceLayout(D_AXIS, o_layout))
        lse = gl.where(l_o == 0.0, float("-inf"), m_o + gl.log2(gl.where(l_o == 0.0, 1.0, l_o)))
        gl.store(part_lse_ptr + part_row, lse, mask=row_valid)


@gluon.jit
def _merge_if_last(count_ptr, part_o_ptr, part_lse_ptr, out_ptr, b, head_b, kv_head, row_lo, row_hi, rows_pad,
                   num_splits, stride_ob, stride_ot, stride_oh, GROUP: gl.constexpr, HEAD_DIM: gl.constexpr,
                   MERGE_ROWS: gl.constexpr, SPLIT_BLOCK: gl.constexpr, num_warps: gl.constexpr):
    """The merge folded into the split kernel (the Triton kernel's ``_merge_if_last``, in Gluon):
    the last of a query tile's num_splits programs to count itself at ``count_ptr`` merges the
    tile's packed rows [row_lo, row_hi) from every split's partials (read from L2: other programs
    wrote them) and sets the count back to 0 for the next launch. Called after every partition
    stored its rows."""
    count = gl.atomic_add(count_ptr, 1, sem="acq_rel", scope="gpu")
    if count == num_splits - 1:
        gl.store(count_ptr, 0)
        _merge_tile_rows(part_o_ptr, part_lse_ptr, out_ptr, b, head_b, kv_head, row_lo, row_hi, MERGE_ROWS, rows_pad,
                         num_splits, stride_ob, stride_ot, stride_oh, GROUP, HEAD_DIM, MERGE_ROWS, SPLIT_BLOCK,
                         num_warps)


@gluon.jit
def _merge_when_counted(count_ptr, part_o_ptr, part_lse_ptr, out_ptr, b, head_b, kv_head, row_lo, row_hi, rows_pad,
                        num_splits, waiter, stride_ob, stride_ot, stride_oh, GROUP: gl.constexpr,
                        HEAD_DIM: gl.constexpr, MERGE_ROWS: gl.constexpr, SPLIT_BLOCK: gl.constexpr,
                        WAITERS: gl.constexpr, SLICES: gl.constexpr, num_warps: gl.constexpr,
                        VECTOR: gl.constexpr = False):
    """The merge folded into the split kernel as WAITERS programs a query tile past the splits'
    (``VerifyPlan.fused_grid``): waiter ``waiter`` spins until all num_splits splits have counted
    themselves at ``count_ptr``, merges every WAITERS-th unit of the tile's rows [row_lo, row_hi)
    from L2 (a MERGE_ROWS-row block's columns of one of SLICES head-dim slices), and counts itself
    too; the tile's last waiter sets the count back to 0 for the next launch (every waiter has
    passed its spin by then)."""
    # acquire: the splits' partials, stored before their release, are visible past the spin
    seen = gl.atomic_add(count_ptr, 0, sem="acquire", scope="gpu")
    while seen < num_splits:
        seen = gl.atomic_add(count_ptr, 0, sem="acquire", scope="gpu")
    if SLICES == 1:
        _merge_tile_rows(part_o_ptr, part_lse_ptr, out_ptr, b, head_b, kv_head, row_lo + waiter * MERGE_ROWS, row_hi,
                         WAITERS * MERGE_ROWS, rows_pad, num_splits, stride_ob, stride_ot, stride_oh, GROUP, HEAD_DIM,
                         MERGE_ROWS, SPLIT_BLOCK, num_warps, 0, 0, VECTOR)
    else:
        COLS: gl.constexpr = HEAD_DIM // SLICES
        units = (row_hi - row_lo + MERGE_ROWS - 1) // MERGE_ROWS * SLICES
        for unit in range(waiter, units, WAITERS):
            r0 = row_lo + unit // SLICES * MERGE_ROWS
            # one block: its rows past row_hi masked as the tile's last block's are
            _merge_tile_rows(part_o_ptr, part_lse_ptr, out_ptr, b, head_b, kv_head, r0,
                             gl.minimum(row_hi, r0 + MERGE_ROWS), MERGE_ROWS, rows_pad, num_splits, stride_ob,
                             stride_ot, stride_oh, GROUP, HEAD_DIM, MERGE_ROWS, SPLIT_BLOCK, num_warps,
                             unit % SLICES * COLS, COLS, VECTOR)
    done = gl.atomic_add(count_ptr, 1, sem="relaxed", scope="gpu")
    if done == num_splits + WAITERS - 1:
        gl.store(count_ptr, 0)


@gluon.jit
def _merge_tile_rows(part_o_ptr, part_lse_ptr, out_ptr, b, head_b, kv_head, row_start, row_hi, row_step, rows_pad,
                     num_splits, stride_ob, stride_ot, stride_oh, GROUP: gl.constexpr, HEAD_DIM: gl.constexpr,
                     MERGE_ROWS: gl.constexpr, SPLIT_BLOCK: gl.constexpr, num_warps: gl.constexpr, col0=0,
                     COLS: gl.constexpr = 0, VECTOR: gl.constexpr = False):
    """Merge the MERGE_ROWS-row blocks starting at row_start, row_step apart, below row_hi, from
    every split's partials (read from L2: other programs wrote them): every column, or with COLS
    the COLS columns from col0. With VECTOR a block's splits are one load, else unrolled (waiters
    unrolling 32 far-apart splits or more were slower than the merge's own launch)."""
    WIDTH: gl.constexpr = HEAD_DIM if COLS == 0 else COLS
    lse_base = part_lse_ptr + head_b.to(gl.int64) * num_splits * rows_pad
    o_base = part_o_ptr + head_b.to(gl.int64) * num_splits * rows_pad * HEAD_DIM
    if VECTOR:
        _merge_tile_rows_vector(lse_base, o_base, out_ptr, b, kv_head, row_start, row_hi, row_step, rows_pad,
                                num_splits, stride_ob, stride_ot, stride_oh, GROUP, HEAD_DIM, MERGE_ROWS, SPLIT_BLOCK,
                                num_warps, col0, WIDTH)
    else:
        _merge_tile_rows_unrolled(lse_base, o_base, out_ptr, b, kv_head, row_start, row_hi, row_step, rows_pad,
                                  num_splits, stride_ob, stride_ot, stride_oh, GROUP, HEAD_DIM, MERGE_ROWS,
                                  SPLIT_BLOCK, num_warps, col0, WIDTH)


@gluon.jit
def _store_merged_rows(out_ptr, out, b, kv_head, rows, row_valid, dims, stride_ob, stride_ot, stride_oh,
                       GROUP: gl.constexpr):
    """Store merged packed rows (row r: node r // GROUP, query head kv_head * GROUP + r % GROUP)."""
    out_rows = b.to(gl.int64) * stride_ob + (rows // GROUP) * stride_ot + (kv_head * GROUP + rows % GROUP) * stride_oh
    gl.store(out_ptr + gl.expand_dims(out_rows, 1) + gl.expand_dims(dims, 0), out.to(out_ptr.dtype.element_ty),
             mask=gl.expand_dims(row_valid, 1))


@gluon.jit
def _merge_tile_rows_unrolled(lse_base, o_base, out_ptr, b, kv_head, row_start, row_hi, row_step, rows_pad,
                              num_splits, stride_ob, stride_ot, stride_oh, GROUP: gl.constexpr,
                              HEAD_DIM: gl.constexpr, MERGE_ROWS: gl.constexpr, SPLIT_BLOCK: gl.constexpr,
                              num_warps: gl.constexpr, col0, WIDTH: gl.constexpr):
    """:func:`_merge_tile_rows` with a block's splits unrolled, summed in each thread's registers."""
    layout: gl.constexpr = gl.BlockedLayout([1, WIDTH // 32], [1, 32], [num_warps, 1], [1, 0])
    row_layout: gl.constexpr = gl.SliceLayout(1, layout)
    dims = col0 + gl.arange(0, WIDTH, layout=gl.SliceLayout(0, layout))
    for r0 in range(row_start, row_hi, row_step):
        rows = r0 + gl.arange(0, MERGE_ROWS, layout=row_layout)
        row_valid = rows < row_hi
        # both passes straight-line over all splits: one round trip to L2
        m_i = gl.full([MERGE_ROWS], float("-inf"), gl.float32, row_layout)
        for j in gl.static_range(SPLIT_BLOCK):
            ok = row_valid & (j < num_splits)
            m_i = gl.maximum(m_i, gl.load(lse_base + j * rows_pad + rows, mask=ok, other=float("-inf"),
                                          cache_modifier=".cg"))
        m_shift = gl.where(m_i == float("-inf"), 0.0, m_i)
        acc = gl.zeros([MERGE_ROWS, WIDTH], gl.float32, layout)
        l_i = gl.zeros([MERGE_ROWS], gl.float32, row_layout)
        for j in gl.static_range(SPLIT_BLOCK):
            ok = row_valid & (j < num_splits)
            part_row = j * rows_pad + rows
            lse = gl.load(lse_base + part_row, mask=ok, other=float("-inf"), cache_modifier=".cg")
            part = gl.load(o_base + gl.expand_dims(part_row * HEAD_DIM, 1) + gl.expand_dims(dims, 0),
                           mask=gl.expand_dims(ok, 1), other=0.0, cache_modifier=".cg")
            # an empty split holds lse = -inf (weight 0): select, whatever its partial holds
            live = lse > float("-inf")
            weight = gl.where(live, gl.exp2(lse - m_shift), 0.0)
            acc += gl.where(gl.expand_dims(live, 1), part * gl.expand_dims(weight, 1), 0.0)
            l_i += weight
        out = _over_row_sums(acc, l_i, 0)
        _store_merged_rows(out_ptr, out, b, kv_head, rows, row_valid, dims, stride_ob, stride_ot, stride_oh, GROUP)


@gluon.jit
def _merge_tile_rows_vector(lse_base, o_base, out_ptr, b, kv_head, row_start, row_hi, row_step, rows_pad,
                            num_splits, stride_ob, stride_ot, stride_oh, GROUP: gl.constexpr,
                            HEAD_DIM: gl.constexpr, MERGE_ROWS: gl.constexpr, SPLIT_BLOCK: gl.constexpr,
                            num_warps: gl.constexpr, col0, WIDTH: gl.constexpr):
    """:func:`_merge_tile_rows` with all SPLIT_BLOCK splits of a row block in one load each of
    log2-sum-exps and partials (the Triton merge's ``VECTOR_LOADS``), summed across threads."""
    LANES_D: gl.constexpr = WIDTH // 4 if WIDTH < 128 else 32
    layout: gl.constexpr = gl.BlockedLayout([1, 1, 4], [32 // LANES_D, 1, LANES_D], [num_warps, 1, 1], [2, 1, 0])
    sr_layout: gl.constexpr = gl.SliceLayout(2, layout)
    rw_layout: gl.constexpr = gl.SliceLayout(0, layout)
    splits = gl.arange(0, SPLIT_BLOCK, layout=gl.SliceLayout(1, sr_layout))
    dims = col0 + gl.arange(0, WIDTH, layout=gl.SliceLayout(0, rw_layout))
    for r0 in range(row_start, row_hi, row_step):
        rows = r0 + gl.arange(0, MERGE_ROWS, layout=gl.SliceLayout(0, sr_layout))
        ok = gl.expand_dims(splits < num_splits, 1) & gl.expand_dims(rows < row_hi, 0)
        part_row = gl.expand_dims(splits * rows_pad, 1) + gl.expand_dims(rows, 0)
        lse = gl.load(lse_base + part_row, mask=ok, other=float("-inf"), cache_modifier=".cg")
        part = gl.load(o_base + gl.expand_dims(part_row * HEAD_DIM, 2) + gl.expand_dims(gl.expand_dims(dims, 0), 0),
                       mask=gl.expand_dims(ok, 2), other=0.0, cache_modifier=".cg")
        m_i = gl.max(lse, 0)
        # rows no split saw a key for keep m = -inf: shift by 0 (their weights are all 0)
        m_shift = gl.where(m_i == float("-inf"), 0.0, m_i)
        live = lse > float("-inf")
        weight = gl.where(live, gl.exp2(lse - gl.expand_dims(m_shift, 0)), 0.0)
        acc = gl.sum(gl.where(gl.expand_dims(live, 2), part * gl.expand_dims(weight, 2), 0.0), 0)
        l_i = gl.convert_layout(gl.sum(weight, 0), gl.SliceLayout(1, rw_layout))
        out = _over_row_sums(acc, l_i, 0)
        rows_o = r0 + gl.arange(0, MERGE_ROWS, layout=gl.SliceLayout(1, rw_layout))
        _store_merged_rows(out_ptr, out, b, kv_head, rows_o, rows_o < row_hi, dims, stride_ob, stride_ot, stride_oh,
                           GROUP)


@gluon.jit
def _tree_verify_partial_kernel_gluon(
    q_ptr, k_ptr, v_ptr, k_desc, v_desc, lens_ptr, mask_ptr, out_ptr, part_o_ptr, part_lse_ptr, counts_ptr,
    stride_qb, stride_qt, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_mb, stride_mt,
    stride_ob, stride_ot, stride_oh,
    qk_scale, num_nodes, num_kv_heads, num_m_tiles, num_splits, chunk, cache_rows,
    GROUP: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr, SINGLE_SPLIT: gl.constexpr, Q_IN_REGS: gl.constexpr, num_warps: gl.constexpr,
    FUSED_MERGE: gl.constexpr = False, MERGE_ROWS: gl.constexpr = 2, SPLIT_BLOCK: gl.constexpr = 2,
    TREE_SPLIT: gl.constexpr = 0,
):
    # tile t + STAGES - 1 is loaded while tile t's softmax runs, into the slot tile t - 1 used:
    # with fewer than 3 slots the next tile would be waited for before it is asked for
    gl.static_assert(STAGES >= 3)
    dtype: gl.constexpr = k_desc.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    ld_layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 8], threads_per_warp=[4, 8],
                                               warps_per_cta=[num_warps, 1], order=[1, 0])
    q_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, HEAD_DIM], dtype)
    kv_sl: gl.constexpr = k_desc.layout

    split, m_tile, head_b, kv_head, b, prefix_len = _program_coords(lens_ptr, num_m_tiles, num_kv_heads,
                                                                    not SINGLE_SPLIT and not FUSED_MERGE)
    num_rows = num_nodes * GROUP
    rows_pad = num_m_tiles * BLOCK_M

    # the packed query rows into shared memory (the q.k MMA reads its A operand there)
    q = _load_q_rows(q_ptr, b, kv_head, m_tile * BLOCK_M, num_rows, stride_qb, stride_qt, stride_qh, GROUP, HEAD_DIM,
                     BLOCK_M, ld_layout)
    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], q_sl, q)
    if Q_IN_REGS:
        # the q.k MMA's A operand from registers: shared memory then carries only the key tile
        q_op = q_smem.load(gl.DotOperandLayout(operand_index=0, parent=s_layout, k_width=2))
    else:
        q_op = q_smem
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], kv_sl)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], kv_sl)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=1)
    fence_async_shared()
    _cta_barrier()

    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, s_layout))
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)

    lo, hi, n_full, full_end = _split_keys(split, chunk, prefix_len, BLOCK_N)
    desc_row = b * cache_rows + lo
    desc_col = kv_head * HEAD_DIM
    tile_bytes: gl.constexpr = 2 * BLOCK_N * HEAD_DIM * dtype.primitive_bitwidth // 8
    # mask-free prefix tiles: tile t lands in slot t % STAGES, signalled by bars[t % STAGES]
    for t in gl.static_range(STAGES - 1):
        _load_tile_pair(k_desc, v_desc, desc_row + t * BLOCK_N, desc_col, bars.index(t), k_smem.index(t),
                        v_smem.index(t), t < n_full, tile_bytes)
    if n_full > 0:
        mbarrier.wait(bars.index(0), phase=0)
        s = warpgroup_mma(q_op, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False)
        acc_tok = warpgroup_mma_init(acc)
        for j in range(n_full - 1):
            slot = j % STAGES
            nxt = j + 1
            mbarrier.wait(bars.index(nxt % STAGES), phase=(nxt // STAGES) & 1)
            s_tok = warpgroup_mma(q_op, k_smem.index(nxt % STAGES).permute((1, 0)), s_zero, use_acc=False,
                                  is_async=True)
            p, alpha_o, m_i, l_i = _softmax_step(s, m_i, l_i, qk_scale, s_layout, o_layout)
            # all but the newest group (S(j+1)) done: P.V(j-1) has finished with acc and its slot
            acc_j = warpgroup_mma_wait(num_outstanding=1, deps=(acc_tok, ))
            # refill the slot P.V(j-1) read (never used yet at j = 0) with tile j + STAGES - 1, once
            # every warpgroup is past it
            _cta_barrier()
            refill = j + STAGES - 1
            rslot = refill % STAGES
            _load_tile_pair(k_desc, v_desc, desc_row + refill * BLOCK_N, desc_col, bars.index(rslot),
                            k_smem.index(rslot), v_smem.index(rslot), refill < n_full, tile_bytes)
            acc_j = acc_j * gl.expand_dims(alpha_o, 1)
            acc_tok = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_smem.index(slot), acc_j,
                                    is_async=True)
            s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))
        # the last full tile: nothing to issue ahead of its softmax
        p, alpha_o, m_i, l_i = _softmax_step(s, m_i, l_i, qk_scale, s_layout, o_layout)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok, ))
        acc = acc * gl.expand_dims(alpha_o, 1)
        acc = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_smem.index((n_full - 1) % STAGES), acc)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))

    # masked tiles, through ring slot 0 (every TMA load and MMA of the loop is done by now); the tree
    # rows in the split holding the prefix's last row or (TREE_SPLIT 1) the one after it
    tree_split = gl.maximum(gl.cdiv(prefix_len, chunk) - 1 + TREE_SPLIT, 0)
    acc, m_i, l_i = _masked_key_tiles(acc, m_i, l_i, q_op, k_smem.index(0), v_smem.index(0), k_ptr, v_ptr,
                                      mask_ptr, b, kv_head, split, prefix_len, num_nodes, tree_split, full_end, hi,
                                      m_tile * BLOCK_M, num_rows, qk_scale, stride_kb, stride_ks, stride_kh,
                                      stride_vb, stride_vs, stride_vh, stride_mb, stride_mt, s_layout, o_layout,
                                      p_layout, ld_layout, GROUP, HEAD_DIM, BLOCK_M, BLOCK_N)
    _store_rows(acc, m_i, l_i, b, kv_head, head_b, split, m_tile * BLOCK_M, num_rows, rows_pad, num_splits, out_ptr,
                part_o_ptr, part_lse_ptr, stride_ob, stride_ot, stride_oh, o_layout, 0, GROUP, HEAD_DIM, BLOCK_M,
                SINGLE_SPLIT)
    if FUSED_MERGE:
        # every warp's partial rows are stored before the tile's count says this split is done
        _cta_barrier()
        row_lo = m_tile * BLOCK_M
        _merge_if_last(counts_ptr + gl.program_id(0), part_o_ptr, part_lse_ptr, out_ptr, b, head_b, kv_head, row_lo,
                       gl.minimum(row_lo + BLOCK_M, num_rows), rows_pad, num_splits, stride_ob, stride_ot, stride_oh,
                       GROUP, HEAD_DIM, MERGE_ROWS, SPLIT_BLOCK, num_warps)
