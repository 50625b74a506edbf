"""`LiveServer`: what a test gets from `specdec_server`, and the guards around every workload.

A workload run is bracketed by liveness checks, and a failed request is followed by a death
diagnosis, so a server that dies mid-run fails the test with the cause from its own log rather
than with a connection error or, worse, a throughput of zero. Before it is measured, a workload
is warmed up (warmup.py): untimed requests, then a cache flush, guarded the same way.
"""

from __future__ import annotations

import asyncio
import warnings
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Mapping

import aiohttp
import pytest

from . import client, metrics, workloads
from .calibration import CpuWaitMeter
from .config import WorkloadSpec
from .metrics import Measurement, MeasurementError, WorkloadResult
from .servers.diagnosis import ServerError, tail
from .servers.spec import ServerSpec
from .sharing import Shared, SharingCheck, verdict
from .warmup import CacheFlush, FlushStalled, warmup_count, warmup_workload
from .workloads import Workload

# one logging interval is one sample of a workload's steps, too few to call a disagreement
CROSS_CHECK_MIN_INTERVALS = 2


def fail(message: str) -> None:
    """Fail the current test with our message only: the traceback would be our internals, and
    an exception being handled (whose text the message already holds) would print it twice."""
    raise pytest.fail.Exception(message, pytrace=False) from None


# what a server found failed after its test did, in a word
_AFTER_TEST = {"unresponsive": "froze", "hang": "hangs", "died": "died"}


def after_test_warning(error: ServerError) -> str:
    """The warning for a server found dead or frozen once its test had finished."""
    what = _AFTER_TEST.get(error.reason, error.reason)
    log = f" (log: {error.log_path})" if error.log_path is not None else ""
    return (f"pytest-specdec: server {error.spec_id} {what} after its test finished: {error.cause}; "
            f"it was stopped and counts as crashed{log}. The test's verdict stands: it measured "
            f"while the server answered")


