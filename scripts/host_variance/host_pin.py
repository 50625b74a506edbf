import json, os, statistics, sys, time
import torch
from specdec_kernels.bench import Shape, make_inputs, input_sets_needed
from specdec_kernels.tree_verify_triton import tree_verify_attention_triton
from specdec_kernels.memory_floor import host_floor_us

def probe(shape):
    dev = torch.device("cuda")
    sets = [make_inputs(shape, dev, 3 + i) for i in range(input_sets_needed(shape))]
    for s in sets: tree_verify_attention_triton(*s)
    torch.cuda.synchronize()
    means = []
    for _ in range(16):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for i in range(32):
            tree_verify_attention_triton(*sets[i % len(sets)])
        means.append((time.perf_counter() - t) * 1e6 / 32)
    torch.cuda.synchronize()
    return round(statistics.median(means), 1), round(min(means), 1)

if __name__ == "__main__":
    dev = torch.device("cuda")
    row = {"tag": sys.argv[1], "cpus": len(os.sched_getaffinity(0)),
           "floor": round(host_floor_us(dev), 1)}
    for s in (Shape(32, 16, 32, 8, 128, 32768), Shape(1, 17, 32, 8, 128, 8192)):
        row[s.name] = probe(s)

    print(json.dumps(row), flush=True)
