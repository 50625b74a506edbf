"""build_ddtree against brute-force enumeration, its documented tie rule, and its own invariants."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from kernel_cases import DEVICE, HAS_CUDA, assert_wrong_device_named, needs_triton
from specdec_kernels import build_ddtree, unpack_ancestor_mask
from specdec_kernels.ddtree_build import build_ddtree_reference
from specdec_kernels.impl import triton_interpreting

IMPLS = ["torch", pytest.param("triton", marks=needs_triton)]


def brute_force_tree(logprobs: np.ndarray, budget: int, topk):
    """Enumerate every prefix; pick nodes by the documented rule, one at a time.

    Ranks: per depth, log-prob descending, then token id ascending. Usable tokens at a depth:
    the first min(V, topk, budget) ranks. Each pick takes, over ALL children of the nodes picked
    so far, the maximum of (score, -parent index, -rank); scores are float32 sums (parent score
    + token log-prob). Returns (tokens, parents, depths, scores) of nodes 1..budget and the
    float32 scores of every enumerable prefix.
    """
    depth, vocab = logprobs.shape
    ranks = min(vocab, budget if topk is None else min(topk, budget))
    order = [sorted(range(vocab), key=lambda t: (-float(logprobs[d, t]), t))[:ranks] for d in range(depth)]
    score_of = {(): np.float32(0.0)}
    for length in range(1, depth + 1):
        for prefix in itertools.product(range(ranks), repeat=length):
            score_of[prefix] = np.float32(score_of[prefix[:-1]] + logprobs[length - 1, order[length - 1][prefix[-1]]])
    index_of = {(): 0}
    tokens, parents, depths, scores = [], [], [], []
    for node in range(1, budget + 1):
        best, best_key = None, None
        for prefix, parent_index in index_of.items():
            if len(prefix) == depth:
                continue
            for rank in range(ranks):
                child = prefix + (rank,)
                if child in index_of:
                    continue
                key = (float(score_of[child]), -parent_index, -rank)
                if best_key is None or key > best_key:
                    best, best_key = child, key
                break  # lower ranks of this parent come first; the first free one is its best
        index_of[best] = node
        tokens.append(order[len(best) - 1][best[-1]])
        parents.append(index_of[best[:-1]])
        depths.append(len(best))
        scores.append(score_of[best])
    all_scores = np.array([s for p, s in score_of.items() if p], dtype=np.float32)
    return tokens, parents, depths, scores, all_scores


def quantised_logprobs(batch, depth, vocab, gen):
    """Log-probs on a 0.25 grid (exact in float32, sums too): plenty of exact ties, zeros included."""
    return -torch.randint(0, 7, (batch, depth, vocab), generator=gen).float() * 0.25


BRUTE_CASES = [  # (depth, V, budget, topk)
    (3, 3, 10, None), (4, 3, 20, None), (4, 4, 30, 2), (2, 5, 9, None), (5, 2, 25, None),
    (4, 3, 4, 1), (3, 4, 0, None), (6, 3, 40, 3),
]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("depth,vocab,budget,topk", BRUTE_CASES)
def test_build_equals_brute_force_enumeration_with_ties(depth, vocab, budget, topk, impl):
    gen = torch.Generator().manual_seed(depth * 100 + vocab * 10 + budget)
    batch = 3
    logprobs = quantised_logprobs(batch, depth, vocab, gen)
    roots = torch.randint(0, vocab, (batch,), generator=gen)
    tree = build_ddtree(logprobs.to(DEVICE), roots.to(DEVICE), budget, topk, impl=impl)
    assert tree.num_nodes == budget + 1
    for b in range(batch):
        tokens, parents, depths, scores, all_scores = brute_force_tree(logprobs[b].numpy(), budget, topk)
        # the B most probable prefixes, whatever the tie rule
        top = np.sort(all_scores)[::-1][:budget]
        assert np.array_equal(np.sort(np.array(scores, dtype=np.float32))[::-1], top)
        # and exactly the documented order and tie-breaking
        assert tree.tokens[b].tolist() == [int(roots[b])] + tokens
        assert tree.parents[b].tolist() == [-1] + parents
        assert tree.depths[b].tolist() == [0] + depths
        assert tree.log_probs[b].cpu().numpy().tolist() == [0.0] + [float(s) for s in scores]


def test_uniform_tie_rule_by_hand():
    """V=2, uniform: both depth-1 tokens first (token 0 then 1), then node 1's two children."""
    logprobs = torch.full((1, 2, 2), -0.5)
    tree = build_ddtree(logprobs, torch.tensor([9]), 4, impl="torch")
    assert tree.tokens.tolist() == [[9, 0, 1, 0, 1]]
    assert tree.parents.tolist() == [[-1, 0, 0, 1, 1]]
    assert tree.depths.tolist() == [[0, 1, 1, 2, 2]]
    assert tree.log_probs.tolist() == [[0.0, -0.5, -0.5, -1.0, -1.0]]


