"""A / B of the head-dim-256 split model and ring (an experiment, not kept): every bench grid
shape at head dim 256 whose plan this commit changed, timed with the plan before (the same table
entry with 3 ring slots and the split model's head-dim-128 costs, forced as the policy's tiles) and
after (the default policy), interleaved, graph-timed by the bench's method and checked against the
float32 reference; then a few shapes whose plan did not change. Run from the repository root:
python3 scripts/verify_plan_ab.py OUT_DIR"""
import dataclasses
import json
import multiprocessing
import sys
import time

import torch

from specdec_kernels.bench import Shape, grid_shapes, input_sets_needed, l2_flush, make_inputs, measure_ceilings, \
    row_error, time_in_graph
from specdec_kernels.configs import _PINGPONG_D256
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import DEFAULT_POLICY, VerifyPolicy, VerifyShape, VerifyTarget, plan_verify

BEFORE = VerifyPolicy(tiles=dataclasses.replace(_PINGPONG_D256, gluon_stages=3, split_key_cost=1.0, min_split_keys=256))
H200 = VerifyTarget("sm_90", 132, gluon=True, dependent_launch=True)
CONTROLS = [Shape(8, 17, 32, 8, 128, 8192), Shape(1, 17, 32, 8, 128, 32768), Shape(8, 17, 24, 4, 256, 8192),
            Shape(32, 65, 6, 1, 256, 1024)]


def fields(plan):
    return (plan.kernel, plan.block_m, plan.num_m_tiles, plan.block_n, plan.stages, plan.num_splits, plan.chunk,
            plan.grid, plan.persistent)


def changed_shapes():
    out = []
    for s in grid_shapes((256,)):
        vs = VerifyShape(s.batch, s.num_nodes, s.q_heads, s.kv_heads, s.head_dim, s.prefix + s.num_nodes)
        if fields(plan_verify(vs, H200)) != fields(plan_verify(vs, H200, BEFORE)):
            out.append(s)
    return out


def policies(name):
    return {"before": BEFORE, "after": DEFAULT_POLICY}[name]


def _compile_one(job):
    shape, name = job
    try:
        tree_verify_attention_triton(*make_inputs(shape, torch.device("cuda"), 0), policy=policies(name))
        torch.cuda.synchronize()
    except Exception as exc:
        print("compile", shape.name, name, type(exc).__name__, str(exc)[:200], flush=True)


def kernel_us(call, sets, rounds=4):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(rounds):
            for inputs in sets:
                call(*inputs)
        torch.cuda.synchronize()
    return {e.key[:30]: round(e.device_time_total / (rounds * len(sets)), 2) for e in prof.key_averages()
            if e.device_time_total > 0}


def main():
    out_dir = sys.argv[1]
    changed = changed_shapes()
    jobs = [(s, n) for s in changed for n in ("before", "after")] + [(s, "after") for s in CONTROLS]
    print(f"{len(changed)} changed shapes, {len(jobs)} runs", flush=True)
    started = time.time()
    with multiprocessing.get_context("spawn").Pool(14) as pool:
        pool.map(_compile_one, jobs, chunksize=1)
    print(f"warm compile {time.time() - started:.1f} s", flush=True)
    device = torch.device("cuda")
    ceilings = measure_ceilings(device)
    print(json.dumps(ceilings), flush=True)
    with open(f"{out_dir}/ab.jsonl", "w") as log, l2_flush("read"):
        current = None
        for shape, name in jobs:
            if shape != current:
                sets = [make_inputs(shape, device, 7 + i) for i in range(input_sets_needed(shape))]
                current = shape
            policy = policies(name)
            row = {"shape": shape.name, "plan": name}
            try:
                plan = plan_call(*sets[0][:3], None, policy)
                row.update(stages=plan.stages, splits=plan.num_splits, chunk=plan.chunk, block_m=plan.block_m,
                           grid=plan.grid)

                def call(q, k, v, lens, mask):
                    return tree_verify_attention_triton(q, k, v, lens, mask, policy=policy)

                row["err"] = max(row_error(call(*inputs), *inputs, sorted({0, shape.batch - 1})) for inputs in sets[:2])
                row["us"] = round(time_in_graph(call, sets), 2)
                row["bw"] = round(shape.bytes_moved() / (row["us"] * 1e-6) / 1e12 / ceilings["copy_tb_s"], 3)
                if shape.kv_heads == 1 and shape.num_nodes * shape.group <= 64 and shape.batch * shape.prefix >= 32768:
                    try:
                        row["kernels"] = kernel_us(call, sets)
                    except Exception as exc:
                        row["kernels"] = repr(exc)[:100]
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(json.dumps(row), flush=True)
    print(f"done in {time.time() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
