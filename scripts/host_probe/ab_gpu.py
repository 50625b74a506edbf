"""H200 A/B of the eager tree-verify launcher's host time: 1f73faa's launcher (oldk, a copy of that
commit's kernels/) against this checkout's, interleaved on the same inputs, by the bench's method
(bench.time_eagerly: median over 8 batches of 32 back-to-back calls, each batch from an idle GPU);
the host floor (memory_floor.host_floor_us) between rounds. Both launchers share the same JIT kernel
objects (compiled once). Usage: python3 ab_gpu.py OUT [reps], with oldk (see ab.py) beside it."""
import json, os, statistics, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import specdec_kernels.tree_verify_triton as new
import specdec_kernels.tree_verify_gluon as g1
import specdec_kernels.tree_verify_gluon_pingpong as g2
sys.modules["oldk.tree_verify_gluon"] = g1
sys.modules["oldk.tree_verify_gluon_pingpong"] = g2
import oldk.tree_verify_triton as old
old._tree_verify_partial_kernel = new._tree_verify_partial_kernel
old._tree_verify_merge_kernel = new._tree_verify_merge_kernel
from specdec_kernels.bench import Shape, input_sets_needed, make_inputs, time_eagerly
from specdec_kernels.memory_floor import host_floor_us

out_dir = sys.argv[1]
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 7
dev = torch.device("cuda")
shapes = [Shape(8, 65, 32, 8, 128, 8192), Shape(8, 17, 32, 8, 128, 8192), Shape(1, 17, 32, 8, 128, 8192),
          Shape(1, 9, 3, 1, 256, 32768), Shape(8, 17, 24, 4, 256, 8192)]
print("torch", torch.__version__, "python", sys.version.split()[0], flush=True)
rows, floors = [], []
for s in shapes:
    t0 = time.time()
    sets = [make_inputs(s, dev, 100 + i) for i in range(input_sets_needed(s))]
    calls = {"before": lambda q, k, v, l, m: old.tree_verify_attention_triton(q, k, v, l, m),
             "after": lambda q, k, v, l, m: new.tree_verify_attention_triton(q, k, v, l, m)}
    outs = {}
    for name, f in calls.items():
        for inputs in sets[:2] * 2:
            f(*inputs)
        outs[name] = f(*sets[0]).clone()
    torch.cuda.synchronize()
    plan = new.plan_call(*sets[0][:3])
    last = new._LAST_DIRECT
    row = dict(shape=s.name, splits=plan.num_splits,
               launches=1 if plan.merge is None or plan.merge.fused else 2,
               same_output=bool(torch.equal(outs["before"], outs["after"])),
               fast_path=last is not None and bool(last.guard), guard=type(getattr(last, "guard", None)).__name__,
               warm_s=round(time.time() - t0, 1), before=[], after=[], before_gpu=[], after_gpu=[])
    for r in range(reps):
        for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
            gpu_us, host_us = time_eagerly(calls[name], sets, 50.0)
            row[name].append(round(host_us, 2))
            row[name + "_gpu"].append(round(gpu_us, 2))
    floors.append(host_floor_us(dev))
    row["before_med"], row["after_med"] = statistics.median(row["before"]), statistics.median(row["after"])
    rows.append(row)
    print(f"{s.name:26s} splits {row['splits']:3d} launches {row['launches']} same {row['same_output']} "
          f"fast {row['fast_path']} warm {row['warm_s']}s  host us before {row['before_med']:.1f} "
          f"{row['before']} after {row['after_med']:.1f} {row['after']}  gpu us {statistics.median(row['before_gpu']):.1f} "
          f"{statistics.median(row['after_gpu']):.1f}", flush=True)
    del sets
    torch.cuda.empty_cache()
print("host floor us", [round(f, 2) for f in floors], "median", round(statistics.median(floors), 2))
with open(os.path.join(out_dir, "ab.json"), "w") as fh:
    json.dump(dict(rows=rows, host_floor_us=floors, torch=torch.__version__), fh, indent=1)
