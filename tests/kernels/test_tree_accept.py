"""tree_accept_greedy against a plain Python walk, zero-accept and duplicate-sibling cases."""

from __future__ import annotations

import pytest
import torch

from kernel_cases import (DEVICE, FULL_GRID, NODE_COUNTS, TREE_SHAPES, assert_wrong_device_named, needs_triton,
                          random_parents)
from specdec_kernels import tree_accept_greedy
from specdec_kernels.impl import triton_interpreting

IMPLS = ["torch", pytest.param("triton", marks=needs_triton)]


def python_walk(tokens, parents, argmax):
    """From the root, take the lowest-index child whose token is the argmax; stop at none."""
    path, current = [0], 0
    while True:
        nxt = next((c for c in range(1, len(tokens))
                    if parents[c] == current and tokens[c] == argmax[current]), None)
        if nxt is None:
            return path, argmax[current]
        path.append(nxt)
        current = nxt


def run_accept(tokens, parents, argmax, impl, policy=None):
    """The path, length and bonus by ``impl``; on Triton, ``policy`` (default: the launcher's) picks
    the walk, and the public op (default policy) must agree with it."""
    tokens, parents, argmax = tokens.to(DEVICE), parents.to(DEVICE), argmax.to(DEVICE)
    if impl == "triton":
        from specdec_kernels.tree_accept import AcceptResult
        from specdec_kernels.tree_accept_triton import DEFAULT_ACCEPT_POLICY, tree_accept_greedy_triton

        batch, num_nodes = tokens.shape
        poisoned = AcceptResult(torch.full((batch, num_nodes), -7, dtype=torch.int32, device=DEVICE),
                                torch.full((batch,), -7, dtype=torch.int32, device=DEVICE),
                                torch.full((batch,), -7, dtype=torch.int64, device=DEVICE))
        result = tree_accept_greedy_triton(tokens, parents, argmax, out=poisoned,
                                           policy=policy or DEFAULT_ACCEPT_POLICY)
        public = tree_accept_greedy(tokens, parents, argmax, impl="triton")
        for a, b in zip(result, public):
            assert torch.equal(a, b)
        return result
    return tree_accept_greedy(tokens, parents, argmax, impl="torch")


def random_accept_case(batch, num_nodes, shape, vocab, accept_prob, gen):
    """Trees with tokens from a small vocabulary (siblings may repeat a token) and target
    argmaxes that follow some child with probability ``accept_prob``."""
    parents = torch.stack([random_parents(num_nodes, shape, gen) for _ in range(batch)])
    tokens = torch.randint(0, vocab, (batch, num_nodes), generator=gen)
    argmax = torch.randint(0, vocab, (batch, num_nodes), generator=gen)
    for b in range(batch):
        for node in range(num_nodes):
            kids = (parents[b] == node).nonzero().flatten()
            if len(kids) and float(torch.rand(1, generator=gen)) < accept_prob:
                argmax[b, node] = tokens[b, kids[int(torch.randint(0, len(kids), (1,), generator=gen))]]
    return tokens, parents, argmax


def check_against_walk(result, tokens, parents, argmax):
    path, path_len, bonus = (t.cpu() for t in result)
    assert path.dtype == torch.int32 and path_len.dtype == torch.int32 and bonus.dtype == torch.int64
    for b in range(tokens.shape[0]):
        expect_path, expect_bonus = python_walk(tokens[b].tolist(), parents[b].tolist(), argmax[b].tolist())
        n = len(expect_path)
        assert int(path_len[b]) == n
        assert path[b].tolist() == expect_path + [-1] * (tokens.shape[1] - n)
        assert int(bonus[b]) == expect_bonus


ACCEPT_CASES = [(t, s) for t in NODE_COUNTS for s in TREE_SHAPES] if FULL_GRID else \
    [(NODE_COUNTS[i], TREE_SHAPES[i % 4]) for i in range(len(NODE_COUNTS))]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("num_nodes,shape", ACCEPT_CASES)
def test_accept_equals_python_walk(num_nodes, shape, impl):
    gen = torch.Generator().manual_seed(num_nodes * 7 + len(shape))
    for vocab, accept_prob in ((4, 0.9), (50, 0.6), (1000, 0.95)):
        tokens, parents, argmax = random_accept_case(5, num_nodes, shape, vocab, accept_prob, gen)
        check_against_walk(run_accept(tokens, parents, argmax, impl), tokens, parents, argmax)


