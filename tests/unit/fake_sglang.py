"""A stand-in for an interpreter that has SGLang installed, for `[tool.specdec.sglang] python`.

`python fake_sglang.py -m sglang.launch_server ARGS` does what SGLang would up to loading a model:
ARGS go through SGLang's own parser (`ServerArgs.add_cli_args`, from its reference copy; a flag it
does not know exits 2 with argparse's complaint, as SGLang does), the model folders must exist, the
tensor-parallel size must fit the GPUs in CUDA_VISIBLE_DEVICES, and one scheduler child per TP
rank joins the server's process group. The server itself is the embedded engine, run in the
process that parsed the flags (as SGLang's server is), which speaks SGLang's HTTP API and logs
like it, given the method, budget, port, seed and context length the SGLang flags say. Anything
else (`-c` probes such as the backend's "is sglang importable?") runs in this interpreter with the
reference copy on its path.

Environment:
- FAKE_SGLANG_REF: SGLang's reference copy (default: the venv's `sglang-reference`).
- FAKE_SGLANG_PR=1: the parser of the DDTree pull request, which adds `--speculative-ddtree-budget`
  (upstream 0.5.23 refuses it).
- FAKE_SGLANG_GPUS=N: the host has N GPUs; a CUDA_VISIBLE_DEVICES entry beyond is refused.
- FAKE_SGLANG_FAULTS: JSON {"<method>" | "<method>-b<budget>" | "*": [engine fault flags]}.
- FAKE_SGLANG_RECORD: a file to append one JSON line per launch to (argv, parsed values,
  CUDA_VISIBLE_DEVICES, pid).
- FAKE_SGLANG_NO_TOKENIZE=1: a release before /v1/tokenize (0.5.3 and older), which answers it
  404 as FastAPI answers a path it does not route.
- FAKE_SGLANG_NO_OUTPUT_IDS=1: a server that streams text without output_ids (the losslessness
  guard then compares texts).
- FAKE_SGLANG_BODIES: a file to append one JSON line per /generate request to (the server's
  speculative algorithm, the request's field names as sent).
- FAKE_SGLANG_UNDECODABLE=1: a tokenizer whose every output token is a byte that completes no
  character, so each reads U+FFFD in the text, whichever token it was.

The reference's `return_logprob` / `top_logprobs_num` reach the engine, which serves them on `ar`
in SGLang's meta_info shape (a divergence then names the reference's margin there).
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import time
import types
from pathlib import Path

REFERENCE = os.environ.get("FAKE_SGLANG_REF") or str(Path(sys.prefix) / "sglang-reference")
RECORDED = ("model_path", "tp_size", "host", "port", "log_level", "random_seed", "enable_metrics",
            "context_length", "speculative_algorithm", "speculative_draft_model_path",
            "speculative_num_draft_tokens", "speculative_ddtree_budget")


def refuse(message: str) -> None:
    """Exit as SGLang does on a launch it cannot serve: the exception logged, status 1."""
    print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def parser() -> argparse.ArgumentParser:
    """SGLang's own parser, as sglang's prepare_server_args builds it. The sglang package's
    __init__ (its frontend, transformers' patches: about 4 s of a 7 s import, paid at every launch)
    is not run: server_args needs none of it, and the parser's actions are the same without it
    (test_sglang_backend checks them against a full import)."""
    sys.path.append(REFERENCE)  # after this interpreter's own packages, as the contract tests do
    package = types.ModuleType("sglang")
    package.__path__ = [str(Path(REFERENCE) / "sglang")]
    sys.modules.setdefault("sglang", package)
    from sglang.srt.server_args import ServerArgs

    built = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(built)
    if os.environ.get("FAKE_SGLANG_PR") == "1":
        built.add_argument("--speculative-ddtree-budget", type=int, default=None)
    return built


def parse(argv: list[str]) -> argparse.Namespace:
    return parser().parse_args(argv)


def engine_argv(ns: argparse.Namespace) -> list[str]:
    """The embedded engine's flags for what the SGLang flags ask for."""
    method = {None: "ar", "DFLASH": "dflash", "DDTREE": "ddtree"}.get(ns.speculative_algorithm)
    if method is None:
        refuse(f"ValueError: Unknown speculative algorithm name: {ns.speculative_algorithm}")
    if not Path(ns.model_path).is_dir():
        refuse(f"OSError: {ns.model_path} is not a local folder and is not a valid model identifier")
    if method != "ar" and not (ns.speculative_draft_model_path and Path(ns.speculative_draft_model_path).is_dir()):
        refuse(f"OSError: draft model {ns.speculative_draft_model_path} is not a local folder")
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
    gpus = int(os.environ.get("FAKE_SGLANG_GPUS") or 0)
    if gpus and (ns.tp_size > len(visible) or any(not d.isdigit() or int(d) >= gpus for d in visible)):
        refuse(f"RuntimeError: CUDA error: invalid device ordinal (tp_size {ns.tp_size}, "
               f"CUDA_VISIBLE_DEVICES={','.join(visible)})")
    argv = ["--host", ns.host, "--port", str(ns.port), "--method", method, "--log-level", ns.log_level,
            "--decode-log-interval", str(ns.decode_log_interval), "--cpu-threads", "1"]
    if ns.random_seed is not None:
        argv += ["--seed", str(ns.random_seed)]
    if ns.context_length is not None:
        argv += ["--context-length", str(ns.context_length)]
    budget = None
    if method == "ddtree":
        budget = getattr(ns, "speculative_ddtree_budget", None)
        if budget is None and ns.speculative_num_draft_tokens is not None:
            budget = ns.speculative_num_draft_tokens - 1  # the tree's nodes and its root
        argv += ["--budget", str(budget)] if budget is not None else []
    elif method == "dflash" and (ns.speculative_dflash_block_size or ns.speculative_num_draft_tokens):
        argv += ["--block-size", str(ns.speculative_dflash_block_size or ns.speculative_num_draft_tokens)]
    faults = json.loads(os.environ.get("FAKE_SGLANG_FAULTS") or "{}")
    key = f"{method}-b{budget}" if budget is not None else method
    return argv + faults.get(key, faults.get(method, faults.get("*", [])))


def launch_server(argv: list[str]) -> None:
    ns = parse(argv)
    if os.environ.get("FAKE_SGLANG_RECORD"):
        record = {"argv": argv, "pid": os.getpid(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                  "args": {name: getattr(ns, name, None) for name in RECORDED}}
        with open(os.environ["FAKE_SGLANG_RECORD"], "a") as f:
            f.write(json.dumps(record) + "\n")
    engine = engine_argv(ns)
    for rank in range(ns.tp_size):  # SGLang's schedulers, one per TP rank, in the server's group
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time\nwhile True: time.sleep(1)",
                                      f"sglang::scheduler_TP{rank}"])
    if os.environ.get("FAKE_SGLANG_NO_TOKENIZE") == "1":
        from aiohttp import web
        from pytest_specdec.engine import server

        async def not_found(self, request):  # answered as a route SGLang does not have
            return web.json_response({"detail": "Not Found"}, status=404)

        server.EngineServer.tokenize = not_found
    if os.environ.get("FAKE_SGLANG_UNDECODABLE") == "1":
        from pytest_specdec.engine import server

        decodable = server.EngineServer._output

        def undecodable(self, req, p, **keywords):  # each token a lone continuation byte
            out = decodable(self, req, p, **keywords)
            out["text"] = "\ufffd" * len(out["output_ids"])
            return out

        server.EngineServer._output = undecodable
    if os.environ.get("FAKE_SGLANG_NO_OUTPUT_IDS") == "1":
        from pytest_specdec.engine import server

        with_ids = server.EngineServer._output

        def text_only(self, req, p, **keywords):  # as a server that streams no token ids
            out = with_ids(self, req, p, **keywords)
            out.pop("output_ids", None)
            return out

        server.EngineServer._output = text_only
    if os.environ.get("FAKE_SGLANG_BODIES"):
        from pytest_specdec.engine import server as engine_server

        read_json = engine_server.EngineServer._read_json

        async def recorded(self, request, **keywords):
            body = await read_json(self, request, **keywords)
            if isinstance(body, dict) and request.path == "/generate":
                with open(os.environ["FAKE_SGLANG_BODIES"], "a") as f:
                    f.write(json.dumps({"algorithm": ns.speculative_algorithm, "fields": sorted(body)}) + "\n")
            return body

        engine_server.EngineServer._read_json = recorded
    # served in this process, as SGLang's server is the process that parsed its flags: a fresh
    # interpreter would import torch a second time (server_args imported it), ~1.2 s a launch
    sys.argv = ["pytest_specdec.engine", *engine]
    runpy.run_module("pytest_specdec.engine", run_name="__main__", alter_sys=True)


def main(argv: list[str]) -> None:
    if argv[:2] == ["-m", "sglang.launch_server"]:
        launch_server(argv[2:])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), REFERENCE]))
    os.execve(sys.executable, [sys.executable, *argv], env)


if __name__ == "__main__":
    main(sys.argv[1:])
