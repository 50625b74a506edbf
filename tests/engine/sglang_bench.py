"""SGLang's bench_serving (`sglang.benchmark.serving`) run from its reference copy against the
engine: its own argument parser and defaults, its run_benchmark's choice of URL, model and extra
body, and its request coroutines, so a field SGLang adds or a default it changes reaches the test.

Importing the module takes transformers and Hugging Face `datasets` (its tokenizer and dataset
loaders) and, through the one constant it reads from `sglang.srt.disaggregation`, SGLang's model
configs; none of these builds a request, so they are stand-ins while it imports. The dataset is
ours: one SGLang `DatasetRow` per prompt, as its random dataset makes them. So is the tokenizer,
unless a test hands in a loader (SGLang's own `get_tokenizer`, where transformers is installed);
either way the name bench_serving chose for it is recorded. The Hugging Face Hub is unreachable,
as on a machine offline: a lookup there fails at once rather than after network timeouts.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import sys
from pathlib import Path
import types
from dataclasses import dataclass, field
from typing import Any, Callable

#: What bench_serving imports only for tokenizers, datasets and --fake-prefill's bootstrap host.
STAND_INS = ("transformers", "datasets", "sglang.srt.disaggregation")


class _StandIn(types.ModuleType):
    """A module any name can be imported from (a fresh empty class), never called to build a request."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def find_spec(self, name, path, target=None):
        if any(name == n or name.startswith(n + ".") for n in self.names):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _StandIn(spec.name)

    def exec_module(self, module) -> None:
        module.__path__ = []


def _hub_kernels_first() -> None:
    """transformers 5 imports Hugging Face's `kernels` package by that name, and this repository's
    root, on sys.path under `python -m pytest`, holds a `kernels` folder of its own that shadows it
    (`cannot import name 'CUDAProperties'`): the installed one is imported first, with the root
    out of the path. Where none is installed transformers finds no version on ours and skips it."""
    root = Path(__file__).resolve().parents[2]
    ours = sys.modules.get("kernels")
    if ours is not None and root not in Path(getattr(ours, "__file__", None) or root).resolve().parents:
        return
    for name in [m for m in sys.modules if m == "kernels" or m.startswith("kernels.")]:
        del sys.modules[name]  # ours, by its folder's name (a test's import of the real one failed on it)
    saved = sys.path[:]
    sys.path[:] = [p for p in saved if Path(p or ".").resolve() != root]
    try:
        importlib.import_module("kernels")
    except ImportError:
        pass
    finally:
        sys.path[:] = saved


def import_bench_serving() -> types.ModuleType:
    """`sglang.benchmark.serving` (SGLang on sys.path), with stand-ins only for what is missing
    here, removed from sys.modules afterwards so no other test imports one."""
    _hub_kernels_first()
    importlib.import_module("sglang")  # first: it patches a real transformers where there is one
    missing = tuple(n for n in STAND_INS if "." in n or importlib.util.find_spec(n) is None)
    finder = _StandInFinder(missing)
    sys.meta_path.insert(0, finder)
    try:
        return importlib.import_module("sglang.benchmark.serving")
    finally:
        sys.meta_path.remove(finder)
        for name in [m for m in sys.modules if isinstance(sys.modules[m], _StandIn)]:
            del sys.modules[name]


@dataclass
class BenchRun:
    """What bench_serving decided and sent, and what it made of the answers."""

    args: Any  # its argparse namespace
    api_url: str
    model_id: str
    extra_request_body: dict
    tokenizer_id: str | None = None  # what it asked its tokenizer loader for
    tokenizer: Any = None  # what the loader gave (None: the stand-in loader)
    payloads: list[dict] = field(default_factory=list)  # each request's JSON body, as sent
    outputs: list[Any] = field(default_factory=list)  # its RequestFuncOutput for each prompt


class _RecordingAiohttp:
    """bench_serving's `aiohttp`, whose sessions record each request body they send."""

    def __init__(self, real: types.ModuleType, bodies: list[bytearray]) -> None:
        self._real = real
        trace = real.TraceConfig()

        async def started(session, ctx, params) -> None:
            bodies.append(bytearray())

        async def chunk(session, ctx, params) -> None:
            bodies[-1] += params.chunk

        trace.on_request_start.append(started)
        trace.on_request_chunk_sent.append(chunk)
        self.ClientSession = functools.partial(real.ClientSession, trace_configs=[trace])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def run_bench_serving(serving: types.ModuleType, monkeypatch, argv: list[str],
                      prompts: list[tuple[Any, int, int]],
                      load_tokenizer: Callable[[str], Any] | None = None) -> BenchRun:
    """`python -m sglang.benchmark.serving ARGV` over ``prompts`` (prompt, prompt_len, output_len),
    each sent once through the backend's request coroutine as its benchmark() sends a request.
    `load_tokenizer`: what loads the tokenizer bench_serving names (default: none is loaded)."""
    bodies: list[bytearray] = []
    run: dict[str, BenchRun] = {}
    tokenizer: dict[str, Any] = {}

    def get_tokenizer(name):
        tokenizer["id"] = name
        tokenizer["loaded"] = load_tokenizer(name) if load_tokenizer else None
        return tokenizer["loaded"]

    async def benchmark(*, backend, api_url, model_id, input_requests, extra_request_body, lora_names, **_):
        assert not lora_names, "no LoRA adapter is asked for"
        done = BenchRun(serving.args, api_url, model_id, dict(extra_request_body))
        for row in input_requests:
            request = serving.RequestFuncInput(
                model=model_id, prompt=row.prompt, api_url=api_url, prompt_len=row.prompt_len,
                output_len=row.output_len, lora_name=None, image_data=row.image_data,
                extra_request_body={**extra_request_body, **(row.extra_request_body or {})},
                timestamp=row.timestamp, routing_key=row.routing_key)
            done.outputs.append(await serving.ASYNC_REQUEST_FUNCS[backend](request_func_input=request, pbar=None))
        run["done"] = done

    def dataset(args, tokenizer, model_id):
        return [serving.DatasetRow(prompt=p, prompt_len=n, output_len=out) for p, n, out in prompts]

    monkeypatch.setattr(serving, "benchmark", benchmark)
    monkeypatch.setattr(serving, "get_dataset", dataset)
    monkeypatch.setattr(serving, "get_tokenizer", get_tokenizer)  # only the dataset and metrics read it
    hub = sys.modules.get("huggingface_hub.constants")  # imported with a real transformers
    if hub is not None:
        monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(serving, "set_ulimit", lambda *a, **k: None)  # the test process keeps its limits
    monkeypatch.setattr(serving, "aiohttp", _RecordingAiohttp(serving.aiohttp, bodies))
    monkeypatch.setattr(sys, "argv", ["bench_serving", *argv])
    serving.cli_main()
    done = run["done"]
    done.tokenizer_id, done.tokenizer = tokenizer["id"], tokenizer["loaded"]
    done.payloads = [json.loads(bytes(body)) for body in bodies]
    return done

