"""Policy A/B on the H200, interleaved twice: graph us, eager us and host us (the bench's own timers),
every output checked against float32. Experiments:
  slots4: head dim 256's 128-row programs (two warpgroups) on 4 ring slots instead of 3, on the 39 grid shapes
          planned on them
  rows64: head dim 256, G = 6, T 33/65: the plan's 128-row tiles against 64-row tiles (one warpgroup)
  wide:   head dim 128 shapes the short-stream rule narrows: the plan against wide_tile_min_chunk=0
  rules128, rules256: every grid shape whose plan the two new rules change: the old plan (before) against the new
          default (after)
python3 policy_ab.py OUT EXPERIMENT [EXPERIMENT...]"""
import dataclasses
import json
import multiprocessing
import sys
import time

import torch

from specdec_kernels import configs
from specdec_kernels.bench import (Shape, capture_graph, input_sets_needed, make_inputs, row_error, time_eagerly,
                                   time_in_graph)
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import DEFAULT_POLICY, VerifyPolicy

ROWS64 = VerifyPolicy(tiles=dataclasses.replace(configs._PINGPONG_D256_ONE_WARPGROUP, max_block_m=64))
WIDE = VerifyPolicy(wide_tile_min_chunk=0)
OLD_WIDE = VerifyPolicy(tiles=dataclasses.replace(configs._PINGPONG, gluon_pingpong_192=False,
                                                  gluon_pingpong_tail=False))
OLD_SHORT = VerifyPolicy(short_split_max_keys=0) if hasattr(VerifyPolicy(), "short_split_max_keys") else None
RULES_128 = ["B1-T65-H32/8/128-L8192", "B8-T65-H32/8/128-L1024", "B1-T33-H64/8/128-L8192", "B8-T33-H64/8/128-L1024",
             "B1-T65-H64/8/128-L8192", "B8-T65-H64/8/128-L1024"]
RULES_256 = ["B1-T33-H3/1/256-L1024", "B1-T33-H3/1/256-L8192", "B1-T33-H3/1/256-L32768", "B8-T33-H3/1/256-L1024",
             "B8-T33-H3/1/256-L8192", "B32-T33-H3/1/256-L1024", "B1-T65-H3/1/256-L1024", "B1-T65-H3/1/256-L8192",
             "B1-T65-H3/1/256-L32768", "B8-T65-H3/1/256-L1024", "B32-T65-H3/1/256-L1024",
             "B1-T33-H24/4/256-L1024", "B1-T33-H24/4/256-L8192", "B8-T33-H24/4/256-L1024", "B1-T65-H24/4/256-L1024",
             "B1-T33-H6/1/256-L1024", "B1-T33-H6/1/256-L8192", "B1-T33-H6/1/256-L32768", "B8-T33-H6/1/256-L1024",
             "B32-T33-H6/1/256-L1024", "B1-T65-H6/1/256-L1024", "B1-T65-H6/1/256-L8192", "B8-T65-H6/1/256-L1024"]
