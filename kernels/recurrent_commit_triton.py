"""Triton kernels for :func:`specdec_kernels.commit_recurrent_state` (imported lazily), and the
same sequential recurrence emitting every step's output: an ordinary chain-shaped gated delta
rule pass (what a verify without trees runs), which the benchmark times the tree kernel against.

Commit grid ``(B * Hv * Dv / BLOCK_V + B * ceil(C / BLOCK_C),)``, one launch: the first programs
each replay the accepted path on one [Dk, BLOCK_V] slice of one head's state (held in registers
in float32, ``path_len`` rank-one updates, read and written once); the rest each shift one
request's conv state by ``path_len`` over a slice of channels, in place.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .hybrid_configs import hybrid_config
from .tree_delta_triton import check_triton_dims, last_dim_contiguous


@triton.jit
def _replay(state, path_row_ptr, num_steps, k_base, v_base, g_base, beta_base, q_base, o_base,
            stride_kt, stride_vt, stride_gt, stride_bt, stride_qt, stride_ot, dk, dv, scale, EMIT: tl.constexpr):
    """``num_steps`` gated delta rule steps on ``state`` [DK, BLOCK_V] (float32) along the nodes
    ``path_row_ptr[0 .. num_steps)``; with EMIT, each step's output goes to its node's row."""
    for i in range(num_steps):
        node = tl.load(path_row_ptr + i).to(tl.int64)
        k = tl.load(k_base + node * stride_kt + dk).to(tl.float32)
        v = tl.load(v_base + node * stride_vt + dv).to(tl.float32)
        decay = tl.exp(tl.load(g_base + node * stride_gt).to(tl.float32))
        beta = tl.load(beta_base + node * stride_bt).to(tl.float32)
        state = state * decay
        delta = beta * (v - tl.sum(state * k[:, None], 0))
        state = state + k[:, None] * delta[None, :]
        if EMIT:
            q = tl.load(q_base + node * stride_qt + dk).to(tl.float32)
            out = scale * tl.sum(state * q[:, None], 0)
            tl.store(o_base + node * stride_ot + dv, out.to(o_base.dtype.element_ty))
    return state


@triton.jit
def _commit_kernel(state_ptr, conv_ptr, x_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, path_ptr, path_len_ptr, C, state_programs,
                   stride_sb, stride_sh, stride_sk, stride_cb, stride_cc, stride_ck, stride_xb, stride_xt, stride_xc,
                   stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
                   stride_gb, stride_gt, stride_gh, stride_bb, stride_bt, stride_bh, stride_pb,
                   HV: tl.constexpr, GROUP: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
                   BLOCK_V: tl.constexpr, TAPS: tl.constexpr, BLOCK_C: tl.constexpr):
    pid = tl.program_id(0)
    if pid < state_programs:
        slices: tl.constexpr = DV // BLOCK_V
        b = (pid // (HV * slices)).to(tl.int64)
        hv = (pid // slices) % HV
        dk = tl.arange(0, DK)
        dv = (pid % slices) * BLOCK_V + tl.arange(0, BLOCK_V)
        s_ptrs = state_ptr + b * stride_sb + hv * stride_sh + dk[:, None] * stride_sk + dv[None, :]
        state = _replay(tl.load(s_ptrs), path_ptr + b * stride_pb, tl.load(path_len_ptr + b),
                        k_ptr + b * stride_kb + (hv // GROUP) * stride_kh, v_ptr + b * stride_vb + hv * stride_vh,
                        g_ptr + b * stride_gb + hv * stride_gh, beta_ptr + b * stride_bb + hv * stride_bh,
                        k_ptr, k_ptr, stride_kt, stride_vt, stride_gt, stride_bt, 0, 0, dk, dv, 1.0, EMIT=False)
        tl.store(s_ptrs, state)
    else:
        blocks = tl.cdiv(C, BLOCK_C)
        b = ((pid - state_programs) // blocks).to(tl.int64)
        chans = ((pid - state_programs) % blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
        in_chan = chans < C
        steps = tl.load(path_len_ptr + b)
        c_base = conv_ptr + b * stride_cb + chans * stride_cc
        # new column j is entry steps + j of (old columns, then the path's inputs): a shift left,
        # so column m is read (step m - steps) before it is overwritten (step m), by the same threads
        for j in tl.static_range(TAPS):
            src = tl.zeros_like(chans) + steps + j  # the same entry for every channel
            from_path = src >= TAPS
            node = tl.load(path_ptr + b * stride_pb + tl.maximum(src - TAPS, 0)).to(tl.int64)
            old = tl.load(c_base + tl.minimum(src, TAPS - 1) * stride_ck, mask=in_chan & ~from_path, other=0.0)
            new = tl.load(x_ptr + b * stride_xb + node * stride_xt + chans * stride_xc, mask=in_chan & from_path,
                          other=0.0)
            tl.store(c_base + j * stride_ck, tl.where(from_path, new.to(old.dtype), old), mask=in_chan)


@triton.jit
def _chain_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, state_ptr, out_ptr, nodes_ptr, T, scale,
                  stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
                  stride_gb, stride_gt, stride_gh, stride_bb, stride_bt, stride_bh, stride_sb, stride_sh, stride_sk,
                  stride_ob, stride_ot, stride_oh,
                  HV: tl.constexpr, GROUP: tl.constexpr, DK: tl.constexpr, BLOCK_V: tl.constexpr):
    pid = tl.program_id(0)
    b = (pid // HV).to(tl.int64)
    hv = pid % HV
    dk = tl.arange(0, DK)
    dv = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    state = tl.load(state_ptr + b * stride_sb + hv * stride_sh + dk[:, None] * stride_sk + dv[None, :])
    hk = hv // GROUP
    _replay(state, nodes_ptr, T, k_ptr + b * stride_kb + hk * stride_kh, v_ptr + b * stride_vb + hv * stride_vh,
            g_ptr + b * stride_gb + hv * stride_gh, beta_ptr + b * stride_bb + hv * stride_bh,
            q_ptr + b * stride_qb + hk * stride_qh, out_ptr + b * stride_ob + hv * stride_oh,
            stride_kt, stride_vt, stride_gt, stride_bt, stride_qt, stride_ot, dk, dv, scale, EMIT=True)


def commit_recurrent_state_triton(state, conv_state, conv_inputs, k, v, g, beta, path, path_len):
    """Launcher: one launch for the state and the conv state; the state's last dim must be
    contiguous (it is updated in place), the inputs' are made so."""
    batch, _, key_heads, key_dim = k.shape
    value_heads, value_dim = v.shape[2:]
    channels, taps = conv_state.shape[1:]
    cfg = hybrid_config(state.device)
    block_v = min(cfg.commit_block_v, value_dim)
    check_triton_dims(key_dim, value_dim, block_v)
    if state.stride(-1) != 1:
        raise ValueError(f"state must have a contiguous last dim (Dv) for impl='triton', got strides {state.stride()}; "
                         "pass state.contiguous() and keep that copy (it is updated in place), or impl='torch'")
    if taps == 0:
        raise ValueError(f"conv_state must have K - 1 >= 1 columns for impl='triton', got {tuple(conv_state.shape)} "
                         "(a conv kernel of 1); use impl='torch' for it")
    if batch == 0:
        return
    k, v, path = last_dim_contiguous(k, v, path)
    path_len = path_len.contiguous()  # read without a stride
    block_c = cfg.conv_block_c
    state_programs = batch * value_heads * (value_dim // block_v)
    _commit_kernel[(state_programs + batch * triton.cdiv(channels, block_c),)](
        state, conv_state, conv_inputs, k, v, g, beta, path, path_len, channels, state_programs,
        state.stride(0), state.stride(1), state.stride(2), conv_state.stride(0), conv_state.stride(1),
        conv_state.stride(2), conv_inputs.stride(0), conv_inputs.stride(1), conv_inputs.stride(2),
        k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2),
        g.stride(0), g.stride(1), g.stride(2), beta.stride(0), beta.stride(1), beta.stride(2), path.stride(0),
        HV=value_heads, GROUP=value_heads // key_heads, DK=key_dim, DV=value_dim, BLOCK_V=block_v, TAPS=taps,
        BLOCK_C=block_c, num_warps=cfg.commit_warps,
    )


