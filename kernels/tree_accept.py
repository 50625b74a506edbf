"""``tree_accept_greedy``: the accepted path through a DDTree under greedy decoding.

From the root, follow the child whose token equals the target's argmax at the current node;
the first node with no such child ends the path, and the target's argmax there is the bonus
token. Siblings from :func:`build_ddtree` carry distinct tokens; should a caller's tree repeat a
token among siblings, the lowest-index matching child is taken.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from .impl import resolve_impl
from .tensor_checks import check_index, check_same_device, check_shape, check_tensors
from .tree_layout import check_parents_precede, node_bounds


class AcceptResult(NamedTuple):
    """Greedy acceptance per request, all on the input's device.

    path:     [B, T] int32, accepted node indices in path order, padded with -1; path[:, 0] == 0.
    path_len: [B] int32, 1 + accepted draft nodes (the number of KV rows to commit).
    bonus:    [B] int64, the target's argmax at the last accepted node.
    """

    path: Tensor
    path_len: Tensor
    bonus: Tensor


def check_accept_args(tokens: Tensor, parents: Tensor, target_argmax: Tensor) -> None:
    names = ("tokens", "parents", "target_argmax")
    check_tensors(names, tokens, parents, target_argmax)
    check_same_device(names, tokens, parents, target_argmax)
    if tokens.dim() != 2:
        fix = ("tokens.unsqueeze(0), parents.unsqueeze(0) and target_argmax.unsqueeze(0) for one tree"
               if tokens.dim() == 1 else "a DDTree's tokens, one row of T nodes per request")
        raise ValueError(f"tokens must be [B, T] (B trees of T nodes), got shape {tuple(tokens.shape)}; pass {fix}")
    shape = tuple(tokens.shape)
    check_shape("parents", parents, shape, f"[B, T] = {shape} (tokens' shape)",
                "the parents of tokens' trees (a DDTree's parents, beside its tokens)")
    # the target's logits passed whole, or their argmax over the wrong dim ([B, V] for [B, T])
    check_shape("target_argmax", target_argmax, shape, f"[B, T] = {shape} (tokens' shape)",
                "logits.argmax(-1) of the target's [B, T, V] logits at the tree's nodes "
                "(logits.argmax(1) of [B, V, T] ones)")
    if shape[1] == 0:  # the paths would disagree on what to accept of nothing
        raise ValueError("a tree has at least its root: T must be 1 or more, got 0; pass each tree with its "
                         "root, node 0 (a DDTree's tokens)")
    # a float target_argmax (the logits' max values, not their indices) matched no token and came
    # back as a bonus token without a word; float tokens above 2**24 (bf16: 256) compare rounded
    check_index("tokens", tokens, "token ids", "tokens.long()")
    check_index("parents", parents, "node indices")
    check_index("target_argmax", target_argmax, "token ids", "logits.argmax(-1)")
    check_parents_precede(parents)


def check_accepted_path(path: Tensor, path_len: Tensor) -> None:
    """Raise ValueError naming the first request whose (path, path_len) no greedy acceptance gives:
    1 <= path_len <= T, path[0] == 0, then strictly increasing node indices below T. The commits
    rely on it (``path[i] >= i``: moves in place, rows within the tree's); on a GPU it is not read
    (a host sync)."""
    if path.is_cuda or path_len.is_cuda:
        return
    num_nodes = path.shape[1]
    lens = path_len.tolist()
    for b, n in enumerate(lens):
        if not 1 <= n <= num_nodes:
            raise ValueError(f"path_len[{b}] = {n}: an accepted path holds 1 to T = {num_nodes} nodes")
    step, _ = node_bounds(num_nodes)
    live = step < path_len[:, None]
    prev = torch.cat([torch.full_like(path[:, :1], -1), path[:, :-1]], 1)
    bad = live & ((path <= prev) | (path >= num_nodes) | ((step == 0) & (path != 0)))
    if bad.any():
        b, i = (int(x) for x in bad.nonzero()[0])
        raise ValueError(f"path[{b}] = {path[b, :lens[b]].tolist()}: an accepted path starts at the root 0 and "
                         f"climbs to nodes below T = {num_nodes} in increasing order (step {i} does not)")


def tree_accept_greedy_reference(tokens: Tensor, parents: Tensor, target_argmax: Tensor) -> AcceptResult:
    """Vectorised torch reference: no loop over nodes, no host synchronisation.

    A draft node is accepted iff it is the first child of its parent whose token equals the
    target's argmax at the parent, and its parent is accepted (pointer doubling over the chain).
    Parents precede children, so the accepted nodes sorted by index are the path.
    """
    batch, num_nodes = tokens.shape
    device = tokens.device
    node = torch.arange(num_nodes, device=device).expand(batch, num_nodes)
    parent = parents.to(torch.int64).clamp(min=0)
    matches = tokens == torch.gather(target_argmax, 1, parent)
    matches[:, 0] = False
    # Keep only the lowest-index matching child of each parent.
    first_child = torch.full((batch, num_nodes), num_nodes, dtype=torch.int64, device=device)
    first_child = first_child.scatter_reduce(1, parent, torch.where(matches, node, num_nodes), "amin")
    ok = matches & (torch.gather(first_child, 1, parent) == node)
    ok[:, 0] = True
    ptr = parent.clone()
    span = 1
    while span < num_nodes:
        ok = ok & torch.gather(ok, 1, ptr)
        ptr = torch.gather(ptr, 1, ptr)
        span *= 2
    path_len = ok.sum(1)
    order = torch.where(ok, node, node + num_nodes).sort(1).values
    path = torch.where(node < path_len.unsqueeze(1), order, -1)
    last = torch.gather(path, 1, (path_len - 1).unsqueeze(1))
    bonus = torch.gather(target_argmax, 1, last).squeeze(1)
    return AcceptResult(path.to(torch.int32), path_len.to(torch.int32), bonus.to(torch.int64))


def tree_accept_greedy(tokens: Tensor, parents: Tensor, target_argmax: Tensor,
                       impl: str = "auto") -> AcceptResult:
    """Greedy acceptance over a batch of trees.

    tokens:        [B, T] int64, as in :class:`DDTree` (tokens[:, 0] the roots).
    parents:       [B, T] int32, parents[:, 0] == -1 and 0 <= parents[:, i] < i (checked where
                   they are on the host, ValueError naming the node).
    target_argmax: [B, T] int64, the target's argmax token after each node (the indices, not the
                   max's values).
    Each of the three may be int32 or int64; any other dtype, or a shape other than tokens' (a
    missing batch dim, the target's logits instead of their argmax), is a ValueError naming it
    and the fix.
    Returns an :class:`AcceptResult` of new tensors on the input's device; no host
    synchronisation on either implementation.
    """
    check_accept_args(tokens, parents, target_argmax)
    if resolve_impl(impl, tokens, parents, target_argmax) == "torch":
        return tree_accept_greedy_reference(tokens, parents, target_argmax)
    from .tree_accept_triton import tree_accept_greedy_triton

    return tree_accept_greedy_triton(tokens, parents, target_argmax)
