"""The tree-verify planner, on any host: per-arch tables, query tiles, splits, the kernel a call
gets, the grids, the shared memory of every dtype, and the plan cache. Pure functions: no GPU."""

from __future__ import annotations

import dataclasses

import pytest

from specdec_kernels.configs import SHARED_MEMORY_LIMITS, SHORT_CACHE_ROWS, VerifyConfig, tiles_for
from specdec_kernels.verify_plan import (DEFAULT_POLICY, VerifyPlan, VerifyPolicy, VerifyShape, VerifyTarget, _tiles,
                                         finer_prefix_splits, merge_tiles, pick_merge_slices, pick_merge_waiters,
                                         pick_query_tiles, pick_splits, pingpong_grid, plan_verify,
                                         relieve_tree_split, runs_pingpong, split_chunks, wants_own_tree_split)

H200 = VerifyTarget("sm_90", 132, gluon=True, dependent_launch=True)
H200_NO_GLUON = VerifyTarget("sm_90", 132, gluon=False, dependent_launch=True)
RTX_PRO = VerifyTarget("sm_120", 188, dependent_launch=True)


def config_of(arch, head_dim, rows, pairs=256, cache=8192, element_size=2):
    return tiles_for(arch, head_dim, element_size, rows, pairs, cache).config


def tiles(batch, num_nodes, group, cache, cfg, kv_heads=8, policy=DEFAULT_POLICY, sms=132):
    return _tiles(batch, num_nodes, group, kv_heads, cache, sms, cfg, policy)


def test_plan_is_typed_frozen_and_cached_per_call_signature():
    shape = VerifyShape(8, 17, 32, 8, 128, 8192 + 17)
    plan = plan_verify(shape, H200)
    assert isinstance(plan, VerifyPlan) and plan.kernel == "pingpong" and plan.why
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.num_splits = 3
    assert plan_verify(VerifyShape(8, 17, 32, 8, 128, 8192 + 17), H200) is plan  # one plan a signature
    assert plan_verify(shape, H200, VerifyPolicy()) is not plan                  # another policy: planned anew
    # the workspace: fp32 partials and log2-sum-exps of every split's padded rows
    assert plan.workspace_bytes == 8 * 8 * plan.num_splits * plan.rows_pad * (128 + 1) * 4 > 0
    assert plan_verify(VerifyShape(32, 17, 32, 8, 128, 8192 + 17), H200).workspace_bytes == 0  # one split


def test_sm90_tiers_by_rows_grid_and_cache():
    """sm_90, 16 bits: up to 64 packed rows the 64-row Gluon kernel (on grids of up to 64 (request,
    KV head) pairs the ping-pong kernel's single warpgroup); past that the ping-pong kernel, except
    on tiny work (small grid and short cache), which keeps the 64-row and 8-warp Gluon tiles. Where
    the Gluon kernels cannot run, each entry's Triton fallback."""
    def shape(cfg):
        return cfg.num_warps, cfg.max_block_m, cfg.min_block_m, cfg.max_tail_m, cfg.tma, cfg.gluon

    assert shape(config_of("sm_90", 128, 64)) == (4, 64, 16, 0, False, True)
    assert config_of("sm_90", 128, 64).gluon_stages == 4
    few_pp = config_of("sm_90", 128, 36, 64)
    assert (few_pp.gluon_pingpong, few_pp.gluon_pingpong_64, few_pp.block_n, few_pp.resident_per_sm) == (
        True, True, 64, 1)
    assert shape(few_pp.triton_fallback) == (4, 64, 16, 0, False, False)
    many = config_of("sm_90", 128, 68, 64)                                                  # B8, T17, G4, L8k
    assert shape(many) == (8, 128, 128, 0, True, True)
    assert (many.gluon_pingpong, many.gluon_pingpong_192, many.gluon_pingpong_tail, many.gluon_pingpong_64,
            many.gluon_stages, many.block_n) == (True, True, True, True, 4, 64)
    assert shape(many.triton_fallback) == (8, 128, 128, 0, True, False)
    for small_work in (config_of("sm_90", 128, 68, 8), config_of("sm_90", 128, 68, 256, 1041)):
        assert small_work.gluon_pingpong                                                    # B1; B32, L1k
        assert shape(small_work.triton_fallback) == (4, 64, 16, 16, False, False)
    for rows in (68, 260):                                                                  # B1-L1k
        tiny = config_of("sm_90", 128, rows, 8, 1041)
        assert not tiny.gluon_pingpong and tiny.gluon and tiny.triton_fallback is None
        assert tiny.max_block_m == (64 if rows < 256 else 128)
    assert config_of("sm_90", 128, 68, 256, SHORT_CACHE_ROWS + 1) == many
    assert config_of("sm_100", 128, 68, 64) == config_of("sm_90", 128, 68, 64)
    for arch in ("sm_120", "sm_89"):
        for rows in (9, 68, 260):
            assert not config_of(arch, 128, rows).gluon, (arch, rows)
    # a call the Gluon kernel cannot take (here: a Triton without Gluon) gets the Triton fallback
    plan = plan_verify(VerifyShape(1, 17, 32, 8, 128, 8209), H200_NO_GLUON)
    assert (plan.kernel, plan.block_m, plan.num_m_tiles, plan.block_n, plan.stages) == ("triton", 64, 2, 32, 3)
    plan = plan_verify(VerifyShape(1, 33, 32, 8, 128, 8225), H200_NO_GLUON, VerifyPolicy(tiles=many))
    assert (plan.kernel, plan.block_m, plan.num_m_tiles) == ("triton", 128, 2)  # 132 rows: not 1 x 192
    no_fallback = dataclasses.replace(many, triton_fallback=None)
    plan = plan_verify(VerifyShape(1, 33, 32, 8, 128, 8225), H200_NO_GLUON, VerifyPolicy(tiles=no_fallback))
    assert (plan.kernel, plan.block_m, plan.num_m_tiles, plan.tail_m) == ("triton", 128, 2, 0)  # nor 128 + 8
    # what else keeps a call off the Gluon kernels: fp32, a layout no descriptor describes, a scale <= 0
    for shape_ in (VerifyShape(8, 17, 32, 8, 128, 8209, element_size=4),
                   VerifyShape(8, 17, 32, 8, 128, 8209, descriptors=False),
                   VerifyShape(8, 17, 32, 8, 128, 8209, positive_scale=False)):
        assert plan_verify(shape_, H200).kernel == "triton", shape_


