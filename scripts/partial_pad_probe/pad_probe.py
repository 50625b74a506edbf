"""Does the distance between one split's partials (256-512 KB on 6 grid shapes) make the sliced
waiting merge slow? Eager and graph us, both launches, sliced waiters forced, with 8 / 32 rows of
padding a split; every output checked. git apply scripts/partial_pad_probe/partial_pad.patch; python3 scripts/partial_pad_probe/pad_probe.py OUT [quick]"""
import json
import multiprocessing
import sys
import time

import torch

from specdec_kernels.bench import Shape, input_sets_needed, make_inputs, row_error, time_eagerly, time_in_graph
from specdec_kernels.tree_verify_triton import tree_verify_attention_triton
from specdec_kernels.verify_plan import DEFAULT_POLICY, VerifyPolicy

FORCE = 1 << 40
POLICIES = {
    "two": DEFAULT_POLICY,
    "two_pad8": VerifyPolicy(partial_pad_rows=8),
    "wait": VerifyPolicy(sliced_waiters_max_split_bytes=FORCE),
    "wait_pad8": VerifyPolicy(sliced_waiters_max_split_bytes=FORCE, partial_pad_rows=8),
    "wait_pad32": VerifyPolicy(sliced_waiters_max_split_bytes=FORCE, partial_pad_rows=32),
}
GRAPH = ("two", "two_pad8")
SHAPES = [Shape(1, 65, 6, 1, 256, 8192), Shape(1, 33, 6, 1, 256, 8192), Shape(1, 33, 6, 1, 256, 32768),
          Shape(1, 65, 6, 1, 256, 32768), Shape(1, 65, 3, 1, 256, 8192), Shape(1, 65, 3, 1, 256, 32768),
          Shape(1, 17, 24, 4, 256, 8192)]  # the last: a near shape (128 KB), sliced waiters by default


def warm(shape):
    inputs = make_inputs(shape, torch.device("cuda"), 0)
    for pol in POLICIES.values():
        tree_verify_attention_triton(*inputs, policy=pol)
    torch.cuda.synchronize()


def main(out_dir, quick=False):
    global SHAPES, POLICIES
    if quick:  # a short device budget: two far shapes and the near one, no 32-row padding, one round
        SHAPES = [SHAPES[0], SHAPES[2], SHAPES[-1]]
        POLICIES = {k: v for k, v in POLICIES.items() if k != "wait_pad32"}
    t = time.time()
    with multiprocessing.get_context("spawn").Pool(14) as pool:
        pool.map(warm, SHAPES, chunksize=1)
    print(f"warm {time.time() - t:.0f}s", flush=True)
    with open(f"{out_dir}/pad_probe.jsonl", "w") as log:
        for shape in SHAPES:
            sets = [make_inputs(shape, torch.device("cuda"), 7 + i) for i in range(input_sets_needed(shape))]
            row = {"shape": shape.name}
            calls = {}
            for name, pol in POLICIES.items():
                def call(q, k, v, lens, mask, pol=pol):
                    return tree_verify_attention_triton(q, k, v, lens, mask, policy=pol)
                calls[name] = call
                row[name + "_err"] = max(row_error(call(*s), *s, [0]) for s in sets[:2])
            for name in GRAPH:
                row[name + "_graph"] = round(time_in_graph(calls[name], sets), 2)
            for rep in range(1 if quick else 2):
                for name in POLICIES:
                    e, h = time_eagerly(calls[name], sets, 50.0)
                    row.setdefault(name + "_eager", []).append(round(e, 2))
                    row.setdefault(name + "_host", []).append(round(h, 2))
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(shape.name, "graph", *(row[n + "_graph"] for n in GRAPH), "eager",
                  *(f"{n}={min(row[n + '_eager'])}" for n in POLICIES),
                  "err", f"{max(row[n + '_err'] for n in POLICIES):.1e}", flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1], len(sys.argv) > 2)
