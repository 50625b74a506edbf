"""tree_accept_and_commit (one fused launch on the GPU) against accept then commit, separately."""

from __future__ import annotations

import pytest
import torch

from interpreter_traffic import moved_rows, needs_interpreter, record_row_traffic
from kernel_cases import DEVICE, assert_wrong_device_named, needs_triton
from specdec_kernels import commit_accepted_kv, tree_accept_and_commit, tree_accept_greedy

IMPLS = ["torch", pytest.param("triton", marks=needs_triton)]


def random_case(batch, num_nodes, seed, follow):
    """Deep random trees (node i hangs off one of the three nodes before it); with probability
    ``follow`` the target's argmax at a node is the token of its child with the tallest subtree
    (so paths run long and skip over siblings), else a token no child carries."""
    gen = torch.Generator().manual_seed(seed)
    back = torch.randint(1, 4, (batch, num_nodes), generator=gen)
    parents = (torch.arange(num_nodes) - back).clamp(min=0).to(torch.int32)
    parents[:, 0] = -1
    tokens = torch.randint(0, 1000, (batch, num_nodes), generator=gen)
    argmax = torch.full((batch, num_nodes), -7, dtype=torch.int64)
    for b in range(batch):
        height = [0] * num_nodes
        for node in range(num_nodes - 1, 0, -1):
            parent = int(parents[b, node])
            height[parent] = max(height[parent], height[node] + 1)
        for node in range(num_nodes):
            children = (parents[b] == node).nonzero().flatten().tolist()
            if children and torch.rand(1, generator=gen).item() < follow:
                argmax[b, node] = tokens[b, max(children, key=lambda c: height[c])]
    return tokens, parents, argmax


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("batch,num_nodes,follow,lens", [
    (4, 17, 0.9, [0, 5, 100, 31]),
    (3, 33, 1.0, [7, 0, 2]),       # long paths: several rounds of four steps
    (2, 9, 0.0, [3, 4]),           # nothing accepted: path of the root alone
    (2, 64, 1.0, [40, 9]),
])
def test_fused_equals_accept_then_commit(batch, num_nodes, follow, lens, impl):
    tokens, parents, argmax = random_case(batch, num_nodes, seed=num_nodes + batch, follow=follow)
    layers, kv_heads, head_dim = 3, 2, 64
    rows = max(lens) + num_nodes + 3
    gen = torch.Generator().manual_seed(batch)
    k = torch.randn(layers, batch, rows, kv_heads, head_dim, generator=gen).to(torch.bfloat16)
    v = torch.randn(layers, batch, rows, kv_heads, head_dim, generator=gen).to(torch.bfloat16)
    lens_t = torch.tensor(lens, dtype=torch.int32)
    expect = tree_accept_greedy(tokens, parents, argmax, impl="torch")
    expect_k, expect_v = k.clone(), v.clone()
    commit_accepted_kv(expect_k, expect_v, lens_t, expect.path, expect.path_len, impl="torch")
    if follow > 0:
        assert int(expect.path_len.max()) > 4, "the case accepts too little to test several steps"

    to = dict(device=DEVICE)
    k_dev, v_dev = k.to(**to), v.to(**to)
    got = tree_accept_and_commit(tokens.to(**to), parents.to(**to), argmax.to(**to), k_dev, v_dev,
                                 lens_t.to(**to), impl=impl)
    assert torch.equal(got.path.cpu(), expect.path)
    assert torch.equal(got.path_len.cpu(), expect.path_len)
    assert torch.equal(got.bonus.cpu(), expect.bonus)
    assert torch.equal(k_dev.cpu(), expect_k) and torch.equal(v_dev.cpu(), expect_v)


