"""Command line of the embedded engine: ``python -m pytest_specdec.engine --method ... --budget ...``.

The flags listed in docs/ARCHITECTURE.md are a contract with the plugin's launcher; flags added
here are optional extras. Budget semantics, made explicit: ``--budget`` counts draft nodes per
verify step, the root excluded, so a step verifies ``T = budget + 1`` tokens. ``ar`` ignores it
(T = 1). ``dflash`` verifies a chain of ``min(budget, block_size - 1)`` drafts (default: the
whole block, 15 for the default block of 16, as SGLang's DFLASH verifies 16 tokens).
``ddtree`` verifies the best-first tree of exactly ``budget`` nodes (default 16) drawn from the
drafter's ``block_size - 1`` positions.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, NoReturn

from .. import extras
from ..configuration import METHODS, algorithm_of_method, is_speculative, takes_budget
from ..errors import SpecdecUsageError
from . import logs
from .faults import FaultPlan

# The seeded models (their shapes: model.PRESETS); the hybrid ones interleave Gated DeltaNet
# layers with attention as Qwen3.5/3.6 do. The plugin's config accepts exactly these names.
MODEL_PRESETS = ("tiny", "8b-layer", "tiny-hybrid", "27b-hybrid-layers")
HYBRID_PRESETS = ("tiny-hybrid", "27b-hybrid-layers")
# How a hybrid model's recurrent layers see a draft tree: "exact" (each node on its own path),
# "chain" (the nodes as one sequence in node order: the state leak, for comparison).
RECURRENT_TREE_MODES = ("exact", "chain")

DEFAULT_DDTREE_BUDGET = 16
DEVICES = ("cpu", "cuda")
MIN_BLOCK_SIZE = 2  # the root and at least one draft position


@dataclass(frozen=True)
class EngineArgs:
    host: str
    port: int
    method: str
    budget: int  # resolved: draft nodes per verify step (0 for ar)
    block_size: int
    draft_agreement: float
    seed: int
    model_preset: str
    recurrent_tree: str
    model_path: str | None
    num_layers: int | None
    device: str
    dtype: str
    kernel_impl: str
    cpu_threads: int
    context_length: int
    max_batch: int
    decode_log_interval: int
    log_level: str
    http_idle_timeout: float
    #: batch sizes whose decode step runs once before ready (warm.py); None: auto (warm.resolve)
    warmup_batch_sizes: tuple[int, ...] | None
    faults: FaultPlan

    @property
    def served_model_name(self) -> str:
        return self.model_path or f"specdec-embedded/{self.model_preset}"


def model_file_of(model_path: str | Path) -> Path:
    """The weights file ``--model-path`` names: the path itself, or a directory's model.safetensors."""
    path = Path(model_path)
    return path / "model.safetensors" if path.is_dir() else path


