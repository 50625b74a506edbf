"""Triton kernel for :func:`specdec_kernels.tree_causal_conv1d` (imported lazily).

Grid ``(B, ceil(T / BLOCK_T), ceil(C / BLOCK_C))``: each program convolves a tile of nodes over a
tile of channels. Every node walks up its own path one parent at a time (K - 1 gathers of the
parents row, which stays in L1), reading a tree row while the walk is inside the tree and a
committed conv-state column once it has passed the root. Channels are the contiguous dimension
of x, so every tap is one coalesced row load per node.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .hybrid_configs import hybrid_config


@triton.jit
def _tree_conv_kernel(x_ptr, w_ptr, bias_ptr, state_ptr, parents_ptr, out_ptr, T, C,
                      stride_xb, stride_xt, stride_xc, stride_wc, stride_wk, stride_sb, stride_sc, stride_sk,
                      stride_pb, stride_ob, stride_ot, stride_oc,
                      KERNEL: tl.constexpr, HAS_BIAS: tl.constexpr, SILU: tl.constexpr,
                      BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    nodes = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    chans = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    in_tree = nodes < T
    in_chan = chans < C
    x_base = x_ptr + b * stride_xb + chans[None, :] * stride_xc
    s_base = state_ptr + b * stride_sb + chans[None, :] * stride_sc
    acc = tl.zeros((BLOCK_T, BLOCK_C), dtype=tl.float32)
    src = nodes  # >= 0: a tree node; -m: the m-th newest committed input
    for j in tl.static_range(KERNEL):
        if j > 0:
            up = tl.load(parents_ptr + b * stride_pb + tl.maximum(src, 0), mask=in_tree & (src >= 0), other=-1)
            # parents in [-1, src - 1] (the host checks that, not a GPU's): no read outside the tree or state
            up = tl.minimum(tl.maximum(up, -1), src - 1)
            src = tl.where(src >= 0, up, src - 1)
        w = tl.load(w_ptr + chans * stride_wc + (KERNEL - 1 - j) * stride_wk, mask=in_chan, other=0.0).to(tl.float32)
        row = tl.load(x_base + tl.maximum(src, 0)[:, None] * stride_xt,
                      mask=(in_tree & (src >= 0))[:, None] & in_chan[None, :], other=0.0)
        col = tl.load(s_base + (KERNEL - 1 + tl.minimum(src, -1))[:, None] * stride_sk,
                      mask=(in_tree & (src < 0))[:, None] & in_chan[None, :], other=0.0)
        acc += w[None, :] * (row.to(tl.float32) + col.to(tl.float32))
    if HAS_BIAS:
        acc += tl.load(bias_ptr + chans, mask=in_chan, other=0.0).to(tl.float32)[None, :]
    if SILU:
        acc = acc * tl.sigmoid(acc)
    tl.store(out_ptr + b * stride_ob + nodes[:, None] * stride_ot + chans[None, :] * stride_oc,
             acc.to(out_ptr.dtype.element_ty), mask=in_tree[:, None] & in_chan[None, :])


def tree_causal_conv1d_triton(x, weight, bias, conv_state, parents, activation):
    """Launcher: any strides; one launch, no host sync."""
    import torch

    batch, num_nodes, channels = x.shape
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if batch == 0 or num_nodes == 0 or channels == 0:
        return out
    cfg = hybrid_config(x.device)
    parents = parents.contiguous()
    bias = bias.contiguous() if bias is not None else None  # read without a stride
    grid = (batch, triton.cdiv(num_nodes, cfg.conv_block_t), triton.cdiv(channels, cfg.conv_block_c))
    _tree_conv_kernel[grid](
        x, weight, bias if bias is not None else weight, conv_state, parents, out, num_nodes, channels,
        x.stride(0), x.stride(1), x.stride(2), weight.stride(0), weight.stride(1),
        conv_state.stride(0), conv_state.stride(1), conv_state.stride(2), parents.stride(0),
        out.stride(0), out.stride(1), out.stride(2),
        KERNEL=weight.shape[1], HAS_BIAS=bias is not None, SILU=activation == "silu",
        BLOCK_T=cfg.conv_block_t, BLOCK_C=cfg.conv_block_c, num_warps=cfg.conv_warps,
    )
    return out
