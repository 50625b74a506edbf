"""Probe only: globaltimer / clock64 stamps at the phases of each split program (and the folded
merge) of the 64-row Gluon and ping-pong kernels, into a buffer passed as an extra kernel argument.
python3 instrument.py  -- edits kernels/ in place; git checkout kernels/ restores them."""

PP = "kernels/tree_verify_gluon_pingpong.py"
ST = "kernels/tree_verify_pingpong_state.py"
GL = "kernels/tree_verify_gluon.py"
TR = "kernels/tree_verify_triton.py"
SIG_OLD = "part_lse_ptr, counts_ptr,\n    stride_qb"
SIG_NEW = "part_lse_ptr, counts_ptr, dbg_ptr,\n    stride_qb"
STAMP = '''

@gluon.jit
def _dbg(dbg_ptr, K: gl.constexpr, TIMER: gl.constexpr):
    pid = gl.program_id(0) + gl.program_id(1) * gl.num_programs(0)
    if TIMER:
        t = gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [pid], dtype=gl.int64, is_pure=False,
                                      pack=1)
    else:
        t = gl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l,r", [pid], dtype=gl.int64, is_pure=False, pack=1)
    gl.store(dbg_ptr + pid * 32 + K, t)


@gluon.jit
def _dbg2(dbg_ptr, K: gl.constexpr):
    _dbg(dbg_ptr, K, True)
    _dbg(dbg_ptr, K + 1, False)

'''


def sub(text, old, new, count=1):
    assert text.count(old) >= 1, old
    return text.replace(old, new, count)


t = open(TR).read()
t = sub(t, SIG_OLD, SIG_NEW)
t = sub(t, "            out if counts is None else counts, *ints)",
        "            out if counts is None else counts, DEBUG_BUF, *ints)")
t = sub(t, "\ndef _launch_through_triton(", "\nDEBUG_BUF = None\n\n\ndef _launch_through_triton(")
open(TR, "w").write(t)

s = open(ST).read()
s = sub(s, "    part_lse_ptr: gl.tensor\n", "    part_lse_ptr: gl.tensor\n    dbg_ptr: gl.tensor\n")
open(ST, "w").write(s)

# the 64-row Gluon kernel: slots 0/1 start, 2/3 stored, 4/5 merged; 8.. clock64 of q, first tile, stream,
# masked, store
g = open(GL).read()
g = sub(g, "\n\n@gluon.jit\ndef _load_tile_pair(", STAMP + "\n@gluon.jit\ndef _load_tile_pair(")
g = sub(g, SIG_OLD, SIG_NEW)
g = sub(g, "    gl.static_assert(STAGES >= 3)\n", "    gl.static_assert(STAGES >= 3)\n    _dbg2(dbg_ptr, 0)\n")
g = sub(g, "    else:\n        q_op = q_smem\n", "    else:\n        q_op = q_smem\n    _dbg(dbg_ptr, 8, False)\n")
g = sub(g, "        mbarrier.wait(bars.index(0), phase=0)\n", "        mbarrier.wait(bars.index(0), phase=0)\n"
        "        _dbg(dbg_ptr, 9, False)\n")
g = sub(g, "    for i in gl.static_range(STAGES):\n        mbarrier.invalidate(bars.index(i))\n",
        "    _dbg(dbg_ptr, 10, False)\n    for i in gl.static_range(STAGES):\n        mbarrier.invalidate(bars.index(i))\n")
g = sub(g, "    _store_rows(acc, m_i, l_i, b, kv_head, head_b, split, m_tile * BLOCK_M,",
        "    _dbg(dbg_ptr, 11, False)\n    _store_rows(acc, m_i, l_i, b, kv_head, head_b, split, m_tile * BLOCK_M,")
g = sub(g, "                SINGLE_SPLIT)\n    if FUSED_MERGE:\n",
        "                SINGLE_SPLIT)\n    _dbg(dbg_ptr, 12, False)\n    _dbg2(dbg_ptr, 2)\n    if FUSED_MERGE:\n")
