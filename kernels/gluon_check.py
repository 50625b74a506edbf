"""Compile the Gluon split kernel for sm_90 without a GPU, and report what it uses.

The Gluon kernels (:mod:`specdec_kernels.tree_verify_gluon` and its ping-pong variant) run only
on Hopper GPUs, so CI never executes them; this check compiles them, at each sm_90 table entry
and tile that selects one, with the
ptxas Triton ships, and reports shared memory, registers, spills, the SASS mix, and whether the
next tile's q.k MMA is still in flight during the softmax (a ``wgmma.wait_group 1`` in the PTX):
the point of the kernel. It catches Gluon API drift between Triton releases too.

    python -m specdec_kernels.gluon_check            # prints a table, exits 1 on a violation
    python -m specdec_kernels.gluon_check --json     # one JSON report per entry
    python -m specdec_kernels.gluon_check --head-dim 64   # one head dim (default: 128 and 64)

Like the sm_120 check it needs Triton's compiler, not its interpreter (TRITON_INTERPRET unset).
"""

from __future__ import annotations

import re
import sys

from .sm120_check import (CompileReport, _inspect_cubin, _ptxas_spill_bytes, print_reports, run_check_module,
                          with_constexpr_defaults)

SM90_SHARED_LIMIT = 232448  # bytes per block, opt-in maximum on compute capability 9.0
# (packed rows, batch) per table tier and tile that runs a Gluon kernel (G = 4, 8 KV heads): T = 9
# at batch 32 (64-row tile) and at batch 1 (ping-pong, one 64-row warpgroup), T = 17 (ping-pong,
# 64 rows and the 8-row tail), T = 33 (at batch 32: ping-pong, 128 rows and the tail; at batch 1:
# one 64-row warpgroup and the tail, two programs per KV head), T = 130 (ping-pong, 192 rows),
# T = 32 at batch 8 (ping-pong, two 64-row warpgroups); (packed rows, batch, cache rows): all at
# L8k but T = 17 and T = 33 at batch 32 with a 1k cache too, where the ping-pong kernel's short
# work items outnumber the SMs and it runs persistent (round 14), and T = 9 at batch 8 with a 32k
# cache, where at head dim 64 the single warpgroup takes 128-key tiles (long splits, round 16; the
# same tile as batch 1's at 128).
TIER_ROWS = ((36, 32, 8192), (36, 1, 8192), (68, 32, 8192), (68, 32, 1024), (132, 32, 8192), (132, 32, 1024),
             (132, 1, 8192), (520, 32, 8192), (128, 8, 8192), (36, 8, 32768))


