"""Verify-step benchmark on a GPU: tree-verify attention against the roofline, SDPA and FlexAttention,
in CUDA graphs and called eagerly, with the goals judged on every row.

    python -m specdec_kernels.bench                      # the whole grid (head dims 128 and 256), one table
    python -m specdec_kernels.bench --head-dims 256      # the Qwen3.5/3.6-27B shapes alone
    python -m specdec_kernels.bench --quick --json out.json --markdown out.md --max-seconds 240

Per shape (bf16; one request shape repeated ``batch`` times, all with prefix ``L``; a random
best-first tree of T nodes per request), all measured in one run:
- graph us: ``triton.testing.do_bench`` median over CUDA-graph replays of the call on rotating input
  sets (256 MiB cycled, so no L2 reuse across calls), L2 flushed before each replay by reading a
  256 MiB buffer (:func:`l2_flush`); eager us: the same calls back to back without a graph, GPU time
  a call between two events around them (median of 5 windows of ~10 ms); eager x graph: that over
  the graph replayed back to back in windows alternating with the eager ones, at the same clocks;
  host us: the host time one such call takes to issue (median over batches of 32 calls, each
  batch on an idle GPU so the launch queue never fills);
- bytes = K and V rows read once (prefix + tree) + q + output; FLOPs = 4 * T * Hq * (L + T) * D per
  request; roofline = max(bytes / copy bandwidth, FLOPs / bf16 matmul rate), both measured at the
  start of the run; ``x SDPA``: torch SDPA with a boolean ``[B, 1, T, L + T]`` mask and
  ``enable_gqa=True`` on the same inputs, in graphs; ``x flex``: FlexAttention (torch.compile'd,
  eager) on the shapes named by ``--flex``; ``x SGLang``: SGLang's tree-verify path (its Triton
  extend-attention kernel with the tree as a custom mask, :mod:`sglang_tree_path`) in graphs, on
  every shape where it imports (``--sglang``; the run's header says whether it did), its output
  checked too: the goal is 10x it;
- floors, timed the same way (:mod:`memory_floor`): ``launch us``, an empty kernel, and ``floor us``,
  a kernel that only reads the shape's bytes once, over as many rotating input sets; and the host
  floor, measured once per run with the ceilings: an output's allocation and one direct C launch
  of an empty kernel. A goal missed where its floor exceeds the time it allows is unreachable
  (``*`` in the table): no kernel doing the work could meet it here (:func:`goal_verdicts`);
- correctness on every timed shape: the kernel's output against a float32 reference for the first
  and last request (row relative error, bf16 bound 3e-2).
A shape whose check fails is FAILED and the exit status is 1. Also timed: greedy accept + KV
commit (all layers) at B8-L8k-T17 with CUDA's sync-debug mode set to error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import math
import statistics
import sys
import time

from .arguments import L2_FLUSH_MODES, bench_parser

if __name__ == "__main__":  # without torch the import below would end in a traceback, not one line
    from .command_line import require

    require("python -m specdec_kernels.bench", "torch",  # triton once a mode times kernels (main)
            parser=lambda: bench_parser(__doc__.split("\n")[0]))

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
        """The memory-bound class of the goals: T*G <= 64 and batch * prefix >= 32k tokens."""
        return self.num_nodes * self.group <= 64 and self.batch * self.prefix >= 32 * 1024


HEAD_DIMS = (128, 256)
# Qwen3.5/3.6-27B's 16 full-attention layers (24 query heads, 4 KV heads, head dim 256) per GPU at
# TP 1, 4 and 8 (KV heads replicated at TP 8)
QWEN_27B_HEADS = ((24, 4), (6, 1), (3, 1))


def grid_shapes(head_dims=HEAD_DIMS) -> list[Shape]:
    """The goals' grid: at head dim 128 Hq/Hkv 32/8 and 64/8, T 9, 16, 17, 33, 65; at head dim 256
    the Qwen3.5/3.6-27B heads at T 9, 17, 33, 65; batch 1, 8, 32; prefix 1k, 8k, 32k."""
    shapes = []
    if 128 in head_dims:
        shapes += [Shape(b, t, hq, 8, 128, l) for hq in (32, 64) for t in (9, 16, 17, 33, 65) for b in (1, 8, 32)
                   for l in (1024, 8192, 32768)]
    if 256 in head_dims:
        shapes += [Shape(b, t, hq, hkv, 256, l) for hq, hkv in QWEN_27B_HEADS for t in (9, 17, 33, 65)
                   for b in (1, 8, 32) for l in (1024, 8192, 32768)]
    return shapes


def run_shapes(full: bool) -> list[Shape]:
    """The shapes a GPU run times in order: the whole grid with head dim 256 first (a run cut short
    keeps the shapes the kernels were least tuned for), or (``full`` False) :func:`quick_shapes`."""
    return grid_shapes((256,)) + grid_shapes((128,)) if full else quick_shapes()


def quick_shapes(head_dims=HEAD_DIMS) -> list[Shape]:
    """A few shapes of each head dim's grid: memory- and compute-bound, one split and many."""
    shapes = []
    if 128 in head_dims:
        shapes += [Shape(8, t, 32, 8, 128, 8192) for t in (9, 17, 65)] + [
            Shape(1, 17, 32, 8, 128, 32768), Shape(32, 17, 64, 8, 128, 32768), Shape(32, 65, 64, 8, 128, 8192)]
    if 256 in head_dims:
        shapes += [Shape(1, 17, 24, 4, 256, 8192), Shape(8, 17, 24, 4, 256, 8192), Shape(8, 17, 24, 4, 256, 32768),
                   Shape(1, 65, 24, 4, 256, 32768), Shape(8, 17, 6, 1, 256, 8192), Shape(32, 9, 3, 1, 256, 8192)]
    return shapes


