"""Head dim 256 at 1k keys (the 10x-SDPA misses on 64-row programs): the plan's split count against
half and twice it, interleaved twice; graph us, eager us, every output checked.
python3 d256_splits_probe.py OUT   """
import json
import multiprocessing
import sys
import time

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from policy_ab import parse  # noqa: E402

from specdec_kernels.bench import (capture_graph, input_sets_needed, make_inputs, row_error, time_eagerly,  # noqa: E402
                                   time_in_graph)
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton  # noqa: E402
from specdec_kernels.verify_plan import DEFAULT_POLICY, VerifyPolicy  # noqa: E402

NAMES = ["B1-T33-H24/4/256-L1024", "B8-T33-H24/4/256-L1024", "B1-T65-H24/4/256-L1024", "B8-T33-H6/1/256-L1024",
         "B32-T33-H6/1/256-L1024", "B8-T65-H6/1/256-L1024", "B32-T9-H3/1/256-L1024", "B32-T17-H3/1/256-L1024",
         "B32-T33-H3/1/256-L1024", "B8-T65-H3/1/256-L1024", "B32-T65-H3/1/256-L1024"]


def policies(name):
    sets = make_inputs(parse(name), torch.device("cuda"), 0)
    planned = plan_call(*sets[:3], None, DEFAULT_POLICY).num_splits
    out = {"plan": DEFAULT_POLICY}
    for n in sorted({max(1, planned // 2), planned * 2} - {planned}):
        out[f"s{n}"] = VerifyPolicy(num_splits=n)
    return out


def warm(name):
    inputs = make_inputs(parse(name), torch.device("cuda"), 0)
    for pol in policies(name).values():
        tree_verify_attention_triton(*inputs, policy=pol)
    torch.cuda.synchronize()


def main(out_dir):
    t = time.time()
    with multiprocessing.get_context("spawn").Pool(11) as pool:
        pool.map(warm, NAMES, chunksize=1)
    print(f"warm {time.time() - t:.0f}s", flush=True)
    with open(f"{out_dir}/d256_splits.jsonl", "w") as log:
        for name in NAMES:
            shape = parse(name)
            sets = [make_inputs(shape, torch.device("cuda"), 7 + i) for i in range(input_sets_needed(shape))]
            row = {"shape": name}
            calls = {}
            for label, pol in policies(name).items():
                def call(q, k, v, lens, mask, pol=pol):
                    return tree_verify_attention_triton(q, k, v, lens, mask, policy=pol)
                calls[label] = call
                p = plan_call(*sets[0][:3], None, pol)
                row[label + "_plan"] = f"{p.num_m_tiles}x{p.block_m}/{p.num_splits}"
                row[label + "_err"] = max(row_error(call(*s), *s, sorted({0, shape.batch - 1})) for s in sets[:2])
            for rep in range(2):
                for label, call in calls.items():
                    graph = capture_graph(call, sets)
                    g = time_in_graph(call, sets, graph=graph)
                    e = time_eagerly(call, sets, g, graph)
                    del graph
                    row.setdefault(label, []).append(round(g, 2))
                    row.setdefault(label + "_eager", []).append(round(e.gpu_us, 2))
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(name, "  ".join(f"{k} {row[k + '_plan']}: {min(row[k])} ({min(row[k + '_eager'])} eager)"
                                  for k in calls), "err", f'{max(row[k + "_err"] for k in calls):.1e}', flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
