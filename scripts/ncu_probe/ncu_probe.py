"""Two calls of each shape named (e.g. B8-T65-H24/4/256-L8192), for ncu to profile the second's split kernel.
bash scripts/ncu_probe/run.sh OUT; bash scripts/ncu_probe/run_stalls.sh OUT   (on the H200)"""
import sys

import torch

from specdec_kernels.bench import Shape, make_inputs
from specdec_kernels.tree_verify_triton import tree_verify_attention_triton


def parse(name):
    b, t, h, l = name.split("-")
    hq, hkv, d = h[1:].split("/")
    return Shape(int(b[1:]), int(t[1:]), int(hq), int(hkv), int(d), int(l[1:]))


for name in sys.argv[1:]:
    inputs = make_inputs(parse(name), torch.device("cuda"), 0)
    for _ in range(2):
        tree_verify_attention_triton(*inputs)
    torch.cuda.synchronize()