@contextlib.contextmanager
def l2_flush(mode: str):
    """Make ``do_bench`` flush L2 by reading its 256 MiB buffer (``"read"``) or keep its zeroing.

    Zeroing leaves the last ~60 MB of the buffer dirty in L2, so the timed call starts by writing
    that back while it reads its own inputs (docs/kernels-performance.md, "Method"); a real decode
    step finds little dirty data in L2. A read leaves L2 full of clean lines.
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
    """The run's limits: copy bandwidth and bf16 matmul rate (ceilings), and the host floor of a
    call (:func:`~specdec_kernels.memory_floor.host_floor_us`, None where it cannot be measured)."""
    from triton.testing import do_bench

    from .memory_floor import host_floor_us

    src = torch.empty(2**30, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    copy_ms = do_bench(lambda: dst.copy_(src), warmup=25, rep=150, return_mode="median")
    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    mm_ms = do_bench(lambda: a @ b, warmup=25, rep=150, return_mode="median")
    del src, dst, a, b
    return {"copy_tb_s": 2 * 2**30 / copy_ms / 1e9, "matmul_tflop_s": 2 * n**3 / mm_ms / 1e9,
            "host_floor_us": host_floor_us(device)}


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


def input_sets_needed(shape: Shape) -> int:
    return max(1, min(MAX_INPUT_SETS, math.ceil(ROTATION_BYTES / shape.bytes_moved())))


def capture_graph(call, input_sets) -> "torch.cuda.CUDAGraph":
    """``call(*inputs)`` for every input set, captured in one CUDA graph (after one run on a side
    stream, so that lazy initialisation stays out of the capture)."""
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
    return graph


def time_in_graph(call, input_sets, rep_ms: int = 60, graph=None) -> float:
    """Median microseconds a call: ``call(*inputs)`` for every input set captured in one CUDA graph
    (``graph``, where the caller captured it already), replayed under ``do_bench`` (L2 flushed
    before each replay): host launch cost left out, as in an engine that captures its verify step."""
    from triton.testing import do_bench

    graph = graph if graph is not None else capture_graph(call, input_sets)
    ms = do_bench(graph.replay, warmup=10, rep=rep_ms, return_mode="median")
    return ms * 1e3 / len(input_sets)


# Host time is taken over batches this long, synchronised between them: a launch queue that fills
# makes the host wait for the GPU, which is GPU time, not the host's.
HOST_BATCH_CALLS = 32
HOST_BATCHES = 8
# untimed calls at a batch's start: the first launch after a synchronisation pays for the wait
HOST_LEAD_CALLS = 1
# a shape's host time and its floor are each the least of this many measurements taken in turn: the
# host's speed drifts from moment to moment and a slow moment only adds time
HOST_REPEATS = 3


# eager and graph windows alternate: a power-capped GPU's SM clock moves within seconds
EAGER_ROUNDS = 5
EAGER_WINDOW_US = 10000.0


@dataclasses.dataclass(frozen=True)
class EagerTiming:
    """Back-to-back calls without synchronisation: ``gpu_us`` a call eagerly, ``graph_us`` a call
    of the same calls replayed from a CUDA graph in the windows between (None without a graph),
    ``host_us`` a call's host time to issue."""

    gpu_us: float
    host_us: float
    graph_us: float | None = None

    @property
    def eager_x_graph(self) -> float | None:
        return None if self.graph_us is None else self.gpu_us / self.graph_us


