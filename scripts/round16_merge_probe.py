"""Round 16's probe (kernels/PERF.md, round 16): what the separate merge costs a split call, as
the table times it (``bench.time_in_graph`` over the table's input sets, L2 flushed by reading).

Per shape that runs more than one split: the whole call; the split kernel alone (the merge's
launch left out, so its output is not checked); and the call forced to one split (no merge, a
shorter grid). The first two bound what folding the merge into the split kernel could give.
With ``floor``: what a kernel that does nothing costs a call, timed the same way (a grid of one
program and one of a program an SM, one and two such kernels a call): the launch floor under
every row of the table.

    python3 scripts/round16_merge_probe.py [floor]
"""
import json
import sys

import torch
import triton
import triton.language as tl

from specdec_kernels import bench
from specdec_kernels import tree_verify_triton as tvt

SHAPES = [(1, 9, 32, 1024), (1, 16, 32, 1024), (1, 17, 32, 1024), (1, 33, 32, 1024), (1, 65, 64, 1024),
          (1, 9, 32, 8192), (1, 17, 64, 8192), (1, 65, 32, 8192), (1, 9, 32, 32768),
          (8, 9, 32, 1024), (8, 17, 32, 1024), (8, 16, 64, 1024), (8, 9, 32, 8192), (8, 17, 32, 8192),
          (8, 33, 32, 8192), (8, 16, 64, 8192)]


class _NoLaunch:
    """Stands in for the merge kernel: indexing by a grid gives a launch that does nothing."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


@triton.jit
def _nothing(x_ptr, flag):
    if flag != 0:  # never, but the kernel keeps its argument
        tl.store(x_ptr, 0)


def floor():
    """Microseconds a call of one or two empty kernels takes in the table's graphs."""
    scratch = torch.zeros(1, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for programs in (1, sms):
        for kernels in (1, 2):
            def call(x):
                for _ in range(kernels):
                    _nothing[(programs,)](x, 0)

            with bench.l2_flush("read"):
                us = bench.time_in_graph(call, [(scratch,)] * bench.MAX_INPUT_SETS)
            print(json.dumps({"empty_kernels": kernels, "programs": programs, "us": round(us, 2)}), flush=True)


def main():
    merge_kernel = tvt._tree_verify_merge_kernel
    for batch, nodes, q_heads, prefix in SHAPES:
        shape = bench.Shape(batch, nodes, q_heads, 8, 128, prefix)
        sets = [bench.make_inputs(shape, torch.device("cuda"), 11 + i) for i in range(bench.input_sets_needed(shape))]
        plan, kernel = tvt.plan_call(*sets[0][:3], tvt.log2_softmax_scale(128))[:2]
        row = {"shape": shape.name, "kernel": kernel, "splits": plan["num_splits"], "sets": len(sets),
               "err": bench.worst_row_error(tvt.tree_verify_attention_triton(*sets[0]), *sets[0])}

        def one_split(q, k, v, lens, mask):
            return tvt.tree_verify_attention_triton(q, k, v, lens, mask, num_splits=1)

        with bench.l2_flush("read"):
            row["us"] = round(bench.time_in_graph(tvt.tree_verify_attention_triton, sets), 2)
            tvt._tree_verify_merge_kernel = _NoLaunch()
            try:
                row["split_only_us"] = round(bench.time_in_graph(tvt.tree_verify_attention_triton, sets), 2)
            finally:
                tvt._tree_verify_merge_kernel = merge_kernel
            row["one_split_us"] = round(bench.time_in_graph(one_split, sets), 2)
        row["merge_us"] = round(row["us"] - row["split_only_us"], 2)
        print(json.dumps(row), flush=True)
        del sets
        torch.cuda.empty_cache()


if __name__ == "__main__":
    floor() if sys.argv[1:] == ["floor"] else main()
