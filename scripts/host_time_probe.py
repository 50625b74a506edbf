"""Is the first shape's host time in a process high? run_shape 3x on the quick list's first shape."""
import json, sys, time, torch
from specdec_kernels.bench import Shape, measure_ceilings, run_shape
dev = torch.device("cuda")
c = measure_ceilings(dev)
print("ceilings", c, flush=True)
shapes = [Shape(8, 9, 32, 8, 128, 8192)] * 3 + [Shape(8, 17, 32, 8, 128, 8192), Shape(8, 9, 32, 8, 128, 8192)]
for i, s in enumerate(shapes):
    t = time.time()
    r = run_shape(s, c, with_flex=False, seed=i)
    print(json.dumps({k: r.get(k) for k in ("shape", "us", "eager_us", "host_us", "host_floor_us")}), f"{time.time()-t:.1f}s", flush=True)
