"""The direct launch of compiled Triton kernels: which Triton it recognises, the tensor-map cache,
and the ordinary launch wherever it does not apply (on any host; the direct launch itself runs in
the GPU tests of ``test_tree_verify.py``)."""

from __future__ import annotations

import types

import pytest
import torch

pytest.importorskip("triton")

from kernel_cases import DEVICE, needs_triton  # noqa: E402
from specdec_kernels import triton_launch  # noqa: E402
from specdec_kernels.triton_launch import KNOWN_BASE_ARGS_FORMAT, launcher_layout_unknown  # noqa: E402


def _encodes_a_map(arg, metadata, fill):
    """A descriptor expanded as both known layouts expand it (never run: its source is what is read)."""
    TMA_DTYPE_DEVICE_TO_HOST = {}  # noqa: N806
    swizzle, elem_size, elem_type, block_size, padding = metadata
    shape, strides = arg.shape, arg.strides
    cu_tensor_map = fill(arg.base.data_ptr(), swizzle, elem_size, TMA_DTYPE_DEVICE_TO_HOST[elem_type], block_size,
                         shape, strides, padding)
    return [cu_tensor_map, *shape, *strides]


def _driver_module(**names):
    """A CUDA driver module of a known layout's names, with ``names`` replaced."""
    return types.SimpleNamespace(**{"CudaLauncher": object, "TMA_DTYPE_DEVICE_TO_HOST": {},
                                    "wrap_handle_tensordesc": None, "make_tensordesc_arg": _encodes_a_map, **names})


class _PackedLauncher:
    """The call a launcher of the packed layout makes (never run: its source is what is read)."""

    def __call__(self, gridX, gridY, gridZ, stream, function, kernel_metadata, launch_metadata, launch_enter_hook,
                 launch_exit_hook, *args):
        global_scratch = profile_scratch = None
        self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid, self.launch_pdl,
                    kernel_metadata, launch_metadata, launch_enter_hook, launch_exit_hook, global_scratch,
                    profile_scratch, self.arg_annotations, self.kernel_signature, args)


class _ReorderedLauncher(_PackedLauncher):
    def __call__(self, gridX, gridY, gridZ, stream, function, kernel_metadata, launch_metadata, launch_enter_hook,
                 launch_exit_hook, *args):
        self.launch(gridX, gridY, gridZ, stream, function, kernel_metadata, self.launch_cooperative_grid,
                    self.launch_pdl, launch_metadata, launch_enter_hook, launch_exit_hook, None, None,
                    self.arg_annotations, self.kernel_signature, args)


def _expands_to_a_pointer(arg, metadata, _):
    return [arg.base, *arg.shape, *arg.strides]


def test_only_the_known_launcher_layouts_are_launched_directly():
    # the per-kernel C launcher (Triton 3.5, 3.6)
    assert launcher_layout_unknown(_driver_module(_BASE_ARGS_FORMAT=KNOWN_BASE_ARGS_FORMAT)) is None
    reason = launcher_layout_unknown(_driver_module(_BASE_ARGS_FORMAT="iiiKKppOOOOOOOO"))
    assert reason is not None and "'iiiKKppOOOOOOOO'" in reason
    # one C launch for every kernel, the kernel's arguments as one tuple (Triton 3.7 to 3.9)
    assert launcher_layout_unknown(_driver_module(CudaLauncher=_PackedLauncher)) is None
    assert "neither" in launcher_layout_unknown(_driver_module(CudaLauncher=_ReorderedLauncher))
    assert "neither" in launcher_layout_unknown(_driver_module())  # no launcher source to read
    missing = _driver_module(_BASE_ARGS_FORMAT=KNOWN_BASE_ARGS_FORMAT)
    del missing.TMA_DTYPE_DEVICE_TO_HOST
    assert "TMA_DTYPE_DEVICE_TO_HOST" in launcher_layout_unknown(missing)
    # descriptors passed as anything else than an encoded map, shape and strides
    other = _driver_module(_BASE_ARGS_FORMAT=KNOWN_BASE_ARGS_FORMAT, make_tensordesc_arg=_expands_to_a_pointer)
    assert "descriptors" in launcher_layout_unknown(other)


def test_this_processes_decision_matches_its_triton():
    """Decided once per process from the installed Triton: None exactly where its CUDA driver has
    the known layout, else a reason naming the Triton version."""
    import triton
    from triton.backends.nvidia import driver as driver_module

    reason = triton_launch.direct_launch_unusable()
    assert triton_launch.direct_launch_unusable() is reason  # cached
    if launcher_layout_unknown(driver_module) is None:
        assert reason is None
    else:
        assert reason is not None and triton.__version__ in reason


