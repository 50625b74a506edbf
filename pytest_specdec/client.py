"""Async load generator for SGLang's native /generate API (and the embedded engine, which speaks it).

Sends a workload's prompts at a fixed concurrency with `stream: true` and times each request on
the client: TTFT is the first SSE event that carries a completion token, e2e the `[DONE]`
event, TPOT (metrics.RequestRecord.tpot_ms) the time between them per token after the first, as
SGLang's bench_serving has them. Events are timed as they are parsed, so events that arrived in
one network read share an arrival time: a stream whose whole output came in the read that brought
its first token (a client or server starved of CPU, or a server that sends its output in large
steps) is marked `whole_at_once`, and has no TPOT.

SGLang streams `data: {json}` events with cumulative text and meta_info in every event,
then `data: [DONE]`; errors raised mid-stream arrive as `data: {"error": {"message": ...}}` with
HTTP 200, so a 200 alone does not mean success.

Why the parsing is lazy: with cumulative text every event repeats the whole output so far, so
decoding all of them costs O(tokens²) JSON work. Only events up to the second that carries
tokens and the last event before `[DONE]` are decoded; the rest are only scanned for an error
prefix. That keeps the client far faster than any server it measures (see
tests/bench/test_client_throughput.py). A server started with --incremental-streaming-output
sends each step's text and ids alone (the second event's ids are fewer than its
completion_tokens): then every event is decoded, small as each is, and the output joined.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping, TypeVar

import aiohttp

from . import context_rule
from . import sglang_api as api
from .metrics import RequestRecord, WorkloadResult, parse_prometheus_text
from .workloads import Workload

T = TypeVar("T")

_DATA = b"data:"
_DONE = b"[DONE]"
_ERROR_PREFIX = b'{"error"'
_ERROR_BODY_LIMIT = 2000
_COUNT_KEY = f'"{api.COMPLETION_TOKENS}"'.encode()
_COUNT_VALUE = re.compile(rb"\s*:\s*(\d+)")
_INDEX_KEY = f'"{api.RESPONSE_INDEX}"'.encode()


class ServerQueryError(Exception):
    """A server endpoint did not answer as SGLang's would (status, body or shape)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status where that was the fault: a 404 is an endpoint not served


#: Why a server cannot count tokens for us, as the phrase after "the server".
NO_TOKENIZE = f"has no {api.TOKENIZE} (SGLang before 0.5.3.post1)"
NO_TOKENIZER = f"has no tokenizer (started with {api.SKIP_TOKENIZER_INIT_FLAG})"


class TokenizeNotServed(ServerQueryError):
    """The server cannot count tokens for us: it has no /v1/tokenize, or no tokenizer behind it;
    `why` says which (NO_TOKENIZE or NO_TOKENIZER)."""

    def __init__(self, message: str, why: str = NO_TOKENIZE) -> None:
        super().__init__(message)
        self.why = why


class CallStalled(Exception):
    """A call to a ready server got no answer within the run's stall timeout (`waited_s`, where
    that is shorter than the call's own wait): a server that takes the connection and never
    answers is frozen, as a silent workload is, and waiting the call's own timeout only delays
    the red."""

    def __init__(self, path: str, waited_s: float) -> None:
        self.path, self.waited_s = path, waited_s
        super().__init__(f"{path} did not answer within {waited_s:g}s")


def bounded(own_s: float, stall_timeout: float | None) -> float:
    """A call's wait: its own, or the run's stall timeout where that is shorter."""
    return own_s if stall_timeout is None else min(own_s, stall_timeout)


class PastMaxNewTokens(Exception):
    """A stream that went on past its request's max_new_tokens: a server that ignores the limit.

    SGLang checks the limit after every step (one token, or one verified block of drafts) and
    finishes the request at the first step that reaches it. Releases before `finished_len` sent
    the whole block of that last step, so the event that reaches the limit may pass it; tokens
    after an event at the limit are none SGLang sends. Without this a server that ignores
    max_new_tokens and streams on never fails: a stream that keeps moving has no time cap.
    """

    def __init__(self, tokens: int, limit: int, before: int) -> None:
        self.tokens, self.limit = tokens, limit
        super().__init__(f"stream went past max_new_tokens: an event states {tokens} completion tokens "
                         f"where the request asked for at most {limit}, after one that stated {before} "
                         f"(SGLang finishes a request at the step that reaches max_new_tokens): the server "
                         f"ignores the limit; check that nothing between the run and the server rewrites "
                         f"sampling_params")


class WorkloadStalled(Exception):
    """No request of a running workload received anything for `stalled_s` seconds.

    Raised by the stall watchdog of `run_workload_async` instead of waiting for per-request
    timeouts, which stack up request after request on a frozen server.
    """

    def __init__(self, stalled_s: float, in_flight: int, done: int, total: int) -> None:
        self.stalled_s, self.in_flight, self.done, self.total = stalled_s, in_flight, done, total
        plural = "request was" if in_flight == 1 else "requests were"
        super().__init__(f"no token for {stalled_s:.1f}s while {in_flight} {plural} in flight "
                         f"({done} of {total} requests done)")


#: A workload silent this long has the rest of its stall timeout said (the server streams tokens
#: every few milliseconds, so a silence of seconds looks like a hung run).
STALL_QUIET_S = 3.0
#: `on_quiet(silent_s, left_s, in_flight)`: a workload's silence, said once while it waits.
OnQuiet = Callable[[float, float, int], None]
#: A workload still running this long says how far it is: one over sooner needs no line to follow.
PROGRESS_FIRST_S = 10.0
#: Then again this often: a GPU workload runs for minutes, and a line each 30 s is no flood.
PROGRESS_EVERY_S = 30.0
#: `on_progress(done, total, tokens, elapsed_s)`: requests finished of the workload's, the
#: completion tokens streamed so far (the finished requests' and those still streaming), and the
#: seconds since its first send; said while it runs, never after. Display only: the measured
#: figures come from the requests' records.
OnProgress = Callable[[int, int, int, float], None]


