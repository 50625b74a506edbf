"""Why host us a call grows with the kernel's GPU time: per-call host times inside the bench's
batches, after a blocking sync, after a polling sync, behind a sleep kernel. python3 scripts/host_first_call_probe.py OUT"""
import json
import statistics
import sys
import time

import torch

from specdec_kernels.bench import Shape, input_sets_needed, make_inputs, time_eagerly, time_in_graph
from specdec_kernels.tree_verify_triton import tree_verify_attention_triton

SHAPES = [Shape(32, 65, 64, 8, 128, 32768), Shape(32, 65, 64, 8, 128, 8192), Shape(8, 65, 32, 8, 128, 8192),
          Shape(1, 17, 32, 8, 128, 8192), Shape(32, 33, 24, 4, 256, 32768)]


def batch_times(call, sets, how, n=32):
    torch.cuda.synchronize()
    if how == "sleep":
        torch.cuda._sleep(int(200e6))  # ~100+ ms of GPU busy before the batch
    ts = []
    for i in range(n):
        t0 = time.perf_counter()
        call(*sets[i % len(sets)])
        ts.append((time.perf_counter() - t0) * 1e6)
    if how == "poll":
        ev = torch.cuda.Event()
        ev.record()
        while not ev.query():
            pass
    return ts


def main(out):
    rows = []
    for shape in SHAPES:
        sets = [make_inputs(shape, torch.device("cuda"), 7 + i) for i in range(min(4, input_sets_needed(shape)))]
        call = tree_verify_attention_triton
        for s in sets:
            call(*s)
        g = time_in_graph(call, sets)
        row = {"shape": shape.name, "graph": round(g, 1)}
        row["bench_host"] = [round(time_eagerly(call, sets, g)[1], 1) for _ in range(3)]
        for how in ("sync", "poll", "sleep"):
            per = [batch_times(call, sets, how) for _ in range(8)]
            if how == "poll":  # each batch after the previous one's polling wait
                pass
            first = statistics.median(p[0] for p in per)
            early = statistics.median(statistics.mean(p[1:4]) for p in per)
            late = statistics.median(statistics.mean(p[4:]) for p in per)
            mean = statistics.median(statistics.mean(p) for p in per)
            row[how] = dict(first=round(first, 1), c1_3=round(early, 1), c4_31=round(late, 1), mean=round(mean, 1))
        torch.cuda.synchronize()
        rows.append(row)
        print(json.dumps(row), flush=True)
        del sets
        torch.cuda.empty_cache()
    json.dump(rows, open(f"{out}/host_long.json", "w"))


if __name__ == "__main__":
    main(sys.argv[1])
