"""A 264 KB bound of the single program merging a query tile's splits (the plan's 256 KB against it) on
8 of the 11 grid plans it moves (257-258 KB a tile), interleaved twice; graph us, eager us and host us
(the bench's own timers), every output checked. python3 verify_bound_ab.py OUT"""
import json
import multiprocessing
import sys
import time

import torch

from specdec_kernels.bench import (Shape, capture_graph, input_sets_needed, make_inputs, row_error, time_eagerly,
                                   time_in_graph)
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import DEFAULT_POLICY, VerifyPolicy

NAMES = """B1-T65-H32/8/128-L1024 B1-T33-H64/8/128-L1024 B8-T33-H24/4/256-L1024 B32-T33-H6/1/256-L1024
B32-T65-H3/1/256-L1024 B8-T33-H24/4/256-L8192 B32-T33-H6/1/256-L8192 B32-T65-H3/1/256-L8192""".split()


def policies(name):
    # 257-258 KB a tile: past the single program's bound at 256 KB, within it at 264
    return {"before": DEFAULT_POLICY, "after": VerifyPolicy(fused_merge_max_bytes=264 * 1024)}


def parse(name):
    b, t, h, l = name.split("-")
    hq, hkv, d = h[1:].split("/")
    return Shape(int(b[1:]), int(t[1:]), int(hq), int(hkv), int(d), int(l[1:]))


def warm(name):
    inputs = make_inputs(parse(name), torch.device("cuda"), 0)
    for pol in policies(name).values():
        tree_verify_attention_triton(*inputs, policy=pol)
    torch.cuda.synchronize()


def main(out_dir):
    t = time.time()
    with multiprocessing.get_context("spawn").Pool(14) as pool:
        pool.map(warm, NAMES, chunksize=1)
    print(f"warm {time.time() - t:.0f}s", flush=True)
    with open(f"{out_dir}/bound_ab.jsonl", "w") as log:
        for name in NAMES:
            shape = parse(name)
            sets = [make_inputs(shape, torch.device("cuda"), 7 + i) for i in range(input_sets_needed(shape))]
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
