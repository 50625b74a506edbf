"""Graph us of grid shapes with the kernel files installed now (the
bench's timer; every output checked against float32). SHAPES='...' to time others.
python3 time_shapes.py OUT LABEL; python3 time_shapes.py --warm (compile every shape's kernels in 14
processes first: the timed runs then find them in Triton's cache)"""
import json
import multiprocessing
import os
import sys

import torch

from specdec_kernels.bench import Shape, capture_graph, input_sets_needed, make_inputs, row_error, time_in_graph
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import DEFAULT_POLICY

# the 26 compute misses of the grid at ddc566b, compute-bound shapes that met it, then near misses of 2101195
DEFAULT = ("B1-T33-H24/4/256-L8192 B1-T33-H24/4/256-L32768 B8-T33-H24/4/256-L1024 B32-T33-H24/4/256-L1024 "
           "B1-T65-H24/4/256-L1024 B1-T65-H24/4/256-L8192 B8-T65-H24/4/256-L1024 B32-T65-H24/4/256-L1024 "
           "B1-T33-H6/1/256-L8192 B1-T33-H6/1/256-L32768 B8-T33-H6/1/256-L8192 B32-T33-H6/1/256-L1024 "
           "B1-T65-H6/1/256-L8192 B1-T65-H6/1/256-L32768 B8-T65-H6/1/256-L1024 B8-T65-H6/1/256-L8192 "
           "B32-T65-H6/1/256-L1024 B1-T65-H3/1/256-L32768 B8-T65-H3/1/256-L8192 B32-T65-H3/1/256-L1024 "
           "B1-T65-H32/8/128-L8192 B8-T65-H32/8/128-L1024 B1-T33-H64/8/128-L8192 B8-T33-H64/8/128-L1024 "
           "B1-T65-H64/8/128-L1024 B8-T65-H64/8/128-L1024 "
           "B8-T65-H24/4/256-L8192 B32-T33-H24/4/256-L8192 B8-T65-H32/8/128-L8192 B32-T65-H64/8/128-L8192 "
           "B8-T9-H24/4/256-L8192 B8-T16-H32/8/128-L8192 "
           "B32-T33-H64/8/128-L1024 B32-T65-H32/8/128-L1024 B8-T33-H6/1/256-L1024 B32-T33-H6/1/256-L1024 "
           "B8-T33-H24/4/256-L1024 B1-T9-H32/8/128-L1024 B1-T9-H6/1/256-L32768 B8-T16-H64/8/128-L8192 "
           "B8-T33-H64/8/128-L8192 B32-T33-H64/8/128-L8192 B32-T9-H3/1/256-L1024")
NAMES = (os.environ.get("SHAPES") or DEFAULT).split()


def parse(name):
    b, t, h, l = name.split("-")
    hq, hkv, d = h[1:].split("/")
    return Shape(int(b[1:]), int(t[1:]), int(hq), int(hkv), int(d), int(l[1:]))


def main(out_dir, label):
    with open(f"{out_dir}/times.jsonl", "a") as log:
        for name in NAMES:
            shape = parse(name)
            sets = [make_inputs(shape, torch.device("cuda"), 7 + i) for i in range(input_sets_needed(shape))]
            p = plan_call(*sets[0][:3], None, DEFAULT_POLICY)

            def call(q, k, v, lens, mask):
                return tree_verify_attention_triton(q, k, v, lens, mask, policy=DEFAULT_POLICY)
            err = max(row_error(call(*s), *s, sorted({0, shape.batch - 1})) for s in sets[:2])
            graph = capture_graph(call, sets)
            g = time_in_graph(call, sets, graph=graph)
            del graph
            row = {"shape": name, "label": label, "plan": f"{p.kernel} {p.num_m_tiles}x{p.block_m}+{p.tail_m}/"
                   f"{p.num_splits}", "us": round(g, 2), "err": err}
            log.write(json.dumps(row) + "\n")
            print(label, name, row["plan"], row["us"], f"{err:.1e}", flush=True)
            del sets
            torch.cuda.empty_cache()


def warm(name):
    shape = parse(name)
    inputs = make_inputs(shape, torch.device("cuda"), 0)
    tree_verify_attention_triton(*inputs, policy=DEFAULT_POLICY)
    torch.cuda.synchronize()


if __name__ == "__main__":
    if sys.argv[1] == "--warm":
        with multiprocessing.get_context("spawn").Pool(14) as pool:
            pool.map(warm, NAMES, chunksize=1)
    else:
        main(sys.argv[1], sys.argv[2])
