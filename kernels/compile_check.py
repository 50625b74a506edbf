"""Compile the tree-verify kernels for sm_90 (H100 / H200) and sm_120 (RTX PRO 6000 / RTX 5090)
without a GPU, and report what they use.

CI has neither GPU, so this is where it sees the kernels each table gives those archs: the planner
is asked for every shape of a grid (fp32 / fp16 / bf16, T = 9, 16, 17, 33, 65, head dims 64, 128 and
256, the bench's head counts, batches and caches; on sm_90 also the calls that take the Triton
fallback at 16 bits), each distinct split kernel it plans is compiled
with the ptxas Triton ships, and the report holds shared memory (within the arch's limit; for the
Triton kernel also within the bound the planner fits its tiles with), registers, spills and the
SASS mix. sm_120 binaries must hold none of Hopper's
or datacenter Blackwell's instructions, and the 16-bit ones no spills; the Gluon kernels must issue warpgroup MMAs
and keep the next q.k MMA in flight across the softmax (the ping-pong one through its warp
specialisation). It also catches Gluon API drift between Triton releases.

    python -m specdec_kernels.compile_check            # a table; exit status 1 on a violation
    python -m specdec_kernels.compile_check --json     # one JSON report a kernel
    python -m specdec_kernels.compile_check --hybrid   # the hybrid-layer kernels for sm_120 instead

It needs Triton's compiler, not its interpreter: :func:`run_check_subprocess` runs it with
TRITON_INTERPRET unset.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field

from .configs import SHARED_MEMORY_LIMITS
from .verify_plan import MERGE_MIN_SLICE, MERGE_VECTOR_MIN_BLOCK, VerifyShape, VerifyTarget, merge_tiles, plan_verify

TARGETS = {"sm_90": VerifyTarget("sm_90", 132, gluon=True, dependent_launch=True),
           "sm_120": VerifyTarget("sm_120", 188, dependent_launch=True)}
ELEMENT_SIZES = {"bfloat16": 2, "float16": 2, "float32": 4}
NODE_COUNTS = (9, 16, 17, 33, 65)
# (head dim, (q heads, KV heads)...): the bench's head counts
# the merge's (splits, head-dim slices; None: the narrowest slices): one block and several, whole
# rows and sliced
MERGE_VARIANTS = ((32, 1), (1024, 1), (128, None), (1024, 2))
HEADS = {64: ((32, 8), (64, 8)), 128: ((32, 8), (64, 8)), 256: ((24, 4), (6, 1), (3, 1))}
GRIDS = ((1, 1024), (1, 8192), (1, 32768), (8, 8192), (8, 32768), (32, 1024), (32, 32768))
# (descriptors, positive scale) of a call: the Gluon kernels' calls, then the two that take the
# Triton fallback on sm_90 (caches no descriptor describes; a scale <= 0, caches read through TMA)
CALL_LAYOUTS = ((True, True), (False, True), (True, False))
# Instructions that exist only on sm_90a (wgmma, warpgroup register moves) or sm_100a (tcgen05):
# none may appear in an sm_120 binary.
FORBIDDEN_SASS = ("HGMMA", "WARPGROUP", "UTCHMMA", "UTCQMMA", "UTCMMA", "UTCBAR", "USETMAXREG")
FORBIDDEN_PTX = ("wgmma", "tcgen05", "setmaxnreg")


@dataclass
class CompileReport:
    arch: str
    kernel: str
    dtype: str
    head_dim: int
    block_m: int
    tail_m: int
    block_n: int
    stages: int
    num_warps: int
    persistent: bool
    head_split: int
    shape: str
    shared_bytes: int = 0
    planned_shared_bytes: int = 0
    registers: int | None = None
    spill_bytes: int | None = None
    mix: dict = field(default_factory=dict)
    problems: list = field(default_factory=list)
    tma: bool = False  # the Triton kernel reads its key tiles through tensor descriptors
    folded_merge: bool = False  # the eager calls' variant: the merge in this kernel, none launched after it
    merge_waiters: int = 0  # of a folded merge: its waiting programs a query tile, and their head-dim slices
    merge_slices: int = 1

    @property
    def ok(self) -> bool:
        return not self.problems


def grid_plans(arch: str, dtypes=tuple(ELEMENT_SIZES)):
    """(dtype, shape, plan) of every call of the grid on ``arch``, the Gluon kernels' call layout of
    each shape first."""
    for dtype in dtypes:
        for head_dim, heads in HEADS.items():
            for descriptors, positive_scale in CALL_LAYOUTS:
                for num_nodes in NODE_COUNTS:
                    for q_heads, kv_heads in heads:
                        for batch, prefix in GRIDS:
                            shape = VerifyShape(batch, num_nodes, q_heads, kv_heads, head_dim, prefix + num_nodes,
                                                ELEMENT_SIZES[dtype], descriptors, positive_scale)
                            yield dtype, shape, plan_verify(shape, TARGETS[arch])


def planned_variants(arch: str, dtypes=tuple(ELEMENT_SIZES)) -> list[tuple[str, VerifyShape, object]]:
    """(dtype, shape, plan) of each distinct split kernel the planner gives ``arch`` on the grid
    (fp16 shares bf16's plans; it is compiled once a head dim and kernel kind, the first such plan;
    the Triton fallback's calls add a kernel only for tiles not compiled yet, whatever its merge).
    The query heads a KV head (GROUP) is a constexpr of every split kernel: a plan at another one
    is another kernel."""
    seen, seen_tiles, out = set(), set(), []
    for dtype, shape, plan in grid_plans(arch, dtypes):
        key = (ELEMENT_SIZES[dtype], shape.head_dim, plan.kernel, plan.group, plan.block_m, plan.tail_m,
               plan.block_n, plan.stages, plan.num_warps, plan.persistent, plan.head_split, plan.tma,
               plan.merge is not None and plan.merge.fused,
               plan.merge is not None and plan.merge.waiters > 0,
               plan.merge is not None and plan.merge.fused and plan.merge.head_slices > 1,
               plan.own_tree_split)
        tiles = key[:12]
        if dtype == "float16":  # bf16's tiles: one kernel a head dim and kernel kind
            key = tiles = ("float16", shape.head_dim, plan.kernel)
        fallback = (shape.descriptors, shape.positive_scale) != CALL_LAYOUTS[0]
        if key not in seen and not (fallback and tiles in seen_tiles):
            seen.add(key)
            seen_tiles.add(tiles)
            out.append((dtype, shape, plan))
    return out


def _nvidia_tool(name: str) -> str:
    import triton.backends.nvidia as nvidia_backend

    return os.path.join(os.path.dirname(nvidia_backend.__file__), "bin", name)


def _spill_bytes(log: str) -> int:
    """Spill stores + loads in a ``ptxas -v`` log."""
    return sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log))


def _ptxas_log(ptx: str, capability: int) -> str:
    """``ptxas -v``'s log for the PTX, with Triton's own ptxas: for a Triton that prints none of its
    own build (no TRITON_DUMP_PTXAS_LOG knob)."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "kernel.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        return subprocess.run([get_ptxas(capability).path, "-v", f"--gpu-name={sm_arch_from_capability(capability)}",
                               src, "-o", os.path.join(tmp, "kernel.cubin")],
                              capture_output=True, text=True, check=True).stderr


def _beside(compiled, what: str) -> tuple[object, str]:
    """(Triton's cache directory of ``compiled``, a file name there for ``what`` of this very
    binary): named by the binary's digest, so that nothing is read back for another binary."""
    import hashlib

    from triton.runtime.cache import get_cache_manager

    digest = hashlib.sha256(compiled.asm["cubin"]).hexdigest()[:24]
    return get_cache_manager(compiled.hash), f"specdec-{what}-{digest}"


def _compile(source, capability: int, options: dict):
    """Compile ``source`` and return (the kernel, its ptxas -v log or None).

    The log is the one of the ptxas run that built this binary, Triton's flags and all (a second
    ptxas run with the check's own flags cost a third of a kernel's time and could judge spills of
    another register allocation). A binary Triton takes from its cache was built by no ptxas here:
    its log comes from beside it, or, where an older run left none, the kernel is built again."""
    import contextlib
    import io

    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget

    target = GPUTarget("cuda", capability, 32)
    nvidia = getattr(knobs, "nvidia", None)
    if nvidia is None or not hasattr(nvidia, "dump_ptxas_log"):
        return triton.compile(source, target=target, options=options), None
    for rebuild in (False, True):
        printed = io.StringIO()
        with nvidia.scope(), knobs.compilation.scope(), contextlib.redirect_stdout(printed):
            nvidia.dump_ptxas_log = True  # printed on stdout once ptxas has succeeded
            knobs.compilation.always_compile = rebuild
            compiled = triton.compile(source, target=target, options=options)
        cache, name = _beside(compiled, "ptxas-v.log")
        if "ptxas" in printed.getvalue():
            cache.put(printed.getvalue(), name, binary=False)
            return compiled, printed.getvalue()
        saved = cache.get_file(name)
        if saved is not None:
            with open(saved) as f:
                return compiled, f.read()
    raise RuntimeError("Triton built the kernel but printed no ptxas log")


def _cuobjdump(cubin: bytes) -> tuple[str, str]:
    """``cuobjdump -res-usage`` and ``-sass`` of the binary."""
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
        path = f.name
    try:
        return tuple(subprocess.run([_nvidia_tool("cuobjdump"), flag, path], capture_output=True, text=True,
                                    check=True).stdout for flag in ("-res-usage", "-sass"))
    finally:
        os.unlink(path)


def _cached_cuobjdump(compiled) -> tuple[str, str]:
    """The binary's listings (cuobjdump's start-up alone costs more than a cached compile), read
    back from beside it in Triton's cache where a run made them, or made now and left there."""
    import gzip

    cache, name = _beside(compiled, "cuobjdump.json.gz")
    saved = cache.get_file(name)
    if saved is not None:
        with gzip.open(saved, "rt") as f:
            return tuple(json.load(f))
    listings = _cuobjdump(compiled.asm["cubin"])
    cache.put(gzip.compress(json.dumps(listings).encode()), name, binary=True)
    return listings


def _inspect_cubin(listings: tuple[str, str], report: CompileReport) -> None:
    usage, sass = listings
    regs = re.search(r"REG:(\d+)", usage)
    report.registers = int(regs.group(1)) if regs else None
    mix = collections.Counter()
    for line in sass.splitlines():
        match = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]+)?", line)
        if match:
            mix[match.group(1)] += 1
    report.mix = dict(mix)


