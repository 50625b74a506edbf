"""Host time of eager tree-verify calls on a GPU (an experiment, not kept): the launcher of this
commit against the one of the commit before (same host, same inputs, the bench's method: host time
of batches of 32 back-to-back calls from an idle GPU, median of 8), eager GPU time with the merge
folded into the split kernel or launched after it, and what the parts of a call cost alone. Run
from the repository root with the previous launcher's package copied to _old/specdec_kernels_old:
python3 scripts/verify_host_probe.py OUT_DIR"""
import json
import statistics
import sys
import time

import torch
import triton

sys.path.insert(0, "_old")

from specdec_kernels import tree_verify_triton as tvt  # noqa: E402
from specdec_kernels.bench import make_inputs, quick_shapes, row_error, time_eagerly, warm_compile  # noqa: E402
from specdec_kernels.triton_launch import DirectLaunch, launch_hooks_set, tensor_map  # noqa: E402
from specdec_kernels.verify_plan import VerifyPolicy  # noqa: E402


def host_us(fn, batches=20, calls=32):
    """Median over batches (each from an idle GPU) of host us a call of ``calls`` back-to-back calls."""
    for _ in range(10):
        fn()
    samples = []
    for _ in range(batches):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) * 1e6 / calls)
    torch.cuda.synchronize()
    return round(statistics.median(samples), 2)


@triton.jit
def _empty_kernel(x_ptr):
    pass


def parts(shape, old_tvt, device):
    q, k, v, lens, mask = make_inputs(shape, device, 0)
    tvt.tree_verify_attention_triton(q, k, v, lens, mask)
    tvt.tree_verify_attention_triton(q, k, v, lens, mask)
    dev = torch._C._cuda_getDevice()
    out = torch.empty_like(q)

    def key():
        return (q.shape, q.stride(), q.dtype, q.get_device(), torch._C._cuda_getDevice(), k.shape, k.stride(),
                v.shape, v.stride(), lens.dtype, True, tvt.DEFAULT_POLICY, None)

    direct = tvt._DIRECT[key()]
    ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr(), lens.data_ptr(), mask.data_ptr(), out.data_ptr())
    stream = torch._C._cuda_getCurrentRawStream(dev)
    split = direct.fused if direct.can_fuse else direct.split
    ws, counts = tvt._reused_workspace(dev, stream, max(direct.workspace_numel, 1), direct.items)
    part_o, part_lse = (ws.data_ptr(), ws.data_ptr() + direct.workspace_split)
    kd = (tensor_map(ptrs[1], direct.k_desc[0]), *direct.k_desc[1])
    vd = (tensor_map(ptrs[2], direct.v_desc[0]), *direct.v_desc[1])
    split_args = (*ptrs[:3], *kd, *vd, *ptrs[3:], part_o, part_lse, counts.data_ptr(), *direct.strides, direct.scale,
                  *direct.sizes)

    def checks():
        return ((ptrs[0] | ptrs[1] | ptrs[2] | ptrs[3] | ptrs[4] | ptrs[5]) & 15 == 0 and k.is_cuda and v.is_cuda
                and lens.is_cuda and mask.is_cuda and out.is_cuda and mask.is_contiguous() and lens.is_contiguous()
                and not launch_hooks_set())

    k0 = key()
    row = {
        "launches": 1 if (direct.can_fuse or not direct.has_merge) else 2,
        "whole call": host_us(lambda: tvt.tree_verify_attention_triton(q, k, v, lens, mask)),
        "whole call, previous launcher": host_us(lambda: old_tvt.tree_verify_attention_triton(q, k, v, lens, mask)),
        "empty_like(q)": host_us(lambda: torch.empty_like(q, memory_format=torch.contiguous_format)),
        "empty_like(q), preserve format": host_us(lambda: torch.empty_like(q)),
        "q.new_empty(q.shape)": host_us(lambda: q.new_empty(q.shape)),
        "signature key": host_us(key),
        "key lookup": host_us(lambda: tvt._DIRECT.get(k0)),
        "6 data_ptr": host_us(lambda: (q.data_ptr(), k.data_ptr(), v.data_ptr(), lens.data_ptr(), mask.data_ptr(),
                                       out.data_ptr())),
        "checks": host_us(checks),
        "DirectCall (its launches)": host_us(lambda: direct(ptrs, None, dev)),
        "split C launch": host_us(lambda: split(stream, split_args)),
        "stream + capture query": host_us(lambda: (torch._C._cuda_getCurrentRawStream(dev),
                                                   torch._C._cuda_isCurrentStreamCapturing())),
        "workspace + counts lookup": host_us(lambda: tvt._reused_workspace(dev, stream, direct.workspace_numel,
                                                                           direct.items)),
        "2 tensor_map lookups": host_us(lambda: (tensor_map(ptrs[1], direct.k_desc[0]),
                                                 tensor_map(ptrs[2], direct.v_desc[0]))),
    }
    if direct.merge is not None and not direct.can_fuse:
        merge_args = (part_o, part_lse, ptrs[5], *direct.merge_ints)
        row["merge C launch"] = host_us(lambda: direct.merge(stream, merge_args))
    return row


