"""tree_causal_conv1d against a float64 oracle that convolves each node's path as a sequence."""

from __future__ import annotations

import zlib

import pytest
import torch
import torch.nn.functional as F

from hybrid_cases import SHAPES, conv_oracle, ragged_parents
from kernel_cases import DEVICE, FULL_GRID, assert_wrong_device_named, needs_triton
from specdec_kernels import tree_causal_conv1d

IMPLS = ["torch", pytest.param("triton", marks=needs_triton)]
NODE_COUNTS = (1, 2, 3, 9, 16, 17, 33, 64, 65)
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


def conv_cases():
    """(T, first shape, channels, kernel, dtype, bias, activation, batch); channels not a multiple
    of any channel block, kernels 4 (Qwen3.5/3.6), 2 and 3."""
    count = len(NODE_COUNTS) * (4 if FULL_GRID else 1)
    return [(NODE_COUNTS[i % len(NODE_COUNTS)], SHAPES[i % 4], (40, 1100)[FULL_GRID and i % 2], (4, 4, 2, 3)[i % 4],
             (torch.float32, torch.bfloat16)[i % 3 == 1], i % 2 == 0, ("silu", None)[i % 5 == 4], 1 + i % 3)
            for i in range(count)]


def case_name(case):
    t, shape, channels, kernel, dtype, bias, activation, batch = case
    return f"T{t}-{shape}-C{channels}-K{kernel}-{str(dtype)[6:]}-bias{int(bias)}-{activation}-B{batch}"


def conv_inputs(batch, num_nodes, channels, kernel, dtype, bias, gen):
    x = torch.randn(batch, num_nodes, channels, generator=gen).to(dtype)
    weight = torch.randn(channels, kernel, generator=gen).to(dtype)
    conv_state = torch.randn(batch, channels, kernel - 1, generator=gen).to(dtype)
    return x, weight, (torch.randn(channels, generator=gen).to(dtype) if bias else None), conv_state


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", conv_cases(), ids=case_name)
def test_every_node_convolves_its_own_path(case, impl):
    t, shape, channels, kernel, dtype, bias, activation, batch = case
    gen = torch.Generator().manual_seed(zlib.crc32(case_name(case).encode()))
    x, weight, b, state = conv_inputs(batch, t, channels, kernel, dtype, bias, gen)
    parents = ragged_parents(batch, t, shape, gen)
    want = conv_oracle(x, weight, b, state, parents, activation)
    dev = [a.to(DEVICE) if a is not None else None for a in (x, weight, b, state, parents)]
    got = tree_causal_conv1d(*dev, activation=activation, impl=impl)
    assert got.dtype == dtype
    err = (got.cpu().double() - want).abs().max() / want.abs().max()
    assert float(err) <= TOLERANCE[dtype]


@pytest.mark.parametrize("impl", IMPLS)
def test_chain_shaped_tree_is_an_ordinary_causal_conv(impl):
    gen = torch.Generator().manual_seed(3)
    x, weight, bias, state = conv_inputs(2, 20, 24, 4, torch.float32, True, gen)
    chain = torch.arange(-1, 19, dtype=torch.int32).expand(2, 20)
    got = tree_causal_conv1d(x.to(DEVICE), weight.to(DEVICE), bias.to(DEVICE), state.to(DEVICE), chain.to(DEVICE),
                             impl=impl)
    seq = torch.cat([state, x.transpose(1, 2)], dim=2)  # [B, C, K - 1 + T]
    want = F.silu(F.conv1d(seq, weight[:, None, :], bias, groups=24)).transpose(1, 2)
    assert torch.allclose(got.cpu(), want, atol=1e-5)


def test_bad_shapes_are_named():
    x = torch.zeros(1, 3, 8)
    weight, state, parents = torch.zeros(8, 4), torch.zeros(1, 8, 3), torch.tensor([[-1, 0, 0]], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"conv_state must be \[B, C, K - 1\]"):
        tree_causal_conv1d(x, weight, None, torch.zeros(1, 8, 4), parents, impl="torch")
    with pytest.raises(ValueError, match="activation must be one of"):
        tree_causal_conv1d(x, weight, None, state, parents, activation="relu", impl="torch")
    with pytest.raises(ValueError, match=r"parents must be \[B, T\]"):
        tree_causal_conv1d(x, weight, None, state, parents[:, :2], impl="torch")


BAD_PARENTS = [
    ([-1, 2, 0, 1], r"parents\[1, 1\] = 2: node 1's parent must be a node in \[0, 0\]"),    # after its child
    ([0, 0, 1, 1], r"parents\[1, 0\] = 0: node 0's parent must be -1"),                    # no root
    ([-1, 0, 7, 1], r"parents\[1, 2\] = 7: node 2's parent must be a node in \[0, 1\]"),    # out of range
    ([-1, -1, 1, 1], r"parents\[1, 1\] = -1: node 1's parent must be a node in \[0, 0\]"),  # two roots
]


