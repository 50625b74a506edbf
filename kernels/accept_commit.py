"""``tree_accept_and_commit``: greedy acceptance and the KV commit of its path, as one operation.

The same result as :func:`tree_accept_greedy` followed by :func:`commit_accepted_kv`. On the
GPU it is one launch instead of two: every commit program walks its request's tree itself (T
lanes, a few vector steps, inputs that fit in a cache line or two) rather than waiting for an
accept kernel to finish and reading its path back from memory. At batch 8, prefix 8k, T = 17
the two launches took about a tenth of one layer's verify attention on an H200, the issue's bound
(docs/kernels-performance.md).
"""

from __future__ import annotations

from torch import Tensor

from .cache_lens import check_cache_lens
from .impl import check_distinct_elements, resolve_impl
from .kv_commit import check_cache_pair, check_tree_fits, commit_accepted_kv_reference
from .tensor_checks import check_same_device
from .tree_accept import AcceptResult, check_accept_args, tree_accept_greedy_reference


def check_caches_fit(tokens: Tensor, k_cache: Tensor, v_cache: Tensor, cache_lens: Tensor) -> None:
    check_same_device(("tokens", "k_cache", "v_cache", "cache_lens"), tokens, k_cache, v_cache, cache_lens)
    check_cache_pair(k_cache, v_cache)
    batch, num_nodes = tokens.shape
    if k_cache.shape[1] != batch or cache_lens.shape != (batch,):
        raise ValueError(f"tokens hold B={batch} requests, but the caches hold {k_cache.shape[1]} and "
                         f"cache_lens has shape {tuple(cache_lens.shape)}; all three must agree")
    check_tree_fits(num_nodes, k_cache)
    check_cache_lens(cache_lens, num_nodes, k_cache.shape[2])
    check_distinct_elements(k_cache=k_cache, v_cache=v_cache)


def tree_accept_and_commit_reference(tokens: Tensor, parents: Tensor, target_argmax: Tensor,
                                     k_cache: Tensor, v_cache: Tensor, cache_lens: Tensor) -> AcceptResult:
    """Torch reference: the two references in sequence."""
    result = tree_accept_greedy_reference(tokens, parents, target_argmax)
    commit_accepted_kv_reference(k_cache, v_cache, cache_lens, result.path, result.path_len)
    return result


def tree_accept_and_commit(tokens: Tensor, parents: Tensor, target_argmax: Tensor, k_cache: Tensor,
                           v_cache: Tensor, cache_lens: Tensor, impl: str = "auto") -> AcceptResult:
    """Accept greedily, then move the accepted rows into place in every layer.

    tokens, parents, target_argmax: as for :func:`tree_accept_greedy` ([B, T]).
    k_cache, v_cache, cache_lens:   as for :func:`commit_accepted_kv` ([layers, B, S, Hkv, D],
                                    modified in place, so no two elements may share memory:
                                    an expanded cache is a ValueError; [B] prefix lengths, not
                                    modified).
    Returns the :class:`AcceptResult`; never synchronises with the host.
    """
    check_accept_args(tokens, parents, target_argmax)
    check_caches_fit(tokens, k_cache, v_cache, cache_lens)
    if resolve_impl(impl, tokens, parents, target_argmax, k_cache, v_cache) == "torch":
        return tree_accept_and_commit_reference(tokens, parents, target_argmax, k_cache, v_cache, cache_lens)
    from .accept_commit_triton import tree_accept_and_commit_triton

    return tree_accept_and_commit_triton(tokens, parents, target_argmax, k_cache, v_cache, cache_lens)
