"""commit_accepted_kv against a plain Python row copy, in place, all layers in one call."""

from __future__ import annotations

import pytest
import torch

from interpreter_traffic import moved_rows, needs_interpreter, record_row_traffic
from kernel_cases import DEVICE, assert_wrong_device_named, needs_triton
from specdec_kernels import commit_accepted_kv

IMPLS = ["torch", pytest.param("triton", marks=needs_triton)]


def python_commit(cache, lens, path, path_len):
    out = cache.clone()
    for b in range(cache.shape[1]):
        base, n = int(lens[b]), int(path_len[b])
        rows = [cache[:, b, base + int(p)].clone() for p in path[b, :n]]
        for i, row in enumerate(rows):
            out[:, b, base + i] = row
    return out


def pad_paths(paths, num_nodes):
    path = torch.full((len(paths), num_nodes), -1, dtype=torch.int32)
    for b, p in enumerate(paths):
        path[b, :len(p)] = torch.tensor(p, dtype=torch.int32)
    return path, torch.tensor([len(p) for p in paths], dtype=torch.int32)


CASES = {
    # paths per request (T = 9): overlapping moves, already contiguous, root only, deep jump
    "mixed": ([[0, 2, 3, 5, 8], [0, 1, 2, 3], [0], [0, 4, 6, 7, 8]], [3, 0, 17, 100]),
    "all_in_place": ([[0, 1, 2, 3, 4, 5, 6, 7, 8], [0, 1]], [5, 0]),
    "fanout_pick": ([[0, 8], [0, 3]], [1, 2]),
}


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("name", sorted(CASES))
def test_commit_equals_python_row_copy(name, dtype, impl):
    paths, lens = CASES[name]
    num_nodes, layers, kv_heads, head_dim = 9, 3, 2, 64
    path, path_len = pad_paths(paths, num_nodes)
    lens_t = torch.tensor(lens, dtype=torch.int32)
    rows = max(lens) + num_nodes + 4
    gen = torch.Generator().manual_seed(len(name))
    k = torch.randn(layers, len(paths), rows, kv_heads, head_dim, generator=gen).to(dtype)
    v = torch.randn(layers, len(paths), rows, kv_heads, head_dim, generator=gen).to(dtype)
    expect_k, expect_v = python_commit(k, lens_t, path, path_len), python_commit(v, lens_t, path, path_len)
    original_k = k.clone()
    k_dev, v_dev = k.to(DEVICE), v.to(DEVICE)  # on the CPU these are k and v themselves
    commit_accepted_kv(k_dev, v_dev, lens_t.to(DEVICE), path.to(DEVICE), path_len.to(DEVICE), impl=impl)
    assert torch.equal(k_dev.cpu(), expect_k)
    assert torch.equal(v_dev.cpu(), expect_v)
    if name != "all_in_place":
        assert not torch.equal(expect_k, original_k), "the case moved nothing: it would not test a move"


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("lens", [[8, 9], [8, -2]])
def test_lengths_on_the_host_that_leave_the_caches_are_rejected(lens, impl):
    """12 cache rows hold 4 tree rows after at most 8 prefix rows: a longer or negative L_b is
    named before anything moves (lengths on the host cost no sync to read)."""
    k = torch.zeros(1, 2, 12, 1, 8)
    path, path_len = pad_paths([[0, 1, 3], [0, 2]], 4)
    with pytest.raises(ValueError, match=rf"cache_lens\[1\] = {lens[1]}: .*S - T = 8"):
        commit_accepted_kv(k, k.clone(), torch.tensor(lens, dtype=torch.int32), path, path_len, impl=impl)


@pytest.mark.parametrize("impl", IMPLS)
def test_caches_whose_elements_share_memory_are_named(impl):
    k = torch.zeros(1, 1, 12, 1, 8, device=DEVICE).expand(1, 2, 12, 1, 8)
    path, path_len = (t.to(DEVICE) for t in pad_paths([[0, 1, 3], [0, 2]], 4))
    with pytest.raises(ValueError, match=r"k_cache \(1, 2, 12, 1, 8\) has a dimension of stride 0"):
        commit_accepted_kv(k, k.contiguous(), torch.tensor([0, 1], dtype=torch.int32, device=DEVICE),
                           path, path_len, impl=impl)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int16, torch.bool])