@pytest.mark.parametrize("impl", IMPLS)
def test_zero_accepted_drafts_gives_only_the_bonus(impl):
    tokens = torch.tensor([[5, 1, 2, 3, 4]])
    parents = torch.tensor([[-1, 0, 0, 1, 2]], dtype=torch.int32)
    argmax = torch.tensor([[9, 3, 4, 0, 0]])  # the target wants 9 after the root: no child has it
    path, path_len, bonus = run_accept(tokens, parents, argmax, impl)
    assert path.tolist() == [[0, -1, -1, -1, -1]]
    assert path_len.tolist() == [1]
    assert bonus.tolist() == [9]


@pytest.mark.parametrize("impl", IMPLS)
def test_full_chain_and_duplicate_siblings(impl):
    # request 0: chain fully accepted, bonus from the last node
    # request 1: nodes 1 and 2 both carry token 7 under the root: the lower index (1) is taken
    tokens = torch.tensor([[0, 7, 8, 9], [0, 7, 7, 3]])
    parents = torch.tensor([[-1, 0, 1, 2], [-1, 0, 0, 2]], dtype=torch.int32)
    argmax = torch.tensor([[7, 8, 9, 42], [7, 3, 3, 11]])
    path, path_len, bonus = run_accept(tokens, parents, argmax, impl)
    assert path.tolist() == [[0, 1, 2, 3], [0, 1, -1, -1]]
    assert path_len.tolist() == [4, 2]
    assert bonus.tolist() == [42, 3]


@needs_triton
@pytest.mark.parametrize("num_nodes", [15, 16, 31, 127, 128, 200])
@pytest.mark.parametrize("doubling", [True, False])
def test_both_walks_on_long_paths(num_nodes, doubling):
    """The walk by doubling (up to 127 nodes: 128 lanes, one past the tree) and the walk step by
    step (past that, and where a policy turns doubling off) give the python walk's path, also
    when the whole tree is one accepted chain (the longest path, every doubling round used)."""
    from specdec_kernels.tree_accept_triton import AcceptPolicy, walk_constexprs

    policy = AcceptPolicy(walk_by_doubling=doubling)
    assert walk_constexprs(num_nodes, policy=policy)["DOUBLING"] == (doubling and num_nodes < 128)
    gen = torch.Generator().manual_seed(num_nodes)
    tokens, parents, argmax = random_accept_case(3, num_nodes, "deep_narrow", 3, 0.9, gen)
    chain_tokens = torch.arange(num_nodes).unsqueeze(0)
    chain_parents = (torch.arange(num_nodes, dtype=torch.int32) - 1).unsqueeze(0)
    chain_argmax = torch.arange(1, num_nodes + 1).unsqueeze(0)  # every next token accepted
    tokens, parents, argmax = (torch.cat(pair) for pair in ((tokens, chain_tokens), (parents, chain_parents),
                                                             (argmax, chain_argmax)))
    result = run_accept(tokens, parents, argmax, "triton", policy)
    check_against_walk(result, tokens, parents, argmax)
    assert int(result.path_len[-1]) == num_nodes


@needs_triton
@pytest.mark.parametrize("num_nodes", [1, 15, 16, 127, 128, 200])
def test_the_default_policy_walks_by_doubling_up_to_128_lanes(num_nodes):
    """The default walk is the one the fused accept + commit measured faster (doubling) wherever
    its [T, T] comparison fits, and step by step past it; a call without a policy gets it."""
    from specdec_kernels.tree_accept_triton import DEFAULT_ACCEPT_POLICY, AcceptPolicy, walk_constexprs

    assert DEFAULT_ACCEPT_POLICY == AcceptPolicy(walk_by_doubling=True)
    assert walk_constexprs(num_nodes) == walk_constexprs(num_nodes, policy=DEFAULT_ACCEPT_POLICY)
    assert walk_constexprs(num_nodes)["DOUBLING"] == (num_nodes < 128)
    assert walk_constexprs(num_nodes, policy=AcceptPolicy(walk_by_doubling=False))["DOUBLING"] is False


@pytest.mark.parametrize("impl", ["torch", pytest.param("triton", marks=pytest.mark.skipif(
    not triton_interpreting(), reason="the Triton path on CPU tensors needs the interpreter"))])
