"""One decode step for a batch of sequences: draft, build the tree, verify, accept, commit.

All three methods run the same ``specdec_kernels`` pipeline and differ only in the tree:

- ``ar``: the tree is the root alone (T = 1, budget 0), so a step commits exactly one token
  (verify attention through the kernels; accept and commit are identities at T = 1 and skipped);
- ``dflash``: the drafter's block as a chain (``build_ddtree(..., topk=1)``), T = budget + 1;
- ``ddtree``: the best-first DDTree of ``budget`` draft nodes, T = budget + 1.

Greedy acceptance keeps exactly the tokens the target would have produced one at a time, so the
output of every method equals the autoregressive greedy output (the lossless property the
engine's tests check).

A hybrid model's linear layers verify the tree with the tree-aware conv and gated delta rule and
then commit their states along the accepted path (``recurrent_tree="exact"``). ``"chain"``
reproduces the leak of an implementation that runs the tree's nodes through those layers as one
sequence in node order: each node then sees its siblings' and cousins' tokens, and the committed
state is that sequence's up to the last accepted node. It exists to show what the leak costs;
it is not lossless.

A slot whose request asked for logprobs (``top_logprobs``, ``ar`` only) gets, with each token,
the log_softmax of the target's logits there: the token's own and the top ``k``, as SGLang's
``return_logprob`` / ``top_logprobs_num`` give them. Speculative steps are not served so: their
tokens come of a verify over a tree, and the server refuses the request (protocol.logprob_refusal).

Sequences live in KV-cache slots ``0..n-1`` (the scheduler keeps them packed), so the batch's
cache is a view, and the kernels' in-place commit writes straight into it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from specdec_kernels import ancestor_mask_from_parents, build_ddtree, commit_recurrent_state, tree_accept_and_commit

from ..configuration import METHODS, is_speculative
from .cli import RECURRENT_TREE_MODES
from .drafter import BlockDrafter
from .linear_attention import RecurrentBatch
from .faults import accept_one_wrong_draft
from .model import TargetModel


@dataclass(frozen=True)
class TokenLogprobs:
    """One emitted token's log-probability under the target and its ``top_logprobs_num`` best
    tokens as (logprob, token id), best first: SGLang's output_token_logprobs / output_top_logprobs."""

    logprob: float
    top: tuple[tuple[float, int], ...]


@dataclass(frozen=True)
class StepOutput:
    """Per sequence of the batch: the tokens committed this step (accepted drafts, then the
    target's bonus token), how many of them were drafts, and each token's logprobs where its
    request asked (None otherwise)."""

    tokens: list[list[int]]
    accepted_drafts: list[int]
    logprobs: list[list[TokenLogprobs] | None] | None = None


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, tops: list[int | None]) -> list[TokenLogprobs | None]:
    """Each row's TokenLogprobs of ``tokens`` under ``logits`` ([n, vocab]), its top ``tops[i]``
    (None: the row did not ask). One device-to-host copy for the rows that asked."""
    rows = [i for i, k in enumerate(tops) if k is not None]
    out: list[TokenLogprobs | None] = [None] * len(tops)
    if not rows:
        return out
    picked = torch.tensor(rows, device=logits.device)
    logp = torch.log_softmax(logits[picked].float(), -1)  # float32: bf16 logits would round the margins
    chosen = logp.gather(-1, tokens[picked].to(torch.int64)[:, None])[:, 0].tolist()
    k = max(tops[i] for i in rows)
    values, ids = logp.topk(k, -1) if k else (logp[:, :0], logp[:, :0].to(torch.int64))
    values, ids = values.tolist(), ids.tolist()
    for j, i in enumerate(rows):
        out[i] = TokenLogprobs(chosen[j], tuple(zip(values[j][:tops[i]], ids[j][:tops[i]])))
    return out


