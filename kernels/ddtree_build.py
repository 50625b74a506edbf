"""``build_ddtree``: the DDTree best-first draft tree from per-position draft log-probabilities.

Budget semantics: ``budget`` counts draft nodes, the root excluded; the tree has exactly
``T = budget + 1`` nodes. Nothing is implicit: budget 15 with ``topk=None`` may branch (it does
whenever a second-ranked token beats a deeper chain token), ``topk=1`` never branches and gives
the DFlash chain (then ``budget <= depth`` is required).

Algorithm (arXiv 2604.12989). Row ``d`` of the draft log-probabilities scores the token ``d + 1``
positions after the root, independently of the earlier tokens, so a prefix's score is the sum of
its tokens' log-probabilities and extending a prefix never raises its score. At each depth the
tokens are ranked by log-probability, descending. Best-first search keeps one frontier candidate
per parent (its next unpopped child): each pop adds one node and pushes that node's next sibling
and its first child. The ``budget`` pops are the ``budget`` most probable prefixes.

Tie rule (deterministic, the same in every implementation): at a depth, equal log-probabilities
rank the smaller token id first; among frontier candidates of equal score (float32 sums, added
parent score + token log-prob, in that order), the one whose parent was added first wins, then
the lower rank. Equivalently: every pop takes, over all children of the nodes added so far, the
maximum of (score, -parent index, -rank). Scores are accumulated in float32.
"""

from __future__ import annotations

import heapq
import math
import numbers

import numpy as np
import torch
from torch import Tensor

from .impl import resolve_impl
from .tensor_checks import check_float, check_index, check_same_device, check_shape, check_tensors
from .tree_layout import DDTree, ancestor_mask_from_parents


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _count_fix(name: str, value, least: int, meaning: str) -> str:
    """``int(<name>)`` for a whole number of another type (8.0, a 0-d tensor), else what it counts."""
    try:
        whole = not isinstance(value, bool) and float(value).is_integer() and value >= least
    except (TypeError, ValueError, RuntimeError):  # a string, a tensor of several elements
        whole = False
    return f"int({name})" if whole else meaning


def _check_build_args(draft_logprobs: Tensor, root_tokens: Tensor, budget: int, topk) -> int:
    """Validate the inputs and return K, the number of ranked tokens needed per depth."""
    check_tensors(("draft_logprobs", "root_tokens"), draft_logprobs, root_tokens)
    check_same_device(("draft_logprobs", "root_tokens"), draft_logprobs, root_tokens)
    if draft_logprobs.dim() != 3:
        fix = ("draft_logprobs.unsqueeze(0) and root_tokens.view(1) for one request" if draft_logprobs.dim() == 2
               else "one row of V log-probabilities per request and depth")
        raise ValueError(f"draft_logprobs must be [B, depth, V], got shape {tuple(draft_logprobs.shape)}; pass {fix}")
    batch, depth, vocab = draft_logprobs.shape
    check_shape("root_tokens", root_tokens, (batch,), f"[B] = ({batch},) (one per request of draft_logprobs)",
                "one root token (the previous step's bonus token) per request of draft_logprobs")
    # integer log-probabilities ranked truncated, float root tokens (bf16 past 256) came back rounded, silently
    check_float("draft_logprobs", draft_logprobs, "torch.log_softmax(logits.float(), -1)",
                "a float tensor of log-probabilities")
    check_index("root_tokens", root_tokens, "token ids", "root_tokens.long()")
    if not _is_int(budget) or budget < 0:
        fix = _count_fix("budget", budget, 0, "the number of draft nodes, 0 or more (T - 1)")
        raise ValueError(f"budget must be an int >= 0 (draft nodes, root excluded), got {budget!r}; pass {fix}")
    if topk is not None and (not _is_int(topk) or topk < 1):
        fix = _count_fix("topk", topk, 1, "None (no cap) or 1 or more (1: the DFlash chain)")
        raise ValueError(f"topk must be None or an int >= 1, got {topk!r}; pass {fix}")
    ranks = min(vocab, budget if topk is None else min(topk, budget))
    available, level = 0, 1
    for _ in range(depth):
        level *= ranks
        available += level
        if available >= budget:
            break
    if available < budget:
        raise ValueError(
            f"budget={budget} exceeds the {available} distinct prefixes that depth={depth}, "
            f"vocab={vocab}, topk={topk} allow; lower the budget or raise topk/depth"
        )
    return ranks