def _window_us(issue, calls: int) -> float:
    """GPU microseconds a call between two events around ``issue()``, which issues ``calls`` calls."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    issue()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def time_eagerly(call, input_sets, graph_us: float, graph=None) -> EagerTiming:
    """Back-to-back eager calls cycling the input sets, no synchronisation between them. GPU: the
    median over EAGER_ROUNDS windows of ~10 ms (10 to 300 calls, whole cycles of the sets), after
    one as warm-up; with ``graph`` (every set's call captured, :func:`capture_graph`), each
    window followed by one of the graph replayed as many calls back to back, so both see the
    same clocks. Host: the median over batches of HOST_BATCH_CALLS calls of the host clock around
    issuing them, each batch starting on an idle GPU behind HOST_LEAD_CALLS untimed calls."""
    replays = max(1, round(max(10, min(300, EAGER_WINDOW_US / max(graph_us, 1.0))) / len(input_sets)))
    calls = replays * len(input_sets)

    def eager():
        for i in range(calls):
            call(*input_sets[i % len(input_sets)])

    def replayed():
        for _ in range(replays):
            graph.replay()

    _window_us(eager, calls)
    eager_us, graph_windows = [], []
    for _ in range(EAGER_ROUNDS):
        eager_us.append(_window_us(eager, calls))
        if graph is not None:
            graph_windows.append(_window_us(replayed, calls))
    return EagerTiming(statistics.median(eager_us), host_us_per_call(call, input_sets),
                       statistics.median(graph_windows) if graph_windows else None)


def host_us_per_call(call, input_sets) -> float:
    """Host microseconds to issue one call: the median over HOST_BATCHES batches of
    HOST_BATCH_CALLS back-to-back calls, each batch starting on an idle GPU behind
    HOST_LEAD_CALLS untimed calls."""
    host_us = []
    for _ in range(HOST_BATCHES):
        torch.cuda.synchronize()
        for i in range(HOST_LEAD_CALLS):
            call(*input_sets[i % len(input_sets)])
        host_start = time.perf_counter()
        for i in range(HOST_LEAD_CALLS, HOST_LEAD_CALLS + HOST_BATCH_CALLS):
            call(*input_sets[i % len(input_sets)])
        host_us.append((time.perf_counter() - host_start) * 1e6 / HOST_BATCH_CALLS)
    torch.cuda.synchronize()
    return statistics.median(host_us)


def least_host_times(call, input_sets, first_us: float, floor_call, repeats: int = HOST_REPEATS):
    """(host µs a call, host floor µs): each the least of ``repeats`` measurements, the call's and
    the floor's taken in turn so that both see the same moments of the host (``first_us``: the
    call's first, from :func:`time_eagerly`; the floor None where ``floor_call`` is None)."""
    host, floor = [first_us], []
    for repeat in range(repeats):
        if floor_call is not None:
            floor.append(host_us_per_call(floor_call, [()]))
        if repeat:
            host.append(host_us_per_call(call, input_sets))
    return min(host), (min(floor) if floor else None)


def row_error(out, q, k, v, lens, mask, requests) -> float:
    """Max over rows of ||out - ref|| / ||ref||, ref in float32, for the given requests."""
    from .tree_verify import tree_verify_attention_reference

    worst = 0.0
    for b in requests:
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
    # fullgraph: a FlexAttention that would run uncompiled (a graph break, dynamo's recompile
    # limit) raises instead of being timed at its unfused speed
    compiled = torch.compile(flex_attention, dynamic=False, fullgraph=True)
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    return lambda: compiled(qh, kh, vh, block_mask=block_mask, enable_gqa=True).transpose(1, 2)


def time_flex(flex, inputs, requests, kernel_us: float) -> dict:
    """FlexAttention's worst row error on ``requests`` of ``inputs``, its time (``do_bench``
    median) and that over ``kernel_us``; ``flex_error`` alone where it does not compile or run."""
    from triton.testing import do_bench

    try:
        err = row_error(flex(), *inputs, requests)
        us = do_bench(flex, warmup=10, rep=40, return_mode="median") * 1e3
    except Exception as exc:  # a shape FlexAttention cannot take is reported, not fatal
        return {"flex_error": error_line(exc)}
    return {"flex_err": err, "flex_us": us, "x_flex": us / kernel_us}


def error_line(exc: BaseException) -> str:
    """An exception as one line of a row: its type and its message's first line."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:200] if text else ''}"


def time_sglang(input_sets, requests, kernel_us: float) -> dict:
    """SGLang's tree-verify path on the same input sets, timed as the kernel is (in a graph, L2
    flushed), its output checked against the float32 reference like the kernel's; each input set
    laid out as SGLang's backend holds it beforehand (:mod:`sglang_tree_path`)."""
    from .sglang_tree_path import sglang_tree_verify, sglang_verify_batch

    batches = [(sglang_verify_batch(*inputs),) for inputs in input_sets]
    err = max(row_error(sglang_tree_verify(*batches[i]), *input_sets[i], requests) for i in range(min(2, len(batches))))
    us = time_in_graph(sglang_tree_verify, batches, rep_ms=40)
    return {"sglang_us": us, "x_sglang": us / kernel_us, "sglang_err": err, "sglang_ok": err <= ROW_TOLERANCE_BF16}


