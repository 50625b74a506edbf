"""Head dim 256: 64-key tiles (2 ring slots at 128 rows, 3 at 64) against the table's 32-key tiles,
graph us, every output checked. python3 scripts/verify_d256_wide_keys_probe.py OUT"""
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

WIDE = dataclasses.replace(configs._PINGPONG_D256, gluon_block_n=64, gluon_stages=2)
WIDE_ONE = dataclasses.replace(configs._PINGPONG_D256_ONE_WARPGROUP, gluon_block_n=64, gluon_stages=3)
NAMES = """B1-T9-H24/4-L32768 B1-T17-H24/4-L1024 B8-T17-H24/4-L1024 B1-T33-H24/4-L1024 B1-T33-H24/4-L8192
B1-T33-H24/4-L32768 B8-T33-H24/4-L1024 B8-T33-H24/4-L8192 B32-T33-H24/4-L1024 B32-T33-H24/4-L8192
B32-T33-H24/4-L32768 B1-T65-H24/4-L1024 B1-T65-H24/4-L8192 B8-T65-H24/4-L1024 B8-T65-H24/4-L8192
B8-T65-H24/4-L32768 B32-T65-H24/4-L1024 B32-T65-H24/4-L8192 B1-T9-H6/1-L32768 B8-T9-H6/1-L8192
B32-T9-H6/1-L1024 B8-T17-H6/1-L1024 B32-T17-H6/1-L1024 B1-T33-H6/1-L8192 B1-T33-H6/1-L32768 B8-T33-H6/1-L8192
B32-T33-H6/1-L1024 B1-T65-H6/1-L8192 B1-T65-H6/1-L32768 B8-T65-H6/1-L1024 B8-T65-H6/1-L8192 B32-T65-H6/1-L1024
B32-T65-H6/1-L8192 B1-T9-H3/1-L32768 B8-T9-H3/1-L8192 B32-T9-H3/1-L1024 B8-T17-H3/1-L8192 B32-T17-H3/1-L1024
B32-T33-H3/1-L1024 B1-T65-H3/1-L8192 B8-T65-H3/1-L8192 B32-T65-H3/1-L8192 B32-T65-H3/1-L32768
B8-T17-H24/4-L8192 B8-T17-H24/4-L32768 B32-T17-H24/4-L8192 B8-T9-H24/4-L8192 B8-T17-H6/1-L32768""".split()


def parse(name):
    b, t, h, l = name.split("-")
    hq, hkv = h[1:].split("/")
    return Shape(int(b[1:]), int(t[1:]), int(hq), int(hkv), 256, int(l[1:]))


def policy(shape, wide):
    if not wide:
        return DEFAULT_POLICY
    return VerifyPolicy(tiles=WIDE_ONE if shape.num_nodes * shape.q_heads // shape.kv_heads <= 64 else WIDE)


def warm(name):
    shape = parse(name)
    inputs = make_inputs(shape, torch.device("cuda"), 0)
    for wide in (False, True):
        tree_verify_attention_triton(*inputs, policy=policy(shape, wide))
    torch.cuda.synchronize()


def main(out_dir):
    t = time.time()
    with multiprocessing.get_context("spawn").Pool(14) as pool:
        pool.map(warm, NAMES, chunksize=1)
    print(f"warm {time.time() - t:.0f}s", flush=True)
    with open(f"{out_dir}/bn64_probe.jsonl", "w") as log:
        for name in NAMES:
            shape = parse(name)
            sets = [make_inputs(shape, torch.device("cuda"), 7 + i) for i in range(input_sets_needed(shape))]
            row = {"shape": name}
            for label, wide in (("a", False), ("b", True)):
                pol = policy(shape, wide)
                plan = plan_call(*sets[0][:3], None, pol)
                row[label + "_plan"] = [plan.block_m, plan.num_m_tiles, plan.block_n, plan.stages, plan.num_splits,
                                        plan.persistent]

                def call(q, k, v, lens, mask, pol=pol):
                    return tree_verify_attention_triton(q, k, v, lens, mask, policy=pol)

                row[label + "_err"] = max(row_error(call(*s), *s, sorted({0, shape.batch - 1})) for s in sets[:2])
                row[label] = []
            for rep in range(2):
                for label, wide in (("a", False), ("b", True)):
                    pol = policy(shape, wide)
                    row[label].append(round(time_in_graph(
                        lambda q, k, v, lens, mask, pol=pol: tree_verify_attention_triton(q, k, v, lens, mask, policy=pol),
                        sets), 2))
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(name, row["a_plan"], row["b_plan"], min(row["a"]), "->", min(row["b"]),
                  f'{min(row["b"]) / min(row["a"]):.3f}', f'err {row["a_err"]:.1e} {row["b_err"]:.1e}', flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