def test_head_dim_64_takes_the_gluon_tiers_of_128_with_its_own_triton_tiles():
    gluon_fields = ("gluon", "gluon_block_n", "gluon_stages", "gluon_q_in_registers", "gluon_pingpong",
                    "gluon_pingpong_192", "gluon_pingpong_tail", "gluon_pingpong_64", "split_query_heads",
                    "block_n", "max_block_m", "min_block_m", "num_warps", "resident_per_sm")
    for rows, pairs, cache in ((36, 256, 8201), (36, 64, 8201), (68, 64, 8209), (68, 8, 8209), (68, 256, 1041),
                               (68, 8, 1041), (260, 8, 1041), (260, 256, 8257), (520, 256, 8257)):
        at_64, at_128 = config_of("sm_90", 64, rows, pairs, cache), config_of("sm_90", 128, rows, pairs, cache)
        if (rows, pairs) == (36, 256):  # the 64-row Gluon kernel: 64-key tiles at D = 64 (8 KB, as 32 at 128)
            assert (at_64.gluon_block_n, at_128.gluon_block_n, at_128.block_n) == (64, 0, 32)
            at_64 = dataclasses.replace(at_64, gluon_block_n=0)
        assert at_64.gluon and all(getattr(at_64, f) == getattr(at_128, f) for f in gluon_fields), (rows, pairs, cache)
        fallback = at_64.triton_fallback
        assert not fallback.gluon and (fallback.num_warps, fallback.max_block_m) == (
            (4, 64) if rows <= 255 else (8, 128)), (rows, pairs, cache)
    plan = plan_verify(VerifyShape(1, 17, 32, 8, 64, 8209), H200_NO_GLUON)
    assert (plan.kernel, plan.block_m, plan.block_n, plan.stages) == ("triton", 64, 64, 3)


def test_head_dim_256_runs_the_pingpong_kernel_on_hopper_and_fits_sm120():
    """Qwen3.5/3.6-27B's full-attention heads at TP 1, 4 and 8 (24/4, 6/1, 3/1 at head dim 256):
    the ping-pong kernel with q in shared memory on sm_90 within its shared memory; Triton tiles
    within sm_120's."""
    for q_heads, kv_heads in ((24, 4), (6, 1), (3, 1)):
        for num_nodes in (9, 17, 33, 65):
            for batch, prefix in ((1, 1024), (8, 8192), (32, 32768)):
                shape = VerifyShape(batch, num_nodes, q_heads, kv_heads, 256, prefix + num_nodes)
                plan = plan_verify(shape, H200)
                assert plan.kernel == "pingpong" and plan.block_m <= 128, (shape, plan)
                assert plan.shared_bytes <= SHARED_MEMORY_LIMITS["sm_90"], (shape, plan)
                blackwell = plan_verify(shape, RTX_PRO)
                assert blackwell.kernel == "triton" and blackwell.shared_bytes <= SHARED_MEMORY_LIMITS["sm_120"]


