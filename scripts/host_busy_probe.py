"""Host time of back-to-back eager verify calls against what the GPU is doing (an experiment, not
kept). One-launch shapes whose kernel runs >= 100 us missed the 25 us host goal 17 times in 41, the
shorter ones never (16): is the launch dearer while the GPU is busy, or is it the shape? Per shape,
host us a call (median of 8 batches of 32, as the bench) with the batch issued (a) on an idle GPU,
(b) behind a 20 ms torch.cuda._sleep, so the whole batch queues on a busy GPU; and the per-call
host time inside an idle-start batch (which calls are dear). The host floor's call the same way.
python3 host_busy_probe.py OUT"""
import json
import statistics
import sys
import time

import torch

from specdec_kernels.bench import Shape, make_inputs
from specdec_kernels.tree_verify_triton import tree_verify_attention_triton, plan_call

SHAPES = [Shape(8, 17, 32, 8, 128, 1024), Shape(1, 17, 32, 8, 128, 8192), Shape(8, 65, 32, 8, 128, 8192),
          Shape(32, 17, 32, 8, 128, 8192), Shape(32, 16, 32, 8, 128, 32768), Shape(32, 65, 64, 8, 128, 32768),
          Shape(32, 9, 24, 4, 256, 32768), Shape(1, 9, 6, 1, 256, 32768), Shape(8, 17, 24, 4, 256, 8192)]
CALLS, BATCHES = 32, 8


def batches(call, sets, busy: bool):
    means, per_call = [], [[] for _ in range(CALLS)]
    for _ in range(BATCHES):
        torch.cuda.synchronize()
        if busy:
            torch.cuda._sleep(int(2e7 * 1.98))  # ~20 ms at 1.98 GHz
        start = time.perf_counter_ns()
        last = start
        for i in range(CALLS):
            call(*sets[i % len(sets)])
            now = time.perf_counter_ns()
            per_call[i].append((now - last) / 1e3)
            last = now
        means.append((last - start) / 1e3 / CALLS)
    torch.cuda.synchronize()
    return round(statistics.median(means), 2), [round(statistics.median(c), 1) for c in per_call]


def main(out_dir):
    from specdec_kernels.memory_floor import _empty_kernel, HOST_FLOOR_OUTPUT
    from specdec_kernels.triton_launch import DirectLaunch

    device = torch.device("cuda")
    out = torch.empty(1, dtype=torch.float32, device=device)
    launch = DirectLaunch.build(_empty_kernel[(1,)](out), (1,), 1, (), {})
    like = torch.empty(HOST_FLOOR_OUTPUT, dtype=torch.bfloat16, device=device)
    stream, args = torch.cuda.current_stream(device).cuda_stream, (out.data_ptr(),)

    def floor_call():
        torch.empty_like(like)
        launch(stream, args)

    def alloc_only():
        torch.empty_like(like)

    def launch_only():
        launch(stream, args)

    rows = []
    with open(f"{out_dir}/host_busy.jsonl", "w") as log:
        def emit(row):
            rows.append(row)
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(json.dumps(row), flush=True)

        for name, fn in (("floor", floor_call), ("alloc only", alloc_only), ("launch only", launch_only)):
            idle, per = batches(fn, [()], False)
            busy, _ = batches(fn, [()], True)
            emit({"call": name, "idle_us": idle, "busy_us": busy, "per_call_idle": per})
        for shape in SHAPES:
            sets = [make_inputs(shape, device, 3 + i) for i in range(2)]

            def call(q, k, v, lens, mask):
                return tree_verify_attention_triton(q, k, v, lens, mask)

            for s in sets:
                call(*s)
                call(*s)
            torch.cuda.synchronize()
            plan = plan_call(*sets[0][:3])
            t0 = torch.cuda.Event(enable_timing=True)
            t1 = torch.cuda.Event(enable_timing=True)
            t0.record()
            call(*sets[0])
            t1.record()
            torch.cuda.synchronize()
            idle, per = batches(call, sets, False)
            busy, _ = batches(call, sets, True)
            emit({"call": shape.name, "gpu_us": round(t0.elapsed_time(t1) * 1e3, 1), "splits": plan.num_splits,
                  "fused": bool(plan.merge and plan.merge.fused), "kernel": plan.kernel,
                  "idle_us": idle, "busy_us": busy, "per_call_idle": per})
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
