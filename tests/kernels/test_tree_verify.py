"""tree_verify_attention: Triton path against float64 references, the tree mask, ragged batches."""

from __future__ import annotations

import dataclasses
import math
import re
import zlib
import subprocess
import sys

import pytest
import torch

from kernel_cases import (DEVICE, FULL_GRID, ROW_TOLERANCE, assert_wrong_device_named, case_id, needs_triton,
                          random_tree_batch, ancestor_chain, row_errors, verify_cases)
from specdec_kernels import ancestor_mask_from_parents, tree_verify_attention
from specdec_kernels.impl import resolve_impl, triton_interpreting
from specdec_kernels.tree_verify import tree_verify_attention_reference, tree_verify_attention_sdpa

# Cache rows past L_b + T are filled with NaN: a kernel that reads them fails.
SLACK_ROWS = 5


def make_verify_inputs(lens, num_nodes, shape, group, kv_heads, head_dim, dtype, seed):
    """Fresh random q / caches / trees; rows past each request's L_b + T are NaN."""
    gen = torch.Generator().manual_seed(seed)
    batch = len(lens)
    rows = max(lens) + num_nodes + SLACK_ROWS
    q = torch.randn(batch, num_nodes, kv_heads * group, head_dim, generator=gen) * 2.0
    k = torch.randn(batch, rows, kv_heads, head_dim, generator=gen)
    v = torch.randn(batch, rows, kv_heads, head_dim, generator=gen)
    for b, length in enumerate(lens):
        k[b, length + num_nodes:] = float("nan")
        v[b, length + num_nodes:] = float("nan")
    parents, mask = random_tree_batch(batch, num_nodes, shape, gen)
    lens_t = torch.tensor(lens, dtype=torch.int32)
    to = dict(device=DEVICE)
    return (q.to(dtype=dtype, **to), k.to(dtype=dtype, **to), v.to(dtype=dtype, **to),
            lens_t.to(**to), mask.to(**to), parents)


def float64_reference(q, k, v, lens, mask, sm_scale=None):
    """Per request, only the rows it owns (so the NaN slack never enters), in float64."""
    outs = []
    for b, length in enumerate(lens.tolist()):
        rows = length + q.shape[1]
        outs.append(tree_verify_attention_reference(
            q[b:b + 1].double(), k[b:b + 1, :rows].double(), v[b:b + 1, :rows].double(),
            lens[b:b + 1], mask[b:b + 1], sm_scale=sm_scale, compute_dtype=torch.float64))
    return torch.cat(outs)


def verify_policy(num_splits=None, config=None, **fields):
    """A policy with NaN-poisoned split partials (and ``fields``): what the tests run under."""
    from specdec_kernels.verify_plan import VerifyPolicy

    return VerifyPolicy(tiles=config, num_splits=num_splits, poison_workspace=True, **fields)


def plan_of(q, k, v, policy, sm_scale=None):
    from specdec_kernels.tree_verify_triton import plan_call

    return plan_call(q, k, v, sm_scale, policy)


def run_triton(q, k, v, lens, mask, policy=None, sm_scale=None):
    """The launcher with a NaN-poisoned output and NaN-poisoned split partials."""
    from specdec_kernels.tree_verify_triton import tree_verify_attention_triton

    out = torch.full_like(q, float("nan"))
    result = tree_verify_attention_triton(q, k, v, lens, mask, sm_scale=sm_scale, out=out,
                                          policy=policy or verify_policy())
    assert result is out
    return out


def assert_rows_close(out, ref, dtype, what):
    assert not torch.isnan(out).any(), f"{what}: NaN in the output (an element was not written)"
    err = row_errors(out.cpu(), ref.cpu())
    worst = float(err.max())
    tol = ROW_TOLERANCE[dtype]
    assert worst <= tol, (f"{what}: worst row relative error {worst:.3g} > {tol:g} at "
                          f"(b, node, head) = {tuple(int(i) for i in (err == err.max()).nonzero()[0])}")


@needs_triton
@pytest.mark.parametrize("case", verify_cases(), ids=case_id)
def test_verify_matches_float64_reference(case):
    num_nodes, shape, group, prefix, dtype, head_dim, splits = case
    lens = [prefix, (prefix * 7) // 10] if FULL_GRID else [prefix]
    kv_heads = 2 if FULL_GRID or group <= 2 else 1
    seed = zlib.crc32(case_id(case).encode())
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, shape, group, kv_heads, head_dim,
                                                  dtype, seed)
    out = run_triton(q, k, v, lens_t, mask, verify_policy(splits))
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), dtype, case_id(case))


# Forced tile shapes that put packed rows in a tail tile (T * G past a whole number of query
# tiles) with one or several query tiles per KV head, and split counts past the merge's load
# block (17 splits > 16 at head dim 256): (T, G, [L_b], D, dtype, num_splits, (BN, max BM)).
TAIL_CASES = [
    (17, 4, [100, 0], 64, torch.float16, None, (16, 64)),     # 64 + 4 rows: one tile + tail
    (17, 4, [100, 70], 64, torch.bfloat16, 3, (16, 32)),      # 2 x 32 + 4: tail on the last tile only
    (13, 5, [40, 1], 64, torch.float16, 2, (16, 16)),         # 4 x 16 + 1
    (9, 2, [530, 370], 256, torch.float16, 20, (16, 16)),     # 16 + 2 rows, 17 splits of two key tiles
    (65, 4, [17, 3], 64, torch.float32, 2, (16, 128)),        # 2 x 128 + 4
]


@needs_triton
@pytest.mark.parametrize("num_nodes,group,lens,head_dim,dtype,splits,tiles", TAIL_CASES)
def test_tail_tile_and_many_splits(num_nodes, group, lens, head_dim, dtype, splits, tiles):
    from specdec_kernels.configs import VerifyConfig

    # on a GPU the planner takes another query tile instead of the tail in most of these cases
    # (small batches, several full tiles); force the tail here
    config = VerifyConfig(block_n=tiles[0], max_block_m=tiles[1], num_warps=4, num_stages=1)
    # whole rows: 17 splits at head dim 256 walk two blocks of 16 (the planner's head-dim slices
    # would fit them in one, a path test_merge_over_head_dim_slices covers)
    policy = verify_policy(splits, config, tail_only_when_full=False, merge_head_slices=1)
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, "best_first", group, 2, head_dim, dtype,
                                                  seed=num_nodes * 100 + group)
    plan = plan_of(q, k, v, policy)
    assert plan.tail_m > 0 and plan.kernel == "triton", plan
    assert plan.merge is None or plan.merge.fused or not plan.merge.one_block, plan
    out = run_triton(q, k, v, lens_t, mask, policy)
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), dtype, f"tail T={num_nodes} G={group}")


@needs_triton
@pytest.mark.parametrize("fused", [True, False])
def test_merge_folded_into_the_split_kernel_or_launched_after_it(fused):
    """An eager call merges its splits in the split kernel where its plan allows it (the last
    program of each query tile), else by the merge's own launch: both right on NaN-poisoned
    partials, ragged requests and three splits."""
    from specdec_kernels.verify_plan import FUSED_MERGE_KERNELS

    policy = verify_policy(3, fused_merge=fused)
    q, k, v, lens_t, mask, _ = make_verify_inputs([300, 90], 17, "best_first", 4, 2, 64, torch.float16, seed=11)
    plan = plan_of(q, k, v, policy)
    # on an H200 this tiny call takes the 64-row Gluon kernel
    assert plan.merge is not None and plan.merge.fused == (fused and plan.kernel in FUSED_MERGE_KERNELS), plan
    out = run_triton(q, k, v, lens_t, mask, policy)
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), torch.float16, f"fused={fused}")


