"""Time the T = 65, G = 6 head-dim-256 shapes planned on 4 x 128 rows (the last tile's second warpgroup
has no rows) with the kernel file installed now; graph and eager us, every output checked.
python3 idle_time.py OUT LABEL   """
import json
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from policy_ab import parse  # noqa: E402

from specdec_kernels.bench import (capture_graph, input_sets_needed, make_inputs, row_error, time_eagerly,  # noqa: E402
                                   time_in_graph)
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton  # noqa: E402
from specdec_kernels.verify_plan import DEFAULT_POLICY  # noqa: E402

NAMES = [f"B{b}-T65-H{h}/256-L{l}" for h in ("24/4", "6/1") for b in (1, 8, 32) for l in (1024, 8192, 32768)]


def main(out_dir, label):
    with open(f"{out_dir}/idle_{label}.jsonl", "w") as log:
        for name in NAMES:
            shape = parse(name)
            sets = [make_inputs(shape, torch.device("cuda"), 7 + i) for i in range(input_sets_needed(shape))]
            p = plan_call(*sets[0][:3], None, DEFAULT_POLICY)
            if (p.block_m, p.num_m_tiles) != (128, 4):
                continue

            def call(q, k, v, lens, mask):
                return tree_verify_attention_triton(q, k, v, lens, mask, policy=DEFAULT_POLICY)
            err = max(row_error(call(*s), *s, sorted({0, shape.batch - 1})) for s in sets[:2])
            graph = capture_graph(call, sets)
            g = time_in_graph(call, sets, graph=graph)
            e = time_eagerly(call, sets, g, graph)
            del graph
            row = {"shape": name, "label": label, "plan": f"{p.num_m_tiles}x{p.block_m}/{p.num_splits}",
                   "persistent": p.persistent, "us": round(g, 2), "eager_us": round(e.gpu_us, 2), "err": err}
            log.write(json.dumps(row) + "\n")
            print(label, name, row["plan"], row["us"], row["eager_us"], f"{err:.1e}", flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
