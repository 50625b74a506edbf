"""commit_recurrent_state: the state at the accepted path's end, and the conv inputs it leaves.

Against the float64 oracle's state at the path's last node (its path run as a plain sequence),
for ragged batches whose paths run from the root alone (shorter than the conv's K - 1, so old
conv columns survive) to the whole depth of a 65-node chain; then verify and commit together
step through a sequence exactly as the ordinary rule does.
"""

from __future__ import annotations

import zlib

import pytest
import torch

from hybrid_cases import SHAPES, delta_inputs, mask_of, path_oracle, ragged_parents, random_paths, run_path64
from kernel_cases import DEVICE, FULL_GRID, assert_wrong_device_named, needs_triton, row_errors
from specdec_kernels import commit_recurrent_state, tree_gated_delta_rule

IMPLS = ["torch", pytest.param("triton", marks=needs_triton)]
STATE_TOLERANCE = 1e-5  # float32 replay against float64, relative per state column


def commit_cases():
    """(T, first shape, Hk, GQA ratio, dtype, Dk, Dv, path lengths per request)."""
    cases = [(1, "chain", 1, 3, torch.float32, 16, 16, (1, 1)),
             (9, "fanout", 2, 1, torch.bfloat16, 16, 32, (1, 2, 2)),
             (17, "best_first", 1, 3, torch.float32, 32, 16, (3, 1, 5, 2)),
             (65, "chain", 1, 1, torch.float32, 16, 16, (65, 2, 40)),
             (33, "deep_narrow", 1, 3, torch.bfloat16, 16, 16, (12, 4))]
    if FULL_GRID:
        cases += [(t, shape, 2, 3, torch.bfloat16, 128, 128, (1, 4, t)) for t in (9, 17, 33, 65) for shape in SHAPES]
    return cases


def case_name(case):
    t, shape, hk, group, dtype, dk, dv, lengths = case
    return f"T{t}-{shape}-Hk{hk}x{group}-{str(dtype)[6:]}-Dk{dk}-Dv{dv}-paths{'.'.join(map(str, lengths))}"


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", commit_cases(), ids=case_name)
def test_commit_leaves_the_state_at_the_paths_end(case, impl):
    t, shape, key_heads, group, dtype, key_dim, value_dim, lengths = case
    batch, channels, kernel = len(lengths), 24, 4
    gen = torch.Generator().manual_seed(zlib.crc32(case_name(case).encode()))
    x = delta_inputs(batch, t, key_heads, group, key_dim, value_dim, dtype, gen)
    parents = ragged_parents(batch, t, shape, gen)
    path, path_len = random_paths(parents, gen, lengths)
    conv_inputs = torch.randn(batch, t, channels, generator=gen).to(dtype)
    conv_state = torch.randn(batch, channels, kernel - 1, generator=gen).to(dtype)
    want_state = torch.stack([run_path64(x["state"][b], x["k"][b], x["v"][b], x["g"][b], x["beta"][b],
                                         path[b, :int(path_len[b])].tolist(), group) for b in range(batch)])
    history = [torch.cat([conv_state[b], conv_inputs[b, path[b, :int(path_len[b])].long()].t()], dim=1)
               for b in range(batch)]
    want_conv = torch.stack([h[:, -(kernel - 1):] for h in history])

    dev = {n: a.to(DEVICE) for n, a in x.items()}
    state, conv = dev.pop("state").clone(), conv_state.to(DEVICE)
    del dev["q"]
    commit_recurrent_state(state, conv, conv_inputs.to(DEVICE), **dev, path=path.to(DEVICE),
                           path_len=path_len.to(DEVICE), impl=impl)
    err = row_errors(state.cpu().transpose(-1, -2), want_state.transpose(-1, -2))
    assert float(err.max()) <= STATE_TOLERANCE, f"state off by {float(err.max()):.3g}"
    assert torch.equal(conv.cpu(), want_conv), "conv state is not the last K - 1 inputs of the path"