def check_invariants(tree, logprobs):
    parents, depths, tokens = tree.parents.cpu(), tree.depths.cpu(), tree.tokens.cpu()
    logp = tree.log_probs.cpu()
    anc = unpack_ancestor_mask(tree.ancestor_mask.cpu(), tree.num_nodes)
    for b in range(parents.shape[0]):
        children = {}
        for i in range(1, tree.num_nodes):
            p = int(parents[b, i])
            assert 0 <= p < i
            assert int(depths[b, i]) == int(depths[b, p]) + 1
            expected = np.float32(logp[b, p].item() + np.float32(logprobs[b, depths[b, i] - 1, tokens[b, i]].item()))
            assert logp[b, i].item() == float(expected)
            children.setdefault(p, []).append(int(tokens[b, i]))
        for sibling_tokens in children.values():
            assert len(set(sibling_tokens)) == len(sibling_tokens), "siblings repeat a token"
        for i in range(tree.num_nodes):
            chain, node = set(), i
            while node >= 0:
                chain.add(node)
                node = int(parents[b, node])
            assert set(anc[b, i].nonzero().flatten().tolist()) == chain


@pytest.mark.parametrize("budget,topk", [(15, None), (33, None), (64, 4), (16, 1)])
def test_triton_equals_reference_on_real_sized_vocab(budget, topk):
    if not (HAS_CUDA or triton_interpreting()):
        pytest.skip("no CUDA GPU found and TRITON_INTERPRET=1 is not set: the Triton path cannot run here")
    gen = torch.Generator().manual_seed(budget)
    logprobs = (torch.randn(2, 16, 2000, generator=gen) * 3).log_softmax(-1)
    roots = torch.randint(0, 2000, (2,), generator=gen)
    ref = build_ddtree_reference(logprobs, roots, budget, topk)
    got = build_ddtree(logprobs.to(DEVICE), roots.to(DEVICE), budget, topk, impl="triton")
    for field in ("tokens", "parents", "depths", "ancestor_mask", "log_probs"):
        assert torch.equal(getattr(got, field).cpu(), getattr(ref, field)), field
    check_invariants(ref, logprobs)


def test_topk_one_is_the_dflash_chain():
    gen = torch.Generator().manual_seed(5)
    logprobs = torch.randn(2, 8, 50, generator=gen).log_softmax(-1)
    tree = build_ddtree(logprobs, torch.tensor([1, 2]), 8, topk=1, impl="torch")
    assert tree.parents.tolist() == [[-1, 0, 1, 2, 3, 4, 5, 6, 7]] * 2
    assert tree.tokens[:, 1:].tolist() == logprobs.argmax(-1).tolist()
    check_invariants(tree, logprobs)


def test_budget_beyond_the_enumerable_prefixes_is_an_error():
    logprobs = torch.zeros(1, 4, 10)
    with pytest.raises(ValueError, match="budget=5 exceeds"):
        build_ddtree(logprobs, torch.tensor([0]), 5, topk=1, impl="torch")
    with pytest.raises(ValueError, match="draft_logprobs"):
        build_ddtree(logprobs[0], torch.tensor([0]), 3, impl="torch")


