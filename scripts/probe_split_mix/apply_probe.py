"""The split path's apply kernel on keys alike: which launch setting turns its rows past the first
block of 16 right (python3 scripts/probe_split_mix/apply_probe.py)."""
import dataclasses, sys
sys.path[:0] = ["scripts/probe_split_mix"]
import torch
import probe
from kernel_cases import row_errors
from specdec_kernels.hybrid_configs import hybrid_config

probe.PATCHES["apply_upcast"] = [("UPCAST=upcast(q), WAIT_FOR_MIX=early", "UPCAST=True, WAIT_FOR_MIX=early")]
probe.PATCHES["apply_nowait"] = [("        if WAIT_FOR_MIX:  # launched as the mixing", "        if False:  # launched as the mixing")]
VARIANTS = [("base", {}), ("base", {"delta_dependent_launch": False}), ("base", {"delta_rows": 16}),
            ("base", {"delta_rows": 32}), ("base", {"delta_warps": 8}), ("base", {"delta_warps": 2}),
            ("base", {"delta_block_v": 32}), ("apply_upcast", {}), ("apply_nowait", {"delta_dependent_launch": False})]
for dtype in (torch.bfloat16, torch.float16):
    for name, change in VARIANTS:
        module = probe.variant_module(name)
        module.split_mixing = lambda heads, cfg, q=None: True
        for seed in (25,):
            x, dev, parents, mask, want, dim = probe.inputs(dtype, seed, "cuda")
            cfg = dataclasses.replace(hybrid_config(dev["q"].device), delta_split_heads=0, **change)
            try:
                got = module.tree_gated_delta_rule_triton(**dev, ancestor_mask=mask, scale=dim ** -0.5,
                                                          config=cfg).float().cpu()
                err = row_errors(got, want)
                print(f"{name:12s} {str(change):34s} {str(dtype)[6:]:8s} first {float(err[:, :16].max()):.3g} "
                      f"rest {float(err[:, 16:].max()):.3g}", flush=True)
            except Exception as exc:
                print(f"{name:12s} {str(change):34s} {str(dtype)[6:]:8s} {type(exc).__name__}: {str(exc)[:120]}",
                      flush=True)
                sys.exit(1)