# The goals, each judged where it applies.
MEMORY_GOAL = 0.75  # of the copy bandwidth
COMPUTE_GOAL = 0.5  # of the matmul rate
SDPA_GOAL = 10.0  # times faster than SDPA, where SDPA is at least this many times the roofline
SGLANG_GOAL = 10.0  # times faster than SGLang's tree-verify path (graph against graph)
ROOF_GOAL = 0.7  # of the roofline elsewhere
HOST_US_GOAL = 25.0
EAGER_GOAL = 1.15
EAGER_GOAL_MIN_GRAPH_US = 50.0
VERDICTS = ("met", "missed", "unreachable")


def goal_bounds(row: dict) -> dict:
    """Goal name -> (us, allowed_us, floor_us) for each goal that bounds a time and applies to the
    row: the time measured, the most the goal allows, and the least any kernel (or launcher) doing
    the work takes on this machine (None: no floor measured).

    memory (memory-bound class, T*G <= 64 and B*L >= 32k): the bytes at 75 % of the copy bandwidth,
    floor the read-once kernel; compute (compute-bound): the FLOPs at 50 % of the matmul rate, floor
    the largest of the empty kernel, the read-once kernel and the prefix's FLOPs at the matmul rate
    (:func:`matmul_floor_us`); sdpa: a tenth of SDPA's time or, where SDPA is within 10x of the
    roofline, the roofline at 70 %, same floor; sglang (where SGLang's path ran and its output was
    right): a tenth of its time, same floor; host: 25 us of host time a call, floor the run's host
    floor (an output's allocation and one direct launch)."""
    floors = [row["launch_us"], row["stream_us"]] if "launch_us" in row and "stream_us" in row else []
    floors += [us for us in (matmul_floor_us(row),) if us is not None]
    kernel_floor = max(floors, default=None)
    bounds = {}
    if row["memory_bound_goal"]:
        bounds["memory"] = (row["us"], row["mem_us"] / MEMORY_GOAL, row.get("stream_us"))
    if row["bound"] == "compute":
        bounds["compute"] = (row["us"], row["mm_us"] / COMPUTE_GOAL, kernel_floor)
    if "sdpa_us" in row:
        allowed = row["sdpa_us"] / SDPA_GOAL if row["x_sdpa_max"] >= SDPA_GOAL else row["roof_us"] / ROOF_GOAL
        bounds["sdpa"] = (row["us"], allowed, kernel_floor)
    if "sglang_us" in row and row.get("sglang_ok"):
        bounds["sglang"] = (row["us"], row["sglang_us"] / SGLANG_GOAL, kernel_floor)
    bounds["host"] = (row["host_us"], HOST_US_GOAL, row.get("host_floor_us"))
    return bounds


