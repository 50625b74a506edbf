"""The verify kernels compile for sm_120 (RTX PRO 6000 / RTX 5090) within its limits, on any host.

Triton compiles for a named GPU target with the ptxas it ships, so this needs neither a GPU nor a
CUDA driver and runs in CI on the CPU. The compile runs in a subprocess without
TRITON_INTERPRET (the interpreter replaces the kernels with Python functions that cannot compile).
"""

from __future__ import annotations

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
    return all(shutil.which(os.path.join(bin_dir, tool)) for tool in ("cuobjdump", "ptxas-blackwell"))


@pytest.mark.skipif(not _nvidia_tools_present(),
                    reason="this Triton install ships no NVIDIA ptxas/cuobjdump: cannot compile for sm_120")
def test_verify_kernels_fit_sm120():
    from specdec_kernels.sm120_check import SM120_SHARED_LIMIT, run_check_subprocess

    reports = run_check_subprocess()
    assert sorted({(r["kernel"], r["head_dim"]) for r in reports}) == sorted(
        (k, d) for k in ("verify_merge", "verify_split") for d in (64, 128, 256))
    for r in reports:
        where = f"{r['kernel']} D={r['head_dim']}"
        print(where, {k: r[k] for k in ("shared_bytes", "registers", "spill_bytes", "forbidden")})
        assert r["shared_bytes"] <= SM120_SHARED_LIMIT, f"{where}: {r['shared_bytes']} B shared memory"
        assert not r["forbidden"], f"{where}: Hopper/datacenter-Blackwell-only instructions {r['forbidden']}"
        assert r["spill_bytes"] == 0, f"{where}: {r['spill_bytes']} B of register spills"
        if r["kernel"] == "verify_split":
            assert r["mix"].get("HMMA", 0) > 0, f"{where}: the dots did not become tensor-core MMAs"


def test_compile_checks_fill_in_constexpr_defaults():
    """A constexpr the checks leave out must compile at its default, as a launch that leaves it
    out would, not become a runtime argument with both of its branches compiled."""
    from specdec_kernels.sm120_check import with_constexpr_defaults
    from specdec_kernels.tree_verify_triton import _tree_verify_merge_kernel

    filled = with_constexpr_defaults(_tree_verify_merge_kernel, dict(SPLIT_BLOCK=4, ONE_BLOCK=True))
    assert (filled["SPLIT_BLOCK"], filled["ONE_BLOCK"], filled["WAIT_FOR_SPLITS"]) == (4, True, False)
    assert with_constexpr_defaults(_tree_verify_merge_kernel, {})["ONE_BLOCK"] is False
    assert "GROUP" not in filled  # no default: the check must pass it


@pytest.mark.skipif(not _nvidia_tools_present(),
                    reason="this Triton install ships no NVIDIA ptxas/cuobjdump: cannot compile for sm_120")
def test_hybrid_kernels_fit_sm120():
    """The tree conv, tree gated delta rule and commit (plain Triton: no Gluon, no Hopper-only
    paths) compile for sm_120 at Qwen3.6's head dim 128 within its shared memory, without spills."""
    from specdec_kernels.sm120_check import SM120_SHARED_LIMIT, run_check_subprocess

    reports = run_check_subprocess(head_dims=(128,), hybrid=True)
    assert sorted(r["kernel"] for r in reports) == ["hybrid_commit", "hybrid_conv", "hybrid_delta"]
    for r in reports:
        print(r["kernel"], {k: r[k] for k in ("shared_bytes", "registers", "spill_bytes", "forbidden")})
        assert r["shared_bytes"] <= SM120_SHARED_LIMIT, f"{r['kernel']}: {r['shared_bytes']} B shared memory"
        assert not r["forbidden"], f"{r['kernel']}: Hopper/datacenter-Blackwell-only instructions {r['forbidden']}"
        assert r["spill_bytes"] == 0, f"{r['kernel']}: {r['spill_bytes']} B of register spills"
    delta = next(r for r in reports if r["kernel"] == "hybrid_delta")
    assert delta["mix"].get("HMMA", 0) > 0, "the tree delta rule's dots did not become tensor-core MMAs"