def test_head_dim_256_splits_query_heads_on_little_work():
    """65-128 packed rows at an even G, with at most 64 (request, KV head) pairs and 192k K/V rows
    in all: two one-warpgroup programs a KV head (4 ring slots), half its query heads each, the plan
    of twice the KV heads at half the group; elsewhere one 128-row program on 3 slots."""
    def plan(batch, num_nodes, q_heads, kv_heads, prefix, target=H200, policy=DEFAULT_POLICY):
        return plan_verify(VerifyShape(batch, num_nodes, q_heads, kv_heads, 256, prefix + num_nodes), target, policy)

    for shape in ((1, 17, 24, 4, 1024), (1, 17, 24, 4, 32768), (8, 17, 24, 4, 1024), (1, 17, 6, 1, 32768),
                  (8, 17, 6, 1, 8192), (32, 17, 6, 1, 1024), (1, 11, 12, 2, 4096)):
        got = plan(*shape)
        assert (got.kernel, got.head_split, got.block_m, got.num_m_tiles, got.stages) == ("pingpong", 2, 64, 1, 4), (
            shape, got)
        assert (got.kv_heads, got.group) == (2 * shape[3], shape[2] // shape[3] // 2)
        assert "query heads split in two programs a KV head" in got.why
    for shape in ((8, 17, 24, 4, 8192),      # 262k K/V rows in all
                  (32, 17, 24, 4, 1024),     # 128 pairs: two programs a KV head would take two waves
                  (8, 17, 6, 1, 32768),      # 262k again
                  (1, 33, 3, 1, 1024),       # 99 rows at an odd G
                  (1, 33, 6, 1, 1024),       # 198 rows
                  (1, 9, 24, 4, 1024)):      # 54 rows: one warpgroup already
        got = plan(*shape)
        assert got.head_split == 1 and got.kernel == "pingpong", (shape, got)
    assert plan(1, 17, 24, 4, 1024, policy=VerifyPolicy(split_query_heads=False)).head_split == 1
    whole = plan(1, 17, 24, 4, 1024, H200_NO_GLUON)  # the Triton fallback takes whole KV heads
    assert (whole.kernel, whole.head_split) == ("triton", 1)
    assert plan(1, 17, 24, 4, 1024, RTX_PRO).head_split == 1


def test_head_dim_256_short_splits_run_one_warpgroup_programs():
    """Past 64 packed rows at head dim 256, where the 128-row plan's splits stream at most 512 keys,
    the call runs 64-row programs of one warpgroup on 4 ring slots with their own splits (T = 65 at
    G = 6: 7 x 64 rows instead of 4 x 128); longer splits keep the 128-row pairs, and the policy
    can turn it off. Other head dims have no such entry."""
    def plan(batch, num_nodes, q_heads, kv_heads, prefix, policy=DEFAULT_POLICY):
        return plan_verify(VerifyShape(batch, num_nodes, q_heads, kv_heads, 256, prefix + num_nodes), H200, policy)

    off = VerifyPolicy(short_split_max_keys=0)
    for shape, rows in (((1, 65, 6, 1, 1024), 7 * 64), ((8, 65, 6, 1, 1024), 7 * 64), ((1, 33, 24, 4, 8192), 4 * 64),
                        ((32, 33, 6, 1, 1024), 4 * 64), ((1, 33, 3, 1, 32768), 2 * 64), ((1, 65, 3, 1, 8192), 4 * 64)):
        pair = plan(*shape, policy=off)
        got = plan(*shape)
        assert (pair.block_m, pair.stages) == (128, 3) and shape[4] <= 512 * pair.num_splits, (shape, pair)
        assert (got.kernel, got.block_m, got.num_m_tiles * got.block_m, got.stages) == ("pingpong", 64, rows, 4), (
            shape, got)
        assert got.why.endswith("narrower programs on short splits") and "; ;" not in got.why
    for shape in ((8, 65, 24, 4, 1024), (1, 65, 24, 4, 8192), (8, 33, 6, 1, 8192), (32, 65, 6, 1, 32768)):
        got = plan(*shape)
        assert got.block_m == 128 and shape[4] > 512 * got.num_splits and "short splits" not in got.why, (shape, got)
    assert plan(1, 65, 6, 1, 1024, VerifyPolicy(short_split_max_keys=4096)).block_m == 64
    for head_dim in (64, 128):
        for rows in (68, 132, 260, 520):
            assert config_of("sm_90", head_dim, rows).short_split_tiles is None


def test_head_dim_256_pingpong_rings_and_split_model():
    """Head dim 256 on sm_90: one ping-pong warpgroup (at most 64 packed rows) streams through 4
    ring slots, two through 3; the split model prices its key rows 2.5x head dim 128's, lets a
    split take 64 of them and prices the merge 8 key rows a split up to one merge block (128
    splits), so that one KV head at batch 1 runs more programs (H200: 128 splits at 32k keys, 64
    at 8k, 16 at 1k), while grids that fill the GPU keep their counts, and a count whose merge
    folds into the split kernel stays where a finer one's would not. Other entries keep the model
    as fitted."""
    def plan(batch, num_nodes, q_heads, kv_heads, prefix, target=H200):
        return plan_verify(VerifyShape(batch, num_nodes, q_heads, kv_heads, 256, prefix + num_nodes), target)

    for shape, stages, splits in (((1, 9, 3, 1, 32768), 4, 128), ((1, 17, 3, 1, 32768), 4, 128),
                                  ((8, 17, 6, 1, 32768), 3, 16), ((8, 9, 6, 1, 8192), 4, 16),
                                  ((32, 9, 3, 1, 1024), 4, 4), ((1, 9, 24, 4, 32768), 4, 32),
                                  ((1, 17, 3, 1, 1024), 4, 16), ((1, 9, 6, 1, 8192), 4, 64),
                                  ((8, 17, 24, 4, 8192), 3, 4)):
        got = plan(*shape)
        assert (got.kernel, got.stages, got.prefix_splits) == ("pingpong", stages, splits), (shape, got)
    assert pick_splits(1, 32768, 32, 132, 1, 27)[1] == 32
    assert pick_splits(1, 32768, 32, 132, 1, 27, key_cost=2.5)[1] == 64
    assert pick_splits(1, 1024, 32, 132, 1, 27, key_cost=2.5)[1] == 4                      # 256-key splits
    assert pick_splits(1, 1024, 32, 132, 1, 27, key_cost=2.5, min_split_keys=128)[1] == 8
    cheap_merge = dict(key_cost=2.5, min_split_keys=64, merge_split_keys=8)
    assert pick_splits(1, 1024, 32, 132, 1, 27, **cheap_merge)[1] == 16
    assert pick_splits(1, 8192, 32, 132, 1, 27, **cheap_merge)[1] == 64
    assert pick_splits(1, 32768, 32, 132, 1, 27, **cheap_merge)[1] == 128  # one merge block of 128, the cheap price
    # 16 splits' partials (442 KB a tile) would not fold into one program: without waiting merge
    # programs the coarser count whose merge folds is kept; with them, 16 splits and 14 waiters
    no_wait = plan_verify(VerifyShape(1, 9, 3, 1, 256, 1024 + 9), H200,
                          VerifyPolicy(waiting_merge=False, own_tree_split=False))
    assert (no_wait.num_splits, no_wait.merge.fused) == (8, True) and "folds into the split kernel" in no_wait.why
    waiting = plan_verify(VerifyShape(1, 9, 3, 1, 256, 1024 + 9), H200, VerifyPolicy(own_tree_split=False))
    assert (waiting.num_splits, waiting.merge.fused, waiting.merge.waiters) == (16, True, 14), waiting
    assert waiting.fused_grid == (1, 30) and "folds into" not in waiting.why
    assert plan_verify(VerifyShape(1, 9, 3, 1, 256, 1024 + 9), H200, VerifyPolicy(num_splits=16)).num_splits == 16
    assert plan(1, 9, 3, 1, 32768, H200_NO_GLUON).num_splits == 32                          # the Triton fallback
    assert plan(1, 9, 3, 1, 32768, RTX_PRO).num_splits == 32


@pytest.mark.parametrize("element_size", [2, 4])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_every_dtype_fits_the_shared_memory_of_its_arch(element_size, head_dim):
    """The tiles are sized from the element size: fp32 at T = 65 with G = 4 or 8 once asked 295 KB
    of an H200's 227 (the table ignored the element size); every plan of the bench grid's shapes
    now fits sm_90's and sm_120's limits."""
    for target in (H200, RTX_PRO):
        for num_nodes in (9, 17, 33, 65):
            for group in (1, 4, 6, 8):
                for batch, cache in ((1, 1024), (8, 8192), (32, 32768)):
                    shape = VerifyShape(batch, num_nodes, 8 * group, 8, head_dim, cache + num_nodes, element_size)
                    plan = plan_verify(shape, target)
                    assert plan.shared_bytes <= SHARED_MEMORY_LIMITS[target.arch], (target.arch, shape, plan)
                    assert element_size == 2 or plan.kernel == "triton"


def test_head_dim_64_single_pingpong_warpgroup_takes_128_key_tiles():
    """At head dim 64 the ping-pong kernel's single 64-row warpgroup takes 128-key tiles (16 KB,
    as 64 keys are at 128) and the cache splits in multiples of them, where a split streams 2048
    keys or more and the programs are not persistent; head dim 128 plans as before."""
    seen = set()
    for num_nodes, group, batch, cache in ((9, 4, 1, 32777), (9, 4, 1, 1033), (9, 4, 8, 8201), (17, 4, 8, 32785),
                                           (17, 4, 32, 8209), (9, 8, 8, 32777), (17, 8, 1, 8209), (17, 4, 32, 1041),
                                           (16, 8, 8, 8208), (33, 4, 32, 8225), (9, 4, 32, 8201)):
        for head_dim in (64, 128):
            plan = plan_verify(VerifyShape(batch, num_nodes, 8 * group, 8, head_dim, cache), H200)
            one_warpgroup = plan.block_m == 64 and plan.kernel == "pingpong"
            wide = one_warpgroup and not plan.persistent and plan.chunk >= DEFAULT_POLICY.wide_keys_min_chunk
            cfg = config_of("sm_90", head_dim, num_nodes * group, batch * 8, cache)
            expected = 128 if head_dim == 64 and wide else cfg.gluon_block_n or cfg.block_n
            assert plan.block_n == expected, (num_nodes, group, batch, head_dim, plan)
            assert plan.chunk % plan.config.block_n == 0 and plan.config.block_n in (32, 64, 128), plan
            seen.add((head_dim, one_warpgroup, plan.persistent, plan.tail_m > 0, plan.head_split,
                      plan.chunk >= DEFAULT_POLICY.wide_keys_min_chunk))
    assert {(64, True, False, False, 1, True), (64, True, False, True, 1, True), (64, True, False, False, 1, False),
            (64, True, False, True, 2, False), (64, True, True, True, 1, False), (64, False, False, False, 1, True),
            (64, False, False, True, 1, True)} <= seen, seen
    assert {(128, True, False, False, 1, True), (128, True, False, True, 2, False)} <= seen, seen


def test_split_query_heads_plans_two_programs_per_kv_head():
    """129-144 packed rows at an even G, where one program per KV head would not take them (2 x 128
    rows on short streams of a part-filled GPU), become two programs per KV head of half its query
    heads each (65-72 rows: one 64-row warpgroup and the tail); elsewhere, and with the policy's
    switch off, the plan is unchanged."""
    split = VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0, min_block_m=128,
                         gluon=True, gluon_pingpong=True, gluon_pingpong_tail=True, gluon_pingpong_64=True,
                         split_query_heads=True)
    whole = dataclasses.replace(split, split_query_heads=False)
    for batch, prefix in ((1, 8192), (8, 1024)):
        for num_nodes, group in ((17, 8), (33, 4), (9, 16)):
            assert tiles(batch, num_nodes, group, prefix + num_nodes, whole).num_m_tiles == 2
            plan = tiles(batch, num_nodes, group, prefix + num_nodes, split)
            assert (plan.head_split, plan.block_m, plan.num_m_tiles, plan.tail_m) == (2, 64, 1, 8)
            assert plan.grid[0] == batch * 8 * 2, plan
    assert tiles(2, 17, 8, 3000 + 22, split, kv_heads=2).head_split == 2
    assert tiles(2, 33, 4, 5000 + 38, split, kv_heads=2).head_split == 2
    for batch, prefix in ((8, 8192), (32, 1024), (1, 32768)):
        plan = tiles(batch, 17, 8, prefix + 17, split)
        assert (plan.head_split, plan.block_m, plan.tail_m) == (1, 128, 8), plan
    for num_nodes, group in ((16, 8), (145, 1), (29, 5)):
        assert tiles(1, num_nodes, group, 8192 + num_nodes, split).head_split == 1
    off = VerifyPolicy(split_query_heads=False)
    assert tiles(1, 17, 8, 8192 + 17, split, policy=off).head_split == 1
    plan = plan_verify(VerifyShape(1, 17, 64, 8, 128, 8209), H200)
    assert (plan.head_split, plan.kv_heads, plan.group) == (2, 16, 4)  # the kernels' view: twice the KV heads


