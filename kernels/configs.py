"""Launch configurations per GPU architecture, in one table.

Why the rows differ:
- ``sm_90`` (H100 / H200) has 227 KB of shared memory per block: deep pipelines and 128-row
  query tiles fit.
- ``sm_120`` (RTX PRO 6000 / RTX 5090) has about 99 KB per block and none of the Hopper or
  datacenter-Blackwell paths (wgmma, TMA multicast): smaller key tiles, two stages, query
  tiles capped at 64 rows, so every (head dim) row fits with room to spare. The sm_120 compile
  check (``python -m specdec_kernels.sm120_check``) reports the shared memory each row uses.
- ``sm_100`` (B200) takes the Hopper row (its shared memory is as large), but never the Gluon
  kernel, which is written for Hopper's warpgroup MMA.
- ``interpreter``: Triton's CPU interpreter runs block operations in numpy, so fewer, larger
  tiles are faster; no memory limits apply.

Unknown architectures fall back to the sm_120 row, the most conservative one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class VerifyConfig:
    """Tile sizes for tree-verify attention at one head dim.

    block_n:      key rows per tile (multiple of 16; ``tl.dot`` needs K >= 16).
    max_block_m:  cap on packed query rows (T * G rows of one KV head) per program.
    num_warps, num_stages: Triton launch parameters.
    resident_per_sm: how many of these programs fit on one multiprocessor at once (from the
                  shared memory and registers the compiled kernel uses); the split-KV heuristic
                  sizes its waves with it.
    max_tail_m:   packed rows past a whole number of max_block_m tiles that ride along in a
                  small extra tile (T = 2^k + 1); 0 disables the tail tile.
    min_block_m:  smallest query tile worth running on these warps: 8 warps are two Hopper
                  warpgroups of 64 rows each, and on a 64-row tile they measured slower than 4
                  warps (PERF.md, round 3), so the 8-warp rows take 128-row tiles only.
    tma:          load the mask-free key tiles through tensor descriptors (bulk tensor copies,
                  sm_90 and later) where the cache layout allows one; the partial last tile and
                  the tree rows keep masked per-element loads.
    lazy_rescale: rescale the output accumulator only when a row's running max grows by more
                  than 2**8 (``tree_verify_triton.RESCALE_LOG2``), not at every key tile.
    max_registers: cap on registers per thread passed to ptxas (0: none), so that more programs
                  share a multiprocessor, at the price of spills.
    (These three measured slower on the H200, PERF.md round 4: off in every entry below, kept
    as switches for the sweeps.)
    fold_scale:   take each row's max on the raw q.k scores and fold the softmax scale into the
                  exponent's argument (one fused multiply-add a score); only for a positive scale.
    gluon:        run the split kernel written in Gluon (``tree_verify_gluon``, sm_90), which
                  issues the next key tile's q.k before this tile's softmax; only for 16-bit
                  inputs, a positive scale, a cache one tensor descriptor describes, no tail tile
                  and query tiles of at least 16 rows a warp (otherwise the Triton kernel runs,
                  with the fields above).
    gluon_block_n, gluon_stages: the Gluon kernel's key rows per tile and ring slots (0: as
                  block_n / num_stages); it needs at least 3 slots.
    gluon_q_in_registers: the Gluon kernel's q.k MMA takes q from registers instead of shared
                  memory (which then carries only the key tiles).
    gluon_pingpong: on 128-row tiles, the Gluon kernel whose two warpgroups are separate
                  warp-specialised partitions taking turns at the tensor cores, fed by a TMA
                  warp (``tree_verify_gluon_pingpong``; q in registers; launched on 4 warps, its
                  partitions add the other warpgroups and the load warp).
    gluon_pingpong_192: the ping-pong kernel may also take 192-row tiles (three warpgroups, q
                  in shared memory) where they pad fewer rows than 128-row ones (T = 33 at G = 4:
                  132 rows); a call that cannot run it is planned with power-of-two tiles.
    gluon_pingpong_tail: rows past whole 128-row tiles, up to 8 (T = 2^k + 1 at G <= 8), ride in
                  the ping-pong kernel's tail warpgroup (keys as its MMAs' M dimension, the rows
                  as N = 8) instead of a third warpgroup or another program.
    gluon_pingpong_64: 64-row tiles on the ping-pong kernel too (one warpgroup and its load
                  warp), and, with gluon_pingpong_tail, 65 to 72 rows (T = 17 at G = 4, T = 9 at
                  G = 8) on one 64-row warpgroup and the tail warpgroup instead of a 128-row tile
                  with half its MMAs on padding.
    split_query_heads: 129 to 144 packed rows at an even G (T = 17 at G = 8, T = 33 at G = 4) that
                  the plan would give two programs per KV head anyway (2 x 128 rows, on short
                  streams of a part-filled GPU) run as two programs of half its query heads each
                  (65 to 72 rows: one 64-row warpgroup and the tail warpgroup of the ping-pong
                  kernel), half the MMA work; the two are adjacent in the grid, so the second
                  reads the K/V tiles the first brought into L2. (Against one 128-row tile and
                  the tail it measured slower: a single warpgroup has no partner to hide its
                  softmax, PERF.md round 9.)
    gluon_pingpong_64_block_n: key rows per tile where the ping-pong kernel runs one 64-row
                  warpgroup (with or without the tail warpgroup; 0: as the rest of the entry) on
                  long splits (``tree_verify_triton.PINGPONG_64_WIDE_KEYS_MIN_CHUNK``) of a grid
                  that is not persistent; the planner then splits the cache in multiples of it.
                  At head dim 64, 128 (16 KB tiles, as 64 keys are at 128): 3-19 % faster there,
                  slower on short splits and persistent programs; two warpgroups ran from 8 %
                  faster to 23 % slower on it (PERF.md, round 16).
    gluon_masked_tma: the (non-ping-pong) Gluon kernel requests its split's first masked key tile
                  (partial last prefix tile, else first tree tile) by TMA into buffers of its own
                  at its start, instead of loading its masked tiles through pointers after the
                  mask-free stream (2 x block_n x head dim x 2 bytes more shared memory). On the
                  64-row tile it measured no faster (H200, PERF.md round 7): off in every entry,
                  kept as a switch for the sweeps, with its GPU tests.
    triton_fallback: the configuration (Triton fields only) for calls the Gluon kernel cannot
                  take (fp32, a cache one descriptor cannot describe, no Hopper GPU, a Triton whose
                  Gluon does not build it), where the Triton kernel wants other tiles than the
                  Gluon one (None: these same fields).
    """

    block_n: int
    max_block_m: int
    num_warps: int
    num_stages: int
    resident_per_sm: int = 1
    max_tail_m: int = 16
    min_block_m: int = 16
    tma: bool = False
    lazy_rescale: bool = False
    max_registers: int = 0
    fold_scale: bool = False
    gluon: bool = False
    gluon_block_n: int = 0
    gluon_stages: int = 0
    gluon_q_in_registers: bool = False
    gluon_pingpong: bool = False
    gluon_pingpong_192: bool = False
    gluon_pingpong_tail: bool = False
    gluon_pingpong_64: bool = False
    gluon_pingpong_64_block_n: int = 0
    gluon_masked_tma: bool = False
    split_query_heads: bool = False
    triton_fallback: VerifyConfig | None = None


# arch -> head_dim -> tiers ((most packed rows, config[, config for small work[, for tiny work]]),
# ..., (None, config...)): the first tier whose bound covers T * G packed query rows of one KV head
# applies; its third entry, where there is one, replaces the config when the call has fewer than
# SMALL_GRID_HEADS (request, KV head) pairs or at most SHORT_CACHE_ROWS cache rows (small work),
# its fourth when it has both (tiny work).
# Few rows means the call streams K/V (memory bound): 4 warps on 64-row tiles, small enough that
# two programs share a multiprocessor, so one program's start and end overlap the other's
# stream. Past 64 rows, one 128-row tile on 8 warps (two warpgroups) with 64-key tiles loaded
# through tensor descriptors: each K/V tile then serves all the rows (T = 17 at G = 4: 68 rows),
# where two 64-row programs would each stream the cache (H200, rounds 3-4: B8-T17-L8k 96 us
# against 109, B32-T17-L8k 307 against 388).
# On sm_90 at head dims 128 and 64 (since round 15), the entries with ``gluon`` run a Gluon split
# kernel for 16-bit inputs (``tree_verify_gluon``; past 64 rows ``tree_verify_gluon_pingpong``),
# with the Triton fields, or their ``triton_fallback``, for the calls they cannot take.
# resident_per_sm comes from the compiled kernels (Triton 3.9's ptxas, sm_90 target, compiled on
# the CPU; PERF.md): 228 KB shared memory and 64K registers per SM.
# max_tail_m is 16 where the tail tile compiles without register spills, else 0.
# The sm_90 head-dim-128 entries are chosen by the H200 sweeps in PERF.md; the other rows
# compile without register spills but were not swept.
_SM90_MANY = {
    # 192 KB smem at 3 stages: 1 per SM (its tail tile spills 184 B: off)
    64: VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0),
    # Gluon: the ping-pong kernel (round 6, H200): two warpgroup partitions taking turns at the
    # tensor cores, a TMA warp, 64-key tiles, 4 ring slots (147 KB shared memory). Against round
    # 5's 8-warp Gluon tile, 8-14 % faster on all ten 128-row shapes swept (B8-T17-L8k 87.7 ->
    # 76.1 us, B32-T65-H64-L8k 1393 -> 1223). Rows past whole 128-row tiles, up to 8 (T = 2^k + 1),
    # ride in a tail warpgroup: against a third warpgroup (192-row tiles, themselves 6-30 %
    # faster than two 128-row programs), 2-10 % faster on 12 of the 16 shapes swept (B32-T65-L32k
    # 2929 -> 2624 us); 192-row tiles stay where they need fewer programs (520 rows) and the
    # planner drops both on short streams of a part-filled GPU. 65-72 rows (T = 17 at G = 4, T = 9
    # at G = 8) take one 64-row warpgroup and the tail instead of a 128-row tile: 4-10 % faster on
    # all 12 shapes swept (round 8, third sweep: B32-T17-L32k 1038 -> 942 us, B8-T17-L8k 75.0 -> 72.0).
    # 129-144 rows (T = 17 at G = 8, T = 33 at G = 4) that short streams would put in two 128-row
    # programs per KV head take two of 64 rows and the tail, half the query heads each: 13 % faster
    # on all four such shapes (round 9, first sweep: B1-T17-H64-L8k 26.3 -> 23.0 us, B8-T33-L1k
    # 24.9 -> 21.7); against one 128-row tile and the tail 14-44 % slower (B8-T17-H64-L8k 94.1 ->
    # 113.1), so only there.
    # Triton fallback: descriptor loads, 3-5 % faster than per-element loads on every shape swept
    # (round 4).
    128: VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0, min_block_m=128,
                      tma=True, gluon=True, gluon_stages=4, gluon_pingpong=True, gluon_pingpong_192=True,
                      gluon_pingpong_tail=True, gluon_pingpong_64=True, split_query_heads=True,
                      triton_fallback=VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3,
                                                   max_tail_m=0, min_block_m=128, tma=True)),
}

# With little work per (request, KV head), the 8-warp tile's one program per SM loses to the
# 4-warp tile's two: with few pairs (batch 1 at 8 KV heads) the GPU is filled by splitting the
# cache, and gets half the programs; with a short cache each program's start and end are a large
# share of it. There the Triton kernel keeps 64-row tiles on 4 warps up to 255 rows, rows past a
# whole tile riding in a 16-row tail tile where the planner finds the grid full (H200, rounds 3-4:
# B1-T17-L8k 25.7 us against 34.8, B32-T17-L1k 65.4 against 77.4).
SMALL_GRID_HEADS = 64
SHORT_CACHE_ROWS = 2048

# Up to 64 rows the Gluon kernel with 4 slots (80 KB, 159 registers: still 2 per SM) was 4-13 %
# faster on all four shapes swept (H200, round 5: B32-T9-L1k 45.6 -> 39.6 us, B1-T9-L32k 50.1 ->
# 47.4); q in registers made no difference there. The Triton fallback keeps 3 stages.
_SM90_FEW_128 = VerifyConfig(block_n=32, max_block_m=64, num_warps=4, num_stages=3, resident_per_sm=2,
                             max_tail_m=0, gluon=True, gluon_stages=4)
# ... except on a grid of at most FEW_HEADS (request, KV head) pairs (batch 1 and 8 at 8 KV heads),
# where the ping-pong kernel's single warpgroup fed by its load warp (64-key tiles, 4 slots, one
# program per SM, half the splits) was faster on 11 of the 12 shapes of round 8's fourth sweep (by
# 1-8 %: B1-T9-L8k 19.0 -> 17.5 us, B8-T9-L8k 71.3 -> 70.5; B1-T9-L1k 11.2 -> 11.5), and 2-13 %
# slower at batch 32, where its 256 programs take two waves (B32-T9-L1k 39.7 -> 44.8).
FEW_HEADS = 64
_SM90_FEW_PINGPONG_128 = VerifyConfig(block_n=64, max_block_m=64, num_warps=4, num_stages=3, resident_per_sm=1,
                                      max_tail_m=0, tma=True, gluon=True, gluon_stages=4, gluon_pingpong=True,
                                      gluon_pingpong_64=True,
                                      triton_fallback=VerifyConfig(block_n=32, max_block_m=64, num_warps=4,
                                                                   num_stages=3, resident_per_sm=2, max_tail_m=0))
# The Triton kernel's small-work tier: with the tail tile 255 registers x 128 threads, 73 KB
# shared memory: still 2 per SM. The Gluon ping-pong kernel's 128-row tiles beat the 64-row tiles
# there too (round 6, second sweep, all eight shapes: B1-T17-L32k 59.8 -> 46.0 us, B32-T17-L1k
# 62.3 -> 52.6, B8-T33-L1k 35.1 -> 25.0), so it takes this tier wherever it can run, and these
# tiles are its Triton fallback.
_SM90_SMALL_WORK_128 = dataclasses.replace(_SM90_MANY[128], triton_fallback=VerifyConfig(
    block_n=32, max_block_m=64, num_warps=4, num_stages=3, resident_per_sm=2, max_tail_m=16))

# Where the grid is small and the cache short both (batch 1 at L1k: 8 to 40 programs of a few
# key tiles each), a call is all latency: there the ping-pong kernel's larger programs were 0.4 to
# 1.6 us slower than round 5's tiles on all seven such shapes of the round-6 table (B1-T17-H64-L1k
# 13.8 -> 15.4 us), so this tier keeps them: 64-row Gluon tiles up to 255 rows, the 8-warp Gluon
# tile (128-key tiles, q in registers) past that.
_SM90_TINY_128 = VerifyConfig(block_n=32, max_block_m=64, num_warps=4, num_stages=3, resident_per_sm=2,
                              max_tail_m=16, gluon=True, gluon_stages=4)
_SM90_TINY_MANY_128 = VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0,
                                   min_block_m=128, tma=True, gluon=True, gluon_block_n=128,
                                   gluon_q_in_registers=True)

# Head dim 64 (round 15): the Triton kernel alone reached 3-37 % of the matmul rate on the
# compute-bound shapes and 43-97 % of the copy rate on the memory-bound ones of the grid
# at D = 64 (H200, PERF.md round 15), so it takes the head-dim-128 tiers, Gluon kernels and all
# (the GPU tests run every Gluon tile at D = 64 too); not swept at 64. Calls the Gluon kernels
# cannot take get the Triton tiles head dim 64 had: 64-row tiles on 4 warps up to 255 rows (86
# KB smem, 246 regs with the tail tile: 2 per SM), the 128-row tile past that.
_SM90_TRITON_FEW_64 = VerifyConfig(block_n=64, max_block_m=64, num_warps=4, num_stages=3, resident_per_sm=2)


def _at_head_dim_64(config: VerifyConfig, fallback: VerifyConfig) -> VerifyConfig:
    """``config`` at head dim 64: its Triton fallback, and 128-key tiles for the ping-pong
    kernel's single warpgroup (round 16)."""
    return dataclasses.replace(config, triton_fallback=fallback,
                               gluon_pingpong_64_block_n=128 if config.gluon_pingpong_64 else 0)


