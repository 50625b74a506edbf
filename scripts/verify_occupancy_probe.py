"""Would the head-dim-256 one-warpgroup ping-pong kernel fit two programs an SM? Compile it for
sm_90 at 2-4 ring slots with a register cap given to ptxas (maxnreg), and report the threads a
program launches (Triton pads the one-warp load partition to a whole warpgroup), its registers,
spills and shared memory. An H200 SM: 64K registers, 228 KB shared, 227 KB a program."""
import dataclasses
import re

import triton

from specdec_kernels import compile_check as cc
from specdec_kernels.configs import _PINGPONG_D256_ONE_WARPGROUP as BASE
from specdec_kernels.verify_plan import VerifyPolicy, VerifyShape, plan_verify

cap, seen = {"value": None}, {}
orig_judge, orig_compile = cc._compile_and_judge, triton.compile


def judge(report, source, options):
    return orig_judge(report, source, dict(options, maxnreg=cap["value"]) if cap["value"] else options)


def compile_spy(src, target=None, options=None):
    kernel = orig_compile(src, target=target, options=options)
    seen["threads"] = int(re.search(r"\.reqntid\s+(\d+)", kernel.asm["ptx"]).group(1))
    seen["setmaxnreg"] = sorted(set(re.findall(r"setmaxnreg\.(\w+)\.sync\.aligned\.u32\s+(\d+)", kernel.asm["ptx"])))
    return kernel


cc._compile_and_judge, triton.compile = judge, compile_spy
shape = VerifyShape(1, 9, 6, 1, 256, 32768 + 9)
for stages in (2, 4):
    plan = plan_verify(shape, cc.TARGETS["sm_90"],
                       VerifyPolicy(tiles=dataclasses.replace(BASE, gluon_stages=stages), num_splits=264))
    for reg in (None, 200, 160, 128):
        cap["value"] = reg
        try:
            r = cc.compile_split_kernel("sm_90", "bfloat16", shape, plan)
        except Exception as exc:  # ptxas refuses a cap below what one instruction needs
            print(f"stages {stages} maxnreg {reg}: {type(exc).__name__}: "
                  f"{next((l for l in str(exc).splitlines() if 'ptxas fatal' in l), str(exc)[:200])}")
            continue
        by_regs = 65536 // (r.registers * seen["threads"])
        by_smem = 233472 // (r.shared_bytes + 1024)
        print(f"stages {stages} maxnreg {reg}: {seen['threads']} threads, {r.registers} registers, "
              f"{r.spill_bytes} B spilled, {r.shared_bytes} B shared, setmaxnreg {seen['setmaxnreg']}: "
              f"programs an SM {min(by_regs, by_smem)} (registers {by_regs}, shared {by_smem})")
