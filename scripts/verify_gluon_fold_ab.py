"""A / B of the merge folded into the 64-row Gluon kernel (eager calls; the shapes it folds): GPU
and host us a call of back-to-back eager calls, the fold on (B) and off (A), interleaved twice, every output checked; graph us
where the plan's splits differ. python3 scripts/verify_gluon_fold_ab.py OUT"""
import json
import multiprocessing
import sys
import time

import torch

from specdec_kernels.bench import grid_shapes, input_sets_needed, make_inputs, row_error, time_eagerly, time_in_graph
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import VerifyPolicy

A = VerifyPolicy(fused_merge=False)
B = VerifyPolicy()


def shapes():
    out = []
    for s in grid_shapes():
        sets = None
        from specdec_kernels.verify_plan import VerifyShape, plan_verify
        from specdec_kernels.compile_check import TARGETS
        vs = VerifyShape(s.batch, s.num_nodes, s.q_heads, s.kv_heads, s.head_dim, s.prefix + s.num_nodes, 2)
        pb, pa = plan_verify(vs, TARGETS["sm_90"], B), plan_verify(vs, TARGETS["sm_90"], A)
        if pb.kernel == "gluon" and pb.merge and pb.merge.fused:
            out.append(s)
    return out


def warm(shape):
    inputs = make_inputs(shape, torch.device("cuda"), 0)
    for pol in (A, B):
        tree_verify_attention_triton(*inputs, policy=pol)
    torch.cuda.synchronize()


def main(out_dir):
    todo = shapes()
    print(len(todo), "shapes", flush=True)
    t = time.time()
    with multiprocessing.get_context("spawn").Pool(14) as pool:
        pool.map(warm, todo, chunksize=1)
    print(f"warm {time.time() - t:.0f}s", flush=True)
    with open(f"{out_dir}/gluon_fold_ab.jsonl", "w") as log:
        for shape in todo:
            sets = [make_inputs(shape, torch.device("cuda"), 7 + i) for i in range(input_sets_needed(shape))]
            row = {"shape": shape.name}
            calls = {}
            for name, pol in (("a", A), ("b", B)):
                plan = plan_call(*sets[0][:3], None, pol)
                row[name + "_plan"] = [plan.num_splits, plan.merge.fused if plan.merge else None,
                                       plan.merge.waiters if plan.merge else None]

                def call(q, k, v, lens, mask, pol=pol):
                    return tree_verify_attention_triton(q, k, v, lens, mask, policy=pol)

                calls[name] = call
                row[name + "_err"] = max(row_error(call(*s), *s, sorted({0, shape.batch - 1})) for s in sets[:2])
            if row["a_plan"][0] != row["b_plan"][0]:
                for name in "ab":
                    row[name + "_graph"] = round(time_in_graph(calls[name], sets), 2)
            for rep in range(2):
                for name in "ab":
                    e, h = time_eagerly(calls[name], sets, 50.0)
                    row.setdefault(name + "_eager", []).append(round(e, 2))
                    row.setdefault(name + "_host", []).append(round(h, 2))
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(row["shape"], row["b_plan"], "eager", min(row["a_eager"]), "->", min(row["b_eager"]),
                  "host", min(row["a_host"]), "->", min(row["b_host"]),
                  "err", f'{row["a_err"]:.1e} {row["b_err"]:.1e}', row.get("a_graph"), row.get("b_graph"), flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
