"""The tree-verify kernels compile for sm_90 and sm_120 at every tile their tables plan for the
compile check's grid (fp32 / fp16 / bf16, T = 9, 16, 17, 33, 65, head dims 64, 128, 256), within each
arch's shared memory (the Triton kernel also within the bound its tiles are planned with), on any
host.

Triton compiles for a named GPU target with the ptxas it ships, so this needs neither a GPU nor a
driver: it is where CI sees the Gluon kernels and the sm_120 binaries at all. The compile runs in a
subprocess without TRITON_INTERPRET (the interpreter replaces kernels with Python functions).
"""

from __future__ import annotations

import dataclasses

import os
import shutil

import pytest

pytest.importorskip("triton")


def _nvidia_tools_present() -> bool:
    try:
        import triton.backends.nvidia as nvidia_backend
    except ImportError:
        return False
    bin_dir = os.path.join(os.path.dirname(nvidia_backend.__file__), "bin")
    return all(shutil.which(os.path.join(bin_dir, tool)) for tool in ("cuobjdump", "ptxas", "ptxas-blackwell"))


# some 180 kernels, two at a time: minutes on a 2-core machine with a cold Triton cache
pytestmark = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def reports():
    if not _nvidia_tools_present():
        pytest.skip("this Triton install ships no NVIDIA ptxas/cuobjdump: cannot compile for sm_90 / sm_120")
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    from specdec_kernels.compile_check import run_check_subprocess

    return run_check_subprocess()


def test_every_planned_kernel_compiles_within_its_arch(reports):
    from triton.backends.nvidia.compiler import CUDAOptions

    from specdec_kernels.configs import SHARED_MEMORY_LIMITS

    default_stages = {f.name: f.default for f in dataclasses.fields(CUDAOptions)}["num_stages"]

    for r in reports:
        where = (f"{r['arch']} {r['kernel']} {r['dtype']} D={r['head_dim']} BM={r['block_m']}+{r['tail_m']} "
                 f"BN={r['block_n']} stages={r['stages']} persistent={r['persistent']} ({r['shape']})")
        print(where, {k: r[k] for k in ("shared_bytes", "planned_shared_bytes", "registers", "spill_bytes")})
        assert r["shared_bytes"] <= SHARED_MEMORY_LIMITS[r["arch"]], where
        if r["kernel"] == "triton":  # the bound the planner fits the Triton tiles with
            assert r["shared_bytes"] <= r["planned_shared_bytes"], where
        assert not r["problems"], f"{where}: {r['problems']}"
        if r["kernel"] == "merge":  # launched with no num_stages: compiled at the compiler's default
            assert r["stages"] == default_stages, where


def test_the_check_covers_every_dtype_head_dim_and_kernel(reports):
    seen = {(r["arch"], r["kernel"], r["dtype"], r["head_dim"]) for r in reports}
    for head_dim in (64, 128, 256):
        assert ("sm_90", "pingpong", "bfloat16", head_dim) in seen
        assert ("sm_90", "triton", "float32", head_dim) in seen      # fp32 at T = 65 fits 227 KB now
        assert ("sm_120", "triton", "float32", head_dim) in seen
        assert ("sm_120", "triton", "bfloat16", head_dim) in seen
        assert ("sm_90", "merge", "bfloat16", head_dim) in seen
    assert ("sm_90", "gluon", "bfloat16", 128) in seen
    # the eager calls' variants: the merge folded into each split kernel, and the ping-pong kernel's
    # waiting merge programs over whole rows and over head-dim slices
    folded = {(r["arch"], r["kernel"]) for r in reports if r["folded_merge"]}
    assert {("sm_90", "pingpong"), ("sm_90", "gluon"), ("sm_90", "triton"), ("sm_120", "triton")} <= folded, folded
    waiting = {r["merge_slices"] > 1 for r in reports if r["kernel"] == "pingpong" and r["merge_waiters"]}
    assert waiting == {False, True}, waiting
    sliced = {(r["arch"], r["head_dim"]) for r in reports if r["kernel"] == "merge" and "1 head-dim" not in r["shape"]}
    assert sliced == {(arch, d) for arch in ("sm_90", "sm_120") for d in (64, 128, 256)}, sliced
    for head_dim in (64, 128, 256):
        for arch in ("sm_90", "sm_120"):
            assert any(a == arch and dtype == "float16" and d == head_dim for a, _, dtype, d in seen), (arch, head_dim)
        assert ("sm_90", "triton", "bfloat16", head_dim) in seen  # the Triton fallback at 16 bits
    assert any(r["arch"] == "sm_90" and r["kernel"] == "triton" and r["tma"] for r in reports)
    # every ping-pong layout: one to three warpgroups, with the tail, persistent, split query heads
    pingpong = {(r["block_m"], r["tail_m"], r["persistent"], r["head_split"]) for r in reports
                if r["arch"] == "sm_90" and r["kernel"] == "pingpong" and r["head_dim"] == 128}
    assert {(64, 0, False, 1), (64, 8, False, 1), (64, 8, False, 2), (64, 8, True, 1), (128, 0, False, 1),
            (128, 8, False, 1), (128, 8, True, 1), (192, 0, False, 1)} <= pingpong, pingpong


