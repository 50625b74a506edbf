"""Graph us of a few compute-bound shapes with the ping-pong kernel file installed now (the bench's
timer; outputs checked for every exact variant;
SHAPES='B8-T65-H24/4/256-L8192 ...' to time others). python3 time_shapes.py OUT LABEL"""
import json
import os
import sys

import torch

from specdec_kernels.bench import Shape, capture_graph, input_sets_needed, make_inputs, row_error, time_in_graph
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import DEFAULT_POLICY

NAMES = os.environ["SHAPES"].split() if os.environ.get("SHAPES") else ["B8-T65-H24/4/256-L8192", "B32-T33-H24/4/256-L8192", "B8-T65-H6/1/256-L8192", "B8-T65-H32/8/128-L8192",
         "B32-T33-H64/8/128-L8192"]


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
            out = call(*sets[0])
            err = row_error(out, *sets[0], sorted({0, shape.batch - 1})) if "no_rescale" not in label and "no_softmax" not in label else None
            graph = capture_graph(call, sets)
            g = time_in_graph(call, sets, graph=graph)
            del graph
            row = {"shape": name, "label": label, "plan": f"{p.num_m_tiles}x{p.block_m}+{p.tail_m}/{p.num_splits}",
                   "us": round(g, 2), "err": err}
            log.write(json.dumps(row) + "\n")
            print(label, name, row["plan"], row["us"], err, flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