# The merge over head-dim slices: (head dim, slices, splits forced, [L_b]). 16-key splits make 33
# and 65 of them over a short cache; a ragged second request leaves its later splits empty.
SLICED_MERGE_CASES = [
    (64, 2, 65, [1030, 517]),     # 32 columns: 65 splits in one block
    (64, 2, 129, [2050]),         # 32 columns: 129 splits, blocks of 128 and of 1
    (128, 4, 33, [520]),
    (256, 8, 9, [130, 1]),
    (256, 2, 33, [520]),          # 128 columns: two blocks of 32 splits
    (128, 2, 3, [90, 60]),
]


@needs_triton
@pytest.mark.parametrize("head_dim,slices,splits,lens", SLICED_MERGE_CASES)
def test_merge_over_head_dim_slices(head_dim, slices, splits, lens):
    """The merge's own launch with each program on head_dim / slices columns (every split's
    log-sum-exps, its slice of the partials), on NaN-poisoned partials: every column merged once,
    from the right splits, in one block and in several."""
    from specdec_kernels.configs import VerifyConfig

    config = VerifyConfig(block_n=16, max_block_m=16, num_warps=4, num_stages=1)
    policy = verify_policy(splits, config, fused_merge=False, merge_head_slices=slices)
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, 3, "best_first", 2, 1, head_dim, torch.float16,
                                                  seed=head_dim + slices + splits)
    plan = plan_of(q, k, v, policy)
    assert plan.num_splits == splits and plan.merge.head_slices == slices and not plan.merge.fused, plan
    out = run_triton(q, k, v, lens_t, mask, policy)
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), torch.float16,
                      f"D={head_dim} slices={slices} splits={splits}")


@needs_triton
@pytest.mark.parametrize("num_nodes,group,lens", [(9, 2, [3000, 2600]), (17, 4, [3000, 2600]), (17, 4, [700, 90])])
def test_folded_merge_leaves_every_count_at_zero(num_nodes, group, lens):
    """Each query tile's last program sets its count back to 0, so that a count buffer reused
    call after call (the launcher's, per stream and thread) starts every call at 0. On an H200 the
    first case runs the Triton kernel, the second the ping-pong kernel (3000 keys: past the
    tiny-work tiles), the third the 64-row Gluon kernel (tiny work)."""
    policy = verify_policy(4)
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, "best_first", group, 2, 64, torch.float16,
                                                  seed=12)
    plan = plan_of(q, k, v, policy)
    assert plan.merge is not None and plan.merge.fused, plan
    assert_folded_calls_leave_counts_at_zero(plan, policy, (q, k, v, lens_t, mask), float64_reference(
        q, k, v, lens_t, mask), torch.float16, calls=2, what="folded merge")


def assert_folded_calls_leave_counts_at_zero(plan, policy, inputs, ref, dtype, calls, what):
    """``calls`` launches with the merge folded in, on NaN-poisoned outputs and partials and one
    count buffer: each right, each leaving every count at 0 for the next."""
    from specdec_kernels import tree_verify_triton as tvt

    q = inputs[0]
    counts = torch.zeros(plan.base_programs + 3, dtype=torch.int32, device=q.device)
    for call in range(calls):
        out = torch.full_like(q, float("nan"))
        workspace = torch.full((plan.workspace_bytes // 4,), float("nan"), device=q.device)
        tvt._launch_through_triton(plan, policy, *inputs, out, workspace, counts, True, None, None)
        assert not counts.any(), f"{what}: call {call} left counts {counts.tolist()}"
        assert_rows_close(out, ref, dtype, f"{what}, call {call}")


# The merge's waiting programs: (head dim, group, KV heads, T, [L_b], splits forced, the one
# program's bound in bytes, whether the waiters merge head-dim slices, whether a block of 64 splits
# or more is one load, or of 32 where one split's partials span past 128 KB). Ragged requests leave
# later splits empty; 65 x 3 rows take two tiles, 65 x 6 four (512 KB a split). 32-128 splits of
# head dim 256 (47 of 128) are too wide for one block of whole rows: the waiters take 64-, 32- and
# 64-column slices; 65-128 splits fit one block only as one load.
WAITING_MERGE_CASES = [
    (128, 4, 2, 17, [3000, 2600], 4, 20 * 1024, False, True),
    (256, 6, 1, 9, [8000, 30], 16, 256 * 1024, False, True),
    (256, 3, 1, 65, [5000], 8, 64 * 1024, False, True),
    (64, 8, 2, 17, [3000, 100], 5, 16 * 1024, False, True),
    (256, 6, 1, 9, [8000, 30], 32, 256 * 1024, True, True),
    (256, 6, 1, 65, [9000], 32, 256 * 1024, True, True),
    (256, 6, 1, 65, [9000], 32, 256 * 1024, True, False),
    (256, 6, 1, 9, [8000], 64, 256 * 1024, True, True),
    (256, 6, 1, 9, [8000], 64, 256 * 1024, True, False),
    (256, 3, 1, 65, [5000], 53, 256 * 1024, True, True),
    (128, 4, 2, 17, [6000, 2600], 64, 256 * 1024, True, True),
    (128, 4, 2, 17, [6000, 2600], 64, 256 * 1024, True, False),
    (256, 6, 1, 9, [20000, 9000], 128, 256 * 1024, True, True),
    (256, 3, 1, 33, [20000], 97, 256 * 1024, True, True),
]


@needs_triton
@pytest.mark.parametrize("head_dim,group,kv_heads,num_nodes,lens,splits,max_bytes,sliced,vector",
                         WAITING_MERGE_CASES)
def test_waiting_merge_programs_merge_in_the_split_kernels_launch(head_dim, group, kv_heads, num_nodes, lens,
                                                                  splits, max_bytes, sliced, vector):
    """Past one program's bound, the ping-pong kernel's eager call keeps one launch: programs past
    the splits' wait for their query tile's splits and merge its row blocks (or their head-dim
    slices) between them, a block of splits unrolled or as one load. Right on NaN-poisoned partials
    and outputs, call after call on one count buffer, which each call leaves at 0 (the tile's last
    waiter resets it); and through the launcher's direct path."""
    from specdec_kernels.verify_plan import DEFAULT_POLICY, MERGE_VECTOR_MIN_BLOCK, WAITER_VECTOR_MIN_BLOCK

    # unrolled sliced waiters wherever they fit, also where the planner keeps them off for speed
    unrolled_far = {} if vector else {"sliced_waiters_max_split_bytes": 1 << 40}
    policy = verify_policy(splits, fused_merge_max_bytes=max_bytes, merge_vector_loads=vector, **unrolled_far)
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, "best_first", group, kv_heads, head_dim,
                                                  torch.bfloat16, seed=head_dim + splits + num_nodes)
    plan = plan_of(q, k, v, policy)
    if plan.kernel != "pingpong":
        pytest.skip(f"the waiting merge is the ping-pong kernel's (Hopper GPUs); here: {plan.kernel}")
    assert plan.merge.fused and plan.merge.waiters >= 2, plan
    assert (plan.merge.head_slices > 1) == sliced, plan
    far = sliced and plan.rows_pad * head_dim * 4 > DEFAULT_POLICY.sliced_waiters_max_split_bytes
    one_load = vector and plan.merge.split_block >= (WAITER_VECTOR_MIN_BLOCK if far else MERGE_VECTOR_MIN_BLOCK)
    assert ("MERGE_VECTOR" in plan.merge.folded_constexprs()) == one_load, plan
    assert plan.fused_grid == (plan.grid[0], plan.grid[1] + plan.merge.waiters)
    ref = float64_reference(q, k, v, lens_t, mask)
    assert_folded_calls_leave_counts_at_zero(plan, policy, (q, k, v, lens_t, mask), ref, torch.bfloat16, calls=3,
                                             what="waiting merge")
    for call in range(3):  # the public launcher: compiled, then direct C launches
        assert_rows_close(run_triton(q, k, v, lens_t, mask, policy), ref, torch.bfloat16, f"launcher call {call}")


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_shorter_tree_split_matches_reference(dtype):
    """Two planned splits with the first chunk a key tile longer (``relieve_tree_split``): the
    long request's tree in the shortened second split, the short one's prefix and tree wholly in
    the first (its second split empty)."""
    from specdec_kernels.configs import VerifyConfig
    from specdec_kernels.verify_plan import split_chunks

    # the same plan on any device: these tiles, four multiprocessors
    policy = verify_policy(config=VerifyConfig(block_n=64, max_block_m=64, num_warps=4, num_stages=1), sms=4)
    lens = [1000, 500]
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, 9, "best_first", 4, 1, 64, dtype, seed=1009)
    plan = plan_of(q, k, v, policy)
    even = split_chunks(k.shape[1] - 9, 2, 64)[0]
    assert plan.num_splits == 2 and plan.chunk == even + 64 > lens[1], plan
    out = run_triton(q, k, v, lens_t, mask, policy)
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), dtype, "shorter tree split")