def test_the_grid_plans_every_dtype_at_every_head_dim_and_the_sm90_fallback():
    """The check compiles what ``planned_variants`` plans: every dtype at every head dim on both
    archs (fp16 was planned once, at head dim 64 alone), and on sm_90 the Triton kernel at 16 bits
    that calls the Gluon kernels cannot take run (caches no descriptor describes, a scale <= 0:
    through tensor descriptors), which was never planned there. Planning only: no compiler needed."""
    from specdec_kernels.compile_check import planned_variants

    for arch in ("sm_90", "sm_120"):
        planned = {(dtype, shape.head_dim, plan.kernel, plan.tma) for dtype, shape, plan in planned_variants(arch)}
        for head_dim in (64, 128, 256):
            for dtype in ("float16", "bfloat16", "float32"):
                assert any(p[:2] == (dtype, head_dim) for p in planned), (arch, dtype, head_dim)
            if arch == "sm_90":
                for dtype in ("float16", "bfloat16"):
                    assert any(p[:3] == (dtype, head_dim, "triton") for p in planned), (dtype, head_dim)
                assert ("bfloat16", head_dim, "pingpong", False) in planned
    assert ("bfloat16", 128, "triton", True) in {(d, s.head_dim, p.kernel, p.tma)
                                                 for d, s, p in planned_variants("sm_90")}


def test_every_query_head_group_the_grid_plans_is_compiled():
    """GROUP (query heads a KV head) is a constexpr of every split kernel, so a plan at another
    group is another binary; the check's de-dup key left it out and compiled one group of each
    tile set: head dim 256 at G = 3 (Qwen3.5-27B at TP8) was never compiled for sm_120 at bf16,
    nor fp32 at G = 8. Planning only: no compiler needed."""
    from specdec_kernels.compile_check import grid_plans, planned_variants

    for arch in ("sm_90", "sm_120"):
        dtypes = ("bfloat16", "float32")  # fp16 shares bf16's plans: compiled once a head dim and kernel
        planned = {(dtype, shape.head_dim, plan.kernel, plan.block_m, plan.group)
                   for dtype, shape, plan in grid_plans(arch, dtypes)
                   if (shape.descriptors, shape.positive_scale) == (True, True)}
        compiled = {(dtype, shape.head_dim, plan.kernel, plan.block_m, plan.group)
                    for dtype, shape, plan in planned_variants(arch, dtypes)}
        assert planned <= compiled, (arch, sorted(planned - compiled))


def test_compile_checks_fill_in_constexpr_defaults():
    """A constexpr the check leaves out must compile at its default, as a launch that leaves it
    out would, not become a runtime argument with both of its branches compiled."""
    from specdec_kernels.compile_check import with_constexpr_defaults
    from specdec_kernels.tree_verify_triton import _tree_verify_merge_kernel

    filled = with_constexpr_defaults(_tree_verify_merge_kernel, dict(SPLIT_BLOCK=4, ONE_BLOCK=True))
    assert (filled["SPLIT_BLOCK"], filled["ONE_BLOCK"], filled["WAIT_FOR_SPLITS"]) == (4, True, False)
    assert "GROUP" not in filled


