"""Host and GPU time of the verify call under the installed Triton, launched directly (the C
launcher, ``triton_launch``) and through Triton's dispatch (``launch_cache`` off), on the bench's
quick shapes; each row also counts the calls that took the direct path.

    python3 scripts/launch_probe/host_probe.py OUT.jsonl
"""
import dataclasses
import json
import sys
import time

import torch
import triton

from specdec_kernels import bench, tree_verify_triton
from specdec_kernels.triton_launch import direct_launch_unusable
from specdec_kernels.verify_plan import DEFAULT_POLICY

KEEP = ("shape", "kernel", "splits", "us", "eager_us", "eager_x_graph", "host_us", "host_floor_us", "err", "ok")


def main() -> None:
    out = sys.argv[1]
    shapes = bench.quick_shapes()
    start = time.time()
    bench.warm_compile(shapes, 12)
    print(f"triton {triton.__version__}, direct launch unusable: {direct_launch_unusable()}, "
          f"compiled in {time.time() - start:.0f} s", flush=True)
    direct_calls = [0]
    call = tree_verify_triton._DirectCall.__call__

    def counting(self, *args):
        direct_calls[0] += 1
        return call(self, *args)

    tree_verify_triton._DirectCall.__call__ = counting
    device = torch.device("cuda")
    ceilings = bench.measure_ceilings(device)
    dispatch = dataclasses.replace(DEFAULT_POLICY, launch_cache=False)
    with open(out, "a") as f:
        f.write(json.dumps({"triton": triton.__version__, "direct_unusable": direct_launch_unusable(), **ceilings})
                + "\n")
        for shape in shapes:
            for label, policy in (("direct", DEFAULT_POLICY), ("dispatch", dispatch)):
                direct_calls[0] = 0
                row = bench.run_shape(shape, ceilings, False, 0, policy=policy, baselines=False)
                keep = {key: row.get(key) for key in KEEP}
                f.write(json.dumps({"triton": triton.__version__, "launch": label, "direct_calls": direct_calls[0],
                                    **keep}) + "\n")
                f.flush()
                print(f"{label:8s} {shape.name:26s} graph {row['us']:7.1f} eager {row['eager_us']:7.1f} "
                      f"host {row['host_us']:6.1f} floor {row['host_floor_us'] or 0:5.1f} "
                      f"direct calls {direct_calls[0]} err {row['err']:.1e}", flush=True)


if __name__ == "__main__":
    main()