# ... but with 64-key tiles on its 64-row Gluon kernel (8 KB a tile, as 32 keys are at D = 128):
# 16-18 % faster than 32-key tiles on the four batch-32 shapes timed, where 6 slots were 2-3 %
# slower than 4 (H200, round 15: B32-T9-H32/8/64-L32k 592.3 -> 487.8 us). 6 or 8 slots on the
# ping-pong kernel's single warpgroup gave -0.9 to +1.2 % (noise): 4, as at 128.
_SM90_FEW_64 = _at_head_dim_64(dataclasses.replace(_SM90_FEW_128, gluon_block_n=64), _SM90_TRITON_FEW_64)


VERIFY_CONFIGS: dict[str, dict[int, tuple[tuple, ...]]] = {
    "sm_90": {
        64: ((64, _SM90_FEW_64),
             (255, _at_head_dim_64(_SM90_MANY[128], _SM90_TRITON_FEW_64),
              _at_head_dim_64(_SM90_SMALL_WORK_128, _SM90_TRITON_FEW_64),
              _at_head_dim_64(_SM90_TINY_128, _SM90_TRITON_FEW_64)),
             (None, _at_head_dim_64(_SM90_MANY[128], _SM90_MANY[64]), _at_head_dim_64(_SM90_MANY[128], _SM90_MANY[64]),
              _at_head_dim_64(_SM90_TINY_MANY_128, _SM90_MANY[64]))),
        # few: 80 KB smem, 180 regs x 128 threads: 2 per SM (3 stages measured 1-6 % faster than 4
        # on the gap shapes in rounds 2 and 3)
        128: ((64, _SM90_FEW_128), (255, _SM90_MANY[128], _SM90_SMALL_WORK_128, _SM90_TINY_128),
              (None, _SM90_MANY[128], _SM90_MANY[128], _SM90_TINY_MANY_128)),
        # 104 KB smem, 8 warps x 204 regs: 1 per SM (the tail tile spills 216 B: off)
        256: ((None, VerifyConfig(block_n=32, max_block_m=64, num_warps=8, num_stages=2, max_tail_m=0)),),
    },
    "sm_120": {  # about 99 KB shared memory per block: two stages, <= 64-row tiles
        # tail tile: spill-free at head dim 64 only (416 B / 800 B of spills at 128 / 256)
        64: ((None, VerifyConfig(block_n=64, max_block_m=64, num_warps=8, num_stages=2)),),
        128: ((None, VerifyConfig(block_n=32, max_block_m=64, num_warps=8, num_stages=2, max_tail_m=0)),),
        256: ((None, VerifyConfig(block_n=32, max_block_m=32, num_warps=8, num_stages=2, max_tail_m=0)),),
    },
    "interpreter": {
        d: ((None, VerifyConfig(block_n=64, max_block_m=128, num_warps=4, num_stages=1)),) for d in (64, 128, 256)
    },
}
VERIFY_CONFIGS["sm_100"] = VERIFY_CONFIGS["sm_90"]
# Entries that replace a tier's on small grids: (packed rows up to, (request, KV head) pairs up
# to, entry), tried before VERIFY_CONFIGS.
VERIFY_FEW_HEADS: dict[str, dict[int, tuple[tuple, ...]]] = {
    "sm_90": {128: ((64, FEW_HEADS, _SM90_FEW_PINGPONG_128),),
              64: ((64, FEW_HEADS, _at_head_dim_64(_SM90_FEW_PINGPONG_128, _SM90_TRITON_FEW_64)),)},
}
VERIFY_FEW_HEADS["sm_100"] = VERIFY_FEW_HEADS["sm_90"]

