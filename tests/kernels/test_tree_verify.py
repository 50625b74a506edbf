"""tree_verify_attention: Triton path against float64 references, the tree mask, ragged batches."""

from __future__ import annotations

import dataclasses
import math
import zlib
import subprocess
import sys

import pytest
import torch

from kernel_cases import (DEVICE, FULL_GRID, ROW_TOLERANCE, case_id, needs_triton, random_tree_batch,
                          ancestor_chain, row_errors, verify_cases)
from specdec_kernels import tree_verify_attention
from specdec_kernels.impl import resolve_impl
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


def run_triton(q, k, v, lens, mask, num_splits=None, monkeypatch=None, config=None, sm_scale=None):
    """The launcher with a NaN-poisoned output and NaN-poisoned split partials."""
    from specdec_kernels import tree_verify_triton

    if monkeypatch is not None:
        monkeypatch.setattr(tree_verify_triton, "POISON_WORKSPACE", True)
    out = torch.full_like(q, float("nan"))
    result = tree_verify_triton.tree_verify_attention_triton(q, k, v, lens, mask, sm_scale=sm_scale, out=out,
                                                             num_splits=num_splits, config=config)
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
def test_verify_matches_float64_reference(case, monkeypatch):
    num_nodes, shape, group, prefix, dtype, head_dim, splits = case
    lens = [prefix, (prefix * 7) // 10] if FULL_GRID else [prefix]
    kv_heads = 2 if FULL_GRID or group <= 2 else 1
    seed = zlib.crc32(case_id(case).encode())
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, shape, group, kv_heads, head_dim,
                                                  dtype, seed)
    out = run_triton(q, k, v, lens_t, mask, splits, monkeypatch)
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), dtype, case_id(case))


# Forced tile shapes that put packed rows in a tail tile (T * G past a whole number of query
# tiles) with one or several query tiles per KV head, and split counts past the merge's load
# block (17 splits > 16 at head dim 256): (T, G, [L_b], D, dtype, num_splits, (BN, max BM)).
TAIL_CASES = [
    (17, 4, [100, 0], 64, torch.float16, None, (16, 64)),     # 64 + 4 rows: one tile + tail
    (17, 4, [100, 70], 64, torch.bfloat16, 3, (16, 32)),      # 2 x 32 + 4: tail on the last tile only
    (13, 5, [40, 1], 64, torch.float16, 2, (16, 16)),         # 4 x 16 + 1
    (9, 2, [1300, 910], 256, torch.float16, 20, (16, 16)),    # 16 + 2 rows, 17 splits
    (65, 4, [17, 3], 64, torch.float32, 2, (16, 128)),        # 2 x 128 + 4
]


@needs_triton
@pytest.mark.parametrize("num_nodes,group,lens,head_dim,dtype,splits,tiles", TAIL_CASES)
def test_tail_tile_and_many_splits(num_nodes, group, lens, head_dim, dtype, splits, tiles, monkeypatch):
    from specdec_kernels import tree_verify_triton
    from specdec_kernels.configs import VerifyConfig
    from specdec_kernels.tree_verify_triton import plan_verify_launch

    # on a GPU the planner takes another query tile instead of the tail in most of these cases
    # (small batches, several full tiles); force the tail here
    monkeypatch.setattr(tree_verify_triton, "TAIL_ONLY_WHEN_FULL", False)
    config = None if tiles is None else VerifyConfig(block_n=tiles[0], max_block_m=tiles[1], num_warps=4,
                                                      num_stages=1)
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, "best_first", group, 2, head_dim, dtype,
                                                  seed=num_nodes * 100 + group)
    plan = plan_verify_launch(len(lens), num_nodes, 2 * group, 2, head_dim, k.shape[1], q.device, config)
    assert plan["tail_m"] > 0, plan
    out = run_triton(q, k, v, lens_t, mask, splits, monkeypatch, config=config)
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), dtype, f"tail T={num_nodes} G={group}")


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_shorter_tree_split_matches_reference(dtype, monkeypatch):
    """Two planned splits with the first chunk a key tile longer (``relieve_tree_split``): the
    long request's tree in the shortened second split, the short one's prefix and tree wholly in
    the first (its second split empty)."""
    from specdec_kernels import tree_verify_triton
    from specdec_kernels.configs import VerifyConfig
    from specdec_kernels.tree_verify_triton import plan_verify_launch, split_chunks

    # the same plan on any device: these tiles, four multiprocessors
    config = VerifyConfig(block_n=64, max_block_m=64, num_warps=4, num_stages=1)
    monkeypatch.setattr(tree_verify_triton, "_sm_count", lambda device: 4)
    lens = [1000, 500]
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, 9, "best_first", 4, 1, 64, dtype, seed=1009)
    plan = plan_verify_launch(2, 9, 4, 1, 64, k.shape[1], q.device, config)
    even = split_chunks(k.shape[1] - 9, 2, 64)[0]
    assert plan["num_splits"] == 2 and plan["chunk"] == even + 64 > lens[1], plan
    out = run_triton(q, k, v, lens_t, mask, None, monkeypatch, config=config)
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), dtype, "shorter tree split")


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


# Lazy rescaling keeps a stale running max until some row outgrows it by 2**8: scores that rise
# along the prefix (keys scaled up row by row) make the max move in steps both under and over
# that bound, so tiles run with a stale max and tiles rescale; (T, G, [L_b], dtype, splits, rise).
LAZY_CASES = [
    (17, 4, [300, 190], torch.float16, None, 0.05),
    (9, 2, [260], torch.bfloat16, 3, 0.2),
    (16, 4, [200, 3], torch.float32, 2, 0.0),      # plain random scores
    (33, 1, [97, 0], torch.float16, None, 1.0),    # steep: a rescale in nearly every tile
]