def check_ranked_logprobs(values: Tensor, vocab: int) -> None:
    """Raise ValueError where the best-ranked draft values cannot be log-probabilities over the last
    dim's ``vocab`` tokens, naming the first (request, depth): NaN (ranked first), above 0
    (probabilities or logits passed for them), or a best token below -log(V) - 1, which no
    distribution over V tokens has (its best is at least 1/V): a [B, V, depth] tensor ranked each
    token's positions, or logits were shifted below 0. Only the ranked values are read, and only
    on the host (a GPU's would be a sync)."""
    if values.is_cuda or not values.numel():
        return
    best = values[..., 0]
    # log_softmax never exceeds 0; a little room for a low-precision cast. The floor's 1 (a best
    # token e times rarer than uniform) leaves room for rows normalised a little off, or truncated
    floor = -math.log(vocab) - 1.0
    bad = values.isnan().any(-1) | (best > 1e-3) | (best < floor)
    if bad.any():
        b, d = (int(x) for x in bad.nonzero()[0])
        first = float(best[b, d])
        if first < floor:
            raise ValueError(f"draft_logprobs[{b}, {d}] ranks {first:.4g} first, below -log(V) - 1 = {floor:.4g}: the "
                             f"best of V = {vocab} log-probabilities is at least -log(V), so draft_logprobs must be "
                             "[B, depth, V] log-probabilities; pass torch.log_softmax(logits, -1) of [B, depth, V] "
                             "logits (draft_logprobs.transpose(1, 2) for [B, V, depth] ones)")
        raise ValueError(f"draft_logprobs[{b}, {d}] ranks {first:.4g} first: draft_logprobs must be "
                         "log-probabilities (<= 0, no NaN); pass torch.log_softmax(logits, -1)")


def ranked_tokens(draft_logprobs: Tensor, ranks: int, exact_sort: bool = False) -> tuple[Tensor, Tensor]:
    """The ``ranks`` best tokens per depth: values ``[B, depth, K]`` float32, ids int64.

    Ordered by log-probability descending, equal values by smaller token id (the tie rule).
    ``exact_sort=True`` sorts the whole vocabulary (stable), which needs no host
    synchronisation; otherwise a top-k is taken and a full sort is done only when a tie straddles
    the k-th place (one host read of a boolean; free on the CPU).
    """
    logprobs = draft_logprobs.float()
    vocab = logprobs.shape[-1]
    if ranks == 0:
        empty = logprobs.new_empty(logprobs.shape[:-1] + (0,))
        return empty, empty.long()
    if not exact_sort and ranks < vocab:
        vals, ids = torch.topk(logprobs, ranks + 1, dim=-1)
        if not bool((vals[..., ranks - 1] == vals[..., ranks]).any()):
            vals, ids = vals[..., :ranks], ids[..., :ranks]
            ids, perm = ids.sort(dim=-1)
            vals = vals.gather(-1, perm)
            vals, perm = vals.sort(dim=-1, descending=True, stable=True)
            return vals, ids.gather(-1, perm)
    vals, ids = logprobs.sort(dim=-1, descending=True, stable=True)
    return vals[..., :ranks].contiguous(), ids[..., :ranks].contiguous()


def _best_first_one(vals: np.ndarray, budget: int):
    """Heap walk for one request over ranked values ``[depth, K]`` float32.

    Returns (depth_row, rank, parent, score) lists for nodes 1..budget in pop order.
    """
    depth, ranks = vals.shape
    nodes_row, nodes_rank, nodes_parent, nodes_score = [], [], [], []
    if budget == 0:
        return nodes_row, nodes_rank, nodes_parent, nodes_score
    zero = np.float32(0.0)
    # key: (-score, parent index, rank); payload: depth row, parent score
    heap = [(-float(zero + vals[0, 0]), 0, 0, 0, zero)]
    scores = [zero]
    for node in range(1, budget + 1):
        neg_score, parent, rank, row, parent_score = heapq.heappop(heap)
        score = np.float32(-neg_score)
        nodes_row.append(row)
        nodes_rank.append(rank)
        nodes_parent.append(parent)
        nodes_score.append(score)
        scores.append(score)
        if rank + 1 < ranks:
            sibling = np.float32(parent_score + vals[row, rank + 1])
            heapq.heappush(heap, (-float(sibling), parent, rank + 1, row, parent_score))
        if row + 1 < depth:
            child = np.float32(score + vals[row + 1, 0])
            heapq.heappush(heap, (-float(child), node, 0, row + 1, score))
    return nodes_row, nodes_rank, nodes_parent, nodes_score


