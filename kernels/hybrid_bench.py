"""Hybrid-layer verify benchmark on a GPU: the tree gated delta rule against the copy bandwidth,
the obvious alternative and an ordinary chain pass, and the commit against the verify.

    python -m specdec_kernels.hybrid_bench                 # the per-GPU grid, one table
    python -m specdec_kernels.hybrid_bench --quick         # a few shapes
    python -m specdec_kernels.hybrid_bench --json out.json --markdown out.md

Shapes: Qwen3.6-27B's Gated DeltaNet heads per GPU (TP1 16 key / 48 value heads, TP4 4/12,
TP8 2/6; Dk = Dv = 128), T in {9, 17, 33, 65}, batch {1, 8, 32}; bf16 inputs, a float32 state,
a random best-first tree per request. Per shape, all in one run, timed as ``bench`` times the
verify attention (``time_in_graph``: CUDA-graph replays over rotating input sets, L2 flushed by a
read):
- ``us``: :func:`tree_gated_delta_rule`; bytes = the state read once + q, k, v, g, beta, the
  ancestor mask and the output; ``BW %`` against the device copy measured at the start;
  ``mix us``: its first launch alone (the state-independent mixing matrix) where it takes two,
  ``-`` where it takes the fused kernel;
- ``x alt``: the obvious alternative, a per-node recurrence in torch (each node's state from its
  parent's, T steps of a rank-one update on every request and head), time ratio;
- ``x chain``: an ordinary chain-shaped gated delta rule pass over the same T tokens (one Triton
  program per head and value slice stepping through them, as decode kernels do), time ratio;
- ``commit %``: :func:`commit_recurrent_state` along the deepest node's path, in percent of the
  verify's time, and ``commit roof %``: the least it can be, its bytes (the state read and written
  once) at the copy bandwidth, in percent of the verify's time (the JSON rows also hold
  ``commit_floor_us``, the streaming kernel of :mod:`memory_floor` over the commit's bytes);
- ``conv us``: :func:`tree_causal_conv1d` over the layer's q/k/v channels (kernel 4);
- ``launch us`` / ``floor us``: an empty kernel and a kernel that only reads the shape's bytes
  once, timed the same way (:mod:`memory_floor`); ``60% us`` the time the bandwidth goal allows
  (bytes at 60 % of the copy bandwidth): where ``floor us`` exceeds it no kernel can meet it;
- correctness on every timed shape: the kernel's output, called and replayed in a CUDA graph,
  against the float32 torch reference (row relative error, bound 3e-2), the chain pass's against
  the reference on a chain mask.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import sys

from .arguments import hybrid_bench_parser

if __name__ == "__main__":  # without torch the import below would end in a traceback, not one line
    from .command_line import require

    require("python -m specdec_kernels.hybrid_bench", "torch", "triton",
            parser=lambda: hybrid_bench_parser(__doc__.split("\n")[0]))

import torch

from .bench import l2_flush, measure_ceilings, random_best_first_parents, time_in_graph, verdict

ROW_TOLERANCE_BF16 = 3e-2
# The bandwidth goal: this fraction of the copy bandwidth at this batch and above.
BANDWIDTH_GOAL = 0.6
BANDWIDTH_GOAL_BATCH = 8
HEAD_DIM = 128
CONV_KERNEL = 4
# Qwen3.6-27B's linear-attention heads (key, value) on one GPU at each tensor-parallel size.
TP_HEADS = {1: (16, 48), 4: (4, 12), 8: (2, 6)}
# Each timed call reads its own input set until this many bytes have been cycled (as bench does).
ROTATION_BYTES = 256 * 2**20
MAX_INPUT_SETS = 32


@dataclasses.dataclass(frozen=True)
class HybridShape:
    batch: int
    num_nodes: int
    key_heads: int
    value_heads: int
    head_dim: int = HEAD_DIM

    @property
    def name(self) -> str:
        return f"B{self.batch}-T{self.num_nodes}-H{self.key_heads}/{self.value_heads}"

    @property
    def conv_channels(self) -> int:
        return (2 * self.key_heads + self.value_heads) * self.head_dim

    def state_bytes(self) -> int:
        return self.batch * self.value_heads * self.head_dim * self.head_dim * 4

    def bytes_moved(self) -> int:
        """The state read once, the tree's q, k, v, g, beta and mask, the output written once."""
        b, t, d = self.batch, self.num_nodes, self.head_dim
        tree = b * t * (2 * self.key_heads * d * 2 + 2 * self.value_heads * d * 2 + self.value_heads * (4 + 2)
                        + 4 * math.ceil(t / 32))
        return self.state_bytes() + tree

    def commit_bytes(self, path_len: int) -> int:
        """The state read and written once, and the path's k, v, g, beta (conv state aside)."""
        per_node = self.key_heads * self.head_dim * 2 + self.value_heads * (self.head_dim * 2 + 6)
        return 2 * self.state_bytes() + self.batch * path_len * per_node


