"""Probe: may a warpgroup MMA read a 32-row slice of a 64-row, 256-wide NVMMA shared tile, and may a
TMA load of a 32-row box land in such a slice? Prints max errors against torch."""
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared


@gluon.jit
def _probe(q_ptr, k_desc, k32_desc, v_desc, s_ptr, o_ptr, st_ptr, st2_ptr, TAIL: gl.constexpr):
    D: gl.constexpr = 256
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    s_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 32, 16])
    o_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    t_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, TAIL, 16])
    p_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_l, k_width=2)
    kv_l: gl.constexpr = k_desc.layout
    k_s = gl.allocate_shared_memory(gl.bfloat16, [64, D], kv_l)
    k2_s = gl.allocate_shared_memory(gl.bfloat16, [64, D], kv_l)
    v_s = gl.allocate_shared_memory(gl.bfloat16, [64, D], kv_l)
    q_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, D], gl.bfloat16)
    q_s = gl.allocate_shared_memory(gl.bfloat16, [64, D], q_l)
    qt_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([TAIL, D], gl.bfloat16)
    qt_s = gl.allocate_shared_memory(gl.bfloat16, [TAIL, D], qt_l)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    fence_async_shared()
    mbarrier.expect(bar, 3 * 64 * D * 2)
    _tma_load(k_desc, [0, 0], bar, k_s)
    _tma_load(v_desc, [0, 0], bar, v_s)
    # k2: two 32-row boxes into the slices of one 64-row tile
    _tma_load(k32_desc, [0, 0], bar, k2_s.slice(0, 32))
    _tma_load(k32_desc, [32, 0], bar, k2_s.slice(32, 32))
    rows = gl.arange(0, 64, layout=gl.SliceLayout(1, ld))
    cols = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
    q = gl.load(q_ptr + gl.expand_dims(rows, 1) * D + gl.expand_dims(cols, 0))
    q_s.store(q)
    trows = gl.arange(0, TAIL, layout=gl.SliceLayout(1, ld))
    qt = gl.load(q_ptr + gl.expand_dims(trows, 1) * D + gl.expand_dims(cols, 0))
    qt_s.store(qt)
    fence_async_shared()
    mbarrier.wait(bar, phase=0)
    acc = gl.zeros([64, D], gl.float32, o_l)
    srows = gl.arange(0, 64, layout=gl.SliceLayout(1, s_l))
    scols = gl.arange(0, 32, layout=gl.SliceLayout(0, s_l))
    for h in gl.static_range(2):
        tok = warpgroup_mma(q_s, k_s.slice(h * 32, 32).permute((1, 0)), gl.zeros([64, 32], gl.float32, s_l),
                            use_acc=False, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(tok, ))
        gl.store(s_ptr + gl.expand_dims(srows, 1) * 64 + h * 32 + gl.expand_dims(scols, 0), s)
        p = gl.convert_layout((s * 0.01).to(gl.bfloat16), p_l)
        tok = warpgroup_mma(p, v_s.slice(h * 32, 32), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(tok, ))
    orows = gl.arange(0, 64, layout=gl.SliceLayout(1, o_l))
    ocols = gl.arange(0, D, layout=gl.SliceLayout(0, o_l))
    gl.store(o_ptr + gl.expand_dims(orows, 1) * D + gl.expand_dims(ocols, 0), acc)
    # the tail's key-major product on the whole 64-row tiles (the TMA-loaded one and the two-box one)
    st = warpgroup_mma(k_s, qt_s.permute((1, 0)), gl.zeros([64, TAIL], gl.float32, t_l), use_acc=False)
    st2 = warpgroup_mma(k2_s, qt_s.permute((1, 0)), gl.zeros([64, TAIL], gl.float32, t_l), use_acc=False)
    trs = gl.arange(0, 64, layout=gl.SliceLayout(1, t_l))
    tcs = gl.arange(0, TAIL, layout=gl.SliceLayout(0, t_l))
    off = gl.expand_dims(trs, 1) * TAIL + gl.expand_dims(tcs, 0)
    gl.store(st_ptr + off, st)
    gl.store(st2_ptr + off, st2)


def main():
    torch.manual_seed(0)
    D, TAIL = 256, 8
    q = torch.randn(64, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(64, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(64, D, device="cuda", dtype=torch.bfloat16)
    lay = gl.NVMMASharedLayout.get_default_for([64, D], gl.bfloat16)
    lay32 = gl.NVMMASharedLayout.get_default_for([32, D], gl.bfloat16)
    print("layouts", lay, lay32, lay == lay32)
    kd = TensorDescriptor(k, shape=[64, D], strides=[D, 1], block_shape=[64, D], layout=lay)
    k32d = TensorDescriptor(k, shape=[64, D], strides=[D, 1], block_shape=[32, D], layout=lay32)
    vd = TensorDescriptor(v, shape=[64, D], strides=[D, 1], block_shape=[64, D], layout=lay)
    s = torch.empty(64, 64, device="cuda")
    o = torch.empty(64, D, device="cuda")
    st = torch.empty(64, TAIL, device="cuda")
    st2 = torch.empty(64, TAIL, device="cuda")
    _probe[(1, )](q, kd, k32d, vd, s, o, st, st2, TAIL, num_warps=4)
    torch.cuda.synchronize()
    s_ref = q.float() @ k.float().T
    p = (s_ref * 0.01).bfloat16().float()
    o_ref = p @ v.float()
    st_ref = k.float() @ q[:TAIL].float().T
    for name, got, ref in (("S via row slices of K", s, s_ref), ("P.V via row slices of V", o, o_ref),
                           ("tail S^T on the 64-row tile", st, st_ref), ("tail S^T on two 32-row TMA boxes", st2, st_ref)):
        err = (got - ref).abs().max().item() / ref.abs().max().item()
        print(f"{name}: max rel err {err:.2e} {'OK' if err < 2e-2 else 'WRONG'}")


if __name__ == "__main__":
    main()
