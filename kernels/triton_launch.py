"""Launching an already compiled Triton kernel through its C launcher alone (imported lazily).

Triton's launch path does, per launch and in Python: argument binding and specialisation, the
cache key, launch metadata, then its launcher's tensor-descriptor wrapper, which loops over every
argument and encodes each descriptor's CUtensorMap (``cuTensorMapEncodeTiled``) anew. A caller that
already knows everything the kernel was specialised on (its own cache key) can skip all of it:
:class:`DirectLaunch` holds the compiled kernel's C launch function and calls it with the
arguments already expanded, the tensor maps taken from :func:`tensor_map`'s cache.

This reaches into Triton internals that change between releases (the C launcher's argument
layout, the descriptor wrapper, the metadata of a tensor descriptor). Two layouts are known: a C
launcher compiled per kernel that takes the kernel's arguments one by one (Triton 3.5 and 3.6), and
one C launch for every kernel that takes them as one tuple beside their annotations and C
signature (Triton 3.7 to 3.9). :func:`direct_launch_unusable` decides once per process whether this
Triton has one of them; where it has not, or a kernel needs what this path does not do (scratch
memory, a descriptor not lowered to a tensor map), callers take Triton's ordinary
``kernel[grid](...)``.
"""

from __future__ import annotations

import functools
import re

# The per-kernel C launcher's leading arguments (Triton 3.5, 3.6): grid x, y, z, stream, function,
# cooperative, PDL, global scratch, profile scratch, metadata, launch metadata, enter hook, exit hook.
KNOWN_BASE_ARGS_FORMAT = "iiiKKppOOOOOO"

# How a Triton 3.7-3.9 launcher calls its one C launch (whitespace removed): the kernel's arguments
# follow as one tuple.
PACKED_LAUNCH_CALL = ("self.launch(gridX,gridY,gridZ,stream,function,self.launch_cooperative_grid,self.launch_pdl,"
                      "kernel_metadata,launch_metadata,launch_enter_hook,launch_exit_hook,global_scratch,"
                      "profile_scratch,self.arg_annotations,self.kernel_signature,")

# What the descriptor wrapper passes for a tensor descriptor, in both layouts: the map, then the
# shape and the strides; the map encoded from the base address and the compiled kernel's metadata.
DESCRIPTOR_EXPANSION = "return[cu_tensor_map,*shape,*strides]"
DESCRIPTOR_FILL_ARGS = "(arg.base.data_ptr(),swizzle,elem_size,TMA_DTYPE_DEVICE_TO_HOST[elem_type],block_size,"

# Encoded tensor maps kept across calls per encoding: a KV cache per layer, a few hundred.
MAX_TENSOR_MAPS = 512

# (swizzle, element size and type, box, shape, strides, padding) -> its _Encoding
_ENCODINGS: dict = {}


def _source_of(function) -> str | None:
    """``function``'s source without whitespace (None where Python cannot read it)."""
    import inspect

    try:
        return re.sub(r"\s+", "", inspect.getsource(function))
    except (OSError, TypeError):
        return None


def launcher_layout_unknown(driver_module) -> str | None:
    """Why ``driver_module`` (Triton's ``triton.backends.nvidia.driver``) has neither launcher
    layout :class:`DirectLaunch` calls (None: it has one)."""
    missing = [name for name in ("CudaLauncher", "TMA_DTYPE_DEVICE_TO_HOST", "wrap_handle_tensordesc",
                                 "make_tensordesc_arg") if not hasattr(driver_module, name)]
    if missing:
        return f"its CUDA driver module has no {', '.join(missing)}"
    base = getattr(driver_module, "_BASE_ARGS_FORMAT", None)
    if base is None:
        call = _source_of(driver_module.CudaLauncher.__call__)
        if call is None or PACKED_LAUNCH_CALL not in call:
            return ("its launcher passes neither the per-kernel C launcher's arguments nor the packed "
                    "layout's to its C launch")
    elif base != KNOWN_BASE_ARGS_FORMAT:
        return f"its C launcher takes {base!r} before the kernel's arguments, not {KNOWN_BASE_ARGS_FORMAT!r}"
    expand = _source_of(driver_module.make_tensordesc_arg)
    if expand is None or DESCRIPTOR_EXPANSION not in expand or DESCRIPTOR_FILL_ARGS not in expand:
        return "its tensor descriptors are passed otherwise than as a map encoded from the base, shape and strides"
    return None


