"""The rules every kernel's tensor arguments share, each with one message shape:
``<name> must be ..., got ...; pass ...`` (the argument, what it must be, what it is, the fix).

Floats where the kernels compute (an integer tensor came back truncated, silently), integer indices
where they address rows (a float one was truncated or failed to compile), and one device for all
of a call's tensors (a cache or ``parents`` left on the host reached torch's own error or a Triton
crash); where a shape is off, the fix is named too (a missing batch dim, a transposed or reshaped
tensor, another count). Each public operation names its own arguments. The checks read types,
dtypes, devices and shapes only, never values: they run on every eager call and inside CUDA graph
capture.
(``arguments`` is the benchmarks' command lines, which import no torch: not this module's home.)
"""

from __future__ import annotations

import math

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


def check_tensors(names: tuple[str, ...], *tensors) -> None:
    """Raise ValueError naming the first of ``tensors`` that is not a torch.Tensor (a list, a number,
    a numpy array, which reached an AttributeError, or a device check comparing numpy's 'cpu' string);
    the fix puts it on the first argument's device. ``names`` are the arguments' names, in order."""
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            name = names[i]
            device = f", device={names[0]}.device" if i else ""
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}; "
                             f"pass torch.as_tensor({name}{device})")


def check_shape(name: str, t: Tensor, shape: tuple[int, ...], what: str, fix: str) -> None:
    """Raise ValueError unless ``t.shape == shape``; ``what`` says its dims and where their sizes
    come from ("[B, T] = (2, 5) (tokens' shape)"). The fix is derived where the elements are there:
    ``<name>.unsqueeze(0)`` for a missing leading 1 (one request passed without its batch dim),
    ``<name>.mT`` for a transposed matrix, a reshape for the same elements in another shape;
    otherwise (another count) it is ``fix``, the caller's words for what to pass."""
    if t.shape == shape:
        return
    got = tuple(t.shape)
    if shape[:1] == (1,) and got == shape[1:]:
        how = f"{name}.unsqueeze(0)"
    elif len(shape) == 2 and got == shape[::-1]:  # before the reshape, which would scramble it
        how = f"{name}.mT"
    elif t.numel() == math.prod(shape):
        how = f"{name}.reshape({', '.join(map(str, shape))})"
    else:
        how = fix
    raise ValueError(f"{name} must be {what}, got shape {got}; pass {how}")
