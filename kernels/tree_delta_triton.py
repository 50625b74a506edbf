"""Triton kernels for :func:`specdec_kernels.tree_gated_delta_rule` (imported lazily).

The rule's output is ``O = scale (diag(exp G) Q S + W (V - diag(exp G) K S))`` with the node
mixing matrix ``W = ((Q K^T) * D) (I + strict(diag(beta) (K K^T) * D))^-1 diag(beta)`` [T, T]:
``W`` depends on the tree's q, k, g, beta and mask only, not on the state. Two launches:

- ``_tree_delta_mix_kernel``, grid ``(B * Hv)``: ``W`` and the path gates ``G``. It walks the
  tree in blocks of 16 nodes (``DELTA_BLOCK_T``), in node order: per block the rows of the
  inverse ``N`` by block forward substitution (each block's own 16 x 16 inverse by repeated
  squaring) and ``W``'s rows as ``(Q K^T * D) N diag(beta)`` over the earlier blocks; a block's
  rows of ``N`` go to a workspace only where a later block reads them (none for T <= 16).
- ``_tree_delta_apply_kernel``, grid ``(Dv / BLOCK_V, B * Hv)``: one program per slice of value
  columns reads its slice of the state once and does two products with it, ``K S`` and ``Q S``,
  and one with ``W``. No dependent chain sits between the state load and the output, and the
  value columns multiply the programs that stream the state (the rule never mixes columns).
  Where the table says so it is the mixing kernel's programmatic dependent: its programs may
  start while the mixing runs and load their state slice; on the whole tree at once (``BR`` =
  ``TPAD``) they also do both products with it before they wait for ``W``, in row blocks they wait
  first (each block reads ``W`` between its products).

Keeping the chain (the inverse) out of the state-streaming kernel is the point: a program that
holds its state slice through the chain leaves the memory idle. But the mixing kernel has one
program per (request, value head), so on a grid of fewer of them than the GPU has
multiprocessors its chain runs alone; there ``_tree_delta_fused_kernel`` (one launch, grid
``(B * Hv, Dv / BLOCK_V)``, each program reading its state slice and walking the blocks itself,
solving for the pseudo-values ``u`` of its value columns) is faster. ``split_mixing`` picks
(the H200 sweep in docs/HYBRID.md).
"""

from __future__ import annotations

import triton
import triton.language as tl

try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # Triton before 3.4: no grid dependency control, the apply follows the mixing
    gdc_launch_dependents = gdc_wait = None

from .hybrid_configs import DEEP_TREE_NODES, DELTA_BLOCK_T, hybrid_config

# The block inverse's alternating sum cancels terms far larger than its result for keys alike:
# TF32 operands ("tf32" for 16-bit inputs on a GPU) lose it, full float32 keeps it (docs/HYBRID.md).
INVERSE_PRECISION: tl.constexpr = tl.constexpr("ieee")


