"""The bench's host us a call against the same batches with one untimed call after each sync,
interleaved, with each batch's per-call times. python3 scripts/host_lead_call_probe.py OUT"""
import json
import statistics
import sys
import time

import torch

from specdec_kernels.bench import Shape, input_sets_needed, make_inputs, time_eagerly, time_in_graph
from specdec_kernels.memory_floor import host_floor_us
from specdec_kernels.tree_verify_triton import tree_verify_attention_triton

SHAPES = [Shape(32, 33, 24, 4, 256, 32768), Shape(32, 65, 64, 8, 128, 8192), Shape(8, 65, 32, 8, 128, 32768),
          Shape(1, 17, 32, 8, 128, 8192), Shape(8, 17, 24, 4, 256, 32768)]


def batches(call, sets, lead):
    per = []
    for _ in range(8):
        torch.cuda.synchronize()
        for i in range(lead):
            call(*sets[i % len(sets)])
        ts = []
        t_all = time.perf_counter()
        for i in range(32):
            t0 = time.perf_counter()
            call(*sets[i % len(sets)])
            ts.append((time.perf_counter() - t0) * 1e6)
        per.append(((time.perf_counter() - t_all) * 1e6 / 32, ts))
    torch.cuda.synchronize()
    return per


def main(out):
    rows = []
    print("host floor", round(host_floor_us(torch.device("cuda")), 2), flush=True)
    for shape in SHAPES:
        sets = [make_inputs(shape, torch.device("cuda"), 7 + i) for i in range(min(4, input_sets_needed(shape)))]
        call = tree_verify_attention_triton
        for s in sets:
            call(*s)
        g = time_in_graph(call, sets)
        row = {"shape": shape.name, "graph": round(g, 1), "bench": [], "lead0": [], "lead1": [], "lead0_max": [],
               "lead0_first": [], "lead0_over30": []}
        for rnd in range(4):
            row["bench"].append(round(time_eagerly(call, sets, g)[1], 1))
            for lead in (0, 1):
                per = batches(call, sets, lead)
                row[f"lead{lead}"].append(round(statistics.median(p[0] for p in per), 1))
                if lead == 0:
                    row["lead0_first"].append(round(statistics.median(p[1][0] for p in per), 1))
                    row["lead0_max"].append(round(max(max(p[1][1:]) for p in per), 1))
                    row["lead0_over30"].append(sum(t > 30 for p in per for t in p[1][1:]))
        rows.append(row)
        print(json.dumps(row), flush=True)
        del sets
        torch.cuda.empty_cache()
    print("host floor", round(host_floor_us(torch.device("cuda")), 2), flush=True)
    json.dump(rows, open(f"{out}/host_batch.json", "w"))


if __name__ == "__main__":
    main(sys.argv[1])