def test_hybrid_kernels_fit_sm120():
    """The tree conv, tree gated delta rule (its mixing, apply and fused kernels) and commit
    (plain Triton: no Gluon, no Hopper-only paths) compile for sm_120 at Qwen3.6's head dim 128 within its shared memory, without spills."""
    if not _nvidia_tools_present():
        pytest.skip("this Triton install ships no NVIDIA ptxas/cuobjdump: cannot compile for sm_120")
    from triton.backends.nvidia.compiler import CUDAOptions

    from specdec_kernels.compile_check import run_check_subprocess

    reports = run_check_subprocess(hybrid=True)
    assert sorted(r["kernel"] for r in reports) == ["hybrid_commit", "hybrid_conv", "hybrid_delta_apply",
                                                    "hybrid_delta_fused", "hybrid_delta_mix"]
    # the launchers give no num_stages: what runs is pipelined at the compiler's default, buffers and all
    default_stages = {f.name: f.default for f in dataclasses.fields(CUDAOptions)}["num_stages"]
    for r in reports:
        print(r["kernel"], {k: r[k] for k in ("shared_bytes", "registers", "spill_bytes", "problems", "stages")})
        assert not r["problems"], f"{r['kernel']}: {r['problems']}"  # limit, forbidden instructions, spills
        assert r["stages"] == default_stages, f"{r['kernel']} was compiled at {r['stages']} stages, not as launched"
    for delta in (r for r in reports if r["kernel"].startswith("hybrid_delta")):
        assert delta["mix"].get("HMMA", 0) > 0, f"{delta['kernel']}'s dots did not become tensor-core MMAs"


@pytest.mark.parametrize("argv,message", [
    (["sm90"], "'sm90' is not a target; use one of sm_90, sm_120"),
    (["--hybird"], "unrecognized arguments: --hybird"),
    (["--hybrid", "sm_90"], "--hybrid compiles for sm_120 only"),
])
def test_a_misspelt_argument_is_named_before_anything_compiles(argv, message, capsys, monkeypatch):
    """A typo once ran the whole check for every target instead (the arguments were matched, not
    parsed)."""
    from specdec_kernels import compile_check

    monkeypatch.setattr(compile_check, "run_check", lambda archs: pytest.fail(f"compiled for {archs}"))
    monkeypatch.setattr(compile_check, "compile_hybrid_kernels", lambda: pytest.fail("compiled the hybrid kernels"))
    with pytest.raises(SystemExit) as exited:
        compile_check.main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


# Counts the NVIDIA tools the check runs for one merge kernel (its smallest: two splits; 4 s of
# build at 32 splits against 1 s, the same tools run), built into an empty Triton cache,
# then taken from it, then taken from it where a run left no ptxas log beside it.
_COUNT_TOOL_RUNS = """
import glob, json, os, subprocess, sys
from specdec_kernels import compile_check
runs, real_run = [], subprocess.run
def counted(cmd, *args, **kwargs):
    if "--version" not in cmd:  # Triton asks ptxas its version once a process, for its cache key
        runs.append(os.path.basename(cmd[0]).split("-")[0])
    return real_run(cmd, *args, **kwargs)
subprocess.run = counted
out = []
for step in ("built", "cached", "cached without its log"):
    if step == "cached without its log":
        for log in glob.glob(os.path.join(os.environ["TRITON_CACHE_DIR"], "*", "specdec-ptxas-v.log-*")):
            os.remove(log)
    runs.clear()
    r = compile_check.compile_merge_kernel("sm_120", 64, 2, 1)
    out.append(dict(step=step, ptxas=runs.count("ptxas"), cuobjdump=runs.count("cuobjdump"),
                    spill_bytes=r.spill_bytes, registers=r.registers, mix=r.mix, problems=r.problems))
print(json.dumps(out))
"""


def test_a_kernel_is_judged_on_the_ptxas_run_that_built_it_and_a_cached_one_costs_no_tool(tmp_path):
    """The check ran ptxas a second time on Triton's PTX for its spill count, with other flags than
    Triton's build (no --regAllocOptLevel=2: the ping-pong kernel at head dim 64 spills 104 B as
    built and none in that second run), and cuobjdump on every binary, cached or not: most of a
    kernel's time on a warm cache. Now the spills are read from the log of Triton's own ptxas run,
    and both the log and cuobjdump's listings are kept beside the binary in Triton's cache."""
    if not _nvidia_tools_present():
        pytest.skip("this Triton install ships no NVIDIA ptxas/cuobjdump: cannot compile for sm_120")
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", _COUNT_TOOL_RUNS], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    built, cached, relogged = json.loads(done.stdout.splitlines()[-1])
    assert (built["ptxas"], built["cuobjdump"]) == (1, 2), built  # Triton's own ptxas run, nothing else
    assert (cached["ptxas"], cached["cuobjdump"]) == (0, 0), cached
    assert (relogged["ptxas"], relogged["cuobjdump"]) == (1, 0), relogged  # built again for its log
    for again in (cached, relogged):
        assert {k: again[k] for k in ("spill_bytes", "registers", "mix", "problems")} == \
               {k: built[k] for k in ("spill_bytes", "registers", "mix", "problems")}
    assert built["registers"] and built["mix"] and built["spill_bytes"] is not None