def issue_shapes() -> list[HybridShape]:
    return [HybridShape(b, t, hk, hv) for hk, hv in TP_HEADS.values() for t in (9, 17, 33, 65) for b in (1, 8, 32)]


def quick_shapes() -> list[HybridShape]:
    return [HybridShape(8, t, 16, 48) for t in (9, 17, 33, 65)] + [HybridShape(32, 65, 2, 6), HybridShape(1, 17, 4, 12)]


def make_inputs(shape: HybridShape, device, seed: int) -> dict:
    from .tree_layout import ancestor_mask_from_parents

    gen = torch.Generator(device=device).manual_seed(seed)
    b, t, d = shape.batch, shape.num_nodes, shape.head_dim
    bf16 = dict(device=device, dtype=torch.bfloat16)

    def normed(*size):
        return torch.nn.functional.normalize(torch.randn(*size, generator=gen, device=device), dim=-1).to(**bf16)

    parents = random_best_first_parents(b, t, device, gen)
    return dict(q=normed(b, t, shape.key_heads, d), k=normed(b, t, shape.key_heads, d),
                v=torch.randn(b, t, shape.value_heads, d, generator=gen, **bf16),
                g=-0.7 * torch.rand(b, t, shape.value_heads, generator=gen, device=device),
                beta=torch.rand(b, t, shape.value_heads, generator=gen, device=device).to(torch.bfloat16),
                state=torch.randn(b, shape.value_heads, d, d, generator=gen, device=device) / math.sqrt(d),
                ancestor_mask=ancestor_mask_from_parents(parents), parents=parents)


def per_node_recurrence(q, k, v, g, beta, state, parents, scale):
    """The obvious alternative: node by node, each node's state from its parent's (the committed
    state for the root), one rank-one update on every request and head at a time, all in float32."""
    from .recurrent_commit import delta_rule_step

    batch, num_nodes = q.shape[:2]
    group = v.shape[2] // q.shape[2]
    rows = torch.arange(batch, device=q.device)
    node_states = torch.empty((num_nodes, *state.shape), dtype=torch.float32, device=q.device)
    outs = []
    for i in range(num_nodes):
        parent = parents[:, i].long()
        start = torch.where((parent < 0)[:, None, None, None], state, node_states[parent.clamp(min=0), rows])
        node_states[i] = delta_rule_step(start, k[:, i].float().repeat_interleave(group, 1), v[:, i].float(),
                                         g[:, i].float(), beta[:, i].float())
        qi = q[:, i].float().repeat_interleave(group, 1)
        outs.append(scale * torch.einsum("bhkv,bhk->bhv", node_states[i], qi))
    return torch.stack(outs, 1).to(v.dtype)


