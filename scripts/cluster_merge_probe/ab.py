"""A/B on a GPU, in CUDA graphs as the bench times them: the merge's own launch (the default plan),
the split kernel alone (no merge: a bound, its output wrong), and the merge inside the split kernel
with a query tile's splits launched as one thread-block cluster (``CLUSTER_MERGE``: every program
stores its partial, arrives at the cluster barrier, waits, then merges its share of the tile's row
blocks from L2). The cluster launch goes through the compiled kernel's C launcher with the cluster
size in its metadata (Triton 3.6's per-kernel launcher: (num_warps, num_ctas, shared)); outputs of
the merging variants checked.   SHAPES="..." python3 scripts/cluster_merge_probe/ab.py OUT"""
import functools
import json
import os
import sys
import time

import torch

LIMIT_S = float(os.environ.get("LIMIT_S", "300"))
VARIANTS = tuple(os.environ.get("VARIANTS", "base split_only cluster").split())
# CLUSTER_MERGE of each cluster variant: the wait after the partitions join, inside warpgroup 0's
# partition, or no barrier at all (a diagnostic: its output wrong)
MODES = {"cluster": 1, "cluster_in": 2, "cluster_nobar": 3}


def _shape(name):
    from specdec_kernels.bench import grid_shapes

    return next(s for s in grid_shapes() if s.name == name)


def _plan(shape):
    from specdec_kernels.tree_verify_triton import target_of
    from specdec_kernels.verify_plan import DEFAULT_POLICY, VerifyShape, plan_verify

    vs = VerifyShape(batch=shape.batch, num_nodes=shape.num_nodes, q_heads=shape.q_heads, kv_heads=shape.kv_heads,
                     head_dim=shape.head_dim, cache_rows=shape.prefix + shape.num_nodes)
    return plan_verify(vs, target_of(torch.device("cuda")), DEFAULT_POLICY)