@needs_triton
@pytest.mark.parametrize("num_nodes, group, num_splits", [(9, 4, None), (17, 4, 3), (33, 2, 1)])
def test_own_tree_split_matches_reference(num_nodes, group, num_splits):
    """The tree's rows in a split of their own (``VerifyPolicy.own_tree_split``): the split after
    the long request's last prefix split holds only its tree; the short request's tree sits in the
    split after its own last prefix row, the splits between empty; a request without a prefix has
    its tree in split 0."""
    from specdec_kernels.configs import VerifyConfig
    from specdec_kernels.verify_plan import cdiv

    policy = verify_policy(num_splits, config=VerifyConfig(block_n=64, max_block_m=64, num_warps=4, num_stages=1),
                           sms=4, own_tree_split=True)
    lens = [700, 130, 0]
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, "best_first", group, 1, 64, torch.float16,
                                                  seed=1013)
    plan = plan_of(q, k, v, policy)
    assert plan.own_tree_split and plan.num_splits == cdiv(k.shape[1] - num_nodes, plan.chunk) + 1, plan
    assert_rows_close(run_triton(q, k, v, lens_t, mask, policy), float64_reference(q, k, v, lens_t, mask),
                      torch.float16, "own tree split")
    assert_tree_in_its_own_split(plan, policy, (q, k, v, lens_t, mask), lens)


def assert_tree_in_its_own_split(plan, policy, inputs, lens):
    """Each request's split after its last prefix row holds its tree (a finite log-sum-exp), and
    a split past that one nothing (the ones in between, when a short request leaves some)."""
    from specdec_kernels import tree_verify_triton as tvt
    from specdec_kernels.verify_plan import cdiv

    q = inputs[0]
    workspace = torch.full((plan.workspace_bytes // 4,), float("nan"), device=q.device)
    tvt._launch_through_triton(plan, policy, *inputs, torch.full_like(q, float("nan")), workspace, None, False,
                               None, None)
    head_dim, rows = q.shape[3], q.shape[1] * plan.group
    lse = workspace[plan.workspace_bytes // 4 // (head_dim + 1) * head_dim:].view(-1, plan.num_splits, plan.rows_pad)
    lse = lse.view(len(lens), -1, plan.num_splits, plan.rows_pad)[..., :rows].cpu()
    for b, prefix in enumerate(lens):
        tree = cdiv(prefix, plan.chunk)
        assert torch.isfinite(lse[b, :, tree]).all(), f"request {b}: no tree in split {tree}"
        for split in range(tree + 1, plan.num_splits):
            assert not torch.isfinite(lse[b, :, split]).any(), f"request {b}: split {split} past its tree has keys"


# Key tiles through tensor descriptors (the sm_90 path), on layouts that allow one and on some
# that do not (the launcher then keeps per-element loads): (T, G, [L_b], D, dtype, splits, layout).
TMA_CASES = [
    (17, 4, [200, 67], 64, torch.bfloat16, None, "contiguous"),
    (9, 2, [150], 128, torch.float16, 3, "contiguous"),
    (16, 4, [130, 129], 64, torch.float16, 2, "padded_rows"),     # row stride past Hkv * D: allowed
    (9, 4, [120, 40], 64, torch.bfloat16, None, "heads_apart"),   # [B, H, S, D] storage: not allowed
]


def _lay_out(cache, layout):
    """The same values in another storage layout."""
    if layout == "padded_rows":
        batch, rows, heads, head_dim = cache.shape
        wide = torch.full((batch, rows, heads + 1, head_dim), float("nan"), dtype=cache.dtype, device=cache.device)
        wide[:, :, :heads] = cache
        return wide[:, :, :heads]
    if layout == "heads_apart":
        return cache.transpose(1, 2).contiguous().transpose(1, 2)
    return cache


def _gluon_configs():
    from specdec_kernels.configs import VerifyConfig

    return {
        "w8-m128": VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0,
                                min_block_m=128, gluon=True),
        "w4-m64": VerifyConfig(block_n=32, max_block_m=64, num_warps=4, num_stages=3, max_tail_m=0, min_block_m=64,
                               gluon=True, gluon_stages=4),
        # head dim 64's 64-row tier: 64-key tiles
        "w4-m64-n64": VerifyConfig(block_n=32, max_block_m=64, num_warps=4, num_stages=3, max_tail_m=0,
                                   min_block_m=64, gluon=True, gluon_block_n=64, gluon_stages=4),
        "w8-m128-n128-qreg": VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0,
                                          min_block_m=128, gluon=True, gluon_block_n=128, gluon_q_in_registers=True),
        # the warp-specialised ping-pong kernel, with the smallest ring it allows too (its turn and
        # slot barriers wrap every other tile)
        "pingpong": VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0,
                                 min_block_m=128, gluon=True, gluon_pingpong=True),
        "pingpong-s2": VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=2, max_tail_m=0,
                                    min_block_m=128, gluon=True, gluon_pingpong=True),
        # 192-row tiles where they pad less (T = 33 / 65 at G = 4, T = 33 at G = 8): three
        # warpgroups in turn, q in shared memory, the smallest ring they allow
        "pingpong-192": VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0,
                                     min_block_m=128, gluon=True, gluon_pingpong=True, gluon_pingpong_192=True),
        # rows past whole 128-row tiles in the 8-row tail warpgroup (T = 2^k + 1: 65 x 4, 33 x 8,
        # 17 x 8, 33 x 4); 3 slots, the fewest it allows
        "pingpong-tail": VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0,
                                      min_block_m=128, gluon=True, gluon_pingpong=True, gluon_pingpong_tail=True),
        # 64-row tiles on one warpgroup fed by the load warp (several tiles past 64 rows), 3 slots
        "pingpong-64": VerifyConfig(block_n=64, max_block_m=64, num_warps=4, num_stages=3, resident_per_sm=1,
                                    max_tail_m=0, min_block_m=64, gluon=True, gluon_pingpong=True,
                                    gluon_pingpong_64=True),
        # 65-72 rows (17 x 4, 9 x 8) on one 64-row warpgroup and the tail warpgroup
        "pingpong-64tail": VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0,
                                        min_block_m=128, gluon=True, gluon_pingpong=True, gluon_pingpong_tail=True,
                                        gluon_pingpong_64=True),
        # 129-144 rows at an even G (17 x 8, 33 x 4) as two programs per KV head, each with half
        # its query heads on one 64-row warpgroup and the tail warpgroup
        "pingpong-hsplit": VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0,
                                        min_block_m=128, gluon=True, gluon_pingpong=True, gluon_pingpong_tail=True,
                                        gluon_pingpong_64=True, split_query_heads=True),
    }


needs_sm90 = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
                                reason="the Gluon kernel is for sm_90 GPUs")


