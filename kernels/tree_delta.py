"""``tree_gated_delta_rule``: a Gated DeltaNet layer's outputs at every node of a DDTree.

Per request b and value head h (key head ``h // (Hv / Hk)``), with the committed state
``S`` [Dk, Dv] float32, node i with parent p(i) (the root's parent is the committed prefix) has

    S_i = exp(g_i) S_p(i) + k_i (beta_i (v_i - exp(g_i) S_p(i)^T k_i))^T,   o_i = scale S_i^T q_i,

that is, the sequential gated delta rule along the node's own path and nothing else. Running the
tree's nodes as one sequence in node order instead would let each node see its siblings' and
cousins' tokens ("state leakage"): the recurrent counterpart of a missing attention mask.

The chunked (WY / UT-transform) form of the delta rule survives the move to a tree, because the
ancestors of an ancestor are ancestors: with ``M`` the ancestor mask (self included), ``G = M g``
the gate summed along each node's path and ``D_ij = exp(G_i - G_j)`` on ``M`` (0 elsewhere),

    u = (I + strict(diag(beta) (K K^T) * D))^-1 diag(beta) (V - diag(exp G) K S),
    O = scale (diag(exp G) Q S + ((Q K^T) * D) u),

where ``u_i`` is node i's pseudo-value. The inverse is unit lower triangular in node order
(parents precede children), and every row touches its own path only, so each node's output
equals the chain computation along its path, with the committed state read once.

Layouts: q, k [B, T, Hk, Dk]; v [B, T, Hv, Dv]; g, beta [B, T, Hv] (g is the log decay, <= 0);
state [B, Hv, Dk, Dv] float32; ancestor_mask [B, T, W] int32 as in :class:`DDTree`. The caller
L2-normalises q and k, as Qwen3.5/3.6 do before the rule.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .impl import resolve_impl
from .tensor_checks import check_float, check_same_device
from .tree_layout import check_mask_layout, unpack_ancestor_mask


def check_delta_args(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor) -> None:
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:2] != q.shape[:2]:
        raise ValueError(f"q and k must be [B, T, Hk, Dk] and v [B, T, Hv, Dv]; got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    batch, num_nodes, key_heads, key_dim = q.shape
    value_heads, value_dim = v.shape[2:]
    if k.dtype != q.dtype or v.dtype != q.dtype:  # the Triton path's rule too
        raise ValueError(f"k and v must be q's dtype ({q.dtype}), got {k.dtype}, {v.dtype}; pass them .to(q.dtype)")
    check_float("q, k and v", q, "q.float(), k.float(), v.float()", "float tensors (fp16 / bf16 / fp32)")
    if state.dtype != torch.float32:
        raise ValueError(f"state must be the float32 recurrent state, got {state.dtype}; pass state.float() and "
                         "keep that copy (the commit updates it in place)")
    if value_heads % key_heads:
        raise ValueError(f"Hv={value_heads} value heads are not a multiple of Hk={key_heads} key heads")
    for name, t in (("g", g), ("beta", beta)):
        if t.shape != (batch, num_nodes, value_heads):
            raise ValueError(f"{name} must be [B, T, Hv] = {(batch, num_nodes, value_heads)}; got {tuple(t.shape)}")
        # an integer beta (a sigmoid's, truncated) or g gave other numbers silently
        check_float(name, t, what="a float tensor (any float dtype)")
    if state.shape != (batch, value_heads, key_dim, value_dim):
        raise ValueError(f"state must be [B, Hv, Dk, Dv] = {(batch, value_heads, key_dim, value_dim)}; "
                         f"got {tuple(state.shape)}")
    # a decay alpha in (0, 1] passed for its log is the likely mix-up; g on a GPU is not read (a host sync)
    if not g.is_cuda and g.numel() and bool((g > 0).any()):
        raise ValueError(f"g is the log decay, <= 0, but holds {float(g.max()):.3g}; pass log(alpha), "
                         "not the decay alpha itself")
    # a decay of 0 is g = -inf, whose path sums the chunked form cannot difference (NaN, spread to
    # the node's siblings); exp(-30) already forgets to float32's precision
    if not g.is_cuda and g.numel() and not bool(torch.isfinite(g).all()):
        raise ValueError(f"g must be finite, but holds {float(g[~torch.isfinite(g)][0])}; a decay of 0 is "
                         "g.clamp_min(-30), which forgets as fully in float32")


def default_scale(q: Tensor, scale: float | None) -> float:
    """Dk ** -0.5, or ``scale``; a NaN or infinite one is refused, as it would make every output NaN."""
    if scale is None:
        return q.shape[-1] ** -0.5
    if not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number, got {scale}; pass None for Dk ** -0.5")
    return float(scale)


def tree_gated_delta_rule_reference(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor,
                                    ancestor_mask: Tensor, scale: float | None = None) -> Tensor:
    """Torch reference: the chunked form above, one dense [T, T] system per (request, value head)."""
    num_nodes = q.shape[1]
    group = v.shape[2] // q.shape[2]
    dtype = torch.promote_types(torch.float32, state.dtype)

    def heads(t: Tensor) -> Tensor:  # [B, T, H, D] -> [B, Hv, T, D]
        return t.to(dtype).repeat_interleave(group, dim=2).transpose(1, 2)

    qf, kf = heads(q) * default_scale(q, scale), heads(k)
    vf = v.to(dtype).transpose(1, 2)
    betaf = beta.to(dtype).transpose(1, 2)  # [B, Hv, T]
    on_path = unpack_ancestor_mask(ancestor_mask, num_nodes).unsqueeze(1)  # [B, 1, T, T]
    gates = torch.einsum("bij,bjh->bhi", on_path.squeeze(1).to(dtype), g.to(dtype))  # [B, Hv, T]
    decay = torch.where(on_path, torch.exp(gates[..., :, None] - gates[..., None, :]), 0.0)
    strict = decay * (~torch.eye(num_nodes, dtype=torch.bool, device=q.device))
    s0 = state.to(dtype)
    system = torch.eye(num_nodes, dtype=dtype, device=q.device) + betaf[..., None] * (kf @ kf.transpose(-1, -2)) * strict
    rhs = betaf[..., None] * (vf - torch.exp(gates)[..., None] * (kf @ s0))
    pseudo_values = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
    out = torch.exp(gates)[..., None] * (qf @ s0) + ((qf @ kf.transpose(-1, -2)) * decay) @ pseudo_values
    return out.transpose(1, 2).to(v.dtype)


def tree_gated_delta_rule(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor,
                          ancestor_mask: Tensor, scale: float | None = None, impl: str = "auto") -> Tensor:
    """Outputs of every tree node from the committed recurrent state.

    q, k:          [B, T, Hk, Dk] fp16/bf16/fp32 (L2-normalised by the caller). The Triton path
                   needs Dk and Dv powers of two >= 16 (others: impl="torch").
    v:             [B, T, Hv, Dv], same dtype; Hv a multiple of Hk (GQA).
    g, beta:       [B, T, Hv], log decay (finite, <= 0) and write strength, any float dtype
                   (an integer one is a ValueError);
                   beta in [0, 1] (a sigmoid's): past 1, the Triton path's block inverse loses
                   accuracy on keys alike (not checked: reading beta would be a host sync).
    state:         [B, Hv, Dk, Dv] float32, the committed state; read, not modified.
    ancestor_mask: [B, T, W] int32 (:func:`ancestor_mask_from_parents`); a chain-shaped tree gives
                   the ordinary sequential gated delta rule.
    scale:         multiplies q, a finite number (default Dk ** -0.5).
    Returns a new [B, T, Hv, Dv] tensor of v's dtype. The state after the accepted path is
    :func:`commit_recurrent_state`'s to write. No host synchronisation.
    """
    check_same_device(("q", "k", "v", "g", "beta", "state", "ancestor_mask"), q, k, v, g, beta, state, ancestor_mask)
    check_delta_args(q, k, v, g, beta, state)
    check_mask_layout(ancestor_mask, q.shape[0], q.shape[1])
    if resolve_impl(impl, q, k, v, state, ancestor_mask) == "torch":
        return tree_gated_delta_rule_reference(q, k, v, g, beta, state, ancestor_mask, scale)
    from .tree_delta_triton import tree_gated_delta_rule_triton

    return tree_gated_delta_rule_triton(q, k, v, g, beta, state, ancestor_mask, default_scale(q, scale))
