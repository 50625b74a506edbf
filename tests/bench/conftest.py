"""Fixtures of the GPU kernel benchmarks (the verify attention's and the hybrid layer's).

They time as ``python -m specdec_kernels.bench`` does: L2 flushed by a read rather than a
zeroing, against ceilings (copy bandwidth, bf16 matmul rate) measured once per session.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def l2_flush_by_reading():
    from specdec_kernels.bench import l2_flush

    with l2_flush("read"):
        yield


@pytest.fixture(scope="session")
def ceilings():
    import torch
    from specdec_kernels.bench import measure_ceilings

    return measure_ceilings(torch.device("cuda"))
