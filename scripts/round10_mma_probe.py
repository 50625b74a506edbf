"""Round 10's probe (kernels/PERF.md, round 10): what the tail warpgroup's N = 8 MMAs cost on the
tensor cores, alone and beside the two 64-row warpgroups' MMAs, against warp-level ``mma.sync``.

Each program runs, on the same shared-memory tiles as the ping-pong kernel's (64 keys x 128
dims), a warp-specialised loop per role with no synchronisation between roles:

- ``main``: two warpgroups, each per iteration the MMAs of one key tile of its 64 query rows
  (S = q.K^T: 8 x m64n64k16, then acc += P.V: 4 x m64n128k16);
- ``tail``: one warpgroup, per iteration the tail's MMAs of one key tile of 8 rows, either as the
  kernel issues them (``wgmma``: S^T = K.q^T and O^T += V^T.P^T, 16 x m64n8k16) or as warp-level
  ``mma.sync`` (``mma_v2``: the same products, 16 x m16n8k16 a warp, operands loaded from shared
  memory every iteration).

One program per SM; the time per iteration is the kernel's time over the iterations. Run
``main`` alone, the tail alone and both together: if the tail's MMAs only took their FLOPs' share
of the tensor cores, both together would take about the main loop's time.

    python3 scripts/round10_mma_probe.py            # prints one JSON line per run
"""
import json
import sys

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

_cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier

BLOCK_N = 64
HEAD_DIM = 128


@gluon.jit
def _fill(smem, ptr, ROWS: gl.constexpr, COLS: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    r = gl.arange(0, ROWS, layout=gl.SliceLayout(1, layout))
    c = gl.arange(0, COLS, layout=gl.SliceLayout(0, layout))
    smem.store(gl.load(ptr + gl.expand_dims(r, 1) * COLS + gl.expand_dims(c, 0)))


@gluon.jit
def _main_role(WG: gl.constexpr, q_smem, k_smem, v_smem, p_smem, out_ptr, iters):
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, 64, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, 128, 16])
    s = gl.zeros([64, 64], gl.float32, s_layout)
    acc = gl.zeros([64, 128], gl.float32, o_layout)
    for _ in range(iters):
        s_tok = warpgroup_mma(q_smem, k_smem.permute((1, 0)), s, is_async=True)
        a_tok = warpgroup_mma(p_smem, v_smem, acc, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(a_tok, ))
    gl.store(out_ptr + WG * 4 + gl.program_id(0) * 16, gl.sum(gl.sum(s, 1), 0) + gl.sum(gl.sum(acc, 1), 0))


@gluon.jit
def _tail_role(qt_smem, k_smem, v_smem, pt_smem, out_ptr, iters, TAIL_N: gl.constexpr, KIND: gl.constexpr):
    if KIND == 0:
        st_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                            instr_shape=[16, TAIL_N, 16])
        st = gl.zeros([64, TAIL_N], gl.float32, st_layout)
        ot = gl.zeros([128, TAIL_N], gl.float32, st_layout)
        for _ in range(iters):
            s_tok = warpgroup_mma(k_smem, qt_smem.permute((1, 0)), st, is_async=True)
            o_tok = warpgroup_mma(v_smem.permute((1, 0)), pt_smem.permute((1, 0)), ot, is_async=True)
            st = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))
            ot = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok, ))
    else:
        mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[4, 1],
                                                             instr_shape=[16, 8])
        a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_layout, k_width=2)
        b_layout: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma_layout, k_width=2)
        st = gl.zeros([64, TAIL_N], gl.float32, mma_layout)
        ot = gl.zeros([128, TAIL_N], gl.float32, mma_layout)
        for _ in range(iters):
            st = mma_v2(k_smem.load(a_layout), qt_smem.permute((1, 0)).load(b_layout), st)
            ot = mma_v2(v_smem.permute((1, 0)).load(a_layout), pt_smem.permute((1, 0)).load(b_layout), ot)
    gl.store(out_ptr + 8 + gl.program_id(0) * 16, gl.sum(gl.sum(st, 1), 0) + gl.sum(gl.sum(ot, 1), 0))


