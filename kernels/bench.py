"""Verify-step benchmark on a GPU: tree-verify attention against the roofline, SDPA and FlexAttention.

    python -m specdec_kernels.bench                  # the issue's grid, one table
    python -m specdec_kernels.bench --quick          # a few shapes
    python -m specdec_kernels.bench --json out.json --markdown out.md --max-seconds 240

Per shape (bf16; one request shape repeated ``batch`` times, all with prefix ``L``; a random
best-first tree of T nodes per request), all measured in one run:
- time: ``triton.testing.do_bench`` median over CUDA-graph replays of the call on rotating input
  sets (256 MiB cycled, so no L2 reuse across iterations), fresh random inputs per shape; L2 is
  flushed before each replay by *reading* a 256 MiB buffer (``--l2-flush read``, the default)
  rather than by do_bench's own zeroing of it (``--l2-flush zero``), see :func:`l2_flush`;
- bytes = K and V rows read once (prefix + tree) + q + output; FLOPs = 4 * T * Hq * (L + T) * D
  per request (the tree rows counted dense);
- roofline = max(bytes / copy bandwidth, FLOPs / bf16 matmul rate), both ceilings measured at the
  start of the same run (a 1 GiB device-to-device copy, its 2 GiB of reads + writes counted; an 8192^3 bf16
  matmul on random data); "roof %" = roofline time / measured time;
- ``x SDPA``: torch SDPA with a boolean ``[B, 1, T, L + T]`` mask and ``enable_gqa=True``, same
  inputs, time ratio; ``read us``: reading K and V once through torch (two fp32-accumulating
  sums, same graph timing), the practical floor for these bytes at this size; ``x flex``:
  FlexAttention (torch.compile'd) with the same mask as a block mask, on the shapes named by
  ``--flex``, or the error it raised;
- correctness on every timed shape: the kernel's output against a float32 reference per
  request (row relative error, bf16 bound 3e-2); SDPA's error is reported beside it.
A shape whose check fails is reported as FAILED and the exit status is 1.
Also timed: greedy accept + KV commit (all layers) at batch 8, prefix 8k, T 17, fused in one launch
(``tree_accept_and_commit``) and as the two operations in sequence, with CUDA's sync-debug mode
set to error, so a host synchronisation would raise.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import math
import sys
import time

import torch

ROW_TOLERANCE_BF16 = 3e-2


@dataclasses.dataclass(frozen=True)
class Shape:
    batch: int
    num_nodes: int
    q_heads: int
    kv_heads: int
    head_dim: int
    prefix: int

    @property
    def group(self) -> int:
        return self.q_heads // self.kv_heads

    @property
    def name(self) -> str:
        return (f"B{self.batch}-T{self.num_nodes}-H{self.q_heads}/{self.kv_heads}/{self.head_dim}"
                f"-L{self.prefix}")

    def bytes_moved(self) -> int:
        kv = 2 * self.batch * (self.prefix + self.num_nodes) * self.kv_heads * self.head_dim * 2
        q_and_out = 2 * self.batch * self.num_nodes * self.q_heads * self.head_dim * 2
        return kv + q_and_out

    def flops(self) -> int:
        return 4 * self.batch * self.num_nodes * self.q_heads * (self.prefix + self.num_nodes) * self.head_dim

    def memory_bound_goal(self) -> bool:
        """The issue's memory-bound class: T*G <= 64 and batch * prefix >= 32k tokens."""
        return self.num_nodes * self.group <= 64 and self.batch * self.prefix >= 32 * 1024


HEAD_DIMS = (64, 128, 256)


def issue_shapes(head_dim: int = 128) -> list[Shape]:
    """bf16; Hq/Hkv/D in {32/8/128, 64/8/128}; T in {9,16,17,33,65}; batch {1,8,32}; L {1k,8k,32k}.
    The same grid at another head dim (``--head-dim``) for models with D = 64 or 256, which the
    issue's goals do not cover."""
    return [Shape(b, t, hq, 8, head_dim, l)
            for hq in (32, 64) for t in (9, 16, 17, 33, 65) for b in (1, 8, 32)
            for l in (1024, 8192, 32768)]


def quick_shapes(head_dim: int = 128) -> list[Shape]:
    return [Shape(8, t, 32, 8, head_dim, 8192) for t in (9, 16, 17, 33, 65)] + [
        Shape(1, 17, 32, 8, head_dim, 32768), Shape(32, 17, 64, 8, head_dim, 32768),
        Shape(32, 65, 64, 8, head_dim, 8192)]


L2_FLUSH_MODES = ("read", "zero")


