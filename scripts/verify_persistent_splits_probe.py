"""Persistent ping-pong programs over work items of several splits (today only one split) on the 9
memory-bound misses at head dim 256 with one KV head: the plan against 1.5x and 2x its splits,
persistent and not; graph us (the bench's own timer), interleaved twice, every output checked.
python3 scripts/verify_persistent_splits_probe.py OUT (one H200, 2026-12-03: slower on all 9)"""
import json
import multiprocessing
import sys
import time

import torch

from specdec_kernels import verify_plan
from specdec_kernels.bench import Shape, input_sets_needed, make_inputs, row_error, time_in_graph
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import DEFAULT_POLICY, VerifyPolicy

_grid = verify_plan.pingpong_grid


def pingpong_grid(grid, sms, block_m, chunk, policy):
    # sentinel persistent_max_keys=2047: persistent over the items of every split
    if policy.persistent_max_keys == 2047:
        programs, splits = grid
        if programs * splits >= policy.persistent_min_waves * sms and block_m <= 128:
            return (sms, 1)
        return grid
    return _grid(grid, sms, block_m, chunk, policy)


verify_plan.pingpong_grid = pingpong_grid

NAMES = """B1-T9-H6/1/256-L32768 B8-T9-H6/1/256-L8192 B32-T9-H6/1/256-L1024 B1-T9-H3/1/256-L32768
B8-T9-H3/1/256-L8192 B32-T9-H3/1/256-L1024 B1-T17-H3/1/256-L32768 B8-T17-H3/1/256-L8192
B32-T17-H3/1/256-L1024""".split()
PLANNED = {"L32768": 128, "L8192": 16, "L1024": 4}


def policies(name):
    n = PLANNED[name.split("-")[-1]]
    per = dict(persistent_max_keys=2047, persistent_min_waves=1.2)
    return {"plan": DEFAULT_POLICY,
            "p1.5x": VerifyPolicy(num_splits=n * 3 // 2, **per),
            "p2x": VerifyPolicy(num_splits=n * 2, **per),
            "f2x": VerifyPolicy(num_splits=n * 2)}


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
    with open(f"{out_dir}/persist_ab.jsonl", "w") as log:
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
                row[label + "_plan"] = f"{p.num_splits}s grid{p.grid} P{int(p.persistent)} chunk{p.chunk}"
                row[label + "_err"] = max(row_error(call(*s), *s, sorted({0, shape.batch - 1})) for s in sets[:2])
            for rep in range(2):
                for label, call in calls.items():
                    row.setdefault(label, []).append(round(time_in_graph(call, sets), 2))
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(name, *[f"{k}: {row[k + '_plan']} {min(row[k])} |" for k in calls],
                  "err", f'{max(row[k + "_err"] for k in calls):.1e}', flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
