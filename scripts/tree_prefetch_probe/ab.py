"""Probe only: graph times of batch-1 1k-key shapes under the planned policy and, at head dim 128,
8 prefix splits beside the tree's own; one process a kernel variant (LABEL), rows appended to
OUT/tree_prefetch.jsonl; every output checked.   python3 ab.py OUT LABEL"""
import json
import os
import sys

import torch

NAMES = ("B1-T9-H32/8/128-L1024 B1-T16-H32/8/128-L1024 B1-T17-H32/8/128-L1024 B1-T33-H32/8/128-L1024 "
         "B1-T9-H64/8/128-L1024 B1-T16-H64/8/128-L1024 B1-T17-H64/8/128-L1024 B1-T9-H24/4/256-L1024 "
         "B1-T9-H6/1/256-L1024 B1-T65-H6/1/256-L1024 B1-T9-H3/1/256-L1024 B1-T65-H3/1/256-L1024").split()


def main(out, label):
    from specdec_kernels import bench
    from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
    from specdec_kernels.verify_plan import DEFAULT_POLICY, VerifyPolicy

    device = torch.device("cuda")
    shapes = {s.name: s for s in bench.grid_shapes()}
    with bench.l2_flush("read"), open(os.path.join(out, "tree_prefetch.jsonl"), "a") as f:
        for i, name in enumerate(NAMES):
            shape = shapes[name]
            sets = [bench.make_inputs(shape, device, i * 97 + j) for j in range(bench.input_sets_needed(shape))]
            policies = {"planned": DEFAULT_POLICY}
            if shape.head_dim == 128:
                policies["own9"] = VerifyPolicy(num_splits=9, own_tree_split=True)
            for which, policy in policies.items():
                plan = plan_call(*sets[0][:3], None, policy)

                def call(q, k, v, lens, mask, policy=policy):
                    return tree_verify_attention_triton(q, k, v, lens, mask, policy=policy)
                buf = torch.empty_like(sets[0][0])
                graph = bench.capture_graph(lambda q, k, v, lens, mask, policy=policy: tree_verify_attention_triton(
                    q, k, v, lens, mask, out=buf, policy=policy), sets[:1])
                buf.fill_(float("nan"))
                graph.replay()
                torch.cuda.synchronize()
                err = bench.row_error(buf, *sets[0], [0]) if torch.isfinite(buf).all() else float("inf")
                us = bench.time_in_graph(call, sets, rep_ms=40)
                row = {"label": label, "shape": name, "policy": which, "us": us, "err": err,
                       "plan": f"{plan.kernel} s{plan.num_splits} c{plan.chunk} own{int(plan.own_tree_split)} "
                               f"early{int(plan.merge.starts_early) if plan.merge else '-'}"}
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(label, name, which, row["plan"], f"{us:.2f} err {err:.1e}", flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