@pytest.mark.parametrize("budget,topk,message", [
    (-1, None, r"budget must be an int >= 0 .*got -1; pass the number of draft nodes, 0 or more \(T - 1\)$"),
    (8.0, None, r"budget must be an int >= 0 \(draft nodes, root excluded\), got 8.0; pass int\(budget\)$"),
    (torch.tensor(8), None, r"got tensor\(8\); pass int\(budget\)$"),
    (True, None, r"budget must be an int .*got True; pass the number of draft nodes"),
    (8, 0, r"topk must be None or an int >= 1, got 0; pass None \(no cap\) or 1 or more \(1: the DFlash chain\)$"),
    (8, 2.5, r"topk must be None or an int >= 1, got 2.5; pass None \(no cap\) or 1 or more"),
    (8, 2.0, r"topk must be None or an int >= 1, got 2.0; pass int\(topk\)$"),
])
def test_budget_and_topk_that_are_not_counts_are_named(budget, topk, message):
    logprobs = torch.zeros(1, 4, 10)
    with pytest.raises(ValueError, match=message):
        build_ddtree(logprobs, torch.tensor([0]), budget, topk=topk, impl="torch")


IMPLS = ["torch", pytest.param("triton", marks=pytest.mark.skipif(
    not triton_interpreting(), reason="the Triton path on CPU tensors needs the interpreter"))]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("what,where", [
    ("probabilities", r"draft_logprobs\[0, 0\] ranks 0.\d+ first"),
    ("logits", r"draft_logprobs\[0, 0\] ranks \d"),
    ("nan", r"draft_logprobs\[1, 2\] ranks nan first"),
])
def test_values_that_are_no_log_probabilities_are_named(what, where, impl):
    """Probabilities or logits passed for log-probabilities, or a NaN, built a tree silently
    (scores summed as if they were logs; NaN ranked first). The best-ranked values say so on the
    host, naming the (request, depth), with the fix."""
    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(2, 3, 50, generator=gen) * 3 + 2
    values = {"probabilities": logits.softmax(-1), "logits": logits,
              "nan": logits.log_softmax(-1).index_put_((torch.tensor([1]), torch.tensor([2]), torch.tensor([7])),
                                                       torch.tensor(float("nan")))}[what]
    build_ddtree(logits.log_softmax(-1), torch.tensor([0, 1]), 8, topk=3, impl=impl)
    with pytest.raises(ValueError, match=where + r".*log_softmax\(logits, -1\)"):
        build_ddtree(values, torch.tensor([0, 1]), 8, topk=3, impl=impl)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("which,dtype,message", [
    ("draft_logprobs", torch.int64, r"draft_logprobs must be a float tensor of log-probabilities, got torch.int64; "
                                        r"pass torch\.log_softmax\(logits\.float\(\), -1\)"),
    ("root_tokens", torch.bfloat16, r"root_tokens must be token ids \(int32 or int64\), got torch.bfloat16; pass "
                                    r"root_tokens\.long\(\)"),
])
def test_inputs_of_the_wrong_kind_are_named(which, dtype, message, impl):
    """Integer log-probabilities were ranked truncated (another tree), bf16 root tokens came back
    rounded (1001 as 1000), without a word on either path."""
    gen = torch.Generator().manual_seed(5)
    args = dict(draft_logprobs=(torch.randn(2, 3, 50, generator=gen) * 3).log_softmax(-1),
                root_tokens=torch.tensor([1001, 7]))
    args[which] = args[which].to(dtype)
    with pytest.raises(ValueError, match=message):
        build_ddtree(**args, budget=6, impl=impl)


