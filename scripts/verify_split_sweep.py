"""Split-count and tile sweep of the tree-verify kernel at head dim 256 with one KV head and at
batch 1 with a 1k cache (an experiment, not kept): for each shape, the planned call and calls with
forced split counts and forced tiles, graph-timed by the bench's method, each checked against the
float32 reference. Run from the repository root: python3 scripts/verify_split_sweep.py OUT_DIR
[--only NAME,...]"""
import dataclasses
import json
import multiprocessing
import sys
import time

import torch

from specdec_kernels.bench import Shape, input_sets_needed, l2_flush, make_inputs, measure_ceilings, row_error, \
    time_in_graph
from specdec_kernels.configs import _GLUON_64_ROWS, _PINGPONG_D256, _TRITON_D256
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import DEFAULT_POLICY, VerifyPolicy

TILES = {
    "plan": None,
    "pp-bn32-st3": _PINGPONG_D256,
    "pp-bn64-st2": dataclasses.replace(_PINGPONG_D256, block_n=64, gluon_block_n=64, gluon_stages=2),
    "pp-bn32-st4": dataclasses.replace(_PINGPONG_D256, gluon_stages=4),
    "tr-32rows": dataclasses.replace(_TRITON_D256, max_block_m=32, resident_per_sm=2),
    "gluon64": _GLUON_64_ROWS,
}

# (batch, nodes, q heads, kv heads, head dim, prefix): [(tiles, splits)...]; splits None: planned
D256 = lambda b, t, hq, l: Shape(b, t, hq, 1, 256, l)  # noqa: E731
SWEEP = []
for t, hq in ((9, 3), (17, 3), (9, 6)):
    small = t * hq <= 32
    SWEEP.append((D256(1, t, hq, 32768), [("plan", None), ("pp-bn32-st3", 64), ("pp-bn32-st3", 128),
                                          ("pp-bn64-st2", 32), ("pp-bn64-st2", 64), ("pp-bn64-st2", 128),
                                          ("pp-bn32-st4", 64), ("pp-bn32-st4", 128)]
                  + ([("tr-32rows", 64), ("tr-32rows", 128)] if small else [])))
    SWEEP.append((D256(8, t, hq, 8192), [("plan", None), ("pp-bn32-st3", 32), ("pp-bn64-st2", 8),
                                         ("pp-bn64-st2", 16), ("pp-bn32-st4", 16)]
                  + ([("tr-32rows", 16), ("tr-32rows", 32)] if small else [])))
    SWEEP.append((D256(32, t, hq, 1024), [("plan", None), ("pp-bn64-st2", 2), ("pp-bn64-st2", 4),
                                          ("pp-bn32-st4", 4)]
                  + ([("tr-32rows", 4), ("tr-32rows", 8)] if small else [])))
SWEEP.append((Shape(1, 9, 24, 4, 256, 32768), [("plan", None), ("pp-bn32-st3", 64), ("pp-bn64-st2", 32),
                                               ("pp-bn64-st2", 64)]))
SWEEP.append((D256(1, 9, 3, 1024), [("plan", None), ("pp-bn32-st3", 2), ("pp-bn32-st3", 8), ("pp-bn32-st3", 16),
                                    ("pp-bn64-st2", 4), ("pp-bn64-st2", 8), ("pp-bn64-st2", 16)]))
SWEEP.append((Shape(1, 9, 32, 8, 128, 1024), [("plan", None), ("plan", 2), ("plan", 8), ("plan", 16),
                                              ("gluon64", 4), ("gluon64", 8), ("gluon64", 16)]))


def policy_of(tiles: str, splits):
    if tiles == "plan" and splits is None:
        return DEFAULT_POLICY
    return VerifyPolicy(tiles=TILES[tiles], num_splits=splits)


def kernel_us(call, sets, rounds=4):
    """Mean CUDA time a call of each kernel (profiler; eager calls rotating the input sets)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(rounds):
            for inputs in sets:
                call(*inputs)
        torch.cuda.synchronize()
    calls = rounds * len(sets)
    return {e.key[:40]: round(e.device_time_total / calls, 2) for e in prof.key_averages() if e.device_time_total > 0}


def _compile_one(job):
    shape, tiles, splits = job
    try:
        inputs = make_inputs(shape, torch.device("cuda"), 0)
        policy = policy_of(tiles, splits)
        tree_verify_attention_triton(*inputs, policy=policy)
        torch.cuda.synchronize()
    except Exception as exc:  # reported by the timed run
        print("compile", shape.name, tiles, splits, type(exc).__name__, str(exc)[:200], flush=True)


def main():
    out_dir = sys.argv[1]
    only = set(sys.argv[3].split(",")) if len(sys.argv) > 3 and sys.argv[2] == "--only" else None
    jobs = [(shape, tiles, splits) for shape, runs in SWEEP if not only or shape.name in only for tiles, splits in runs]
    started = time.time()
    with multiprocessing.get_context("spawn").Pool(14) as pool:
        pool.map(_compile_one, jobs, chunksize=1)
    print(f"warm compile {time.time() - started:.1f} s, {len(jobs)} runs", flush=True)
    device = torch.device("cuda")
    ceilings = measure_ceilings(device)
    print(json.dumps(ceilings), flush=True)
    results = []
    with open(f"{out_dir}/sweep.jsonl", "w") as log, l2_flush("read"):
        current = None
        for shape, tiles, splits in jobs:
            if shape != current:
                sets = [make_inputs(shape, device, 7 + i) for i in range(input_sets_needed(shape))]
                current = shape
            policy = policy_of(tiles, splits)
            row = {"shape": shape.name, "tiles": tiles, "forced_splits": splits}
            try:
                plan = plan_call(*sets[0][:3], None, policy)
                row.update(kernel=plan.kernel, block_m=plan.block_m, block_n=plan.block_n, stages=plan.stages,
                           splits=plan.num_splits, chunk=plan.chunk, grid=plan.grid, persistent=plan.persistent,
                           merge_grid=plan.merge.grid if plan.merge else 0)

                def call(q, k, v, lens, mask):
                    return tree_verify_attention_triton(q, k, v, lens, mask, policy=policy)

                row["err"] = max(row_error(call(*inputs), *inputs, sorted({0, shape.batch - 1})) for inputs in sets[:2])
                row["us"] = round(time_in_graph(call, sets), 2)
                if shape.batch == 1 and shape.prefix == 32768:
                    try:
                        row["kernels"] = kernel_us(call, sets)
                    except Exception as exc:
                        row["kernels"] = repr(exc)[:100]
                row["bw"] = round(shape.bytes_moved() / (row["us"] * 1e-6) / 1e12 / ceilings["copy_tb_s"], 3)
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            results.append(row)
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(json.dumps(row), flush=True)
    print(f"done in {time.time() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
