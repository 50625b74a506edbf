"""Inputs and an independent float64 oracle for the hybrid-layer kernel tests.

The oracle knows nothing of ancestor masks or the chunked form: for every node it walks the
node's path from the root (a plain walk up ``parents``) and runs the gated delta rule, or the
causal convolution, over that path as an ordinary sequence, in float64.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from kernel_cases import ancestor_chain, random_parents
from specdec_kernels import ancestor_mask_from_parents

# The four tree shapes of the tests; a ragged batch gives each request another one.
SHAPES = ("chain", "fanout", "best_first", "deep_narrow")


def ragged_parents(batch: int, num_nodes: int, first_shape: str, gen: torch.Generator) -> torch.Tensor:
    """[B, T] int32: request b's tree has shape SHAPES[(index of first_shape + b) % 4]."""
    start = SHAPES.index(first_shape)
    return torch.stack([random_parents(num_nodes, SHAPES[(start + b) % len(SHAPES)], gen) for b in range(batch)])


def delta_inputs(batch: int, num_nodes: int, key_heads: int, group: int, key_dim: int, value_dim: int,
                 dtype: torch.dtype, gen: torch.Generator) -> dict:
    """q, k (L2-normalised, as the layer feeds them), v, g (<= 0), beta in (0, 1), a float32
    state of the size a long sequence leaves; all on the CPU."""
    value_heads = key_heads * group

    def normed(*shape):
        return F.normalize(torch.randn(*shape, generator=gen), dim=-1).to(dtype)

    return dict(
        q=normed(batch, num_nodes, key_heads, key_dim), k=normed(batch, num_nodes, key_heads, key_dim),
        v=torch.randn(batch, num_nodes, value_heads, value_dim, generator=gen).to(dtype),
        # decays from 0.5 to ~1 per token, as softplus-gated layers give
        g=-torch.rand(batch, num_nodes, value_heads, generator=gen) * 0.7,
        beta=torch.rand(batch, num_nodes, value_heads, generator=gen).to(dtype),
        state=torch.randn(batch, value_heads, key_dim, value_dim, generator=gen) / math.sqrt(key_dim),
    )


def step64(state, k, v, g, beta):
    """One gated delta rule step in float64 over all value heads: state [Hv, Dk, Dv]."""
    state = state * torch.exp(g)[:, None, None]
    delta = beta[:, None] * (v - torch.einsum("hkv,hk->hv", state, k))
    return state + k[:, :, None] * delta[:, None, :]


def run_path64(state, k, v, g, beta, nodes, group):
    """One request's state [Hv, Dk, Dv] after the gated delta rule over ``nodes`` in order, float64."""
    d = torch.float64
    s = state.to(d)
    for j in nodes:
        s = step64(s, k[j].to(d).repeat_interleave(group, 0), v[j].to(d), g[j].to(d), beta[j].to(d))
    return s


def path_oracle(q, k, v, g, beta, state, parents, scale):
    """Outputs [B, T, Hv, Dv] in float64, each node's path run as a plain sequence from the
    committed state."""
    batch, num_nodes = q.shape[:2]
    value_heads, value_dim = v.shape[2:]
    group = value_heads // q.shape[2]
    out = torch.zeros(batch, num_nodes, value_heads, value_dim, dtype=torch.float64)
    for b in range(batch):
        for i in range(num_nodes):
            s = run_path64(state[b], k[b], v[b], g[b], beta[b], ancestor_chain(parents[b], i), group)
            out[b, i] = scale * torch.einsum("hkv,hk->hv", s, q[b, i].double().repeat_interleave(group, 0))
    return out


def conv_oracle(x, weight, bias, conv_state, parents, activation):
    """[B, T, C] float64: node i convolves the K inputs along its own path (older ones from the
    committed conv state) as an ordinary causal convolution would over that sequence."""
    batch, num_nodes, channels = x.shape
    kernel = weight.shape[1]
    d = torch.float64
    out = torch.zeros(batch, num_nodes, channels, dtype=d)
    for b in range(batch):
        for i in range(num_nodes):
            seq = torch.cat([conv_state[b].to(d).t(), x[b, ancestor_chain(parents[b], i)].to(d)])
            window = seq[-kernel:]  # [K, C], oldest first
            value = (window * weight.to(d).t()).sum(0) + (bias.to(d) if bias is not None else 0)
            out[b, i] = F.silu(value) if activation == "silu" else value
    return out


def random_paths(parents: torch.Tensor, gen: torch.Generator, lengths=None):
    """(path [B, T] int32 padded with -1, path_len [B] int32): in each tree the path from the root
    to a random node, or to a node whose path has the asked length where one does."""
    batch, num_nodes = parents.shape
    path = torch.full((batch, num_nodes), -1, dtype=torch.int32)
    path_len = torch.zeros(batch, dtype=torch.int32)
    for b in range(batch):
        chains = [ancestor_chain(parents[b], i) for i in range(num_nodes)]
        if lengths is not None and any(len(c) == lengths[b] for c in chains):
            chain = next(c for c in chains if len(c) == lengths[b])
        else:
            chain = chains[int(torch.randint(num_nodes, (1,), generator=gen))]
        path[b, :len(chain)] = torch.tensor(chain, dtype=torch.int32)
        path_len[b] = len(chain)
    return path, path_len


def mask_of(parents: torch.Tensor) -> torch.Tensor:
    return ancestor_mask_from_parents(parents)