def with_constexpr_defaults(fn, constexprs: dict) -> dict:
    """``constexprs`` plus the defaults of the kernel's other constexpr parameters: what a launch
    that leaves them out compiles (one left out here would become a runtime argument instead)."""
    params = inspect.signature(getattr(fn, "fn", fn)).parameters
    defaults = {name: p.default for name, p in params.items()
                if p.default is not p.empty and "constexpr" in str(p.annotation)}
    return {**defaults, **constexprs}


def _source(fn, constexprs: dict, types: dict, gluon: bool):
    from triton.compiler import ASTSource

    constexprs = with_constexpr_defaults(fn, constexprs)
    signature = {name: "constexpr" if name in constexprs else types.get(name, "i32") for name in fn.arg_names}
    # what a real launch specialises: 16-byte aligned pointers, strides divisible by 16
    aligned = [i for i, a in enumerate(fn.arg_names) if a.endswith("_ptr") or a.startswith("stride_")]
    kwargs = dict(fn=fn, signature=signature, constexprs={(fn.arg_names.index(k),): v for k, v in constexprs.items()},
                  attrs={(i,): [["tt.divisibility", 16]] for i in aligned})
    if gluon:
        from triton.experimental.gluon._runtime import GluonASTSource

        return GluonASTSource(**kwargs)
    return ASTSource(**kwargs)