# Small test batches are short streams on a part-filled GPU, where the planner drops 192-row tiles
# and tails: these tiles keep them, so that the cases past 128 rows run them.
WIDE_TILES = ("pingpong-192", "pingpong-tail", "pingpong-64tail")


# The Gluon split kernel (sm_90 only): its software pipeline over 0, 1, 2, ... full key tiles
# (short and empty chunks, a ring that wraps many times), the partial last tile, tree tiles past
# one key tile, many query tiles, and split counts that leave some splits empty;
# (T, G, [L_b], head dim, dtype, splits).
GLUON_CASES = [
    (17, 4, [8192, 4100], 128, torch.bfloat16, None),
    (17, 4, [0, 63, 64, 65], 128, torch.bfloat16, None),
    (9, 4, [1000, 127, 16], 128, torch.float16, 5),
    (65, 4, [2000, 700], 128, torch.bfloat16, 2),
    (33, 8, [1500, 1], 64, torch.float16, None),
    (1, 1, [300, 129], 128, torch.bfloat16, 3),
    (16, 2, [5000, 3000], 64, torch.bfloat16, 7),
    (17, 8, [3000, 200], 128, torch.bfloat16, None),   # 136 rows: 128 + an 8-row tail
    (33, 4, [5000, 64], 128, torch.float16, 3),       # 132 rows: 128 + 4, split
    (9, 8, [2000, 100, 0], 128, torch.bfloat16, 2),   # 72 rows: 64 + an 8-row tail
]


GLUON_TILES = ["w8-m128", "w4-m64", "w4-m64-n64", "w8-m128-n128-qreg", "pingpong", "pingpong-s2", "pingpong-192",
               "pingpong-tail", "pingpong-64", "pingpong-64tail", "pingpong-hsplit"]


@needs_sm90
@pytest.mark.parametrize("tile", GLUON_TILES)
@pytest.mark.parametrize("num_nodes,group,lens,head_dim,dtype,splits", GLUON_CASES)
def test_gluon_kernel_matches_reference(num_nodes, group, lens, head_dim, dtype, splits, tile):
    config = _gluon_configs()[tile]
    policy = verify_policy(splits, config, **({"wide_tile_min_chunk": 0} if tile in WIDE_TILES else {}))
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, "best_first", group, 2, head_dim, dtype,
                                                  seed=17 * num_nodes + group)
    q, k, v, lens_t, mask = (t.cuda() for t in (q, k, v, lens_t, mask))
    plan = plan_of(q, k, v, policy)
    assert plan.kernel in ("gluon", "pingpong"), plan
    rows = num_nodes * group
    if tile == "pingpong-tail" and rows > 128 and 0 < rows % 128 <= 8:
        assert plan.tail_m == 8, plan
    if tile == "pingpong-64tail" and 64 < rows <= 72:
        assert (plan.block_m, plan.num_m_tiles, plan.tail_m) == (64, 1, 8), plan
    if tile == "pingpong-hsplit" and 128 < rows <= 144 and group % 2 == 0:
        # these small batches are short streams on a part-filled GPU: 2 x 128 rows unsplit
        assert (plan.head_split, plan.block_m, plan.num_m_tiles, plan.tail_m) == (2, 64, 1, 8), plan
    if tile == "pingpong-192" and rows in (132, 136, 260, 264):
        assert plan.block_m == 192, plan
    out = run_triton(q, k, v, lens_t, mask, policy)
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), dtype, f"gluon {tile}")


# The ping-pong kernel at head dim 256 (q in shared memory, no tail warpgroup), on the sm_90 table's
# own entry: one 64-row warpgroup (T = 9 at G = 4), several (T = 17 at G = 4: 68 rows), two (T = 16
# at G = 8), 128-row tiles and a 64-row one (T = 33 at G = 4, T = 65 at G = 6), on short, empty and
# split prefixes, and as persistent programs on a GPU of three SMs as the planner sees it; past 64
# rows both as planned (64-row programs on short splits) and on 128-row tiles whatever the splits.
D256_CASES = [
    (9, 4, [3000, 100], torch.bfloat16, None),
    (17, 4, [0, 63, 64, 65], torch.bfloat16, 3),       # 68 rows: two 64-row tiles (no tail at 256)
    (16, 8, [5000, 3000], torch.float16, None),
    (33, 4, [2000, 700], torch.bfloat16, 2),
    (65, 6, [1500, 1], torch.bfloat16, None),
    (17, 6, [4000, 17], torch.float16, 5),
]


@needs_sm90
@pytest.mark.parametrize("short_splits", [512, 0])
@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("num_nodes,group,lens,dtype,splits", D256_CASES)
def test_pingpong_kernel_at_head_dim_256(num_nodes, group, lens, dtype, splits, persistent, short_splits):
    from specdec_kernels.configs import tiles_for

    config = tiles_for("sm_90", 256, 2, num_nodes * group, 64, 8192).config
    if short_splits and config.short_split_tiles is None:
        pytest.skip("no short-split tiles at these rows")
    fields = dict(wide_tile_min_chunk=0, short_split_max_keys=short_splits)
    if persistent:
        fields.update(sms=3, persistent_min_waves=1.0, persistent_max_keys=1 << 30)
        splits = 1
    policy = verify_policy(splits, config, **fields)
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, "best_first", group, 2, 256, dtype,
                                                  seed=29 * num_nodes + group)
    q, k, v, lens_t, mask = (t.cuda() for t in (q, k, v, lens_t, mask))
    plan = plan_of(q, k, v, policy)
    assert plan.kernel == "pingpong", plan
    if persistent and not plan.persistent:
        pytest.skip(f"{plan.block_m}-row tiles here: not persistent")
    out = run_triton(q, k, v, lens_t, mask, policy)
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), dtype, f"head dim 256, {plan.why}")


# The ping-pong kernel's single warpgroup on 128-key tiles, as head dim 64 takes it: the cases of
# GLUON_CASES at head dim 64 (such a ring does not fit at 128), the planner's own choice of tiles
# (asserted), on their short splits too.
@needs_sm90
@pytest.mark.parametrize("tile", ["pingpong-64", "pingpong-64tail", "pingpong-hsplit"])
@pytest.mark.parametrize("num_nodes,group,lens,head_dim,dtype,splits", GLUON_CASES)
def test_gluon_single_warpgroup_128_key_tiles_at_head_dim_64(num_nodes, group, lens, head_dim, dtype, splits, tile):
    config = dataclasses.replace(_gluon_configs()[tile], gluon_pingpong_64_block_n=128)
    policy = verify_policy(splits, config, wide_keys_min_chunk=0,
                           **({"wide_tile_min_chunk": 0} if tile == "pingpong-64tail" else {}))
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, "best_first", group, 2, 64, dtype,
                                                  seed=23 * num_nodes + group)
    q, k, v, lens_t, mask = (t.cuda() for t in (q, k, v, lens_t, mask))
    plan = plan_of(q, k, v, policy)
    if plan.block_m != 64:
        pytest.skip(f"{tile} plans {plan.block_m}-row tiles here, not one warpgroup")
    assert (plan.kernel, plan.block_n) == ("pingpong", 128), plan
    out = run_triton(q, k, v, lens_t, mask, policy)
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), dtype, f"{tile} on 128-key tiles")


@needs_sm90
@pytest.mark.parametrize("tile", ["pingpong", "pingpong-192", "pingpong-tail", "pingpong-64", "pingpong-64tail",
                                  "pingpong-hsplit"])