@pytest.mark.parametrize("parents,where", [
    ([-1, 2, 0, 1], r"parents\[1, 1\] = 2: node 1's parent must be a node in \[0, 0\]"),    # after its child
    ([0, 0, 1, 1], r"parents\[1, 0\] = 0: node 0's parent must be -1"),                    # no root
    ([-1, 0, 7, 1], r"parents\[1, 2\] = 7: node 2's parent must be a node in \[0, 1\]"),    # out of range
    ([-1, -1, 1, 1], r"parents\[1, 1\] = -1: node 1's parent must be a node in \[0, 0\]"),  # two roots
])
def test_parents_out_of_order_on_the_host_are_named(parents, where, impl):
    """Request 0 is a valid tree, request 1 breaks its order: the walk and the in-place commit rely
    on each node after its parent, so both ops name the (request, node) instead of walking a
    wrong tree (before: the two paths disagreed on two roots, the torch one raised an IndexError
    out of range)."""
    from specdec_kernels import tree_accept_and_commit

    tokens, argmax = torch.tensor([[5, 6, 7, 8]] * 2), torch.tensor([[6, 8, 0, 9]] * 2)
    parents_t = torch.tensor([[-1, 0, 1, 1], parents], dtype=torch.int32)
    with pytest.raises(ValueError, match=where):
        tree_accept_greedy(tokens, parents_t, argmax, impl=impl)
    k = torch.zeros(1, 2, 8, 1, 4)
    with pytest.raises(ValueError, match=where):
        tree_accept_and_commit(tokens, parents_t, argmax, k, k.clone(), torch.zeros(2, dtype=torch.int32), impl=impl)
    assert tree_accept_greedy(tokens[:1], parents_t[:1], argmax[:1], impl=impl).path_len.tolist() == [3]


@pytest.mark.parametrize("impl", IMPLS)
def test_a_tree_without_its_root_is_named(impl):
    """T = 0: torch's path raised an IndexError, Triton's accepted a path of one node."""
    empty = torch.zeros(2, 0, dtype=torch.int64, device=DEVICE)
    with pytest.raises(ValueError, match="a tree has at least its root: T must be 1 or more, got 0"):
        tree_accept_greedy(empty, empty.to(torch.int32), empty, impl=impl)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("which,dtype,fix", [
    ("target_argmax", torch.float32, r"logits\.argmax\(-1\)"),  # the logits' max values, not indices
    ("tokens", torch.bfloat16, r"tokens\.long\(\)"),            # ids past 256 round: 1001 reads 1000
    ("parents", torch.float32, r"parents\.to\(torch\.int32\)"),
])
def test_ids_that_are_not_integers_are_named(which, dtype, fix, impl):
    """A float target_argmax (``logits.max(-1).values`` for ``.indices``) matched no token and its
    value came back as the bonus token, without a word; bf16 tokens compared rounded ids (node 1's
    1001 accepted for the target's 1000). Both ops name the input instead."""
    from specdec_kernels import tree_accept_and_commit

    inputs = dict(tokens=torch.tensor([[5, 1001, 7]], device=DEVICE),
                  parents=torch.tensor([[-1, 0, 0]], dtype=torch.int32, device=DEVICE),
                  target_argmax=torch.tensor([[1000, 3, 4]], device=DEVICE))
    expect = tree_accept_greedy(**inputs, impl=impl)
    assert expect.path_len.tolist() == [1] and expect.bonus.tolist() == [1000]
    inputs[which] = inputs[which].to(dtype)
    with pytest.raises(ValueError, match=rf"{which} must be .* \(int32 or int64\), got {dtype}; pass {fix}"):
        tree_accept_greedy(**inputs, impl=impl)
    k = torch.zeros(1, 1, 8, 1, 4, device=DEVICE)
    with pytest.raises(ValueError, match=rf"{which} must be .* \(int32 or int64\)"):
        tree_accept_and_commit(**inputs, k_cache=k, v_cache=k.clone(),
                               cache_lens=torch.zeros(1, dtype=torch.int32, device=DEVICE), impl=impl)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", ["parents", "target_argmax"])
def test_an_argument_on_another_device_than_tokens_is_named(name, impl):
    """parents (or the argmax) left on the host beside tokens on a GPU reached torch's own error or a
    Triton crash: named in one line with the fix."""
    args = dict(tokens=torch.tensor([[5, 1001, 7]]), parents=torch.tensor([[-1, 0, 0]], dtype=torch.int32),
                target_argmax=torch.tensor([[1000, 3, 4]]))
    assert_wrong_device_named(tree_accept_greedy, {n: t.to(DEVICE) for n, t in args.items()}, name, "tokens",
                              impl=impl)


