"""A / B (an experiment, not kept): the merge folded into the split kernel inside a CUDA graph (its
counts zeroed by a memset node in the graph) against the merge's own launch, on every bench-grid
shape up to 8k keys whose plan folds the merge into eager calls; graph us, interleaved twice, and the
graph's output checked. Run from the repository root with kernels/ patched by
scripts/verify_graph_fold.patch and that copy first on PYTHONPATH (as specdec_kernels):
python3 scripts/verify_graph_fold_ab.py OUT SECONDS"""
import json, os, sys, time, multiprocessing
import torch
from specdec_kernels.bench import grid_shapes, input_sets_needed, l2_flush, make_inputs, row_error, time_in_graph
from specdec_kernels.tree_verify_triton import tree_verify_attention_triton
from specdec_kernels.verify_plan import VerifyShape, VerifyTarget, plan_verify, VerifyPolicy

POL = VerifyPolicy(launch_cache=False)


def call(q, k, v, lens, mask, out=None):
    return tree_verify_attention_triton(q, k, v, lens, mask, out=out, policy=POL)

H200 = VerifyTarget("sm_90", 132, gluon=True, dependent_launch=True)


def shapes():
    out = []
    for s in grid_shapes((256, 128)):
        p = plan_verify(VerifyShape(s.batch, s.num_nodes, s.q_heads, s.kv_heads, s.head_dim, s.prefix + s.num_nodes), H200)
        if p.merge is not None and p.merge.fused and s.prefix <= 8192:
            out.append(s)
    return out


def _compile(shape):
    inputs = make_inputs(shape, torch.device("cuda"), 0)
    for _ in range(2):
        call(*inputs)
    torch.cuda.synchronize()


def graph_output(shape, sets):
    q, k, v, lens, mask = sets[0]
    out = torch.full_like(q, float("nan"))
    tree_verify_attention_triton(q, k, v, lens, mask, out=out, policy=VerifyPolicy(launch_cache=False, fused_merge=False))
    call(q, k, v, lens, mask, out=out)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        with torch.cuda.graph(g):
            call(q, k, v, lens, mask, out=out)
    out.fill_(float("nan"))
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    return row_error(out, q, k, v, lens, mask, sorted({0, shape.batch - 1}))


def main(out_dir, budget):
    started = time.time()
    todo = shapes()
    print(len(todo), "shapes", flush=True)
    with multiprocessing.get_context("spawn").Pool(15) as pool:
        pool.map(_compile, todo, chunksize=1)
    print(f"warm {time.time() - started:.1f} s", flush=True)
    dev = torch.device("cuda")
    with open(f"{out_dir}/fuse.jsonl", "w") as log, l2_flush("read"):
        for shape in todo:
            if time.time() - started > budget:
                print("out of time", flush=True)
                break
            sets = [make_inputs(shape, dev, 7 + i) for i in range(input_sets_needed(shape))]
            row = {"shape": shape.name}
            for rep in range(2):
                for mode in ("0", "1"):
                    os.environ["FUSE_IN_GRAPH"] = mode
                    if rep == 0:
                        row[f"err{mode}"] = round(graph_output(shape, sets), 5)
                    row.setdefault(f"us{mode}", []).append(round(time_in_graph(call, sets), 2))
            log.write(json.dumps(row) + "\n"); log.flush()
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