@needs_triton
@pytest.mark.parametrize("num_nodes,group,lens,dtype,splits,rise", LAZY_CASES)
def test_lazy_rescale_matches_reference(num_nodes, group, lens, dtype, splits, rise, monkeypatch):
    from specdec_kernels.configs import VerifyConfig

    config = VerifyConfig(block_n=16, max_block_m=32, num_warps=4, num_stages=1, lazy_rescale=True)
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, "best_first", group, 2, 64, dtype,
                                                  seed=11 * num_nodes + group)
    ramp = 1.0 + rise * torch.arange(k.shape[1], device=k.device, dtype=torch.float32)
    k = (k.float() * ramp[None, :, None, None]).to(dtype)
    ref = float64_reference(q, k, v, lens_t, mask)
    out = run_triton(q, k, v, lens_t, mask, splits, monkeypatch, config=config)
    assert_rows_close(out, ref, dtype, f"lazy rescale, rise {rise}")


# The scale folded into the exponent (max taken on raw scores): masked tree rows, a partial last
# tile, empty requests, and scales of either sign (a negative one must fall back to scaling
# first, or the row max would be taken at the wrong end); (T, G, [L_b], dtype, splits, scale).
FOLD_CASES = [
    (17, 4, [300, 190], torch.float16, None, None),
    (9, 2, [260, 0], torch.bfloat16, 3, 0.3),
    (16, 4, [200, 3], torch.float32, 2, None),
    (13, 1, [97, 40], torch.float16, None, -0.2),
]


@needs_triton
@pytest.mark.parametrize("num_nodes,group,lens,dtype,splits,scale", FOLD_CASES)
def test_folded_scale_matches_reference(num_nodes, group, lens, dtype, splits, scale, monkeypatch):
    from specdec_kernels.configs import VerifyConfig

    config = VerifyConfig(block_n=16, max_block_m=32, num_warps=4, num_stages=1, fold_scale=True)
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, "best_first", group, 2, 64, dtype,
                                                  seed=13 * num_nodes + group)
    ref = float64_reference(q, k, v, lens_t, mask, sm_scale=scale)
    out = run_triton(q, k, v, lens_t, mask, splits, monkeypatch, config=config, sm_scale=scale)
    assert_rows_close(out, ref, dtype, f"folded scale {scale}")


def _gluon_configs():
    from specdec_kernels.configs import VerifyConfig

    return {
        "w8-m128": VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0,
                                min_block_m=128, gluon=True),
        "w4-m64": VerifyConfig(block_n=32, max_block_m=64, num_warps=4, num_stages=3, max_tail_m=0, min_block_m=64,
                               gluon=True, gluon_stages=4),
        # its masked tiles by TMA into buffers of its own (V rows past the keys zeroed there: the
        # NaN slack would reach the output otherwise), several tree tiles at T = 65 and 33
        "w4-m64-mtma": VerifyConfig(block_n=32, max_block_m=64, num_warps=4, num_stages=3, max_tail_m=0,
                                    min_block_m=64, gluon=True, gluon_stages=4, gluon_masked_tma=True),
        # head dim 64's 64-row tier (round 15): 64-key tiles
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


def keep_wide_tiles(monkeypatch, request):
    """Small test batches are short streams on a part-filled GPU, where the planner drops 192-row
    tiles and tails: keep them, so that the cases past 128 rows run them."""
    from specdec_kernels import tree_verify_triton

    monkeypatch.setattr(tree_verify_triton, "WIDE_TILE_MIN_CHUNK", 0)
    tree_verify_triton._plan.cache_clear()
    request.addfinalizer(tree_verify_triton._plan.cache_clear)


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


@needs_sm90
@pytest.mark.parametrize("tile", ["w8-m128", "w4-m64", "w4-m64-n64", "w4-m64-mtma", "w8-m128-n128-qreg", "pingpong",
                                  "pingpong-s2", "pingpong-192", "pingpong-tail", "pingpong-64",
                                  "pingpong-64tail", "pingpong-hsplit"])
@pytest.mark.parametrize("num_nodes,group,lens,head_dim,dtype,splits", GLUON_CASES)
def test_gluon_kernel_matches_reference(num_nodes, group, lens, head_dim, dtype, splits, tile, monkeypatch,
                                       request):
    from specdec_kernels.tree_verify_triton import plan_split_kernel, plan_verify_launch

    config = _gluon_configs()[tile]
    if tile in ("pingpong-192", "pingpong-tail", "pingpong-64tail"):
        keep_wide_tiles(monkeypatch, request)
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, "best_first", group, 2, head_dim, dtype,
                                                  seed=17 * num_nodes + group)
    q, k, v, lens_t, mask = (t.cuda() for t in (q, k, v, lens_t, mask))
    plan = plan_verify_launch(len(lens), num_nodes, q.shape[2], k.shape[2], head_dim, k.shape[1], q.device, config)
    assert plan_split_kernel(plan, q, k, v, 1.0)[0] == "gluon"
    rows = num_nodes * group
    if tile == "pingpong-tail" and rows > 128 and 0 < rows % 128 <= 8:
        assert plan["tail_m"] == 8, plan
    if tile == "pingpong-64tail" and 64 < rows <= 72:
        assert (plan["block_m"], plan["num_m_tiles"], plan["tail_m"]) == (64, 1, 8), plan
    if tile == "pingpong-hsplit" and 128 < rows <= 144 and group % 2 == 0:
        # these small batches are short streams on a part-filled GPU: 2 x 128 rows unsplit
        assert (plan["head_split"], plan["block_m"], plan["num_m_tiles"], plan["tail_m"]) == (2, 64, 1, 8), plan
    if tile == "pingpong-192" and rows in (132, 136, 260, 264):
        assert plan["block_m"] == 192, plan
    out = run_triton(q, k, v, lens_t, mask, splits, monkeypatch, config=config)
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), dtype, f"gluon {tile}")