def matmul_floor_us(row: dict) -> float | None:
    """The least time the FLOPs no kernel can skip take at the run's matmul rate: every node against
    every prefix key (the tree's own keys left out, as a kernel may skip their masked pairs); None
    for a row without the shape's fields. A goal that asks for more than the measured matmul rate
    is out of reach, not missed."""
    if not all(name in row for name in ("mm_us", "prefix", "num_nodes")):
        return None
    return row["mm_us"] * row["prefix"] / (row["prefix"] + row["num_nodes"])


def verdict(us: float, allowed_us: float, floor_us: float | None) -> str:
    """``met`` within the allowed time; ``unreachable`` where the floor itself exceeds it (no
    kernel doing the work could meet it here); ``missed`` otherwise."""
    if us <= allowed_us:
        return "met"
    return "unreachable" if floor_us is not None and floor_us > allowed_us else "missed"


def goal_verdicts(row: dict) -> dict:
    """Goal name -> ``met`` / ``missed`` / ``unreachable`` for the goals that apply to this row:
    correct output; those of :func:`goal_bounds`; flex: faster than FlexAttention where it
    compiled; eager: eager within 1.15x of the graph time where that is >= 50 us, both timed back
    to back in alternating windows (``eager_x_graph``; rows without it: against the graph us)."""
    bounds = goal_bounds(row)
    verdicts = {"correct": "met" if row["ok"] else "missed"}
    verdicts.update((name, verdict(*bounds[name])) for name in ("memory", "compute", "sdpa", "sglang")
                    if name in bounds)
    if "x_flex" in row:
        verdicts["flex"] = "met" if row["x_flex"] > 1 else "missed"
    if row["us"] >= EAGER_GOAL_MIN_GRAPH_US:
        ratio = row.get("eager_x_graph") or row["eager_us"] / row["us"]
        verdicts["eager"] = "met" if ratio <= EAGER_GOAL else "missed"
    verdicts["host"] = verdict(*bounds["host"])
    return verdicts