def test_lengths_that_are_not_int32_or_int64_are_named(dtype, impl):
    """The kernels index rows with the lengths: other dtypes are refused on the host or the device,
    for the attention as for the commits."""
    from specdec_kernels import tree_verify_attention

    k = torch.zeros(1, 2, 12, 1, 8, device=DEVICE)
    path, path_len = (t.to(DEVICE) for t in pad_paths([[0, 1, 3], [0, 2]], 4))
    lens = torch.tensor([8, 1], device=DEVICE).to(dtype)
    with pytest.raises(ValueError, match=rf"cache_lens must be integer lengths \(int32 or int64\), got {dtype}; "
                                         r"pass cache_lens\.to\(torch\.int32\)"):
        commit_accepted_kv(k, k.clone(), lens, path, path_len, impl=impl)
    q, cache = torch.zeros(2, 4, 2, 64, device=DEVICE), torch.zeros(2, 12, 1, 64, device=DEVICE)
    mask = torch.tensor([1, 3, 5, 9], dtype=torch.int32, device=DEVICE).view(1, 4, 1).expand(2, 4, 1).contiguous()
    with pytest.raises(ValueError, match="cache_lens must be integer lengths"):
        tree_verify_attention(q, cache, cache, lens, mask, impl=impl)


@needs_triton
def test_a_request_whose_rows_leave_the_caches_moves_nothing_in_the_kernel():
    """Lengths on a GPU are not read on the host, so the kernel guards itself: a request whose
    tree rows would leave its S rows moves nothing. Unguarded, request 0 (L = 10) would write its
    row 12 (request 1's row 0) and request 2 (L = -3) its row -1 (request 1's row 11)."""
    from specdec_kernels.kv_commit_triton import commit_accepted_kv_triton

    gen = torch.Generator().manual_seed(3)
    k, v = torch.randn(1, 3, 12, 1, 8, generator=gen), torch.randn(1, 3, 12, 1, 8, generator=gen)
    path, path_len = pad_paths([[0, 1, 3]] * 3, 4)
    expect_k, expect_v = k.clone(), v.clone()
    expect_k[:, 1, 6], expect_v[:, 1, 6] = k[:, 1, 7], v[:, 1, 7]  # request 1 (L = 4): row L + 3 to L + 2
    k_dev, v_dev = k.to(DEVICE), v.to(DEVICE)
    commit_accepted_kv_triton(k_dev, v_dev, torch.tensor([10, 4, -3], dtype=torch.int32, device=DEVICE),
                              path.to(DEVICE), path_len.to(DEVICE))
    assert torch.equal(k_dev.cpu(), expect_k) and torch.equal(v_dev.cpu(), expect_v)


@pytest.mark.parametrize("paths,lens_of_paths,message", [
    ([[0, 1, 3], [0, 2]], [3, 5], r"path_len\[1\] = 5: an accepted path holds 1 to T = 4 nodes"),
    ([[0, 1, 3], [0, 2]], [3, 0], r"path_len\[1\] = 0"),
    ([[0, 1, 3], [1, 2]], None, r"path\[1\] = \[1, 2\]: .* \(step 0 does not\)"),
    ([[0, 1, 3], [0, 3, 2]], None, r"path\[1\] = \[0, 3, 2\]: .* \(step 2 does not\)"),
    ([[0, 1, 3], [0, 4]], None, r"path\[1\] = \[0, 4\]: .*below T = 4 .*\(step 1 does not\)"),
])
def test_paths_no_acceptance_gives_are_named_on_the_host(paths, lens_of_paths, message):
    path, path_len = pad_paths(paths, 4)
    if lens_of_paths is not None:
        path_len = torch.tensor(lens_of_paths, dtype=torch.int32)
    k = torch.zeros(1, 2, 12, 1, 8)
    with pytest.raises(ValueError, match=message):
        commit_accepted_kv(k, k.clone(), torch.tensor([2, 3], dtype=torch.int32), path, path_len, impl="torch")


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name,cast,message", [
    ("path", lambda t: t.float() + 0.5 * (t > 0), r"path must be node indices \(int32 or int64\), got torch\.float32"),
    ("path_len", lambda t: t.bool(), r"path_len must be path lengths \(int32 or int64\), got torch\.bool"),
], ids=["path", "path_len"])
def test_a_path_or_length_that_is_not_integers_is_named(name, cast, message, impl):
    """A float path was truncated to rows and a bool path_len committed the root alone, silently."""
    k = torch.randn(1, 2, 12, 1, 8, device=DEVICE)
    path, path_len = (t.to(DEVICE) for t in pad_paths([[0, 1, 3], [0, 2]], 4))
    args = dict(path=path, path_len=path_len)
    args[name] = cast(args[name])
    before = k.clone()
    with pytest.raises(ValueError, match=message + rf"; pass {name}\.to\(torch\.int32\)"):
        commit_accepted_kv(k, k.clone(), torch.tensor([2, 3], dtype=torch.int32, device=DEVICE), impl=impl, **args)
    assert torch.equal(k, before)


