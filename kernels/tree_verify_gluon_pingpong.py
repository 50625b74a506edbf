"""The Hopper split kernel's 128- and 192-row tiles on warp-specialised warpgroups (Gluon),
and its 64-row tile fed by the same load warp.

Why: in the 8-warp kernel of ``tree_verify_gluon`` both warpgroups run the same code in
lockstep (a CTA barrier every key tile), so they take their softmax at the same time and leave
the tensor cores idle together; each only hides its softmax under its own next q.k. Here each
warpgroup is its own warp-specialised partition with its own 64 query rows, issuing its MMAs
(S(j+1) = q.K(j+1), then acc += P(j).V(j)) as soon as its softmax and its key tile allow, so one
warpgroup's softmax runs while another's MMAs keep the tensor cores busy (FlashAttention 3's
inter-warpgroup overlap, on top of its intra-warpgroup one). The kernel is named for the turns
its warpgroups once passed between them to order their MMAs (FlashAttention 3's ping-pong),
which at head dim 256 cost more than they gave. A one-warp partition streams the key tiles
through TMA into a ring of ``STAGES`` slots: ``ready[slot]`` says a tile landed,
``empty[slot]`` (one arrival per consumer) that every consumer is done with it.

T = 2^k + 1 leaves a few packed rows past whole 128-row tiles (4 at G = 4, 8 at G = 8). With
``TAIL_M = 8`` a fourth partition takes them on the same key tiles with the keys as its MMAs' M
dimension and the rows as N (WGMMA's N goes down to 8), for a few per cent of the MMA FLOPs
(though its N = 8 MMAs hold the tensor cores for about a quarter of two warpgroups' time),
instead of a third warpgroup or another program streaming the cache. Its tiles are
pipelined like the other warpgroups' (S^T(j+1) issued before P^T(j) is written, softmax(j+1)
under O^T += V^T.P^T(j)); it takes the masked tiles from where the warpgroups do. Its softmax
reduces over the keys, which its MMAs spread over its four warps; beside two warpgroups it
keeps its row sums per key lane and retakes its running max across the warps only where a warp's
scores pass it by 2^8, so that a tile costs it one barrier instead of three.

A 64-row tile (``BLOCK_M = 64``) is one such warpgroup, fed by the load warp; the same tail
rides on it for 65 to 72 packed rows (T = 17 at G = 4, T = 9 at G = 8), which otherwise take a
128-row tile with half its MMAs on padding.

Same work decomposition, partial layout and merge as the other split kernels. The masked key
tiles (the split's partial last prefix tile, the tree tiles) come by TMA too, after the
mask-free ones: through the ring, the request's last tile zeroed past its keys by the load warp,
or, with one warpgroup beside the tail, through two buffers of their own, each consumer zeroing
(each warpgroup loading them through pointers after its stream measured slower).
Their masks come from each row's ancestor words, loaded once a tile. The merge follows this
kernel (as its programmatic dependent only beside the tree's own split on few splits: elsewhere
that measured slower), or with ``FUSED_MERGE`` is its own: after the partitions join, the last
program of each query tile merges the tile's rows, or, with ``MERGE_WAITERS``, that many programs a
tile past the splits' (they have no work item) wait for the tile's splits to count themselves and
merge its row blocks between them (each block's columns in ``MERGE_SLICES`` head-dim slices where
a block of all splits is too wide whole).

Persistent (``PERSISTENT``): the kernel works through work items (a query tile of one
(request, KV head) on one split, in the order of a grid of one program an item); launched with
fewer programs than items, each program takes every grid-size-th one, and every partition carries
its ring and buffer phases from item to item, so that the load warp streams the next item's
key tiles while the warpgroups finish the one before. The launcher picks it where short items
come in several waves (``verify_plan.pingpong_grid``); elsewhere each partition runs its
one item, as the code did before.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from .tree_verify_gluon import (_cta_barrier, _let_merge_launch, _load_q_rows, _load_tile_pair, _masked_tile_mma,
                                _merge_if_last, _merge_when_counted, _split_keys, _store_rows, _tile_coords,
                                _tree_visibility, _zero_rows_from)
from .tree_verify_pingpong_state import (ConsumerArgs, KeyRing, LoadArgs, MaskedBuffers, MaskedTiles, MmaArgs,
                                         ProgramWork, RowPointers, RowStrides, TailArgs, WorkGrid, WorkItem)


@gluon.jit
def _item_head(w, items):
    """(split, query tile, request x KV head, KV head, request) of work item w of ``items`` (a
    :class:`WorkGrid`), without a load."""
    m_tile, head_b, kv_head, b = _tile_coords(w % items.base_programs, items.num_m_tiles, items.num_kv_heads)
    return w // items.base_programs, m_tile, head_b, kv_head, b


@gluon.jit
def _work_item(w, items, BLOCK_N: gl.constexpr):
    """The :class:`WorkItem` w of ``items`` (a :class:`WorkGrid`; items in the order of the
    unpersistent grid: query tiles, then splits)."""
    split, m_tile, head_b, kv_head, b = _item_head(w, items)
    prefix_len = gl.load(items.lens_ptr + b).to(gl.int32)
    lo, hi, n_full, full_end = _split_keys(split, items.chunk, prefix_len, BLOCK_N)
    has_partial = full_end < hi
    has_tree = split == gl.maximum(gl.cdiv(prefix_len, items.chunk) - 1 + items.tree_split, 0)
    n_masked = has_partial.to(gl.int32) + gl.where(has_tree, gl.cdiv(items.num_nodes, BLOCK_N), 0)
    return WorkItem(split, m_tile, head_b, kv_head, b, prefix_len, lo, hi, n_full, full_end, has_partial, n_masked)


@gluon.jit
def _masked_of(bufs, ring_uses, own_uses, it, num_nodes, IN_RING: gl.constexpr):
    """The :class:`MaskedTiles` of work item ``it`` (:func:`_work_item`) through ``bufs``, after
    ``ring_uses`` ring slots and ``own_uses`` own-buffer uses of the earlier items."""
    first_use = ring_uses + it.n_full if IN_RING else own_uses
    return MaskedTiles(bufs, first_use, IN_RING, it.n_masked, it.has_partial, it.full_end, it.hi, it.prefix_len,
                       num_nodes, it.prefix_len + num_nodes)


@gluon.jit
def _uses_after(ring_uses, own_uses, it, IN_RING: gl.constexpr):
    """(ring slots, own-buffer uses) after work item ``it``: its mask-free tiles take ring slots,
    its masked tiles too where they come through the ring."""
    if IN_RING:
        return ring_uses + it.n_full + it.n_masked, own_uses
    else:
        return ring_uses + it.n_full, own_uses + it.n_masked


@gluon.jit
def _masked_tile_at(i, masked):
    """Masked key tile i of the program: (its first key row in the request, whether it is the
    split's partial last prefix tile, its first tree node (negative on the partial tile), its
    buffer, and the phase its barriers are at for it) of ``masked`` (:class:`MaskedTiles`)."""
    block_n: gl.constexpr = masked.bufs.k.shape[1]
    n_buf: gl.constexpr = masked.bufs.k.shape[0]
    partial = masked.has_partial & (i == 0)
    start = (i - masked.has_partial.to(gl.int32)) * block_n
    use = masked.first_use + i
    row = gl.where(partial, masked.full_end, masked.prefix_len + start)
    return row, partial, start, use % n_buf, (use // n_buf) & 1


@gluon.jit
def _zero_rows_one_warp(x_smem, n_valid):
    """Rows n_valid .. of a tile in shared memory to zeros, by one warp on a small register budget,
    in pieces of 8 rows x 64 columns (a piece may not split the 128-byte swizzle); pieces before
    n_valid are left alone. Then the fence that lets the MMAs read the tile."""
    ROWS: gl.constexpr = 8
    COLS: gl.constexpr = 64
    layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 8], threads_per_warp=[4, 8], warps_per_cta=[1, 1],
                                            order=[1, 0])
    for r in gl.static_range(x_smem.shape[0] // ROWS):
        if r * ROWS + ROWS > n_valid:
            rows = r * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, layout))
            for c in gl.static_range(x_smem.shape[1] // COLS):
                piece = x_smem.slice(r * ROWS, ROWS).slice(c * COLS, COLS, dim=1)
                x = piece.load(layout)
                piece.store(gl.where(gl.expand_dims(rows < n_valid, 1), x, gl.zeros_like(x)))
    fence_async_shared()


@gluon.jit
def _pingpong_load_partition(args, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, PERSISTENT: gl.constexpr,
                             WAITING: gl.constexpr):
    """One warp: TMA loads of the mask-free key tiles into the ring, tile t into slot t % STAGES
    once every consumer released the tile that held it before; then of the masked tiles (the
    split's partial last prefix tile, the tree tiles) into theirs (``masked``: the ring's next
    slots, or buffers of their own), which so arrive while the stream's last tiles are
    consumed. Rows past the request's keys (read on its last tile) may hold anything, even NaN,
    and a zero weight times NaN would reach the sum: where ``loader_zeroes``, this warp zeroes
    their V rows before it marks the tile ready; else each consumer does. ``args``: :class:`LoadArgs`."""
    work = args.work
    # ring slots, own-buffer uses and tiles zeroed by the earlier items
    ring_uses = work.first_item * 0
    own_uses = work.first_item * 0
    zeroed = work.first_item * 0
    if PERSISTENT:
        for w in range(work.first_item, work.num_items, work.item_step):
            ring_uses, own_uses, zeroed = _pingpong_load_item(args, w, ring_uses, own_uses, zeroed, BLOCK_N, STAGES)
    elif not WAITING or work.first_item < work.num_items:  # the merge's waiting programs have no item
        _pingpong_load_item(args, work.first_item, ring_uses, own_uses, zeroed, BLOCK_N, STAGES)


@gluon.jit
def _pingpong_load_item(args, w, ring_uses, own_uses, zeroed, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """The load warp's work on item w, after ``ring_uses`` ring slots, ``own_uses`` own-buffer
    uses and ``zeroed`` zeroed tiles of the earlier items; returns those counts after it."""
    k_desc = args.k_desc
    v_desc = args.v_desc
    ring = args.ring
    HEAD_DIM: gl.constexpr = k_desc.block_type.shape[1]
    tile_bytes: gl.constexpr = 2 * BLOCK_N * HEAD_DIM * k_desc.dtype.primitive_bitwidth // 8
    it = _work_item(w, args.items, BLOCK_N)
    masked = _masked_of(args.bufs, ring_uses, own_uses, it, args.items.num_nodes, args.IN_RING)
    x = masked.bufs
    request_row = it.b * args.cache_rows
    # KV_SHARE consecutive programs' query heads share one KV head (``VerifyConfig.split_query_heads``)
    desc_col = (it.kv_head // args.KV_SHARE) * HEAD_DIM
    for t in range(it.n_full):
        use = ring_uses + t
        slot = use % STAGES
        mbarrier.wait(ring.empty.index(slot), phase=((use // STAGES) + 1) & 1, pred=use >= STAGES)
        _load_tile_pair(k_desc, v_desc, request_row + it.lo + t * BLOCK_N, desc_col, ring.ready.index(slot),
                        ring.k_smem.index(slot), ring.v_smem.index(slot), True, tile_bytes)
    for i in range(masked.n_masked):
        row, partial, start, buf, phase = _masked_tile_at(i, masked)
        mbarrier.wait(x.free.index(buf), phase=phase ^ 1, pred=masked.first_use + i >= x.k.shape[0])
        if masked.loader_zeroes & (row + BLOCK_N > masked.request_end):
            # (the tree's last tile, and a partial prefix tile reaching past the tree)
            _load_tile_pair(k_desc, v_desc, request_row + row, desc_col, x.landed, x.k.index(buf), x.v.index(buf),
                            True, tile_bytes)
            mbarrier.wait(x.landed, phase=zeroed & 1)
            _zero_rows_one_warp(x.v.index(buf), masked.request_end - row)
            mbarrier.arrive(x.ready.index(buf))
            zeroed += 1
        else:
            _load_tile_pair(k_desc, v_desc, request_row + row, desc_col, x.ready.index(buf), x.k.index(buf),
                            x.v.index(buf), True, tile_bytes)
    ring_uses, own_uses = _uses_after(ring_uses, own_uses, it, args.IN_RING)
    return ring_uses, own_uses, zeroed


@gluon.jit
def _masked_tile_visibility(i, masked, mask_rows, row_ok, keys, ROW_AXIS: gl.constexpr):
    """Which keys of masked tile i each row sees, as :func:`_tree_visibility` lays them out: the
    partial prefix tile's keys before ``hi``, or the tree tile's ancestor bits (none on the
    partial tile); one form for both, so that no mask is carried across a branch."""
    row, partial, start, buf, phase = _masked_tile_at(i, masked)
    in_prefix = gl.expand_dims(row + keys < gl.where(partial, masked.hi, 0), ROW_AXIS)
    return in_prefix | _tree_visibility(mask_rows, row_ok & (start >= 0), gl.maximum(start, 0), masked.num_nodes,
                                        keys, ROW_AXIS, masked.bufs.k.shape[1])


@gluon.jit
def _take_masked_tile(i, masked, PARTS: gl.constexpr, ld_layout: gl.constexpr):
    """Wait for masked tile i; where the load warp does not zero the V rows past the request's
    keys, zero them (every consumer does, writing the same bytes; the MMAs of each read them only
    after its own writes). Returns its (K, V) buffers and its buffer index."""
    x = masked.bufs
    row, partial, start, buf, phase = _masked_tile_at(i, masked)
    mbarrier.wait(x.ready.index(buf), phase=phase)
    if not masked.loader_zeroes:
        if row + x.k.shape[1] > masked.request_end:
            _zero_rows_from(x.v.index(buf), masked.request_end - row, PARTS, ld_layout)
    return x.k.index(buf), x.v.index(buf), buf


@gluon.jit
def _pingpong_masked_tiles(acc, m_i, l_i, q_op, masked, mask_ptr, b, stride_mb, stride_mt, row0, num_rows, qk_scale,
                           s_layout: gl.constexpr, o_layout: gl.constexpr, p_layout: gl.constexpr,
                           ld_layout: gl.constexpr, GROUP: gl.constexpr, BLOCK_M: gl.constexpr,
                           BLOCK_N: gl.constexpr):
    """A warpgroup's masked key tiles after its stream: the split's partial last prefix tile,
    then, in the tree's split (``WorkGrid.tree_split``), the tree tiles (synchronous MMAs); each
    buffer released once this warpgroup's MMAs are done with it."""
    rows_s = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    cols_s = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    mask_rows = mask_ptr + b.to(gl.int64) * stride_mb + (rows_s // GROUP) * stride_mt
    row_ok = rows_s < num_rows
    for i in range(masked.n_masked):
        visible = _masked_tile_visibility(i, masked, mask_rows, row_ok, cols_s, 0)
        kx_smem, vx_smem, buf = _take_masked_tile(i, masked, 1, ld_layout)
        acc, m_i, l_i = _masked_tile_mma(acc, m_i, l_i, q_op, kx_smem, vx_smem, visible, qk_scale, s_layout,
                                         o_layout, p_layout, BLOCK_M, BLOCK_N)
        mbarrier.arrive(masked.bufs.free.index(buf))
    return acc, m_i, l_i


# How far (log2 units) a row's scores on mask-free tiles may pass the max its accumulator and sums are
# scaled to before they are rescaled to a new one, in the warpgroups and the tail alike (P <= 2^8)
RESCALE_LOG2: gl.constexpr = gl.constexpr(8.0)


@gluon.jit
def _lazy_softmax_step(s, m_i, l_i, qk_scale, s_layout: gl.constexpr, o_layout: gl.constexpr):
    """The online softmax of one mask-free tile whose rows keep their max unless the tile's scores
    pass it by 2^RESCALE_LOG2; also whether any row took a new max (one flag for the warpgroup: where
    none did, the accumulator needs no rescale, 128 multiplies a thread at head dim 256)."""
    m_tile = gl.max(s, 1) * qk_scale
    moved = m_tile > m_i + RESCALE_LOG2  # every row on the first tile (m_i = -inf)
    m_new = gl.where(moved, m_tile, m_i)
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), m_new, l_i, gl.max(moved.to(gl.int32), 0) > 0


