"""Round 11's second probe (kernels/PERF.md, round 11): does the split holding the tree, which
ends last (its masked tree tile by pointer loads after the stream: ~2 us at B8-L8k), finish with
the others if it streams fewer prefix tiles?

    python3 scripts/round11_balance_probe.py

With two splits, the chunk of the first split is made ``bias`` key tiles longer (so the tree's
split streams ``bias`` fewer), where that keeps the split count; timed as the table times it
(``bench.time_in_graph``, one call a graph, L2 flushed by reading), pairs interleaved twice,
with the worst row error.
"""
import json

import torch
import triton

from specdec_kernels import bench
from specdec_kernels import tree_verify_triton as tvt

SHAPES = [(8, 9, 32, 8192), (8, 17, 32, 8192), (8, 33, 32, 8192), (8, 16, 64, 8192), (8, 17, 64, 8192),
          (8, 9, 32, 32768), (8, 9, 32, 1024), (8, 16, 32, 1024)]
PLAIN = tvt.split_chunks


def biased(bias):
    def split_chunks(prefix_rows, wanted, block_n):
        chunk, splits = PLAIN(prefix_rows, wanted, block_n)
        if splits == 2 and triton.cdiv(prefix_rows, chunk + bias * block_n) == 2:
            chunk += bias * block_n
        return chunk, triton.cdiv(prefix_rows, chunk)
    return split_chunks


def main():
    for dims in SHAPES:
        shape = bench.Shape(dims[0], dims[1], dims[2], 8, 128, dims[3])
        inputs = bench.make_inputs(shape, torch.device("cuda"), 11)
        for rep in range(2):
            for bias in (0, 1, 2):
                tvt.split_chunks = biased(bias)
                tvt._plan.cache_clear()
                plan = tvt.plan_call(*inputs[:3], tvt.log2_softmax_scale(128))[0]
                row = {"shape": shape.name, "rep": rep, "bias": bias, "chunk": plan["chunk"],
                       "splits": plan["num_splits"], "err": bench.worst_row_error(tvt.tree_verify_attention_triton(
                           *inputs), *inputs)}
                with bench.l2_flush("read"):
                    row["us"] = bench.time_in_graph(tvt.tree_verify_attention_triton, [inputs])
                print(json.dumps(row), flush=True)
        tvt.split_chunks = PLAIN
        tvt._plan.cache_clear()
        del inputs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