@pytest.mark.parametrize("num_nodes,group,lens,head_dim,dtype,splits", GLUON_CASES)
def test_gluon_kernel_matches_reference_persistent(num_nodes, group, lens, head_dim, dtype, splits, tile):
    """The ping-pong kernel as persistent programs (one split, more work items than programs):
    a GPU of three SMs as the planner sees it, persistent from one wave on and whatever the keys
    an item, so that the cases' 4 to 20 work items leave some program two to seven of different
    lengths (empty prefixes among them), its ring, turn and buffer phases carried from one to the
    next."""
    policy = verify_policy(1, _gluon_configs()[tile], sms=3, persistent_min_waves=1.0, persistent_max_keys=1 << 30,
                           **({"wide_tile_min_chunk": 0} if tile in WIDE_TILES else {}))
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, "best_first", group, 2, head_dim, dtype,
                                                  seed=19 * num_nodes + group)
    q, k, v, lens_t, mask = (t.cuda() for t in (q, k, v, lens_t, mask))
    plan = plan_of(q, k, v, policy)
    if plan.kernel != "pingpong" or plan.block_m > 128:
        pytest.skip(f"{tile} plans {plan.block_m}-row tiles here, not the persistent ping-pong kernel's")
    assert plan.base_programs > 3 and plan.persistent and plan.grid == (3, 1), plan  # some program takes two
    out = run_triton(q, k, v, lens_t, mask, policy)
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), dtype, f"persistent {tile}")


@needs_triton
@pytest.mark.parametrize("num_nodes,group,lens,splits", [(17, 8, [300, 17], None), (33, 4, [250, 0, 90], 3)])
def test_split_query_heads_reads_each_programs_kv_head(num_nodes, group, lens, splits):
    """With two programs per KV head (two KV heads here, so a program reading its neighbour's
    K/V gives wrong rows) every output row matches the reference, with and without splits."""
    from specdec_kernels.configs import VerifyConfig

    # 128-row tiles only, no tail: two programs per KV head unsplit, so the planner splits
    config = VerifyConfig(block_n=64, max_block_m=128, num_warps=4, num_stages=1, max_tail_m=0, min_block_m=128,
                          split_query_heads=True)
    policy = verify_policy(splits, config)
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, "best_first", group, 2, 64, torch.float32,
                                                  seed=num_nodes + group)
    assert plan_of(q, k, v, policy).head_split == 2
    out = run_triton(q, k, v, lens_t, mask, policy)
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), torch.float32,
                      f"split query heads T={num_nodes} G={group}")


@needs_triton
def test_192_row_plan_without_the_pingpong_kernel_takes_power_of_two_tiles():
    """192-row tiles exist only in the Gluon ping-pong kernel: a call it cannot take (here: fp32)
    is planned again with power-of-two tiles, and the Triton kernel gives the right rows (T = 33
    at G = 4: 132 packed rows, which the 192 option would put in one tile)."""
    from specdec_kernels.configs import VerifyConfig
    from specdec_kernels.verify_plan import VerifyShape, VerifyTarget, plan_verify

    config = VerifyConfig(block_n=64, max_block_m=128, num_warps=4, num_stages=1, max_tail_m=0, min_block_m=64,
                          gluon=True, gluon_pingpong=True, gluon_pingpong_192=True)
    policy = verify_policy(config=config, sms=4)
    hopper = VerifyTarget("sm_90", 4, gluon=True, dependent_launch=True)
    assert plan_verify(VerifyShape(2, 33, 16, 4, 64, 400), hopper, policy).block_m == 192  # 16-bit: the Gluon kernel
    q, k, v, lens_t, mask, _ = make_verify_inputs([300, 17], 33, "best_first", 4, 4, 64, torch.float32, seed=5)
    plan = plan_of(q, k, v, policy)
    assert (plan.kernel, plan.block_m) in (("triton", 64), ("triton", 128)), plan
    out = run_triton(q, k, v, lens_t, mask, policy)
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), torch.float32, "192-row plan, Triton kernel")


@needs_triton
@pytest.mark.parametrize("num_nodes,group,lens,head_dim,dtype,splits,layout", TMA_CASES)
def test_descriptor_loads_match_reference(num_nodes, group, lens, head_dim, dtype, splits, layout):
    from specdec_kernels.configs import VerifyConfig
    from specdec_kernels.tree_verify_triton import descriptor_ok

    policy = verify_policy(splits, VerifyConfig(block_n=16, max_block_m=64, num_warps=4, num_stages=1, tma=True))
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, "best_first", group, 2, head_dim, dtype,
                                                  seed=7 * num_nodes + group)
    k, v = _lay_out(k, layout), _lay_out(v, layout)
    described = descriptor_ok(k) and descriptor_ok(v)
    assert described == (layout != "heads_apart") == plan_of(q, k, v, policy).tma, layout
    out = run_triton(q, k, v, lens_t, mask, policy)
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), dtype, f"descriptor loads, {layout}")


CHAIN_CASES = [  # (T, shape, G, L, dtype, D)
    (33, "best_first", 4, 17, torch.bfloat16, 64),
    (17, "deep_narrow", 1, 0, torch.float16, 128),
    (9, "fanout", 2, 127, torch.float16, 64),
]
if FULL_GRID:
    CHAIN_CASES += [(65, "best_first", 8, 1000, torch.bfloat16, 128),
                    (64, "deep_narrow", 5, 16, torch.float16, 256),
                    (13, "chain", 4, 1, torch.bfloat16, 64)]


@needs_triton
@pytest.mark.parametrize("num_nodes,shape,group,prefix,dtype,head_dim", CHAIN_CASES)
def test_each_node_sees_only_prefix_and_its_ancestor_chain(num_nodes, shape, group, prefix, dtype,
                                                          head_dim):
    """Node i's output equals plain attention over the prefix plus the rows of its own ancestor
    chain alone: no mask, keys gathered by walking parents."""
    kv_heads = 2
    q, k, v, lens, mask, parents = make_verify_inputs([prefix], num_nodes, shape, group, kv_heads,
                                                      head_dim, dtype, seed=num_nodes * 1000 + prefix)
    out = run_triton(q, k, v, lens, mask).cpu()
    q64, k64, v64 = q.cpu().double(), k.cpu().double(), v.cpu().double()
    ref = torch.empty_like(q64)
    for node in range(num_nodes):
        rows = list(range(prefix)) + [prefix + j for j in ancestor_chain(parents[0], node)]
        keys = k64[0, rows].repeat_interleave(group, dim=1)  # [n, Hq, D]
        vals = v64[0, rows].repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,nhd->hn", q64[0, node], keys) / math.sqrt(head_dim)
        ref[0, node] = torch.einsum("hn,nhd->hd", scores.softmax(-1), vals)
    assert_rows_close(out, ref, dtype, f"ancestor chains T={num_nodes} {shape}")


@needs_triton
def test_ragged_batch_through_public_api():
    """Four requests of different prefix lengths and trees in one call (impl='auto')."""
    lens = [0, 17, 1000, 127]
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, 16, "best_first", 4, 2, 64, torch.bfloat16, 7)
    out = tree_verify_attention(q, k, v, lens_t, mask)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), torch.bfloat16, "ragged")


@needs_triton
def test_float32_inputs():
    q, k, v, lens, mask, _ = make_verify_inputs([40, 3], 13, "best_first", 2, 2, 64, torch.float32, 11)
    out = run_triton(q, k, v, lens, mask, verify_policy(2))
    assert_rows_close(out, float64_reference(q, k, v, lens, mask), torch.float32, "fp32")