@gluon.jit
def _pingpong_mma_partition(WG: gl.constexpr, args, GROUP: gl.constexpr, HEAD_DIM: gl.constexpr,
                            HALF_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                            SINGLE_SPLIT: gl.constexpr, NUM_WG: gl.constexpr, Q_IN_REGS: gl.constexpr,
                            PERSISTENT: gl.constexpr, WAITING: gl.constexpr):
    """One warpgroup: its HALF_M query rows of each work item against every key tile of the
    item's split. ``args``: :class:`MmaArgs`."""
    work = args.common.work
    # the ring's slots and the own buffers' uses taken by the earlier items
    ring_uses = work.first_item * 0
    own_uses = work.first_item * 0
    if PERSISTENT:
        for w in range(work.first_item, work.num_items, work.item_step):
            ring_uses, own_uses = _pingpong_mma_item(WG, args, w, ring_uses, own_uses, GROUP, HEAD_DIM, HALF_M,
                                                     BLOCK_N, STAGES, SINGLE_SPLIT, NUM_WG, Q_IN_REGS)
    elif not WAITING or work.first_item < work.num_items:  # the merge's waiting programs have no item
        _pingpong_mma_item(WG, args, work.first_item, ring_uses, own_uses, GROUP, HEAD_DIM, HALF_M, BLOCK_N, STAGES,
                           SINGLE_SPLIT, NUM_WG, Q_IN_REGS)


