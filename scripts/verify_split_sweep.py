"""The grid's shapes with a missed goal (compute, SDPA or memory) at 3727182: the plan against
forced split counts around it (and the persistent grid off where the plan takes it); graph us
best of two, interleaved, every output checked. python3 splits_probe.py OUT SHAPES.txt"""
import json, multiprocessing, sys, time
import torch
from specdec_kernels.bench import Shape, input_sets_needed, make_inputs, row_error, time_in_graph
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
from specdec_kernels.verify_plan import DEFAULT_POLICY, VerifyPolicy


def parse(name):
    b, t, h, l = name.split("-")
    hq, hkv, d = h[1:].split("/")
    return Shape(int(b[1:]), int(t[1:]), int(hq), int(hkv), int(d), int(l[1:]))


def policies(shape):
    q = torch.empty(shape.batch, shape.num_nodes, shape.q_heads, shape.head_dim, dtype=torch.bfloat16, device="cuda")
    k = torch.empty(shape.batch, shape.prefix + shape.num_nodes, shape.kv_heads, shape.head_dim, dtype=torch.bfloat16,
                    device="cuda")
    p = plan_call(q, k, k, None, DEFAULT_POLICY)
    n = p.num_splits
    cands = {max(1, n // 2), n * 2, n * 4} | ({2, 3} if n == 1 else set()) | ({n * 3 // 2} if n >= 2 else set())
    cands = sorted(c for c in cands if c != n and shape.prefix // c >= 64)
    out = {"plan": DEFAULT_POLICY}
    out.update({f"s{c}": VerifyPolicy(num_splits=c) for c in cands})
    if p.persistent:
        out["nopers"] = VerifyPolicy(persistent=False)
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


def main(out_dir, names_file):
    names = open(names_file).read().split()
    t = time.time()
    with multiprocessing.get_context("spawn").Pool(14) as pool:
        pool.map(warm, names, chunksize=1)
    print(f"warm {time.time() - t:.0f}s", flush=True)
    with open(f"{out_dir}/splits.jsonl", "w") as log:
        for name in names:
            shape = parse(name)
            sets = [make_inputs(shape, torch.device("cuda"), 7 + i) for i in range(input_sets_needed(shape))]
            row = {"shape": name}
            calls = {}
            for label, pol in policies(shape).items():
                def call(q, k, v, lens, mask, pol=pol):
                    return tree_verify_attention_triton(q, k, v, lens, mask, policy=pol)
                try:
                    p = plan_call(*sets[0][:3], None, pol)
                    row[label + "_plan"] = f"{p.kernel} {p.num_m_tiles}x{p.block_m}/{p.num_splits} p{int(p.persistent)}"
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
            parts = [f"{k}={min(row[k])}({min(row[k]) / base:.2f})" for k in calls if k != "plan"]
            bad = [k for k in calls if row[k + "_err"] > 3e-2]
            print(name, row["plan_plan"], "plan", base, *parts, "BAD" if bad else "", flush=True)
            del sets
            torch.cuda.empty_cache()
    print(f"done {time.time() - t:.0f}s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
