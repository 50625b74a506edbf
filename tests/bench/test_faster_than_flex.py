"""The verify kernel against FlexAttention wherever it compiles (GPU only): faster on every shape.

FlexAttention is a torch.compile of its own per shape; ``flex_sweep`` compiles them in worker
processes and times each shape while holding the GPU's lock. The shapes are those of
test_verify_kernel.py (a few by default, the whole grid with ``SPECDEC_VERIFY_GRID=full``);
``SPECDEC_FLEX_PROCESSES`` sets the workers (default 14); with ``SPECDEC_VERIFY_TABLE=DIR`` the
rows go to ``DIR/flex.jsonl``, and a run there again times only the shapes it lacks (a whole grid
takes longer than one command may run on some machines). A shape FlexAttention does not compile or run on is skipped with its
error: the goal holds wherever it compiles.
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA GPU found: the FlexAttention sweep needs one")


def _shapes():
    from specdec_kernels.bench import run_shapes

    return run_shapes(os.environ.get("SPECDEC_VERIFY_GRID") == "full")


@pytest.fixture(scope="module")
def flex_rows(tmp_path_factory) -> dict:
    from specdec_kernels.flex_sweep import sweep

    kept = os.environ.get("SPECDEC_VERIFY_TABLE")
    out = kept or str(tmp_path_factory.mktemp("flex"))
    rows = sweep(_shapes(), out, int(os.environ.get("SPECDEC_FLEX_PROCESSES", "14")), log=lambda line: None,
                 resume=bool(kept))
    return {row["shape"]: row for row in rows}


@pytest.mark.parametrize("shape", _shapes(), ids=lambda s: s.name)
def test_faster_than_flex_attention(shape, flex_rows, record_property):
    from specdec_kernels.bench import ROW_TOLERANCE_BF16

    row = flex_rows[shape.name]
    assert "error" not in row, f"the verify kernel failed: {row['error']}"
    assert row["ok"], f"wrong output: worst row error {row['err']:.3g} (bound {ROW_TOLERANCE_BF16})"
    if "x_flex" not in row:
        pytest.skip(f"FlexAttention did not run here: {row['flex_error']}")
    for key in ("us", "flex_us", "x_flex", "flex_err"):
        record_property(key, row[key])
    assert row["flex_ok"], (f"FlexAttention's own output is wrong here (row error {row['flex_err']:.3g}): "
                            "the comparison would be meaningless")
    assert row["x_flex"] > 1, f"{row['x_flex']:.2f}x FlexAttention: {row['us']:.1f} us against {row['flex_us']:.1f}"