@gluon.jit
def _pingpong_mma_item(WG: gl.constexpr, args, w, ring_uses, own_uses, GROUP: gl.constexpr, HEAD_DIM: gl.constexpr,
                       HALF_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, SINGLE_SPLIT: gl.constexpr,
                       NUM_WG: gl.constexpr, Q_IN_REGS: gl.constexpr):
    """One warpgroup's work on item w, after the earlier items' ``ring_uses`` ring slots and
    ``own_uses`` own-buffer uses; returns those counts after it."""
    io = args.io
    c = args.common
    st = c.strides
    k_smem = args.ring.k_smem
    v_smem = args.ring.v_smem
    ready = args.ring.ready
    empty = args.ring.empty
    qk_scale = c.qk_scale
    num_nodes = c.items.num_nodes
    dtype: gl.constexpr = k_smem.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    ld_layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 8], threads_per_warp=[4, 8],
                                               warps_per_cta=[4, 1], order=[1, 0])
    num_rows = num_nodes * GROUP
    it = _work_item(w, c.items, BLOCK_N)
    n_full = it.n_full
    masked = _masked_of(c.bufs, ring_uses, own_uses, it, num_nodes, c.IN_RING)
    my_rows = it.m_tile * (NUM_WG * HALF_M) + WG * HALF_M
    q = _load_q_rows(io.q_ptr, it.b, it.kv_head, my_rows, num_rows, st.stride_qb, st.stride_qt, st.stride_qh, GROUP,
                     HEAD_DIM, HALF_M, ld_layout)
    if Q_IN_REGS:
        q_op = gl.convert_layout(q, gl.DotOperandLayout(operand_index=0, parent=s_layout, k_width=2))
    else:
        # three warpgroups' registers do not hold q beside the scores and the accumulator
        q_op = args.q_smem.index(WG)
        _cta_barrier()  # every warp of this partition is past the previous item's MMAs, which read q
        q_op.store(q)
        fence_async_shared()
        _cta_barrier()  # this partition's warps only

    acc = gl.zeros([HALF_M, HEAD_DIM], gl.float32, o_layout)
    m_i = gl.full([HALF_M], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([HALF_M], gl.float32, gl.SliceLayout(1, s_layout))
    s_zero = gl.zeros([HALF_M, BLOCK_N], gl.float32, s_layout)
    if n_full > 0:
        mbarrier.wait(ready.index(ring_uses % STAGES), phase=(ring_uses // STAGES) & 1)
        s_tok = warpgroup_mma(q_op, k_smem.index(ring_uses % STAGES).permute((1, 0)), s_zero, use_acc=False,
                              is_async=True)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, ))
        p, alpha_o, m_i, l_i, moved = _lazy_softmax_step(s, m_i, l_i, qk_scale, s_layout, o_layout)
        for j in range(n_full - 1):
            slot = (ring_uses + j) % STAGES
            nxt = ring_uses + j + 1
            mbarrier.wait(ready.index(nxt % STAGES), phase=(nxt // STAGES) & 1)
            s_tok = warpgroup_mma(q_op, k_smem.index(nxt % STAGES).permute((1, 0)), s_zero, use_acc=False,
                                  is_async=True)
            if moved:
                acc = acc * gl.expand_dims(alpha_o, 1)
            acc_tok = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_smem.index(slot), acc,
                                    is_async=True)
            # S(j+1) done (P.V(j), issued after it, may still run): its softmax under the other
            # warpgroup's MMAs and our own P.V(j)
            s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))
            p, alpha_o, m_i, l_i, moved = _lazy_softmax_step(s, m_i, l_i, qk_scale, s_layout, o_layout)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok, ))
            mbarrier.arrive(empty.index(slot))
        last = (ring_uses + n_full - 1) % STAGES
        if moved:
            acc = acc * gl.expand_dims(alpha_o, 1)
        acc_tok = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_smem.index(last), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok, ))
        mbarrier.arrive(empty.index(last))
    acc, m_i, l_i = _pingpong_masked_tiles(acc, m_i, l_i, q_op, masked, io.mask_ptr, it.b, st.stride_mb, st.stride_mt,
                                           my_rows, num_rows, qk_scale, s_layout, o_layout, p_layout, ld_layout, GROUP,
                                           HALF_M, BLOCK_N)
    _store_rows(acc, m_i, l_i, it.b, it.kv_head, it.head_b, it.split, my_rows, num_rows, c.rows_pad,
                c.num_splits, io.out_ptr, io.part_o_ptr, io.part_lse_ptr, st.stride_ob, st.stride_ot, st.stride_oh,
                o_layout, 0, GROUP, HEAD_DIM, HALF_M, SINGLE_SPLIT)
    ring_uses, own_uses = _uses_after(ring_uses, own_uses, it, c.IN_RING)
    return ring_uses, own_uses