def _layout_tag(shape: VerifyShape) -> str:
    """How a call of the grid differs from the Gluon kernels' calls (empty where it does not)."""
    return ("" if shape.descriptors else "-pointers") + ("" if shape.positive_scale else "-scale<=0")


def compile_split_kernel(arch: str, dtype: str, shape: VerifyShape, plan) -> CompileReport:
    """Compile the split kernel ``plan`` names for ``arch`` and judge what it uses."""
    import torch

    short = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}[dtype]
    report = CompileReport(arch, plan.kernel, dtype, shape.head_dim, plan.block_m, plan.tail_m, plan.block_n,
                           plan.stages, plan.num_warps, plan.persistent, plan.head_split,
                           f"B{shape.batch}-T{shape.num_nodes}-H{shape.q_heads}/{shape.kv_heads}-S{shape.cache_rows}"
                           f"{_layout_tag(shape)}",
                           planned_shared_bytes=plan.shared_bytes, tma=plan.tma,
                           folded_merge=plan.merge is not None and plan.merge.fused,
                           merge_waiters=plan.merge.waiters if plan.merge is not None else 0,
                           merge_slices=plan.merge.head_slices if plan.merge is not None and plan.merge.fused else 1)
    types = dict(q_ptr=f"*{short}", k_ptr=f"*{short}", v_ptr=f"*{short}", out_ptr=f"*{short}", lens_ptr="*i32",
                 mask_ptr="*i32", part_o_ptr="*fp32", part_lse_ptr="*fp32", counts_ptr="*i32", qk_scale="fp32")
    common = dict(GROUP=plan.group, HEAD_DIM=shape.head_dim, BLOCK_M=plan.block_m, BLOCK_N=plan.block_n,
                  SINGLE_SPLIT=False)
    if plan.merge is not None and plan.merge.fused:  # the eager calls' kernel, the merge folded in
        common.update(plan.merge.folded_constexprs())
    if plan.kernel == "triton":
        from .tree_verify_triton import _tree_verify_partial_kernel as fn

        if plan.tma:
            from triton.runtime.jit import mangle_type

            from .tree_verify_triton import kv_descriptor

            cache = torch.empty(2, 256, 8, shape.head_dim, dtype=getattr(torch, dtype))
            desc = mangle_type(kv_descriptor(cache, plan.block_n))
            types.update(k_desc=desc, v_desc=desc)
        else:
            types.update(k_desc=f"*{short}", v_desc=f"*{short}")
        constexprs = dict(common, TAIL_M=plan.tail_m, DOT_PRECISION="ieee" if dtype == "float32" else "tf32",
                          UPCAST=False, USE_TMA=plan.tma, LAUNCH_MERGE_EARLY="FUSED_MERGE" not in common,
                          KV_SHARE=plan.head_split)
        options = dict(num_warps=plan.num_warps, num_stages=plan.stages)
    else:
        from triton.runtime.jit import mangle_type

        from .tree_verify_triton import kv_descriptor

        cache = torch.empty(2, 256, 8, shape.head_dim, dtype=getattr(torch, dtype))
        desc = mangle_type(kv_descriptor(cache, plan.block_n, gluon=True))
        types.update(k_desc=desc, v_desc=desc)
        if plan.kernel == "pingpong":
            from .tree_verify_gluon_pingpong import _tree_verify_partial_kernel_gluon_pingpong as fn

            extra = dict(TAIL_M=plan.tail_m, KV_SHARE=plan.head_split, PERSISTENT=plan.persistent, Q_IN_REGS=True)
        else:
            from .tree_verify_gluon import _tree_verify_partial_kernel_gluon as fn

            extra = dict(Q_IN_REGS=plan.config.gluon_q_in_registers)
        constexprs = dict(common, STAGES=plan.stages, num_warps=plan.num_warps, **extra)
        options = dict(num_warps=plan.num_warps, num_stages=1)
    if plan.own_tree_split:
        constexprs["TREE_SPLIT"] = 1
    return _compile_and_judge(report, _source(fn, constexprs, types, plan.kernel != "triton"), options)