def _budget_set(text: str) -> frozenset[int]:
    try:
        return frozenset(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 8,12, got {text!r}") from None


def _warm_sizes(text: str) -> tuple[int, ...] | None:
    """--warmup-batch-sizes: None for auto, () for none, else the sizes ascending, once each."""
    if text.strip().lower() in ("auto", "none"):
        return None if text.strip().lower() == "auto" else ()
    try:
        sizes = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        sizes = ()
    if not sizes:
        raise argparse.ArgumentTypeError(f"expected auto, none or comma-separated batch sizes like 1,2,4, "
                                         f"got {text!r}")
    return sizes


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pytest_specdec.engine",
        description="The embedded speculative-decoding engine: SGLang's HTTP API over a small model "
                    "decoded autoregressively, with a DFlash chain, or with a DDTree.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--method", choices=METHODS, required=True)
    p.add_argument("--budget", type=int, default=None,
                   help="draft nodes per verify step, root excluded (T = budget + 1); ddtree default 16, "
                        "dflash default and cap block-size - 1, ignored by ar")
    p.add_argument("--block-size", type=int, default=16,
                   help="drafter block, root included: the drafter proposes block-size - 1 positions")
    p.add_argument("--draft-agreement", type=float, default=0.9,
                   help="probability per drafted position that the drafter proposes the target's "
                        "likely next token rather than a random one: 0 drafts noise (accept length about 1), "
                        "1 proposes it at every position (docs/ARCHITECTURE.md, The embedded engine process)")
    p.add_argument("--seed", type=int, default=0, help="seed of the model weights and the drafter's noise")
    p.add_argument("--model-preset", choices=MODEL_PRESETS, default="tiny",
                   help=f"seeded model shapes; {' and '.join(HYBRID_PRESETS)} are hybrids (Gated DeltaNet + attention)")
    p.add_argument("--recurrent-tree", choices=RECURRENT_TREE_MODES, default="exact",
                   help="a hybrid model's recurrent layers over a draft tree: exact (each node on its own path, "
                        "lossless) or chain (the nodes as one sequence in node order: leaks state between branches)")
    p.add_argument("--model-path", default=None,
                   help="safetensors file or directory (model.safetensors + config.json) instead of seeded weights")
    p.add_argument("--num-layers", type=int, default=None, help="override the preset's (or file's) layer count")
    p.add_argument("--device", choices=DEVICES, default="cpu")
    p.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto",
                   help="auto: float32 on the CPU, bfloat16 on CUDA")
    p.add_argument("--kernel-impl", choices=("auto", "triton", "torch"), default="auto",
                   help="specdec_kernels implementation (auto: Triton on CUDA, torch references on the CPU)")
    p.add_argument("--cpu-threads", type=int, default=1,
                   help="torch intra-op threads; one suits the tiny model's small matmuls best")
    p.add_argument("--context-length", type=int, default=4096)
    p.add_argument("--max-batch", type=int, default=8, help="requests decoded together; more wait in a queue")
    p.add_argument("--warmup-batch-sizes", type=_warm_sizes, default=None, metavar="auto|none|B1,B2",
                   help="before ready, run one decode step at each of these batch sizes, so the GPU kernels "
                        "that compile per batch size do so before a client is measured; auto (default): "
                        "1..--max-batch with the Triton kernels, none with the torch ones (a CPU engine)")
    p.add_argument("--decode-log-interval", type=int, default=40)
    p.add_argument("--log-level", default="info", type=str.lower,
                   choices=("debug", "info", "warning", "error", "critical"))
    # Longer than aiohttp's client keep-alive (15 s), so a pooled client connection is always
    # closed by its client first and never races the server's close.
    p.add_argument("--http-idle-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="close a connection that sends no complete request for this long (idle, or slow "
                        "headers); a request body slower than this gets 408")
    g = p.add_argument_group("fault injection", "fail as a real server does, with its log lines, to test the "
                             "plugin's crash, hang, zero-token and regression handling (docs/ARCHITECTURE.md, "
                             "The embedded engine process)")
    g.add_argument("--fault-crash-warmup", action="store_true", help="fail the warm-up request and exit 1")
    g.add_argument("--fault-crash-after", type=int, default=None, metavar="N",
                   help="serve N requests, then crash with a CUDA illegal instruction")
    g.add_argument("--fault-crash-budgets", type=_budget_set, default=frozenset(), metavar="B1,B2",
                   help="crash at the first verify (warm-up) when the budget is in this set")
    g.add_argument("--fault-zero-tokens", action="store_true",
                   help="answer every request with zero tokens while /health stays 200")
    g.add_argument("--fault-hang", action="store_true",
                   help="once ready, never answer /generate, /v1/completions, /v1/chat/completions, /health, "
                        "/health_generate, /server_info, /flush_cache")
    g.add_argument("--fault-hang-after", type=int, default=None, metavar="N",
                   help="serve N requests, then stream a few tokens of the next and freeze the "
                        "scheduler (process alive, no more tokens)")
    g.add_argument("--fault-slow-start", type=float, default=0.0, metavar="SECONDS",
                   help="delay model loading (port not yet bound) by SECONDS")
    g.add_argument("--fault-slow-factor", type=float, default=1.0, metavar="F",
                   help="every decode step takes F times as long (a planted performance regression)")
    g.add_argument("--fault-lossy", type=float, default=0.0, metavar="P",
                   help="with probability P per verify step, accept one draft token the target did not "
                        "predict (a planted losslessness bug)")
    return p


def rejecting_parser(reject: Callable[[str], NoReturn]) -> argparse.ArgumentParser:
    """The engine's parser, telling `reject` of a mistake instead of printing it and exiting: the
    plugin checks its servers' arguments at start."""
    parser = build_parser()
    parser.error = reject  # type: ignore[method-assign]
    return parser


def parse_args(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> EngineArgs:
    """The engine's arguments, checked beyond what argparse checks; ``parser``: one whose ``error``
    the caller replaced (the config check names the mistake without exiting)."""
    parser = parser or build_parser()
    ns = parser.parse_args(argv)
    if ns.block_size < MIN_BLOCK_SIZE:
        parser.error(f"--block-size must be >= {MIN_BLOCK_SIZE} (the root and at least one draft), "
                     f"got {ns.block_size}")
    if not 0.0 <= ns.draft_agreement <= 1.0:
        parser.error(f"--draft-agreement must be in [0, 1], got {ns.draft_agreement}")
    if not is_speculative(ns.method):
        budget = 0
    elif ns.method == "dflash":
        budget = min(ns.block_size - 1 if ns.budget is None else ns.budget, ns.block_size - 1)
    else:
        budget = DEFAULT_DDTREE_BUDGET if ns.budget is None else ns.budget
    if is_speculative(ns.method) and budget < 1:
        parser.error(f"--budget must be >= 1 for {ns.method} (use --method ar for no speculation)")
    for name in ("context_length", "max_batch", "cpu_threads", "decode_log_interval"):
        if getattr(ns, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if is_speculative(ns.method) and budget + 1 >= ns.context_length:
        # the verify step's T = budget + 1 rows and at least one prompt token share the context
        parser.error(f"--budget {budget} verifies {budget + 1} tokens a step, which leaves no room for a prompt "
                     f"in --context-length {ns.context_length}; use a smaller budget or a longer context")
    outside = [n for n in ns.warmup_batch_sizes or () if not 1 <= n <= ns.max_batch]
    if outside:
        parser.error(f"--warmup-batch-sizes {','.join(map(str, outside))}: a batch size must be in 1..{ns.max_batch} "
                     f"(--max-batch); list such sizes, or give auto or none")
    if not 1 <= ns.port <= 65535:
        parser.error(f"--port must be in 1-65535, got {ns.port}")
    if ns.model_path is not None and not model_file_of(ns.model_path).is_file():
        parser.error(f"--model-path {ns.model_path}: no {model_file_of(ns.model_path)}; pass a .safetensors file "
                     "or a directory holding model.safetensors and config.json")
    if ns.num_layers is not None and ns.num_layers < 1:
        parser.error("--num-layers must be >= 1")
    if ns.fault_crash_after is not None and ns.fault_crash_after < 0:
        parser.error("--fault-crash-after must be >= 0")
    if ns.fault_hang_after is not None and ns.fault_hang_after < 0:
        parser.error("--fault-hang-after must be >= 0")
    if not 0 <= ns.fault_slow_start < float("inf"):
        parser.error(f"--fault-slow-start must be a finite number of seconds >= 0, got {ns.fault_slow_start}")
    if ns.recurrent_tree != "exact" and ns.model_path is None and ns.model_preset not in HYBRID_PRESETS:
        parser.error(f"--recurrent-tree {ns.recurrent_tree} needs a hybrid model: --model-preset {ns.model_preset} "
                     f"has no recurrent layers (use {' or '.join(HYBRID_PRESETS)})")
    if not 0 < ns.http_idle_timeout < float("inf"):
        parser.error(f"--http-idle-timeout must be a positive number of seconds, got {ns.http_idle_timeout}")
    if not 1 <= ns.fault_slow_factor < float("inf"):
        parser.error(f"--fault-slow-factor must be a finite number >= 1 (1 is no slowdown), got {ns.fault_slow_factor}")
    if not 0.0 <= ns.fault_lossy <= 1.0:
        parser.error(f"--fault-lossy must be a probability in [0, 1], got {ns.fault_lossy}")
    faults = FaultPlan(crash_warmup=ns.fault_crash_warmup, crash_after=ns.fault_crash_after,
                       crash_budgets=ns.fault_crash_budgets, zero_tokens=ns.fault_zero_tokens,
                       hang=ns.fault_hang, hang_after=ns.fault_hang_after,
                       slow_start=ns.fault_slow_start, slow_factor=ns.fault_slow_factor,
                       lossy=ns.fault_lossy)
    dtype = ns.dtype if ns.dtype != "auto" else ("bfloat16" if ns.device == "cuda" else "float32")
    return EngineArgs(host=ns.host, port=ns.port, method=ns.method, budget=budget, block_size=ns.block_size,
                      draft_agreement=ns.draft_agreement, seed=ns.seed, model_preset=ns.model_preset,
                      recurrent_tree=ns.recurrent_tree,
                      model_path=ns.model_path, num_layers=ns.num_layers, device=ns.device, dtype=dtype,
                      kernel_impl=ns.kernel_impl, cpu_threads=ns.cpu_threads, context_length=ns.context_length,
                      max_batch=ns.max_batch, decode_log_interval=ns.decode_log_interval,
                      log_level=ns.log_level, http_idle_timeout=ns.http_idle_timeout,
                      warmup_batch_sizes=ns.warmup_batch_sizes, faults=faults)


def server_args_dict(args: EngineArgs, tokenizer_path: str | None = None) -> dict:
    """The resolved arguments for /server_info: ours, plus SGLang's names for the same things.
    `tokenizer_path`: the directory the engine wrote its tokenizer into (default: the served name)."""
    ours = asdict(args)
    faults = ours.pop("faults")
    ours.update({f"fault_{k}": sorted(v) if isinstance(v, frozenset) else v for k, v in faults.items()})
    speculative = is_speculative(args.method)
    return {
        **ours,
        "model_path": args.served_model_name,
        "tokenizer_path": tokenizer_path or args.served_model_name,
        "served_model_name": args.served_model_name,
        "random_seed": args.seed,
        "tp_size": 1,
        "dp_size": 1,
        "pp_size": 1,
        "max_running_requests": args.max_batch,
        "attention_backend": f"specdec_kernels ({args.kernel_impl})",
        "speculative_algorithm": algorithm_of_method(args.method),
        "speculative_num_draft_tokens": args.budget + 1 if speculative else None,
        "speculative_dflash_block_size": args.block_size if speculative else None,
        "speculative_ddtree_budget": args.budget if takes_budget(args.method) else None,
        # its drafter is distilled from the target's own weights: SGLang names the target where the
        # draft is bundled in its checkpoint (MTP), and null where nothing drafts
        "speculative_draft_model_path": args.served_model_name if speculative else None,
        "enable_metrics": True,
        # no prefix is kept between requests: SGLang's --disable-radix-cache, whose cached_tokens are 0
        "disable_radix_cache": True,
    }


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()
    args = parse_args(argv)
    try:  # without torch the engine's first import would end in a ModuleNotFoundError traceback
        extras.require("engine", "the embedded engine (python -m pytest_specdec.engine)")
    except SpecdecUsageError as exc:
        print(f"pytest-specdec: {exc}", file=sys.stderr)
        return 2
    logs.setup(args.log_level)
    try:
        return _start(args, started)
    except KeyboardInterrupt:  # before serve() owns SIGINT: loading, not a crash to trace back
        logs.SERVER.info("Interrupted before the engine was ready; exiting.")
        return 130


def _start(args: EngineArgs, started: float) -> int:
    logs.SERVER.info(f"server_args={args}")
    if args.faults.slow_start:
        logs.SERVER.info(f"Load weight begin (delayed {args.faults.slow_start:g} s by --fault-slow-start).")
        time.sleep(args.faults.slow_start)

    from .runtime import build_server  # torch is imported here, after the cheap checks

    server = build_server(args, started)
    logs.SERVER.info(f"Engine built in {time.perf_counter() - started:.2f} s; binding {args.host}:{args.port}.")
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
