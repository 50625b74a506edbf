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


def _driver_module(**names):
    return types.SimpleNamespace(**{"CudaLauncher": object, "TMA_DTYPE_DEVICE_TO_HOST": {},
                                    "wrap_handle_tensordesc": None, **names})


def test_only_the_known_launcher_layout_is_launched_directly():
    assert launcher_layout_unknown(_driver_module(_BASE_ARGS_FORMAT=KNOWN_BASE_ARGS_FORMAT)) is None
    # a later Triton passes the kernel's arguments as one tuple after other leading arguments
    reason = launcher_layout_unknown(_driver_module(_BASE_ARGS_FORMAT="iiiKKppOOOOOOOO"))
    assert reason is not None and "'iiiKKppOOOOOOOO'" in reason
    assert "_BASE_ARGS_FORMAT" not in vars(_driver_module()) and launcher_layout_unknown(_driver_module())
    missing = _driver_module(_BASE_ARGS_FORMAT=KNOWN_BASE_ARGS_FORMAT)
    del missing.TMA_DTYPE_DEVICE_TO_HOST
    assert "TMA_DTYPE_DEVICE_TO_HOST" in launcher_layout_unknown(missing)


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