def main():
    import specdec_kernels_old.bench as old_bench
    import specdec_kernels_old.tree_verify_triton as old_tvt

    out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
    device = torch.device("cuda")
    result = {"triton": triton.__version__, "torch": torch.__version__, "shapes": {}, "parts": {}}
    started = time.time()
    warm_compile(quick_shapes(), 12)
    old_bench.warm_compile(old_bench.quick_shapes(), 12)
    result["warm_compile_s"] = round(time.time() - started, 1)
    print("warm compile", result["warm_compile_s"], "s", flush=True)
    no_fuse = VerifyPolicy(fused_merge=False)
    fuse_more = VerifyPolicy(fused_merge_max_bytes=4 << 20)
    shapes = quick_shapes()
    for shape in shapes:
        sets = [make_inputs(shape, device, 100 + j) for j in range(4)]
        plan = tvt.plan_call(*sets[0][:3])
        row = {"kernel": plan.kernel, "splits": plan.num_splits, "fused": bool(plan.merge and plan.merge.fused)}
        runs = {"new": lambda *a: tvt.tree_verify_attention_triton(*a),
                "old": lambda *a: old_tvt.tree_verify_attention_triton(*a)}
        if plan.merge is not None:
            runs["new, merge launched"] = lambda *a: tvt.tree_verify_attention_triton(*a, policy=no_fuse)
            if not plan.merge.fused and shape.name in ("B8-T17-H24/4/256-L8192", "B1-T17-H32/8/128-L32768"):
                runs["new, merge folded in"] = lambda *a: tvt.tree_verify_attention_triton(*a, policy=fuse_more)
        for name, fn in runs.items():
            err = max(row_error(fn(*inputs), *inputs, sorted({0, shape.batch - 1})) for inputs in sets[:2])
            torch.cuda.synchronize()
            gpu, host = time_eagerly(fn, sets, 50.0)
            row[name] = {"eager_gpu_us": round(gpu, 2), "host_us": round(host, 2), "err": err}
        result["shapes"][shape.name] = row
        print(shape.name, json.dumps(row), flush=True)
    x = torch.empty(16, device=device)
    empty = DirectLaunch.build(_empty_kernel[(1,)](x), (1,), 1, (), {})
    result["parts"] = {
        "empty kernel C launch": host_us(lambda: empty(torch._C._cuda_getCurrentRawStream(0), (x.data_ptr(),))),
        "torch x.zero_()": host_us(lambda: x.zero_()),
        **{s.name: parts(s, old_tvt, device) for s in (shapes[1], shapes[2], shapes[7])},
    }
    print(json.dumps(result["parts"], indent=1), flush=True)
    # the memory-bound class's misses of the last full grid (head dim 256, one KV head): more splits
    from specdec_kernels.bench import Shape, measure_ceilings, run_shape
    ceilings = measure_ceilings(device)
    result["split_sweep"] = {}
    for b, t, hq, l in ((1, 9, 6, 32768), (8, 9, 6, 8192), (32, 9, 6, 1024), (1, 17, 3, 32768), (8, 17, 3, 8192),
                        (32, 17, 3, 1024), (1, 9, 24, 32768)):
        shape = Shape(b, t, hq, hq // 6 if hq == 24 else 1, 256, l)
        planned = tvt.plan_call(*make_inputs(shape, device, 0)[:3]).num_splits
        rows = {}
        for splits in sorted({planned, 2 * planned, 4 * planned, max(1, planned // 2)}):
            try:
                row = run_shape(shape, ceilings, False, 7, policy=VerifyPolicy(num_splits=splits), baselines=False)
                rows[splits] = {k: round(row[k], 3) for k in ("us", "bw_frac", "err", "eager_us", "host_us")}
            except Exception as exc:  # noqa: BLE001
                rows[splits] = repr(exc)[:200]
        result["split_sweep"][shape.name] = {"planned": planned, "rows": rows}
        print(shape.name, planned, json.dumps(rows), flush=True)
    with open(f"{out_dir}/host_probe.json", "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
