"""Launch configurations of the hybrid-layer kernels (tree conv, tree gated delta rule, commit),
per GPU architecture, in one table.

Why the rows differ:
- ``sm_90`` (H100 / H200): the tree delta rule's state-streaming programs (apply, or fused) on
  64 value columns and 4 warps, the apply 16 nodes at a time (on the whole tree at once, one
  warpgroup's 16-bit products went wrong past the first 16 nodes on the GPU) as the mixing
  kernel's programmatic dependent (at 32 columns and 4 warps Triton 3.6 computed wrong results
  at T = 65 on the H200), the mixing matrix on 2 warps (more programs per multiprocessor: its
  chain is latency-bound; at T > 64 it spills a little and is still faster than on 4); two
  launches from 128 (request, value head) pairs, about one per multiprocessor, and from 512 on
  trees of more than 48 nodes. The fastest of the tiles the H200 sweeps timed and the
  crossovers the H100 showed (docs/HYBRID.md).
- ``sm_120`` (RTX PRO 6000 / RTX 5090): about 99 KB of shared memory per block; the same tiles
  use a fraction of it (the sm_120 compile check reports each kernel's use), except the mixing
  matrix on 8 warps, where 2 spill at T > 64 and 4 spill under Triton 3.6 (the apply's 16 nodes
  at a time also keep its HMMA tiles from spilling, which they do on the whole tree at T > 64).
  Not timed on such a GPU.
- ``interpreter``: Triton's CPU interpreter runs each block operation in numpy, so the widest
  tiles are the fastest; no limits apply; two launches from 4 pairs, so that the kernel tests'
  small grids exercise both paths.
Unknown architectures take the sm_120 row.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .configs import arch_name


@dataclass(frozen=True)
class HybridConfig:
    """Tiles of the three hybrid kernels on one architecture.

    delta_block_v:  value columns per tree-delta apply program (a power of two >= 16; the
                    program holds the committed state's [Dk, delta_block_v] tile).
    delta_warps:    warps per tree-delta apply program.
    delta_rows:     the most output rows (nodes) an apply program computes at once.
    delta_mix_warps: warps per mixing-matrix program (one per request and value head).
    delta_dependent_launch: the apply as the mixing kernel's programmatic dependent (sm_90 and
                    newer), so that its state stream overlaps the mixing.
    delta_split_heads: the fewest (request, value head) pairs that take the two launches
                    (mixing matrix, then apply); fewer take the one fused kernel.
    delta_split_heads_deep: the same for trees of more than ``DEEP_TREE_NODES`` nodes, whose
                    longer mixing chain needs more pairs to hide.
    commit_block_v: value columns per commit (replay) program.
    commit_warps:   warps per commit program.
    conv_block_t, conv_block_c, conv_warps: nodes and channels per tree-conv program.
    """

    delta_block_v: int
    delta_warps: int
    delta_rows: int
    delta_mix_warps: int
    delta_split_heads: int
    delta_split_heads_deep: int
    delta_dependent_launch: bool
    commit_block_v: int
    commit_warps: int
    conv_block_t: int
    conv_block_c: int
    conv_warps: int


# The node block of the mixing-matrix kernel: tl.dot needs M, N and K >= 16, and 16 keeps the
# per-block triangular inverse short.
DELTA_BLOCK_T = 16
# Past three blocks of nodes the mixing chain is long enough that two launches pay only on more pairs.
DEEP_TREE_NODES = 3 * DELTA_BLOCK_T

HYBRID_CONFIGS = {
    "sm_90": HybridConfig(delta_block_v=64, delta_warps=4, delta_rows=16, delta_mix_warps=2, delta_split_heads=128,
                          delta_split_heads_deep=512, delta_dependent_launch=True, commit_block_v=32,
                          commit_warps=4, conv_block_t=16, conv_block_c=128, conv_warps=4),
    "interpreter": HybridConfig(delta_block_v=128, delta_warps=4, delta_rows=128, delta_mix_warps=4,
                                delta_split_heads=4, delta_split_heads_deep=4, delta_dependent_launch=False,
                                commit_block_v=128, commit_warps=4, conv_block_t=64, conv_block_c=1024,
                                conv_warps=4),
}
HYBRID_CONFIGS["sm_120"] = dataclasses.replace(HYBRID_CONFIGS["sm_90"], delta_mix_warps=8)
HYBRID_CONFIGS["sm_100"] = HYBRID_CONFIGS["sm_90"]


def hybrid_config(device) -> HybridConfig:
    """The row for ``device``'s architecture (unknown ones take sm_120's)."""
    return HYBRID_CONFIGS.get(arch_name(device), HYBRID_CONFIGS["sm_120"])