SLOTS4 = VerifyPolicy(tiles=dataclasses.replace(configs._PINGPONG_D256_MANY_ROWS, gluon_stages=4))
SLOTS4_NAMES = ['B1-T65-H24/4/256-L8192', 'B1-T65-H24/4/256-L32768', 'B8-T65-H24/4/256-L1024', 'B8-T65-H24/4/256-L8192', 'B8-T65-H24/4/256-L32768', 'B32-T65-H24/4/256-L1024', 'B32-T65-H24/4/256-L8192', 'B32-T65-H24/4/256-L32768', 'B1-T65-H6/1/256-L32768', 'B8-T65-H6/1/256-L8192', 'B8-T65-H6/1/256-L32768', 'B32-T65-H6/1/256-L1024', 'B32-T65-H6/1/256-L8192', 'B32-T65-H6/1/256-L32768', 'B8-T65-H3/1/256-L8192', 'B8-T65-H3/1/256-L32768', 'B32-T65-H3/1/256-L8192', 'B32-T65-H3/1/256-L32768', 'B1-T33-H24/4/256-L32768', 'B8-T33-H24/4/256-L8192', 'B8-T33-H24/4/256-L32768', 'B32-T33-H24/4/256-L1024', 'B32-T33-H24/4/256-L8192', 'B32-T33-H24/4/256-L32768', 'B8-T33-H6/1/256-L8192', 'B8-T33-H6/1/256-L32768', 'B32-T33-H6/1/256-L8192', 'B32-T33-H6/1/256-L32768', 'B8-T33-H3/1/256-L32768', 'B32-T33-H3/1/256-L8192', 'B32-T33-H3/1/256-L32768', 'B8-T17-H24/4/256-L8192', 'B8-T17-H24/4/256-L32768', 'B32-T17-H24/4/256-L1024', 'B32-T17-H24/4/256-L8192', 'B32-T17-H24/4/256-L32768', 'B8-T17-H6/1/256-L32768', 'B32-T17-H6/1/256-L8192', 'B32-T17-H6/1/256-L32768']
EXPERIMENTS = {
    "slots4": ({"before": DEFAULT_POLICY, "after": SLOTS4}, SLOTS4_NAMES),
    "rows64": ({"before": DEFAULT_POLICY, "after": ROWS64},
               [f"B{b}-T{t}-H{h}/256-L{l}" for t in (65, 33) for h in ("24/4", "6/1") for b in (1, 8, 32)
                for l in (1024, 8192, 32768)]),
    "wide": ({"before": DEFAULT_POLICY, "after": WIDE},
             ["B8-T65-H32/8/128-L1024", "B8-T33-H64/8/128-L1024", "B8-T65-H64/8/128-L1024", "B8-T33-H32/8/128-L1024",
              "B8-T17-H64/8/128-L1024", "B1-T65-H32/8/128-L8192", "B1-T33-H64/8/128-L8192",
              "B1-T65-H64/8/128-L8192", "B1-T33-H32/8/128-L8192", "B1-T17-H64/8/128-L8192"]),
    "rules128": ({"before": OLD_WIDE, "after": DEFAULT_POLICY}, RULES_128),
    "rules256": ({"before": OLD_SHORT, "after": DEFAULT_POLICY}, RULES_256),
}


def parse(name):
    b, t, h, l = name.split("-")
    hq, hkv, d = h[1:].split("/")
    return Shape(int(b[1:]), int(t[1:]), int(hq), int(hkv), int(d), int(l[1:]))


def warm(job):
    exp, name = job
    inputs = make_inputs(parse(name), torch.device("cuda"), 0)
    for pol in EXPERIMENTS[exp][0].values():
        tree_verify_attention_triton(*inputs, policy=pol)
    torch.cuda.synchronize()


def run(out_dir, exp):
    policies, names = EXPERIMENTS[exp]
    with open(f"{out_dir}/{exp}.jsonl", "w") as log:
        for name in names:
            shape = parse(name)
            sets = [make_inputs(shape, torch.device("cuda"), 7 + i) for i in range(input_sets_needed(shape))]
            row = {"shape": name}
            calls = {}
            for label, pol in policies.items():
                def call(q, k, v, lens, mask, pol=pol):
                    return tree_verify_attention_triton(q, k, v, lens, mask, policy=pol)
                calls[label] = call
                p = plan_call(*sets[0][:3], None, pol)
                row[label + "_plan"] = (f"{p.kernel} {p.head_split}x{p.num_m_tiles}x{p.block_m}+{p.tail_m}"
                                        f"/{p.block_n}/{p.num_splits} st{p.stages}")
                row[label + "_err"] = max(row_error(call(*s), *s, sorted({0, shape.batch - 1})) for s in sets[:2])
            for rep in range(2):
                for label, call in calls.items():
                    graph = capture_graph(call, sets)
                    g = time_in_graph(call, sets, graph=graph)
                    e = time_eagerly(call, sets, g, graph)
                    del graph
                    row.setdefault(label, []).append(round(g, 2))
                    row.setdefault(label + "_eager", []).append(round(e.gpu_us, 2))
                    row.setdefault(label + "_host", []).append(round(e.host_us, 2))
            log.write(json.dumps(row) + "\n")
            log.flush()
            b, a = min(row["before"]), min(row["after"])
            print(exp, name, row["before_plan"], "->", row["after_plan"], f"graph {b} -> {a} ({a / b:.3f})",
                  f"eager {min(row['before_eager'])} -> {min(row['after_eager'])}",
                  f"host {min(row['before_host'])} -> {min(row['after_host'])}",
                  "err", f'{max(row[k + "_err"] for k in calls):.1e}', flush=True)
            del sets
            torch.cuda.empty_cache()


def main(out_dir, exps):
    t = time.time()
    jobs = [(exp, name) for exp in exps for name in EXPERIMENTS[exp][1]]
    with multiprocessing.get_context("spawn").Pool(14) as pool:
        pool.map(warm, jobs, chunksize=1)
    print(f"warm {time.time() - t:.0f}s", flush=True)
    for exp in exps:
        run(out_dir, exp)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