# The ping-pong kernel's single warpgroup on 128-key tiles, as head dim 64 takes it (round 16):
# the cases of GLUON_CASES at head dim 64 (such a ring does not fit at 128), the planner's own
# choice of tiles (asserted), on their short splits too.
@needs_sm90
@pytest.mark.parametrize("tile", ["pingpong-64", "pingpong-64tail", "pingpong-hsplit"])
@pytest.mark.parametrize("num_nodes,group,lens,head_dim,dtype,splits", GLUON_CASES)
def test_gluon_single_warpgroup_128_key_tiles_at_head_dim_64(num_nodes, group, lens, head_dim, dtype, splits, tile,
                                                            monkeypatch, request):
    from specdec_kernels import tree_verify_triton

    config = dataclasses.replace(_gluon_configs()[tile], gluon_pingpong_64_block_n=128)
    if tile == "pingpong-64tail":
        keep_wide_tiles(monkeypatch, request)
    monkeypatch.setattr(tree_verify_triton, "PINGPONG_64_WIDE_KEYS_MIN_CHUNK", 0)
    tree_verify_triton._plan.cache_clear()
    request.addfinalizer(tree_verify_triton._plan.cache_clear)
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, "best_first", group, 2, 64, dtype,
                                                  seed=23 * num_nodes + group)
    q, k, v, lens_t, mask = (t.cuda() for t in (q, k, v, lens_t, mask))
    plan = tree_verify_triton.plan_verify_launch(len(lens), num_nodes, q.shape[2], k.shape[2], 64, k.shape[1],
                                                 q.device, config)
    if plan["block_m"] != 64:
        pytest.skip(f"{tile} plans {plan['block_m']}-row tiles here, not one warpgroup")
    assert tree_verify_triton.plan_split_kernel(plan, q, k, v, 1.0)[:2] == ("gluon", 128), plan
    out = run_triton(q, k, v, lens_t, mask, splits, monkeypatch, config=config)
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), dtype, f"{tile} on 128-key tiles")


@needs_sm90
@pytest.mark.parametrize("tile", ["pingpong", "pingpong-192", "pingpong-tail", "pingpong-64", "pingpong-64tail",
                                  "pingpong-hsplit"])
@pytest.mark.parametrize("num_nodes,group,lens,head_dim,dtype,splits", GLUON_CASES)
def test_gluon_kernel_matches_reference_persistent(num_nodes, group, lens, head_dim, dtype, splits, tile,
                                                   monkeypatch, request):
    """The ping-pong kernel as persistent programs (one split, more work items than programs):
    a GPU of three SMs as the launcher sees it, persistent from one wave on and whatever the keys
    an item, so that the cases' 4 to 20 work items leave some program two to seven of different
    lengths (empty prefixes among them), its ring, turn and buffer phases carried from one to the
    next."""
    from specdec_kernels import tree_verify_triton

    config = _gluon_configs()[tile]
    if tile in ("pingpong-192", "pingpong-tail", "pingpong-64tail"):
        keep_wide_tiles(monkeypatch, request)
    monkeypatch.setattr(tree_verify_triton, "_sm_count", lambda device: 3)
    monkeypatch.setattr(tree_verify_triton, "PERSISTENT_MIN_WAVES", 1.0)
    monkeypatch.setattr(tree_verify_triton, "PERSISTENT_MAX_KEYS", 1 << 30)
    tree_verify_triton._plan.cache_clear()
    request.addfinalizer(tree_verify_triton._plan.cache_clear)
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, "best_first", group, 2, head_dim, dtype,
                                                  seed=19 * num_nodes + group)
    q, k, v, lens_t, mask = (t.cuda() for t in (q, k, v, lens_t, mask))
    plan = tree_verify_triton.plan_verify_launch(len(lens), num_nodes, q.shape[2], k.shape[2], head_dim, k.shape[1],
                                                 q.device, config)
    if not tree_verify_triton.runs_pingpong(config, plan["block_m"]) or plan["block_m"] > 128:
        pytest.skip(f"{tile} plans {plan['block_m']}-row tiles here, not the persistent ping-pong kernel's")
    assert plan["grid"][0] > 3, plan  # some program takes two items or more
    assert tree_verify_triton.pingpong_grid((plan["grid"][0], 1), 3, plan["block_m"], k.shape[1]) == (3, 1), plan
    out = run_triton(q, k, v, lens_t, mask, 1, monkeypatch, config=config)
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), dtype, f"persistent {tile}")


def test_pingpong_grid_is_persistent_only_on_waves_of_short_items_of_one_split(monkeypatch):
    from specdec_kernels import tree_verify_triton as tvt

    assert tvt.pingpong_grid((512, 1), 132, 128, 1024) == (132, 1)
    assert tvt.pingpong_grid((256, 1), 132, 64, 1024) == (132, 1)
    assert tvt.pingpong_grid((198, 1), 132, 128, 2048) == (132, 1)
    assert tvt.pingpong_grid((192, 1), 132, 128, 1024) == (192, 1)  # under one and a half waves
    assert tvt.pingpong_grid((512, 1), 132, 128, 8192) == (512, 1)  # long items: nothing to hide
    assert tvt.pingpong_grid((512, 2), 132, 128, 1024) == (512, 2)
    assert tvt.pingpong_grid((768, 1), 132, 192, 1024) == (768, 1)  # three warpgroups: q in shared memory
    monkeypatch.setattr(tvt, "PERSISTENT_PINGPONG", False)
    assert tvt.pingpong_grid((512, 1), 132, 128, 1024) == (512, 1)