assert g.endswith("GROUP, HEAD_DIM, MERGE_ROWS, SPLIT_BLOCK, num_warps)\n")
g += "    _dbg2(dbg_ptr, 4)\n"
open(GL, "w").write(g)

# the ping-pong kernel: the same kernel slots; warpgroup w's clock64 at 8 + 5 w ..
p = open(PP).read()
p = sub(p, "from .tree_verify_gluon import (", "from .tree_verify_gluon import (_dbg, _dbg2, ")
p = sub(p, SIG_OLD, SIG_NEW)
p = sub(p, "io = RowPointers(q_ptr, mask_ptr, out_ptr, part_o_ptr, part_lse_ptr)",
        "io = RowPointers(q_ptr, mask_ptr, out_ptr, part_o_ptr, part_lse_ptr, dbg_ptr)")
p = sub(p, "    dtype: gl.constexpr = k_desc.dtype\n    kv_sl: gl.constexpr = k_desc.layout\n",
        "    dtype: gl.constexpr = k_desc.dtype\n    kv_sl: gl.constexpr = k_desc.layout\n    _dbg2(dbg_ptr, 0)\n")
p = sub(p, "    acc = gl.zeros([HALF_M, HEAD_DIM], gl.float32, o_layout)\n    m_i = gl.full([HALF_M]",
        "    _dbg(io.dbg_ptr, 8 + 5 * WG, False)\n    acc = gl.zeros([HALF_M, HEAD_DIM], gl.float32, o_layout)\n"
        "    m_i = gl.full([HALF_M]")
p = sub(p, "    if n_full > 0:\n        mbarrier.wait(ready.index(ring_uses % STAGES), phase=(ring_uses // STAGES) & 1)\n",
        "    if n_full > 0:\n        mbarrier.wait(ready.index(ring_uses % STAGES), phase=(ring_uses // STAGES) & 1)\n"
        "        _dbg(io.dbg_ptr, 9 + 5 * WG, False)\n")
p = sub(p, "        mbarrier.arrive(empty.index(last))\n    acc, m_i, l_i = _pingpong_masked_tiles(",
        "        mbarrier.arrive(empty.index(last))\n    _dbg(io.dbg_ptr, 10 + 5 * WG, False)\n"
        "    acc, m_i, l_i = _pingpong_masked_tiles(")
p = sub(p, "                                           HALF_M, BLOCK_N)\n    _store_rows(acc, m_i, l_i, it.b",
        "                                           HALF_M, BLOCK_N)\n    _dbg(io.dbg_ptr, 11 + 5 * WG, False)\n"
        "    _store_rows(acc, m_i, l_i, it.b")
p = sub(p, "                o_layout, 0, GROUP, HEAD_DIM, HALF_M, SINGLE_SPLIT)\n    ring_uses, own_uses = _uses_after(",
        "                o_layout, 0, GROUP, HEAD_DIM, HALF_M, SINGLE_SPLIT)\n    _dbg(io.dbg_ptr, 12 + 5 * WG, False)\n"
        "    ring_uses, own_uses = _uses_after(")
p = sub(p, "    if FUSED_MERGE:\n        # the partitions have joined", "    _dbg2(dbg_ptr, 2)\n    if FUSED_MERGE:\n"
        "        # the partitions have joined")
assert p.endswith("                                MERGE_VECTOR)\n")
p += "    _dbg2(dbg_ptr, 4)\n"
open(PP, "w").write(p)

# the Triton kernel takes the argument and ignores it; the CPU compile check types it
c = open("kernels/compile_check.py").read()
c = sub(c, 'counts_ptr="*i32",', 'counts_ptr="*i32", dbg_ptr="*i64",')
open("kernels/compile_check.py", "w").write(c)
print("instrumented")
