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
    resident_per_sm: how many of these programs fit on one multiprocessor at once (from the
                  shared memory and registers the compiled kernel uses); the split-KV heuristic
                  sizes its waves with it.
    max_tail_m:   packed rows past a whole number of max_block_m tiles that ride along in a
                  small extra tile (T = 2^k + 1); 0 disables the tail tile.
    """

    block_n: int
    max_block_m: int
    num_warps: int
    num_stages: int
    resident_per_sm: int = 1
    max_tail_m: int = 16


# arch -> head_dim -> config
# Each entry is (config for few packed query rows, config for many), switching at
# MANY_ROWS_FROM = T * G packed rows per KV head. Few rows means the call streams K/V (memory
# bound): 4 warps on 64-row tiles, small enough that two programs share a multiprocessor, so
# one program's start and end overlap the other's stream. Many rows means the tensor cores are
# the limit: 128-row tiles on 8 warps (two warpgroups) and 64-key tiles, one program per SM.
# resident_per_sm comes from the compiled kernels (Triton 3.9's ptxas, sm_90 target, compiled on
# the CPU; PERF.md): 228 KB shared memory and 64K registers per SM.
# max_tail_m is 16 where the tail tile compiles without register spills, else 0.
# The sm_90 head-dim-128 entries are chosen by the H200 sweeps in PERF.md; the other rows
# compile without register spills but were not swept.
MANY_ROWS_FROM = 256

VERIFY_CONFIGS: dict[str, dict[int, tuple[VerifyConfig, VerifyConfig]]] = {
    "sm_90": {
        # 86 KB smem, 246 regs (with the tail tile): 2 per SM
        64: (VerifyConfig(block_n=64, max_block_m=64, num_warps=4, num_stages=3, resident_per_sm=2),
             VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0)),
        # few: 99 KB smem, 255 regs x 128 threads (with the tail tile): 2 per SM;
        # many: 192 KB smem: 1 per SM (its tail tile spills 184 B: off)
        128: (VerifyConfig(block_n=32, max_block_m=64, num_warps=4, num_stages=4, resident_per_sm=2),
              VerifyConfig(block_n=64, max_block_m=128, num_warps=8, num_stages=3, max_tail_m=0)),
        # 104 KB smem, 8 warps x 204 regs: 1 per SM (the tail tile spills 216 B: off)
        256: (VerifyConfig(block_n=32, max_block_m=64, num_warps=8, num_stages=2, max_tail_m=0),
              VerifyConfig(block_n=32, max_block_m=64, num_warps=8, num_stages=2, max_tail_m=0)),
    },
    "sm_120": {  # about 99 KB shared memory per block: two stages, <= 64-row tiles
        # tail tile: spill-free at head dim 64 only (416 B / 800 B of spills at 128 / 256)
        64: (VerifyConfig(block_n=64, max_block_m=64, num_warps=8, num_stages=2),) * 2,
        128: (VerifyConfig(block_n=32, max_block_m=64, num_warps=8, num_stages=2, max_tail_m=0),) * 2,
        256: (VerifyConfig(block_n=32, max_block_m=32, num_warps=8, num_stages=2, max_tail_m=0),) * 2,
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
