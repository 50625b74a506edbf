"""CPU breakdown of a cached eager call, old (1f73faa) against new, each part timed alone (stand-ins
of ab.py), parts and variants interleaved over rounds; min over rounds of 1000-call means, us."""
import statistics, sys, threading, timeit
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
sys.argv = sys.argv[:1]
import ab
import torch

PARTS = {
    "old": {"whole call": "f(*args)",
            "out = empty_like": "torch.empty_like(q, memory_format=cf)",
            "key tuple + lookup": "tvt._DIRECT.get((q.shape, q.stride(), q.dtype, q.get_device(), torch._C._cuda_getDevice(), k.shape, k.stride(), v.shape, v.stride(), lens.dtype, True, policy, None))",
            "pointers + checks": "tvt._direct_pointers(q, k, v, lens, mask, out)",
            "  launch_hooks_set": "tl_.launch_hooks_set()",
            "direct launch(es)": "direct(ptrs, None, 0)",
            "  workspace lookup": "tvt._reused_workspace(0, 0, 1, 1)"},
    "new": {"whole call": "f(*args)",
            "out = empty_like": "torch.empty_like(q, memory_format=cf)",
            "guard + device + scale": "last.policy is policy and last.guard.check(q, k, v, lens, mask) and True is last.positive_scale and torch._C._cuda_getDevice() == last.device",
            "pointers + checks": "tvt._aligned_pointers(q, k, v, lens, mask, out)",
            "  launch_hooks_set": "tl_.launch_hooks_set()",
            "direct launch(es)": "direct(ptrs, None, 0)",
            "  workspace lookup": "tvt._reused_workspace(0, 0, 1, 1)"},
}
setups = {}
for s in ab.SHAPES:
    args = ab.inputs(s)
    for name in ab.MODS:
        key, direct, plan, launches = ab.install(name, s, args)
        setups[(s.name, name)] = (args, key, direct, plan, launches)
for name in ab.MODS:
    ab.set_workspace(name)
res = {}
for r in range(rounds):
    for s in ab.SHAPES:
        for name in ab.MODS:
            tvt, tl_, vp = ab.MODS[name]
            args, key, direct, plan, launches = setups[(s.name, name)]
            f = tvt.tree_verify_attention_triton
            f(*args)
            f(*args)
            q, k, v, lens, mask = args
            out = torch.empty_like(q)
            ptrs = tvt._direct_pointers(q, k, v, lens, mask, out)
            ns = dict(f=f, args=args, q=q, k=k, v=v, lens=lens, mask=mask, out=out, tvt=tvt, tl_=tl_, torch=torch,
                      ptrs=ptrs, direct=direct, policy=vp.DEFAULT_POLICY, cf=torch.contiguous_format,
                      last=getattr(tvt, "_LAST_DIRECT", None))
            if name == "new":
                assert ns["last"] is direct
            for label, stmt in PARTS[name].items():
                t = timeit.Timer(stmt, globals=ns).timeit(1000) / 1000 * 1e6
                res.setdefault((s.name, name, label), []).append(t)
for s in ab.SHAPES:
    launches = setups[(s.name, "new")][4]
    print(f"{s.name} ({setups[(s.name, 'new')][3].num_splits} splits, {launches} launch{'es' if launches > 1 else ''})")
    labels = list(dict.fromkeys(list(PARTS["old"]) + list(PARTS["new"])))
    for label in labels:
        o = res.get((s.name, "old", label)); n = res.get((s.name, "new", label))
        fo = f"{min(o):5.2f}" if o else "    -"
        fn = f"{min(n):5.2f}" if n else "    -"
        print(f"  {label:24s} {fo} -> {fn}")