@dataclass
class LiveServer:
    """A ready server for one configuration: `url`, `spec`, `log_path`, `generate()`, `run()`."""

    spec: ServerSpec
    url: str
    log_path: Path | None
    check: Callable[..., None]  # raises ServerError when the server is dead or unresponsive
    min_accept_length: float | None = None  # None: the drafts must beat a random draft's
    root: Path | None = None  # relative workload files resolve here
    token_counter: Callable[[str], int] | None = workloads.embedded_token_count
    owned: bool = True
    workloads: Mapping[str, Workload] = field(default_factory=dict)  # configured, read at start
    workload_specs: Mapping[str, WorkloadSpec] = field(default_factory=dict)  # configured, by name
    stall_timeout: float | None = None  # seconds a workload may go without any token
    stall_setting: str = "--specdec-stall-timeout"  # where the user set it: the advice names it
    probe_stall: Callable[[str], ServerError] | None = None  # the server's own stall diagnosis
    report_failure: Callable[[ServerError], None] | None = None  # stops it, marks it failed
    failure: ServerError | None = field(default=None, repr=False)
    pids: Callable[[], list[int]] | None = None  # the server's processes, for calibration.py
    # a progress line past capture: a silent workload's wait, and the teardown check's (check then
    # takes announce=)
    announce: Callable[[str], None] | None = None
    placement: str = ""  # `GPUs 4,5 (NVIDIA H200)`: results.json says where each configuration ran
    top_logprobs: int = 0  # asked of each request by a losslessness reference (RequestRecord.margins)
    _vocab_size: int | None = field(default=None, repr=False)
    last_result: WorkloadResult | None = field(default=None, repr=False)
    last_server_figures: metrics.ServerFigures | None = field(default=None, repr=False)
    disagreements: list[str] = field(default_factory=list, repr=False)
    sharing: SharingCheck | None = None  # whether another client used the server mid-workload
    #: the last workload's: the server generated more than it received, or ran another client's
    #: requests as it started or ended (sharing.py), else None
    last_shared: Shared | None = field(default=None, repr=False)
    #: run-wide untimed requests before each workload (warmup.py): a workload's own key wins; None:
    #: one round at its concurrency
    warmup_requests: int | None = None
    cache_flush: CacheFlush = field(default_factory=CacheFlush)  # the run's (RunState.cache_flush)
    #: the run's URLs whose /model_info went unanswered (RunState.vocab_said): a LiveServer is made
    #: per test, so its own memory said a silent server's in every test
    vocab_said: set[str] = field(default_factory=set)

    @property
    def id(self) -> str:
        return self.spec.id

    def check_alive(self) -> None:
        """Fail the test at once, with the server's own last words, if it is gone. A server found
        dead or unresponsive is reported as failed (stopped, its later tests erroring at once), so
        the fixture's teardown does not probe it a second time."""
        exc = self._failed_check()
        if exc is not None:
            fail(str(exc))

    def check_after_test(self) -> None:
        """After the test: a server that died or froze since its last check is stopped and counted
        as crashed, as in a test, and said in a warning. The test's verdict stands: `run()` checks
        liveness after each workload, so what the test measured, it measured on a server that
        answered; the freeze came after, and its configuration's later tests fail on it. A check
        that waits (a frozen server is only found when /health times out) says so as it starts."""
        exc = self._failed_check(**({"announce": self.announce} if self.announce is not None else {}))
        if exc is not None:
            warnings.warn(after_test_warning(exc), stacklevel=2)

    def _failed_check(self, **options) -> ServerError | None:
        """The check's error, once recorded and reported as this server's failure; None if it passed."""
        try:
            self.check(**options)
        except ServerError as exc:
            self.failure = exc
            if self.report_failure is not None:
                self.report_failure(exc)
            return exc
        return None

    def log_tail(self, lines: int = 20) -> str:
        return tail(self.log_path, lines) if self.log_path else ""

    def generate(self, text: str, timeout: float | None = None, **sampling_params: Any) -> dict | list[dict]:
        """One blocking `/generate` call; returns SGLang's response body (text, output_ids,
        meta_info), as it answers a request without `stream`: with `n` above 1, a list of such
        bodies, one a sample in index order, each with its own completion tokens.

        The request is streamed so that the stall watchdog bounds it as it bounds a workload: a
        frozen server fails it after the stall timeout with a workload's stall message, and a
        long generation that keeps receiving tokens has no cap. `timeout` caps it in all where
        given (else 120 s where the server has no stall timeout).
        """
        if timeout is None and self.stall_timeout is None:
            timeout = 120.0  # nothing else would bound a silent server
        payload = {"text": text, "sampling_params": sampling_params}
        try:
            return client.generate_body(self.url, payload, timeout_s=timeout, stall_timeout=self.stall_timeout,
                                        on_quiet=self._say_silence())
        except client.WorkloadStalled as stall:
            self._stalled(f"{stall}; raise {self.stall_setting} if the server is just slow")
        except client.GenerateFailed as exc:
            if not exc.answered:  # a stream cut short: a dead server says why better
                self.check_alive()
            fail(f"server {self.id}: /generate {exc}")
        except asyncio.TimeoutError:
            self.check_alive()
            fail(f"server {self.id}: /generate failed: timed out after {timeout:g} s")
        except (aiohttp.ClientError, OSError) as exc:
            self.check_alive()
            fail(f"server {self.id}: /generate failed: {exc or type(exc).__name__}")
        raise AssertionError("unreachable: each branch above raises")

    def workload(self, spec: WorkloadSpec | Workload) -> Workload:
        """Resolve a configured workload, checked against this server's context length."""
        if isinstance(spec, Workload):
            workload = spec
            truncate = False
        elif not isinstance(spec, WorkloadSpec):
            fail(f"server {self.id}: run() takes a workload: the specdec_workload fixture's value, or a "
                 f"pytest_specdec.workloads.Workload (load_workload('chat') builds one), not the "
                 f"{type(spec).__name__} {spec!r}")
        else:
            self._refuse_changed(spec)
            workload = self.workloads.get(spec.name) or workloads.configured_workload(spec, self.root)
            truncate = spec.truncate
        if self.token_counter is None:
            return workload
        try:
            context = client.fetch_context_length(self.url, stall_timeout=self.stall_timeout)
        except client.CallStalled as stall:
            self._stalled(f"workload {workload.name!r}, reading the server's context length: {stall}; "
                          f"raise {self.stall_setting} if the server is just slow")
        except Exception as exc:  # the server may not publish it; liveness decides what that means
            self.check_alive()
            fail(f"server {self.id}: could not read its context length: {exc}")
        within = getattr(self.token_counter, "within", None)  # a server's count: bound by the stall timeout
        counter = within(self.stall_timeout) if within is not None else self.token_counter
        try:
            return workloads.fit_to_context(workload, context, counter, truncate=truncate)
        except client.CallStalled as stall:
            self._stalled(f"workload {workload.name!r}, counting its prompt tokens: {stall}; "
                          f"raise {self.stall_setting} if the server is just slow")
        except workloads.ContextLengthError as exc:
            source = getattr(self.token_counter, "source", None)  # a server's count says whose it is
            fail(f"server {self.id}: {exc}" + (f" (prompt tokens {source})" if source else ""))
        except client.TokenizeNotServed as exc:
            # a server that cannot count for us runs the workload as it stands, as before the guard
            warnings.warn(f"server {self.id} {exc.why}, so workload "
                          f"{workload.name!r} was not checked against its context length"
                          + (" and its truncate = true was not applied" if truncate else "")
                          + ": a prompt too long fails its requests", stacklevel=2)
            return workload
        except (client.ServerQueryError, aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            self.check_alive()
            fail(f"server {self.id}: could not count its prompt tokens: {exc or type(exc).__name__}")

    def _refuse_changed(self, spec: WorkloadSpec) -> None:
        """A configured workload changed in the test (`dataclasses.replace`) ran the configured
        one's prompts, read by name, and its figures, journal and baseline would carry the name
        of a workload they did not measure."""
        configured = self.workload_specs.get(spec.name)
        if configured is None or spec == configured:
            return
        changed = ", ".join(f"{f.name}={getattr(spec, f.name)!r} (configured {getattr(configured, f.name)!r})"
                            for f in fields(spec) if getattr(spec, f.name) != getattr(configured, f.name))
        fail(f"server {self.id}: workload {spec.name!r} is not its [[tool.specdec.workloads]] entry: "
             f"{changed}; run() takes specdec_workload as configured, since its name keys its figures, "
             f"journal and baseline: give the other workload an entry of its own, or build a Workload "
             f"(pytest_specdec.workloads.load_workload) with a name of its own")

    def run(self, spec: WorkloadSpec | Workload) -> Measurement:
        """Run a workload and return its guarded measurement, or fail the test with a diagnosis.

        Liveness was checked when the fixture handed the server out; it is checked again after
        the workload (and after any failed request), where a death would otherwise hide.
        """
        workload = self.workload(spec)
        own = spec.warmup_requests if isinstance(spec, WorkloadSpec) else None
        warmed = warmup_count(workload, self.warmup_requests if own is None else own)
        # before the log offset and the sharing check's first read: neither may count the warm-up
        flushed = self._warm_up(workload, warmed)
        log_offset = self.log_path.stat().st_size if self.log_path and self.log_path.exists() else 0
        vocab_size = self.vocab_size() if self.spec.is_speculative else None
        self.last_shared = None
        # read last before the workload and first after it: nothing of ours generates in between;
        # the load first, so a request of another client that ends while it waits is not counted
        check = self.sharing
        busy_before = check.in_flight(self.url, self.stall_timeout) if check is not None else None
        generated = check.read(self.url, self.stall_timeout) if check is not None else None
        meter = CpuWaitMeter(self.pids) if self.pids is not None else None
        if meter is not None:
            meter.start()
        try:
            # a request that keeps streaming may take as long as it takes; the stall watchdog
            # bounds a silent one (the client's per-request cap only where there is none)
            timeout = {} if self.stall_timeout is None else {"timeout_s": None}
            result = client.run_workload(self.url, workload, stall_timeout=self.stall_timeout,
                                         on_quiet=self._say_silence(), on_progress=self._say_progress(workload),
                                         top_logprobs=self.top_logprobs, **timeout)
        except client.WorkloadStalled as stall:
            # the advice before the probe: the table keeps a failure's end, which says why
            self._stalled(f"{stall}; raise {self.stall_setting} if the server is just slow")
        calibration = meter.stop(result.wall_s) if meter is not None else None
        if check is not None and not result.errors:
            # the load first: the counter then counts a request of another client that ends while it waits
            busy_after = check.in_flight(self.url, self.stall_timeout)
            after = check.read(self.url, self.stall_timeout) if generated is not None else None
            self.last_shared = verdict(generated, after, result.completion_tokens, (busy_before, busy_after))
        self.last_result = result
        if result.errors:
            # A request failed: a dead server explains it better than the HTTP error does.
            self.check_alive()
        try:
            measurement = metrics.measure(
                result, method=self.spec.method, min_accept_length=self.min_accept_length,
                vocab_size=vocab_size, log_tail=self.log_tail if self.log_path else None)
        except MeasurementError as exc:
            self.check_alive()
            fail(f"server {self.id}: {exc}")  # the diagnosis names the workload itself
        if calibration is not None:
            measurement = replace(measurement, calibration=calibration)
        measurement = replace(measurement, warmup_requests=warmed, cache_flushed=flushed)
        self.check_alive()
        self._cross_check(measurement, log_offset)
        self._warn_whole_at_once(measurement)
        return measurement

    def _warm_up(self, workload: Workload, count: int) -> bool | None:
        """Send `count` untimed requests of `workload` (warmup.py), then flush the server's cache;
        whether it flushed (None: no warm-up). A failure fails the test as the workload's would,
        saying it came during the warm-up; nothing of it is kept."""
        if count == 0:
            return None
        requests = "request" if count == 1 else "requests"
        during = f"workload {workload.name!r}, during its warm-up ({count} untimed {requests} before it is measured)"
        if self.announce is not None:
            self.announce(f"server {self.id}: workload {workload.name!r}: warming up, {count} untimed {requests} "
                          f"at concurrency {min(workload.concurrency, count)} before it is measured")
        try:
            # progress lines too: a large warmup_requests runs for minutes on a GPU; its own client
            # run, so none of its counts reach the measured run's lines or figures
            timeout = {} if self.stall_timeout is None else {"timeout_s": None}
            result = client.run_workload(self.url, warmup_workload(workload, count), keep_text=False,
                                         stall_timeout=self.stall_timeout, on_quiet=self._say_silence(),
                                         on_progress=self._say_progress(workload, warm_up=True),
                                         top_logprobs=self.top_logprobs, **timeout)
        except client.WorkloadStalled as stall:
            self._stalled(f"{during}: {stall}; raise {self.stall_setting} if the server is just slow")
        if result.errors:
            exc = self._failed_check()  # a dead server explains a failed request best
            if exc is not None:
                fail(f"{during}: {exc}")
        try:
            metrics.check_no_errors(result, self.log_tail if self.log_path else None)
            metrics.check_tokens(result, self.log_tail if self.log_path else None)
        except MeasurementError as exc:
            self.check_alive()
            fail(f"server {self.id}: {during}: {str(exc).removeprefix(f'workload {workload.name!r}: ')}")
        try:
            return self.cache_flush.flush(self.url, self.stall_timeout)
        except FlushStalled as stall:
            self._stalled(f"{during}: {stall}; raise {self.stall_setting} if the server is just slow")
        raise AssertionError("unreachable: a stalled flush fails the test")

    def _warn_whole_at_once(self, measurement: Measurement) -> None:
        """Say which requests' outputs arrived whole at once: their TTFT is their whole
        generation and they have no TPOT, so the figures are not what they seem."""
        bursts = measurement.whole_at_once
        if not bursts:
            return
        tpot = ("TPOT is measured over the others" if measurement.tpot_ms is not None
                else "so the workload has no TPOT")
        warnings.warn(f"server {self.id}: workload {measurement.workload!r}: {bursts} of "
                      f"{measurement.num_requests} requests received their whole output in the network "
                      f"read that brought their first token, so their TTFT spans the whole generation and "
                      f"{tpot}: the client or the server was starved of CPU (a loaded machine), or the "
                      f"server sends its output in large steps (SGLang's --stream-interval)", stacklevel=2)

    def _say_silence(self) -> client.OnQuiet | None:
        """The stall watchdog's progress line: a silent workload says how much longer it waits."""
        if self.announce is None or self.stall_timeout is None:
            return None
        announce = self.announce

        def say(silent: float, left: float, in_flight: int) -> None:
            requests = "request" if in_flight == 1 else "requests"
            announce(f"server {self.id}: no token for {silent:.0f}s while {in_flight} {requests} in flight; "
                     f"waiting up to {left:.0f}s more before counting it as stalled (bound: the stall "
                     f"timeout, {self.stall_setting})")

        return say

    def _say_progress(self, workload: Workload, *, warm_up: bool = False) -> client.OnProgress | None:
        """A workload's progress line, its warm-up's (`warm_up`) or its measured requests', through
        the warm-up line's printer: the last line on screen said "warming up" for as long as either
        ran (minutes on a GPU, for the measured requests or a large `warmup_requests`)."""
        if self.announce is None:
            return None
        announce = self.announce
        doing, requests = ("warming up", "untimed requests") if warm_up else ("measuring", "requests")

        def say(done: int, total: int, tokens: int, elapsed: float) -> None:
            # "so far": the tokens of the requests still streaming count too, not only the done ones'
            announce(f"server {self.id}: workload {workload.name!r}: {doing}, {done} of {total} {requests} done, "
                     f"{tokens:,} token{'' if tokens == 1 else 's'} so far in {elapsed:.0f} s")

        return say

    def _stalled(self, stall: str) -> None:
        """A workload stopped receiving tokens: probe once, stop the server and mark its
        configuration failed (its later tests error at once), then fail this test."""
        if self.probe_stall is not None:
            error = self.probe_stall(stall)
        else:
            error = ServerError(self.id, "stalled", stall, log_path=self.log_path,
                                headline=f"server {self.id} stalled: {stall}")
        self.failure = error
        if self.report_failure is not None:
            self.report_failure(error)
        fail(str(error))

    def vocab_size(self) -> int | None:
        """The server's vocabulary size where it publishes one (/model_info), once."""
        if self._vocab_size is None:
            try:
                self._vocab_size = client.fetch_vocab_size(self.url, stall_timeout=self.stall_timeout) or 0
            except client.CallStalled as stall:
                # optional: the random-draft guard takes an unknown vocabulary as large, and the
                # workload's own watchdog fails a server that is frozen
                self._vocab_size = 0
                url = self.url.rstrip("/")
                if url not in self.vocab_said:
                    self.vocab_said.add(url)
                    warnings.warn(f"server {self.id}: {stall}, so the random-draft check takes its vocabulary "
                                  f"as large (not asked again for this test; said once per server this run)",
                                  stacklevel=2)
        return self._vocab_size or None

    def _cross_check(self, measurement: Measurement, log_offset: int) -> None:
        """The server's own accept length (its decode log lines) beside the client's figure.

        Only the logging intervals wholly inside the workload are read (the first one after it
        began also holds earlier steps), so a workload shorter than that has no server figure;
        with fewer than CROSS_CHECK_MIN_INTERVALS of them the figure is kept but not compared.
        The log lines average over decode batches rather than tokens, so they agree only to
        rounding on steady workloads; a larger gap is reported, not failed, because it points at
        the measurement rather than at the server.
        """
        if self.log_path is None or not self.log_path.exists():
            return
        figures = metrics.server_figures_from_log_file(self.log_path, log_offset,
                                                       whole_intervals_only=True)
        self.last_server_figures = figures
        if (measurement.accept_length is None or figures.accept_length is None
                or figures.intervals < CROSS_CHECK_MIN_INTERVALS):
            return
        # The client's figure counts each request's first token, which prefill produced without a
        # verify step; the log's does not. That, plus the log's per-interval averaging, is slack.
        prefill_share = measurement.num_requests / measurement.spec_verify_ct \
            if measurement.spec_verify_ct else 0.0
        disagreement = metrics.compare_accept_length(
            measurement.accept_length, figures,
            slack=prefill_share + 0.05 * measurement.accept_length)
        if disagreement is not None:
            self.disagreements.append(str(disagreement))
            warnings.warn(f"server {self.id}: {disagreement}", stacklevel=2)

