"""Dump PTX, TTGIR and SASS of every Gluon split-kernel variant the compile check plans (sm_90,
plainly and with the launch-time specialisation of integer arguments equal to 1.

usage: python dump.py OUTDIR [--spec] [--only N,M]"""
import os, subprocess, sys, tempfile, time

import triton
from specdec_kernels import compile_check as cc

out = sys.argv[1]
spec = "--spec" in sys.argv
os.makedirs(out, exist_ok=True)
SPEC_ONES = ("num_kv_heads", "num_m_tiles", "base_programs", "num_splits", "stride_mt")
_orig_defaults = cc.with_constexpr_defaults
current = {}


def with_defaults(fn, constexprs):
    filled = _orig_defaults(fn, constexprs)
    if spec and "GROUP" in constexprs:  # the split kernel, not the merge
        names = getattr(fn, "arg_names", [])
        filled.update({n: 1 for n in SPEC_ONES if n in names})
    return filled


def compile_and_dump(report, source, options):
    from triton.backends.compiler import GPUTarget
    t0 = time.time()
    compiled = triton.compile(source, target=GPUTarget("cuda", int(report.arch[3:]), 32), options=options)
    name = current["name"]
    with open(os.path.join(out, name + ".ptx"), "w") as f:
        f.write(compiled.asm["ptx"])
    with open(os.path.join(out, name + ".ttgir"), "w") as f:
        f.write(compiled.asm["ttgir"])
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(compiled.asm["cubin"])
    try:
        sass = subprocess.run([cc._nvidia_tool("cuobjdump"), "-sass", f.name], capture_output=True, text=True,
                              check=True).stdout
    finally:
        os.unlink(f.name)
    with open(os.path.join(out, name + ".sass"), "w") as f:
        f.write(sass)
    print(name, f"{time.time() - t0:.1f}s", compiled.metadata.shared, flush=True)
    return report


cc.with_constexpr_defaults = with_defaults
cc._compile_and_judge = compile_and_dump
only = None
for a in sys.argv:
    if a.startswith("--only="):
        only = {int(x) for x in a[7:].split(",")}
print("triton", triton.__version__, triton.__file__, "spec" if spec else "plain", flush=True)
n = 0
for arch in cc.TARGETS:
    for dtype, shape, plan in cc.planned_variants(arch):
        if plan.kernel == "triton":
            continue
        n += 1
        if only and n not in only:
            continue
        current["name"] = (f"{n:02d}-{arch}-{plan.kernel}-{dtype}-D{shape.head_dim}-BM{plan.block_m}+{plan.tail_m}"
                           f"-BN{plan.block_n}-st{plan.stages}-P{int(plan.persistent)}-hs{plan.head_split}"
                           f"-fm{int(plan.merge is not None and plan.merge.fused)}{'-spec1' if spec else ''}")
        try:
            cc.compile_split_kernel(arch, dtype, shape, plan)
        except Exception as exc:
            print(current["name"], "FAILED", type(exc).__name__, str(exc)[-2000:], flush=True)
            with open(os.path.join(out, current["name"] + ".FAILED"), "w") as f:
                f.write(f"{type(exc).__name__}: {exc}")
print("done", n, flush=True)