def compile_merge_kernel(arch: str, head_dim: int, num_splits: int, head_slices: int) -> CompileReport:
    """Compile the merge at ``num_splits`` (its largest unrolled block, or all splits in one) on
    head_dim / head_slices columns a program."""

    from .tree_verify_triton import _tree_verify_merge_kernel as fn

    split_block, merge_rows = merge_tiles(num_splits, head_dim, head_slices)
    report = CompileReport(arch, "merge", "bfloat16", head_dim, merge_rows, 0, split_block, 1, 4, False, 1,
                           f"{num_splits} splits, {head_slices} head-dim slices")
    constexprs = dict(GROUP=4, HEAD_DIM=head_dim, SLICE_D=head_dim // head_slices, MERGE_ROWS=merge_rows,
                      SPLIT_BLOCK=split_block, WAIT_FOR_SPLITS=True, ONE_BLOCK=num_splits <= split_block,
                      VECTOR_LOADS=split_block >= MERGE_VECTOR_MIN_BLOCK)
    types = dict(part_o_ptr="*fp32", part_lse_ptr="*fp32", out_ptr="*bf16")
    report.planned_shared_bytes = SHARED_MEMORY_LIMITS[arch]
    # num_warps as the launcher gives it, num_stages left to Triton as the launcher leaves it
    return _compile_and_judge(report, _source(fn, constexprs, types, False), dict(num_warps=4))