def test_query_tiles_and_split_plan():
    """T = 2^k + 1 rides in a tail; the split count fills whole waves, or half a wave where the
    merge would cost more than the extra splits save."""
    assert pick_query_tiles(64, 64, 16) == (64, 1, 0)
    assert pick_query_tiles(68, 64, 16) == (64, 1, 16)      # T=17, G=4
    assert pick_query_tiles(136, 64, 16) == (64, 2, 16)     # T=17, G=8
    assert pick_query_tiles(260, 128, 16) == (128, 2, 16)   # T=65, G=4
    assert pick_query_tiles(68, 64, 0) == (64, 2, 0)
    assert pick_query_tiles(36, 64, 16) == (64, 1, 0)
    assert pick_query_tiles(85, 64, 16)[2] == 0
    assert pick_query_tiles(136, 128, 0, 128) == (128, 2, 0)
    assert pick_query_tiles(132, 128, 0, 128, (192,)) == (192, 1, 0)  # T=33, G=4
    assert pick_query_tiles(260, 128, 0, 128, (192,)) == (192, 2, 0)
    assert pick_query_tiles(68, 128, 0, 128, (192,)) == (128, 1, 0)
    tail = VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0, min_block_m=128,
                        gluon=True, gluon_pingpong=True, gluon_pingpong_192=True, gluon_pingpong_tail=True)
    for rows, expected in ((132, (128, 1, 8)), (136, (128, 1, 8)), (260, (128, 2, 8)), (264, (128, 2, 8)),
                           (520, (192, 3, 0)), (68, (128, 1, 0)), (144, (192, 1, 0))):
        plan = tiles(8, rows, 1, 8192 + rows, tail)
        assert (plan.block_m, plan.num_m_tiles, plan.tail_m) == expected, rows
    tail64 = dataclasses.replace(tail, gluon_pingpong_64=True)
    for rows, expected in ((68, (64, 1, 8)), (72, (64, 1, 8)), (73, (128, 1, 0)), (64, (128, 1, 0)),
                           (136, (128, 1, 8))):
        plan = tiles(8, rows, 1, 8192 + rows, tail64)
        assert (plan.block_m, plan.num_m_tiles, plan.tail_m) == expected, rows
    assert runs_pingpong(tail64, 64) and not runs_pingpong(tail, 64)
    few = VerifyConfig(block_n=64, max_block_m=64, num_warps=4, num_stages=3, resident_per_sm=1, max_tail_m=0,
                       gluon=True, gluon_pingpong=True, gluon_pingpong_64=True)
    plan = tiles(8, 9, 4, 8192 + 9, few)
    assert (plan.block_m, plan.tail_m, plan.num_splits, plan.chunk) == (64, 0, 2, 4096 + 64)
    plan = tiles(8, 17, 4, 8192 + 17, tail64)
    assert (plan.block_m, plan.tail_m, plan.num_splits, plan.chunk) == (64, 8, 2, 4096 + 128)
    plan = tiles(1, 9, 4, 8192 + 9, few)
    assert plan.num_splits > 2 and plan.chunk * plan.num_splits == 8192
    wide = VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0, min_block_m=128,
                        gluon=True, gluon_pingpong=True, gluon_pingpong_192=True)
    assert tiles(1, 33, 4, 32768 + 33, wide).block_m == 192   # B1-L32k: 2048 keys a program
    assert tiles(32, 33, 4, 1024 + 33, wide).block_m == 192   # B32-L1k: 256 programs
    assert tiles(1, 33, 4, 8192 + 33, wide).block_m == 128    # B1-L8k: short streams, part-filled GPU
    assert tiles(8, 33, 4, 1024 + 33, wide).block_m == 128
    assert tiles(8, 33, 4, 1024 + 33, wide, policy=VerifyPolicy(wide_tile_min_chunk=0)).block_m == 192
    # several wide tiles a KV head stay wide there: narrowing them would add a padded tile
    assert tiles(8, 65, 8, 1024 + 65, wide).block_m == 192                      # 3 x 192 rows, not 5 x 128
    wide_tail = dataclasses.replace(wide, gluon_pingpong_tail=True)
    got = tiles(8, 65, 4, 1024 + 65, wide_tail)
    assert (got.block_m, got.num_m_tiles, got.tail_m) == (128, 2, 8), got      # 264 rows, not 3 x 128
    got = tiles(8, 33, 4, 1024 + 33, wide_tail)
    assert (got.block_m, got.num_m_tiles, got.tail_m) == (128, 2, 0), got      # one wide tile: narrowed
    assert relieve_tree_split(128, 2, 130, 64, 0) == 128
    assert relieve_tree_split(128, 2, 200, 64, 0) == 192
    assert relieve_tree_split(128, 2, 300, 64, 8) == 256
    assert relieve_tree_split(128, 3, 300, 64, 0) == 128
    cfg = VerifyConfig(32, 64, 4, 4, resident_per_sm=2)
    assert tiles(32, 17, 4, 32768 + 17, cfg).tail_m == 16
    assert tiles(8, 17, 4, 8192 + 17, cfg).num_m_tiles == 2
    assert tiles(8, 17, 4, 8192 + 17, cfg, policy=VerifyPolicy(tail_only_when_full=False)).tail_m == 16
    assert tiles(32, 33, 4, 8192 + 33, cfg).num_m_tiles == 3
    for base, keys in ((8, 32768), (64, 8192), (256, 1024), (512, 32768), (1, 100), (3, 300000)):
        chunk, splits = pick_splits(base, keys, 32, 264, base, 64)
        assert chunk % 32 == 0 and (splits - 1) * chunk < keys <= splits * chunk
        assert splits == 1 or chunk >= 256
        assert base * splits <= max(base, 8 * 264)
    assert pick_splits(64, 8192, 32, 264, 64, 36)[1] == 4
    assert pick_splits(256, 1024, 32, 264, 256, 36)[1] == 1
    assert pick_splits(8, 32768, 32, 264, 8, 36)[1] == 32
    assert pick_splits(8, 8192, 32, 264, 8, 36)[1] == 16
    assert split_chunks(1000, 3, 64) == (384, 3)
    for splits in (2, 5, 17, 64, 300):
        for head_dim in (64, 128, 256):
            for slices in (1, 2, head_dim // 32):
                block, rows = merge_tiles(splits, head_dim, slices)
                assert block * rows * head_dim // slices <= 8192 and rows >= 2 and block >= 2


def test_the_merge_takes_head_dim_slices_where_whole_rows_walk_several_blocks_of_splits():
    """One KV head at batch 1 and 32k keys: 128 splits of 27 rows are 14 merge programs walking
    eight blocks of splits; in 8 slices of 32 columns they are 112 programs of one block (the
    merge's own launch: graphs, and eager calls without waiters). A merge whose splits fit one
    block of whole rows, and the folded merge, keep every column in one program."""
    shape = VerifyShape(1, 9, 3, 1, 256, 32768 + 9)
    plan = plan_verify(shape, H200, VerifyPolicy(waiting_merge=False))
    m = plan.merge
    assert plan.num_splits == 128 and not m.fused
    assert (m.head_slices, m.split_block, m.merge_rows, m.grid, m.one_block) == (8, 128, 2, 112, True)
    assert m.vector_loads  # 128 splits: one load, not 128 unrolled ones issued in turn
    whole = plan_verify(shape, H200, VerifyPolicy(merge_head_slices=1, waiting_merge=False)).merge
    assert not whole.vector_loads  # blocks of 16: unrolled, summed in registers
    assert (whole.head_slices, whole.split_block, whole.merge_rows, whole.grid, whole.one_block) == (1, 16, 2, 14,
                                                                                                     False)
    one_block = plan_verify(VerifyShape(1, 9, 3, 1, 256, 1024 + 9), H200,
                            VerifyPolicy(fused_merge=False, own_tree_split=False))
    assert one_block.num_splits == 16 and one_block.merge.grid < 132 and one_block.merge.head_slices == 1
    assert not one_block.merge.vector_loads  # 16 splits: unrolled (one load measured slower below 64)
    folded = plan_verify(VerifyShape(8, 17, 32, 8, 128, 8209), H200).merge
    assert folded.fused and folded.head_slices == 1
    assert pick_merge_slices(64, 256, 27, 1, 132) == 8
    assert pick_merge_slices(64, 256, 27, 1, 28) == 4     # 28 SMs filled by 2, all splits in one block by 4
    assert pick_merge_slices(32, 256, 204, 4, 132) == 2   # programs enough; two slices for one block
    assert pick_merge_slices(1024, 64, 27, 1, 132) == 2   # never under 32 columns
    assert pick_merge_slices(8, 256, 27, 1, 132) == 1     # one block of whole rows



def test_pingpong_grid_is_persistent_only_on_waves_of_short_items_of_one_split():
    assert pingpong_grid((512, 1), 132, 128, 1024, DEFAULT_POLICY) == (132, 1)
    assert pingpong_grid((256, 1), 132, 64, 1024, DEFAULT_POLICY) == (132, 1)
    assert pingpong_grid((198, 1), 132, 128, 2048, DEFAULT_POLICY) == (132, 1)
    assert pingpong_grid((192, 1), 132, 128, 1024, DEFAULT_POLICY) == (192, 1)  # under 1.5 waves
    assert pingpong_grid((512, 1), 132, 128, 8192, DEFAULT_POLICY) == (512, 1)  # long items
    assert pingpong_grid((512, 2), 132, 128, 1024, DEFAULT_POLICY) == (512, 2)
    assert pingpong_grid((768, 1), 132, 192, 1024, DEFAULT_POLICY) == (768, 1)  # q in shared memory
    assert pingpong_grid((512, 1), 132, 128, 1024, VerifyPolicy(persistent=False)) == (512, 1)
    plan = plan_verify(VerifyShape(32, 17, 32, 8, 128, 1024 + 17), H200)      # B32-T17-L1k
    assert plan.persistent and plan.grid == (132, 1) and plan.base_programs == 256


def test_merge_starts_early_only_where_it_paid():
    """The merge is a programmatic dependent launch with splits on a target that has it, after the
    64-row and Triton split kernels, after the ping-pong kernel only beside the tree's own split
    on at most 17 splits (elsewhere it measured slower there), and not with the policy's switch off."""
    gluon_64 = plan_verify(VerifyShape(32, 9, 32, 8, 128, 32768 + 9), H200, VerifyPolicy(num_splits=4))
    assert gluon_64.kernel == "gluon" and gluon_64.merge.starts_early
    pingpong = plan_verify(VerifyShape(8, 17, 32, 8, 128, 8209), H200)
    assert pingpong.kernel == "pingpong" and pingpong.num_splits > 1 and not pingpong.merge.starts_early
    assert plan_verify(VerifyShape(8, 17, 32, 8, 128, 8209), H200,
                       VerifyPolicy(pingpong_programmatic_merge=True)).merge.starts_early
    short = plan_verify(VerifyShape(1, 9, 32, 8, 128, 1024 + 9), H200)            # B1-T9-L1k: 4 + 1 splits
    assert short.kernel == "pingpong" and short.own_tree_split and short.num_splits == 5
    assert short.merge.starts_early
    assert not plan_verify(VerifyShape(1, 9, 32, 8, 128, 1024 + 9), H200,
                           VerifyPolicy(pingpong_programmatic_merge=False)).merge.starts_early
    many = plan_verify(VerifyShape(1, 9, 3, 1, 256, 8192 + 9), H200)              # 64 + 1 splits
    assert many.kernel == "pingpong" and many.own_tree_split and many.num_splits == 65
    assert not many.merge.starts_early
    triton = plan_verify(VerifyShape(8, 17, 32, 8, 128, 8209), H200_NO_GLUON)
    assert triton.kernel == "triton" and triton.merge.starts_early
    no_pdl = VerifyTarget("sm_80", 108)
    assert not plan_verify(VerifyShape(8, 17, 32, 8, 128, 8209), no_pdl).merge.starts_early
    off = plan_verify(VerifyShape(8, 17, 32, 8, 128, 8209), H200_NO_GLUON, VerifyPolicy(programmatic_merge=False))
    assert not off.merge.starts_early
    single = plan_verify(VerifyShape(32, 17, 32, 8, 128, 32785), H200_NO_GLUON)
    assert single.num_splits == 1 and single.merge is None


def test_gluon_is_decided_once_per_process(monkeypatch):
    """A Triton whose Gluon lacks a name the kernels use costs one warning naming it; the target
    then has no Gluon, and every call plans the Triton kernel."""
    pytest.importorskip("triton")
    from specdec_kernels import tree_verify_triton as tvt

    names = dict(tvt._GLUON_NAMES)
    names["triton.experimental.gluon.language"] = ("no_such_gluon_name",)
    monkeypatch.setattr(tvt, "_GLUON_NAMES", names)
    tvt.gluon_unusable.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="no_such_gluon_name: the tree-verify attention takes its Triton"):
            reason = tvt.gluon_unusable()
        assert "no_such_gluon_name" in reason and tvt.gluon_unusable() is reason  # decided once
    finally:
        tvt.gluon_unusable.cache_clear()
    torch = pytest.importorskip("torch")
    assert tvt.target_of(torch.device("cpu")) == VerifyTarget("interpreter", 4)


