"""The DDTree layout shared by every operation, and the packed ancestor bitmask.

A request's tree has ``T = budget + 1`` nodes. Node 0 is the root (the previous step's bonus
token, whose KV row is not committed yet); nodes ``1..budget`` come in best-first pop order, so
``parents[i] < i``. ``depths[i]`` is node i's position offset from the root (root 0; siblings
share a position). ``ancestor_mask[b, i, w]`` holds ``W = ceil(T / 32)`` int32 words per node:
bit ``j % 32`` of word ``j // 32`` is set iff node j is node i or one of its ancestors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class DDTree:
    """A batch of draft trees, all tensors on the device of the draft log-probabilities.

    tokens:        [B, T] int64, ``tokens[:, 0]`` are the root tokens.
    parents:       [B, T] int32, ``parents[:, 0] == -1`` and ``parents[:, i] < i``.
    depths:        [B, T] int32, ``depths[:, 0] == 0``; position offset from the root.
    ancestor_mask: [B, T, W] int32, W = ceil(T / 32); see the module docstring.
    log_probs:     [B, T] float32, cumulative path log-probability (root 0).
    """

    tokens: Tensor
    parents: Tensor
    depths: Tensor
    ancestor_mask: Tensor
    log_probs: Tensor

    @property
    def num_nodes(self) -> int:
        """T, the number of nodes per request, root included (budget + 1)."""
        return self.tokens.shape[1]


def num_mask_words(num_nodes: int) -> int:
    """W = ceil(T / 32), the int32 words per node in an ancestor bitmask."""
    return (num_nodes + 31) // 32


def ancestor_mask_from_parents(parents: Tensor) -> Tensor:
    """Packed ancestor bitmask ``[B, T, W]`` int32 from ``parents`` ``[B, T]`` (-1 for the root).

    Pointer doubling, ceil(log2 T) rounds of gather + OR on the parents' device: no host
    synchronisation and no loop over nodes. Requires ``parents[:, i] < i`` only through the
    absence of cycles.
    """
    batch, num_nodes = parents.shape
    words = num_mask_words(num_nodes)
    device = parents.device
    node = torch.arange(num_nodes, device=device)
    # Bits live in int64 words (32 used) so that bit 31 needs no sign handling until the end.
    # Row T is a sentinel with no bits whose pointer is itself, standing in for "no parent".
    bits = torch.zeros(batch, num_nodes + 1, words, dtype=torch.int64, device=device)
    bits[:, node, node // 32] = torch.bitwise_left_shift(torch.ones_like(node), node % 32)
    sentinel = num_nodes
    ptr = parents.to(torch.int64)
    ptr = torch.where(ptr < 0, torch.full_like(ptr, sentinel), ptr)
    ptr = torch.cat([ptr, torch.full((batch, 1), sentinel, dtype=torch.int64, device=device)], 1)
    span = 1
    while span < num_nodes:
        bits = bits | torch.gather(bits, 1, ptr.unsqueeze(-1).expand(-1, -1, words))
        ptr = torch.gather(ptr, 1, ptr)
        span *= 2
    bits = bits[:, :num_nodes]
    bits = torch.where(bits >= 2**31, bits - 2**32, bits)
    return bits.to(torch.int32)


def unpack_ancestor_mask(ancestor_mask: Tensor, num_nodes: int) -> Tensor:
    """Boolean ``[B, T, T]`` matrix from the packed ``[B, T, W]`` int32 bitmask.

    ``out[b, i, j]`` is True iff node j is node i or one of its ancestors.
    """
    node = torch.arange(num_nodes, device=ancestor_mask.device)
    words = ancestor_mask.to(torch.int64)[..., node // 32]  # [B, T, T]
    return (torch.bitwise_right_shift(words, node % 32) & 1).bool()