def test_merge_starts_early_only_where_it_paid(monkeypatch):
    """The merge is a programmatic dependent launch on sm_90+ with splits, after the 64-row and
    Triton split kernels, never after the ping-pong kernel (measured slower there), on the CPU,
    before sm_90, with the sweeps' switch off or with a Triton lacking grid dependency control."""
    pytest.importorskip("triton")
    from specdec_kernels import tree_verify_triton as tvt

    cuda, capability = torch.device("cuda"), [(9, 0)]
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability[0])
    assert tvt.merge_starts_early(cuda, 4, pingpong=False)
    assert not tvt.merge_starts_early(cuda, 4, pingpong=True)
    assert not tvt.merge_starts_early(cuda, 1, pingpong=False)
    assert not tvt.merge_starts_early(torch.device("cpu"), 4, pingpong=False)
    capability[0] = (12, 0)
    assert tvt.merge_starts_early(cuda, 4, pingpong=False)
    capability[0] = (8, 0)
    assert not tvt.merge_starts_early(cuda, 4, pingpong=False)
    capability[0] = (9, 0)
    monkeypatch.setattr(tvt, "PROGRAMMATIC_MERGE", False)
    assert not tvt.merge_starts_early(cuda, 4, pingpong=False)
    monkeypatch.setattr(tvt, "PROGRAMMATIC_MERGE", True)
    monkeypatch.setattr(tvt, "gdc_wait", None)
    assert not tvt.merge_starts_early(cuda, 4, pingpong=False)


def test_gluon_build_failure_falls_back_to_triton_once(monkeypatch):
    """A Triton whose Gluon no longer builds the kernel (its API is experimental) costs one
    warning naming the cause, and every later call takes the Triton kernel, instead of failing."""
    pytest.importorskip("triton")
    from triton.compiler.errors import CompilationError

    from specdec_kernels import tree_verify_triton as tvt

    monkeypatch.setattr(tvt, "GLUON_UNUSABLE", None)
    ran = []

    def broken():
        raise CompilationError(None, None, "module 'gluon.language' has no attribute 'thread_barrier'")

    with pytest.warns(RuntimeWarning, match="does not build with Triton .*thread_barrier.*Triton kernel"):
        assert tvt._run_split_kernel(broken, lambda: ran.append("triton")) == "triton"
    assert ran == ["triton"]
    assert "thread_barrier" in tvt._gluon_unusable()  # what plan_split_kernel asks before choosing Gluon
    monkeypatch.setattr(tvt, "GLUON_UNUSABLE", None)
    assert tvt._run_split_kernel(lambda: ran.append("gluon"), lambda: ran.append("triton")) == "gluon"
    assert ran == ["triton", "gluon"]


def test_split_query_heads_plans_two_programs_per_kv_head():
    """129-144 packed rows at an even G, where one program per KV head would not take them
    (2 x 128 rows on short streams of a part-filled GPU), become two programs per KV head of
    half its query heads each (65-72 rows: one 64-row warpgroup and the tail); where one 128-row
    tile and the tail would (it measured faster there, PERF.md round 9), and for other rows, odd
    groups, other configs or with the sweeps' switch off, the plan is unchanged."""
    pytest.importorskip("triton")
    from specdec_kernels import tree_verify_triton as tvt
    from specdec_kernels.configs import VerifyConfig
    from specdec_kernels.tree_verify_triton import _plan

    split = VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0, min_block_m=128,
                         gluon=True, gluon_pingpong=True, gluon_pingpong_tail=True, gluon_pingpong_64=True,
                         split_query_heads=True)
    whole = dataclasses.replace(split, split_query_heads=False)
    for batch, prefix in ((1, 8192), (8, 1024)):             # short streams, part-filled GPU (132 SMs)
        for num_nodes, group in ((17, 8), (33, 4), (9, 16)):  # 136, 132, 144 rows
            assert _plan(batch, num_nodes, group, 8, prefix + num_nodes, 132, whole)["num_m_tiles"] == 2
            plan = _plan(batch, num_nodes, group, 8, prefix + num_nodes, 132, split)
            assert (plan["head_split"], plan["block_m"], plan["num_m_tiles"], plan["tail_m"]) == (2, 64, 1, 8)
            assert plan["grid"][0] == batch * 8 * 2, plan     # (request, KV head, half) programs
    # the GPU test's cases (test_gluon_kernel_matches_reference, "pingpong-hsplit") split too
    assert _plan(2, 17, 8, 2, 3000 + 22, 132, split)["head_split"] == 2
    assert _plan(2, 33, 4, 2, 5000 + 38, 132, split)["head_split"] == 2
    for batch, prefix in ((8, 8192), (32, 1024), (1, 32768)):  # one 128-row tile and the tail
        plan = _plan(batch, 17, 8, 8, prefix + 17, 132, split)
        assert (plan["head_split"], plan["block_m"], plan["tail_m"]) == (1, 128, 8), plan
    for num_nodes, group in ((16, 8), (145, 1), (29, 5)):     # 128 rows, odd groups
        assert _plan(1, num_nodes, group, 8, 8192 + num_nodes, 132, split)["head_split"] == 1
    tvt._plan.cache_clear()
    try:
        tvt.SPLIT_QUERY_HEADS = False
        assert _plan(1, 17, 8, 8, 8192 + 17, 132, split)["head_split"] == 1
    finally:
        tvt.SPLIT_QUERY_HEADS = True
        tvt._plan.cache_clear()


@needs_triton
@pytest.mark.parametrize("num_nodes,group,lens,splits", [(17, 8, [300, 17], None), (33, 4, [250, 0, 90], 3)])
def test_split_query_heads_reads_each_programs_kv_head(num_nodes, group, lens, splits, monkeypatch):
    """With two programs per KV head (two KV heads here, so a program reading its neighbour's
    K/V gives wrong rows) every output row matches the reference, with and without splits."""
    from specdec_kernels.configs import VerifyConfig
    from specdec_kernels.tree_verify_triton import plan_verify_launch

    # 128-row tiles only, no tail: two programs per KV head unsplit, so the planner splits
    config = VerifyConfig(block_n=64, max_block_m=128, num_warps=4, num_stages=1, max_tail_m=0, min_block_m=128,
                          split_query_heads=True)
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, "best_first", group, 2, 64, torch.float32,
                                                  seed=num_nodes + group)
    plan = plan_verify_launch(len(lens), num_nodes, 2 * group, 2, 64, k.shape[1], q.device, config)
    assert plan["head_split"] == 2, plan
    out = run_triton(q, k, v, lens_t, mask, splits, monkeypatch, config=config)
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), torch.float32,
                      f"split query heads T={num_nodes} G={group}")


