"""Where the split delta-rule path goes wrong on the H200 for 16-bit inputs on keys alike (docs/HYBRID.md,
"Keys alike on the H200"): python3 scripts/probe_split_mix/probe.py [VARIANT ...], from the repository root.

Per variant of the mixing kernel (its source patched into a module of its own) and per seed: the output's
worst row error on the first block of nodes and on the rest; the mixing matrix W against a float64
W, per block of rows; and the output recomputed in float64 from the kernel's own W and path gates (right
there while the kernel's output is wrong: the apply kernel is at fault, not the mixing).
Runs under the interpreter too (TRITON_INTERPRET=1, no GPU), where every variant should hold."""
import dataclasses, importlib.util, pathlib, sys, tempfile
sys.path[:0] = ["tests/kernels"]
import torch
from hybrid_cases import delta_inputs, mask_of, path_oracle, ragged_parents
from kernel_cases import row_errors
from specdec_kernels.hybrid_configs import hybrid_config

SOURCE = pathlib.Path("kernels/tree_delta_triton.py").read_text()
MIX_LOOP = "        for c2 in range(c):\n            rows2 = c2 * BT + blk\n            k_2 = _operand(tl.load(k_base"
PATCHES = {
    "base": [],
    # the launch, then the inner loop over earlier blocks, not pipelined
    "stages1": [("num_warps=cfg.delta_mix_warps,", "num_warps=cfg.delta_mix_warps, num_stages=1,")],
    "inner_nostage": [(MIX_LOOP, MIX_LOOP.replace("range(c)", "tl.range(c, num_stages=1)"))],
    # N's rows and the gates read past L1, or as volatile: a visibility bug between the block's threads
    "ws_cg": [("tl.load(ws + rows2[:, None] * TPAD + cols[None, :])",
               "tl.load(ws + rows2[:, None] * TPAD + cols[None, :], cache_modifier='.cg')"),
              ("tl.load(gate_out + rows2)", "tl.load(gate_out + rows2, cache_modifier='.cg')")],
    "volatile": [("tl.load(ws + rows2[:, None] * TPAD + cols[None, :])",
                  "tl.load(ws + rows2[:, None] * TPAD + cols[None, :], volatile=True)"),
                 ("tl.load(gate_out + rows2)", "tl.load(gate_out + rows2, volatile=True)")],
    "barrier_top": [("        rows = c * BT + blk\n        in_rows = rows < T\n        k_c = _operand(tl.load(k_base",
                     "        tl.debug_barrier()\n        rows = c * BT + blk\n        in_rows = rows < T\n"
                     "        k_c = _operand(tl.load(k_base")],
}
# 16-bit operands held in float32 after rounding on the GPU too (TF32 MMAs of bf16-exact values)
PATCHES["upcast"] = [("UPCAST=upcast(q),\n        DOUBLINGS=DELTA_BLOCK_T.bit_length() - 2, LAUNCH",
                       "UPCAST=True,\n        DOUBLINGS=DELTA_BLOCK_T.bit_length() - 2, LAUNCH")]
# N's rows kept in a float32 workspace (same values: n_c is rounded before the store)
PATCHES["ws32"] = [("if num_nodes > DELTA_BLOCK_T else 1, dtype=q.dtype,\n",
                    "if num_nodes > DELTA_BLOCK_T else 1, dtype=torch.float32,\n")]
WARPS = {"warps1": 1, "warps4": 4, "warps8": 8}
PATCHES["random_keys"] = []  # the kernel as it is, on random keys and beta with the same mild decays


def variant_module(name):
    text = SOURCE.replace("from .hybrid_configs import", "from specdec_kernels.hybrid_configs import")
    for old, new in PATCHES.get(name, []):
        assert text.count(old) >= 1, (name, old)
        text = text.replace(old, new, 1)
    path = pathlib.Path(tempfile.mkdtemp()) / f"tdt_{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"tdt_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def inputs(dtype, seed, device, alike=True, batch=4, t=33, dim=64):
    gen = torch.Generator().manual_seed(seed)
    x = delta_inputs(batch, t, 1, 1, dim, 16, torch.bfloat16, gen)
    if alike:
        x["k"] = torch.nn.functional.normalize(torch.randn(batch, 1, 1, dim, generator=gen)
                                               + 0.1 * torch.randn(batch, t, 1, dim, generator=gen), dim=-1).bfloat16()
        x["beta"] = torch.full_like(x["beta"], 0.9)
    x["g"] = x["g"] / 10
    parents = ragged_parents(batch, t, "chain", gen)
    want = path_oracle(**x, parents=parents, scale=dim ** -0.5)
    dev = {n: (a.to(dtype) if n in ("q", "k", "v") else a).to(device) for n, a in x.items()}
    return x, dev, parents, mask_of(parents).to(device), want, dim