@pytest.mark.parametrize("impl", IMPLS)
def test_verify_then_commit_steps_through_a_sequence(impl):
    """Three steps of (verify a random tree, accept a path, commit it): every node's output is the
    ordinary rule's over the accepted sequence so far followed by the node's own path."""
    gen = torch.Generator().manual_seed(11)
    batch, t, key_heads, group, dim = 2, 9, 1, 3, 16
    state = delta_inputs(batch, 1, key_heads, group, dim, dim, torch.float32, gen)["state"].to(DEVICE)
    accepted = state.cpu().double()  # the oracle's committed state, float64 all along
    conv = torch.zeros(batch, 8, 3, device=DEVICE)
    for step, shape in enumerate(("best_first", "fanout", "deep_narrow")):
        x = delta_inputs(batch, t, key_heads, group, dim, dim, torch.float32, gen)
        del x["state"]
        parents = ragged_parents(batch, t, shape, gen)
        path, path_len = random_paths(parents, gen)
        want = path_oracle(**x, state=accepted, parents=parents, scale=dim ** -0.5)
        dev = {n: a.to(DEVICE) for n, a in x.items()}
        got = tree_gated_delta_rule(**dev, state=state, ancestor_mask=mask_of(parents).to(DEVICE), impl=impl)
        assert float(row_errors(got.cpu(), want).max()) <= 2e-4, f"step {step}"
        del dev["q"]
        commit_recurrent_state(state, conv, torch.zeros(batch, t, 8, device=DEVICE), **dev, path=path.to(DEVICE),
                               path_len=path_len.to(DEVICE), impl=impl)
        accepted = torch.stack([run_path64(accepted[b], x["k"][b], x["v"][b], x["g"][b], x["beta"][b],
                                           path[b, :int(path_len[b])].tolist(), group) for b in range(batch)])
        assert float(row_errors(state.cpu().transpose(-1, -2), accepted.transpose(-1, -2)).max()) <= STATE_TOLERANCE


def test_bad_inputs_are_named():
    gen = torch.Generator().manual_seed(12)
    x = delta_inputs(1, 3, 1, 1, 16, 16, torch.float32, gen)
    args = dict(conv_state=torch.zeros(1, 4, 3), conv_inputs=torch.zeros(1, 3, 4), k=x["k"], v=x["v"], g=x["g"],
                beta=x["beta"], path=torch.tensor([[0, 1, -1]], dtype=torch.int32),
                path_len=torch.tensor([2], dtype=torch.int32))
    with pytest.raises(ValueError, match="state must be the float32 recurrent state, got torch.float64"):
        commit_recurrent_state(x["state"].double(), **args, impl="torch")
    with pytest.raises(ValueError, match=r"conv_state must be \[B, C, K - 1\]"):
        commit_recurrent_state(x["state"], **dict(args, conv_state=torch.zeros(1, 5, 3)), impl="torch")
    with pytest.raises(ValueError, match=r"path must be \[B, T\]"):
        commit_recurrent_state(x["state"], **dict(args, path=args["path"][:, :2]), impl="torch")


def test_a_path_no_acceptance_gives_is_named_on_the_host():
    """The replay reads the path's nodes: one past T, or out of order, is named before anything
    changes (the same check as the KV commit's)."""
    batch, num_nodes, heads, dim, channels = 2, 4, 1, 8, 6
    k = torch.nn.functional.normalize(torch.randn(batch, num_nodes, heads, dim), dim=-1)
    v = torch.randn(batch, num_nodes, heads, dim)
    g, beta = -torch.rand(batch, num_nodes, heads), torch.rand(batch, num_nodes, heads)
    state, conv_state = torch.zeros(batch, heads, dim, dim), torch.zeros(batch, channels, 3)
    before = state.clone()
    path = torch.tensor([[0, 1, -1, -1], [0, 2, 1, -1]], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"path\[1\] = \[0, 2, 1\]"):
        commit_recurrent_state(state, conv_state, torch.randn(batch, num_nodes, channels), k, v, g, beta, path,
                               torch.tensor([2, 3], dtype=torch.int32), impl="torch")
    assert torch.equal(state, before)