@needs_triton
def test_192_row_plan_without_the_pingpong_kernel_takes_power_of_two_tiles(monkeypatch):
    """192-row tiles exist only in the Gluon ping-pong kernel: a call it cannot take (here: no
    Hopper GPU) is planned again with power-of-two tiles, and the Triton kernel gives the right
    rows (T = 33 at G = 4: 132 packed rows, which the 192 option would put in one tile)."""
    from specdec_kernels.configs import VerifyConfig
    from specdec_kernels.tree_verify_triton import _plan

    config = VerifyConfig(block_n=64, max_block_m=128, num_warps=4, num_stages=1, max_tail_m=0, min_block_m=64,
                          gluon=True, gluon_pingpong=True, gluon_pingpong_192=True)
    assert _plan(2, 33, 4, 4, 400, 4, config)["block_m"] == 192  # 4 SMs: what the planner assumes on the CPU
    q, k, v, lens_t, mask, _ = make_verify_inputs([300, 17], 33, "best_first", 4, 4, 64, torch.float32, seed=5)
    out = run_triton(q, k, v, lens_t, mask, None, monkeypatch, config=config)
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), torch.float32, "192-row plan, Triton kernel")


@needs_triton
@pytest.mark.parametrize("num_nodes,group,lens,head_dim,dtype,splits,layout", TMA_CASES)
def test_descriptor_loads_match_reference(num_nodes, group, lens, head_dim, dtype, splits, layout, monkeypatch):
    from specdec_kernels.configs import VerifyConfig
    from specdec_kernels.tree_verify_triton import _tma_descriptors

    config = VerifyConfig(block_n=16, max_block_m=64, num_warps=4, num_stages=1, tma=True)
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, "best_first", group, 2, head_dim, dtype,
                                                  seed=7 * num_nodes + group)
    k, v = _lay_out(k, layout), _lay_out(v, layout)
    described = _tma_descriptors(k, v, config.block_n)[0] is not None
    assert described == (layout != "heads_apart"), layout
    out = run_triton(q, k, v, lens_t, mask, splits, monkeypatch, config=config)
    assert_rows_close(out, float64_reference(q, k, v, lens_t, mask), dtype, f"descriptor loads, {layout}")


def test_config_tiers_by_rows_arch_and_grid():
    """sm_90 head dim 128: 4 warps on 64-row tiles up to 64 packed rows (the Gluon kernel, 4
    slots; on grids of up to 64 (request, KV head) pairs the ping-pong kernel's single
    warpgroup); past that the Gluon ping-pong kernel on 64 + 8-, 128- or 192-row tiles. Where it cannot run,
    its Triton fallback: one 128-row tile on 8 warps with descriptor loads, except on small grids
    (batch 1) or short caches up to 255 rows (4 warps, 64-row tiles and a tail tile); on a small
    grid with a short cache both, round 5's Gluon tiles. sm_120 and
    unknown archs never leave 64-row tiles on 8 warps, nor load through descriptors, nor run the
    Gluon kernel."""
    from specdec_kernels.configs import SHORT_CACHE_ROWS, verify_config
    from specdec_kernels.tree_verify_triton import plan_call

    def shape(cfg):
        return cfg.num_warps, cfg.max_block_m, cfg.min_block_m, cfg.max_tail_m, cfg.tma, cfg.gluon

    assert shape(verify_config("sm_90", 128, 64, 256)) == (4, 64, 16, 0, False, True)
    assert verify_config("sm_90", 128, 64, 256).gluon_stages == 4
    # up to 64 pairs (batch 8 at 8 KV heads): the ping-pong kernel's single warpgroup, one per SM
    few_pp = verify_config("sm_90", 128, 36, 64, 8201)
    assert (few_pp.gluon_pingpong, few_pp.gluon_pingpong_64, few_pp.block_n, few_pp.resident_per_sm) == (
        True, True, 64, 1)
    assert shape(few_pp.triton_fallback) == (4, 64, 16, 0, False, False)
    assert verify_config("sm_90", 128, 36, 65) == verify_config("sm_90", 128, 36) == verify_config("sm_90", 128, 64)
    assert verify_config("sm_120", 128, 36, 8) == verify_config("sm_120", 128, 36, 256)
    many = verify_config("sm_90", 128, 68, 64, 8209)                                     # B8, T17, G4, L8k
    assert shape(many) == (8, 128, 128, 0, True, True)
    assert (many.gluon_pingpong, many.gluon_pingpong_192, many.gluon_pingpong_tail, many.gluon_pingpong_64,
            many.gluon_stages, many.block_n) == (True, True, True, True, 4, 64)
    assert shape(many.triton_fallback) == (8, 128, 128, 0, True, False)
    for small_work in (verify_config("sm_90", 128, 68, 8, 8209), verify_config("sm_90", 128, 68, 256, 1041)):
        assert small_work.gluon_pingpong                                                 # B1; B32, L1k
        assert shape(small_work.triton_fallback) == (4, 64, 16, 16, False, False)
    for rows in (68, 260):                                                   # B1-L1k: round 5's tiles
        tiny = verify_config("sm_90", 128, rows, 8, 1041)
        assert not tiny.gluon_pingpong and tiny.gluon and tiny.triton_fallback is None
        assert tiny.max_block_m == (64 if rows < 256 else 128)
    assert verify_config("sm_90", 128, 68, 256, SHORT_CACHE_ROWS + 1) == many
    assert verify_config("sm_90", 128, 260, 8, 8209) == many                                    # T65: B1, L8k
    assert verify_config("sm_90", 128, 68) == many                                              # unknown: large
    assert verify_config("sm_100", 128, 68, 64) == verify_config("sm_90", 128, 68, 64)
    for arch in ("sm_120", "sm_89"):
        for rows in (9, 68, 260):
            assert not verify_config(arch, 128, rows, 256, 8209).gluon, (arch, rows)
    # a call the Gluon kernel cannot take (here: no GPU) is planned with the Triton fallback
    q, k = torch.zeros(1, 17, 32, 128), torch.zeros(1, 8209, 8, 128)
    plan, kernel, block_n, stages = plan_call(q, k, k, 1.0, verify_config("sm_90", 128, 68, 8, 8209))
    assert (kernel, plan["block_m"], plan["tail_m"], block_n, stages) == ("triton", 64, 16, 32, 3)
    plan, kernel, _, _ = plan_call(torch.zeros(1, 33, 32, 128), k, k, 1.0, many)
    assert (kernel, plan["block_m"], plan["num_m_tiles"]) == ("triton", 128, 2)  # 132 rows: not 1 x 192
    no_fallback = dataclasses.replace(many, triton_fallback=None)
    plan, kernel, _, _ = plan_call(torch.zeros(1, 33, 32, 128), k, k, 1.0, no_fallback)
    assert (kernel, plan["block_m"], plan["num_m_tiles"], plan["tail_m"]) == ("triton", 128, 2, 0)  # nor 128 + 8