def replayed(call, inputs):
    """``call(*inputs)``'s output from one replay of a CUDA graph that captured it (the timed way)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call(*inputs)
    graph.replay()
    torch.cuda.synchronize()
    return out


def bandwidth_verdict(row: dict) -> str:
    """``met``, ``missed``, ``unreachable`` (the read-once kernel itself misses it: the verify
    bench's rule, :func:`~specdec_kernels.bench.verdict`) or ``-`` (below the goal's batch)."""
    if row["batch"] < BANDWIDTH_GOAL_BATCH:
        return "-"
    return verdict(row["us"], row["goal_us"], row["stream_us"])


def worst_row_error(out, ref) -> float:
    err = (out.float() - ref.float()).norm(dim=-1) / ref.float().norm(dim=-1).clamp_min(1e-30)
    return float(err.max())


def deepest_path(parents):
    """(path [B, T] int32, path_len [B] int32): each request's path to its deepest node."""
    batch, num_nodes = parents.shape
    depth = torch.zeros(batch, num_nodes, dtype=torch.int64, device=parents.device)
    for i in range(1, num_nodes):
        depth[:, i] = depth.gather(1, parents[:, i:i + 1].long().clamp(min=0))[:, 0] + 1
    node = depth.argmax(1)
    path_len = depth.max(1).values + 1
    path = torch.full((batch, num_nodes), -1, dtype=torch.int32, device=parents.device)
    for step in range(int(path_len.max()) - 1, -1, -1):
        active = step < path_len
        path[:, step] = torch.where(active, node, path[:, step].long()).to(torch.int32)
        node = torch.where(active, parents.long().gather(1, node[:, None])[:, 0], node)
    return path, path_len.to(torch.int32)


