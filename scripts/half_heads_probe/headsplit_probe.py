"""Head dim 256 at 1k keys (latency-bound, the 10x SDPA misses): query heads split in two programs a
KV head where the group is even, against the plan; graph us best of two, outputs checked (eager calls).
Run on an H200 at 6ffe0f8 with split_rows.patch applied: python3 headsplit_probe.py OUT (1k keys),
python3 headsplit_probe.py OUT wide (the T = 17 even-group shapes at 8k and 32k keys)."""
import dataclasses
import json
import multiprocessing
import sys
import time

import torch

from specdec_kernels import configs
from specdec_kernels.bench import Shape, input_sets_needed, make_inputs, row_error, time_in_graph
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import DEFAULT_POLICY, VerifyPolicy

S = dataclasses.replace(configs._PINGPONG_D256, split_query_heads=True)
S1 = dataclasses.replace(configs._PINGPONG_D256_ONE_WARPGROUP, split_query_heads=True)
POLICIES = {
    "plan": DEFAULT_POLICY,
    "hs": VerifyPolicy(tiles=S, split_query_heads_rows=(65, 512)),
    "hs_s8": VerifyPolicy(tiles=S, split_query_heads_rows=(65, 512), num_splits=8),
    "hs_1wg": VerifyPolicy(tiles=S1, split_query_heads_rows=(65, 128)),
}
NAMES = ["B1-T17-H24/4", "B8-T17-H24/4", "B8-T17-H6/1", "B32-T17-H6/1", "B1-T33-H24/4", "B8-T33-H24/4",
         "B1-T33-H6/1", "B8-T33-H6/1", "B32-T33-H6/1", "B1-T65-H6/1", "B8-T65-H6/1", "B1-T65-H24/4"]


def parse(name):
    b, t, h, *l = name.split("-")
    hq, hkv = h[1:].split("/")
    return Shape(int(b[1:]), int(t[1:]), int(hq), int(hkv), 256, int(l[0][1:]) if l else 1024)


def pols(shape):
    out = dict(POLICIES)
    if shape.num_nodes * shape.group > 128:
        out.pop("hs_1wg", None)
    return out


def warm(name):
    shape = parse(name)
    inputs = make_inputs(shape, torch.device("cuda"), 0)
    for pol in pols(shape).values():
        tree_verify_attention_triton(*inputs, policy=pol)
    torch.cuda.synchronize()


def main(out_dir):
    t = time.time()
    with multiprocessing.get_context("spawn").Pool(12) as pool:
        pool.map(warm, NAMES, chunksize=1)
    print(f"warm {time.time() - t:.0f}s", flush=True)
    with open(f"{out_dir}/headsplit_probe.jsonl", "w") as log:
        for name in NAMES:
            shape = parse(name)
            sets = [make_inputs(shape, torch.device("cuda"), 7 + i) for i in range(input_sets_needed(shape))]
            row = {"shape": name}
            calls = {}
            for label, pol in pols(shape).items():
                def call(q, k, v, lens, mask, pol=pol):
                    return tree_verify_attention_triton(q, k, v, lens, mask, policy=pol)
                calls[label] = call
                p = plan_call(*sets[0][:3], None, pol)
                row[label + "_plan"] = f"{p.head_split}x{p.num_m_tiles}x{p.block_m}/{p.block_n}/{p.num_splits}"
                row[label + "_err"] = max(row_error(call(*s), *s, sorted({0, shape.batch - 1})) for s in sets[:2])
            for rep in range(2):
                for label in calls:
                    row.setdefault(label, []).append(round(time_in_graph(calls[label], sets), 2))
            log.write(json.dumps(row) + "\n")
            log.flush()
            base = min(row["plan"])
            print(name, *(f"{label}[{row[label + '_plan']}]={min(row[label])} ({min(row[label]) / base:.3f})"
                          for label in calls),
                  "err", f'{max(row[label + "_err"] for label in calls):.1e}', flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    if len(sys.argv) > 2:  # the T17 even-group shapes past 1k keys, plan against the one-warpgroup split
        NAMES[:] = [f"B{b}-T17-H{h}-L{l}" for l in (8192, 32768) for h in ("24/4", "6/1") for b in (1, 8, 32)]
        NAMES += ["B1-T9-H24/4-L1024", "B8-T9-H6/1-L1024"]
        for k in ("hs", "hs_s8"):
            POLICIES.pop(k)
    main(sys.argv[1])