def test_head_dim_64_takes_the_gluon_tiers_of_128_with_its_own_triton_tiles():
    """sm_90 head dim 64 (round 15): every tier and grid takes head dim 128's Gluon kernel; a call
    those cannot take gets the Triton tiles head dim 64 had before (64-row tiles on 4 warps up to
    255 rows, the 128-row tile on 8 warps past that). Head dim 256 keeps its Triton tiles."""
    from specdec_kernels.configs import verify_config
    from specdec_kernels.tree_verify_triton import plan_call

    gluon_fields = ("gluon", "gluon_block_n", "gluon_stages", "gluon_q_in_registers", "gluon_pingpong",
                    "gluon_pingpong_192", "gluon_pingpong_tail", "gluon_pingpong_64", "split_query_heads",
                    "block_n", "max_block_m", "min_block_m", "num_warps", "resident_per_sm")
    for rows, pairs, cache in ((36, 256, 8201), (36, 64, 8201), (68, 64, 8209), (68, 8, 8209), (68, 256, 1041),
                               (68, 8, 1041), (260, 8, 1041), (260, 256, 8257), (520, 256, 8257)):
        at_64, at_128 = verify_config("sm_90", 64, rows, pairs, cache), verify_config("sm_90", 128, rows, pairs, cache)
        if (rows, pairs) == (36, 256):  # the 64-row Gluon kernel: 64-key tiles at D = 64 (8 KB, as 32 at 128)
            assert (at_64.gluon_block_n, at_128.gluon_block_n, at_128.block_n) == (64, 0, 32)
            at_64 = dataclasses.replace(at_64, gluon_block_n=0)
        assert at_64.gluon and all(getattr(at_64, f) == getattr(at_128, f) for f in gluon_fields), (rows, pairs, cache)
        fallback = at_64.triton_fallback
        assert not fallback.gluon and (fallback.num_warps, fallback.max_block_m) == (
            (4, 64) if rows <= 255 else (8, 128)), (rows, pairs, cache)
    q, k = torch.zeros(1, 17, 32, 64), torch.zeros(1, 8209, 8, 64)
    plan, kernel, block_n, stages = plan_call(q, k, k, 1.0, verify_config("sm_90", 64, 68, 8, 8209))
    assert (kernel, plan["block_m"], block_n, stages) == ("triton", 64, 64, 3)  # no GPU here: the fallback
    assert not verify_config("sm_90", 256, 68, 64, 8209).gluon


def test_head_dim_64_single_pingpong_warpgroup_takes_128_key_tiles():
    """Round 16: at head dim 64 the ping-pong kernel's single 64-row warpgroup (alone, with the
    tail, or on half the query heads) takes 128-key tiles, 16 KB as 64 keys are at head dim 128,
    and the cache splits in whole multiples of them, where a split streams 2048 keys or more and
    the programs are not persistent; two warpgroups and the 64-row kernel keep their tiles, and
    head dim 128 plans as before."""
    from specdec_kernels.configs import verify_config
    from specdec_kernels.tree_verify_triton import (PINGPONG_64_WIDE_KEYS_MIN_CHUNK, _plan, pingpong_grid,
                                                    runs_pingpong)

    seen = set()
    # (T, G, batch, cache rows): one warpgroup (few pairs; long and short splits), one and the tail
    # (T = 17 at G = 4, T = 9 at G = 8, T = 17 at G = 8 split in query heads; persistent at batch 32
    # with a 1k cache), two
    # (T = 16 at G = 8), two and the tail (T = 33 at G = 4), the 64-row kernel (T = 9 at batch 32)
    for num_nodes, group, batch, cache in ((9, 4, 1, 32777), (9, 4, 1, 1033), (9, 4, 8, 8201), (17, 4, 8, 32785),
                                           (17, 4, 32, 8209), (9, 8, 8, 32777), (17, 8, 1, 8209), (17, 4, 32, 1041),
                                           (16, 8, 8, 8208), (33, 4, 32, 8225), (9, 4, 32, 8201)):
        for head_dim in (64, 128):
            cfg = verify_config("sm_90", head_dim, num_nodes * group, batch * 8, cache)
            plan = _plan(batch, num_nodes, group, 8, cache, 132, cfg)
            one_warpgroup = plan["block_m"] == 64 and runs_pingpong(plan["config"], 64)
            persistent = one_warpgroup and pingpong_grid(plan["grid"], 132, 64, plan["chunk"]) != plan["grid"]
            tiles = plan["config"].gluon_block_n or plan["config"].block_n
            wide = one_warpgroup and not persistent and plan["chunk"] >= PINGPONG_64_WIDE_KEYS_MIN_CHUNK
            expected = 128 if head_dim == 64 and wide else cfg.gluon_block_n or cfg.block_n
            assert tiles == expected, (num_nodes, group, batch, head_dim, plan)
            assert plan["chunk"] % plan["config"].block_n == 0 and plan["config"].block_n in (32, 64, 128), plan
            seen.add((head_dim, one_warpgroup, persistent, plan["tail_m"] > 0, plan["head_split"],
                      plan["chunk"] >= PINGPONG_64_WIDE_KEYS_MIN_CHUNK))
    # every kind of plan came up at both head dims
    assert {(64, True, False, False, 1, True), (64, True, False, True, 1, True), (64, True, False, False, 1, False),
            (64, True, False, True, 2, False), (64, True, True, True, 1, False), (64, False, False, False, 1, True),
            (64, False, False, True, 1, True)} <= seen, seen
    assert {(128, True, False, False, 1, True), (128, True, False, True, 2, False)} <= seen, seen


