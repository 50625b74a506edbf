"""SGLang's tree-verify attention, for the bench's SGLang column.

On its Triton attention backend SGLang verifies a tree (EAGLE top-k > 1, DDTree) through its
prefill kernel, ``extend_attention_fwd``, with a custom mask: one program per (request, query
head, block of query rows) reads the request's whole prefix through ``kv_indices`` (no custom mask
there), then the tree rows under a flattened boolean ``[T, L_b + T]`` mask a request. This module
lays a batch of :func:`specdec_kernels.tree_verify_attention` inputs out as that backend does for a
target-verify batch, once per input set, so that a timed call is SGLang's kernel alone.

SGLang need not be installed whole: ``bash scripts/pack-sglang.sh [VERSION]`` keeps a release's
attention-kernel modules (and the platform checks they import) in a directory to put on
``PYTHONPATH``. The kernel is found where 0.5.23 keeps it (its kernel library) or 0.5.15 did.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

# Where SGLang keeps the kernel: its kernel library in newer releases (0.5.23), its attention
# layers' Triton ops before (0.5.15).
EXTEND_ATTENTION_MODULES = ("sglang.kernels.ops.attention.extend_attention",
                            "sglang.srt.layers.attention.triton_ops.extend_attention")


def extend_attention_module():
    """SGLang's extend-attention module, from the first place it imports from; raises the last
    place's error where none does."""
    import importlib

    for name in EXTEND_ATTENTION_MODULES:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not name.startswith(exc.name):
                raise  # the module is there but one of its own imports is not
            error = exc
    raise error


def sglang_tree_path_unusable() -> str | None:
    """Why SGLang's extend-attention kernel cannot run here (None: it imports)."""
    try:
        extend_attention_module()
    except Exception as exc:  # not installed, or its imports fail on this machine
        text = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
        return (f"{type(exc).__name__}: {text} (install SGLang, or put the directory "
                "`bash scripts/pack-sglang.sh` writes on PYTHONPATH)")
    return None


@dataclass(frozen=True)
class SglangVerifyBatch:
    """A target-verify batch as SGLang's Triton backend hands it to ``extend_attention_fwd``."""

    q_extend: Tensor  # [B*T, Hq, D], the tree's queries
    k_extend: Tensor  # [B*T, Hkv, D], the tree's own K rows (also in the pool, as in SGLang)
    v_extend: Tensor
    o_extend: Tensor  # [B*T, Hq, D], written by the call
    k_buffer: Tensor  # the KV pool, [slots, Hkv, D]: here the caches' rows, request after request
    v_buffer: Tensor
    qo_indptr: Tensor  # int32 [B+1], T a request
    kv_indptr: Tensor  # int32 [B+1], the prefix lengths' prefix sums
    kv_indices: Tensor  # int64, each request's prefix slots in the pool
    custom_mask: Tensor  # bool, each request's [T, L_b + T] visibility, flattened
    mask_indptr: Tensor  # int64 [B+1]
    num_nodes: int
    sm_scale: float

    def output(self) -> Tensor:
        """The last call's output as ``[B, T, Hq, D]``."""
        rows, heads, dim = self.o_extend.shape
        return self.o_extend.view(rows // self.num_nodes, self.num_nodes, heads, dim)


def sglang_verify_batch(q: Tensor, k_cache: Tensor, v_cache: Tensor, cache_lens: Tensor,
                        ancestor_mask: Tensor, sm_scale: float | None = None) -> SglangVerifyBatch:
    """The SGLang layout of one call's inputs (the ``tree_verify_attention`` contract). Reads the
    lengths on the host: it is set-up, not the timed call."""
    from .tree_verify import tree_attention_mask

    batch, num_nodes, q_heads, head_dim = q.shape
    slots, kv_heads = k_cache.shape[1], k_cache.shape[2]
    device = q.device
    lens = [int(n) for n in cache_lens.tolist()]
    pool = dict(dtype=torch.int64, device=device)
    kv_indices = torch.cat([b * slots + torch.arange(n, **pool) for b, n in enumerate(lens)])
    tree_rows = torch.cat([b * slots + n + torch.arange(num_nodes, **pool) for b, n in enumerate(lens)])
    k_buffer = k_cache.reshape(batch * slots, kv_heads, head_dim)
    v_buffer = v_cache.reshape(batch * slots, kv_heads, head_dim)
    visible = tree_attention_mask(cache_lens, ancestor_mask, slots)  # [B, T, S]
    custom_mask = torch.cat([visible[b, :, :n + num_nodes].reshape(-1) for b, n in enumerate(lens)])
    per_request = torch.tensor([0] + lens, dtype=torch.int64, device=device)
    return SglangVerifyBatch(
        q_extend=q.reshape(batch * num_nodes, q_heads, head_dim).contiguous(),
        k_extend=k_buffer.index_select(0, tree_rows).contiguous(),
        v_extend=v_buffer.index_select(0, tree_rows).contiguous(),
        o_extend=torch.empty(batch * num_nodes, q_heads, head_dim, dtype=q.dtype, device=device),
        k_buffer=k_buffer, v_buffer=v_buffer,
        qo_indptr=torch.arange(0, (batch + 1) * num_nodes, num_nodes, dtype=torch.int32, device=device),
        kv_indptr=per_request.cumsum(0).to(torch.int32),
        kv_indices=kv_indices,
        custom_mask=custom_mask.contiguous(),
        mask_indptr=torch.tensor([0] + [num_nodes * (n + num_nodes) for n in lens], **pool).cumsum(0),
        num_nodes=num_nodes,
        sm_scale=1.0 / math.sqrt(head_dim) if sm_scale is None else sm_scale)


def sglang_tree_verify(batch: SglangVerifyBatch) -> Tensor:
    """SGLang's tree-verify attention on one batch, called as its Triton backend calls it for a
    target-verify forward (causal, prefix without the custom mask, no logit cap, unit KV scales).
    Returns ``[B, T, Hq, D]``."""
    extend_attention_fwd = extend_attention_module().extend_attention_fwd
    extend_attention_fwd(batch.q_extend, batch.k_extend, batch.v_extend, batch.o_extend, batch.k_buffer,
                         batch.v_buffer, batch.qo_indptr, batch.kv_indptr, batch.kv_indices, batch.custom_mask,
                         True, batch.mask_indptr, batch.num_nodes, 1.0, 1.0, batch.sm_scale)
    return batch.output()
