"""A/B on a GPU, in CUDA graphs as the bench times them: the default plans against the same plans
with the split kernel launched as a programmatic dependent of the previous kernel
(``VerifyPolicy(programmatic_split=True)``: its programs wait for that kernel at their start).
Outputs of both checked; best of REPS interleaved timings.
    SHAPES="..." python3 scripts/split_pdl_probe/ab.py OUT"""
import dataclasses
import json
import multiprocessing as mp
import os
import sys
import time

import torch

LIMIT_S = float(os.environ.get("LIMIT_S", "240"))
REPS = int(os.environ.get("REPS", "2"))


def _policies():
    from specdec_kernels.verify_plan import DEFAULT_POLICY

    return {"base": DEFAULT_POLICY, "pdl": dataclasses.replace(DEFAULT_POLICY, programmatic_split=True)}


def _shape(name):
    from specdec_kernels.bench import grid_shapes

    return next(s for s in grid_shapes() if s.name == name)


def _caller(policy):
    from specdec_kernels.tree_verify_triton import tree_verify_attention_triton

    return lambda q, k, v, lens, mask, out: tree_verify_attention_triton(q, k, v, lens, mask, out=out, policy=policy)


def _compile(name):
    from specdec_kernels.bench import make_inputs

    shape = _shape(name)
    inputs = make_inputs(shape, torch.device("cuda"), 0)
    for policy in _policies().values():
        _caller(policy)(*inputs, torch.empty_like(inputs[0]))
    torch.cuda.synchronize()


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    start = time.time()
    from specdec_kernels import bench

    names = os.environ["SHAPES"].split()
    with mp.get_context("spawn").Pool(14) as pool:
        result = pool.map_async(_compile, names)
        result.wait(timeout=float(os.environ.get("COMPILE_S", "120")))
    print(f"compiled {len(names)} shapes in {time.time() - start:.0f} s", flush=True)
    device = torch.device("cuda")
    policies = _policies()
    with bench.l2_flush("read"), open(os.path.join(out_dir, "split_pdl.jsonl"), "a") as f:
        for i, name in enumerate(names):
            if time.time() - start > LIMIT_S:
                print("time limit: stopped before", name, flush=True)
                break
            shape = _shape(name)
            sets = [bench.make_inputs(shape, device, i * 97 + j) for j in range(bench.input_sets_needed(shape))]
            row = {"shape": name}
            graphs, keep = {}, []
            for variant, policy in policies.items():
                outs = {id(s[0]): torch.empty_like(s[0]) for s in sets}
                call = _caller(policy)
                bound = (lambda q, k, v, lens, mask, call=call, outs=outs: call(q, k, v, lens, mask, outs[id(q)]))
                graphs[variant] = bench.capture_graph(bound, sets)
                keep.append(outs)  # the graph writes into these: alive while it is replayed
                outs[id(sets[-1][0])].fill_(float("nan"))
                graphs[variant].replay()
                torch.cuda.synchronize()
                row[f"{variant}_err"] = bench.row_error(outs[id(sets[-1][0])], *sets[-1], range(shape.batch))
            times = {v: [] for v in policies}
            for _ in range(REPS):
                for variant, graph in graphs.items():
                    times[variant].append(bench.time_in_graph(None, sets, rep_ms=30, graph=graph))
            row.update({f"{v}_us": min(t) for v, t in times.items()})
            row["x"] = row["pdl_us"] / row["base_us"]
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(f"{name} base {row['base_us']:.2f} pdl {row['pdl_us']:.2f} x{row['x']:.3f} "
                  f"err {row['base_err']:.1e}/{row['pdl_err']:.1e}", flush=True)
            del sets, graphs, keep
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
