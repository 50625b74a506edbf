"""Probe only: a tree-only item of the ping-pong kernel (no prefix tile: the tree's own split)
prefetches its rows' ancestor-mask words into L2 before its q load, so that its first tree tile's
visibility finds them there.   python3 patch.py  -- edits kernels/ in place (git checkout kernels/)."""
PP = "kernels/tree_verify_gluon_pingpong.py"
p = open(PP).read()
old = "    q = _load_q_rows(io.q_ptr, it.b, it.kv_head, my_rows, num_rows, st.stride_qb, st.stride_qt, st.stride_qh, GROUP,\n"
assert p.count(old) == 1
new = """    if n_full == 0:
        pf_rows = my_rows + gl.arange(0, HALF_M, layout=gl.SliceLayout(1, s_layout))
        pf_ptr = (io.mask_ptr + it.b.to(gl.int64) * st.stride_mb
                  + (gl.minimum(pf_rows, num_rows - 1) // GROUP) * st.stride_mt)
        gl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [pf_ptr], dtype=gl.int32,
                                  is_pure=False, pack=1)
""" + old
p = p.replace(old, new)
open(PP, "w").write(p)
print("patched")
