"""The merge folded into the split kernel inside CUDA graphs too, its counts zeroed once per graph
(a memset node at the graph's start; the merging program sets them back to 0 itself), against the
plan's own merge launch there; graph us (the bench's do_bench timer), interleaved twice, the
graph's own outputs checked. python3 scripts/verify_graph_fold_once_probe.py OUT (one H200, 2026-12-03: slower on all 16)"""
import json
import multiprocessing
import sys
import time

import torch

from specdec_kernels import tree_verify_triton as tvt
from specdec_kernels.bench import Shape, input_sets_needed, make_inputs, row_error, time_in_graph
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import DEFAULT_POLICY, VerifyPolicy

NAMES = """B1-T33-H3/1/256-L1024 B32-T17-H3/1/256-L1024 B32-T9-H3/1/256-L1024 B8-T16-H64/8/128-L8192
B1-T33-H6/1/256-L1024 B1-T65-H3/1/256-L1024 B8-T9-H32/8/128-L1024 B1-T9-H32/8/128-L1024 B8-T17-H32/8/128-L1024
B1-T65-H64/8/128-L32768 B8-T33-H32/8/128-L8192 B1-T17-H32/8/128-L1024 B32-T9-H6/1/256-L1024 B8-T9-H6/1/256-L8192
B1-T9-H6/1/256-L32768 B1-T33-H24/4/256-L1024""".split()

FOLD = VerifyPolicy(persistent_max_keys=2049)  # plans as the default's, its own launch cache
_capturing = torch._C._cuda_isCurrentStreamCapturing


def plan_call_(q, k, v, lens, mask):
    return tree_verify_attention_triton(q, k, v, lens, mask)


def fold_call(q, k, v, lens, mask):
    torch._C._cuda_isCurrentStreamCapturing = lambda: False
    try:
        return tree_verify_attention_triton(q, k, v, lens, mask, policy=FOLD)
    finally:
        torch._C._cuda_isCurrentStreamCapturing = _capturing


CALLS = {"plan": plan_call_, "gfold": fold_call}


def parse(name):
    b, t, h, l = name.split("-")
    hq, hkv, d = h[1:].split("/")
    return Shape(int(b[1:]), int(t[1:]), int(hq), int(hkv), int(d), int(l[1:]))


def warm(name):
    inputs = make_inputs(parse(name), torch.device("cuda"), 0)
    tree_verify_attention_triton(*inputs)
    fold_call(*inputs)
    torch.cuda.synchronize()


def graph_of(call, sets):
    """The calls captured in one graph (after one run on a side stream), their outputs kept."""
    tvt._WORKSPACES.clear()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for s in sets:
            call(*s)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    tvt._WORKSPACES.clear()
    graph = torch.cuda.CUDAGraph()
    outs = []
    with torch.cuda.graph(graph):
        for s in sets:
            outs.append(call(*s))
    return graph, outs


def main(out_dir):
    t = time.time()
    with multiprocessing.get_context("spawn").Pool(14) as pool:
        pool.map(warm, NAMES, chunksize=1)
    print(f"warm {time.time() - t:.0f}s", flush=True)
    with open(f"{out_dir}/graphfold_ab.jsonl", "w") as log:
        for name in NAMES:
            shape = parse(name)
            sets = [make_inputs(shape, torch.device("cuda"), 7 + i) for i in range(input_sets_needed(shape))]
            p = plan_call(*sets[0][:3], None, DEFAULT_POLICY)
            row = {"shape": name, "tiles": f"{p.num_m_tiles}x{p.block_m}/{p.num_splits} w{p.merge.waiters} "
                                          f"f{int(p.merge.fused)} sets{len(sets)}"}
            reqs = sorted({0, shape.batch - 1})
            for rep in range(2):
                for label, call in CALLS.items():
                    graph, outs = graph_of(call, sets)
                    for _ in range(3):
                        graph.replay()
                    torch.cuda.synchronize()
                    if rep == 0:
                        row[label + "_err"] = max(row_error(outs[i], *sets[i], reqs) for i in (0, len(sets) - 1))
                    row.setdefault(label, []).append(round(time_in_graph(call, sets, graph=graph), 2))
                    del graph, outs
                    tvt._WORKSPACES.clear()
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(name, row["tiles"], *[f"{k}: {min(row[k])} ({row[k + '_err']:.1e}) |" for k in CALLS],
                  f"x{min(row['gfold']) / min(row['plan']):.3f}", flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