def _caller(shape, variant):
    """call(q, k, v, lens, mask, out) of one variant, its workspace its own."""
    from specdec_kernels.tree_verify_triton import (_descriptor_views, _launch, _launch_spec, _split_ints,
                                                    kv_descriptor, tree_verify_attention_triton)
    from specdec_kernels.triton_launch import _c_launch_of, tensor_map
    from specdec_kernels.verify_plan import merge_tiles

    if variant == "base":
        return lambda q, k, v, lens, mask, out: tree_verify_attention_triton(q, k, v, lens, mask, out=out)
    plan = _plan(shape)
    d = shape.head_dim
    s = plan.num_splits
    work = torch.empty(plan.workspace_bytes // 4, device="cuda", dtype=torch.float32)
    counts = torch.zeros(plan.base_programs, device="cuda", dtype=torch.int32)
    split_at = plan.workspace_bytes // 4 // (d + 1) * d
    part_o, part_lse = work[:split_at], work[split_at:]
    sb, mr = merge_tiles(s, d)
    state = {}

    def call(q, k, v, lens, mask, out):
        spec = _launch_spec(plan, d, q.dtype, True)
        ints = _split_ints(plan, q, k, v, out, mask, None)
        constexprs = dict(spec.split_constexprs)
        if variant == "split_only":
            descs = (kv_descriptor(k, plan.block_n, True), kv_descriptor(v, plan.block_n, True))
            args = (q, k, v, *descs, lens, mask, out, part_o, part_lse, counts, *ints)
            _launch(spec.split_fn, plan.grid, args, constexprs, spec.split_options)
            return out
        constexprs.update(FUSED_MERGE=True, MERGE_ROWS=mr, SPLIT_BLOCK=sb, CLUSTER_MERGE=MODES[variant])
        direct = state.get("direct")
        if direct is None:
            # compiled by one launch without a cluster (each program its own: a wrong output, no wait)
            descs = (kv_descriptor(k, plan.block_n, True), kv_descriptor(v, plan.block_n, True))
            args = (q, k, v, *descs, lens, mask, out, part_o, part_lse, counts, *ints)
            direct = _launch(spec.split_fn, (s, plan.base_programs), args, constexprs, spec.split_options,
                             _descriptor_views(plan, k, v))
            if os.environ.get("STEPS"):
                torch.cuda.synchronize()
                print("  unclustered launch returned", flush=True)
            assert direct is not None and not direct.packed, "needs Triton 3.6's per-kernel launcher"
            c_launch = direct.launch.func
            meta = direct.head[5]
            direct.head = direct.head[:5] + ((meta[0], s, meta[2]),) + direct.head[6:]
            direct.launch = functools.partial(c_launch, 1, plan.base_programs, 1)
            state["direct"] = direct
        (k_enc, k_fields), (v_enc, v_fields) = direct.descriptors[3], direct.descriptors[4]
        args = (q.data_ptr(), k.data_ptr(), v.data_ptr(), tensor_map(k.data_ptr(), k_enc), *k_fields,
                tensor_map(v.data_ptr(), v_enc), *v_fields, lens.data_ptr(), mask.data_ptr(), out.data_ptr(),
                part_o.data_ptr(), part_lse.data_ptr(), counts.data_ptr(), *ints)
        direct(torch.cuda.current_stream().cuda_stream, args)
        if os.environ.get("STEPS"):
            torch.cuda.synchronize()
            print("  cluster launch returned", flush=True)
        return out
    return call


def _compile(name):
    from specdec_kernels.bench import make_inputs

    shape = _shape(name)
    inputs = make_inputs(shape, torch.device("cuda"), 0)
    for variant in VARIANTS:
        out = torch.empty_like(inputs[0])
        _caller(shape, variant)(*inputs, out)
    torch.cuda.synchronize()


def main():
    out_dir = sys.argv[1]
    if sys.argv[2] == "--one":  # one variant of one shape, each step synchronised and reported
        from specdec_kernels.bench import make_inputs

        shape = _shape(sys.argv[3])
        print(sys.argv[3], sys.argv[4], _plan(shape).kernel, flush=True)
        inputs = make_inputs(shape, torch.device("cuda"), 0)
        out = torch.empty_like(inputs[0])
        call = _caller(shape, sys.argv[4])
        for i in range(2):
            call(*inputs, out)
            torch.cuda.synchronize()
            print(f"  call {i} returned", flush=True)
        from specdec_kernels import bench
        print("  err", bench.row_error(out, *inputs, range(shape.batch)), flush=True)
        return
    if sys.argv[2] == "--compile":
        _compile(sys.argv[3])
        return
    start = time.time()
    from specdec_kernels import bench

    names = sys.argv[2:]
    device = torch.device("cuda")
    with bench.l2_flush("read"), open(os.path.join(out_dir, "cluster_merge.jsonl"), "a") as f:
        for i, name in enumerate(names):
            if time.time() - start > LIMIT_S:
                print("time limit: stopped before", name, flush=True)
                break
            shape = _shape(name)
            sets = [bench.make_inputs(shape, device, i * 97 + j) for j in range(bench.input_sets_needed(shape))]
            plan = _plan(shape)
            row = {"shape": name, "plan": f"{plan.kernel} {plan.num_m_tiles}x{plan.block_m}+{plan.tail_m} "
                                          f"s{plan.num_splits} grid{plan.grid}"}
            calls = {}
            for variant in VARIANTS:
                outs = [torch.empty_like(s[0]) for s in sets]
                call = _caller(shape, variant)
                by_q = {id(s[0]): o for s, o in zip(sets, outs)}
                calls[variant] = (lambda q, k, v, lens, mask, call=call, by_q=by_q:
                                  call(q, k, v, lens, mask, by_q[id(q)]))
                calls[variant](*sets[0])  # the cluster variant compiles (without a cluster) here
                graph = bench.capture_graph(calls[variant], sets[:1])
                outs[0].fill_(float("nan"))
                graph.replay()
                torch.cuda.synchronize()
                row[f"{variant}_err"] = bench.row_error(outs[0], *sets[0], range(shape.batch))
            times = {v: [] for v in VARIANTS}
            for _ in range(2):
                for variant, call in calls.items():
                    times[variant].append(bench.time_in_graph(call, sets, rep_ms=30))
            row.update({f"{v}_us": min(t) for v, t in times.items()})
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(f"{name} {row['plan']} " + " ".join(f"{v} {row[v + '_us']:.2f}" for v in VARIANTS)
                  + " err " + "/".join(f"{row[v + '_err']:.1e}" for v in VARIANTS), flush=True)
            del sets
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
