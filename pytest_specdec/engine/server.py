"""The HTTP front end: SGLang's native API and its OpenAI-compatible one, served by aiohttp.

Endpoints: ``/health`` and ``/health_generate`` (503 until warm-up is done, then a one-token
generation, as SGLang does), ``/ready``, ``/generate`` (text or input_ids, one prompt or a batch
of them, see batch.py; every field and sampling parameter SGLang accepts: see protocol.py; SSE
streaming with cumulative text ending ``data: [DONE]``), ``/server_info`` (and its old name
``/get_server_info``), ``/model_info`` (and ``/get_model_info``), ``/v1/models`` and
``/v1/models/{id}``, ``/v1/loads`` (the live load, see get_loads), ``/flush_cache``, ``/metrics`` (every method and path under it, as SGLang
mounts Prometheus' app), ``/`` (GET and HEAD; every other GET route refuses HEAD, as FastAPI's do),
``/abort_request`` (see Scheduler.abort), and the OpenAI-compatible ``/v1/completions`` and
``/v1/chat/completions`` (streaming too; see openai_api.py) and ``/v1/tokenize`` (and
``/tokenize``), which counts prompts with the engine's tokenizer as SGLang's counts with the
model's. The OpenAI-compatible routes and the tokenize ones refuse a body not sent as
application/json, and /generate one not sent as a JSON type, as SGLang's do (see
protocol.read_body).

Anyone on the host can reach this server, so a hostile request is a 400, never a 500 or a stuck
handler: see protocol.parse_json, and ``idle_timeout``, which closes a connection that sends no
complete request (idle, or trickling its headers) and answers 408 to a body that trickles.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import signal
import time
import traceback
from typing import Any

from aiohttp import web

from .. import context_rule
from .. import sglang_api as api
from . import batch, logs, openai_api, parallel
from .decoding import TokenLogprobs
from .faults import FaultPlan
from .inflight import DelayedAborts, DuplicateRid, InFlight
from .metrics import EngineMetrics
from .protocol import (GENERATE_MODEL, PARSE_ERROR, InvalidBody, Refused, RequestError, RequestModel,
                       UnparsableBody, Unsupported, abort_error, abort_not_an_object, flush_timeout, parse_abort,
                       parse_generate, read_body)
from .scheduler import Progress, Request, Scheduler, Timing
from .tokenizer import ByteTokenizer
from .warm import WARMUP_PROMPT

#: SGLang's answer to GET and HEAD /, where a root probe (a load balancer's, say) lands
ROOT_ANSWER = "SGLang is running"
WARMUP_MAX_NEW_TOKENS = 8
#: /v1/loads' `include` sections (SGLang's LoadSnapshot.VALID_SECTIONS); the engine has core alone
LOAD_SECTIONS = frozenset({"core", "memory", "spec", "lora", "disagg", "queues", "all"})
#: How often a non-streaming request looks whether its client is still there.
DISCONNECT_POLL_S = 0.05


def json_response(data: Any, *, status: int = 200, headers: dict | None = None) -> web.Response:
    """A JSON answer as SGLang's FastAPI app sends one (orjson, Starlette's JSONResponse): see
    `_dumps`, typed ``application/json`` without aiohttp's ``; charset=utf-8``."""
    return web.Response(body=_dumps(data), status=status, headers=headers, content_type="application/json")


