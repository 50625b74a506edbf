"""The hybrid prefill on the GPU's Triton kernels, padded to buckets vs not, and against the torch path."""
import functools, torch
from pytest_specdec.engine import linear_attention as gdn
from pytest_specdec.engine.model import PRESETS, TargetModel
orig = gdn.prefill_chain
for preset, dtype in (("27b-hybrid-layers", torch.bfloat16), ("tiny-hybrid", torch.float32)):
    m = TargetModel.from_seed(PRESETS[preset], 0, torch.device("cuda"), dtype, 4096)
    g = torch.Generator().manual_seed(3)
    for p in (1, 9, 16, 33, 64, 71, 150, 700):
        tokens = torch.randint(0, m.config.vocab_size, (1, p), generator=g).cuda()
        res = {}
        for name, pad, impl in (("padded", True, "triton"), ("plain", False, "triton"), ("torch", False, "torch")):
            gdn.prefill_chain = functools.partial(orig, pad=pad)
            with torch.inference_mode():
                res[name] = m.prefill(tokens, kernel_impl=impl).float()
        gdn.prefill_chain = orig
        def err(a, b):
            return float(((a - b).abs() / (b.abs().amax() + 1e-6)).max())
        same = lambda a, b: float((a.argmax(-1) == b.argmax(-1)).float().mean())
        print(f"{preset} {dtype} p={p}: padded vs plain err {err(res['padded'], res['plain']):.2e} argmax-equal {same(res['padded'], res['plain']):.3f}; "
              f"padded vs torch err {err(res['padded'], res['torch']):.2e} argmax-equal {same(res['padded'], res['torch']):.3f}; "
              f"plain vs torch err {err(res['plain'], res['torch']):.2e}")