def test_plan_call_reads_the_signature_once(monkeypatch):
    """A repeated call finds its plan by its signature, without planning again; a changed layout
    (here: a cache whose heads are not adjacent) is another signature."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    from specdec_kernels import tree_verify_triton as tvt

    q = torch.zeros(2, 9, 8, 64, dtype=torch.float16)
    k = torch.zeros(2, 300, 2, 64, dtype=torch.float16)
    calls = []
    real = tvt.plan_verify
    monkeypatch.setattr(tvt, "plan_verify", lambda *args: calls.append(args) or real(*args))
    policy = VerifyPolicy()
    first = tvt.plan_call(q, k, k, None, policy)
    assert tvt.plan_call(q, k, k, None, policy) is first and len(calls) == 1
    apart = k.transpose(1, 2).contiguous().transpose(1, 2)
    assert not tvt.plan_call(q, apart, apart, None, policy).tma and len(calls) == 2
    with pytest.raises(ValueError, match="unit stride in the head dim"):
        tvt.plan_call(q[..., ::2], k[..., ::2], k[..., ::2], None, policy)


def test_the_merge_is_folded_in_only_where_one_program_reads_few_partials():
    """Folding the merge into the split kernel leaves one program a query tile to read every
    split's partial rows: only where those are at most ``fused_merge_max_bytes``, and only in the
    kernels that have the folded merge (not persistent programs)."""
    target = H200
    engine = VerifyShape(8, 17, 32, 8, 128, 8192 + 17)  # 2 splits of 72 rows a KV head
    plan = plan_verify(engine, target)
    assert plan.merge is not None and plan.merge.fused, plan
    read = plan.num_splits * min(plan.block_m + plan.tail_m, engine.packed_rows) * (128 + 1) * 4
    shared = plan_verify(engine, target, VerifyPolicy(fused_merge_max_bytes=read - 1)).merge
    assert shared.fused and shared.waiters == 2  # past the bound: programs that wait share the rows
    assert not plan_verify(engine, target, VerifyPolicy(fused_merge_max_bytes=read - 1,
                                                        waiting_merge=False)).merge.fused
    assert not plan_verify(engine, target, VerifyPolicy(fused_merge=False)).merge.fused
    wide = VerifyShape(1, 17, 24, 4, 256, 8192 + 17)  # 32 splits of 102 rows x 1 KB
    assert not plan_verify(wide, target, VerifyPolicy(waiting_merge=False)).merge.fused
    gluon = plan_verify(VerifyShape(1, 17, 64, 8, 128, 1024 + 17), target)  # 4 splits of 64 rows: 132 KB
    assert gluon.kernel == "gluon" and gluon.merge.fused and not gluon.merge.waiters, gluon
    wide_gluon = plan_verify(VerifyShape(1, 33, 64, 8, 128, 1024 + 33), target)  # 4 of 128 rows: 264 KB
    assert wide_gluon.kernel == "gluon" and not wide_gluon.merge.fused, wide_gluon


ONE_TREE_SPLIT_OFF = VerifyPolicy(own_tree_split=False)


def test_waiting_merge_programs_share_a_tile_in_one_launch_where_one_program_may_not():
    """Past the single program's bound, the ping-pong kernel's eager calls keep one launch: as many
    waiting programs a query tile as one a free SM, at most one a row block, each reading at most
    ``fused_merge_max_bytes``; none where fewer than two fit. They are rows past the splits' in
    the grid a folded call launches (``fused_grid``); graphs and the merge's own launch keep
    ``grid``. (On the split model's counts: no split of the tree's own.)"""
    plan = plan_verify(VerifyShape(8, 9, 6, 1, 256, 32768 + 9), H200, ONE_TREE_SPLIT_OFF)  # the docstring's example
    assert (plan.kernel, plan.grid, plan.merge.fused, plan.merge.waiters) == ("pingpong", (8, 16), True, 16)
    assert plan.fused_grid == (8, 32) and plan.merge.merge_rows == 2
    assert pick_merge_waiters(16, 54, 2, 256, 8, 132, 256 * 1024) == 16
    assert pick_merge_waiters(16, 54, 2, 256, 8, 64, 256 * 1024) == 8    # one a free SM
    assert pick_merge_waiters(16, 6, 2, 256, 8, 132, 256 * 1024) == 3    # one a row block
    assert pick_merge_waiters(16, 54, 2, 256, 8, 132, 60 * 1024) == 0    # 2 blocks of 32.9 KB each
    assert pick_merge_waiters(16, 54, 2, 256, 8, 132, 66 * 1024) == 16
    assert pick_merge_waiters(16, 54, 2, 256, 100, 132, 256 * 1024) == 0  # one a tile: no sharing
    small_sms = plan_verify(VerifyShape(8, 9, 6, 1, 256, 32768 + 9), H200, VerifyPolicy(sms=12, own_tree_split=False))
    assert small_sms.merge is None or not small_sms.merge.waiters or small_sms.merge.waiters * small_sms.grid[0] <= 12
    off = plan_verify(VerifyShape(8, 9, 6, 1, 256, 32768 + 9), H200,
                      VerifyPolicy(waiting_merge=False, own_tree_split=False))
    assert not off.merge.fused and off.merge.waiters == 0 and off.fused_grid == off.grid
    # the 64-row Gluon kernel has no waiting programs (4 splits of 128 rows: past one program's bound)
    gluon = plan_verify(VerifyShape(1, 33, 64, 8, 128, 1024 + 33), H200, ONE_TREE_SPLIT_OFF)
    assert gluon.kernel == "gluon" and not gluon.merge.fused and gluon.merge.waiters == 0
    # 32 splits of 256 columns take blocks of 16: the waiters merge two 128-column slices of each
    # 2-row block, as the merge's own launch does (the docstring's second example)
    sliced = plan_verify(VerifyShape(1, 9, 24, 4, 256, 8192 + 9), H200, ONE_TREE_SPLIT_OFF)
    assert sliced.num_splits == 32 and merge_tiles(32, 256)[0] < 32 <= merge_tiles(32, 256, 2)[0]
    assert (sliced.merge.fused, sliced.merge.head_slices, sliced.merge.waiters) == (True, 2, 33), sliced
    assert sliced.merge.folded_constexprs()["MERGE_SLICES"] == 2
    assert pick_merge_waiters(32, 54, 2, 256, 4, 132, 256 * 1024, head_slices=2) == 33
    assert pick_merge_waiters(32, 54, 2, 256, 4, 132, 256 * 1024) == 27  # whole rows: one a row block
    assert pick_merge_waiters(32, 54, 2, 256, 4, 132, 60 * 1024, head_slices=2) == 0  # 2 units of 33 KB
    # sliced waiters unrolled only where one split's partials of a (request, KV head) span at most
    # 128 KB: four 128-row tiles of 256 columns (512 KB) keep the merge's own launch, unless the
    # waiters read their 32 splits as one load (the default there); on 128-row tiles whatever the splits
    far = VerifyShape(1, 65, 6, 1, 256, 8192 + 65)
    apart = plan_verify(far, H200,
                        VerifyPolicy(merge_vector_loads=False, short_split_max_keys=0, own_tree_split=False))
    assert apart.rows_pad * 256 * 4 == 512 * 1024 and apart.merge.head_slices > 1 and not apart.merge.fused
    near = plan_verify(far, H200, VerifyPolicy(own_tree_split=False, merge_vector_loads=False,
                                               sliced_waiters_max_split_bytes=512 * 1024,
                                               short_split_max_keys=0))
    assert near.merge.fused and near.merge.waiters > 0 and near.num_splits == apart.num_splits, near
    vector = plan_verify(far, H200, VerifyPolicy(short_split_max_keys=0, own_tree_split=False))
    assert vector.merge.fused and vector.merge.waiters == near.merge.waiters and vector.merge.vector_waiters, vector
    assert vector.merge.split_block == 32 and not vector.merge.vector_loads  # the merge's own launch: unrolled
    # 128 splits (one KV head, batch 1, 32k keys) fit one block only as one load: the waiters read
    # it so (MERGE_VECTOR), as 64 splits' do; unrolled, past 64 splits the merge keeps its own launch
    many = plan_verify(VerifyShape(1, 9, 6, 1, 256, 32768 + 9), H200, ONE_TREE_SPLIT_OFF)
    assert many.num_splits == 128 and many.merge.fused and many.merge.waiters == 132, many
    assert many.merge.vector_loads and many.merge.folded_constexprs()["MERGE_VECTOR"] is True
    assert plan_verify(VerifyShape(1, 9, 6, 1, 256, 8192 + 9), H200,
                       ONE_TREE_SPLIT_OFF).merge.folded_constexprs()["MERGE_VECTOR"]
    no_vector = VerifyPolicy(merge_vector_loads=False, own_tree_split=False)
    unrolled = plan_verify(VerifyShape(1, 9, 6, 1, 256, 32768 + 9), H200, no_vector)
    assert unrolled.num_splits == 128 and not unrolled.merge.fused and unrolled.merge.waiters == 0, unrolled
    few = plan_verify(VerifyShape(1, 9, 6, 1, 256, 8192 + 9), H200, no_vector)
    assert few.num_splits == 64 and few.merge.waiters and "MERGE_VECTOR" not in few.merge.folded_constexprs()
    assert "MERGE_VECTOR" not in sliced.merge.folded_constexprs()  # 32 splits 54 KB apart: unrolled
    for batch, q_heads, kv_heads, head_dim, prefix in ((1, 32, 8, 128, 8192), (8, 6, 1, 256, 1024),
                                                       (32, 6, 1, 256, 32768), (1, 24, 4, 256, 1024)):
        shape = VerifyShape(batch, 17, q_heads, kv_heads, head_dim, prefix + 17)
        p = plan_verify(shape, H200, ONE_TREE_SPLIT_OFF)
        assert p.merge.waiters >= 2 and p.merge.waiters * p.grid[0] <= 132, (shape, p)
        rows = min(p.block_m + p.tail_m, shape.packed_rows)
        share = -(-(-(-rows // p.merge.merge_rows)) // p.merge.waiters) * p.merge.merge_rows
        assert p.num_splits * share * (head_dim + 1) * 4 <= DEFAULT_POLICY.fused_merge_max_bytes


def test_the_tree_takes_a_split_of_its_own_on_short_splits_of_one_wave():
    """The tree's rows take a split of their own after the prefix's (``VerifyPlan.own_tree_split``)
    on the Hopper Gluon kernels where splits are short and the extra split keeps one program an SM
    and the merge's splits in one block; the split model's count stays the prefix's."""
    def plan(batch, num_nodes, q_heads, kv_heads, head_dim, prefix, target=H200, policy=DEFAULT_POLICY):
        return plan_verify(VerifyShape(batch, num_nodes, q_heads, kv_heads, head_dim, prefix + num_nodes), target,
                           policy)

    own = plan(1, 9, 32, 8, 128, 1024)
    assert own.own_tree_split and (own.prefix_splits, own.num_splits, own.chunk) == (4, 5, 256), own
    assert own.grid == (8, 5)
    assert plan(1, 9, 3, 1, 256, 1024).num_splits == 17                         # 16 splits of 64 keys, and the tree
    assert not plan(8, 9, 32, 8, 128, 1024).own_tree_split                      # 64 x 3 programs: a second wave
    assert not plan(1, 17, 24, 4, 256, 1024).own_tree_split                     # 8 x 17 = 136 programs
    assert not plan(1, 9, 32, 8, 128, 8192).own_tree_split                      # splits of 512 keys
    assert plan(1, 9, 3, 1, 256, 8192).num_splits == 65                         # 64 of 128 keys: one merge block
    assert not plan(1, 9, 3, 1, 256, 32768).own_tree_split                      # 128 + 1: a second block
    assert not plan(1, 9, 32, 8, 128, 1024, H200_NO_GLUON).own_tree_split       # the Triton kernel: not measured
    assert not plan(1, 9, 32, 8, 128, 1024, RTX_PRO).own_tree_split
    forced = plan(1, 9, 32, 8, 128, 1024, policy=VerifyPolicy(num_splits=4))
    assert (forced.num_splits, forced.own_tree_split) == (4, False)              # a forced count is kept
    always = plan(8, 9, 32, 8, 128, 1024, policy=VerifyPolicy(own_tree_split=True))
    assert always.own_tree_split and always.num_splits == always.prefix_splits + 1
    assert not plan(1, 9, 32, 8, 128, 1024, policy=VerifyPolicy(own_tree_split=False)).own_tree_split
    assert wants_own_tree_split(256, 4, 8, 132, DEFAULT_POLICY)
    assert not wants_own_tree_split(288, 4, 8, 132, DEFAULT_POLICY)
    assert not wants_own_tree_split(256, 4, 27, 132, DEFAULT_POLICY)              # 27 x 5 = 135 programs
    assert not wants_own_tree_split(64, 128, 1, 132, DEFAULT_POLICY)
    assert wants_own_tree_split(512, 4, 8, 132, VerifyPolicy(own_tree_split_max_chunk=512))