@gluon.jit
def _tail_softmax_step(s_t, m_t, l_t, qk_scale, ot_layout: gl.constexpr):
    """The online softmax of key-major scores [keys, rows]: reductions over axis 0."""
    m_new = gl.maximum(m_t, gl.max(s_t, 0) * qk_scale)
    m_shift = gl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = gl.exp2(m_t - m_shift)
    p_t = gl.exp2(s_t * qk_scale - gl.expand_dims(m_shift, 0))
    l_t = l_t * alpha + gl.sum(p_t, 0)
    return p_t, gl.convert_layout(alpha, gl.SliceLayout(0, ot_layout)), m_new, l_t


@gluon.jit
def _tail_tile(acc_t, m_t, l_t, k_tile, v_tile, qt_op, p_smem, visible, qk_scale, st_layout: gl.constexpr,
               ot_layout: gl.constexpr, TAIL_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """One key tile (in shared memory) for the tail rows, keys as the MMAs' M dimension:
    S^T = K.q^T, then O^T += V^T.P^T with P^T through shared memory (a B operand)."""
    s_t = warpgroup_mma(k_tile, qt_op, gl.zeros([BLOCK_N, TAIL_M], gl.float32, st_layout), use_acc=False)
    s_t = gl.where(visible, s_t, float("-inf"))
    p_t, alpha, m_t, l_t = _tail_softmax_step(s_t, m_t, l_t, qk_scale, ot_layout)
    p_smem.store(gl.permute(p_t.to(p_smem.dtype), (1, 0)))
    fence_async_shared()
    _cta_barrier()  # every warp's P^T columns are in place before the MMA reads them
    acc_t = acc_t * gl.expand_dims(alpha, 0)
    acc_t = warpgroup_mma(v_tile.permute((1, 0)), p_smem.permute((1, 0)), acc_t)
    _cta_barrier()  # the MMA is done with P^T before the next tile overwrites it
    return acc_t, m_t, l_t


@gluon.jit
def _tail_pv_issue(acc_t, alpha, p_t, pt_buf, v_tile):
    """P^T of one tile into ``pt_buf``, then O^T = O^T * alpha + V^T.P^T issued (asynchronous)."""
    pt_buf.store(gl.permute(p_t.to(pt_buf.dtype), (1, 0)))
    fence_async_shared()
    _cta_barrier()  # every warp's P^T columns are in place before the MMA reads them
    return warpgroup_mma(v_tile.permute((1, 0)), pt_buf.permute((1, 0)), acc_t * gl.expand_dims(alpha, 0),
                         is_async=True)


@gluon.jit
def _tail_scores(x_t, m_t):
    """P^T [keys, rows] against the running max as it stands, and each warp's largest score past it
    less the threshold ([4], one a warp): reductions within each warp only."""
    p_t = gl.exp2(x_t - gl.expand_dims(m_t, 0))
    over = gl.reshape(x_t - gl.expand_dims(m_t, 0), [4, x_t.shape[0] // 4, x_t.shape[1]])
    return p_t, gl.max(gl.max(over, 2), 1) - RESCALE_LOG2


@gluon.jit
def _tail_commit_p(x_t, p_t, over, acc_t, l2, m_t, pt_buf, flag_buf):
    """P^T of one tile and the warps' flags into shared memory behind one barrier. Where some warp's
    score passed the running max by more than the threshold (the first tile always), the max is
    taken across the warps and the tile's P^T, O^T and sums redone against it; else P^T stands as
    computed, no rescale. Returns (O^T, per-key-lane sums, running max)."""
    flag_buf.store(over)
    pt_buf.store(gl.permute(p_t.to(pt_buf.dtype), (1, 0)))
    fence_async_shared()
    _cta_barrier()  # P^T and every warp's flag in place
    all_flags: gl.constexpr = gl.BlockedLayout([4], [32], [4], [0])
    if gl.max(flag_buf.load(all_flags), 0) > 0:
        m_new = gl.maximum(m_t, gl.max(x_t, 0))
        m_shift = gl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = gl.expand_dims(gl.exp2(m_t - m_shift), 0)
        p_t = gl.exp2(x_t - gl.expand_dims(m_shift, 0))
        acc_t = acc_t * alpha
        l2 = l2 * alpha
        m_t = m_new
        pt_buf.store(gl.permute(p_t.to(pt_buf.dtype), (1, 0)))
        fence_async_shared()
        _cta_barrier()
    return acc_t, l2 + p_t, m_t


@gluon.jit
def _tail_stream_exact(acc_t, m_t, l_t, qt_op, s_zero, k_smem, v_smem, p_smem, ready, empty, qk_scale, n_full,
                       ring_uses, ot_layout: gl.constexpr, STAGES: gl.constexpr):
    """The tail's mask-free tiles with the max and the sums taken across its warps every tile,
    pipelined like the other warpgroups': S^T(j+1) runs while P^T(j) goes to shared memory,
    O^T += V^T.P^T(j) while softmax(j + 1) runs. P^T alternates between two
    buffers: the one written at tile j was last read by the MMA of tile j - 2, which every warp
    waited for before the barrier of tile j - 1. ``ring_uses``: the ring slots earlier work
    items took."""
    mbarrier.wait(ready.index(ring_uses % STAGES), phase=(ring_uses // STAGES) & 1)
    s_tok = warpgroup_mma(k_smem.index(ring_uses % STAGES), qt_op, s_zero, use_acc=False, is_async=True)
    s_t = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, ))
    p_t, alpha, m_t, l_t = _tail_softmax_step(s_t, m_t, l_t, qk_scale, ot_layout)
    for j in range(n_full - 1):
        slot = (ring_uses + j) % STAGES
        nxt = ring_uses + j + 1
        mbarrier.wait(ready.index(nxt % STAGES), phase=(nxt // STAGES) & 1)
        s_tok = warpgroup_mma(k_smem.index(nxt % STAGES), qt_op, s_zero, use_acc=False, is_async=True)
        acc_tok = _tail_pv_issue(acc_t, alpha, p_t, p_smem.index(j % 2), v_smem.index(slot))
        s_t = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))
        p_t, alpha, m_t, l_t = _tail_softmax_step(s_t, m_t, l_t, qk_scale, ot_layout)
        acc_t = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok, ))
        mbarrier.arrive(empty.index(slot))
    last = (ring_uses + n_full - 1) % STAGES
    acc_tok = _tail_pv_issue(acc_t, alpha, p_t, p_smem.index((n_full - 1) % 2), v_smem.index(last))
    acc_t = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok, ))
    mbarrier.arrive(empty.index(last))
    return acc_t, m_t, l_t


