"""Launch configurations of the hybrid-layer kernels (tree conv, tree gated delta rule, commit),
per GPU architecture, in one table.

Why the rows differ:
- ``sm_90`` (H100 / H200): the tree delta rule's state-streaming programs (apply, or fused) on
  64 value columns and 4 warps, the apply on the whole tree at once (`V - exp(G) K S` computed
  once per row, both products with the state before it waits for the mixing matrix) as the
  mixing kernel's programmatic dependent (at 32 columns and 4 warps Triton 3.6 computed wrong
  results at T = 65 on the H200), the mixing
  matrix on 2 warps (more programs per multiprocessor: its chain is latency-bound; at T > 64 it
  spills a little and is still faster than on 4); two launches from 128 (request, value head)
  pairs, about one per multiprocessor. The fastest of the tiles the H200 sweeps timed and the
  crossover they showed (docs/HYBRID.md).
- ``sm_120`` (RTX PRO 6000 / RTX 5090): about 99 KB of shared memory per block; the same tiles
  use a fraction of it (the sm_120 compile check reports each kernel's use), except the mixing
  matrix on 4 warps, where 2 spill at T > 64, and the apply 16 nodes at a time (on the whole
  tree its HMMA tiles spill at T > 64, on 4 warps or 8). Not timed on such a GPU.
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
    commit_block_v: value columns per commit (replay) program.
    commit_warps:   warps per commit program.
    conv_block_t, conv_block_c, conv_warps: nodes and channels per tree-conv program.
    """

    delta_block_v: int
    delta_warps: int
    delta_rows: int
    delta_mix_warps: int
    delta_split_heads: int
    delta_dependent_launch: bool
    commit_block_v: int
    commit_warps: int
    conv_block_t: int
    conv_block_c: int
    conv_warps: int


# The node block of the mixing-matrix kernel: tl.dot needs M, N and K >= 16, and 16 keeps the
# per-block triangular inverse short.
DELTA_BLOCK_T = 16

HYBRID_CONFIGS = {
    "sm_90": HybridConfig(delta_block_v=64, delta_warps=4, delta_rows=128, delta_mix_warps=2, delta_split_heads=128,
                          delta_dependent_launch=True, commit_block_v=32, commit_warps=4, conv_block_t=16,
                          conv_block_c=128, conv_warps=4),
    "interpreter": HybridConfig(delta_block_v=128, delta_warps=4, delta_rows=128, delta_mix_warps=4,
                                delta_split_heads=4, delta_dependent_launch=False, commit_block_v=128, commit_warps=4,
                                conv_block_t=64, conv_block_c=1024, conv_warps=4),
}
HYBRID_CONFIGS["sm_120"] = dataclasses.replace(HYBRID_CONFIGS["sm_90"], delta_rows=16, delta_mix_warps=4)
HYBRID_CONFIGS["sm_100"] = HYBRID_CONFIGS["sm_90"]


def hybrid_config(device) -> HybridConfig:
    """The row for ``device``'s architecture (unknown ones take sm_120's)."""
    return HYBRID_CONFIGS.get(arch_name(device), HYBRID_CONFIGS["sm_120"])
