"""A/B on a GPU: with the tree in a split of its own, finer prefix splits on the batch-1, 1k-key
shapes (the planned count against 8 and 16 forced), graphs as the bench times them, alternated
twice, best of two; every output checked.   python3 scripts/own_split_count_probe/ab.py OUT"""
import json
import multiprocessing as mp
import os
import sys

import torch

NAMES = [f"B1-T{t}-H{h}/8/128-L1024" for h in (32, 64) for t in (9, 16, 17, 33, 65)] + [
    "B1-T9-H24/4/256-L1024", "B1-T33-H6/1/256-L1024", "B1-T65-H3/1/256-L1024"]


def _policies():
    from specdec_kernels.verify_plan import DEFAULT_POLICY, VerifyPolicy

    return {"planned": DEFAULT_POLICY, "own8": VerifyPolicy(num_splits=8, own_tree_split=True),
            "own16": VerifyPolicy(num_splits=16, own_tree_split=True)}


def _shape(name):
    from specdec_kernels.bench import grid_shapes

    return next(s for s in grid_shapes() if s.name == name)


def _compile(args):
    name, which = args
    from specdec_kernels.bench import make_inputs
    from specdec_kernels.tree_verify_triton import tree_verify_attention_triton

    tree_verify_attention_triton(*make_inputs(_shape(name), torch.device("cuda"), 0), policy=_policies()[which])
    torch.cuda.synchronize()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    from specdec_kernels import bench
    from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton

    policies = _policies()
    with mp.get_context("spawn").Pool(14) as pool:
        list(pool.imap_unordered(_compile, [(n, w) for n in NAMES for w in policies]))
    device = torch.device("cuda")
    with bench.l2_flush("read"), open(os.path.join(out, "own_split_count.jsonl"), "w") as f:
        for i, name in enumerate(NAMES):
            shape = _shape(name)
            sets = [bench.make_inputs(shape, device, i * 97 + j) for j in range(bench.input_sets_needed(shape))]
            row, calls = {"shape": name}, {}
            for which, policy in policies.items():
                plan = plan_call(*sets[0][:3], None, policy)
                row[f"{which}_plan"] = f"{plan.kernel} s{plan.num_splits} c{plan.chunk} own{int(plan.own_tree_split)}"

                def call(q, k, v, lens, mask, policy=policy):
                    return tree_verify_attention_triton(q, k, v, lens, mask, policy=policy)
                calls[which] = call
                row[f"{which}_err"] = bench.row_error(call(*sets[0]), *sets[0], [0])
            times = {w: [] for w in calls}
            for _ in range(2):
                for which, call in calls.items():
                    times[which].append(bench.time_in_graph(call, sets, rep_ms=40))
            row.update({f"{w}_us": min(t) for w, t in times.items()})
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(name, " ".join(f"{w} {row[w + '_us']:.2f} ({row[w + '_plan']}, err {row[w + '_err']:.1e})"
                                 for w in policies), flush=True)


if __name__ == "__main__":
    main()
