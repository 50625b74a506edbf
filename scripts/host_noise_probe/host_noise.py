"""Host-time noise of eager verify calls: per-batch host us (the bench's batches) over many
interleaved rounds, GPU idle vs busy (a _sleep ahead of the batch), gc on/off, per-call spikes.
python3 host_noise.py OUT"""
import gc, json, statistics, sys, time, os
import torch
from specdec_kernels.bench import Shape, make_inputs, input_sets_needed
from specdec_kernels.tree_verify_triton import tree_verify_attention_triton, plan_call
from specdec_kernels.memory_floor import host_floor_us

NAMES = ["B1-T16-H32/8/128-L1024", "B8-T33-H32/8/128-L1024", "B1-T33-H6/1/256-L8192", "B1-T65-H3/1/256-L8192",
         "B8-T17-H64/8/128-L32768", "B8-T17-H24/4/256-L8192"]

def parse(name):
    b, t, h, l = name.split("-")
    hq, hkv, d = h[1:].split("/")
    return Shape(int(b[1:]), int(t[1:]), int(hq), int(hkv), int(d), int(l[1:]))

def batch(call, sets, n=32, busy=False, per_call=False):
    torch.cuda.synchronize()
    call(*sets[0])
    if busy:
        torch.cuda._sleep(200_000_000 // 100)  # ~1-2 ms of GPU spin ahead of the batch
    ts = []
    t0 = time.perf_counter_ns()
    for i in range(1, n + 1):
        call(*sets[i % len(sets)])
        if per_call:
            ts.append(time.perf_counter_ns())
    t1 = time.perf_counter_ns()
    if per_call:
        prev = t0; d = []
        for t in ts:
            d.append((t - prev) / 1e3); prev = t
        return (t1 - t0) / 1e3 / n, d
    return (t1 - t0) / 1e3 / n

def main(out):
    dev = torch.device("cuda")
    print("cpus", os.cpu_count(), "affinity", len(os.sched_getaffinity(0)), flush=True)
    data = {}
    for name in NAMES:
        s = parse(name)
        sets = [make_inputs(s, dev, 3 + i) for i in range(min(4, input_sets_needed(s)))]
        p = plan_call(*sets[0][:3])
        call = tree_verify_attention_triton
        for _ in range(3):
            call(*sets[0])
        torch.cuda.synchronize()
        data[name] = dict(sets=sets, call=call, plan=f"{p.kernel} splits {p.num_splits} merge {None if p.merge is None else (p.merge.fused, p.merge.waiters)}")
    res = {n: {"idle": [], "busy": [], "nogc": [], "percall": []} for n in NAMES}
    floors = []
    for rnd in range(12):
        floors.append(host_floor_us(dev))
        for name in NAMES:
            d = data[name]
            for _ in range(8):
                res[name]["idle"].append(batch(d["call"], d["sets"]))
                res[name]["busy"].append(batch(d["call"], d["sets"], busy=True))
            gc.disable()
            for _ in range(8):
                res[name]["nogc"].append(batch(d["call"], d["sets"]))
            gc.enable()
            if rnd % 4 == 0:
                res[name]["percall"].append(batch(d["call"], d["sets"], per_call=True)[1])
    torch.cuda.synchronize()
    q = lambda v: [round(x, 1) for x in statistics.quantiles(v, n=10)] if len(v) > 2 else v
    print("floor per round", [round(f, 1) for f in floors])
    for name in NAMES:
        r = res[name]
        print(name, data[name]["plan"])
        for k in ("idle", "busy", "nogc"):
            v = r[k]
            meds = [round(statistics.median(v[i:i + 8]), 1) for i in range(0, len(v), 8)]
            print(f"  {k}: min {min(v):.1f} deciles {q(v)} round medians {meds}")
        for pc in r["percall"]:
            print("  percall", [round(x, 1) for x in pc])
    with open(f"{out}/host_noise.json", "w") as f:
        json.dump({"floors": floors, "res": res}, f)

if __name__ == "__main__":
    main(sys.argv[1])
