"""Would the head-dim-256 one-warpgroup ping-pong kernel fit two programs an SM? Compile it for
sm_90 at 2-4 ring slots with the register cap ptxas is given (maxnreg), and report registers,
spills and shared memory (an H200 SM: 64K registers, 228 KB shared, 227 KB a program)."""
import dataclasses, sys
from specdec_kernels import compile_check as cc
from specdec_kernels.configs import _PINGPONG_D256_ONE_WARPGROUP as BASE
from specdec_kernels.verify_plan import VerifyPolicy, VerifyShape, plan_verify

cap = {"value": None}
orig = cc._compile_and_judge
def patched(report, source, options):
    if cap["value"]:
        options = dict(options, maxnreg=cap["value"])
    return orig(report, source, options)
cc._compile_and_judge = patched
shape = VerifyShape(1, 9, 6, 1, 256, 32768 + 9)
for stages in (2, 3, 4):
    cfg = dataclasses.replace(BASE, gluon_stages=stages)
    plan = plan_verify(shape, cc.TARGETS["sm_90"], VerifyPolicy(tiles=cfg, num_splits=264))
    for reg in (None, 232, 200, 184, 168):
        cap["value"] = reg
        try:
            r = cc.compile_split_kernel("sm_90", "bfloat16", shape, plan)
            threads = 32 * (plan.num_warps + 1)
            fit_regs = 65536 // (r.registers * threads) if r.registers else None
            fit_smem = 233472 // (r.shared_bytes + 1024)
            print(f"stages {stages} maxnreg {reg}: regs {r.registers} spill {r.spill_bytes} B shared {r.shared_bytes} B "
                  f"warps {plan.num_warps}+1 -> programs an SM by regs {fit_regs}, by shared {fit_smem}; problems {r.problems}", flush=True)
        except Exception as e:
            print(f"stages {stages} maxnreg {reg}: {type(e).__name__}: {str(e)[:300]}", flush=True)