@needs_triton
def test_caches_without_contiguous_rows_are_named_for_triton_and_kept_by_torch():
    """A [layers, B, Hkv, S, D] cache viewed as [layers, B, S, Hkv, D] has unit stride in D but
    rows the Triton kernel cannot copy whole: one line with the fix; the torch path commits it."""
    k = torch.randn(1, 2, 2, 12, 8, device=DEVICE).transpose(2, 3)
    path, path_len = (t.to(DEVICE) for t in pad_paths([[0, 1, 3], [0, 2]], 4))
    lens = torch.tensor([2, 3], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match=r"k_cache must have contiguous \(Hkv, D\) rows \(strides D and 1\) for "
                                         r"impl='triton', got strides .*; pass k_cache\.contiguous\(\) and keep that "
                                         r"copy .*, or impl='torch'"):
        commit_accepted_kv(k, k.clone(), lens, path, path_len, impl="triton")
    expect = python_commit(k.cpu(), lens.cpu(), path.cpu(), path_len.cpu())
    commit_accepted_kv(k, k.clone(), lens, path, path_len, impl="torch")
    assert torch.equal(k.cpu(), expect)


@needs_triton
def test_a_path_past_the_tree_moves_no_row_from_outside_it_in_the_kernel():
    """Paths on a GPU are not checked on the host: steps past T, and sources outside the tree's
    rows, move nothing (request 0's path_len of 9 would write rows L + 4 .. L + 8, request 1's
    source 6 read row L + 6, both past T = 4)."""
    from specdec_kernels.kv_commit_triton import commit_accepted_kv_triton

    gen = torch.Generator().manual_seed(5)
    k, v = torch.randn(1, 2, 16, 1, 8, generator=gen), torch.randn(1, 2, 16, 1, 8, generator=gen)
    path = torch.tensor([[0, 2, 3, 3], [0, 6, 3, -1]], dtype=torch.int32)
    path_len = torch.tensor([9, 3], dtype=torch.int32)
    expect_k, expect_v = k.clone(), v.clone()
    for cache, expect in ((k, expect_k), (v, expect_v)):
        expect[:, 0, 3], expect[:, 0, 4] = cache[:, 0, 4], cache[:, 0, 5]  # request 0, L = 2: steps 1, 2 only
        expect[:, 1, 5] = cache[:, 1, 6]                                   # request 1, L = 3: step 2 only
    k_dev, v_dev = k.to(DEVICE), v.to(DEVICE)
    commit_accepted_kv_triton(k_dev, v_dev, torch.tensor([2, 3], dtype=torch.int32, device=DEVICE),
                              path.to(DEVICE), path_len.to(DEVICE))
    assert torch.equal(k_dev.cpu(), expect_k) and torch.equal(v_dev.cpu(), expect_v)


def test_strided_layer_views_are_accepted():
    """K and V as two halves of one [layers, 2, B, S, Hkv, D] allocation (a common layout)."""
    kv = torch.randn(2, 2, 1, 20, 2, 16)
    k, v = kv[:, 0], kv[:, 1]
    path, path_len = pad_paths([[0, 2, 5]], 6)
    expect_k = python_commit(k, torch.tensor([4]), path, path_len)
    commit_accepted_kv(k, v, torch.tensor([4], dtype=torch.int32), path, path_len, impl="torch")
    assert torch.equal(k, expect_k)