@functools.cache
def direct_launch_unusable() -> str | None:
    """Why this process launches through Triton's own path (None: :class:`DirectLaunch` may be
    used), decided once per process."""
    import triton

    try:
        from triton import knobs
        from triton.backends.nvidia import driver as driver_module
    except ImportError as exc:
        return f"Triton {triton.__version__}: {exc}"
    reason = launcher_layout_unknown(driver_module)
    if reason is None and not hasattr(knobs.runtime.launch_enter_hook, "calls"):
        reason = "its launch hooks are not hook chains"
    return None if reason is None else f"Triton {triton.__version__}: {reason}"


@functools.cache
def _runtime_knobs():
    from triton import knobs

    return knobs.runtime


def launch_hooks_set() -> bool:
    """Whether a launch hook (a profiler's) is registered: then every launch goes through Triton,
    which calls it. Only asked where :func:`direct_launch_unusable` is None."""
    runtime = _runtime_knobs()
    try:
        return bool(runtime.launch_enter_hook.calls or runtime.launch_exit_hook.calls)
    except AttributeError:  # a hook set as something else than a chain: Triton's own launch calls it
        return True


class _Encoding:
    """Everything a tensor map encodes but its base address: shape, strides, element size and type,
    box, swizzle, padding; the function that encodes it; and its maps by base address (a map holds
    only what its key and this encoding hold)."""

    __slots__ = ("fill", "args", "maps")

    def __init__(self, fill, args: tuple):
        self.fill, self.args, self.maps = fill, args, {}


def tensor_map(base_ptr: int, encoding: _Encoding):
    """The CUtensorMap of the tensor at ``base_ptr`` under ``encoding`` (:func:`encoding_of`). A
    map holds only what its key holds, so one from an earlier call is byte-identical to a new one
    even if that call's tensor is gone and its memory reused; no tensor is kept alive. The oldest
    of an encoding's maps are dropped past :data:`MAX_TENSOR_MAPS` (insertion order, not use: a
    lookup stays one dictionary read)."""
    maps = encoding.maps
    found = maps.get(base_ptr)
    if found is None:
        found = maps[base_ptr] = encoding.fill(base_ptr, *encoding.args)
        if len(maps) > MAX_TENSOR_MAPS:
            try:
                del maps[next(iter(maps))]
            except (KeyError, RuntimeError):  # another thread changed the dict: it is bounded anyway
                pass
    return found


def encoding_of(shape: tuple, strides: tuple, meta: dict) -> _Encoding:
    """The encoding of a view (element ``strides``, the last 1) under a tensor descriptor's
    metadata in a compiled kernel (swizzle, element size and type, box), padding with zeros."""
    from triton.backends.nvidia import driver as driver_module
    from triton.runtime import driver

    args = (meta["swizzle"], meta["elem_size"], driver_module.TMA_DTYPE_DEVICE_TO_HOST[meta["elem_type"]],
            tuple(meta["block_size"]), tuple(shape), tuple(strides), 0)
    found = _ENCODINGS.get(args)
    if found is None:
        if len(_ENCODINGS) >= MAX_TENSOR_MAPS:
            _ENCODINGS.clear()  # only deduplication is lost: launches hold their encodings
        found = _ENCODINGS[args] = _Encoding(_fill_function(driver.active.utils), args)
    return found


def _fill_function(utils):
    """The C function that encodes a tiled tensor map (renamed in Triton 3.7)."""
    fill = getattr(utils, "fill_tma_descriptor_tiled", None)
    return fill if fill is not None else utils.fill_tma_descriptor


