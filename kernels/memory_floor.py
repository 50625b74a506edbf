"""The measured floors of a kernel on this GPU and of its launch on this host, under the
benchmarks' own timing.

A shape's time goal is only reachable if the least any kernel doing the work must do meets it.
Two kernels, timed as the kernel under test (``time_in_graph``: CUDA-graph replays over rotating
buffers, L2 flushed):
- ``launch_us``: an empty Triton kernel, the launch floor of one kernel;
- ``stream_us``: a kernel that reads ``nbytes`` once (each program sums its blocks and writes
  one number), the floor of any kernel that must read them.
And one host time, as the bench times an eager call's (``host_us_per_call``): :func:`host_floor_us`,
one direct C launch of the empty kernel and the allocation of an output, the least a launcher
that returns a new output can do.
"""

from __future__ import annotations

import dataclasses
import math

import triton
import triton.language as tl

# float32 words each streaming program reads at once, and its blocks: enough programs to cover
# the multiprocessors at a few MB, few enough per block to keep loads in flight.
STREAM_BLOCK = 2048
STREAM_BLOCKS_PER_PROGRAM = 4


@dataclasses.dataclass(frozen=True)
class MemoryFloor:
    launch_us: float
    stream_us: float


@triton.jit
def _empty_kernel(out_ptr):
    pass


@triton.jit
def _stream_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr, BLOCKS: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in tl.static_range(BLOCKS):
        offs = (pid * BLOCKS + i).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(src_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + pid, tl.sum(acc, 0))


def measure_floor(nbytes: int, input_sets: int, device) -> MemoryFloor:
    """Graph-replay microseconds of an empty kernel and of one reading ``nbytes`` once, over
    ``input_sets`` rotating buffers (as many as the kernel under test rotates through)."""
    import torch

    from .bench import time_in_graph

    words = math.ceil(nbytes / 4)
    per_program = STREAM_BLOCK * STREAM_BLOCKS_PER_PROGRAM
    programs = math.ceil(words / per_program)
    out = torch.empty(programs, dtype=torch.float32, device=device)
    buffers = [(torch.ones(words, dtype=torch.float32, device=device),) for _ in range(input_sets)]

    def empty(src):
        _empty_kernel[(1,)](out)

    def stream(src):
        _stream_kernel[(programs,)](src, out, words, BLOCK=STREAM_BLOCK, BLOCKS=STREAM_BLOCKS_PER_PROGRAM,
                                    num_warps=4)

    stream(buffers[0][0])
    torch.cuda.synchronize()
    if float(out.double().sum()) != words:  # each word read exactly once
        raise AssertionError(f"the streaming kernel read {float(out.double().sum())} words, not {words}")
    floor = MemoryFloor(launch_us=time_in_graph(empty, buffers), stream_us=time_in_graph(stream, buffers))
    del buffers
    return floor


# The output whose allocation the host floor counts (a verify call's q at B8-T17-H32/128): the
# caching allocator hands out a cached block, whatever its size.
HOST_FLOOR_OUTPUT = (8, 17, 32, 128)


def host_floor_us(device) -> float | None:
    """Host microseconds a call of :func:`host_floor_call`, issued back to back in batches from an
    idle GPU as the bench times a verify call (``bench.host_us_per_call``); None where it has none."""
    from .bench import host_us_per_call

    call = host_floor_call(device)
    return None if call is None else host_us_per_call(call, [()])


def host_floor_call(device):
    """A call of ``torch.empty_like`` of an output and one direct C launch of an empty compiled
    kernel (:class:`~specdec_kernels.triton_launch.DirectLaunch`): the least a launcher that
    returns a new output can do. None where this Triton has no direct launch (its own dispatch is a
    cost, not a floor)."""
    import torch

    from .triton_launch import DirectLaunch, direct_launch_unusable

    if direct_launch_unusable() is not None:
        return None
    out = torch.empty(1, dtype=torch.float32, device=device)
    launch = DirectLaunch.build(_empty_kernel[(1,)](out), (1,), 1, (), {})
    if launch is None:
        return None
    like = torch.empty(HOST_FLOOR_OUTPUT, dtype=torch.bfloat16, device=device)
    stream, args = torch.cuda.current_stream(device).cuda_stream, (out.data_ptr(),)

    def call():
        torch.empty_like(like)
        launch(stream, args)

    return call
