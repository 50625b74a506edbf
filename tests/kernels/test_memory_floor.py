"""The benchmarks' floors: the streaming kernel reads every word of its buffer exactly once, and
the hybrid bench's bandwidth verdict follows the floor (under the interpreter or on a GPU)."""

from __future__ import annotations

import pytest
import torch

from kernel_cases import DEVICE, needs_triton


@needs_triton
@pytest.mark.parametrize("words", [1, 8191, 8192, 3 * 8192 + 5])
def test_stream_kernel_reads_every_word_once(words):
    from specdec_kernels.memory_floor import STREAM_BLOCK, STREAM_BLOCKS_PER_PROGRAM, _stream_kernel

    src = torch.arange(1, words + 1, dtype=torch.float32, device=DEVICE)
    programs = -(-words // (STREAM_BLOCK * STREAM_BLOCKS_PER_PROGRAM))
    out = torch.full((programs,), -1.0, dtype=torch.float32, device=DEVICE)
    _stream_kernel[(programs,)](src, out, words, BLOCK=STREAM_BLOCK, BLOCKS=STREAM_BLOCKS_PER_PROGRAM, num_warps=4)
    assert float(out.double().sum()) == pytest.approx(words * (words + 1) / 2, rel=1e-6)


# (batch, us, the goal's time, the read-once floor): met within the goal's time, unreachable only
# where the floor exceeds it
@pytest.mark.parametrize("batch,us,goal_us,stream_us,verdict", [
    (1, 90.0, 10.0, 20.0, "-"), (8, 10.0, 10.0, 12.0, "met"), (8, 30.0, 10.0, 10.0, "missed"),
    (32, 30.0, 10.0, 10.5, "unreachable")])
def test_bandwidth_verdict(batch, us, goal_us, stream_us, verdict):
    from specdec_kernels.hybrid_bench import bandwidth_verdict

    row = {"batch": batch, "us": us, "goal_us": goal_us, "stream_us": stream_us}
    assert bandwidth_verdict(row) == verdict
