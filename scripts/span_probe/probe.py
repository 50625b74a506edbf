"""Probe only (on the H200, after python3 instrument.py): when each program of a call starts, and
how long it spends on q, its stream, its masked tiles, its store and the folded merge, by program
class (prefix splits, the tree's own split, merge waiters); the call replayed in its CUDA graph as
the bench times it (the stamps are the graph's last call's).   python3 probe.py OUT [LABEL]"""
import dataclasses
import json
import os
import statistics
import sys

import torch

from specdec_kernels import bench
from specdec_kernels import tree_verify_triton as tvt
from specdec_kernels.verify_plan import DEFAULT_POLICY

SHAPES = ("B1-T9-H32/8/128-L1024 B1-T17-H32/8/128-L1024 B1-T33-H32/8/128-L1024 B1-T33-H64/8/128-L1024 "
          "B1-T65-H64/8/128-L1024 B1-T33-H24/4/256-L1024 B8-T17-H6/1/256-L1024 B8-T33-H32/8/128-L1024 "
          "B1-T9-H32/8/128-L8192 B1-T65-H3/1/256-L1024")
SHAPES = (os.environ.get("SHAPES") or SHAPES).split()
CLK = (8, 9, 10, 11, 12)  # q ready, first tile, stream done, masked done, stored (warpgroup 0)
PHASES = ("q", "first", "stream", "masked", "store")


def _shape(name):
    return next(s for s in bench.grid_shapes() if s.name == name)


def _q(xs, f):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(f * len(xs)))]


def _policy():
    overrides = json.loads(os.environ.get("POLICY", "{}"))
    return dataclasses.replace(DEFAULT_POLICY, launch_cache=False, **overrides)


def analyse(plan, d, base, splits):
    """Per program class: times (µs) from the call's first program start."""
    rows = [(p, s) for p, s in enumerate(d) if s[0] != 0]
    g0 = min(s[0] for _, s in rows)
    rate = statistics.median((s[5] - s[1]) / max(1, s[4] - s[0]) for _, s in rows if s[4] > s[0])  # cycles/ns
    out = {"span_us": round((max(s[4] or s[2] for _, s in rows) - g0) / 1e3, 2), "ghz": round(rate, 3)}
    for p, s in rows:
        split = p // base
        cls = "waiter" if split >= splits else ("tree" if plan.own_tree_split and split == splits - 1 else "prefix")
        c = out.setdefault(cls, {"n": 0, "start": [], "stored": [], "merged": [], **{ph: [] for ph in PHASES}})
        c["n"] += 1
        c["start"].append((s[0] - g0) / 1e3)
        c["stored"].append((s[2] - g0) / 1e3)
        c["merged"].append((s[4] - g0) / 1e3)
        prev = s[1]
        for ph, k in zip(PHASES, CLK):
            if s[k]:
                c[ph].append((s[k] - prev) / rate / 1e3)
                prev = s[k]
    for cls, c in out.items():
        if isinstance(c, dict):
            for key, v in list(c.items()):
                if isinstance(v, list):
                    c[key] = [round(_q(v, 0.5), 2), round(max(v), 2)] if v else None
    return out


def main(out, label):
    os.makedirs(out, exist_ok=True)
    policy = _policy()
    device = torch.device("cuda")
    flush = torch.empty(256 * 2**20 // 4, device=device, dtype=torch.float32)
    with bench.l2_flush("read"), open(os.path.join(out, "span.jsonl"), "a") as log:
        for i, name in enumerate(SHAPES):
            shape = _shape(name)
            sets = [bench.make_inputs(shape, device, i * 97 + j) for j in range(bench.input_sets_needed(shape))]
            plan = tvt.plan_call(*sets[0][:3], None, policy)
            fused = plan.merge is not None and plan.merge.fused
            grid = plan.fused_grid if fused else plan.grid
            dbg = torch.zeros(grid[0] * grid[1] * 32 + 64, device=device, dtype=torch.int64)
            tvt.DEBUG_BUF = dbg

            def call(q, k, v, lens, mask):
                return tvt.tree_verify_attention_triton(q, k, v, lens, mask, policy=policy)

            err = bench.row_error(call(*sets[0]), *sets[0], [0])
            graph = bench.capture_graph(call, sets)
            us = bench.time_in_graph(call, sets, rep_ms=40, graph=graph)
            reps = []
            for _ in range(5):
                dbg.zero_()
                flush.sum()
                torch.cuda.synchronize()
                graph.replay()
                torch.cuda.synchronize()
                reps.append(dbg[:grid[0] * grid[1] * 32].view(-1, 32).cpu().tolist())
            stats = [analyse(plan, d, plan.grid[0], plan.num_splits) for d in reps]
            stats.sort(key=lambda s: s["span_us"])
            rec = {"label": label, "shape": name, "graph_us": round(us, 2), "err": err,
                   "plan": f"{plan.kernel} {plan.num_m_tiles}x{plan.block_m}+{plan.tail_m} n{plan.block_n} "
                           f"st{plan.stages} chunk{plan.chunk} splits{plan.num_splits} own{int(plan.own_tree_split)} "
                           f"grid{grid} merge{'fused' if fused else ('own' if plan.merge else 'none')}",
                   "spans": [s["span_us"] for s in stats], **stats[len(stats) // 2]}
            log.write(json.dumps(rec) + "\n")
            log.flush()
            print(json.dumps(rec), flush=True)
            tvt.DEBUG_BUF = None
            del sets, graph, dbg
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "base")
