"""Why the bench's host us a call (26-30) is twice a fresh process's (11-17) for one-launch shapes."""
import gc, json, statistics, sys, time
import torch
from specdec_kernels.bench import Shape, make_inputs, run_shape, input_sets_needed, l2_flush
from specdec_kernels.tree_verify_triton import tree_verify_attention_triton

X = [Shape(32, 16, 32, 8, 128, 32768), Shape(8, 65, 32, 8, 128, 8192), Shape(1, 17, 32, 8, 128, 8192),
     Shape(1, 9, 64, 8, 128, 1024)]
OTHER = [Shape(b, t, 32, 8, 128, l) for b in (1, 8) for t in (9, 33) for l in (1024, 8192)]
CEIL = {"copy_tb_s": 4.2, "matmul_tflop_s": 700.0, "host_floor_us": 11.0}

def probe(shape, nsets=None):
    dev = torch.device("cuda")
    n = nsets or input_sets_needed(shape)
    sets = [make_inputs(shape, dev, 3 + i) for i in range(n)]
    call = lambda *a: tree_verify_attention_triton(*a)
    for s in sets: call(*s)
    torch.cuda.synchronize()
    means = []
    for _ in range(8):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for i in range(32):
            call(*sets[i % len(sets)])
        means.append((time.perf_counter() - t) * 1e6 / 32)
    torch.cuda.synchronize()
    del sets
    return round(statistics.median(means), 2), n

def emit(tag, **kw):
    print(json.dumps({"tag": tag, **kw}), flush=True)

if __name__ == "__main__":
    for s in X:
        emit("fresh probe", shape=s.name, host=probe(s), host_2sets=probe(s, 2))
    with l2_flush("read"):
        for s in X:
            r = run_shape(s, CEIL, with_flex=False, seed=1)
            emit("run_shape", shape=s.name, host=round(r["host_us"], 2), sets=r["input_sets"], eager=round(r["eager_us"], 1), us=round(r["us"], 1))
        for s in X:
            emit("probe after run_shape", shape=s.name, host=probe(s))
        for s in OTHER:
            run_shape(s, CEIL, with_flex=False, seed=1)
        for s in X:
            r = run_shape(s, CEIL, with_flex=False, seed=1)
            emit("run_shape after 8 others", shape=s.name, host=round(r["host_us"], 2), probe=probe(s), gc=gc.get_count(), objs=len(gc.get_objects()))
        r = run_shape(Shape(8, 16, 32, 8, 128, 8192), CEIL, with_flex=True, seed=1)
        emit("flex", x_flex=r.get("x_flex"), err=r.get("flex_error"))
        for s in X:
            r = run_shape(s, CEIL, with_flex=False, seed=1)
            emit("run_shape after flex", shape=s.name, host=round(r["host_us"], 2), probe=probe(s), objs=len(gc.get_objects()))
        gc.collect(); gc.freeze()
        for s in X:
            r = run_shape(s, CEIL, with_flex=False, seed=1)
            emit("run_shape after gc.freeze", shape=s.name, host=round(r["host_us"], 2), probe=probe(s))
        gc.disable()
        for s in X:
            r = run_shape(s, CEIL, with_flex=False, seed=1)
            emit("run_shape gc disabled", shape=s.name, host=round(r["host_us"], 2), probe=probe(s))
