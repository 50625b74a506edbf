"""The Gated DeltaNet (linear attention) layers of the hybrid presets, in Qwen3.5/3.6's shape.

A hybrid model interleaves these with full-attention layers (``full_attention_interval``: every
fourth layer is attention). Per layer: ``in_proj_qkv`` gives the q/k/v channels, which pass a
depthwise causal convolution (kernel 4, SiLU) before q and k are L2-normalised; ``in_proj_a``
and ``in_proj_b`` give the decay ``g = -exp(A_log) softplus(a + dt_bias)`` and the write
strength ``beta = sigmoid(b)``; the gated delta rule's output is RMS-normalised per head and
gated by ``silu(in_proj_z)`` before ``out_proj``. Each request carries a float32 recurrent state
[Hv, Dk, Dv] and its last K - 1 conv inputs.

A verify runs the tree through :func:`tree_causal_conv1d` and :func:`tree_gated_delta_rule` on
the tree's own ancestry (or, for the leaky ``chain`` mode the engine offers for comparison, on a
chain through the nodes in order), and keeps what :func:`commit_recurrent_state` needs to move
the states along the accepted path afterwards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

# Seeded-weight knobs: the layer's output is scaled like the attention's (model.py), and the
# decay (A_log) and write strength (b) are set so that a token's trace in the state lasts a few
# tokens: long enough that mixing another branch's tokens in changes the output.
LINEAR_OUT_GAIN = 0.45
A_LOG_RANGE = (-2.0, -0.5)
# Prompts go through the layer in chunks of this many tokens (a chain each, then committed).
PREFILL_CHUNK = 64


@dataclass(frozen=True)
class LinearAttentionConfig:
    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int = 4
    full_attention_interval: int = 4

    def __post_init__(self) -> None:
        if self.num_value_heads % self.num_key_heads:
            raise ValueError(f"num_value_heads={self.num_value_heads} is not a multiple of "
                             f"num_key_heads={self.num_key_heads}")
        if self.conv_kernel < 2:
            raise ValueError(f"conv_kernel must be >= 2, got {self.conv_kernel}")

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim

    @property
    def conv_channels(self) -> int:
        return 2 * self.key_dim + self.value_dim

    def is_linear(self, layer: int) -> bool:
        """Qwen3.5's pattern: layer i is full attention iff (i + 1) % interval == 0."""
        return (layer + 1) % self.full_attention_interval != 0


@dataclass(frozen=True)
class RecurrentBatch:
    """The linear layers' side of one verify over B requests (views into the decoder's states).

    state:         [linear layers, B, Hv, Dk, Dv] float32; read by the verify.
    conv_state:    [linear layers, B, C, K - 1]; read by the verify.
    parents, ancestor_mask: the tree as these layers see it ([B, T], [B, T, W]).
    saved:         filled by the verify, per linear layer: (conv inputs, k, v, g, beta), what
                   :func:`commit_recurrent_state` takes.
    """

    state: Tensor
    conv_state: Tensor
    parents: Tensor
    ancestor_mask: Tensor
    saved: list = field(default_factory=list)


def param_shapes(lin: LinearAttentionConfig, hidden: int) -> dict[str, tuple[int, ...]]:
    """Per-layer parameter shapes, Hugging Face Qwen3.5 names under ``linear_attn.``."""
    return {
        "linear_attn.in_proj_qkv.weight": (lin.conv_channels, hidden),
        "linear_attn.in_proj_z.weight": (lin.value_dim, hidden),
        "linear_attn.in_proj_b.weight": (lin.num_value_heads, hidden),
        "linear_attn.in_proj_a.weight": (lin.num_value_heads, hidden),
        "linear_attn.conv1d.weight": (lin.conv_channels, 1, lin.conv_kernel),
        "linear_attn.A_log": (lin.num_value_heads,),
        "linear_attn.dt_bias": (lin.num_value_heads,),
        "linear_attn.norm.weight": (lin.value_head_dim,),
        "linear_attn.out_proj.weight": (hidden, lin.value_dim),
    }


