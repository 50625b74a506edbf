"""Where a program's time goes at head dim 256 with one KV head (the memory misses): at 128 forced
splits (one wave of programs) the key rows a program streams go 32 -> 512 (L 4k -> 64k), and at 32k
keys the splits go 32 -> 128; per point: graph us (do_bench), the split kernel's and the merge's
GPU us from the profiler on eager calls with the merge's own launch, and the read-once floor of the
same bytes. Intercept of split-kernel us against keys a program = the program's fixed cost.
python3 scripts/verify_fixed_cost_probe.py OUT"""
import json
import sys
import time

import torch

from specdec_kernels.bench import Shape, input_sets_needed, make_inputs, row_error, time_in_graph
from specdec_kernels.memory_floor import measure_floor
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import VerifyPolicy

POINTS = [(1, 9, 6, L, 128) for L in (4096, 8192, 16384, 32768, 65536)]
POINTS += [(1, 9, 6, 32768, s) for s in (32, 64, 96)]
POINTS += [(1, 9, 3, L, 128) for L in (4096, 16384, 65536)]
POINTS += [(32, 9, 6, 1024, s) for s in (1, 2, 4)] + [(8, 9, 6, 8192, s) for s in (4, 8, 16)]


def kernel_us(call, sets, rounds=4):
    from torch.profiler import ProfilerActivity, profile

    for s in sets:
        call(*s)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(rounds):
            for s in sets:
                call(*s)
        torch.cuda.synchronize()
    found = {}
    for evt in prof.key_averages():
        total = getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0)
        if evt.count and total:
            name = "merge" if "merge" in evt.key else ("split" if "partial" in evt.key else None)
            if name:
                found[name] = round(total / evt.count, 2)
    return found


def main(out_dir):
    dev = torch.device("cuda")
    with open(f"{out_dir}/fixed_cost.jsonl", "w") as log:
        for b, t, hq, L, splits in POINTS:
            t0 = time.time()
            shape = Shape(b, t, hq, 1, 256, L)
            sets = [make_inputs(shape, dev, 7 + i) for i in range(input_sets_needed(shape))]
            graph_pol = VerifyPolicy(num_splits=splits)
            eager_pol = VerifyPolicy(num_splits=splits, fused_merge=False)
            p = plan_call(*sets[0][:3], None, graph_pol)

            def graph_call(q, k, v, lens, mask):
                return tree_verify_attention_triton(q, k, v, lens, mask, policy=graph_pol)

            def eager_call(q, k, v, lens, mask):
                return tree_verify_attention_triton(q, k, v, lens, mask, policy=eager_pol)

            err = row_error(graph_call(*sets[0]), *sets[0], sorted({0, b - 1}))
            row = {"shape": shape.name, "splits": p.num_splits, "chunk": p.chunk, "programs": p.grid,
                   "stages": p.stages, "block_n": p.block_n, "err": err,
                   "graph": min(time_in_graph(graph_call, sets) for _ in range(2)),
                   "kernels": kernel_us(eager_call, sets),
                   "floor": measure_floor(shape.bytes_moved(), len(sets), dev).stream_us}
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(row, f"{time.time() - t0:.0f}s", flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
