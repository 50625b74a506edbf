"""Head dim 256, one KV head, memory-bound class: two programs an SM (the 64-row Gluon kernel on
16-key tiles, 98 KB / 212 regs; the Triton kernel on one warpgroup) against the plan, several
split counts; graph us best of two, outputs checked. Needs verify_two_programs.patch (git apply), which lets the
64-row Gluon kernel take head dim 256. python3 twoper_probe.py OUT"""
import json, multiprocessing, sys, time
import torch
from specdec_kernels.configs import VerifyConfig
from specdec_kernels.bench import Shape, input_sets_needed, make_inputs, row_error, time_in_graph
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import DEFAULT_POLICY, VerifyPolicy

CFG = {
    "g16s4": VerifyConfig(block_n=16, max_block_m=64, num_warps=4, num_stages=3, resident_per_sm=2, max_tail_m=0, min_block_m=64, gluon=True, gluon_stages=4),
    "g16s3": VerifyConfig(block_n=16, max_block_m=64, num_warps=4, num_stages=3, resident_per_sm=2, max_tail_m=0, min_block_m=64, gluon=True, gluon_stages=3),
    "t32s2": VerifyConfig(block_n=32, max_block_m=64, num_warps=4, num_stages=2, resident_per_sm=2, max_tail_m=0, tma=True),
}
NAMES = ["B1-T9-H6/1-L32768", "B1-T9-H3/1-L32768", "B1-T17-H3/1-L32768",
         "B8-T9-H6/1-L8192", "B8-T9-H3/1-L8192", "B8-T17-H3/1-L8192",
         "B32-T9-H6/1-L1024", "B32-T9-H3/1-L1024", "B32-T17-H3/1-L1024",
         "B1-T9-H24/4-L32768", "B8-T9-H6/1-L32768"]


def parse(name):
    b, t, h, l = name.split("-")
    hq, hkv = h[1:].split("/")
    return Shape(int(b[1:]), int(t[1:]), int(hq), int(hkv), 256, int(l[1:]))


def policies(shape):
    pairs = shape.batch * shape.kv_heads
    out = {"plan": DEFAULT_POLICY}
    for name, cfg in CFG.items():
        for mult in (1, 2, 3) if name == "g16s4" else (2,):
            splits = max(1, round(132 * mult / pairs))
            out[f"{name}x{splits}"] = VerifyPolicy(tiles=cfg, num_splits=splits)
    return out


def warm(name):
    shape = parse(name)
    inputs = make_inputs(shape, torch.device("cuda"), 0)
    for pol in policies(shape).values():
        try:
            tree_verify_attention_triton(*inputs, policy=pol)
        except Exception as e:
            print(name, "warm failed", repr(e)[:300], flush=True)
    torch.cuda.synchronize()


def main(out_dir):
    t = time.time()
    with multiprocessing.get_context("spawn").Pool(11) as pool:
        pool.map(warm, NAMES, chunksize=1)
    print(f"warm {time.time() - t:.0f}s", flush=True)
    with open(f"{out_dir}/twoper.jsonl", "w") as log:
        for name in NAMES:
            shape = parse(name)
            sets = [make_inputs(shape, torch.device("cuda"), 7 + i) for i in range(input_sets_needed(shape))]
            row = {"shape": name}
            calls = {}
            for label, pol in policies(shape).items():
                def call(q, k, v, lens, mask, pol=pol):
                    return tree_verify_attention_triton(q, k, v, lens, mask, policy=pol)
                try:
                    p = plan_call(*sets[0][:3], None, pol)
                    row[label + "_plan"] = f"{p.kernel} {p.num_m_tiles}x{p.block_m}/{p.num_splits} n{p.block_n} st{p.stages}"
                    row[label + "_err"] = max(row_error(call(*s), *s, sorted({0, shape.batch - 1})) for s in sets[:2])
                    calls[label] = call
                except Exception as e:
                    row[label + "_fail"] = repr(e)[:300]
            for rep in range(2):
                for label, call in calls.items():
                    row.setdefault(label, []).append(round(time_in_graph(call, sets), 2))
            log.write(json.dumps(row) + "\n")
            log.flush()
            base = min(row["plan"])
            parts = [f"{k}={min(row[k])}({min(row[k]) / base:.2f}) e{row[k + '_err']:.0e}" for k in calls if k != "plan"]
            print(name, row["plan_plan"], "plan", base, *parts, flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