def seeded_params(lin: LinearAttentionConfig, hidden: int, randn, device) -> dict[str, Tensor]:
    """One layer's weights from ``randn(*shape, scale=...)`` (the model's seeded generator)."""
    heads = lin.num_value_heads
    low, high = A_LOG_RANGE
    return {
        "linear_attn.in_proj_qkv.weight": randn(lin.conv_channels, hidden, scale=1 / math.sqrt(hidden)),
        "linear_attn.in_proj_z.weight": randn(lin.value_dim, hidden, scale=1 / math.sqrt(hidden)),
        "linear_attn.in_proj_b.weight": randn(heads, hidden, scale=1 / math.sqrt(hidden)),
        "linear_attn.in_proj_a.weight": randn(heads, hidden, scale=1 / math.sqrt(hidden)),
        "linear_attn.conv1d.weight": randn(lin.conv_channels, 1, lin.conv_kernel, scale=1 / math.sqrt(lin.conv_kernel)),
        "linear_attn.A_log": torch.linspace(low, high, heads, device=device),
        "linear_attn.dt_bias": torch.zeros(heads, device=device),
        "linear_attn.norm.weight": torch.ones(lin.value_head_dim, device=device),
        "linear_attn.out_proj.weight": randn(hidden, lin.value_dim, scale=LINEAR_OUT_GAIN / math.sqrt(lin.value_dim)),
    }


def fused_layer(w, prefix: str) -> dict:
    """The layer's tensors as its forward passes use them (``w(name)`` casts and moves)."""
    p = prefix + "linear_attn."
    return {
        "in_t": torch.cat([w(p + "in_proj_qkv.weight"), w(p + "in_proj_z.weight"), w(p + "in_proj_b.weight"),
                           w(p + "in_proj_a.weight")]).t().contiguous(),
        "conv_w": w(p + "conv1d.weight")[:, 0].contiguous(),
        "decay_scale": -torch.exp(w(p + "A_log").float()),
        "dt_bias": w(p + "dt_bias").float(),
        "norm_w": w(p + "norm.weight"),
        "o_t": w(p + "out_proj.weight").t().contiguous(),
    }


def project(layer: dict, lin: LinearAttentionConfig, h: Tensor, shape: tuple[int, int]) -> tuple[Tensor, Tensor]:
    """(conv inputs [B, T, C], the rest [B, T, Hv * Dv + 2 Hv]: z, b, a) from the normed stream."""
    mixed = (h @ layer["in_t"]).view(*shape, -1)
    return mixed[..., :lin.conv_channels], mixed[..., lin.conv_channels:]


def mix(layer: dict, lin: LinearAttentionConfig, conv_inputs: Tensor, rest: Tensor, state: Tensor,
        conv_state: Tensor, parents: Tensor, ancestor_mask: Tensor, kernel_impl: str,
        eps: float) -> tuple[Tensor, tuple]:
    """Conv, gated delta rule and gated norm over a tree (or a chain) of T nodes per request.

    Returns the output [B, T, Hv * Dv] (before out_proj) and the commit's inputs.
    """
    from specdec_kernels import tree_causal_conv1d, tree_gated_delta_rule

    b, t = conv_inputs.shape[:2]
    conv = tree_causal_conv1d(conv_inputs, layer["conv_w"], None, conv_state, parents, "silu", impl=kernel_impl)
    q, k, v = conv.split([lin.key_dim, lin.key_dim, lin.value_dim], dim=-1)
    q = F.normalize(q.reshape(b, t, lin.num_key_heads, lin.key_head_dim).float(), dim=-1, eps=1e-6).to(v.dtype)
    k = F.normalize(k.reshape(b, t, lin.num_key_heads, lin.key_head_dim).float(), dim=-1, eps=1e-6).to(v.dtype)
    v = v.reshape(b, t, lin.num_value_heads, lin.value_head_dim).contiguous()
    z, gate_logit, decay_logit = rest.split([lin.value_dim, lin.num_value_heads, lin.num_value_heads], dim=-1)
    beta = torch.sigmoid(gate_logit.float())
    g = layer["decay_scale"] * F.softplus(decay_logit.float() + layer["dt_bias"])
    out = tree_gated_delta_rule(q, k, v, g, beta, state, ancestor_mask, impl=kernel_impl)
    out = F.rms_norm(out, (lin.value_head_dim,), layer["norm_w"], eps)
    out = out * F.silu(z.reshape(b, t, lin.num_value_heads, lin.value_head_dim))
    return out.reshape(b, t, lin.value_dim), (conv_inputs, k, v, g, beta)


