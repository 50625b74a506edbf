"""Launch configurations per GPU architecture, in one table.

Why the rows differ:
- ``sm_90`` (H100 / H200) has 227 KB of shared memory per block: deep pipelines and 128-row
  query tiles fit.
- ``sm_120`` (RTX PRO 6000 / RTX 5090) has about 99 KB per block and none of the Hopper or
  datacenter-Blackwell paths (wgmma, TMA multicast): smaller key tiles, two stages, query
  tiles capped at 64 rows, so every (head dim) row fits with room to spare. The sm_120 compile
  check (``python -m specdec_kernels.sm120_check``) reports the shared memory each row uses.
- ``sm_100`` (B200) takes the Hopper row (its shared memory is as large).
- ``interpreter``: Triton's CPU interpreter runs block operations in numpy, so fewer, larger
  tiles are faster; no memory limits apply.

Unknown architectures fall back to the sm_120 row, the most conservative one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VerifyConfig:
    """Tile sizes for tree-verify attention at one head dim.

    block_n:      key rows per tile (multiple of 16; ``tl.dot`` needs K >= 16).
    max_block_m:  cap on packed query rows (T * G rows of one KV head) per program.
    num_warps, num_stages: Triton launch parameters.
    programs_per_sm: how many programs per multiprocessor the split-KV heuristic aims for.
    """

    block_n: int
    max_block_m: int
    num_warps: int
    num_stages: int
    programs_per_sm: int = 2


# arch -> head_dim -> config
# Every sm_90 and sm_120 row compiles without register spills (sm120_check reports registers and
# stack for sm_120; the same compile with capability 90 was read for the sm_90 rows).
VERIFY_CONFIGS: dict[str, dict[int, VerifyConfig]] = {
    "sm_90": {
        64: VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3),    # 128 KB, 159 regs
        128: VerifyConfig(block_n=32, max_block_m=128, num_warps=8, num_stages=3),   # 112 KB, 203 regs
        256: VerifyConfig(block_n=32, max_block_m=64, num_warps=8, num_stages=2),    # 104 KB, 203 regs
    },
    "sm_120": {
        64: VerifyConfig(block_n=64, max_block_m=64, num_warps=8, num_stages=2),     # 40 KB, 181 regs
        128: VerifyConfig(block_n=32, max_block_m=64, num_warps=8, num_stages=2),    # 44 KB, 251 regs
        256: VerifyConfig(block_n=32, max_block_m=32, num_warps=8, num_stages=2),    # 54 KB, 246 regs
    },
    "interpreter": {
        64: VerifyConfig(block_n=64, max_block_m=128, num_warps=4, num_stages=1),
        128: VerifyConfig(block_n=64, max_block_m=128, num_warps=4, num_stages=1),
        256: VerifyConfig(block_n=64, max_block_m=128, num_warps=4, num_stages=1),
    },
}
VERIFY_CONFIGS["sm_100"] = VERIFY_CONFIGS["sm_90"]

# Fewest key rows one split handles (amortises the query load and the partial write).
MIN_SPLIT_KEYS = 256


def arch_name(device) -> str:
    """``"sm_XY"`` for a CUDA device, ``"interpreter"`` for CPU tensors under TRITON_INTERPRET."""
    if device.type != "cuda":
        return "interpreter"
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def verify_config(arch: str, head_dim: int) -> VerifyConfig:
    """The table row for ``arch`` (falling back to sm_120) and ``head_dim`` (64, 128 or 256)."""
    table = VERIFY_CONFIGS.get(arch, VERIFY_CONFIGS["sm_120"])
    if head_dim not in table:
        raise ValueError(f"head dim {head_dim} is not supported; use one of {sorted(table)}")
    return table[head_dim]