def run_shape(shape: Shape, ceilings: dict, with_flex: bool, seed: int, policy=None, baselines: bool = True,
              with_sglang: bool = False) -> dict:
    from .memory_floor import host_floor_call, measure_floor

    from .tree_verify import tree_verify_attention_sdpa
    from .tree_verify_triton import plan_call, tree_verify_attention_triton
    from .verify_plan import DEFAULT_POLICY

    policy = policy or DEFAULT_POLICY
    device = torch.device("cuda")
    sets = [make_inputs(shape, device, seed + i) for i in range(input_sets_needed(shape))]
    q, k, v, lens, mask = sets[0]
    plan = plan_call(q, k, v, None, policy)
    row = {"shape": shape.name, **dataclasses.asdict(shape), "memory_bound_goal": shape.memory_bound_goal(),
           "input_sets": len(sets), "kernel": plan.kernel, "block_m": plan.block_m, "m_tiles": plan.num_m_tiles,
           "tail_m": plan.tail_m, "block_n": plan.block_n, "splits": plan.num_splits, "warps": plan.num_warps,
           "head_split": plan.head_split, "persistent": plan.persistent, "why": plan.why}

    def ours(q, k, v, lens, mask):
        return tree_verify_attention_triton(q, k, v, lens, mask, policy=policy)

    requests = sorted({0, shape.batch - 1})
    row["err"] = max(row_error(ours(*inputs), *inputs, requests) for inputs in sets[:2])
    row["ok"] = row["err"] <= ROW_TOLERANCE_BF16
    graph = capture_graph(ours, sets)
    row["us"] = time_in_graph(ours, sets, graph=graph)
    eager = time_eagerly(ours, sets, row["us"], graph)
    del graph
    # the host's speed drifts within a run: its floor is taken again beside each shape's host time
    host_us, floor_now = least_host_times(ours, sets, eager.host_us, host_floor_call(device))
    row.update(eager_us=eager.gpu_us, host_us=host_us, eager_graph_us=eager.graph_us,
               eager_x_graph=eager.eager_x_graph,
               host_floor_us=ceilings.get("host_floor_us") if floor_now is None else floor_now)
    ms = row["us"] / 1e3
    row["tb_s"] = shape.bytes_moved() / ms / 1e9
    row["tflop_s"] = shape.flops() / ms / 1e9
    mem_ms = shape.bytes_moved() / (ceilings["copy_tb_s"] * 1e9)
    mm_ms = shape.flops() / (ceilings["matmul_tflop_s"] * 1e9)
    row["mem_us"], row["mm_us"] = mem_ms * 1e3, mm_ms * 1e3
    row["roof_us"] = max(mem_ms, mm_ms) * 1e3
    row["roof_frac"] = max(mem_ms, mm_ms) / ms
    row["bw_frac"] = row["tb_s"] / ceilings["copy_tb_s"]
    row["mm_frac"] = row["tflop_s"] / ceilings["matmul_tflop_s"]
    row["bound"] = "memory" if mem_ms >= mm_ms else "compute"
    # the launch floor too is taken per shape: a graph of N calls shares its replay's start among
    # them, and N (the input sets) follows the shape's bytes
    floor = measure_floor(shape.bytes_moved(), len(sets), device)
    row.update(launch_us=floor.launch_us, stream_us=floor.stream_us)
    if baselines:
        try:
            row["sdpa_us"] = time_in_graph(tree_verify_attention_sdpa, sets, rep_ms=40)
            row["x_sdpa"] = row["sdpa_us"] / row["us"]
            row["x_sdpa_max"] = row["sdpa_us"] / row["roof_us"]
        except Exception as exc:  # a baseline that cannot run is reported, not fatal
            row["sdpa_error"] = f"{type(exc).__name__}: {str(exc)[:120]}"
    if with_sglang:
        try:
            row.update(time_sglang(sets, requests, row["us"]))
        except Exception as exc:
            row["sglang_error"] = error_line(exc)
    if with_flex:
        try:
            flex = flex_runner(q, k, v, lens, mask, shape.num_nodes)
        except Exception as exc:
            row["flex_error"] = error_line(exc)
        else:
            row.update(time_flex(flex, sets[0], requests, row["us"]))
    row["goals"] = goal_verdicts(row)
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
    no call finds another's rows in L2), time per call = replay / calls; and a graph of that one
    call alone ("single": its launch from an idle GPU counted in full)."""
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




def tiles_label(row: dict) -> str:
    """Query tiles of one program x rows (+ tail rows), as "2x(1x64+8)" where two programs split
    each KV head's query heads."""
    tiles = f"{row['m_tiles']}x{row['block_m']}" + (f"+{row['tail_m']}" if row.get("tail_m") else "")
    return f"{row['head_split']}x({tiles})" if row.get("head_split", 1) > 1 else tiles


KERNEL_MARKS = {"pingpong": " PP", "gluon": " G", "triton": ""}


UNREACHABLE_MARK = "*"


def missed_goals(row: dict) -> str:
    """The goals a row missed, each out of any kernel's reach marked ``*``; ``none``."""
    return ", ".join(name + (UNREACHABLE_MARK if v == "unreachable" else "")
                     for name, v in row.get("goals", {}).items() if v != "met") or "none"


def format_table(rows) -> str:
    head = ("| shape | tiles/BN/splits | bound | graph us | eager us | eager x graph | host us | host floor us "
            "| launch us | floor us | roof us | roof % | BW % | MM % | SDPA us | x SDPA | x SDPA at roof | x flex "
            "| x SGLang | err | goals missed |\n|" + "---|" * 21)
    lines = [head]
    for r in rows:
        def f(key, fmt):
            return format(r[key], fmt) if key in r else "-"
        flex = f("x_flex", ".1f") if "x_flex" in r else ("error" if "flex_error" in r else "-")
        sglang = (f("x_sglang", ".1f") + ("" if r.get("sglang_ok", True) else " (wrong)") if "x_sglang" in r
                  else ("error" if "sglang_error" in r else "-"))
        kernel = KERNEL_MARKS.get(r.get("kernel"), "") + (" P" if r.get("persistent") else "")
        lines.append(f"| {r['shape']} | {tiles_label(r)}/{r['block_n']}/{r['splits']}{kernel} | {r['bound']} "
                     f"| {r['us']:.1f} | {f('eager_us', '.1f')} | {f('eager_x_graph', '.2f')} | {f('host_us', '.1f')} "
                     f"| {f('host_floor_us', '.1f')} | {f('launch_us', '.1f')} "
                     f"| {f('stream_us', '.1f')} | {r['roof_us']:.1f} "
                     f"| {100 * r['roof_frac']:.0f} | {100 * r['bw_frac']:.0f} | {100 * r['mm_frac']:.0f} "
                     f"| {f('sdpa_us', '.1f')} | {f('x_sdpa', '.1f')} | {f('x_sdpa_max', '.1f')} | {flex} | {sglang} "
                     f"| {r['err']:.1e} | {missed_goals(r)} |")
    return "\n".join(lines)


