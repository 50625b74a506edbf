"""Launch configurations of the hybrid-layer kernels (tree conv, tree gated delta rule, commit),
per GPU architecture, in one table.

Why the rows differ:
- ``sm_90`` (H100 / H200): the tree delta rule's apply (the kernel that streams the state) on
  64 value columns per program and 4 warps, its mixing matrix on 4 warps; the fastest of the
  tiles the H200 sweep timed (docs/HYBRID.md).
- ``sm_120`` (RTX PRO 6000 / RTX 5090): about 99 KB of shared memory per block; the same tiles
  use a fraction of it (the sm_120 compile check reports each kernel's use), so they stay.
- ``interpreter``: Triton's CPU interpreter runs each block operation in numpy, so the widest
  tiles are the fastest; no limits apply.
Unknown architectures take the sm_120 row.
"""

from __future__ import annotations

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
    delta_mix_registers: a cap on its registers per thread (None: the compiler's choice), for
                    more programs per multiprocessor.
    commit_block_v: value columns per commit (replay) program.
    commit_warps:   warps per commit program.
    conv_block_t, conv_block_c, conv_warps: nodes and channels per tree-conv program.
    """

    delta_block_v: int
    delta_warps: int
    delta_rows: int
    delta_mix_warps: int
    delta_mix_registers: int | None
    commit_block_v: int
    commit_warps: int
    conv_block_t: int
    conv_block_c: int
    conv_warps: int


# The node block of the mixing-matrix kernel: tl.dot needs M, N and K >= 16, and 16 keeps the
# per-block triangular inverse short.
DELTA_BLOCK_T = 16

HYBRID_CONFIGS = {
    "sm_90": HybridConfig(delta_block_v=64, delta_warps=4, delta_rows=16, delta_mix_warps=4, delta_mix_registers=None,
                          commit_block_v=32, commit_warps=4,
                          conv_block_t=16, conv_block_c=128, conv_warps=4),
    "sm_120": HybridConfig(delta_block_v=64, delta_warps=4, delta_rows=64, delta_mix_warps=4, delta_mix_registers=None,
                          commit_block_v=32, commit_warps=4,
                           conv_block_t=16, conv_block_c=128, conv_warps=4),
    "interpreter": HybridConfig(delta_block_v=128, delta_warps=4, delta_rows=128, delta_mix_warps=4, delta_mix_registers=None,
                          commit_block_v=128, commit_warps=4,
                                conv_block_t=64, conv_block_c=1024, conv_warps=4),
}
HYBRID_CONFIGS["sm_100"] = HYBRID_CONFIGS["sm_90"]


def hybrid_config(device) -> HybridConfig:
    """The row for ``device``'s architecture (unknown ones take sm_120's)."""
    return HYBRID_CONFIGS.get(arch_name(device), HYBRID_CONFIGS["sm_120"])