@needs_triton
@pytest.mark.parametrize("doubling", [True, False])
def test_fused_kernel_writes_every_output(doubling):
    """Poisoned outputs: path, path_len and bonus are all written by the one writing program, by
    either walk (the policy's)."""
    from specdec_kernels.accept_commit_triton import tree_accept_and_commit_triton
    from specdec_kernels.tree_accept import AcceptResult
    from specdec_kernels.tree_accept_triton import AcceptPolicy

    tokens, parents, argmax = random_case(3, 17, seed=5, follow=0.9)
    expect = tree_accept_greedy(tokens, parents, argmax, impl="torch")
    k = torch.zeros(2, 3, 30, 1, 32, device=DEVICE)
    poisoned = AcceptResult(torch.full((3, 17), 99, dtype=torch.int32, device=DEVICE),
                            torch.full((3,), 99, dtype=torch.int32, device=DEVICE),
                            torch.full((3,), 99, dtype=torch.int64, device=DEVICE))
    to = dict(device=DEVICE)
    got = tree_accept_and_commit_triton(tokens.to(**to), parents.to(**to), argmax.to(**to), k, k.clone(),
                                        torch.zeros(3, dtype=torch.int32, device=DEVICE), out=poisoned,
                                        policy=AcceptPolicy(walk_by_doubling=doubling))
    for name in ("path", "path_len", "bonus"):
        assert torch.equal(getattr(got, name).cpu(), getattr(expect, name)), name


# one tree for every request: node 1 under the root, nodes 2 and 3 under node 1; the target
# follows nodes 1 and 3, so the accepted path is [0, 1, 3] (a move of row L + 3 to L + 2)
FOLLOW_THREE = (torch.tensor([[5, 6, 7, 8]]), torch.tensor([[-1, 0, 1, 1]], dtype=torch.int32),
                torch.tensor([[6, 8, 0, 9]]))


@pytest.mark.parametrize("lens", [[8, 9], [8, -2]])
def test_lengths_on_the_host_that_leave_the_caches_are_rejected(lens):
    tokens, parents, argmax = (t.expand(2, 4) for t in FOLLOW_THREE)
    k = torch.zeros(1, 2, 12, 1, 8)
    with pytest.raises(ValueError, match=rf"cache_lens\[1\] = {lens[1]}: .*S - T = 8"):
        tree_accept_and_commit(tokens, parents, argmax, k, k.clone(), torch.tensor(lens, dtype=torch.int32))


@needs_triton
def test_a_request_whose_rows_leave_the_caches_moves_nothing_but_is_accepted():
    """On a GPU the lengths are not checked: the fused kernel still accepts every request, and
    moves no row of one whose tree rows would leave its S rows (unguarded, L = 10 would write
    request 1's row 0 and L = -3 its row 11)."""
    from specdec_kernels.accept_commit_triton import tree_accept_and_commit_triton

    tokens, parents, argmax = (t.expand(3, 4).to(DEVICE) for t in FOLLOW_THREE)
    gen = torch.Generator().manual_seed(4)
    k, v = torch.randn(1, 3, 12, 1, 8, generator=gen), torch.randn(1, 3, 12, 1, 8, generator=gen)
    expect_k, expect_v = k.clone(), v.clone()
    expect_k[:, 1, 6], expect_v[:, 1, 6] = k[:, 1, 7], v[:, 1, 7]  # request 1 (L = 4) only
    k_dev, v_dev = k.to(DEVICE), v.to(DEVICE)
    got = tree_accept_and_commit_triton(tokens, parents, argmax, k_dev, v_dev,
                                        torch.tensor([10, 4, -3], dtype=torch.int32, device=DEVICE))
    assert got.path_len.tolist() == [3, 3, 3] and got.path[:, :3].tolist() == [[0, 1, 3]] * 3
    assert torch.equal(k_dev.cpu(), expect_k) and torch.equal(v_dev.cpu(), expect_v)


@pytest.mark.parametrize("impl", IMPLS)
def test_caches_whose_elements_share_memory_are_named(impl):
    """As commit_accepted_kv does: an expanded cache's moves wrote each other's rows without a word
    (one request's rows moved into every request's; torch only warned that index_put_ on an
    expanded tensor is deprecated)."""
    tokens, parents, argmax = (t.expand(2, 4).to(DEVICE) for t in FOLLOW_THREE)
    k = torch.zeros(1, 1, 12, 1, 8, device=DEVICE).expand(1, 2, 12, 1, 8)
    lens = torch.tensor([0, 1], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match=r"k_cache \(1, 2, 12, 1, 8\) has a dimension of stride 0"):
        tree_accept_and_commit(tokens, parents, argmax, k, k.contiguous(), lens, impl=impl)
    with pytest.raises(ValueError, match=r"v_cache \(1, 2, 12, 1, 8\) has a dimension of stride 0"):
        tree_accept_and_commit(tokens, parents, argmax, k.contiguous(), k, lens, impl=impl)


