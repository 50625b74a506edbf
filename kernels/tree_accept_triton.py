"""Triton kernel for :func:`specdec_kernels.tree_accept_greedy` (imported lazily).

One program per request walks the tree in registers: the request's T tokens, parents and target
argmaxes are loaded once as vectors of ``BLOCK_T = next_pow2(T + 1)`` lanes. Greedy acceptance
follows, from the root, each node's lowest-index child whose token equals the target's argmax
there, until a node has none.

Up to ``DOUBLING_MAX_LANES`` lanes the walk takes a fixed number of steps whatever the path's
length: one [T, T] comparison gives every node its chosen child at once (or a sink lane past
the tree, which maps to itself), and the path's i-th node is the chosen-child map applied i
times to the root, found for every i together by repeated squaring of the map (log2 BLOCK_T
rounds of two gathers). The walk step by step (two reductions across the program's warps a
step, each waiting on the one before) stays for larger trees, and where an :class:`AcceptPolicy`
turns doubling off (the tests and diagnostics; the fused accept + commit measured faster by
doubling: docs/kernels-performance.md, "Decisions").
"""

from __future__ import annotations

from dataclasses import dataclass

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
def _greedy_walk_doubling(tokens_ptr, parents_ptr, argmax_ptr, b, stride_tb, stride_pb, stride_ab, num_nodes,
                          BLOCK_T: tl.constexpr, LOG_T: tl.constexpr):
    """The same path as :func:`_greedy_walk`, in a fixed number of steps (module docstring)."""
    lane = tl.arange(0, BLOCK_T)
    in_tree = lane < num_nodes
    tokens = tl.load(tokens_ptr + b * stride_tb + lane, mask=in_tree, other=-1)
    parents = tl.load(parents_ptr + b * stride_pb + lane, mask=in_tree, other=-2)
    argmax = tl.load(argmax_ptr + b * stride_ab + lane, mask=in_tree, other=-1)
    sink: tl.constexpr = BLOCK_T - 1  # past the tree (BLOCK_T > T): "no accepted child"
    # chosen[p]: p's lowest-index draft child whose token is the target's argmax at p
    is_child = (in_tree & (lane > 0))[None, :] & (parents[None, :] == lane[:, None])
    match = is_child & (tokens[None, :] == argmax[:, None])
    chosen = tl.min(tl.where(match, lane[None, :], sink), axis=1)
    # node[i] = chosen applied i times to the root: bit k of i applies hop = chosen^(2^k)
    node = tl.zeros_like(lane)
    hop = chosen
    for k in tl.static_range(LOG_T):
        node = tl.where(((lane >> k) & 1) != 0, tl.gather(hop, node, 0), node)
        hop = tl.gather(hop, hop, 0)
    on_path = node != sink
    length = tl.sum(on_path.to(tl.int32))
    last = tl.max(tl.where(on_path, node, 0))  # nodes grow along a path (parents come first)
    want = tl.sum(tl.where(lane == last, argmax, 0))
    return lane, tl.where(on_path, node, -1), length, want


@triton.jit
def _accepted_path(tokens_ptr, parents_ptr, argmax_ptr, b, stride_tb, stride_pb, stride_ab, num_nodes,
                   BLOCK_T: tl.constexpr, LOG_T: tl.constexpr, DOUBLING: tl.constexpr):
    """(lanes, path with -1 past its end, its length, the bonus token) of request b, by either
    walk. Shared with the fused accept + commit kernel."""
    if DOUBLING:
        return _greedy_walk_doubling(tokens_ptr, parents_ptr, argmax_ptr, b, stride_tb, stride_pb, stride_ab,
                                     num_nodes, BLOCK_T, LOG_T)
    else:
        return _greedy_walk(tokens_ptr, parents_ptr, argmax_ptr, b, stride_tb, stride_pb, stride_ab, num_nodes,
                            BLOCK_T)


@triton.jit
def _tree_accept_kernel(tokens_ptr, parents_ptr, argmax_ptr, path_ptr, path_len_ptr, bonus_ptr,
                        stride_tb, stride_pb, stride_ab, stride_pathb, num_nodes,
                        BLOCK_T: tl.constexpr, LOG_T: tl.constexpr, DOUBLING: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    lane, path, length, want = _accepted_path(tokens_ptr, parents_ptr, argmax_ptr, b, stride_tb, stride_pb,
                                              stride_ab, num_nodes, BLOCK_T, LOG_T, DOUBLING)
    tl.store(path_ptr + b * stride_pathb + lane, path.to(tl.int32), mask=lane < num_nodes)
    tl.store(path_len_ptr + b, length.to(tl.int32))
    tl.store(bonus_ptr + b, want.to(tl.int64))


# Largest lane count the walk by doubling takes (its [T, T] comparison: 128 values a thread at
# 128 lanes on 4 warps).
DOUBLING_MAX_LANES = 128


@dataclass(frozen=True)
class AcceptPolicy:
    """What the tests and diagnostics vary in the walk; :data:`DEFAULT_ACCEPT_POLICY` is what every
    call uses. An argument rather than a module switch, as for the verify launcher's policy, so a
    test's choice cannot leak into other calls.

    walk_by_doubling: the walk by doubling up to ``DOUBLING_MAX_LANES`` lanes (False: the walk
    step by step everywhere).
    """

    walk_by_doubling: bool = True


DEFAULT_ACCEPT_POLICY = AcceptPolicy()


def accept_block_t(num_nodes: int) -> int:
    """Lanes of the walk: T + 1 (a lane past the tree) rounded up to a power of two, at least 16."""
    return max(16, triton.next_power_of_2(num_nodes + 1))


def walk_constexprs(num_nodes: int, *, policy: AcceptPolicy = DEFAULT_ACCEPT_POLICY) -> dict:
    """The walk's compile-time arguments: lanes, their log2, and which walk."""
    block_t = accept_block_t(num_nodes)
    return dict(BLOCK_T=block_t, LOG_T=block_t.bit_length() - 1,
                DOUBLING=policy.walk_by_doubling and block_t <= DOUBLING_MAX_LANES)


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


def tree_accept_greedy_triton(tokens, parents, target_argmax, out=None, *,
                              policy: AcceptPolicy = DEFAULT_ACCEPT_POLICY):
    """Launcher. ``out`` (optional): preallocated ``(path, path_len, bonus)`` written in place
    (the tests pass poisoned ones); ``policy``: which walk (:class:`AcceptPolicy`). Unit stride
    along T is required for the three inputs."""
    from .tree_accept import AcceptResult

    batch, num_nodes = tokens.shape
    (tokens, parents, target_argmax), out = prepare_accept_inputs(tokens, parents, target_argmax, out)
    if batch:
        _tree_accept_kernel[(batch,)](
            tokens, parents, target_argmax, out.path, out.path_len, out.bonus,
            tokens.stride(0), parents.stride(0), target_argmax.stride(0), out.path.stride(0),
            num_nodes, **walk_constexprs(num_nodes, policy=policy), num_warps=1,
        )
    return AcceptResult(*out)
