"""Upper bound of the head-dim-256 tail-rows lever: python3 tail_bound.py OUT.jsonl SECONDS.
Times the kernel (graph, L2 flushed) at T and at the largest T' whose packed rows T'.G fit the
full 128-row tiles below T.G: what the full tiles' programs take if the tail cost nothing."""
import json, sys, time
import torch
from specdec_kernels.bench import Shape, capture_graph, input_sets_needed, l2_flush, make_inputs, time_in_graph
from specdec_kernels.tree_verify_triton import plan_call, tree_verify_attention_triton
pairs = []
for hq, hkv, t in ((24, 4, 65), (6, 1, 65), (24, 4, 33), (6, 1, 33), (3, 1, 65)):
    g = hq // hkv
    full = (t * g) // 128 * 128
    t_low = full // g
    for b in (1, 8, 32):
        for l in (1024, 8192, 32768):
            pairs.append((Shape(b, t, hq, hkv, 256, l), Shape(b, t_low, hq, hkv, 256, l),
                          Shape(b, t - t_low, hq, hkv, 256, l + t_low)))
deadline = time.time() + float(sys.argv[2])
dev = torch.device("cuda")
def timed(shape, seed):
    sets = [make_inputs(shape, dev, seed + i) for i in range(input_sets_needed(shape))]
    call = lambda q, k, v, lens, mask: tree_verify_attention_triton(q, k, v, lens, mask)
    p = plan_call(*sets[0][:3], None)
    graph = capture_graph(call, sets)
    us = time_in_graph(call, sets, graph=graph)
    del graph, sets
    torch.cuda.empty_cache()
    return us, f"{p.num_m_tiles}x{p.block_m}+{p.tail_m}/{p.block_n}/{p.num_splits}/hs{p.head_split} {p.kernel}"
with l2_flush("read"), open(sys.argv[1], "w") as out:
    for i, (hi, lo, rest) in enumerate(pairs):
        if time.time() > deadline:
            print("deadline", file=sys.stderr); break
        us_hi, plan_hi = timed(hi, i)
        us_lo, plan_lo = timed(lo, i)
        us_rest, plan_rest = timed(rest, i)
        out.write(json.dumps({"shape": hi.name, "us": us_hi, "plan": plan_hi, "low": lo.name, "low_us": us_lo,
                              "low_plan": plan_lo, "rest": rest.name, "rest_us": us_rest,
                              "rest_plan": plan_rest}) + "\n"); out.flush()
        print(hi.name, round(us_hi, 1), plan_hi, "|", lo.name, round(us_lo, 1), plan_lo, "|", rest.name,
              round(us_rest, 1), plan_rest, flush=True)
