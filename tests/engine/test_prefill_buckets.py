"""A hybrid prefill meets a bounded set of compiled kernel variants, whatever the prompt's length.

Triton compiles a kernel per constexpr value and per class of each int argument (1, a multiple of
16, other) and pointer alignment. The prefill's last chain has P % PREFILL_CHUNK tokens, so without
bucketing the prompt length reached the tree kernels as the node count, the tile width and the
strides of the chain's tensors. A recorder stands in for every hybrid kernel's launch and keeps
the key Triton would compile for (Triton's own specialisation of each argument, and the
keywords), so this runs on the CPU without running the kernels.
"""

from __future__ import annotations

import functools
import os
from collections import defaultdict

import pytest
import torch

from pytest_specdec.engine import linear_attention as gdn
from pytest_specdec.engine.linear_attention import PREFILL_CHUNK
from pytest_specdec.engine.model import PRESETS, TargetModel

HYBRID_KERNEL_MODULES = ("tree_delta_triton", "tree_conv_triton", "recurrent_commit_triton")
TOLERANCE = {torch.float32: 2e-4, torch.bfloat16: 3e-2}  # the tree delta kernel tests'
interpreting = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
                                  reason="the Triton path runs on the CPU only under TRITON_INTERPRET=1")


class _Launch:
    """Stands in for ``kernel[grid](...)``: records the compile key and zeroes the float tensors
    it was given (outputs left empty would feed NaNs to the layers after), nothing else."""

    def __init__(self, name: str, keys: dict) -> None:
        self.name, self.keys = name, keys

    def __getitem__(self, grid):
        from triton._C.libtriton import native_specialize_impl
        from triton.backends.compiler import BaseBackend

        def launch(*args, **options):
            spec = tuple(None if a is None else native_specialize_impl(BaseBackend, a, False, True, True)
                         for a in args)
            self.keys[self.name].add((spec, tuple(sorted(options.items()))))
            for a in args:
                if isinstance(a, torch.Tensor) and a.is_floating_point():
                    a.zero_()
        return launch


