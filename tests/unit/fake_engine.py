"""A stand-in for `python -m pytest_specdec.engine` with the same CLI and fault flags.

It serves the HTTP endpoints the servers package relies on, and logs like SGLang, so the launch /
readiness / liveness / teardown logic can be tested in a second per server instead of loading a
model. Extra test-only flags: --spawn-child (a grandchild in the same process group, to prove
teardown kills trees), --ignore-sigterm (to prove the SIGKILL escalation).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import subprocess
import sys
import time

from aiohttp import web

log = logging.getLogger("fake_engine")


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--method", choices=["ar", "dflash", "ddtree"], default="ar")
    p.add_argument("--budget", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-level", default="info")
    p.add_argument("--model-path")
    p.add_argument("--context-length", type=int, default=4096)
    p.add_argument("--fault-crash-warmup", action="store_true")
    p.add_argument("--fault-crash-after", type=int, default=None)
    p.add_argument("--fault-crash-budgets", default="")
    p.add_argument("--fault-zero-tokens", action="store_true")
    p.add_argument("--fault-hang", action="store_true")
    p.add_argument("--fault-slow-start", type=float, default=0.0)
    p.add_argument("--spawn-child", action="store_true")
    p.add_argument("--spawn-setsid-child", action="store_true", help="a child in a session of its own")
    p.add_argument("--ignore-sigterm", action="store_true")
    return p.parse_args(argv)


def crash(message: str) -> None:
    log.error(message)
    logging.shutdown()
    os._exit(1)


def main(argv=None) -> None:
    args = parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="[%(asctime)s] %(message)s"
    )
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.spawn_child or args.spawn_setsid_child:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                 start_new_session=args.spawn_setsid_child)
        log.info("spawned child pid %d", child.pid)
    log.info("server_args=%s", vars(args))
    if args.fault_slow_start:
        time.sleep(args.fault_slow_start)
    budgets = {int(b) for b in args.fault_crash_budgets.split(",") if b}
    if args.fault_crash_warmup:  # as the engine does: SGLang's warm-up failure, then exit 1
        crash("Initialization failed. warmup error: RuntimeError: warm-up request failed: "
              "CUDA out of memory. Tried to allocate 2.00 GiB (injected by --fault-crash-warmup)")
    if args.method != "ar" and args.budget in budgets:
        crash("Scheduler hit an exception: RuntimeError: CUDA error: an illegal instruction was encountered")

    state = {"generated": 0}

    async def health(request):
        if args.fault_hang:
            await asyncio.sleep(3600)
        return web.Response(text="")

    async def server_info(request):
        info = {
            "model_path": args.model_path or "fake",
            "tp_size": 1,
            "speculative_algorithm": None if args.method == "ar" else args.method.upper(),
            "port": args.port,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }
        if args.method == "ddtree":
            info["speculative_ddtree_budget"] = args.budget
        return web.json_response(info)

    async def generate(request):
        body = await request.json()
        n = 0 if args.fault_zero_tokens else int(body.get("sampling_params", {}).get("max_new_tokens", 8))
        state["generated"] += 1
        if args.fault_crash_after is not None and state["generated"] > args.fault_crash_after:
            crash("Scheduler hit an exception: RuntimeError: CUDA error: an illegal instruction was encountered")
        return web.json_response(
            {"text": "x" * n, "output_ids": [1] * n, "meta_info": {"completion_tokens": n}}
        )

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/health_generate", health)
    app.router.add_get("/server_info", server_info)
    app.router.add_post("/generate", generate)

    async def on_startup(app):
        log.info("The server is fired up and ready to roll!")

    app.on_startup.append(on_startup)
    try:
        web.run_app(app, host=args.host, port=args.port, print=None, handle_signals=not args.ignore_sigterm)
    except OSError as e:
        log.error("%s", e)
        sys.exit(1)


if __name__ == "__main__":
    main()
