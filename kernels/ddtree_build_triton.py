"""Triton kernel for :func:`specdec_kernels.build_ddtree` (imported lazily).

The per-depth token ranking is a stable sort on the device (torch); the best-first walk is one
program per request. The frontier holds one candidate per added node (its next unpopped child)
plus the root's, so it fits ``CAP = next_pow2(budget + 1)`` register lanes: slot 0 starts with
the root's first child, pop ``i`` overwrites the popped slot with the popped node's next sibling
and puts the popped node's first child in slot ``i``. Each pop is an argmax over the lanes with
the module's tie rule (score, then parent index, then rank). Scores are float32 sums, added in
the same order as the reference, so ties fall the same way. The ancestor bitmask is then built
from the parents by pointer doubling (torch, on the device): nothing synchronises with the host.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _best_first_kernel(vals_ptr, ids_ptr, roots_ptr, tokens_ptr, parents_ptr, depths_ptr,
                       logp_ptr, depth, ranks, budget, CAP: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    lane = tl.arange(0, CAP)
    vals_base = vals_ptr + b * depth * ranks
    ids_base = ids_ptr + b * depth * ranks
    out_row = b * (budget + 1)

    tl.store(tokens_ptr + out_row, tl.load(roots_ptr + b))
    tl.store(parents_ptr + out_row, -1)
    tl.store(depths_ptr + out_row, 0)
    tl.store(logp_ptr + out_row, 0.0)

    first = tl.load(vals_base)
    valid = lane == 0
    score = tl.where(valid, first, float("-inf"))
    parent = tl.zeros([CAP], dtype=tl.int32)
    rank = tl.zeros([CAP], dtype=tl.int32)
    row = tl.zeros([CAP], dtype=tl.int32)
    parent_score = tl.zeros([CAP], dtype=tl.float32)

    for node in range(1, budget + 1):
        best = tl.max(tl.where(valid, score, float("-inf")))
        cand = valid & (score == best)
        best_parent = tl.min(tl.where(cand, parent, 2147483647))
        cand = cand & (parent == best_parent)
        slot = tl.min(tl.where(cand, lane, CAP))
        here = lane == slot
        p_rank = tl.sum(tl.where(here, rank, 0))
        p_row = tl.sum(tl.where(here, row, 0))
        p_parent_score = tl.max(tl.where(here, parent_score, float("-inf")))
        p_score = tl.max(tl.where(here, score, float("-inf")))

        tl.store(tokens_ptr + out_row + node, tl.load(ids_base + p_row * ranks + p_rank))
        tl.store(parents_ptr + out_row + node, best_parent)
        tl.store(depths_ptr + out_row + node, p_row + 1)
        tl.store(logp_ptr + out_row + node, p_score)

        # the popped slot takes the next sibling, if the depth has another ranked token
        has_sibling = p_rank + 1 < ranks
        sibling = p_parent_score + tl.load(vals_base + p_row * ranks + p_rank + 1, mask=has_sibling,
                                           other=0.0)
        score = tl.where(here, sibling, score)
        rank = tl.where(here, p_rank + 1, rank)
        valid = tl.where(here, has_sibling, valid)
        # slot `node` takes the first child, if the draft is deep enough
        has_child = p_row + 1 < depth
        child = p_score + tl.load(vals_base + (p_row + 1) * ranks, mask=has_child, other=0.0)
        new = (lane == node) & has_child
        score = tl.where(new, child, score)
        parent = tl.where(new, node, parent)
        rank = tl.where(new, 0, rank)
        row = tl.where(new, p_row + 1, row)
        parent_score = tl.where(new, p_score, parent_score)
        valid = valid | new


def build_ddtree_triton(draft_logprobs, root_tokens, budget, topk=None):
    """Launcher for :func:`specdec_kernels.build_ddtree` (same contract)."""
    from .ddtree_build import _check_build_args, check_ranked_logprobs, ranked_tokens
    from .tree_layout import DDTree, ancestor_mask_from_parents

    ranks = _check_build_args(draft_logprobs, root_tokens, budget, topk)
    batch, depth, _ = draft_logprobs.shape
    device = draft_logprobs.device
    num_nodes = budget + 1
    tokens = torch.empty(batch, num_nodes, dtype=torch.int64, device=device)
    parents = torch.empty(batch, num_nodes, dtype=torch.int32, device=device)
    depths = torch.empty(batch, num_nodes, dtype=torch.int32, device=device)
    log_probs = torch.empty(batch, num_nodes, dtype=torch.float32, device=device)
    if batch:
        vals, ids = ranked_tokens(draft_logprobs, ranks, exact_sort=True)
        check_ranked_logprobs(vals, draft_logprobs.shape[2])
        if budget == 0:
            tokens[:, 0] = root_tokens
            parents[:, 0], depths[:, 0], log_probs[:, 0] = -1, 0, 0.0
        else:
            _best_first_kernel[(batch,)](
                vals.contiguous(), ids.contiguous(), root_tokens.to(torch.int64).contiguous(),
                tokens, parents, depths, log_probs, depth, ranks, budget,
                CAP=triton.next_power_of_2(num_nodes), num_warps=1,
            )
    return DDTree(tokens=tokens, parents=parents, depths=depths,
                  ancestor_mask=ancestor_mask_from_parents(parents), log_probs=log_probs)