@pytest.mark.parametrize("parents,message", [
    ([[-1, 0, 9]], r"parents\[0, 2\] = 9: a parent is -1 \(the root\) or a node in \[0, 2\]"),
    ([[-1, 0, -3]], r"parents\[0, 2\] = -3"),
    ([[-1, 2, 1]], r"parents\[0, 1\] = 2: node 1's parent must be a node in \[0, 0\]"),  # a cycle
    ([[-1, 2, 0]], r"parents\[0, 1\] = 2: node 1's parent must be a node in \[0, 0\]"),  # no cycle: a mask
    ([[-1, 0, -1]], r"parents\[0, 2\] = -1: node 2's parent must be a node in \[0, 1\]"),  # two roots
    ([[-1.0, 0.0, 1.0]], r"parents must be node indices \(int32 or int64\), got torch.float32; "
                         r"pass parents\.to\(torch\.int32\)"),
    ([-1, 0, 1], r"parents must be \[B, T\] \(B trees of T nodes\), got shape \(3,\); pass parents\.unsqueeze\(0\) "
                 r"for one tree"),
])
def test_parents_that_are_no_tree_are_named_when_building_a_mask(parents, message):
    """A parent out of range was torch's IndexError, a cycle a silent mask, a 1-D tensor an
    unpacking error, parents out of order a mask the kernels refused as if it were built wrong;
    each is named on the host."""
    from specdec_kernels import ancestor_mask_from_parents

    with pytest.raises(ValueError, match=message):
        ancestor_mask_from_parents(torch.tensor(parents))
    assert ancestor_mask_from_parents(torch.tensor([[-1, 0, 1, 0]])).tolist() == [[[1], [3], [7], [9]]]


def test_unpacking_more_nodes_than_the_mask_holds_is_named():
    """A [1, 40, 2] mask asked for 70 nodes gave a [1, 40, 64] matrix."""
    from specdec_kernels import ancestor_mask_from_parents

    mask = ancestor_mask_from_parents(torch.arange(-1, 39).view(1, 40))
    with pytest.raises(ValueError, match=r"num_nodes=70 does not fit the mask's 2 words of 32 nodes"):
        unpack_ancestor_mask(mask, 70)
    assert unpack_ancestor_mask(mask, 40).shape == (1, 40, 40)


@pytest.mark.parametrize("cast,num_nodes,message", [
    (lambda m: m.float(), 40, r"ancestor_mask must be packed int32 words \[\.\.\., W\], got torch\.float32 \(1, 40, 2\); "
                              r"pass ancestor_mask_from_parents\(parents\)"),
    (lambda m: m.bool(), 40, r"ancestor_mask must be packed int32 words .*got torch\.bool"),
    (lambda m: m[0, 0, 0], 3, r"ancestor_mask must be packed int32 words .*got torch\.int32 \(\)"),
    (lambda m: m, 40.0, r"num_nodes must be an int \(the tree's T\), got 40\.0; pass int\(num_nodes\)"),
], ids=["float", "bool", "scalar", "float_num_nodes"])
def test_unpacking_a_mask_that_is_not_integer_words_is_named(cast, num_nodes, message):
    """A float mask lost the bits past 2**24 and a bool one read every word as node 0, silently; a
    0-d mask or a float num_nodes ended in torch's IndexError or Python's slice TypeError."""
    from specdec_kernels import ancestor_mask_from_parents

    mask = ancestor_mask_from_parents(torch.arange(-1, 39).view(1, 40))
    with pytest.raises(ValueError, match=message):
        unpack_ancestor_mask(cast(mask), num_nodes)
    assert torch.equal(unpack_ancestor_mask(mask, torch.tensor(40)), unpack_ancestor_mask(mask.long(), 40))


@pytest.mark.parametrize("impl", IMPLS)
def test_numpy_integers_are_budgets_and_topks_on_both_paths(impl):
    """They passed the checks, then failed inside the Triton kernel."""
    logprobs = torch.log_softmax(torch.randn(1, 4, 20, generator=torch.Generator().manual_seed(25)), -1).to(DEVICE)
    roots = torch.tensor([1], device=DEVICE)
    tree = build_ddtree(logprobs, roots, np.int64(8), topk=np.int64(2), impl=impl)
    expect = build_ddtree(logprobs.cpu(), roots.cpu(), 8, topk=2, impl="torch")
    assert torch.equal(tree.tokens.cpu(), expect.tokens) and torch.equal(tree.parents.cpu(), expect.parents)


