"""The scheduler: one thread that admits requests, batches them and drives the decoder.

Model compute never runs on the HTTP event loop. The server hands requests over through a
queue; the scheduler prefills new ones into free KV-cache slots (up to ``--max-batch`` running,
the rest wait), then runs one batched decode step for all running requests, appends the
committed tokens to each, and reports progress back through a callback the server makes
thread-safe. Counters and log lines follow SGLang's scheduler. Before it takes its first request
the thread runs the batch warm (warm.py), which no counter sees.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Callable

import torch

from . import logs, warm
from .decoding import SpeculativeDecoder, TokenLogprobs
from .drafter import BlockDrafter
from .faults import HANG_AFTER_TOKENS, FaultPlan, illegal_instruction
from .metrics import EngineMetrics
from .protocol import ABORT_RUNNING, ABORT_WAITING
from .tokenizer import EOS_ID, IncrementalDecoder


@dataclass(frozen=True)
class Progress:
    """A request's state after a step, as the event loop sees it (immutable, safe to hand over)."""

    num_ids: int
    text: str
    finish_reason: dict | None
    verify_ct: int
    correct_drafts: int
    e2e_latency: float | None
    drafts_histogram: tuple[int, ...] = ()  # verify steps by their correct drafts (index), as SGLang's
    never_scheduled: bool = False  # /abort_request took it from the waiting queue
    timing: Timing | None = None


@dataclass(frozen=True)
class Timing:
    """When a request reached each stage (perf_counter; 0.0 not yet), as SGLang's time stats keep
    them for the meta_info of a server with --enable-metrics: the first token comes of the prefill."""

    queued: float = 0.0
    forward_entry: float = 0.0
    prefill_finished: float = 0.0
    finished: float = 0.0