@needs_triton
@pytest.mark.skipif(DEVICE.type == "cuda", reason="the fallback on a host without a GPU")
def test_calls_without_a_gpu_take_the_ordinary_launch():
    """Under the interpreter every call goes through ``kernel[grid](...)``, right every time, and
    keeps no direct launch."""
    from specdec_kernels import ancestor_mask_from_parents
    from specdec_kernels.tree_verify import tree_verify_attention_reference
    from specdec_kernels.tree_verify_triton import _DIRECT, tree_verify_attention_triton

    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(*shape, generator=gen) for shape in ((1, 2, 2, 64), (1, 10, 1, 64), (1, 10, 1, 64)))
    lens, mask = torch.tensor([8], dtype=torch.int32), ancestor_mask_from_parents(torch.tensor([[-1, 0]]))
    ref = tree_verify_attention_reference(q, k, v, lens, mask, compute_dtype=torch.float64).float()
    before = dict(_DIRECT)
    for _ in range(2):
        out = tree_verify_attention_triton(q, k, v, lens, mask)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    assert _DIRECT == before


@pytest.fixture
def fresh_maps(monkeypatch):
    monkeypatch.setattr(triton_launch, "MAX_TENSOR_MAPS", 3)


def _counting_encoding(args, calls):
    def fill(base_ptr, *fields):
        calls.append((base_ptr, fields))
        return object()

    return triton_launch._Encoding(fill, args)


def test_tensor_maps_are_encoded_once_per_address_and_encoding(fresh_maps):
    calls = []
    rows, cols = _counting_encoding((128, 2, 10, (64, 128), (4096, 1024), (1024, 1), 0), calls), \
        _counting_encoding((128, 2, 10, (64, 128), (8192, 1024), (1024, 1), 0), calls)
    first = triton_launch.tensor_map(0x1000, rows)
    assert triton_launch.tensor_map(0x1000, rows) is first and len(calls) == 1
    assert triton_launch.tensor_map(0x2000, rows) is not first  # another address: another map
    assert triton_launch.tensor_map(0x1000, cols) is not first  # another shape at the same address
    assert calls == [(0x1000, rows.args), (0x2000, rows.args), (0x1000, cols.args)]


def test_tensor_map_cache_drops_the_oldest_of_an_encoding(fresh_maps):
    calls = []
    enc, other = _counting_encoding((0,), calls), _counting_encoding((1,), calls)
    a, b, c = (triton_launch.tensor_map(ptr, enc) for ptr in (1, 2, 3))
    assert triton_launch.tensor_map(1, enc) is a  # a hit: nothing encoded, nothing dropped
    triton_launch.tensor_map(9, other)  # another encoding's maps do not count against this one's
    triton_launch.tensor_map(4, enc)  # past the bound: 1, the oldest, goes
    assert list(enc.maps) == [2, 3, 4]
    assert triton_launch.tensor_map(2, enc) is b and triton_launch.tensor_map(3, enc) is c
    assert triton_launch.tensor_map(1, enc) is not a  # re-encoded
    assert [ptr for ptr, _ in calls] == [1, 2, 3, 9, 4, 1]


def test_encodings_are_shared_and_hold_every_field(monkeypatch):
    """One encoding object per distinct (swizzle, element, box, shape, strides): its identity keys
    the map cache, so two descriptors that differ in any field never share a map."""
    import triton.runtime
    from triton.backends.nvidia import driver as driver_module

    if not hasattr(driver_module, "TMA_DTYPE_DEVICE_TO_HOST"):
        pytest.skip("this Triton's driver has no TMA_DTYPE_DEVICE_TO_HOST")
    fill = object()
    monkeypatch.setattr(triton.runtime, "driver", types.SimpleNamespace(
        active=types.SimpleNamespace(utils=types.SimpleNamespace(fill_tma_descriptor=fill))))
    meta = {"swizzle": 128, "elem_size": 2, "elem_type": 10, "block_size": [64, 128]}
    base = triton_launch.encoding_of((4096, 1024), (1024, 1), meta)
    assert triton_launch.encoding_of([4096, 1024], [1024, 1], dict(meta)) is base and base.fill is fill
    for other in (triton_launch.encoding_of((4096, 1024), (2048, 1), meta),
                  triton_launch.encoding_of((4096, 1024), (1024, 1), dict(meta, block_size=[32, 128])),
                  triton_launch.encoding_of((4096, 1024), (1024, 1), dict(meta, swizzle=64)),
                  triton_launch.encoding_of((4096, 1024), (1024, 1), dict(meta, elem_type=1))):
        assert other is not base


def _installed_launcher(c_launch, signature: dict, tensordesc_meta: list):
    """The installed Triton's own CudaLauncher for a kernel of ``signature``, its C launch replaced
    by ``c_launch`` (built without compiling anything: the attributes its call reads)."""
    from triton.backends.nvidia import driver as driver_module

    launcher = object.__new__(driver_module.CudaLauncher)
    launcher.launch = driver_module.wrap_handle_tensordesc(c_launch, signature, tensordesc_meta)
    launcher.global_scratch_size = launcher.profile_scratch_size = 0
    launcher.global_scratch_align = launcher.profile_scratch_align = 1
    launcher.launch_cooperative_grid, launcher.launch_pdl = False, True
    launcher.num_ctas, launcher.gsan_enabled = 1, False
    if getattr(driver_module, "_BASE_ARGS_FORMAT", None) is None:
        launcher.arg_annotations, launcher.kernel_signature = ("annotations",), b"signature"
    return launcher


