"""Assembles an engine from its arguments: device, model, drafter, decoder, scheduler, server.

The one module that knows every piece, so each of them is built and tested alone. It imports
torch, so cli.py imports it only after the command line's cheap checks: ``--help`` and a bad flag
answer without loading torch."""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from .. import __version__
from ..configuration import is_speculative
from . import logs, warm
from .cli import EngineArgs, server_args_dict
from .decoding import SpeculativeDecoder
from .drafter import BlockDrafter
from .export_tokenizer import export_cached
from .metrics import EngineMetrics
from .model import PRESETS, TargetModel
from .scheduler import Scheduler
from .server import EngineServer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


#: SGLang's CUDA graph phases, each timed in its startup figures; the engine captures no graph.
GRAPH_PHASES = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend")


def startup_time(*, load_weight: float, kv_cache_allocation: float, scheduler_e2e: float) -> dict:
    """A scheduler's startup figures in seconds, in the shape SGLang's /server_info gives them."""
    return {"load_weight": load_weight, "kv_cache_allocation": kv_cache_allocation,
            "scheduler_e2e": scheduler_e2e, "cuda_graph": dict.fromkeys(GRAPH_PHASES, 0.0)}


def tokenizer_path_for_clients(args: EngineArgs) -> str:
    """The tokenizer directory /model_info reports as ``tokenizer_path``: the engine's tokenizer
    written where clients on this host load it (bench_serving without ``--tokenizer``, as from an
    SGLang server's local path); the served name where it cannot be written, as before."""
    try:
        path = export_cached(context_length=args.context_length)
    except (OSError, RuntimeError) as exc:  # an unwritable cache, or no home directory to put it in
        where = getattr(exc, "filename", None) or "the cache directory"
        logs.SERVER.warning(
            f"Cannot write the tokenizer for clients into {where} ({getattr(exc, 'strerror', None) or exc}); "
            f"tokenizer_path stays {args.served_model_name}. Set XDG_CACHE_HOME to a writable directory, "
            "or pass clients --tokenizer DIR after python -m pytest_specdec.engine.export_tokenizer DIR.")
        return args.served_model_name
    logs.SERVER.info(f"Tokenizer for clients written to {path} (tokenizer_path).")
    return str(path)


def build_server(args: EngineArgs, started: float | None = None) -> EngineServer:
    """The engine's server, built and its scheduler started. `started`: the time.perf_counter()
    at which the engine's launch began, which its engine-wide startup time runs from."""
    begin = time.perf_counter()
    torch.set_num_threads(args.cpu_threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device")
    dtype = DTYPES[args.dtype]
    tree_rows = args.budget + 1
    max_positions = args.context_length + tree_rows
    with torch.inference_mode():
        if args.model_path:
            try:
                model = TargetModel.from_safetensors(args.model_path, device, dtype, max_positions, args.num_layers)
            except (OSError, ValueError, TypeError) as exc:  # the file's contents, not the engine's code
                raise SystemExit(f"--model-path {args.model_path}: {exc}") from None
        else:
            cfg = PRESETS[args.model_preset]
            if args.num_layers is not None:
                cfg = replace(cfg, num_layers=args.num_layers)
            model = TargetModel.from_seed(cfg, args.seed, device, dtype, max_positions)
        if args.recurrent_tree != "exact" and not model.is_hybrid:
            raise SystemExit(f"--recurrent-tree {args.recurrent_tree} needs a hybrid model; {args.model_path} "
                             "has no recurrent layers")
        drafter = None
        if is_speculative(args.method):
            drafter = BlockDrafter(model, args.block_size - 1, args.draft_agreement, args.seed)
        loaded = time.perf_counter()
        decoder = SpeculativeDecoder(model, args.method, args.budget, drafter, args.max_batch,
                                     args.context_length, kernel_impl=args.kernel_impl,
                                     recurrent_tree=args.recurrent_tree, lossy=args.faults.lossy,
                                     seed=args.seed)
        allocated = time.perf_counter()  # the decoder's time is its KV cache's
    metrics = EngineMetrics(args.served_model_name)
    metrics.spec_num_draft_tokens.set(args.budget + 1 if is_speculative(args.method) else 0)
    warm_sizes = warm.resolve(args.warmup_batch_sizes, args.max_batch, decoder.kernel_impl)
    scheduler = Scheduler(decoder, drafter, metrics, args.context_length, args.decode_log_interval, args.faults,
                          cpu_threads=args.cpu_threads, warm_sizes=warm_sizes)
    scheduler.start()
    scheduler.startup_time = startup_time(load_weight=loaded - begin, kv_cache_allocation=allocated - loaded,
                                          scheduler_e2e=time.perf_counter() - begin)
    engine_startup = {**scheduler.startup_time,
                      "tokenizer_e2e": time.perf_counter() - (begin if started is None else started)}
    cfg = model.config
    tokenizer_path = tokenizer_path_for_clients(args)
    # SGLang's /model_info keys in its order, at the values of a launch without those options; the model's shape after
    model_info = {
        "model_path": args.served_model_name,
        "served_model_name": args.served_model_name,
        "tokenizer_path": tokenizer_path,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "load_format": "auto",
        "reasoning_parser": None,
        "tool_call_parser": None,
        "disaggregation_mode": "null",
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "num_layers": cfg.num_layers,
        "hidden_size": cfg.hidden_size,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "vocab_size": cfg.vocab_size,
        "dtype": args.dtype,
    }
    if model.is_hybrid:
        model_info["layer_types"] = ["linear_attention" if cfg.is_linear(i) else "full_attention"
                                     for i in range(cfg.num_layers)]
    return EngineServer(host=args.host, port=args.port, scheduler=scheduler, metrics=metrics, faults=args.faults,
                        context_length=args.context_length,
                        # the sizes warmed, as SGLang's server arguments show its cuda_graph_bs resolved
                        server_args=server_args_dict(replace(args, warmup_batch_sizes=warm_sizes), tokenizer_path),
                        model_info=model_info, served_model_name=args.served_model_name, version=__version__,
                        idle_timeout=args.http_idle_timeout, startup_time=engine_startup)
