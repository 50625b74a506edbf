"""Split partials in the inputs' 16-bit dtype against fp32, on the grid's split plans that miss a
goal (scripts/narrow_partials_probe/narrow_shapes.txt): graph us (the bench's timer, best of two interleaved), eager GPU us,
row error of both. python3 scripts/narrow_partials_probe/narrow_ab.py OUT"""
import json
import multiprocessing
import sys
import time

import torch

from specdec_kernels.bench import (Shape, input_sets_needed, make_inputs, row_error, time_in_graph, time_eagerly,
                                   capture_graph)
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import DEFAULT_POLICY, VerifyPolicy

POLICIES = {"fp32": DEFAULT_POLICY, "narrow": VerifyPolicy(narrow_partials=True)}


def parse(name):
    b, t, h, l = name.split("-")
    hq, hkv, d = h[1:].split("/")
    return Shape(int(b[1:]), int(t[1:]), int(hq), int(hkv), int(d), int(l[1:]))


def warm(name):
    shape = parse(name)
    inputs = make_inputs(shape, torch.device("cuda"), 0)
    for pol in POLICIES.values():
        tree_verify_attention_triton(*inputs, policy=pol)
    torch.cuda.synchronize()


def main(out_dir):
    names = open("scripts/narrow_partials_probe/narrow_shapes.txt").read().split()
    t = time.time()
    with multiprocessing.get_context("spawn").Pool(14) as pool:
        pool.map(warm, names, chunksize=1)
    print(f"warm {time.time() - t:.0f}s", flush=True)
    dev = torch.device("cuda")
    with open(f"{out_dir}/narrow.jsonl", "w") as log:
        for name in names:
            shape = parse(name)
            sets = [make_inputs(shape, dev, 7 + i) for i in range(input_sets_needed(shape))]
            row = {"shape": name}
            calls = {k: (lambda q, k_, v, l, m, p=p: tree_verify_attention_triton(q, k_, v, l, m, policy=p))
                     for k, p in POLICIES.items()}
            reqs = sorted({0, shape.batch - 1})
            for k, call in calls.items():
                row[f"err_{k}"] = row_error(call(*sets[0]), *sets[0], reqs)
                row[f"us_{k}"] = []
            for _ in range(2):
                for k, call in calls.items():
                    row[f"us_{k}"].append(time_in_graph(call, sets))
            for k, call in calls.items():
                row[f"us_{k}"] = min(row[f"us_{k}"])
                timing = time_eagerly(call, sets, row[f"us_{k}"])
                row[f"eager_{k}"], row[f"host_{k}"] = timing.gpu_us, timing.host_us
                p = plan_call(*sets[0][:3], None, POLICIES[k])
                row[f"merge_{k}"] = None if p.merge is None else [p.merge.fused, p.merge.waiters, p.merge.head_slices]
            row.update(splits=p.num_splits,
                       ratio=round(row["us_narrow"] / row["us_fp32"], 3),
                       eager_ratio=round(row["eager_narrow"] / row["eager_fp32"], 3))
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(name, row["splits"], f"{row['us_fp32']:.1f} -> {row['us_narrow']:.1f} ({row['ratio']}) eager "
                  f"{row['eager_fp32']:.1f} -> {row['eager_narrow']:.1f} host {row['host_fp32']:.1f} -> {row['host_narrow']:.1f} "
                  f"{row['merge_fp32']} -> {row['merge_narrow']} err {row['err_fp32']:.1e} "
                  f"{row['err_narrow']:.1e}", flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