def test_a_direct_launch_passes_its_c_launch_what_tritons_own_launcher_does(monkeypatch):
    """The same kernel call, once through the installed Triton's own launcher (as its dispatch
    calls it, no launch hook) and once directly: its C launch, here a recorder, gets the same
    arguments, the tensor descriptor's map and fields included. Run on the CPU against whichever
    layout the installed Triton has."""
    import triton.runtime
    from triton.backends.nvidia import driver as driver_module

    reason = triton_launch.direct_launch_unusable()
    if reason is not None:
        pytest.skip(reason)
    calls = []

    def fill(base_ptr, *fields):
        return ("map", base_ptr, tuple(tuple(f) if isinstance(f, list) else f for f in fields))

    utils = types.SimpleNamespace(fill_tma_descriptor=fill, fill_tma_descriptor_tiled=fill)
    monkeypatch.setattr(triton.runtime, "driver", types.SimpleNamespace(active=types.SimpleNamespace(utils=utils)))
    monkeypatch.setattr(triton_launch, "_ENCODINGS", {})
    signature = {"q": "*bf16", "cache": "tensordesc<bf16[64, 128]>", "n": "i32", "BLOCK": "constexpr"}
    meta = [{"swizzle": 128, "elem_size": 2, "elem_type": 10, "block_size": [64, 128], "fp4_padded": False}]
    launcher = _installed_launcher(lambda *args: calls.append(args), signature, meta)
    descriptor = types.SimpleNamespace(base=types.SimpleNamespace(data_ptr=lambda: 0x7000), shape=[4096, 1024],
                                       strides=[1024, 1], padding="zero", round_f32_to_tf32=False)
    function, metadata, stream = 0xF00, (4, 1, 1024), 0x5A
    launcher(8, 3, 1, stream, function, metadata, None, None, None, 0x1000, descriptor, 7, 64)

    compiled = types.SimpleNamespace(run=launcher, src=types.SimpleNamespace(signature=signature),
                                     metadata=types.SimpleNamespace(tensordesc_meta=meta), function=function,
                                     packed_metadata=metadata)
    monkeypatch.setattr(triton_launch, "_c_launch_of", lambda _: lambda *args: calls.append(args))
    direct = triton_launch.DirectLaunch.build(compiled, (8, 3), 3, (64,), {1: ((4096, 1024), (1024, 1))})
    assert direct is not None and direct.packed == (getattr(driver_module, "_BASE_ARGS_FORMAT", None) is None)
    encoding, fields = direct.descriptors[1]
    direct(stream, (0x1000, triton_launch.tensor_map(0x7000, encoding), *fields, 7))

    def flat(args):  # the packed layout's last argument, the kernel's, as a tuple
        return (*args[:-1], tuple(args[-1])) if direct.packed else args

    assert len(calls) == 2 and flat(calls[1]) == flat(calls[0])
    assert ("map", 0x7000, (128, 2, driver_module.TMA_DTYPE_DEVICE_TO_HOST[10], (64, 128), (4096, 1024), (1024, 1),
                            0)) in (flat(calls[0])[-1] if direct.packed else calls[0])


def test_the_c_launch_is_found_under_the_installed_descriptor_wrapper():
    from triton.backends.nvidia import driver as driver_module

    if triton_launch.direct_launch_unusable() is not None:
        pytest.skip(triton_launch.direct_launch_unusable())
    meta = [{"swizzle": 128, "elem_size": 2, "elem_type": 10, "block_size": [64, 128], "fp4_padded": False}]
    wrapped = driver_module.wrap_handle_tensordesc(max, {"q": "*bf16", "cache": "tensordesc<bf16[64, 128]>"}, meta)
    assert wrapped is not max and triton_launch._c_launch_of(types.SimpleNamespace(launch=wrapped)) is max
    assert triton_launch._c_launch_of(types.SimpleNamespace(launch=max)) is max
    assert triton_launch._c_launch_of(types.SimpleNamespace(launch=lambda *args: None)) is None


@needs_triton
def test_a_triton_of_unknown_launcher_layout_is_named_once(monkeypatch):
    """Eager calls that fall back to Triton's dispatch (tens of µs of host time more) say so once
    per process, with the reason; a known layout says nothing."""
    import warnings

    from specdec_kernels import tree_verify_triton

    monkeypatch.setattr(tree_verify_triton, "direct_launch_unusable", lambda: "Triton 9.9: its launcher is new")
    tree_verify_triton.eager_launch_through_dispatch.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="Triton 9.9: its launcher is new: each eager tree-verify call") as seen:
            for _ in range(3):
                assert tree_verify_triton.eager_launch_through_dispatch() == "Triton 9.9: its launcher is new"
        assert len(seen) == 1 and "Triton 3.5 to 3.9 launch directly" in str(seen[0].message)
        monkeypatch.setattr(tree_verify_triton, "direct_launch_unusable", lambda: None)
        tree_verify_triton.eager_launch_through_dispatch.cache_clear()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert tree_verify_triton.eager_launch_through_dispatch() is None
    finally:
        tree_verify_triton.eager_launch_through_dispatch.cache_clear()
