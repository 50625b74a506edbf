"""``commit_recurrent_state``: a hybrid layer's committed state after the accepted path.

After greedy acceptance (:func:`tree_accept_greedy`) the accepted nodes form one path from the
root, so the new recurrent state is the sequential gated delta rule along that path from the
committed state, and the new conv state is the last K - 1 conv inputs of the committed sequence
followed by the path's. The commit replays the path (``path_len`` steps of a rank-one update on
the state, in float32) rather than keeping a state per tree node: T states of Dk x Dv floats per
head would cost T times the state's memory and writes, where the replay reads the path's k, v,
g and beta only. Autoregressive decoding is the path of one node.

Layouts as in :mod:`specdec_kernels.tree_delta` and :mod:`specdec_kernels.tree_conv`; ``path``
[B, T] int32 padded with -1 and ``path_len`` [B] int32 as in :class:`AcceptResult`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .impl import check_distinct_elements, resolve_impl
from .tensor_checks import check_float, check_index, check_same_device
from .tree_accept import check_accepted_path
from .tree_delta import check_delta_args


def check_commit_args(state: Tensor, conv_state: Tensor, conv_inputs: Tensor, k: Tensor, v: Tensor, g: Tensor,
                      beta: Tensor, path: Tensor, path_len: Tensor) -> None:
    check_same_device(("state", "conv_state", "conv_inputs", "k", "v", "g", "beta", "path", "path_len"),
                      state, conv_state, conv_inputs, k, v, g, beta, path, path_len)
    # k and v named here, before the delta rule's checks name them beside its q
    if v.dtype != k.dtype:
        raise ValueError(f"v must be k's dtype ({k.dtype}), got {v.dtype}; pass v.to(k.dtype)")
    check_float("k and v", k, "k.float(), v.float()", "float tensors (fp16 / bf16 / fp32)")
    check_delta_args(k, k, v, g, beta, state)
    batch, num_nodes = k.shape[:2]
    if conv_inputs.dim() != 3 or conv_inputs.shape[:2] != (batch, num_nodes):
        raise ValueError(f"conv_inputs must be [B, T, C] with B, T = {(batch, num_nodes)}; got {tuple(conv_inputs.shape)}")
    if conv_state.dim() != 3 or conv_state.shape[:2] != (batch, conv_inputs.shape[2]):
        raise ValueError(f"conv_state must be [B, C, K - 1] with B, C = {(batch, conv_inputs.shape[2])}; "
                         f"got {tuple(conv_state.shape)}")
    # integer inputs were truncated into the conv state silently
    check_float("conv_inputs", conv_inputs)
    # updated in place: a .float() passed and dropped would lose the update
    check_float("conv_state", conv_state, "conv_state.float() and keep that copy (updated in place)")
    if path.shape != (batch, num_nodes) or path_len.shape != (batch,):
        raise ValueError(f"path must be [B, T] = {(batch, num_nodes)} and path_len [B]; got {tuple(path.shape)}, "
                         f"{tuple(path_len.shape)}")
    # a float one was truncated, or failed to compile in Triton
    check_index("path", path, "node indices")
    check_index("path_len", path_len, "path lengths")
    check_accepted_path(path, path_len)
    check_distinct_elements(state=state, conv_state=conv_state)


def delta_rule_step(state: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor) -> Tensor:
    """One gated delta rule step for every (request, value head): state [B, Hv, Dk, Dv], k [B, Hv, Dk],
    v [B, Hv, Dv], g and beta [B, Hv]; returns the new state."""
    decayed = state * torch.exp(g)[..., None, None]
    delta = beta[..., None] * (v - torch.einsum("bhkv,bhk->bhv", decayed, k))
    return decayed + k[..., :, None] * delta[..., None, :]


def commit_recurrent_state_reference(state: Tensor, conv_state: Tensor, conv_inputs: Tensor, k: Tensor, v: Tensor,
                                     g: Tensor, beta: Tensor, path: Tensor, path_len: Tensor) -> None:
    """Torch reference: the path's steps for every request at once (a finished request keeps its
    state), then one gather for the conv state."""
    batch = k.shape[0]
    group = v.shape[2] // k.shape[2]
    rows = torch.arange(batch, device=k.device)
    steps = path_len.to(torch.int64)
    new = state.clone()
    for step in range(int(steps.max()) if batch else 0):
        node = path[:, step].to(torch.int64).clamp(min=0)
        updated = delta_rule_step(new, k[rows, node].float().repeat_interleave(group, dim=1), v[rows, node].float(),
                                  g[rows, node].float(), beta[rows, node].float())
        new = torch.where((step < steps)[:, None, None, None], updated, new)
    state.copy_(new)
    taps = conv_state.shape[2]
    # the committed inputs then the path's; the new state is the K - 1 ending at the path's end
    path_inputs = torch.gather(conv_inputs, 1, path.to(torch.int64).clamp(min=0)[..., None].expand(-1, -1, conv_inputs.shape[2]))
    history = torch.cat([conv_state, path_inputs.transpose(1, 2).to(conv_state.dtype)], dim=2)
    index = (steps[:, None] + torch.arange(taps, device=k.device))[:, None, :].expand(-1, conv_state.shape[1], -1)
    conv_state.copy_(torch.gather(history, 2, index))


def commit_recurrent_state(state: Tensor, conv_state: Tensor, conv_inputs: Tensor, k: Tensor, v: Tensor, g: Tensor,
                           beta: Tensor, path: Tensor, path_len: Tensor, impl: str = "auto") -> None:
    """Advance one hybrid layer's recurrent and conv state along the accepted path, in place.

    state:       [B, Hv, Dk, Dv] float32, modified in place.
    conv_state:  [B, C, K - 1] float, modified in place (newest input last).
    conv_inputs: [B, T, C] float, the tree's conv inputs (what :func:`tree_causal_conv1d` convolved).
    k, v, g, beta: the tree's, as passed to :func:`tree_gated_delta_rule` ([B, T, Hk, Dk],
                 [B, T, Hv, Dv], [B, T, Hv], [B, T, Hv]; k L2-normalised as there).
    path, path_len: from :func:`tree_accept_greedy` (path_len >= 1).
    The Triton path is one launch for both states and never synchronises with the host; it needs
    the state's last dim contiguous, a conv kernel K >= 2, and Dk, Dv powers of two >= 16 (else a
    ValueError: impl="torch" takes them).
    """
    check_commit_args(state, conv_state, conv_inputs, k, v, g, beta, path, path_len)
    if resolve_impl(impl, state, conv_state, k, path) == "torch":
        commit_recurrent_state_reference(state, conv_state, conv_inputs, k, v, g, beta, path, path_len)
        return
    from .recurrent_commit_triton import commit_recurrent_state_triton

    commit_recurrent_state_triton(state, conv_state, conv_inputs, k, v, g, beta, path, path_len)