def run_shape(shape: HybridShape, ceilings: dict, seed: int, alternative: bool = True, config=None,
              only_verify: bool = False) -> dict:
    from triton.testing import do_bench

    from .recurrent_commit import commit_recurrent_state
    from .recurrent_commit_triton import sequential_gated_delta_rule_triton
    from .tree_conv import tree_causal_conv1d
    from .tree_delta import tree_gated_delta_rule_reference
    from .hybrid_configs import hybrid_config
    from .memory_floor import measure_floor
    from .tree_delta_triton import split_mixing, tree_delta_mixing, tree_gated_delta_rule_triton
    from .tree_layout import ancestor_mask_from_parents

    device = torch.device("cuda")
    count = max(1, min(MAX_INPUT_SETS, math.ceil(ROTATION_BYTES / shape.bytes_moved())))
    sets = [make_inputs(shape, device, seed + i) for i in range(count)]
    first = sets[0]
    args = ("q", "k", "v", "g", "beta", "state", "ancestor_mask")
    row = {"shape": shape.name, **dataclasses.asdict(shape), "input_sets": count}

    def ours(q, k, v, g, beta, state, ancestor_mask):
        return tree_gated_delta_rule_triton(q, k, v, g, beta, state, ancestor_mask, HEAD_DIM ** -0.5, config)

    out = ours(*(first[a] for a in args))
    ref = tree_gated_delta_rule_reference(*(first[a] for a in args))
    row["err"] = max(worst_row_error(out, ref), worst_row_error(replayed(ours, [first[a] for a in args]), ref))
    row["ok"] = row["err"] <= ROW_TOLERANCE_BF16
    row["us"] = time_in_graph(ours, [tuple(s[a] for a in args) for s in sets])
    row["tb_s"] = shape.bytes_moved() / row["us"] / 1e6
    row["bw_frac"] = row["tb_s"] / ceilings["copy_tb_s"]

    def mixing(q, k, g, beta, ancestor_mask):
        return tree_delta_mixing(q, k, g, beta, ancestor_mask, shape.value_heads, config)

    row["path"] = "split" if split_mixing(shape.batch * shape.value_heads, shape.num_nodes,
                                          config or hybrid_config(device)) else "fused"
    if row["path"] == "split":
        row["mix_us"] = time_in_graph(mixing, [tuple(s[a] for a in ("q", "k", "g", "beta", "ancestor_mask"))
                                               for s in sets])
    if only_verify:
        return row
    floor = measure_floor(shape.bytes_moved(), count, device)
    row.update(launch_us=floor.launch_us, stream_us=floor.stream_us,
               goal_us=shape.bytes_moved() / (BANDWIDTH_GOAL * ceilings["copy_tb_s"] * 1e6))

    def chain(q, k, v, g, beta, state):
        return sequential_gated_delta_rule_triton(q, k, v, g, beta, state)

    chain_parents = torch.arange(-1, shape.num_nodes - 1, dtype=torch.int32, device=device).expand(shape.batch, -1)
    chain_ref = tree_gated_delta_rule_reference(*(first[a] for a in args[:-1]), ancestor_mask_from_parents(chain_parents))
    row["chain_err"] = worst_row_error(chain(*(first[a] for a in args[:-1])), chain_ref)
    row["ok"] = row["ok"] and row["chain_err"] <= ROW_TOLERANCE_BF16
    row["chain_us"] = time_in_graph(chain, [tuple(s[a] for a in args[:-1]) for s in sets])
    row["x_chain"] = row["chain_us"] / row["us"]

    if alternative:
        alt = lambda: per_node_recurrence(*(first[a] for a in args[:-1]), first["parents"], HEAD_DIM ** -0.5)  # noqa: E731
        row["alt_err"] = worst_row_error(alt(), ref)
        torch.cuda.synchronize()
        row["alt_us"] = do_bench(alt, warmup=2, rep=20, return_mode="median") * 1e3
        row["x_alt"] = row["alt_us"] / row["us"]

    path, path_len = deepest_path(first["parents"])
    row["path_len"] = float(path_len.float().mean())
    channels = shape.conv_channels
    gen = torch.Generator(device=device).manual_seed(seed)
    conv_sets = []
    for s in sets:
        x = torch.randn(shape.batch, shape.num_nodes, channels, generator=gen, device=device, dtype=torch.bfloat16)
        conv_sets.append((x, torch.randn(shape.batch, channels, CONV_KERNEL - 1, generator=gen, device=device,
                                         dtype=torch.bfloat16)))
    weight = torch.randn(channels, CONV_KERNEL, generator=gen, device=device, dtype=torch.bfloat16)

    def commit(state, conv_state, x, k, v, g, beta):
        commit_recurrent_state(state, conv_state, x, k, v, g, beta, path, path_len, impl="triton")

    row["commit_us"] = time_in_graph(commit, [(s["state"], c[1], c[0], s["k"], s["v"], s["g"], s["beta"])
                                              for s, c in zip(sets, conv_sets)])
    row["commit_frac"] = row["commit_us"] / row["us"]
    row["commit_roof_frac"] = shape.commit_bytes(int(path_len.max())) / (ceilings["copy_tb_s"] * 1e6) / row["us"]
    # the same bytes read once by the streaming kernel: where even that exceeds 10 % of the verify, so would any commit
    row["commit_floor_us"] = measure_floor(shape.commit_bytes(int(path_len.max())), count, device).stream_us

    def conv(x, conv_state, parents):
        return tree_causal_conv1d(x, weight, None, conv_state, parents, impl="triton")

    row["conv_us"] = time_in_graph(conv, [(c[0], c[1], s["parents"]) for s, c in zip(sets, conv_sets)])
    del sets, conv_sets, first
    torch.cuda.empty_cache()
    return row


# What the sweep tries: changes to the table's tree-delta row (HybridConfig fields), the row itself first.
SWEEP_TILES = ({}, {"delta_dependent_launch": False}, {"delta_rows": 32}, {"delta_warps": 8},
               {"delta_block_v": 128, "delta_warps": 8}, {"delta_mix_warps": 4},
               {"delta_split_heads": 0, "delta_split_heads_deep": 0})
SWEEP_SHAPES = (HybridShape(8, 9, 16, 48), HybridShape(8, 33, 16, 48), HybridShape(32, 65, 2, 6),
                HybridShape(32, 65, 16, 48), HybridShape(8, 17, 4, 12), HybridShape(1, 33, 16, 48))


def tile_label(tile: dict) -> str:
    return ",".join(f"{k.removeprefix('delta_')}={v}" for k, v in tile.items()) or "table"


def tile_config(base, tile: dict):
    return dataclasses.replace(base, **tile)