@pytest.fixture
def launch_keys(monkeypatch):
    """{kernel name: its compile keys} of every hybrid kernel launch, on the H100/H200 table's tiles."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # resolve_impl takes the Triton path on CPU tensors
    import importlib

    from specdec_kernels.hybrid_configs import HYBRID_CONFIGS

    keys: dict = defaultdict(set)
    for name in HYBRID_KERNEL_MODULES:
        module = importlib.import_module(f"specdec_kernels.{name}")
        monkeypatch.setattr(module, "hybrid_config", lambda device: HYBRID_CONFIGS["sm_90"])
        for attr in dir(module):
            if attr.startswith("_") and attr.endswith("_kernel"):
                monkeypatch.setattr(module, attr, _Launch(attr, keys))
    return keys


def _layer(lin, dtype, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    heads = lin.num_value_heads
    return {"conv_w": (torch.randn(lin.conv_channels, lin.conv_kernel, generator=g) / 2).to(dtype),
            "decay_scale": -torch.linspace(0.1, 0.6, heads), "dt_bias": torch.zeros(heads),
            "norm_w": torch.ones(lin.value_head_dim, dtype=dtype)}


def _inputs(lin, p: int, dtype, seed: int = 1):
    """(conv inputs, rest) as the projection gives them: views of one [1, P, ·] matrix."""
    g = torch.Generator().manual_seed(seed)
    mixed = torch.randn(1, p, lin.conv_channels + lin.value_dim + 2 * lin.num_value_heads, generator=g).to(dtype)
    return mixed[..., :lin.conv_channels], mixed[..., lin.conv_channels:]


def _states(lin, dtype, slots: int = 3, slot: int = 1):
    """One slot's states as the decoder passes them (a slice of every slot's)."""
    state = torch.zeros(slots, lin.num_value_heads, lin.key_head_dim, lin.value_head_dim)
    conv = torch.zeros(slots, lin.conv_channels, lin.conv_kernel - 1, dtype=dtype)
    return state[slot:slot + 1], conv[slot:slot + 1]


@pytest.mark.parametrize("preset", ["tiny-hybrid", "27b-hybrid-layers"])
def test_every_prompt_length_meets_one_variant_per_tile_width(preset, launch_keys):
    """Prompts of 1..2 PREFILL_CHUNK tokens: the delta kernel compiles once per tile width it
    pads to (TPAD), the conv and the commit once; unbucketed, remainders and strides added more."""
    from specdec_kernels.tree_delta_triton import padded_nodes

    lin = PRESETS[preset].linear
    layer = _layer(lin, torch.bfloat16)
    for p in range(1, 2 * PREFILL_CHUNK + 1):
        state, conv = _states(lin, torch.bfloat16)
        gdn.prefill_chain(layer, lin, *_inputs(lin, p, torch.bfloat16), state, conv, "triton", 1e-6)
    widths = {padded_nodes(n) for n in range(1, PREFILL_CHUNK + 1)}
    counts = {name: len(keys) for name, keys in launch_keys.items()}
    assert counts == {"_tree_delta_fused_kernel": len(widths), "_tree_conv_kernel": 1, "_commit_kernel": 1}, counts
    assert {dict(opts)["TPAD"] for _, opts in launch_keys["_tree_delta_fused_kernel"]} == widths


def test_the_buckets_are_the_delta_kernels_tile_widths():
    from specdec_kernels.tree_delta_triton import padded_nodes

    for n in range(1, PREFILL_CHUNK + 1):
        assert gdn.prefill_bucket(n) == padded_nodes(n) >= n
    assert gdn.prefill_buckets() == (16, 32, 64) if PREFILL_CHUNK == 64 else True


def _both(lin, layer, p: int, dtype, impl: str):
    """(out, state, conv state) of the prefill padded and unpadded, from the same nonzero states."""
    runs = []
    for pad in (True, False):
        state, conv = _states(lin, dtype)
        g = torch.Generator().manual_seed(2)
        state.copy_(torch.randn(state.shape, generator=g) / 4)
        conv.copy_(torch.randn(conv.shape, generator=g).to(dtype))
        out = gdn.prefill_chain(layer, lin, *_inputs(lin, p, dtype), state, conv, impl, 1e-6, pad=pad)
        runs.append((out, state.clone(), conv.clone()))
    return runs


def _max_error(a, b) -> float:
    return float(((a.float() - b.float()).abs() / (b.float().abs().amax() + 1e-6)).max())


@pytest.mark.parametrize("p", [1, 5, 16, 17, 40, 64, 65, 100, 128])
def test_padding_changes_no_output_and_no_state_on_the_torch_path(p):
    lin = PRESETS["tiny-hybrid"].linear
    layer = _layer(lin, torch.float32)
    (out, state, conv), (out_0, state_0, conv_0) = _both(lin, layer, p, torch.float32, "torch")
    assert out.shape == out_0.shape == (1, p, lin.value_dim)
    assert _max_error(out, out_0) <= TOLERANCE[torch.float32]
    assert _max_error(state, state_0) <= TOLERANCE[torch.float32]
    assert torch.equal(conv, conv_0)  # the committed conv inputs are the real tokens' own


@interpreting
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("p", [3, 20, 40])
def test_padding_changes_nothing_on_the_triton_path(p, dtype):
    """No real node reads a padded one and a padded node adds exact zeros in the kernels; what is
    left is the last bit of torch's CPU softplus and sigmoid, which round a vector's tail otherwise."""
    lin = PRESETS["tiny-hybrid"].linear
    layer = _layer(lin, dtype)
    (out, state, conv), (out_0, state_0, conv_0) = _both(lin, layer, p, dtype, "triton")
    assert _max_error(out, out_0) <= 1e-6 and _max_error(state, state_0) <= 1e-6
    assert torch.equal(conv, conv_0)
    (want, want_state, _), _ = _both(lin, layer, p, dtype, "torch")
    assert _max_error(out, want) <= TOLERANCE[dtype] and _max_error(state, want_state) <= TOLERANCE[dtype]


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)
    return TargetModel.from_seed(PRESETS["tiny-hybrid"], 0, torch.device("cpu"), torch.float32, 200)


def test_a_padded_prefill_predicts_what_an_unpadded_one_does(model, monkeypatch):
    """The greedy token at every position of prompts of each remainder class, padded (as on a GPU)
    or not (as the CPU engine runs)."""
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, model.config.vocab_size, (1, p), generator=g) for p in (1, 9, 16, 33, 64, 71, 150)]
    plain = [model.prefill(tokens) for tokens in prompts]
    monkeypatch.setattr(gdn, "prefill_chain", functools.partial(gdn.prefill_chain, pad=True))
    for tokens, want in zip(prompts, plain):
        got = model.prefill(tokens)
        assert torch.equal(got.argmax(-1), want.argmax(-1))
        assert _max_error(got, want) <= TOLERANCE[torch.float32]


def test_the_start_up_warm_meets_every_variant_a_prompt_meets(model, launch_keys):
    """The warm's prefills (warm.prefill_lengths) on an engine of the Triton kernels: prompts of
    every length 1..2 PREFILL_CHUNK afterwards compile nothing new."""
    from pytest_specdec.engine import warm
    from pytest_specdec.engine.decoding import SpeculativeDecoder

    dec = SpeculativeDecoder(model, "ar", 0, None, max_batch=2, max_seq_len=2 * PREFILL_CHUNK, kernel_impl="triton")
    lengths = warm.prefill_lengths(dec)
    assert lengths == gdn.prefill_buckets()
    with torch.inference_mode():
        for length in lengths:
            dec.prefill(0, list(range(length)))
        warmed = {name: set(keys) for name, keys in launch_keys.items()}
        for p in range(1, 2 * PREFILL_CHUNK + 1):
            dec.prefill(1, [p % 200] * p)
    assert {name: set(keys) for name, keys in launch_keys.items()} == warmed
