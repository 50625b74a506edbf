"""A / B of the waiting merge's program cap: eager GPU and host us a call, interleaved 3 times,
every output checked. python3 scripts/verify_waiter_cap_ab.py OUT"""
import json
import multiprocessing
import sys
import time

import torch

from specdec_kernels.bench import Shape, input_sets_needed, make_inputs, row_error, time_eagerly
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import VerifyPolicy

VARIANTS = {"off": VerifyPolicy(waiting_merge=False), "all": VerifyPolicy(),
            "cap64": VerifyPolicy(merge_waiters_max=64), "cap32": VerifyPolicy(merge_waiters_max=32)}
NAMES = ["B8-T17-H6/1/256-L8192", "B8-T17-H6/1/256-L32768", "B8-T33-H3/1/256-L8192", "B8-T33-H3/1/256-L32768",
         "B1-T33-H24/4/256-L8192", "B1-T33-H24/4/256-L32768", "B1-T65-H64/8/128-L32768", "B1-T33-H64/8/128-L32768",
         "B8-T9-H6/1/256-L8192", "B1-T65-H6/1/256-L1024", "B8-T17-H3/1/256-L32768", "B32-T33-H3/1/256-L8192",
         "B32-T65-H3/1/256-L8192", "B1-T17-H3/1/256-L1024", "B32-T33-H3/1/256-L32768", "B1-T9-H24/4/256-L1024",
         "B1-T17-H32/8/128-L32768", "B8-T65-H6/1/256-L8192"]


def parse(name):
    b, t, h, l = name.split("-")
    hq, hkv, d = h[1:].split("/")
    return Shape(int(b[1:]), int(t[1:]), int(hq), int(hkv), int(d), int(l[1:]))


def warm(name):
    inputs = make_inputs(parse(name), torch.device("cuda"), 0)
    for pol in VARIANTS.values():
        tree_verify_attention_triton(*inputs, policy=pol)
    torch.cuda.synchronize()


def main(out_dir):
    t = time.time()
    with multiprocessing.get_context("spawn").Pool(14) as pool:
        pool.map(warm, NAMES, chunksize=1)
    print(f"warm {time.time() - t:.0f}s", flush=True)
    with open(f"{out_dir}/waiter_cap_ab.jsonl", "w") as log:
        for name in NAMES:
            shape = parse(name)
            sets = [make_inputs(shape, torch.device("cuda"), 7 + i) for i in range(input_sets_needed(shape))]
            row = {"shape": name}
            calls = {}
            for v, pol in VARIANTS.items():
                plan = plan_call(*sets[0][:3], None, pol)
                row[v + "_plan"] = [plan.num_splits, plan.merge.fused, plan.merge.waiters]

                def call(q, k, v_, lens, mask, pol=pol):
                    return tree_verify_attention_triton(q, k, v_, lens, mask, policy=pol)

                calls[v] = call
                row[v + "_err"] = max(row_error(call(*s), *s, sorted({0, shape.batch - 1})) for s in sets[:2])
            for rep in range(3):
                for v in VARIANTS:
                    e, h = time_eagerly(calls[v], sets, 50.0)
                    row.setdefault(v + "_eager", []).append(round(e, 2))
                    row.setdefault(v + "_host", []).append(round(h, 2))
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(name, " ".join(f'{v}{row[v + "_plan"][2]}:{min(row[v + "_eager"])}/{min(row[v + "_host"])}'
                                 for v in VARIANTS), "maxerr", f'{max(row[v + "_err"] for v in VARIANTS):.1e}',
                  flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
