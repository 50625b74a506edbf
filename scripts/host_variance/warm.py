"""Compile every (shape, splits) config of the A/B in parallel, one pool per version (PYTHONPATH picks it)."""
import multiprocessing, sys
import torch

def one(args):
    shape, n = args
    from specdec_kernels.bench import make_inputs
    from specdec_kernels.tree_verify_triton import tree_verify_attention_triton
    from specdec_kernels.verify_plan import VerifyPolicy
    try:
        s = make_inputs(shape, torch.device("cuda"), 7)
        tree_verify_attention_triton(*s, policy=VerifyPolicy(num_splits=n, fused_merge=False))
        if n is None:
            tree_verify_attention_triton(*s)
        torch.cuda.synchronize()
        return None
    except Exception as exc:
        return f"{shape} {n}: {type(exc).__name__}: {str(exc)[:200]}"

if __name__ == "__main__":
    sys.path.insert(0, "ab")
    import specdec_kernels
    print("warm", specdec_kernels.__file__, flush=True)
    from verify_wide_merge_ab import SHAPES, SPLITS, DEFAULT_ONLY
    from host_busy_probe import SHAPES as HOST
    jobs = [(s, n) for s in SHAPES for n in SPLITS] + [(s, None) for s in DEFAULT_ONLY + HOST]
    with multiprocessing.get_context("spawn").Pool(int(sys.argv[1])) as pool:
        for r in pool.imap_unordered(one, jobs):
            if r: print("WARM-ERR", r, flush=True)
    print("warm done", len(jobs), flush=True)