def test_reference_equals_sdpa_with_boolean_mask():
    """The grouped-matmul reference is the same function as SDPA + boolean mask + enable_gqa."""
    gen = torch.Generator().manual_seed(3)
    lens = torch.tensor([5, 0, 40], dtype=torch.int32)
    parents, mask = random_tree_batch(3, 17, "best_first", gen)
    q = torch.randn(3, 17, 8, 32, generator=gen, dtype=torch.float64)
    k = torch.randn(3, 60, 2, 32, generator=gen, dtype=torch.float64)
    v = torch.randn(3, 60, 2, 32, generator=gen, dtype=torch.float64)
    ours = tree_verify_attention_reference(q, k, v, lens, mask, compute_dtype=torch.float64)
    sdpa = tree_verify_attention_sdpa(q, k, v, lens, mask)
    torch.testing.assert_close(ours, sdpa, rtol=1e-12, atol=1e-12)
    public = tree_verify_attention(q.float(), k.float(), v.float(), lens, mask, impl="torch")
    torch.testing.assert_close(public.double(), sdpa, rtol=1e-5, atol=1e-5)


def test_bad_shapes_are_rejected_with_the_input_named():
    q = torch.randn(1, 9, 6, 64)
    k = torch.randn(1, 20, 4, 64)
    mask = torch.zeros(1, 9, 1, dtype=torch.int32)
    with pytest.raises(ValueError, match="multiple of Hkv"):
        tree_verify_attention(q, k, k, torch.tensor([3], dtype=torch.int32), mask, impl="torch")
    # a cache stored [B, Hkv, S, D]: its S read as Hkv was "Hq=6 is not a multiple of Hkv=20", no argument named
    k = torch.randn(1, 2, 20, 64)
    with pytest.raises(ValueError, match=r"k_cache must be \[B, S, Hkv, D\] with q's Hq=6 heads a multiple of Hkv, "
                                         r"got Hkv = k_cache.shape\[2\] = 20 of \(1, 2, 20, 64\); "
                                         r"pass k_cache.transpose\(1, 2\) and v_cache.transpose\(1, 2\)"):
        tree_verify_attention(q, k, k, torch.tensor([3], dtype=torch.int32), mask, impl="torch")
    k = torch.randn(1, 20, 2, 64)
    with pytest.raises(ValueError, match="ancestor_mask"):
        tree_verify_attention(q, k, k, torch.tensor([3], dtype=torch.int32), mask[:, :, :0], impl="torch")


@pytest.mark.parametrize("lens,fix", [([11, 12], "allocate caches of at least L_b + T = 21 rows"),
                                      ([11, -1], "pass the request's prefix length, 0 or more")])
@pytest.mark.parametrize("impl", ["torch", pytest.param("triton", marks=pytest.mark.skipif(
    not triton_interpreting(), reason="the Triton path on CPU tensors needs the interpreter"))])
def test_lengths_on_the_host_that_leave_the_caches_are_rejected(lens, fix, impl):
    """20 cache rows hold a 9-node tree after at most 11 prefix rows: a longer or negative L_b names
    its request and the fix (on the host, where reading the lengths costs no sync), on both paths."""
    q, k = torch.randn(2, 9, 2, 64), torch.randn(2, 20, 1, 64)
    mask = ancestor_mask_from_parents(torch.arange(-1, 8, dtype=torch.int32).expand(2, 9))  # a chain
    with pytest.raises(ValueError, match=rf"cache_lens\[1\] = {lens[1]}: .*L_b <= S - T = 11 .*; {re.escape(fix)}$"):
        tree_verify_attention(q, k, k, torch.tensor(lens, dtype=torch.int32), mask, impl=impl)
    tree_verify_attention(q, k, k, torch.tensor([11, 0], dtype=torch.int32), mask, impl=impl)


@needs_triton
@pytest.mark.parametrize("dtype, head_dim, message", [
    (torch.float64, 64, r"torch.float64 has no Triton kernel.*impl='torch'"),
    # a model's head dim, not the caller's to change: the kernels' head dims and the way out
    (torch.float32, 96, r"head dim 96 has no Triton kernel; use one of 64, 128, 256, or impl='torch'"),
])
def test_a_call_without_kernels_is_named_with_the_fix(dtype, head_dim, message):
    q, k = torch.randn(1, 3, 2, head_dim, dtype=dtype), torch.randn(1, 8, 1, head_dim, dtype=dtype)
    lens = torch.tensor([4], dtype=torch.int32)
    mask = ancestor_mask_from_parents(torch.tensor([[-1, 0, 0]], dtype=torch.int32))
    with pytest.raises(ValueError, match=message):
        tree_verify_attention(q.to(DEVICE), k.to(DEVICE), k.to(DEVICE), lens.to(DEVICE), mask.to(DEVICE), impl="triton")
    out = tree_verify_attention(q, k, k, lens, mask, impl="torch")
    assert out.shape == q.shape and out.dtype == dtype


@needs_triton
def test_a_scale_given_as_a_zero_dim_tensor_is_a_scale():
    """It passed the finiteness check, ran on the torch path and failed inside the Triton kernel."""
    q, k = torch.randn(1, 3, 2, 64), torch.randn(1, 8, 1, 64)
    lens = torch.tensor([4], dtype=torch.int32)
    mask = ancestor_mask_from_parents(torch.tensor([[-1, 0, 0]], dtype=torch.int32))
    expect = tree_verify_attention(q, k, k, lens, mask, sm_scale=0.125, impl="torch")
    out = tree_verify_attention(*(t.to(DEVICE) for t in (q, k, k, lens, mask)), sm_scale=torch.tensor(0.125),
                                impl="triton")
    assert_rows_close(out.cpu(), expect, torch.float32, "a 0-d tensor scale")


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool])
@pytest.mark.parametrize("impl", ["torch", pytest.param("triton", marks=needs_triton)])
def test_inputs_that_are_not_floats_are_named(dtype, impl):
    """Integer (or bool) q and caches ran on the torch path, whose float32 attention came back cast
    to the integers without a word (0 where |out| < 1); the Triton path named no float instead."""
    q, k = torch.randn(1, 3, 2, 64).mul(3).to(dtype), torch.randn(1, 8, 1, 64).mul(3).to(dtype)
    lens = torch.tensor([4], dtype=torch.int32)
    mask = ancestor_mask_from_parents(torch.tensor([[-1, 0, 0]], dtype=torch.int32))
    with pytest.raises(ValueError, match=rf"q, k_cache and v_cache must be float tensors .*got {dtype}; pass "
                                         r"q\.float\(\), k_cache\.float\(\), v_cache\.float\(\)"):
        tree_verify_attention(*(t.to(DEVICE) for t in (q, k, k, lens, mask)), impl=impl)