class Request:
    """One generation request. Written by the scheduler thread only; the server reads
    ``output_ids[:progress.num_ids]`` (the list only grows) and the :class:`Progress` it is sent."""

    def __init__(self, input_ids: list[int], max_new_tokens: int, *, ignore_eos: bool = False,
                 stop: tuple[str, ...] = (), stop_token_ids: frozenset[int] = frozenset(), stream: bool = False,
                 rid: str | None = None, internal: bool = False, abort: dict | None = None,
                 top_logprobs: int | None = None) -> None:
        self.rid = rid or uuid.uuid4().hex
        self.input_ids = input_ids
        self.max_new_tokens = max_new_tokens
        self.ignore_eos = ignore_eos
        # as in SGLang, ignore_eos turns off the request's stop token ids as well as EOS
        self.stop_ids = frozenset() if ignore_eos else stop_token_ids | {EOS_ID}
        self.stop = stop
        self.stream = stream
        self.internal = internal  # warm-up and health checks: not client traffic
        self.abort = abort  # a finish reason to end with on the first token (protocol.scheduled)
        self.output_ids: list[int] = []
        #: return_logprob's top_logprobs_num (None: not asked); then output_logprobs[i] is output_ids[i]'s
        self.top_logprobs = top_logprobs
        self.output_logprobs: list[TokenLogprobs] = []
        self.text = ""
        self.finish_reason: dict | None = None
        self.verify_ct = 0
        self.correct_drafts = 0
        self.drafts_histogram: list[int] = []
        self.aborted = False  # its client left: dropped without an answer
        self.never_scheduled = False  # /abort_request took it from the waiting queue (Scheduler.abort)
        self.created = time.perf_counter()
        # its perf_counter stamps as wall clock: one offset a request, taken as it arrives, as SGLang
        # recalibrates its offset for each new request (a wall-clock step since the start is followed)
        self.wall_offset = time.time() - self.created
        self.dispatched_at = 0.0  # handed to the scheduler (SGLang's api_server_dispatch_finish_time)
        self.queued_at = self.forward_entry_at = self.prefill_finished_at = self.finished_at = 0.0
        self.last_token_at: float | None = None
        self.e2e_latency: float | None = None
        self.on_progress: Callable[[Progress], None] | None = None
        #: frees its rid (inflight.py): called once it finished, before its last answer goes out, and
        #: once the scheduler dropped it; more than once is harmless
        self.on_done: Callable[[Request], None] | None = None
        self.submitted = False
        self._decoder = IncrementalDecoder()

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def append(self, tokens: list[int], logprobs: list[TokenLogprobs] | None = None) -> int:
        """Append committed tokens (and their ``logprobs``, where asked) up to the first finishing
        condition; return how many were taken. The logprobs go in before a reader can see the
        tokens' progress (notify), so each of output_ids[:num_ids] has its own."""
        taken = self._append(tokens)
        if logprobs is not None:
            self.output_logprobs.extend(logprobs[:taken])
        return taken

    def _append(self, tokens: list[int]) -> int:
        """Finishing: ``abort`` at once, ``max_new_tokens`` reached (length), EOS or a stop
        token id unless ``ignore_eos``, or a stop string in the text (which is cut off before it,
        as SGLang does)."""
        tokens = tokens[: self.max_new_tokens - len(self.output_ids)]
        if self.abort is not None:  # SGLang's scheduler keeps the token before it reads the reason
            self.output_ids.extend(tokens[:1])
            self.text = self._decoder.feed(tokens[:1])
            self.finish(self.abort)
            return len(tokens[:1])
        if not self.stop and self.stop_ids.isdisjoint(tokens):
            self.output_ids.extend(tokens)
            self.text = self._decoder.feed(tokens)
        else:
            taken = 0
            for token in tokens:
                taken += 1
                self.output_ids.append(token)
                if token in self.stop_ids:
                    self.finish({"type": "stop", "matched": token})
                    break
                before = len(self.text)
                self.text = self._decoder.feed([token])
                if self._cut_at_stop_string(before):
                    break
            tokens = tokens[:taken]
        if not self.finished and len(self.output_ids) >= self.max_new_tokens:
            self.finish({"type": "length", "length": self.max_new_tokens})
        return len(tokens)

    def _cut_at_stop_string(self, checked_up_to: int) -> bool:
        for s in self.stop:
            at = self.text.find(s, max(0, checked_up_to - len(s) + 1))
            if at >= 0:
                self.text = self.text[:at]
                self.finish({"type": "stop", "matched": s})
                return True
        return False

    def finish(self, reason: dict) -> None:
        if self.finish_reason is None:
            if not isinstance(reason.get("matched"), str):  # a stop-string cut keeps its cut text
                self.text = self._decoder.finish()
            self.finish_reason = reason
            self.finished_at = time.perf_counter()
            self.e2e_latency = self.finished_at - self.created

    def progress(self) -> Progress:
        return Progress(len(self.output_ids), self.text, self.finish_reason, self.verify_ct,
                        self.correct_drafts, self.e2e_latency, tuple(self.drafts_histogram), self.never_scheduled,
                        Timing(self.queued_at, self.forward_entry_at, self.prefill_finished_at, self.finished_at))

    def done(self) -> None:
        if self.on_done is not None:
            self.on_done(self)

    def count_verify(self, drafts: int) -> None:
        """One verify step that accepted ``drafts`` draft tokens (bonus excluded)."""
        self.verify_ct += 1
        self.correct_drafts += drafts  # as SGLang counts them: a finish inside the step cuts no draft
        self.drafts_histogram.extend([0] * (drafts + 1 - len(self.drafts_histogram)))
        self.drafts_histogram[drafts] += 1

    def notify(self) -> None:
        if self.finished:
            self.done()  # its rid is free before its client hears the end, as SGLang frees it
        if self.on_progress is not None and (self.stream or self.finished):
            self.on_progress(self.progress())


@dataclass(frozen=True)
class AbortCommand:
    """/abort_request's order, queued behind the requests submitted before it, as SGLang's
    tokenizer manager sends it to its scheduler: the requests whose rid starts with ``rid``,
    or every one with ``abort_all``."""

    rid: str
    abort_all: bool


