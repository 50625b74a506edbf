"""Round 9's diagnostics on a GPU (kernels/PERF.md, round 9): where greedy accept + commit's time
goes at the issue's shape (36 layers, B8, L8k, T17), with each walk.

    python3 scripts/round9_diag.py commit

Per walk (by doubling, step by step): the fused accept + commit, the accept kernel alone, and
the bench's whole measurement (``bench.run_accept_commit``: fused, the two launches, one layer's
attention); then the commit kernel alone on the accepted path and a kernel of the same grid
that only reads each request's prefix length (what any kernel of this grid costs). Timings use
the benchmark's method (``specdec_kernels.bench.time_in_graph``), pairs interleaved twice.
"""
import json
import sys

import torch
import triton
import triton.language as tl

from specdec_kernels import bench
from specdec_kernels import tree_accept_triton as tat
from specdec_kernels.accept_commit import tree_accept_and_commit
from specdec_kernels.kv_commit import commit_accepted_kv
from specdec_kernels.kv_commit_triton import commit_grid
from specdec_kernels.tree_accept import tree_accept_greedy


@triton.jit
def _grid_floor_kernel(lens_ptr, out_ptr):
    b = tl.program_id(1)
    length = tl.load(lens_ptr + b)
    if length < 0:  # never: the read alone
        tl.store(out_ptr + b, length)


def commit_case(layers=36, batch=8, prefix=8192, num_nodes=17, kv_heads=8, head_dim=128, seed=0):
    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    tokens, parents, argmax = bench.accept_inputs(batch, num_nodes, device, gen)
    cache_k = torch.randn(layers, batch, prefix + num_nodes, kv_heads, head_dim, device=device,
                          dtype=torch.bfloat16)
    cache_v = torch.randn_like(cache_k)
    lens = torch.full((batch,), prefix, dtype=torch.int32, device=device)
    return tokens, parents, argmax, cache_k, cache_v, lens


def commit_mode():
    tokens, parents, argmax, k, v, lens = commit_case()
    res = tree_accept_greedy(tokens, parents, argmax)
    sink = torch.empty(8, dtype=torch.int32, device="cuda")
    rows = []
    for rep in range(2):
        for doubling in (True, False):
            tat.WALK_BY_DOUBLING = doubling
            row = {"rep": rep, "doubling": doubling,
                   "fused_us": bench.time_in_graph(lambda: tree_accept_and_commit(tokens, parents, argmax, k, v,
                                                                                  lens), [()]),
                   "accept_us": bench.time_in_graph(lambda: tree_accept_greedy(tokens, parents, argmax), [()])}
            row.update({f"bench_{key}": val for key, val in bench.run_accept_commit().items()})
            rows.append(row)
            print(json.dumps(row), flush=True)
        tat.WALK_BY_DOUBLING = True
        grid = commit_grid(k)
        row = {"rep": rep,
               "commit_alone_us": bench.time_in_graph(
                   lambda: commit_accepted_kv(k, v, lens, res.path, res.path_len), [()]),
               "grid_floor_us": bench.time_in_graph(lambda: _grid_floor_kernel[grid](lens, sink), [()]),
               "mean_path_len": float(res.path_len.float().mean())}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "commit"
    if mode != "commit":
        raise SystemExit(f"unknown mode {mode!r}; use: commit")
    commit_mode()