@triton.jit
def _path_gates(mask_row_ptr, stride_mt, nodes, in_tree, gates, cols, T):
    """[BT] sum of ``gates`` ([TPAD], node j's log decay at column j) over each node's path."""
    words = tl.load(mask_row_ptr + nodes[:, None] * stride_mt + (cols // 32)[None, :],
                    mask=in_tree[:, None] & (cols < T)[None, :], other=0)
    on_path = ((words >> (cols % 32)[None, :]) & 1) != 0
    return tl.sum(tl.where(on_path, gates[None, :], 0.0), 1)


@triton.jit
def _on_path(mask_row_ptr, stride_mt, rows, in_rows, cols):
    """[BT, BT] bool: node ``cols[j]`` is node ``rows[i]`` or one of its ancestors."""
    words = tl.load(mask_row_ptr + rows[:, None] * stride_mt + (cols // 32)[None, :], mask=in_rows[:, None], other=0)
    return ((words >> (cols % 32)[None, :]) & 1) != 0


@triton.jit
def _operand(x, dtype: tl.constexpr, UPCAST: tl.constexpr):
    """``x`` rounded to the MMA operand dtype; under the interpreter, whose 16-bit dots are not
    trustworthy, held in float32 after the rounding (the same values, multiplied exactly)."""
    x = x.to(dtype)
    if UPCAST:
        x = x.to(tl.float32)
    return x


@triton.jit
def _unit_lower_inverse(strict_lower, BT: tl.constexpr, DOUBLINGS: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """(I + L)^-1 for a strictly lower triangular [BT, BT] L (so L^BT = 0), as the product
    (I - L)(I + L^2)(I + L^4)...(I + L^(BT/2)) = sum_k (-L)^k: 2 log2(BT) - 2 small float32
    products (DOUBLINGS = log2(BT) - 1), where solving row by row would take BT - 1 dependent
    steps of two reductions each. The callers pass INVERSE_PRECISION."""
    r = tl.arange(0, BT)
    eye = tl.where(r[:, None] == r[None, :], 1.0, 0.0)
    inv = eye - strict_lower
    power = strict_lower
    for _ in tl.static_range(DOUBLINGS):
        power = tl.dot(power, power, input_precision=DOT_PRECISION)
        inv = tl.dot(inv, eye + power, input_precision=DOT_PRECISION)
    return inv


@triton.jit
def _earlier_block_terms(k_c, q_c, beta_c, gate_c, k_2, gate_2, on_path, DOT_PRECISION: tl.constexpr):
    """This block's rows against an earlier block's: the keys' coupling (into the inverse's right-hand
    side) and the queries' attention, each decayed along the row's own path (0 off it)."""
    decay = tl.where(on_path, tl.exp(gate_c[:, None] - gate_2[None, :]), 0.0)
    coupling = beta_c[:, None] * tl.dot(k_c, tl.trans(k_2), input_precision=DOT_PRECISION) * decay
    attend = tl.dot(q_c, tl.trans(k_2), input_precision=DOT_PRECISION) * decay
    return coupling, attend


@triton.jit
def _diagonal_block_terms(k_c, q_c, beta_c, gate_c, on_path, blk, BT: tl.constexpr, DOUBLINGS: tl.constexpr,
                          DOT_PRECISION: tl.constexpr):
    """The block against itself: the inverse of its unit lower coupling, and its queries' attention."""
    decay = tl.where(on_path, tl.exp(gate_c[:, None] - gate_c[None, :]), 0.0)
    coupling = tl.where(blk[:, None] > blk[None, :],
                        beta_c[:, None] * tl.dot(k_c, tl.trans(k_c), input_precision=DOT_PRECISION) * decay, 0.0)
    inverse = _unit_lower_inverse(coupling, BT, DOUBLINGS, INVERSE_PRECISION)
    attend = tl.dot(q_c, tl.trans(k_c), input_precision=DOT_PRECISION) * decay
    return inverse, attend


@triton.jit
def _tree_delta_mix_kernel(q_ptr, k_ptr, g_ptr, beta_ptr, mask_ptr, mix_ptr, gate_ptr, ws_ptr,
                           T, HV, GROUP,
                           stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
                           stride_gb, stride_gt, stride_gh, stride_bb, stride_bt, stride_bh, stride_mb, stride_mt,
                           DK: tl.constexpr, BT: tl.constexpr, TPAD: tl.constexpr, DOT_PRECISION: tl.constexpr,
                           UPCAST: tl.constexpr, DOUBLINGS: tl.constexpr, LAUNCH_DEPENDENTS: tl.constexpr):
    if LAUNCH_DEPENDENTS:  # the apply may start (and stream its state) once every program has started
        gdc_launch_dependents()
    pid = tl.program_id(0)
    b = (pid // HV).to(tl.int64)
    hv = pid % HV
    hk = hv // GROUP
    dk = tl.arange(0, DK)
    blk = tl.arange(0, BT)
    cols = tl.arange(0, TPAD)
    q_base = q_ptr + b * stride_qb + hk * stride_qh
    k_base = k_ptr + b * stride_kb + hk * stride_kh
    beta_base = beta_ptr + b * stride_bb + hv * stride_bh
    mask_rows = mask_ptr + b * stride_mb
    # W [T, TPAD] and G [TPAD] of this (request, value head); the workspace holds N's rows [T, TPAD]
    mix = mix_ptr + pid.to(tl.int64) * T * TPAD
    gate_out = gate_ptr + pid.to(tl.int64) * TPAD
    ws = ws_ptr + pid.to(tl.int64) * T * TPAD
    in_dtype: tl.constexpr = q_ptr.dtype.element_ty

    gates = tl.load(g_ptr + b * stride_gb + cols * stride_gt + hv * stride_gh, mask=cols < T, other=0.0)
    gates = gates.to(tl.float32)
    beta_cols = tl.load(beta_base + cols * stride_bt, mask=cols < T, other=0.0).to(tl.float32)
    num_blocks = tl.cdiv(T, BT)
    for c in range(num_blocks):
        rows = c * BT + blk
        in_rows = rows < T
        k_c = _operand(tl.load(k_base + rows[:, None] * stride_kt + dk[None, :], mask=in_rows[:, None], other=0.0),
                       in_dtype, UPCAST)
        q_c = _operand(tl.load(q_base + rows[:, None] * stride_qt + dk[None, :], mask=in_rows[:, None], other=0.0),
                       in_dtype, UPCAST)
        beta_c = tl.load(beta_base + rows * stride_bt, mask=in_rows, other=0.0).to(tl.float32)
        gate_c = _path_gates(mask_rows, stride_mt, rows, in_rows, gates, cols, T)
        inverse_rhs = tl.where(rows[:, None] == cols[None, :], 1.0, 0.0)  # this block's rows of I
        mixed = tl.zeros((BT, TPAD), dtype=tl.float32)
        for c2 in range(c):
            rows2 = c2 * BT + blk
            k_2 = _operand(tl.load(k_base + rows2[:, None] * stride_kt + dk[None, :]), in_dtype, UPCAST)
            n_2 = _operand(tl.load(ws + rows2[:, None] * TPAD + cols[None, :]), in_dtype, UPCAST)
            coupling, attend = _earlier_block_terms(k_c, q_c, beta_c, gate_c, k_2, tl.load(gate_out + rows2),
                                                    _on_path(mask_rows, stride_mt, rows, in_rows, rows2),
                                                    DOT_PRECISION)
            inverse_rhs -= tl.dot(_operand(coupling, in_dtype, UPCAST), n_2, input_precision=DOT_PRECISION)
            mixed += tl.dot(_operand(attend, in_dtype, UPCAST), n_2, input_precision=DOT_PRECISION)
        inverse, attend = _diagonal_block_terms(k_c, q_c, beta_c, gate_c,
                                                _on_path(mask_rows, stride_mt, rows, in_rows, rows), blk, BT,
                                                DOUBLINGS, DOT_PRECISION)
        n_c = tl.dot(_operand(inverse, in_dtype, UPCAST), _operand(inverse_rhs, in_dtype, UPCAST),
                     input_precision=DOT_PRECISION).to(in_dtype)
        mixed += tl.dot(_operand(attend, in_dtype, UPCAST), _operand(n_c, in_dtype, UPCAST),
                        input_precision=DOT_PRECISION)
        tl.store(mix + rows[:, None] * TPAD + cols[None, :], (mixed * beta_cols[None, :]).to(in_dtype),
                 mask=in_rows[:, None])
        tl.store(gate_out + rows, gate_c)
        if c + 1 < num_blocks:  # later blocks read this one's rows of N and its gates
            tl.store(ws + rows[:, None] * TPAD + cols[None, :], n_c)
            tl.debug_barrier()


@triton.jit
def _tree_delta_apply_kernel(q_ptr, k_ptr, v_ptr, state_ptr, mix_ptr, gate_ptr, out_ptr, T, scale, HV, GROUP,
                             stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
                             stride_vb, stride_vt, stride_vh, stride_sb, stride_sh, stride_sk,
                             stride_ob, stride_ot, stride_oh,
                             DK: tl.constexpr, BLOCK_V: tl.constexpr, BR: tl.constexpr, TPAD: tl.constexpr,
                             DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr, WAIT_FOR_MIX: tl.constexpr):
    pid = tl.program_id(1)
    b = (pid // HV).to(tl.int64)
    hv = pid % HV
    hk = hv // GROUP
    dk = tl.arange(0, DK)
    dv = tl.program_id(0) * BLOCK_V + tl.arange(0, BLOCK_V)
    in_dtype: tl.constexpr = q_ptr.dtype.element_ty
    out_dtype: tl.constexpr = out_ptr.dtype.element_ty
    mix = mix_ptr + pid.to(tl.int64) * T * TPAD
    gate_in = gate_ptr + pid.to(tl.int64) * TPAD
    q_base = q_ptr + b * stride_qb + hk * stride_qh
    k_base = k_ptr + b * stride_kb + hk * stride_kh
    v_base = v_ptr + b * stride_vb + hv * stride_vh
    o_base = out_ptr + b * stride_ob + hv * stride_oh
    blk = tl.arange(0, BR)

    state = tl.load(state_ptr + b * stride_sb + hv * stride_sh + dk[:, None] * stride_sk + dv[None, :])
    state = _operand(state, in_dtype, UPCAST)  # [DK, BLOCK_V], an MMA operand in the inputs' dtype
    if BR == TPAD:
        # the whole tree at once: both products with the state before the mixing matrix is waited
        # for, and `V - exp(G) K S` computed once for every row
        in_rows = blk < T
        q_all = _operand(tl.load(q_base + blk[:, None] * stride_qt + dk[None, :], mask=in_rows[:, None], other=0.0),
                         in_dtype, UPCAST)
        k_all = _operand(tl.load(k_base + blk[:, None] * stride_kt + dk[None, :], mask=in_rows[:, None], other=0.0),
                         in_dtype, UPCAST)
        v_all = tl.load(v_base + blk[:, None] * stride_vt + dv[None, :], mask=in_rows[:, None], other=0.0)
        q_state = tl.dot(q_all, state, input_precision=DOT_PRECISION)
        k_state = tl.dot(k_all, state, input_precision=DOT_PRECISION)
        if WAIT_FOR_MIX:  # launched as the mixing kernel's programmatic dependent: W and G are its outputs
            gdc_wait()
        gate_all = tl.exp(tl.load(gate_in + blk, mask=in_rows, other=0.0))
        written = v_all.to(tl.float32) - gate_all[:, None] * k_state
        w_all = _operand(tl.load(mix + blk[:, None] * TPAD + blk[None, :], mask=in_rows[:, None], other=0.0),
                         in_dtype, UPCAST)
        out = gate_all[:, None] * q_state + tl.dot(w_all, _operand(written, in_dtype, UPCAST),
                                                   input_precision=DOT_PRECISION)
        tl.store(o_base + blk[:, None] * stride_ot + dv[None, :], (scale * out).to(out_dtype), mask=in_rows[:, None])
    else:
        if WAIT_FOR_MIX:
            gdc_wait()
        for r in range(tl.cdiv(T, BR)):
            rows = r * BR + blk
            in_rows = rows < T
            q_r = _operand(tl.load(q_base + rows[:, None] * stride_qt + dk[None, :], mask=in_rows[:, None],
                                   other=0.0), in_dtype, UPCAST)
            gate_r = tl.load(gate_in + rows, mask=in_rows, other=0.0)
            out = tl.exp(gate_r)[:, None] * tl.dot(q_r, state, input_precision=DOT_PRECISION)
            for j in range(r + 1):  # W is lower triangular: ancestors precede their descendants
                cols = j * BR + blk
                in_cols = cols < T
                k_j = _operand(tl.load(k_base + cols[:, None] * stride_kt + dk[None, :], mask=in_cols[:, None],
                                       other=0.0), in_dtype, UPCAST)
                v_j = tl.load(v_base + cols[:, None] * stride_vt + dv[None, :], mask=in_cols[:, None], other=0.0)
                gate_j = tl.load(gate_in + cols, mask=in_cols, other=0.0)
                # what the nodes write before the mixing, V - exp(G) K S, recomputed per row block
                written = v_j.to(tl.float32) - tl.exp(gate_j)[:, None] * tl.dot(k_j, state,
                                                                                  input_precision=DOT_PRECISION)
                w_rj = _operand(tl.load(mix + rows[:, None] * TPAD + cols[None, :], mask=in_rows[:, None],
                                        other=0.0), in_dtype, UPCAST)
                out += tl.dot(w_rj, _operand(written, in_dtype, UPCAST), input_precision=DOT_PRECISION)
            tl.store(o_base + rows[:, None] * stride_ot + dv[None, :], (scale * out).to(out_dtype),
                     mask=in_rows[:, None])


@triton.jit
def _tree_delta_fused_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, state_ptr, mask_ptr, out_ptr, ws_u_ptr, ws_gate_ptr,
                       T, scale, HV, GROUP,
                       stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
                       stride_vb, stride_vt, stride_vh, stride_gb, stride_gt, stride_gh,
                       stride_bb, stride_bt, stride_bh, stride_sb, stride_sh, stride_sk,
                       stride_mb, stride_mt, stride_ob, stride_ot, stride_oh,
                       DK: tl.constexpr, DV: tl.constexpr, BLOCK_V: tl.constexpr, BT: tl.constexpr, TPAD: tl.constexpr, DOT_PRECISION: tl.constexpr,
                       UPCAST: tl.constexpr, DOUBLINGS: tl.constexpr):
    pid = tl.program_id(0)
    b = (pid // HV).to(tl.int64)
    hv = pid % HV
    hk = hv // GROUP
    dk = tl.arange(0, DK)
    dv = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    blk = tl.arange(0, BT)
    cols = tl.arange(0, TPAD)

    q_base = q_ptr + b * stride_qb + hk * stride_qh
    k_base = k_ptr + b * stride_kb + hk * stride_kh
    v_base = v_ptr + b * stride_vb + hv * stride_vh
    o_base = out_ptr + b * stride_ob + hv * stride_oh
    beta_base = beta_ptr + b * stride_bb + hv * stride_bh
    mask_rows = mask_ptr + b * stride_mb
    # this program's workspace: pseudo-values [T, DV] of its head (its own columns), gates [TPAD]
    ws_u = ws_u_ptr + pid.to(tl.int64) * T * DV
    ws_gate = ws_gate_ptr + (pid * tl.num_programs(1) + tl.program_id(1)) * TPAD
    in_dtype: tl.constexpr = q_ptr.dtype.element_ty
    out_dtype: tl.constexpr = out_ptr.dtype.element_ty

    state = tl.load(state_ptr + b * stride_sb + hv * stride_sh + dk[:, None] * stride_sk + dv[None, :])
    state = _operand(state, in_dtype, UPCAST)  # [DK, BLOCK_V], an MMA operand in the inputs' dtype
    gates = tl.load(g_ptr + b * stride_gb + cols * stride_gt + hv * stride_gh, mask=cols < T, other=0.0)
    gates = gates.to(tl.float32)
    num_blocks = tl.cdiv(T, BT)
    for c in range(num_blocks):
        rows = c * BT + blk
        in_rows = rows < T
        k_c = tl.load(k_base + rows[:, None] * stride_kt + dk[None, :], mask=in_rows[:, None], other=0.0)
        k_c = _operand(k_c, in_dtype, UPCAST)
        q_c = tl.load(q_base + rows[:, None] * stride_qt + dk[None, :], mask=in_rows[:, None], other=0.0)
        q_c = _operand(q_c, in_dtype, UPCAST)
        v_c = tl.load(v_base + rows[:, None] * stride_vt + dv[None, :], mask=in_rows[:, None], other=0.0)
        beta_c = tl.load(beta_base + rows * stride_bt, mask=in_rows, other=0.0).to(tl.float32)
        gate_c = _path_gates(mask_rows, stride_mt, rows, in_rows, gates, cols, T)
        rhs = beta_c[:, None] * (v_c.to(tl.float32)
                                 - tl.exp(gate_c)[:, None] * tl.dot(k_c, state, input_precision=DOT_PRECISION))
        out = tl.exp(gate_c)[:, None] * tl.dot(q_c, state, input_precision=DOT_PRECISION)
        for c2 in range(c):
            rows2 = c2 * BT + blk
            k_2 = _operand(tl.load(k_base + rows2[:, None] * stride_kt + dk[None, :]), in_dtype, UPCAST)
            u_2 = _operand(tl.load(ws_u + rows2[:, None] * DV + dv[None, :]), out_dtype, UPCAST)
            coupling, attend = _earlier_block_terms(k_c, q_c, beta_c, gate_c, k_2, tl.load(ws_gate + rows2),
                                                    _on_path(mask_rows, stride_mt, rows, in_rows, rows2),
                                                    DOT_PRECISION)
            rhs -= tl.dot(_operand(coupling, out_dtype, UPCAST), u_2, input_precision=DOT_PRECISION)
            out += tl.dot(_operand(attend, out_dtype, UPCAST), u_2, input_precision=DOT_PRECISION)
        inverse, attend = _diagonal_block_terms(k_c, q_c, beta_c, gate_c,
                                                _on_path(mask_rows, stride_mt, rows, in_rows, rows), blk, BT,
                                                DOUBLINGS, DOT_PRECISION)
        u_c = tl.dot(_operand(inverse, in_dtype, UPCAST), _operand(rhs, in_dtype, UPCAST),
                     input_precision=DOT_PRECISION).to(out_dtype)
        out += tl.dot(_operand(attend, out_dtype, UPCAST), _operand(u_c, out_dtype, UPCAST),
                      input_precision=DOT_PRECISION)
        tl.store(o_base + rows[:, None] * stride_ot + dv[None, :], (scale * out).to(out_dtype),
                 mask=in_rows[:, None])
        if c + 1 < num_blocks:  # later blocks read this one's u and G
            tl.store(ws_u + rows[:, None] * DV + dv[None, :], u_c)
            tl.store(ws_gate + rows, gate_c)
            tl.debug_barrier()


def check_triton_dims(key_dim: int, value_dim: int, block_v: int) -> None:
    for name, dim in (("Dk", key_dim), ("Dv", value_dim)):
        if dim < 16 or dim & (dim - 1):
            raise ValueError(f"the Triton hybrid kernels need {name} a power of two >= 16; got {dim} "
                             "(use impl='torch' for other head dims)")
    if value_dim % min(block_v, value_dim):
        raise AssertionError(f"Dv={value_dim} is not a multiple of the {block_v}-column value block")


def last_dim_contiguous(*tensors):
    return [t if t.stride(-1) == 1 else t.contiguous() for t in tensors]


def tree_delta_mixing(q, k, g, beta, ancestor_mask, value_heads: int, config=None):
    """The first launch: ``(mix, gates)``, each (request, value head)'s ``W`` rows [T, TPAD] in
    q's dtype and path gates [TPAD] float32, flattened. The benchmark times it alone. Its
    programs let the apply start (:func:`dependent_launch`) as soon as every one has started."""
    import torch

    batch, num_nodes, key_heads, key_dim = q.shape
    cfg = config or hybrid_config(q.device)
    heads = batch * value_heads
    padded = padded_nodes(num_nodes)
    mix = torch.empty(heads * num_nodes * padded, dtype=q.dtype, device=q.device)
    gates = torch.empty(heads * padded, dtype=torch.float32, device=q.device)
    # rows of the inverse a later block reads (none for a tree of at most 16 nodes)
    workspace = torch.empty(heads * num_nodes * padded if num_nodes > DELTA_BLOCK_T else 1, dtype=q.dtype,
                            device=q.device)
    _tree_delta_mix_kernel[(heads,)](
        q, k, g, beta, ancestor_mask, mix, gates, workspace, num_nodes, value_heads, value_heads // key_heads,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        g.stride(0), g.stride(1), g.stride(2), beta.stride(0), beta.stride(1), beta.stride(2),
        ancestor_mask.stride(0), ancestor_mask.stride(1),
        DK=key_dim, BT=DELTA_BLOCK_T, TPAD=padded, DOT_PRECISION=dot_precision(q), UPCAST=upcast(q),
        DOUBLINGS=DELTA_BLOCK_T.bit_length() - 2, LAUNCH_DEPENDENTS=dependent_launch(q, cfg),
        num_warps=cfg.delta_mix_warps,
    )
    return mix, gates


def dependent_launch(q, cfg) -> bool:
    """The apply as the mixing kernel's programmatic dependent (its programs start while the mixing
    runs, load their state slice and multiply it, then wait for ``W``): on a GPU of compute
    capability 9 or more whose Triton has grid dependency control, where the table says so."""
    import torch

    return (cfg.delta_dependent_launch and q.is_cuda and gdc_wait is not None
            and torch.cuda.get_device_capability(q.device)[0] >= 9)


def padded_nodes(num_nodes: int) -> int:
    return max(DELTA_BLOCK_T, triton.next_power_of_2(num_nodes))


def dot_precision(q) -> str:
    import torch

    return "ieee" if q.dtype == torch.float32 or not q.is_cuda else "tf32"


def upcast(q) -> bool:
    """Under the interpreter 16-bit operands are held in float32 after rounding (see _operand)."""
    import torch

    return not q.is_cuda and q.dtype != torch.float32


def tree_gated_delta_rule_triton(q, k, v, g, beta, state, ancestor_mask, scale: float, config=None):
    """Launcher: inputs with any strides but a unit last one (copied otherwise); one launch or two
    (:func:`split_mixing`).
    ``config``: a :class:`HybridConfig` instead of the table's (the benchmark's sweep)."""
    import torch

    batch, num_nodes, key_heads, key_dim = q.shape
    value_heads, value_dim = v.shape[2:]
    cfg = config or hybrid_config(q.device)
    block_v = min(cfg.delta_block_v, value_dim)
    check_triton_dims(key_dim, value_dim, block_v)
    if state.dtype != torch.float32:
        raise ValueError(f"state must be float32 for the Triton kernel; got {state.dtype}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k and v must share a dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    q, k, v, state, ancestor_mask = last_dim_contiguous(q, k, v, state, ancestor_mask)
    out = torch.empty(batch, num_nodes, value_heads, value_dim, dtype=v.dtype, device=v.device)
    if batch == 0 or num_nodes == 0:
        return out
    padded = padded_nodes(num_nodes)
    if not split_mixing(batch * value_heads, num_nodes, cfg):
        return _fused(q, k, v, g, beta, state, ancestor_mask, scale, out, block_v, padded, cfg)
    mix, gates = tree_delta_mixing(q, k, g, beta, ancestor_mask, value_heads, cfg)
    early = dependent_launch(q, cfg)
    _tree_delta_apply_kernel[(value_dim // block_v, batch * value_heads)](
        q, k, v, state, mix, gates, out, num_nodes, scale, value_heads, value_heads // key_heads,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), state.stride(0), state.stride(1), state.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        DK=key_dim, BLOCK_V=block_v, BR=min(padded, cfg.delta_rows), TPAD=padded, DOT_PRECISION=dot_precision(q),
        UPCAST=upcast(q), WAIT_FOR_MIX=early, num_warps=cfg.delta_warps, **({"launch_pdl": True} if early else {}),
    )
    return out


def split_mixing(heads: int, nodes: int, cfg) -> bool:
    """Two launches (mixing matrix, then apply) where the (request, value head) pairs fill the
    GPU, else the fused kernel (below that its two programs per head beat the mixing chain, which
    grows with the tree)."""
    return heads >= (cfg.delta_split_heads_deep if nodes > DEEP_TREE_NODES else cfg.delta_split_heads)


def _fused(q, k, v, g, beta, state, ancestor_mask, scale, out, block_v, padded, cfg):
    import torch

    batch, num_nodes, key_heads, key_dim = q.shape
    value_heads, value_dim = v.shape[2:]
    grid = (batch * value_heads, value_dim // block_v)
    # workspaces of the blocks a later block reads (none for a tree of at most 16 nodes)
    read_later = num_nodes > DELTA_BLOCK_T
    ws_u = torch.empty(grid[0] * num_nodes * value_dim if read_later else 1, dtype=v.dtype, device=q.device)
    ws_gate = torch.empty(grid[0] * grid[1] * padded if read_later else 1, dtype=torch.float32, device=q.device)
    _tree_delta_fused_kernel[grid](
        q, k, v, g, beta, state, ancestor_mask, out, ws_u, ws_gate, num_nodes, scale, value_heads,
        value_heads // key_heads,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), g.stride(0), g.stride(1), g.stride(2),
        beta.stride(0), beta.stride(1), beta.stride(2), state.stride(0), state.stride(1), state.stride(2),
        ancestor_mask.stride(0), ancestor_mask.stride(1), out.stride(0), out.stride(1), out.stride(2),
        DK=key_dim, DV=value_dim, BLOCK_V=block_v, BT=DELTA_BLOCK_T, TPAD=padded,
        DOUBLINGS=DELTA_BLOCK_T.bit_length() - 2, DOT_PRECISION=dot_precision(q), UPCAST=upcast(q),
        num_warps=cfg.delta_warps,
    )
    return out