@dataclass(eq=False, slots=True)
class StreamedTokens:
    """A request's completion tokens streamed so far, as its latest event states them.

    Written by the stream at each event that brings tokens (one int stored, no call or allocation
    per event) and read by the progress timer: a workload of a few long requests otherwise says
    "0 of 8 requests done, 0 tokens" for minutes while tokens stream. A request of several
    sequences (n above 1), whose events state each sequence's own count, is counted when it ends.
    """

    count: int = 0


class _StreamWatch:
    """When the workload last heard from the server, and how many requests wait on it."""

    def __init__(self) -> None:
        self.last_event = time.perf_counter()
        self.in_flight = 0
        self.done = 0
        self.tokens = 0  # the finished requests' completion tokens, as their records state them
        self.streaming: set[StreamedTokens] = set()  # the requests in flight's counts

    def streamed(self) -> int:
        """The tokens streamed so far: the finished requests' and those in flight's. A request's
        stream count leaves `streaming` in the loop step that adds its record's to `tokens`, so
        no line counts it twice, nor keeps the stream's count of one that failed or was cancelled
        beside (or instead of) what its record states."""
        return self.tokens + sum(s.count for s in self.streaming)

    def heard(self) -> None:
        self.last_event = time.perf_counter()

    async def watch(self, stall_timeout: float, total: int, on_quiet: OnQuiet | None = None) -> None:
        """Return never; raise WorkloadStalled once requests wait `stall_timeout` s in silence.
        `on_quiet(silent_s, left_s, in_flight)` is called once, the first time requests have
        waited `STALL_QUIET_S` in silence with more of the wait left."""
        poll = min(0.25, stall_timeout / 4)
        while True:
            await asyncio.sleep(poll)
            silent = time.perf_counter() - self.last_event
            if self.in_flight and silent > stall_timeout:
                raise WorkloadStalled(silent, self.in_flight, self.done, total)
            if on_quiet is not None and self.in_flight and silent >= STALL_QUIET_S:
                on_quiet(silent, stall_timeout - silent, self.in_flight)
                on_quiet = None

    async def report(self, total: int, start: float, on_progress: OnProgress) -> None:
        """Return never; call `on_progress` `PROGRESS_FIRST_S` after `start`, then each
        `PROGRESS_EVERY_S`, while requests are left (a timer, not a call per event: the client
        must stay cheap while it measures)."""
        await asyncio.sleep(max(0.0, start + PROGRESS_FIRST_S - time.perf_counter()))
        while True:
            if self.done < total:  # the last request's end and this timer may share a loop turn
                on_progress(self.done, total, self.streamed(), time.perf_counter() - start)
            await asyncio.sleep(PROGRESS_EVERY_S)


def _base(url: str) -> str:
    return url.rstrip("/")


def cut_off_text(exc: aiohttp.ClientPayloadError) -> str:
    """A stream the server cut off mid-body, in words about the server: aiohttp's own words name
    its parser ('Response payload is not completed'), and are kept after them."""
    return f"stream cut off mid-response (server closed the connection before the body ended: {exc})"


#: The statuses whose Retry-After means "busy: come back later" (RFC 9110, Retry-After).
_BUSY_STATUSES = (429, 503)


def retry_after_text(status: int, headers: Mapping[str, str]) -> str:
    """What a 429 or 503 with a Retry-After header asks, and why the run does not do it ('' for
    other answers), to follow the refusal's own words.

    The run does not retry: the wait would count in the request's TTFT and the workload's wall
    time, so its throughput would be the refusing side's. SGLang's own 503 while it loads comes
    from /health and /health_generate, and a server is handed out only once those answer 200; a
    refusal of /generate comes from a router or proxy that limits requests, or an overloaded or
    restarting server, and waiting on it silently would hide that.
    """
    value = headers.get("Retry-After", "").strip() if status in _BUSY_STATUSES else ""
    if not value:
        return ""
    when = f"after {value} s" if value.isdigit() else f"at {value}"
    return (f"; it asked to be retried {when} (Retry-After), which the run does not do, as the wait would "
            f"count in the measured times: a router or proxy in front of the server limits requests, or "
            f"the server is overloaded or restarting; point the run at the server itself, or raise the "
            f"router's request limit above the workload's concurrency")


def _max_new_tokens(payload: dict[str, Any]) -> int | None:
    """The request's max_new_tokens, where it states one (SGLang's default applies otherwise)."""
    params = payload.get(api.REQUEST_FIELDS_SENT[1])
    value = params.get("max_new_tokens") if isinstance(params, dict) else None
    return value if type(value) is int else None


def _one_sequence(payload: dict[str, Any]) -> bool:
    """Whether the request streams one sequence: n above 1 (SGLang's parallel samples) or a batch
    of prompts interleave events of several, each stating its own completion_tokens, so one
    sequence's count is no progress or limit of another's."""
    params = payload.get(api.REQUEST_FIELDS_SENT[1])
    samples = params.get("n") if isinstance(params, dict) else None
    prompts = payload.get(api.REQUEST_FIELDS_SENT[0], payload.get("input_ids"))
    batch = isinstance(prompts, list) and bool(prompts) and not isinstance(prompts[0], int)
    return not batch and not isinstance(params, list) and not (type(samples) is int and samples > 1)


def _finish_reason(meta: dict) -> tuple[str | None, str | None]:
    """(finish type, abort message). SGLang sends {"type": ..., "message"?: ...}, older ones a str."""
    reason = meta.get(api.FINISH_REASON)
    if reason is None:
        return None, None
    if isinstance(reason, dict):
        kind = reason.get(api.FINISH_TYPE)
        return (None if kind is None else str(kind)), reason.get(api.FINISH_MESSAGE)
    return str(reason), None