# Fewest key rows one split handles (amortises the query load and the partial write).
MIN_SPLIT_KEYS = 256


def arch_name(device) -> str:
    """``"sm_XY"`` for a CUDA device, ``"interpreter"`` for CPU tensors under TRITON_INTERPRET."""
    if device.type != "cuda":
        return "interpreter"
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def verify_config(arch: str, head_dim: int, packed_rows: int = 1, batch_heads: int | None = None,
                  cache_rows: int | None = None) -> VerifyConfig:
    """The table entry for ``arch`` (unknown archs use sm_120's), ``head_dim`` (64, 128 or 256),
    ``packed_rows`` = T * G query rows per KV head, ``batch_heads`` = batch * KV heads and
    ``cache_rows`` = the cache's rows per request (None: a large grid, a long cache)."""
    table = VERIFY_CONFIGS.get(arch, VERIFY_CONFIGS["sm_120"])
    if head_dim not in table:
        raise ValueError(f"head dim {head_dim} is not supported; use one of {sorted(table)}")
    if arch in VERIFY_CONFIGS and batch_heads is not None:
        for most_rows, most_heads, config in VERIFY_FEW_HEADS.get(arch, {}).get(head_dim, ()):
            if packed_rows <= most_rows and batch_heads <= most_heads:
                return config
    small_grid = batch_heads is not None and batch_heads < SMALL_GRID_HEADS
    short_cache = cache_rows is not None and cache_rows <= SHORT_CACHE_ROWS
    for most_rows, config, *small in table[head_dim]:
        if most_rows is None or packed_rows <= most_rows:
            if len(small) > 1 and small_grid and short_cache:
                return small[1]
            return small[0] if small and (small_grid or short_cache) else config
    raise AssertionError(f"the {arch} table for head dim {head_dim} has no open-ended last tier")