@gluon.jit
def _tail_stream_lazy(acc_t, m_t, l_t, qt_op, s_zero, k_smem, v_smem, p_smem, flag_smem, ready, empty, qk_scale,
                      n_full, ring_uses, st_layout: gl.constexpr, STAGES: gl.constexpr):
    """The same tiles with one barrier a tile instead of three: the row sums are kept per key lane
    and summed once at the end, and the max is retaken across the warps only where a warp's
    scores passed it by 2^RESCALE_LOG2 (a flag a warp, read behind the barrier P^T needs
    anyway). Beside two warpgroups, where the tail's cross-warp reductions held each tile up.
    The flags alternate between two buffers like P^T."""
    l2 = gl.zeros(s_zero.shape, gl.float32, st_layout)
    mbarrier.wait(ready.index(ring_uses % STAGES), phase=(ring_uses // STAGES) & 1)
    s_tok = warpgroup_mma(k_smem.index(ring_uses % STAGES), qt_op, s_zero, use_acc=False, is_async=True)
    x_t = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, )) * qk_scale
    p_t, over = _tail_scores(x_t, m_t)
    for j in range(n_full - 1):
        slot = (ring_uses + j) % STAGES
        nxt = ring_uses + j + 1
        mbarrier.wait(ready.index(nxt % STAGES), phase=(nxt // STAGES) & 1)
        s_tok = warpgroup_mma(k_smem.index(nxt % STAGES), qt_op, s_zero, use_acc=False, is_async=True)
        pt_buf = p_smem.index(j % 2)
        acc_t, l2, m_t = _tail_commit_p(x_t, p_t, over, acc_t, l2, m_t, pt_buf, flag_smem.index(j % 2))
        acc_tok = warpgroup_mma(v_smem.index(slot).permute((1, 0)), pt_buf.permute((1, 0)), acc_t, is_async=True)
        x_t = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, )) * qk_scale
        p_t, over = _tail_scores(x_t, m_t)
        acc_t = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok, ))
        mbarrier.arrive(empty.index(slot))
    last = (ring_uses + n_full - 1) % STAGES
    pt_buf = p_smem.index((n_full - 1) % 2)
    acc_t, l2, m_t = _tail_commit_p(x_t, p_t, over, acc_t, l2, m_t, pt_buf, flag_smem.index((n_full - 1) % 2))
    acc_tok = warpgroup_mma(v_smem.index(last).permute((1, 0)), pt_buf.permute((1, 0)), acc_t, is_async=True)
    acc_t = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok, ))
    mbarrier.arrive(empty.index(last))
    return acc_t, m_t, l_t + gl.sum(l2, 0)