def _opt_int(meta: dict, key: str) -> int | None:
    value = meta.get(key)
    return None if value is None else int(value)


def _opt_float(meta: dict, key: str) -> float | None:
    value = meta.get(key)
    return None if value is None else float(value)


def _payload(workload: Workload, index: int, top_logprobs: int = 0) -> dict[str, Any]:
    text, sampling_params, stream = api.REQUEST_FIELDS_SENT
    payload = {text: workload.prompts[index].text, sampling_params: workload.sampling_params(index), stream: True}
    if top_logprobs:
        payload.update({api.RETURN_LOGPROB: True, api.TOP_LOGPROBS_NUM: top_logprobs})
    return payload


def _margins(meta: dict) -> tuple[float, ...] | None:
    """Each output token's lead of the server's first choice over its second in log-probability,
    from meta_info's `output_top_logprobs`; None where absent or not two a token (not asked, or
    a server that does not serve logprobs), which only costs the divergence message its hint."""
    rows = meta.get(api.OUTPUT_TOP_LOGPROBS)
    if not isinstance(rows, list):
        return None
    try:
        return tuple(_margin(row[0][0], row[1][0]) for row in rows)
    except (TypeError, IndexError, ValueError):
        return None


def _margin(first: Any, second: Any) -> float | None:
    """One token's lead, None where not a finite number: a second choice of -inf log-probability
    comes as null from SGLang (orjson) and as -Infinity from a json server, and neither may cost
    the request its other tokens' margins, nor reach the journal, which holds finite numbers only."""
    if first is None or second is None:
        return None
    lead = float(first) - float(second)
    return lead if math.isfinite(lead) else None


async def generate_one(
    session: aiohttp.ClientSession,
    url: str,
    payload: dict[str, Any],
    *,
    index: int = 0,
    timeout_s: float | None = 600.0,
    keep_text: bool = True,
    on_event: Callable[[], None] | None = None,
    streamed: StreamedTokens | None = None,
) -> RequestRecord:
    """One streaming /generate request; never raises for server or network failures.

    `on_event` is called for each `data:` event that brings tokens (the stall watchdog's sign of
    progress); SSE comments, blank lines and a repeated event, which a proxy may send as
    keep-alives, are no progress. `streamed.count` follows the tokens the stream has stated so
    far, for a progress line; the record alone holds the request's figures.

    Failures become a `RequestRecord` with `error` set, so that one bad request is reported
    with its status and message next to the others instead of aborting the whole workload.
    """
    start = time.perf_counter()
    status = 0
    first_token_at: float | None = None
    first_meta: dict | None = None
    last_event: bytes | None = None
    # the events decoded while the stream may be deltas (None: it is not, or no text is kept)
    decoded: list[dict] | None = [] if keep_text else None
    token_events = 0
    chunks = 0
    first_read = last_read = -1  # the network reads that brought the first token and the last event
    one_sequence = _one_sequence(payload)
    last_of: dict[int, bytes] = {}  # several sequences: each one's last event, by its index
    if not one_sequence:
        decoded = None  # interleaved sequences: each one's last event holds its output
    done = False
    error: str | None = None
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with session.post(f"{_base(url)}{api.GENERATE}", json=payload, timeout=timeout) as resp:
            status = resp.status
            if status != 200:
                body = await resp.text(errors="replace")
                error = f"HTTP {status}: {error_text(body)}{retry_after_text(status, resp.headers)}"
            else:
                head = bytearray()  # the body's first bytes, to show one that is no event stream
                async for read, event in _data_events(resp, head, 200, on_event, _max_new_tokens(payload),
                                                      one_sequence, streamed):
                    if event == _DONE:
                        done = True
                        break
                    chunks += 1
                    if event.startswith(_ERROR_PREFIX):
                        error = error_text(event.decode("utf-8", "replace"))
                        continue
                    last_event, last_read = event, read
                    if not one_sequence:
                        last_of[_sequence_index(event)] = event
                    if first_token_at is None or decoded is not None:
                        obj = _decode_event(event)
                        meta = obj.get(api.META_INFO) or {}
                        tokens = int(meta.get(api.COMPLETION_TOKENS) or 0)
                        if first_token_at is None and tokens > 0:
                            first_token_at = time.perf_counter()
                            first_meta, first_read = meta, read
                        if decoded is not None:
                            decoded.append(obj)
                            token_events += tokens > 0
                            if token_events == 2 and not _is_delta(obj, tokens):
                                decoded = None  # cumulative: the last event holds the whole output
                if not done and error is None and chunks == 0 and head \
                        and not head.lstrip().startswith((_DATA, b":")):  # ":": an SSE comment
                    error = (f"answered with a body that is no event stream (no 'data:' lines; was the request's "
                             f"stream: true ignored?): {error_text(head.decode('utf-8', 'replace'))}")
                elif not done and error is None:
                    error = "stream ended without 'data: [DONE]' (server closed the connection mid-response)"
    except asyncio.TimeoutError:
        error = f"timed out after {timeout_s} s"
    except aiohttp.ClientPayloadError as exc:
        error = cut_off_text(exc)
    except PastMaxNewTokens as exc:
        error = str(exc)
    except aiohttp.ClientError as exc:
        error = f"{type(exc).__name__}: {exc}"
    except ValueError as exc:  # malformed event JSON
        error = f"malformed stream event: {exc}"
    end = time.perf_counter()

    final: dict = {}
    longest: int | None = None
    own_meta: dict | None = None  # several sequences: the first one's, whose text and ids are kept
    if decoded:
        final = _whole_body(decoded)  # deltas joined, as far as they add up
    elif last_of:
        try:
            finals = [_decode_event(last_of[i]) for i in sorted(last_of)]
            own_meta = finals[0].get(api.META_INFO) or {}
            final, longest = _samples_merged(finals)
        except ValueError as exc:
            error = error or f"malformed stream event: {exc}"
    elif last_event is not None:
        try:
            final = _decode_event(last_event)
        except ValueError as exc:
            error = error or f"malformed stream event: {exc}"
    meta = final.get(api.META_INFO) or first_meta or {}
    finish, abort_message = _finish_reason(meta)
    if finish == api.FINISH_ABORT and error is None:
        error = f"request aborted by the server: {abort_message or 'no message'}"
    return RequestRecord(
        index=index,
        status=status,
        error=error,
        finish_reason=finish,
        prompt_tokens=_opt_int(meta, api.PROMPT_TOKENS),
        completion_tokens=int(meta.get(api.COMPLETION_TOKENS) or 0),
        ttft_ms=None if first_token_at is None else (first_token_at - start) * 1000.0,
        e2e_ms=(end - start) * 1000.0,
        chunks=chunks,
        # with two tokens or more; one token has no time per token, read at once or not
        whole_at_once=first_token_at is not None and first_read == last_read
        and (longest or int(meta.get(api.COMPLETION_TOKENS) or 0)) > 1,
        sequence_tokens=longest,
        server_e2e_latency_s=_opt_float(meta, api.E2E_LATENCY),
        spec_verify_ct=_opt_int(meta, api.SPEC_VERIFY_CT),
        spec_accept_length=_opt_float(meta, api.SPEC_ACCEPT_LENGTH),
        spec_accept_rate=_opt_float(meta, api.SPEC_ACCEPT_RATE),
        spec_num_correct_drafts=_opt_int(meta, api.SPEC_NUM_CORRECT_DRAFTS),
        spec_num_proposed_drafts=_opt_int(meta, api.SPEC_NUM_PROPOSED_DRAFTS),
        text=str(final.get(api.RESPONSE_TEXT) or "") if keep_text else "",
        output_ids=_cumulative_ids(final, own_meta or meta) if keep_text else None,
        margins=_margins(meta) if keep_text and payload.get(api.RETURN_LOGPROB) else None,
    )


