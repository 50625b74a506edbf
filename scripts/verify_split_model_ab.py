"""A / B of head dim 256's split model (an experiment, not kept): on one H200, every bench-grid
shape whose split count the model changes, timed with the old count (forced) and the planned one,
interleaved twice, graph µs by the bench's method, eager and host µs by the bench's eager timing,
each output checked against the float32 reference. Controls: two unmoved shapes. Run from the
repository root: python3 scripts/verify_split_model_ab.py OUT_DIR OLD_PLANS_JSON [SECONDS]"""
import json
import multiprocessing
import sys
import time

import torch

from specdec_kernels.bench import Shape, grid_shapes, input_sets_needed, l2_flush, make_inputs, row_error, \
    time_eagerly, time_in_graph
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import VerifyPolicy, VerifyShape, VerifyTarget, plan_verify

H200 = VerifyTarget("sm_90", 132, gluon=True, dependent_launch=True)
CONTROLS = [Shape(8, 17, 6, 1, 256, 8192), Shape(1, 17, 32, 8, 128, 8192)]


def vshape(s):
    return VerifyShape(s.batch, s.num_nodes, s.q_heads, s.kv_heads, s.head_dim, s.prefix + s.num_nodes)


def jobs(old):
    out = []
    for s in grid_shapes((256,)):
        before = old.get(s.name)
        if before is not None and before != plan_verify(vshape(s), H200).num_splits:
            out += [(s, before), (s, None), (s, before), (s, None)]
    return out + [(s, None) for s in CONTROLS]


def _compile_one(job):
    shape, counts = job
    inputs = make_inputs(shape, torch.device("cuda"), 0)
    for n in counts:
        try:
            for _ in range(2):  # the second call compiles the folded merge's form where there is one
                tree_verify_attention_triton(*inputs, policy=VerifyPolicy(num_splits=n))
            torch.cuda.synchronize()
        except Exception as exc:
            print("compile", shape.name, n, type(exc).__name__, str(exc)[:200], flush=True)


def main():
    out_dir, old = sys.argv[1], json.load(open(sys.argv[2]))
    budget = float(sys.argv[3]) if len(sys.argv) > 3 else 1e9
    started = time.time()
    todo = jobs(old)
    print(f"{len(todo)} runs", flush=True)
    by_shape = {}
    for shape, n in todo:
        by_shape.setdefault(shape, []).append(n)
    with multiprocessing.get_context("spawn").Pool(15) as pool:
        pool.map(_compile_one, [(s, list(dict.fromkeys(n))) for s, n in by_shape.items()], chunksize=1)
    print(f"warm compile {time.time() - started:.1f} s", flush=True)
    device = torch.device("cuda")
    with open(f"{out_dir}/ab.jsonl", "w") as log, l2_flush("read"):
        current = None
        for shape, n in todo:
            if time.time() - started > budget:
                print("out of time", flush=True)
                break
            if shape != current:
                sets = [make_inputs(shape, device, 7 + i) for i in range(input_sets_needed(shape))]
                current = shape
            policy = VerifyPolicy(num_splits=n)
            row = {"shape": shape.name, "plan": "before" if n else "after"}
            try:
                plan = plan_call(*sets[0][:3], None, policy)
                row.update(splits=plan.num_splits, fused=plan.merge is not None and plan.merge.fused)

                def call(q, k, v, lens, mask):
                    return tree_verify_attention_triton(q, k, v, lens, mask, policy=policy)

                row["err"] = max(row_error(call(*inputs), *inputs, sorted({0, shape.batch - 1})) for inputs in sets[:2])
                row["us"] = round(time_in_graph(call, sets), 2)
                eager, host = time_eagerly(call, sets, row["us"])
                row.update(eager=round(eager, 2), host=round(host, 2))
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(json.dumps(row), flush=True)
    print(f"done in {time.time() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