@gluon.jit
def _pingpong_tail_partition(args, GROUP: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr,
                             STAGES: gl.constexpr, SINGLE_SPLIT: gl.constexpr, NUM_WG: gl.constexpr,
                             TAIL_M: gl.constexpr, PERSISTENT: gl.constexpr, WAITING: gl.constexpr):
    """One warpgroup: the (at most TAIL_M = 8) packed rows past the last whole 128-row tile (the
    G rows of node 2^k at T = 2^k + 1), on the K/V tiles the other warpgroups stream anyway.
    Eight rows fill no 64-row MMA, so the keys are the MMAs' M dimension and the rows their N
    (WGMMA's N goes down to 8): a few per cent of the tile's MMA work instead of another
    warpgroup's worth (a 192-row tile) or a second program streaming the cache. Its masked key
    tiles are the warpgroups' (the buffers the load warp fills while the mask-free tiles stream),
    so that at the stream's end only their MMAs remain. ``args``: :class:`TailArgs`."""
    work = args.common.work
    ring_uses = work.first_item * 0
    own_uses = work.first_item * 0
    if PERSISTENT:
        for w in range(work.first_item, work.num_items, work.item_step):
            ring_uses, own_uses = _pingpong_tail_item(args, w, ring_uses, own_uses, GROUP, HEAD_DIM, BLOCK_N, STAGES,
                                                      SINGLE_SPLIT, NUM_WG, TAIL_M)
    elif not WAITING or work.first_item < work.num_items:  # the merge's waiting programs have no item
        _pingpong_tail_item(args, work.first_item, ring_uses, own_uses, GROUP, HEAD_DIM, BLOCK_N, STAGES, SINGLE_SPLIT,
                            NUM_WG, TAIL_M)


