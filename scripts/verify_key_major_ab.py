"""A / B of the key-major kernel at head dim 256 (an experiment, not kept): on one H200, every
bench-grid shape of at most 64 packed rows at head dim 256, timed with the 64-row ping-pong
warpgroup (the sm_90 entry, forced as the policy's tiles) and the key-major kernel (its entry
forced likewise, with its planned splits and, at batch 1 and B8-L8k, half and twice them),
interleaved, graph-timed by the bench's method, every timed output checked against the float32 reference; eager
GPU and host time and the profiler's split kernel / merge times on the goal's misses. Run from the
repository root: python3 scripts/verify_key_major_ab.py OUT_DIR [SECONDS]"""
import json
import multiprocessing
import sys
import time

import torch

from specdec_kernels import configs
from specdec_kernels.bench import Shape, input_sets_needed, l2_flush, make_inputs, row_error, time_eagerly, \
    time_in_graph
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import VerifyPolicy, VerifyShape, VerifyTarget, plan_verify

H200 = VerifyTarget("sm_90", 132, gluon=True, dependent_launch=True)
HEADS = ((9, 3, 1), (17, 3, 1), (9, 6, 1), (9, 24, 4))
MISSES = [Shape(1, 9, 3, 1, 256, 32768), Shape(1, 17, 3, 1, 256, 32768), Shape(1, 9, 6, 1, 256, 32768),
          Shape(1, 9, 24, 4, 256, 32768), Shape(8, 9, 3, 1, 256, 8192), Shape(8, 17, 3, 1, 256, 8192),
          Shape(8, 9, 6, 1, 256, 8192), Shape(32, 9, 3, 1, 256, 1024), Shape(32, 17, 3, 1, 256, 1024),
          Shape(32, 9, 6, 1, 256, 1024)]
OTHERS = [Shape(b, t, hq, hkv, 256, l) for b in (1, 8, 32) for l in (1024, 8192, 32768) for t, hq, hkv in HEADS]
OTHERS = [s for s in OTHERS if s not in MISSES]


def vshape(s):
    return VerifyShape(s.batch, s.num_nodes, s.q_heads, s.kv_heads, s.head_dim, s.prefix + s.num_nodes)


def policy_of(shape, name):
    kind, _, value = name.partition("=")
    if kind == "before":
        return VerifyPolicy(tiles=configs._PINGPONG_D256_ONE_WARPGROUP)
    rows = shape.num_nodes * shape.group
    key_major = configs.KEY_MAJOR_D256 if rows <= 32 else configs.KEY_MAJOR_D256_TWO_WARPGROUPS
    return VerifyPolicy(tiles=key_major, num_splits=int(value) if kind == "splits" else None)


def jobs():
    """In order of what matters most, so that a time limit cuts the least: the misses once each way,
    every other shape, split sweeps at batch 1 (8k, 32k keys) and B8-L8k, the misses again."""
    first, sweeps, others, again = [], [], [], []
    for s in MISSES:
        first += [(s, "before"), (s, "after")]
        again += [(s, "before"), (s, "after")]
    for s in MISSES + OTHERS:
        if (s.batch == 1 and s.prefix > 1024) or (s.batch == 8 and s.prefix == 8192):
            splits = plan_verify(vshape(s), H200, policy_of(s, "after")).num_splits
            sweeps += [(s, f"splits={n}") for n in (splits // 2, 2 * splits) if 1 <= n <= 64]
    for s in OTHERS:
        others += [(s, "before"), (s, "after")]
    return first + others + sweeps + again


def _compile_one(job):
    shape, names = job
    inputs = make_inputs(shape, torch.device("cuda"), 0)
    for name in names:  # an eager call compiles the split kernel with and without the folded merge
        try:
            tree_verify_attention_triton(*inputs, policy=policy_of(shape, name))
            torch.cuda.synchronize()
        except Exception as exc:
            print("compile", shape.name, name, type(exc).__name__, str(exc)[:300], flush=True)


def kernel_us(call, sets, rounds=4):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(rounds):
            for inputs in sets:
                call(*inputs)
        torch.cuda.synchronize()
    return {e.key[:30]: round(e.device_time_total / (rounds * len(sets)), 2) for e in prof.key_averages()
            if e.device_time_total > 0}


def main():
    out_dir, budget = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 1e9
    started = time.time()
    todo = jobs()
    print(f"{len(todo)} runs", flush=True)
    with multiprocessing.get_context("spawn").Pool(15) as pool:
        by_shape = {}
        for shape, name in todo:
            by_shape.setdefault(shape, []).append(name)
        pool.map(_compile_one, [(s, list(dict.fromkeys(n))) for s, n in by_shape.items()], chunksize=1)
    print(f"warm compile {time.time() - started:.1f} s", flush=True)
    device = torch.device("cuda")
    with open(f"{out_dir}/ab.jsonl", "w") as log, l2_flush("read"):
        current, timed = None, set()
        for shape, name in todo:
            if time.time() - started > budget:
                print("out of time", flush=True)
                break
            if shape != current:  # the misses come round twice: inputs made anew
                sets = None
                torch.cuda.empty_cache()
                sets = [make_inputs(shape, device, 7 + i) for i in range(input_sets_needed(shape))]
                current = shape
            policy = policy_of(shape, name)
            row = {"shape": shape.name, "plan": name}
            try:
                plan = plan_call(*sets[0][:3], None, policy)
                row.update(kernel=plan.kernel, block_m=plan.block_m, tail_m=plan.tail_m, block_n=plan.block_n,
                           stages=plan.stages, splits=plan.num_splits,
                           merge=None if plan.merge is None else [plan.merge.head_slices, plan.merge.fused])

                def call(q, k, v, lens, mask):
                    return tree_verify_attention_triton(q, k, v, lens, mask, policy=policy)

                row["err"] = max(row_error(call(*inputs), *inputs, sorted({0, shape.batch - 1})) for inputs in sets[:2])
                row["us"] = round(time_in_graph(call, sets), 2)
                if shape in MISSES and name in ("before", "after") and (shape, name) not in timed:
                    eager, host = time_eagerly(call, sets, row["us"])
                    row.update(eager_us=round(eager, 2), host_us=round(host, 2))
                    if shape.batch == 1:
                        row["kernels"] = kernel_us(call, sets)
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            timed.add((shape, name))
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(json.dumps(row), flush=True)
    print(f"done in {time.time() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
