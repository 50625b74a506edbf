"""``tree_causal_conv1d``: a hybrid layer's short causal convolution over a DDTree's nodes.

In a Gated DeltaNet layer the q/k/v channels pass a depthwise causal convolution of kernel K
(4 in Qwen3.5/3.6) before the recurrence. Over a sequence, position t reads the inputs of
positions t - K + 1 .. t. Over a tree, node i reads the inputs of itself, its parent, its
grandparent, ... (K nodes along its own path); the ones above the root come from the committed
conv state, the last K - 1 inputs of the accepted sequence. Reading the K - 1 previous nodes in
node order instead would mix sibling branches (the leak this op exists to avoid).

Layouts: ``x`` [B, T, C] (the tree's conv inputs, node order), ``weight`` [C, K] (``weight[:, K-1]``
multiplies the node's own input, as ``torch.nn.Conv1d`` with left padding does), ``bias`` [C] or
None, ``conv_state`` [B, C, K - 1] (column K - 2 the newest committed input), ``parents`` [B, T]
int32 as in :class:`DDTree`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .impl import resolve_impl
from .tensor_checks import check_float, check_index, check_same_device
from .tree_layout import check_parents_precede

ACTIVATIONS = (None, "silu")


def check_conv_args(x: Tensor, weight: Tensor, bias: Tensor | None, conv_state: Tensor, parents: Tensor,
                    activation: str | None) -> None:
    check_same_device(("x", "weight", "bias", "conv_state", "parents"), x, weight, bias, conv_state, parents)
    if x.dim() != 3 or weight.dim() != 2 or weight.shape[0] != x.shape[2]:
        raise ValueError(f"x must be [B, T, C] and weight [C, K]; got {tuple(x.shape)}, {tuple(weight.shape)}")
    batch, num_nodes, channels = x.shape
    kernel = weight.shape[1]
    if conv_state.shape != (batch, channels, kernel - 1):
        raise ValueError(f"conv_state must be [B, C, K - 1] = {(batch, channels, kernel - 1)}; "
                         f"got {tuple(conv_state.shape)}")
    if parents.shape != (batch, num_nodes):
        raise ValueError(f"parents must be [B, T] = {(batch, num_nodes)}; got {tuple(parents.shape)}")
    check_index("parents", parents, "node indices")  # the Triton kernel indexes rows with them
    for name, t in (("x", x), ("weight", weight), ("conv_state", conv_state), ("bias", bias)):
        if t is not None:  # integer inputs came back truncated to integers
            check_float(name, t)
    if bias is not None and bias.shape != (channels,):
        raise ValueError(f"bias must be [C] = ({channels},); got {tuple(bias.shape)}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    check_parents_precede(parents)


def path_sources(parents: Tensor, taps: int) -> Tensor:
    """``[B, T, taps]`` int64: for tap j (0 = the node itself), the node j steps up its path, or,
    above the root, ``-m`` for the m-th newest committed input (-1 the newest). Parents precede
    children, so one gather per step walks every node up at once."""
    parent = parents.to(torch.int64)
    src = torch.arange(parents.shape[1], device=parents.device).expand_as(parent)
    steps = [src]
    for _ in range(taps - 1):
        src = torch.where(src >= 0, torch.gather(parent, 1, src.clamp(min=0)), src - 1)
        steps.append(src)
    return torch.stack(steps, dim=-1)


def tree_causal_conv1d_reference(x: Tensor, weight: Tensor, bias: Tensor | None, conv_state: Tensor,
                                 parents: Tensor, activation: str | None = "silu") -> Tensor:
    """Torch reference: gather each node's K path inputs, one weighted sum, in float32."""
    kernel = weight.shape[1]
    # the committed inputs, newest last, followed by the tree's: source -m sits at K - 1 - m
    history = torch.cat([conv_state.transpose(1, 2).float(), x.float()], dim=1)  # [B, K-1+T, C]
    sources = path_sources(parents, kernel) + (kernel - 1)  # [B, T, K]
    taps = torch.gather(history, 1, sources.flatten(1).unsqueeze(-1).expand(-1, -1, x.shape[2]))
    taps = taps.view(*sources.shape, x.shape[2])  # [B, T, K, C]; tap j is j steps up
    out = torch.einsum("btjc,cj->btc", taps, weight.float().flip(1))
    if bias is not None:
        out = out + bias.float()
    if activation == "silu":
        out = F.silu(out)
    return out.to(x.dtype)


def tree_causal_conv1d(x: Tensor, weight: Tensor, bias: Tensor | None, conv_state: Tensor, parents: Tensor,
                       activation: str | None = "silu", impl: str = "auto") -> Tensor:
    """Depthwise causal convolution of every tree node along its own path, then ``activation``.

    x:          [B, T, C] fp16/bf16/fp32, the nodes' conv inputs (any strides).
    weight:     [C, K]; bias: [C] or None (floats, as conv_state; an integer one is a ValueError).
    conv_state: [B, C, K - 1], the committed inputs (newest last); read, not modified.
    parents:    [B, T] int32, parents[:, 0] == -1 and parents[:, i] < i.
    activation: "silu" or None.
    Returns a new [B, T, C] tensor of x's dtype (accumulated in float32); no host sync.
    """
    check_conv_args(x, weight, bias, conv_state, parents, activation)
    if resolve_impl(impl, x, weight, conv_state, parents) == "torch":
        return tree_causal_conv1d_reference(x, weight, bias, conv_state, parents, activation)
    from .tree_conv_triton import tree_causal_conv1d_triton

    return tree_causal_conv1d_triton(x, weight, bias, conv_state, parents, activation)
