"""Round 11's diagnostics on a GPU (kernels/PERF.md, round 11): where a memory-bound call's time
goes beyond streaming its K and V, at batch 8 and an 8k cache (B8-T9-L8k streams at 90 % of the
copy rate where B8-L32k streams at 104 %: some 13 us a call that do not grow with the cache).

    python3 scripts/round11_diag.py OUT_DIR [graphs,trace,stamps]

Three views of the same calls:

- ``trace``: one call captured in a CUDA graph, replayed under the profiler after the bench's
  L2 flush, as the table times it; from the kernel records, per replay: flush end to the split
  kernel's start, the split kernel, its end to the merge's start, the merge.
- ``graphs``: our kernel's time with 1 to 6 KV splits forced; the bench's time
  (``bench.time_in_graph``) of a graph holding one call against one holding eight calls that
  alternate two input sets (so that no call finds its inputs in L2): what the graph itself adds
  to a one-call graph, for our kernel, SDPA and the plain read.
- ``stamps``: a copy of the package whose ping-pong kernel writes ``%globaltimer`` at each
  program's entry and end, its SM, and when its first warpgroup's first key tile landed, its
  mask-free stream ended, its masked tiles ended and its rows were stored, and when the load
  warp started: the spread of the programs' starts and ends, and where a program's time goes.
"""
import json
import pathlib
import shutil
import statistics
import sys
import tempfile

import torch

from specdec_kernels import bench
from specdec_kernels.tree_verify import tree_verify_attention, tree_verify_attention_sdpa

SHAPES = [(8, 9, 32, 8192), (8, 17, 32, 8192), (8, 33, 32, 8192), (8, 9, 32, 32768), (1, 9, 32, 32768),
          (8, 16, 64, 8192)]


def shape_of(batch, nodes, q_heads, prefix):
    return bench.Shape(batch, nodes, q_heads, 8, 128, prefix)


def trace(shape, sets, out_dir):
    flush = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device="cuda")
    graph = torch.cuda.CUDAGraph()
    tree_verify_attention(*sets[0])
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        tree_verify_attention(*sets[0])
    for _ in range(3):
        flush.sum()
        graph.replay()
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(20):
            flush.sum()
            graph.replay()
        torch.cuda.synchronize()
    path = pathlib.Path(out_dir) / f"trace_{shape.name.replace('/', '_')}.json"
    prof.export_chrome_trace(str(path))
    kernels = sorted((e for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "kernel"),
                     key=lambda e: e["ts"])
    rows, flush_end = [], None
    for i, e in enumerate(kernels):
        name = e["name"]
        if "reduce" in name:
            flush_end = e["ts"] + e["dur"]
        elif "partial" in name and flush_end is not None:
            row = {"start_after_flush_us": e["ts"] - flush_end, "split_us": e["dur"]}
            nxt = kernels[i + 1] if i + 1 < len(kernels) else None
            if nxt is not None and "merge" in nxt["name"]:
                row["merge_gap_us"] = nxt["ts"] - (e["ts"] + e["dur"])
                row["merge_us"] = nxt["dur"]
                row["total_us"] = nxt["ts"] + nxt["dur"] - flush_end
            else:
                row["total_us"] = e["ts"] + e["dur"] - flush_end
            rows.append(row)
            flush_end = None
    path.unlink()
    return {key: statistics.median(r[key] for r in rows if key in r) for key in rows[0]} | {"replays": len(rows)}


def graphs(shape, sets):
    from specdec_kernels.tree_verify_triton import tree_verify_attention_triton
    pair = sets[:2]
    out = {}
    for splits in (1, 2, 3, 4, 6):
        out[f"ours_{splits}splits_1call_us"] = bench.time_in_graph(
            lambda *a: tree_verify_attention_triton(*a, num_splits=splits), pair[:1])
    for name, fn in (("ours", tree_verify_attention), ("sdpa", tree_verify_attention_sdpa),
                     ("read", lambda q, k, v, lens, mask: bench.read_kv(k, v))):
        out[f"{name}_1call_us"] = bench.time_in_graph(fn, pair[:1])
        out[f"{name}_8calls_us"] = bench.time_in_graph(fn, pair * 4)
    return out


