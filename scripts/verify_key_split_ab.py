"""A / B of the key split (an experiment, not kept): per shape, the default plan, the key split
on the same splits, and the key split on half the splits; graph us, eager us, host us, each output
checked. Interleaved twice. python3 ks_ab.py OUT [SECONDS]"""
import dataclasses
import json
import multiprocessing
import sys
import time

import torch

from specdec_kernels.bench import Shape, input_sets_needed, l2_flush, make_inputs, row_error, time_eagerly, \
    time_in_graph
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import VerifyPolicy

SHAPES = [Shape(1, 9, 6, 1, 256, 32768), Shape(1, 9, 3, 1, 256, 32768), Shape(1, 17, 3, 1, 256, 32768),
          Shape(8, 9, 6, 1, 256, 8192), Shape(8, 9, 3, 1, 256, 8192), Shape(8, 17, 3, 1, 256, 8192),
          Shape(32, 9, 6, 1, 256, 1024), Shape(32, 9, 3, 1, 256, 1024), Shape(32, 17, 3, 1, 256, 1024),
          Shape(1, 9, 6, 1, 256, 8192), Shape(1, 9, 6, 1, 256, 1024), Shape(8, 9, 6, 1, 256, 32768),
          Shape(1, 9, 24, 4, 256, 8192), Shape(1, 9, 24, 4, 256, 32768), Shape(8, 9, 24, 4, 256, 8192),
          Shape(32, 9, 24, 4, 256, 8192), Shape(1, 9, 32, 8, 128, 1024), Shape(1, 9, 32, 8, 128, 8192),
          Shape(8, 9, 32, 8, 128, 8192), Shape(1, 16, 32, 8, 128, 32768)]


def policies(shape):
    q, k, v, lens, mask = make_inputs(shape, torch.device("cuda"), 0)
    base = plan_call(q, k, v, None, VerifyPolicy())
    ks = dataclasses.replace(base.config, gluon_key_split=True, gluon_pingpong_64_block_n=0)
    out = {"base": VerifyPolicy(num_splits=base.num_splits), "ks": VerifyPolicy(tiles=ks, num_splits=base.num_splits)}
    if base.num_splits > 1:
        out["ks_half"] = VerifyPolicy(tiles=ks, num_splits=max(1, base.num_splits // 2))
    if base.num_splits < 64 and shape.batch == 1:
        out["ks_double"] = VerifyPolicy(tiles=ks, num_splits=base.num_splits * 2)
    return out


def _compile_one(shape):
    inputs = make_inputs(shape, torch.device("cuda"), 0)
    for name, policy in policies(shape).items():
        try:
            for _ in range(2):
                tree_verify_attention_triton(*inputs, policy=policy)
            torch.cuda.synchronize()
        except Exception as exc:
            print("compile", shape.name, name, type(exc).__name__, str(exc)[:300], flush=True)


def main():
    out_dir = sys.argv[1]
    budget = float(sys.argv[2]) if len(sys.argv) > 2 else 1e9
    started = time.time()
    with multiprocessing.get_context("spawn").Pool(15) as pool:
        pool.map(_compile_one, SHAPES, chunksize=1)
    print(f"warm compile {time.time() - started:.1f} s", flush=True)
    device = torch.device("cuda")
    with open(f"{out_dir}/ab.jsonl", "w") as log, l2_flush("read"):
        for shape in SHAPES:
            sets = [make_inputs(shape, device, 7 + i) for i in range(input_sets_needed(shape))]
            pols = policies(shape)
            for rep in range(2):
                if time.time() - started > budget:
                    print("out of time", flush=True)
                    return
                for name, policy in pols.items():
                    row = {"shape": shape.name, "v": name, "rep": rep}
                    try:
                        plan = plan_call(*sets[0][:3], None, policy)
                        row.update(splits=plan.num_splits, ks=plan.key_split,
                                   fused=plan.merge is not None and plan.merge.fused)

                        def call(q, k, v, lens, mask, policy=policy):
                            return tree_verify_attention_triton(q, k, v, lens, mask, policy=policy)

                        row["err"] = max(row_error(call(*inputs), *inputs, sorted({0, shape.batch - 1}))
                                         for inputs in sets[:2])
                        row["us"] = round(time_in_graph(call, sets), 2)
                        if rep == 0:
                            eager, host = time_eagerly(call, sets, row["us"])
                            row.update(eager=round(eager, 2), host=round(host, 2))
                    except Exception as exc:
                        row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                    log.write(json.dumps(row) + "\n")
                    log.flush()
                    print(json.dumps(row), flush=True)
    print(f"done in {time.time() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