def test_the_64_row_gluon_kernel_takes_finer_prefix_splits_beside_the_trees_own():
    """Beside the tree's own split the 64-row Gluon kernel takes the finest prefix splits (down to
    128 keys) whose programs fit two an SM and whose merge still folds into eager calls; the
    ping-pong and 128-row Gluon plans keep the model's."""
    gluon = plan_verify(VerifyShape(1, 17, 32, 8, 128, 1024 + 17), H200)        # 2 x 64 rows a KV head
    assert gluon.kernel == "gluon" and gluon.block_m == 64 and gluon.own_tree_split, gluon
    assert (gluon.chunk, gluon.prefix_splits, gluon.num_splits) == (192, 6, 7), gluon
    assert gluon.merge.fused and 7 * 64 * 129 * 4 <= DEFAULT_POLICY.fused_merge_max_bytes < 8 * 64 * 129 * 4
    model = plan_verify(VerifyShape(1, 17, 32, 8, 128, 1024 + 17), H200, VerifyPolicy(own_tree_split_min_chunk=0))
    assert (model.chunk, model.num_splits) == (256, 5)
    wide = plan_verify(VerifyShape(1, 33, 64, 8, 128, 1024 + 33), H200)         # 128-row Gluon tiles
    assert wide.kernel == "gluon" and wide.block_m == 128 and (wide.chunk, wide.num_splits) == (256, 5), wide
    pingpong = plan_verify(VerifyShape(1, 9, 32, 8, 128, 1024 + 9), H200)
    assert pingpong.kernel == "pingpong" and (pingpong.chunk, pingpong.num_splits) == (256, 5), pingpong
    no_fold_bound = VerifyPolicy(fused_merge_max_bytes=1 << 30)
    finest = plan_verify(VerifyShape(1, 17, 32, 8, 128, 1024 + 17), H200, no_fold_bound)
    assert (finest.chunk, finest.num_splits) == (128, 9), finest                 # 16 x 9 programs within 2 x 132
    assert finer_prefix_splits(256, 1024, 16, 264, 32, 64 * 129 * 4, DEFAULT_POLICY) == 192
    assert finer_prefix_splits(256, 1024, 16, 264, 32, 64 * 129 * 4, VerifyPolicy(own_tree_split_min_chunk=0)) == 256
    assert finer_prefix_splits(256, 1024, 40, 264, 32, 1, DEFAULT_POLICY) == 224  # 40 x 7 = 280 > 264 at 192


def test_every_arch_table_has_rows_for_every_head_dim_ending_in_one_that_always_holds():
    """A table picks the first row whose condition holds: a head dim without rows, or whose last
    row can fail, would raise instead of choosing."""
    from specdec_kernels.configs import HEAD_DIMS, TILE_TABLES, TileCall

    for arch, table in TILE_TABLES.items():
        assert set(table.rows) == set(HEAD_DIMS), arch
        for head_dim, rows in table.rows.items():
            assert rows and rows[-1].when(TileCall(10**6, 10**6, 10**9)) and rows[-1].when(TileCall(1, 1, 1)), \
                (arch, head_dim)