@gluon.jit
def _load_role(iters):
    pass


@gluon.jit
def _probe_kernel(src_ptr, out_ptr, main_iters, tail_iters, TAIL_N: gl.constexpr, KIND: gl.constexpr,
                  num_warps: gl.constexpr):
    dtype: gl.constexpr = gl.bfloat16
    sl64: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, 128], dtype)
    q_smem = gl.allocate_shared_memory(dtype, [2, 64, 128], sl64)
    k_smem = gl.allocate_shared_memory(dtype, [64, 128], sl64)
    v_smem = gl.allocate_shared_memory(dtype, [64, 128], sl64)
    p_smem = gl.allocate_shared_memory(dtype, [64, 64], gl.NVMMASharedLayout.get_default_for([64, 64], dtype))
    qt_smem = gl.allocate_shared_memory(dtype, [TAIL_N, 128], gl.NVMMASharedLayout.get_default_for([TAIL_N, 128],
                                                                                                  dtype))
    pt_smem = gl.allocate_shared_memory(dtype, [TAIL_N, 64], gl.NVMMASharedLayout.get_default_for([TAIL_N, 64],
                                                                                                 dtype))
    _fill(q_smem.index(0), src_ptr, 64, 128)
    _fill(q_smem.index(1), src_ptr + 64 * 128, 64, 128)
    _fill(k_smem, src_ptr + 2 * 64 * 128, 64, 128)
    _fill(v_smem, src_ptr + 3 * 64 * 128, 64, 128)
    _fill(p_smem, src_ptr + 4 * 64 * 128, 64, 64)
    _fill(qt_smem, src_ptr + 5 * 64 * 128, TAIL_N, 128)
    _fill(pt_smem, src_ptr + 6 * 64 * 128, TAIL_N, 64)
    fence_async_shared()
    _cta_barrier()
    gl.warp_specialize([
        (_main_role, (0, q_smem.index(0), k_smem, v_smem, p_smem, out_ptr, main_iters)),
        (_main_role, (1, q_smem.index(1), k_smem, v_smem, p_smem, out_ptr, main_iters)),
        (_load_role, (main_iters, )),
        (_tail_role, (qt_smem, k_smem, v_smem, pt_smem, out_ptr, tail_iters, TAIL_N, KIND)),
    ], [4, 1, 4], [208, 24, 72])


def run(main_iters, tail_iters, tail_n=8, kind=0, programs=None):
    programs = programs or torch.cuda.get_device_properties(0).multi_processor_count
    src = torch.randn(8 * 64 * 128, device="cuda", dtype=torch.bfloat16) * 0.05
    out = torch.zeros(programs * 16, device="cuda", dtype=torch.float32)

    def call():
        _probe_kernel[(programs, )](src, out, main_iters, tail_iters, TAIL_N=tail_n, KIND=kind, num_warps=4)

    call()
    torch.cuda.synchronize()
    ms = triton.testing.do_bench(call, warmup=50, rep=300)
    iters = max(main_iters, tail_iters, 1)
    return dict(main_iters=main_iters, tail_iters=tail_iters, tail_n=tail_n,
                tail=("wgmma", "mma_v2")[kind], us=round(ms * 1e3, 2), us_per_iter=round(ms * 1e3 / iters, 4))


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    runs = [(n, 0, 8, 0), (0, n, 8, 0), (0, n, 16, 0), (0, n, 32, 0), (0, n, 8, 1), (n, n, 8, 0), (n, n, 16, 0),
            (n, n, 8, 1)]
    for main_iters, tail_iters, tail_n, kind in runs:
        try:
            print(json.dumps(run(main_iters, tail_iters, tail_n, kind)), flush=True)
        except Exception as exc:  # report and go on: one variant failing to build says something too
            print(json.dumps(dict(main_iters=main_iters, tail_iters=tail_iters, tail_n=tail_n, kind=kind,
                                  error=f"{type(exc).__name__}: {str(exc)[:300]}")), flush=True)


if __name__ == "__main__":
    main()