def compile_hybrid_kernels(arch: str = "sm_120", head_dim: int = 128) -> list[CompileReport]:
    """The hybrid-layer kernels (tree conv, tree gated delta rule, commit) at their ``arch``
    configuration for Dk = Dv = ``head_dim``, bf16, the largest tree the engine verifies (T = 65:
    128 gate columns)."""

    from .hybrid_configs import DELTA_BLOCK_T, HYBRID_CONFIGS
    from .recurrent_commit_triton import _commit_kernel
    from .tree_conv_triton import _tree_conv_kernel
    from .tree_delta_triton import _tree_delta_apply_kernel, _tree_delta_fused_kernel, _tree_delta_mix_kernel

    cfg = HYBRID_CONFIGS[arch]
    pointers = {name: "*bf16" for name in ("q_ptr", "k_ptr", "v_ptr", "g_ptr", "beta_ptr", "out_ptr", "x_ptr",
                                          "w_ptr", "bias_ptr", "conv_ptr", "mix_ptr", "ws_ptr", "ws_u_ptr")}
    pointers.update(state_ptr="*fp32", gate_ptr="*fp32", ws_gate_ptr="*fp32", mask_ptr="*i32", parents_ptr="*i32", path_ptr="*i32",
                    path_len_ptr="*i32", scale="fp32")
    kernels = [
        ("hybrid_delta_mix", _tree_delta_mix_kernel, pointers,
         dict(DK=head_dim, BT=DELTA_BLOCK_T, TPAD=128, DOT_PRECISION="tf32", UPCAST=False,
              DOUBLINGS=DELTA_BLOCK_T.bit_length() - 2, LAUNCH_DEPENDENTS=cfg.delta_dependent_launch),
         cfg.delta_mix_warps, DELTA_BLOCK_T, 128),
        ("hybrid_delta_apply", _tree_delta_apply_kernel, pointers,
         dict(DK=head_dim, BLOCK_V=cfg.delta_block_v, BR=min(128, cfg.delta_rows), TPAD=128, DOT_PRECISION="tf32",
              UPCAST=False, WAIT_FOR_MIX=cfg.delta_dependent_launch), cfg.delta_warps, min(128, cfg.delta_rows), cfg.delta_block_v),
        ("hybrid_delta_fused", _tree_delta_fused_kernel, pointers,
         dict(DK=head_dim, DV=head_dim, BLOCK_V=cfg.delta_block_v, BT=DELTA_BLOCK_T, TPAD=128, DOT_PRECISION="tf32",
              UPCAST=False, DOUBLINGS=DELTA_BLOCK_T.bit_length() - 2), cfg.delta_warps, DELTA_BLOCK_T,
         cfg.delta_block_v),
        ("hybrid_commit", _commit_kernel, pointers,
         dict(HV=48, GROUP=3, DK=head_dim, DV=head_dim, BLOCK_V=cfg.commit_block_v, TAPS=3, BLOCK_C=cfg.conv_block_c),
         cfg.commit_warps, 1, cfg.commit_block_v),
        ("hybrid_conv", _tree_conv_kernel, dict(pointers, state_ptr="*bf16"),
         dict(KERNEL=4, HAS_BIAS=False, SILU=True, BLOCK_T=cfg.conv_block_t, BLOCK_C=cfg.conv_block_c),
         cfg.conv_warps, cfg.conv_block_t, cfg.conv_block_c),
    ]
    reports = []
    for name, fn, types, constexprs, warps, block_m, block_n in kernels:
        report = CompileReport(arch, name, "bfloat16", head_dim, block_m, 0, block_n, 1, warps, False, 1, "T65")
        report.planned_shared_bytes = SHARED_MEMORY_LIMITS[arch]
        # Triton's default stages, as the launchers leave them: the pipelined loops' buffers count
        reports.append(_compile_and_judge(report, _source(fn, constexprs, types, False), dict(num_warps=warps)))
    return reports


