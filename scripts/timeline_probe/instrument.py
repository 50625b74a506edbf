"""Probe only: add clock64 stamps to the ping-pong warpgroups (apply on the device, then restore);
with "recip", the epilogue multiplies by 1/l; with "prefetch", each warpgroup prefetches its rows'
ancestor-mask words into L2 at the start of an item.
python3 instrument.py [recip] [prefetch]  -- edits kernels/ in place; git checkout kernels/ restores them."""
import sys

PP = "kernels/tree_verify_gluon_pingpong.py"
ST = "kernels/tree_verify_pingpong_state.py"
TR = "kernels/tree_verify_triton.py"


def sub(text, old, new, count=1):
    assert text.count(old) >= 1, old
    return text.replace(old, new, count)


s = open(ST).read()
s = sub(s, "    part_lse_ptr: gl.tensor\n", "    part_lse_ptr: gl.tensor\n    dbg_ptr: gl.tensor\n")
open(ST, "w").write(s)

p = open(PP).read()
p = sub(p, "io = RowPointers(q_ptr, mask_ptr, out_ptr, part_o_ptr, part_lse_ptr)",
        "io = RowPointers(q_ptr, mask_ptr, out_ptr, part_o_ptr, part_lse_ptr, counts_ptr)")
stamp = '''

@gluon.jit
def _stamp(io, WG: gl.constexpr, K: gl.constexpr):
    pid = gl.program_id(0) + gl.program_id(1) * gl.num_programs(0)
    t = gl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l,r", [pid], dtype=gl.int64, is_pure=False, pack=1)
    gl.store(io.dbg_ptr + (pid * 4 + WG) * 16 + K, t)


@gluon.jit
def _gstamp(io, WG: gl.constexpr, K: gl.constexpr):
    pid = gl.program_id(0) + gl.program_id(1) * gl.num_programs(0)
    t = gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [pid], dtype=gl.int64, is_pure=False, pack=1)
    gl.store(io.dbg_ptr + (pid * 4 + WG) * 16 + K, t)


@gluon.jit
def _pingpong_mma_item('''
p = sub(p, "\n\n@gluon.jit\ndef _pingpong_mma_item(", stamp)
p = sub(p, "    num_rows = num_nodes * GROUP\n    it = _work_item(w, c.items, BLOCK_N)\n",
        "    _gstamp(io, WG, 6)\n    _stamp(io, WG, 0)\n    num_rows = num_nodes * GROUP\n    it = _work_item(w, c.items, BLOCK_N)\n")
p = sub(p, "    acc = gl.zeros([HALF_M, HEAD_DIM], gl.float32, o_layout)\n    m_i = gl.full([HALF_M]",
        "    _stamp(io, WG, 1)\n    acc = gl.zeros([HALF_M, HEAD_DIM], gl.float32, o_layout)\n    m_i = gl.full([HALF_M]")
p = sub(p, "    if n_full > 0:\n        mbarrier.wait(ready.index(ring_uses % STAGES), phase=(ring_uses // STAGES) & 1)\n",
        "    if n_full > 0:\n        mbarrier.wait(ready.index(ring_uses % STAGES), phase=(ring_uses // STAGES) & 1)\n"
        "        _stamp(io, WG, 2)\n")
p = sub(p, "        mbarrier.arrive(empty.index(last))\n    acc, m_i, l_i = _pingpong_masked_tiles(",
        "        mbarrier.arrive(empty.index(last))\n    _stamp(io, WG, 3)\n    acc, m_i, l_i = _pingpong_masked_tiles(")
p = sub(p, "                                           HALF_M, BLOCK_N)\n    _store_rows(acc, m_i, l_i, it.b",
        "                                           HALF_M, BLOCK_N)\n    _stamp(io, WG, 4)\n    _store_rows(acc, m_i, l_i, it.b")
p = sub(p, "                o_layout, 0, GROUP, HEAD_DIM, HALF_M, SINGLE_SPLIT)\n    ring_uses, own_uses = _uses_after(",
        "                o_layout, 0, GROUP, HEAD_DIM, HALF_M, SINGLE_SPLIT)\n    _stamp(io, WG, 5)\n    _gstamp(io, WG, 7)\n"
        "    ring_uses, own_uses = _uses_after(")
p = sub(p, "def _pingpong_masked_tiles(acc, m_i, l_i, q_op, masked, mask_ptr,",
        "def _pingpong_masked_tiles(io, WG: gl.constexpr, acc, m_i, l_i, q_op, masked, mask_ptr,")
p = sub(p, "    acc, m_i, l_i = _pingpong_masked_tiles(acc, m_i, l_i, q_op, masked, io.mask_ptr,",
        "    acc, m_i, l_i = _pingpong_masked_tiles(io, WG, acc, m_i, l_i, q_op, masked, io.mask_ptr,")