@gluon.jit
def _pingpong_tail_item(args, w, ring_uses, own_uses, GROUP: gl.constexpr, HEAD_DIM: gl.constexpr,
                        BLOCK_N: gl.constexpr, STAGES: gl.constexpr, SINGLE_SPLIT: gl.constexpr,
                        NUM_WG: gl.constexpr, TAIL_M: gl.constexpr):
    """The tail warpgroup's work on item w (as :func:`_pingpong_mma_item`)."""
    io = args.io
    c = args.common
    st = c.strides
    ring = args.ring
    qt_smem = args.qt_smem
    pt_smem = args.pt_smem
    qk_scale = c.qk_scale
    num_m_tiles = c.items.num_m_tiles
    num_nodes = c.items.num_nodes
    st_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, TAIL_M, 16])
    ot_layout: gl.constexpr = st_layout
    ld_layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 8], threads_per_warp=[4, 8],
                                               warps_per_cta=[4, 1], order=[1, 0])
    it = _work_item(w, c.items, BLOCK_N)
    n_full = it.n_full
    masked = _masked_of(c.bufs, ring_uses, own_uses, it, num_nodes, c.IN_RING)
    # rows of the last m-tile's program only: the others compute them (cheaply) and store nothing
    num_rows = gl.where(it.m_tile == num_m_tiles - 1, num_nodes * GROUP, 0)
    row0 = num_m_tiles * (NUM_WG * 64)
    q_t = _load_q_rows(io.q_ptr, it.b, it.kv_head, row0, num_rows, st.stride_qb, st.stride_qt, st.stride_qh, GROUP,
                       HEAD_DIM, TAIL_M, ld_layout)
    _cta_barrier()  # every warp is past the previous item's MMAs, which read q^T
    qt_smem.store(q_t)
    fence_async_shared()
    _cta_barrier()
    qt_op = qt_smem.permute((1, 0))

    acc_t = gl.zeros([HEAD_DIM, TAIL_M], gl.float32, ot_layout)
    m_t = gl.full([TAIL_M], float("-inf"), gl.float32, gl.SliceLayout(0, st_layout))
    l_t = gl.zeros([TAIL_M], gl.float32, gl.SliceLayout(0, st_layout))
    s_zero = gl.zeros([BLOCK_N, TAIL_M], gl.float32, st_layout)
    if n_full > 0:
        if NUM_WG > 1:
            acc_t, m_t, l_t = _tail_stream_lazy(acc_t, m_t, l_t, qt_op, s_zero, ring.k_smem, ring.v_smem, pt_smem,
                                                args.flag_smem, ring.ready, ring.empty, qk_scale, n_full, ring_uses,
                                                st_layout, STAGES)
        else:
            # beside one warpgroup the lazy max measured slower
            acc_t, m_t, l_t = _tail_stream_exact(acc_t, m_t, l_t, qt_op, s_zero, ring.k_smem, ring.v_smem, pt_smem,
                                                 ring.ready, ring.empty, qk_scale, n_full, ring_uses, ot_layout,
                                                 STAGES)
        _cta_barrier()  # every warp is done with both P^T buffers before the masked tiles use one
    p_smem = pt_smem.index(0)  # the masked tiles' P^T (synchronous: one buffer)
    keys_s = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, st_layout))
    rows_s = row0 + gl.arange(0, TAIL_M, layout=gl.SliceLayout(0, st_layout))
    mask_cols = io.mask_ptr + it.b.to(gl.int64) * st.stride_mb + (rows_s // GROUP) * st.stride_mt
    row_ok = rows_s < num_rows
    for i in range(masked.n_masked):
        visible = _masked_tile_visibility(i, masked, mask_cols, row_ok, keys_s, 1)
        kx_smem, vx_smem, buf = _take_masked_tile(i, masked, 4, ld_layout)
        acc_t, m_t, l_t = _tail_tile(acc_t, m_t, l_t, kx_smem, vx_smem, qt_op, p_smem, visible, qk_scale, st_layout,
                                     ot_layout, TAIL_M, BLOCK_N)
        mbarrier.arrive(masked.bufs.free.index(buf))

    # output (or partial) rows, from the transposed accumulator
    _store_rows(acc_t, m_t, l_t, it.b, it.kv_head, it.head_b, it.split, row0, num_rows, c.rows_pad, c.num_splits,
                io.out_ptr, io.part_o_ptr, io.part_lse_ptr, st.stride_ob, st.stride_ot, st.stride_oh, ot_layout, 1,
                GROUP, HEAD_DIM, TAIL_M, SINGLE_SPLIT)
    ring_uses, own_uses = _uses_after(ring_uses, own_uses, it, c.IN_RING)
    return ring_uses, own_uses


@gluon.jit
def _tree_verify_partial_kernel_gluon_pingpong(
    q_ptr, k_ptr, v_ptr, k_desc, v_desc, lens_ptr, mask_ptr, out_ptr, part_o_ptr, part_lse_ptr, counts_ptr,
    stride_qb, stride_qt, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_mb, stride_mt,
    stride_ob, stride_ot, stride_oh,
    qk_scale, num_nodes, num_kv_heads, num_m_tiles, num_splits, chunk, cache_rows, base_programs,
    GROUP: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr, SINGLE_SPLIT: gl.constexpr, Q_IN_REGS: gl.constexpr, num_warps: gl.constexpr,
    TAIL_M: gl.constexpr = 0, KV_SHARE: gl.constexpr = 1, PERSISTENT: gl.constexpr = False,
    FUSED_MERGE: gl.constexpr = False, MERGE_ROWS: gl.constexpr = 2, SPLIT_BLOCK: gl.constexpr = 2,
    MERGE_WAITERS: gl.constexpr = 0, MERGE_SLICES: gl.constexpr = 1, MERGE_VECTOR: gl.constexpr = False,
    TREE_SPLIT: gl.constexpr = 0,
):
    # launched with 4 warps (warpgroup 0, the default partition); the other warpgroups, the load
    # warp and the tail warpgroup are worker partitions. Q_IN_REGS is not read: q sits in
    # registers on one or two warpgroups at head dims up to 128, in shared memory otherwise. Nor are
    # k_ptr, v_ptr and their strides (every key tile comes by TMA): the split kernels share one
    # launch signature.
    gl.static_assert(num_warps == 4)
    NUM_WG: gl.constexpr = BLOCK_M // 64
    gl.static_assert(NUM_WG * 64 == BLOCK_M)
    gl.static_assert(NUM_WG == 1 or NUM_WG == 2 or NUM_WG == 3)
    gl.static_assert(STAGES >= NUM_WG + (TAIL_M > 0))
    gl.static_assert(TAIL_M == 0 or (TAIL_M == 8 and NUM_WG <= 2))
    gl.static_assert(not PERSISTENT or NUM_WG <= 2)
    gl.static_assert(not (PERSISTENT and FUSED_MERGE))
    gl.static_assert(MERGE_WAITERS == 0 or FUSED_MERGE)
    gl.static_assert(MERGE_SLICES == 1 or MERGE_WAITERS > 0)
    WAITING: gl.constexpr = MERGE_WAITERS > 0
    dtype: gl.constexpr = k_desc.dtype
    kv_sl: gl.constexpr = k_desc.layout
    if not SINGLE_SPLIT and not FUSED_MERGE:
        _let_merge_launch()  # a no-op unless the planner made the merge this grid's programmatic dependent

    # work items: base_programs query tiles of (request, KV head) pairs on each of num_splits splits;
    # a grid of that shape runs one a program, a smaller one (persistent, ``base_programs``
    # apart) several, each program's load warp streaming the next item's key tiles while its
    # warpgroups finish the one before
    items = WorkGrid(lens_ptr, num_m_tiles, num_kv_heads, base_programs, chunk, num_nodes, TREE_SPLIT)
    work = ProgramWork(gl.program_id(0) + gl.program_id(1) * gl.num_programs(0), base_programs * num_splits,
                       gl.num_programs(0) * gl.num_programs(1))

    # q from shared memory for three warpgroups or a 256-wide head (registers: see the partitions'
    # budgets below)
    Q_SMEM: gl.constexpr = NUM_WG == 3 or HEAD_DIM > 128
    q_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, HEAD_DIM], dtype)
    q_smem = gl.allocate_shared_memory(dtype, [NUM_WG if Q_SMEM else 1, 64, HEAD_DIM], q_sl)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], kv_sl)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], kv_sl)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=NUM_WG + (TAIL_M > 0))
    # the masked key tiles (the split's partial last prefix tile; the tree tiles in the tree's
    # split) follow the mask-free ones through the ring, the request's
    # last one landing on the load warp's own barrier, for it to zero what lies past the keys.
    # One 64-row warpgroup beside the tail measured slower so (the cause was not
    # found): there they take two buffers of their own, and every consumer zeroes.
    MASKED_IN_RING: gl.constexpr = not (NUM_WG == 1 and TAIL_M > 0)
    landed = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(landed, count=1)
    if not MASKED_IN_RING:
        xk_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, HEAD_DIM], kv_sl)
        xv_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, HEAD_DIM], kv_sl)
        xready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        xfree = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(2):
            mbarrier.init(xready.index(i), count=1)
            mbarrier.init(xfree.index(i), count=NUM_WG + (TAIL_M > 0))
    fence_async_shared()
    if MASKED_IN_RING:
        bufs = MaskedBuffers(k_smem, v_smem, ready, empty, landed)
    else:
        bufs = MaskedBuffers(xk_smem, xv_smem, xready, xfree, landed)

    rows_pad = num_m_tiles * BLOCK_M + TAIL_M
    io = RowPointers(q_ptr, mask_ptr, out_ptr, part_o_ptr, part_lse_ptr)
    ring = KeyRing(k_smem, v_smem, ready, empty)
    strides = RowStrides(stride_qb, stride_qt, stride_qh, stride_mb, stride_mt, stride_ob, stride_ot, stride_oh)
    common = ConsumerArgs(items, work, bufs, strides, qk_scale, num_splits, rows_pad, MASKED_IN_RING)
    mma_args = MmaArgs(io, q_smem, ring, common)
    load_args = LoadArgs(k_desc, v_desc, ring, items, work, bufs, cache_rows, KV_SHARE, MASKED_IN_RING)
    if TAIL_M > 0:
        qt_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([TAIL_M, HEAD_DIM], dtype)
        pt_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([TAIL_M, BLOCK_N], dtype)
        qt_smem = gl.allocate_shared_memory(dtype, [TAIL_M, HEAD_DIM], qt_sl)
        pt_smem = gl.allocate_shared_memory(dtype, [2, TAIL_M, BLOCK_N], pt_sl)
        # the tail warps' rescale flags (two tiles' worth, see _tail_stream_lazy)
        flag_smem = gl.allocate_shared_memory(gl.float32, [2, 4], gl.SwizzledSharedLayout(1, 1, 1, [0]))
        tail_args = TailArgs(io, qt_smem, pt_smem, ring, flag_smem, common)
        if NUM_WG == 1:
            # the tail has the registers to spare beside one warpgroup
            gl.warp_specialize([
                (_pingpong_mma_partition, (0, mma_args, GROUP, HEAD_DIM, 64, BLOCK_N, STAGES, SINGLE_SPLIT, NUM_WG,
                                             not Q_SMEM, PERSISTENT, WAITING)),
                (_pingpong_load_partition, (load_args, BLOCK_N, STAGES, PERSISTENT, WAITING)),
                (_pingpong_tail_partition, (tail_args, GROUP, HEAD_DIM, BLOCK_N, STAGES, SINGLE_SPLIT, NUM_WG,
                                              TAIL_M, PERSISTENT, WAITING)),
            ], [1, 4], [24, 128])
        else:
            gl.warp_specialize([
                (_pingpong_mma_partition, (0, mma_args, GROUP, HEAD_DIM, 64, BLOCK_N, STAGES, SINGLE_SPLIT, NUM_WG,
                                             not Q_SMEM, PERSISTENT, WAITING)),
                (_pingpong_mma_partition, (1, mma_args, GROUP, HEAD_DIM, 64, BLOCK_N, STAGES, SINGLE_SPLIT, NUM_WG,
                                             not Q_SMEM, PERSISTENT, WAITING)),
                (_pingpong_load_partition, (load_args, BLOCK_N, STAGES, PERSISTENT, WAITING)),
                (_pingpong_tail_partition, (tail_args, GROUP, HEAD_DIM, BLOCK_N, STAGES, SINGLE_SPLIT, NUM_WG,
                                              TAIL_M, PERSISTENT, WAITING)),
            ], [4, 1, 4], [208, 24, 72])
    elif NUM_WG == 1:
        gl.warp_specialize([
            (_pingpong_mma_partition, (0, mma_args, GROUP, HEAD_DIM, 64, BLOCK_N, STAGES, SINGLE_SPLIT, NUM_WG,
                                         not Q_SMEM, PERSISTENT, WAITING)),
            (_pingpong_load_partition, (load_args, BLOCK_N, STAGES, PERSISTENT, WAITING)),
        ], [1], [24])
    elif NUM_WG == 2:
        gl.warp_specialize([
            (_pingpong_mma_partition, (0, mma_args, GROUP, HEAD_DIM, 64, BLOCK_N, STAGES, SINGLE_SPLIT, NUM_WG,
                                         not Q_SMEM, PERSISTENT, WAITING)),
            (_pingpong_mma_partition, (1, mma_args, GROUP, HEAD_DIM, 64, BLOCK_N, STAGES, SINGLE_SPLIT, NUM_WG,
                                         not Q_SMEM, PERSISTENT, WAITING)),
            (_pingpong_load_partition, (load_args, BLOCK_N, STAGES, PERSISTENT, WAITING)),
        ], [4, 1], [240, 24])
    else:
        gl.warp_specialize([
            (_pingpong_mma_partition, (0, mma_args, GROUP, HEAD_DIM, 64, BLOCK_N, STAGES, SINGLE_SPLIT, NUM_WG,
                                         not Q_SMEM, PERSISTENT, WAITING)),
            (_pingpong_mma_partition, (1, mma_args, GROUP, HEAD_DIM, 64, BLOCK_N, STAGES, SINGLE_SPLIT, NUM_WG,
                                         not Q_SMEM, PERSISTENT, WAITING)),
            (_pingpong_mma_partition, (2, mma_args, GROUP, HEAD_DIM, 64, BLOCK_N, STAGES, SINGLE_SPLIT, NUM_WG,
                                         not Q_SMEM, PERSISTENT, WAITING)),
            (_pingpong_load_partition, (load_args, BLOCK_N, STAGES, PERSISTENT, WAITING)),
        ], [4, 4, 1], [160, 160, 24])
    if FUSED_MERGE:
        # the partitions have joined: every row of this program's partial is stored
        split, m_tile, head_b, kv_head, b = _item_head(work.first_item, items)
        row_lo = m_tile * BLOCK_M
        row_hi = gl.minimum(gl.where(m_tile == num_m_tiles - 1, rows_pad, row_lo + BLOCK_M), num_nodes * GROUP)
        count_ptr = counts_ptr + work.first_item % base_programs
        if not WAITING:
            _merge_if_last(count_ptr, part_o_ptr, part_lse_ptr, out_ptr, b, head_b, kv_head, row_lo, row_hi, rows_pad,
                           num_splits, stride_ob, stride_ot, stride_oh, GROUP, HEAD_DIM, MERGE_ROWS, SPLIT_BLOCK,
                           num_warps)
        elif work.first_item < work.num_items:
            gl.atomic_add(count_ptr, 1, sem="release", scope="gpu")
        else:
            # a waiting program: the rows past the items' give its query tile and its share
            _merge_when_counted(count_ptr, part_o_ptr, part_lse_ptr, out_ptr, b, head_b, kv_head, row_lo, row_hi,
                                rows_pad, num_splits, split - num_splits, stride_ob, stride_ot, stride_oh, GROUP,
                                HEAD_DIM, MERGE_ROWS, SPLIT_BLOCK, MERGE_WAITERS, MERGE_SLICES, num_warps,
                                MERGE_VECTOR)
