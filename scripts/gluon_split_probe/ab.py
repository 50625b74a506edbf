"""Probe only: the 64-row Gluon kernel's batch-1 1k-key plans beside the tree's own split on 4, 6
and 8 prefix splits (5, 7 and 9 in all; the merge folds into eager calls up to 7), each shape timed
by the bench's own run_shape (graph, eager, host; output checked), policies alternated twice.
python3 scripts/gluon_split_probe/ab.py OUT"""
import json
import os
import sys

import torch

NAMES = ("B1-T17-H32/8/128-L1024 B1-T33-H32/8/128-L1024 B1-T9-H64/8/128-L1024 B1-T16-H64/8/128-L1024 "
         "B1-T17-H64/8/128-L1024").split()


def main(out):
    from specdec_kernels import bench
    from specdec_kernels.verify_plan import DEFAULT_POLICY, VerifyPolicy

    policies = {"five": VerifyPolicy(own_tree_split_min_chunk=0),
                "seven": VerifyPolicy(num_splits=6, own_tree_split=True), "nine": DEFAULT_POLICY}
    shapes = {s.name: s for s in bench.grid_shapes()}
    device = torch.device("cuda")
    ceilings = bench.measure_ceilings(device)
    with bench.l2_flush("read"), open(os.path.join(out, "gluon_split.jsonl"), "w") as f:
        for rep in range(2):
            for name in NAMES:
                for which, policy in policies.items():
                    row = bench.run_shape(shapes[name], ceilings, False, 11, policy=policy, baselines=False)
                    rec = {"rep": rep, "policy": which, **{k: row.get(k) for k in (
                        "shape", "splits", "us", "eager_us", "host_us", "host_floor_us", "err", "ok")}}
                    f.write(json.dumps(rec) + "\n")
                    f.flush()
                    print(rep, name, which, rec["splits"], f"graph {rec['us']:.2f} eager {rec['eager_us']:.2f} "
                          f"host {rec['host_us']:.1f} (floor {rec['host_floor_us']:.1f}) err {rec['err']:.1e}",
                          flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