@contextlib.contextmanager
def l2_flush(mode: str):
    """Make ``do_bench`` flush L2 by reading its 256 MiB buffer (``"read"``) or keep its zeroing.

    Zeroing the buffer leaves the last ~60 MB of it *dirty* in L2, so the timed call starts by
    writing that back to memory while it reads its own inputs: about 10-20 us of extra traffic
    per timed call, which is noise on a gigabyte but a fifth of a 100 us verify step. A real
    decode step finds little dirty data in L2 (the projections before attention write a few MB).
    A read leaves L2 full of clean, unrelated lines: the inputs still come from memory, and
    evicting what is there costs nothing.
    """
    if mode not in L2_FLUSH_MODES:
        raise ValueError(f"--l2-flush must be one of {L2_FLUSH_MODES}, not {mode!r}")
    if mode == "zero":
        yield
        return
    from triton import runtime

    driver = runtime.driver.active
    driver.clear_cache = lambda cache: cache.sum()
    try:
        yield
    finally:
        del driver.clear_cache


def measure_ceilings(device) -> dict:
    from triton.testing import do_bench

    src = torch.empty(2**30, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    copy_ms = do_bench(lambda: dst.copy_(src), warmup=50, rep=300, return_mode="median")
    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    mm_ms = do_bench(lambda: a @ b, warmup=50, rep=300, return_mode="median")
    del src, dst, a, b
    return {"copy_tb_s": 2 * 2**30 / copy_ms / 1e9, "matmul_tflop_s": 2 * n**3 / mm_ms / 1e9}


def random_best_first_parents(batch: int, num_nodes: int, device, gen) -> torch.Tensor:
    """parents[i] uniform in [0, i): a random tree in pop order."""
    u = torch.rand(batch, num_nodes, generator=gen, device=device)
    parents = (u * torch.arange(num_nodes, device=device)).floor().to(torch.int32)
    parents[:, 0] = -1
    return parents


def make_inputs(shape: Shape, device, seed: int):
    from .tree_layout import ancestor_mask_from_parents

    gen = torch.Generator(device=device).manual_seed(seed)
    rows = shape.prefix + shape.num_nodes
    bf16 = dict(device=device, dtype=torch.bfloat16)
    q = torch.randn(shape.batch, shape.num_nodes, shape.q_heads, shape.head_dim, generator=gen, **bf16)
    k = torch.randn(shape.batch, rows, shape.kv_heads, shape.head_dim, generator=gen, **bf16)
    v = torch.randn(shape.batch, rows, shape.kv_heads, shape.head_dim, generator=gen, **bf16)
    lens = torch.full((shape.batch,), shape.prefix, dtype=torch.int32, device=device)
    mask = ancestor_mask_from_parents(random_best_first_parents(shape.batch, shape.num_nodes, device, gen))
    return q, k, v, lens, mask


# Each timed call reads a different input set until this many bytes have been cycled through, so
# the 60 MB L2 of an H200 cannot serve one call's inputs to the next.
ROTATION_BYTES = 256 * 2**20
MAX_INPUT_SETS = 32


def input_sets_needed(shape: "Shape") -> int:
    return max(1, min(MAX_INPUT_SETS, math.ceil(ROTATION_BYTES / shape.bytes_moved())))


def time_in_graph(call, input_sets) -> float:
    """Median microseconds per call: ``call(*inputs)`` for every input set, captured in one CUDA
    graph, replayed under ``do_bench`` (which also flushes L2 before each replay; see l2_flush). Host launch
    overhead is thereby left out, as in an engine that captures its verify step."""
    from triton.testing import do_bench

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for inputs in input_sets:
            call(*inputs)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for inputs in input_sets:
            call(*inputs)
    ms = do_bench(graph.replay, warmup=25, rep=100, return_mode="median")
    del graph
    return ms * 1e3 / len(input_sets)


def worst_row_error(out, q, k, v, lens, mask) -> float:
    """Max over rows of ||out - ref|| / ||ref||, ref in float32 one request at a time."""
    from .tree_verify import tree_verify_attention_reference

    worst = 0.0
    for b in range(q.shape[0]):
        ref = tree_verify_attention_reference(q[b:b + 1].float(), k[b:b + 1].float(), v[b:b + 1].float(),
                                              lens[b:b + 1], mask[b:b + 1], compute_dtype=torch.float32)
        err = (out[b:b + 1].float() - ref).norm(dim=-1) / ref.norm(dim=-1).clamp_min(1e-30)
        worst = max(worst, float(err.max()))
    return worst


def flex_runner(q, k, v, lens, mask, num_nodes):
    """FlexAttention with the tree mask as a mask_mod over a dense visibility table."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    from .tree_layout import unpack_ancestor_mask

    batch, rows = k.shape[0], k.shape[1]
    prefix = lens.long()
    tree_visible = unpack_ancestor_mask(mask, num_nodes)  # [B, T, T]

    def mask_mod(b, h, q_idx, kv_idx):
        rel = kv_idx - prefix[b]
        in_tree = (rel >= 0) & (rel < num_nodes)
        return (kv_idx < prefix[b]) | (in_tree & tree_visible[b, q_idx, rel.clamp(0, num_nodes - 1)])

    block_mask = create_block_mask(mask_mod, batch, None, num_nodes, rows, device=q.device)
    compiled = torch.compile(flex_attention, dynamic=False)
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    return lambda: compiled(qh, kh, vh, block_mask=block_mask, enable_gqa=True).transpose(1, 2)


def read_kv(k, v):
    """Read K and V once (fp32-accumulating sums): what merely streaming the cache costs."""
    return k.sum(dtype=torch.float32) + v.sum(dtype=torch.float32)


def run_shape(shape: Shape, ceilings: dict, with_flex: bool, seed: int, config=None,
              baselines: bool = True, read_floor: bool = False) -> dict:
    from triton.testing import do_bench

    from .tree_verify import tree_verify_attention_sdpa
    from .tree_verify_triton import log2_softmax_scale, plan_call, runs_persistent, tree_verify_attention_triton

    device = torch.device("cuda")
    sets = [make_inputs(shape, device, seed + i) for i in range(input_sets_needed(shape))]
    q, k, v, lens, mask = sets[0]
    plan = plan_call(q, k, v, log2_softmax_scale(shape.head_dim), config)[0]
    row = {"shape": shape.name, **dataclasses.asdict(shape), "memory_bound_goal": shape.memory_bound_goal(),
           "input_sets": len(sets), "block_m": plan["block_m"], "m_tiles": plan["num_m_tiles"],
           "tail_m": plan["tail_m"], "splits": plan["num_splits"], "warps": plan["config"].num_warps,
           "head_split": plan["head_split"]}

    def ours(q, k, v, lens, mask):
        return tree_verify_attention_triton(q, k, v, lens, mask, config=config)

    row["err"] = max(worst_row_error(ours(*inputs), *inputs) for inputs in sets[:2])
    # asked after the first calls: a Gluon kernel that failed to build has fallen back by now
    plan, row["kernel"], row["block_n"], row["stages"] = plan_call(q, k, v, log2_softmax_scale(shape.head_dim), config)
    row.update(block_m=plan["block_m"], m_tiles=plan["num_m_tiles"], tail_m=plan["tail_m"],
               splits=plan["num_splits"], warps=plan["config"].num_warps, head_split=plan["head_split"],
               persistent=runs_persistent(plan, row["kernel"], device))
    row["ok"] = row["err"] <= ROW_TOLERANCE_BF16
    row["us"] = time_in_graph(ours, sets)
    ms = row["us"] / 1e3
    row["tb_s"] = shape.bytes_moved() / ms / 1e9
    row["tflop_s"] = shape.flops() / ms / 1e9
    mem_ms = shape.bytes_moved() / (ceilings["copy_tb_s"] * 1e9)
    mm_ms = shape.flops() / (ceilings["matmul_tflop_s"] * 1e9)
    row["roof_frac"] = max(mem_ms, mm_ms) / ms
    row["bw_frac"] = row["tb_s"] / ceilings["copy_tb_s"]
    row["mm_frac"] = row["tflop_s"] / ceilings["matmul_tflop_s"]
    row["bound"] = "memory" if mem_ms >= mm_ms else "compute"
    if read_floor:
        row["read_us"] = time_in_graph(read_kv, [(s[1], s[2]) for s in sets])
        row["x_read"] = row["us"] / row["read_us"]
    if baselines:
        try:
            row["sdpa_err"] = worst_row_error(tree_verify_attention_sdpa(q, k, v, lens, mask), q, k, v, lens, mask)
            try:
                row["sdpa_us"] = time_in_graph(tree_verify_attention_sdpa, sets)
                row["sdpa_timing"] = "graph"
            except Exception:  # not capturable: time it eagerly (launch overhead included)
                torch.cuda.synchronize()
                row["sdpa_us"] = do_bench(lambda: tree_verify_attention_sdpa(q, k, v, lens, mask), warmup=10,
                                          rep=50, return_mode="median") * 1e3
                row["sdpa_timing"] = "eager"
            row["x_sdpa"] = row["sdpa_us"] / row["us"]
            row["x_sdpa_max"] = row["sdpa_us"] / (max(mem_ms, mm_ms) * 1e3)
        except Exception as exc:  # a baseline that cannot run is reported, not fatal
            row["sdpa_error"] = f"{type(exc).__name__}: {str(exc)[:120]}"
    if with_flex:
        try:
            flex = flex_runner(q, k, v, lens, mask, shape.num_nodes)
            row["flex_err"] = worst_row_error(flex(), q, k, v, lens, mask)
            row["flex_us"] = do_bench(flex, warmup=10, rep=50, return_mode="median") * 1e3
            row["x_flex"] = row["flex_us"] / row["us"]
        except Exception as exc:
            row["flex_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    del sets, q, k, v
    torch.cuda.empty_cache()
    return row


def accept_inputs(batch: int, num_nodes: int, device, gen):
    """A random best-first tree per request, and target argmaxes that follow node i's first child
    where one exists: long, non-contiguous accepted paths."""
    parents = random_best_first_parents(batch, num_nodes, device, gen)
    tokens = torch.randint(0, 50, (batch, num_nodes), generator=gen, device=device)
    first_child = torch.full((batch, num_nodes), num_nodes, dtype=torch.int64, device=device)
    child = torch.arange(num_nodes, device=device).expand(batch, -1).contiguous()
    first_child.scatter_reduce_(1, parents.clamp(min=0).long()[:, 1:], child[:, 1:], "amin")
    argmax = torch.where(first_child < num_nodes, tokens.gather(1, first_child.clamp(max=num_nodes - 1)), -1)
    return tokens, parents, argmax


# Accept + commit moves a few rows per (layer, request): a few MB, which the bench's input-set
# rule (cycle ROTATION_BYTES) answers with its most sets.
ACCEPT_COMMIT_SETS = MAX_INPUT_SETS


def run_accept_commit(layers: int = 36, batch: int = 8, prefix: int = 8192, num_nodes: int = 17,
                      q_heads: int = 32, kv_heads: int = 8, head_dim: int = 128, seed: int = 0) -> dict:
    """Greedy accept + KV commit for all layers vs one layer's (and all layers') verify attention:
    the fused operation (one launch, what the engine calls) and the two operations in sequence.

    Timed like every table row (``time_in_graph``): a graph of calls on distinct inputs, here
    ACCEPT_COMMIT_SETS trees whose requests' prefixes lie 64 rows apart in the same caches (so
    no call finds another's rows in L2), time per call = replay / calls; and, as rounds 1-8
    reported it, a graph of that one call alone ("single": its launch from an idle GPU counted
    in full, about 5 us on an H200 for any kernel of this grid, PERF.md round 9)."""
    from .accept_commit import tree_accept_and_commit
    from .kv_commit import commit_accepted_kv
    from .tree_accept import tree_accept_greedy
    from .tree_verify_triton import tree_verify_attention_triton

    device = torch.device("cuda")
    shape = Shape(batch, num_nodes, q_heads, kv_heads, head_dim, prefix)
    q, k, v, lens, mask = make_inputs(shape, device, seed)
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    spacing = 64
    sets = [(*accept_inputs(batch, num_nodes, device, gen), lens - spacing * i)
            for i in range(ACCEPT_COMMIT_SETS)]
    cache_k = torch.randn(layers, batch, prefix + num_nodes, kv_heads, head_dim, device=device,
                          dtype=torch.bfloat16)
    cache_v = torch.randn_like(cache_k)

    def accept_commit(tokens, parents, argmax, set_lens):
        return tree_accept_and_commit(tokens, parents, argmax, cache_k, cache_v, set_lens)

    def accept_then_commit(tokens, parents, argmax, set_lens):
        res = tree_accept_greedy(tokens, parents, argmax)
        commit_accepted_kv(cache_k, cache_v, set_lens, res.path, res.path_len)
        return res

    res, separate = accept_commit(*sets[0]), accept_then_commit(*sets[0])
    same = all(torch.equal(a, b) for a, b in zip(res, separate))
    path_lens = torch.cat([tree_accept_greedy(*inputs[:3]).path_len for inputs in sets])
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        accept_commit(*sets[0])
        accept_then_commit(*sets[0])
        tree_verify_attention_triton(q, k, v, lens, mask)
        no_sync = True
    except RuntimeError:
        no_sync = False
    finally:
        torch.cuda.set_sync_debug_mode("default")
    ac_us = time_in_graph(accept_commit, sets)
    separate_us = time_in_graph(accept_then_commit, sets)
    ac_single_us = time_in_graph(accept_commit, sets[:1])
    attn_us = time_in_graph(tree_verify_attention_triton, [(q, k, v, lens, mask)])
    return {"layers": layers, "batch": batch, "prefix": prefix, "num_nodes": num_nodes, "calls_per_graph": len(sets),
            "mean_path_len": float(path_lens.float().mean()), "accept_commit_us": ac_us,
            "accept_then_commit_us": separate_us, "accept_commit_single_us": ac_single_us,
            "fused_matches_separate": same, "attention_us_one_layer": attn_us,
            "ratio_to_all_layers": ac_us / (attn_us * layers), "ratio_to_one_layer": ac_us / attn_us,
            "ratio_to_one_layer_single": ac_single_us / attn_us, "no_host_sync": no_sync}


def sweep_variants() -> dict:
    """Tile / load variants tried side by side by ``--sweep`` (None: the configs table).

    Names: n = key rows per tile, m = max query rows, w = warps, s = stages, r = programs
    resident per SM assumed by the split model; "min128": 128-row tiles only; "tma": key tiles
    through tensor descriptors; "tail16": rows past whole tiles ride in a 16-row tail tile
    whatever the batch (the planner's tail policy off); "fold": the softmax scale folded into
    the exponent; "gluon": the Gluon kernel; "qreg": its q in registers; "pp": the ping-pong
    kernel; "m192": with 192-row tiles where they pad less; "tail8": with its 8-row tail
    warpgroup; "pp64": 64-row tiles on it too; the others have the tail tile off.
    """
    from .configs import VerifyConfig

    few = dict(block_n=32, max_block_m=64, num_warps=4, num_stages=3, resident_per_sm=2, max_tail_m=0)
    many = dict(block_n=64, max_block_m=128, num_warps=8, num_stages=3, resident_per_sm=1, max_tail_m=0,
                min_block_m=128)
    return {
        "table": None,
        "table-nopdl": None,
        "table-twopass": None,
        "table-nowide": None,
        "table-nohsplit": None,
        "n32-m64-w4-s3-r2": VerifyConfig(**few),
        "n32-m64-w4-s3-r1": VerifyConfig(**dict(few, resident_per_sm=1)),
        "n32-m64-w4-s3-r3": VerifyConfig(**dict(few, resident_per_sm=3)),
        "n32-m64-w4-s3-r2-fold": VerifyConfig(**few, fold_scale=True),
        "n32-m64-w4-s3-r2-lazy": VerifyConfig(**few, lazy_rescale=True),
        "n64-m64-w4-s2-r2-lazy": VerifyConfig(**dict(few, block_n=64, num_stages=2), lazy_rescale=True),
        "n32-m64-w4-s3-r2-tail16": VerifyConfig(**dict(few, max_tail_m=16)),
        "n32-m64-w4-s3-r2-tail16-fold": VerifyConfig(**dict(few, max_tail_m=16), fold_scale=True),
        "n32-m64-w4-s3-r2-tail16-lazy": VerifyConfig(**dict(few, max_tail_m=16), lazy_rescale=True),
        "n64-m128-w8-s3-r1-min128": VerifyConfig(**many),
        "n64-m128-w8-s3-r1-min128-tma": VerifyConfig(**many, tma=True),
        "n64-m128-w8-s3-r1-min128-tma-fold": VerifyConfig(**many, tma=True, fold_scale=True),
        "n64-m128-w8-s2-r1-min128-tma": VerifyConfig(**dict(many, num_stages=2), tma=True),
        "n64-m128-w8-s3-r1-min128-tma-lazy": VerifyConfig(**many, tma=True, lazy_rescale=True),
        "n32-m128-w8-s2-r2-min128-tma-reg128": VerifyConfig(**dict(many, block_n=32, num_stages=2,
                                                                   resident_per_sm=2), tma=True, max_registers=128),
        "n64-m128-w8-s2-r2-min128-tma-reg128": VerifyConfig(**dict(many, num_stages=2, resident_per_sm=2), tma=True,
                                                            max_registers=128),
        "n32-m128-w8-s3-r1-min128-tma": VerifyConfig(**dict(many, block_n=32), tma=True),
        "n32-m128-w8-s3-r1-min128-tail16-tma": VerifyConfig(**dict(many, block_n=32, max_tail_m=16), tma=True),
        "n64-m128-w8-s3-r1-min128-gluon": VerifyConfig(**many, gluon=True),
        "n64-m128-w8-s4-r1-min128-gluon": VerifyConfig(**dict(many, num_stages=4), gluon=True),
        "n64-m128-w8-s5-r1-min128-gluon": VerifyConfig(**dict(many, num_stages=5), gluon=True),
        "n128-m128-w8-s3-r1-min128-gluon": VerifyConfig(**dict(many, block_n=128), gluon=True),
        "n32-m64-w4-s3-r2-min64-gluon": VerifyConfig(**dict(few, min_block_m=64), gluon=True),
        "n32-m64-w4-s4-r2-min64-gluon": VerifyConfig(**dict(few, num_stages=4, min_block_m=64), gluon=True),
        "n32-m64-w4-s4-r2-min64-gluon-mtma": VerifyConfig(**dict(few, num_stages=4, min_block_m=64), gluon=True,
                                                          gluon_masked_tma=True),
        "n64-m64-w4-s3-r1-min64-gluon": VerifyConfig(**dict(few, block_n=64, resident_per_sm=1, min_block_m=64),
                                                     gluon=True),
        "n64-m128-w8-s4-r1-min128-gluon-qreg": VerifyConfig(**dict(many, num_stages=4), gluon=True,
                                                            gluon_q_in_registers=True),
        "n128-m128-w8-s3-r1-min128-gluon-qreg": VerifyConfig(**dict(many, block_n=128), gluon=True,
                                                             gluon_q_in_registers=True),
        "n32-m64-w4-s4-r2-min64-gluon-qreg": VerifyConfig(**dict(few, num_stages=4, min_block_m=64), gluon=True,
                                                          gluon_q_in_registers=True),
        # warp-specialised ping-pong of the two warpgroups (round 6)
        **{f"n64-m128-w8-s{s}-r1-min128-gluon-pp": VerifyConfig(**dict(many, num_stages=s), tma=True, gluon=True,
                                                                 gluon_pingpong=True) for s in (3, 4, 6)},
        **{f"n64-m192-w8-s{s}-r1-min128-gluon-pp": VerifyConfig(**dict(many, num_stages=s), tma=True, gluon=True,
                                                                 gluon_pingpong=True, gluon_pingpong_192=True)
           for s in (3, 4, 5)},
        # 64-row tiles on the ping-pong kernel: one warpgroup and the load warp (round 8)
        **{f"n64-m64-w4-s{s}-r1-gluon-pp64": VerifyConfig(block_n=64, max_block_m=64, num_warps=4, num_stages=3,
                                                          resident_per_sm=1, max_tail_m=0, tma=True, gluon=True,
                                                          gluon_stages=s, gluon_pingpong=True, gluon_pingpong_64=True)
           for s in (4, 6)},
        "n64-m128-w8-s5-r1-min128-gluon-pp-tail8-64": VerifyConfig(**dict(many, num_stages=5), tma=True, gluon=True,
                                                                   gluon_pingpong=True, gluon_pingpong_192=True,
                                                                   gluon_pingpong_tail=True, gluon_pingpong_64=True),
        "n64-m128-w8-s4-r1-min128-gluon-pp-tail8": VerifyConfig(**dict(many, num_stages=4), tma=True, gluon=True,
                                                                gluon_pingpong=True, gluon_pingpong_192=True,
                                                                gluon_pingpong_tail=True),
    }


def sweep_plan() -> list[tuple[Shape, tuple]]:
    """Round 9, second sweep: 5 ring slots instead of 4 on the ping-pong kernel's 128-row tiles
    with the tail warpgroup (one slot more to absorb the tail's lag behind the two warpgroups),
    on the shapes whose table plan runs them. (The first sweep, split query heads against one
    program per KV head, is in PERF.md and ``git show ac6e5ec:kernels/bench.py``.)"""
    five = ("table", "n64-m128-w8-s5-r1-min128-gluon-pp-tail8-64")
    return [(Shape(b, t, h, 8, 128, l), five) for b, t, h, l in (
        (8, 17, 64, 8192), (8, 17, 64, 32768), (32, 17, 64, 8192), (8, 33, 32, 8192), (8, 33, 32, 32768),
        (32, 33, 32, 8192), (8, 65, 32, 8192), (32, 65, 32, 8192))]


def sweep_shapes() -> list[Shape]:
    return [shape for shape, _ in sweep_plan()]


@contextlib.contextmanager
def _variant_switches(name: str):
    """The launcher's module switches a variant's name asks for: "tail" takes the tail tile
    wherever the rows allow one (the planner's tail policy off), "nopdl" launches the merge after
    the split kernel (not as its programmatic dependent), "twopass" keeps the merge's two passes
    apart where all splits fit one block, "nowide" keeps 192-row tiles and tails on short streams
    of a part-filled GPU, "nohsplit" keeps each KV head's query heads in one program
    (``VerifyConfig.split_query_heads`` off)."""
    from . import tree_verify_triton as tvt

    saved = (tvt.TAIL_ONLY_WHEN_FULL, tvt.PROGRAMMATIC_MERGE, tvt.MERGE_ONE_PASS, tvt.WIDE_TILE_MIN_CHUNK,
             tvt.SPLIT_QUERY_HEADS)
    tvt.TAIL_ONLY_WHEN_FULL = saved[0] and "tail" not in name
    tvt.PROGRAMMATIC_MERGE = saved[1] and "nopdl" not in name
    tvt.MERGE_ONE_PASS = saved[2] and "twopass" not in name
    tvt.WIDE_TILE_MIN_CHUNK = 0 if "nowide" in name else saved[3]
    tvt.SPLIT_QUERY_HEADS = saved[4] and "nohsplit" not in name
    tvt._plan.cache_clear()  # its plans read the switches
    try:
        yield
    finally:
        (tvt.TAIL_ONLY_WHEN_FULL, tvt.PROGRAMMATIC_MERGE, tvt.MERGE_ONE_PASS, tvt.WIDE_TILE_MIN_CHUNK,
         tvt.SPLIT_QUERY_HEADS) = saved
        tvt._plan.cache_clear()


def run_sweep(ceilings: dict, max_seconds: float, started: float) -> list[dict]:
    rows = []
    variants = sweep_variants()
    for i, (shape, names) in enumerate(sweep_plan()):
        for name in names:
            if time.time() - started > max_seconds:
                return rows
            try:
                with _variant_switches(name):
                    row = run_shape(shape, ceilings, False, seed=100 + i, config=variants[name],
                                    baselines=False)
            except Exception as exc:
                row = {"shape": shape.name, "error": f"{type(exc).__name__}: {str(exc)[:100]}"}
            row["variant"] = name
            rows.append(row)
            print(json.dumps({"sweep": row}), flush=True)
    return rows


def tiles_label(row: dict) -> str:
    """Query tiles of one program x rows (+ tail rows), as "2x(1x64+8)" where two programs split
    each KV head's query heads (``VerifyConfig.split_query_heads``)."""
    tiles = f"{row['m_tiles']}x{row['block_m']}" + (f"+{row['tail_m']}" if row.get("tail_m") else "")
    return f"{row['head_split']}x({tiles})" if row.get("head_split", 1) > 1 else tiles


def format_sweep(rows) -> str:
    names = [name for name in sweep_variants() if any(r.get("variant") == name for r in rows)]
    lines = ["| shape | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for shape in dict.fromkeys(r["shape"] for r in rows):
        cells = []
        for name in names:
            r = next((r for r in rows if r["shape"] == shape and r["variant"] == name), None)
            if r is None:
                cells.append("-")
            elif "error" in r:
                cells.append("error")
            else:
                frac = r["bw_frac"] if r["bound"] == "memory" else r["mm_frac"]
                gluon = " G" if r.get("kernel") == "gluon" else ""
                cells.append(f"{r['us']:.1f} ({100 * frac:.0f}%) {tiles_label(r)}/s{r['splits']}"
                             f"{gluon}"
                             f"{'' if r['ok'] else ' WRONG'}")
        lines.append(f"| {shape} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_table(rows, ceilings) -> str:
    head = (f"| shape | M tiles/BN/splits (G: Gluon, P: persistent) | bound | us | TB/s | TFLOP/s | roof % | BW % | MM % "
            f"| read us | SDPA us | x SDPA | x SDPA at roof | flex us | x flex | err | ok |\n|{'---|' * 17}")
    lines = [head]
    for r in rows:
        def f(key, fmt):
            return format(r[key], fmt) if key in r else "-"
        flex = f("flex_us", ".1f") if "flex_us" in r else ("error" if "flex_error" in r else "-")
        gluon = (" G" if r.get("kernel") == "gluon" else "") + (" P" if r.get("persistent") else "")
        lines.append(f"| {r['shape']} | {tiles_label(r)}/{r['block_n']}/{r['splits']}{gluon} | {r['bound']} "
                     f"| {r['us']:.1f} | "
                     f"{r['tb_s']:.2f} | {r['tflop_s']:.1f} | "
                     f"{100 * r['roof_frac']:.0f} | {100 * r['bw_frac']:.0f} | {100 * r['mm_frac']:.0f} | "
                     f"{f('read_us', '.1f')} | {f('sdpa_us', '.1f')} | {f('x_sdpa', '.1f')} | "
                     f"{f('x_sdpa_max', '.1f')} | {flex} | "
                     f"{f('x_flex', '.1f')} | "
                     f"{r['err']:.1e} | {'yes' if r['ok'] else 'FAILED'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_kernels.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few shapes instead of the issue's grid")
    parser.add_argument("--flex", default="B8-T16-H32/8/128-L8192,B8-T17-H32/8/128-L8192,"
                        "B8-T33-H32/8/128-L8192,B8-T65-H32/8/128-L8192",
                        help="comma-separated shape names to also time FlexAttention on ('all', 'none')")
    parser.add_argument("--max-seconds", type=float, default=1e9, help="stop starting new shapes after this")
    parser.add_argument("--sweep", action="store_true", help="time tile/split variants on a few shapes first")
    parser.add_argument("--sweep-only", action="store_true", help="the sweep alone, no table")
    parser.add_argument("--no-sdpa", action="store_true", help="time the kernel alone (no SDPA baseline)")
    parser.add_argument("--shapes", help="comma-separated shape names of the issue's grid to run (default: all)")
    parser.add_argument("--list-shapes", action="store_true", help="print the grid's shape names and exit")
    parser.add_argument("--head-dim", type=int, choices=HEAD_DIMS, default=128,
                        help="the grid at this head dim (default: 128, the issue's)")
    parser.add_argument("--l2-flush", choices=L2_FLUSH_MODES, default="read",
                        help="how L2 is flushed before each timed replay (see l2_flush; default: read)")
    parser.add_argument("--no-read-floor", action="store_true",
                        help="skip timing a plain read of K and V per shape")
    parser.add_argument("--json", help="write every row as JSON here")
    parser.add_argument("--markdown", help="write the table here")
    args = parser.parse_args(argv)
    known = [s.name for s in issue_shapes(args.head_dim)]
    if args.list_shapes:
        print("\n".join(known))
        return 0
    if args.shapes:
        unknown = [name for name in args.shapes.split(",") if name not in known]
        if unknown:
            listing = "--list-shapes" + ("" if args.head_dim == 128 else f" --head-dim {args.head_dim}")
            parser.error(f"unknown shape name(s) {', '.join(unknown)}: names look like {known[0]} "
                         f"({listing} prints all 90)")
    if not torch.cuda.is_available():
        print("no CUDA GPU found: the verify benchmark needs one", file=sys.stderr)
        return 2
    with l2_flush(args.l2_flush):
        return _run(args, argv)


def _run(args, argv) -> int:
    started = time.time()
    device = torch.device("cuda")
    ceilings = measure_ceilings(device)
    props = torch.cuda.get_device_properties(device)
    import triton

    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "gpu": props.name, "torch": torch.__version__, "triton": triton.__version__,
            "command": "python -m specdec_kernels.bench " + " ".join(sys.argv[1:] if argv is None else argv),
            "l2_flush": args.l2_flush, **ceilings}
    print(json.dumps(meta), flush=True)
    if args.sweep or args.sweep_only:
        sweep_rows = run_sweep(ceilings, args.max_seconds, started)
        print(format_sweep(sweep_rows), flush=True)
        if args.json:
            with open(args.json.replace(".json", "_sweep.json"), "w") as f:
                json.dump({"meta": meta, "rows": sweep_rows}, f, indent=1)
        if args.markdown:
            with open(args.markdown.replace(".md", "_sweep.md"), "w") as f:
                f.write(f"{meta}\n\n{format_sweep(sweep_rows)}\n")
        if args.sweep_only:
            return 0 if all(r.get("ok", False) for r in sweep_rows) else 1
    shapes = quick_shapes(args.head_dim) if args.quick else issue_shapes(args.head_dim)
    if args.shapes:
        shapes = [s for s in issue_shapes(args.head_dim) if s.name in set(args.shapes.split(","))]
    flex_names = set() if args.flex == "none" else ({s.name for s in shapes} if args.flex == "all"
                                                    else set(args.flex.split(",")))
    rows = []
    for i, shape in enumerate(shapes):
        if time.time() - started > args.max_seconds:
            print(f"time budget reached: {len(shapes) - i} shapes not run", flush=True)
            break
        row = run_shape(shape, ceilings, shape.name in flex_names, seed=i, baselines=not args.no_sdpa,
                        read_floor=not args.no_read_floor)
        rows.append(row)
        print(json.dumps(row), flush=True)
    extra = None
    if time.time() - started <= args.max_seconds:
        extra = run_accept_commit()
        print(json.dumps({"accept_commit": extra}), flush=True)
    table = format_table(rows, ceilings)
    print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows, "accept_commit": extra}, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(f"{meta}\n\n{table}\n\naccept+commit: {extra}\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
