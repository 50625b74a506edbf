"""Round 8's diagnostics of the verify kernels on a GPU (kernels/PERF.md, round 8, change 0):
where a memory-bound call's time goes.

    python3 scripts/round8_diag.py time    # the table call, the split kernel alone (the merge's
                                            # launch skipped), forced split counts, no PDL merge
    python3 scripts/round8_diag.py graph   # per-call time against calls per graph replay
    ncu --clock-control none --cache-control none -k regex:tree_verify --metrics gpu__time_duration.sum \
        python3 scripts/round8_diag.py ncu [0,1,6]   # eager calls after an L2 flush, the merge
                                                      # in one pass and in two, for ncu to time

Timings use the benchmark's method (``specdec_kernels.bench.time_in_graph``).
"""
import json
import sys
import time

import torch

from specdec_kernels import bench
from specdec_kernels import tree_verify_triton as tvt
from specdec_kernels.bench import Shape


SHAPES = [Shape(1, 9, 32, 8, 128, 32768), Shape(1, 16, 32, 8, 128, 32768), Shape(32, 9, 32, 8, 128, 1024),
          Shape(8, 9, 32, 8, 128, 8192), Shape(8, 16, 32, 8, 128, 8192), Shape(8, 17, 32, 8, 128, 8192),
          Shape(1, 17, 32, 8, 128, 32768), Shape(8, 17, 64, 8, 128, 8192), Shape(8, 16, 64, 8, 128, 8192),
          Shape(32, 17, 32, 8, 128, 1024), Shape(32, 16, 32, 8, 128, 1024)]


class _NoLaunch:
    """Stands in for the merge kernel: its launches do nothing, so the split kernel is timed alone."""

    def __getitem__(self, grid):
        return lambda *a, **k: None


def timed(shape, seed, splits=None, skip_merge=False, nopdl=False):
    device = torch.device("cuda")
    sets = [bench.make_inputs(shape, device, seed + i) for i in range(bench.input_sets_needed(shape))]

    def call(q, k, v, lens, mask):
        return tvt.tree_verify_attention_triton(q, k, v, lens, mask, num_splits=splits)

    saved = tvt._tree_verify_merge_kernel, tvt.PROGRAMMATIC_MERGE
    try:
        if nopdl:
            tvt.PROGRAMMATIC_MERGE = False
        if not skip_merge:
            err = bench.worst_row_error(call(*sets[0]), *sets[0])
        else:
            err = float("nan")
            tvt._tree_verify_merge_kernel = _NoLaunch()
        us = bench.time_in_graph(call, sets)
    finally:
        tvt._tree_verify_merge_kernel, tvt.PROGRAMMATIC_MERGE = saved
    del sets
    torch.cuda.empty_cache()
    return us, err


def main_time():
    started = time.time()
    print(json.dumps(bench.measure_ceilings(torch.device("cuda"))), flush=True)
    for i, shape in enumerate(SHAPES):
        q = torch.empty(shape.batch, shape.num_nodes, shape.q_heads, shape.head_dim, device="cuda",
                        dtype=torch.bfloat16)
        k = torch.empty(shape.batch, shape.prefix + shape.num_nodes, shape.kv_heads, shape.head_dim, device="cuda",
                        dtype=torch.bfloat16)
        plan, kernel, bn, st = tvt.plan_call(q, k, k, tvt.log2_softmax_scale(128))
        base = plan["num_splits"]
        row = {"shape": shape.name, "kernel": kernel, "block_m": plan["block_m"], "tail": plan["tail_m"],
               "splits": base, "bn": bn, "stages": st}
        row["table"] = timed(shape, 10 * i)
        if base > 1:
            row["split_only"] = timed(shape, 10 * i, skip_merge=True)
            row["nopdl"] = timed(shape, 10 * i, nopdl=True)
        cands = {1, 2, 4} if shape.batch >= 8 else {8, 16, 24, 32, 48, 64}
        for s in sorted(cands - {base}):
            if shape.batch >= 32 and s > 1:
                continue
            row[f"s{s}"] = timed(shape, 10 * i, splits=s)
            if s > 1:
                row[f"s{s}_split_only"] = timed(shape, 10 * i, splits=s, skip_merge=True)
        print(json.dumps(row), flush=True)
        if time.time() - started > 200:
            break


def main_ncu():
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    shapes = SHAPES[:8] if len(sys.argv) < 3 else [SHAPES[int(i)] for i in sys.argv[2].split(",")]
    for i, shape in enumerate(shapes):
        q, k, v, lens, mask = bench.make_inputs(shape, torch.device("cuda"), i)
        for one_pass in (True, False):
            tvt.MERGE_ONE_PASS = one_pass
            for _ in range(3):
                flush.sum()
                torch.cuda.synchronize()
                tvt.tree_verify_attention_triton(q, k, v, lens, mask)
                torch.cuda.synchronize()
        print(shape.name, flush=True)




def main_graph():
    """Per-call time against the number of calls one graph replay holds (cycling the input
    sets): the intercept is what a replay costs besides its calls."""
    from triton.testing import do_bench

    from specdec_kernels.bench import l2_flush

    with l2_flush("read"):
        # an empty-ish graph: one tiny kernel
        x = torch.zeros(1, device="cuda")
        g = torch.cuda.CUDAGraph()
        x.add_(1)
        torch.cuda.synchronize()
        with torch.cuda.graph(g):
            x.add_(1)
        print(json.dumps({"tiny_graph_us": do_bench(g.replay, warmup=25, rep=100, return_mode="median") * 1e3,
                          "tiny_eager_us": do_bench(lambda: x.add_(1), warmup=25, rep=100,
                                                    return_mode="median") * 1e3}), flush=True)
        for i, shape in enumerate([Shape(8, 9, 32, 8, 128, 8192), Shape(1, 9, 32, 8, 128, 32768),
                                   Shape(32, 9, 32, 8, 128, 1024), Shape(8, 17, 32, 8, 128, 8192),
                                   Shape(8, 16, 64, 8, 128, 8192), Shape(1, 9, 32, 8, 128, 1024),
                                   Shape(32, 9, 32, 8, 128, 8192)]):
            nsets = max(2, bench.input_sets_needed(shape))
            sets = [bench.make_inputs(shape, torch.device("cuda"), 100 * i + j) for j in range(nsets)]

            def call(q, k, v, lens, mask):
                return tvt.tree_verify_attention_triton(q, k, v, lens, mask)

            row = {"shape": shape.name, "sets": bench.input_sets_needed(shape)}
            row["bench"] = bench.time_in_graph(call, sets[:bench.input_sets_needed(shape)])
            for reps in (1, 2, 4, 8):
                cyc = (sets * reps)
                if len(cyc) > 64:
                    continue
                row[f"x{len(cyc)}"] = bench.time_in_graph(call, cyc)
            q, k, v, lens, mask = sets[0]
            row["eager"] = do_bench(lambda: call(q, k, v, lens, mask), warmup=25, rep=100,
                                    return_mode="median") * 1e3
            print(json.dumps(row), flush=True)
            del sets, q, k, v
            torch.cuda.empty_cache()


if __name__ == "__main__":
    modes = {"ncu": main_ncu, "time": main_time, "graph": main_graph}
    if len(sys.argv) < 2 or sys.argv[1] not in modes:
        sys.exit(f"usage: python3 scripts/round8_diag.py {'|'.join(modes)} (see the docstring)")
    modes[sys.argv[1]]()
