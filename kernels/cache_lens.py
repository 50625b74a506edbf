"""The per-request cache-length contract every cache kernel shares: request b owns cache rows
``[0, S)``, its committed prefix is ``[0, L_b)`` and its T tree rows ``[L_b, L_b + T)``, so
``0 <= L_b <= S - T``. Checked on the host where the lengths live there; on a GPU reading them
would be a host sync, so the kernels that write caches guard themselves (a request whose rows
would leave ``[0, S)`` moves nothing) and the attention kernel's output for such a request is
undefined.
"""

from __future__ import annotations

from torch import Tensor

from .tensor_checks import check_index


def check_cache_lens(cache_lens: Tensor, num_nodes: int, cache_rows: int) -> None:
    """Raise ValueError naming the first request whose L_b is negative or whose tree rows pass the
    caches' S rows, or lengths that are not integers. Lengths on a GPU are not read (a host sync)."""
    # the kernels index rows with them: a float or bool length compiles to other arithmetic
    check_index("cache_lens", cache_lens, "integer lengths")
    if cache_lens.is_cuda:
        return
    lens, limit = cache_lens.tolist(), cache_rows - num_nodes
    if lens and (min(lens) < 0 or max(lens) > limit):
        b = next(b for b, n in enumerate(lens) if not 0 <= n <= limit)
        fix = ("pass the request's prefix length, 0 or more" if lens[b] < 0 else
               f"allocate caches of at least L_b + T = {lens[b] + num_nodes} rows")
        raise ValueError(f"cache_lens[{b}] = {lens[b]}: each request needs 0 <= L_b <= S - T = {limit} "
                         f"(caches of S = {cache_rows} rows, T = {num_nodes} tree rows); {fix}")