def test_mismatched_batch_is_rejected_with_the_inputs_named():
    tokens, parents, argmax = random_case(2, 9, seed=1, follow=0.5)
    k = torch.zeros(1, 3, 20, 1, 8)
    with pytest.raises(ValueError, match="tokens hold B=2 requests, but the caches hold 3"):
        tree_accept_and_commit(tokens, parents, argmax, k, k.clone(), torch.zeros(3, dtype=torch.int32))
    with pytest.raises(ValueError, match="T=9 tree rows do not fit in S=5"):
        small = torch.zeros(1, 2, 5, 1, 8)
        tree_accept_and_commit(tokens, parents, argmax, small, small.clone(), torch.zeros(2, dtype=torch.int32))


# T = 6, tokens 10 + node: request 0 a chain accepted whole ([0 .. 5]), request 1 the same chain
# accepted up to node 2, request 2 a tree whose path [0, 1, 3, 4, 5] skips node 2 (steps 2-4 move)
IN_PLACE_TREES = (torch.tensor([[10, 11, 12, 13, 14, 15]] * 3),
                  torch.tensor([[-1, 0, 1, 2, 3, 4], [-1, 0, 1, 2, 3, 4], [-1, 0, 1, 1, 3, 4]], dtype=torch.int32),
                  torch.tensor([[11, 12, 13, 14, 15, 0], [11, 12, 0, 0, 0, 0], [11, 13, 0, 14, 15, 0]]))


@needs_interpreter
@pytest.mark.parametrize("requests,lens", [([0, 1], [4, 0]), ([0, 1, 2], [1, 7, 3])])
@pytest.mark.parametrize("doubling", [True, False])
def test_fused_kernel_neither_reads_nor_writes_rows_already_in_place(requests, lens, doubling, monkeypatch):
    """Issue 3's "no copy when the path is already contiguous", in the fused kernel: recorded by
    the interpreter, its cache loads and stores are exactly the rows of steps that move (none where
    every accepted path is contiguous)."""
    from specdec_kernels.accept_commit_triton import tree_accept_and_commit_triton
    from specdec_kernels.tree_accept_triton import AcceptPolicy

    tokens, parents, argmax = (t[requests] for t in IN_PLACE_TREES)
    expect = tree_accept_greedy(tokens, parents, argmax, impl="torch")
    paths = [row[:n].tolist() for row, n in zip(expect.path, expect.path_len.tolist())]
    assert paths[:2] == [list(range(6)), [0, 1, 2]], "the case's contiguous paths changed"
    layers = 2
    gen = torch.Generator().manual_seed(len(requests))
    k, v = (torch.randn(layers, len(requests), max(lens) + 8, 1, 16, generator=gen) for _ in range(2))
    lens_t = torch.tensor(lens, dtype=torch.int32)
    expect_k, expect_v = k.clone(), v.clone()
    commit_accepted_kv(expect_k, expect_v, lens_t, expect.path, expect.path_len, impl="torch")
    with record_row_traffic(monkeypatch, k=k, v=v) as traffic:
        got = tree_accept_and_commit_triton(tokens, parents, argmax, k, v, lens_t,
                                            policy=AcceptPolicy(walk_by_doubling=doubling))
    assert torch.equal(got.path, expect.path) and torch.equal(got.path_len, expect.path_len)
    written, read = moved_rows(lens, paths, layers)
    for name in ("k", "v"):
        assert traffic[name].stored == written, name
        assert traffic[name].loaded == read, name
    assert torch.equal(k, expect_k) and torch.equal(v, expect_v)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", ["parents", "target_argmax", "k_cache", "v_cache", "cache_lens"])
def test_an_argument_on_another_device_than_tokens_is_named(name, impl):
    """A cache or the lengths on another device than the tree: named in one line, nothing moved."""
    k = torch.zeros(1, 1, 8, 1, 4)
    args = dict(tokens=torch.tensor([[5, 1001, 7]]), parents=torch.tensor([[-1, 0, 0]], dtype=torch.int32),
                target_argmax=torch.tensor([[1000, 3, 4]]), k_cache=k, v_cache=k.clone(),
                cache_lens=torch.zeros(1, dtype=torch.int32))
    assert_wrong_device_named(tree_accept_and_commit, {n: t.to(DEVICE) for n, t in args.items()}, name, "tokens",
                              impl=impl)
