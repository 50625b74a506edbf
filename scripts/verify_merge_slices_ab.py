"""A / B of the merge over head-dim slices (an experiment, not kept): on one H200, every bench-grid
shape whose merge the slices change, timed with one slice (the merge before) and the planned
slices, interleaved, graph-timed by the bench's method and checked against the float32 reference;
a slice sweep and the split kernel / merge times (profiler) at the batch-1 32k shapes; and, with
the sliced merge, twice the planned splits at the batch-1 head-dim-256 shapes (what a cheaper
merge in the split model would plan). Run from the repository root:
python3 scripts/verify_merge_slices_ab.py OUT_DIR [SECONDS]"""
import json
import multiprocessing
import sys
import time

import torch

from specdec_kernels.bench import Shape, grid_shapes, input_sets_needed, l2_flush, make_inputs, row_error, \
    time_in_graph
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import VerifyPolicy, VerifyShape, VerifyTarget, plan_verify

H200 = VerifyTarget("sm_90", 132, gluon=True, dependent_launch=True)
TARGETS = [Shape(1, 9, 3, 1, 256, 32768), Shape(1, 17, 3, 1, 256, 32768), Shape(1, 9, 6, 1, 256, 32768),
           Shape(1, 9, 24, 4, 256, 32768), Shape(1, 33, 3, 1, 256, 32768)]
CONTROLS = [Shape(1, 17, 32, 8, 128, 32768), Shape(8, 17, 6, 1, 256, 8192)]


def vshape(s):
    return VerifyShape(s.batch, s.num_nodes, s.q_heads, s.kv_heads, s.head_dim, s.prefix + s.num_nodes)


def moved():
    out = []
    for s in grid_shapes((128, 256)):
        after = plan_verify(vshape(s), H200).merge
        if after is not None and after.head_slices > 1:
            out.append(s)
    return out


def policy_of(name):
    kind, _, value = name.partition("=")
    if kind == "before":
        return VerifyPolicy(merge_head_slices=1)
    if kind == "slices":
        return VerifyPolicy(merge_head_slices=int(value))
    if kind == "splits":
        return VerifyPolicy(num_splits=int(value))
    return VerifyPolicy()


def jobs():
    out = []
    for s in TARGETS:
        splits = plan_verify(vshape(s), H200).num_splits
        out += [(s, n) for n in ("before", "after", "slices=2", "slices=4", f"splits={2 * splits}", "before",
                                 "after")]
    out += [(s, "after") for s in CONTROLS]
    done = {s for s in TARGETS}
    for s in moved():
        if s in done:
            continue
        out += [(s, "before"), (s, "after")]
        if s.head_dim == 256 and s.batch == 1:
            out.append((s, f"splits={2 * plan_verify(vshape(s), H200).num_splits}"))
    return out


def _compile_one(job):
    shape, names = job
    inputs = make_inputs(shape, torch.device("cuda"), 0)
    for name in names:
        try:
            tree_verify_attention_triton(*inputs, policy=policy_of(name))
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
    out_dir, budget = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 1e9
    started = time.time()
    todo = jobs()
    print(f"{len(todo)} runs", flush=True)
    with multiprocessing.get_context("spawn").Pool(15) as pool:
        by_shape = {}
        for shape, name in todo:
            by_shape.setdefault(shape, []).append(name)
        pool.map(_compile_one, [(s, list(dict.fromkeys(n))) for s, n in by_shape.items()], chunksize=1)
    print(f"warm compile {time.time() - started:.1f} s", flush=True)
    device = torch.device("cuda")
    with open(f"{out_dir}/ab.jsonl", "w") as log, l2_flush("read"):
        current = None
        for shape, name in todo:
            if time.time() - started > budget:
                print("out of time", flush=True)
                break
            if shape != current:
                sets = [make_inputs(shape, device, 7 + i) for i in range(input_sets_needed(shape))]
                current = shape
            policy = policy_of(name)
            row = {"shape": shape.name, "plan": name}
            try:
                plan = plan_call(*sets[0][:3], None, policy)
                m = plan.merge
                row.update(splits=plan.num_splits, merge=None if m is None else
                           [m.head_slices, m.split_block, m.merge_rows, m.grid, m.one_block, m.fused])

                def call(q, k, v, lens, mask):
                    return tree_verify_attention_triton(q, k, v, lens, mask, policy=policy)

                row["err"] = max(row_error(call(*inputs), *inputs, sorted({0, shape.batch - 1})) for inputs in sets[:2])
                row["us"] = round(time_in_graph(call, sets), 2)
                if shape in TARGETS:
                    row["kernels"] = kernel_us(call, sets)
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(json.dumps(row), flush=True)
    print(f"done in {time.time() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
