"""The tree-verify launch plan: one pure function from a call's shape, the GPU it runs on and a
policy to a frozen :class:`VerifyPlan` (kernel, tiles, splits, grids, workspace, shared memory,
why), cached per distinct call. Neither torch nor triton is imported here.

Work decomposition (flash-decoding with grouped queries): the G query heads of one KV head and
the T tree nodes are packed into the rows of a query tile (packed row m is node m // G, query
head hkv * G + m % G), so each K/V tile serves G heads; the key axis is split into chunks sized by
a wave model of the split kernel plus the merge (:func:`pick_splits`); with several splits each
program writes an fp32 partial and its log2-sum-exp, and a merge kernel combines them.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from .configs import SHARED_MEMORY_LIMITS, VerifyConfig, tiles_for

KERNELS = ("pingpong", "gluon", "triton")
# the split kernels that can merge their own splits (waiting programs: the ping-pong kernel only)
FUSED_MERGE_KERNELS = ("pingpong", "triton", "gluon")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


@dataclass(frozen=True)
class VerifyShape:
    """What a call's plan depends on, read off its tensors (see ``tree_verify_triton.call_shape``).

    cache_rows: S, the caches' rows a request; element_size: bytes of q's dtype (2 or 4);
    descriptors: both caches read as one 2-D tensor a tensor descriptor can describe;
    positive_scale: the softmax scale is > 0 (the Gluon kernels take the row max on raw scores).
    """

    batch: int
    num_nodes: int
    q_heads: int
    kv_heads: int
    head_dim: int
    cache_rows: int
    element_size: int = 2
    descriptors: bool = True
    positive_scale: bool = True

    @property
    def group(self) -> int:
        return self.q_heads // self.kv_heads

    @property
    def packed_rows(self) -> int:
        return self.num_nodes * self.group


@dataclass(frozen=True)
class VerifyTarget:
    """The GPU (or interpreter) a call runs on, as the planner needs it: decided once per device
    and process (``tree_verify_triton.target_of``).

    gluon: this process builds the Hopper Gluon kernels (an sm_90 GPU, a Triton whose Gluon has
    every name the kernels use); dependent_launch: the merge can be a programmatic dependent
    launch (sm_90 or later, a Triton with grid dependency control)."""

    arch: str
    sms: int
    gluon: bool = False
    dependent_launch: bool = False


# eq=False: hashed by identity, so that a plan lookup costs no hashing of its fields
@dataclass(frozen=True, eq=False)
class VerifyPolicy:
    """What the benchmark and the tests vary; :data:`DEFAULT_POLICY` is what every call uses.

    tiles: a table entry instead of the arch table's (tests, tuning); num_splits: a forced split
    count; sms: the SM count the planner assumes (tests of the persistent path on a few SMs).
    tail_only_when_full: the Triton kernel's 16-row tail tile only with one full query tile and a
    grid too full for splits to help (it measured slower elsewhere); wide_tile_min_chunk,
    wide_tile_min_waves: a KV head's one 192-row tile or 128-row tile with an 8-row tail only on
    splits of at least that many keys or grids of at least that many waves (short streams on a
    part-filled GPU take two narrower programs; where a KV head has several wide tiles, narrowing
    them adds a padded tile, which measured slower); short_split_max_keys: the longest split on which
    an entry's ``short_split_tiles`` take the call (0: never);
    split_query_heads: allow ``VerifyConfig.split_query_heads`` and ``split_query_heads_into``;
    persistent*: the ping-pong kernel runs one program an SM over work items on one split of at
    least that many waves of items of at most that many keys; wide_keys_min_chunk: the single
    ping-pong warpgroup's ``gluon_pingpong_64_block_n`` tiles only on splits that long;
    tree_split_relief_tiles: the last of two splits (it also streams the tree) is that many key
    tiles shorter; own_tree_split: the tree's rows in a split of their own after the prefix's
    (``VerifyPlan.own_tree_split``) always (True), never (False) or by :func:`wants_own_tree_split`
    (None), whose longest split is own_tree_split_max_chunk keys; own_tree_split_min_chunk: beside
    it the 64-row Gluon kernel's prefix splits are made finer down to that many keys
    (:func:`finer_prefix_splits`; 0: never); programmatic_merge,
    merge_one_pass: the merge as a programmatic dependent launch, its two passes as straight-line
    code where all splits fit one block; pingpong_programmatic_merge: after the ping-pong kernel
    too always (True), never (False) or by :func:`pingpong_merge_starts_early` (None);
    poison_workspace: fill the split partials with NaN before each launch (a partial the merge
    reads but nobody wrote shows as a wrong output);
    launch_cache: launch a compiled kernel through its C launcher once one call compiled it (no
    Triton dispatch, tensor maps reused: ``triton_launch``); fused_merge, fused_merge_max_bytes:
    eager calls merge their splits in the split kernel (its last program of each query tile) where
    one program reads at most that many bytes of partials (more would take one SM longer than the
    merge's own launch and its grid); waiting_merge: past that bound, the ping-pong kernel's eager
    calls still launch once, with programs appended to its grid that wait for a query tile's
    splits and merge its rows between them (:func:`pick_merge_waiters`);
    sliced_waiters_max_split_bytes: waiters that merge head-dim slices read a block of splits unrolled
    only where one split's partials of a (request, KV head) span at most that many bytes (past it,
    unrolled, they measured much slower than two launches on an H200: docs/kernels-performance.md,
    "Decisions"), past it as one load from WAITER_VECTOR_MIN_BLOCK splits;
    merge_head_slices: a forced head-dim slice count of the merge's own launch and its waiters
    (:func:`pick_merge_slices`); merge_vector_loads: blocks of MERGE_VECTOR_MIN_BLOCK splits or more
    read as one load by the merge's own launch and its waiters (False: unrolled, and no waiters past
    FUSED_MERGE_MAX_SPLITS or past sliced_waiters_max_split_bytes)."""

    tiles: VerifyConfig | None = None
    num_splits: int | None = None
    sms: int | None = None
    tail_only_when_full: bool = True
    wide_tile_min_chunk: int = 2048
    wide_tile_min_waves: float = 1.5
    short_split_max_keys: int = 512
    split_query_heads: bool = True
    persistent: bool = True
    persistent_min_waves: float = 1.5
    persistent_max_keys: int = 2048
    wide_keys_min_chunk: int = 2048
    tree_split_relief_tiles: int = 1
    own_tree_split: bool | None = None
    own_tree_split_max_chunk: int = 256
    own_tree_split_min_chunk: int = 128
    programmatic_merge: bool = True
    pingpong_programmatic_merge: bool | None = None
    merge_one_pass: bool = True
    poison_workspace: bool = False
    launch_cache: bool = True
    fused_merge: bool = True
    fused_merge_max_bytes: int = 256 * 1024
    waiting_merge: bool = True
    sliced_waiters_max_split_bytes: int = 128 * 1024
    merge_head_slices: int | None = None
    merge_vector_loads: bool = True


DEFAULT_POLICY = VerifyPolicy()


@dataclass(frozen=True)
class MergePlan:
    """The merge kernel of a call with several splits: SPLIT_BLOCK splits unrolled per block,
    MERGE_ROWS rows and head_dim / head_slices columns a program, one block of straight-line code
    where all splits fit it, launched as the split kernel's programmatic dependent where
    ``starts_early``. ``fused``: an eager call (not a graph capture) folds it into the split kernel
    instead, whose last program to finish a query tile merges that tile's rows (one launch instead
    of two, a launch's host time less); a tile's last program merges every column (head_slices 1).
    ``waiters``: a fused merge's programs a query tile appended to the split kernel's grid, which
    wait for the tile's splits and share its row blocks, each block's columns in head_slices
    slices as the merge's own launch takes them (0: the tile's last split merges it alone).
    ``vector_loads``: the merge's own launch reads each block of splits as one load
    (MERGE_VECTOR_MIN_BLOCK); ``vector_waiters``: its waiters do."""

    split_block: int
    merge_rows: int
    grid: int
    one_block: bool
    starts_early: bool
    fused: bool = False
    head_slices: int = 1
    vector_loads: bool = False
    waiters: int = 0
    vector_waiters: bool = False

    def folded_constexprs(self) -> dict:
        """The split kernel's constexprs that fold this merge in (``fused`` plans)."""
        folded = dict(FUSED_MERGE=True, MERGE_ROWS=self.merge_rows, SPLIT_BLOCK=self.split_block)
        if self.waiters:
            folded["MERGE_WAITERS"] = self.waiters
        if self.head_slices > 1:
            folded["MERGE_SLICES"] = self.head_slices
        if self.vector_waiters:
            folded["MERGE_VECTOR"] = True
        return folded


