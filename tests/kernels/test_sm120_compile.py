"""The verify kernels compile for sm_120 (RTX PRO 6000 / RTX 5090) within its limits, on any host.

Triton compiles for a named GPU target with the ptxas it ships, so this needs neither a GPU nor a
CUDA driver and runs in CI on the CPU.
"""

from __future__ import annotations

import os
import shutil

import pytest

triton = pytest.importorskip("triton")


def _nvidia_tools_present() -> bool:
    try:
        import triton.backends.nvidia as nvidia_backend
    except ImportError:
        return False
    bin_dir = os.path.join(os.path.dirname(nvidia_backend.__file__), "bin")
    return all(shutil.which(os.path.join(bin_dir, tool)) for tool in ("cuobjdump", "ptxas-blackwell"))


@pytest.mark.skipif(not _nvidia_tools_present(),
                    reason="this Triton install ships no NVIDIA ptxas/cuobjdump: cannot compile for sm_120")
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_verify_kernels_fit_sm120(head_dim):
    from specdec_kernels.sm120_check import SM120_SHARED_LIMIT, compile_for_sm120, format_reports

    reports = compile_for_sm120(head_dim)
    print(format_reports(reports))
    for r in reports:
        assert r.shared_bytes <= SM120_SHARED_LIMIT, format_reports([r])
        assert not r.forbidden, f"Hopper/datacenter-Blackwell-only instructions: {r.forbidden}"
        assert r.spill_bytes == 0, f"register spills on sm_120: {format_reports([r])}"
    assert reports[0].mix["HMMA"] > 0, "the split kernel's dots did not become tensor-core MMAs"