@pytest.mark.parametrize("impl", IMPLS)
def test_a_strided_path_len_is_read_by_its_stride(impl):
    """A [B] column of a bookkeeping table: the Triton kernel read it as contiguous, replaying the
    table's other column's steps (a wrong state, or past the path)."""
    x = delta_inputs(2, 3, 1, 1, 16, 16, torch.float32, torch.Generator().manual_seed(23))
    path = torch.tensor([[0, 1, -1], [0, 1, 2]], dtype=torch.int32)
    table = torch.tensor([[2, 99], [3, 99]], dtype=torch.int32)
    conv_state, conv_inputs = torch.randn(2, 8, 3), torch.randn(2, 3, 8)

    def commit(path_len, how, device):
        state, conv = x["state"].clone().to(device), conv_state.clone().to(device)
        commit_recurrent_state(state, conv, conv_inputs.to(device), x["k"].to(device), x["v"].to(device),
                               x["g"].to(device), x["beta"].to(device), path.to(device), path_len, impl=how)
        return state.cpu(), conv.cpu()

    got = commit(table.to(DEVICE)[:, 0], impl, DEVICE)
    expect = commit(table[:, 0].contiguous(), "torch", torch.device("cpu"))
    for a, b in zip(got, expect):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("which, dtype", [("path", torch.float32), ("path_len", torch.float32),
                                          ("path_len", torch.bool)], ids=["float-path", "float-len", "bool-len"])
def test_a_path_of_no_integer_dtype_is_named(which, dtype, impl):
    """A float path was truncated (node 1.5 replayed node 1) by the reference, and a float path_len
    failed to compile in the Triton kernel: both are named before anything changes."""
    x = delta_inputs(1, 3, 1, 1, 16, 16, torch.float32, torch.Generator().manual_seed(31))
    args = dict(path=torch.tensor([[0, 1, -1]], dtype=torch.int32), path_len=torch.tensor([2], dtype=torch.int32))
    args[which] = args[which].to(dtype)
    state = x["state"].to(DEVICE)
    before = state.clone()
    with pytest.raises(ValueError, match=rf"{which} must be .* \(int32 or int64\), got torch\.{str(dtype)[6:]}; "
                                          rf"pass {which}\.to\(torch\.int32\)"):
        commit_recurrent_state(state, torch.zeros(1, 4, 3, device=DEVICE), torch.zeros(1, 3, 4, device=DEVICE),
                               x["k"].to(DEVICE), x["v"].to(DEVICE), x["g"].to(DEVICE), x["beta"].to(DEVICE),
                               **{n: t.to(DEVICE) for n, t in args.items()}, impl=impl)
    assert torch.equal(state, before)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("which", ["conv_inputs", "conv_state"])
def test_conv_inputs_of_no_float_dtype_are_named(which, impl):
    """As tree_causal_conv1d names them: integer conv inputs were copied into the conv state, an
    integer conv state took the path's inputs truncated, without a word. Nothing is written. The
    conv state's fix says to keep the float copy: the commit updates the tensor it is given, so a
    caller passing conv_state.float() alone would lose the update without a word."""
    x = delta_inputs(1, 3, 1, 1, 16, 16, torch.float32, torch.Generator().manual_seed(33))
    convs = dict(conv_inputs=torch.randn(1, 3, 4).mul(3), conv_state=torch.randn(1, 4, 3).mul(3))
    convs[which] = convs[which].to(torch.int64)
    state = x["state"].to(DEVICE)
    before = state.clone()
    wrong = rf"{which} must be a float tensor .*, got torch.int64; pass {which}\.float"
    with pytest.raises(ValueError, match=wrong) as err:
        commit_recurrent_state(state, convs["conv_state"].to(DEVICE), convs["conv_inputs"].to(DEVICE),
                               x["k"].to(DEVICE), x["v"].to(DEVICE), x["g"].to(DEVICE), x["beta"].to(DEVICE),
                               torch.tensor([[0, 1, -1]], dtype=torch.int32, device=DEVICE),
                               torch.tensor([2], dtype=torch.int32, device=DEVICE), impl=impl)
    assert torch.equal(state, before)
    assert ("keep that copy" in str(err.value)) == (which == "conv_state"), err.value


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("which", ["state", "conv_state"])
def test_a_state_whose_elements_share_memory_is_named(which, impl):
    """One state expanded over the batch: Triton's programs wrote the same memory without a word,
    where torch raised its own RuntimeError."""
    x = delta_inputs(2, 3, 1, 1, 16, 16, torch.float32, torch.Generator().manual_seed(32))
    states = dict(state=x["state"].to(DEVICE), conv_state=torch.zeros(2, 4, 3, device=DEVICE))
    states[which] = states[which][:1].expand_as(states[which])
    with pytest.raises(ValueError, match=rf"{which} .* has a dimension of stride 0 .*pass {which}\.contiguous\(\)"):
        commit_recurrent_state(states["state"], states["conv_state"], torch.zeros(2, 3, 4, device=DEVICE),
                               x["k"].to(DEVICE), x["v"].to(DEVICE), x["g"].to(DEVICE), x["beta"].to(DEVICE),
                               torch.tensor([[0, 1, -1]] * 2, dtype=torch.int32, device=DEVICE),
                               torch.tensor([2, 2], dtype=torch.int32, device=DEVICE), impl=impl)


