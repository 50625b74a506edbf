"""Probe (not kept): how fast P programs (one an SM) stream 32 MB, against the verify split kernel
at B1-T9-H6/1/256-L32k on 64 / 128 splits (profiler kernel us)."""
import json, sys
import torch, triton, triton.language as tl
from specdec_kernels.bench import time_in_graph, make_inputs, Shape, l2_flush
from specdec_kernels.tree_verify_triton import tree_verify_attention_triton
from specdec_kernels.verify_plan import VerifyPolicy


@triton.jit
def _stream(src, out, per_prog, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    base = pid.to(tl.int64) * per_prog
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(0, per_prog, BLOCK):
        acc += tl.load(src + base + i + tl.arange(0, BLOCK))
    tl.store(out + pid, tl.sum(acc, 0))


def main(out_dir):
    nbytes = 32 << 20
    words = nbytes // 4
    rows = []
    with l2_flush("read"):
        bufs = [(torch.ones(words, device="cuda"),) for _ in range(4)]
        out = torch.empty(1024, device="cuda")
        for P in (32, 64, 96, 128, 132, 264, 528):
            for BLOCK, warps, stages in ((2048, 4, 3), (4096, 8, 3), (4096, 8, 4), (8192, 8, 4), (8192, 16, 4)):
                per = words // P // BLOCK * BLOCK
                def call(src):
                    _stream[(P,)](src, out, per, BLOCK=BLOCK, num_warps=warps, num_stages=stages)
                us = time_in_graph(call, bufs)
                gbs = per * 4 * P / us / 1e3
                rows.append(dict(P=P, BLOCK=BLOCK, warps=warps, stages=stages, us=round(us, 2),
                                 GBps=round(gbs), per_prog_GBps=round(gbs / P, 1)))
                print(json.dumps(rows[-1]), flush=True)
        shape = Shape(1, 9, 6, 1, 256, 32768)
        sets = [make_inputs(shape, torch.device("cuda"), 7 + i) for i in range(4)]
        for n in (32, 64, 96, 128):
            pol = VerifyPolicy(num_splits=n)
            call = lambda q, k, v, l, m: tree_verify_attention_triton(q, k, v, l, m, policy=pol)
            call(*sets[0]); torch.cuda.synchronize()
            us = time_in_graph(call, sets)
            from torch.profiler import profile, ProfilerActivity
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for i in range(20):
                    call(*sets[i % 4])
                torch.cuda.synchronize()
            kern = {}
            for e in prof.key_averages():
                if e.device_type.name == "CUDA" and e.count >= 20:
                    kern[e.key[:40]] = round(e.device_time_total / e.count, 2) if hasattr(e, "device_time_total") else round(e.cuda_time_total / e.count, 2)
            rows.append(dict(verify_splits=n, us=round(us, 2), kernels=kern))
            print(json.dumps(rows[-1]), flush=True)
    json.dump(rows, open(f"{out_dir}/probe.json", "w"))


main(sys.argv[1])