def accept_shape_cases():
    """(mistake, the call's args, the message, the args its fix gives, or None where the fix is to
    pass other data): two trees of three nodes, whose target logits are [B, T, V]."""
    tokens = torch.tensor([[5, 1001, 7], [5, 6, 7]])
    parents = torch.tensor([[-1, 0, 0], [-1, 0, 1]], dtype=torch.int32)
    logits = torch.nn.functional.one_hot(torch.tensor([[1001, 3, 4], [6, 7, 9]]), 1100).float()
    good = dict(tokens=tokens, parents=parents, target_argmax=logits.argmax(-1))
    one = {n: t[:1] for n, t in good.items()}
    must = r"target_argmax must be \[B, T\] = \(2, 3\) \(tokens' shape\), got shape "
    argmax_fix = (r"; pass logits\.argmax\(-1\) of the target's \[B, T, V\] logits at the tree's nodes "
                  r"\(logits\.argmax\(1\) of \[B, V, T\] ones\)$")
    return [
        ("one_tree_without_its_batch_dim", {n: t[0] for n, t in one.items()},
         r"^tokens must be \[B, T\] \(B trees of T nodes\), got shape \(3,\); pass tokens\.unsqueeze\(0\), "
         r"parents\.unsqueeze\(0\) and target_argmax\.unsqueeze\(0\) for one tree$",
         {n: t[0].unsqueeze(0) for n, t in one.items()}),
        ("parents_without_their_batch_dim", dict(one, parents=parents[0]),
         r"^parents must be \[B, T\] = \(1, 3\) \(tokens' shape\), got shape \(3,\); pass parents\.unsqueeze\(0\)$",
         dict(one, parents=parents[0].unsqueeze(0))),
        ("parents_transposed", dict(good, parents=parents.mT),
         r"^parents must be \[B, T\] = \(2, 3\) \(tokens' shape\), got shape \(3, 2\); pass parents\.mT$",
         dict(good, parents=parents.mT.mT)),
        ("parents_of_another_batch", dict(good, parents=parents[:1]),
         r"^parents must be .*got shape \(1, 3\); pass the parents of tokens' trees", None),
        ("the_logits_for_their_argmax", dict(good, target_argmax=logits), "^" + must + r"\(2, 3, 1100\)" + argmax_fix,
         dict(good, target_argmax=logits.argmax(-1))),
        ("the_argmax_over_the_tree_dim", dict(good, target_argmax=logits.argmax(1)),
         "^" + must + r"\(2, 1100\)" + argmax_fix, None),
        ("the_argmax_of_the_last_node_only", dict(good, target_argmax=logits[:, -1].argmax(-1)),
         "^" + must + r"\(2,\)" + argmax_fix, None),
        ("tokens_as_a_list", dict(good, tokens=tokens.tolist()),
         r"^tokens must be a torch\.Tensor, got list; pass torch\.as_tensor\(tokens\)$", dict(good)),
        ("target_argmax_as_a_list", dict(good, target_argmax=good["target_argmax"].tolist()),
         r"^target_argmax must be a torch\.Tensor, got list; pass torch\.as_tensor\(target_argmax, "
         r"device=tokens\.device\)$", dict(good)),
    ]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("mistake,args,message,fixed", accept_shape_cases(), ids=[c[0] for c in accept_shape_cases()])
def test_arguments_of_the_wrong_shape_name_the_fix(mistake, args, message, fixed, impl):
    """One tree without its batch dim, transposed parents, the target's logits (or their argmax over
    the tree's dim) for the argmax, or a list were one line, 'tokens, parents and target_argmax must
    all be [B, T]; got (1, 3), (3,), (1, 3)' (a list: an AttributeError): no argument named, no fix.
    Each names the argument, its shape and the fix, on tree_accept_and_commit too; where the fix is
    derived, it gives the walk's result."""
    from specdec_kernels import tree_accept_and_commit

    on = {n: t.to(DEVICE) if isinstance(t, torch.Tensor) else t for n, t in args.items()}
    with pytest.raises(ValueError, match=message):
        tree_accept_greedy(**on, impl=impl)
    k = torch.zeros(1, 2, 8, 1, 4, device=DEVICE)
    with pytest.raises(ValueError, match=message):
        tree_accept_and_commit(**on, k_cache=k, v_cache=k.clone(), cache_lens=torch.zeros(2, dtype=torch.int32,
                                                                                            device=DEVICE), impl=impl)
    if fixed is not None:
        result = tree_accept_greedy(**{n: t.to(DEVICE) for n, t in fixed.items()}, impl=impl)
        check_against_walk(result, fixed["tokens"], fixed["parents"], fixed["target_argmax"])
