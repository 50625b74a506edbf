"""Host time of eager tree-verify calls, back to back without synchronisation: the launcher with and
without the direct relaunch (the first H200 call also timed the launcher of 66f816c, a copy of
`git show 66f816c:kernels` importable as old_specdec_kernels under .devprobe/); cProfile of the
direct one. Run on the device from the repository root: python3 scripts/verify_host_probe.py"""
import cProfile, io, pstats, sys, time, json
sys.path.insert(0, ".devprobe")
import torch
from specdec_kernels.bench import Shape, make_inputs
from specdec_kernels.tree_verify_triton import tree_verify_attention_triton
from specdec_kernels.verify_plan import VerifyPolicy

def host_us(fn, args, n=300):
    for _ in range(20): fn(*args)
    torch.cuda.synchronize()
    s = time.perf_counter()
    for _ in range(n): fn(*args)
    h = time.perf_counter() - s
    torch.cuda.synchronize()
    wall = time.perf_counter() - s
    return h * 1e6 / n, wall * 1e6 / n

no_direct = VerifyPolicy(launch_cache=False)
out = {}
for shape in (Shape(1, 17, 32, 8, 128, 8192), Shape(8, 17, 32, 8, 128, 8192), Shape(8, 65, 32, 8, 128, 8192),
              Shape(32, 17, 32, 8, 128, 1024), Shape(8, 17, 24, 4, 256, 8192), Shape(1, 9, 6, 1, 256, 8192)):
    args = make_inputs(shape, torch.device("cuda"), 0)
    r = {"new": host_us(tree_verify_attention_triton, args),
         "new_no_direct": host_us(lambda *a: tree_verify_attention_triton(*a, policy=no_direct), args)}
    out[shape.name] = r
    print(shape.name, json.dumps(r), flush=True)
args = make_inputs(Shape(8, 17, 32, 8, 128, 8192), torch.device("cuda"), 0)
pr = cProfile.Profile()
pr.enable()
for _ in range(300): tree_verify_attention_triton(*args)
pr.disable()
torch.cuda.synchronize()
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22); print(s.getvalue()[:5000])