@needs_triton
@pytest.mark.parametrize("layout", ["transposed_state", "conv_kernel_of_one"])
def test_a_layout_the_triton_commit_cannot_take_names_the_fix(layout):
    """A state viewed [B, Hv, Dk, Dv] from a [B, Hv, Dv, Dk] allocation, or a conv kernel of 1:
    the one-line refusal named no way out; the torch path commits both."""
    args = commit_args()
    if layout == "transposed_state":
        args["state"] = args["state"].transpose(2, 3).contiguous().transpose(2, 3)
        message = (r"state must have a contiguous last dim \(Dv\) for impl='triton', got strides .*; "
                   r"pass state\.contiguous\(\) and keep that copy .*, or impl='torch'")
    else:
        args["conv_state"] = args["conv_state"][..., :0]
        message = r"conv_state must have K - 1 >= 1 columns for impl='triton', got \(1, 4, 0\) .*use impl='torch'"
    with pytest.raises(ValueError, match=message):
        commit_recurrent_state(**{n: t.to(DEVICE) for n, t in args.items()}, impl="triton")
    commit_recurrent_state(**args, impl="torch")


def commit_args() -> dict:
    """A valid commit_recurrent_state call on the CPU: one request, 3 nodes, path 0 -> 1."""
    x = delta_inputs(1, 3, 1, 1, 16, 16, torch.float32, torch.Generator().manual_seed(12))
    return dict(state=x["state"], conv_state=torch.zeros(1, 4, 3), conv_inputs=torch.zeros(1, 3, 4), k=x["k"],
                v=x["v"], g=x["g"], beta=x["beta"], path=torch.tensor([[0, 1, -1]], dtype=torch.int32),
                path_len=torch.tensor([2], dtype=torch.int32))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", ["conv_state", "conv_inputs", "k", "v", "g", "beta", "path", "path_len"])
def test_an_argument_on_another_device_than_the_state_is_named(name, impl):
    """A path or conv input left on another device than the state: named in one line, nothing changed."""
    args = {n: t.to(DEVICE) for n, t in commit_args().items()}
    assert_wrong_device_named(commit_recurrent_state, args, name, "state", impl=impl)


def test_k_and_v_of_two_dtypes_are_named_as_k_and_v():
    """The commit has no q: its k and v dtypes are named as its own arguments."""
    args = commit_args()
    with pytest.raises(ValueError, match=r"v must be k's dtype \(torch.float32\), got torch.float16; "
                                         r"pass v\.to\(k\.dtype\)"):
        commit_recurrent_state(**dict(args, v=args["v"].half()), impl="torch")
    with pytest.raises(ValueError, match=r"k and v must be float tensors .*, got torch.int64; "
                                         r"pass k\.float\(\), v\.float\(\)"):
        commit_recurrent_state(**dict(args, k=args["k"].long(), v=args["v"].long()), impl="torch")
