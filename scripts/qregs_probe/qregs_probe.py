"""Head dim 256, 128-row ping-pong tiles: q in registers (shared memory freed for a 4th ring slot)
against q in shared memory; graph us, best of two, every output checked. On the CPU (Triton 3.6,
sm_90) the q-in-registers kernel compiled with 264 B of spills against 92-124 (6 spill loads and
stores a key tile), 115-148 KB of shared memory; with 64-key tiles it spilled 1.8 KB (not tried).
git apply scripts/qregs_probe/q_in_registers.patch; python3 scripts/qregs_probe/qregs_probe.py OUT"""
import dataclasses
import json
import multiprocessing
import sys
import time

import torch

from specdec_kernels import configs
from specdec_kernels.bench import Shape, input_sets_needed, make_inputs, row_error, time_in_graph
from specdec_kernels.tree_verify_triton import tree_verify_attention_triton
from specdec_kernels.verify_plan import DEFAULT_POLICY, VerifyPolicy

POLICIES = {
    "smem": DEFAULT_POLICY,
    "regs3": VerifyPolicy(tiles=dataclasses.replace(configs._PINGPONG_D256, gluon_q_in_registers=True)),
    "regs4": VerifyPolicy(tiles=dataclasses.replace(configs._PINGPONG_D256, gluon_q_in_registers=True,
                                                    gluon_stages=4)),
}
# the compute-bound head-dim-256 misses on 128-row tiles, and memory-bound 128-row shapes beside them
NAMES = """B1-T33-H24/4-L8192 B1-T33-H24/4-L32768 B8-T33-H24/4-L8192 B32-T33-H24/4-L8192 B32-T33-H24/4-L32768
B1-T65-H24/4-L8192 B8-T65-H24/4-L8192 B8-T65-H24/4-L32768 B32-T65-H24/4-L8192 B1-T33-H6/1-L32768
B8-T33-H6/1-L8192 B1-T65-H6/1-L32768 B8-T65-H6/1-L8192 B32-T65-H6/1-L8192 B8-T65-H3/1-L8192 B32-T65-H3/1-L32768
B8-T17-H24/4-L8192 B8-T17-H24/4-L32768 B32-T17-H24/4-L8192 B8-T17-H6/1-L32768""".split()


def parse(name):
    b, t, h, l = name.split("-")
    hq, hkv = h[1:].split("/")
    return Shape(int(b[1:]), int(t[1:]), int(hq), int(hkv), 256, int(l[1:]))


def warm(name):
    inputs = make_inputs(parse(name), torch.device("cuda"), 0)
    for pol in POLICIES.values():
        tree_verify_attention_triton(*inputs, policy=pol)
    torch.cuda.synchronize()


def main(out_dir):
    t = time.time()
    with multiprocessing.get_context("spawn").Pool(14) as pool:
        pool.map(warm, NAMES, chunksize=1)
    print(f"warm {time.time() - t:.0f}s", flush=True)
    with open(f"{out_dir}/qregs_probe.jsonl", "w") as log:
        for name in NAMES:
            shape = parse(name)
            sets = [make_inputs(shape, torch.device("cuda"), 7 + i) for i in range(input_sets_needed(shape))]
            row = {"shape": name}
            calls = {}
            for label, pol in POLICIES.items():
                def call(q, k, v, lens, mask, pol=pol):
                    return tree_verify_attention_triton(q, k, v, lens, mask, policy=pol)
                calls[label] = call
                row[label + "_err"] = max(row_error(call(*s), *s, sorted({0, shape.batch - 1})) for s in sets[:2])
            for rep in range(2):
                for label in POLICIES:
                    row.setdefault(label, []).append(round(time_in_graph(calls[label], sets), 2))
            log.write(json.dumps(row) + "\n")
            log.flush()
            base = min(row["smem"])
            print(name, *(f"{label}={min(row[label])} ({min(row[label]) / base:.3f})" for label in POLICIES),
                  "err", f'{max(row[label + "_err"] for label in POLICIES):.1e}', flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