def _c_launch_of(launcher):
    """The C launch function under a Triton ``CudaLauncher``: its ``launch`` itself, or the one
    its tensor-descriptor wrapper closes over."""
    launch = launcher.launch
    if type(launch).__name__ == "builtin_function_or_method":
        return launch
    cells = dict(zip(launch.__code__.co_freevars, launch.__closure__ or ()))
    inner = cells.get("launcher")
    if inner is not None and type(inner.cell_contents).__name__ == "builtin_function_or_method":
        return inner.cell_contents
    return None


class DirectLaunch:
    """One compiled kernel on one grid, launched by its C launcher with expanded arguments.

    Built once per (kernel, everything it was specialised on) by :meth:`build`. A call passes the
    kernel's arguments in order, pointers as ints and each tensor descriptor expanded in place to
    ``(tensor_map(base, encoding), *fields)`` with the ``(encoding, fields)`` of
    ``descriptors[position]`` (everything but the base address is fixed by the specialisation).
    A hot caller may call the C launch itself (one Python call less): ``launch(stream, *head,
    args)`` where ``packed``, else ``launch(stream, *head, *args)``, ``args`` ending with ``tail``."""

    __slots__ = ("launch", "head", "descriptors", "tail", "packed")

    @classmethod
    def build(cls, compiled, grid: tuple, num_args: int, tail: tuple, views: dict) -> DirectLaunch | None:
        """``compiled`` (what ``kernel[grid](...)`` returned) as a direct launch, or None where this
        kernel needs what the direct path does not do. ``num_args``: the positional arguments a
        call passes (``tail``, the constexprs and defaults after them, is passed for it); ``views``:
        position -> (shape, strides) of each tensor descriptor argument."""
        try:
            launcher = compiled.run
            signature = list(compiled.src.signature.values())
            metas = getattr(compiled.metadata, "tensordesc_meta", None) or []
            c_launch = _c_launch_of(launcher)
        except AttributeError:  # not the compiled kernel of the Triton this path knows
            return None
        packed = hasattr(launcher, "arg_annotations")
        desc_positions = [i for i, ty in enumerate(signature) if isinstance(ty, str) and ty.startswith("tensordesc")]
        if (c_launch is None or len(signature) != num_args + len(tail) or sorted(views) != desc_positions
                or len(metas) != len(desc_positions)
                or any(m is None or m.get("fp4_padded") or m.get("is_im2col") for m in metas)
                or launcher.global_scratch_size or launcher.profile_scratch_size
                or getattr(launcher, "gsan_enabled", False)
                or (packed and not hasattr(launcher, "kernel_signature"))):
            return None
        self = cls()
        self.launch = functools.partial(c_launch, *(tuple(grid) + (1,) * (3 - len(grid))))
        if packed:
            # after the stream: the function, cooperative, PDL, the metadata, no launch metadata or
            # hooks, no global or profile scratch, the arguments' annotations and C signature
            self.head = (compiled.function, launcher.launch_cooperative_grid, launcher.launch_pdl,
                         compiled.packed_metadata, None, None, None, None, None, launcher.arg_annotations,
                         launcher.kernel_signature)
        else:
            # after the stream: the function, cooperative, PDL, no global or profile scratch, the
            # metadata, no launch metadata or hooks
            self.head = (compiled.function, launcher.launch_cooperative_grid, launcher.launch_pdl, None, None,
                         compiled.packed_metadata, None, None, None)
        self.packed = packed
        self.descriptors = {pos: (encoding_of(*views[pos], meta), (*views[pos][0], *views[pos][1]))
                            for pos, meta in zip(desc_positions, metas)}
        self.tail = tail
        return self

    def __call__(self, stream: int, args: tuple) -> None:
        if self.packed:
            self.launch(stream, *self.head, (*args, *self.tail))
        else:
            self.launch(stream, *self.head, *args, *self.tail)
