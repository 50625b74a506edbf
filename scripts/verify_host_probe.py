"""Host time of eager tree-verify calls, back to back without synchronisation, on a GPU: the direct
launch against Triton's dispatch per shape, what the parts of a call cost alone (the floor), a
cProfile of the direct calls, and the direct launch's output against Triton's (bitwise). Run from
the repository root: python3 scripts/verify_host_probe.py OUT_DIR"""
import cProfile
import io
import json
import pstats
import statistics
import sys
import time

import torch
import triton
import triton.language as tl

from specdec_kernels import tree_verify_attention
from specdec_kernels.bench import make_inputs, quick_shapes
from specdec_kernels.triton_launch import DirectLaunch, direct_launch_unusable
from specdec_kernels import tree_verify_triton as tvt
from specdec_kernels.verify_plan import VerifyPolicy

out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
ORDINARY = VerifyPolicy(launch_cache=False)


def host_us(fn, n=300, repeats=5):
    """Median over repeats of host us a call of n back-to-back calls (synchronised between repeats)."""
    for _ in range(20):
        fn()
    samples = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - start) * 1e6 / n)
    torch.cuda.synchronize()
    return round(statistics.median(samples), 2), round(min(samples), 2)


@triton.jit
def _empty_kernel(x_ptr):
    pass


result = {"triton": triton.__version__, "torch": torch.__version__, "direct_unusable": direct_launch_unusable(),
          "shapes": {}, "floor": {}}
print(json.dumps({k: result[k] for k in ("triton", "torch", "direct_unusable")}), flush=True)
device = torch.device("cuda")
for shape in quick_shapes():
    args = make_inputs(shape, device, 0)
    plan = tvt.plan_call(*args[:3])
    ordinary_out = tvt.tree_verify_attention_triton(*args, policy=ORDINARY)
    first = tvt.tree_verify_attention_triton(*args)
    direct_out = tvt.tree_verify_attention_triton(*args)
    torch.cuda.synchronize()
    row = {"kernel": plan.kernel, "splits": plan.num_splits, "tma": plan.tma,
           "direct_entries": sum(v is not None for v in tvt._DIRECT.values()),
           "bitwise_equal": bool(torch.equal(ordinary_out, direct_out) and torch.equal(first, direct_out)),
           "direct": host_us(lambda: tvt.tree_verify_attention_triton(*args)),
           "ordinary": host_us(lambda: tvt.tree_verify_attention_triton(*args, policy=ORDINARY)),
           "public_api": host_us(lambda: tree_verify_attention(*args))}
    result["shapes"][shape.name] = row
    print(shape.name, json.dumps(row), flush=True)

# the parts of one call alone, at B8-T17-H32/8/128-L8192 (a split kernel and a merge) and
# B8-T65-H32/8/128-L8192 (one split: no merge)
def parts(shape):
    q, k, v, lens, mask = make_inputs(shape, device, 0)
    tvt.tree_verify_attention_triton(q, k, v, lens, mask)
    plan = tvt.plan_call(q, k, v)
    direct = next(d for key, d in tvt._DIRECT.items() if key[0] == q.shape and key[5] == k.shape and d is not None)
    out = torch.empty_like(q)
    ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr(), lens.data_ptr(), mask.data_ptr(), out.data_ptr())
    stream = torch._C._cuda_getCurrentRawStream(0)
    ws = tvt._workspace(0, stream, max(direct.workspace_numel, 1))
    part_o, part_lse = (ws.data_ptr(), ws.data_ptr() + direct.workspace_split) if direct.merge else (ptrs[5],) * 2
    kd = (k.data_ptr(),) if direct.k_desc is None else (tvt.tensor_map(ptrs[1], direct.k_desc[0]), *direct.k_desc[1])
    vd = (v.data_ptr(),) if direct.v_desc is None else (tvt.tensor_map(ptrs[2], direct.v_desc[0]), *direct.v_desc[1])
    split_args = (*ptrs[:3], *kd, *vd, *ptrs[3:], part_o, part_lse, *direct.strides, direct.scale, *direct.sizes)
    result = {
        "plan": plan.kernel + f" splits {plan.num_splits} descriptors {direct.k_desc is not None}",
        "whole call": host_us(lambda: tvt.tree_verify_attention_triton(q, k, v, lens, mask)),
        "empty_like(q)": host_us(lambda: torch.empty_like(q, memory_format=torch.contiguous_format), n=1000),
        "empty(q.shape)": host_us(lambda: torch.empty(q.shape, dtype=q.dtype, device=q.device), n=1000),
        "q.new_empty(q.shape)": host_us(lambda: q.new_empty(q.shape), n=1000),
        "plan_call": host_us(lambda: tvt.plan_call(q, k, v), n=1000),
        "DirectCall (all launches)": host_us(lambda: direct(ptrs, None, 0)),
        "split C launch": host_us(lambda: direct.split(stream, split_args)),
        "tensor_map lookup": host_us(lambda: tvt.tensor_map(ptrs[1], direct.k_desc[0]) if direct.k_desc else None,
                                     n=1000),
        "_workspace lookup": host_us(lambda: tvt._workspace(0, stream, direct.workspace_numel), n=1000),
    }
    if direct.merge:
        merge_args = (part_o, part_lse, ptrs[5], *direct.merge_ints)
        result["merge C launch"] = host_us(lambda: direct.merge(stream, merge_args))
    return result


x = torch.empty(16, device=device)
compiled = _empty_kernel[(1,)](x)
empty = DirectLaunch.build(compiled, (1,), 1, (), {})
result["floor"] = {
    "empty kernel C launch": host_us(lambda: empty(torch._C._cuda_getCurrentRawStream(0), (x.data_ptr(),)), n=1000),
    "empty kernel via Triton dispatch": host_us(lambda: _empty_kernel[(1,)](x), n=1000),
    "torch x.zero_() (one torch launch)": host_us(lambda: x.zero_(), n=1000),
    **{shape.name: parts(shape) for shape in (quick_shapes()[1], quick_shapes()[2])},
}
print(json.dumps(result["floor"], indent=1), flush=True)
shape = quick_shapes()[1]
q, k, v, lens, mask = make_inputs(shape, device, 0)
tvt.tree_verify_attention_triton(q, k, v, lens, mask)

profile = cProfile.Profile()
profile.enable()
for _ in range(300):
    tvt.tree_verify_attention_triton(q, k, v, lens, mask)
profile.disable()
torch.cuda.synchronize()
text = io.StringIO()
pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(18)
print(text.getvalue()[:4000])
with open(f"{out_dir}/host_probe.json", "w") as f:
    json.dump(result, f, indent=1)
