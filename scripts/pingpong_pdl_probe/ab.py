"""A/B on a GPU: the merge as a programmatic dependent launch after the ping-pong split kernel
(its programs wait on free SMs for the split grid) against its plain launch, on every grid shape
planned on the ping-pong kernel with a merge; graphs as the bench times them, alternated twice,
best of two; every output checked.   python3 scripts/pingpong_pdl_probe/ab.py OUT"""
import dataclasses
import json
import multiprocessing as mp
import os
import sys
import time

import torch

LIMIT_S = float(os.environ.get("LIMIT_S", "480"))


def _policies():
    from specdec_kernels.verify_plan import DEFAULT_POLICY

    # RULE=1: the planner's rule (pingpong_merge_starts_early) against never
    if os.environ.get("RULE"):
        return {"plain": dataclasses.replace(DEFAULT_POLICY, pingpong_programmatic_merge=False),
                "pdl": DEFAULT_POLICY}
    return {"plain": DEFAULT_POLICY, "pdl": dataclasses.replace(DEFAULT_POLICY, pingpong_programmatic_merge=True)}


def _shape(name):
    from specdec_kernels.bench import grid_shapes

    return next(s for s in grid_shapes() if s.name == name)


def _planned(shape):
    from specdec_kernels.tree_verify_triton import target_of
    from specdec_kernels.verify_plan import DEFAULT_POLICY, VerifyShape, plan_verify

    vs = VerifyShape(batch=shape.batch, num_nodes=shape.num_nodes, q_heads=shape.q_heads, kv_heads=shape.kv_heads,
                     head_dim=shape.head_dim, cache_rows=shape.prefix + shape.num_nodes)
    return plan_verify(vs, target_of(torch.device("cuda")), DEFAULT_POLICY)


def _compile(args):
    name, which = args
    from specdec_kernels.bench import make_inputs
    from specdec_kernels.tree_verify_triton import tree_verify_attention_triton

    # an eager call that keeps its kernels compiles the graph's split kernel and merge too
    inputs = make_inputs(_shape(name), torch.device("cuda"), 0)
    for _ in range(2):
        tree_verify_attention_triton(*inputs, policy=_policies()[which])
    torch.cuda.synchronize()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    start = time.time()
    from specdec_kernels import bench
    from specdec_kernels.tree_verify_triton import tree_verify_attention_triton

    shapes = [s for s in bench.grid_shapes()]
    names = [s.name for s in shapes if (p := _planned(s)).kernel == "pingpong" and p.merge is not None]
    names.sort(key=lambda n: (_shape(n).prefix, _shape(n).batch))  # the latency-bound shapes first
    if os.environ.get("SHAPES"):
        names = os.environ["SHAPES"].split()
    policies = _policies()
    with mp.get_context("spawn").Pool(14) as pool:
        list(pool.imap_unordered(_compile, [(n, w) for n in names for w in policies]))
    print(f"compiled {len(names)} shapes in {time.time() - start:.0f} s", flush=True)
    device = torch.device("cuda")
    with bench.l2_flush("read"), open(os.path.join(out, "pingpong_pdl.jsonl"), "w") as f:
        for i, name in enumerate(names):
            if time.time() - start > LIMIT_S:
                print("time limit: stopped before", name, flush=True)
                break
            shape = _shape(name)
            sets = [bench.make_inputs(shape, device, i * 97 + j) for j in range(bench.input_sets_needed(shape))]
            row, calls = {"shape": name}, {}
            for which, policy in policies.items():
                def call(q, k, v, lens, mask, policy=policy):
                    return tree_verify_attention_triton(q, k, v, lens, mask, policy=policy)
                calls[which] = call
                # the graph's own output (its merge's launch), not an eager call's
                buf = torch.empty_like(sets[0][0])
                graph = bench.capture_graph(
                    lambda q, k, v, lens, mask, policy=policy: tree_verify_attention_triton(
                        q, k, v, lens, mask, out=buf, policy=policy), sets[:1])
                buf.fill_(float("nan"))
                graph.replay()
                torch.cuda.synchronize()
                row[f"{which}_err"] = bench.row_error(buf, *sets[0], [0])
                row[f"{which}_finite"] = bool(torch.isfinite(buf).all())
            plan = _planned(shape)
            row["plan"] = f"{plan.num_m_tiles}x{plan.block_m}+{plan.tail_m} s{plan.num_splits} grid{plan.grid}"
            times = {w: [] for w in calls}
            for _ in range(2):
                for which, call in calls.items():
                    times[which].append(bench.time_in_graph(call, sets, rep_ms=30))
            row.update({f"{w}_us": min(t) for w, t in times.items()})
            row["ratio"] = row["pdl_us"] / row["plain_us"]
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(f"{name} {row['plan']} plain {row['plain_us']:.2f} pdl {row['pdl_us']:.2f} "
                  f"x{row['ratio']:.3f} err {row['plain_err']:.1e}/{row['pdl_err']:.1e}", flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