# eq=False: hashed by identity (the launcher keys its compiled kernels by plan)
@dataclass(frozen=True, eq=False)
class VerifyPlan:
    """Everything a launch needs beyond the tensors.

    kernel: "pingpong" (the warp-specialised Gluon kernel), "gluon" (the 64- / 128-row Gluon
    kernel) or "triton"; config: the table entry in effect (a Gluon entry's Triton fallback where
    the Triton kernel runs); block_m x num_m_tiles (+ tail_m) packed rows a (request, KV head),
    head_split programs sharing one KV head's query heads; block_n, stages, num_warps: the split
    kernel's; tma: the Triton kernel loads its mask-free key tiles through tensor descriptors;
    chunk keys a split, num_splits splits, base_programs programs a split; grid: the split
    kernel's launch grid (persistent: one program an SM); rows_pad: partial rows a (request, KV
    head); workspace_bytes: the fp32 partials and log2-sum-exps (0: one split, written directly);
    shared_bytes: the split kernel's shared memory (an upper bound, from the element size);
    why: the table's reason and the planner's; own_tree_split: the last split streams only the
    tree's rows (its keys masked by the ancestor mask), the others only prefix rows, so that the
    tree's masked tiles run beside the prefix's stream instead of after one split's share of it."""

    kernel: str
    config: VerifyConfig
    group: int
    kv_heads: int
    block_m: int
    num_m_tiles: int
    tail_m: int
    head_split: int
    block_n: int
    stages: int
    num_warps: int
    tma: bool
    chunk: int
    num_splits: int
    base_programs: int
    grid: tuple[int, int]
    persistent: bool
    rows_pad: int
    workspace_bytes: int
    shared_bytes: int
    merge: MergePlan | None
    why: str
    own_tree_split: bool = False

    @property
    def single_split(self) -> bool:
        return self.num_splits == 1

    @property
    def prefix_splits(self) -> int:
        """The splits over the prefix's keys (the split model's count)."""
        return self.num_splits - self.own_tree_split

    @property
    def fused_grid(self) -> tuple[int, int]:
        """The split kernel's grid with the merge folded in: the merge's waiting programs, if any,
        are rows past the splits' (the highest program ids, dispatched after every split's)."""
        waiters = self.merge.waiters if self.merge is not None else 0
        return (self.grid[0], self.grid[1] + waiters)


