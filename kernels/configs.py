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
# Each entry is (config for few packed query rows, config for many), switching at
# MANY_ROWS_FROM = T * G packed rows per KV head. Few rows means the call streams K/V (memory
# bound): 4 warps on 64-row tiles keep more programs and loads in flight. Many rows means the
# tensor cores are the limit: 128-row tiles on 8 warps (two warpgroups) and 64-key tiles.
# The sm_90 head-dim-128 entries are the fastest of a 9-variant sweep on an H200 (PERF.md,
# 2026-11-30); the other rows compile without register spills but were not swept.
MANY_ROWS_FROM = 256

VERIFY_CONFIGS: dict[str, dict[int, tuple[VerifyConfig, VerifyConfig]]] = {
    "sm_90": {
        64: (VerifyConfig(block_n=64, max_block_m=64, num_warps=4, num_stages=3),
             VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3)),
        128: (VerifyConfig(block_n=64, max_block_m=64, num_warps=4, num_stages=3),
              VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3)),
        256: (VerifyConfig(block_n=32, max_block_m=64, num_warps=8, num_stages=2),
              VerifyConfig(block_n=32, max_block_m=64, num_warps=8, num_stages=2)),
    },
    "sm_120": {  # about 99 KB shared memory per block: two stages, <= 64-row tiles
        64: (VerifyConfig(block_n=64, max_block_m=64, num_warps=8, num_stages=2),) * 2,
        128: (VerifyConfig(block_n=32, max_block_m=64, num_warps=8, num_stages=2),) * 2,
        256: (VerifyConfig(block_n=32, max_block_m=32, num_warps=8, num_stages=2),) * 2,
    },
    "interpreter": {
        d: (VerifyConfig(block_n=64, max_block_m=128, num_warps=4, num_stages=1),) * 2 for d in (64, 128, 256)
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


def verify_config(arch: str, head_dim: int, packed_rows: int = 1) -> VerifyConfig:
    """The table entry for ``arch`` (unknown archs use sm_120's), ``head_dim`` (64, 128 or 256)
    and ``packed_rows`` = T * G query rows per KV head."""
    table = VERIFY_CONFIGS.get(arch, VERIFY_CONFIGS["sm_120"])
    if head_dim not in table:
        raise ValueError(f"head dim {head_dim} is not supported; use one of {sorted(table)}")
    few, many = table[head_dim]
    return many if packed_rows >= MANY_ROWS_FROM else few
