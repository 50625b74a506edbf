"""The cluster barrier alone: a Gluon kernel that stores, arrives, waits, then reads a neighbour's
store, launched without a cluster (a cluster of one)."""
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from specdec_kernels.tree_verify_gluon import _cluster_arrive, _cluster_wait


@gluon.jit
def _k(x_ptr, num_warps: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    offs = gl.arange(0, 32 * num_warps, layout)
    gl.store(x_ptr + gl.program_id(0) * 32 * num_warps + offs, offs)
    _cluster_arrive()
    _cluster_wait()
    v = gl.load(x_ptr + gl.program_id(0) * 32 * num_warps + (offs + 1) % (32 * num_warps))
    gl.store(x_ptr + gl.program_id(0) * 32 * num_warps + offs, v)


x = torch.zeros(4 * 128, device="cuda", dtype=torch.int32)
_k[(4,)](x, num_warps=4)
torch.cuda.synchronize()
print("tiny: ok", x[:4].tolist())
