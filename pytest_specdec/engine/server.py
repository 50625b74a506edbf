"""The HTTP front end: a faithful subset of SGLang's native API, served by aiohttp.

Endpoints: ``/health`` and ``/health_generate`` (503 until warm-up is done, then a one-token
generation, as SGLang does), ``/ready``, ``/generate`` (text or input_ids; sampling_params
max_new_tokens, temperature, ignore_eos, stop; SSE streaming with cumulative text ending
``data: [DONE]``), ``/server_info`` (and its old name ``/get_server_info``), ``/model_info``
(and ``/get_model_info``), ``/v1/models``, ``/flush_cache`` and ``/metrics``.

Decoding is greedy whatever the temperature: the speculative methods here verify greedily, and
one rule for all methods keeps their outputs comparable. Request fields outside the subset are
rejected with HTTP 400 rather than silently ignored.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import traceback

from aiohttp import web

from . import logs
from .faults import FaultPlan
from .metrics import EngineMetrics
from .scheduler import Progress, Request, Scheduler
from .tokenizer import ByteTokenizer

GENERATE_FIELDS = frozenset({"text", "input_ids", "sampling_params", "stream", "rid"})
SAMPLING_FIELDS = frozenset({"max_new_tokens", "temperature", "ignore_eos", "stop"})
DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's default
WARMUP_PROMPT = "The capital city of France is"
WARMUP_MAX_NEW_TOKENS = 8


class BadRequest(ValueError):
    """A request SGLang would answer with HTTP 400; the message says what is wrong."""


class EngineServer:
    def __init__(self, *, host: str, port: int, scheduler: Scheduler, metrics: EngineMetrics,
                 faults: FaultPlan, context_length: int, server_args: dict, model_info: dict,
                 served_model_name: str, version: str) -> None:
        self.host, self.port = host, port
        self.scheduler = scheduler
        self.metrics = metrics
        self.faults = faults
        self.context_length = context_length
        self.server_args = server_args
        self.model_info = model_info
        self.served_model_name = served_model_name
        self.version = version
        self.tokenizer = ByteTokenizer()
        self.ready = False
        self.created = int(time.time())
        self.health_timeout = float(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", 20))
        self._device_info: dict | None = None

    # ------------------------------------------------------------------ lifecycle

    def app(self) -> web.Application:
        app = web.Application()
        r = app.router
        for path in ("/health", "/health_generate"):
            r.add_get(path, self.health)
        r.add_get("/ready", self.ready_check)
        r.add_route("POST", "/generate", self.generate)
        r.add_route("PUT", "/generate", self.generate)
        for path in ("/server_info", "/get_server_info"):
            r.add_get(path, self.get_server_info)
        for path in ("/model_info", "/get_model_info"):
            r.add_get(path, self.get_model_info)
        r.add_get("/v1/models", self.list_models)
        r.add_route("GET", "/flush_cache", self.flush_cache)
        r.add_route("POST", "/flush_cache", self.flush_cache)
        r.add_get("/metrics", self.get_metrics)
        return app

    def serve(self) -> None:
        """Bind, warm up, log the readiness line, and serve until SIGTERM or SIGINT."""
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
        await site.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        warmup = asyncio.create_task(self._warmup())
        await stop.wait()
        warmup.cancel()
        logs.SERVER.info("Shutting down the embedded engine.")
        try:
            await asyncio.wait_for(runner.cleanup(), timeout=2)
        except asyncio.TimeoutError:
            pass

    async def _warmup(self) -> None:
        try:
            if self.faults.crash_warmup:
                raise RuntimeError("warm-up request failed: CUDA out of memory. Tried to allocate 2.00 GiB "
                                   "(injected by --fault-crash-warmup)")
            req = Request(self.tokenizer.encode(WARMUP_PROMPT), WARMUP_MAX_NEW_TOKENS, internal=True)
            await self._finished(req)
        except asyncio.CancelledError:
            raise
        except Exception:
            logs.SERVER.error(f"Initialization failed. warmup error: {traceback.format_exc()}")
            logs.die(1)
        self.ready = True
        logs.SERVER.info(logs.READY_LINE)

    # ------------------------------------------------------------------ plumbing

    def _watch(self, req: Request) -> asyncio.Queue:
        """Submit ``req``; its progress arrives on the returned queue (from the scheduler thread)."""
        loop = asyncio.get_running_loop()
        progress: asyncio.Queue[Progress] = asyncio.Queue()

        def deliver(p: Progress) -> None:
            try:
                loop.call_soon_threadsafe(progress.put_nowait, p)
            except RuntimeError:  # the loop closed during shutdown; nobody is listening
                pass

        req.on_progress = deliver
        self.scheduler.submit(req)
        return progress

    async def _finished(self, req: Request) -> Progress:
        progress = self._watch(req)
        while True:
            p = await progress.get()
            if p.finish_reason is not None:
                return p

    async def _hang_if_faulty(self) -> None:
        if self.faults.hang and self.ready:
            await asyncio.Event().wait()  # never set: the connection stays open, unanswered

    @staticmethod
    def _error(message: str, status: int = 400) -> web.Response:
        logs.SERVER.error(f"[http_server] Error: {message}")
        return web.json_response({"error": {"message": message}}, status=status)

    # ------------------------------------------------------------------ endpoints

    async def health(self, request: web.Request) -> web.Response:
        if not self.ready:
            return web.Response(status=503)
        await self._hang_if_faulty()
        tic = time.perf_counter()
        req = Request([0], 1, internal=True, rid=f"HEALTH_CHECK_{time.time()}")
        task = asyncio.ensure_future(self._finished(req))
        try:
            # Any output from the scheduler after the check started proves it is alive.
            while time.perf_counter() < tic + self.health_timeout:
                if task.done() or self.scheduler.last_output_at > tic:
                    return web.Response(status=200)
                await asyncio.sleep(0.005)
        finally:
            req.aborted = not task.done()
            task.cancel()
        logs.SERVER.error(f"Health check failed. Server couldn't get a response from detokenizer for last "
                          f"{self.health_timeout:g} seconds.")
        return web.Response(status=503)

    async def ready_check(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.ready else 503)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        await self._hang_if_faulty()
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return self._error(f"The request body is not valid JSON: {exc}")
        try:
            req = self._parse_generate(body)
        except BadRequest as exc:
            return self._error(str(exc))
        if req.stream:
            return await self._stream(request, req)
        p = await self._finished(req)
        return web.json_response(self._output(req, p))

    def _parse_generate(self, body: object) -> Request:
        if not isinstance(body, dict):
            raise BadRequest("The request body must be a JSON object.")
        unknown = sorted(set(body) - GENERATE_FIELDS)
        if unknown:
            raise BadRequest(f"Unknown field(s) {unknown}; this server accepts {sorted(GENERATE_FIELDS)}.")
        text, input_ids = body.get("text"), body.get("input_ids")
        if (text is None) == (input_ids is None):
            raise BadRequest("Either text or input_ids should be provided.")
        if text is not None:
            if not isinstance(text, str):
                raise BadRequest("text must be a string (batched requests are not supported).")
            input_ids = self.tokenizer.encode(text)
        elif not (isinstance(input_ids, list) and input_ids and all(type(i) is int for i in input_ids)):
            raise BadRequest("input_ids must be a non-empty list of integers (batched requests are not supported).")
        elif any(not 0 <= i < self.tokenizer.vocab_size for i in input_ids):
            raise BadRequest(f"The input_ids {input_ids} contains values greater than the vocab size "
                             f"({self.tokenizer.vocab_size}).")
        params = body.get("sampling_params") or {}
        if not isinstance(params, dict):
            raise BadRequest("sampling_params must be an object.")
        unknown = sorted(set(params) - SAMPLING_FIELDS)
        if unknown:
            raise BadRequest(f"Unknown sampling_params {unknown}; this server accepts {sorted(SAMPLING_FIELDS)}.")
        max_new_tokens = params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
        if type(max_new_tokens) is not int or max_new_tokens < 0:
            raise BadRequest(f"max_new_tokens must be a non-negative integer, got {max_new_tokens!r}.")
        temperature = params.get("temperature", 1.0)
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
            raise BadRequest(f"temperature must be a non-negative number, got {temperature!r}.")
        ignore_eos = params.get("ignore_eos", False)
        if not isinstance(ignore_eos, bool):
            raise BadRequest(f"ignore_eos must be a boolean, got {ignore_eos!r}.")
        stop = params.get("stop") or ()
        stop = (stop,) if isinstance(stop, str) else stop
        if not (isinstance(stop, (list, tuple)) and all(isinstance(s, str) and s for s in stop)):
            raise BadRequest("stop must be a non-empty string or a list of them.")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise BadRequest(f"stream must be a boolean, got {stream!r}.")
        rid = body.get("rid")
        if rid is not None and not isinstance(rid, str):
            raise BadRequest(f"rid must be a string, got {rid!r}.")
        n = len(input_ids)
        if n >= self.context_length:
            raise BadRequest(f"The input ({n} tokens) is longer than the model's context length "
                             f"({self.context_length} tokens).")
        if n + max_new_tokens >= self.context_length:
            raise BadRequest(
                f"Requested token count exceeds the model's maximum context length of {self.context_length} "
                f"tokens. You requested a total of {n + max_new_tokens} tokens: {n} tokens from the input "
                f"messages and {max_new_tokens} tokens for the completion. Please reduce the number of "
                f"tokens in the input messages or the completion to fit within the limit.")
        return Request(input_ids, max_new_tokens, ignore_eos=ignore_eos, stop=tuple(stop), stream=stream,
                       rid=rid)

    def _meta_info(self, req: Request, p: Progress) -> dict:
        meta = {"id": req.rid, "finish_reason": p.finish_reason, "prompt_tokens": len(req.input_ids),
                "completion_tokens": p.num_ids, "cached_tokens": 0, "weight_version": "default"}
        if p.e2e_latency is not None:
            meta["e2e_latency"] = p.e2e_latency
        budget = self.scheduler.decoder.budget
        if p.verify_ct > 0 and budget > 0:  # absent, not zero, when nothing was verified
            proposed = p.verify_ct * budget
            meta["spec_verify_ct"] = p.verify_ct
            meta["spec_accept_length"] = p.num_ids / p.verify_ct
            meta["spec_accept_rate"] = p.correct_drafts / proposed
            meta["spec_num_correct_drafts"] = p.correct_drafts
            meta["spec_num_proposed_drafts"] = proposed
        return meta

    def _output(self, req: Request, p: Progress) -> dict:
        return {"text": p.text, "output_ids": req.output_ids[: p.num_ids], "meta_info": self._meta_info(req, p)}

    async def _stream(self, request: web.Request, req: Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        progress = self._watch(req)
        try:
            while True:
                p = await progress.get()
                while not progress.empty():  # a slow reader gets the latest cumulative state
                    p = progress.get_nowait()
                await resp.write(b"data: " + json.dumps(self._output(req, p)).encode() + b"\n\n")
                if p.finish_reason is not None:
                    break
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            req.aborted = True
            raise
        return resp

    async def get_server_info(self, request: web.Request) -> web.Response:
        await self._hang_if_faulty()
        return web.json_response({
            **self.server_args,
            "max_total_num_tokens": self.scheduler.max_total_num_tokens,
            "max_req_input_len": self.context_length - 1,
            "internal_states": [self.scheduler.internal_state()],
            "version": self.version,
            **self._devices(),
        })

    def _devices(self) -> dict:
        """The GPUs this process may use: CUDA_VISIBLE_DEVICES as its launcher set it (from a GPU
        lease) and, on CUDA, the devices torch sees, so a test can check a server saw only its own."""
        if self._device_info is None:
            info = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                    "cuda_device_count": None, "cuda_device_uuids": None}
            if self.server_args.get("device") == "cuda":  # never touch CUDA for a CPU engine
                import torch  # loaded already by the runtime

                count = torch.cuda.device_count()
                info["cuda_device_count"] = count
                info["cuda_device_uuids"] = [
                    str(getattr(torch.cuda.get_device_properties(i), "uuid", "")) for i in range(count)]
            self._device_info = info
        return self._device_info

    async def get_model_info(self, request: web.Request) -> web.Response:
        return web.json_response(self.model_info)

    async def list_models(self, request: web.Request) -> web.Response:
        card = {"id": self.served_model_name, "object": "model", "created": self.created, "owned_by": "sglang",
                "root": self.served_model_name, "max_model_len": self.context_length}
        return web.json_response({"object": "list", "data": [card]})

    async def flush_cache(self, request: web.Request) -> web.Response:
        await self._hang_if_faulty()
        flushed = self.scheduler.flush()
        logs.SERVER.info("Cache flushed successfully!" if flushed else
                         "Cache not flushed because there are pending requests.")
        return web.Response(
            text="Cache flushed.\nPlease check backend logs for more details. (When there are running or "
                 "waiting requests, the operation will not be performed.)\n",
            status=200 if flushed else 400)

    async def get_metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), headers={"Content-Type": self.metrics.content_type})
