"""Why the split delta-rule path misses on the H200 where the fused one holds (keys alike, beta 0.9):
python3 split_probe.py, from the repository root. Per variant, the worst row error per node."""
import dataclasses, sys
sys.path[:0] = ["tests/kernels"]
import torch
from hybrid_cases import delta_inputs, mask_of, path_oracle, ragged_parents
from kernel_cases import row_errors
from specdec_kernels import tree_delta_triton as tdt
from specdec_kernels.hybrid_configs import hybrid_config


def inputs(dtype, seed=25, batch=4, t=33, dim=64):
    gen = torch.Generator().manual_seed(seed)
    x = delta_inputs(batch, t, 1, 1, dim, 16, torch.bfloat16, gen)
    x["k"] = torch.nn.functional.normalize(torch.randn(batch, 1, 1, dim, generator=gen)
                                           + 0.1 * torch.randn(batch, t, 1, dim, generator=gen), dim=-1).bfloat16()
    x["beta"] = torch.full_like(x["beta"], 0.9)
    x["g"] = x["g"] / 10
    parents = ragged_parents(batch, t, "chain", gen)
    want = path_oracle(**x, parents=parents, scale=dim ** -0.5)
    x = {n: (a.to(dtype) if n in ("q", "k", "v") else a).cuda() for n, a in x.items()}
    return x, mask_of(parents).cuda(), want, dim


def run(label, dtype=torch.bfloat16, split=True, pdl=True, seed=25):
    x, mask, want, dim = inputs(dtype, seed)
    cfg = dataclasses.replace(hybrid_config(x["q"].device), delta_split_heads=0 if split else 10 ** 9,
                              delta_dependent_launch=pdl)
    got = tdt.tree_gated_delta_rule_triton(**x, ancestor_mask=mask, scale=dim ** -0.5, config=cfg)
    torch.cuda.synchronize()
    err = row_errors(got.float().cpu(), want)  # [B, T, H]
    per_node = err.amax(dim=(0, 2))
    print(f"{label:40s} worst {float(err.max()):.3g}  per node: "
          + " ".join(f"{v:.2g}" for v in per_node.tolist()), flush=True)
    if split:  # the mixing matrix alone, twice: does it change between calls (a race)?
        a = tdt.tree_delta_mixing(x["q"], x["k"], x["g"], x["beta"], mask, x["v"].shape[2], cfg)[0].float()
        b = tdt.tree_delta_mixing(x["q"], x["k"], x["g"], x["beta"], mask, x["v"].shape[2], cfg)[0].float()
        torch.cuda.synchronize()
        print(f"{'':40s} mixing matrix: max |W| {float(a.abs().max()):.3g}, call-to-call max diff "
              f"{float((a - b).abs().max()):.3g}", flush=True)


for seed in (25, 26):
    run(f"bf16 split pdl seed {seed}", seed=seed)
    run(f"bf16 split no-pdl seed {seed}", pdl=False, seed=seed)
    run(f"bf16 fused seed {seed}", split=False, seed=seed)
    run(f"fp32 split seed {seed}", dtype=torch.float32, seed=seed)
    run(f"fp16 split seed {seed}", dtype=torch.float16, seed=seed)
real = tdt.dot_precision
tdt.dot_precision = lambda q: "ieee" if q.dtype == torch.float32 else "tf32x3"
run("bf16 split, tf32x3 dots")
tdt.dot_precision = real
