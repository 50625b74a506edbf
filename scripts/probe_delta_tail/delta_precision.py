"""A/B of the delta rule's block-inverse precision: python3 delta_precision.py PREC OUT.jsonl (PREC ieee|tf32).
Times tree_gated_delta_rule_triton on the hybrid grid, the inverse's dot precision set before compiling."""
import json, sys, time
import triton.language as tl
import specdec_kernels.tree_delta_triton as td
td.INVERSE_PRECISION = tl.constexpr(sys.argv[1])
import torch
from specdec_kernels import hybrid_bench as hb
from specdec_kernels.bench import l2_flush, measure_ceilings
deadline = time.time() + float(sys.argv[3] if len(sys.argv) > 3 else 120)
with l2_flush("read"), open(sys.argv[2], "w") as out:
    ceil = measure_ceilings(torch.device("cuda"))
    for i, shape in enumerate(hb.issue_shapes()):
        if time.time() > deadline:
            print("deadline", file=sys.stderr); break
        row = hb.run_shape(shape, ceil, seed=i, alternative=False, only_verify=True)
        out.write(json.dumps({"prec": sys.argv[1], "shape": row["shape"], "us": row["us"], "mix_us": row.get("mix_us"), "err": row["err"],
                              "ok": row["ok"]}) + "\n"); out.flush()
