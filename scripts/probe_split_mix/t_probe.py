import dataclasses, sys
sys.path[:0] = ["scripts/probe_split_mix"]
import torch, probe
from kernel_cases import row_errors
from specdec_kernels.hybrid_configs import hybrid_config
import specdec_kernels.tree_delta_triton as m
for t in (17, 33, 65):
    for dtype in (torch.bfloat16, torch.float16):
        for seed in (25, 26):
            x, dev, parents, mask, want, dim = probe.inputs(dtype, seed, "cuda", t=t)
            cfg = dataclasses.replace(hybrid_config(dev["q"].device), delta_split_heads=0)
            got = m.tree_gated_delta_rule_triton(**dev, ancestor_mask=mask, scale=dim ** -0.5, config=cfg).float().cpu()
            err = row_errors(got, want)
            print(f"T={t} {str(dtype)[6:]} seed {seed}: split worst row {float(err.max()):.3g}", flush=True)
