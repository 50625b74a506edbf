"""Probe: where the sliced waiting merge's GPU time goes. Eager GPU us and per-kernel profiler us
for a few shapes under: waiters off, default, forced head-dim slices. python3 scripts/verify_sliced_waiters_probe.py OUT"""
import json
import sys

import torch

from specdec_kernels.bench import Shape, input_sets_needed, make_inputs, row_error, time_eagerly
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import VerifyPolicy

SHAPES = [Shape(1, 17, 24, 4, 256, 8192), Shape(1, 65, 6, 1, 256, 8192), Shape(1, 33, 6, 1, 256, 32768),
          Shape(1, 33, 6, 1, 256, 8192), Shape(8, 33, 3, 1, 256, 32768)]
POLICIES = {"off": VerifyPolicy(waiting_merge=False), "on": VerifyPolicy(),
            "s2": VerifyPolicy(merge_head_slices=2), "s4": VerifyPolicy(merge_head_slices=4),
            "s8": VerifyPolicy(merge_head_slices=8), "bytes64k": VerifyPolicy(fused_merge_max_bytes=64 * 1024)}


def kernel_us(call, sets):
    from torch.profiler import ProfilerActivity, profile
    for s in sets[:2]:
        call(*s)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            for s in sets:
                call(*s)
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        if e.device_type.name == "CUDA" and e.count:
            out[e.key[:40]] = round(e.device_time_total / e.count, 2)
    return out


def main(out_dir):
    dev = torch.device("cuda")
    with open(f"{out_dir}/probe.jsonl", "w") as log:
        for shape in SHAPES:
            sets = [make_inputs(shape, dev, 7 + i) for i in range(input_sets_needed(shape))]
            for name, pol in POLICIES.items():
                plan = plan_call(*sets[0][:3], None, pol)
                m = plan.merge

                def call(q, k, v, lens, mask, pol=pol):
                    return tree_verify_attention_triton(q, k, v, lens, mask, policy=pol)

                err = row_error(call(*sets[0]), *sets[0], [0])
                e, h = time_eagerly(call, sets, 50.0)
                e2, _ = time_eagerly(call, sets, 50.0)
                row = dict(shape=shape.name, policy=name, splits=plan.num_splits, grid=plan.grid,
                           fused=m.fused if m else None, waiters=m.waiters if m else None,
                           slices=m.head_slices if m else None, eager=[round(e, 2), round(e2, 2)], host=round(h, 2),
                           err=err, kernels=kernel_us(call, sets))
                log.write(json.dumps(row) + "\n")
                log.flush()
                print(json.dumps(row), flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