class SpeculativeDecoder:
    """Owns the KV cache of ``max_batch`` slots and decodes the first ``n`` of them per step."""

    def __init__(self, model: TargetModel, method: str, budget: int, drafter: BlockDrafter | None,
                 max_batch: int, max_seq_len: int, kernel_impl: str = "auto", recurrent_tree: str = "exact",
                 *, lossy: float = 0.0, seed: int = 0) -> None:
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if recurrent_tree not in RECURRENT_TREE_MODES:
            raise ValueError(f"recurrent_tree must be one of {RECURRENT_TREE_MODES}, got {recurrent_tree!r}")
        if is_speculative(method) and drafter is None:
            raise ValueError(f"method {method!r} needs a drafter")
        if method == "dflash" and budget > drafter.depth:
            raise ValueError(f"dflash chain of {budget} nodes exceeds the drafter's depth {drafter.depth}")
        self.model = model
        self.method = method
        self.budget = budget if is_speculative(method) else 0
        self.tree_nodes = self.budget + 1
        self.drafter = drafter
        self.lossy = lossy  # --fault-lossy: probability of a wrong acceptance per sequence and step
        self._seed = seed
        self._lossy_coin = random.Random(seed)
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
        #: each slot's top_logprobs_num, None where its request did not ask for logprobs
        self.top_logprobs: list[int | None] = [None] * max_batch
        #: the last prefill's first token's logprobs (None: not asked)
        self.prefill_logprobs: TokenLogprobs | None = None
        # The autoregressive "tree": the root alone, its own ancestor.
        self._ar_depths = torch.zeros(max_batch, 1, dtype=torch.int32, device=device)
        self._ar_mask = torch.ones(max_batch, 1, 1, dtype=torch.int32, device=device)
        self.recurrent_tree = recurrent_tree
        self.state, self.conv_state = model.new_recurrent_state(max_batch)
        t = self.tree_nodes
        self._steps = torch.arange(t, dtype=torch.int32, device=device)
        # a chain through the tree's nodes in order: the recurrent layers' tree in "chain" mode,
        # and, with T = 1, the autoregressive step's
        self._chain_parents = (self._steps - 1).expand(max_batch, t).contiguous()
        self._chain_mask = ancestor_mask_from_parents(self._chain_parents)

    @property
    def speculative(self) -> bool:
        return is_speculative(self.method)

    def prefill(self, slot: int, prompt_ids: list[int], stream_key: int = 0, top_logprobs: int | None = None) -> int:
        """Run the prompt into ``slot``'s cache; return the first generated token. ``top_logprobs``
        (not None): the slot's tokens carry their logprobs (``prefill_logprobs``, StepOutput)."""
        if top_logprobs is not None and self.speculative:
            raise ValueError(f"logprobs are served for ar decoding only, not {self.method}")
        if not 0 < len(prompt_ids) <= self.max_seq_len:
            raise ValueError(f"prompt of {len(prompt_ids)} tokens does not fit 1..{self.max_seq_len}")
        tokens = torch.tensor([prompt_ids], dtype=torch.int64, device=self.model.device)
        logits = self.model.prefill(tokens, self.k_cache[:, slot:slot + 1], self.v_cache[:, slot:slot + 1],
                                    self.state[:, slot:slot + 1], self.conv_state[:, slot:slot + 1],
                                    kernel_impl=self.kernel_impl)
        first = logits[0, -1].argmax()
        self.top_logprobs[slot] = top_logprobs
        self.prefill_logprobs = token_logprobs(logits[:, -1], first[None], [top_logprobs])[0]
        self.lens[slot] = len(prompt_ids)
        self.cache_lens[slot] = len(prompt_ids)
        self.roots[slot] = first
        self.stream_keys[slot] = stream_key
        return int(first)

    def reset(self) -> None:
        """Every slot as built: empty, its caches and states zero, and the lossy coin at its seed, so
        start-up's warm steps (warm.py) change no later output, --fault-lossy's included."""
        self.lens[:] = [0] * self.max_batch
        self.top_logprobs[:] = [None] * self.max_batch
        self.prefill_logprobs = None
        for t in (self.cache_lens, self.roots, self.stream_keys, self.k_cache, self.v_cache, self.state,
                  self.conv_state):
            t.zero_()
        self._lossy_coin = random.Random(self._seed)

    def move(self, src: int, dst: int) -> None:
        """Move sequence ``src`` into slot ``dst`` (keeps the running slots packed)."""
        rows = self.lens[src]
        self.k_cache[:, dst, :rows] = self.k_cache[:, src, :rows]
        self.v_cache[:, dst, :rows] = self.v_cache[:, src, :rows]
        self.state[:, dst] = self.state[:, src]
        self.conv_state[:, dst] = self.conv_state[:, src]
        self.lens[dst] = rows
        self.top_logprobs[dst] = self.top_logprobs[src]
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
            # argmax is the bonus token, so accept and the KV commit would be identities.
            recurrent = self._recurrent(n, self._chain_parents[:n], self._chain_mask[:n])
            logits = self.model.verify(roots[:, None], self._ar_depths[:n], cache_lens, self._ar_mask[:n],
                                       k_cache, v_cache, kernel_impl=impl, host_lens=self.lens[:n],
                                       recurrent=recurrent)
            self._commit_recurrent(recurrent, n, self._steps.expand(n, 1), torch.ones_like(cache_lens))
            bonus = logits[:, 0].argmax(-1)
            cache_lens += 1
            roots.copy_(bonus)
            out_tokens = [[token] for token in bonus.tolist()]
            for i in range(n):
                self.lens[i] += 1
            asked = token_logprobs(logits[:, 0], bonus, self.top_logprobs[:n])
            return StepOutput(out_tokens, [0] * n, [None if a is None else [a] for a in asked])
        draft = self.drafter.draft(roots, cache_lens.to(torch.int64) + 1, self.stream_keys[:n])
        tree = build_ddtree(draft, roots, self.budget, topk=1 if self.method == "dflash" else None, impl=impl)
        tokens = tree.tokens
        exact = self.recurrent_tree == "exact"
        recurrent = self._recurrent(n, tree.parents if exact else self._chain_parents[:n],
                                    tree.ancestor_mask if exact else self._chain_mask[:n])
        logits = self.model.verify(tokens, tree.depths, cache_lens, tree.ancestor_mask, k_cache, v_cache,
                                   kernel_impl=impl, host_lens=self.lens[:n], recurrent=recurrent)
        target_argmax = logits.argmax(-1)
        if self.lossy:
            for row in range(n):
                if self._lossy_coin.random() < self.lossy:
                    accept_one_wrong_draft(tokens, tree.parents, target_argmax, row)
        accept = tree_accept_and_commit(tokens, tree.parents, target_argmax, k_cache, v_cache, cache_lens,
                                        impl=impl)
        if exact:
            self._commit_recurrent(recurrent, n, accept.path, accept.path_len)
        else:  # the node-order sequence up to the last accepted node
            last = accept.path.gather(1, (accept.path_len - 1).to(torch.int64)[:, None])
            self._commit_recurrent(recurrent, n, torch.where(self._steps <= last, self._steps, -1),
                                   last[:, 0] + 1)
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

    def _recurrent(self, n: int, parents, ancestor_mask) -> RecurrentBatch | None:
        """The linear layers' view of slots 0..n-1 for one verify (None without linear layers)."""
        if not self.model.is_hybrid:
            return None
        return RecurrentBatch(self.state[:, :n], self.conv_state[:, :n], parents, ancestor_mask)

    def _commit_recurrent(self, recurrent: RecurrentBatch | None, n: int, path, path_len) -> None:
        """Advance every linear layer's states of slots 0..n-1 along ``path`` (no host sync)."""
        if recurrent is None:
            return
        for layer, saved in enumerate(recurrent.saved):
            commit_recurrent_state(self.state[layer, :n], self.conv_state[layer, :n], *saved, path,
                                   path_len.to(torch.int32), impl=self.kernel_impl)
