"""Why do long one-launch eager calls take up to 1.16x their graph time? Per shape: graph (do_bench,
L2 flushed) x3; then 8 windows of ~20 ms each of: eager back-to-back, graph replays back-to-back
(no flush), eager with a 256 MB flush between calls; NVML clocks/power/throttle after each window."""
import json
import sys
import time

import torch

from specdec_kernels.bench import Shape, input_sets_needed, make_inputs, time_in_graph
from specdec_kernels.tree_verify_triton import tree_verify_attention_triton
from specdec_kernels.verify_plan import DEFAULT_POLICY

try:
    import pynvml
    pynvml.nvmlInit()
    H = pynvml.nvmlDeviceGetHandleByIndex(0)
except Exception as e:  # noqa
    print("no nvml", e)
    H = None


def nv():
    if H is None:
        return {}
    return {"sm": pynvml.nvmlDeviceGetClockInfo(H, pynvml.NVML_CLOCK_SM),
            "mem": pynvml.nvmlDeviceGetClockInfo(H, pynvml.NVML_CLOCK_MEM),
            "w": round(pynvml.nvmlDeviceGetPowerUsage(H) / 1000),
            "temp": pynvml.nvmlDeviceGetTemperature(H, 0),
            "thr": hex(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(H))}


SHAPES = [Shape(32, 17, 64, 8, 128, 32768), Shape(32, 65, 32, 8, 128, 32768), Shape(32, 16, 64, 8, 128, 32768),
          Shape(32, 17, 24, 4, 256, 32768), Shape(32, 33, 24, 4, 256, 32768), Shape(8, 65, 24, 4, 256, 32768)]


def call(q, k, v, lens, mask):
    return tree_verify_attention_triton(q, k, v, lens, mask, policy=DEFAULT_POLICY)


def window(fn, n):
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for i in range(n):
        fn(i)
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) * 1e3 / n


def main(out):
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    with open(f"{out}/eager_probe.jsonl", "w") as log:
        for shape in SHAPES:
            t0 = time.time()
            sets = [make_inputs(shape, torch.device("cuda"), 7 + i) for i in range(input_sets_needed(shape))]
            for s in sets:
                call(*s)
            torch.cuda.synchronize()
            g = [round(time_in_graph(call, sets), 1) for _ in range(3)]
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for s in sets:
                    call(*s)
            n = max(10, min(300, int(20000 / g[0])))
            ng = max(5, n // len(sets))
            row = {"shape": shape.name, "graph_dobench": g, "n": n, "sets": len(sets)}
            for w in range(8):
                row.setdefault("eager", []).append(round(window(lambda i: call(*sets[i % len(sets)]), n), 1))
                row.setdefault("nv_eager", []).append(nv())
                row.setdefault("graph_b2b", []).append(round(window(lambda i: graph.replay(), ng) / len(sets), 1))
                row.setdefault("nv_graph", []).append(nv())
                # eager with a flush between calls, flush time subtracted by a flush-only window
                fl = window(lambda i: flush.zero_(), n)
                ef = window(lambda i: (flush.zero_(), call(*sets[i % len(sets)])), n)
                row.setdefault("eager_flushed", []).append(round(ef - fl, 1))
            row["secs"] = round(time.time() - t0, 1)
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(shape.name, "graph", g, "eager", row["eager"], "graph_b2b", row["graph_b2b"],
                  "eager_flushed", row["eager_flushed"], row["nv_eager"][-1], flush=True)
            del graph, sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