async def _data_events(resp: aiohttp.ClientResponse, head: bytearray, head_limit: int | None,
                       on_event: Callable[[], None] | None,
                       max_new_tokens: int | None = None,
                       counted: bool = True,
                       streamed: StreamedTokens | None = None) -> AsyncIterator[tuple[int, bytes]]:
    """Each `data:` event's payload of a /generate stream, `[DONE]` included, after the number of
    the network read that completed it (events of one read arrived together, so their arrival
    times differ by parsing alone), with `on_event` called for each (the stall watchdog's sign of
    progress: SSE comments and blank lines, which a proxy may send as keep-alives, are none).
    `head` gathers the body's first `head_limit` bytes (all with None), to show a body that is no
    event stream. An event that states no more completion tokens than the last (a server or proxy
    repeating its last event to keep the stream warm) is no progress either. An event that brings
    tokens after one that stated `max_new_tokens` raises PastMaxNewTokens, ending the stream. With
    `counted` false (a stream of several sequences, `_one_sequence`) counts are not compared: each
    event is progress and no limit is checked. `streamed.count` gets the most completion tokens an
    event stated so far (counted streams only)."""
    buf = bytearray()
    tokens = 0  # the most completion tokens an event stated so far
    async for read, data in _numbered(resp.content.iter_any()):
        buf += data
        if head_limit is None or len(head) < head_limit:
            head += data if head_limit is None else data[:head_limit - len(head)]
        if b"\n" not in data:
            continue
        *lines, buf = buf.split(b"\n")
        for line in lines:
            if not line.startswith(_DATA):
                continue  # blank separators, SSE comments, keep-alives
            event = line[5:].strip()
            count = _token_count(event) if counted else None
            if max_new_tokens is not None and count is not None and count > tokens >= max_new_tokens:
                raise PastMaxNewTokens(count, max_new_tokens, tokens)
            if on_event is not None and (count is None or count > tokens):
                on_event()
            if count is not None and count > tokens:
                tokens = count
                if streamed is not None:
                    streamed.count = count
            yield read, event


def _sequence_index(event: bytes) -> int:
    """The sequence an event of a stream of several belongs to: its `index`, found from its end,
    where SGLang adds it after meta_info (see `_token_count`); decoded where not found there."""
    at = event.rfind(_INDEX_KEY)
    found = _COUNT_VALUE.match(event, at + len(_INDEX_KEY)) if at >= 0 else None
    if found:
        return int(found.group(1))
    try:
        value = _decode_event(event).get(api.RESPONSE_INDEX)
    except ValueError:
        return 0  # a malformed event fails the record when its sequence is decoded
    return value if type(value) is int else 0


#: meta_info counts that add up over a request's sequences: each sample is generated, and
#: verified, on its own
_SUMMED = (api.COMPLETION_TOKENS, api.SPEC_VERIFY_CT, api.SPEC_NUM_CORRECT_DRAFTS, api.SPEC_NUM_PROPOSED_DRAFTS)


def _samples_merged(finals: list[dict]) -> tuple[dict, int]:
    """One request's final body out of each of its sequences' last events (n above 1), and the
    most completion tokens one sequence has. The text and ids are the first sequence's (what a
    losslessness check compares: greedy samples are identical); the counts are summed, so tokens
    per second count every sample and the accept length is SGLang's own over all of them, total
    tokens over total verify steps; an abort of any sequence is the request's."""
    metas = [f.get(api.META_INFO) or {} for f in finals]
    meta = dict(metas[0])
    for key in _SUMMED:
        values = [m[key] for m in metas if m.get(key) is not None]
        if values:
            meta[key] = sum(int(v) for v in values)
    verify = int(meta.get(api.SPEC_VERIFY_CT) or 0)
    if verify:
        meta[api.SPEC_ACCEPT_LENGTH] = int(meta.get(api.COMPLETION_TOKENS) or 0) / verify
    if meta.get(api.SPEC_NUM_PROPOSED_DRAFTS):
        meta[api.SPEC_ACCEPT_RATE] = int(meta.get(api.SPEC_NUM_CORRECT_DRAFTS) or 0) / meta[api.SPEC_NUM_PROPOSED_DRAFTS]
    latencies = [float(m[api.E2E_LATENCY]) for m in metas if m.get(api.E2E_LATENCY) is not None]
    if latencies:
        meta[api.E2E_LATENCY] = max(latencies)  # the request ends with its last sequence
    aborted = [m for m in metas if _finish_reason(m)[0] == api.FINISH_ABORT]
    if aborted:
        meta[api.FINISH_REASON] = aborted[0][api.FINISH_REASON]
    longest = max(int(m.get(api.COMPLETION_TOKENS) or 0) for m in metas)
    return dict(finals[0], **{api.META_INFO: meta}), longest