@pytest.mark.parametrize("impl", ["torch", "triton"])
@pytest.mark.parametrize("parents,where", BAD_PARENTS)
def test_parents_out_of_order_on_the_host_are_named(parents, where, impl):
    """Request 1 breaks a DDTree's order: named by (request, node), before either path runs.
    Before, a parent out of range was torch's IndexError on the torch path and reads past the
    tree on the Triton one (outputs of 1e32), and the other three ran as some other tree."""
    x, weight, state = torch.randn(2, 4, 8), torch.randn(8, 4), torch.randn(2, 8, 3)
    parents_t = torch.tensor([[-1, 0, 1, 1], parents], dtype=torch.int32)
    with pytest.raises(ValueError, match=where):
        tree_causal_conv1d(x, weight, None, state, parents_t, impl=impl)


@needs_triton
def test_the_kernel_never_reads_past_the_tree_or_its_state():
    """Parents on a GPU are not checked (a host sync), so the kernel keeps each walk's parent in
    [-1, node - 1]: out-of-range parents (99, -5, a node's own index) read rows of the tree or
    columns of the committed state, as the reference does with the parents clamped so, never
    memory past them."""
    from specdec_kernels.tree_conv_triton import tree_causal_conv1d_triton

    gen = torch.Generator().manual_seed(3)
    x, weight, bias, state = conv_inputs(2, 6, 40, 4, torch.float32, True, gen)
    bad = torch.tensor([[-1, 0, 99, 1, -5, 5], [7, 0, 1, 2, 3, 4]], dtype=torch.int32)
    node = torch.arange(6, dtype=torch.int32)
    clamped = torch.minimum(bad.clamp(min=-1), node - 1)
    got = tree_causal_conv1d_triton(*(t.to(DEVICE) for t in (x, weight, bias, state, bad)), "silu")
    want = conv_oracle(x, weight, bias, state, clamped, "silu")
    assert torch.allclose(got.cpu().double(), want, atol=1e-5)


@pytest.mark.parametrize("impl", IMPLS)
def test_a_strided_bias_is_read_by_its_stride(impl):
    """A [C] view of every other element of a wider table: the Triton kernel read it as contiguous."""
    gen = torch.Generator().manual_seed(21)
    x, weight, _, state = conv_inputs(1, 3, 8, 4, torch.float32, False, gen)
    bias = torch.randn(8, 2, generator=gen)[:, 0]
    parents = torch.tensor([[-1, 0, 0]], dtype=torch.int32)
    args = [t.to(DEVICE) for t in (x, weight, bias, state, parents)]
    out = tree_causal_conv1d(*args, impl=impl)
    expect = tree_causal_conv1d(x, weight, bias.contiguous(), state, parents, impl="torch")
    torch.testing.assert_close(out.cpu(), expect, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("impl", IMPLS)
def test_parents_that_are_not_indices_are_named(impl):
    gen = torch.Generator().manual_seed(22)
    x, weight, bias, state = (t if t is None else t.to(DEVICE) for t in conv_inputs(1, 3, 8, 4, torch.float32, True, gen))
    with pytest.raises(ValueError, match=r"parents must be node indices \(int32 or int64\), got torch.float32; "
                                         r"pass parents\.to\(torch\.int32\)"):
        tree_causal_conv1d(x, weight, bias, state, torch.tensor([[-1.0, 0.0, 0.0]], device=DEVICE), impl=impl)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("which", ["x", "weight", "conv_state"])
def test_inputs_of_no_float_dtype_are_named(which, impl):
    """Integer conv inputs came back as integers (the convolution truncated, silently): named."""
    gen = torch.Generator().manual_seed(24)
    x, weight, _, state = conv_inputs(1, 3, 8, 4, torch.float32, False, gen)
    args = dict(x=x, weight=weight, conv_state=state)
    args[which] = args[which].round().to(torch.int64)
    args = {n: t.to(DEVICE) for n, t in args.items()}
    with pytest.raises(ValueError, match=rf"{which} must be a float tensor .*, got torch.int64; "
                                         rf"pass {which}\.float\(\)"):
        tree_causal_conv1d(args["x"], args["weight"], None, args["conv_state"],
                           torch.tensor([[-1, 0, 0]], dtype=torch.int32, device=DEVICE), impl=impl)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", ["weight", "bias", "conv_state", "parents"])
def test_an_argument_on_another_device_than_x_is_named(name, impl):
    """parents or a weight left on another device than x: named in one line with the fix."""
    x, weight, bias, state = conv_inputs(1, 3, 8, 4, torch.float32, True, torch.Generator().manual_seed(22))
    args = dict(x=x, weight=weight, bias=bias, conv_state=state, parents=torch.tensor([[-1, 0, 0]], dtype=torch.int32))
    assert_wrong_device_named(tree_causal_conv1d, {n: t.to(DEVICE) for n, t in args.items()}, name, "x", impl=impl)