def prefill_bucket(n: int) -> int:
    """The nodes a prefill chain of ``n`` prompt tokens runs at where the kernels compile: the
    tree delta kernel's own tile width (max(16, next power of two), capped at PREFILL_CHUNK)."""
    from specdec_kernels.hybrid_configs import DELTA_BLOCK_T

    return min(PREFILL_CHUNK, max(DELTA_BLOCK_T, 1 << (n - 1).bit_length()))


def prefill_buckets() -> tuple[int, ...]:
    """Every value :func:`prefill_bucket` takes: the chain lengths a start-up warm prefills."""
    return tuple(sorted({prefill_bucket(n) for n in range(1, PREFILL_CHUNK + 1)}))


def _padded(x: Tensor, nodes: int) -> Tensor:
    """``x`` [B, n, ·] as a fresh contiguous [B, nodes, ·] (zero rows after it): its strides, like
    its length, then depend on the bucket alone, not on the prompt's length."""
    return torch.cat((x, x.new_zeros(x.shape[0], nodes - x.shape[1], x.shape[2])), dim=1)


def prefill_chain(layer: dict, lin: LinearAttentionConfig, conv_inputs: Tensor, rest: Tensor, state: Tensor,
                  conv_state: Tensor, kernel_impl: str, eps: float, pad: bool | None = None) -> Tensor:
    """The layer over whole prompts [B, P] from the given states, in chains of PREFILL_CHUNK
    tokens, each verified and committed whole: the states end after the prompt (in place).

    ``pad`` (None: where the kernels run as Triton, which compiles a variant per node count and
    stride class) runs each chain at :func:`prefill_bucket` nodes, padding zero tokens after the
    real ones: they descend from the last real node, so no real node's output reads them, and the
    commit's path stops at the real count. A handful of variants then serve every prompt length.
    """
    from specdec_kernels import ancestor_mask_from_parents, commit_recurrent_state
    from specdec_kernels.impl import resolve_impl

    if pad is None:
        pad = resolve_impl(kernel_impl, state) == "triton"
    b, p = conv_inputs.shape[:2]
    outs = []
    for start in range(0, p, PREFILL_CHUNK):
        n = min(PREFILL_CHUNK, p - start)
        x, r = conv_inputs[:, start:start + n], rest[:, start:start + n]
        t = n
        if pad:
            t = prefill_bucket(n)
            x, r = _padded(x, t), _padded(r, t)
        chain = torch.arange(-1, t - 1, dtype=torch.int32, device=state.device).expand(b, t)
        out, saved = mix(layer, lin, x, r, state, conv_state, chain, ancestor_mask_from_parents(chain),
                         kernel_impl, eps)
        outs.append(out[:, :n])
        whole = torch.arange(t, dtype=torch.int32, device=state.device).expand(b, t)
        commit_recurrent_state(state, conv_state, *saved, whole, torch.full((b,), n, dtype=torch.int32,
                                                                            device=state.device), impl=kernel_impl)
    return torch.cat(outs, dim=1)
