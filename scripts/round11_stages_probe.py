"""Round 11's probe (kernels/PERF.md, round 11): can one program per (request, KV head) stream an
8k cache at the copy rate from half the SMs if it keeps more key tiles in flight, so that the
split partials and their merge (3 us a call at B8-L8k) go away?

    python3 scripts/round11_stages_probe.py

Per shape: our kernel with its planned tiles, its ring of key tiles (``gluon_stages``) at 4 to
6 slots where they fit, and 1 or 2 KV splits forced; timed as the table times it
(``bench.time_in_graph``, one call a graph, L2 flushed by reading), with the worst row error.
"""
import dataclasses
import json

import torch

from specdec_kernels import bench
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton, log2_softmax_scale

SHAPES = [(8, 9, 32, 8192), (8, 17, 32, 8192), (8, 16, 64, 8192), (8, 9, 32, 32768), (8, 33, 32, 8192)]
SHARED_LIMIT = 232448


def main():
    for dims in SHAPES:
        shape = bench.Shape(dims[0], dims[1], dims[2], 8, 128, dims[3])
        inputs = bench.make_inputs(shape, torch.device("cuda"), 7)
        plan, kernel, _, _ = plan_call(*inputs[:3], log2_softmax_scale(128))
        cfg = plan["config"]
        # 6 slots and the tail's own buffers pass the 227 KB of shared memory
        for stages in ((4, 5) if plan["tail_m"] else (4, 5, 6)):
            variant = dataclasses.replace(cfg, gluon_stages=stages)
            for splits in (1, 2):
                call = lambda *a: tree_verify_attention_triton(*a, num_splits=splits, config=variant)
                row = {"shape": shape.name, "planned_splits": plan["num_splits"], "block_m": plan["block_m"],
                       "tail_m": plan["tail_m"], "stages": stages, "splits": splits}
                try:
                    row["err"] = bench.worst_row_error(call(*inputs), *inputs)
                    with bench.l2_flush("read"):
                        row["us"] = bench.time_in_graph(call, [inputs])
                except Exception as exc:  # a ring that does not fit
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:120]}"
                from specdec_kernels import tree_verify_triton
                row["gluon"] = tree_verify_triton.GLUON_UNUSABLE is None
                print(json.dumps(row), flush=True)
        del inputs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