def compile_gluon_sm90(head_dim: int = 128) -> list[CompileReport]:
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    from .configs import verify_config
    from .tree_verify_gluon import _tree_verify_partial_kernel_gluon
    from .tree_verify_gluon_pingpong import _tree_verify_partial_kernel_gluon_pingpong
    from .tree_verify_triton import _gluon_descriptors, _plan, pingpong_grid, runs_pingpong

    reports, seen = [], set()
    for rows, batch, cache in TIER_ROWS:
        cfg = verify_config("sm_90", head_dim, rows, batch * 8, cache + rows // 4)
        # the tiles the planner gives these rows (G = 4 on 132 SMs)
        plan = _plan(batch, rows // 4, 4, 8, cache + rows // 4, 132, cfg)
        cfg = plan["config"]  # the tile's own (a single ping-pong warpgroup may take other key tiles)
        block_m, tail_m, head_split = plan["block_m"], plan["tail_m"], plan["head_split"]
        pingpong = runs_pingpong(cfg, block_m)
        persistent = pingpong and pingpong_grid(plan["grid"], 132, block_m, plan["chunk"]) != plan["grid"]
        if not cfg.gluon or (cfg, block_m, tail_m, head_split, persistent) in seen:
            continue
        seen.add((cfg, block_m, tail_m, head_split, persistent))
        fn = _tree_verify_partial_kernel_gluon_pingpong if pingpong else _tree_verify_partial_kernel_gluon
        launch_warps = 4 if pingpong else cfg.num_warps
        block_n = cfg.gluon_block_n or cfg.block_n
        cache = torch.empty(2, 256, 8, head_dim, dtype=torch.bfloat16)
        desc, _ = _gluon_descriptors(cache, cache, block_n)
        constexprs = dict(GROUP=4 // head_split, HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n,
                          STAGES=cfg.gluon_stages or cfg.num_stages, SINGLE_SPLIT=False,
                          Q_IN_REGS=cfg.gluon_q_in_registers or pingpong, num_warps=launch_warps,
                          **(dict(TAIL_M=tail_m, KV_SHARE=head_split, PERSISTENT=persistent) if pingpong
                             else dict(MASKED_BY_TMA=cfg.gluon_masked_tma)))
        constexprs = with_constexpr_defaults(fn, constexprs)
        types = dict(q_ptr="*bf16", k_ptr="*bf16", v_ptr="*bf16", out_ptr="*bf16", k_desc=mangle_type(desc),
                     v_desc=mangle_type(desc), lens_ptr="*i32", mask_ptr="*i32", part_o_ptr="*fp32",
                     part_lse_ptr="*fp32", qk_scale="fp32")
        signature = {name: "constexpr" if name in constexprs else types.get(name, "i32") for name in fn.arg_names}
        aligned = [i for i, a in enumerate(fn.arg_names) if a.endswith("_ptr") or a.startswith("stride_")]
        src = GluonASTSource(fn=fn, signature=signature,
                             constexprs={(fn.arg_names.index(k),): v for k, v in constexprs.items()},
                             attrs={(i,): [["tt.divisibility", 16]] for i in aligned})
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                                  options=dict(num_warps=launch_warps, num_stages=1))
        # spills are reported, not judged: they depend on the Triton release (the 128-key tile:
        # none with 3.6, the GPU image's, which PERF.md measured; 64 B with 3.9)
        # the ping-pong kernel's MMA warps: one warpgroup per 64 rows (plus its load warp)
        name = ("pingpong" + (f"+tail{tail_m}" if tail_m else "") + (f"/{head_split}heads" if head_split > 1 else "")
                + ("/persistent" if persistent else "") if pingpong else "verify_gluon")
        report = CompileReport(name, head_dim, block_m, block_n,
                               block_m // 16 if pingpong else cfg.num_warps,
                               constexprs["STAGES"], compiled.metadata.shared, shared_limit=SM90_SHARED_LIMIT,
                               spills_fail=False)
        ptx = compiled.asm["ptx"]
        report.spill_bytes = _ptxas_spill_bytes(ptx, 90)
        _inspect_cubin(compiled.asm["cubin"], report)
        # (the sm_120 check's forbidden instructions are this kernel's own); here "forbidden"
        # means: what the kernel exists for is missing
        report.forbidden = []
        if not re.search(r"wgmma\.wait_group\.sync\.aligned 1;", ptx):
            report.forbidden.append("no q.k MMA in flight across the softmax (no wgmma.wait_group 1)")
        if not report.mix.get("HGMMA"):
            report.forbidden.append("no HGMMA")
        if not pingpong and "griddepcontrol.launch_dependents" not in ptx:
            report.forbidden.append("the merge cannot start early (no griddepcontrol.launch_dependents)")
        if pingpong and "setmaxnreg" not in ptx:
            report.forbidden.append("no warp specialisation (no setmaxnreg: the partitions were not formed)")
        reports.append(report)
    return reports


def run_check_subprocess() -> list[dict]:
    """Run the check in a fresh interpreter with TRITON_INTERPRET removed; return its reports."""
    return run_check_module("specdec_kernels.gluon_check", (), "Gluon compile check")


# the head dims the sm_90 table runs the Gluon kernels at (64 since round 15)
GLUON_HEAD_DIMS = (128, 64)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    head_dims = GLUON_HEAD_DIMS
    if "--head-dim" in argv:
        at = argv.index("--head-dim") + 1
        if at >= len(argv) or not argv[at].isdigit() or int(argv[at]) not in GLUON_HEAD_DIMS:
            print(f"--head-dim takes one of {', '.join(map(str, GLUON_HEAD_DIMS))}", file=sys.stderr)
            return 2
        head_dims = (int(argv[at]),)
    reports = [r for head_dim in head_dims for r in compile_gluon_sm90(head_dim)]
    print_reports(reports, "--json" in argv,
                  f"Gluon split kernel, sm_90 (shared memory limit {SM90_SHARED_LIMIT} B per block)")
    return 0 if reports and all(r.ok for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
