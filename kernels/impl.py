"""Choosing between the Triton kernels and the torch references.

Every operation takes ``impl="auto" | "triton" | "torch"``. ``auto`` picks Triton when the
tensors live on a CUDA device or when ``TRITON_INTERPRET=1`` is set (Triton's CPU interpreter,
used by CI), and the torch reference otherwise: the embedded engine decodes on the CPU with the
references. Triton itself is imported only inside the launchers, so importing this package stays
cheap.
"""

from __future__ import annotations

import os

IMPLS = ("auto", "triton", "torch")


def triton_interpreting() -> bool:
    """True when Triton runs its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def resolve_impl(impl: str, *tensors) -> str:
    """Return ``"triton"`` or ``"torch"`` for ``impl`` and the operation's tensors.

    Raises ValueError for an unknown ``impl``, or when ``"triton"`` is asked for on CPU tensors
    without the interpreter (Triton cannot run there).
    """
    if impl == "auto":
        # a loop, not any() over a generator: this runs on every eager call of every kernel
        for t in tensors:
            if t.is_cuda:
                return "triton"
        return "triton" if triton_interpreting() else "torch"
    if impl not in IMPLS:
        raise ValueError(f"impl={impl!r} is not one of {IMPLS}")
    if impl == "triton" and not any(t.is_cuda for t in tensors) and not triton_interpreting():
        raise ValueError(
            "impl='triton' needs CUDA tensors or TRITON_INTERPRET=1 (Triton's CPU interpreter); "
            "use impl='torch' or impl='auto' on the CPU"
        )
    return impl


def check_distinct_elements(**tensors) -> None:
    """Raise ValueError for a tensor written in place whose elements share memory (a stride of 0
    on a dimension of more than one, as ``expand`` makes): Triton's programs would write each other's
    elements without a word, where torch refuses."""
    for name, t in tensors.items():
        strides = t.stride()
        # the walk over the dimensions only where a stride is 0: a per-call cost on every commit
        if 0 in strides and any(stride == 0 and size > 1 for size, stride in zip(t.shape, strides)):
            raise ValueError(f"{name} {tuple(t.shape)} has a dimension of stride 0 ({name}.stride() = "
                             f"{t.stride()}), so its elements share memory and the in-place update "
                             f"would write them over each other; pass {name}.contiguous() and keep that copy")