def _token_count(event: bytes) -> int | None:
    """The completion tokens an event states, found from its end, where SGLang puts meta_info,
    without decoding it (see the module docstring); None where it states none ([DONE], an error).
    JSON escapes a quote inside a string, so the key's quoted form is never part of the text."""
    at = event.rfind(_COUNT_KEY)
    found = _COUNT_VALUE.match(event, at + len(_COUNT_KEY)) if at >= 0 else None
    return int(found.group(1)) if found else None


async def _numbered(reads: AsyncIterator[bytes]) -> AsyncIterator[tuple[int, bytes]]:
    read = 0
    async for data in reads:
        yield read, data
        read += 1


def _is_delta(event: dict, tokens: int) -> bool:
    """Whether a stream's second event with tokens is a delta (SGLang's --incremental-streaming-output):
    its token ids fewer than its completion_tokens. A stream without ids is read as cumulative."""
    ids = event.get(api.RESPONSE_OUTPUT_IDS)
    return isinstance(ids, list) and len(ids) < tokens


def _cumulative_ids(final: dict, meta: dict) -> tuple[int, ...] | None:
    """The final event's token ids when they are the whole output (SGLang's default streaming);
    None when they are only the last delta (incremental streaming) or absent."""
    ids = final.get(api.RESPONSE_OUTPUT_IDS)
    if not isinstance(ids, list) or len(ids) != int(meta.get(api.COMPLETION_TOKENS) or 0):
        return None
    return tuple(int(i) for i in ids)


def _decode_event(event: bytes) -> dict:
    obj = json.loads(event)
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def error_text(body: str) -> str:
    """The message of an SGLang error body ({"message"} or {"error": {"message"}}), else the body."""
    try:
        obj = json.loads(body)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        inner = obj.get("error")
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
        if obj.get("message"):
            return str(obj["message"])
        if obj.get("detail"):
            return str(obj["detail"])
    body = body.strip()
    return body[:_ERROR_BODY_LIMIT] if body else "(empty body)"


async def run_workload_async(
    url: str,
    workload: Workload,
    *,
    timeout_s: float | None = 600.0,
    keep_text: bool = True,
    session: aiohttp.ClientSession | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    stall_timeout: float | None = None,
    on_quiet: OnQuiet | None = None,
    on_progress: OnProgress | None = None,
    top_logprobs: int = 0,
) -> WorkloadResult:
    """Send every prompt of `workload`, at most `workload.concurrency` in flight at once.

    Records come back in prompt order. `on_record` is called as each request finishes (for
    progress lines). The wall time runs from the first send to the last finish, which is the
    denominator of output_tok_s. With `stall_timeout`, the workload is abandoned with
    `WorkloadStalled` as soon as requests are in flight and none has received an event of its
    stream for that long (a frozen server, keep-alives or not), instead of after each request's
    own timeout; `on_quiet` hears of the wait once it has lasted `STALL_QUIET_S`. `on_progress`
    hears how far the workload is `PROGRESS_FIRST_S` after its first send, then each
    `PROGRESS_EVERY_S`, stall timeout or not, and never once it has ended. `top_logprobs` above 0
    asks each request for its output tokens' top logprobs (`RequestRecord.margins`).
    """
    owned = session is None
    if session is None:
        connector = aiohttp.TCPConnector(limit=max(workload.concurrency, 1), force_close=False)
        session = aiohttp.ClientSession(connector=connector)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(workload.prompts)):
        queue.put_nowait(i)
    records: list[RequestRecord | None] = [None] * len(workload.prompts)
    stream = _StreamWatch()

    async def worker() -> None:
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            streamed = StreamedTokens()
            stream.in_flight += 1
            stream.streaming.add(streamed)
            try:
                rec = await generate_one(session, url, _payload(workload, i, top_logprobs), index=i,
                                         timeout_s=timeout_s, keep_text=keep_text,
                                         on_event=stream.heard, streamed=streamed)
            finally:
                stream.in_flight -= 1
                stream.streaming.discard(streamed)  # no await until its record's count is added
            stream.done += 1
            stream.tokens += rec.completion_tokens
            stream.heard()
            records[i] = rec
            if on_record is not None:
                on_record(rec)

    progress: asyncio.Future | None = None
    try:
        start = time.perf_counter()
        stream.heard()
        if on_progress is not None:
            progress = asyncio.ensure_future(stream.report(len(workload.prompts), start, on_progress))
        workers = min(workload.concurrency, len(workload.prompts))
        all_done = asyncio.gather(*(worker() for _ in range(workers)))
        await _watched(all_done, stream, stall_timeout, len(workload.prompts), on_quiet)
        wall = time.perf_counter() - start
    finally:
        if progress is not None:  # first: no line once the workload has ended
            await _cancelled(progress)
        if owned:
            await session.close()
    if progress is not None and not progress.cancelled() and progress.exception() is not None:
        raise progress.exception()  # a callback that failed: its error, not a silent end of the lines
    return WorkloadResult(
        workload=workload.name,
        url=url,
        concurrency=workload.concurrency,
        records=tuple(r for r in records if r is not None),
        wall_s=wall,
    )