def _compile_and_judge(report: CompileReport, source, options: dict) -> CompileReport:
    """Compile ``source`` for the report's arch and fill in what the binary uses, then judge it."""
    capability = int(report.arch.removeprefix("sm_"))
    compiled, log = _compile(source, capability, options)
    if "num_stages" not in options:  # the compiler's default, as the launch leaves it
        report.stages = compiled.metadata.num_stages
    report.shared_bytes = compiled.metadata.shared
    ptx = compiled.asm["ptx"]
    report.spill_bytes = _spill_bytes(log if log is not None else _ptxas_log(ptx, capability))
    _inspect_cubin(_cached_cuobjdump(compiled), report)
    _judge(report, ptx)
    return report


def _judge(report: CompileReport, ptx: str) -> None:
    limit = SHARED_MEMORY_LIMITS[report.arch]
    if report.shared_bytes > limit:
        report.problems.append(f"{report.shared_bytes} B of shared memory > the {limit} B limit")
    if report.kernel == "triton" and report.shared_bytes > report.planned_shared_bytes:
        # the bound the planner fits the Triton tiles with (the Gluon entries are fixed, held to the limit)
        report.problems.append(f"{report.shared_bytes} B of shared memory > the plan's {report.planned_shared_bytes}")
    if report.arch == "sm_120":
        report.problems += [f"forbidden {op}" for op in report.mix if op.startswith(FORBIDDEN_SASS)]
        report.problems += [f"forbidden {w}" for w in FORBIDDEN_PTX if re.search(rf"\b{w}\b", ptx)]
        if report.spill_bytes and report.dtype != "float32":  # fp32's FMA dots spill whatever the tile
            report.problems.append(f"{report.spill_bytes} B of register spills")
    if report.kernel in ("gluon", "pingpong"):
        if not report.mix.get("HGMMA"):
            report.problems.append("no HGMMA")
        if not re.search(r"wgmma\.wait_group\.sync\.aligned 1;", ptx):
            report.problems.append("no q.k MMA in flight across the softmax (no wgmma.wait_group 1)")
        if report.kernel == "pingpong" and "setmaxnreg" not in ptx:
            report.problems.append("no warp specialisation (no setmaxnreg)")
        if report.kernel == "gluon" and not report.folded_merge and "griddepcontrol.launch_dependents" not in ptx:
            report.problems.append("the merge cannot start early (no griddepcontrol.launch_dependents)")
    if report.arch == "sm_120" and report.kernel == "triton" and report.dtype != "float32" and not report.mix.get("HMMA"):
        report.problems.append("the dots did not become tensor-core MMAs (no HMMA)")


def _compile_job(job) -> CompileReport:
    if job[0] == "merge":
        return compile_merge_kernel(*job[1:])
    try:
        return compile_split_kernel(*job)
    except Exception as exc:  # a kernel that does not compile is a finding, not the end of the check
        arch, dtype, shape, plan = job
        report = CompileReport(arch, plan.kernel, dtype, shape.head_dim, plan.block_m, plan.tail_m, plan.block_n,
                               plan.stages, plan.num_warps, plan.persistent, plan.head_split,
                               f"B{shape.batch}-T{shape.num_nodes}-H{shape.q_heads}/{shape.kv_heads}")
        report.problems.append(f"does not compile: {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200]}")
        return report


