"""Compile the tree-verify kernels for an sm_120 GPU without one, and report what they use.

RTX PRO 6000 / RTX 5090 (sm_120) allow about 99 KB of shared memory per block (101376 bytes
opt-in) and have none of Hopper's wgmma or datacenter Blackwell's tcgen05 paths. This check
compiles each head dim's sm_120 configuration (from :mod:`specdec_kernels.configs`) at its
largest query tile (with its tail tile where the configuration allows one) and the merge kernel at
its largest load block, through Triton's own ptxas, and reports shared memory, registers, spills and
the SASS instruction mix (Triton's bundled cuobjdump). It needs no GPU and no CUDA driver.

    python -m specdec_kernels.sm120_check            # prints a table, exits 1 on a violation
    python -m specdec_kernels.sm120_check --json 128 # one JSON report per kernel, head dim 128
    python -m specdec_kernels.sm120_check --hybrid 128   # the hybrid-layer kernels (Dk = Dv = 128)

The compile needs Triton's compiler, not its interpreter: run it with TRITON_INTERPRET unset
(:func:`run_check_subprocess` does that from a process that interprets).
"""

from __future__ import annotations

import collections
import inspect
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

SM120_SHARED_LIMIT = 101376  # bytes per block, opt-in maximum on compute capability 12.0
# Instructions that exist only on sm_90a (wgmma -> HGMMA, warpgroup register moves) or on
# sm_100a (tcgen05 -> UTC*MMA): none may appear in an sm_120 binary.
FORBIDDEN_SASS = ("HGMMA", "WARPGROUP", "UTCHMMA", "UTCQMMA", "UTCMMA", "UTCBAR", "USETMAXREG")
FORBIDDEN_PTX = ("wgmma", "tcgen05", "setmaxnreg")


@dataclass
class CompileReport:
    kernel: str
    head_dim: int
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    shared_bytes: int
    registers: int | None = None
    stack_bytes: int | None = None
    spill_bytes: int | None = None
    mix: collections.Counter = field(default_factory=collections.Counter)
    forbidden: list = field(default_factory=list)
    shared_limit: int = SM120_SHARED_LIMIT
    spills_fail: bool = True

    @property
    def ok(self) -> bool:
        return (self.shared_bytes <= self.shared_limit and not self.forbidden
                and not (self.spills_fail and self.spill_bytes))


def with_constexpr_defaults(fn, constexprs: dict) -> dict:
    """``constexprs`` plus the defaults of the kernel's other constexpr parameters: what a launch
    that leaves them out compiles (a parameter left out here would otherwise become a runtime
    argument, and its constexpr branches both be compiled)."""
    params = inspect.signature(getattr(fn, "fn", fn)).parameters  # the Python function under the jit
    defaults = {name: p.default for name, p in params.items()
                if p.default is not p.empty and "constexpr" in str(p.annotation)}
    return {**defaults, **constexprs}


def _signature(fn, pointer_types: dict, constexprs: dict) -> dict:
    sig = {}
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in pointer_types:
            sig[name] = pointer_types[name]
        elif name in ("qk_scale", "scale"):
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    return sig


def _nvidia_tool(name: str) -> str:
    import triton.backends.nvidia as nvidia_backend

    return os.path.join(os.path.dirname(nvidia_backend.__file__), "bin", name)


