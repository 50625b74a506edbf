"""The rules every kernel's tensor arguments share, each with one message shape:
``<name> must be ..., got ...; pass ...`` (the argument, what it must be, what it is, the fix).

Floats where the kernels compute (an integer tensor came back truncated, silently), integer indices
where they address rows (a float one was truncated or failed to compile), and one device for all
of a call's tensors (a cache or ``parents`` left on the host reached torch's own error or a Triton
crash). Each public operation names its own arguments. The checks read dtypes and devices only,
never values: they run on every eager call and inside CUDA graph capture.
(``arguments`` is the benchmarks' command lines, which import no torch: not this module's home.)
"""

from __future__ import annotations

import torch
from torch import Tensor

INDEX_DTYPES = (torch.int32, torch.int64)
FLOAT_TENSOR = "a float tensor (fp16 / bf16 / fp32)"


def check_float(name: str, t: Tensor, fix: str | None = None, what: str = FLOAT_TENSOR) -> None:
    """Raise ValueError unless ``t`` has a floating dtype; ``fix`` defaults to ``<name>.float()``."""
    if not t.dtype.is_floating_point:
        raise ValueError(f"{name} must be {what}, got {t.dtype}; pass {fix or name + '.float()'}")


def check_index(name: str, t: Tensor, what: str, fix: str | None = None) -> None:
    """Raise ValueError unless ``t`` is int32 or int64 (``what`` it holds: "node indices", ...);
    ``fix`` defaults to ``<name>.to(torch.int32)``."""
    if t.dtype not in INDEX_DTYPES:
        raise ValueError(f"{name} must be {what} (int32 or int64), got {t.dtype}; "
                         f"pass {fix or name + '.to(torch.int32)'}")


def check_same_device(names: tuple[str, ...], first: Tensor, *others: Tensor | None) -> None:
    """Raise ValueError naming the first of ``others`` (None skipped: an optional argument) that is
    not on ``first``'s device; ``names`` are the arguments' names, ``first``'s leading."""
    device = first.device
    # a loop over the devices, the message built only on failure: this runs on every eager call
    for t in others:
        if t is not None and t.device != device:
            name, lead = names[1 + next(i for i, u in enumerate(others) if u is t)], names[0]
            raise ValueError(f"{name} must be on {lead}'s device ({device}), got {t.device}; "
                             f"pass {name}.to({lead}.device)")
