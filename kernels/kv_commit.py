"""``commit_accepted_kv``: move the accepted tree rows into place after the prefix.

The verify step wrote the K/V rows of all T tree nodes at cache rows ``[L_b, L_b + T)``. Greedy
acceptance keeps a path of ``path_len_b`` nodes whose positions are consecutive, so their rows
belong at ``[L_b, L_b + path_len_b)`` in path order. Because ``path[i] >= i`` (parents precede
children), row ``L_b + path[i]`` moves down or stays; copying in increasing i is safe in place.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .cache_lens import check_cache_lens
from .impl import check_distinct_elements, resolve_impl
from .tensor_checks import check_index, check_same_device
from .tree_accept import check_accepted_path


def check_cache_pair(k_cache: Tensor, v_cache: Tensor) -> None:
    if k_cache.dim() != 5 or v_cache.shape != k_cache.shape:
        raise ValueError(
            f"k_cache and v_cache must both be [layers, B, S, Hkv, D]; got {tuple(k_cache.shape)}, "
            f"{tuple(v_cache.shape)}"
        )


def check_tree_fits(num_nodes: int, k_cache: Tensor) -> None:
    if num_nodes > k_cache.shape[2]:
        raise ValueError(f"T={num_nodes} tree rows do not fit in S={k_cache.shape[2]} cache rows")


def check_commit_args(k_cache: Tensor, v_cache: Tensor, cache_lens: Tensor, path: Tensor,
                      path_len: Tensor) -> None:
    check_same_device(("k_cache", "v_cache", "cache_lens", "path", "path_len"), k_cache, v_cache, cache_lens, path,
                      path_len)
    check_cache_pair(k_cache, v_cache)
    batch = k_cache.shape[1]
    if path.dim() != 2 or path.shape[0] != batch or path_len.shape != (batch,) or cache_lens.shape != (batch,):
        raise ValueError(
            f"path must be [B={batch}, T], path_len and cache_lens [B]; got {tuple(path.shape)}, "
            f"{tuple(path_len.shape)}, {tuple(cache_lens.shape)}"
        )
    # a float path was truncated, a bool path_len committed the root alone, without a word
    check_index("path", path, "node indices")
    check_index("path_len", path_len, "path lengths")
    check_tree_fits(path.shape[1], k_cache)
    check_cache_lens(cache_lens, path.shape[1], k_cache.shape[2])
    check_accepted_path(path, path_len)
    check_distinct_elements(k_cache=k_cache, v_cache=v_cache)


def commit_accepted_kv_reference(k_cache: Tensor, v_cache: Tensor, cache_lens: Tensor, path: Tensor,
                                 path_len: Tensor) -> None:
    """Torch reference: one gather and one scatter per cache, all layers and requests at once.

    The right-hand side is gathered into a new tensor before the write, so overlap is safe.
    Rows past the path are rewritten with their own values. Requires ``L_b + T <= S``.
    """
    batch, num_nodes = path.shape
    device = k_cache.device
    step = torch.arange(num_nodes, device=device).expand(batch, num_nodes)
    lens = cache_lens.to(device=device, dtype=torch.int64).unsqueeze(1)
    taken = step < path_len.to(device=device, dtype=torch.int64).unsqueeze(1)
    src = lens + torch.where(taken, path.to(device=device, dtype=torch.int64), step)
    dst = lens + step
    row_b = torch.arange(batch, device=device).unsqueeze(1).expand(batch, num_nodes)
    for cache in (k_cache, v_cache):
        cache[:, row_b, dst] = cache[:, row_b, src]


def commit_accepted_kv(k_cache: Tensor, v_cache: Tensor, cache_lens: Tensor, path: Tensor,
                       path_len: Tensor, impl: str = "auto") -> None:
    """Move the accepted nodes' K/V rows to ``[L_b, L_b + path_len_b)``, all layers, in place.

    k_cache/v_cache: [layers, B, S, Hkv, D], any dtype; modified in place. Each (layer, b) row
                     block must be addressable with the tensor's strides (unit stride in D), and
                     no two elements may share memory (an expanded cache is a ValueError).
    cache_lens:      [B] int32, prefix lengths L_b (the tree rows start there); not modified:
                     the caller advances them by path_len. ``0 <= L_b <= S - T``: checked where
                     they are on the host; on a GPU a request past it moves nothing.
    path, path_len:  from :func:`tree_accept_greedy` (int32 or int64; another dtype is a ValueError).
    The Triton path is one launch for all layers and both caches, skips rows already in place
    (``path[i] == i``: no copy for a contiguous path) and never synchronises with the host.
    """
    check_commit_args(k_cache, v_cache, cache_lens, path, path_len)
    if resolve_impl(impl, k_cache, v_cache, path) == "torch":
        commit_accepted_kv_reference(k_cache, v_cache, cache_lens, path, path_len)
        return
    from .kv_commit_triton import commit_accepted_kv_triton

    commit_accepted_kv_triton(k_cache, v_cache, cache_lens, path, path_len)