def _dumps(data: Any) -> bytes:
    """JSON as orjson and pydantic write SGLang's answers and stream events: compact, UTF-8 unescaped."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


@web.middleware
async def _unrouted_as_fastapi(request: web.Request, handler) -> web.StreamResponse:
    """A path no route serves, or a method its route does not take, answered as SGLang's FastAPI
    app answers it: the status, JSON ``{"detail": reason}`` (aiohttp's own is plain text), and
    for a method the methods the route takes."""
    try:
        return await handler(request)
    except web.HTTPNotFound as exc:
        # Starlette's redirect_slashes: a path whose trailing slash stripped is routed gets a 307 there
        path = request.path
        if path != "/" and path.endswith("/"):
            there = request.clone(rel_url=request.rel_url.with_path(path.rstrip("/") or "/"))
            if not isinstance((await request.app.router.resolve(there)).http_exception, web.HTTPNotFound):
                url = request.url.with_path(path.rstrip("/") or "/").with_query(request.rel_url.query)
                return web.Response(status=307, headers={"Location": str(url)})
        return json_response({"detail": exc.reason}, status=exc.status)
    except web.HTTPMethodNotAllowed as exc:
        allow = {"Allow": ", ".join(exc.headers["Allow"].split(","))} if "Allow" in exc.headers else None
        return json_response({"detail": exc.reason}, status=exc.status, headers=allow)


def _env_bool(name: str, default: bool) -> bool:
    """A boolean environment variable as SGLang's EnvBool reads it; a value it cannot read is
    the default, with SGLang's warning."""
    value = os.environ.get(name)
    if value is None:
        return default
    if value.lower() in ("true", "1", "yes", "y"):
        return True
    if value.lower() in ("false", "0", "no", "n"):
        return False
    logs.SERVER.warning(f'Invalid value for {name}: "{value.lower()}" is not a valid boolean value, '
                        f'using default "{default}"')
    return default


def _weight_versions(tokens: int) -> list[dict]:
    """SGLang's weight_versions of a finished request's meta_info: which weights made which of its
    `tokens` output tokens; the engine's never change, so one span of "default"."""
    return [{"version": "default", "start": 0, "end": tokens}]


#: What SGLang's meta_info adds with --enable-metrics, in its order: its scheduler's time stats on
#: every answer (after num_retractions), its tokenizer manager's on the last (after the spec keys).
SCHEDULER_TIME_KEYS = ("storage_prefetch_wait", "storage_staging_wait", "forward_entry_time",
                       "prefill_finished_time", "queue_time")
REQUEST_TIME_KEYS = ("request_received_ts", "first_token_latency", "api_server_dispatch_finish_ts",
                     "response_sent_to_client_ts", "request_finished_ts", "decode_throughput")


def _scheduler_times(t: Timing, wall_offset: float) -> dict:
    """SchedulerReqTimeStats.convert_to_output_meta_info: no storage tier, so no wait for one (0.0,
    as SGLang reports a request that met none); a stage not reached yet is left out. ``wall_offset``:
    the request's (Request.wall_offset), which turns its perf_counter stamps into wall clock."""
    stages = {"storage_prefetch_wait": 0.0, "storage_staging_wait": 0.0}
    if t.forward_entry:
        stages["forward_entry_time"] = t.forward_entry + wall_offset
    if t.prefill_finished:
        stages["prefill_finished_time"] = t.prefill_finished + wall_offset
    stages["queue_time"] = t.forward_entry - t.queued if t.forward_entry else 0.0
    return stages


def _request_times(req: Request, p: Progress, sent_at: float | None) -> dict:
    """APIServerReqTimeStats.convert_to_output_meta_info of a finished request: the first token is
    the prefill's; ``sent_at`` the wall clock of its first answer, None where this is it."""
    t, wall_offset = p.timing, req.wall_offset
    first_token = t.prefill_finished
    times = {"request_received_ts": req.created + wall_offset}
    if first_token > req.created:
        times["first_token_latency"] = first_token - req.created
    if req.dispatched_at:
        times["api_server_dispatch_finish_ts"] = req.dispatched_at + wall_offset
    if sent_at is not None:
        times["response_sent_to_client_ts"] = sent_at
    times["request_finished_ts"] = t.finished + wall_offset
    if first_token and p.num_ids > 1 and t.finished > first_token:  # tokens after the first, per second
        times["decode_throughput"] = (p.num_ids - 1) / (t.finished - first_token)
    return times


#: Why a speculative engine refuses return_logprob (the method for ``{}``): its tokens come of a verify over a tree.
LOGPROBS_SPECULATIVE = ("The embedded engine cannot honour return_logprob=true decoding with {}: it serves logprobs "
                        "for ar decoding only (a speculative step's tokens come of a verify over a draft tree). "
                        "Ask them of an engine launched with --method ar, or leave return_logprob unset.")


def _logprobs_meta(logprobs: list[TokenLogprobs], tokens: list[int], top: int) -> dict:
    """SGLang's meta_info logprob keys for output tokens only (logprob_start_len -1: no prompt
    token's), all so far as its default stream repeats them: rows of [logprob, token id, null]
    (no return_text_in_logprobs), the top ones per token best first, only where top_logprobs_num > 0."""
    meta: dict = {"input_token_logprobs": [],
                  "output_token_logprobs": [[lp.logprob, token, None] for lp, token in zip(logprobs, tokens)],
                  "output_token_logprobs_length": len(logprobs)}
    if top > 0:
        meta["input_top_logprobs"] = []
        meta["output_top_logprobs"] = [[[value, token, None] for value, token in lp.top] for lp in logprobs]
    return meta


def _sent_now(req: Request) -> float:
    """response_sent_to_client_ts: now, on the clock of the request's other stamps (SGLang's too)."""
    return time.perf_counter() + req.wall_offset


def _clock(wall: float) -> str:
    """A wall-clock time as SGLang's health check logs it (local time of day)."""
    return time.strftime("%H:%M:%S", time.localtime(wall))


class EngineServer:
    def __init__(self, *, host: str, port: int, scheduler: Scheduler, metrics: EngineMetrics,
                 faults: FaultPlan, context_length: int, server_args: dict, model_info: dict,
                 served_model_name: str, version: str, idle_timeout: float = 60.0,
                 startup_time: dict | None = None) -> None:
        self.host, self.port = host, port
        self.scheduler = scheduler
        self.metrics = metrics
        self.faults = faults
        self.context_length = context_length
        self.server_args = server_args
        self.model_info = model_info
        self.served_model_name = served_model_name
        self.version = version
        self.idle_timeout = idle_timeout
        self.startup_time = startup_time  # the engine's, from its launch to its scheduler started
        self.tokenizer = ByteTokenizer()
        self.ready = False
        self.health_timeout = float(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", 20))
        self.health_generation = _env_bool("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", True)
        self._device_info: dict | None = None
        self._flush_deferred = False  # a /flush_cache with a timeout waits for the server to go idle
        self.in_flight = InFlight()  # client requests' rids, refused while in flight as SGLang does
        self.delayed_aborts = DelayedAborts()  # refused streams' abort tasks, cancelled at shutdown

    # ------------------------------------------------------------------ lifecycle

    def app(self) -> web.Application:
        app = web.Application(middlewares=[_unrouted_as_fastapi])
        r = app.router

        def get(path: str, handler) -> None:
            # FastAPI's GET routes take no HEAD (aiohttp's do by default): SGLang answers HEAD a 405
            r.add_get(path, handler, allow_head=False)

        r.add_get("/", self.root)  # SGLang declares HEAD there, and there only
        for path in (api.HEALTH, api.HEALTH_GENERATE):
            get(path, self.health)
        get("/ready", self.ready_check)
        r.add_route("POST", api.GENERATE, self.generate)
        r.add_route("PUT", api.GENERATE, self.generate)
        get(api.SERVER_INFO, self.get_server_info)
        get(api.SERVER_INFO_OLD, self._deprecated(api.SERVER_INFO_OLD, api.SERVER_INFO, self.get_server_info))
        get(api.LOADS, self.get_loads)
        get(api.MODEL_INFO, self.get_model_info)
        get("/get_model_info", self._deprecated("/get_model_info", api.MODEL_INFO, self.get_model_info))
        get(api.MODELS, self.list_models)
        get(api.MODELS + "/{model:.*}", self.retrieve_model)  # SGLang's {model:path}: "" too
        r.add_post("/v1/completions", self.completions)
        r.add_post("/v1/chat/completions", self.chat_completions)
        for path in (api.TOKENIZE, api.TOKENIZE_ALIAS):
            r.add_post(path, self.tokenize)
        r.add_route("GET", "/flush_cache", self.flush_cache)
        r.add_route("POST", "/flush_cache", self.flush_cache)
        # SGLang mounts Prometheus' app on every path that starts with /metrics, for every method
        r.add_route("*", api.METRICS + "{rest:.*}", self.get_metrics)
        r.add_post("/abort_request", self.abort_request)
        return app

    @staticmethod
    def _deprecated(old: str, new: str, handler):
        """An old endpoint name: served as the new one, with SGLang's warning on each call."""
        async def warn_then_serve(request: web.Request) -> web.StreamResponse:
            logs.SERVER.warning(f"Endpoint '{old}' is deprecated and will be removed in a future version. "
                                f"Please use '{new}' instead.")
            return await handler(request)

        return warn_then_serve

    def serve(self) -> None:
        """Bind, warm up, log the readiness line, and serve until SIGTERM or SIGINT."""
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False,
                               keepalive_timeout=self.idle_timeout)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:  # a port taken, an address of no interface here: one line, as uvicorn logs it
            # asyncio's bind error repeats the address before the cause; a resolver error has its own words
            why = os.strerror(exc.errno).lower() if (exc.errno or 0) > 0 else str(exc.strerror or exc)
            logs.SERVER.error(f"cannot bind {self.host}:{self.port}: {why}; choose another --host and --port")
            logs.die(1)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        warmup = asyncio.create_task(self._warmup())
        await stop.wait()
        warmup.cancel()
        self.delayed_aborts.cancel()  # a refused stream's abort task would abort a request mid-shutdown
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
            await self._finished(self._warmup_request())
        except asyncio.CancelledError:
            raise
        except Exception:
            logs.SERVER.error(f"Initialization failed. warmup error: {traceback.format_exc()}")
            logs.die(1)
        self.ready = True
        logs.ready()

    def _warmup_request(self) -> Request:
        """SGLang's warm-up request, shortened to fit a short --context-length as a client's must."""
        new_tokens = max(min(WARMUP_MAX_NEW_TOKENS, self.context_length - 2), 0)
        prompt = self.tokenizer.encode(WARMUP_PROMPT)[: max(self.context_length - 1 - new_tokens, 1)]
        return Request(prompt, new_tokens, internal=True)

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

    async def _answered(self, request: web.Request, req: Request) -> Progress | None:
        """`_finished`, or None once `req` is aborted because its client left first, as SGLang
        aborts a request whose connection closed: a non-streaming one writes nothing that would
        fail and tell."""
        answers = await self._all_answered(request, [req])
        return None if answers is None else answers[0]

    async def _all_answered(self, request: web.Request, reqs: list[Request]) -> list[Progress | None] | None:
        """Each of ``reqs`` finished (see `_answered`), or None once they are aborted because
        their client left first. A request that finishes with an error (abort_error) ends the
        wait and aborts those still running, their answers None, as SGLang's batch gives up on
        its first error and aborts the rest."""
        tasks = [asyncio.ensure_future(self._finished(req)) for req in reqs]
        settled = asyncio.get_running_loop().create_future()  # all finished, or one with an error
        left = len(tasks)

        def finished(task: asyncio.Task) -> None:
            nonlocal left
            left -= 1
            failed = task.cancelled() or task.exception() is not None or abort_error(task.result().finish_reason)
            if (failed or not left) and not settled.done():
                settled.set_result(None)

        for task in tasks:
            task.add_done_callback(finished)
        if not tasks:
            settled.set_result(None)
        try:
            while not settled.done():
                await asyncio.wait({settled}, timeout=DISCONNECT_POLL_S)
                if not settled.done() and (request.transport is None or request.transport.is_closing()):
                    for req, task in zip(reqs, tasks):
                        if not task.done():
                            self._abort(req)
                    return None
            for req, task in zip(reqs, tasks):
                req.aborted = req.aborted or not task.done()
            return [task.result() if task.done() else None for task in tasks]
        finally:
            for task in tasks:
                task.cancel()

    def _abort_in_flight(self, rids: list[str]) -> None:
        """SGLang's abort task of a /generate stream (its tokenizer manager's create_abort_task):
        each of its rids still in flight is aborted, as /abort_request aborts it. A stream refused
        for naming a rid in flight so aborts the request that holds it."""
        for rid in rids:
            if rid in self.in_flight:
                self.scheduler.abort(rid)

    @staticmethod
    def _abort(req: Request) -> None:
        """A request whose client left: one line, as SGLang logs an abort, not a traceback."""
        req.aborted = True
        logs.SERVER.info(f"Abort request {req.rid}: the client disconnected")

    async def _hang_if_faulty(self) -> None:
        if (self.faults.hang and self.ready) or self.scheduler.frozen:
            await asyncio.Event().wait()  # never set: the connection stays open, unanswered

    @staticmethod
    def _error(exc: RequestError) -> web.Response:
        logs.SERVER.error(f"[http_server] Error: {exc}")
        return json_response(exc.body(), status=exc.status)

    @staticmethod
    async def _stream_error(request: web.Request, exc: Refused) -> web.StreamResponse:
        """A refused streaming request as SGLang sends it: HTTP 200, one error event, [DONE]."""
        logs.SERVER.error(f"[http_server] Error: {exc}")
        resp = await EngineServer._open_stream(request)
        await EngineServer._send(resp, exc.stream_event())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    # ------------------------------------------------------------------ endpoints

    async def health(self, request: web.Request) -> web.Response:
        """SGLang's /health and /health_generate: a one-token request, 200 on any output of the
        scheduler, else 503 and its "Health check failed" line after SGLANG_HEALTH_CHECK_TIMEOUT,
        a frozen scheduler (--fault-hang-after) included: the HTTP side still answers it. With
        SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION off, a ready server's /health is 200 at once."""
        if not self.ready:
            return web.Response(status=503)
        if request.path == api.HEALTH and not self.health_generation:
            return web.Response(status=200)  # no scheduler behind it: a hung one (--fault-hang) too
        if self.faults.hang:
            await asyncio.Event().wait()  # --fault-hang: unanswered, as documented in faults.py
        started = time.time()
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
        heard = started - (tic - self.scheduler.last_output_at)  # the scheduler's last output, wall clock
        logs.SERVER.error(f"Health check failed. Server couldn't get a response from detokenizer for last "
                          f"{self.health_timeout:g} seconds. tic start time: {_clock(started)}. "
                          f"last_heartbeat time: {_clock(heard)}")
        return web.Response(status=503)

    async def abort_request(self, request: web.Request) -> web.Response:
        """SGLang's /abort_request: ``{"rid": ..., "abort_all": ...}`` (see Scheduler.abort), 200
        whether or not a request matched; a body that is no such object is FastAPI's 400 (see
        protocol.parse_abort)."""
        try:
            body = await self._read_json(request, json_guard=False, not_object=abort_not_an_object)
            rid, abort_all = parse_abort(body, f"{request.method} {request.path}")
        except RequestError as exc:
            return self._error(exc)
        self.scheduler.abort(rid, abort_all)
        return web.Response(status=200)

    async def ready_check(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.ready else 503)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        await self._hang_if_faulty()
        try:
            reqs, stream, batched = await self._read_generate(request)
            try:
                self.in_flight.claim(reqs)  # refuses again a rid claimed since it was checked
            except DuplicateRid as exc:
                exc.stream = stream
                raise
        except RequestError as exc:
            if not (isinstance(exc, Refused) and exc.stream):
                return self._error(exc)
            if exc.rids:
                # SGLang's stream ends with its abort task, which then aborts the rids in flight: the others'
                self.delayed_aborts.schedule(self._abort_in_flight, exc.rids)
            return await self._stream_error(request, exc)  # SGLang has started streaming by then
        try:
            return await self._serve_generate(request, reqs, stream, batched)
        finally:
            self.in_flight.release_unsent(reqs)

    async def _serve_generate(self, request: web.Request, reqs: list[Request], stream: bool,
                              batched: bool) -> web.StreamResponse:
        """/generate's requests, their rids claimed: a batch's answer or a single request's."""
        if batched:
            return await self._generate_batch(request, reqs, stream)
        req = reqs[0]
        if req.stream:
            return await self._stream(request, [req], self._outputs(req))
        p = await self._answered(request, req)
        if p is None:
            return web.Response(status=499)
        error = abort_error(p.finish_reason)
        return self._error(error) if error is not None else json_response(self._output(req, p))

    async def _generate_batch(self, request: web.Request, reqs: list[Request], stream: bool) -> web.StreamResponse:
        """A batch as SGLang answers it: a list of the prompts' outputs in the prompt order, or
        the first prompt's error (in the prompt order) for the whole; streamed, each prompt's
        outputs as they come, each with its prompt's ``index``."""
        if stream:
            return await self._stream(request, reqs, self._batch_outputs(reqs))
        answers = await self._all_answered(request, reqs)
        if answers is None:
            return web.Response(status=499)
        for p in answers:
            if p is not None and (error := abort_error(p.finish_reason)) is not None:
                return self._error(error)
        return json_response([self._output(req, p) for req, p in zip(reqs, answers)])

    async def _batch_outputs(self, reqs: list[Request]):
        """The outputs of a batch's stream, each prompt's as they come, with its ``index``."""
        async with contextlib.aclosing(self._merged([self._outputs(req) for req in reqs])) as merged:
            async for index, out in merged:
                yield {**out, "index": index}

    @staticmethod
    async def _merged(streams: list):
        """``(index, item)`` for each item of ``streams`` (async iterators), as they come; closing
        it stops them. A stream's error is raised here, as an unmerged stream's would be."""
        events: asyncio.Queue[tuple[int, Any] | Exception | None] = asyncio.Queue()

        async def pump(index: int, stream) -> None:
            try:
                async for item in stream:
                    await events.put((index, item))
            except Exception as exc:  # noqa: BLE001  # raised to the reader below: a lost one hung the stream
                await events.put(exc)
                return
            await events.put(None)  # this stream is done

        pumps = [asyncio.ensure_future(pump(i, stream)) for i, stream in enumerate(streams)]
        try:
            left = len(pumps)
            while left:
                event = await events.get()
                if event is None:
                    left -= 1
                elif isinstance(event, Exception):
                    raise event
                else:
                    yield event
        finally:
            for task in pumps:
                task.cancel()

    async def _read_generate(self, request: web.Request) -> tuple[list[Request], bool, bool]:
        """The requests of a /generate body (one a prompt), whether it streams, and whether it is
        a batch (answered with a list) rather than one prompt."""
        # a prompt asking for several samples is SGLang's batch of one
        body = parallel.as_batch(await self._read_json(request, json_guard=False, model=GENERATE_MODEL))
        batched = batch.is_batch(body)
        try:
            parse = batch.parse_batch if batched else lambda b, **kw: [parse_generate(b, **kw)]
            gs = parse(body, encode=self.tokenizer.encode, vocab_size=self.tokenizer.vocab_size,
                       context_length=self.context_length, rids_free=self.in_flight.check)
        except Refused as exc:
            exc.stream = isinstance(body, dict) and body.get("stream") is True
            raise
        if self.scheduler.decoder.speculative and any(g.top_logprobs is not None for g in gs):
            raise Unsupported(LOGPROBS_SPECULATIVE.format(self.scheduler.decoder.method))
        reqs = [self._request(g, g.stream) for g in gs]
        return reqs, body.get("stream") is True, batched

    @staticmethod
    def _request(prompt: Any, stream: bool) -> Request:
        """The scheduler's request of one parsed prompt (a /generate one or an OpenAI route's)."""
        s = prompt.sampling
        return Request(list(prompt.input_ids), s.max_new_tokens, ignore_eos=s.ignore_eos, stop=s.stop,
                       stop_token_ids=s.stop_token_ids, stream=stream, rid=prompt.rid, abort=prompt.abort,
                       top_logprobs=getattr(prompt, "top_logprobs", None))

    async def _read_body(self, request: web.Request) -> bytes:
        """The body, or a 408 when it trickles in slower than the idle timeout allows: aiohttp's
        keep-alive timeout guards a connection until its headers are in, this guards the body. A
        client that leaves mid-body gets FastAPI's answer to a body it fails to read (an
        UnparsableBody): aiohttp would log the read's error with a traceback as a handler's failure."""
        try:
            return await asyncio.wait_for(request.read(), self.idle_timeout)
        except asyncio.TimeoutError:
            raise web.HTTPRequestTimeout(text=f"The request body did not arrive within {self.idle_timeout:g} s.")
        except ConnectionError:
            raise UnparsableBody(PARSE_ERROR) from None

    async def _read_json(self, request: web.Request, *, json_guard: bool = True, not_object=None,
                         model: RequestModel | None = None) -> dict:
        """The JSON object of the body, read whole first, as FastAPI reads it, then parsed and
        checked as SGLang's app does (protocol.read_body). ``json_guard``: the route is one SGLang
        guards with validate_json_request (the OpenAI-compatible ones and /tokenize); /generate is not.
        ``model``: the fields FastAPI validates against the route's request class."""
        raw = await self._read_body(request)
        return read_body(raw, request.headers.get("Content-Type"), f"{request.method} {request.path}",
                         json_guard=json_guard, not_object=not_object, model=model)

    def _meta_info(self, req: Request, p: Progress, *, sent_at: float | None = None) -> dict:
        """SGLang's meta_info, its keys in its order; ``sent_at``: when the request's first answer
        went out (wall clock), None where this is that answer (a whole response, a stream's first
        chunk), which then says when it is sent. A request /abort_request took from the waiting
        queue has the few keys SGLang's tokenizer manager answers it with."""
        first = sent_at is None
        if p.never_scheduled:
            meta = {"id": req.rid, api.FINISH_REASON: p.finish_reason, "weight_version": "default",
                    api.E2E_LATENCY: p.e2e_latency, "weight_versions": _weight_versions(0), api.COMPLETION_TOKENS: 0}
            return {**meta, "response_sent_to_client_ts": _sent_now(req)} if first else meta
        metrics = bool(self.server_args.get("enable_metrics")) and p.timing is not None
        meta = {"id": req.rid, api.FINISH_REASON: p.finish_reason, api.PROMPT_TOKENS: len(req.input_ids),
                "weight_version": "default", "num_retractions": 0}
        if metrics:  # SGLang's scheduler's time stats, on every answer
            meta.update(_scheduler_times(p.timing, req.wall_offset))
        if req.top_logprobs is not None:
            meta.update(_logprobs_meta(req.output_logprobs[: p.num_ids], req.output_ids[: p.num_ids], req.top_logprobs))
        meta.update({"reasoning_tokens": 0, api.COMPLETION_TOKENS: p.num_ids, "cached_tokens": 0})
        if p.finish_reason is not None:  # SGLang's scheduler sends the spans of a finished request only
            meta["weight_versions"] = _weight_versions(p.num_ids)
        if p.e2e_latency is not None:
            meta[api.E2E_LATENCY] = p.e2e_latency
        budget = self.scheduler.decoder.budget
        # SGLang adds them to a request's last answer only; absent, not zero, when nothing was verified
        if p.finish_reason is not None and p.verify_ct > 0 and budget > 0:
            proposed = p.verify_ct * budget
            meta[api.SPEC_ACCEPT_RATE] = p.correct_drafts / proposed
            meta[api.SPEC_ACCEPT_LENGTH] = p.num_ids / p.verify_ct
            meta[api.SPEC_NUM_CORRECT_DRAFTS] = p.correct_drafts
            meta[api.SPEC_NUM_PROPOSED_DRAFTS] = proposed
            meta[api.SPEC_VERIFY_CT] = p.verify_ct
            meta["spec_correct_drafts_histogram"] = list(p.drafts_histogram)
        if metrics and p.finish_reason is not None:  # its tokenizer manager's, on the last answer
            meta.update(_request_times(req, p, sent_at))
        if first:
            meta["response_sent_to_client_ts"] = _sent_now(req)
        return meta

    def _output(self, req: Request, p: Progress, *, sent_at: float | None = None) -> dict:
        return {"text": p.text, "output_ids": req.output_ids[: p.num_ids],
                api.META_INFO: self._meta_info(req, p, sent_at=sent_at)}

    async def _outputs(self, req: Request):
        """The outputs of a /generate stream, one a step."""
        sent_at = None
        async for p in self._progress(req):
            out = self._output(req, p, sent_at=sent_at)
            if sent_at is None:
                sent_at = out[api.META_INFO]["response_sent_to_client_ts"]
            yield out

    async def _stream(self, request: web.Request, reqs: list[Request], events) -> web.StreamResponse:
        """Send ``events`` (an async iterator of dicts) as SSE, then ``[DONE]``; a client that
        leaves aborts ``reqs``."""
        resp = await self._open_stream(request)
        try:
            async for event in events:
                await self._send(resp, event)
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except ConnectionResetError:
            for req in reqs:
                self._abort(req)
        except asyncio.CancelledError:
            for req in reqs:
                req.aborted = True
            raise
        finally:
            await events.aclose()  # a batch's stream stops pumping its prompts' outputs
        return resp

    async def _progress(self, req: Request):
        """Submit ``req`` and yield its progress up to the finish; a slow reader skips to the
        latest state (the text is cumulative)."""
        progress = self._watch(req)
        while True:
            p = await progress.get()
            while not progress.empty():
                p = progress.get_nowait()
            yield p
            if p.finish_reason is not None:
                return

    @staticmethod
    async def _open_stream(request: web.Request) -> web.StreamResponse:
        """SGLang's StreamingResponse headers: Starlette adds the charset to a text type; no Cache-Control."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        return resp

    @staticmethod
    async def _send(resp: web.StreamResponse, event: dict) -> None:
        await resp.write(b"data: " + _dumps(event) + b"\n\n")

    async def get_server_info(self, request: web.Request) -> web.Response:
        await self._hang_if_faulty()
        return json_response({
            **self.server_args,
            "max_total_num_tokens": self.scheduler.max_total_num_tokens,
            "max_req_input_len": context_rule.max_req_input_len(self.context_length),
            "startup_time": self._until_ready(self.startup_time),
            "internal_states": [self._internal_state()],
            "version": self.version,
            "frontend": "python",
            **self._devices(),
        })

    async def get_loads(self, request: web.Request) -> web.Response:
        """SGLang's /v1/loads, its core counts for the engine's one DP rank (dp_size is 1): a
        section `include` names beyond core is left out as SGLang leaves out one it has none of,
        an unknown one is its 400, and `dp_rank` filters."""
        include = request.query.get("include")
        if include:
            sections = {s.strip() for s in include.split(",")}
            if not sections <= LOAD_SECTIONS:
                return json_response({"detail": f"Invalid include sections: {sections - LOAD_SECTIONS}. "
                                                f"Valid options: {sorted(LOAD_SECTIONS)}"}, status=400)
        running, waiting = self.scheduler.load()
        loads = [{"timestamp": time.time(), api.LOAD_DP_RANK: 0, api.LOAD_RUNNING: running, api.LOAD_WAITING: waiting,
                  "max_total_num_tokens": self.scheduler.max_total_num_tokens,
                  "max_running_requests": self.scheduler.max_batch}]
        rank = request.query.get("dp_rank")
        if rank is not None:
            loads = [load for load in loads if str(load[api.LOAD_DP_RANK]) == rank]
        return json_response({"timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                              "version": self.version, "accelerator": None, "num_accelerators": 1, "loads": loads})

    def _internal_state(self) -> dict:
        """internal_states[0], as SGLang's scheduler answers it: the resolved server arguments,
        the processes they span, the scheduler's startup figures and running-request limit, then
        its live state (throughput, memory, acceptance)."""
        args = self.server_args
        return {
            **args,
            "world_size": args["dp_size"] * args["tp_size"] * args["pp_size"],
            "startup_time": self._until_ready(self.scheduler.startup_time),
            "effective_max_running_requests_per_dp": self.scheduler.max_batch,
            **self.scheduler.internal_state(),
        }

    def _until_ready(self, figures: dict | None) -> dict | None:
        """Start-up figures up to ready: the scheduler thread's batch warm ends after they were
        taken, and SGLang's end-to-end figures include its CUDA graph capture, the warm's counterpart."""
        if figures is None:
            return None
        warmed = self.scheduler.warm_seconds
        return {k: v + warmed if k in ("scheduler_e2e", "tokenizer_e2e") else v for k, v in figures.items()}

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
        return json_response(self.model_info)

    async def list_models(self, request: web.Request) -> web.Response:
        card = openai_api.model_card(self.served_model_name, self.context_length, int(time.time()))
        return json_response({"object": "list", "data": [card]})

    async def retrieve_model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name != self.served_model_name:
            return json_response(openai_api.model_not_found(name), status=404)
        return json_response(openai_api.model_card(name, self.context_length, int(time.time())))

    # ------------------------------------------------------------------ OpenAI-compatible

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, openai_api.parse_completion, "text_completion",
                                  openai_api.COMPLETION_MODEL)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, openai_api.parse_chat, "chat.completion", openai_api.CHAT_MODEL)

    async def _openai(self, request: web.Request, parse, kind: str, model: RequestModel) -> web.StreamResponse:
        await self._hang_if_faulty()
        try:
            o = parse(await self._read_json(request, model=model), encode=self.tokenizer.encode,
                      vocab_size=self.tokenizer.vocab_size, context_length=self.context_length,
                      served_model_name=self.served_model_name, rids_free=self.in_flight.check,
                      dp_rank_header=request.headers.get(openai_api.DP_RANK_HEADER))
            reqs = [self._request(p, o.stream) for p in o.prompts]
            self.in_flight.claim(reqs)  # SGLang's serving class answers its refusal before streaming
        except RequestError as exc:
            logs.SERVER.error(f"[http_server] Error: {exc}")
            # a malformed request meets SGLang's validation handler, a refused one its serving class
            body = exc.body() if isinstance(exc, InvalidBody) else openai_api.error_body(exc)
            return json_response(body, status=exc.status)
        try:
            if not o.stream:
                return await self._openai_answer(request, o, reqs, kind)
            return await self._stream(request, reqs, self._openai_chunks(o, reqs, kind))
        finally:
            self.in_flight.release_unsent(reqs)

    async def _openai_answer(self, request: web.Request, o: openai_api.OpenAIRequest, reqs: list[Request],
                             kind: str) -> web.Response:
        """A whole response: a choice a prompt, in the prompt order, their usage summed; or the
        first prompt's error (in the prompt order) for the whole, as SGLang's batch answers."""
        answers = await self._all_answered(request, reqs)
        if answers is None:
            return web.Response(status=499)
        for p in answers:
            if p is not None and (error := abort_error(p.finish_reason)) is not None:
                logs.SERVER.error(f"[http_server] Error: {error}")
                return json_response(openai_api.error_body(error), status=error.status)
        make = openai_api.completion_choice if kind == "text_completion" else openai_api.chat_choice
        choices = [make(p.text, p.finish_reason, i) for i, p in enumerate(answers)]
        # a prompt's tokens once, at its first sample; every sample's completion (parallel.py)
        try:
            prompt_tokens = openai_api.counted_prompt_tokens([len(req.input_ids) for req in reqs], o.n_given)
        except RequestError as exc:  # SGLang's usage fails on n 0 once the request was served
            logs.SERVER.error(f"[http_server] Error: {exc}")
            return json_response(openai_api.error_body(exc), status=exc.status)
        usage = openai_api.usage(prompt_tokens, sum(p.num_ids for p in answers))
        return json_response(openai_api.response(kind, reqs[0].rid, o.model, choices, usage,
                                                     self._meta_info(reqs[0], answers[0])))

    async def _openai_chunks(self, o: openai_api.OpenAIRequest, reqs: list[Request], kind: str):
        """The chunks of a streamed response (see openai_api.Chunks and CompletionChunks)."""
        if kind != "text_completion" and o.n > 1:
            chunks = openai_api.ChatChoicesChunks(o.model, [len(req.input_ids) for req in reqs], o.n,
                                                  include_usage=o.include_usage, continuous_usage=o.continuous_usage)
            async with contextlib.aclosing(self._merged([self._progress(req) for req in reqs])) as merged:
                async for index, p in merged:
                    for chunk in chunks.step(index, reqs[index].rid, p.text, p.num_ids, p.finish_reason):
                        yield chunk
                    if chunks.ended:
                        for req in reqs:
                            req.aborted = req.aborted or not req.finished
                        break
            for chunk in chunks.close():
                yield chunk
            return
        if kind != "text_completion":
            stream = openai_api.Chunks(kind, reqs[0].rid, o.model, len(reqs[0].input_ids),
                                       include_usage=o.include_usage, continuous_usage=o.continuous_usage,
                                       n_given=o.n_given)
            async for p in self._progress(reqs[0]):
                for chunk in stream.step(p.text, p.num_ids, p.finish_reason):
                    yield chunk
            return
        chunks = openai_api.CompletionChunks([req.rid for req in reqs], o.model, [len(req.input_ids) for req in reqs],
                                             include_usage=o.include_usage, continuous_usage=o.continuous_usage,
                                             samples=o.n_given)
        async with contextlib.aclosing(self._merged([self._progress(req) for req in reqs])) as merged:
            async for index, p in merged:
                for chunk in chunks.step(index, p.text, p.num_ids, p.finish_reason):
                    yield chunk
                if chunks.ended:
                    for req in reqs:
                        req.aborted = req.aborted or not req.finished  # the batch gives up on its first error
                    break
        for chunk in chunks.close():
            yield chunk

    async def tokenize(self, request: web.Request) -> web.Response:
        """No scheduler behind it (SGLang tokenizes in its HTTP process), so a hung server answers it."""
        try:
            answer = openai_api.tokenize(await self._read_json(request, model=openai_api.TOKENIZE_MODEL),
                                         encode=self.tokenizer.encode,
                                         context_length=self.context_length)
        except RequestError as exc:
            logs.SERVER.error(f"[http_server] Error: {exc}")
            # a malformed request meets SGLang's validation handler, a refused one its serving class
            body = exc.body() if isinstance(exc, InvalidBody) else openai_api.error_body(exc)
            return json_response(body, status=exc.status)
        return json_response(answer)

    async def flush_cache(self, request: web.Request) -> web.Response:
        """SGLang's /flush_cache: at once (``timeout`` 0, the default), or once the server is idle
        within ``timeout`` seconds; one such deferred flush at a time. Its words and log lines."""
        await self._hang_if_faulty()
        try:
            timeout = flush_timeout(request.query.get("timeout"), f"{request.method} {request.path}")
        except RequestError as exc:
            return self._error(exc)
        if self._flush_deferred:
            return self._flush_answer(False, "Another flush_cache is already in progress.")
        flushed = self.scheduler.flush()
        if not flushed and timeout <= 0:
            logs.SCHEDULER.warning(f"Cache not flushed because there are pending requests. "
                                   f"#queue-req: {len(self.scheduler.waiting)}, "
                                   f"#running-req: {len(self.scheduler.running)}")
            return self._flush_answer(False)
        if not flushed:
            self._flush_deferred = True
            try:
                deadline = time.monotonic() + timeout
                while not flushed and time.monotonic() < deadline:
                    await asyncio.sleep(min(DISCONNECT_POLL_S, max(deadline - time.monotonic(), 0)))
                    flushed = self.scheduler.flush()
            finally:
                self._flush_deferred = False
            if not flushed:
                logs.SCHEDULER.warning("Deferred flush_cache timed out while waiting for idle state.")
                return self._flush_answer(False, "Timed out waiting for idle state.")
        logs.SCHEDULER.info("Cache flushed successfully!")
        return self._flush_answer(True)

    @staticmethod
    def _flush_answer(flushed: bool, message: str = "") -> web.Response:
        if flushed:
            return web.Response(text="Cache flushed.\nPlease check backend logs for more details. (When there "
                                     "are running or waiting requests, the operation will not be performed.)\n")
        return web.Response(text=message or "Flush cache failed.\n", status=400)

    async def get_metrics(self, request: web.Request) -> web.Response:
        """As Prometheus' ASGI app answers: the format the Accept header asks, gzipped where
        Accept-Encoding allows, only the ``name[]`` metrics where the query names some."""
        body, headers = self.metrics.exposition(",".join(request.headers.getall("Accept", [])),
                                                ",".join(request.headers.getall("Accept-Encoding", [])),
                                                request.query.getall("name[]", []))
        return web.Response(body=body, headers=headers)

    async def root(self, request: web.Request) -> web.Response:
        return json_response(ROOT_ANSWER)