def run_sweep(ceilings: dict) -> tuple[list[dict], dict]:
    """Time the tree-delta kernel with each of SWEEP_TILES on SWEEP_SHAPES (correctness checked
    on each); return the rows and the tile with the least geometric-mean time over the shapes
    some tile ran, among the tiles that ran all of them (else the table's own row)."""
    from .hybrid_configs import hybrid_config

    base = hybrid_config(torch.device("cuda"))
    rows, logs = [], {}
    for t, tile in enumerate(SWEEP_TILES):
        for i, shape in enumerate(SWEEP_SHAPES):
            try:
                row = run_shape(shape, ceilings, seed=100 + i, config=tile_config(base, tile), only_verify=True)
            except Exception as error:  # a tile the compiler or the GPU refuses is left out, not fatal
                row = {"shape": shape.name, "ok": False, "error": repr(error)[:300]}
            row["tile"] = tile_label(tile)
            rows.append(row)
            print(json.dumps(row), flush=True)
            if row["ok"]:
                logs.setdefault(t, []).append(math.log(row["us"]))
    # a shape that no tile ran (out of memory, say) cannot rank the tiles: it is left out, named
    ran = {row["shape"] for row in rows if row["ok"]}
    for shape in SWEEP_SHAPES:
        if shape.name not in ran:
            print(f"sweep: {shape.name} ran with no tile (see its rows); the tiles are ranked without it",
                  file=sys.stderr)
    complete = {t: sum(v) / len(v) for t, v in logs.items() if len(v) == len(ran)}
    if not complete:
        print("sweep: no tile ran every shape that some tile ran; the table keeps its own row", file=sys.stderr)
        return rows, SWEEP_TILES[0]
    return rows, SWEEP_TILES[min(complete, key=complete.get)]


def format_table(rows) -> str:
    head = ("| shape | us | mix us | TB/s | BW % | launch us | floor us | 60% us | BW goal | chain us | x chain "
            f"| alt us | x alt | commit us | commit % | commit roof % | conv us | err | ok |\n|{'---|' * 19}")
    lines = [head]
    for r in rows:
        def f(key, fmt):
            return format(r[key], fmt) if key in r else "-"
        lines.append(f"| {r['shape']} | {r['us']:.1f} | {f('mix_us', '.1f')} | {r['tb_s']:.2f} | {100 * r['bw_frac']:.0f} | "
                     f"{r['launch_us']:.1f} | {r['stream_us']:.1f} | {r['goal_us']:.1f} | {bandwidth_verdict(r)} | "
                     f"{r['chain_us']:.1f} | {r['x_chain']:.2f} | {f('alt_us', '.0f')} | {f('x_alt', '.0f')} | "
                     f"{r['commit_us']:.1f} | {100 * r['commit_frac']:.0f} | {100 * r['commit_roof_frac']:.0f} | "
                     f"{r['conv_us']:.1f} | {r['err']:.1e} | {'yes' if r['ok'] else 'FAILED'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = hybrid_bench_parser(__doc__.split("\n")[0])
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA GPU found: the hybrid benchmark needs one", file=sys.stderr)
        return 2
    import triton

    with l2_flush(args.l2_flush):
        ceilings = measure_ceilings(torch.device("cuda"))
        meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
                "command": "python -m specdec_kernels.hybrid_bench " + " ".join(sys.argv[1:] if argv is None else argv),
                **ceilings}
        print(json.dumps(meta), flush=True)
        config = None
        if args.sweep:
            from .hybrid_configs import hybrid_config

            sweep_rows, tile = run_sweep(ceilings)
            meta.update(sweep=sweep_rows, delta_tile=tile_label(tile))
            config = tile_config(hybrid_config(torch.device("cuda")), tile)
            print(json.dumps({"delta_tile": meta["delta_tile"]}), flush=True)
        rows = []
        for i, shape in enumerate(quick_shapes() if args.quick else issue_shapes()):
            rows.append(run_shape(shape, ceilings, seed=i, alternative=not args.no_alternative, config=config))
            print(json.dumps(rows[-1]), flush=True)
    table = format_table(rows)
    print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(f"{json.dumps({k: v for k, v in meta.items() if k != 'sweep'})}\n\n{table}\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