def run_check(archs=tuple(TARGETS), workers: int = 2) -> list[CompileReport]:
    """Every distinct kernel of ``archs``, compiled ``workers`` at a time."""
    jobs = [(arch, dtype, shape, plan) for arch in archs for dtype, shape, plan in planned_variants(arch)]
    jobs += [("merge", arch, head_dim, splits, slices or head_dim // MERGE_MIN_SLICE) for arch in archs
             for head_dim in HEADS for splits, slices in MERGE_VARIANTS]
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_compile_job, jobs))


def format_reports(reports) -> str:
    lines = [f"{'arch':<7}{'kernel':<9}{'dtype':<9}{'D':>4}{'BM':>4}{'+T':>3}{'BN':>4}{'st':>3}{'w':>3}{'P':>2}"
             f"{'hs':>3}{'smem B':>8}{'plan B':>8}{'regs':>5}{'spill':>6}  ok  problems / mix (top 5)"]
    for r in reports:
        top = ", ".join(f"{op}:{n}" for op, n in collections.Counter(r.mix).most_common(5))
        lines.append(f"{r.arch:<7}{r.kernel:<9}{r.dtype[:8]:<9}{r.head_dim:>4}{r.block_m:>4}{r.tail_m:>3}"
                     f"{r.block_n:>4}{r.stages:>3}{r.num_warps:>3}{'P' if r.persistent else '':>2}{r.head_split:>3}"
                     f"{r.shared_bytes:>8}{r.planned_shared_bytes:>8}{str(r.registers):>5}{str(r.spill_bytes):>6}  "
                     f"{'yes' if r.ok else 'NO '} {'; '.join(r.problems) if r.problems else top}")
    return "\n".join(lines)


def run_check_subprocess(archs=tuple(TARGETS), hybrid: bool = False) -> list[dict]:
    """Run the check in a fresh interpreter with TRITON_INTERPRET removed; return its reports (of
    the hybrid-layer kernels for sm_120 with ``hybrid``)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    flags = ["--hybrid"] if hybrid else list(archs)
    done = subprocess.run([sys.executable, "-m", "specdec_kernels.compile_check", "--json", *flags],
                          capture_output=True, text=True, env=env)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"the compile check crashed:\n{done.stderr[-4000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _target(arch: str) -> str:
    if arch not in TARGETS:
        raise argparse.ArgumentTypeError(f"{arch!r} is not a target; use one of {', '.join(TARGETS)}")
    return arch


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_kernels.compile_check",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("archs", nargs="*", type=_target, metavar="ARCH",
                        help=f"targets to compile for, of {', '.join(TARGETS)} (default: all)")
    parser.add_argument("--json", action="store_true", help="one JSON report a kernel instead of a table")
    parser.add_argument("--hybrid", action="store_true", help="the hybrid-layer kernels for sm_120 instead")
    args = parser.parse_args(argv)
    from .command_line import require

    require("python -m specdec_kernels.compile_check", "torch", "triton")
    if args.hybrid and args.archs:
        parser.error("--hybrid compiles for sm_120 only; leave out the targets")
    archs = ("sm_120",) if args.hybrid else tuple(dict.fromkeys(args.archs)) or tuple(TARGETS)
    reports = compile_hybrid_kernels() if args.hybrid else run_check(archs)
    if args.json:
        for r in reports:
            print(json.dumps(dict(asdict(r), ok=r.ok)))
    else:
        import triton

        what = "hybrid-layer" if args.hybrid else "tree-verify"
        print(f"{what} kernels compiled by Triton {triton.__version__} for {', '.join(archs)} "
              f"(shared memory limits {', '.join(f'{a} {SHARED_MEMORY_LIMITS[a]} B' for a in archs)})")
        print(format_reports(reports))
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