def sequential_gated_delta_rule_triton(q, k, v, g, beta, state, scale: float | None = None):
    """The ordinary gated delta rule over the T tokens as one sequence (a chain), each token's
    output from one program per (request, value head, value slice) stepping through them: the
    benchmark's chain-shaped baseline. Shapes as :func:`tree_gated_delta_rule`'s; state not modified."""
    import torch

    batch, num_nodes, key_heads, key_dim = q.shape
    value_heads, value_dim = v.shape[2:]
    cfg = hybrid_config(q.device)
    block_v = min(cfg.commit_block_v, value_dim)
    check_triton_dims(key_dim, value_dim, block_v)
    q, k, v, state = last_dim_contiguous(q, k, v, state)
    out = torch.empty(batch, num_nodes, value_heads, value_dim, dtype=v.dtype, device=v.device)
    nodes = torch.arange(num_nodes, dtype=torch.int32, device=q.device)
    _chain_kernel[(batch * value_heads, value_dim // block_v)](
        q, k, v, g, beta, state, out, nodes, num_nodes, key_dim ** -0.5 if scale is None else scale,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), g.stride(0), g.stride(1), g.stride(2),
        beta.stride(0), beta.stride(1), beta.stride(2), state.stride(0), state.stride(1), state.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        HV=value_heads, GROUP=value_heads // key_heads, DK=key_dim, BLOCK_V=block_v, num_warps=cfg.commit_warps,
    )
    return out
