"""Head dim 256's tail warpgroup on the H200: each grid shape whose plan takes it (T = 65 at G = 6),
the plan (tail) against the tiles without it (notail) and the tail on notail's split count
(tail_same), interleaved twice; graph us, eager us, host us (the bench's timers), every output
checked against float32.  python3 tail_ab.py OUT"""
import json
import multiprocessing
import sys
import time

import torch

from specdec_kernels.bench import (Shape, capture_graph, input_sets_needed, make_inputs, row_error, time_eagerly,
                                   time_in_graph)
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import DEFAULT_POLICY, VerifyPolicy

NOTAIL = VerifyPolicy(tail_tiles=False)
NAMES = [f"B{b}-T65-H{h}/256-L{l}" for h in ("24/4", "6/1") for b in (1, 8, 32) for l in (1024, 8192, 32768)]


def parse(name):
    b, t, h, l = name.split("-")
    hq, hkv, d = h[1:].split("/")
    return Shape(int(b[1:]), int(t[1:]), int(hq), int(hkv), int(d), int(l[1:]))


def label(p):
    return (f"{p.kernel} {p.head_split}x{p.num_m_tiles}x{p.block_m}+{p.tail_m}/{p.block_n}:{p.mma_block_n}"
            f"/{p.num_splits}{' P' if p.persistent else ''} st{p.stages}")


def policies(name):
    inputs = make_inputs(parse(name), torch.device("cuda"), 0)
    plain = plan_call(*inputs[:3], None, NOTAIL)
    tail = plan_call(*inputs[:3], None, DEFAULT_POLICY)
    pols = {"notail": NOTAIL, "tail": DEFAULT_POLICY}
    if tail.tail_m and tail.num_splits != plain.num_splits:
        pols["tail_same"] = VerifyPolicy(num_splits=plain.num_splits)
    return inputs, pols, tail.tail_m > 0


def warm(name):
    inputs, pols, uses = policies(name)
    if uses:
        for pol in pols.values():
            tree_verify_attention_triton(*inputs, policy=pol)
    torch.cuda.synchronize()


def main(out_dir):
    t = time.time()
    with multiprocessing.get_context("spawn").Pool(14) as pool:
        pool.map(warm, NAMES, chunksize=1)
    print(f"warm {time.time() - t:.0f}s", flush=True)
    with open(f"{out_dir}/tail_ab.jsonl", "w") as log:
        for name in NAMES:
            shape = parse(name)
            _, pols, uses = policies(name)
            if not uses:
                print(name, "no tail in its plan", flush=True)
                continue
            sets = [make_inputs(shape, torch.device("cuda"), 7 + i) for i in range(input_sets_needed(shape))]
            row = {"shape": name}
            calls = {}
            for key, pol in pols.items():
                def call(q, k, v, lens, mask, pol=pol):
                    return tree_verify_attention_triton(q, k, v, lens, mask, policy=pol)
                calls[key] = call
                row[key + "_plan"] = label(plan_call(*sets[0][:3], None, pol))
                row[key + "_err"] = max(row_error(call(*s), *s, sorted({0, shape.batch - 1})) for s in sets[:2])
            for rep in range(2):
                for key, call in calls.items():
                    graph = capture_graph(call, sets)
                    g = time_in_graph(call, sets, graph=graph)
                    e = time_eagerly(call, sets, g, graph)
                    del graph
                    row.setdefault(key, []).append(round(g, 2))
                    row.setdefault(key + "_eager", []).append(round(e.gpu_us, 2))
                    row.setdefault(key + "_host", []).append(round(e.host_us, 2))
            log.write(json.dumps(row) + "\n")
            log.flush()
            base = min(row["notail"])
            parts = [f"{k} {row[k + '_plan']} {min(row[k])} ({min(row[k]) / base:.3f}) eager {min(row[k + '_eager'])}"
                     for k in calls]
            print(name, " | ".join(parts), "err", f'{max(row[k + "_err"] for k in calls):.1e}', flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