def test_query_tiles_and_split_plan():
    """Pure planning: T = 2^k + 1 rides in a tail tile; the split count fills whole waves, or
    half a wave where the merge would cost more than the extra splits save."""
    from specdec_kernels.configs import VerifyConfig
    from specdec_kernels import tree_verify_triton as tvt
    from specdec_kernels.tree_verify_triton import _pick_splits, _plan, merge_tiles, pick_query_tiles

    assert pick_query_tiles(64, 64, 16) == (64, 1, 0)
    assert pick_query_tiles(68, 64, 16) == (64, 1, 16)      # T=17, G=4
    assert pick_query_tiles(136, 64, 16) == (64, 2, 16)     # T=17, G=8
    assert pick_query_tiles(260, 128, 16) == (128, 2, 16)   # T=65, G=4
    assert pick_query_tiles(68, 64, 0) == (64, 2, 0)        # tail off: a second tile
    assert pick_query_tiles(36, 64, 16) == (64, 1, 0)       # fits one tile: no tail
    assert pick_query_tiles(85, 64, 16)[2] == 0             # 21 rows over: too many for a tail
    assert pick_query_tiles(136, 128, 0, 128) == (128, 2, 0)  # 8 warps: 128-row tiles only
    assert pick_query_tiles(68, 128, 0, 128) == (128, 1, 0)
    # the ping-pong kernel's 192-row tiles, where they pad fewer rows than 128-row ones
    assert pick_query_tiles(132, 128, 0, 128, (192,)) == (192, 1, 0)  # T=33, G=4
    assert pick_query_tiles(260, 128, 0, 128, (192,)) == (192, 2, 0)  # T=65, G=4: 384 rows, 2 tiles not 3
    assert pick_query_tiles(68, 128, 0, 128, (192,)) == (128, 1, 0)
    assert pick_query_tiles(128, 128, 0, 128, (192,)) == (128, 1, 0)
    # ... or whole 128-row tiles and an 8-row tail warpgroup
    tail = VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0, min_block_m=128,
                        gluon=True, gluon_pingpong=True, gluon_pingpong_192=True, gluon_pingpong_tail=True)
    for rows, tiles in ((132, (128, 1, 8)), (136, (128, 1, 8)), (260, (128, 2, 8)), (264, (128, 2, 8)),
                        (520, (192, 3, 0)), (68, (128, 1, 0)), (144, (192, 1, 0))):  # 520: fewer programs
        plan = _plan(8, rows, 1, 8, 8192 + rows, 132, tail)
        assert (plan["block_m"], plan["num_m_tiles"], plan["tail_m"]) == tiles, rows
    # 65-72 rows on one 64-row warpgroup and the tail, where the config asks for it
    tail64 = dataclasses.replace(tail, gluon_pingpong_64=True)
    for rows, tiles in ((68, (64, 1, 8)), (72, (64, 1, 8)), (73, (128, 1, 0)), (64, (128, 1, 0)),
                        (136, (128, 1, 8))):
        plan = _plan(8, rows, 1, 8, 8192 + rows, 132, tail64)
        assert (plan["block_m"], plan["num_m_tiles"], plan["tail_m"]) == tiles, rows
    assert tvt.runs_pingpong(tail64, 64) and not tvt.runs_pingpong(tail, 64)
    plan = _plan(8, 17, 4, 8, 1024 + 17, 132, tail64)                   # B8-L1k, a short stream: too
    assert (plan["block_m"], plan["tail_m"]) == (64, 8)
    few = VerifyConfig(block_n=64, max_block_m=64, num_warps=4, num_stages=3, resident_per_sm=1, max_tail_m=0,
                       gluon=True, gluon_pingpong=True, gluon_pingpong_64=True)
    plan = _plan(8, 9, 4, 8, 8192 + 9, 132, few)
    assert (plan["block_m"], plan["tail_m"], plan["num_splits"]) == (64, 0, 2) and tvt.runs_pingpong(few, 64)
    assert plan["chunk"] == 4096 + 64       # the tree's split streams one key tile less
    plan = _plan(8, 17, 4, 8, 8192 + 17, 132, tail64)
    assert (plan["block_m"], plan["tail_m"], plan["num_splits"], plan["chunk"]) == (64, 8, 2, 4096 + 128)
    plan = _plan(1, 9, 4, 8, 8192 + 9, 132, few)                    # 16 splits: even chunks
    assert plan["num_splits"] > 2 and plan["chunk"] * plan["num_splits"] == 8192
    plan = _plan(8, 33, 4, 8, 1024 + 33, 132, tail)                 # B8-L1k: 2 x 128, no tail
    assert (plan["block_m"], plan["num_m_tiles"], plan["tail_m"]) == (128, 2, 0)
    # ... but not for short streams on a part-filled GPU (132 SMs, 8 KV heads)
    wide = VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0, min_block_m=128,
                        gluon=True, gluon_pingpong=True, gluon_pingpong_192=True)
    assert _plan(1, 33, 4, 8, 32768 + 33, 132, wide)["block_m"] == 192   # B1-L32k: 2048 keys a program
    assert _plan(32, 33, 4, 8, 1024 + 33, 132, wide)["block_m"] == 192   # B32-L1k: 256 programs
    assert _plan(1, 33, 4, 8, 8192 + 33, 132, wide)["block_m"] == 128    # B1-L8k
    assert _plan(8, 33, 4, 8, 1024 + 33, 132, wide)["block_m"] == 128    # B8-L1k: 64 programs
    assert _plan(8, 33, 4, 8, 8192 + 33, 132, wide)["block_m"] == 192

    # a longer first chunk only where two splits stay two
    assert tvt.relieve_tree_split(128, 2, 130, 64, 0) == 128
    assert tvt.relieve_tree_split(128, 2, 200, 64, 0) == 192
    assert tvt.relieve_tree_split(128, 2, 300, 64, 8) == 256
    assert tvt.relieve_tree_split(128, 3, 300, 64, 0) == 128

    cfg = VerifyConfig(32, 64, 4, 4, resident_per_sm=2)
    assert _plan(32, 17, 4, 8, 32768 + 17, 132, cfg)["tail_m"] == 16   # 512 programs otherwise
    assert _plan(8, 17, 4, 8, 8192 + 17, 132, cfg)["num_m_tiles"] == 2  # splits fill the GPU
    assert _plan(8, 17, 4, 8, 8192 + 17, 132, cfg, False)["tail_m"] == 16
    assert _plan(32, 33, 4, 8, 8192 + 33, 132, cfg)["num_m_tiles"] == 3  # two full tiles: no tail
    slots = 264
    for base, keys in ((8, 32768), (64, 8192), (256, 1024), (512, 32768), (1, 100), (3, 300000)):
        chunk, splits = _pick_splits(base, keys, 32, slots, base, 64)
        assert chunk % 32 == 0 and (splits - 1) * chunk < keys <= splits * chunk
        assert splits == 1 or chunk >= 256
        # never more than one partly filled wave beyond what one split per program needs
        assert base * splits <= max(base, 8 * slots)
    assert _pick_splits(64, 8192, 32, 264, 64, 36)[1] == 4      # B8, L8k: 256 programs, one wave
    assert _pick_splits(256, 1024, 32, 264, 256, 36)[1] == 1    # B32, L1k: no split, no merge
    # batch 1: a full wave of 32 splits at L32k, but half a wave of 16 at L8k, where 32 splits of
    # 256 keys cost more in the merge than they save (H200, PERF.md round 4)
    assert _pick_splits(8, 32768, 32, 264, 8, 36)[1] == 32
    assert _pick_splits(8, 8192, 32, 264, 8, 36)[1] == 16
    for splits in (2, 5, 17, 64, 300):
        for head_dim in (64, 128, 256):
            block, rows = merge_tiles(splits, head_dim)
            assert block * rows * head_dim <= 8192 and rows >= 2 and block >= 2


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
                                                          head_dim, monkeypatch):
    """Node i's output equals plain attention over the prefix plus the rows of its own ancestor
    chain alone: no mask, keys gathered by walking parents."""
    kv_heads = 2
    q, k, v, lens, mask, parents = make_verify_inputs([prefix], num_nodes, shape, group, kv_heads,
                                                      head_dim, dtype, seed=num_nodes * 1000 + prefix)
    out = run_triton(q, k, v, lens, mask, None, monkeypatch).cpu()
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
def test_float32_inputs(monkeypatch):
    q, k, v, lens, mask, _ = make_verify_inputs([40, 3], 13, "best_first", 2, 2, 64, torch.float32, 11)
    out = run_triton(q, k, v, lens, mask, 2, monkeypatch)
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
    k = torch.randn(1, 20, 2, 64)
    with pytest.raises(ValueError, match="ancestor_mask"):
        tree_verify_attention(q, k, k, torch.tensor([3], dtype=torch.int32), mask[:, :, :0], impl="torch")


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
def test_pingpong_tail_rescales_where_scores_outgrow_its_max(num_nodes, group, lens, dtype, splits, rise, q_scale,
                                                            monkeypatch, request):
    from specdec_kernels.tree_verify_triton import plan_verify_launch

    config = _gluon_configs()["pingpong-64tail"]
    keep_wide_tiles(monkeypatch, request)
    q, k, v, lens_t, mask, _ = make_verify_inputs(lens, num_nodes, "best_first", group, 2, 128, dtype,
                                                  seed=13 * num_nodes + group)
    ramp = (1.0 + rise * torch.arange(k.shape[1], device=k.device, dtype=torch.float32)).clamp(min=0.05)
    k = (k.float() * ramp[None, :, None, None]).to(dtype)
    q = (q.float() * q_scale).to(dtype)
    q, k, v, lens_t, mask = (t.cuda() for t in (q, k, v, lens_t, mask))
    plan = plan_verify_launch(len(lens), num_nodes, q.shape[2], k.shape[2], 128, k.shape[1], q.device, config)
    assert plan["tail_m"] == 8 and plan["head_split"] == 1, plan
    out = run_triton(q, k, v, lens_t, mask, splits, monkeypatch, config=config)
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