# Stamps, 8 int64 per program: 0 entry, 1 end (after every partition joined), 2 SM, and from
# warpgroup 0: 3 its first key tile landed, 4 its mask-free stream done, 5 its masked tiles done,
# 7 its rows stored; 6 the load warp's start.
STAMP = "gl.store(stamp_ptr + (gl.program_id(0) + gl.program_id(1) * gl.num_programs(0)) * 8 + {k}, _timer())"
PATCHES = {
    "tree_verify_gluon_pingpong.py": [
        ("    qk_scale, num_nodes, num_kv_heads, num_m_tiles, num_splits, chunk, cache_rows,\n",
         "    qk_scale, num_nodes, num_kv_heads, num_m_tiles, num_splits, chunk, cache_rows, stamp_ptr,\n"),
        ("    gl.static_assert(num_warps == 4)\n",
         "    gl.static_assert(num_warps == 4)\n    " + STAMP.format(k=0) + "\n"),
        ("                n_full,\n                full_end, hi)\n",
         "                n_full,\n                full_end, hi, stamp_ptr)\n"),
        ("     full_end, hi) = args\n", "     full_end, hi, stamp_ptr) = args\n"),
        ("        mbarrier.wait(ready.index(0), phase=0)\n        mbarrier.wait(turn.index(WG), phase=0)\n"
         "        s_tok = warpgroup_mma(q_op",
         "        mbarrier.wait(ready.index(0), phase=0)\n        if WG == 0:\n            " + STAMP.format(k=3) +
         "\n        mbarrier.wait(turn.index(WG), phase=0)\n        s_tok = warpgroup_mma(q_op"),
        ("        mbarrier.arrive(empty.index(last))\n",
         "        mbarrier.arrive(empty.index(last))\n        if WG == 0:\n            " + STAMP.format(k=4) + "\n"),
        ("ld_layout, GROUP, HEAD_DIM, HALF_M, BLOCK_N)\n",
         "ld_layout, GROUP, HEAD_DIM, HALF_M, BLOCK_N)\n    if WG == 0:\n        " + STAMP.format(k=5) + "\n"),
        ("                SINGLE_SPLIT)\n\n\n@gluon.jit\ndef _tail_softmax_step",
         "                SINGLE_SPLIT)\n    if WG == 0:\n        " + STAMP.format(k=7) +
         "\n\n\n@gluon.jit\ndef _tail_softmax_step"),
        ("    k_desc, v_desc, k_smem, v_smem, ready, empty, desc_row, desc_col, n_full = args\n",
         "    k_desc, v_desc, k_smem, v_smem, ready, empty, desc_row, desc_col, n_full, stamp_ptr = args\n    " +
         STAMP.format(k=6) + "\n"),
        ("kv_src * HEAD_DIM, n_full)\n", "kv_src * HEAD_DIM, n_full, stamp_ptr)\n"),
    ],
    "tree_verify_triton.py": [
        ("                q, k_cache, v_cache, *gluon_descs, *trailing_args,\n",
         "                q, k_cache, v_cache, *gluon_descs, *trailing_args, STAMP_BUF,\n"),
        ("POISON_WORKSPACE = False\n", "POISON_WORKSPACE = False\nSTAMP_BUF = None\n"),
    ],
}
TAIL = """
    """ + STAMP.format(k=1) + """
    sm = gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=gl.int32, is_pure=False, pack=1)
    gl.store(stamp_ptr + (gl.program_id(0) + gl.program_id(1) * gl.num_programs(0)) * 8 + 2, sm.to(gl.int64))


@gluon.jit
def _timer():
    return gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)
"""


def stamped_package() -> str:
    """A copy of the installed package, as ``specdec_stamped``, with the stamps patched in."""
    import specdec_kernels
    src = pathlib.Path(specdec_kernels.__file__).parent
    root = tempfile.mkdtemp()
    dst = pathlib.Path(root) / "specdec_stamped"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    for name, subs in PATCHES.items():
        text = (dst / name).read_text()
        for old, new in subs:
            assert text.count(old) == 1, (name, old)
            text = text.replace(old, new)
        if name == "tree_verify_gluon_pingpong.py":
            text = text.rstrip("\n") + "\n" + TAIL
        (dst / name).write_text(text)
    return root


STAMP_NAMES = {3: "first_tile", 4: "stream_done", 5: "masked_done", 7: "stored", 1: "end", 6: "load_warp_start"}


def stamps(shape, sets, tvt, attention):
    """Medians over 8 calls of: the programs' spread of starts and ends, and for the median and
    the last-ending program, each stamp's time after that program's entry (us)."""
    tvt.STAMP_BUF = torch.zeros(4096 * 8, dtype=torch.int64, device="cuda")
    flush = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device="cuda")
    runs = []
    for rep in range(8):
        tvt.STAMP_BUF.zero_()
        flush.sum()
        attention(*sets[rep % len(sets)])
        torch.cuda.synchronize()
        s = tvt.STAMP_BUF.view(-1, 8).cpu()
        s = s[s[:, 0] > 0]
        t0 = int(s[:, 0].min())
        rel = (s - s[:, :1]).double() / 1e3  # us after each program's entry
        last = int(s[:, 1].argmax())
        run = {"programs": len(s), "sms": len(set(s[:, 2].tolist())),
               "last_start_us": float(s[:, 0].max() - t0) / 1e3,
               "end_p50_us": float((s[:, 1] - t0).double().median()) / 1e3,
               "end_last_us": float((s[:, 1] - t0).max()) / 1e3}
        for k, name in STAMP_NAMES.items():
            col = rel[:, k]
            if (s[:, k] > 0).all():
                run[f"{name}_p50_us"] = float(col.median())
                run[f"{name}_lastprog_us"] = float(col[last])
        runs.append(run)
    return {key: statistics.median(r[key] for r in runs if key in r) for key in runs[0]}


def main(out_dir, views=("graphs", "trace", "stamps")):
    torch.manual_seed(0)
    results = []
    root = stamped_package()
    sys.path.insert(0, root)
    import specdec_stamped.tree_verify_triton as tvt
    from specdec_stamped.tree_verify import tree_verify_attention as stamped_attention
    for dims in SHAPES:
        shape = shape_of(*dims)
        sets = [bench.make_inputs(shape, torch.device("cuda"), 100 + i) for i in range(2)]
        row = {"shape": shape.name}
        if "graphs" in views:
            with bench.l2_flush("read"):
                row |= graphs(shape, sets)
        if "trace" in views:
            row |= {f"trace_{k}": v for k, v in trace(shape, sets, out_dir).items()}
        if "stamps" in views:
            row |= {f"stamp_{k}": v for k, v in stamps(shape, sets, tvt, stamped_attention).items()}
        print(json.dumps(row), flush=True)
        results.append(row)
        del sets
        torch.cuda.empty_cache()
    (pathlib.Path(out_dir) / "round11_diag.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], *([sys.argv[2].split(",")] if len(sys.argv) > 2 else []))
