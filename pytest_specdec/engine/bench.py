"""Benchmark of the embedded engine as a client sees it: readiness time and output tokens/s.

``python -m pytest_specdec.engine.bench --methods ar,dflash,ddtree [--budget 16] [--requests 8]
[--max-new-tokens 256] [--concurrency 1] [--json FILE] [-- ENGINE FLAGS...]`` starts one engine
process per method, times launch-to-ready (the readiness log line), sends the requests over HTTP
(streaming off, greedy, ``ignore_eos``) ``--concurrency`` at a time, and reports output tokens/s
= completion tokens / wall time of the whole batch, the acceptance length (completion tokens /
verify steps), and a fingerprint of the output tokens: equal fingerprints across methods mean
the speculative outputs equal the autoregressive ones. Every engine
it starts runs in its own process group and is killed before the next one starts, and on Linux
dies with the bench however the bench ends (SIGTERM, SIGKILL, a closed terminal).

Every flag, the engine flags included (checked by the engine's own parser; ``--method``,
``--budget`` and ``--port`` are the bench's), is checked before the first engine starts.
``--json`` is rewritten, whole, after each method, so an interrupted bench keeps what it measured;
the budget it reports is the one the engine verifies (dflash's capped at block-size - 1).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NoReturn

from ..configuration import METHODS, is_speculative
from ..servers.cleanup import parent_death_preexec
from ..servers.direct import urlopen
from ..whole_file import replace_text
from .cli import build_parser, parse_args, rejecting_parser
from .logs import READY_LINE

PROMPTS = [
    "The capital city of France is",
    "Write a short story about a robot who learns to paint.",
    "def fibonacci(n):\n    ",
    "Explain speculative decoding in one paragraph.",
    "List three prime numbers greater than one hundred:",
    "Once upon a time, in a village by the sea,",
    "SELECT name, count(*) FROM users GROUP BY",
    "Translate to German: The weather is nice today.",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body: dict, timeout: float) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the engine's process group; an engine that already exited has none left, and
    raising then would hide the error that says why it exited."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_method(method: str, budget: int | None, requests: int, max_new_tokens: int, concurrency: int,
               engine_flags: list[str], ready_timeout: float = 120.0) -> dict:
    port = free_port()
    argv = [sys.executable, "-m", "pytest_specdec.engine", "--port", str(port), "--method", method]
    if budget is not None and is_speculative(method):
        argv += ["--budget", str(budget)]
    argv += engine_flags
    launched = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=parent_death_preexec())
    ready = threading.Event()
    log: list[str] = []

    def follow() -> None:
        for line in proc.stderr:
            log.append(line)
            if READY_LINE in line:
                ready.set()

    threading.Thread(target=follow, daemon=True).start()
    try:
        while not ready.wait(0.05):
            if proc.poll() is not None or time.perf_counter() - launched > ready_timeout:
                raise RuntimeError(f"{method}: engine not ready (exit {proc.poll()}):\n{''.join(log[-20:])}")
        ready_s = time.perf_counter() - launched
        url = f"http://127.0.0.1:{port}/generate"

        def one(i: int) -> dict:
            body = {"text": PROMPTS[i % len(PROMPTS)],
                    "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True}}
            return _post(url, body, timeout=600)

        one(0)  # first request after readiness: not timed
        started = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            outputs = list(pool.map(one, range(requests)))
        wall = time.perf_counter() - started
    finally:
        _kill_group(proc)
    metas = [o["meta_info"] for o in outputs]
    # the same greedy tokens for every method means lossless decoding on this device and dtype
    fingerprint = hashlib.sha256(json.dumps([o["output_ids"] for o in outputs]).encode()).hexdigest()[:12]
    tokens = sum(m["completion_tokens"] for m in metas)
    verify = sum(m.get("spec_verify_ct", 0) for m in metas)
    # what the engine verifies (dflash caps the budget at block-size - 1), not what was asked
    served = parse_args(argv[argv.index("--method"):]).budget if is_speculative(method) else None
    return {"method": method, "budget": served, "requests": requests,
            "concurrency": concurrency, "max_new_tokens": max_new_tokens, "ready_s": round(ready_s, 3),
            "completion_tokens": tokens, "wall_s": round(wall, 4), "output_tok_s": round(tokens / wall, 1),
            "accept_length": round(tokens / verify, 3) if verify else None, "outputs_sha256": fingerprint}


def _checked(parser: argparse.ArgumentParser, ns: argparse.Namespace, engine_flags: list[str]) -> list[str]:
    """The methods to run, once every flag is known to be usable: a mistake is named before any
    engine starts, not as each engine's failure or, for --json, after the whole run."""
    methods = [m.strip() for m in ns.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if not methods or unknown:
        parser.error(f"--methods {ns.methods!r}: give a comma-separated list of {', '.join(METHODS)}")
    twice = sorted({m for m in methods if methods.count(m) > 1}, key=methods.index)
    if twice:  # a second engine run of one method, its row printed twice
        parser.error(f"--methods {ns.methods!r} lists {', '.join(twice)} more than once; list each method once")
    for name in ("budget", "requests", "max_new_tokens", "concurrency"):
        if getattr(ns, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(ns, name)}")
    if ns.json:
        target = Path(ns.json)
        # realpath: Path.resolve raised RuntimeError on a link loop before Python 3.13
        if target.is_dir() or not Path(os.path.realpath(target)).parent.is_dir():
            parser.error(f"--json {ns.json}: name a file in an existing folder")

    def reject(message: str) -> NoReturn:
        parser.error(f"engine flags after '--': {message}")

    given = _own_flags_given(engine_flags)
    if given:  # the engine's last --method or --port would win over the bench's own
        reject(f"{', '.join(given)}: the bench sets these itself (--methods and --budget choose the method "
               f"and budget, and it picks the port); remove them")

    for method in methods:  # the engine's own checks, without starting it (no torch import)
        budget = ["--budget", str(ns.budget)] if is_speculative(method) else []
        parse_args(["--method", method, *budget, *engine_flags], parser=rejecting_parser(reject))
    return methods


#: The engine flags the bench sets per method: given again after '--', the engine would serve
#: another method than the one reported, or listen where the bench does not send.
_OWN_FLAGS = {"method": "--method", "budget": "--budget", "port": "--port"}


def _own_flags_given(engine_flags: list[str]) -> list[str]:
    """Which of the bench's own engine flags `engine_flags` sets, in any spelling the engine's
    parser takes (`--port=1`, an abbreviation such as `--meth`)."""
    unset = object()
    parser = build_parser()
    for action in parser._actions:
        if action.dest in _OWN_FLAGS:
            action.default, action.required = unset, False
    parser.error = lambda message: None  # type: ignore[method-assign]  # the engine's checks say the rest
    try:
        ns, _ = parser.parse_known_args(engine_flags)
    except (SystemExit, TypeError, AttributeError):
        return []
    return [flag for dest, flag in _OWN_FLAGS.items() if getattr(ns, dest, unset) is not unset]


def _write_json(path: str, payload: dict) -> None:
    """Whole or not at all: an interrupted write leaves no half a file where a result was."""
    replace_text(Path(path), json.dumps(payload, indent=2), durable=False)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    engine_flags: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, engine_flags = argv[:cut], argv[cut + 1:]
    p = argparse.ArgumentParser(prog="python -m pytest_specdec.engine.bench", description=__doc__.split("\n")[0])
    p.add_argument("--methods", default="ar,dflash,ddtree")
    p.add_argument("--budget", type=int, default=16, help="ddtree budget (dflash: capped at block-size - 1)")
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--json", default=None, help="also write the results here")
    ns = p.parse_args(argv)
    methods = _checked(p, ns, engine_flags)
    results, failed = [], []
    for method in methods:
        try:
            r = run_method(method, ns.budget, ns.requests, ns.max_new_tokens, ns.concurrency, engine_flags)
        except KeyboardInterrupt:  # the engine is already killed; the methods done are kept
            print(f"{method:>7} interrupted; {len(results)} method(s) measured before it"
                  f"{f' are in {ns.json}' if ns.json else ''}", file=sys.stderr, flush=True)
            return 130
        except Exception as exc:  # one method failing should not hide the others' numbers
            print(f"{method:>7} FAILED: {exc}", flush=True)
            failed.append({"method": method, "error": str(exc)})
        else:
            results.append(r)
            print(f"{r['method']:>7} budget={str(r['budget']):>4} ready={r['ready_s']:6.2f}s "
                  f"output={r['output_tok_s']:9.1f} tok/s accept_len={r['accept_length']} "
                  f"({r['completion_tokens']} tokens in {r['wall_s']:.2f}s, concurrency {r['concurrency']}) "
                  f"outputs={r['outputs_sha256']}",
                  flush=True)
        if ns.json:  # after each method: an interrupted or killed bench keeps what it measured
            _write_json(ns.json, {"engine_flags": engine_flags, "results": results, "failed": failed})
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main())