# A query tile's fixed cost (its K/V stream and loop overhead) counted as this many padded rows.
TILE_COST_ROWS = 32
# The split model's costs in key rows of one program's stream: a program's fixed cost (prologue,
# pipeline fill, tree tile, epilogue), the merge launch's, and each split's share of the merge
# (fitted on an H200 at batch 1: docs/kernels-performance.md, "Decisions").
PROGRAM_COST_KEYS = 256
MERGE_COST_KEYS = 192
MERGE_COST_KEYS_PER_SPLIT = 35
# rows of the ping-pong kernel's tail warpgroup (the N of its key-major MMAs)
PINGPONG_TAIL_ROWS = 8
# the rows one program of a split KV head takes at most: a 64-row warpgroup and the 8-row tail
SPLIT_HEAD_MAX_ROWS = 64 + PINGPONG_TAIL_ROWS
# The merge: MERGE_ELEMENTS fp32 partial values in flight a program (64 a thread at 4 warps),
# at most MERGE_ROWS rows a program.
MERGE_ELEMENTS = 8192
MERGE_ROWS = 8
# a sliced merge program's columns at least: one 128-byte line of an fp32 partial row; the splits
# of one block of the merge's own launch at most (each block one load)
MERGE_MIN_SLICE = 32
MERGE_MAX_SPLIT_BLOCK = 128
# a query tile's last program merging its splits unrolls them: at most this many (waiting programs
# read blocks of MERGE_VECTOR_MIN_BLOCK or more as one load, up to one block); and the most splits
# the split model prices at an entry's cheaper merge (one block of the merge's own launch)
FUSED_MERGE_MAX_SPLITS = 64
CHEAP_MERGE_MAX_SPLITS = 128
# a block of at least this many splits is read as one [splits, rows, columns] load; smaller blocks
# stay unrolled (their sum across splits stays in each thread's registers, no reduction across threads)
MERGE_VECTOR_MIN_BLOCK = 64
# sliced waiters whose splits' partials lie far apart read a block of at least this many splits as one
# load (unrolled there, they were slower than two launches: docs/kernels-performance.md, "Decisions")
WAITER_VECTOR_MIN_BLOCK = 32
# the ping-pong kernel's merge starts early (a programmatic dependent) only beside the tree's own split
# and at most this many splits: elsewhere its early programs cost more than the launch they hide
# (docs/kernels-performance.md, "Decisions")
PINGPONG_EARLY_MERGE_MAX_SPLITS = 17


def pick_block_m(packed_rows: int, max_block_m: int, min_block_m: int = 16, extra_sizes: tuple = ()) -> int:
    """Query-tile rows: the power of two in [min_block_m, max_block_m] (or one of ``extra_sizes``)
    minimising padded rows + TILE_COST_ROWS a tile, ties to the larger: 33 nodes x G = 4 = 132
    rows take three 64-row tiles (192 rows) rather than two of 128 (256), or one of 192."""
    sizes = []
    size = min(max(16, min_block_m), max(16, max_block_m))
    while size <= max(16, max_block_m):
        sizes.append(size)
        size *= 2
    best = None
    for size in sorted(set(sizes) | set(extra_sizes)):
        cost = cdiv(packed_rows, size) * (size + TILE_COST_ROWS)
        if best is None or cost <= best[0]:
            best = (cost, size)
    return best[1]


def pick_query_tiles(packed_rows: int, max_block_m: int, max_tail_m: int, min_block_m: int = 16,
                     extra_sizes: tuple = ()) -> tuple[int, int, int]:
    """(block_m, num_m_tiles, tail_m): rows past whole max_block_m tiles, at most ``max_tail_m``
    (T = 2^k + 1: 68 = 64 + 4 rows at T = 17, G = 4), ride in a tail tile (a power of two >= 16) of
    the full tiles' programs, which stream the cache once, instead of another program."""
    cap = max(16, max_block_m)
    full, rem = divmod(packed_rows, cap)
    if full >= 1 and 0 < rem <= max_tail_m:
        return cap, full, max(16, next_power_of_2(rem))
    block_m = pick_block_m(packed_rows, max_block_m, min_block_m, extra_sizes)
    return block_m, cdiv(packed_rows, block_m), 0


def split_chunks(prefix_rows: int, wanted: int, block_n: int) -> tuple[int, int]:
    """(chunk, splits): about ``wanted`` chunks of whole key tiles covering ``prefix_rows``."""
    chunk = cdiv(cdiv(prefix_rows, wanted), block_n) * block_n
    return chunk, cdiv(prefix_rows, chunk)


def relieve_tree_split(chunk: int, num_splits: int, prefix_rows: int, block_n: int, tail_m: int,
                       relief_tiles: int = 1) -> int:
    """The chunk that leaves the last of two splits (which also streams the tree's masked tiles)
    ``relief_tiles`` key tiles short (one more beside a tail), where the splits stay two."""
    if num_splits != 2 or not relief_tiles:
        return chunk
    longer = chunk + (relief_tiles + (tail_m > 0)) * block_n
    return longer if cdiv(prefix_rows, longer) == 2 else chunk


def wants_own_tree_split(chunk: int, num_splits: int, base_programs: int, sms: int,
                         policy: VerifyPolicy) -> bool:
    """Whether the tree's rows take a split of their own (``VerifyPlan.own_tree_split``): on
    short splits, where the tree's masked tiles are a large share of the split that would hold
    them, and only where the extra split keeps one program an SM and the merge's splits in one
    block (a second wave, or a second block, cost more than the tree's tiles: measured on the
    Hopper Gluon kernels, docs/kernels-performance.md, "Decisions")."""
    return (chunk <= policy.own_tree_split_max_chunk and base_programs * (num_splits + 1) <= sms
            and num_splits + 1 <= MERGE_MAX_SPLIT_BLOCK)