p = sub(p, """        visible = _masked_tile_visibility(i, masked, mask_rows, row_ok, cols_s, 0)
        kx_smem, vx_smem, buf = _take_masked_tile(i, masked, 1, ld_layout)
        acc, m_i, l_i = _masked_tile_mma(acc, m_i, l_i, q_op, kx_smem, vx_smem, visible, qk_scale, s_layout,
                                         o_layout, p_layout, BLOCK_M, BLOCK_N)
""", """        visible = _masked_tile_visibility(i, masked, mask_rows, row_ok, cols_s, 0)
        if i == masked.n_masked - 1:
            _stamp(io, WG, 8)
        kx_smem, vx_smem, buf = _take_masked_tile(i, masked, 1, ld_layout)
        if i == masked.n_masked - 1:
            _stamp(io, WG, 9)
        acc, m_i, l_i = _masked_tile_mma(acc, m_i, l_i, q_op, kx_smem, vx_smem, visible, qk_scale, s_layout,
                                         o_layout, p_layout, BLOCK_M, BLOCK_N)
        if i == masked.n_masked - 1:
            _stamp(io, WG, 10)
""")
if "fine" in sys.argv:
    p = sub(p, "def _stamp(io, WG: gl.constexpr, K: gl.constexpr):", """def _stamp_on(io, WG: gl.constexpr, K: gl.constexpr, dep):
    pid = gl.program_id(0) + gl.program_id(1) * gl.num_programs(0)
    t = gl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l,r", [dep], dtype=gl.int64, is_pure=False, pack=1)
    gl.store(io.dbg_ptr + (pid * 4 + WG) * 16 + K, t)


@gluon.jit
def _stamp(io, WG: gl.constexpr, K: gl.constexpr):""")
    p = sub(p, """        if i == masked.n_masked - 1:
            _stamp(io, WG, 8)
""", """        if i == masked.n_masked - 1:
            _stamp_on(io, WG, 8, gl.max(gl.max(visible.to(gl.int32), 1), 0))
""")
    p = sub(p, """        acc, m_i, l_i = _masked_tile_mma(acc, m_i, l_i, q_op, kx_smem, vx_smem, visible, qk_scale, s_layout,
                                         o_layout, p_layout, BLOCK_M, BLOCK_N)
        if i == masked.n_masked - 1:""", """        if i == masked.n_masked - 1:
            s = warpgroup_mma(q_op, kx_smem.permute((1, 0)), gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout),
                              use_acc=False)
            _stamp_on(io, WG, 11, gl.max(gl.max(s, 1), 0).to(gl.int32))
            s = gl.where(visible, s, float("-inf"))
            p_, alpha_o, m_i, l_i = _softmax_step(s, m_i, l_i, qk_scale, s_layout, o_layout)
            acc = acc * gl.expand_dims(alpha_o, 1)
            p_op = gl.convert_layout(p_.to(kx_smem.dtype), p_layout)
            _stamp_on(io, WG, 12, gl.max(gl.max(p_, 1), 0).to(gl.int32))
            acc = warpgroup_mma(p_op, vx_smem, acc)
        else:
            acc, m_i, l_i = _masked_tile_mma(acc, m_i, l_i, q_op, kx_smem, vx_smem, visible, qk_scale, s_layout,
                                             o_layout, p_layout, BLOCK_M, BLOCK_N)
        if i == masked.n_masked - 1:""")
    p = sub(p, "from .tree_verify_gluon import (_cta_barrier,", "from .tree_verify_gluon import (_softmax_step as _softmax_step_x, _cta_barrier,")
    p = p.replace("p_, alpha_o, m_i, l_i = _softmax_step(s,", "p_, alpha_o, m_i, l_i = _softmax_step_x(s,")
if "prefetch" in sys.argv:
    p = sub(p, "    q = _load_q_rows(io.q_ptr, it.b, it.kv_head, my_rows, num_rows,",
            """    pf_rows = my_rows + gl.arange(0, HALF_M, layout=gl.SliceLayout(1, s_layout))
    pf_ptr = io.mask_ptr + it.b.to(gl.int64) * st.stride_mb + (gl.minimum(pf_rows, num_rows - 1) // GROUP) * st.stride_mt
    gl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [pf_ptr], dtype=gl.int32,
                              is_pure=False, pack=1)
    q = _load_q_rows(io.q_ptr, it.b, it.kv_head, my_rows, num_rows,""")
open(PP, "w").write(p)
if "recip" in sys.argv:
    g = open("kernels/tree_verify_gluon.py").read()
    g = sub(g, "    out = acc / gl.expand_dims(l_safe, D_AXIS)\n", "    out = acc * gl.expand_dims(1.0 / l_safe, D_AXIS)\n")
    open("kernels/tree_verify_gluon.py", "w").write(g)

t = open(TR).read()
t = sub(t, "            out if counts is None else counts, *ints)",
        "            (DEBUG_BUF if DEBUG_BUF is not None else out) if counts is None else counts, *ints)")
t = sub(t, "\ndef _launch_through_triton(", "\nDEBUG_BUF = None\n\n\ndef _launch_through_triton(")
open(TR, "w").write(t)
print("instrumented", sys.argv[1:])
