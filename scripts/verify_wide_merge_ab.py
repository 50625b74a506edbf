"""A / B of the merge past one block of splits (an experiment, not kept): graph us and the
profiler's split-kernel and merge us at batch 1 with forced split counts, every output checked.
Run once per version, each first on PYTHONPATH as specdec_kernels:
python3 scripts/verify_wide_merge_ab.py OUT LABEL"""
import json
import sys

import torch

from specdec_kernels.bench import Shape, l2_flush, make_inputs, row_error, time_in_graph
from specdec_kernels.tree_verify_triton import tree_verify_attention_triton
from specdec_kernels.verify_plan import VerifyPolicy

SHAPES = [Shape(1, 9, 6, 1, 256, 32768), Shape(1, 17, 3, 1, 256, 32768), Shape(1, 33, 6, 1, 256, 32768),
          Shape(1, 9, 24, 4, 256, 32768), Shape(1, 9, 6, 1, 256, 8192), Shape(1, 9, 32, 8, 128, 32768)]
SPLITS = (None, 32, 64, 96, 128, 256)
# the planner's own split counts only: merges of few splits over many rows (every graph-captured
# merge runs the one-block code)
DEFAULT_ONLY = [Shape(8, 17, 24, 4, 256, 8192), Shape(32, 17, 6, 1, 256, 8192), Shape(8, 9, 6, 1, 256, 8192),
                Shape(8, 33, 6, 1, 256, 32768), Shape(1, 65, 24, 4, 256, 32768), Shape(1, 17, 32, 8, 128, 8192),
                Shape(8, 17, 32, 8, 128, 8192), Shape(1, 65, 64, 8, 128, 8192), Shape(32, 9, 3, 1, 256, 1024)]


def kernel_us(call, sets):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(20):
            call(*sets[i % len(sets)])
        torch.cuda.synchronize()
    return {e.key[:32]: round(e.device_time_total / e.count, 2) for e in prof.key_averages()
            if e.device_type.name == "CUDA" and e.count >= 20}


def main(out_dir, label):
    rows = []
    with l2_flush("read"), open(f"{out_dir}/wide_merge_{label}.jsonl", "w") as log:
        for shape in SHAPES + DEFAULT_ONLY:
            sets = [make_inputs(shape, torch.device("cuda"), 7 + i) for i in range(4)]
            for n in SPLITS if shape in SHAPES else (None,):
                policy = VerifyPolicy(num_splits=n, fused_merge=False)

                def call(q, k, v, lens, mask, policy=policy):
                    return tree_verify_attention_triton(q, k, v, lens, mask, policy=policy)

                row = {"label": label, "shape": shape.name, "splits": n}
                try:
                    row["err"] = max(row_error(call(*s), *s, [0]) for s in sets[:2])
                    row["us"] = round(time_in_graph(call, sets), 2)
                    row["kernels"] = kernel_us(call, sets)
                except Exception as exc:
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                rows.append(row)
                log.write(json.dumps(row) + "\n")
                log.flush()
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
