"""The GPU benchmarks' command-line arguments (``bench``, ``hybrid_bench``), in a module that imports
no torch: their ``--help`` answers where torch is not installed (``command_line.require``), while
the benchmarks themselves import torch first thing.
"""

from __future__ import annotations

import argparse

L2_FLUSH_MODES = ("read", "zero")
DEFAULT_FLEX = "B8-T16-H32/8/128-L8192,B8-T17-H32/8/128-L8192"


def bench_parser(description: str) -> argparse.ArgumentParser:
    """``python -m specdec_kernels.bench``'s arguments."""
    parser = argparse.ArgumentParser(prog="python -m specdec_kernels.bench", description=description)
    parser.add_argument("--quick", action="store_true", help="a few shapes of each head dim instead of the grid")
    parser.add_argument("--head-dims", default="128,256", help="comma-separated head dims of the grid (128, 256)")
    parser.add_argument("--flex", default=DEFAULT_FLEX,
                        help="comma-separated shape names to also time FlexAttention on ('all', 'none')")
    parser.add_argument("--sglang", default="auto",
                        help="comma-separated shape names to also time SGLang's tree-verify path on ('all', 'none'; "
                             "default 'auto': all where its kernels import, see scripts/pack-sglang.sh)")
    parser.add_argument("--max-seconds", type=float, default=1e9,
                        help="stop starting new shapes this many seconds after the start (warm compile included)")
    parser.add_argument("--no-sdpa", action="store_true", help="time the kernel alone (no SDPA baseline)")
    parser.add_argument("--shapes", help="comma-separated shape names of the grid to run (default: all)")
    parser.add_argument("--list-shapes", action="store_true", help="print the grid's shape names and exit")
    parser.add_argument("--l2-flush", choices=L2_FLUSH_MODES, default="read",
                        help="how L2 is flushed before each timed replay (see l2_flush; default: read)")
    parser.add_argument("--warm", type=int, default=0, metavar="N",
                        help="compile the shapes' kernels in N processes first (Triton's cache serves the run)")
    parser.add_argument("--json", help="write every row as JSON here")
    parser.add_argument("--markdown", help="write the table here")
    parser.add_argument("--table-from", metavar="ROWS.jsonl",
                        help="render the table of rows saved one JSON object a line (a bench run's verify.jsonl, "
                             "e.g. of a run cut short) and exit; no GPU needed")
    return parser


def hybrid_bench_parser(description: str) -> argparse.ArgumentParser:
    """``python -m specdec_kernels.hybrid_bench``'s arguments."""
    parser = argparse.ArgumentParser(prog="python -m specdec_kernels.hybrid_bench", description=description)
    parser.add_argument("--quick", action="store_true", help="a few shapes instead of the per-GPU grid")
    parser.add_argument("--no-alternative", action="store_true", help="skip the torch per-node recurrence")
    parser.add_argument("--sweep", action="store_true",
                        help="first time the tree-delta tiles of SWEEP_TILES, then run the table with the fastest")
    parser.add_argument("--l2-flush", choices=L2_FLUSH_MODES, default="read")
    parser.add_argument("--json", help="write every row as JSON here")
    parser.add_argument("--markdown", help="write the table here")
    return parser