def _ptxas_spill_bytes(ptx: str, capability: int) -> int:
    """Spill stores + loads that ptxas reports for the PTX (``-v``), with Triton's own ptxas."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "kernel.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        log = subprocess.run([get_ptxas(capability).path, "-v", f"--gpu-name={sm_arch_from_capability(capability)}",
                              src, "-o", os.path.join(tmp, "kernel.cubin")],
                             capture_output=True, text=True, check=True).stderr
    return sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log))


def _inspect_cubin(cubin: bytes, report: CompileReport) -> None:
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
        path = f.name
    try:
        usage = subprocess.run([_nvidia_tool("cuobjdump"), "-res-usage", path], capture_output=True,
                               text=True, check=True).stdout
        regs = re.search(r"REG:(\d+)", usage)
        stack = re.search(r"STACK:(\d+)", usage)
        report.registers = int(regs.group(1)) if regs else None
        report.stack_bytes = int(stack.group(1)) if stack else None
        sass = subprocess.run([_nvidia_tool("cuobjdump"), "-sass", path], capture_output=True, text=True,
                              check=True).stdout
    finally:
        os.unlink(path)
    for line in sass.splitlines():
        match = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]+)?", line)
        if match:
            report.mix[match.group(1)] += 1
    report.forbidden += [op for op in report.mix if op.startswith(FORBIDDEN_SASS)]


def compile_for_sm120(head_dim: int, capability: int = 120) -> list[CompileReport]:
    """Compile the split (partial) and merge kernels at this head dim's sm_120 configuration."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from .configs import verify_config
    from .tree_verify_triton import _tree_verify_merge_kernel, _tree_verify_partial_kernel, merge_tiles

    cfg = verify_config(f"sm_{capability}", head_dim, packed_rows=4 * 65)
    # the merge at its largest load block (many splits) and with all splits in one block, the
    # split kernel with its tail tile
    split_block, merge_rows = merge_tiles(1024, head_dim)
    one_block, one_block_rows = merge_tiles(32, head_dim)
    target = GPUTarget("cuda", capability, 32)
    reports = []
    # k_desc / v_desc: sm_120 entries load through pointers; the launcher then passes the caches
    pointers = {name: "*bf16" for name in ("q_ptr", "k_ptr", "v_ptr", "k_desc", "v_desc", "out_ptr")}
    pointers.update(lens_ptr="*i32", mask_ptr="*i32", part_o_ptr="*fp32", part_lse_ptr="*fp32")
    kernels = [
        ("verify_split", _tree_verify_partial_kernel,
         dict(GROUP=4, HEAD_DIM=head_dim, BLOCK_M=cfg.max_block_m, BLOCK_N=cfg.block_n,
              TAIL_M=cfg.max_tail_m and 16, SINGLE_SPLIT=False, DOT_PRECISION="tf32", UPCAST=False,
              USE_TMA=False, LAZY_RESCALE=cfg.lazy_rescale, FOLD_SCALE=cfg.fold_scale, LAUNCH_MERGE_EARLY=True),
         dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages)),
        ("verify_merge", _tree_verify_merge_kernel,
         dict(GROUP=4, HEAD_DIM=head_dim, MERGE_ROWS=merge_rows, SPLIT_BLOCK=split_block, WAIT_FOR_SPLITS=True),
         dict(num_warps=4, num_stages=1)),
        ("verify_merge", _tree_verify_merge_kernel,
         dict(GROUP=4, HEAD_DIM=head_dim, MERGE_ROWS=one_block_rows, SPLIT_BLOCK=one_block, WAIT_FOR_SPLITS=True,
              ONE_BLOCK=True),
         dict(num_warps=4, num_stages=1)),
    ]
    for name, fn, constexprs, options in kernels:
        block_m = constexprs.get("BLOCK_M", constexprs.get("MERGE_ROWS"))
        reports.append(_compile_report(name, fn, pointers, constexprs, options, head_dim, block_m,
                                       constexprs.get("BLOCK_N", 0), target))
    return reports


def _compile_report(name, fn, pointers, constexprs, options, head_dim, block_m, block_n, target) -> CompileReport:
    """Compile ``fn`` for ``target`` as a launch with 16-byte aligned pointers and strides
    would, and report its shared memory, registers, spills and SASS mix."""
    import triton
    from triton.compiler import ASTSource

    constexprs = with_constexpr_defaults(fn, constexprs)
    # what a real launch specialises: 16-byte aligned pointers, strides divisible by 16
    aligned = [i for i, a in enumerate(fn.arg_names) if a.endswith("_ptr") or a.startswith("stride_")]
    src = ASTSource(fn=fn, signature=_signature(fn, pointers, constexprs),
                    constexprs={(fn.arg_names.index(k),): v for k, v in constexprs.items()},
                    attrs={(i,): [["tt.divisibility", 16]] for i in aligned})
    compiled = triton.compile(src, target=target, options=options)
    report = CompileReport(name, head_dim, block_m, block_n, options["num_warps"], options["num_stages"],
                           compiled.metadata.shared)
    ptx = compiled.asm["ptx"]
    report.spill_bytes = _ptxas_spill_bytes(ptx, target.arch)
    report.forbidden += [w for w in FORBIDDEN_PTX if re.search(rf"\b{w}\b", ptx)]
    _inspect_cubin(compiled.asm["cubin"], report)
    return report


