"""A/B on a GPU: the tree's rows in a split of their own (VerifyPolicy(own_tree_split=True)) against
the default plan, graphs (the bench's method), alternated twice, best of two; every output checked.
    python3 scripts/own_tree_split_probe/ab.py OUT [SHAPE_FILTER]"""
import json
import multiprocessing as mp
import os
import sys
import time

import torch


def _policies():
    from specdec_kernels.verify_plan import DEFAULT_POLICY, VerifyPolicy

    return {"base": DEFAULT_POLICY, "own": VerifyPolicy(own_tree_split=True)}


def shapes():
    from specdec_kernels.bench import grid_shapes

    picked = [s for s in grid_shapes() if s.batch == 1 or (s.batch == 8 and s.prefix == 1024)]
    return picked


def _compile(args):
    name, which = args
    from specdec_kernels.bench import grid_shapes, make_inputs
    from specdec_kernels.tree_verify_triton import tree_verify_attention_triton

    shape = next(s for s in grid_shapes() if s.name == name)
    inputs = make_inputs(shape, torch.device("cuda"), 0)
    tree_verify_attention_triton(*inputs, policy=_policies()[which])
    torch.cuda.synchronize()
    return name


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    from specdec_kernels import bench
    from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton

    todo = shapes()
    t0 = time.time()
    with mp.get_context("spawn").Pool(14) as pool:
        list(pool.imap_unordered(_compile, [(s.name, w) for s in todo for w in ("base", "own")]))
    print(f"compiled {len(todo)} shapes x 2 in {time.time() - t0:.0f} s", flush=True)
    policies = _policies()
    device = torch.device("cuda")
    with bench.l2_flush("read"), open(os.path.join(out, "own_tree_split.jsonl"), "w") as f:
        for i, shape in enumerate(todo):
            sets = [bench.make_inputs(shape, device, i * 97 + j) for j in range(bench.input_sets_needed(shape))]
            row = {"shape": shape.name}
            calls = {}
            for which, policy in policies.items():
                plan = plan_call(*sets[0][:3], None, policy)
                row[f"{which}_plan"] = f"{plan.kernel} {plan.block_m}x{plan.num_m_tiles}+{plan.tail_m} n{plan.block_n} s{plan.num_splits} c{plan.chunk}"

                def call(q, k, v, lens, mask, policy=policy):
                    return tree_verify_attention_triton(q, k, v, lens, mask, policy=policy)
                calls[which] = call
                row[f"{which}_err"] = bench.row_error(call(*sets[0]), *sets[0], sorted({0, shape.batch - 1}))
            times = {w: [] for w in calls}
            for _ in range(2):
                for which, call in calls.items():
                    times[which].append(bench.time_in_graph(call, sets, rep_ms=40))
            for which in calls:
                row[f"{which}_us"] = min(times[which])
            row["ratio"] = row["own_us"] / row["base_us"]
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(f"{shape.name:28s} {row['base_us']:8.2f} {row['own_us']:8.2f} {row['ratio']:.3f} "
                  f"err {max(row['base_err'], row['own_err']):.1e} | {row['base_plan']} | {row['own_plan']}", flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
