"""The DDTree layout shared by every operation, and the packed ancestor bitmask.

A request's tree has ``T = budget + 1`` nodes. Node 0 is the root (the previous step's bonus
token, whose KV row is not committed yet); nodes ``1..budget`` come in best-first pop order, so
``parents[i] < i``. ``depths[i]`` is node i's position offset from the root (root 0; siblings
share a position). ``ancestor_mask[b, i, w]`` holds ``W = ceil(T / 32)`` int32 words per node:
bit ``j % 32`` of word ``j // 32`` is set iff node j is node i or one of its ancestors.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass

import torch
from torch import Tensor

from .tensor_checks import INDEX_DTYPES, check_index, check_tensors


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
    synchronisation and no loop over nodes. Parents on the host out of [-1, T - 1], or not before
    their node (``parents[:, 0] == -1``, ``0 <= parents[:, i] < i``, as every kernel here requires),
    are named (a GPU's are not read). ``parents`` is int32 or int64, as every operation taking
    them requires: int16 or int8 ones would build a right mask here only to be refused there, and
    uint8 ones cannot hold the root's -1 (it read 255, out of range).
    """
    check_tensors(("parents",), parents)
    if parents.dim() != 2:
        fix = "parents.unsqueeze(0) for one tree" if parents.dim() == 1 else "one row of T parents per tree"
        raise ValueError(f"parents must be [B, T] (B trees of T nodes), got shape {tuple(parents.shape)}; pass {fix}")
    # a cast keeps an unsigned 255 where the root's -1 was lost: name the build, not the cast
    check_index("parents", parents, "node indices",
                None if parents.dtype.is_signed else f"parents built as int32 ({parents.dtype} holds no root -1)")
    batch, num_nodes = parents.shape
    if not parents.is_cuda:  # a GPU's would be a host sync
        bad = (parents < -1) | (parents >= num_nodes)
        if bad.any():
            b, i = (int(x) for x in bad.nonzero()[0])
            raise ValueError(f"parents[{b}, {i}] = {int(parents[b, i])}: a parent is -1 (the root) or a node in "
                             f"[0, {num_nodes - 1}]")
        # in order, a tree has no cycle either; out of order, the kernels' mask check blamed the mask
        check_parents_precede(parents)
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

    ``out[b, i, j]`` is True iff node j is node i or one of its ancestors. A mask that is not
    integer words (a float one lost bits past 2**24, a bool one read each word as bit 0) or a
    ``num_nodes`` that is not an int is a ValueError naming it.
    """
    # a float or bool mask came back as other bits without a word
    if ancestor_mask.dim() == 0 or ancestor_mask.dtype not in INDEX_DTYPES:
        raise ValueError(f"ancestor_mask must be packed int32 words [..., W], got {ancestor_mask.dtype} "
                         f"{tuple(ancestor_mask.shape)}; pass ancestor_mask_from_parents(parents)")
    try:
        num_nodes = operator.index(num_nodes)
    except TypeError:
        raise ValueError(f"num_nodes must be an int (the tree's T), got {num_nodes!r}; pass int(num_nodes)") from None
    if not 0 <= num_nodes <= 32 * ancestor_mask.shape[-1]:  # else fewer columns than asked, silently
        raise ValueError(f"num_nodes={num_nodes} does not fit the mask's {ancestor_mask.shape[-1]} words of "
                         f"32 nodes (mask shape {tuple(ancestor_mask.shape)}); pass the tree's T")
    # each word shifted by 0..31 at once (an arithmetic shift keeps bit 31's sign: & 1 reads it)
    shifts = torch.arange(32, device=ancestor_mask.device, dtype=torch.int32)
    bits = torch.bitwise_right_shift(ancestor_mask.to(torch.int32).unsqueeze(-1), shifts) & 1  # [..., W, 32]
    return bits.flatten(-2)[..., :num_nodes].bool()


@functools.lru_cache(maxsize=64)
def node_bounds(num_nodes: int) -> tuple[Tensor, Tensor]:
    """Node indices and the least parent + 1 each may have (0 for the root, 1 after it)."""
    node = torch.arange(num_nodes)
    return node, node.clamp(max=1)


def check_parents_precede(parents: Tensor) -> None:
    """Raise ValueError naming the first (request, node) that breaks a DDTree's order: the root
    first with parent -1, every other node after its parent. The walks and the in-place commit
    (``path[i] >= i``) rely on it; parents on a GPU are not read (a host sync), as with lengths."""
    if parents.is_cuda:
        return
    node, lowest = node_bounds(parents.shape[1])
    # parents + 1: the root's 0, every other node's in [1, i]
    bad = torch.gt(parents + 1, node).logical_or_(torch.lt(parents + 1, lowest))
    if bad.any():
        b, i = (int(x) for x in bad.nonzero()[0])
        want = "-1 (the root)" if i == 0 else f"a node in [0, {i - 1}]"
        raise ValueError(f"parents[{b}, {i}] = {int(parents[b, i])}: node {i}'s parent must be {want}; "
                         "parents come in a DDTree's order, each node after its parent")


@functools.lru_cache(maxsize=64)
def _row_words(num_nodes: int) -> tuple[Tensor, Tensor, Tensor]:
    """Per node, as int64 words [T, W] of 32 bits: its own bit, the bits of every earlier node;
    and the bits of all T nodes [W]."""
    words = num_mask_words(num_nodes)
    own = torch.zeros(num_nodes, words, dtype=torch.int64)
    before = torch.zeros(num_nodes, words, dtype=torch.int64)
    for i in range(num_nodes):
        own[i, i // 32] = 1 << (i % 32)
        before[i, : i // 32] = 0xFFFFFFFF
        before[i, i // 32] = (1 << (i % 32)) - 1
    return own, before, own.sum(0)


def check_mask_layout(ancestor_mask: Tensor, batch: int, num_nodes: int) -> None:
    """Raise ValueError unless the mask is int32 ``[B, T, ceil(T / 32)]`` of a DDTree's ancestors
    (:func:`check_ancestor_mask`): the shape and dtype the attention and the delta rule read."""
    words = num_mask_words(num_nodes)
    if ancestor_mask.shape != (batch, num_nodes, words) or ancestor_mask.dtype != torch.int32:
        raise ValueError(f"ancestor_mask must be int32 [B, T, ceil(T / 32)] = {(batch, num_nodes, words)}, "
                         f"got {ancestor_mask.dtype} {tuple(ancestor_mask.shape)}; "
                         "pass ancestor_mask_from_parents(parents)")
    check_ancestor_mask(ancestor_mask)


def check_ancestor_mask(ancestor_mask: Tensor) -> None:
    """Raise ValueError naming the first (request, node) whose bits are not its ancestors in a
    DDTree: node i's row holds i and its parent's row, nothing else (its parent: the latest node
    before i in the row; the root's row is itself alone). A transposed mask (descendants), a
    forest or a row missing its own bit fails here. The chunked delta rule's triangular solve
    relies on it; a mask on a GPU is not read (a host sync). Works on the packed words."""
    if ancestor_mask.is_cuda:  # before the shape: every eager call on a GPU pays for what precedes this
        return
    batch, num_nodes = ancestor_mask.shape[:2]
    if batch == 0 or num_nodes == 0:
        return
    own, before, valid = _row_words(num_nodes)
    rows = ancestor_mask.to(torch.int64) & valid  # [B, T, W], bits past T ignored
    earlier = rows & before
    # the latest earlier node: each word's highest bit (frexp's exponent - 1; -1 for an empty word)
    exponent = torch.frexp(earlier.double()).exponent
    word_base = 32 * torch.arange(rows.shape[2])
    parent = torch.where(earlier > 0, exponent - 1 + word_base, -1).amax(-1)  # [B, T]
    parent_row = torch.gather(rows, 1, parent.clamp(min=0).unsqueeze(-1).expand_as(rows))
    want = torch.where(parent.unsqueeze(-1) >= 0, parent_row, 0) | own
    bad = (rows != want).any(-1)
    bad[:, 1:] |= parent[:, 1:] < 0  # a second root
    if bad.any():
        b, i = (int(x) for x in bad.nonzero()[0])
        held = unpack_ancestor_mask(ancestor_mask[b:b + 1, i:i + 1], num_nodes)[0, 0].nonzero().flatten().tolist()
        raise ValueError(f"ancestor_mask[{b}, {i}] holds nodes {held}: node {i}'s row must hold itself and "
                         "exactly its parent's row, nothing after it (a tree's ancestors, not its descendants); "
                         "build it with ancestor_mask_from_parents(parents)")