def compile_hybrid_for_sm120(head_dim: int = 128, capability: int = 120) -> list[CompileReport]:
    """Compile the hybrid-layer kernels (tree conv, tree gated delta rule, commit) at their
    sm_120 configuration for Dk = Dv = ``head_dim``, bf16, the largest tree the engine verifies
    (T = 65: 128 gate columns)."""
    from triton.backends.compiler import GPUTarget

    from .hybrid_configs import DELTA_BLOCK_T, HYBRID_CONFIGS
    from .recurrent_commit_triton import _commit_kernel
    from .tree_conv_triton import _tree_conv_kernel
    from .tree_delta_triton import _tree_delta_kernel

    cfg = HYBRID_CONFIGS[f"sm_{capability}"]
    target = GPUTarget("cuda", capability, 32)
    pointers = {name: "*bf16" for name in ("q_ptr", "k_ptr", "v_ptr", "g_ptr", "beta_ptr", "out_ptr", "x_ptr",
                                          "w_ptr", "bias_ptr", "conv_ptr", "ws_u_ptr")}
    pointers.update(state_ptr="*fp32", ws_gate_ptr="*fp32", mask_ptr="*i32", parents_ptr="*i32", path_ptr="*i32",
                    path_len_ptr="*i32")
    conv_state = dict(pointers, state_ptr="*bf16")
    kernels = [
        ("hybrid_delta", _tree_delta_kernel, pointers,
         dict(DK=head_dim, DV=head_dim, BLOCK_V=cfg.delta_block_v, BT=DELTA_BLOCK_T, TPAD=128,
              DOT_PRECISION="tf32", UPCAST=False,
              DOUBLINGS=DELTA_BLOCK_T.bit_length() - 2), cfg.delta_warps, DELTA_BLOCK_T, cfg.delta_block_v),
        ("hybrid_commit", _commit_kernel, pointers,
         dict(HV=48, GROUP=3, DK=head_dim, DV=head_dim, BLOCK_V=cfg.commit_block_v, TAPS=3,
              BLOCK_C=cfg.conv_block_c), cfg.commit_warps, 1, cfg.commit_block_v),
        ("hybrid_conv", _tree_conv_kernel, conv_state,
         dict(KERNEL=4, HAS_BIAS=False, SILU=True, BLOCK_T=cfg.conv_block_t, BLOCK_C=cfg.conv_block_c),
         cfg.conv_warps, cfg.conv_block_t, cfg.conv_block_c),
    ]
    return [_compile_report(name, fn, ptrs, constexprs, dict(num_warps=warps, num_stages=1), head_dim, block_m,
                            block_n, target)
            for name, fn, ptrs, constexprs, warps, block_m, block_n in kernels]


def format_reports(reports) -> str:
    lines = [f"{'kernel':<13}{'D':>4}{'BM':>4}{'BN':>4}{'warps':>6}{'stages':>7}{'smem B':>8}"
             f"{'regs':>6}{'stack':>6}{'spill':>6}  {'ok':<3} mix (top 8) / forbidden"]
    for r in reports:
        top = ", ".join(f"{op}:{n}" for op, n in r.mix.most_common(8))
        bad = f" FORBIDDEN {r.forbidden}" if r.forbidden else ""
        lines.append(f"{r.kernel:<13}{r.head_dim:>4}{r.block_m:>4}{r.block_n:>4}{r.num_warps:>6}"
                     f"{r.num_stages:>7}{r.shared_bytes:>8}{str(r.registers):>6}{str(r.stack_bytes):>6}"
                     f"{str(r.spill_bytes):>6}  "
                     f"{'yes' if r.ok else 'NO':<3} {top}{bad}")
    return "\n".join(lines)


def print_reports(reports, as_json: bool, title: str) -> None:
    """The reports as one JSON line each, or as ``title`` and a table."""
    import json

    if as_json:
        for r in reports:
            fields = {k: v for k, v in vars(r).items() if k != "mix"}
            print(json.dumps(dict(fields, mix=dict(r.mix), ok=r.ok)))
    else:
        print(title)
        print(format_reports(reports))


def run_check_module(module: str, args, what: str) -> list[dict]:
    """Run ``python -m module --json *args`` in a fresh interpreter with TRITON_INTERPRET removed
    (a compile check needs Triton's compiler); return its reports."""
    import json

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-m", module, "--json", *map(str, args)], capture_output=True, text=True,
                          env=env)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{what} crashed:\n{done.stderr[-4000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def run_check_subprocess(head_dims=(64, 128, 256), hybrid: bool = False) -> list[dict]:
    """Run the check in a fresh interpreter with TRITON_INTERPRET removed; return its reports
    (of the hybrid-layer kernels instead of the verify kernels with ``hybrid``)."""
    return run_check_module("specdec_kernels.sm120_check", (*head_dims, *(["--hybrid"] if hybrid else [])),
                            "sm_120 compile check")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    head_dims = [int(a) for a in argv if a.isdigit()] or [64, 128, 256]
    compile_one = compile_hybrid_for_sm120 if "--hybrid" in argv else compile_for_sm120
    reports = [r for d in head_dims for r in compile_one(d)]
    print_reports(reports, "--json" in argv,
                  f"sm_120 compile check (shared memory limit {SM120_SHARED_LIMIT} B per block)")
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