def ancestors(parents_b):
    t = parents_b.numel()
    anc = torch.eye(t, dtype=torch.bool)
    for i in range(t):
        p = int(parents_b[i])
        if p >= 0:
            anc[i] |= anc[p]
    return anc


def reference_w(x, parents, b, hv, group):
    """W [T, T] and the path gates G [T] in float64, from the formula the mixing kernel computes."""
    hk = hv // group
    k, q = x["k"][b, :, hk].double(), x["q"][b, :, hk].double()
    g, beta = x["g"][b, :, hv].double(), x["beta"][b, :, hv].double()
    anc = ancestors(parents[b])
    gates = (anc.double() * g[None, :]).sum(1)
    decay = torch.where(anc, torch.exp(gates[:, None] - gates[None, :]), torch.zeros((), dtype=torch.float64))
    lower = torch.tril(beta[:, None] * (k @ k.T) * decay, diagonal=-1)
    n = torch.linalg.inv(torch.eye(len(g), dtype=torch.float64) + lower)
    return ((q @ k.T) * decay) @ n * beta[None, :], gates


def out_from_w(x, w, gates, b, hv, group, scale):
    hk = hv // group
    s = x["state"][b, hv].double()
    q, k, v = x["q"][b, :, hk].double(), x["k"][b, :, hk].double(), x["v"][b, :, hv].double()
    e = torch.exp(gates)[:, None]
    return scale * (e * (q @ s) + w @ (v - e * (k @ s)))


def run(name, dtype, seed, device):
    module = variant_module(name)
    x, dev, parents, mask, want, dim = inputs(dtype, seed, device, alike=name != "random_keys")
    cfg = dataclasses.replace(hybrid_config(dev["q"].device), delta_split_heads=0)
    if name in WARPS:
        cfg = dataclasses.replace(cfg, delta_mix_warps=WARPS[name])
    module.split_mixing = lambda heads, cfg, q=None: True  # the split path whatever the routing says
    got = module.tree_gated_delta_rule_triton(**dev, ancestor_mask=mask, scale=dim ** -0.5, config=cfg).float().cpu()
    mix, gates = module.tree_delta_mixing(dev["q"], dev["k"], dev["g"], dev["beta"], mask, dev["v"].shape[2], cfg)
    batch, t = x["q"].shape[:2]
    heads, group = x["v"].shape[2], x["v"].shape[2] // x["q"].shape[2]
    tpad = module.padded_nodes(t)
    mix = mix.double().cpu().view(batch * heads, t, tpad)
    gates = gates.double().cpu().view(batch * heads, tpad)
    err = row_errors(got, want)
    w_blocks = [0.0] * ((t + 15) // 16)
    via_w = torch.zeros_like(want)
    for b in range(batch):
        for hv in range(heads):
            w_ref, g_ref = reference_w(x, parents, b, hv, group)
            pid = b * heads + hv
            diff = (mix[pid, :, :t] - w_ref).abs().amax(1) / w_ref.abs().max()
            for blk in range(len(w_blocks)):
                w_blocks[blk] = max(w_blocks[blk], float(diff[16 * blk:16 * blk + 16].max()))
            via_w[b, :, hv] = out_from_w(x, mix[pid, :, :t], gates[pid, :t], b, hv, group, dim ** -0.5)
    err_w = row_errors(via_w, want)
    print(f"{name:13s} {str(dtype)[6:]:8s} seed {seed}: out first block {float(err[:, :16].max()):.3g}, "
          f"rest {float(err[:, 16:].max()):.3g} | W err by row block (of max|W|) "
          + " ".join(f"{v:.2g}" for v in w_blocks)
          + f" | out from the kernel's W: first {float(err_w[:, :16].max()):.3g}, rest {float(err_w[:, 16:].max()):.3g}",
          flush=True)


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    names = sys.argv[1:] or [*PATCHES, *WARPS]
    for seed in (25, 26):
        for name in names:
            for dtype in (torch.bfloat16, torch.float16, torch.float32):
                if name != "base" and dtype != torch.bfloat16:
                    continue
                run(name, dtype, seed, device)
