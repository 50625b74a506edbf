"""Which rows of a cache a Triton kernel reads and writes, seen through Triton's CPU interpreter.

Values cannot show a copy of a row onto itself (the row holds the same bytes afterwards), so the
tests that hold a kernel to "no copy" record the addresses its masked loads and stores touch.
Only under ``TRITON_INTERPRET=1`` with CPU tensors, where the kernel addresses the tensors' own
memory.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import pytest
import torch

from specdec_kernels.impl import triton_interpreting

needs_interpreter = pytest.mark.skipif(
    not triton_interpreting() or torch.cuda.is_available(),
    reason="counting a kernel's loads and stores needs Triton's interpreter on CPU tensors (TRITON_INTERPRET=1)",
)


@dataclass
class RowTraffic:
    """Rows ``(layer, b, s)`` of one [layers, B, S, Hkv, D] cache that a kernel loaded or stored."""

    loaded: set = field(default_factory=set)
    stored: set = field(default_factory=set)


def moved_rows(lens, paths, layers: int) -> tuple[set, set]:
    """(destination, source) rows ``(layer, b, s)`` of a commit's moving steps: L_b + i and
    L_b + path[i] in every layer, for each step whose row is not already in place (path[i] != i)."""
    steps = [(b, i, p) for b, path in enumerate(paths) for i, p in enumerate(path) if p != i]
    return ({(layer, b, lens[b] + i) for layer in range(layers) for b, i, _ in steps},
            {(layer, b, lens[b] + p) for layer in range(layers) for b, _, p in steps})


def _rows_of(cache: torch.Tensor, addresses) -> set:
    """The (layer, b, s) rows of a contiguous cache that hold any of ``addresses``."""
    offsets = (addresses.astype("int64") - cache.data_ptr()) // cache.element_size()
    offsets = offsets[(offsets >= 0) & (offsets < cache.numel())]
    layers, batch, rows = cache.shape[:3]
    row = offsets // (cache.shape[3] * cache.shape[4])
    return {(int(r) // (batch * rows), int(r) // rows % batch, int(r) % rows) for r in set(row.tolist())}


@contextlib.contextmanager
def record_row_traffic(monkeypatch, **caches: torch.Tensor):
    """Yield one :class:`RowTraffic` per named cache, filled by every interpreted load and store
    inside the block (masked-off lanes excluded: they touch no memory)."""
    from triton.runtime.interpreter import InterpreterBuilder

    for name, cache in caches.items():
        if cache.is_cuda or not cache.is_contiguous():
            raise ValueError(f"{name}: record traffic on a contiguous CPU tensor (got {cache.device}, "
                             f"strides {cache.stride()})")
    traffic = {name: RowTraffic() for name in caches}
    load, store = InterpreterBuilder.create_masked_load, InterpreterBuilder.create_masked_store

    def note(kind, ptrs, mask):
        touched = ptrs.data[mask.data.astype(bool)] if mask is not None else ptrs.data.ravel()
        for name, cache in caches.items():
            getattr(traffic[name], kind).update(_rows_of(cache, touched))

    def counting_load(self, ptrs, mask, other, *args, **kwargs):
        note("loaded", ptrs, mask)
        return load(self, ptrs, mask, other, *args, **kwargs)

    def counting_store(self, ptrs, value, mask, *args, **kwargs):
        note("stored", ptrs, mask)
        return store(self, ptrs, value, mask, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(InterpreterBuilder, "create_masked_load", counting_load)
        patch.setattr(InterpreterBuilder, "create_masked_store", counting_store)
        yield traffic