async def _watched(work: asyncio.Future, stream: _StreamWatch, stall_timeout: float | None, requests: int,
                   on_quiet: OnQuiet | None = None):
    """`work`'s result, unless `stream` hears no event for `stall_timeout` s first: then `work`
    is cancelled and WorkloadStalled raised (over `requests` requests)."""
    if stall_timeout is None:
        return await work
    watchdog = asyncio.ensure_future(stream.watch(stall_timeout, requests, on_quiet))
    try:
        await asyncio.wait({work, watchdog}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        # cancelled from outside (Ctrl-C): asyncio.wait leaves both running, and the
        # gather's unread CancelledError would print a traceback at exit
        await _cancelled(work, watchdog)
        raise
    if watchdog.done():
        await _cancelled(work)
        watchdog.result()  # raises WorkloadStalled
    watchdog.cancel()
    return await work


async def _cancelled(*futures: asyncio.Future) -> None:
    """Cancel ``futures`` and wait until they are done, their outcomes read."""
    for future in futures:
        future.cancel()
    await asyncio.gather(*futures, return_exceptions=True)


def _run_sync(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine from sync code, also when the calling thread already runs an event loop
    (pytest-asyncio tests): then it runs on a fresh loop in a helper thread."""
    try:
        asyncio.get_running_loop()
        in_loop = True
    except RuntimeError:
        in_loop = False
    if not in_loop:  # outside the except: its errors must not carry "no running event loop"
        return asyncio.run(factory())  # type: ignore[arg-type]
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(factory())  # type: ignore[arg-type]
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    # daemon: a Ctrl-C in the caller must not leave the process waiting on this call's timeout
    thread = threading.Thread(target=target, name="specdec-client", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def run_workload(url: str, workload: Workload, **kwargs: Any) -> WorkloadResult:
    """Blocking `run_workload_async` for pytest tests and fixtures."""
    return _run_sync(lambda: run_workload_async(url, workload, **kwargs))


class GenerateFailed(Exception):
    """A one-off /generate that brought no answer, said as what follows "/generate ": the server's
    refusal (`answered`), or a stream cut short, which a dead server explains better."""

    def __init__(self, message: str, *, answered: bool = True) -> None:
        super().__init__(message)
        self.answered = answered


async def generate_body_async(url: str, payload: dict[str, Any], *, timeout_s: float | None = None,
                              stall_timeout: float | None = None,
                              on_quiet: OnQuiet | None = None) -> dict | list[dict]:
    """One /generate request, streamed so that the stall watchdog sees its progress, returned as
    the body SGLang answers a request without `stream` (the last event: text, output_ids and
    meta_info; ids sent as deltas are joined, their text too). A request of several sequences
    (`n` above 1) is answered, as SGLang answers it, with a list: each sequence's body, in the
    order of its events' `index`.

    Raises WorkloadStalled (as a workload's, 1 request in flight) once nothing arrived for
    `stall_timeout` s (said through `on_quiet` once it has lasted `STALL_QUIET_S`),
    asyncio.TimeoutError past `timeout_s` in all, GenerateFailed for an error answer, a stream
    cut off mid-body or gone past max_new_tokens, and a stream that finished with an abort
    (SGLang answers the unstreamed request with its HTTP error where the abort names a status, a
    prompt its scheduler refuses among them; one aborted without, by /abort_request, is cut
    short), aiohttp.ClientError for the connection's. A server that ignores `stream` and answers one JSON body has that body returned.
    """
    watch = _StreamWatch()
    events: list[dict] = []
    one = _one_sequence(payload)

    async def request() -> dict | list[dict] | None:
        body = dict(payload, stream=True)
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{_base(url)}{api.GENERATE}", json=body,
                                    timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                if resp.status != 200:
                    text = await resp.text(errors="replace")
                    raise GenerateFailed(f"failed: HTTP {resp.status} {resp.reason}: {error_text(text)}"
                                         f"{retry_after_text(resp.status, resp.headers)}")
                raw = bytearray()  # a body that is no event stream, whole
                try:
                    async for _, event in _data_events(resp, raw, None, watch.heard, _max_new_tokens(body), one):
                        if event == _DONE:
                            return None
                        if event.startswith(_ERROR_PREFIX):
                            raise GenerateFailed(f"failed: {error_text(event.decode('utf-8', 'replace'))}")
                        try:
                            events.append(_decode_event(event))
                        except ValueError as exc:
                            raise GenerateFailed(f"failed: malformed stream event: {exc}") from None
                except aiohttp.ClientPayloadError as exc:  # a dead server explains the cut better
                    raise GenerateFailed(f"failed: {cut_off_text(exc)}", answered=False) from None
                except PastMaxNewTokens as exc:
                    raise GenerateFailed(f"failed: {exc}") from None
                if events:
                    raise GenerateFailed("failed: stream ended without 'data: [DONE]' (server closed the "
                                         "connection mid-response)", answered=False)
                try:
                    whole = json.loads(bytes(raw))
                except ValueError:
                    whole = None
                several = not one and isinstance(whole, list) and bool(whole) \
                    and all(isinstance(entry, dict) for entry in whole)  # SGLang's list, one body a sequence
                if not (isinstance(whole, dict) or several):
                    raise GenerateFailed("answered with something that is not JSON: "
                                         f"{error_text(bytes(raw).decode('utf-8', 'replace'))}")
                return whole

    watch.in_flight = 1
    whole = await _watched(asyncio.ensure_future(request()), watch, stall_timeout, 1, on_quiet)
    if whole is None and not events:
        raise GenerateFailed("failed: the stream held no event before 'data: [DONE]'")
    if whole is not None:
        bodies = whole if isinstance(whole, list) else [whole]
    elif one:
        bodies = [_whole_body(events)]
    else:  # the sequences' events come interleaved: each sequence's own, joined apart
        by_index: dict[int, list[dict]] = {}
        for event in events:
            index = event.get(api.RESPONSE_INDEX)
            by_index.setdefault(index if type(index) is int else 0, []).append(event)
        bodies = [_whole_body(by_index[i]) for i in sorted(by_index)]
    for body in bodies:
        meta = body.get(api.META_INFO)
        finish, message = _finish_reason(meta if isinstance(meta, dict) else {})
        if finish == api.FINISH_ABORT:  # unstreamed, SGLang refuses it where the abort names a status
            raise GenerateFailed(f"failed: request aborted by the server: {message or 'no message'}")
    return bodies if isinstance(whole, list) or not one else bodies[0]


def _whole_body(events: list[dict]) -> dict:
    """The last event, holding the whole output also where the server streamed deltas."""
    final = dict(events[-1])
    meta = final.get(api.META_INFO) or {}
    ids = final.get(api.RESPONSE_OUTPUT_IDS)
    if isinstance(ids, list) and _cumulative_ids(final, meta) is None:
        parts = [e.get(api.RESPONSE_OUTPUT_IDS) for e in events]
        if all(isinstance(part, list) for part in parts) \
                and sum(map(len, parts)) == int(meta.get(api.COMPLETION_TOKENS) or 0):
            final[api.RESPONSE_OUTPUT_IDS] = [i for part in parts for i in part]
            final[api.RESPONSE_TEXT] = "".join(str(e.get(api.RESPONSE_TEXT) or "") for e in events)
            rows = [(e.get(api.META_INFO) or {}).get(api.OUTPUT_TOP_LOGPROBS) for e in events]
            if isinstance(rows[-1], list) and all(isinstance(r, list) for r in rows):  # sliced as the ids are
                final[api.META_INFO] = dict(meta, **{api.OUTPUT_TOP_LOGPROBS: [row for r in rows for row in r]})
    return final


def generate_body(url: str, payload: dict[str, Any], **kwargs: Any) -> dict | list[dict]:
    """Blocking `generate_body_async`, for `LiveServer.generate`."""
    return _run_sync(lambda: generate_body_async(url, payload, **kwargs))


# --------------------------------------------------------------------------------------------
# Server information


async def _get(url: str, path: str, *, timeout_s: float, as_json: bool) -> Any:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{_base(url)}{path}", timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            body = await resp.text(errors="replace")
            if resp.status != 200:
                raise ServerQueryError(f"GET {_base(url)}{path}: HTTP {resp.status}: {error_text(body)}",
                                       status=resp.status)
    if not as_json:
        return body
    try:
        return json.loads(body)
    except ValueError:
        raise ServerQueryError(f"GET {_base(url)}{path}: response is not JSON: {body[:200]!r}") from None


def context_length_from(models: Any = None, server_info: Any = None) -> int | None:
    """The context length in a /v1/models or /server_info answer, if it states one.

    /v1/models: `data[0].max_model_len`. /server_info: `context_length` (the resolved server
    arg; None when the model default applies), else the one SGLang's scheduler derives `max_req_input_len`
    from (see context_rule).
    """
    if isinstance(models, dict):
        for card in models.get("data") or []:
            if isinstance(card, dict) and isinstance(card.get(api.MODEL_CARD_MAX_LEN), int):
                return card[api.MODEL_CARD_MAX_LEN]
    if isinstance(server_info, dict):
        value = server_info.get(api.INFO_CONTEXT_LENGTH)
        if isinstance(value, int) and value > 0:
            return value
        max_input = server_info.get(api.INFO_MAX_REQ_INPUT_LEN)
        if isinstance(max_input, int) and max_input > 0:
            return context_rule.context_from_max_req_input_len(max_input)
    return None


async def fetch_context_length_async(url: str, *, timeout_s: float = 10.0,
                                     stall_timeout: float | None = None) -> int:
    """The server's context length from /v1/models, falling back to /server_info and its old
    name /get_server_info. Raises ServerQueryError when none of them states it, CallStalled when
    one is silent for `stall_timeout` (shorter than `timeout_s`): silence is no missing path."""
    wait_s = bounded(timeout_s, stall_timeout)
    tried: list[str] = []
    for path in (api.MODELS, api.SERVER_INFO, api.SERVER_INFO_OLD):
        try:
            body = await _get(url, path, timeout_s=wait_s, as_json=True)
        except asyncio.TimeoutError as exc:
            if wait_s < timeout_s:
                raise CallStalled(path, wait_s) from None
            tried.append(f"{path}: {exc or f'no answer within {timeout_s:g}s'}")
            continue
        except (ServerQueryError, aiohttp.ClientError) as exc:
            tried.append(f"{path}: {exc}")
            continue
        value = context_length_from(body, None) if path == api.MODELS else context_length_from(None, body)
        if value is not None:
            return value
        tried.append(f"{path}: no context length in the answer")
    raise ServerQueryError(f"cannot find the context length of {url}: " + "; ".join(tried))


def fetch_context_length(url: str, *, timeout_s: float = 10.0, stall_timeout: float | None = None) -> int:
    return _run_sync(lambda: fetch_context_length_async(url, timeout_s=timeout_s, stall_timeout=stall_timeout))


async def fetch_server_info_async(url: str, *, timeout_s: float = 10.0) -> dict:
    """/server_info, or /get_server_info on older SGLang releases."""
    try:
        return await _get(url, api.SERVER_INFO, timeout_s=timeout_s, as_json=True)
    except ServerQueryError:
        return await _get(url, api.SERVER_INFO_OLD, timeout_s=timeout_s, as_json=True)


#: Where a server states its vocabulary: the embedded engine does; SGLang's /model_info does not.
VOCAB_SIZE = "vocab_size"


def fetch_vocab_size(url: str, *, timeout_s: float = 10.0, stall_timeout: float | None = None) -> int | None:
    """The vocabulary size in /model_info, or None when the server does not say. CallStalled
    where it is silent for `stall_timeout` (shorter than `timeout_s`), for the caller to say."""
    wait_s = bounded(timeout_s, stall_timeout)
    try:
        info = _run_sync(lambda: _get(url, api.MODEL_INFO, timeout_s=wait_s, as_json=True))
    except asyncio.TimeoutError:
        if wait_s < timeout_s:
            raise CallStalled(api.MODEL_INFO, wait_s) from None
        return None
    except (ServerQueryError, aiohttp.ClientError, OSError):
        return None
    value = info.get(VOCAB_SIZE) if isinstance(info, dict) else None
    return value if isinstance(value, int) and value > 0 else None


def fetch_server_info(url: str, *, timeout_s: float = 10.0) -> dict:
    return _run_sync(lambda: fetch_server_info_async(url, timeout_s=timeout_s))


async def count_tokens_async(url: str, texts: list[str], *, timeout_s: float = 30.0,
                             stall_timeout: float | None = None) -> list[int]:
    """Each text's tokens as the server's tokenizer counts them, special tokens included as
    /generate adds them: one /v1/tokenize request for the list. TokenizeNotServed on a 404, and on
    the 500 of a server without a tokenizer; CallStalled where it is silent for `stall_timeout`
    (shorter than `timeout_s`)."""
    wait_s = bounded(timeout_s, stall_timeout)
    try:
        return await _count_tokens(url, texts, wait_s)
    except asyncio.TimeoutError:
        if wait_s < timeout_s:
            raise CallStalled(api.TOKENIZE, wait_s) from None
        raise


async def _count_tokens(url: str, texts: list[str], timeout_s: float) -> list[int]:
    where = f"POST {_base(url)}{api.TOKENIZE}"
    body = {api.TOKENIZE_PROMPT: texts, api.TOKENIZE_ADD_SPECIAL_TOKENS: True}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{_base(url)}{api.TOKENIZE}", json=body,
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            text = await resp.text(errors="replace")
            if resp.status == 404:
                raise TokenizeNotServed(f"{where}: HTTP 404: {error_text(text)}")
            if resp.status == 500 and _no_tokenizer(error_text(text)):
                raise TokenizeNotServed(f"{where}: HTTP 500: {error_text(text)}", why=NO_TOKENIZER)
            if resp.status != 200:
                raise ServerQueryError(f"{where}: HTTP {resp.status}: {error_text(text)}")
    try:
        counts = json.loads(text).get(api.TOKENIZE_COUNT)
    except (ValueError, AttributeError):
        counts = None
    if not (isinstance(counts, list) and len(counts) == len(texts)
            and all(type(c) is int and c >= 0 for c in counts)):
        raise ServerQueryError(f"{where}: expected {{{api.TOKENIZE_COUNT!r}: [one count per prompt]}} for "
                               f"{len(texts)} prompt(s), got {text[:200]!r}")
    return counts


def _no_tokenizer(message: str) -> bool:
    """Whether a /v1/tokenize error is SGLang's without a tokenizer (--skip-tokenizer-init), which
    is no fault: any other 500 is a server that broke."""
    return message.startswith(api.TOKENIZE_FAILED) and message.rstrip().endswith(api.TOKENIZE_NO_TOKENIZER)


def count_tokens(url: str, texts: list[str], *, timeout_s: float = 30.0,
                 stall_timeout: float | None = None) -> list[int]:
    return _run_sync(lambda: count_tokens_async(url, texts, timeout_s=timeout_s, stall_timeout=stall_timeout))


async def fetch_loads_async(url: str, *, timeout_s: float = 5.0) -> tuple[str, Any]:
    """The live load: /v1/loads' core counts, or /get_load's where a release before /v1/loads
    answers 404; the path that answered and its JSON (see sharing.requests_in_flight)."""
    try:
        return api.LOADS, await _get(url, f"{api.LOADS}?include={api.LOADS_CORE}", timeout_s=timeout_s, as_json=True)
    except ServerQueryError as exc:
        if exc.status != 404:
            raise
    return api.LOADS_OLD, await _get(url, api.LOADS_OLD, timeout_s=timeout_s, as_json=True)


def fetch_loads(url: str, *, timeout_s: float = 5.0) -> tuple[str, Any]:
    return _run_sync(lambda: fetch_loads_async(url, timeout_s=timeout_s))


async def scrape_metrics_async(url: str, *, timeout_s: float = 10.0) -> str:
    """The raw Prometheus text of /metrics (SGLang serves it only with --enable-metrics)."""
    return await _get(url, api.METRICS, timeout_s=timeout_s, as_json=False)


def scrape_metrics(url: str, *, timeout_s: float = 10.0) -> dict[str, list[tuple[dict[str, str], float]]]:
    """/metrics parsed into {name: [(labels, value)]}; see metrics.server_figures_from_metrics."""
    return parse_prometheus_text(_run_sync(lambda: scrape_metrics_async(url, timeout_s=timeout_s)))


__all__ = [
    "CallStalled",
    "NO_TOKENIZE",
    "NO_TOKENIZER",
    "ServerQueryError",
    "StreamedTokens",
    "TokenizeNotServed",
    "GenerateFailed",
    "WorkloadStalled",
    "PastMaxNewTokens",
    "bounded",
    "context_length_from",
    "count_tokens",
    "cut_off_text",
    "count_tokens_async",
    "error_text",
    "fetch_context_length",
    "fetch_context_length_async",
    "fetch_loads",
    "fetch_loads_async",
    "fetch_server_info",
    "fetch_server_info_async",
    "fetch_vocab_size",
    "generate_body",
    "generate_body_async",
    "generate_one",
    "retry_after_text",
    "run_workload",
    "run_workload_async",
    "scrape_metrics",
    "scrape_metrics_async",
]
