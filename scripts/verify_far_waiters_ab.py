"""The 8 grid shapes whose eager calls still launch twice: the plan against one launch (the 6 "far"
shapes with sliced waiters past 128 KB a split, now reading 64 splits as one load; the 2 of the
128-row Gluon kernel with its 264 KB folded), interleaved twice; graph us, eager us and host us
(the bench's own timers), every output checked. python3 verify_far_waiters_ab.py OUT (the "vec32" variant is what the planner now gives)"""
import json
import multiprocessing
import sys
import time

import torch

from specdec_kernels.bench import (Shape, capture_graph, input_sets_needed, make_inputs, row_error, time_eagerly,
                                   time_in_graph)
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import DEFAULT_POLICY, VerifyPolicy

NAMES = """B1-T33-H6/1/256-L8192 B1-T33-H6/1/256-L32768 B1-T65-H6/1/256-L8192 B1-T65-H6/1/256-L32768
B1-T65-H3/1/256-L8192 B1-T65-H3/1/256-L32768 B1-T65-H32/8/128-L1024 B1-T33-H64/8/128-L1024""".split()


VEC32 = VerifyPolicy(sliced_waiters_max_split_bytes=(1 << 40) + 1)


def policies(name):
    if "/128-" in name:
        return {"before": DEFAULT_POLICY, "after": VerifyPolicy(fused_merge_max_bytes=272 * 1024)}
    # "vec32": the waiters read 32 splits as one load too (planned with the threshold at 32)
    return {"before": DEFAULT_POLICY, "after": VerifyPolicy(sliced_waiters_max_split_bytes=1 << 40), "vec32": VEC32}


def plan_vec32_first(inputs):
    from specdec_kernels import verify_plan
    verify_plan.MERGE_VECTOR_MIN_BLOCK = 32
    try:
        plan_call(*inputs[:3], None, VEC32)
    finally:
        verify_plan.MERGE_VECTOR_MIN_BLOCK = 64


def parse(name):
    b, t, h, l = name.split("-")
    hq, hkv, d = h[1:].split("/")
    return Shape(int(b[1:]), int(t[1:]), int(hq), int(hkv), int(d), int(l[1:]))


def warm(name):
    inputs = make_inputs(parse(name), torch.device("cuda"), 0)
    plan_vec32_first(inputs)
    for pol in policies(name).values():
        tree_verify_attention_triton(*inputs, policy=pol)
    torch.cuda.synchronize()


def main(out_dir):
    t = time.time()
    with multiprocessing.get_context("spawn").Pool(8) as pool:
        pool.map(warm, NAMES, chunksize=1)
    print(f"warm {time.time() - t:.0f}s", flush=True)
    with open(f"{out_dir}/far_ab.jsonl", "w") as log:
        for name in NAMES:
            shape = parse(name)
            sets = [make_inputs(shape, torch.device("cuda"), 7 + i) for i in range(input_sets_needed(shape))]
            plan_vec32_first(sets[0])
            row = {"shape": name}
            calls = {}
            for label, pol in policies(name).items():
                def call(q, k, v, lens, mask, pol=pol):
                    return tree_verify_attention_triton(q, k, v, lens, mask, policy=pol)
                calls[label] = call
                p = plan_call(*sets[0][:3], None, pol)
                row[label + "_plan"] = f"{p.num_m_tiles}x{p.block_m}/{p.num_splits} w{p.merge.waiters} f{int(p.merge.fused)} v{int(p.merge.vector_loads)}"
                row[label + "_err"] = max(row_error(call(*s), *s, sorted({0, shape.batch - 1})) for s in sets[:2])
            for rep in range(2):
                for label, call in calls.items():
                    g = time_in_graph(call, sets)
                    graph = capture_graph(call, sets)
                    e = time_eagerly(call, sets, g, graph)
                    del graph
                    row.setdefault(label, []).append(round(g, 2))
                    row.setdefault(label + "_eager", []).append(round(e.gpu_us, 2))
                    row.setdefault(label + "_host", []).append(round(e.host_us, 2))
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(name, *[f"{k}: {row[k + '_plan']} graph {min(row[k])} eager {min(row[k + '_eager'])} "
                          f"host {min(row[k + '_host'])} |" for k in calls],
                  "err", f'{max(row[k + "_err"] for k in calls):.1e}', flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
