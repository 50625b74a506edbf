"""Triton kernel for :func:`specdec_kernels.tree_accept_greedy` (imported lazily).

One program per request walks the tree in registers: the request's T tokens, parents and target
argmaxes are loaded once as vectors of ``BLOCK_T = next_pow2(T)`` lanes; each step picks the
lowest-index child of the current node whose token equals the target's argmax there. The loop
ends at the first node without such a child, so a step costs a handful of vector operations
and a request with no accepted draft does one step.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _greedy_walk(tokens_ptr, parents_ptr, argmax_ptr, b, stride_tb, stride_pb, stride_ab, num_nodes,
                 BLOCK_T: tl.constexpr):
    """Request b's accepted path in registers: (lanes, path with -1 past its end, its length,
    the bonus token). Shared with the fused accept + commit kernel."""
    lane = tl.arange(0, BLOCK_T)
    in_tree = lane < num_nodes
    tokens = tl.load(tokens_ptr + b * stride_tb + lane, mask=in_tree, other=-1)
    parents = tl.load(parents_ptr + b * stride_pb + lane, mask=in_tree, other=-2)
    argmax = tl.load(argmax_ptr + b * stride_ab + lane, mask=in_tree, other=-1)
    is_draft = in_tree & (lane > 0)

    path = tl.where(lane == 0, 0, -1)
    current = 0
    length = 1
    want = tl.sum(tl.where(lane == 0, argmax, 0))
    child = tl.min(tl.where(is_draft & (parents == 0) & (tokens == want), lane, BLOCK_T))
    while child < BLOCK_T:
        path = tl.where(lane == length, child, path)
        length += 1
        current = child
        want = tl.sum(tl.where(lane == current, argmax, 0))
        child = tl.min(tl.where(is_draft & (parents == current) & (tokens == want), lane, BLOCK_T))
    return lane, path, length, want


@triton.jit
def _tree_accept_kernel(tokens_ptr, parents_ptr, argmax_ptr, path_ptr, path_len_ptr, bonus_ptr,
                        stride_tb, stride_pb, stride_ab, stride_pathb, num_nodes,
                        BLOCK_T: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    lane, path, length, want = _greedy_walk(tokens_ptr, parents_ptr, argmax_ptr, b, stride_tb, stride_pb,
                                            stride_ab, num_nodes, BLOCK_T)
    tl.store(path_ptr + b * stride_pathb + lane, path.to(tl.int32), mask=lane < num_nodes)
    tl.store(path_len_ptr + b, length.to(tl.int32))
    tl.store(bonus_ptr + b, want.to(tl.int64))


def accept_block_t(num_nodes: int) -> int:
    """Lanes of the walk: T rounded up to a power of two, at least 16."""
    return max(16, triton.next_power_of_2(num_nodes))


def prepare_accept_inputs(tokens, parents, target_argmax, out=None):
    """Contiguous inputs in the kernel's dtypes, and the (path, path_len, bonus) outputs."""
    from .tree_accept import AcceptResult

    batch, num_nodes = tokens.shape
    device = tokens.device
    inputs = (tokens.contiguous(), parents.to(torch.int32).contiguous(),
              target_argmax.to(torch.int64).contiguous())
    if out is None:
        out = AcceptResult(torch.empty(batch, num_nodes, dtype=torch.int32, device=device),
                           torch.empty(batch, dtype=torch.int32, device=device),
                           torch.empty(batch, dtype=torch.int64, device=device))
    return inputs, out


def tree_accept_greedy_triton(tokens, parents, target_argmax, out=None):
    """Launcher. ``out`` (optional): preallocated ``(path, path_len, bonus)`` written in place
    (the tests pass poisoned ones). Unit stride along T is required for the three inputs."""
    from .tree_accept import AcceptResult

    batch, num_nodes = tokens.shape
    (tokens, parents, target_argmax), out = prepare_accept_inputs(tokens, parents, target_argmax, out)
    if batch:
        _tree_accept_kernel[(batch,)](
            tokens, parents, target_argmax, out.path, out.path_len, out.bonus,
            tokens.stride(0), parents.stride(0), target_argmax.stride(0), out.path.stride(0),
            num_nodes, BLOCK_T=accept_block_t(num_nodes), num_warps=1,
        )
    return AcceptResult(*out)