@pytest.mark.parametrize("impl", IMPLS)
def test_root_tokens_on_another_device_than_the_logprobs_are_named(impl):
    """Root tokens left on the host beside log-probabilities on a GPU: named in one line with the fix."""
    args = dict(draft_logprobs=torch.randn(2, 3, 50).log_softmax(-1), root_tokens=torch.tensor([1, 7]))
    assert_wrong_device_named(build_ddtree, {n: t.to(DEVICE) for n, t in args.items()}, "root_tokens", "draft_logprobs",
                              budget=6, impl=impl)


def wrong_shape_cases():
    """(mistake, the call's args, the message, the args its fix gives, or None where the fix is to
    pass other data) for one batch of two requests, and one request alone."""
    logprobs = (torch.randn(2, 3, 50, generator=torch.Generator().manual_seed(7)) * 3).log_softmax(-1)
    roots = torch.tensor([1001, 7])
    one = dict(draft_logprobs=logprobs[:1], root_tokens=roots[:1])
    two = dict(draft_logprobs=logprobs, root_tokens=roots)
    must = r"root_tokens must be \[B\] = \({}\,\) \(one per request of draft_logprobs\), got shape "
    return [
        ("one_request_without_its_batch_dim", dict(draft_logprobs=logprobs[0], root_tokens=roots[0]),
         r"draft_logprobs must be \[B, depth, V\], got shape \(3, 50\); pass draft_logprobs\.unsqueeze\(0\) and "
         r"root_tokens\.view\(1\) for one request$",
         dict(draft_logprobs=logprobs[0].unsqueeze(0), root_tokens=roots[0].view(1))),
        ("root_tokens_as_a_column", dict(two, root_tokens=roots[:, None]),
         must.format(2) + r"\(2, 1\); pass root_tokens\.reshape\(2\)$",
         dict(two, root_tokens=roots[:, None].reshape(2))),
        ("root_token_as_a_scalar", dict(one, root_tokens=roots[0]),
         must.format(1) + r"\(\); pass root_tokens\.unsqueeze\(0\)$", dict(one, root_tokens=roots[0].unsqueeze(0))),
        ("root_tokens_of_another_batch", dict(two, root_tokens=torch.tensor([1001, 7, 9])),
         must.format(2) + r"\(3,\); pass one root token \(the previous step's bonus token\) per request of "
         r"draft_logprobs$", None),
        ("draft_logprobs_with_a_head_dim", dict(two, draft_logprobs=logprobs[:, :, None]),
         r"draft_logprobs must be \[B, depth, V\], got shape \(2, 3, 1, 50\); pass one row of V log-probabilities "
         r"per request and depth$", None),
        ("root_tokens_as_a_list", dict(two, root_tokens=[1001, 7]),
         r"root_tokens must be a torch\.Tensor, got list; pass torch\.as_tensor\(root_tokens, "
         r"device=draft_logprobs\.device\)$", dict(two, root_tokens=torch.as_tensor([1001, 7]))),
        ("draft_logprobs_from_numpy", dict(two, draft_logprobs=logprobs.numpy()),
         r"draft_logprobs must be a torch\.Tensor, got ndarray; pass torch\.as_tensor\(draft_logprobs\)$",
         dict(two, draft_logprobs=torch.as_tensor(logprobs.numpy()))),
    ]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("mistake,args,message,fixed", wrong_shape_cases(), ids=[c[0] for c in wrong_shape_cases()])
def test_inputs_of_the_wrong_shape_name_the_fix(mistake, args, message, fixed, impl):
    """A request without its batch dim, root tokens as a column, a scalar, a list or another batch's
    were refused without the fix ('root_tokens must be [B=2], got shape (2, 1)'), a list or numpy
    array with an AttributeError or 'must be on draft_logprobs's device (cpu), got cpu'. Each names
    the argument, its shape and the fix; where the fix is derived, it builds the request's tree."""
    on = {n: t.to(DEVICE) if isinstance(t, torch.Tensor) else t for n, t in args.items()}
    with pytest.raises(ValueError, match=message):
        build_ddtree(**on, budget=6, impl=impl)
    if fixed is not None:
        tree = build_ddtree(**{n: t.to(DEVICE) for n, t in fixed.items()}, budget=6, impl=impl)
        expect = build_ddtree(fixed["draft_logprobs"], fixed["root_tokens"], 6, impl="torch")
        assert torch.equal(tree.tokens.cpu(), expect.tokens)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("mistake", ["vocabulary_in_the_middle", "logits_shifted_below_zero"])
