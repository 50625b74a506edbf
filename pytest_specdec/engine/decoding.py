"""One decode step for a batch of sequences: draft, build the tree, verify, accept, commit.

All three methods run the same ``specdec_kernels`` pipeline and differ only in the tree:

- ``ar``: the tree is the root alone (T = 1, budget 0), so a step commits exactly one token
  (verify attention through the kernels; accept and commit are identities at T = 1 and skipped);
- ``dflash``: the drafter's block as a chain (``build_ddtree(..., topk=1)``), T = budget + 1;
- ``ddtree``: the best-first DDTree of ``budget`` draft nodes, T = budget + 1.

Greedy acceptance keeps exactly the tokens the target would have produced one at a time, so the
output of every method equals the autoregressive greedy output (the lossless property the
engine's tests check).

Sequences live in KV-cache slots ``0..n-1`` (the scheduler keeps them packed), so the batch's
cache is a view, and the kernels' in-place commit writes straight into it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from specdec_kernels import build_ddtree, tree_accept_and_commit

from ..configuration import METHODS, is_speculative
from .drafter import BlockDrafter
from .model import TargetModel


@dataclass(frozen=True)
class StepOutput:
    """Per sequence of the batch: the tokens committed this step (accepted drafts, then the
    target's bonus token) and how many of them were drafts."""

    tokens: list[list[int]]
    accepted_drafts: list[int]


class SpeculativeDecoder:
    """Owns the KV cache of ``max_batch`` slots and decodes the first ``n`` of them per step."""

    def __init__(self, model: TargetModel, method: str, budget: int, drafter: BlockDrafter | None,
                 max_batch: int, max_seq_len: int, kernel_impl: str = "auto") -> None:
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if is_speculative(method) and drafter is None:
            raise ValueError(f"method {method!r} needs a drafter")
        if method == "dflash" and budget > drafter.depth:
            raise ValueError(f"dflash chain of {budget} nodes exceeds the drafter's depth {drafter.depth}")
        self.model = model
        self.method = method
        self.budget = budget if is_speculative(method) else 0
        self.tree_nodes = self.budget + 1
        self.drafter = drafter
        self.max_batch = max_batch
        self.max_seq_len = max_seq_len
        device = model.device
        # "auto" is decided here, per device: the kernels' own "auto" also picks Triton's CPU
        # interpreter whenever TRITON_INTERPRET=1 is set (kernel tests), which would make a CPU
        # engine crawl.
        if kernel_impl == "auto":
            kernel_impl = "triton" if torch.device(device).type == "cuda" else "torch"
        self.kernel_impl = kernel_impl
        self.k_cache, self.v_cache = model.new_kv_cache(max_batch, max_seq_len + self.tree_nodes)
        self.lens = [0] * max_batch
        self.cache_lens = torch.zeros(max_batch, dtype=torch.int32, device=device)
        self.roots = torch.zeros(max_batch, dtype=torch.int64, device=device)
        self.stream_keys = torch.zeros(max_batch, dtype=torch.int64, device=device)
        # The autoregressive "tree": the root alone, its own ancestor.
        self._ar_depths = torch.zeros(max_batch, 1, dtype=torch.int32, device=device)
        self._ar_mask = torch.ones(max_batch, 1, 1, dtype=torch.int32, device=device)

    @property
    def speculative(self) -> bool:
        return is_speculative(self.method)

    def prefill(self, slot: int, prompt_ids: list[int], stream_key: int = 0) -> int:
        """Run the prompt into ``slot``'s cache; return the first generated token."""
        if not 0 < len(prompt_ids) <= self.max_seq_len:
            raise ValueError(f"prompt of {len(prompt_ids)} tokens does not fit 1..{self.max_seq_len}")
        tokens = torch.tensor([prompt_ids], dtype=torch.int64, device=self.model.device)
        logits = self.model.prefill(tokens, self.k_cache[:, slot:slot + 1], self.v_cache[:, slot:slot + 1])
        first = logits[0, -1].argmax()
        self.lens[slot] = len(prompt_ids)
        self.cache_lens[slot] = len(prompt_ids)
        self.roots[slot] = first
        self.stream_keys[slot] = stream_key
        return int(first)

    def move(self, src: int, dst: int) -> None:
        """Move sequence ``src`` into slot ``dst`` (keeps the running slots packed)."""
        rows = self.lens[src]
        self.k_cache[:, dst, :rows] = self.k_cache[:, src, :rows]
        self.v_cache[:, dst, :rows] = self.v_cache[:, src, :rows]
        self.lens[dst] = rows
        for t in (self.cache_lens, self.roots, self.stream_keys):
            t[dst] = t[src]

    def step(self, n: int) -> StepOutput:
        """One draft-verify-accept-commit step for slots ``0..n-1``.

        Every slot must have room for the tree: ``lens[i] + budget + 1 <= max_seq_len + T``,
        which holds while ``lens[i] <= max_seq_len`` (the scheduler's context-length check).
        """
        roots = self.roots[:n]
        cache_lens = self.cache_lens[:n]
        k_cache, v_cache = self.k_cache[:, :n], self.v_cache[:, :n]
        impl = self.kernel_impl
        if not self.speculative:
            # T = 1: the root is the whole tree, its K/V row is written in place at L_b and its
            # argmax is the bonus token, so accept and commit would be identities.
            logits = self.model.verify(roots[:, None], self._ar_depths[:n], cache_lens, self._ar_mask[:n],
                                       k_cache, v_cache, kernel_impl=impl, host_lens=self.lens[:n])
            bonus = logits[:, 0].argmax(-1)
            cache_lens += 1
            roots.copy_(bonus)
            out_tokens = [[token] for token in bonus.tolist()]
            for i in range(n):
                self.lens[i] += 1
            return StepOutput(out_tokens, [0] * n)
        draft = self.drafter.draft(roots, cache_lens.to(torch.int64) + 1, self.stream_keys[:n])
        tree = build_ddtree(draft, roots, self.budget, topk=1 if self.method == "dflash" else None, impl=impl)
        tokens = tree.tokens
        logits = self.model.verify(tokens, tree.depths, cache_lens, tree.ancestor_mask, k_cache, v_cache,
                                   kernel_impl=impl, host_lens=self.lens[:n])
        accept = tree_accept_and_commit(tokens, tree.parents, logits.argmax(-1), k_cache, v_cache, cache_lens,
                                        impl=impl)
        cache_lens += accept.path_len
        roots.copy_(accept.bonus)
        # One device-to-host copy per step: the path's tokens, its length and the bonus token.
        path_tokens = tokens.gather(1, accept.path.clamp(min=0).to(torch.int64))
        packed = torch.cat([path_tokens, accept.path_len[:, None].to(torch.int64), accept.bonus[:, None]], 1)
        t = self.tree_nodes
        out_tokens, drafts = [], []
        for i, row in enumerate(packed.tolist()):
            path_len = row[t]
            self.lens[i] += path_len
            out_tokens.append(row[1:path_len] + [row[t + 1]])
            drafts.append(path_len - 1)
        return StepOutput(out_tokens, drafts)