@pytest.mark.parametrize("impl", IMPLS)
def test_long_random_paths_cross_chunk_boundaries(impl):
    """Paths of up to 17 nodes (strictly increasing, as accepted paths are), so that moves whose
    source is a later step's destination fall inside and across the kernel's steps-of-four."""
    num_nodes, layers, kv_heads, head_dim = 17, 2, 2, 64
    gen = torch.Generator().manual_seed(17)
    paths = [[0, 2, 4, 6, 8, 10, 12, 14, 16], [0, 1, 3, 4, 6, 7, 9, 10, 12, 13, 15, 16], list(range(17))]
    for _ in range(5):
        length = int(torch.randint(2, num_nodes + 1, (1,), generator=gen))
        rest = torch.randperm(num_nodes - 1, generator=gen)[:length - 1] + 1
        paths.append([0] + sorted(int(r) for r in rest))
    path, path_len = pad_paths(paths, num_nodes)
    lens_t = torch.randint(0, 40, (len(paths),), generator=gen, dtype=torch.int32)
    rows = int(lens_t.max()) + num_nodes + 3
    k = torch.randn(layers, len(paths), rows, kv_heads, head_dim, generator=gen)
    v = torch.randn(layers, len(paths), rows, kv_heads, head_dim, generator=gen)
    expect_k, expect_v = python_commit(k, lens_t, path, path_len), python_commit(v, lens_t, path, path_len)
    k_dev, v_dev = k.to(DEVICE), v.to(DEVICE)
    commit_accepted_kv(k_dev, v_dev, lens_t.to(DEVICE), path.to(DEVICE), path_len.to(DEVICE), impl=impl)
    assert torch.equal(k_dev.cpu(), expect_k)
    assert torch.equal(v_dev.cpu(), expect_v)


@needs_interpreter
@pytest.mark.parametrize("paths,lens", [
    ([[0, 1, 2, 3, 4, 5, 6, 7, 8], [0, 1, 2], [0]], [5, 0, 3]),  # every path already contiguous
    ([[0, 1, 2, 5, 7], [0, 1, 2, 3, 4, 5, 6, 7], [0, 3]], [2, 9, 0]),  # contiguous prefixes, then moves
])
def test_rows_already_in_place_are_neither_read_nor_written(paths, lens, monkeypatch):
    """Issue 3: no copy where the path is already contiguous. Values cannot show a row copied onto
    itself, so the interpreter's loads and stores are recorded: the kernel touches only the rows of
    steps that move (path[i] != i), none of a contiguous path or a contiguous prefix."""
    num_nodes, layers = 9, 2
    path, path_len = pad_paths(paths, num_nodes)
    gen = torch.Generator().manual_seed(sum(lens))
    k, v = (torch.randn(layers, len(paths), max(lens) + num_nodes + 2, 2, 16, generator=gen) for _ in range(2))
    lens_t = torch.tensor(lens, dtype=torch.int32)
    expect_k, expect_v = python_commit(k, lens_t, path, path_len), python_commit(v, lens_t, path, path_len)
    with record_row_traffic(monkeypatch, k=k, v=v) as traffic:
        commit_accepted_kv(k, v, lens_t, path, path_len, impl="triton")
    written, read = moved_rows(lens, paths, layers)
    for name in ("k", "v"):
        assert traffic[name].stored == written, name
        assert traffic[name].loaded == read, name
    assert torch.equal(k, expect_k) and torch.equal(v, expect_v)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", ["v_cache", "cache_lens", "path", "path_len"])
def test_an_argument_on_another_device_than_the_caches_is_named(name, impl):
    """A path or the lengths left on the host beside caches on a GPU: named in one line, nothing moved."""
    k = torch.zeros(1, 2, 12, 1, 8)
    path, path_len = pad_paths([[0, 1, 3], [0, 2]], 4)
    args = dict(k_cache=k, v_cache=k.clone(), cache_lens=torch.tensor([8, 1], dtype=torch.int32), path=path,
                path_len=path_len)
    assert_wrong_device_named(commit_accepted_kv, {n: t.to(DEVICE) for n, t in args.items()}, name, "k_cache",
                              impl=impl)