def test_values_that_are_no_distribution_over_the_last_dim_are_named(mistake, impl):
    """A [B, V, depth] tensor ranked each token's positions as a vocabulary of ``depth`` tokens,
    and logits shifted below 0 were summed as log-probabilities: both built a tree of other tokens
    without a word (every value <= 0). No distribution over V tokens has its best under 1/V, so a
    best below -log(V) - 1 is named, with the fix; real log-probabilities pass, uniform in bf16 too."""
    gen = torch.Generator().manual_seed(6)
    logprobs = (torch.randn(2, 4, 50, generator=gen) * 3).log_softmax(-1)
    roots = torch.tensor([1, 7], device=DEVICE)
    bad = {"vocabulary_in_the_middle": logprobs.transpose(1, 2), "logits_shifted_below_zero": logprobs - 6}[mistake]
    with pytest.raises(ValueError, match=r"draft_logprobs\[0, 0\] ranks -\d+\.\d+ first, below -log\(V\) - 1 = "
                                         r"-\d\.\d+: .*; pass torch\.log_softmax\(logits, -1\) of \[B, depth, V\] "
                                         r"logits \(draft_logprobs\.transpose\(1, 2\) for \[B, V, depth\] ones\)$"):
        build_ddtree(bad.to(DEVICE), roots, 6, impl=impl)
    fixed = bad.transpose(1, 2) if mistake == "vocabulary_in_the_middle" else bad.log_softmax(-1)
    tree = build_ddtree(fixed.to(DEVICE), roots, 6, impl=impl)
    assert torch.equal(tree.tokens.cpu(), build_ddtree(logprobs, roots.cpu(), 6, impl="torch").tokens)
    uniform = torch.full((1, 3, 500), -math.log(500)).bfloat16()  # rounded below -log(V)
    assert float(uniform[0, 0, 0]) < -math.log(500)
    build_ddtree(uniform.to(DEVICE), roots[:1], 6, impl=impl)


@pytest.mark.parametrize("dtype", [torch.int16, torch.int8, torch.uint8])
def test_parents_of_a_narrow_dtype_are_refused_as_every_operation_does(dtype):
    """int16 or int8 parents built a mask that tree_accept_greedy (and every operation taking
    parents) then refused; uint8 ones read the root's -1 as 255 and blamed the value, not the
    dtype. The mask refuses them as the operations do, with the fix (for uint8: build them signed)."""
    from specdec_kernels import ancestor_mask_from_parents, tree_accept_greedy

    parents = torch.tensor([[-1, 0, 0, 1]]).to(dtype)
    fix = r"parents\.to\(torch\.int32\)" if dtype.is_signed else rf"parents built as int32 \({dtype} holds no root -1\)"
    must = rf"^parents must be node indices \(int32 or int64\), got {dtype}"
    with pytest.raises(ValueError, match=rf"{must}; pass {fix}$"):
        ancestor_mask_from_parents(parents)
    with pytest.raises(ValueError, match=must):
        tree_accept_greedy(torch.zeros(1, 4, dtype=torch.int64), parents, torch.zeros(1, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"^parents must be a torch\.Tensor, got list; "
                                         r"pass torch\.as_tensor\(parents\)$"):
        ancestor_mask_from_parents([[-1, 0, 0, 1]])
    with pytest.raises(ValueError, match=r"^parents must be \[B, T\] .*got shape \(1, 1, 4\); "
                                         r"pass one row of T parents"):
        ancestor_mask_from_parents(torch.tensor([[[-1, 0, 0, 1]]]))
