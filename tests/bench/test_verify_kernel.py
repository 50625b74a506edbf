"""Verify-kernel benchmark as tests (GPU only): correctness on every timed shape, then the goals.

Goals (bf16, H200): memory-bound shapes (T*G <= 64, batch * prefix >= 32k) reach 75% of the
device copy bandwidth measured in the same session; compute-bound shapes reach 50% of the bf16
matmul rate measured in the same session; every shape is at least 10x faster than SDPA with a
boolean tree mask (reported as xfail, with the numbers, where even the roofline time would not be
10x under SDPA's); greedy accept + commit stay under 10% of the attention time and never
synchronise with the host. The full table: ``python -m specdec_kernels.bench``.
"""

from __future__ import annotations

import zlib

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(),
                                 reason="no CUDA GPU found: the verify-kernel benchmark needs one"),
              pytest.mark.usefixtures("l2_flush_by_reading")]  # conftest.py


def _shapes():
    from specdec_kernels.bench import quick_shapes

    return quick_shapes()


@pytest.mark.parametrize("shape", _shapes(), ids=lambda s: s.name)
def test_verify_kernel_shape(shape, ceilings, record_property):
    from specdec_kernels.bench import ROW_TOLERANCE_BF16, run_shape

    row = run_shape(shape, ceilings, with_flex=False, seed=zlib.crc32(shape.name.encode()))
    for key in ("us", "tb_s", "tflop_s", "roof_frac", "x_sdpa", "err"):
        if key in row:
            record_property(key, row[key])
    assert row["err"] <= ROW_TOLERANCE_BF16, f"wrong output: worst row error {row['err']:.3g}"
    assert "x_sdpa" in row, f"SDPA baseline did not run: {row.get('sdpa_error')}"
    if shape.memory_bound_goal():
        assert row["bw_frac"] >= 0.75, (f"{row['tb_s']:.2f} TB/s is {100 * row['bw_frac']:.1f}% of the "
                                        f"measured copy bandwidth {ceilings['copy_tb_s']:.2f} (goal 75%)")
    elif row["bound"] == "compute":
        assert row["mm_frac"] >= 0.5, (f"{row['tflop_s']:.0f} TFLOP/s is {100 * row['mm_frac']:.1f}% of the "
                                       f"measured bf16 matmul rate (goal 50%)")
    if row["x_sdpa"] < 10 and row["x_sdpa_max"] < 10:
        # Even a kernel at the roofline would not be 10x faster than this SDPA: say so, loudly.
        pytest.xfail(f"10x over SDPA is out of reach here: SDPA takes {row['sdpa_us']:.0f} us, only "
                     f"{row['x_sdpa_max']:.1f}x the roofline time; measured {row['x_sdpa']:.1f}x")
    assert row["x_sdpa"] >= 10, f"only {row['x_sdpa']:.1f}x faster than SDPA (goal 10x)"


def test_accept_and_commit_are_cheap_and_never_sync():
    from specdec_kernels.bench import run_accept_commit

    result = run_accept_commit()
    assert result["no_host_sync"], "accept/commit/verify synchronised with the host"
    assert result["fused_matches_separate"], "the fused accept + commit disagrees with the two operations"
    # the stricter reading: one accept + one all-layer commit against ONE layer's attention, each
    # timed as the table times a call (a graph of calls on distinct inputs; the attention's
    # inputs fill one); the single call's launch from an idle GPU is reported beside it
    assert result["ratio_to_one_layer"] <= 0.10, (
        f"accept + commit {result['accept_commit_us']:.2f} us = {100 * result['ratio_to_one_layer']:.1f}% of one "
        f"layer's attention ({result['attention_us_one_layer']:.1f} us; goal 10%); alone in its graph "
        f"{result['accept_commit_single_us']:.2f} us = {100 * result['ratio_to_one_layer_single']:.1f}%")
