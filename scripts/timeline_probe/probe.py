"""Probe only: where a ping-pong program's time goes (clock64 stamps of instrument.py), per shape.
python3 probe.py OUT  (on the H200, after python3 instrument.py)"""
import dataclasses
import json
import os
import statistics
import sys

import torch

from specdec_kernels import tree_verify_triton as tvt
from specdec_kernels.bench import Shape, make_inputs
from specdec_kernels.verify_plan import DEFAULT_POLICY

SHAPES = ("B8-T65-H24/4/256-L1024 B8-T65-H24/4/256-L8192 B1-T65-H24/4/256-L8192 B8-T33-H24/4/256-L1024 "
          "B32-T65-H24/4/256-L1024 B8-T65-H6/1/256-L1024 B8-T33-H6/1/256-L1024 B8-T9-H24/4/256-L8192 "
          "B8-T65-H32/8/128-L1024 B8-T65-H32/8/128-L8192 B8-T33-H64/8/128-L1024 B8-T17-H32/8/128-L1024")
SHAPES = (os.environ.get("SHAPES") or SHAPES).split()
POLICY = dataclasses.replace(DEFAULT_POLICY, launch_cache=False, fused_merge=False, waiting_merge=False,
                             persistent=False)
PHASES = ("q", "first", "stream", "masked", "store")


def parse(name):
    b, t, h, l = name.split("-")
    hq, hkv, d = h[1:].split("/")
    return Shape(int(b[1:]), int(t[1:]), int(hq), int(hkv), int(d), int(l[1:]))


def q(xs, f):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(f * len(xs)))]


def main(out, label):
    flush = torch.empty(256 * 2**20 // 4, device="cuda", dtype=torch.float32)
    log = open(f"{out}/timeline.jsonl", "a")
    for name in SHAPES:
        shape = parse(name)
        inputs = make_inputs(shape, torch.device("cuda"), 7)
        plan = tvt.plan_call(*inputs[:3], None, POLICY)
        grid = plan.grid
        programs = grid[0] * (grid[1] if len(grid) > 1 else 1) * (grid[2] if len(grid) > 2 else 1)
        dbg = torch.zeros(programs * 4 * 16 + 64, device="cuda", dtype=torch.int64)
        tvt.DEBUG_BUF = dbg
        tvt.tree_verify_attention_triton(*inputs, policy=POLICY)
        torch.cuda.synchronize()
        runs = []
        for rep in range(6):
            dbg.zero_()
            flush.sum()
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            tvt.tree_verify_attention_triton(*inputs, policy=POLICY)
            b.record()
            torch.cuda.synchronize()
            d = dbg[:programs * 64].view(programs, 4, 16).cpu().tolist()
            runs.append((a.elapsed_time(b) * 1e3, d))
        event_us, d = runs[-1]
        rows = [(p, w, s) for p, wg in enumerate(d) for w, s in enumerate(wg) if s[0] != 0 and s[5] != 0]
        if not rows:
            print(name, plan.kernel, "no stamps", flush=True)
            continue
        rate = statistics.median((s[5] - s[0]) / max(1, s[7] - s[6]) for _, _, s in rows)  # cycles / ns
        g0 = min(s[6] for _, _, s in rows)
        span_us = (max(s[7] for _, _, s in rows) - g0) / 1e3
        starts = [(s[6] - g0) / 1e3 for _, _, s in rows]
        phase = {ph: [(s[i + 1] - s[i]) / rate / 1e3 for _, _, s in rows] for i, ph in enumerate(PHASES)}
        fine = [s for _, _, s in rows if s[8] and s[9] and s[10] and (s[11] or not os.environ.get('FINE'))]
        for nm, i0, i1 in (("m_vis", 3, 8), ("m_wait", 8, 9), ("m_mma", 9, 10), ("m_end", 10, 4), ("m_qk", 9, 11), ("m_soft", 11, 12), ("m_pv", 12, 10)):
            v = [(s[i1] - s[i0]) / rate / 1e3 for s in fine]
            if v:
                phase[nm] = v
        total = [(s[5] - s[0]) / rate / 1e3 for _, _, s in rows]
        rec = {"label": label, "shape": name, "plan": f"{plan.kernel} {plan.num_m_tiles}x{plan.block_m}+{plan.tail_m}/{plan.block_n}/"
               f"{plan.num_splits}", "programs": programs, "event_us": round(event_us, 1),
               "events_all": [round(r[0], 1) for r in runs], "span_us": round(span_us, 1), "ghz": round(rate, 3),
               "start_p50_p90_max": [round(q(starts, f), 2) for f in (0.5, 0.9, 1.0)],
               "total_p50_max": [round(q(total, 0.5), 2), round(max(total), 2)],
               **{ph: [round(q(v, 0.5), 2), round(max(v), 2)] for ph, v in phase.items()}}
        log.write(json.dumps(rec) + "\n")
        log.flush()
        print(json.dumps(rec), flush=True)
        tvt.DEBUG_BUF = None
        del inputs, dbg
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