def partial_bytes(rows: int, width: int) -> int:
    """Bytes of one split's fp32 partials for ``rows`` rows of ``width`` columns, with their
    log2-sum-exps (the workspace, and what a folded merge or a waiter reads)."""
    return rows * (width + 1) * 4


def finer_prefix_splits(chunk: int, prefix_rows: int, base_programs: int, slots: int, block_n: int,
                        split_bytes: int, policy: VerifyPolicy) -> int:
    """The prefix splits' chunk beside the tree's own split on the 64-row Gluon kernel: the finest
    multiple of ``block_n`` from the model's down to ``policy.own_tree_split_min_chunk`` keys whose
    programs still fit the resident ``slots`` of one wave (two programs an SM, each one's start and
    end hidden under the other's stream, where the split model prices a program as if alone) and
    whose merge still folds into eager calls (all splits' partials, ``split_bytes`` each, within
    ``policy.fused_merge_max_bytes``: a second launch costs an eager call more host time than the
    finer splits save; docs/kernels-performance.md, "Decisions")."""
    if not policy.own_tree_split_min_chunk:
        return chunk
    best = chunk
    finer = chunk - block_n
    while finer >= policy.own_tree_split_min_chunk:
        splits = cdiv(prefix_rows, finer) + 1
        if base_programs * splits > slots or splits * split_bytes > policy.fused_merge_max_bytes:
            break
        best, finer = finer, finer - block_n
    return best


