"""Waiting merge programs reading a block of 64-128 splits as one load: the 10 grid plans it moves
(4 of 128 splits: two launches before; 6 of 64: unrolled waiters before) against the plan,
interleaved twice; graph us, eager us and host us (the bench's own timers), every output checked.
python3 vecwait_ab.py OUT"""
import json
import multiprocessing
import sys
import time

import torch

from specdec_kernels.bench import (Shape, capture_graph, input_sets_needed, make_inputs, row_error, time_eagerly,
                                   time_in_graph)
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import DEFAULT_POLICY, VerifyPolicy

NAMES = """B1-T9-H6/1-L32768 B1-T9-H3/1-L32768 B1-T17-H3/1-L32768 B1-T33-H3/1-L32768
B1-T9-H6/1-L8192 B1-T17-H6/1-L8192 B1-T17-H6/1-L32768 B1-T9-H3/1-L8192 B1-T17-H3/1-L8192 B1-T33-H3/1-L8192""".split()


def policies(name):
    # 128 splits: the merge's own launch before; 64: the waiters unrolled
    before = VerifyPolicy(waiting_merge=False) if name in NAMES[:4] else VerifyPolicy(merge_vector_loads=False)
    return {"before": before, "after": DEFAULT_POLICY}


def parse(name):
    b, t, h, l = name.split("-")
    hq, hkv = h[1:].split("/")
    return Shape(int(b[1:]), int(t[1:]), int(hq), int(hkv), 256, int(l[1:]))


def warm(name):
    inputs = make_inputs(parse(name), torch.device("cuda"), 0)
    for pol in policies(name).values():
        tree_verify_attention_triton(*inputs, policy=pol)
    torch.cuda.synchronize()


def main(out_dir):
    t = time.time()
    with multiprocessing.get_context("spawn").Pool(11) as pool:
        pool.map(warm, NAMES, chunksize=1)
    print(f"warm {time.time() - t:.0f}s", flush=True)
    with open(f"{out_dir}/vecwait_ab.jsonl", "w") as log:
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
            b, a = min(row["before"]), min(row["after"])
            print(name, row["before_plan"], "->", row["after_plan"], f"graph {b} -> {a} ({a / b:.3f})",
                  f"eager {min(row['before_eager'])} -> {min(row['after_eager'])}",
                  f"host {min(row['before_host'])} -> {min(row['after_host'])}",
                  "err", f'{max(row[k + "_err"] for k in calls):.1e}', flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