@pytest.mark.parametrize("sm_scale", [float("nan"), float("inf"), -float("inf")])
def test_a_scale_that_is_not_finite_is_rejected(sm_scale):
    """Such a scale turns every output row into NaN: refused before any path runs."""
    q, k = torch.randn(1, 3, 2, 64), torch.randn(1, 8, 1, 64)
    mask = ancestor_mask_from_parents(torch.tensor([[-1, 0, 0]], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"sm_scale must be a finite number.*None for 1 / sqrt\(D\)"):
        tree_verify_attention(q, k, k, torch.tensor([4], dtype=torch.int32), mask, sm_scale=sm_scale, impl="torch")


def test_auto_picks_triton_only_on_gpu_or_interpreter(monkeypatch):
    cpu = torch.zeros(1)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert resolve_impl("auto", cpu) == "torch"
    with pytest.raises(ValueError, match="TRITON_INTERPRET"):
        resolve_impl("triton", cpu)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert resolve_impl("auto", cpu) == "triton"
    with pytest.raises(ValueError, match="impl="):
        resolve_impl("cuda", cpu)


def test_import_does_not_load_triton():
    code = "import sys, specdec_kernels; assert 'triton' not in sys.modules, 'triton imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# The ping-pong kernel's tail warpgroup keeps its running max until a warp's scores pass it by
# 2**8 (then the max is taken across its warps and the tile redone): scores that rise along the
# prefix (keys scaled up row by row) move the max in steps under and over that bound, scores that
# fall leave it at the first tiles, large ones rescale often; (T, G, [L_b], dtype, splits, rise,
# q scale): 136 rows (128 + 8), 132 rows (128 + 4), 72 rows (64 + 8).
TAIL_RESCALE_CASES = [
    (17, 8, [3000, 200], torch.bfloat16, None, 0.002, 1.0),
    (17, 8, [2500, 700], torch.float16, 2, -0.0003, 1.0),
    (33, 4, [4000, 64], torch.bfloat16, 3, 0.0, 6.0),
    (9, 8, [2000, 100, 0], torch.bfloat16, None, 0.01, 3.0),
]


@needs_sm90
@pytest.mark.parametrize("num_nodes,group,lens,dtype,splits,rise,q_scale", TAIL_RESCALE_CASES)
def test_pingpong_tail_rescales_where_scores_outgrow_its_max(num_nodes, group, lens, dtype, splits, rise, q_scale):
    policy = verify_policy(splits, _gluon_configs()["pingpong-64tail"], wide_tile_min_chunk=0)
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, "best_first", group, 2, 128, dtype,
                                                  seed=13 * num_nodes + group)
    ramp = (1.0 + rise * torch.arange(k.shape[1], device=k.device, dtype=torch.float32)).clamp(min=0.05)
    k = (k.float() * ramp[None, :, None, None]).to(dtype)
    q = (q.float() * q_scale).to(dtype)
    q, k, v, lens_t, mask = (t.cuda() for t in (q, k, v, lens_t, mask))
    plan = plan_of(q, k, v, policy)
    assert plan.tail_m == 8 and plan.head_split == 1, plan
    out = run_triton(q, k, v, lens_t, mask, policy)
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), dtype, f"tail rescale, rise {rise}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_path_ignores_rows_past_each_requests_tree(dtype):
    """The torch path looks at rows up to the longest request's L_b + T; a shorter request's rows
    past its own L_b + T are NaN here (another request's length, free cache) and must not reach
    its output."""
    lens = [3, 40, 0, 17]
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, 9, "best_first", 4, 2, 32, dtype, seed=31)
    q, k, v, lens_t, mask = (t.cpu() for t in (q, k, v, lens_t, mask))
    assert torch.isnan(k[0, lens[0] + 9:]).all()  # the slack the short requests must not read
    out = tree_verify_attention(q, k, v, lens_t, mask, impl="torch")
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), dtype, "torch path, ragged with NaN slack")


def _count_direct_launches(monkeypatch) -> list:
    """A list that grows by one for each call launched directly (``triton_launch``)."""
    from specdec_kernels import tree_verify_triton

    launched = []
    direct_call = tree_verify_triton._DirectCall.__call__

    def counting(self, *args):
        launched.append(self)
        return direct_call(self, *args)

    monkeypatch.setattr(tree_verify_triton._DirectCall, "__call__", counting)
    return launched


def _launches_directly() -> bool:
    from specdec_kernels.triton_launch import direct_launch_unusable

    return DEVICE.type == "cuda" and direct_launch_unusable() is None


# the last two only where the direct launch runs (a GPU): the interpreter is slow and always ordinary
@needs_triton
@pytest.mark.parametrize("dtype,num_splits", [(torch.bfloat16, None), (torch.float16, 3)] + (
    [(torch.bfloat16, 1), (torch.float32, None)] if DEVICE.type == "cuda" else []))
def test_repeated_calls_relaunch_the_right_kernel(monkeypatch, dtype, num_splits):
    """A repeated call relaunches the kernels compiled for its signature (on a GPU whose Triton has
    the known launcher: directly, with cached tensor maps): the same plan with other strides, a
    misaligned q and other data each give their own right answer, call after call."""
    launched = _count_direct_launches(monkeypatch)
    policy = verify_policy(num_splits)  # one policy object: the calls share their plans
    # the interpreter walks each key tile in Python: a shorter cache, the same plan there
    lens = [700, 90] if DEVICE.type == "cuda" else [300, 90]
    calls = 0
    for seed in (1, 2):
        q, k, v, lens_t, mask, _ = make_verify_inputs(lens, 17, "best_first", 4, 2, 64, dtype, seed=seed)
        for q_view in (q, torch.cat([q, q[:, :1]], dim=1)[:, :17], torch.empty(q.numel() + 1, dtype=dtype,
                                                                               device=q.device)[1:].view_as(q)):
            q_view.copy_(q)
            out = run_triton(q_view, k, v, lens_t, mask, policy)
            assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), dtype,
                              f"relaunch {dtype} seed {seed} strides {q_view.stride()}")
            calls += 1
    if _launches_directly():
        # the second seed's aligned calls repeat the first seed's signatures; the misaligned q never
        assert len(launched) == 2, f"{len(launched)} of {calls} calls launched directly"


@pytest.mark.skipif(DEVICE.type != "cuda", reason="tensor maps are encoded on a GPU only")
def test_a_cache_freed_and_reallocated_at_the_same_address_is_read_anew(monkeypatch):
    """A tensor map is cached by everything it encodes, the base address included, not by tensor:
    a new cache at a freed one's address (the caching allocator's usual reuse) reads its own
    content, and a cache at another address gets its own map."""
    launched = _count_direct_launches(monkeypatch)
    policy = verify_policy()
    lens = [300, 1000]
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, 17, "best_first", 4, 2, 128, torch.bfloat16, seed=5)
    for seed in (6, 7, 8):
        _, k_new, v_new, _, _, _ = make_verify_inputs(lens, 17, "best_first", 4, 2, 128, torch.bfloat16, seed=seed)
        k_cache, v_cache = torch.empty_like(k), torch.empty_like(v)
        k_cache.copy_(k_new)
        v_cache.copy_(v_new)
        out = run_triton(q, k_cache, v_cache, lens_t, mask, policy)
        assert_rows_close(out, float64_reference(q, k_new, v_new, lens_t, mask), torch.bfloat16,
                          f"cache of seed {seed} at {k_cache.data_ptr():#x}")
        del k_cache, v_cache
    if _launches_directly():
        assert len(launched) == 2


@pytest.mark.skipif(DEVICE.type != "cuda", reason="streams and graphs need a GPU")
def test_direct_calls_on_two_streams_and_in_a_graph_keep_their_partials_apart(monkeypatch):
    """Repeated calls reuse split partials per (stream, thread) and take fresh ones inside a graph
    capture: calls alternating between two streams and a graph's replays, none synchronised with
    another, each give their own right answer."""
    from specdec_kernels.tree_verify_triton import tree_verify_attention_triton

    launched = _count_direct_launches(monkeypatch)
    policy = verify_policy(num_splits=4)  # a merge, so partials in the workspace
    lens = [2000, 1500]
    inputs = [make_verify_inputs(lens, 17, "best_first", 4, 2, 128, torch.bfloat16, seed=seed)[:5] for seed in (9, 10)]
    refs = [float64_reference(*args) for args in inputs]
    for args in inputs:
        tree_verify_attention_triton(*args, policy=policy)  # compiles, keeps the direct launch
    launched.clear()  # the second warm-up call already repeated the first one's signature
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for stream in streams:
        stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_out = tree_verify_attention_triton(*inputs[0], policy=policy)
    outs = []
    for _ in range(3):
        for stream, args in zip(streams, inputs):
            with torch.cuda.stream(stream):
                outs.append(tree_verify_attention_triton(*args, policy=policy))
        graph.replay()
    torch.cuda.synchronize()
    for i, out in enumerate(outs):
        assert_rows_close(out, refs[i % 2], torch.bfloat16, f"call {i} on stream {i % 2}")
    assert_rows_close(graph_out, refs[0], torch.bfloat16, "graph replay")
    if _launches_directly():
        assert len(launched) == 7  # the capture's call and six on the streams