SUMMARY_LEGEND = ("goals (rows met / missed / unreachable; unreachable, * in the table: the floor of any "
                  "kernel doing the work exceeds the time the goal allows)")


def goal_summary(rows) -> dict:
    """Goal name -> {verdict: rows} over the rows, every verdict of VERDICTS counted."""
    summary = {}
    for r in rows:
        for name, v in r.get("goals", {}).items():
            summary.setdefault(name, dict.fromkeys(VERDICTS, 0))[v] += 1
    return summary


def _compile_one(shape: Shape) -> None:
    from .tree_verify_triton import tree_verify_attention_triton

    inputs = make_inputs(shape, torch.device("cuda"), 0)
    tree_verify_attention_triton(*inputs)
    torch.cuda.synchronize()


def warm_compile(shapes, processes: int = 8) -> None:
    """Compile every kernel the shapes plan, ``processes`` shapes at a time (Triton's on-disk cache
    then serves the timed runs, which would otherwise compile one kernel after another)."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        pool.map(_compile_one, shapes, chunksize=1)


# what the table reads of a row, besides its name and bound (the rest is shown as "-" where missing)
ROW_NUMBERS = ("m_tiles", "block_m", "block_n", "splits", "us", "roof_us", "roof_frac", "bw_frac", "mm_frac", "err")


ROWS_EXPECTED = "expected one bench row a line, as the bench tests write verify.jsonl"


def read_json_lines(path: str, expected: str):
    """(line number, value) of each non-blank line of a JSON-lines file; a line that is not JSON is
    a ValueError naming it, with ``expected`` (what the file should hold)."""
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not JSON ({exc.msg}); {expected}") from None


def judged(goals) -> bool:
    """Whether ``goals`` is a row's verdicts as :func:`goal_verdicts` gives them: goal name -> one of
    VERDICTS, ``correct`` among them (every row is judged on its output)."""
    return (isinstance(goals, dict) and "correct" in goals
            and all(isinstance(v, str) and v in VERDICTS for v in goals.values()))


def load_rows(path: str) -> list[dict]:
    """The rows of a JSON-lines file as the bench writes them, each checked for what the table
    needs (ValueError naming the line and what it lacks). A row without its verdicts is refused:
    the table would show it as missing no goal and the summary would not count it."""
    rows = []
    for number, row in read_json_lines(path, ROWS_EXPECTED):
        if not isinstance(row, dict):
            row = {}
        wrong = [key for key in ("shape", "bound") if not isinstance(row.get(key), str)]
        wrong += [key for key in ROW_NUMBERS if not isinstance(row.get(key), (int, float))]
        if not judged(row.get("goals")):
            wrong.append("goals")
        if wrong:
            verdicts = f" (goals: each {', '.join(VERDICTS[:-1])} or {VERDICTS[-1]}, correct among them)"
            raise ValueError(f"{path}:{number}: not a bench row (no {', '.join(wrong)}, or not of its type)"
                             f"{verdicts if 'goals' in wrong else ''}; {ROWS_EXPECTED}")
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no rows; {ROWS_EXPECTED}")
    return rows


def write_table(rows, markdown: str | None, title: str, footer: str = "") -> int:
    """Print the rows' table and goal summary (and write them under ``title``, ``footer`` after,
    to ``markdown``); 1 where a row's output was wrong."""
    table, summary = format_table(rows), goal_summary(rows)
    print(table)
    print(f"{SUMMARY_LEGEND}:", json.dumps(summary))
    if markdown:
        with open(markdown, "w") as f:
            f.write(f"{title}\n\n{table}\n\n{SUMMARY_LEGEND}: {json.dumps(summary)}\n{footer}")
    return 0 if all(r.get("ok", True) for r in rows) else 1


