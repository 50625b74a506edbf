"""The block drafter: log-probabilities for the next ``depth`` positions in one pass.

What it is, plainly: a synthetic stand-in for a DFlash drafter, not a trained model. At start-up
it is distilled from the target model itself: for every token t, the target's next-token
distribution after ``[BOS, t]`` (one batched forward, counted in start-up time). Drafting a block
from the root token r then takes no model call: position 1 gets the distilled distribution of r,
position 2 that of r's most likely successor, and so on down the drafter's own greedy chain
(two table gathers per step, two more for the noise below agreement 1, counted in every decode
step's time: nothing is precomputed per request and the drafter never sees the target's future
tokens).

``agreement`` (``--draft-agreement``) is the probability, per drafted position, that the drafter
uses that distilled distribution; otherwise the position gets an unrelated random distribution
(noise). The coin is keyed on (request, absolute position, offset in the block), so a request's
drafts, and so its acceptance, are the same whatever else shares its batch. How often a draft is
accepted is then ``agreement`` times how often the target's choice does not depend on more than
the current token (85-95% of tokens for the seeded ``tiny`` model): with agreement 0 drafts are noise
and acceptance length is about 1; with agreement near 1 both DDTree and the DFlash chain commit
several tokens per step, and which commits more depends on the prompts (the tree's runner-up
siblings pay only where the target's context-dependent choice is the distilled runner-up;
docs/PERF.md has the figures).
"""

from __future__ import annotations

import zlib

import torch
from torch import Tensor

from .model import TargetModel

NOISE_SCALE = 2.0
NOISE_ROWS = 1024
KEY_SPACE = 1 << 16


class BlockDrafter:
    """Per-position draft log-probabilities for blocks of ``depth`` tokens after a root."""

    def __init__(self, model: TargetModel, depth: int, agreement: float, seed: int) -> None:
        if depth < 1:
            raise ValueError(f"drafter depth must be >= 1, got {depth}")
        if not 0.0 <= agreement <= 1.0:
            raise ValueError(f"draft agreement must be in [0, 1], got {agreement}")
        device = model.device
        self.depth = depth
        self.agreement = agreement
        self.table = torch.log_softmax(model.context_free_logits(), dim=-1)  # [V, V] float32
        vocab = self.table.shape[0]
        successor = self.table.argmax(-1)
        chain = [torch.arange(vocab, device=device)]
        for _ in range(depth - 1):
            chain.append(successor[chain[-1]])
        self.chain = torch.stack(chain)  # [depth, V]: token before position d+1, per root
        gen = torch.Generator(device=device).manual_seed(seed + 1)
        self.noise = torch.log_softmax(
            torch.randn(NOISE_ROWS, vocab, generator=gen, device=device) * NOISE_SCALE, dim=-1)
        self.coin = torch.rand(KEY_SPACE, generator=gen, device=device)
        self._offsets = torch.arange(depth, device=device) * 7919
        self.seed = seed

    def stream_key(self, prompt_ids: list[int]) -> int:
        """The request's key for the noise coin: a function of the seed and prompt only."""
        data = b"".join((i & 0xFFFFFFFF).to_bytes(4, "little") for i in prompt_ids)  # an id may be negative
        return zlib.crc32(data, self.seed & 0xFFFFFFFF)

    def draft(self, roots: Tensor, positions: Tensor, stream_keys: Tensor) -> Tensor:
        """Draft log-probabilities [B, depth, V] float32.

        roots: [B] int64 root tokens; positions: [B] int64 absolute position of the first
        drafted token (the root's position + 1); stream_keys: [B] int64 from :meth:`stream_key`.
        """
        rows = self.table[self.chain[:, roots].t()]  # [B, depth, V]
        if self.agreement >= 1.0:
            return rows
        key = (stream_keys[:, None] + positions[:, None] * 1_000_003 + self._offsets) % KEY_SPACE
        noise = self.noise[key % NOISE_ROWS]
        if self.agreement <= 0.0:
            return noise
        agree = (self.coin[key] < self.agreement).unsqueeze(-1)
        return torch.where(agree, rows, noise)