@needs_triton
def test_the_last_signatures_guard_rejects_every_other_layout():
    """The last direct call is found by a guard on q, K, V, cache_lens and the mask: it passes new
    tensors of the same dtypes, devices, shapes and strides (other data, other addresses) and
    rejects any other, a strided mask or lens of the same shape among them (their strides are not
    passed to the kernels)."""
    from specdec_kernels.tree_verify_triton import _tensor_guard

    q, k, v, lens, mask, _ = make_verify_inputs([40, 7], 9, "best_first", 2, 2, 64, torch.float16, seed=3)
    guard = _tensor_guard((q, k, v, lens, mask))
    assert guard is not None, "this torch has no TensorGuards: calls take the keyed lookup"
    assert guard.check(*(t.clone() for t in (q, k, v, lens, mask)))
    others = {
        "q of another dtype": (q.float(), k, v, lens, mask),
        "q of other strides": (torch.cat([q, q[:, :1]], dim=1)[:, :9], k, v, lens, mask),
        "k of another shape": (q, k[:, :-1].contiguous(), v, lens, mask),
        "v of other strides": (q, k, torch.cat([v, v], dim=2)[:, :, :2], lens, mask),
        "int64 lens": (q, k, v, lens.long(), mask),
        "strided lens": (q, k, v, torch.stack([lens, lens], dim=1)[:, 0], mask),
        "strided mask": (q, k, v, lens, torch.cat([mask, mask], dim=2)[:, :, :1]),
        "q on another device": (q.to("meta"), k, v, lens, mask),
        "q that requires grad": (q.detach().requires_grad_(), k, v, lens, mask),
    }
    for what, tensors in others.items():
        assert not guard.check(*tensors), what


@pytest.mark.skipif(DEVICE.type != "cuda", reason="the direct launch runs on a GPU")
def test_calls_like_the_last_but_for_a_layout_or_an_address_are_not_launched_as_it(monkeypatch):
    """After a direct call, one of the same signature is launched directly without a key lookup;
    one that differs only in q's alignment, the mask's or the lens' strides takes another path, and
    every call gives its own right answer."""
    from specdec_kernels import tree_verify_triton

    launched = _count_direct_launches(monkeypatch)
    policy = verify_policy(num_splits=2)
    lens = [300, 900]
    for seed in (11, 12):  # compiles, then launches directly: the last direct call
        tree_verify_triton.tree_verify_attention_triton(
            *make_verify_inputs(lens, 17, "best_first", 4, 2, 128, torch.bfloat16, seed=seed)[:5], policy=policy)
    monkeypatch.setattr(tree_verify_triton, "_DIRECT", {})  # only the last call's guard finds a direct launch now
    launched.clear()
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, 17, "best_first", 4, 2, 128, torch.bfloat16, seed=13)
    misaligned_q = torch.empty(q.numel() + 1, dtype=q.dtype, device=q.device)[1:].view_as(q)
    strided_lens = torch.stack([lens_t, lens_t], dim=1)[:, 0]
    strided_mask = torch.cat([mask, mask], dim=2)[:, :, :mask.shape[2]]
    calls = {"the last signature": (q, k, v, lens_t, mask), "a misaligned q": (misaligned_q, k, v, lens_t, mask),
             "strided lens": (q, k, v, strided_lens, mask), "strided mask": (q, k, v, lens_t, strided_mask),
             "the last signature again": (q, k, v, lens_t, mask)}
    misaligned_q.copy_(q)
    strided_lens.copy_(lens_t)
    strided_mask.copy_(mask)
    ref = float64_reference(q, k, v, lens_t, mask)
    for what, args in calls.items():
        assert_rows_close(tree_verify_triton.tree_verify_attention_triton(*args, policy=policy), ref,
                          torch.bfloat16, what)
    if _launches_directly():
        assert len(launched) == 2, f"{len(launched)} of {len(calls)} calls launched directly"


@needs_sm90
@pytest.mark.parametrize("name", ["w4-m64", "w8-m128", "pingpong", "pingpong-tail", "pingpong-64",
                                  "pingpong-64tail", "pingpong-hsplit"])
@pytest.mark.parametrize("num_nodes, group", [(9, 8), (17, 4), (33, 4), (65, 2)])
def test_own_tree_split_on_gluon_kernels(name, num_nodes, group):
    """The same on Hopper's Gluon kernels (graph-style launch and the eager folded merge alike)."""
    policy = verify_policy(config=_gluon_configs()[name], own_tree_split=True)
    lens = [1000, 300, 0]
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, "best_first", group, 2, 128, torch.bfloat16,
                                                  seed=1019)
    plan = plan_of(q, k, v, policy)
    assert plan.own_tree_split and plan.kernel != "triton", plan
    ref = float64_reference(q, k, v, lens_t, mask)
    for call in range(2):
        assert_rows_close(run_triton(q, k, v, lens_t, mask, policy), ref, torch.bfloat16, f"{name} call {call}")
    assert_tree_in_its_own_split(plan, policy, (q, k, v, lens_t, mask), lens)


@needs_sm90
@pytest.mark.parametrize("name", ["pingpong", "pingpong-tail", "pingpong-64", "pingpong-64tail"])
@pytest.mark.parametrize("own_tree_split", [True, False])
def test_pingpong_merge_as_programmatic_dependent(name, own_tree_split):
    """The merge's own launch as the ping-pong kernel's programmatic dependent (its programs wait
    for the split grid's end): right rows eagerly and replayed in a graph, on a ragged batch."""
    from specdec_kernels.tree_verify_triton import tree_verify_attention_triton

    policy = verify_policy(num_splits=4, config=_gluon_configs()[name], own_tree_split=own_tree_split,
                           fused_merge=False, pingpong_programmatic_merge=True)
    lens = [1000, 300, 0]
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, 17, "best_first", 4, 2, 128, torch.bfloat16, seed=1021)
    plan = plan_of(q, k, v, policy)
    assert plan.kernel == "pingpong" and plan.merge is not None and plan.merge.starts_early, plan
    ref = float64_reference(q, k, v, lens_t, mask)
    assert_rows_close(run_triton(q, k, v, lens_t, mask, policy), ref, torch.bfloat16, f"{name} eager")
    out = torch.full_like(q, float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tree_verify_attention_triton(q, k, v, lens_t, mask, out=out, policy=policy)
    for replay in range(2):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_rows_close(out, ref, torch.bfloat16, f"{name} graph replay {replay}")


@pytest.mark.parametrize("name", ["k_cache", "v_cache", "cache_lens", "ancestor_mask"])
@pytest.mark.parametrize("impl", ["torch", pytest.param("triton", marks=needs_triton)])
def test_an_argument_on_another_device_than_q_is_named(name, impl):
    """A cache, the lengths or the mask left on another device than q reached torch's own error (a
    Triton crash on a GPU): named in one line with the fix, before anything reads it."""
    k = torch.randn(1, 8, 1, 64)
    args = dict(q=torch.randn(1, 3, 2, 64), k_cache=k, v_cache=k.clone(),
                cache_lens=torch.tensor([4], dtype=torch.int32),
                ancestor_mask=ancestor_mask_from_parents(torch.tensor([[-1, 0, 0]], dtype=torch.int32)))
    assert_wrong_device_named(tree_verify_attention, {n: t.to(DEVICE) for n, t in args.items()}, name, "q", impl=impl)


def test_caches_of_another_dtype_than_q_are_named():
    q, k = torch.randn(1, 3, 2, 64), torch.randn(1, 8, 1, 64)
    mask = ancestor_mask_from_parents(torch.tensor([[-1, 0, 0]], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"k_cache and v_cache must be q's dtype \(torch.float16\), got torch.float32, "
                                         r"torch.float16; pass them \.to\(q\.dtype\)"):
        tree_verify_attention(q.half(), k, k.half(), torch.tensor([4], dtype=torch.int32), mask, impl="torch")