def main(argv=None) -> int:
    parser = bench_parser(__doc__.split("\n")[0])
    args = parser.parse_args(argv)
    if args.table_from:
        try:
            rows = load_rows(args.table_from)
        except OSError as exc:
            parser.error(f"cannot read {args.table_from}: {exc.strerror or exc}")
        except ValueError as exc:
            parser.error(str(exc))
        try:
            return write_table(rows, args.markdown, f"table of {len(rows)} rows from {args.table_from}")
        except OSError as exc:
            parser.error(f"cannot write {args.markdown}: {exc.strerror or exc}")
    try:
        head_dims = tuple(int(d) for d in args.head_dims.split(","))
    except ValueError:
        head_dims = ()
    if not head_dims or any(d not in HEAD_DIMS for d in head_dims):
        parser.error(f"--head-dims takes a comma-separated subset of {', '.join(map(str, HEAD_DIMS))}, "
                     f"not {args.head_dims!r}")
    known = [s.name for s in grid_shapes(head_dims)]
    if args.list_shapes:
        print("\n".join(known))
        return 0
    from .command_line import require

    require("python -m specdec_kernels.bench", "triton")  # --table-from and --list-shapes time nothing
    if args.shapes:
        unknown = [name for name in args.shapes.split(",") if name not in known]
        if unknown:
            parser.error(f"unknown shape name(s) {', '.join(unknown)}: names look like {known[0]} "
                         f"(--list-shapes prints all {len(known)})")
    if args.sglang not in ("all", "none", "auto"):
        unknown = [name for name in args.sglang.split(",") if name not in known]
        if unknown:
            parser.error(f"--sglang names unknown shape(s) {', '.join(unknown)}: give 'all', 'none', 'auto' or "
                         f"names like {known[0]} (--list-shapes prints all {len(known)})")
    if not torch.cuda.is_available():
        print("no CUDA GPU found: the verify benchmark needs one", file=sys.stderr)
        return 2
    started = time.time()  # --max-seconds counts the warm compile too
    if args.warm:
        warm_compile(quick_shapes(head_dims) if args.quick else grid_shapes(head_dims), args.warm)
    with l2_flush(args.l2_flush):
        return _run(args, argv, head_dims, started)


def _run(args, argv, head_dims, started: float) -> int:
    device = torch.device("cuda")
    ceilings = measure_ceilings(device)
    props = torch.cuda.get_device_properties(device)
    import triton

    from .sglang_tree_path import sglang_tree_path_unusable
    from .triton_launch import direct_launch_unusable

    sglang_unusable = sglang_tree_path_unusable()

    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "gpu": props.name, "torch": torch.__version__, "triton": triton.__version__,
            "eager_launch": direct_launch_unusable() or "direct",
            "command": "python -m specdec_kernels.bench " + " ".join(sys.argv[1:] if argv is None else argv),
            "l2_flush": args.l2_flush, "sglang": sglang_unusable or "imported", **ceilings}
    print(json.dumps(meta), flush=True)
    shapes = quick_shapes(head_dims) if args.quick else grid_shapes(head_dims)
    if args.shapes:
        shapes = [s for s in grid_shapes(head_dims) if s.name in set(args.shapes.split(","))]
    flex_names = set() if args.flex == "none" else ({s.name for s in shapes} if args.flex == "all"
                                                    else set(args.flex.split(",")))
    sglang_names = ({s.name for s in shapes} if args.sglang == "all" or (args.sglang == "auto" and not sglang_unusable)
                    else set() if args.sglang in ("none", "auto") else set(args.sglang.split(",")))
    rows = []
    for i, shape in enumerate(shapes):
        if time.time() - started > args.max_seconds:
            print(f"time budget reached: {len(shapes) - i} shapes not run", flush=True)
            break
        row = run_shape(shape, ceilings, shape.name in flex_names, seed=i, baselines=not args.no_sdpa,
                        with_sglang=shape.name in sglang_names)
        rows.append(row)
        print(json.dumps(row), flush=True)
    extra = None
    if time.time() - started <= args.max_seconds:
        extra = run_accept_commit()
        print(json.dumps({"accept_commit": extra}), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows, "accept_commit": extra, "goals": goal_summary(rows)}, f, indent=1)
    return write_table(rows, args.markdown, json.dumps(meta), f"\naccept+commit: {json.dumps(extra)}\n")


if __name__ == "__main__":
    sys.exit(main())