def pick_splits(base_programs: int, prefix_rows: int, block_n: int, slots: int, heads: int,
                rows: int, key_cost: float = 1.0, min_split_keys: int = VerifyConfig.min_split_keys,
                merge_split_keys: int = 0) -> tuple[int, int]:
    """(chunk, num_splits) minimising a wave model: ``slots`` programs run at once and a wave
    takes as long as its longest program, about waves x (chunk + PROGRAM_COST_KEYS) x ``key_cost``
    (the tile's cost of a key row against the tiles the model was fitted on), plus the merge (its
    launch, the partials written and read back, a cost a split: ``merge_split_keys`` where all
    splits fit one block of the merge, else MERGE_COST_KEYS_PER_SPLIT). Candidates: split counts filling
    whole waves, powers of two within one wave, and 1, each split at least ``min_split_keys`` key
    rows. Worked example (H200, 132 SMs x 2 slots): B8 x 8 KV heads at L8k, 64 programs: 4 splits
    (256 programs, one wave)."""
    prefix_rows = max(prefix_rows, 1)
    max_splits = max(1, prefix_rows // min_split_keys)
    candidates = {1} | {min(max_splits, max(1, k * slots // base_programs)) for k in range(1, 9)}
    candidates |= {1 << j for j in range(max_splits.bit_length()) if (1 << j) * base_programs <= slots}
    best = None
    for wanted in sorted(candidates):
        chunk, splits = split_chunks(prefix_rows, wanted, block_n)
        cost = cdiv(base_programs * splits, slots) * (chunk + PROGRAM_COST_KEYS) * key_cost
        if splits > 1:
            per_split = (merge_split_keys if merge_split_keys and splits <= CHEAP_MERGE_MAX_SPLITS
                         else MERGE_COST_KEYS_PER_SPLIT)
            cost += MERGE_COST_KEYS + cdiv(2 * splits * rows * heads, slots) + per_split * splits
        if best is None or cost < best[0]:
            best = (cost, chunk, splits)
    return best[1], best[2]


def merge_tiles(num_splits: int, head_dim: int, head_slices: int = 1) -> tuple[int, int]:
    """(split_block, merge_rows) of a program merging head_dim / head_slices columns: all splits in
    one block where MERGE_ELEMENTS allows it at two rows, then as many rows as fit (at most
    MERGE_ROWS); with many splits a program takes few rows, so that many programs share the
    latency. A sliced merge keeps two rows a program: its slices are there to add programs."""
    width = head_dim // head_slices
    split_block = max(2, min(next_power_of_2(num_splits), MERGE_ELEMENTS // (2 * width), MERGE_MAX_SPLIT_BLOCK))
    if head_slices > 1:
        return split_block, 2
    return split_block, max(2, min(MERGE_ROWS, MERGE_ELEMENTS // (split_block * width)))


def pick_merge_slices(num_splits: int, head_dim: int, rows: int, pairs: int, sms: int) -> int:
    """Head-dim slices of the merge's own launch: each program merges its rows' columns of one
    slice (reading every split's log-sum-exps, small, and only its slice of the partials). Where
    whole rows take several blocks of splits (a walk that lengthens with the splits), the fewest
    slices whose programs fill the SMs with all splits in one block, at most head_dim /
    MERGE_MIN_SLICE; else 1 (a merge of one block of whole rows measured no faster sliced)."""
    if num_splits <= merge_tiles(num_splits, head_dim)[0]:
        return 1
    slices = 1
    while True:
        split_block, merge_rows = merge_tiles(num_splits, head_dim, slices)
        if ((pairs * cdiv(rows, merge_rows) * slices >= sms and num_splits <= split_block)
                or head_dim // (2 * slices) < MERGE_MIN_SLICE):
            return slices
        slices *= 2


def pick_merge_waiters(num_splits: int, tile_rows: int, merge_rows: int, head_dim: int, tiles: int, sms: int,
                       max_bytes: int, head_slices: int = 1) -> int:
    """Programs a query tile that wait for its splits and then merge its rows between them, in the
    split kernel's own launch (0: none fit, the merge keeps its own launch). Their units are a
    MERGE_ROWS-row block's columns of one of ``head_slices`` head-dim slices. As many waiters as
    one a free SM (every waiter of the launch in one wave) up to one a unit, and only where each
    then reads at most ``max_bytes`` of partials. They are the grid's last programs: dispatched
    in program order after every split, they wait only on resident programs.

    Worked example, B8-T9-H6/1/256-L32k on 132 SMs: 8 tiles of 54 rows on 16 splits, 2-row
    blocks of 16 x 2 x 257 x 4 = 32.9 KB; 132 // 8 = 16 waiters a tile, 2 blocks (66 KB) each.
    B1-T9-H24/4/256-L8k: 4 tiles of 54 rows on 32 splits, two slices of 128 columns: 54 units of
    32 x 2 x 129 x 4 = 33 KB; 33 waiters a tile, 2 units each."""
    units = cdiv(tile_rows, merge_rows) * head_slices
    waiters = min(sms // tiles, units)
    if waiters < 2:
        return 0
    unit_bytes = num_splits * partial_bytes(merge_rows, head_dim // head_slices)
    return waiters if cdiv(units, waiters) * unit_bytes <= max_bytes else 0


def pingpong_merge_starts_early(num_splits: int, own_tree_split: bool, policy: VerifyPolicy) -> bool:
    """Whether the merge's own launch after the ping-pong kernel is its programmatic dependent:
    ``policy.pingpong_programmatic_merge``, or by default beside the tree's own split on at most
    PINGPONG_EARLY_MERGE_MAX_SPLITS splits (small grids of short splits, where the merge's launch is
    a large share of the call)."""
    if policy.pingpong_programmatic_merge is not None:
        return policy.pingpong_programmatic_merge
    return own_tree_split and num_splits <= PINGPONG_EARLY_MERGE_MAX_SPLITS


def runs_pingpong(cfg: VerifyConfig, block_m: int) -> bool:
    """Whether the Gluon kernel of this tile is the ping-pong one: 128- and 192-row tiles, and
    64-row ones (with or without the tail) where the entry asks for those."""
    return cfg.gluon_pingpong and (block_m in (128, 192) or (block_m == 64 and cfg.gluon_pingpong_64))


def pingpong_grid(grid: tuple[int, int], sms: int, block_m: int, chunk: int, policy: VerifyPolicy) -> tuple[int, int]:
    """The ping-pong kernel's grid: one program a work item, or, on one split of at least
    ``persistent_min_waves`` waves of items of at most ``persistent_max_keys`` keys and at most two
    warpgroups (three keep q in shared memory), one persistent program an SM."""
    programs, splits = grid
    if (policy.persistent and splits == 1 and programs >= policy.persistent_min_waves * sms and block_m <= 128
            and chunk <= policy.persistent_max_keys):
        return (sms, 1)
    return grid


def _gluon_runs(shape: VerifyShape, target: VerifyTarget, tiles: QueryTiles) -> bool:
    """Whether this call's Gluon entry can run its Gluon kernel: a Hopper target that builds it,
    16-bit inputs, a positive scale, caches tensor descriptors can describe, and a tile that kernel
    has (no Triton tail tile, >= 16 rows a warp or a ping-pong tile; the 64-row kernel up to head
    dim 128)."""
    cfg = tiles.config
    pingpong = runs_pingpong(cfg, tiles.block_m)
    return (cfg.gluon and target.gluon and shape.element_size == 2 and shape.positive_scale and shape.descriptors
            and (shape.head_dim <= 128 or pingpong)
            and (tiles.tail_m == 0 or (cfg.gluon_pingpong and tiles.tail_m == PINGPONG_TAIL_ROWS))
            and (tiles.block_m >= 16 * cfg.num_warps or pingpong)
            and (tiles.head_split == 1 or pingpong))


def _triton_fallback(cfg: VerifyConfig) -> VerifyConfig | None:
    """The entry for a call its Gluon kernel cannot take, where the Triton kernel wants other
    tiles (192-row tiles and 8-row tails exist only in the ping-pong kernel)."""
    if cfg.triton_fallback is not None:
        return cfg.triton_fallback
    if cfg.gluon_pingpong_192 or cfg.gluon_pingpong_tail or cfg.gluon_pingpong_64:
        return dataclasses.replace(cfg, gluon_pingpong_192=False, gluon_pingpong_tail=False, gluon_pingpong_64=False)
    return None


@dataclass(frozen=True)
class QueryTiles:
    """One table entry's query tiles and splits for a call (:func:`_tiles`): block_m x num_m_tiles
    (+ tail_m) packed rows a (request, KV head), head_split programs sharing one KV head's query
    heads, chunk keys a split, num_splits splits, grid (programs a split, splits), why."""

    config: VerifyConfig
    block_m: int
    num_m_tiles: int
    tail_m: int
    chunk: int
    num_splits: int
    grid: tuple[int, int]
    head_split: int
    why: str


HEADS_SPLIT = "query heads split in two programs a KV head"


def _also(why: str, reason: str) -> str:
    return f"{why}; {reason}" if why else reason


@functools.lru_cache(maxsize=4096)
def _tiles(batch: int, num_nodes: int, group: int, kv_heads: int, cache_rows: int, sms: int, cfg: VerifyConfig,
           policy: VerifyPolicy) -> QueryTiles:
    """Query tiles and splits of one table entry (the planner's core; pure)."""
    packed = num_nodes * group
    into = cfg.split_query_heads_into
    if into is not None and policy.split_query_heads and group % 2 == 0 and 64 < packed <= 128:
        # the plan of a call with twice the KV heads at half the group, on the entry's half-head tiles
        half = _tiles(batch, num_nodes, group // 2, kv_heads * 2, cache_rows, sms,
                      dataclasses.replace(into, merge_split_keys=cfg.merge_split_keys), policy)
        return dataclasses.replace(half, head_split=2, why=_also(half.why, HEADS_SPLIT))
    if (policy.split_query_heads and cfg.split_query_heads and group % 2 == 0
            and 128 < packed <= 2 * SPLIT_HEAD_MAX_ROWS):
        plain = dataclasses.replace(cfg, split_query_heads=False)
        whole = _tiles(batch, num_nodes, group, kv_heads, cache_rows, sms, plain, policy)
        if whole.num_m_tiles > 1:
            # two programs a KV head anyway: half its query heads each, the plan of a call with
            # twice the KV heads at half the group
            half = _tiles(batch, num_nodes, group // 2, kv_heads * 2, cache_rows, sms, plain, policy)
            return dataclasses.replace(half, head_split=2, why=_also(half.why, HEADS_SPLIT))
        return whole
    slots = cfg.resident_per_sm * sms
    extra = (192,) if cfg.gluon_pingpong_192 else ()
    whole, over = divmod(packed, 128)
    why = []
    # the tail warpgroup unless 192-row tiles need fewer programs (520 rows: 3 x 192 against 4 x 128 + 8)
    if (cfg.gluon_pingpong_tail and whole >= 1 and 0 < over <= PINGPONG_TAIL_ROWS
            and not (extra and cdiv(packed, 192) < whole)):
        block_m, num_m_tiles, tail_m = 128, whole, PINGPONG_TAIL_ROWS
    elif cfg.gluon_pingpong_64 and cfg.gluon_pingpong_tail and 64 < packed <= 64 + PINGPONG_TAIL_ROWS:
        block_m, num_m_tiles, tail_m = 64, 1, PINGPONG_TAIL_ROWS
    else:
        block_m, num_m_tiles, tail_m = pick_query_tiles(packed, cfg.max_block_m, cfg.max_tail_m, cfg.min_block_m,
                                                        extra)
    if tail_m and policy.tail_only_when_full and tail_m != PINGPONG_TAIL_ROWS and (
            num_m_tiles > 1 or batch * kv_heads * (num_m_tiles + 1) < slots):
        block_m, num_m_tiles, tail_m = pick_query_tiles(packed, cfg.max_block_m, 0, cfg.min_block_m, extra)
        why.append("no tail tile: splits fill the GPU")
    if cfg.gluon_pingpong_64_block_n and block_m == 64 and runs_pingpong(cfg, block_m):
        # the single ping-pong warpgroup's own key tiles, the splits following, on long splits
        # of a grid that is not persistent
        tiles = cfg.gluon_pingpong_64_block_n
        wide = _tiles(batch, num_nodes, group, kv_heads, cache_rows, sms,
                      dataclasses.replace(cfg, block_n=tiles, gluon_block_n=tiles, gluon_pingpong_64_block_n=0),
                      policy)
        if (wide.chunk >= policy.wide_keys_min_chunk
                and pingpong_grid(wide.grid, sms, block_m, wide.chunk, policy) == wide.grid):
            return dataclasses.replace(wide, why=_also(wide.why, f"{tiles}-key tiles on long splits"))
        cfg = dataclasses.replace(cfg, gluon_pingpong_64_block_n=0)
    base_programs = batch * kv_heads * num_m_tiles
    prefix_rows = max(cache_rows - num_nodes, 1)
    chunk, num_splits = pick_splits(base_programs, prefix_rows, cfg.block_n, slots, batch * kv_heads, packed,
                                    cfg.split_key_cost, cfg.min_split_keys, cfg.merge_split_keys)
    wide = block_m == 192 or (block_m == 128 and tail_m == PINGPONG_TAIL_ROWS)
    if (wide and num_m_tiles == 1 and chunk < policy.wide_tile_min_chunk
            and base_programs * num_splits < policy.wide_tile_min_waves * slots):
        # short streams on a part-filled GPU: more, narrower programs
        narrow = _tiles(batch, num_nodes, group, kv_heads, cache_rows, sms,
                        dataclasses.replace(cfg, gluon_pingpong_192=False, gluon_pingpong_tail=False), policy)
        return dataclasses.replace(narrow,
                                   why=_also(narrow.why, "narrower programs on short streams of a part-filled GPU"))
    if cfg.short_split_tiles is not None and chunk <= policy.short_split_max_keys:
        # short splits: the entry's narrower tiles, measured faster there and slower on long splits
        short = _tiles(batch, num_nodes, group, kv_heads, cache_rows, sms,
                       dataclasses.replace(cfg.short_split_tiles, merge_split_keys=cfg.merge_split_keys), policy)
        return dataclasses.replace(short, why=_also(short.why, "narrower programs on short splits"))
    chunk = relieve_tree_split(chunk, num_splits, prefix_rows, cfg.block_n, tail_m, policy.tree_split_relief_tiles)
    return QueryTiles(config=cfg, block_m=block_m, num_m_tiles=num_m_tiles, tail_m=tail_m, chunk=chunk,
                      num_splits=num_splits, grid=(base_programs, num_splits), head_split=1, why="; ".join(why))


def shared_memory_bytes(kernel: str, cfg: VerifyConfig, block_m: int, tail_m: int, block_n: int, stages: int,
                        head_dim: int, element_size: int, arch: str = "") -> int:
    """The split kernel's shared memory from its tiles, the element size and the arch: the K/V ring,
    q where it lives in shared memory, the score tile's layout conversions, the tail's buffers, the
    barriers (for the Triton kernel an upper bound; the compile check compares both)."""
    tile = block_n * head_dim * element_size
    if kernel == "pingpong":
        warpgroups = max(block_m // 64, 1)
        q = warpgroups * 64 * head_dim * element_size if (warpgroups == 3 or head_dim > 128) else 64 * head_dim * 2
        own_masked = 2 * 2 * tile if (warpgroups == 1 and tail_m) else 0
        tail = (tail_m * head_dim + 2 * tail_m * block_n) * element_size + 64 if tail_m else 0
        return 2 * stages * tile + q + own_masked + tail + 1024
    if kernel == "gluon":
        return 2 * stages * tile + block_m * head_dim * element_size + 1024
    q = (block_m + tail_m) * head_dim * element_size
    convert = (block_m + tail_m) * block_n * 4
    if arch == "sm_90" and element_size == 2:
        # 16-bit dots become warpgroup MMAs there, whose score tile took twice this in the compile check
        convert *= 2
    return 2 * stages * tile + q + convert + 1024


def _fit_shared_memory(cfg: VerifyConfig, arch: str, block_m: int, head_dim: int, element_size: int) -> VerifyConfig:
    """The Triton entry with fewer stages, then narrower key tiles, until its shared memory fits
    ``arch`` (a table entry sized for 16-bit inputs, called with fp32 ones)."""
    limit = SHARED_MEMORY_LIMITS.get(arch)
    if limit is None:
        return cfg
    while shared_memory_bytes("triton", cfg, block_m, 0, cfg.block_n, cfg.num_stages, head_dim, element_size,
                              arch) > limit:
        if cfg.num_stages > 1:
            cfg = dataclasses.replace(cfg, num_stages=cfg.num_stages - 1)
        elif cfg.block_n > 16:
            cfg = dataclasses.replace(cfg, block_n=cfg.block_n // 2)
        else:
            raise ValueError(f"no {arch} tile of {block_m} rows fits head dim {head_dim} at {element_size} bytes")
    return cfg


def plan_merge(num_splits: int, head_dim: int, rows: int, pairs: int, tile_rows: int, rows_pad: int,
               tiles: int, kernel: str, persistent: bool, sms: int, dependent_launch: bool,
               policy: VerifyPolicy, own_tree_split: bool = False) -> MergePlan:
    """The merge of a call's ``num_splits`` splits: ``rows`` packed rows of each of ``pairs``
    (request, KV head) pairs, ``tile_rows`` a query tile, one split's partials ``rows_pad`` rows
    apart, ``tiles`` query tiles a split. The rules, in the order they apply:

    1. Eager calls fold it into the split kernel, whose last program of a query tile merges the
       tile's whole rows: where the kernel can, all splits fit one block (:func:`merge_tiles`) and
       that program reads at most ``policy.fused_merge_max_bytes``. Graphs launch the same merge.
    2. Else the merge's own launch (graphs always take it) takes head-dim slices where whole rows
       would walk several blocks of splits (:func:`pick_merge_slices`). It starts early, its
       programs waiting for the split grid's end (a programmatic dependent launch), after the
       Triton and 64-row Gluon kernels, and after the ping-pong kernel where
       :func:`pingpong_merge_starts_early` says so.
    3. Past rule 1's bound, the ping-pong kernel's eager calls still fold it: waiting programs
       (:func:`pick_merge_waiters`) share the tile's row blocks at rule 2's slices, all splits in
       one block, a block of MERGE_VECTOR_MIN_BLOCK splits or more as one load (past
       FUSED_MERGE_MAX_SPLITS only so); sliced, where one split's partials span more than
       ``policy.sliced_waiters_max_split_bytes``, only as one load, from WAITER_VECTOR_MIN_BLOCK."""
    split_block, merge_rows = merge_tiles(num_splits, head_dim)
    one_block = policy.merge_one_pass and num_splits <= split_block
    folds_here = policy.fused_merge and kernel in FUSED_MERGE_KERNELS and not persistent
    fused = (folds_here and one_block and num_splits <= FUSED_MERGE_MAX_SPLITS
             and num_splits * partial_bytes(tile_rows, head_dim) <= policy.fused_merge_max_bytes)
    slices = 1 if fused else (policy.merge_head_slices or pick_merge_slices(num_splits, head_dim, rows, pairs, sms))
    if slices > 1:
        split_block, merge_rows = merge_tiles(num_splits, head_dim, slices)
        one_block = policy.merge_one_pass and num_splits <= split_block
    waiters = 0
    vector_loads = policy.merge_vector_loads and split_block >= MERGE_VECTOR_MIN_BLOCK
    far = slices > 1 and rows_pad * head_dim * 4 > policy.sliced_waiters_max_split_bytes
    vector_waiters = policy.merge_vector_loads and split_block >= (WAITER_VECTOR_MIN_BLOCK if far
                                                                   else MERGE_VECTOR_MIN_BLOCK)
    if (folds_here and one_block and not fused and policy.waiting_merge and kernel == "pingpong"
            and (not far or vector_waiters) and (num_splits <= FUSED_MERGE_MAX_SPLITS or vector_waiters)):
        waiters = pick_merge_waiters(num_splits, tile_rows, merge_rows, head_dim, tiles, sms,
                                     policy.fused_merge_max_bytes, slices)
        fused = waiters > 0
    return MergePlan(split_block, merge_rows, pairs * cdiv(rows, merge_rows) * slices, one_block,
                     policy.programmatic_merge and dependent_launch
                     and (kernel != "pingpong" or pingpong_merge_starts_early(num_splits, own_tree_split, policy)),
                     fused=fused,
                     head_slices=slices, vector_loads=vector_loads, waiters=waiters,
                     vector_waiters=vector_waiters and waiters > 0)


@functools.lru_cache(maxsize=4096)
def plan_verify(shape: VerifyShape, target: VerifyTarget, policy: VerifyPolicy = DEFAULT_POLICY) -> VerifyPlan:
    """The plan of one call: the arch table's entry (or ``policy.tiles``), its query tiles and
    splits, the kernel that runs them (the entry's Gluon kernel where the call allows it, else
    the Triton kernel on the entry's Triton fallback), the grids, the merge and the workspace.
    Pure and cached: a call of the same shape on the same target and policy reuses it.

    An entry whose merge is priced cheaper a split (``VerifyConfig.merge_split_keys``) keeps the
    split count of the default price where only that count's merge folds into the split kernel's
    last program: the merge's own launch costs an eager call more host time than the finer splits
    save. (A count whose merge needs waiting programs is not preferred so: it would move graph
    plans to coarser splits too.)"""
    plan = _plan(shape, target, policy, cheap_merge=True)
    if plan.merge is not None and not plan.merge.fused and plan.config.merge_split_keys and policy.num_splits is None:
        folded = _plan(shape, target, policy, cheap_merge=False)
        if folded.merge is not None and folded.merge.fused and not folded.merge.waiters:
            return dataclasses.replace(folded,
                                       why=_also(folded.why, "the splits whose merge folds into the split kernel"))
    return plan


def _plan(shape: VerifyShape, target: VerifyTarget, policy: VerifyPolicy, cheap_merge: bool) -> VerifyPlan:
    """:func:`plan_verify`'s plan with the entry's own merge price, or (``cheap_merge`` False) the
    default one."""
    sms = policy.sms or target.sms
    pairs = shape.batch * shape.kv_heads
    if policy.tiles is not None:
        cfg, why = policy.tiles, "the policy's tiles"
    else:
        choice = tiles_for(target.arch, shape.head_dim, shape.element_size, shape.packed_rows, pairs,
                           shape.cache_rows)
        cfg, why = choice.config, choice.why
    if not cheap_merge:
        cfg = dataclasses.replace(cfg, merge_split_keys=0)
    args = (shape.batch, shape.num_nodes, shape.group, shape.kv_heads, shape.cache_rows, sms)
    tiles = _tiles(*args, cfg, policy)
    gluon = _gluon_runs(shape, target, tiles)
    if not gluon and (fallback := _triton_fallback(tiles.config)) is not None:
        tiles = _tiles(*args, fallback, policy)
        gluon = _gluon_runs(shape, target, tiles)
        why += "; the Triton fallback (the Gluon kernel cannot take this call)"
    cfg = tiles.config
    block_m, tail_m, head_split = tiles.block_m, tiles.tail_m, tiles.head_split
    if gluon:
        kernel = "pingpong" if runs_pingpong(cfg, block_m) else "gluon"
        block_n, stages = cfg.gluon_block_n or cfg.block_n, cfg.gluon_stages or cfg.num_stages
        num_warps = 4 if kernel == "pingpong" else cfg.num_warps
    else:
        kernel = "triton"
        cfg = _fit_shared_memory(cfg, target.arch, block_m + tail_m, shape.head_dim, shape.element_size)
        block_n, stages, num_warps = cfg.block_n, cfg.num_stages, cfg.num_warps
    chunk, num_splits = tiles.chunk, tiles.num_splits
    prefix_rows = max(shape.cache_rows - shape.num_nodes, 1)
    if policy.num_splits is not None:
        chunk, num_splits = split_chunks(prefix_rows, policy.num_splits, cfg.block_n)
    own_tree_split = policy.own_tree_split
    if own_tree_split is None:
        own_tree_split = (gluon and policy.num_splits is None
                          and wants_own_tree_split(chunk, num_splits, tiles.grid[0], sms, policy))
    tile_rows = min(block_m + tail_m, shape.packed_rows // head_split)
    if own_tree_split:
        if kernel == "gluon" and block_m == 64 and policy.num_splits is None:
            chunk = finer_prefix_splits(chunk, prefix_rows, tiles.grid[0], sms * cfg.resident_per_sm, block_n,
                                        partial_bytes(tile_rows, shape.head_dim), policy)
        num_splits = cdiv(prefix_rows, chunk) + 1
    base_programs = tiles.grid[0]
    grid = (base_programs, num_splits)
    persistent = False
    if kernel == "pingpong":
        persistent_grid = pingpong_grid(grid, sms, block_m, chunk, policy)
        persistent, grid = persistent_grid != grid, persistent_grid
    kv_heads = shape.kv_heads * head_split
    rows_pad = tiles.num_m_tiles * block_m + tail_m
    merge, workspace = None, 0
    if num_splits > 1:
        merge = plan_merge(num_splits, shape.head_dim, shape.packed_rows // head_split, shape.batch * kv_heads,
                           tile_rows, rows_pad, base_programs, kernel, persistent, sms, target.dependent_launch,
                           policy, own_tree_split)
        workspace = shape.batch * kv_heads * num_splits * partial_bytes(rows_pad, shape.head_dim)
    reasons = "; ".join(r for r in (why, tiles.why) if r)
    return VerifyPlan(kernel=kernel, config=cfg, group=shape.group // head_split, kv_heads=kv_heads, block_m=block_m,
                      num_m_tiles=tiles.num_m_tiles, tail_m=tail_m, head_split=head_split, block_n=block_n,
                      stages=stages, num_warps=num_warps,
                      tma=kernel == "triton" and cfg.tma and shape.descriptors, chunk=chunk, num_splits=num_splits,
                      base_programs=base_programs, grid=grid, persistent=persistent, rows_pad=rows_pad,
                      workspace_bytes=workspace,
                      shared_bytes=shared_memory_bytes(kernel, cfg, block_m, tail_m, block_n, stages, shape.head_dim,
                                                       shape.element_size, target.arch),
                      merge=merge, why=reasons, own_tree_split=own_tree_split)
