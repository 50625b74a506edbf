"""Tree-verify tiles per GPU architecture: one small table per arch family, one line of reason per
row, the same shape for each (FlashAttention's ``tile_size.h`` is the model).

Each table (:class:`TileTable`) maps (head dim, element size, packed rows T * G of one KV head,
(request, KV head) pairs, cache rows S) to a :class:`TileChoice`: fp32's entry, else the first of
the head dim's rows whose condition holds. Every entry is built once, here. The planner (:mod:`specdec_kernels.verify_plan`)
then picks query tiles and splits inside it, takes the entry's Triton fallback where the Gluon
kernels cannot run a call, and shrinks any entry whose shared memory would not fit the arch (fp32
doubles every tile). Measurements behind the sm_90 choices: docs/kernels-performance.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True)
class VerifyConfig:
    """Tiles of one table entry.

    block_n, num_warps, num_stages: the Triton kernel's key rows per tile (a multiple of 16),
        warps and software-pipeline depth.
    max_block_m, min_block_m: the range of query-tile rows (packed rows of one KV head).
    resident_per_sm: programs one SM holds at once (from the compiled kernel); the split model
        sizes its waves with it.
    max_tail_m: rows past whole query tiles (T = 2^k + 1) that may ride in a 16-row tail tile of
        the Triton kernel instead of another program (0: never).
    tma: the Triton kernel loads its mask-free key tiles through tensor descriptors.
    gluon: a Hopper Gluon kernel takes 16-bit calls (``tree_verify_gluon``; the ping-pong one with
        ``gluon_pingpong``), the Triton kernel (or ``triton_fallback``) the others.
    gluon_block_n, gluon_stages: the Gluon kernels' key rows per tile and ring slots (0: as the
        Triton fields).
    gluon_q_in_registers: the 64-row Gluon kernel keeps q in registers (shared memory then holds
        key tiles only).
    gluon_pingpong: 128-row tiles run two warp-specialised warpgroups, each issuing its MMAs while
        the other takes its softmax, fed by a TMA warp; gluon_pingpong_64 adds 64-row tiles (one
        warpgroup and the load warp), gluon_pingpong_192 192-row tiles (three warpgroups) where
        they pad fewer rows,
        gluon_pingpong_tail an 8-row tail warpgroup for rows past whole 128-row tiles (and
        65-72 rows on one 64-row warpgroup with gluon_pingpong_64).
    gluon_pingpong_64_block_n: key rows per tile of the single ping-pong warpgroup on long splits
        of a grid that is not persistent (0: as gluon_block_n).
    split_query_heads: 129-144 packed rows at an even G run as two programs of half the query heads
        each where the plan would give two programs per KV head anyway.
    split_query_heads_into: 65-128 packed rows at an even G run as two programs of half the query
        heads each, on these tiles (None: never).
    short_split_tiles: where this entry's splits stream at most ``VerifyPolicy.short_split_max_keys``
        keys, the call runs on these tiles instead, with their own splits (None: never).
    split_key_cost, min_split_keys: the split model's cost of a key row in units of the tiles it
        was fitted on (head dim 128), and the fewest key rows a split takes (amortising the query
        load and the partial write; ``verify_plan.pick_splits``); merge_split_keys: the merge's
        cost a split, in key rows, where all splits fit one block of it (0: the model's default).
    triton_fallback: the Triton kernel's tiles where they differ from these fields (None: same).
    """

    block_n: int
    max_block_m: int
    num_warps: int
    num_stages: int
    resident_per_sm: int = 1
    max_tail_m: int = 16
    min_block_m: int = 16
    tma: bool = False
    gluon: bool = False
    gluon_block_n: int = 0
    gluon_stages: int = 0
    gluon_q_in_registers: bool = False
    gluon_pingpong: bool = False
    gluon_pingpong_192: bool = False
    gluon_pingpong_tail: bool = False
    gluon_pingpong_64: bool = False
    gluon_pingpong_64_block_n: int = 0
    split_query_heads: bool = False
    split_query_heads_into: VerifyConfig | None = None
    short_split_tiles: VerifyConfig | None = None
    split_key_cost: float = 1.0
    min_split_keys: int = 256
    merge_split_keys: int = 0
    triton_fallback: VerifyConfig | None = None


@dataclass(frozen=True)
class TileChoice:
    """A table entry and the one-line reason it was chosen."""

    config: VerifyConfig
    why: str


HEAD_DIMS = (64, 128, 256)
# The grid and cache thresholds of the sm_90 tiers: (request, KV head) pairs and cache rows.
FEW_HEADS = 64          # batch 1 and 8 at 8 KV heads
SMALL_GRID_HEADS = 64   # fewer pairs than this: a part-filled GPU
SHORT_CACHE_ROWS = 2048  # at most this many rows: each program's start and end weigh
D256_HALF_HEADS_MAX_KV_ROWS = 192 * 1024  # pairs * cache rows: head dim 256's measured half-heads crossover


class TileCall(NamedTuple):
    """What a table row looks at: packed rows T * G of one KV head, (request, KV head) pairs, cache rows S."""

    rows: int
    pairs: int
    cache_rows: int

    @property
    def tiny(self) -> bool:
        """A part-filled GPU on a short cache: all latency."""
        return self.pairs < SMALL_GRID_HEADS and self.cache_rows <= SHORT_CACHE_ROWS

    @property
    def small(self) -> bool:
        """A part-filled GPU or a short cache."""
        return self.pairs < SMALL_GRID_HEADS or self.cache_rows <= SHORT_CACHE_ROWS


@dataclass(frozen=True)
class TileRow:
    """A row of a table: the first row of a head dim whose ``when`` holds for a call gives ``config``."""

    when: Callable[[TileCall], bool]
    config: VerifyConfig
    why: str


@dataclass(frozen=True, eq=False)
class TileTable:
    """One arch family's table: fp32's entry, then for each head dim its rows in order (the last
    holds always). Called as ``table(head_dim, element_size, rows, pairs, cache_rows)``."""

    what: str
    fp32: TileChoice
    rows: Mapping[int, tuple[TileRow, ...]]

    def __call__(self, head_dim: int, element_size: int, rows: int, pairs: int, cache_rows: int) -> TileChoice:
        if element_size == 4:
            return self.fp32
        call = TileCall(rows, pairs, cache_rows)
        row = next(row for row in self.rows[head_dim] if row.when(call))
        return TileChoice(row.config, row.why)


def _always(call: TileCall) -> bool:
    return True


# fp32 on every arch: 32-row, 16-key tiles on 8 warps, two stages (its FMA dots spill 0.5-3 KB at head dims
# 128-256 whatever the tile: fp32 is the correctness path, 16 bits the fast one)
TRITON_FP32 = VerifyConfig(block_n=16, max_block_m=32, num_warps=8, num_stages=2, max_tail_m=0)
# head dim 64's Triton tile past 255 rows on sm_90
VERIFY_D64_MANY = VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0)

# sm_90 entries (H200 sweeps at head dim 128, bf16; docs/kernels-performance.md)
_TRITON_64_ROWS = VerifyConfig(block_n=32, max_block_m=64, num_warps=4, num_stages=3, resident_per_sm=2, max_tail_m=0)
_TRITON_64_ROWS_TAIL = dataclasses.replace(_TRITON_64_ROWS, max_tail_m=16)
_TRITON_128_ROWS = VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0, min_block_m=128,
                                tma=True)
_PINGPONG = VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0, min_block_m=128,
                         tma=True, gluon=True, gluon_stages=4, gluon_pingpong=True, gluon_pingpong_192=True,
                         gluon_pingpong_tail=True, gluon_pingpong_64=True, split_query_heads=True,
                         triton_fallback=_TRITON_128_ROWS)
# small work: the Triton fallback keeps two 64-row programs an SM
_PINGPONG_SMALL_WORK = dataclasses.replace(_PINGPONG, triton_fallback=_TRITON_64_ROWS_TAIL)
_PINGPONG_ONE_WARPGROUP = VerifyConfig(block_n=64, max_block_m=64, num_warps=4, num_stages=3, max_tail_m=0, tma=True,
                                       gluon=True, gluon_stages=4, gluon_pingpong=True, gluon_pingpong_64=True,
                                       triton_fallback=_TRITON_64_ROWS)
_GLUON_64_ROWS = VerifyConfig(block_n=32, max_block_m=64, num_warps=4, num_stages=3, resident_per_sm=2, max_tail_m=0,
                              gluon=True, gluon_stages=4)
_GLUON_64_ROWS_TAIL = dataclasses.replace(_GLUON_64_ROWS, max_tail_m=16)
_GLUON_128_ROWS = VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0, min_block_m=128,
                               tma=True, gluon=True, gluon_block_n=128, gluon_q_in_registers=True)


def _at_head_dim_64(config: VerifyConfig, fallback: VerifyConfig, **changes) -> VerifyConfig:
    """``config``'s head-dim-64 twin: its own Triton fallback, 128-key tiles for a single ping-pong
    warpgroup on long splits."""
    return dataclasses.replace(config, triton_fallback=fallback,
                               gluon_pingpong_64_block_n=128 if config.gluon_pingpong_64 else 0, **changes)


# head dim 64: the same kernels on 64-key tiles (8 KB, as 32 keys are at 128), the Triton kernel's
# own 64-row tiles where Gluon cannot run
_TRITON_64_ROWS_D64 = VerifyConfig(block_n=64, max_block_m=64, num_warps=4, num_stages=3, resident_per_sm=2)
_PINGPONG_ONE_WARPGROUP_D64 = _at_head_dim_64(_PINGPONG_ONE_WARPGROUP, _TRITON_64_ROWS_D64)
_GLUON_64_ROWS_D64 = _at_head_dim_64(_GLUON_64_ROWS, _TRITON_64_ROWS_D64, gluon_block_n=64)
_GLUON_64_ROWS_TAIL_D64 = _at_head_dim_64(_GLUON_64_ROWS_TAIL, _TRITON_64_ROWS_D64)
_GLUON_128_ROWS_D64 = _at_head_dim_64(_GLUON_128_ROWS, VERIFY_D64_MANY)
_PINGPONG_D64 = _at_head_dim_64(_PINGPONG, _TRITON_64_ROWS_D64)
_PINGPONG_MANY_ROWS_D64 = _at_head_dim_64(_PINGPONG, VERIFY_D64_MANY)

# head dim 256: tiles of 32 keys (16 KB, as 64 keys are at 128), q in shared memory, 3 ring slots (4 on
# one warpgroup); no tail warpgroup (its key-major MMAs need 64-key tiles, and on their ring it was slower)
_TRITON_D256 = VerifyConfig(block_n=32, max_block_m=64, num_warps=8, num_stages=2, max_tail_m=0)
# Its split model: a key row costs one program ~2.5x head dim 128's (twice the bytes; one program an
# SM, its MMAs on 64 padded rows), a split may take 64 of them, and the merge over head-dim slices
# costs ~8 key rows a split while its splits fit one block.
_PINGPONG_D256 = VerifyConfig(block_n=32, max_block_m=128, num_warps=8, num_stages=2, max_tail_m=0, min_block_m=64,
                              tma=True, gluon=True, gluon_stages=3, gluon_pingpong=True, gluon_pingpong_64=True,
                              split_key_cost=2.5, min_split_keys=64, merge_split_keys=8,
                              triton_fallback=_TRITON_D256)
# one warpgroup (at most 64 packed rows): a fourth ring slot fits (161 KB) and streams faster
_PINGPONG_D256_ONE_WARPGROUP = dataclasses.replace(_PINGPONG_D256, gluon_stages=4)
# past 64 rows on short splits: 64-row programs of one warpgroup outran the 128-row pairs there, not on long ones
_PINGPONG_D256_64_ROWS = dataclasses.replace(_PINGPONG_D256_ONE_WARPGROUP, max_block_m=64)
_PINGPONG_D256_MANY_ROWS = dataclasses.replace(_PINGPONG_D256, short_split_tiles=_PINGPONG_D256_64_ROWS)
# 65-128 rows on little work: two such programs a KV head outrun one 128-row program
_PINGPONG_D256_HALF_HEADS = dataclasses.replace(_PINGPONG_D256_MANY_ROWS,
                                                split_query_heads_into=_PINGPONG_D256_ONE_WARPGROUP)

_SM90_PINGPONG_WHY = ("the ping-pong kernel: warp-specialised warpgroups fed by a TMA warp, faster than one 8-warp "
                      "tile")
# head dims 64 and 128 share their rows: (when, head dim 128's entry, head dim 64's twin, why)
_SM90_D64_D128 = (
    (lambda c: c.rows <= 64 and c.pairs <= FEW_HEADS, _PINGPONG_ONE_WARPGROUP, _PINGPONG_ONE_WARPGROUP_D64,
     "small grid: one ping-pong warpgroup fed by its load warp, half the splits (faster than two 64-row programs "
     "an SM)"),
    (lambda c: c.rows <= 64, _GLUON_64_ROWS, _GLUON_64_ROWS_D64,
     "64-row Gluon tiles, two programs an SM: each one's start and end hide under the other's stream"),
    (lambda c: c.tiny and c.rows <= 255, _GLUON_64_ROWS_TAIL, _GLUON_64_ROWS_TAIL_D64,
     "tiny work (small grid, short cache): 64-row Gluon tiles, all latency"),
    (lambda c: c.tiny, _GLUON_128_ROWS, _GLUON_128_ROWS_D64,
     "tiny work past 255 rows: the 8-warp Gluon tile on 128-key tiles"),
    (lambda c: c.small and c.rows <= 255, _PINGPONG_SMALL_WORK, _PINGPONG_D64,
     "small work: the ping-pong kernel; the Triton fallback keeps two 64-row programs an SM"),
    (lambda c: c.rows <= 255, _PINGPONG, _PINGPONG_D64, _SM90_PINGPONG_WHY),  # head dim 64: 64-row fallback
    (_always, _PINGPONG, _PINGPONG_MANY_ROWS_D64, _SM90_PINGPONG_WHY),
)
_SM90_D256_WHY = ("the ping-pong kernel on 32-key tiles, q in shared memory, no tail warpgroup (a 256-wide row "
                  "doubles every tile)")

sm90_tiles = TileTable(
    "H100 / H200 (227 KB shared memory a block, wgmma, TMA)",
    fp32=TileChoice(TRITON_FP32, "fp32: the Triton kernel on small tiles (its dots run on the FMA units, "
                                 "operands in registers; the 128-row tile would need 288 KB)"),
    rows={
        64: tuple(TileRow(when, d64, why) for when, _, d64, why in _SM90_D64_D128),
        128: tuple(TileRow(when, d128, why) for when, d128, _, why in _SM90_D64_D128),
        256: (
            TileRow(lambda c: c.rows <= 64, _PINGPONG_D256_ONE_WARPGROUP, _SM90_D256_WHY),
            TileRow(lambda c: c.rows <= 128 and c.pairs <= FEW_HEADS
                    and c.pairs * c.cache_rows <= D256_HALF_HEADS_MAX_KV_ROWS, _PINGPONG_D256_HALF_HEADS,
                    _SM90_D256_WHY + "; little work: at an even G, half the query heads a program on one warpgroup "
                                     "of 4 ring slots"),
            TileRow(_always, _PINGPONG_D256_MANY_ROWS, _SM90_D256_WHY),
        ),
    },
)

sm120_tiles = TileTable(
    "RTX PRO 6000 / RTX 5090 (about 99 KB shared memory a block, no wgmma or TMA multicast): the Triton "
    "kernel, two stages, query tiles of at most 64 rows",
    fp32=TileChoice(TRITON_FP32, "fp32: 32-row, 16-key tiles (its dots run on the FMA units, operands in "
                                 "registers)"),
    rows={
        64: (TileRow(_always, VerifyConfig(block_n=64, max_block_m=64, num_warps=8, num_stages=2),
                     "64-key tiles; the tail tile compiles without spills at this head dim only"),),
        128: (TileRow(_always, VerifyConfig(block_n=32, max_block_m=64, num_warps=8, num_stages=2, max_tail_m=0),
                      "32-key tiles: 45 KB at 16 bits"),),
        256: (TileRow(_always, VerifyConfig(block_n=32, max_block_m=32, num_warps=8, num_stages=2, max_tail_m=0),
                      "32-row, 32-key tiles: a 256-wide row doubles every tile"),),
    },
)

# Triton's CPU interpreter runs block operations in numpy: fewer, larger tiles are faster
_INTERPRETER = TileChoice(VerifyConfig(block_n=64, max_block_m=128, num_warps=4, num_stages=1),
                          "the interpreter: large tiles, no memory limits")
interpreter_tiles = TileTable("Triton's CPU interpreter", fp32=_INTERPRETER,
                              rows={d: (TileRow(_always, _INTERPRETER.config, _INTERPRETER.why),)
                                    for d in HEAD_DIMS})


# arch -> table; sm_100 (B200) has Hopper's shared memory but takes no Gluon kernel (the
# target says so); unknown archs take sm_120's, the most conservative
TILE_TABLES = {"sm_90": sm90_tiles, "sm_100": sm90_tiles, "sm_120": sm120_tiles, "interpreter": interpreter_tiles}
# bytes of shared memory a block may use, opt-in maximum
SHARED_MEMORY_LIMITS = {"sm_90": 232448, "sm_100": 232448, "sm_120": 101376}


def arch_name(device) -> str:
    """``"sm_XY"`` for a CUDA device, ``"interpreter"`` for CPU tensors under TRITON_INTERPRET."""
    if device.type != "cuda":
        return "interpreter"
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def tiles_for(arch: str, head_dim: int, element_size: int, rows: int, pairs: int, cache_rows: int) -> TileChoice:
    """The table entry of ``arch`` (unknown archs: sm_120's) for one call; ValueError for a head dim
    no table has."""
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"head dim {head_dim} is not supported; use one of {list(HEAD_DIMS)}")
    return TILE_TABLES.get(arch, sm120_tiles)(head_dim, element_size, rows, pairs, cache_rows)
