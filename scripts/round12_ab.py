"""Round 12's A/B timing (kernels/PERF.md, round 12): the installed package against another copy
of it on the same GPU, shape by shape, as the table times a call (``bench.time_in_graph``, one
call a graph, L2 flushed by reading), with the worst row error.

    python3 scripts/round12_ab.py TAG [RELIEF]     # whichever specdec_kernels imports first
    PYTHONPATH=ab/prev python3 scripts/round12_ab.py prev

The copy to compare against, from a commit REV (``ab/`` is gitignored):

    mkdir -p ab/prev && git archive REV kernels | tar -x -C ab/prev
    mv ab/prev/kernels ab/prev/specdec_kernels

With AB_SHAPES=short, the eight shapes of ``SHORT`` only; with AB_SHAPES=masked, the fifteen of
``MASKED`` (round 13: the compute-bound misses, every tile shape, a few memory-bound guards); with
AB_SHAPES=long, the four of ``LONG``; with AB_SHAPES=persistent, ``MASKED`` and two long streams
of several waves (round 14); with AB_SHAPES=rows64, ``UP_TO_64_ROWS``; with
AB_SHAPES=pingpong64, ``PINGPONG_64``, with AB_SHAPES=short64, ``SHORT_64`` (round 16). AB_HEAD_DIM (default 128):
the shapes' head dim (round 15). RELIEF, where given, replaces
``TREE_SPLIT_RELIEF_TILES`` (key tiles the split holding the tree is made shorter at two splits).

Run it alternately for the two copies (a process each): machine drift then shows as a
difference between the rounds of the same copy.
"""
import json
import os
import sys

import torch

import specdec_kernels
from specdec_kernels import bench
from specdec_kernels import tree_verify_triton as tvt

SHAPES = [(32, 65, 64, 1024), (32, 65, 32, 1024), (8, 65, 32, 1024), (8, 65, 64, 1024), (32, 33, 64, 1024),
          (8, 33, 64, 1024), (1, 65, 32, 8192), (1, 33, 64, 8192), (1, 65, 64, 8192), (8, 65, 32, 8192),
          (32, 17, 32, 1024), (8, 17, 32, 1024), (8, 9, 32, 8192), (8, 17, 32, 8192), (8, 33, 32, 8192),
          (8, 16, 64, 8192), (8, 17, 64, 8192), (1, 9, 32, 32768), (1, 17, 64, 32768), (8, 9, 32, 1024)]


# the ping-pong tiles of round 12's second A/B: two warpgroups, one with the tail, three, one
SHORT = [(8, 65, 32, 1024), (8, 33, 64, 1024), (1, 65, 32, 8192), (8, 16, 64, 8192), (8, 17, 32, 1024),
         (32, 17, 32, 1024), (32, 65, 64, 1024), (8, 9, 32, 8192)]


# round 13's masked-tile work: the compute-bound L1k and B1-L8k misses in every tile shape (3x192,
# 2x128+8, 3x128, 5x128), 1x64+8 and 1x128, the 64-row kernel, the tiny tier, long-stream guards
MASKED = [(32, 65, 64, 1024), (32, 65, 32, 1024), (8, 65, 32, 1024), (8, 65, 64, 1024), (32, 33, 64, 1024),
          (8, 33, 64, 1024), (1, 65, 32, 8192), (1, 65, 64, 8192), (1, 33, 64, 8192), (8, 17, 32, 1024),
          (32, 17, 32, 1024), (8, 9, 32, 8192), (8, 16, 64, 8192), (32, 9, 32, 1024), (1, 9, 32, 1024)]
# long streams on two warpgroups (round 13's table had them 5-13 % slower than round 11's)
LONG = [(32, 33, 32, 32768), (32, 17, 64, 32768), (8, 33, 64, 32768), (8, 16, 64, 32768)]
# round 14's persistent ping-pong kernel: MASKED and two long streams of several waves
PERSISTENT = MASKED + [(32, 65, 64, 8192), (32, 17, 64, 32768)]
# round 15's head dim 64 (AB_HEAD_DIM=64): the up-to-64-row tiers, T = 9 and 16 at Hq = 32
UP_TO_64_ROWS = [(b, t, 32, l) for t in (9, 16) for b, l in ((1, 32768), (8, 8192), (8, 32768), (32, 8192),
                                                              (32, 32768))]
# round 16 (AB_HEAD_DIM=64): the ping-pong tiles, one and two warpgroups, with and without the tail,
# the last two persistent
PINGPONG_64 = [(1, 9, 32, 32768), (8, 9, 32, 8192), (8, 9, 32, 32768), (8, 16, 64, 8192), (8, 16, 64, 32768),
               (32, 16, 64, 8192), (1, 16, 64, 32768), (8, 17, 32, 32768), (32, 17, 32, 8192), (8, 9, 64, 32768),
               (8, 17, 64, 8192), (8, 65, 32, 8192), (32, 17, 32, 1024), (32, 9, 64, 1024)]
# round 16 (AB_HEAD_DIM=64): single ping-pong warpgroups on short streams (2-8 key tiles of 128 a
# split, and the query heads split in two), with two long-stream guards
SHORT_64 = [(1, 9, 32, 1024), (1, 16, 32, 8192), (8, 9, 32, 1024), (8, 17, 32, 1024), (1, 17, 32, 8192),
            (1, 33, 32, 8192), (8, 33, 32, 1024), (8, 9, 64, 1024), (1, 9, 64, 8192), (1, 17, 64, 8192),
            (32, 17, 32, 8192), (8, 9, 32, 32768)]
SHAPE_SETS = {"short": SHORT, "masked": MASKED, "long": LONG, "persistent": PERSISTENT, "rows64": UP_TO_64_ROWS,
              "pingpong64": PINGPONG_64, "short64": SHORT_64}


def main(tag, relief=None):
    if relief is not None:
        tvt.TREE_SPLIT_RELIEF_TILES = int(relief)
        tvt._plan.cache_clear()
    print(json.dumps({"tag": tag, "package": specdec_kernels.__file__}), flush=True)
    head_dim = int(os.environ.get("AB_HEAD_DIM", "128"))
    for dims in SHAPE_SETS.get(os.environ.get("AB_SHAPES", ""), SHAPES):
        shape = bench.Shape(dims[0], dims[1], dims[2], 8, head_dim, dims[3])
        inputs = bench.make_inputs(shape, torch.device("cuda"), 11)
        plan, kernel = tvt.plan_call(*inputs[:3], tvt.log2_softmax_scale(head_dim))[:2]
        row = {"tag": tag, "shape": shape.name, "kernel": kernel, "splits": plan["num_splits"],
               "err": bench.worst_row_error(tvt.tree_verify_attention_triton(*inputs), *inputs)}
        with bench.l2_flush("read"):
            row["us"] = round(bench.time_in_graph(tvt.tree_verify_attention_triton, [inputs]), 2)
        print(json.dumps(row), flush=True)
        del inputs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(*sys.argv[1:3])