class Scheduler:
    def __init__(self, decoder: SpeculativeDecoder, drafter: BlockDrafter | None, metrics: EngineMetrics,
                 context_length: int, decode_log_interval: int, faults: FaultPlan, cpu_threads: int = 1,
                 warm_sizes: tuple[int, ...] = ()) -> None:
        self.decoder = decoder
        self.drafter = drafter
        self.metrics = metrics
        self.context_length = context_length
        self.decode_log_interval = max(1, decode_log_interval)
        self.faults = faults
        self.cpu_threads = cpu_threads
        self.warm_sizes = warm_sizes  # batch sizes stepped once before the first request (warm.py)
        self.max_batch = decoder.max_batch
        self.max_total_num_tokens = decoder.max_batch * context_length
        self.startup_time: dict | None = None  # set once built (runtime.startup_time)
        self.warm_seconds = 0.0  # set when the warm ends: the start-up figures include it
        self.inbox: queue.SimpleQueue[Request | AbortCommand] = queue.SimpleQueue()
        self.waiting: collections.deque[Request] = collections.deque()
        self.running: list[Request] = []
        self.client_requests_admitted = 0
        self._hangs_after: Request | None = None  # --fault-hang-after: the request to freeze on
        self.frozen = False
        self.last_output_at = 0.0  # perf_counter of the last step or prefill that produced tokens
        self._lock = threading.Lock()  # guards the counters read by the HTTP thread
        self._pending = 0  # client requests submitted and not yet finished (health checks excluded)
        self._live = 0  # every request submitted and not yet finished, the engine's own too (/v1/loads)
        self.forward_ct_decode = 0
        self.last_gen_throughput = 0.0
        self._interval_start = time.perf_counter()
        self._last_prefill_at = self._interval_start  # the prefill log's input throughput runs from here
        self._interval_tokens = 0
        self._interval_accept_tokens = 0
        self._interval_forward_ct = 0
        self.spec_total_accept_tokens = 0
        self.spec_total_forward_ct = 0
        self._thread = threading.Thread(target=self._run, name="scheduler", daemon=True)

    # ------------------------------------------------------------------ called from the HTTP thread

    def start(self) -> None:
        self._thread.start()

    def submit(self, req: Request) -> None:
        req.submitted = True
        req.dispatched_at = time.perf_counter()
        with self._lock:
            self._live += 1
            if not req.internal:
                self._pending += 1
        self.inbox.put(req)

    def abort(self, rid: str, abort_all: bool = False) -> None:
        """SGLang's /abort_request: queued requests whose rid starts with ``rid`` (every one with
        ``abort_all``) finish at once with ABORT_WAITING, running ones with ABORT_RUNNING after one
        more token. As SGLang's tokenizer manager, nothing is sent for an empty rid, nor for a
        rid no request in flight has (the engine's own warm-up and health checks are never aborted)."""
        if not abort_all and not rid:
            logs.SERVER.warning("Ignore abort_request with empty rid and abort_all=False")
            return
        self.inbox.put(AbortCommand(rid, abort_all))

    @property
    def busy(self) -> bool:
        return self._pending > 0

    def flush(self) -> bool:
        """Reset the decode-log interval's counters and the lifetime speculative ones, only when
        no client request is queued or running (SGLang's /flush_cache rule; the engine's own health
        checks do not count, so a health poll cannot make a flush fail). Returns whether it did.

        SGLang's flush resets the same set (its metrics reporter's reset_metrics): the step count
        that times the decode log and the interval's token and acceptance counts, so the first
        decode-log line after a flush comes a full interval later and carries only what ran after
        it. The interval's start time is not reset there either."""
        with self._lock:
            if self._pending:
                return False
            self.forward_ct_decode = 0
            self._interval_tokens = 0
            self._interval_accept_tokens = 0
            self._interval_forward_ct = 0
            self.spec_total_accept_tokens = 0
            self.spec_total_forward_ct = 0
            return True

    def internal_state(self) -> dict:
        """The scheduler's live part of /server_info's internal state (the server adds the
        resolved arguments and startup figures before it): ``num_running_reqs`` and
        ``num_queue_reqs`` are the engine's own, which its tests poll; SGLang's /metrics carries
        them. ``avg_spec_accept_length`` covers the decode-log
        intervals completed so far, as SGLang's does: the steps since the last decode-log line are
        not in it yet, and it is absent before the first line (or the first after a flush)."""
        with self._lock:
            state = {"last_gen_throughput": self.last_gen_throughput,
                     "num_running_reqs": len(self.running), "num_queue_reqs": len(self.waiting)}
            if self.decoder.speculative and self.spec_total_forward_ct:
                state["avg_spec_accept_length"] = self.spec_total_accept_tokens / self.spec_total_forward_ct
        cache = self.decoder.k_cache
        state["memory_usage"] = {
            "kvcache": round(2 * cache.numel() * cache.element_size() / 2**30, 4),
            "token_capacity": self.max_total_num_tokens,
        }
        return state

    def load(self) -> tuple[int, int]:
        """/v1/loads' running and waiting requests of the one DP rank, live: SGLang's scheduler
        publishes them on every prefill and on going idle. Every request counts, its health checks
        too (SGLang's reach its scheduler as requests); one in the inbox or in its prefill waits."""
        with self._lock:
            live = self._live
        running = min(len(self.running), live)
        return running, live - running

    # ------------------------------------------------------------------ the scheduler thread

    def _run(self) -> None:
        # OpenMP's thread count is per thread: repeat the process setting in this one.
        torch.set_num_threads(self.cpu_threads)
        try:
            with torch.inference_mode():
                if self.warm_sizes:
                    self._crash_if_budget_faulty()  # the warm's step is the first verify
                    self.warm_seconds = warm.warm_batch_sizes(self.decoder, self.drafter, self.warm_sizes)
                while True:
                    idle = not self.running and not self.waiting
                    if idle:
                        self._publish_idle()
                    self._take_inbox(block=idle)
                    self._admit()
                    if self.running:
                        self._decode()
        except BaseException as exc:  # the process dies with the scheduler, as SGLang's does
            logs.scheduler_crash(exc)

    def _publish_idle(self) -> None:
        """Zero the load gauges on going idle, as SGLang's idle housekeeping does: they are set
        every decode-log interval, so the last one before idling would otherwise stand."""
        m = self.metrics
        # the running count last: a reader that sees it at 0 sees the others zeroed
        for gauge in (m.gen_throughput, m.token_usage, m.num_used_tokens, m.num_queue_reqs, m.num_running_reqs):
            gauge.set(0)

    def _take_inbox(self, block: bool) -> None:
        if block:
            self._take(self.inbox.get())
        while True:
            try:
                self._take(self.inbox.get_nowait())
            except queue.Empty:
                return

    def _take(self, item: Request | AbortCommand) -> None:
        if isinstance(item, AbortCommand):
            self._abort(item)
        else:
            item.queued_at = time.perf_counter()
            self.waiting.append(item)

    def _abort(self, cmd: AbortCommand) -> None:
        """Carry out an /abort_request (see abort)."""
        live = [r for r in (*self.waiting, *self.running)
                if not (r.internal or r.finished or r.aborted or r.abort is not None)]  # one order each, as SGLang
        if not cmd.abort_all and all(r.rid != cmd.rid for r in live):
            return  # SGLang's tokenizer manager sends no abort for a rid it does not know
        self.metrics.num_aborted_requests.inc()  # once an order, as SGLang's tokenizer manager counts it
        for req in live:
            if not (cmd.abort_all or req.rid.startswith(cmd.rid)):
                continue
            if req in self.running:
                req.abort = dict(ABORT_RUNNING)  # the next step keeps one token, then finishes with it
                continue
            self.waiting.remove(req)
            req.output_ids.clear()
            req.finish(dict(ABORT_WAITING))
            req.never_scheduled = True
            self._done(req)
            req.notify()

    def _done(self, req: Request) -> None:
        req.done()  # one dropped without an answer (its client left) frees its rid here
        with self._lock:
            self._live -= 1
            if not req.internal:
                self._pending -= 1
        if not req.internal:
            m = self.metrics
            m.finished(stream=req.stream, prompt_tokens=len(req.input_ids), completion_tokens=len(req.output_ids),
                       verify_ct=req.verify_ct, e2e_latency=None if req.aborted else req.e2e_latency)
            if req.aborted:
                m.num_aborted_requests.inc()

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.max_batch:
            req = self.waiting.popleft()
            if req.aborted:
                self._done(req)
                continue
            req.forward_entry_at = time.perf_counter()
            if not req.internal:
                self.client_requests_admitted += 1
                crash_after = self.faults.crash_after
                if crash_after is not None and self.client_requests_admitted > crash_after:
                    raise illegal_instruction(f"--fault-crash-after {crash_after}: request "
                                              f"{self.client_requests_admitted} crashes the verify kernel")
                hang_after = self.faults.hang_after
                if hang_after is not None and self.client_requests_admitted == hang_after + 1:
                    self._hangs_after = req
                if self.faults.zero_tokens:
                    req.finish({"type": "stop", "matched": None})
                    self._done(req)
                    req.notify()
                    continue
            if req.abort is not None:  # as SGLang's scheduler logs the refusal it aborts with
                logs.SCHEDULER.error(f"{req.abort['message']}, self.rid={req.rid!r}")
            if req.max_new_tokens == 0:
                # SGLang runs its prefill and stamps it (the first token's time) before the length
                # cap drops the token; the engine's would show nothing, so its end is now
                req.prefill_finished_at = time.perf_counter()
                req.finish({"type": "length", "length": 0})
                self._done(req)
                req.notify()
                continue
            slot = len(self.running)
            key = self.drafter.stream_key(req.input_ids) if self.drafter is not None else 0
            first = self.decoder.prefill(slot, req.input_ids, key, req.top_logprobs)
            now = time.perf_counter()
            self.last_output_at = now
            req.last_token_at = req.prefill_finished_at = now
            first_logprobs = self.decoder.prefill_logprobs
            req.append([first], None if first_logprobs is None else [first_logprobs])
            if not req.internal:
                self.metrics.time_to_first_token[req.stream].observe(now - req.created)
            self._interval_tokens += 1
            gap, self._last_prefill_at = now - self._last_prefill_at, now
            logs.SCHEDULER.info(
                f"Prefill batch, #new-seq: 1, #new-token: {len(req.input_ids)}, #cached-token: 0, "
                f"token usage: {self._token_usage(len(self.running) + 1):.2f}, "
                f"#running-req: {len(self.running)}, #queue-req: {len(self.waiting)}, "
                f"#pending-token: {sum(len(r.input_ids) for r in self.waiting)}, cuda graph: False, "
                f"input throughput (token/s): {len(req.input_ids) / gap if gap > 0 else 0.0:.2f}")
            self.running.append(req)
            if req.finished:
                self._remove_finished()
            req.notify()

    def _token_usage(self, n: int) -> float:
        return sum(self.decoder.lens[:n]) / self.max_total_num_tokens

    def _decode(self) -> None:
        n = len(self.running)
        dec = self.decoder
        self._crash_if_budget_faulty()
        started = time.perf_counter()
        out = dec.step(n)
        now = time.perf_counter()
        if self.faults.slow_factor > 1:
            time.sleep((self.faults.slow_factor - 1) * (now - started))
            now = time.perf_counter()
        self.last_output_at = now
        emitted = 0
        for i, (req, tokens, drafts) in enumerate(zip(self.running, out.tokens, out.accepted_drafts)):
            taken = req.append(tokens, out.logprobs[i] if out.logprobs else None)
            emitted += taken
            if dec.speculative:
                req.count_verify(drafts)
            if not req.internal and taken:
                self.metrics.inter_token_latency.observe((now - req.last_token_at) / taken)
            req.last_token_at = now
        accepted = sum(out.accepted_drafts)
        with self._lock:
            self.forward_ct_decode += 1
            self._interval_tokens += emitted
            if dec.speculative:
                self._interval_accept_tokens += accepted + n
                self._interval_forward_ct += n
        if self.forward_ct_decode % self.decode_log_interval == 0:
            self._log_decode_batch(n)
        stepped = list(self.running)
        # Finished requests leave the books before their clients hear of it, so a client that
        # got its answer finds the server idle (/flush_cache relies on that).
        self._remove_finished()
        for req in stepped:
            req.notify()
        self._freeze_if_due()

    def _crash_if_budget_faulty(self) -> None:
        """--fault-crash-budgets: a verify with a listed budget crashes the kernel."""
        dec = self.decoder
        if dec.speculative and dec.budget in self.faults.crash_budgets:
            raise illegal_instruction(f"--fault-crash-budgets: verify with budget {dec.budget} "
                                      f"(T={dec.tree_nodes}) crashes the kernel")

    def _freeze_if_due(self) -> None:
        """--fault-hang-after: once the request past the limit got a few tokens, never return."""
        req = self._hangs_after
        if req is None or (len(req.output_ids) < HANG_AFTER_TOKENS and not req.finished):
            return
        logs.SCHEDULER.warning(f"Fault injection: --fault-hang-after {self.faults.hang_after}: "
                               f"the scheduler freezes after {len(req.output_ids)} tokens of "
                               f"request {self.client_requests_admitted}")
        self.frozen = True
        threading.Event().wait()  # like a kernel that never returns: the thread stays, stuck

    def _remove_finished(self) -> None:
        """Drop finished and aborted requests, moving the last running one into each freed slot."""
        for i in range(len(self.running) - 1, -1, -1):
            req = self.running[i]
            if not (req.finished or req.aborted):
                continue
            last = len(self.running) - 1
            if i != last:
                self.decoder.move(last, i)
                self.running[i] = self.running[last]
            self.running.pop()
            self._done(req)

    def _log_decode_batch(self, n: int) -> None:
        now = time.perf_counter()
        dec = self.decoder
        with self._lock:
            elapsed = now - self._interval_start
            self.last_gen_throughput = self._interval_tokens / elapsed if elapsed > 0 else 0.0
            accept_tokens, forward_ct = self._interval_accept_tokens, self._interval_forward_ct
            # SGLang folds an interval into the lifetime totals when it logs it, not every step
            self.spec_total_accept_tokens += accept_tokens
            self.spec_total_forward_ct += forward_ct
            self._interval_start = now
            self._interval_tokens = self._interval_accept_tokens = self._interval_forward_ct = 0
        used = sum(dec.lens[:n])
        usage = used / self.max_total_num_tokens
        msg = f"Decode batch, #running-req: {n}, #token: {used}, token usage: {usage:.2f}, "
        m = self.metrics
        if dec.speculative and forward_ct:
            accept_len = accept_tokens / forward_ct
            accept_rate = (accept_tokens - forward_ct) / (forward_ct * dec.budget)
            msg += f"accept len: {accept_len:.2f}, accept rate: {accept_rate:.2f}, "
            m.spec_accept_length.set(accept_len)
            m.spec_accept_rate.set(accept_rate)
        msg += (f"cuda graph: False, gen throughput (token/s): {self.last_gen_throughput:.2f}, "
                f"#queue-req: {len(self.waiting)}")
        logs.SCHEDULER.info(msg)
        if dec.method == "ddtree" and forward_ct:
            drafts = (accept_tokens - forward_ct) / forward_ct
            # under greedy acceptance the accepted path's depth is its number of draft nodes
            logs.SCHEDULER.info(f"DDTree verify: avg_accepted_drafts={drafts:.2f} "
                                f"avg_commit_len={drafts + 1:.2f} avg_accepted_depth={drafts:.2f}")
        m.num_running_reqs.set(n)
        m.num_queue_reqs.set(len(self.waiting))
        m.num_used_tokens.set(used)
        m.token_usage.set(usage)
        m.gen_throughput.set(self.last_gen_throughput)