def build_ddtree_reference(draft_logprobs: Tensor, root_tokens: Tensor, budget: int,
                           topk: int | None = None) -> DDTree:
    """Torch/numpy reference of :func:`build_ddtree` (a Python heap per request, on the host)."""
    ranks = _check_build_args(draft_logprobs, root_tokens, budget, topk)
    batch, depth, _ = draft_logprobs.shape
    device = draft_logprobs.device
    vals, ids = ranked_tokens(draft_logprobs.detach().cpu(), ranks)
    check_ranked_logprobs(vals, draft_logprobs.shape[2])
    vals_np, ids_np = vals.numpy(), ids.numpy()
    num_nodes = budget + 1
    tokens = np.empty((batch, num_nodes), dtype=np.int64)
    parents = np.empty((batch, num_nodes), dtype=np.int32)
    depths = np.empty((batch, num_nodes), dtype=np.int32)
    log_probs = np.empty((batch, num_nodes), dtype=np.float32)
    tokens[:, 0] = root_tokens.detach().cpu().numpy()
    parents[:, 0], depths[:, 0], log_probs[:, 0] = -1, 0, 0.0
    for b in range(batch):
        rows, rnks, pars, scores = _best_first_one(vals_np[b], budget)
        if budget:
            rows_a, rnks_a = np.asarray(rows), np.asarray(rnks)
            tokens[b, 1:] = ids_np[b, rows_a, rnks_a]
            parents[b, 1:] = pars
            depths[b, 1:] = rows_a + 1
            log_probs[b, 1:] = scores
    parents_t = torch.from_numpy(parents).to(device)
    return DDTree(
        tokens=torch.from_numpy(tokens).to(device),
        parents=parents_t,
        depths=torch.from_numpy(depths).to(device),
        ancestor_mask=ancestor_mask_from_parents(parents_t),
        log_probs=torch.from_numpy(log_probs).to(device),
    )


def build_ddtree(draft_logprobs: Tensor, root_tokens: Tensor, budget: int,
                 topk: int | None = None, impl: str = "auto") -> DDTree:
    """Build the DDTree draft tree of ``budget`` draft nodes plus the root, per request.

    draft_logprobs: [B, depth, V] float (any float dtype; ranked in float32; another dtype is a
        ValueError); row ``d`` holds the log-probabilities of the token ``d + 1`` positions after
        the root, over the last dim's V tokens. On the host, a row whose best value is no
        log-probability over V tokens (above 0, NaN, or below -log(V) - 1: a [B, V, depth]
        tensor, shifted logits) is a ValueError; one normalised over another dim is not told
        apart from scores, so take ``torch.log_softmax(logits, -1)`` of [B, depth, V] logits.
    root_tokens:    [B] int64 (or int32; another dtype is a ValueError), the previous step's bonus
        tokens (node 0). Either of the two in another shape, or not a tensor, is a ValueError
        naming the fix (``unsqueeze(0)`` for one request without its batch dim).
    budget:         draft nodes, root excluded; ``T = budget + 1``.
    topk:           per-depth cap on how many tokens a depth may use (so on siblings);
                    ``topk=1`` gives the DFlash chain. ``None``: no cap.
    Returns a :class:`DDTree` on the input's device (see the module docstring for the order and
    the tie rule). Raises ValueError when the depth, vocabulary and topk allow fewer than
    ``budget`` prefixes. The torch path walks a heap on the host (one device-to-host copy);
    the Triton path runs one program per request on the device, with no host synchronisation.
    """
    # before resolve_impl reads .is_cuda: a list or numpy array is named, not an AttributeError
    check_tensors(("draft_logprobs", "root_tokens"), draft_logprobs, root_tokens)
    # numpy's ints are ints to the checks; the Triton kernels take Python ints only
    budget = int(budget) if _is_int(budget) else budget
    topk = int(topk) if _is_int(topk) else topk
    if resolve_impl(impl, draft_logprobs) == "torch":
        return build_ddtree_reference(draft_logprobs, root_tokens, budget, topk)
    from .ddtree_build_triton import build_ddtree_triton

    return build_ddtree_triton(draft_logprobs, root_tokens, budget, topk)
